// FeatureMaps: walks the feature maps of a serialized Example or SequenceExample, entry by entry.
package io.sparktrain.spark;

/**
 * The one walk over a record's feature maps that decoding ({@link ExampleDecoder}) and schema
 * inference ({@link SchemaInference}) share, so that both read the same wire layout the same way:
 * an Example's {@code Features} (field 1), and for a SequenceExample also its {@code
 * FeatureLists} (field 2); each map entry's key (field 1) is the feature's name and its value
 * (field 2) the {@code Feature} or {@code FeatureList} body, left unparsed for the visitor.
 */
final class FeatureMaps {
  private FeatureMaps() {}

  /** Receives the entries of a record's feature maps, in record order. */
  interface Visitor {
    /**
     * One map entry: the name is {@code b[nameStart, nameStart + nameLength)}, the value {@code
     * b[valueStart, valueStart + valueLength)}; a missing key or value is empty, as protocol
     * buffers default them. Repeated names come once per entry: the visitor lets the last win.
     *
     * @param featureList whether the entry is a {@code FeatureList} (else a {@code Feature})
     */
    void entry(
        boolean featureList, byte[] b, int nameStart, int nameLength, int valueStart, int valueLength)
        throws Wire.WireException;
  }

  /** The message name for errors: {@code tf.train.Example} or {@code tf.train.SequenceExample}. */
  static String messageName(boolean sequence) {
    return sequence ? "tf.train.SequenceExample" : "tf.train.Example";
  }

  /** A record that is not a valid message, named by file and byte offset as the Rust codec does. */
  static BadRecordException invalid(String path, long recordOffset, boolean sequence, Wire.WireException e) {
    return new BadRecordException(
        path, recordOffset, null, "is not a valid " + messageName(sequence) + ": " + e.getMessage());
  }

  /**
   * Calls {@code visitor} for every entry of the record {@code b[offset, offset + length)}'s
   * features, and with {@code sequence} its feature lists; other fields are skipped.
   */
  static void walk(byte[] b, int offset, int length, boolean sequence, Visitor visitor)
      throws Wire.WireException {
    Wire.Cursor record = new Wire.Cursor(b, offset, length);
    for (int map; (map = record.nextField(sequence ? 2 : 1)) != 0; ) {
      Wire.Cursor entries = record.body();
      while (entries.nextField(1) != 0) {
        Wire.Cursor entry = entries.body();
        int nameStart = 0;
        int nameLength = 0;
        int valueStart = 0;
        int valueLength = 0;
        for (int field; (field = entry.nextField(2)) != 0; ) {
          Wire.Cursor body = entry.body();
          if (field == 1) {
            nameStart = body.pos;
            nameLength = body.remaining();
          } else {
            valueStart = body.pos;
            valueLength = body.remaining();
          }
        }
        visitor.entry(map == 2, b, nameStart, nameLength, valueStart, valueLength);
      }
    }
  }
}
