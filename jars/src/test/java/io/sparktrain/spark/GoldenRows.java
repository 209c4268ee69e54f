// GoldenRows: the rows of tests/golden/make_examples.py as Spark InternalRows and schemas.
package io.sparktrain.spark;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The rows that {@code tests/golden/make_examples.py} writes through the Rust codec into {@code
 * rust_examples.tfrecord} and {@code rust_sequence_examples.tfrecord}, built here as Spark
 * values; keep the two in step.
 */
final class GoldenRows {
  private GoldenRows() {}

  static final String LONG_NAME = "a_much_longer_feature_name_" + "x".repeat(120);

  static StructType exampleSchema() {
    return schema(
        "b", DataTypes.BooleanType,
        "i8", DataTypes.ByteType,
        "i16", DataTypes.ShortType,
        "i32", DataTypes.IntegerType,
        "i64", DataTypes.LongType,
        "f32", DataTypes.FloatType,
        "f64", DataTypes.DoubleType,
        "dec", DataTypes.createDecimalType(10, 3),
        "s", DataTypes.StringType,
        "bin", DataTypes.BinaryType,
        "d", DataTypes.DateType,
        "ts", DataTypes.TimestampType,
        "ntz", DataTypes.TimestampNTZType,
        "ids", array(DataTypes.LongType),
        "fl", array(DataTypes.FloatType),
        "dl", array(DataTypes.DoubleType),
        "tags", array(DataTypes.StringType),
        "blobs", array(DataTypes.BinaryType),
        "decs", array(DataTypes.createDecimalType(5, 2)),
        "days", array(DataTypes.DateType),
        "flags", array(DataTypes.BooleanType),
        LONG_NAME, DataTypes.IntegerType);
  }

  static InternalRow[] exampleRows() {
    byte[] twice = new byte[512];
    for (int i = 0; i < 512; i++) {
      twice[i] = (byte) i;
    }
    return new InternalRow[] {
      row(true, (byte) -128, (short) -300, 70000, 1L << 40, 0.5f, 0.1, dec("1.250", 10, 3), str("é"),
          new byte[] {0, (byte) 0xff}, -31, -1L, 1_500_000L, longs(1, -2, 300), floats(0.25f, -1.0f),
          doubles(1e300, -2.5), strs("a", ""), bins(new byte[] {1}), decs(5, 2, "-0.05", "12.34"),
          ints(0, 19000), bools(true, false), 7),
      row(new Object[22]),
      row(false, (byte) 127, (short) 32767, -1, Long.MIN_VALUE, Float.NaN, -0.0, dec("-0.050", 10, 3), str(""),
          new byte[0], 0, 0L, -1L, longs(), floats(), doubles(), strs(), bins(), decs(5, 2), ints(), bools(), -1),
      row(true, (byte) 0, (short) 0, 0, Long.MAX_VALUE, 1e-45f, 3.4e38, dec("0.000", 10, 3), str("x".repeat(200)),
          twice, 2932896, 253402300799999999L, -62135596800000000L, longs(Long.MAX_VALUE, -1),
          floats(Float.POSITIVE_INFINITY), doubles(), strs("long ".repeat(40)), bins(new byte[130]),
          decs(5, 2, "999.99"), ints(-719162), bools(true), null),
    };
  }

  static StructType sequenceSchema() {
    return schema(
        "id", DataTypes.LongType,
        "tokens", array(array(DataTypes.LongType)),
        "label", DataTypes.StringType,
        "frames", array(array(DataTypes.FloatType)),
        "words", array(array(DataTypes.StringType)));
  }

  static InternalRow[] sequenceRows() {
    return new InternalRow[] {
      row(1L, arrays(longs(1, 2), longs(), longs(300)), str("yes"), arrays(floats(0.5f), floats(1f, 2f)),
          arrays(strs("a", "bc"), strs())),
      row(new Object[5]),
      row(2L, arrays(), str(""), arrays(), arrays(strs())),
      row(null, arrays(longs(-1)), null, null, arrays(strs(""))),
    };
  }

  static StructType schema(Object... namesAndTypes) {
    StructField[] fields = new StructField[namesAndTypes.length / 2];
    for (int i = 0; i < fields.length; i++) {
      fields[i] = DataTypes.createStructField((String) namesAndTypes[2 * i], (DataType) namesAndTypes[2 * i + 1], true);
    }
    return new StructType(fields);
  }

  static ArrayType array(DataType element) {
    return new ArrayType(element, true);
  }

  static InternalRow row(Object... values) {
    return new GenericInternalRow(values);
  }

  static UTF8String str(String s) {
    return UTF8String.fromString(s);
  }

  static Decimal dec(String text, int precision, int scale) {
    Decimal d = Decimal.apply(new BigDecimal(text));
    d.changePrecision(precision, scale);
    return d;
  }

  static GenericArrayData longs(long... v) {
    return new GenericArrayData(Arrays.stream(v).boxed().toArray());
  }

  static GenericArrayData ints(int... v) {
    return new GenericArrayData(Arrays.stream(v).boxed().toArray());
  }

  static GenericArrayData floats(float... v) {
    Object[] o = new Object[v.length];
    for (int i = 0; i < v.length; i++) {
      o[i] = v[i];
    }
    return new GenericArrayData(o);
  }

  static GenericArrayData doubles(double... v) {
    return new GenericArrayData(Arrays.stream(v).boxed().toArray());
  }

  static GenericArrayData bools(boolean... v) {
    Object[] o = new Object[v.length];
    for (int i = 0; i < v.length; i++) {
      o[i] = v[i];
    }
    return new GenericArrayData(o);
  }

  static GenericArrayData strs(String... v) {
    return new GenericArrayData(Arrays.stream(v).map(UTF8String::fromString).toArray());
  }

  static GenericArrayData bins(byte[]... v) {
    return new GenericArrayData((Object[]) v);
  }

  static GenericArrayData decs(int precision, int scale, String... v) {
    return new GenericArrayData(Arrays.stream(v).map(t -> dec(t, precision, scale)).toArray());
  }

  static GenericArrayData arrays(GenericArrayData... v) {
    return new GenericArrayData((Object[]) v);
  }

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
