// TFRecordIO: TFRecord framing (masked CRC-32C) for plain streams: write one record, read records one by one.
package io.sparktrain.hadoop;

import java.io.BufferedInputStream;
import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.Objects;
import java.util.zip.CRC32C;

/**
 * TFRecord framing, exactly as TensorFlow's {@code RecordWriter} and sparktrain's Rust codec lay
 * it out.
 *
 * <p>Each record is {@code u64 length (little-endian) | u32 masked CRC-32C of those 8 bytes |
 * payload | u32 masked CRC-32C of the payload}. A masked CRC is the CRC-32C rotated right by 15
 * bits plus {@code 0xa282ead8}; TensorFlow masks CRCs so that the CRC of data that itself holds
 * CRCs stays well distributed. The framing has no file header, so output is a pure function of
 * the payloads: two correct writers produce identical bytes.
 *
 * <p>CRC-32C comes from {@link java.util.zip.CRC32C}, which the JVM computes with the CPU's CRC32
 * instructions where they exist.
 */
public final class TFRecordIO {
  /** Bytes in a record header: the length and its masked CRC. */
  public static final int HEADER_LENGTH = 12;

  /** Bytes after a record's payload: its masked CRC. */
  public static final int FOOTER_LENGTH = 4;

  /**
   * The largest payload this implementation can read or write: a Java array holds a little under
   * 2^31 bytes, and the payload shares its buffer with the 4 CRC bytes.
   */
  public static final int MAX_RECORD_LENGTH = Integer.MAX_VALUE - 16;

  private static final int MASK_DELTA = 0xa282ead8;

  private TFRecordIO() {}

  /**
   * Masks a CRC-32C the way TensorFlow does.
   *
   * @param crc a CRC-32C value
   * @return {@code rotateRight(crc, 15) + 0xa282ead8}
   */
  public static int mask(int crc) {
    return Integer.rotateRight(crc, 15) + MASK_DELTA;
  }

  /**
   * The masked CRC-32C of a slice of bytes.
   *
   * @param data the bytes
   * @param offset where the slice starts
   * @param length how many bytes it holds
   * @return the masked CRC-32C
   */
  public static int maskedCrc32c(byte[] data, int offset, int length) {
    CRC32C crc = new CRC32C();
    crc.update(data, offset, length);
    return mask((int) crc.getValue());
  }

  /**
   * Writes one framed record.
   *
   * <p>This makes three {@code write} calls (header, payload, footer), so give it a buffered
   * stream when records are small.
   *
   * @param out where to write
   * @param data holds the payload
   * @param offset where the payload starts in {@code data}
   * @param length the payload's length in bytes
   * @throws IOException if {@code out} fails
   */
  public static void writeRecord(OutputStream out, byte[] data, int offset, int length)
      throws IOException {
    Objects.checkFromIndexSize(offset, length, data.length);
    byte[] header = new byte[HEADER_LENGTH];
    putLong(header, 0, length);
    putInt(header, 8, maskedCrc32c(header, 0, 8));
    byte[] footer = new byte[FOOTER_LENGTH];
    putInt(footer, 0, maskedCrc32c(data, offset, length));
    out.write(header);
    out.write(data, offset, length);
    out.write(footer);
  }

  /**
   * Writes one framed record whose payload is all of {@code data}.
   *
   * @param out where to write
   * @param data the payload
   * @throws IOException if {@code out} fails
   */
  public static void writeRecord(OutputStream out, byte[] data) throws IOException {
    writeRecord(out, data, 0, data.length);
  }

  /**
   * True when the 12 bytes at {@code offset} are a record header whose length CRC matches.
   *
   * @param bytes holds the candidate header
   * @param offset where it starts
   * @return whether it is a valid header
   */
  public static boolean isValidHeader(byte[] bytes, int offset) {
    return bytes.length - offset >= HEADER_LENGTH
        && maskedCrc32c(bytes, offset, 8) == getInt(bytes, offset + 8);
  }

  /** What the first bytes of a stream look like; used to pick a decompressor and for hints. */
  enum Sniffed {
    TFRECORD,
    GZIP,
    ZLIB,
    UNKNOWN
  }

  /**
   * Guesses what a stream holds from its first bytes, in the Rust codec's order: a valid TFRecord
   * header wins (a false match has odds of about 2^-32), then the gzip magic number, then a
   * well-formed zlib header.
   */
  static Sniffed sniff(byte[] prefix, int length) {
    if (length >= HEADER_LENGTH && isValidHeader(prefix, 0)) {
      return Sniffed.TFRECORD;
    }
    if (length >= 2 && (prefix[0] & 0xff) == 0x1f && (prefix[1] & 0xff) == 0x8b) {
      return Sniffed.GZIP;
    }
    if (length >= 2) {
      int cmf = prefix[0] & 0xff;
      int flg = prefix[1] & 0xff;
      boolean deflate = (cmf & 0x0f) == 8 && (cmf >> 4) <= 7;
      if (deflate && ((cmf << 8) | flg) % 31 == 0) {
        return Sniffed.ZLIB;
      }
    }
    return Sniffed.UNKNOWN;
  }

  /** Writes {@code v} little-endian into {@code b[at, at + 8)}. */
  public static void putLong(byte[] b, int at, long v) {
    for (int i = 0; i < 8; i++) {
      b[at + i] = (byte) (v >>> (8 * i));
    }
  }

  /** Writes {@code v} little-endian into {@code b[at, at + 4)}. */
  public static void putInt(byte[] b, int at, int v) {
    for (int i = 0; i < 4; i++) {
      b[at + i] = (byte) (v >>> (8 * i));
    }
  }

  /** Reads a little-endian long from {@code b[at, at + 8)}. */
  public static long getLong(byte[] b, int at) {
    long v = 0;
    for (int i = 7; i >= 0; i--) {
      v = (v << 8) | (b[at + i] & 0xff);
    }
    return v;
  }

  /** Reads a little-endian int from {@code b[at, at + 4)}. */
  public static int getInt(byte[] b, int at) {
    return (b[at] & 0xff)
        | (b[at + 1] & 0xff) << 8
        | (b[at + 2] & 0xff) << 16
        | (b[at + 3] & 0xff) << 24;
  }

  /**
   * Reads framed records one at a time from an {@link InputStream}.
   *
   * <p>The reader keeps one buffer and reuses it: after {@link #next()} returns true, the payload
   * is {@code data()[0 .. length())} and stays valid until the next call. Damage raises a {@link
   * TFRecordCorruptException} naming the path, the byte offset of the damaged record and the kind;
   * after that the reader is positioned nowhere useful and should be closed. (Unlike the Rust
   * reader there is no skip mode: a Hadoop task that meets damage should fail loudly.)
   */
  public static final class Reader implements Closeable {
    private static final int INITIAL_BUFFER = 64 * 1024;
    /** Grow the payload buffer at most this far ahead of the bytes actually read, so that a
     * header with a huge (but CRC-valid) length in a short file cannot allocate gigabytes. */
    private static final int MAX_GROWTH_STEP = 64 << 20;

    private final InputStream in;
    private final String path;
    private final byte[] header = new byte[HEADER_LENGTH];
    private byte[] buf = new byte[INITIAL_BUFFER];
    private int length;
    private long offset;
    private long records;

    /**
     * Creates a reader. The stream is buffered here, so a raw stream is fine.
     *
     * @param in the (already decompressed) stream; closed by {@link #close()}
     * @param path names the stream in errors
     */
    public Reader(InputStream in, String path) {
      // Large payload reads bypass BufferedInputStream's buffer, so this costs no extra copy
      // for big records and saves a system call per header for small ones.
      this.in = in instanceof BufferedInputStream ? in : new BufferedInputStream(in, 64 * 1024);
      this.path = path;
    }

    /**
     * Moves to the next record.
     *
     * @return true when a record was read, false at the clean end of the stream
     * @throws TFRecordCorruptException when the framing is damaged
     * @throws IOException when the stream fails, or a record is larger than {@link
     *     #MAX_RECORD_LENGTH}
     */
    public boolean next() throws IOException {
      try {
        return readNext();
      } catch (DamagedStreamException e) {
        throw corrupt(
            CorruptionKind.DAMAGED_COMPRESSION,
            "; decompression failed (" + e.getMessage() + ") and nothing after that can be read");
      }
    }

    private boolean readNext() throws IOException {
      int got = readFully(in, header, 0, HEADER_LENGTH);
      if (got == 0) {
        return false;
      }
      if (got < HEADER_LENGTH) {
        throw corrupt(CorruptionKind.TRUNCATED_HEADER, "");
      }
      if (!isValidHeader(header, 0)) {
        if (offset == 0) {
          throw corrupt(CorruptionKind.NOT_TFRECORD, compressedHint(header));
        }
        throw corrupt(CorruptionKind.LENGTH_CRC_MISMATCH, "");
      }
      long declared = getLong(header, 0);
      if (declared < 0 || declared > MAX_RECORD_LENGTH) {
        throw new IOException(
            path
                + ": record at byte offset "
                + offset
                + " declares "
                + Long.toUnsignedString(declared)
                + " bytes, more than a Java array can hold");
      }
      int total = (int) declared + FOOTER_LENGTH;
      if (readPayload(total) < total) {
        throw corrupt(CorruptionKind.TRUNCATED_PAYLOAD, "");
      }
      int payload = (int) declared;
      if (maskedCrc32c(buf, 0, payload) != getInt(buf, payload)) {
        throw corrupt(CorruptionKind.PAYLOAD_CRC_MISMATCH, "");
      }
      length = payload;
      offset += HEADER_LENGTH + (long) total;
      records++;
      return true;
    }

    /**
     * Reads the next record into a new array.
     *
     * @return the payload, or null at the clean end of the stream
     * @throws IOException as {@link #next()} does
     */
    public byte[] readRecord() throws IOException {
      return next() ? java.util.Arrays.copyOf(buf, length) : null;
    }

    /**
     * The buffer that holds the current record's payload from index 0; valid until the next call
     * to {@link #next()}.
     *
     * @return the reader's buffer (longer than the payload)
     */
    public byte[] data() {
      return buf;
    }

    /**
     * The current record's payload length.
     *
     * @return bytes of payload at the start of {@link #data()}
     */
    public int length() {
      return length;
    }

    /**
     * Offset of the next record in the (decompressed) stream: the bytes consumed so far.
     *
     * @return the byte offset
     */
    public long offset() {
      return offset;
    }

    /**
     * Records read so far.
     *
     * @return the count
     */
    public long recordsRead() {
      return records;
    }

    /**
     * The name used in errors.
     *
     * @return the path given to the constructor
     */
    public String path() {
      return path;
    }

    @Override
    public void close() throws IOException {
      in.close();
    }

    /** Reads up to {@code total} bytes into {@code buf}, growing it only as data arrives. */
    private int readPayload(int total) throws IOException {
      int have = 0;
      while (have < total) {
        if (have == buf.length) {
          long grown = Math.max((long) buf.length * 2, INITIAL_BUFFER);
          grown = Math.min(grown, (long) have + MAX_GROWTH_STEP);
          buf = java.util.Arrays.copyOf(buf, (int) Math.min(grown, total));
        }
        int n = in.read(buf, have, Math.min(buf.length, total) - have);
        if (n < 0) {
          break;
        }
        have += n;
      }
      return have;
    }

    private TFRecordCorruptException corrupt(CorruptionKind kind, String hint) {
      return new TFRecordCorruptException(path, offset, kind, hint);
    }

    private static String compressedHint(byte[] header) {
      switch (sniff(header, header.length)) {
        case GZIP:
          return "; the file looks gzip-compressed: name it *.gz so that it is decompressed";
        case ZLIB:
          return "; the file looks zlib-compressed: name it *.zlib or *.deflate so that it is"
              + " decompressed";
        default:
          return "";
      }
    }

    /** Reads until {@code n} bytes or the end of the stream; returns how many were read. */
    private static int readFully(InputStream in, byte[] b, int off, int n) throws IOException {
      int have = 0;
      while (have < n) {
        int k = in.read(b, off + have, n - have);
        if (k < 0) {
          break;
        }
        have += k;
      }
      return have;
    }
  }
}
