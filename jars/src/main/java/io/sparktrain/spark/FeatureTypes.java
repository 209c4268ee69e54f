// FeatureTypes: the Spark type table: which column types become which feature kind, and refusals.
package io.sparktrain.spark;

import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

/**
 * The type table shared with the Python data source ({@code sparktrain.spark_types}) and the
 * Rust codec ({@code arrow_to_example.rs}, {@code logical_types.rs}):
 *
 * <ul>
 *   <li>boolean (0/1), byte, short, int, long: {@code int64_list};
 *   <li>float, double (rounded to float32, as TensorFlow stores it): {@code float_list};
 *   <li>string (UTF-8), binary, decimal(p, s) (its text with exactly s fraction digits): {@code
 *       bytes_list};
 *   <li>date: {@code int64_list} of days since 1970-01-01; timestamp and timestamp_ntz: {@code
 *       int64_list} of microseconds since the epoch (Spark's own values);
 *   <li>array&lt;T&gt;: a feature with one value per element; array&lt;array&lt;T&gt;&gt;: a
 *       SequenceExample feature list, refused for Example;
 *   <li>map, struct, interval, variant and the rest: refused, naming the column.
 * </ul>
 */
final class FeatureTypes {
  private FeatureTypes() {}

  /** The kind a scalar type is stored as, or null when it has no feature representation. */
  static Kind kindOf(DataType dt) {
    if (dt instanceof BooleanType
        || dt instanceof ByteType
        || dt instanceof ShortType
        || dt instanceof IntegerType
        || dt instanceof LongType
        || dt instanceof DateType
        || dt instanceof TimestampType
        || dt instanceof TimestampNTZType) {
      return Kind.INT64;
    }
    if (dt instanceof FloatType || dt instanceof DoubleType) {
      return Kind.FLOAT;
    }
    if (dt instanceof StringType || dt instanceof BinaryType || dt instanceof DecimalType) {
      return Kind.BYTES;
    }
    return null;
  }

  /** The element type of a feature-list column ({@code array<array<T>>}), else null. */
  static DataType featureListItem(DataType dt) {
    if (dt instanceof ArrayType && ((ArrayType) dt).elementType() instanceof ArrayType) {
      return ((ArrayType) ((ArrayType) dt).elementType()).elementType();
    }
    return null;
  }

  /** Why column {@code name} of type {@code dt} cannot be stored, or null when it can. */
  static String refusal(String name, DataType dt, RecordType recordType) {
    if (kindOf(dt) != null) {
      return null;
    }
    String shown = dt.simpleString();
    if (dt instanceof ArrayType) {
      DataType inner = ((ArrayType) dt).elementType();
      if (kindOf(inner) != null) {
        return null;
      }
      if (inner instanceof ArrayType && kindOf(((ArrayType) inner).elementType()) != null) {
        if (recordType == RecordType.SEQUENCE_EXAMPLE) {
          return null;
        }
        return "column `"
            + name
            + "` has type "
            + shown
            + ": an array of arrays has no tf.train.Example representation; write it with"
            + " recordType=SequenceExample (it becomes a feature list)";
      }
    }
    return "column `"
        + name
        + "` has type "
        + shown
        + ", which has no TFRecord feature representation (map, struct, interval and variant"
        + " columns are refused; flatten or serialize them first)";
  }

  /**
   * Throws naming the first column of {@code schema} that records of {@code recordType} cannot
   * hold. The schema is the written data (Spark has already taken the partition columns out).
   */
  static void checkWritable(StructType schema, RecordType recordType) {
    StructField[] fields = schema.fields();
    if (fields.length == 0) {
      throw new IllegalArgumentException("nothing to write: every column is a partition column");
    }
    if (recordType == RecordType.BYTE_ARRAY) {
      if (fields.length != 1 || !isBinaryOrString(fields[0].dataType())) {
        throw new IllegalArgumentException(
            "record type ByteArray writes exactly one binary or string column, not ("
                + describe(fields)
                + ")");
      }
      return;
    }
    for (StructField f : fields) {
      String reason = refusal(f.name(), f.dataType(), recordType);
      if (reason != null) {
        throw new IllegalArgumentException(reason);
      }
    }
  }

  /** Throws naming the first column of a read schema that cannot be filled from the records. */
  static void checkReadable(StructType schema, RecordType recordType) {
    if (recordType == RecordType.BYTE_ARRAY) {
      for (StructField f : schema.fields()) {
        if (!f.name().equals(RecordType.BYTE_ARRAY_COLUMN) || !(f.dataType() instanceof BinaryType)) {
          throw new IllegalArgumentException(
              "record type ByteArray reads into one binary column named `"
                  + RecordType.BYTE_ARRAY_COLUMN
                  + "`, not ("
                  + describe(schema.fields())
                  + ")");
        }
      }
      return;
    }
    for (StructField f : schema.fields()) {
      String reason = refusal(f.name(), f.dataType(), recordType);
      if (reason != null) {
        throw new IllegalArgumentException(reason.replace("has no tf.train.Example", "cannot be read from a tf.train.Example"));
      }
    }
  }

  static boolean isBinaryOrString(DataType dt) {
    return dt instanceof BinaryType || dt instanceof StringType;
  }

  private static String describe(StructField[] fields) {
    StringBuilder s = new StringBuilder();
    for (StructField f : fields) {
      if (s.length() > 0) {
        s.append(", ");
      }
      s.append(f.name()).append(": ").append(f.dataType().simpleString());
    }
    return s.toString();
  }
}
