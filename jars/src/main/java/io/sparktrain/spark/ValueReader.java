// ValueReader: turns parsed feature values into one Spark type (scalars into the row, lists into ArrayData).
package io.sparktrain.spark;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeArrayData;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Converts the values of a feature ({@link RawValues}) to one Spark type, as the Rust decoder
 * and {@code logical_types.rs} convert them: values widen int64 → float → bytes (numbers become
 * their text in a bytes column), integers narrower than long, dates and booleans are checked or
 * converted from the int64, doubles are the stored float32 widened, decimals are parsed from their
 * text. A value that does not fit is a {@link Conflict} whose reason the caller places.
 */
abstract class ValueReader {
  /** A value that does not fit the column; the message is the reason only. */
  static final class Conflict extends Exception {
    private static final long serialVersionUID = 1L;

    Conflict(String reason) {
      super(reason, null, false, false);
    }
  }

  /** The kind the column holds. */
  final Kind kind;

  ValueReader(Kind kind) {
    this.kind = kind;
  }

  /** Stores value {@code j} of {@code v} into {@code row} at {@code ordinal}. */
  abstract void set(InternalRow row, int ordinal, RawValues v, int j) throws Conflict;

  /** All of {@code v}'s values as an array of the column's element type. */
  abstract ArrayData array(RawValues v) throws Conflict;

  /** Throws unless values of kind {@code found} can be read into this column. */
  final void accept(Kind found) throws Conflict {
    boolean fits =
        found == kind || (kind == Kind.FLOAT && found == Kind.INT64) || kind == Kind.BYTES;
    if (!fits) {
      throw new Conflict("is a " + found.protoName + " but the column holds " + kind.protoName);
    }
  }

  static ValueReader of(DataType dt) {
    if (dt instanceof LongType || dt instanceof org.apache.spark.sql.types.TimestampType
        || dt instanceof org.apache.spark.sql.types.TimestampNTZType) {
      return new LongReader();
    }
    if (dt instanceof IntegerType || dt instanceof DateType) {
      return new NarrowReader(dt instanceof DateType ? "date" : "int", 4);
    }
    if (dt instanceof ShortType) {
      return new NarrowReader("short", 2);
    }
    if (dt instanceof ByteType) {
      return new NarrowReader("byte", 1);
    }
    if (dt instanceof BooleanType) {
      return new BooleanReader();
    }
    if (dt instanceof FloatType) {
      return new FloatReader(false);
    }
    if (dt instanceof DoubleType) {
      return new FloatReader(true);
    }
    if (dt instanceof StringType) {
      return new StringReader();
    }
    if (dt instanceof BinaryType) {
      return new BinaryReader();
    }
    if (dt instanceof DecimalType) {
      return new DecimalReader((DecimalType) dt);
    }
    throw new IllegalArgumentException("type " + dt.simpleString() + " cannot be read from a tf.train.Feature");
  }

  private static Conflict outOfRange(long v, String type) {
    return new Conflict("value " + v + " does not fit the column's type " + type);
  }

  static final class LongReader extends ValueReader {
    LongReader() {
      super(Kind.INT64);
    }

    @Override
    void set(InternalRow row, int ordinal, RawValues v, int j) {
      row.setLong(ordinal, v.ints[j]);
    }

    @Override
    ArrayData array(RawValues v) {
      return UnsafeArrayData.fromPrimitiveArray(Arrays.copyOf(v.ints, v.count));
    }
  }

  /**
   * int, date, short and byte columns: the int64 narrowed to the column's width, a value out of
   * its range failing instead of wrapping around.
   */
  static final class NarrowReader extends ValueReader {
    private final String type;
    /** Bytes per value: 4 (int, date), 2 (short) or 1 (byte). */
    private final int width;
    private final long max;

    NarrowReader(String type, int width) {
      super(Kind.INT64);
      this.type = type;
      this.width = width;
      this.max = (1L << (8 * width - 1)) - 1;
    }

    long value(RawValues v, int j) throws Conflict {
      long x = v.ints[j];
      if (x > max || x < -max - 1) {
        throw outOfRange(x, type);
      }
      return x;
    }

    @Override
    void set(InternalRow row, int ordinal, RawValues v, int j) throws Conflict {
      long x = value(v, j);
      if (width == 4) {
        row.setInt(ordinal, (int) x);
      } else if (width == 2) {
        row.setShort(ordinal, (short) x);
      } else {
        row.setByte(ordinal, (byte) x);
      }
    }

    @Override
    ArrayData array(RawValues v) throws Conflict {
      // Filled in place: the same bytes fromPrimitiveArray makes of an int[], short[] or byte[].
      UnsafeArrayData out = UnsafeArrayData.createFreshArray(v.count, width);
      for (int j = 0; j < v.count; j++) {
        long x = value(v, j);
        if (width == 4) {
          out.setInt(j, (int) x);
        } else if (width == 2) {
          out.setShort(j, (short) x);
        } else {
          out.setByte(j, (byte) x);
        }
      }
      return out;
    }
  }

  /** Booleans: any non-zero int64 is true, as Arrow's cast reads them. */
  static final class BooleanReader extends ValueReader {
    BooleanReader() {
      super(Kind.INT64);
    }

    @Override
    void set(InternalRow row, int ordinal, RawValues v, int j) {
      row.setBoolean(ordinal, v.ints[j] != 0);
    }

    @Override
    ArrayData array(RawValues v) {
      boolean[] out = new boolean[v.count];
      for (int j = 0; j < out.length; j++) {
        out[j] = v.ints[j] != 0;
      }
      return UnsafeArrayData.fromPrimitiveArray(out);
    }
  }

  /** float and double columns; int64 values widen to float32 first, as in the Rust decoder. */
  static final class FloatReader extends ValueReader {
    private final boolean dbl;

    FloatReader(boolean dbl) {
      super(Kind.FLOAT);
      this.dbl = dbl;
    }

    static float value(RawValues v, int j) {
      return v.kind == Kind.INT64 ? (float) v.ints[j] : v.floats[j];
    }

    @Override
    void set(InternalRow row, int ordinal, RawValues v, int j) {
      if (dbl) {
        row.setDouble(ordinal, value(v, j));
      } else {
        row.setFloat(ordinal, value(v, j));
      }
    }

    @Override
    ArrayData array(RawValues v) {
      if (dbl) {
        double[] out = new double[v.count];
        for (int j = 0; j < out.length; j++) {
          out[j] = value(v, j);
        }
        return UnsafeArrayData.fromPrimitiveArray(out);
      }
      if (v.kind == Kind.FLOAT) {
        return UnsafeArrayData.fromPrimitiveArray(Arrays.copyOf(v.floats, v.count));
      }
      float[] out = new float[v.count];
      for (int j = 0; j < out.length; j++) {
        out[j] = value(v, j);
      }
      return UnsafeArrayData.fromPrimitiveArray(out);
    }
  }

  /** Bytes-kind columns: the value's bytes (copied out of the record buffer), or a number's text. */
  abstract static class BytesReader extends ValueReader {
    BytesReader() {
      super(Kind.BYTES);
    }

    static byte[] bytes(RawValues v, int j) {
      switch (v.kind) {
        case INT64:
          return Long.toString(v.ints[j]).getBytes(StandardCharsets.US_ASCII);
        case FLOAT:
          return Text.ofFloat(v.floats[j]).getBytes(StandardCharsets.US_ASCII);
        default:
          return Arrays.copyOfRange(v.buf, v.starts[j], v.starts[j] + v.lengths[j]);
      }
    }

    abstract Object value(RawValues v, int j) throws Conflict;

    @Override
    final void set(InternalRow row, int ordinal, RawValues v, int j) throws Conflict {
      row.update(ordinal, value(v, j));
    }

    @Override
    final ArrayData array(RawValues v) throws Conflict {
      Object[] out = new Object[v.count];
      for (int j = 0; j < out.length; j++) {
        out[j] = value(v, j);
      }
      return new GenericArrayData(out);
    }
  }

  static final class StringReader extends BytesReader {
    @Override
    Object value(RawValues v, int j) throws Conflict {
      if (v.kind == Kind.BYTES && !Text.isUtf8(v.buf, v.starts[j], v.lengths[j])) {
        throw new Conflict("a value is not valid UTF-8 but the column is utf8");
      }
      return UTF8String.fromBytes(bytes(v, j));
    }
  }

  static final class BinaryReader extends BytesReader {
    @Override
    Object value(RawValues v, int j) {
      return bytes(v, j);
    }
  }

  /** Decimals from their text; a value with more digits than the type holds is an error. */
  static final class DecimalReader extends BytesReader {
    private final int precision;
    private final int scale;

    DecimalReader(DecimalType type) {
      this.precision = type.precision();
      this.scale = type.scale();
    }

    @Override
    Object value(RawValues v, int j) throws Conflict {
      String text = new String(bytes(v, j), StandardCharsets.UTF_8);
      BigDecimal parsed;
      try {
        parsed = new BigDecimal(text.trim());
      } catch (NumberFormatException e) {
        throw new Conflict("'" + text + "' is not a decimal");
      }
      Decimal d = Decimal.apply(parsed);
      if (!d.changePrecision(precision, scale)) {
        throw new Conflict("'" + text + "' does not fit decimal(" + precision + "," + scale + ")");
      }
      return d;
    }
  }
}
