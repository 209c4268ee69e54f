// ExampleGoldenTest: the JVM encoder writes the Rust writer's golden Example/SequenceExample files byte for byte.
package io.sparktrain.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/**
 * The golden files {@code tests/golden/rust_*examples.tfrecord} were written by the Rust codec
 * ({@code tests/golden/make_examples.py}); the same rows ({@link GoldenRows}) through {@link
 * ExampleEncoder} and the writer's framing must give the same bytes.
 */
class ExampleGoldenTest {
  static Path golden(String name) {
    Path dir = Path.of(System.getProperty("golden.dir", "../tests/golden")).toAbsolutePath().normalize();
    Path file = dir.resolve(name);
    assertTrue(Files.exists(file), "missing " + file + "; see tests/golden/README.md");
    return file;
  }

  /** The file the JVM writer makes of {@code rows}: each row encoded and framed. */
  static byte[] encodeFile(StructType schema, RecordType type, InternalRow[] rows) {
    RecordEncoder encoder = RecordEncoder.create(schema, type);
    ProtoBuffer buffer = new ProtoBuffer();
    Framing framing = new Framing();
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (int i = 0; i < rows.length; i++) {
      buffer.pos = Framing.HEADER;
      encoder.encode(rows[i], i, buffer);
      int length = buffer.pos - Framing.HEADER;
      buffer.reserve(Framing.FOOTER);
      out.write(buffer.buf, 0, framing.frame(buffer.buf, length));
    }
    return out.toByteArray();
  }

  private static void assertSameBytes(byte[] expected, byte[] actual) {
    if (!java.util.Arrays.equals(expected, actual)) {
      int at = java.util.Arrays.mismatch(expected, actual);
      HexFormat hex = HexFormat.of();
      int from = Math.max(0, at - 16);
      throw new AssertionError(
          "first difference at byte " + at + " (sizes " + expected.length + " vs " + actual.length + ")\nexpected "
              + hex.formatHex(expected, from, Math.min(expected.length, at + 32)) + "\nactual   "
              + hex.formatHex(actual, from, Math.min(actual.length, at + 32)));
    }
  }

  @Test
  void examplesMatchTheRustWriter() throws IOException {
    byte[] expected = Files.readAllBytes(golden("rust_examples.tfrecord"));
    assertSameBytes(expected, encodeFile(GoldenRows.exampleSchema(), RecordType.EXAMPLE, GoldenRows.exampleRows()));
  }

  @Test
  void sequenceExamplesMatchTheRustWriter() throws IOException {
    byte[] expected = Files.readAllBytes(golden("rust_sequence_examples.tfrecord"));
    assertSameBytes(
        expected, encodeFile(GoldenRows.sequenceSchema(), RecordType.SEQUENCE_EXAMPLE, GoldenRows.sequenceRows()));
  }

  /** Bytes worked out by hand from the Rust encoder's rules, for the shapes one reads at a glance. */
  @Test
  void handEncodedExamples() {
    StructType schema = GoldenRows.schema("a", GoldenRows.array(org.apache.spark.sql.types.DataTypes.LongType),
        "f", org.apache.spark.sql.types.DataTypes.DoubleType, "s", org.apache.spark.sql.types.DataTypes.StringType);
    RecordEncoder encoder = RecordEncoder.create(schema, RecordType.EXAMPLE);
    HexFormat hex = HexFormat.of();
    // a=[300, -1] f=0.5 s="xy": entries in column order; packed int64s; the float as float32.
    assertEquals(
        "0a33"
            + "0a15" + "0a0161" + "1210" + "1a0e" + "0a0c" + "ac02" + "ffffffffffffffffff01"
            + "0a0d" + "0a0166" + "1208" + "1206" + "0a04" + "0000003f"
            + "0a0b" + "0a0173" + "1206" + "0a04" + "0a02" + "7879",
        hex.formatHex(encode(encoder, GoldenRows.row(GoldenRows.longs(300, -1), 0.5, GoldenRows.str("xy")))));
    // a=[] (an int64_list with no packed field), f and s null (no entries).
    assertEquals("0a09" + "0a07" + "0a0161" + "1202" + "1a00",
        hex.formatHex(encode(encoder, GoldenRows.row(GoldenRows.longs(), null, null))));
    // Every column null: the features field is still there, empty.
    assertEquals("0a00", hex.formatHex(encode(encoder, GoldenRows.row(null, null, null))));
  }

  @Test
  void sequenceWithoutContextColumnsHasNoContextField() {
    StructType schema = GoldenRows.schema("t", GoldenRows.array(GoldenRows.array(org.apache.spark.sql.types.DataTypes.LongType)));
    RecordEncoder encoder = RecordEncoder.create(schema, RecordType.SEQUENCE_EXAMPLE);
    HexFormat hex = HexFormat.of();
    assertEquals("", hex.formatHex(encode(encoder, GoldenRows.row((Object) null))));
    // feature_lists { t: [[7], []] }: an empty step is a Feature with an empty int64_list.
    assertEquals("1212" + "0a10" + "0a0174" + "120b" + "0a05" + "1a03" + "0a01" + "07" + "0a02" + "1a00",
        hex.formatHex(encode(encoder, GoldenRows.row(GoldenRows.arrays(GoldenRows.longs(7), GoldenRows.longs())))));
  }

  @Test
  void decimalTextHasExactlyScaleDigits() {
    byte[] out = new byte[64];
    assertEquals("-0.050", new String(out, 0, ValueWriter.DecimalWriter.formatUnscaled(-50, 3, out)));
    assertEquals("1.250", new String(out, 0, ValueWriter.DecimalWriter.formatUnscaled(1250, 3, out)));
    assertEquals("0.000", new String(out, 0, ValueWriter.DecimalWriter.formatUnscaled(0, 3, out)));
    assertEquals("125", new String(out, 0, ValueWriter.DecimalWriter.formatUnscaled(125, 0, out)));
    assertEquals("12300", new String(out, 0, ValueWriter.DecimalWriter.formatUnscaled(123, -2, out)));
    assertEquals("-99999999999999999.9", new String(out, 0,
        ValueWriter.DecimalWriter.formatUnscaled(-999999999999999999L, 1, out)));
  }

  static byte[] encode(RecordEncoder encoder, InternalRow row) {
    ProtoBuffer b = new ProtoBuffer();
    encoder.encode(row, 0, b);
    return java.util.Arrays.copyOf(b.buf, b.pos);
  }

  @Test
  void framingMatchesTheHadoopWriter() throws IOException {
    byte[] payload = GoldenRows.utf8("hello");
    ByteArrayOutputStream viaHadoop = new ByteArrayOutputStream();
    io.sparktrain.hadoop.TFRecordIO.writeRecord(viaHadoop, payload);
    byte[] buf = new byte[32];
    System.arraycopy(payload, 0, buf, Framing.HEADER, payload.length);
    int n = new Framing().frame(buf, payload.length);
    assertArrayEquals(viaHadoop.toByteArray(), java.util.Arrays.copyOf(buf, n));
  }
}
