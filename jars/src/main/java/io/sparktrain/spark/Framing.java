// Framing: TFRecord frames built in place around a payload, and header checks, with one reused CRC-32C.
package io.sparktrain.spark;

import io.sparktrain.hadoop.TFRecordIO;
import java.util.zip.CRC32C;

/**
 * The TFRecord framing of {@link TFRecordIO} ({@code u64 length | masked crc32c(length) | payload
 * | masked crc32c(payload)}, little-endian), done in place in a caller's buffer with one {@link
 * CRC32C} per reader or writer instead of one per call.
 */
final class Framing {
  static final int HEADER = TFRecordIO.HEADER_LENGTH;
  static final int FOOTER = TFRecordIO.FOOTER_LENGTH;

  private final CRC32C crc = new CRC32C();

  int maskedCrc(byte[] b, int offset, int length) {
    crc.reset();
    crc.update(b, offset, length);
    return TFRecordIO.mask((int) crc.getValue());
  }

  /**
   * Writes the header into {@code buf[0, 12)} and the footer after the payload that sits at
   * {@code buf[12, 12 + length)}; room for the footer must be there. Returns the frame's size.
   */
  int frame(byte[] buf, int length) {
    TFRecordIO.putLong(buf, 0, length);
    TFRecordIO.putInt(buf, 8, maskedCrc(buf, 0, 8));
    TFRecordIO.putInt(buf, HEADER + length, maskedCrc(buf, HEADER, length));
    return HEADER + length + FOOTER;
  }

  /** Whether the 12 bytes at {@code at} are a header whose length CRC matches. */
  boolean headerValid(byte[] b, int at) {
    return maskedCrc(b, at, 8) == TFRecordIO.getInt(b, at + 8);
  }
}
