// CorruptionKind: the kinds of damage a TFRecord reader reports, named as the Rust codec names them.
package io.sparktrain.hadoop;

/**
 * What is wrong with a TFRecord stream at a given offset.
 *
 * <p>The constants and their {@link #id() ids} match the Rust codec's {@code CorruptionKind} and
 * the {@code kind} attribute of Python's {@code sparktrain.errors.TFRecordCorruptError}, so logs
 * from the JVM and from Python can be compared directly.
 */
public enum CorruptionKind {
  /** The stream ends inside a 12-byte record header. */
  TRUNCATED_HEADER("truncated_header", "truncated record header"),
  /** The masked CRC-32C stored after the length does not match the length bytes. */
  LENGTH_CRC_MISMATCH("length_crc_mismatch", "record length CRC mismatch"),
  /** The stream ends inside a record's payload or its trailing CRC. */
  TRUNCATED_PAYLOAD("truncated_payload", "truncated record payload"),
  /** The masked CRC-32C stored after the payload does not match the payload. */
  PAYLOAD_CRC_MISMATCH("payload_crc_mismatch", "record payload CRC mismatch"),
  /**
   * The first header of the stream is not a TFRecord header: the file is something else, or is
   * compressed and was read without decompressing it.
   */
  NOT_TFRECORD("not_tfrecord", "not a TFRecord file"),
  /** A header claims a record longer than the reader's limit (the Spark file format's reader). */
  RECORD_TOO_LONG("record_too_long", "record longer than the limit"),
  /**
   * The compressed stream around the records cannot be decompressed from here on (a corrupt
   * block, a bad header or checksum, or an end before the stream's own end).
   */
  DAMAGED_COMPRESSION("damaged_compression", "damaged compressed stream");

  private final String id;
  private final String description;

  CorruptionKind(String id, String description) {
    this.id = id;
    this.description = description;
  }

  /**
   * A short, stable, snake_case name, the same as the Rust codec's {@code as_str()}.
   *
   * @return the name, e.g. {@code "payload_crc_mismatch"}
   */
  public String id() {
    return id;
  }

  /**
   * Words for error messages, the same as the Rust codec's {@code Display}.
   *
   * @return the description, e.g. {@code "record payload CRC mismatch"}
   */
  public String description() {
    return description;
  }
}
