// BadRecordException: a record whose content does not fit the schema, named by file, byte offset and feature.
package io.sparktrain.spark;

/**
 * A record that frames correctly but whose content cannot be read into the schema: not a valid
 * message, or a feature whose values do not fit its column. The message names the file, the
 * byte offset of the record and the feature, as the Rust codec's errors do (with the offset in
 * place of the record number, which a split that starts mid-file does not know).
 */
public final class BadRecordException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final String path;
  private final long offset;
  private final String feature;

  BadRecordException(String path, long offset, String feature, String reason) {
    super(
        path
            + ": record at byte offset "
            + offset
            + (feature == null ? " " : ", feature '" + feature + "': ")
            + reason);
    this.path = path;
    this.offset = offset;
    this.feature = feature;
  }

  /** The file. */
  public String getPath() {
    return path;
  }

  /** The byte offset of the record's header in the (decompressed) file. */
  public long getOffset() {
    return offset;
  }

  /** The feature at fault, or null when the whole record is malformed. */
  public String getFeature() {
    return feature;
  }
}
