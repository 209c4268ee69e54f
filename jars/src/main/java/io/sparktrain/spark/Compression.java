// Compression: the compression of TFRecord files (none, gzip, zlib), its names and its streams.
package io.sparktrain.spark;

import io.sparktrain.hadoop.DamagedStreamException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.Locale;
import java.util.zip.Deflater;
import java.util.zip.DeflaterOutputStream;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;
import java.util.zip.Inflater;
import java.util.zip.InflaterInputStream;

/**
 * How a whole TFRecord file is compressed: the framed stream as one gzip (RFC 1952) or zlib (RFC
 * 1950) stream, which is what TensorFlow's {@code compression_type="GZIP"/"ZLIB"} and the Rust
 * writer produce. File names follow the Python writer: {@code .tfrecord}, {@code .tfrecord.gz},
 * {@code .tfrecord.zlib}.
 */
public enum Compression {
  NONE(".tfrecord"),
  GZIP(".tfrecord.gz"),
  ZLIB(".tfrecord.zlib");

  private static final int STREAM_BUFFER = 64 * 1024;

  private final String extension;

  Compression(String extension) {
    this.extension = extension;
  }

  /** The extension the writer gives files, with the dots. */
  public String extension() {
    return extension;
  }

  /**
   * The {@code compression} option: none/uncompressed/empty, gzip/gz or zlib, any case; null
   * when absent (then reading goes by each file's name and first bytes).
   *
   * @throws IllegalArgumentException for other values
   */
  public static Compression parse(String value) {
    if (value == null) {
      return null;
    }
    switch (value.toUpperCase(Locale.ROOT)) {
      case "":
      case "NONE":
      case "UNCOMPRESSED":
        return NONE;
      case "GZIP":
      case "GZ":
        return GZIP;
      case "ZLIB":
        return ZLIB;
      default:
        throw new IllegalArgumentException(
            "unknown compression '" + value + "'; use none, gzip or zlib");
    }
  }

  /** What a file name implies, as the Rust reader decides; null when it implies nothing. */
  static Compression fromName(String path) {
    String name = path.substring(path.lastIndexOf('/') + 1).toLowerCase(Locale.ROOT);
    if (name.endsWith(".gz") || name.endsWith(".gzip")) {
      return GZIP;
    }
    if (name.endsWith(".zlib") || name.endsWith(".zz")) {
      return ZLIB;
    }
    return null;
  }

  /**
   * What a stream holds, from its first bytes, in the Rust codec's order: a valid TFRecord
   * header wins ({@link #NONE}; a false match has odds of about 2^-32), then the gzip magic
   * number, then a well-formed zlib header; null when none of them.
   */
  static Compression sniff(byte[] b, int offset, int length) {
    if (length >= Framing.HEADER && new Framing().headerValid(b, offset)) {
      return NONE;
    }
    if (length >= 2 && (b[offset] & 0xff) == 0x1f && (b[offset + 1] & 0xff) == 0x8b) {
      return GZIP;
    }
    if (length >= 2) {
      int cmf = b[offset] & 0xff;
      int flg = b[offset + 1] & 0xff;
      if ((cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && ((cmf << 8) | flg) % 31 == 0) {
        return ZLIB;
      }
    }
    return null;
  }

  /** Wraps a file's output stream; closing the result finishes the compressed stream. */
  OutputStream compress(OutputStream out) throws IOException {
    switch (this) {
      case GZIP:
        return new GZIPOutputStream(out, STREAM_BUFFER);
      case ZLIB:
        return new DeflaterOutputStream(out, new Deflater(Deflater.DEFAULT_COMPRESSION), STREAM_BUFFER) {
          @Override
          public void close() throws IOException {
            // The stream made its own Deflater, so it must free the native memory itself.
            try {
              super.close();
            } finally {
              def.end();
            }
          }
        };
      default:
        return out;
    }
  }

  /**
   * Wraps a file's input stream with the matching decompressor; its failures are {@link
   * DamagedStreamException}s, the file's own read failures pass through as they are.
   */
  InputStream decompress(InputStream in) throws IOException {
    return this == NONE ? in : DamagedStreamException.decompressing(in, this::decompressor);
  }

  private InputStream decompressor(InputStream in) throws IOException {
    switch (this) {
      case GZIP:
        // GZIPInputStream reads concatenated members too, as gzip(1) and flate2 do.
        return new GZIPInputStream(in, STREAM_BUFFER);
      case ZLIB:
        Inflater inflater = new Inflater();
        return new InflaterInputStream(in, inflater, STREAM_BUFFER) {
          @Override
          public void close() throws IOException {
            try {
              super.close();
            } finally {
              inflater.end();
            }
          }
        };
      default:
        return in;
    }
  }
}
