// ScalaFileFormat (Spark 3.5, Scala 2.12): Spark's FileFormat methods that name Scala collections, in Java terms.
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
import scala.collection.JavaConverters;

/**
 * The {@link FileFormat} methods whose signatures name Scala collections, for Scala 2.12 (Spark
 * 3.5), where Spark's {@code Seq} is {@code scala.collection.Seq} and Java converters live in
 * {@code scala.collection.JavaConverters}. See the Spark 4.x file of the same name under {@code
 * src/main/spark4}: the two differ only in these types.
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
      scala.collection.Seq<FileStatus> files) {
    return inferSchemaOf(
        JavaConverters.mapAsJavaMap(options),
        new ArrayList<>(JavaConverters.seqAsJavaList(files)),
        // The session's configuration plus file system options given to the reader.
        spark.sessionState().newHadoopConfWithOptions(options));
  }

  @Override
  public final OutputWriterFactory prepareWrite(
      SparkSession spark, Job job, scala.collection.immutable.Map<String, String> options, StructType dataSchema) {
    return writerFactory(JavaConverters.mapAsJavaMap(options), dataSchema);
  }

  @Override
  public final boolean isSplitable(
      SparkSession spark, scala.collection.immutable.Map<String, String> options, Path path) {
    return splittable(JavaConverters.mapAsJavaMap(options), path);
  }

  @Override
  public final scala.Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> buildReader(
      SparkSession spark,
      StructType dataSchema,
      StructType partitionSchema,
      StructType requiredSchema,
      scala.collection.Seq<Filter> filters,
      scala.collection.immutable.Map<String, String> options,
      Configuration hadoopConf) {
    return readerOf(spark, requiredSchema, JavaConverters.mapAsJavaMap(options), hadoopConf);
  }
}
