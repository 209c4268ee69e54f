// DamagedStreamException: a decompressor's own failure, told apart from a failing read of the compressed file.
package io.sparktrain.hadoop;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.util.function.UnaryOperator;

/**
 * The decompressor of a compressed TFRecord file failed: a corrupt block, a bad header or
 * checksum, or an end before the compressed stream's own. Nothing after that point can be read.
 * Readers report it as damage ({@link CorruptionKind#DAMAGED_COMPRESSION}), as the Rust codec
 * does; a failing read of the file itself (a lost block, a network error) stays the {@link
 * IOException} it was.
 */
public final class DamagedStreamException extends IOException {
  private static final long serialVersionUID = 1L;

  private DamagedStreamException(IOException cause) {
    super(cause.getMessage() != null ? cause.getMessage() : cause.toString(), cause);
  }

  /** Makes a decompressing stream over a source stream. */
  @FunctionalInterface
  public interface Opener {
    /**
     * Opens the decompressing stream.
     *
     * @param source the compressed bytes
     * @return the decompressed bytes
     * @throws IOException if the stream's header cannot be read
     */
    InputStream open(InputStream source) throws IOException;
  }

  /**
   * A decompressing stream whose decompressor failures are {@code DamagedStreamException}s and
   * whose source failures are the source's own exceptions.
   *
   * <p>A header the decompressor refuses while opening (GZIP reads its header at once) is
   * damage like any other: the stream opens, and its first read throws it, so that readers
   * report it with the file's other damage (at offset 0, with no records before it).
   *
   * @param source the compressed bytes
   * @param decompressor makes the decompressing stream (which may read a header at once)
   * @return the decompressed bytes
   * @throws IOException as the source fails while opening
   */
  public static InputStream decompressing(InputStream source, Opener decompressor)
      throws IOException {
    InputStream tagged = new Mapped(source, SourceFailure::new);
    try {
      return new Mapped(decompressor.open(tagged), DamagedStreamException::translate);
    } catch (IOException e) {
      IOException failure = translate(e);
      if (failure instanceof DamagedStreamException) {
        return new Failing(tagged, failure);
      }
      throw failure;
    }
  }

  private static IOException translate(IOException e) {
    if (e instanceof SourceFailure) {
      return (IOException) e.getCause();
    }
    if (e instanceof InterruptedIOException) {
      return e;
    }
    return new DamagedStreamException(e);
  }

  /** A failure of the source, carried through the decompressor. */
  private static final class SourceFailure extends IOException {
    private static final long serialVersionUID = 1L;

    SourceFailure(IOException cause) {
      super(cause);
    }
  }

  /** A stream whose every read throws the damage met while opening it. */
  private static final class Failing extends FilterInputStream {
    private final IOException damage;

    Failing(InputStream in, IOException damage) {
      super(in);
      this.damage = damage;
    }

    @Override
    public int read() throws IOException {
      throw damage;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      throw damage;
    }

    @Override
    public long skip(long n) throws IOException {
      throw damage;
    }

    @Override
    public int available() {
      return 0;
    }
  }

  /** A stream whose failures are replaced by what {@code map} makes of them. */
  private static final class Mapped extends FilterInputStream {
    private final UnaryOperator<IOException> map;

    Mapped(InputStream in, UnaryOperator<IOException> map) {
      super(in);
      this.map = map;
    }

    @Override
    public int read() throws IOException {
      try {
        return in.read();
      } catch (IOException e) {
        throw map.apply(e);
      }
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      try {
        return in.read(b, off, len);
      } catch (IOException e) {
        throw map.apply(e);
      }
    }

    @Override
    public long skip(long n) throws IOException {
      try {
        return in.skip(n);
      } catch (IOException e) {
        throw map.apply(e);
      }
    }

    @Override
    public int available() throws IOException {
      try {
        return in.available();
      } catch (IOException e) {
        throw map.apply(e);
      }
    }
  }
}
