// TFRecordPartitionReader: the rows of one file split, as Spark's file scan asks for them.
package io.sparktrain.spark;

import java.io.Closeable;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Arrays;
import java.util.NoSuchElementException;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.SpecificInternalRow;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.TaskCompletionListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Iterates the rows of one {@link PartitionedFile}: its records (see {@link RecordScanner} for
 * which records a split owns) decoded into the requested columns only. One row object is reused:
 * Spark's {@code buildReaderWithPartitionValues} copies each row into an {@code UnsafeRow} (with
 * the partition values) before asking for the next. With no column requested (a count) the
 * records are framed and checked but not decoded.
 */
final class TFRecordPartitionReader extends scala.collection.AbstractIterator<InternalRow>
    implements Closeable {
  private static final Logger LOG = LoggerFactory.getLogger(TFRecordPartitionReader.class);

  private final RecordScanner scanner;
  private final long limit;
  private final RecordType recordType;
  private final ExampleDecoder decoder;
  private final boolean decode;
  private final InternalRow row;
  private boolean ready;
  private boolean done;

  TFRecordPartitionReader(
      PartitionedFile file, Configuration conf, TFRecordOptions options, StructType required) {
    this.recordType = options.recordType;
    this.decode = required.fields().length > 0;
    this.decoder =
        decode && recordType != RecordType.BYTE_ARRAY
            ? new ExampleDecoder(required, recordType == RecordType.SEQUENCE_EXAMPLE)
            : null;
    this.row = new SpecificInternalRow(required);
    RecordFiles.Opened opened;
    try {
      opened = RecordFiles.open(file.toPath(), conf, options, file.start(), file.length());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    this.scanner = opened == null ? null : opened.scanner;
    this.limit = opened == null ? 0 : opened.limit;
    this.done = scanner == null;
    TaskContext task = TaskContext.get();
    if (task != null && scanner != null) {
      task.addTaskCompletionListener((TaskCompletionListener) context -> closeQuietly());
    }
  }

  @Override
  public boolean hasNext() {
    if (ready) {
      return true;
    }
    if (done) {
      return false;
    }
    try {
      if (!scanner.next(limit)) {
        close();
        return false;
      }
    } catch (IOException e) {
      closeQuietly();
      throw new UncheckedIOException(e);
    }
    if (decode) {
      byte[] b = scanner.data();
      if (decoder != null) {
        decoder.decode(b, scanner.payloadStart(), scanner.payloadLength(), row, scanner.path(), scanner.recordOffset());
      } else {
        int from = scanner.payloadStart();
        row.update(0, Arrays.copyOfRange(b, from, from + scanner.payloadLength()));
      }
    }
    ready = true;
    return true;
  }

  @Override
  public InternalRow next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    ready = false;
    return row;
  }

  @Override
  public void close() throws IOException {
    if (done) {
      return;
    }
    done = true;
    if (!scanner.skipped().isEmpty()) {
      long bytes = scanner.skipped().stream().mapToLong(s -> s.bytes).sum();
      LOG.warn(
          "skipped {} corrupt regions ({} bytes) in {}: {}",
          scanner.skipped().size(),
          bytes,
          scanner.path(),
          scanner.skipped().subList(0, Math.min(10, scanner.skipped().size())));
    }
    scanner.close();
  }

  private void closeQuietly() {
    try {
      close();
    } catch (IOException e) {
      LOG.debug("closing {}", scanner.path(), e);
    }
  }
}
