// RecordEncoder: turns one InternalRow into one record payload (Example, SequenceExample or raw bytes).
package io.sparktrain.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Encodes rows of one schema as record payloads of one {@link RecordType}, appending each to a
 * reused {@link ProtoBuffer}: no per-row objects, no protobuf library.
 */
abstract class RecordEncoder {
  /**
   * Appends the payload for {@code row} at {@code out.pos}.
   *
   * @param rowIndex the row's index in the file, for errors
   * @throws IllegalArgumentException naming the column and row for a value that cannot be stored
   */
  abstract void encode(InternalRow row, long rowIndex, ProtoBuffer out);

  /** The encoder for {@code schema}, after {@link FeatureTypes#checkWritable} accepted it. */
  static RecordEncoder create(StructType schema, RecordType recordType) {
    FeatureTypes.checkWritable(schema, recordType);
    if (recordType == RecordType.BYTE_ARRAY) {
      return new ByteArrayEncoder(schema.fields()[0].name(), schema.fields()[0].dataType() instanceof BinaryType);
    }
    return new ExampleEncoder(schema, recordType == RecordType.SEQUENCE_EXAMPLE);
  }

  /** ByteArray: the one binary or string column's value is the record. */
  static final class ByteArrayEncoder extends RecordEncoder {
    private final String column;
    private final boolean binary;

    ByteArrayEncoder(String column, boolean binary) {
      this.column = column;
      this.binary = binary;
    }

    @Override
    void encode(InternalRow row, long rowIndex, ProtoBuffer out) {
      if (row.isNullAt(0)) {
        throw new IllegalArgumentException(
            "column '" + column + "', row " + rowIndex + ": a null cannot be written as a raw record");
      }
      if (binary) {
        byte[] b = row.getBinary(0);
        out.reserve(b.length);
        out.put(b);
      } else {
        UTF8String s = row.getUTF8String(0);
        out.reserve(s.numBytes());
        s.writeToMemory(out.buf, Platform.BYTE_ARRAY_OFFSET + out.pos);
        out.pos += s.numBytes();
      }
    }
  }
}
