// TFRecordOptions: the data source options (recordType, compression, skipCorrupt), parsed once.
package io.sparktrain.spark;

import java.io.Serializable;
import java.util.Locale;
import java.util.Map;

/**
 * The options of the {@code tfrecord} format, named as in the Python data source and matched
 * case-insensitively: {@code recordType} (Example, SequenceExample, ByteArray), {@code
 * compression} (none, gzip, zlib; when reading, absent means each file's extension, else its
 * first bytes) and {@code skipCorrupt} (read: step over damaged framing instead of failing).
 */
final class TFRecordOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The longest record read, as the Rust reader's default: a damaged or hostile header that
   * claims gigabytes must not make a task allocate them. */
  static final long DEFAULT_MAX_RECORD_BYTES = 256L << 20;

  final RecordType recordType;

  /** Null when the option is absent. */
  final Compression compression;

  final boolean skipCorrupt;

  final long maxRecordBytes;

  TFRecordOptions(RecordType recordType, Compression compression, boolean skipCorrupt) {
    this.recordType = recordType;
    this.compression = compression;
    this.skipCorrupt = skipCorrupt;
    this.maxRecordBytes = DEFAULT_MAX_RECORD_BYTES;
  }

  static TFRecordOptions parse(Map<String, String> options) {
    String recordType = null;
    String compression = null;
    String skipCorrupt = null;
    for (Map.Entry<String, String> e : options.entrySet()) {
      switch (e.getKey().toLowerCase(Locale.ROOT)) {
        case "recordtype":
          recordType = e.getValue();
          break;
        case "compression":
          compression = e.getValue();
          break;
        case "skipcorrupt":
          skipCorrupt = e.getValue();
          break;
        default:
          break;
      }
    }
    return new TFRecordOptions(
        RecordType.parse(recordType),
        Compression.parse(compression),
        skipCorrupt != null && skipCorrupt.trim().equalsIgnoreCase("true"));
  }
}
