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
