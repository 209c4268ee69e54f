// ExampleEncoder: InternalRow -> serialized tf.train.Example / SequenceExample, byte-identical to the Rust writer.
package io.sparktrain.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Encodes rows as {@code tf.train.Example}s, or as {@code SequenceExample}s whose {@code
 * array<array<T>>} columns are feature lists, with the exact bytes of the Rust writer ({@code
 * arrow_to_example.rs}, {@code sequence_example.rs}):
 *
 * <ul>
 *   <li>features in schema order (not sorted), one map entry per non-null column: {@code 0a len
 *       {0a len name, 12 len Feature}}; a null column has no entry;
 *   <li>int64 and float lists packed ({@code 0a len values}), and an empty list has no packed
 *       field at all; bytes lists as one {@code 0a len value} per element;
 *   <li>an Example always has its {@code features} field, even with no entry ({@code 0a 00}); a
 *       SequenceExample has a context field only when the schema has context columns, and a
 *       {@code feature_lists} field only when some feature list is not null;
 *   <li>a null array element or feature-list step is an error naming the column and row.
 * </ul>
 *
 * <p>Each record is sized first and then written, so nested lengths are known when their prefix
 * is written and no record is assembled by copying.
 */
final class ExampleEncoder extends RecordEncoder {
  private static final byte ENTRY_KEY = 0x0a;
  private static final byte VALUE_KEY = 0x12;
  private static final byte PACKED_KEY = 0x0a;

  private enum Shape {
    SCALAR,
    LIST,
    FEATURE_LIST
  }

  /** How one column is written. */
  private static final class Column {
    final String name;
    final int ordinal;
    final Shape shape;
    final ValueWriter values;
    /** The map entry's key field, ready to copy: tag, length, UTF-8 name. */
    final byte[] key;

    // Per-record state, set by sizing and used by writing.
    boolean present;
    ArrayData array;
    int count;
    int content;
    int entry;
    /** Feature lists: each step's content size, from sizing. */
    int[] stepContent = new int[16];

    Column(String name, int ordinal, Shape shape, ValueWriter values) {
      this.name = name;
      this.ordinal = ordinal;
      this.shape = shape;
      this.values = values;
      byte[] utf8 = name.getBytes(StandardCharsets.UTF_8);
      ProtoBuffer k = new ProtoBuffer();
      k.lenField(ENTRY_KEY, utf8.length);
      k.put(utf8);
      this.key = java.util.Arrays.copyOf(k.buf, k.pos);
    }
  }

  private final Column[] context;
  private final Column[] lists;
  private final boolean sequence;

  ExampleEncoder(StructType schema, boolean sequence) {
    this.sequence = sequence;
    List<Column> ctx = new ArrayList<>();
    List<Column> fl = new ArrayList<>();
    StructField[] fields = schema.fields();
    for (int i = 0; i < fields.length; i++) {
      DataType dt = fields[i].dataType();
      DataType item = FeatureTypes.featureListItem(dt);
      if (sequence && item != null) {
        fl.add(new Column(fields[i].name(), i, Shape.FEATURE_LIST, ValueWriter.of(item)));
      } else if (dt instanceof ArrayType) {
        ValueWriter w = ValueWriter.of(((ArrayType) dt).elementType());
        ctx.add(new Column(fields[i].name(), i, Shape.LIST, w));
      } else {
        ctx.add(new Column(fields[i].name(), i, Shape.SCALAR, ValueWriter.of(dt)));
      }
    }
    this.context = ctx.toArray(new Column[0]);
    this.lists = fl.toArray(new Column[0]);
  }

  @Override
  void encode(InternalRow row, long rowIndex, ProtoBuffer out) {
    int features = 0;
    for (Column c : context) {
      if (sizeFeature(c, row, rowIndex)) {
        features += Wire.lenFieldSize(c.entry);
      }
    }
    int featureLists = 0;
    for (Column c : lists) {
      if (sizeFeatureList(c, row, rowIndex)) {
        featureLists += Wire.lenFieldSize(c.entry);
      }
    }
    // An Example always carries its features field; a SequenceExample's context is there only
    // when the schema has context columns (Rust encodes it through the Example encoder then).
    boolean withContext = !sequence || context.length > 0;
    int total = (withContext ? Wire.lenFieldSize(features) : 0) + (featureLists > 0 ? Wire.lenFieldSize(featureLists) : 0);
    out.reserve(total);
    if (withContext) {
      out.lenField((byte) 0x0a, features);
      for (Column c : context) {
        if (c.present) {
          out.lenField(ENTRY_KEY, c.entry);
          out.put(c.key);
          writeFeature(c, row, out);
        }
      }
    }
    if (featureLists > 0) {
      out.lenField((byte) 0x12, featureLists);
      for (Column c : lists) {
        if (c.present) {
          out.lenField(ENTRY_KEY, c.entry);
          out.put(c.key);
          writeFeatureList(c, out);
        }
      }
    }
    for (Column c : context) {
      c.array = null;
    }
    for (Column c : lists) {
      c.array = null;
    }
  }

  /** Bytes of a list message holding {@code count} values of {@code content} bytes. */
  private static int listMessage(Kind kind, int count, int content) {
    if (kind == Kind.BYTES) {
      return content;
    }
    return count == 0 ? 0 : Wire.lenFieldSize(content);
  }

  /** Sizes a context column of {@code row}; false when it is null (no entry). */
  private boolean sizeFeature(Column c, InternalRow row, long rowIndex) {
    c.present = !row.isNullAt(c.ordinal);
    if (!c.present) {
      return false;
    }
    if (c.shape == Shape.SCALAR) {
      c.count = 1;
      c.content = c.values.size(row, c.ordinal);
    } else {
      ArrayData a = row.getArray(c.ordinal);
      c.array = a;
      c.count = a.numElements();
      c.content = contentOf(c, a, rowIndex, -1);
    }
    int feature = Wire.lenFieldSize(listMessage(c.values.kind, c.count, c.content));
    c.entry = c.key.length + Wire.lenFieldSize(feature);
    return true;
  }

  /** The content bytes of the values of {@code a}, refusing nulls; {@code step} < 0 for a plain list. */
  private static int contentOf(Column c, ArrayData a, long rowIndex, int step) {
    int n = a.numElements();
    int content = 0;
    for (int j = 0; j < n; j++) {
      if (a.isNullAt(j)) {
        throw badValue(
            c,
            rowIndex,
            step < 0
                ? "a list element is null, which a tf.train.Feature cannot hold"
                : "step " + step + " holds a null, which a tf.train.Feature cannot hold");
      }
      content += c.values.size(a, j);
    }
    return content;
  }

  private static void writeFeature(Column c, InternalRow row, ProtoBuffer out) {
    Kind kind = c.values.kind;
    int list = listMessage(kind, c.count, c.content);
    out.lenField(VALUE_KEY, Wire.lenFieldSize(list));
    out.lenField(kind.key, list);
    if (kind != Kind.BYTES && c.count > 0) {
      out.lenField(PACKED_KEY, c.content);
    }
    if (c.shape == Shape.SCALAR) {
      c.values.write(row, c.ordinal, out);
    } else {
      for (int j = 0; j < c.count; j++) {
        c.values.write(c.array, j, out);
      }
    }
  }

  /** Sizes a feature-list column; false when it is null (no entry). */
  private boolean sizeFeatureList(Column c, InternalRow row, long rowIndex) {
    c.present = !row.isNullAt(c.ordinal);
    if (!c.present) {
      return false;
    }
    ArrayData steps = row.getArray(c.ordinal);
    c.array = steps;
    int n = steps.numElements();
    if (c.stepContent.length < n) {
      c.stepContent = new int[Math.max(n, 2 * c.stepContent.length)];
    }
    int body = 0;
    for (int s = 0; s < n; s++) {
      if (steps.isNullAt(s)) {
        throw badValue(c, rowIndex, "step " + s + " is null, which a feature list cannot hold");
      }
      ArrayData values = steps.getArray(s);
      int content = contentOf(c, values, rowIndex, s);
      c.stepContent[s] = content;
      body += Wire.lenFieldSize(Wire.lenFieldSize(listMessage(c.values.kind, values.numElements(), content)));
    }
    c.count = n;
    c.content = body;
    c.entry = c.key.length + Wire.lenFieldSize(body);
    return true;
  }

  /** Writes {@code 12 len FeatureList{ 0a len Feature }*}, as prost encodes a FeatureList. */
  private static void writeFeatureList(Column c, ProtoBuffer out) {
    Kind kind = c.values.kind;
    out.lenField(VALUE_KEY, c.content);
    for (int s = 0; s < c.count; s++) {
      ArrayData values = c.array.getArray(s);
      int n = values.numElements();
      int content = c.stepContent[s];
      int list = listMessage(kind, n, content);
      out.lenField((byte) 0x0a, Wire.lenFieldSize(list));
      out.lenField(kind.key, list);
      if (kind != Kind.BYTES && n > 0) {
        out.lenField(PACKED_KEY, content);
      }
      for (int j = 0; j < n; j++) {
        c.values.write(values, j, out);
      }
    }
  }

  private static UnwritableValueException badValue(Column c, long rowIndex, String reason) {
    return new UnwritableValueException(c.name, rowIndex, reason);
  }
}
