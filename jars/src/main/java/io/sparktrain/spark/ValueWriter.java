// ValueWriter: how one Spark value is stored inside a feature's list, per Spark type.
package io.sparktrain.spark;

import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.expressions.SpecializedGetters;
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
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads one value of a Spark type from a row or an array ({@link SpecializedGetters} covers
 * both) and stores it the way the Rust writer does: int64 values as varints of a packed list,
 * floats as 4 little-endian bytes of a packed list, bytes as one length-delimited element each.
 *
 * <p>Encoding sizes a record before writing it, so each value is visited twice: {@link #size}
 * then {@link #write}. Values that cost a copy to fetch (binary, whose {@code UnsafeRow} getter
 * copies) or to format (decimals) are kept from {@code size} for the {@code write} that follows.
 */
abstract class ValueWriter {
  final Kind kind;

  ValueWriter(Kind kind) {
    this.kind = kind;
  }

  /** Bytes the value adds to its list's content. */
  abstract int size(SpecializedGetters src, int i);

  /** Appends the value's bytes (room was reserved). */
  abstract void write(SpecializedGetters src, int i, ProtoBuffer out);

  /** The writer for a scalar Spark type; the type table is {@link FeatureTypes}. */
  static ValueWriter of(DataType dt) {
    if (dt instanceof BooleanType) {
      return new Int64Writer((src, i) -> src.getBoolean(i) ? 1 : 0);
    }
    if (dt instanceof ByteType) {
      return new Int64Writer(SpecializedGetters::getByte);
    }
    if (dt instanceof ShortType) {
      return new Int64Writer(SpecializedGetters::getShort);
    }
    if (dt instanceof IntegerType || dt instanceof DateType) {
      // A date is Spark's int of days since 1970-01-01, the stored value as it is.
      return new Int64Writer(SpecializedGetters::getInt);
    }
    if (dt instanceof LongType || dt instanceof TimestampType || dt instanceof TimestampNTZType) {
      // Timestamps are Spark's microseconds since the epoch: the UTC instant for timestamp, the
      // wall-clock reading for timestamp_ntz; both are what the Rust writer stores.
      return new Int64Writer(SpecializedGetters::getLong);
    }
    if (dt instanceof FloatType || dt instanceof DoubleType) {
      return new FloatWriter(dt instanceof DoubleType);
    }
    if (dt instanceof StringType) {
      return new StringWriter();
    }
    if (dt instanceof BinaryType) {
      return new BinaryWriter();
    }
    if (dt instanceof DecimalType) {
      DecimalType d = (DecimalType) dt;
      return new DecimalWriter(d.precision(), d.scale());
    }
    throw new IllegalArgumentException("no feature representation for " + dt.simpleString());
  }

  /** Value {@code i} of a row or array as the int64 it is stored as. */
  interface LongGetter {
    long get(SpecializedGetters src, int i);
  }

  /** Integers, booleans, dates and timestamps: varints of an {@code int64_list}. */
  static final class Int64Writer extends ValueWriter {
    private final LongGetter value;

    Int64Writer(LongGetter value) {
      super(Kind.INT64);
      this.value = value;
    }

    @Override
    int size(SpecializedGetters src, int i) {
      return Wire.varintSize(value.get(src, i));
    }

    @Override
    void write(SpecializedGetters src, int i, ProtoBuffer out) {
      out.varint(value.get(src, i));
    }
  }

  /** float and double: 4 little-endian bytes of a {@code float_list}. */
  static final class FloatWriter extends ValueWriter {
    private final boolean fromDouble;

    FloatWriter(boolean fromDouble) {
      super(Kind.FLOAT);
      this.fromDouble = fromDouble;
    }

    private float value(SpecializedGetters src, int i) {
      // TensorFlow stores float32; the cast rounds to nearest, as Rust's `as f32` does.
      return fromDouble ? (float) src.getDouble(i) : src.getFloat(i);
    }

    @Override
    int size(SpecializedGetters src, int i) {
      return 4;
    }

    @Override
    void write(SpecializedGetters src, int i, ProtoBuffer out) {
      // Raw bits: a NaN keeps its payload, as Rust's to_le_bytes keeps it.
      out.fixed32(Float.floatToRawIntBits(value(src, i)));
    }
  }

  /** Strings: their UTF-8 bytes, copied straight from Spark's memory. */
  static final class StringWriter extends ValueWriter {
    StringWriter() {
      super(Kind.BYTES);
    }

    @Override
    int size(SpecializedGetters src, int i) {
      return Wire.lenFieldSize(src.getUTF8String(i).numBytes());
    }

    @Override
    void write(SpecializedGetters src, int i, ProtoBuffer out) {
      UTF8String s = src.getUTF8String(i);
      int n = s.numBytes();
      out.lenField((byte) 0x0a, n);
      s.writeToMemory(out.buf, Platform.BYTE_ARRAY_OFFSET + out.pos);
      out.pos += n;
    }
  }

  /** Binary: the bytes as they are. */
  static final class BinaryWriter extends ValueWriter {
    private SpecializedGetters keptFrom;
    private int keptIndex;
    private byte[] kept;

    BinaryWriter() {
      super(Kind.BYTES);
    }

    @Override
    int size(SpecializedGetters src, int i) {
      kept = src.getBinary(i);
      keptFrom = src;
      keptIndex = i;
      return Wire.lenFieldSize(kept.length);
    }

    @Override
    void write(SpecializedGetters src, int i, ProtoBuffer out) {
      byte[] b = src == keptFrom && i == keptIndex ? kept : src.getBinary(i);
      keptFrom = null;
      kept = null;
      out.lenField((byte) 0x0a, b.length);
      out.put(b);
    }
  }

  /**
   * Decimals: their text with exactly {@code scale} fraction digits ({@code "-0.050"}), as Arrow
   * formats a decimal128 for the Rust writer; a negative scale gets trailing zeros instead.
   */
  static final class DecimalWriter extends ValueWriter {
    private final int precision;
    private final int scale;
    private final byte[] text = new byte[80];
    private int textLength;
    private SpecializedGetters keptFrom;
    private int keptIndex = -1;

    DecimalWriter(int precision, int scale) {
      super(Kind.BYTES);
      this.precision = precision;
      this.scale = scale;
    }

    @Override
    int size(SpecializedGetters src, int i) {
      format(src.getDecimal(i, precision, scale));
      keptFrom = src;
      keptIndex = i;
      return Wire.lenFieldSize(textLength);
    }

    @Override
    void write(SpecializedGetters src, int i, ProtoBuffer out) {
      if (src != keptFrom || i != keptIndex) {
        format(src.getDecimal(i, precision, scale));
      }
      keptFrom = null;
      out.lenField((byte) 0x0a, textLength);
      out.put(text, 0, textLength);
    }

    private void format(Decimal d) {
      if (precision <= Decimal.MAX_LONG_DIGITS()) {
        textLength = formatUnscaled(d.toUnscaledLong(), scale, text);
      } else {
        byte[] b = d.toJavaBigDecimal().toPlainString().getBytes(StandardCharsets.US_ASCII);
        System.arraycopy(b, 0, text, 0, b.length);
        textLength = b.length;
      }
    }

    /** Writes {@code unscaled * 10^-scale} as plain text into {@code out}; returns its length. */
    static int formatUnscaled(long unscaled, int scale, byte[] out) {
      // Digits of |unscaled|, least significant first; 18 digits fit a long without overflow.
      byte[] digits = new byte[20];
      int n = 0;
      long v = Math.abs(unscaled);
      do {
        digits[n++] = (byte) ('0' + (v % 10));
        v /= 10;
      } while (v != 0);
      int at = 0;
      if (unscaled < 0) {
        out[at++] = '-';
      }
      if (scale <= 0) {
        for (int k = n - 1; k >= 0; k--) {
          out[at++] = digits[k];
        }
        for (int k = 0; k < -scale; k++) {
          out[at++] = '0';
        }
        return at;
      }
      if (n <= scale) {
        out[at++] = '0';
        out[at++] = '.';
        for (int k = 0; k < scale - n; k++) {
          out[at++] = '0';
        }
        for (int k = n - 1; k >= 0; k--) {
          out[at++] = digits[k];
        }
        return at;
      }
      for (int k = n - 1; k >= 0; k--) {
        if (k == scale - 1) {
          out[at++] = '.';
        }
        out[at++] = digits[k];
      }
      return at;
    }
  }
}
