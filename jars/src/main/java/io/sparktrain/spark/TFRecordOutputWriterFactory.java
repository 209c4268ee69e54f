// TFRecordOutputWriterFactory: made on the driver by prepareWrite, shipped to tasks, opens one writer per file.
package io.sparktrain.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.types.StructType;

/** What every write task needs: the record type and the compression; serialized to the tasks. */
final class TFRecordOutputWriterFactory extends OutputWriterFactory {
  private static final long serialVersionUID = 1L;

  private final RecordType recordType;
  private final Compression compression;

  TFRecordOutputWriterFactory(RecordType recordType, Compression compression) {
    this.recordType = recordType;
    this.compression = compression;
  }

  @Override
  public String getFileExtension(TaskAttemptContext context) {
    return compression.extension();
  }

  @Override
  public OutputWriter newInstance(String path, StructType dataSchema, TaskAttemptContext context) {
    try {
      return new TFRecordOutputWriter(
          path, context.getConfiguration(), RecordEncoder.create(dataSchema, recordType), compression);
    } catch (IOException e) {
      throw new UncheckedIOException(path + ": cannot create the file", e);
    }
  }
}
