// UnwritableValueException: a row's value that no tf.train.Feature can hold, named by column and row.
package io.sparktrain.spark;

/**
 * A value the writer cannot encode (a null inside a list, a number out of the feature's
 * range): the message names the column and the row within the task's partition. Its class name
 * lets sparktrain's Python side raise its own {@code SchemaError} for a failed write.
 */
public final class UnwritableValueException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  private final String column;

  UnwritableValueException(String column, long rowIndex, String reason) {
    super("column '" + column + "', row " + rowIndex + ": " + reason);
    this.column = column;
  }

  /** The column whose value cannot be written. */
  public String getColumn() {
    return column;
  }
}
