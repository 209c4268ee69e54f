// Kind: the three value lists a tf.train.Feature can hold, in widening order.
package io.sparktrain.spark;

/**
 * The list kinds of a {@code tf.train.Feature}, in widening order: an int64 value fits a float
 * column and any value fits a bytes column (as text), as the Rust decoder widens them.
 */
enum Kind {
  INT64(3, "int64_list"),
  FLOAT(2, "float_list"),
  BYTES(1, "bytes_list");

  /** The list's field number inside {@code Feature}. */
  final int field;

  /** The field key byte: field number, wire type 2 (length-delimited). */
  final byte key;

  /** TensorFlow's name of the list, used in errors. */
  final String protoName;

  Kind(int field, String protoName) {
    this.field = field;
    this.key = (byte) (field << 3 | Wire.LEN);
    this.protoName = protoName;
  }

  /** The kind a {@code Feature} field number stands for, or null for other fields. */
  static Kind ofField(int field) {
    switch (field) {
      case 1:
        return BYTES;
      case 2:
        return FLOAT;
      case 3:
        return INT64;
      default:
        return null;
    }
  }

  /** The wider of two kinds. */
  static Kind widest(Kind a, Kind b) {
    return a.ordinal() >= b.ordinal() ? a : b;
  }
}
