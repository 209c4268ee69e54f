// Wire: the protocol buffer wire format pieces that Example encoding and decoding need, by hand.
package io.sparktrain.spark;

/**
 * Protocol buffer wire format helpers: varint sizes, and a cursor that parses a message in
 * place. Converting between rows and {@code tf.train.Example} goes straight between values and
 * bytes (as the Rust codec's {@code wire} module does): building protobuf objects per row would
 * allocate a map, strings and lists per feature, and needs no protobuf library here.
 */
final class Wire {
  static final int VARINT = 0;
  static final int FIXED64 = 1;
  static final int LEN = 2;
  static final int FIXED32 = 5;

  private Wire() {}

  /** Bytes that {@code v}, taken as unsigned, takes as a varint. */
  static int varintSize(long v) {
    // One byte per 7 significant bits, at least one byte.
    return (64 - Long.numberOfLeadingZeros(v | 1) + 6) / 7;
  }

  /** Bytes of a length-delimited field with a one-byte key and a body of {@code len} bytes. */
  static int lenFieldSize(int len) {
    return 1 + varintSize(len) + len;
  }

  /** A reason a message could not be parsed; the texts are the Rust codec's. */
  static final class WireException extends Exception {
    private static final long serialVersionUID = 1L;

    WireException(String message) {
      // No stack trace: this is a data error reported with its file and offset by the caller.
      super(message, null, false, false);
    }
  }

  /** A cursor over {@code buf[pos, limit)}. */
  static final class Cursor {
    final byte[] buf;
    int pos;
    final int limit;

    Cursor(byte[] buf, int offset, int length) {
      this.buf = buf;
      this.pos = offset;
      this.limit = offset + length;
    }

    boolean hasMore() {
      return pos < limit;
    }

    long varint() throws WireException {
      // One-byte varints (keys, short lengths, small ids) are the common case.
      if (pos < limit && buf[pos] >= 0) {
        return buf[pos++];
      }
      long v = 0;
      for (int shift = 0; shift < 70; shift += 7) {
        if (pos >= limit) {
          throw new WireException("message is truncated");
        }
        byte b = buf[pos++];
        v |= (long) (b & 0x7f) << shift;
        if (b >= 0) {
          return v;
        }
      }
      throw new WireException("varint is longer than 10 bytes");
    }

    /** Reads a field key; returns {@code field << 3 | wire}. */
    int key() throws WireException {
      long k = varint();
      if (k >>> 32 != 0) {
        throw new WireException("field number out of range");
      }
      return (int) k;
    }

    /** Reads a length prefix and checks the body is there; the body starts at {@link #pos}. */
    int length() throws WireException {
      long n = varint();
      if (n < 0 || n > limit - pos) {
        throw new WireException("message is truncated");
      }
      return (int) n;
    }

    void skipBytes(int n) throws WireException {
      if (n > limit - pos) {
        throw new WireException("message is truncated");
      }
      pos += n;
    }

    /** Skips the value of a field of wire type {@code wire}. */
    void skip(int wire) throws WireException {
      switch (wire) {
        case VARINT:
          varint();
          break;
        case FIXED64:
          skipBytes(8);
          break;
        case LEN:
          skipBytes(length());
          break;
        case FIXED32:
          skipBytes(4);
          break;
        default:
          throw new WireException("unsupported wire type " + wire);
      }
    }

    /** Bytes left before {@link #limit}. */
    int remaining() {
      return limit - pos;
    }

    /**
     * Reads keys up to the next field numbered 1 to {@code last} and returns its number, or 0 at
     * the end of the message; fields with other numbers are skipped. The fields asked for must be
     * length-delimited (the messages, strings and bytes of {@code tf.train.Example}): the caller
     * takes the value with {@link #body} before asking for the next field.
     */
    int nextField(int last) throws WireException {
      while (hasMore()) {
        int key = key();
        int field = key >>> 3;
        int wire = key & 7;
        if (field < 1 || field > last) {
          skip(wire);
          continue;
        }
        if (wire != LEN) {
          throw unexpected(field, wire);
        }
        return field;
      }
      return 0;
    }

    /** The value of the field {@link #nextField} found, as a cursor of its own; moves past it. */
    Cursor body() throws WireException {
      int n = length();
      Cursor body = new Cursor(buf, pos, n);
      pos += n;
      return body;
    }

    int fixed32() throws WireException {
      if (limit - pos < 4) {
        throw new WireException("message is truncated");
      }
      int v =
          (buf[pos] & 0xff)
              | (buf[pos + 1] & 0xff) << 8
              | (buf[pos + 2] & 0xff) << 16
              | (buf[pos + 3] & 0xff) << 24;
      pos += 4;
      return v;
    }
  }

  static WireException unexpected(int field, int wire) {
    return new WireException("field " + field + " has unexpected wire type " + wire);
  }
}
