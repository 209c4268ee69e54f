// RawValues: the values of one feature list (int64, float or bytes), parsed in place into reused arrays.
package io.sparktrain.spark;

import java.util.Arrays;

/**
 * The values of one {@code Int64List}, {@code FloatList} or {@code BytesList} body, parsed into
 * arrays that are reused from feature to feature (bytes values stay in the record's buffer, as
 * offsets). Packed and unpacked encodings are both read, as protocol buffer parsers must.
 */
final class RawValues {
  Kind kind;
  int count;
  long[] ints = new long[16];
  float[] floats = new float[16];
  byte[] buf;
  int[] starts = new int[16];
  int[] lengths = new int[16];

  /**
   * Parses a {@code Feature} body {@code b[offset, offset + length)}: its list, of whichever
   * kind it holds. False when it holds none. Of several list fields the last wins, as {@code
   * oneof} semantics say.
   */
  boolean loadFeature(byte[] b, int offset, int length) throws Wire.WireException {
    Wire.Cursor c = new Wire.Cursor(b, offset, length);
    Kind found = null;
    int start = 0;
    int n = 0;
    while (c.hasMore()) {
      int key = c.key();
      Kind listKind = Kind.ofField(key >>> 3);
      if (listKind == null) {
        c.skip(key & 7);
        continue;
      }
      if ((key & 7) != Wire.LEN) {
        throw Wire.unexpected(key >>> 3, key & 7);
      }
      n = c.length();
      start = c.pos;
      found = listKind;
      c.pos += n;
    }
    if (found == null) {
      return false;
    }
    load(found, b, start, n);
    return true;
  }

  /** Parses the list body {@code b[offset, offset + length)} of kind {@code kind}. */
  void load(Kind kind, byte[] b, int offset, int length) throws Wire.WireException {
    this.kind = kind;
    this.buf = b;
    count = 0;
    Wire.Cursor c = new Wire.Cursor(b, offset, length);
    while (c.hasMore()) {
      int key = c.key();
      int field = key >>> 3;
      int wire = key & 7;
      if (field != 1) {
        c.skip(wire);
        continue;
      }
      switch (kind) {
        case INT64:
          if (wire == Wire.LEN) {
            int n = c.length();
            Wire.Cursor packed = new Wire.Cursor(b, c.pos, n);
            c.pos += n;
            while (packed.hasMore()) {
              addInt(packed.varint());
            }
          } else if (wire == Wire.VARINT) {
            addInt(c.varint());
          } else {
            throw Wire.unexpected(1, wire);
          }
          break;
        case FLOAT:
          if (wire == Wire.LEN) {
            int n = c.length();
            if (n % 4 != 0) {
              throw new Wire.WireException("message is truncated");
            }
            for (int end = c.pos + n; c.pos < end; ) {
              addFloat(Float.intBitsToFloat(c.fixed32()));
            }
          } else if (wire == Wire.FIXED32) {
            addFloat(Float.intBitsToFloat(c.fixed32()));
          } else {
            throw Wire.unexpected(1, wire);
          }
          break;
        default:
          if (wire != Wire.LEN) {
            throw Wire.unexpected(1, wire);
          }
          int n = c.length();
          addBytes(c.pos, n);
          c.pos += n;
          break;
      }
    }
  }

  private void addInt(long v) {
    if (count == ints.length) {
      ints = Arrays.copyOf(ints, 2 * count);
    }
    ints[count++] = v;
  }

  private void addFloat(float v) {
    if (count == floats.length) {
      floats = Arrays.copyOf(floats, 2 * count);
    }
    floats[count++] = v;
  }

  private void addBytes(int start, int length) {
    if (count == starts.length) {
      starts = Arrays.copyOf(starts, 2 * count);
      lengths = Arrays.copyOf(lengths, 2 * count);
    }
    starts[count] = start;
    lengths[count++] = length;
  }
}
