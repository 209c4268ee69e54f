// TFRecordFileInputFormat: a Hadoop (mapreduce API) InputFormat that yields each TFRecord of a file as a BytesWritable key.
package io.sparktrain.hadoop;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Locale;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.NullWritable;
import org.apache.hadoop.io.compress.CodecPool;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.io.compress.CompressionCodecFactory;
import org.apache.hadoop.io.compress.Decompressor;
import org.apache.hadoop.io.compress.DefaultCodec;
import org.apache.hadoop.io.compress.GzipCodec;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.RecordReader;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.input.FileSplit;
import org.apache.hadoop.util.ReflectionUtils;

/**
 * Reads TFRecord files: each record becomes one {@link BytesWritable} key with a {@link
 * NullWritable} value.
 *
 * <p>From PySpark:
 *
 * <pre>{@code
 * sc.newAPIHadoopFile(path, "io.sparktrain.hadoop.TFRecordFileInputFormat",
 *     keyClass="org.apache.hadoop.io.BytesWritable",
 *     valueClass="org.apache.hadoop.io.NullWritable").keys()
 * }</pre>
 *
 * <p>Files are never split: records carry no sync markers, and a compressed stream cannot be
 * entered in the middle. The decompressor is chosen as the Rust codec chooses it: first by file
 * extension through Hadoop's {@link CompressionCodecFactory} (plus {@code .zlib} and {@code .zz},
 * the names sparktrain and TensorFlow users give zlib streams), then, when the extension says
 * nothing, from the first bytes (a valid TFRecord header wins over the gzip and zlib magic
 * numbers). Errors name the file and the byte offset in the decompressed stream.
 */
public class TFRecordFileInputFormat extends FileInputFormat<BytesWritable, NullWritable> {
  /** Creates the format; Hadoop and Spark instantiate it by class name. */
  public TFRecordFileInputFormat() {}

  /** Always false: a TFRecord file can only be read from its start. */
  @Override
  protected boolean isSplitable(JobContext context, Path file) {
    return false;
  }

  @Override
  public RecordReader<BytesWritable, NullWritable> createRecordReader(
      InputSplit split, TaskAttemptContext context) {
    return new Reader();
  }

  /**
   * The codec for a file: by extension, else by its first bytes; null for uncompressed.
   * {@code in} must support mark/reset; it is left at its start.
   */
  static CompressionCodec chooseCodec(Configuration conf, Path file, InputStream in)
      throws IOException {
    CompressionCodec codec = new CompressionCodecFactory(conf).getCodec(file);
    if (codec != null) {
      return codec;
    }
    String name = file.getName().toLowerCase(Locale.ROOT);
    // Hadoop's DefaultCodec is a zlib stream (RFC 1950), what TensorFlow writes for "ZLIB";
    // Hadoop only knows it as ".deflate".
    if (name.endsWith(".zlib") || name.endsWith(".zz")) {
      return ReflectionUtils.newInstance(DefaultCodec.class, conf);
    }
    byte[] prefix = new byte[TFRecordIO.HEADER_LENGTH];
    in.mark(prefix.length);
    int got = 0;
    while (got < prefix.length) {
      int k = in.read(prefix, got, prefix.length - got);
      if (k < 0) {
        break;
      }
      got += k;
    }
    in.reset();
    switch (TFRecordIO.sniff(prefix, got)) {
      case GZIP:
        return ReflectionUtils.newInstance(GzipCodec.class, conf);
      case ZLIB:
        return ReflectionUtils.newInstance(DefaultCodec.class, conf);
      default:
        return null;
    }
  }

  /** Reads one whole (unsplit) file. */
  static final class Reader extends RecordReader<BytesWritable, NullWritable> {
    private final BytesWritable key = new BytesWritable();
    private FSDataInputStream fileIn;
    private Decompressor decompressor;
    private boolean compressed;
    private TFRecordIO.Reader records;
    private long fileLength;
    private boolean done;

    @Override
    public void initialize(InputSplit genericSplit, TaskAttemptContext context)
        throws IOException {
      FileSplit split = (FileSplit) genericSplit;
      if (split.getStart() != 0) {
        // isSplitable is false, so FileInputFormat never makes such a split; a hand-made one
        // would silently drop or duplicate records.
        throw new IOException(
            split.getPath() + ": TFRecord files cannot be split (split starts at "
                + split.getStart() + ")");
      }
      Configuration conf = context.getConfiguration();
      Path file = split.getPath();
      FileSystem fs = file.getFileSystem(conf);
      fileLength = fs.getFileStatus(file).getLen();
      fileIn = fs.open(file);
      try {
        BufferedInputStream buffered = new BufferedInputStream(fileIn, 64 * 1024);
        CompressionCodec codec = chooseCodec(conf, file, buffered);
        InputStream in = buffered;
        if (codec != null) {
          compressed = true;
          decompressor = CodecPool.getDecompressor(codec);
          Decompressor pooled = decompressor;
          in =
              DamagedStreamException.decompressing(
                  buffered,
                  source ->
                      pooled == null
                          ? codec.createInputStream(source)
                          : codec.createInputStream(source, pooled));
        }
        records = new TFRecordIO.Reader(in, file.toString());
      } catch (IOException | RuntimeException e) {
        close();
        throw e;
      }
    }

    @Override
    public boolean nextKeyValue() throws IOException {
      if (done || records == null) {
        return false;
      }
      if (!records.next()) {
        done = true;
        return false;
      }
      key.set(records.data(), 0, records.length());
      return true;
    }

    @Override
    public BytesWritable getCurrentKey() {
      return key;
    }

    @Override
    public NullWritable getCurrentValue() {
      return NullWritable.get();
    }

    /** Bytes of the file consumed over its length. */
    @Override
    public float getProgress() throws IOException {
      if (done || fileLength == 0) {
        return 1.0f;
      }
      if (records == null) {
        return 0.0f; // not initialized, or closed early
      }
      // Uncompressed, the reader's offset is exact; compressed, the position in the file is the
      // best measure (a little ahead, by what the decompressor has buffered).
      long consumed = compressed ? fileIn.getPos() : records.offset();
      return Math.min(1.0f, (float) consumed / fileLength);
    }

    @Override
    public void close() throws IOException {
      try {
        if (records != null) {
          records.close();
        } else if (fileIn != null) {
          fileIn.close();
        }
      } finally {
        records = null;
        fileIn = null;
        if (decompressor != null) {
          CodecPool.returnDecompressor(decompressor);
          decompressor = null;
        }
      }
    }
  }
}
