// TFRecordOutputWriter: Spark's OutputWriter for one TFRecord file: rows -> framed records.
package io.sparktrain.spark;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.OutputWriter;

/**
 * Writes one file of a Spark write job (Spark's commit protocol picks its path, under the task
 * attempt's staging folder). Each row is encoded into one reused buffer after 12 bytes left for
 * the header, framed in place and handed to the stream in one call.
 */
final class TFRecordOutputWriter extends OutputWriter {
  private static final int STREAM_BUFFER = 256 * 1024;

  private final String path;
  private final RecordEncoder encoder;
  private final OutputStream out;
  private final ProtoBuffer buffer = new ProtoBuffer();
  private final Framing framing = new Framing();
  private long rows;

  TFRecordOutputWriter(String path, Configuration conf, RecordEncoder encoder, Compression compression)
      throws IOException {
    this.path = path;
    this.encoder = encoder;
    Path file = new Path(path);
    FileSystem fs = file.getFileSystem(conf);
    OutputStream raw = fs.create(file, false);
    OutputStream stream;
    try {
      stream = compression.compress(raw);
    } catch (IOException | RuntimeException e) {
      raw.close();
      throw e;
    }
    // One write per record goes into this buffer: small records would otherwise cost a call
    // into the deflater or the file system each.
    this.out = new BufferedOutputStream(stream, STREAM_BUFFER);
  }

  @Override
  public void write(InternalRow row) {
    buffer.pos = Framing.HEADER;
    encoder.encode(row, rows, buffer);
    int length = buffer.pos - Framing.HEADER;
    buffer.reserve(Framing.FOOTER);
    int frame = framing.frame(buffer.buf, length);
    try {
      out.write(buffer.buf, 0, frame);
    } catch (IOException e) {
      throw new UncheckedIOException(path + ": writing record " + rows, e);
    }
    rows++;
  }

  @Override
  public void close() {
    try {
      out.close();
    } catch (IOException e) {
      throw new UncheckedIOException(path + ": closing after " + rows + " records", e);
    }
  }

  @Override
  public String path() {
    return path;
  }
}
