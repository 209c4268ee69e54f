// SchemaInference: the Spark schema of a sample of records, as the Rust inference decides it.
package io.sparktrain.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Infers a schema from sampled records as {@code example_to_arrow.rs} and {@code
 * sequence_example.rs} do, giving the Spark types the Python source gives: per feature the
 * widest kind seen (int64 → long, float → float, bytes → string when every sampled value is
 * UTF-8, else binary), an array when any record holds other than one value, every field
 * nullable, fields sorted by name. SequenceExample feature lists become {@code
 * array<array<T>>} (a list with no typed step is {@code array<array<string>>}). ByteArray
 * needs no records: {@code byteArray binary}.
 */
final class SchemaInference {
  /** What has been seen of one feature. */
  private static final class Stats {
    Kind kind;
    boolean list;
    boolean utf8 = true;

    Stats(Kind kind) {
      this.kind = kind;
    }
  }

  private final RecordType recordType;
  private final Map<String, Stats> features = new TreeMap<>();
  private final Map<String, Stats> featureLists = new TreeMap<>();
  private final RawValues values = new RawValues();
  private long records;
  /** {@link #observeEntry} as a visitor, made once rather than once per record. */
  private final FeatureMaps.Visitor entryVisitor = this::observeEntry;

  SchemaInference(RecordType recordType) {
    this.recordType = recordType;
  }

  /** Whether records are needed at all. */
  boolean needsRecords() {
    return recordType != RecordType.BYTE_ARRAY;
  }

  long records() {
    return records;
  }

  /** Takes one record into account; a malformed one fails naming the file and offset. */
  void observe(byte[] b, int offset, int length, String path, long recordOffset) {
    boolean sequence = recordType == RecordType.SEQUENCE_EXAMPLE;
    try {
      FeatureMaps.walk(b, offset, length, sequence, entryVisitor);
    } catch (Wire.WireException e) {
      throw FeatureMaps.invalid(path, recordOffset, sequence, e);
    }
    records++;
  }

  /** Observes one map entry's value under its name. */
  private void observeEntry(
      boolean featureList, byte[] b, int nameStart, int nameLength, int valueStart, int valueLength)
      throws Wire.WireException {
    // Invalid UTF-8 in a name is replaced, as Rust's from_utf8_lossy does.
    String name = new String(b, nameStart, nameLength, StandardCharsets.UTF_8);
    if (featureList) {
      observeFeatureList(name, b, valueStart, valueLength);
    } else {
      observeFeature(name, b, valueStart, valueLength);
    }
  }

  private boolean valuesAreUtf8() {
    if (values.kind != Kind.BYTES) {
      return true;
    }
    for (int j = 0; j < values.count; j++) {
      if (!Text.isUtf8(values.buf, values.starts[j], values.lengths[j])) {
        return false;
      }
    }
    return true;
  }

  private void observeFeature(String name, byte[] b, int offset, int length) throws Wire.WireException {
    if (!values.loadFeature(b, offset, length)) {
      return;
    }
    Stats s = features.computeIfAbsent(name, n -> new Stats(values.kind));
    s.kind = Kind.widest(s.kind, values.kind);
    s.list |= values.count != 1;
    s.utf8 &= valuesAreUtf8();
  }

  private void observeFeatureList(String name, byte[] b, int offset, int length) throws Wire.WireException {
    Wire.Cursor c = new Wire.Cursor(b, offset, length);
    while (c.nextField(1) != 0) {
      Wire.Cursor step = c.body();
      if (!values.loadFeature(b, step.pos, step.remaining())) {
        continue;
      }
      Stats s = featureLists.computeIfAbsent(name, k -> new Stats(values.kind));
      s.kind = Kind.widest(s.kind, values.kind);
      s.utf8 &= valuesAreUtf8();
    }
    // A list with no typed step still names a column; Rust makes it bytes (utf8).
    featureLists.computeIfAbsent(name, k -> new Stats(Kind.BYTES));
  }

  private static DataType itemType(Stats s) {
    switch (s.kind) {
      case INT64:
        return DataTypes.LongType;
      case FLOAT:
        return DataTypes.FloatType;
      default:
        // Numbers widened into a bytes column become text, which is UTF-8.
        return s.utf8 ? DataTypes.StringType : DataTypes.BinaryType;
    }
  }

  /** The inferred schema. */
  StructType schema() {
    if (recordType == RecordType.BYTE_ARRAY) {
      return new StructType(
          new StructField[] {
            DataTypes.createStructField(RecordType.BYTE_ARRAY_COLUMN, DataTypes.BinaryType, false)
          });
    }
    TreeMap<String, DataType> fields = new TreeMap<>();
    for (Map.Entry<String, Stats> e : features.entrySet()) {
      DataType item = itemType(e.getValue());
      fields.put(e.getKey(), e.getValue().list ? new ArrayType(item, true) : item);
    }
    // A feature list replaces a context feature of the same name, as in the Rust inference.
    for (Map.Entry<String, Stats> e : featureLists.entrySet()) {
      fields.put(e.getKey(), new ArrayType(new ArrayType(itemType(e.getValue()), true), true));
    }
    List<StructField> out = new ArrayList<>();
    for (Map.Entry<String, DataType> e : fields.entrySet()) {
      out.add(DataTypes.createStructField(e.getKey(), e.getValue(), true));
    }
    return new StructType(out.toArray(new StructField[0]));
  }
}
