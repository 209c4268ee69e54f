// RecordScanner: reads framed records from a stream at absolute offsets, within a split, skipping damage on request.
package io.sparktrain.spark;

import io.sparktrain.hadoop.CorruptionKind;
import io.sparktrain.hadoop.DamagedStreamException;
import io.sparktrain.hadoop.TFRecordCorruptException;
import io.sparktrain.hadoop.TFRecordIO;
import java.io.Closeable;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.List;

/**
 * Reads TFRecord frames from a stream positioned at byte {@code offset} of a file (the
 * decompressed stream for compressed files). After {@link #next} returns true the payload is
 * {@code data()[payloadStart(), payloadStart() + payloadLength())}, valid until the next call.
 *
 * <p>A split of an uncompressed file owns the records whose first byte lies in its {@code
 * [start, end)}: its reader first {@linkplain #syncForward() moves} to the first position at or
 * after {@code start} that holds a whole valid record (header CRC, sane length and payload CRC),
 * then reads records while they start before {@code end}, reading the last one past {@code
 * end}. Random bytes pass for a whole record with odds of about 2^-64, but a record may hold
 * TFRecord frames (a TFRecord file stored as a record's bytes), which pass every check. So the
 * split before checks the record it reads past {@code end}: if any position in it from {@code
 * end} on holds a whole valid record, the next split would start there, and the read fails
 * naming the file. Otherwise the next split starts at exactly the record after it, and every
 * record is read once.
 *
 * <p>Damage fails with the file and byte offset ({@link TFRecordCorruptException}, the Rust
 * codec's wording). With {@code skipCorrupt} it is stepped over as the Rust reader does: a bad
 * payload CRC skips that record, other damage moves on to the next whole valid record; the
 * regions are kept for the task's log.
 */
final class RecordScanner implements Closeable {
  private static final int READ_CHUNK = 64 * 1024;

  /** A damaged region stepped over. */
  static final class Skipped {
    final long offset;
    final long bytes;
    final CorruptionKind kind;

    Skipped(long offset, long bytes, CorruptionKind kind) {
      this.offset = offset;
      this.bytes = bytes;
      this.kind = kind;
    }

    @Override
    public String toString() {
      return kind.id() + " at offset " + offset + " (" + bytes + " bytes)";
    }
  }

  private final InputStream in;
  private final String path;
  private final boolean skipCorrupt;
  private final long maxRecordBytes;
  private final Framing framing = new Framing();
  private final List<Skipped> skipped = new ArrayList<>();

  private byte[] buf = new byte[READ_CHUNK];
  private int start;
  private int end;
  private boolean eof;
  /**
   * Set when the decompressor failed (the stream then ends where its good bytes end): the hint
   * of the {@link CorruptionKind#DAMAGED_COMPRESSION} reported there.
   */
  private String broken;
  /** File offset of {@code buf[start]}. */
  private long offset;
  private long records;

  private int payloadStart;
  private int payloadLength;
  private long recordOffset;

  RecordScanner(InputStream in, String path, long offset, boolean skipCorrupt, long maxRecordBytes) {
    this.in = in;
    this.path = path;
    this.offset = offset;
    this.skipCorrupt = skipCorrupt;
    this.maxRecordBytes = maxRecordBytes;
  }

  byte[] data() {
    return buf;
  }

  int payloadStart() {
    return payloadStart;
  }

  int payloadLength() {
    return payloadLength;
  }

  /** File offset of the current record's header. */
  long recordOffset() {
    return recordOffset;
  }

  /** File offset of the next byte to read. */
  long offset() {
    return offset;
  }

  long recordsRead() {
    return records;
  }

  List<Skipped> skipped() {
    return skipped;
  }

  String path() {
    return path;
  }

  /** Moves to the first whole valid record at or after the current offset (a split's start). */
  void syncForward() throws IOException {
    scan();
  }

  /**
   * Moves to the next record that starts before {@code limit}.
   *
   * @return false at the end of the stream or when the next record starts at or after {@code limit}
   */
  boolean next(long limit) throws IOException {
    while (true) {
      if (offset >= limit) {
        if (!skipCorrupt) {
          checkNextHeader();
        }
        return false;
      }
      if (!fill(Framing.HEADER)) {
        if (available() == 0 && broken == null) {
          return false;
        }
        cutShort(CorruptionKind.TRUNCATED_HEADER);
        continue;
      }
      if (!framing.headerValid(buf, start)) {
        if (offset == 0 && records == 0) {
          damage(CorruptionKind.NOT_TFRECORD, compressedHint());
        } else {
          damage(CorruptionKind.LENGTH_CRC_MISMATCH, "");
        }
        continue;
      }
      long length = TFRecordIO.getLong(buf, start);
      if (length < 0 || length > maxRecordBytes) {
        damage(
            CorruptionKind.RECORD_TOO_LONG,
            "; its header claims "
                + Long.toUnsignedString(length)
                + " bytes, above the limit of "
                + maxRecordBytes);
        continue;
      }
      int total = (int) length + Framing.HEADER + Framing.FOOTER;
      if (!fill(total)) {
        cutShort(CorruptionKind.TRUNCATED_PAYLOAD);
        continue;
      }
      int payload = start + Framing.HEADER;
      if (framing.maskedCrc(buf, payload, (int) length) != TFRecordIO.getInt(buf, payload + (int) length)) {
        damage(CorruptionKind.PAYLOAD_CRC_MISMATCH, "");
        continue;
      }
      if (limit - offset < total) {
        checkNextSplitStart(limit, total);
        payload = start + Framing.HEADER; // the check may have moved the buffer's bytes
      }
      payloadStart = payload;
      payloadLength = (int) length;
      recordOffset = offset;
      consume(total);
      records++;
      return true;
    }
  }

  /**
   * The record at {@code offset} ({@code total} bytes with its framing, in the buffer from {@code
   * start}) runs past {@code limit}, where the next split starts. That split's reader starts at
   * the first position at or after {@code limit} that holds a whole valid record, as {@link
   * #scan} finds it; fails if one lies inside this record, where no record starts.
   */
  private void checkNextSplitStart(long limit, int total) throws IOException {
    for (int i = (int) (limit - offset); i < total; i++) {
      if (!fill(i + Framing.HEADER)) {
        return; // the stream ends: no record starts here or later
      }
      long length = TFRecordIO.getLong(buf, start + i);
      if (length < 0 || length > maxRecordBytes || !framing.headerValid(buf, start + i)) {
        continue;
      }
      if (!fill(i + Framing.HEADER + (int) length + Framing.FOOTER)) {
        continue;
      }
      int payload = start + i + Framing.HEADER;
      if (framing.maskedCrc(buf, payload, (int) length) == TFRecordIO.getInt(buf, payload + (int) length)) {
        throw new IOException(
            path
                + ": cannot be read in splits: the record at byte offset "
                + offset
                + " holds a whole TFRecord record at byte offset "
                + (offset + i)
                + ", where the split from byte "
                + limit
                + " would start; read the file in one split (spark.sql.files.maxPartitionBytes above"
                + " its size)");
      }
    }
  }

  /**
   * At the end of a split, checks that what follows the split's last record is a record header
   * (or the end of the file): the next split skips whatever precedes its first valid record as
   * the tail of a record it does not own, so damage right there is this split's to report.
   */
  private void checkNextHeader() throws IOException {
    if (!fill(Framing.HEADER)) {
      if (available() > 0) {
        throw corrupt(CorruptionKind.TRUNCATED_HEADER, "");
      }
      return;
    }
    if (!framing.headerValid(buf, start)) {
      throw corrupt(CorruptionKind.LENGTH_CRC_MISMATCH, "");
    }
  }

  @Override
  public void close() throws IOException {
    in.close();
  }

  private int available() {
    return end - start;
  }

  /**
   * Makes {@code n} bytes available from {@code start} unless the stream ends first; returns
   * whether they are. Moves the live bytes to the front, and grows the buffer only as data
   * arrives, so that a header claiming a huge length cannot allocate it up front.
   */
  private boolean fill(int n) throws IOException {
    if (available() >= n) {
      return true;
    }
    if (start > 0 && (long) start + n > buf.length) {
      System.arraycopy(buf, start, buf, 0, available());
      end -= start;
      start = 0;
    }
    while (available() < n && !eof) {
      if (end == buf.length) {
        long grown = Math.min(2L * buf.length, (long) start + n);
        buf = java.util.Arrays.copyOf(buf, (int) Math.max(grown, end + 1));
      }
      int want = (int) Math.min(buf.length, (long) end + READ_CHUNK) - end;
      int got;
      try {
        got = in.read(buf, end, want);
      } catch (DamagedStreamException e) {
        // The bytes decompressed so far are good as far as the framing can tell: their records
        // are read, and the damage is met where they end.
        broken =
            "; decompression failed at byte offset "
                + (offset + available())
                + " ("
                + e.getMessage()
                + ") and nothing after that can be read: rewrite the file, or read it with"
                + " skipCorrupt to keep the records before it";
        eof = true;
        break;
      }
      if (got < 0) {
        eof = true;
      } else {
        end += got;
      }
    }
    return available() >= n;
  }

  private void consume(int n) {
    start += n;
    offset += n;
  }

  private TFRecordCorruptException corrupt(CorruptionKind kind, String hint) {
    return new TFRecordCorruptException(path, offset, kind, hint);
  }

  /** The stream ends inside a record: cut short where it was, or where decompression failed. */
  private void cutShort(CorruptionKind truncated) throws IOException {
    if (broken != null) {
      damage(CorruptionKind.DAMAGED_COMPRESSION, broken);
    } else {
      damage(truncated, "");
    }
  }

  private void damage(CorruptionKind kind, String hint) throws IOException {
    if (!skipCorrupt) {
      throw corrupt(kind, hint);
    }
    long from = offset;
    switch (kind) {
      case PAYLOAD_CRC_MISMATCH:
        // The header's CRC held, so its length is trusted: skip exactly this record.
        consume((int) TFRecordIO.getLong(buf, start) + Framing.HEADER + Framing.FOOTER);
        break;
      case TRUNCATED_HEADER:
      case TRUNCATED_PAYLOAD:
        consume(available());
        break;
      case DAMAGED_COMPRESSION:
        // The rest of the stream: what was decompressed (a record cut short, or nothing where
        // the damage lies between records), and what cannot be.
        consume(available());
        broken = null;
        break;
      default:
        consume(1);
        scan();
        break;
    }
    skipped.add(new Skipped(from, offset - from, kind));
  }

  /** Moves to the next position that holds a whole valid record, or to the end of the stream. */
  private void scan() throws IOException {
    while (fill(Framing.HEADER)) {
      int found = -1;
      for (int i = start; i + Framing.HEADER <= end; i++) {
        long length = TFRecordIO.getLong(buf, i);
        // The length test first: it is cheaper than the CRC and turns down most positions.
        if (length >= 0 && length <= maxRecordBytes && framing.headerValid(buf, i)) {
          found = i;
          break;
        }
      }
      if (found < 0) {
        consume(available() - (Framing.HEADER - 1));
        continue;
      }
      consume(found - start);
      if (wholeRecordHere()) {
        return;
      }
      consume(1);
    }
    consume(available());
  }

  /** Whether a whole record with a valid payload CRC starts at {@code start} (header checked). */
  private boolean wholeRecordHere() throws IOException {
    int length = (int) TFRecordIO.getLong(buf, start);
    if (!fill(length + Framing.HEADER + Framing.FOOTER)) {
      return false;
    }
    int payload = start + Framing.HEADER;
    return framing.maskedCrc(buf, payload, length) == TFRecordIO.getInt(buf, payload + length);
  }

  private String compressedHint() {
    Compression looks = Compression.sniff(buf, start, available());
    if (looks == Compression.GZIP || looks == Compression.ZLIB) {
      String name = looks.name().toLowerCase(java.util.Locale.ROOT);
      return "; the file looks " + name + "-compressed: read it with option compression=" + name;
    }
    return "";
  }
}
