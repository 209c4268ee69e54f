// ProtoBuffer: a growable, reused byte buffer that wire-format values are appended to.
package io.sparktrain.spark;

import java.util.Arrays;

/**
 * A byte array reused for every record a writer encodes, with the few appends the wire format
 * needs. The encoders size each record exactly first, so {@link #reserve} grows the array once
 * per record at most and the appends need no bounds checks of their own.
 */
final class ProtoBuffer {
  byte[] buf = new byte[16 * 1024];
  int pos;

  /** Makes room for {@code n} more bytes. */
  void reserve(int n) {
    long need = (long) pos + n;
    if (need > buf.length) {
      if (need > Integer.MAX_VALUE - 16) {
        throw new IllegalArgumentException("a record over 2 GiB cannot be written");
      }
      buf = Arrays.copyOf(buf, (int) Math.max(need, Math.min(2L * buf.length, Integer.MAX_VALUE - 16)));
    }
  }

  void put(byte b) {
    buf[pos++] = b;
  }

  void put(byte[] b) {
    System.arraycopy(b, 0, buf, pos, b.length);
    pos += b.length;
  }

  void put(byte[] b, int offset, int length) {
    System.arraycopy(b, offset, buf, pos, length);
    pos += length;
  }

  void varint(long v) {
    while ((v & ~0x7fL) != 0) {
      buf[pos++] = (byte) ((v & 0x7f) | 0x80);
      v >>>= 7;
    }
    buf[pos++] = (byte) v;
  }

  /** A length-delimited field's key (one byte) and length. */
  void lenField(byte key, int length) {
    buf[pos++] = key;
    varint(length);
  }

  void fixed32(int v) {
    buf[pos] = (byte) v;
    buf[pos + 1] = (byte) (v >>> 8);
    buf[pos + 2] = (byte) (v >>> 16);
    buf[pos + 3] = (byte) (v >>> 24);
    pos += 4;
  }
}
