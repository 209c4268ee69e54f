//! A GZIP or ZLIB file damaged in its compressed bytes is damage of the file, reported as
//! [`CorruptionKind::DamagedCompression`] with the path and the offset of the first record lost,
//! and in skip mode the records before the damage are kept and the rest is one skipped region.
//! A failure of the compressed file's own reads stays an I/O error.

use std::io::{self, Read};

use sparktrain_tfrecord::framing::SkippedRegion;
use sparktrain_tfrecord::{Compression, CorruptionKind, Error, ReaderOptions, RecordReader, RecordWriter};

/// Records of distinct, poorly compressible bytes, so that damage half-way through the
/// compressed bytes lands half-way through the records.
fn records() -> Vec<Vec<u8>> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..400)
        .map(|i| {
            (0..100 + i % 7)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        })
        .collect()
}

fn compressed(compression: Compression, records: &[Vec<u8>]) -> Vec<u8> {
    let mut writer = RecordWriter::new(compression.encoder(Vec::new()));
    for record in records {
        writer.write_record(record).unwrap();
    }
    writer.into_inner().unwrap().finish().unwrap()
}

fn read<R: Read>(stream: R, skip_corrupt: bool) -> (Vec<Vec<u8>>, Option<Error>, Vec<SkippedRegion>) {
    let options = ReaderOptions { skip_corrupt, ..Default::default() };
    let mut reader = RecordReader::new(stream, "part-0", options);
    let mut out = Vec::new();
    let mut error = None;
    while let Some(record) = reader.next() {
        match record {
            Ok(payload) => out.push(payload.to_vec()),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    (out, error, reader.skipped().to_vec())
}

/// Stream offset of the record at `index`.
fn offset_of(records: &[Vec<u8>], index: usize) -> u64 {
    records[..index].iter().map(|r| r.len() as u64 + 16).sum()
}

#[test]
fn a_cut_stream_keeps_the_records_before_the_cut() {
    let records = records();
    for compression in [Compression::Gzip, Compression::Zlib] {
        let bytes = compressed(compression, &records);
        // Half the file, and the file less its last bytes (the trailer's checksum and length).
        for cut in [bytes.len() / 2, bytes.len() - 3] {
            let damaged = &bytes[..cut];
            let (read_strict, error, _) = read(compression.decoder(damaged), false);
            let error = error.unwrap_or_else(|| panic!("{compression:?} cut at {cut}: no error"));
            let Error::Corrupt { path, offset, kind, hint } = &error else {
                panic!("{compression:?} cut at {cut}: {error}");
            };
            assert_eq!((path.as_str(), *kind), ("part-0", CorruptionKind::DamagedCompression));
            assert_eq!(*offset, offset_of(&records, read_strict.len()), "the first record lost");
            assert!(hint.contains("decompression failed"), "{error}");
            assert!(read_strict[..] == records[..read_strict.len()], "the records before the cut, unchanged");

            let (kept, error, skipped) = read(compression.decoder(damaged), true);
            assert!(error.is_none(), "{compression:?} cut at {cut}: {error:?}");
            assert!(kept == read_strict, "skip mode keeps exactly the records before the damage");
            assert_eq!(skipped.len(), 1, "{skipped:?}");
            assert_eq!(skipped[0].kind, CorruptionKind::DamagedCompression);
            assert_eq!(skipped[0].offset, offset_of(&records, kept.len()));
        }
        let (kept, _, _) = read(compression.decoder(&bytes[..bytes.len() - 3]), true);
        assert!(kept == records, "{compression:?}: a lost trailer loses no record");
    }
}

#[test]
fn a_corrupt_deflate_block_or_checksum_is_damage() {
    let records = records();
    for compression in [Compression::Gzip, Compression::Zlib] {
        let bytes = compressed(compression, &records);
        // The checksum in the trailer: zlib's Adler-32 ends the stream, gzip's CRC-32 is followed
        // by the length.
        let at = match compression {
            Compression::Gzip => bytes.len() - 8,
            _ => bytes.len() - 1,
        };
        let mut damaged = bytes.clone();
        damaged[at] ^= 0xff;
        let (read_strict, error, _) = read(compression.decoder(&damaged[..]), false);
        assert!(
            matches!(error, Some(Error::Corrupt { kind: CorruptionKind::DamagedCompression, .. })),
            "{compression:?}: {error:?}"
        );
        // gzip checks its CRC after the deflate stream, so every record has been read; zlib's
        // decompressor fails the read that meets its Adler-32, losing what that read decoded.
        assert!(read_strict[..] == records[..read_strict.len()]);
        if compression == Compression::Gzip {
            assert_eq!(read_strict.len(), records.len());
        }
        let (kept, error, skipped) = read(compression.decoder(&damaged[..]), true);
        assert!(error.is_none() && kept == read_strict, "{compression:?}: {error:?}");
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        // The region starts at the first record lost; its length counts only the bytes the
        // decompressor gave out before it failed (none here: the failing read loses its own).
        let region = skipped[0];
        assert_eq!(
            (region.offset, region.kind),
            (offset_of(&records, kept.len()), CorruptionKind::DamagedCompression)
        );
        assert!(region.offset + region.bytes <= offset_of(&records, records.len()), "{region:?}");

        // Garbage where the deflate data starts: no record can be read.
        let mut damaged = bytes.clone();
        let data_start = if compression == Compression::Gzip { 10 } else { 2 };
        for b in &mut damaged[data_start..data_start + 4] {
            *b = 0xff;
        }
        let (kept, error, _) = read(compression.decoder(&damaged[..]), false);
        assert!(kept.is_empty());
        let Some(Error::Corrupt { offset: 0, kind: CorruptionKind::DamagedCompression, .. }) = error else {
            panic!("{compression:?}: {error:?}");
        };
    }
}

/// A compressed file whose own reads fail half-way.
struct FailingFile<'a> {
    bytes: &'a [u8],
    fail_at: usize,
    at: usize,
}

impl Read for FailingFile<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at >= self.fail_at {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "block lost on datanode"));
        }
        let n = buf.len().min(self.fail_at - self.at);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[test]
fn a_failing_read_of_the_compressed_file_stays_an_io_error() {
    let records = records();
    for compression in [Compression::Gzip, Compression::Zlib] {
        let bytes = compressed(compression, &records);
        for skip_corrupt in [false, true] {
            let file = FailingFile { bytes: &bytes, fail_at: bytes.len() / 2, at: 0 };
            let (_, error, skipped) = read(compression.decoder(file), skip_corrupt);
            let Some(Error::Io { source, .. }) = &error else {
                panic!("{compression:?}: {error:?}");
            };
            assert_eq!(source.to_string(), "block lost on datanode");
            assert!(skipped.is_empty(), "a failed read is not damage to skip");
        }
    }
}
