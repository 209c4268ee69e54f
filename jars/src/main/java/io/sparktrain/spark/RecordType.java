// RecordType: what each record of a dataset holds (Example, SequenceExample or raw bytes).
package io.sparktrain.spark;

import java.util.Locale;

/** What each record of a dataset holds; the {@code recordType} option, as in the Python source. */
public enum RecordType {
  /** A serialized {@code tf.train.Example}: each column is a feature. */
  EXAMPLE("Example"),
  /**
   * A serialized {@code tf.train.SequenceExample}: {@code array<array<T>>} columns are feature
   * lists, the others context features.
   */
  SEQUENCE_EXAMPLE("SequenceExample"),
  /** Any bytes: one binary or string column written as raw records, read as {@code byteArray}. */
  BYTE_ARRAY("ByteArray");

  /** The column a ByteArray dataset reads into (the name LinkedIn's spark-tfrecord uses). */
  public static final String BYTE_ARRAY_COLUMN = "byteArray";

  private final String optionName;

  RecordType(String optionName) {
    this.optionName = optionName;
  }

  /** The spelling the option takes, e.g. {@code SequenceExample}. */
  public String optionName() {
    return optionName;
  }

  /**
   * Parses the option, case-insensitively; null means Example.
   *
   * @throws IllegalArgumentException for other names
   */
  public static RecordType parse(String value) {
    if (value == null) {
      return EXAMPLE;
    }
    for (RecordType t : values()) {
      if (t.optionName.toLowerCase(Locale.ROOT).equals(value.toLowerCase(Locale.ROOT))) {
        return t;
      }
    }
    throw new IllegalArgumentException(
        "unknown record type '" + value + "'; use one of Example, SequenceExample, ByteArray");
  }
}
