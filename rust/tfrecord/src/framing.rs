//! TFRecord framing: a streaming reader and a buffered writer.
//!
//! Each record is `u64 length (LE) | u32 masked CRC-32C of the length bytes | payload |
//! u32 masked CRC-32C of the payload`, exactly as TensorFlow's `RecordWriter` writes it.
//!
//! The reader keeps one buffer for the whole stream and hands out payloads as slices of it, so
//! reading allocates only when a record is larger than any seen before. For decoding on other
//! threads it also hands out runs of consecutive records that own the buffer they were read
//! into ([`RecordReader::next_run`]), so that no payload is copied. With `skip_corrupt` it
//! steps over damaged regions instead of failing: a record whose payload CRC is wrong is skipped
//! exactly (its header is trusted), and after a damaged header it scans forward for the next
//! position that holds a valid header (a false match has odds of about 2^-32 per byte).

use std::io::{ErrorKind, Read, Write};

use crate::compression::DamagedStream;
use crate::crc::{masked_crc32c, masked_length_crc};
use crate::error::{CorruptionKind, Error, Result};

/// Bytes in a record header: the length and its masked CRC.
pub const HEADER_LEN: usize = 12;
/// Bytes after a record's payload: its masked CRC.
pub const FOOTER_LEN: usize = 4;
/// Bytes of framing around each payload.
pub const FRAMING_LEN: usize = HEADER_LEN + FOOTER_LEN;

/// When scanning for the next header after damage, candidate lengths above this are taken as
/// noise rather than read into memory.
const MAX_RESYNC_RECORD_LEN: u64 = 1 << 31;
/// Smallest read from the inner stream.
const READ_CHUNK: usize = 256 * 1024;
/// Buffers of finished runs kept for framing later runs into: about as many as runs are in
/// flight on a many-core reader.
const MAX_SPARE_BUFFERS: usize = 16;

/// True when `header` (12 bytes) holds a length whose masked CRC matches.
pub fn header_is_valid(header: &[u8]) -> bool {
    header.len() >= HEADER_LEN && masked_length_crc(length_bytes(header)) == read_u32(&header[8..12])
}

#[inline]
fn read_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
fn length_bytes(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    a
}

#[inline]
fn read_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(length_bytes(b))
}

/// Appends one framed record to `out`. This is the whole of TFRecord's write side; the writer
/// below only adds buffering.
pub fn frame_record(out: &mut Vec<u8>, payload: &[u8]) {
    let start = out.len();
    out.reserve(payload.len() + FRAMING_LEN);
    out.extend_from_slice(&[0; HEADER_LEN]);
    out.extend_from_slice(payload);
    out.extend_from_slice(&[0; FOOTER_LEN]);
    frame_in_place(&mut out[start..]);
}

/// Fills in the framing of one record laid out in `record`: 12 header bytes, the payload, and 4
/// CRC bytes. Encoders that write payloads in place use this to skip a copy.
pub fn frame_in_place(record: &mut [u8]) {
    let payload_len = record.len() - FRAMING_LEN;
    let len = (payload_len as u64).to_le_bytes();
    record[..8].copy_from_slice(&len);
    record[8..12].copy_from_slice(&masked_length_crc(len).to_le_bytes());
    let crc = masked_crc32c(&record[HEADER_LEN..HEADER_LEN + payload_len]);
    record[HEADER_LEN + payload_len..].copy_from_slice(&crc.to_le_bytes());
}

/// A buffered TFRecord writer over any [`Write`].
///
/// Records are framed into an internal buffer that is handed to the inner writer in large
/// blocks, so small records cost no system call each. Call [`RecordWriter::flush`] or
/// [`RecordWriter::into_inner`] at the end: dropping the writer discards what is still buffered,
/// which is what a failed job wants (no half-written tail).
pub struct RecordWriter<W: Write> {
    inner: W,
    buf: Vec<u8>,
    block: usize,
    records: u64,
    bytes: u64,
}

impl<W: Write> RecordWriter<W> {
    /// A writer that hands blocks of about 1 MiB to `inner`.
    pub fn new(inner: W) -> Self {
        Self::with_block_size(inner, 1 << 20)
    }

    /// A writer that hands blocks of about `block` bytes to `inner`.
    pub fn with_block_size(inner: W, block: usize) -> Self {
        RecordWriter { inner, buf: Vec::with_capacity(block + 64), block, records: 0, bytes: 0 }
    }

    /// Appends one record.
    pub fn write_record(&mut self, payload: &[u8]) -> std::io::Result<()> {
        frame_record(&mut self.buf, payload);
        self.records += 1;
        self.bytes += (payload.len() + FRAMING_LEN) as u64;
        if self.buf.len() >= self.block {
            self.drain()?;
        }
        Ok(())
    }

    /// Appends bytes that already hold `records` complete framed records (see
    /// [`frame_in_place`]).
    pub fn write_framed(&mut self, framed: &[u8], records: u64) -> std::io::Result<()> {
        self.records += records;
        self.bytes += framed.len() as u64;
        if self.buf.is_empty() && framed.len() >= self.block {
            return self.inner.write_all(framed);
        }
        self.buf.extend_from_slice(framed);
        if self.buf.len() >= self.block {
            self.drain()?;
        }
        Ok(())
    }

    fn drain(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.inner.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Hands everything buffered to the inner writer and flushes it.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.drain()?;
        self.inner.flush()
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Framed bytes written so far (before any compression).
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// The inner writer.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// Flushes and returns the inner writer.
    pub fn into_inner(mut self) -> std::io::Result<W> {
        self.flush()?;
        Ok(self.inner)
    }
}

/// The longest record a reader takes by default: far above what TensorFlow jobs store in one
/// record, far below what a damaged or hostile header (a gzip stream of zeros that claims
/// gigabytes) would make a reader hold in memory.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 256 << 20;

/// How a [`RecordReader`] treats damage.
#[derive(Debug, Clone, Copy)]
pub struct ReaderOptions {
    /// Step over damaged records and report them instead of failing.
    pub skip_corrupt: bool,
    /// A record whose header claims more payload bytes than this is damage
    /// ([`CorruptionKind::RecordTooLong`]), refused before any of it is read.
    pub max_record_bytes: u64,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        ReaderOptions { skip_corrupt: false, max_record_bytes: DEFAULT_MAX_RECORD_BYTES }
    }
}

/// A damaged region that a reader in skip mode stepped over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedRegion {
    /// Offset of the region's first byte in the (decompressed) stream.
    pub offset: u64,
    /// Length of the region in bytes. For [`CorruptionKind::DamagedCompression`], the bytes
    /// decompressed before the decompressor failed (a record cut short), not what the damaged
    /// rest of the file would have held, which cannot be known.
    pub bytes: u64,
    /// The damage found at the region's start.
    pub kind: CorruptionKind,
}

/// The payloads of consecutive records in one owned buffer, framed by
/// [`RecordReader::next_run`] for decoding on another thread.
#[derive(Debug)]
pub struct RecordRun {
    data: Vec<u8>,
    /// Each payload's range in `data`.
    payloads: Vec<(usize, usize)>,
    first_record: u64,
    /// Stream offset of `data[0]` while the payloads' CRCs are still to check: `data` then holds
    /// the records as the stream frames them, each payload followed by its CRC.
    unchecked_from: Option<u64>,
}

impl RecordRun {
    /// Records in the run.
    pub fn len(&self) -> usize {
        self.payloads.len()
    }

    /// True when the run holds no record.
    pub fn is_empty(&self) -> bool {
        self.payloads.is_empty()
    }

    /// Index in the stream of the run's first record (records before it that the reader
    /// skipped as damaged not counted), for naming records in errors.
    pub fn first_record(&self) -> u64 {
        self.first_record
    }

    /// The payloads in stream order. Where the reader left a payload's CRC unchecked it is
    /// checked here, and a mismatch is the error the reader would have raised for that record
    /// (`path` names the stream in it).
    pub fn payloads<'a>(&'a self, path: &'a str) -> impl Iterator<Item = Result<&'a [u8]>> + 'a {
        self.payloads.iter().map(move |&(start, end)| {
            let payload = &self.data[start..end];
            if let Some(data_offset) = self.unchecked_from
                && masked_crc32c(payload) != read_u32(&self.data[end..])
            {
                return Err(Error::Corrupt {
                    path: path.to_string(),
                    offset: data_offset + (start - HEADER_LEN) as u64,
                    kind: CorruptionKind::PayloadCrcMismatch,
                    hint: String::new(),
                });
            }
            Ok(payload)
        })
    }
}

/// A streaming TFRecord reader over any [`Read`].
pub struct RecordReader<R: Read> {
    inner: R,
    path: String,
    options: ReaderOptions,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Stream offset of `buf[start]`.
    offset: u64,
    records: u64,
    skipped: Vec<SkippedRegion>,
    /// Set while a run is being framed: the buffer then only grows, so that the ranges of the
    /// run's records stay where they are.
    in_run: bool,
    /// Stream bytes the last run spanned, to size the buffer of the next.
    run_bytes: usize,
    /// Buffers of runs given back by [`RecordReader::recycle`].
    spare: Vec<Vec<u8>>,
    /// An error met after a run's records, raised by the next read of any kind.
    deferred: Option<Error>,
    /// Set when the decompressor failed (the stream then ends where its good bytes end): the
    /// hint of the [`CorruptionKind::DamagedCompression`] reported there.
    broken: Option<String>,
}

impl<R: Read> RecordReader<R> {
    /// A reader of `inner`; `path` names the stream in errors.
    pub fn new(inner: R, path: impl Into<String>, options: ReaderOptions) -> Self {
        RecordReader {
            inner,
            path: path.into(),
            options,
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            records: 0,
            skipped: Vec::new(),
            in_run: false,
            run_bytes: 0,
            spare: Vec::new(),
            deferred: None,
            broken: None,
        }
    }

    /// The name used in errors.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Records returned so far.
    pub fn records_read(&self) -> u64 {
        self.records
    }

    /// Stream offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The damaged regions stepped over so far (skip mode only).
    pub fn skipped(&self) -> &[SkippedRegion] {
        &self.skipped
    }

    /// The next record's payload, `None` at the clean end of the stream. The slice is valid
    /// until the next call.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<&[u8]>> {
        match self.advance(true) {
            Ok(Some((a, b))) => Some(Ok(&self.buf[a..b])),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// The next run of up to `rows` records (at least one), `None` at the clean end of the
    /// stream; fewer than `rows` only where the stream ends or fails after them (the next call
    /// then raises the error, and a call after that retries from the record at fault, as
    /// [`RecordReader::next`] would).
    ///
    /// The run takes the buffer the records were read into, and their payload CRCs are left for
    /// [`RecordRun::payloads`] to check, so that a reader handing runs to other threads keeps
    /// only the framing for itself. In skip mode the reader must check each CRC (to step over
    /// exactly the damaged record) and a damaged region may be long, so the run gets copies of
    /// the payloads instead.
    pub fn next_run(&mut self, rows: usize) -> Result<Option<RecordRun>> {
        // A run of no records would read as the end of the stream.
        let rows = rows.max(1);
        if self.options.skip_corrupt {
            return self.copied_run(rows);
        }
        // Start the run at the front of a buffer sized for what the last run spanned, so that it
        // rarely needs to grow; the bytes already read ahead are the only ones copied.
        let wanted = self.run_buffer_len();
        if self.start > 0 || self.buf.len() < wanted {
            self.replace_buffer(wanted);
        }
        let data_offset = self.offset;
        let first_record = self.records;
        let mut payloads = Vec::with_capacity(rows);
        self.in_run = true;
        let mut failure = None;
        while payloads.len() < rows {
            match self.advance(false) {
                Ok(Some(range)) => payloads.push(range),
                Ok(None) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        self.in_run = false;
        if payloads.is_empty() {
            return failure.map_or(Ok(None), Err);
        }
        self.deferred = failure;
        self.run_bytes = self.start;
        let data = self.replace_buffer(self.run_buffer_len());
        Ok(Some(RecordRun { data, payloads, first_record, unchecked_from: Some(data_offset) }))
    }

    /// Bytes of the buffer a run starts in: what the last run spanned, and room to spare.
    fn run_buffer_len(&self) -> usize {
        self.run_bytes.saturating_add(self.run_bytes / 8) + READ_CHUNK
    }

    /// Gives back the buffer of a run decoded and done with, to frame a later run into: a
    /// buffer in use is faulted in already, where a new one costs a page fault (or zeroing) per
    /// page. A buffer grown far past the usual run (around a huge record) is let go.
    pub fn recycle(&mut self, run: RecordRun) {
        let usual = run.data.len() <= 2 * self.run_buffer_len();
        if run.unchecked_from.is_some() && usual && self.spare.len() < MAX_SPARE_BUFFERS {
            self.spare.push(run.data);
        }
    }

    /// Moves the bytes not yet framed to the front of a buffer of `len` bytes (more if they
    /// need it), a given-back one where there is one, and returns the old one.
    fn replace_buffer(&mut self, len: usize) -> Vec<u8> {
        let ahead = self.available();
        let len = len.max(ahead);
        let mut buf = match self.spare.pop() {
            // Reused as it is: its old bytes are overwritten by reads before they are framed.
            Some(mut buf) => {
                if buf.len() < len {
                    buf.resize(len, 0);
                }
                buf
            }
            None => vec![0; len],
        };
        buf[..ahead].copy_from_slice(&self.buf[self.start..self.end]);
        self.start = 0;
        self.end = ahead;
        std::mem::replace(&mut self.buf, buf)
    }

    /// [`RecordReader::next_run`] in skip mode: the payloads, checked, copied into the run.
    fn copied_run(&mut self, rows: usize) -> Result<Option<RecordRun>> {
        let mut run = RecordRun {
            data: Vec::new(),
            payloads: Vec::with_capacity(rows),
            first_record: self.records,
            unchecked_from: None,
        };
        while run.payloads.len() < rows {
            match self.advance(true) {
                Ok(Some((start, end))) => {
                    let at = run.data.len();
                    run.data.extend_from_slice(&self.buf[start..end]);
                    run.payloads.push((at, run.data.len()));
                }
                Ok(None) => break,
                Err(e) if run.is_empty() => return Err(e),
                Err(e) => {
                    self.deferred = Some(e);
                    break;
                }
            }
        }
        Ok((!run.is_empty()).then_some(run))
    }

    /// Copies every remaining record into a vector (for tests and small files).
    pub fn read_all(&mut self) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        while let Some(r) = self.next() {
            out.push(r?.to_vec());
        }
        Ok(out)
    }

    fn available(&self) -> usize {
        self.end - self.start
    }

    /// Makes at least `n` bytes available from `start`, unless the stream ends first. Returns
    /// whether they are.
    fn fill(&mut self, n: usize) -> Result<bool> {
        if self.available() >= n {
            return Ok(true);
        }
        if !self.in_run && self.start > 0 && self.start.saturating_add(n) > self.buf.len() {
            // Move the live bytes to the front to make room at the back.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        while self.available() < n && !self.eof {
            if self.end == self.buf.len() {
                // Grow only as data arrives, at most doubling: a header that claims a huge
                // length (damage, or a hostile file) must not allocate it up front. Grow by one
                // read at least, which a run (that cannot move its bytes) needs for every record
                // past the buffer's end.
                let grown = self.buf.len().saturating_mul(2).min(self.start.saturating_add(n));
                self.buf.resize(grown.max(self.end + READ_CHUNK), 0);
            }
            let want_end = self.buf.len().min(self.end.saturating_add(READ_CHUNK));
            match self.inner.read(&mut self.buf[self.end..want_end]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if DamagedStream::of(&e).is_some() => {
                    // The bytes decompressed so far are good as far as the framing can tell:
                    // their records are read, and the damage is met where they end.
                    let at = self.offset + self.available() as u64;
                    self.broken = Some(format!(
                        "; decompression failed at byte offset {at} ({e}) and nothing after that \
                         can be read: rewrite the file, or read it with skip_corrupt to keep the \
                         records before it"
                    ));
                    self.eof = true;
                }
                Err(source) => {
                    return Err(Error::Io {
                        path: self.path.clone(),
                        offset: self.offset + self.available() as u64,
                        source,
                    });
                }
            }
        }
        Ok(self.available() >= n)
    }

    /// The stream ends inside a record: cut short where it was (`truncated`), or where the
    /// decompressor failed.
    fn cut_short(&mut self, truncated: CorruptionKind) -> Result<()> {
        match self.broken.clone() {
            Some(hint) => self.damage(CorruptionKind::DamagedCompression, hint),
            None => self.damage(truncated, String::new()),
        }
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    fn corrupt(&self, kind: CorruptionKind, hint: String) -> Error {
        Error::Corrupt { path: self.path.clone(), offset: self.offset, kind, hint }
    }

    /// Steps over `bytes` bytes of damage (skip mode) or fails.
    fn damage(&mut self, kind: CorruptionKind, hint: String) -> Result<()> {
        if !self.options.skip_corrupt {
            return Err(self.corrupt(kind, hint));
        }
        let start = self.offset;
        match kind {
            CorruptionKind::PayloadCrcMismatch => {
                let len = read_u64(&self.buf[self.start..]) as usize;
                self.consume(len + FRAMING_LEN);
            }
            CorruptionKind::TruncatedHeader | CorruptionKind::TruncatedPayload => {
                let rest = self.available();
                self.consume(rest);
            }
            CorruptionKind::DamagedCompression => {
                // The rest of the stream: what was decompressed (a record cut short, or nothing
                // where the damage lies between records), and what cannot be.
                let rest = self.available();
                self.consume(rest);
                self.broken = None;
            }
            CorruptionKind::LengthCrcMismatch
            | CorruptionKind::NotTfRecord
            | CorruptionKind::RecordTooLong => {
                self.consume(1);
                self.resync()?;
            }
        }
        self.skipped.push(SkippedRegion { offset: start, bytes: self.offset - start, kind });
        Ok(())
    }

    /// Moves forward to the next position that holds a valid header, or to the end.
    fn resync(&mut self) -> Result<()> {
        loop {
            if !self.fill(HEADER_LEN)? {
                let rest = self.available();
                self.consume(rest);
                return Ok(());
            }
            let window = &self.buf[self.start..self.end];
            let found = (0..=window.len() - HEADER_LEN).find(|&i| {
                let h = &window[i..i + HEADER_LEN];
                header_is_valid(h) && read_u64(h) <= self.options.max_record_bytes.min(MAX_RESYNC_RECORD_LEN)
            });
            match found {
                Some(i) => {
                    self.consume(i);
                    return Ok(());
                }
                None => {
                    let skip = window.len() - (HEADER_LEN - 1);
                    self.consume(skip);
                }
            }
        }
    }

    /// Finds the next good record and returns its payload's range in `buf`; its payload CRC is
    /// checked when `verify`.
    fn advance(&mut self, verify: bool) -> Result<Option<(usize, usize)>> {
        if let Some(error) = self.deferred.take() {
            return Err(error);
        }
        loop {
            if !self.fill(HEADER_LEN)? {
                if self.available() == 0 && self.broken.is_none() {
                    return Ok(None);
                }
                self.cut_short(CorruptionKind::TruncatedHeader)?;
                continue;
            }
            let header = &self.buf[self.start..self.start + HEADER_LEN];
            if !header_is_valid(header) {
                if self.offset == 0 && self.records == 0 {
                    let hint = match crate::Compression::sniff(header) {
                        Some(c) if c != crate::Compression::None => {
                            format!("; the file looks {c:?}-compressed: read it with that compression")
                        }
                        _ => String::new(),
                    };
                    self.damage(CorruptionKind::NotTfRecord, hint)?;
                } else {
                    self.damage(CorruptionKind::LengthCrcMismatch, String::new())?;
                }
                continue;
            }
            let len = read_u64(header);
            if len > self.options.max_record_bytes {
                let hint = format!(
                    "; its header claims {len} bytes, above the limit of {} (max_record_bytes)",
                    self.options.max_record_bytes
                );
                self.damage(CorruptionKind::RecordTooLong, hint)?;
                continue;
            }
            let total = usize::try_from(len)
                .ok()
                .and_then(|l| l.checked_add(FRAMING_LEN))
                .ok_or_else(|| self.corrupt(CorruptionKind::TruncatedPayload, String::new()))?;
            if !self.fill(total)? {
                self.cut_short(CorruptionKind::TruncatedPayload)?;
                continue;
            }
            let payload = self.start + HEADER_LEN..self.start + total - FOOTER_LEN;
            let stored = read_u32(&self.buf[payload.end..]);
            if verify && masked_crc32c(&self.buf[payload.clone()]) != stored {
                self.damage(CorruptionKind::PayloadCrcMismatch, String::new())?;
                continue;
            }
            self.consume(total);
            self.records += 1;
            return Ok(Some((payload.start, payload.end)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(records: &[&[u8]]) -> Vec<u8> {
        let mut w = RecordWriter::new(Vec::new());
        for r in records {
            w.write_record(r).unwrap();
        }
        w.into_inner().unwrap()
    }

    fn read(bytes: &[u8], skip: bool) -> (Result<Vec<Vec<u8>>>, Vec<SkippedRegion>) {
        let mut r =
            RecordReader::new(bytes, "mem", ReaderOptions { skip_corrupt: skip, ..Default::default() });
        let out = r.read_all();
        (out, r.skipped().to_vec())
    }

    fn corrupt_kind(bytes: &[u8]) -> (CorruptionKind, u64) {
        match read(bytes, false).0 {
            Err(Error::Corrupt { kind, offset, .. }) => (kind, offset),
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    const RECORDS: [&[u8]; 3] = [b"first", b"", b"third record"];

    #[test]
    fn round_trip_including_empty_record() {
        let bytes = file_of(&RECORDS);
        let payloads: usize = RECORDS.iter().map(|r| r.len()).sum();
        assert_eq!(bytes.len(), payloads + 3 * FRAMING_LEN);
        let (out, skipped) = read(&bytes, false);
        assert_eq!(out.unwrap(), RECORDS.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
        assert!(skipped.is_empty());
    }

    #[test]
    fn records_larger_than_the_buffer() {
        let big = vec![7u8; 3 * READ_CHUNK + 5];
        let bytes = file_of(&[b"a", &big, b"b"]);
        let out = read(&bytes, false).0.unwrap();
        assert_eq!(out[1], big);
        assert_eq!(out[2], b"b");
    }

    /// Every single-bit flip and every truncation point of a small file gives the expected error
    /// kind at the damaged record's offset; skip mode recovers every undamaged record.
    #[test]
    fn every_bit_flip_and_truncation() {
        let bytes = file_of(&RECORDS);
        let starts = [0u64, 21, 37];
        let record_of = |pos: usize| starts.iter().rposition(|&s| s as usize <= pos).unwrap();
        for pos in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[pos] ^= 1 << bit;
                let rec = record_of(pos);
                let within = pos - starts[rec] as usize;
                let payload_len = RECORDS[rec].len();
                let expected = if within < HEADER_LEN {
                    if rec == 0 { CorruptionKind::NotTfRecord } else { CorruptionKind::LengthCrcMismatch }
                } else {
                    CorruptionKind::PayloadCrcMismatch
                };
                let (kind, offset) = corrupt_kind(&damaged);
                assert_eq!((kind, offset), (expected, starts[rec]), "flip at {pos} bit {bit}");
                let (out, skipped) = read(&damaged, true);
                let out = out.unwrap();
                let intact: Vec<Vec<u8>> =
                    RECORDS.iter().enumerate().filter(|(i, _)| *i != rec).map(|(_, r)| r.to_vec()).collect();
                assert_eq!(out, intact, "skip mode after flip at {pos} bit {bit}");
                assert_eq!(skipped.len(), 1);
                assert_eq!(skipped[0].offset, starts[rec]);
                assert_eq!(skipped[0].bytes as usize, payload_len + FRAMING_LEN);
            }
        }
        for cut in 1..bytes.len() {
            let rec = record_of(cut);
            let within = cut - starts[rec] as usize;
            if within == 0 {
                // A cut on a record boundary is a shorter, valid file.
                assert_eq!(read(&bytes[..cut], false).0.unwrap().len(), rec);
                continue;
            }
            let expected = if within < HEADER_LEN {
                CorruptionKind::TruncatedHeader
            } else {
                CorruptionKind::TruncatedPayload
            };
            assert_eq!(corrupt_kind(&bytes[..cut]), (expected, starts[rec]), "cut at {cut}");
            let (out, skipped) = read(&bytes[..cut], true);
            assert_eq!(out.unwrap().len(), rec);
            assert_eq!(
                skipped,
                vec![SkippedRegion {
                    offset: starts[rec],
                    bytes: (cut as u64) - starts[rec],
                    kind: expected
                }]
            );
        }
    }

    #[test]
    fn not_a_tfrecord_file_names_the_compression() {
        let mut w = RecordWriter::new(crate::Compression::Gzip.encoder(Vec::new()));
        w.write_record(b"x").unwrap();
        let gz = w.into_inner().unwrap().finish().unwrap();
        let err = read(&gz, false).0.unwrap_err().to_string();
        assert!(err.contains("not a TFRecord file") && err.contains("Gzip"), "{err}");
    }

    /// A header with a valid CRC that claims an enormous length is refused as too long,
    /// without trying to allocate the claimed size (found by fuzzing).
    #[test]
    fn huge_claimed_length_allocates_nothing_big() {
        for claimed in [u64::MAX - 20, 1 << 60, 1 << 40, (1 << 31) + 5] {
            let len = claimed.to_le_bytes();
            let mut bytes = len.to_vec();
            bytes.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
            bytes.extend_from_slice(b"short payload");
            let (out, skipped) = read(&bytes, true);
            assert!(out.unwrap().is_empty());
            assert_eq!(skipped[0].kind, CorruptionKind::RecordTooLong, "{claimed}");
            let (kind, offset) = corrupt_kind(&bytes);
            assert_eq!((kind, offset), (CorruptionKind::RecordTooLong, 0));
        }
    }

    /// A record longer than `max_record_bytes` is refused before its payload is read; in
    /// skip mode the reader steps over it and goes on with the next record.
    #[test]
    fn a_record_over_the_limit_is_refused_or_skipped() {
        let bytes = file_of(&[b"first", &[7u8; 5000], b"third"]);
        let options = |skip_corrupt| ReaderOptions { skip_corrupt, max_record_bytes: 1000 };
        let mut strict = RecordReader::new(&bytes[..], "mem", options(false));
        assert_eq!(strict.next().unwrap().unwrap(), b"first");
        match strict.next().unwrap().unwrap_err() {
            Error::Corrupt { kind, offset, hint, .. } => {
                assert_eq!((kind, offset), (CorruptionKind::RecordTooLong, 5 + FRAMING_LEN as u64));
                assert!(hint.contains("claims 5000 bytes") && hint.contains("max_record_bytes"), "{hint}");
            }
            other => panic!("{other:?}"),
        }
        let mut skipping = RecordReader::new(&bytes[..], "mem", options(true));
        let mut records = Vec::new();
        while let Some(record) = skipping.next() {
            records.push(record.unwrap().to_vec());
        }
        assert_eq!(records, vec![b"first".to_vec(), b"third".to_vec()]);
        assert_eq!(skipping.skipped()[0].kind, CorruptionKind::RecordTooLong);
        assert_eq!(skipping.skipped()[0].bytes, 5000 + FRAMING_LEN as u64);
    }

    #[test]
    fn garbage_is_skipped_whole() {
        let garbage = vec![0xabu8; 5000];
        let (out, skipped) = read(&garbage, true);
        assert!(out.unwrap().is_empty());
        assert_eq!(skipped.iter().map(|s| s.bytes).sum::<u64>(), 5000);
    }

    #[test]
    fn resync_finds_records_after_garbage() {
        let mut bytes = file_of(&[b"one"]);
        bytes.extend_from_slice(&[0x55; 1000]);
        bytes.extend(file_of(&[b"two", b"three"]));
        let (out, skipped) = read(&bytes, true);
        assert_eq!(out.unwrap(), vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
        assert_eq!(
            skipped,
            vec![SkippedRegion { offset: 19, bytes: 1000, kind: CorruptionKind::LengthCrcMismatch }]
        );
    }
}
