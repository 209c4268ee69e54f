// RecordFiles: opens (a split of) a TFRecord file as framed records, choosing the decompression.
package io.sparktrain.spark;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Opens files for reading. The compression is the {@code compression} option when given, else
 * what the name says ({@code .gz}, {@code .gzip}, {@code .zlib}, {@code .zz}), else what the
 * first bytes say, as the Rust reader decides. Only uncompressed files are split: a compressed
 * file's reader of the split at 0 reads the whole stream, any other split of it reads nothing.
 */
final class RecordFiles {
  private RecordFiles() {}

  /** Framed records of one split, and the offset before which its records start. */
  static final class Opened {
    final RecordScanner scanner;
    final long limit;

    Opened(RecordScanner scanner, long limit) {
      this.scanner = scanner;
      this.limit = limit;
    }
  }

  /** Whether files named {@code path} may be split under these options. */
  static boolean splittable(TFRecordOptions options, String path) {
    Compression c = options.compression != null ? options.compression : Compression.fromName(path);
    // Unknown (null) means "look at the first bytes", which only the reader can do; it then
    // reads a compressed file whole from the split at 0 and nothing from the others.
    return c == null || c == Compression.NONE;
  }

  /**
   * Opens the split {@code [start, start + length)} of {@code path}; null when the split holds
   * no record (a later split of a compressed file).
   */
  static Opened open(Path path, Configuration conf, TFRecordOptions options, long start, long length)
      throws IOException {
    String name = path.toString();
    FileSystem fs = path.getFileSystem(conf);
    FSDataInputStream in = fs.open(path);
    try {
      Compression c = options.compression != null ? options.compression : Compression.fromName(name);
      if (c == null) {
        byte[] head = new byte[Framing.HEADER];
        int n = 0;
        while (n < head.length) {
          int got = in.read((long) n, head, n, head.length - n);
          if (got < 0) {
            break;
          }
          n += got;
        }
        Compression sniffed = Compression.sniff(head, 0, n);
        c = sniffed == Compression.GZIP || sniffed == Compression.ZLIB ? sniffed : Compression.NONE;
      }
      if (c != Compression.NONE) {
        if (start > 0) {
          in.close();
          return null;
        }
        RecordScanner s =
            new RecordScanner(c.decompress(in), name, 0, options.skipCorrupt, options.maxRecordBytes);
        return new Opened(s, Long.MAX_VALUE);
      }
      in.seek(start);
      RecordScanner s = new RecordScanner(in, name, start, options.skipCorrupt, options.maxRecordBytes);
      if (start > 0) {
        s.syncForward();
      }
      return new Opened(s, start + length);
    } catch (IOException | RuntimeException e) {
      in.close();
      throw e;
    }
  }
}
