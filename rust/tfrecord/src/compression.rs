//! Compression of whole TFRecord files: NONE, GZIP and ZLIB, as TensorFlow's
//! `TFRecordOptions(compression_type=...)` writes them.
//!
//! TensorFlow compresses the framed stream as one gzip or zlib stream, so compression wraps the
//! byte stream under the framing and offsets in errors refer to the decompressed stream.

use std::io::{self, BufReader, Read, Write};
use std::str::FromStr;

use flate2::Compression as Level;

use flate2::bufread::{MultiGzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};

use crate::error::{Error, Result};
use crate::framing::HEADER_LEN;

/// Buffer between a compressed stream and its decompressor.
const BUF: usize = 256 * 1024;

/// The compression of a TFRecord file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Compression {
    /// Plain framed records.
    #[default]
    None,
    /// One gzip stream (RFC 1952), TensorFlow's `"GZIP"`.
    Gzip,
    /// One zlib stream (RFC 1950), TensorFlow's `"ZLIB"`.
    Zlib,
}

impl Compression {
    /// The compression a file name implies: `.gz`/`.gzip` is GZIP, `.zlib`/`.zz` is ZLIB, and
    /// anything else says nothing (`None` is returned, not `Some(Compression::None)`).
    pub fn from_path(path: &str) -> Option<Compression> {
        let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
        if name.ends_with(".gz") || name.ends_with(".gzip") {
            Some(Compression::Gzip)
        } else if name.ends_with(".zlib") || name.ends_with(".zz") {
            Some(Compression::Zlib)
        } else {
            None
        }
    }

    /// The file name extension that sparktrain gives files of this compression (with the dot),
    /// empty for none.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zlib => ".zlib",
        }
    }

    /// Guesses the compression from the first bytes of a file. A valid TFRecord header wins
    /// (its CRC makes a false match about one in four billion); then the gzip magic number; then
    /// a well-formed zlib header. Returns `None` when nothing fits.
    pub fn sniff(prefix: &[u8]) -> Option<Compression> {
        if prefix.len() >= HEADER_LEN && crate::framing::header_is_valid(&prefix[..HEADER_LEN]) {
            return Some(Compression::None);
        }
        if prefix.len() >= 2 && prefix[0] == 0x1f && prefix[1] == 0x8b {
            return Some(Compression::Gzip);
        }
        if prefix.len() >= 2 {
            let (cmf, flg) = (prefix[0], prefix[1]);
            let deflate = cmf & 0x0f == 8 && cmf >> 4 <= 7;
            if deflate && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0 {
                return Some(Compression::Zlib);
            }
        }
        None
    }

    /// Wraps a reader so that it yields the decompressed stream. The reader is buffered here
    /// for the decompressors; uncompressed streams are passed through untouched, since
    /// [`crate::RecordReader`] does its own buffering.
    pub fn decoder<R: Read>(self, reader: R) -> Decoder<R> {
        match self {
            Compression::None => Decoder::Plain(reader),
            // Multi-member decoding accepts files made by concatenating gzip files, which `cat`
            // and Hadoop's append produce; a single-member file decodes the same.
            Compression::Gzip => {
                Decoder::Gzip(MultiGzDecoder::new(BufReader::with_capacity(BUF, Source(reader))))
            }
            Compression::Zlib => {
                Decoder::Zlib(ZlibDecoder::new(BufReader::with_capacity(BUF, Source(reader))))
            }
        }
    }

    /// Wraps a writer so that what is written to it is compressed. The returned writer must be
    /// finished with [`CompressedWriter::finish`] to write the compression trailer.
    pub fn encoder<W: Write>(self, writer: W) -> CompressedWriter<W> {
        // Level 6 is zlib's default and TensorFlow's (`ZlibCompressionOptions::compression_level`
        // defaults to Z_DEFAULT_COMPRESSION).
        match self {
            Compression::None => CompressedWriter::Plain(writer),
            Compression::Gzip => CompressedWriter::Gzip(GzEncoder::new(writer, Level::new(6))),
            Compression::Zlib => CompressedWriter::Zlib(ZlibEncoder::new(writer, Level::new(6))),
        }
    }
}

impl FromStr for Compression {
    type Err = Error;

    /// Parses TensorFlow's names (`""`, `"NONE"`, `"GZIP"`, `"ZLIB"`), case-insensitively, plus
    /// `"gz"`.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "" | "none" | "uncompressed" => Ok(Compression::None),
            "gzip" | "gz" => Ok(Compression::Gzip),
            "zlib" => Ok(Compression::Zlib),
            other => Err(Error::InvalidArgument(format!(
                "unknown compression '{other}' (expected NONE, GZIP or ZLIB)"
            ))),
        }
    }
}

/// A reader that decompresses (or not) what it reads.
///
/// A failure of the compressed file itself (a read of a lost block, a network error) comes out
/// as it was raised; a failure of the decompressor (bad header, corrupt deflate data, a checksum
/// mismatch, a stream that ends early) comes out as an error whose payload is a
/// [`DamagedStream`], so that the framing can report it as damage rather than as I/O.
pub enum Decoder<R: Read> {
    /// No compression.
    Plain(R),
    /// GZIP, any number of members.
    Gzip(MultiGzDecoder<BufReader<Source<R>>>),
    /// ZLIB.
    Zlib(ZlibDecoder<BufReader<Source<R>>>),
}

impl<R: Read> Read for Decoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let result = match self {
            Decoder::Plain(r) => return r.read(buf),
            Decoder::Gzip(d) => d.read(buf),
            Decoder::Zlib(d) => d.read(buf),
        };
        result.map_err(|e| {
            let kind = e.kind();
            if kind == io::ErrorKind::Interrupted {
                return e;
            }
            if !e.get_ref().is_some_and(|inner| inner.is::<SourceError>()) {
                return io::Error::new(kind, DamagedStream(e.to_string()));
            }
            match e.into_inner().map(|inner| inner.downcast::<SourceError>()) {
                Some(Ok(source)) => source.0,
                Some(Err(other)) => io::Error::new(kind, other),
                None => io::Error::from(kind),
            }
        })
    }
}

/// The compressed file under a [`Decoder`]: its errors are marked, so that the decoder can tell
/// them from its own.
pub struct Source<R>(R);

impl<R: Read> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|e| match e.kind() {
            // Passed through the decoder as it is, for the caller to retry.
            io::ErrorKind::Interrupted => e,
            kind => io::Error::new(kind, SourceError(e)),
        })
    }
}

/// An error of the compressed file, carried through the decompressor.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SourceError(io::Error);

/// The decompressor's own failure: the compressed stream is damaged (its reason, e.g. "corrupt
/// deflate stream"), and nothing after the point of damage can be read.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DamagedStream(pub String);

impl DamagedStream {
    /// The damage an I/O error from a [`Decoder`] reports, if it is one.
    pub fn of(error: &io::Error) -> Option<&DamagedStream> {
        error.get_ref().and_then(|inner| inner.downcast_ref::<DamagedStream>())
    }
}

/// A writer that compresses (or not) what it is given.
pub enum CompressedWriter<W: Write> {
    /// No compression.
    Plain(W),
    /// GZIP.
    Gzip(GzEncoder<W>),
    /// ZLIB.
    Zlib(ZlibEncoder<W>),
}

impl<W: Write> CompressedWriter<W> {
    /// Writes the compression trailer and returns the inner writer.
    pub fn finish(self) -> std::io::Result<W> {
        match self {
            CompressedWriter::Plain(w) => Ok(w),
            CompressedWriter::Gzip(e) => e.finish(),
            CompressedWriter::Zlib(e) => e.finish(),
        }
    }

    /// The inner writer.
    pub fn get_ref(&self) -> &W {
        match self {
            CompressedWriter::Plain(w) => w,
            CompressedWriter::Gzip(e) => e.get_ref(),
            CompressedWriter::Zlib(e) => e.get_ref(),
        }
    }
}

impl<W: Write> Write for CompressedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            CompressedWriter::Plain(w) => w.write(buf),
            CompressedWriter::Gzip(e) => e.write(buf),
            CompressedWriter::Zlib(e) => e.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            CompressedWriter::Plain(w) => w.write_all(buf),
            CompressedWriter::Gzip(e) => e.write_all(buf),
            CompressedWriter::Zlib(e) => e.write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            CompressedWriter::Plain(w) => w.flush(),
            CompressedWriter::Gzip(e) => e.flush(),
            CompressedWriter::Zlib(e) => e.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_extensions() {
        assert_eq!("GZIP".parse::<Compression>().unwrap(), Compression::Gzip);
        assert_eq!("".parse::<Compression>().unwrap(), Compression::None);
        assert_eq!("zlib".parse::<Compression>().unwrap(), Compression::Zlib);
        assert!("lz4".parse::<Compression>().is_err());
        assert_eq!(Compression::from_path("a/part-0.tfrecord.gz"), Some(Compression::Gzip));
        assert_eq!(Compression::from_path("x.zlib"), Some(Compression::Zlib));
        assert_eq!(Compression::from_path("x.tfrecord"), None);
    }

    #[test]
    fn sniffs_each_kind() {
        for kind in [Compression::None, Compression::Gzip, Compression::Zlib] {
            let mut w = crate::RecordWriter::new(kind.encoder(Vec::new()));
            w.write_record(b"hello").unwrap();
            let bytes = w.into_inner().unwrap().finish().unwrap();
            assert_eq!(Compression::sniff(&bytes), Some(kind), "{kind:?}");
        }
        assert_eq!(Compression::sniff(b"PAR1...."), None);
    }
}
