// ExampleDecoderTest: decoding, column pruning, conflicts and schema inference against the Rust golden files.
package io.sparktrain.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

class ExampleDecoderTest {
  /** The payloads of a TFRecord file, each with its record's byte offset. */
  static List<byte[]> payloads(byte[] file, List<Long> offsets) throws IOException {
    List<byte[]> out = new ArrayList<>();
    try (RecordScanner s = new RecordScanner(new ByteArrayInputStream(file), "mem", 0, false, 1 << 20)) {
      while (s.next(Long.MAX_VALUE)) {
        out.add(java.util.Arrays.copyOfRange(s.data(), s.payloadStart(), s.payloadStart() + s.payloadLength()));
        if (offsets != null) {
          offsets.add(s.recordOffset());
        }
      }
    }
    return out;
  }

  static List<InternalRow> decodeAll(byte[] file, StructType schema, boolean sequence) throws IOException {
    ExampleDecoder decoder = new ExampleDecoder(schema, sequence);
    List<InternalRow> rows = new ArrayList<>();
    for (byte[] p : payloads(file, null)) {
      InternalRow row = newRow(schema);
      decoder.decode(p, 0, p.length, row, "mem", 0);
      rows.add(row);
    }
    return rows;
  }

  /**
   * A row to decode into. Spark's reader uses a SpecificInternalRow; a generic one takes the same
   * setters and, unlike it, needs no SQLConf (and its dependencies) in a plain test JVM.
   */
  static InternalRow newRow(StructType schema) {
    return new GenericInternalRow(new Object[schema.size()]);
  }

  /** {@code name:type,...}, as StructType.simpleString gives it without needing SQLConf. */
  static String describe(StructType schema) {
    StringBuilder s = new StringBuilder("struct<");
    for (StructField f : schema.fields()) {
      s.append(s.length() > 7 ? "," : "").append(f.name()).append(':').append(f.dataType().simpleString());
    }
    return s.append('>').toString();
  }

  /** Decoding the Rust writer's file and encoding the rows again gives the same bytes. */
  @Test
  void goldenExamplesRoundTrip() throws IOException {
    byte[] golden = Files.readAllBytes(ExampleGoldenTest.golden("rust_examples.tfrecord"));
    StructType schema = GoldenRows.exampleSchema();
    List<InternalRow> rows = decodeAll(golden, schema, false);
    assertEquals(4, rows.size());
    byte[] again = ExampleGoldenTest.encodeFile(schema, RecordType.EXAMPLE, rows.toArray(new InternalRow[0]));
    assertArrayEquals(golden, again);

    InternalRow first = rows.get(0);
    assertTrue(first.getBoolean(0));
    assertEquals(-128, first.getByte(1));
    assertEquals(-300, first.getShort(2));
    assertEquals((double) 0.1f, first.getDouble(6));
    assertEquals("1.250", first.getDecimal(7, 10, 3).toJavaBigDecimal().toPlainString());
    assertEquals("é", first.getUTF8String(8).toString());
    assertEquals(-31, first.getInt(10));
    assertEquals(-1L, first.getLong(11));
    assertArrayEquals(new long[] {1, -2, 300}, first.getArray(13).toLongArray());
    assertArrayEquals(new double[] {Double.POSITIVE_INFINITY, -2.5}, first.getArray(15).toDoubleArray());
    assertEquals("-0.05", first.getArray(18).getDecimal(0, 5, 2).toJavaBigDecimal().toPlainString());
    for (int c = 0; c < schema.size(); c++) {
      assertTrue(rows.get(1).isNullAt(c), "all-null row, column " + c);
    }
    InternalRow empty = rows.get(2);
    assertTrue(Float.isNaN(empty.getFloat(5)));
    assertEquals(0, empty.getArray(13).numElements());
    assertEquals(Long.MIN_VALUE, empty.getLong(4));
    assertTrue(rows.get(3).isNullAt(21));
  }

  @Test
  void goldenSequenceExamplesRoundTrip() throws IOException {
    byte[] golden = Files.readAllBytes(ExampleGoldenTest.golden("rust_sequence_examples.tfrecord"));
    StructType schema = GoldenRows.sequenceSchema();
    List<InternalRow> rows = decodeAll(golden, schema, true);
    byte[] again = ExampleGoldenTest.encodeFile(schema, RecordType.SEQUENCE_EXAMPLE, rows.toArray(new InternalRow[0]));
    assertArrayEquals(golden, again);
    assertEquals(3, rows.get(0).getArray(1).numElements());
    assertArrayEquals(new long[] {300}, rows.get(0).getArray(1).getArray(2).toLongArray());
    assertTrue(rows.get(1).isNullAt(1));
  }

  /** Only the schema's columns are read; types convert as the Rust decoder converts them. */
  @Test
  void prunedAndConvertedColumns() throws IOException {
    byte[] golden = Files.readAllBytes(ExampleGoldenTest.golden("rust_examples.tfrecord"));
    StructType schema = GoldenRows.schema("i32", DataTypes.LongType, "i64", DataTypes.StringType,
        "f32", DataTypes.DoubleType, "absent", DataTypes.IntegerType);
    List<InternalRow> rows = decodeAll(golden, schema, false);
    assertEquals(70000L, rows.get(0).getLong(0));
    assertEquals("1099511627776", rows.get(0).getUTF8String(1).toString());
    assertEquals(0.5, rows.get(0).getDouble(2));
    assertTrue(rows.get(0).isNullAt(3));
  }

  @Test
  void conflictsNameFileOffsetAndFeature() throws IOException {
    byte[] golden = Files.readAllBytes(ExampleGoldenTest.golden("rust_examples.tfrecord"));
    List<Long> offsets = new ArrayList<>();
    List<byte[]> records = payloads(golden, offsets);
    ExampleDecoder decoder = new ExampleDecoder(GoldenRows.schema("s", DataTypes.LongType), false);
    BadRecordException e = assertThrows(BadRecordException.class,
        () -> decoder.decode(records.get(0), 0, records.get(0).length,
            newRow(GoldenRows.schema("s", DataTypes.LongType)), "f.tfrecord", offsets.get(0)));
    assertEquals("f.tfrecord: record at byte offset 0, feature 's': is a bytes_list but the column holds int64_list",
        e.getMessage());
    StructType scalar = GoldenRows.schema("ids", DataTypes.LongType);
    BadRecordException list = assertThrows(BadRecordException.class,
        () -> new ExampleDecoder(scalar, false).decode(records.get(0), 0, records.get(0).length,
            newRow(scalar), "f", 5));
    assertTrue(list.getMessage().contains("holds 3 values but the column is a scalar"), list.getMessage());
    StructType narrow = GoldenRows.schema("i32", DataTypes.ShortType);
    BadRecordException range = assertThrows(BadRecordException.class,
        () -> new ExampleDecoder(narrow, false).decode(records.get(0), 0, records.get(0).length,
            newRow(narrow), "f", 5));
    assertTrue(range.getMessage().contains("value 70000 does not fit"), range.getMessage());
    byte[] garbage = {0x0a, 0x05, 0x01};
    BadRecordException bad = assertThrows(BadRecordException.class,
        () -> decoder.decode(garbage, 0, 3, newRow(GoldenRows.schema("s", DataTypes.LongType)), "f", 9));
    assertEquals("f: record at byte offset 9 is not a valid tf.train.Example: message is truncated", bad.getMessage());
  }

  /** An Example of {@code entries}, each a name and a Feature body, in the given order. */
  static byte[] example(Object... entries) {
    java.io.ByteArrayOutputStream features = new java.io.ByteArrayOutputStream();
    for (int i = 0; i < entries.length; i += 2) {
      byte[] name = ((String) entries[i]).getBytes(java.nio.charset.StandardCharsets.UTF_8);
      byte[] value = (byte[]) entries[i + 1];
      java.io.ByteArrayOutputStream entry = new java.io.ByteArrayOutputStream();
      entry.write(0x0a);
      entry.write(name.length);
      entry.writeBytes(name);
      entry.write(0x12);
      entry.write(value.length);
      entry.writeBytes(value);
      features.write(0x0a);
      features.write(entry.size());
      features.writeBytes(entry.toByteArray());
    }
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    out.write(0x0a);
    out.write(features.size());
    out.writeBytes(features.toByteArray());
    return out.toByteArray();
  }

  /**
   * Records in the layouts the one-pass path reads and in those it hands to the general path
   * (order changes, repeated and unknown features, unpacked values, a feature with no list,
   * longer lists) decode to the values the protocol buffer says, record after record.
   */
  @Test
  void everyLayoutDecodesAlikeWhicheverPathTakesIt() {
    byte[] packedFloat = {0x12, 6, 0x0a, 4, 0, 0, (byte) 0xc0, 0x3f}; // 1.5f
    byte[] packedInt = {0x1a, 4, 0x0a, 2, (byte) 0xac, 0x02}; // 300
    byte[] unpackedInt = {0x1a, 3, 0x08, (byte) 0xac, 0x02}; // 300, one varint field
    byte[] twoInts = {0x1a, 4, 0x0a, 2, 1, 2};
    byte[] noList = {};
    byte[] text = {0x0a, 4, 0x0a, 2, 'h', 'i'};
    StructType schema = GoldenRows.schema("f", DataTypes.FloatType, "n", DataTypes.LongType,
        "s", DataTypes.StringType, "l", GoldenRows.array(DataTypes.LongType));
    byte[][] records = {
      example("f", packedFloat, "n", packedInt, "s", text, "l", twoInts),
      example("n", packedInt, "f", packedFloat, "s", text, "l", twoInts), // another order
      example("f", packedFloat, "x", packedInt, "n", packedInt), // unknown feature, s and l missing
      example("f", packedFloat, "n", unpackedInt, "s", text, "l", twoInts), // unpacked varint
      example("f", packedFloat, "n", packedInt, "n", twoInts), // repeated: the last wins (a list)
      example("f", noList, "n", packedInt, "s", text, "l", twoInts), // a feature with no list
      example("f", packedFloat, "n", packedInt, "s", text, "l", twoInts), // back to the first layout
    };
    ExampleDecoder decoder = new ExampleDecoder(schema, false);
    List<InternalRow> rows = new ArrayList<>();
    for (byte[] r : records) {
      InternalRow row = newRow(schema);
      try {
        decoder.decode(r, 0, r.length, row, "mem", 0);
      } catch (BadRecordException e) {
        row = null;
        assertTrue(e.getMessage().contains("feature 'n'"), e.getMessage());
      }
      rows.add(row);
    }
    for (int i : new int[] {0, 1, 3, 6}) {
      InternalRow row = rows.get(i);
      assertEquals(1.5f, row.getFloat(0), "record " + i);
      assertEquals(300L, row.getLong(1), "record " + i);
      assertEquals("hi", row.getUTF8String(2).toString(), "record " + i);
      assertArrayEquals(new long[] {1, 2}, row.getArray(3).toLongArray(), "record " + i);
    }
    assertEquals(300L, rows.get(2).getLong(1));
    assertTrue(rows.get(2).isNullAt(2));
    assertTrue(rows.get(2).isNullAt(3));
    assertEquals(null, rows.get(4), "two values in a scalar column are refused, naming it");
    assertTrue(rows.get(5).isNullAt(0), "a feature with no list is a null");
    assertEquals(300L, rows.get(5).getLong(1));
  }

  @Test
  void unsupportedTypesAreRefusedNamingTheColumn() {
    StructType map = GoldenRows.schema("m", DataTypes.createMapType(DataTypes.StringType, DataTypes.IntegerType));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> RecordEncoder.create(map, RecordType.EXAMPLE));
    assertTrue(e.getMessage().startsWith("column `m` has type map<string,int>"), e.getMessage());
    StructType nested = GoldenRows.schema("t", GoldenRows.array(GoldenRows.array(DataTypes.LongType)));
    e = assertThrows(IllegalArgumentException.class, () -> RecordEncoder.create(nested, RecordType.EXAMPLE));
    assertTrue(e.getMessage().contains("recordType=SequenceExample"), e.getMessage());
    StructType two = GoldenRows.schema("a", DataTypes.BinaryType, "b", DataTypes.BinaryType);
    e = assertThrows(IllegalArgumentException.class, () -> RecordEncoder.create(two, RecordType.BYTE_ARRAY));
    assertTrue(e.getMessage().contains("exactly one binary or string column"), e.getMessage());
  }

  @Test
  void nullListElementsNameColumnAndRow() {
    StructType schema = GoldenRows.schema("ids", GoldenRows.array(DataTypes.LongType));
    RecordEncoder encoder = RecordEncoder.create(schema, RecordType.EXAMPLE);
    InternalRow row = GoldenRows.row(new org.apache.spark.sql.catalyst.util.GenericArrayData(new Object[] {1L, null}));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> encoder.encode(row, 7, new ProtoBuffer()));
    assertEquals("column 'ids', row 7: a list element is null, which a tf.train.Feature cannot hold", e.getMessage());
  }

  /** The same schema as the Rust inference gives (and so the Python source) for the golden files. */
  @Test
  void inferenceMatchesTheRustInference() throws IOException {
    SchemaInference examples = new SchemaInference(RecordType.EXAMPLE);
    for (byte[] p : payloads(Files.readAllBytes(ExampleGoldenTest.golden("rust_examples.tfrecord")), null)) {
      examples.observe(p, 0, p.length, "mem", 0);
    }
    assertEquals(
        "struct<" + GoldenRows.LONG_NAME + ":bigint,b:bigint,bin:binary,blobs:array<string>,d:bigint,"
            + "days:array<bigint>,dec:string,decs:array<string>,dl:array<float>,f32:float,f64:float,"
            + "fl:array<float>,flags:array<bigint>,i16:bigint,i32:bigint,i64:bigint,i8:bigint,"
            + "ids:array<bigint>,ntz:bigint,s:string,tags:array<string>,ts:bigint>",
        describe(examples.schema()));
    SchemaInference sequences = new SchemaInference(RecordType.SEQUENCE_EXAMPLE);
    for (byte[] p : payloads(Files.readAllBytes(ExampleGoldenTest.golden("rust_sequence_examples.tfrecord")), null)) {
      sequences.observe(p, 0, p.length, "mem", 0);
    }
    assertEquals(
        "struct<frames:array<array<float>>,id:bigint,label:string,tokens:array<array<bigint>>,"
            + "words:array<array<string>>>",
        describe(sequences.schema()));
  }

  @Test
  void floatsAsTextAsRustPrintsThem() {
    assertEquals("0.5", Text.ofFloat(0.5f));
    assertEquals("1", Text.ofFloat(1f));
    assertEquals("-0", Text.ofFloat(-0f));
    assertEquals("1000000000000000000000000000000", Text.ofFloat(1e30f));
    assertEquals("0.1", Text.ofFloat(0.1f));
    assertEquals("inf", Text.ofFloat(Float.POSITIVE_INFINITY));
    assertEquals("NaN", Text.ofFloat(Float.NaN));
  }
}
