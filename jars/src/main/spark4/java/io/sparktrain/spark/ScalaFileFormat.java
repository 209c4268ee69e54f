// ScalaFileFormat (Spark 4.x, Scala 2.13): Spark's FileFormat methods that name Scala collections, in Java terms.
package io.sparktrain.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.FileFormat;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The {@link FileFormat} methods whose signatures name Scala collections, which differ between
 * Scala 2.13 (Spark 4.x: {@code scala.collection.immutable.Seq}, this file) and Scala 2.12 (Spark
 * 3.5: {@code scala.collection.Seq}, the file of the same name under {@code src/main/spark3.5}).
 * Each turns its arguments into Java collections and calls the Java method of the same meaning,
 * so that {@link TFRecordFileFormat} is one source for both lines.
 */
abstract class ScalaFileFormat implements FileFormat {
  /** {@code inferSchema}, with the session's Hadoop configuration plus {@code options}. */
  abstract Option<StructType> inferSchemaOf(
      Map<String, String> options, List<FileStatus> files, Configuration conf);

  abstract OutputWriterFactory writerFactory(Map<String, String> options, StructType dataSchema);

  abstract boolean splittable(Map<String, String> options, Path path);

  abstract scala.Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> readerOf(
      SparkSession spark, StructType requiredSchema, Map<String, String> options, Configuration hadoopConf);

  @Override
  public final Option<StructType> inferSchema(
      SparkSession spark,
      scala.collection.immutable.Map<String, String> options,
      scala.collection.immutable.Seq<FileStatus> files) {
    return inferSchemaOf(
        CollectionConverters.asJava(options),
        new ArrayList<>(CollectionConverters.asJava(files)),
        hadoopConf(spark, options));
  }

  @Override
  public final OutputWriterFactory prepareWrite(
      SparkSession spark, Job job, scala.collection.immutable.Map<String, String> options, StructType dataSchema) {
    return writerFactory(CollectionConverters.asJava(options), dataSchema);
  }

  @Override
  public final boolean isSplitable(
      SparkSession spark, scala.collection.immutable.Map<String, String> options, Path path) {
    return splittable(CollectionConverters.asJava(options), path);
  }

  @Override
  public final scala.Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> buildReader(
      SparkSession spark,
      StructType dataSchema,
      StructType partitionSchema,
      StructType requiredSchema,
      scala.collection.immutable.Seq<Filter> filters,
      scala.collection.immutable.Map<String, String> options,
      Configuration hadoopConf) {
    return readerOf(spark, requiredSchema, CollectionConverters.asJava(options), hadoopConf);
  }

  private static Configuration hadoopConf(
      SparkSession spark, scala.collection.immutable.Map<String, String> options) {
    if (spark instanceof org.apache.spark.sql.classic.SparkSession) {
      // The session's configuration plus file system options given to the reader.
      return ((org.apache.spark.sql.classic.SparkSession) spark).sessionState().newHadoopConfWithOptions(options);
    }
    Configuration conf = new Configuration(spark.sparkContext().hadoopConfiguration());
    for (Map.Entry<String, String> e : CollectionConverters.asJava(options).entrySet()) {
      conf.set(e.getKey(), e.getValue());
    }
    return conf;
  }
}
