// ExampleDecoder: serialized tf.train.Example / SequenceExample -> the requested columns of one row.
package io.sparktrain.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Decodes records into the columns of a (pruned) schema, as the Rust decoder does ({@code
 * example_to_arrow.rs}, {@code sequence_example.rs}): the record is parsed in place, features
 * the schema does not name are skipped without being decoded, a feature missing from a record
 * (or with no list set) is a null, the last of repeated entries wins, and a value that does not
 * fit fails naming the file, the record's byte offset and the feature.
 *
 * <p>For SequenceExamples, {@code array<array<T>>} columns come from the feature lists and the
 * other columns from the context, which has the layout of an Example's features.
 *
 * <p>Examples first take a one-pass path for the layout TensorFlow's writers (and sparktrain's)
 * produce, as the Rust decoder's {@code push_fast} does: entries read in place without cursor
 * objects, each name first compared with the column found at the same position in the previous
 * record (writers keep their order from record to record), one-value features read inline.
 * Anything else (another layout, a repeated feature, a malformed record) goes to the general
 * path, which sets every column again and reports errors.
 */
final class ExampleDecoder {
  /** One column being filled. */
  private static final class Column {
    final String name;
    final int ordinal;
    final boolean list;
    final ValueReader reader;
    int generation = -1;
    int start;
    int length;

    Column(String name, int ordinal, boolean list, ValueReader reader) {
      this.name = name;
      this.ordinal = ordinal;
      this.list = list;
      this.reader = reader;
    }
  }

  private final Column[] features;
  private final Column[] featureLists;
  private final NameIndex featureIndex;
  private final NameIndex featureListIndex;
  private final boolean sequence;
  /** {@link #noteEntry} as a visitor, made once rather than once per record. */
  private final FeatureMaps.Visitor entryVisitor = this::noteEntry;
  private final RawValues values = new RawValues();
  private int generation;
  /** The column at each entry position of the previous record (-1: a feature not asked for). */
  private int[] order = new int[0];
  /** Where the fast path's varint reader stopped. */
  private int at;

  ExampleDecoder(StructType schema, boolean sequence) {
    this.sequence = sequence;
    FeatureTypes.checkReadable(schema, sequence ? RecordType.SEQUENCE_EXAMPLE : RecordType.EXAMPLE);
    java.util.List<Column> f = new java.util.ArrayList<>();
    java.util.List<Column> fl = new java.util.ArrayList<>();
    StructField[] fields = schema.fields();
    for (int i = 0; i < fields.length; i++) {
      DataType dt = fields[i].dataType();
      DataType item = FeatureTypes.featureListItem(dt);
      if (item != null) {
        fl.add(new Column(fields[i].name(), i, true, ValueReader.of(item)));
      } else if (dt instanceof ArrayType) {
        f.add(new Column(fields[i].name(), i, true, ValueReader.of(((ArrayType) dt).elementType())));
      } else {
        f.add(new Column(fields[i].name(), i, false, ValueReader.of(dt)));
      }
    }
    features = f.toArray(new Column[0]);
    featureLists = fl.toArray(new Column[0]);
    featureIndex = new NameIndex(names(features));
    featureListIndex = new NameIndex(names(featureLists));
  }

  private static String[] names(Column[] columns) {
    String[] out = new String[columns.length];
    for (int i = 0; i < columns.length; i++) {
      out[i] = columns[i].name;
    }
    return out;
  }

  /**
   * Fills every column of {@code row} from the record {@code b[offset, offset + length)}.
   *
   * @throws BadRecordException naming {@code path} and {@code recordOffset}
   */
  void decode(byte[] b, int offset, int length, InternalRow row, String path, long recordOffset) {
    if (!sequence) {
      generation++;
      try {
        if (decodeFast(b, offset, length, row)) {
          return;
        }
      } catch (ValueReader.Conflict e) {
        throw new BadRecordException(path, recordOffset, conflicted.name, e.getMessage());
      }
    }
    generation++;
    try {
      FeatureMaps.walk(b, offset, length, sequence, entryVisitor);
    } catch (Wire.WireException e) {
      throw FeatureMaps.invalid(path, recordOffset, sequence, e);
    }
    Column current = null;
    try {
      for (Column col : features) {
        current = col;
        fillFeature(col, b, row);
      }
      for (Column col : featureLists) {
        current = col;
        fillFeatureList(col, b, row);
      }
    } catch (ValueReader.Conflict e) {
      throw new BadRecordException(path, recordOffset, current.name, e.getMessage());
    } catch (Wire.WireException e) {
      throw FeatureMaps.invalid(path, recordOffset, sequence, e);
    }
  }

  /**
   * The one-pass path (see the class notes): true when the record is decoded, false when the
   * general path must take it; a value that does not fit its column throws, with {@link
   * #conflicted} naming the column.
   */
  private boolean decodeFast(byte[] b, int offset, int length, InternalRow row) throws ValueReader.Conflict {
    int end = offset + length;
    if (length == 0) {
      return false;
    }
    at = offset;
    if (b[at++] != 0x0a) {
      return false;
    }
    int featuresLength = varint(b, end);
    if (featuresLength < 0 || at + featuresLength != end) {
      return false;
    }
    int position = 0;
    while (at < end) {
      if (b[at++] != 0x0a) {
        return false;
      }
      int entryLength = varint(b, end);
      if (entryLength < 0 || at + entryLength > end) {
        return false;
      }
      int entryEnd = at + entryLength;
      if (at >= entryEnd || b[at++] != 0x0a) {
        return false;
      }
      int nameLength = varint(b, entryEnd);
      int nameStart = at;
      if (nameLength < 0 || nameStart + nameLength >= entryEnd) {
        return false;
      }
      at = nameStart + nameLength;
      if (b[at++] != 0x12) {
        return false;
      }
      int valueLength = varint(b, entryEnd);
      int valueStart = at;
      if (valueLength < 0 || valueStart + valueLength != entryEnd) {
        return false;
      }
      int col = columnAt(position++, b, nameStart, nameLength);
      at = entryEnd;
      if (col < 0) {
        continue;
      }
      Column column = features[col];
      if (column.generation == generation || !loadFast(b, valueStart, valueLength)) {
        return false;
      }
      column.generation = generation;
      conflicted = column;
      column.reader.accept(values.kind);
      if (column.list) {
        row.update(column.ordinal, column.reader.array(values));
      } else if (values.count == 1) {
        column.reader.set(row, column.ordinal, values, 0);
      } else {
        return false;
      }
    }
    for (Column column : features) {
      if (column.generation != generation) {
        row.setNullAt(column.ordinal);
      }
    }
    for (Column column : featureLists) {
      row.setNullAt(column.ordinal);
    }
    return true;
  }

  /** The column the fast path was filling when a value did not fit. */
  private Column conflicted;

  /**
   * The column named {@code b[nameStart, nameStart + nameLength)} at entry {@code position}:
   * first the one the previous record had there, else by name (and remembered).
   */
  private int columnAt(int position, byte[] b, int nameStart, int nameLength) {
    if (position < order.length) {
      int guess = order[position];
      if (guess >= 0) {
        byte[] name = featureIndex.name(guess);
        if (name.length == nameLength && java.util.Arrays.equals(name, 0, nameLength, b, nameStart, nameStart + nameLength)) {
          return guess;
        }
      }
    } else {
      order = java.util.Arrays.copyOf(order, Math.max(8, 2 * position + 2));
      java.util.Arrays.fill(order, position, order.length, -2);
    }
    int col = featureIndex.find(b, nameStart, nameLength);
    order[position] = col;
    return col;
  }

  /**
   * Loads a {@code Feature} body into {@link #values}: the one-value forms writers produce
   * (a packed float, a packed varint) inline, anything else through {@link RawValues}. False
   * when the general path should look (no list set, or malformed).
   */
  private boolean loadFast(byte[] b, int start, int length) {
    int end = start + length;
    if (length == 8 && b[start] == 0x12 && b[start + 1] == 6 && b[start + 2] == 0x0a && b[start + 3] == 4) {
      values.kind = Kind.FLOAT;
      values.count = 1;
      values.floats[0] = Float.intBitsToFloat(
          (b[start + 4] & 0xff) | (b[start + 5] & 0xff) << 8 | (b[start + 6] & 0xff) << 16 | (b[start + 7] & 0xff) << 24);
      return true;
    }
    if (length >= 5 && b[start] == 0x1a && b[start + 1] == length - 2 && b[start + 2] == 0x0a && b[start + 3] == length - 4) {
      at = start + 4;
      long v = varint64(b, end);
      if (at == end) {
        values.kind = Kind.INT64;
        values.count = 1;
        values.ints[0] = v;
        return true;
      }
      return false;
    }
    try {
      return values.loadFeature(b, start, length);
    } catch (Wire.WireException e) {
      return false;
    }
  }

  /** A varint of at most 31 bits at {@link #at} before {@code end}, or -1. */
  private int varint(byte[] b, int end) {
    int v = 0;
    for (int shift = 0; shift < 32 && at < end; shift += 7) {
      byte x = b[at++];
      v |= (x & 0x7f) << shift;
      if (x >= 0) {
        return v >= 0 ? v : -1;
      }
    }
    return -1;
  }

  /** A varint at {@link #at} before {@code end}; {@link #at} lands past {@code end} if malformed. */
  private long varint64(byte[] b, int end) {
    long v = 0;
    for (int shift = 0; shift < 70 && at < end; shift += 7) {
      byte x = b[at++];
      v |= (long) (x & 0x7f) << shift;
      if (x >= 0) {
        return v;
      }
    }
    at = end + 1;
    return 0;
  }

  /**
   * Notes, for a map entry ({@code Features.feature} or {@code FeatureLists.feature_list}) that
   * names a column, where its value is; later entries win. Values are parsed only afterwards,
   * once per column, so a feature repeated or not asked for costs no decoding.
   */
  private void noteEntry(
      boolean featureList, byte[] b, int nameStart, int nameLength, int valueStart, int valueLength) {
    NameIndex index = featureList ? featureListIndex : featureIndex;
    int col = index.find(b, nameStart, nameLength);
    if (col >= 0) {
      Column column = (featureList ? featureLists : features)[col];
      column.generation = generation;
      column.start = valueStart;
      column.length = valueLength;
    }
  }

  private void fillFeature(Column col, byte[] b, InternalRow row)
      throws ValueReader.Conflict, Wire.WireException {
    if (col.generation != generation || !values.loadFeature(b, col.start, col.length)) {
      row.setNullAt(col.ordinal);
      return;
    }
    col.reader.accept(values.kind);
    if (col.list) {
      row.update(col.ordinal, col.reader.array(values));
    } else if (values.count != 1) {
      throw new ValueReader.Conflict(
          "holds " + values.count + " values but the column is a scalar (use a list type)");
    } else {
      col.reader.set(row, col.ordinal, values, 0);
    }
  }

  /** A {@code FeatureList}: one array per step ({@code Feature}); a step with no list is empty. */
  private void fillFeatureList(Column col, byte[] b, InternalRow row)
      throws ValueReader.Conflict, Wire.WireException {
    if (col.generation != generation) {
      row.setNullAt(col.ordinal);
      return;
    }
    java.util.List<ArrayData> steps = new java.util.ArrayList<>();
    Wire.Cursor c = new Wire.Cursor(b, col.start, col.length);
    while (c.nextField(1) != 0) {
      Wire.Cursor step = c.body();
      if (!values.loadFeature(b, step.pos, step.remaining())) {
        values.kind = col.reader.kind;
        values.count = 0;
      }
      // Feature lists widen int64 to float only, as the Rust decoder reads them.
      Kind found = values.kind;
      boolean fits = found == col.reader.kind || (found == Kind.INT64 && col.reader.kind == Kind.FLOAT);
      if (!fits) {
        throw new ValueReader.Conflict(
            "a step holds a " + found.protoName + ", the column wants " + col.reader.kind.protoName);
      }
      steps.add(col.reader.array(values));
    }
    row.update(col.ordinal, new GenericArrayData(steps.toArray()));
  }
}
