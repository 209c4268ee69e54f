// DefaultSource: format("sparktrain.tfrecord"), the name of sparktrain's TFRecord format that no other jar claims.
package sparktrain.tfrecord;

import io.sparktrain.spark.TFRecordFileFormat;

/**
 * sparktrain's TFRecord file format under the name {@code sparktrain.tfrecord}: Spark resolves a
 * format name {@code x} to the class {@code x.DefaultSource} when no registered short name
 * matches, so {@code format("sparktrain.tfrecord")} always reaches this class, even where another
 * library's jar (LinkedIn's spark-tfrecord) also registers the short name {@code tfrecord}. It is
 * deliberately not listed in {@code META-INF/services}, which would register {@code tfrecord}
 * twice.
 */
public class DefaultSource extends TFRecordFileFormat {
  private static final long serialVersionUID = 1L;
}
