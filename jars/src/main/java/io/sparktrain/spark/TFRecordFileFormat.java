// TFRecordFileFormat: the Spark SQL file format `tfrecord` (read, write, infer, split), registered by short name.
package io.sparktrain.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * {@code spark.read.format("tfrecord")} and {@code df.write.format("tfrecord")} as a Spark file
 * source, built like Spark's Avro source: Spark does the listing, partition discovery and
 * pruning, column pruning, splitting and the commit protocol; this class turns rows into
 * records and back. Records are byte-identical to the Rust writer's (see {@link ExampleEncoder})
 * and the type table is {@link FeatureTypes}, the same as the Python data source's.
 *
 * <p>Options: {@code recordType}, {@code compression}, {@code skipCorrupt} ({@link
 * TFRecordOptions}). Use {@code format("sparktrain.tfrecord")} ({@code
 * sparktrain.tfrecord.DefaultSource}) where another jar also claims {@code tfrecord}.
 *
 * <p>The same source builds for Spark 4.x and Spark 3.5: {@link ScalaFileFormat}, one file per
 * Spark line, turns the Scala collections of Spark's signatures into Java ones.
 */
public class TFRecordFileFormat extends ScalaFileFormat implements DataSourceRegister, Serializable {
  private static final long serialVersionUID = 1L;

  /** Records read per inference, spread evenly over the files, as the Rust inference does. */
  static final int INFER_MAX_RECORDS = 10_000;

  @Override
  public String shortName() {
    return "tfrecord";
  }

  @Override
  public String toString() {
    return "TFRecord";
  }

  @Override
  Option<StructType> inferSchemaOf(Map<String, String> options, List<FileStatus> inputs, Configuration conf) {
    TFRecordOptions o = TFRecordOptions.parse(options);
    SchemaInference inference = new SchemaInference(o.recordType);
    if (!inference.needsRecords()) {
      return Option.apply(inference.schema());
    }
    if (inputs.isEmpty()) {
      return Option.empty();
    }
    // Sorted so that the sample, and with it the schema, does not depend on the listing order.
    inputs.sort(Comparator.comparing(f -> f.getPath().toString()));
    int perFile = Math.max(1, INFER_MAX_RECORDS / inputs.size());
    try {
      for (FileStatus file : inputs) {
        if (inference.records() >= INFER_MAX_RECORDS) {
          break;
        }
        RecordFiles.Opened opened = RecordFiles.open(file.getPath(), conf, o, 0, file.getLen());
        try (RecordScanner records = opened.scanner) {
          for (int i = 0; i < perFile && records.next(Long.MAX_VALUE); i++) {
            inference.observe(
                records.data(), records.payloadStart(), records.payloadLength(), records.path(), records.recordOffset());
          }
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return Option.apply(inference.schema());
  }

  @Override
  OutputWriterFactory writerFactory(Map<String, String> options, StructType dataSchema) {
    TFRecordOptions o = TFRecordOptions.parse(options);
    // Refused here, on the driver, before any task starts, with the column and its type named.
    FeatureTypes.checkWritable(dataSchema, o.recordType);
    Compression c = o.compression == null ? Compression.NONE : o.compression;
    return new TFRecordOutputWriterFactory(o.recordType, c);
  }

  @Override
  boolean splittable(Map<String, String> options, Path path) {
    return RecordFiles.splittable(TFRecordOptions.parse(options), path.getName());
  }

  @Override
  scala.Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> readerOf(
      SparkSession spark, StructType requiredSchema, Map<String, String> options, Configuration hadoopConf) {
    TFRecordOptions o = TFRecordOptions.parse(options);
    // Fail on the driver, naming the column, rather than in every task.
    if (o.recordType == RecordType.BYTE_ARRAY) {
      FeatureTypes.checkReadable(requiredSchema, o.recordType);
    } else {
      new ExampleDecoder(requiredSchema, o.recordType == RecordType.SEQUENCE_EXAMPLE);
    }
    Broadcast<SerializableHadoopConf> conf =
        spark.sparkContext().broadcast(new SerializableHadoopConf(hadoopConf), ClassTag$.MODULE$.apply(SerializableHadoopConf.class));
    return new ReadFile(conf, o, requiredSchema);
  }

  /**
   * Accepts every type, so that unsupported columns are refused by {@link #prepareWrite} and
   * {@link #buildReader} with the reason (and, for {@code array<array<T>>}, the record type
   * that can hold it) rather than by Spark's generic message.
   */
  @Override
  public boolean supportDataType(DataType dataType) {
    return true;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof TFRecordFileFormat;
  }

  @Override
  public int hashCode() {
    return TFRecordFileFormat.class.hashCode();
  }

  /** The function Spark runs in each task for each file split; serialized with the plan. */
  private static final class ReadFile
      extends AbstractFunction1<PartitionedFile, scala.collection.Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;

    private final Broadcast<SerializableHadoopConf> conf;
    private final TFRecordOptions options;
    private final StructType required;

    ReadFile(Broadcast<SerializableHadoopConf> conf, TFRecordOptions options, StructType required) {
      this.conf = conf;
      this.options = options;
      this.required = required;
    }

    @Override
    public scala.collection.Iterator<InternalRow> apply(PartitionedFile file) {
      return new TFRecordPartitionReader(file, conf.value().get(), options, required);
    }
  }
}
