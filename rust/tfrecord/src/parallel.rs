//! Decoding one TFRecord stream on several cores.
//!
//! The caller's thread keeps the [`RecordReader`] (the file's order, its offsets, its skip
//! report) and cuts the stream into chunks of raw payloads, and `threads` decoder threads check
//! the payloads' CRCs and turn chunks into record batches: reading and framing stay on one
//! thread, and everything that costs in proportion to the bytes of a record beyond the copy out
//! of the file moves to the decoders. Chunks are smaller than a batch,
//! so that even a file of one or two batches spreads over every thread; the batches handed out
//! are the chunks' rows concatenated back in file order, at most `batch_size` rows as for
//! [`ExampleBatchReader`](crate::ExampleBatchReader), and identical to its batches.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread;

use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::framing::{PayloadCheck, RecordReader};
use crate::record_type::{RecordDecoder, RecordType};

/// Rows per chunk handed to a decoder thread: large enough that the hand-over costs nothing
/// beside decoding, small enough that a 64k-row batch spreads over many threads.
const CHUNK_ROWS: usize = 4096;

/// Raw payloads of consecutive records, the unit of work of a decoder thread.
struct Chunk {
    sequence: u64,
    /// Index in the stream of the first record, for errors.
    first_record: u64,
    data: Vec<u8>,
    ends: Vec<usize>,
    /// Per record, the CRC to check (empty when the reader checked them, in skip mode).
    checks: Vec<PayloadCheck>,
}

type Decoded = (u64, Result<RecordBatch>);

/// Yields batches of at most `batch_size` rows from a [`RecordReader`], decoded on `threads`
/// threads; the same batches as [`ExampleBatchReader`](crate::ExampleBatchReader) would give.
pub struct ParallelBatchReader<R: Read> {
    records: RecordReader<R>,
    schema: SchemaRef,
    batch_size: usize,
    chunk_rows: usize,
    /// Rows still to send for the batch being cut: chunks never straddle two batches.
    batch_left: usize,
    /// `None` once the stream is exhausted (the threads then finish what they hold and exit).
    work: Option<Sender<Chunk>>,
    results: Receiver<Decoded>,
    /// Chunks sent and not yet handed out, at most `2 * threads` so memory stays bounded.
    in_flight: usize,
    limit: usize,
    sent: u64,
    next_out: u64,
    early: BTreeMap<u64, Result<RecordBatch>>,
    /// A read error, raised once the chunks sent before it are handed out, as the serial
    /// reader would raise it after their rows.
    read_error: Option<Error>,
    /// Decoded rows waiting to fill a batch.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    failed: bool,
}

impl<R: Read> ParallelBatchReader<R> {
    /// A reader producing batches of `schema` from `records` of `record_type`, decoding on
    /// `threads` threads (at least 1).
    pub fn new(
        records: RecordReader<R>,
        schema: SchemaRef,
        batch_size: usize,
        record_type: RecordType,
        threads: usize,
    ) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::InvalidArgument("batch_size must be at least 1".into()));
        }
        if threads == 0 {
            return Err(Error::InvalidArgument("threads must be at least 1".into()));
        }
        // Every thread gets a decoder now, so a schema the record type cannot fill fails here.
        let decoders = (0..threads)
            .map(|_| RecordDecoder::new(record_type, schema.clone()))
            .collect::<Result<Vec<_>>>()?;
        let (work, queue) = channel::<Chunk>();
        let (done, results) = channel::<Decoded>();
        let queue = Arc::new(Mutex::new(queue));
        let path = Arc::<str>::from(records.path());
        for decoder in decoders {
            let (queue, done, name) = (queue.clone(), done.clone(), path.clone());
            thread::Builder::new()
                .name("tfrecord-decode".into())
                .spawn(move || decode_chunks(decoder, &queue, &done, &name))
                .map_err(|e| Error::Io { path: path.to_string(), offset: 0, source: e })?;
        }
        Ok(ParallelBatchReader {
            records,
            schema,
            batch_size,
            // A batch is cut into equal chunks of at most CHUNK_ROWS rows.
            chunk_rows: batch_size.div_ceil(batch_size.div_ceil(CHUNK_ROWS)),
            batch_left: batch_size,
            work: Some(work),
            results,
            in_flight: 0,
            limit: 2 * threads,
            sent: 0,
            next_out: 0,
            early: BTreeMap::new(),
            read_error: None,
            pending: Vec::new(),
            pending_rows: 0,
            failed: false,
        })
    }

    /// The underlying record reader (for its skip report and position).
    pub fn records(&self) -> &RecordReader<R> {
        &self.records
    }

    fn stopped(&self) -> Error {
        Error::DecoderStopped { path: self.records.path().to_string() }
    }

    /// Reads the next chunk of payloads and sends it; false at the end of the stream.
    fn send_chunk(&mut self) -> Result<bool> {
        let Some(work) = &self.work else { return Ok(false) };
        let first_record = self.records.records_read();
        let rows = self.chunk_rows.min(self.batch_left);
        let mut chunk = Chunk {
            sequence: self.sent,
            first_record,
            data: Vec::new(),
            ends: Vec::with_capacity(rows),
            checks: Vec::with_capacity(rows),
        };
        while chunk.ends.len() < rows {
            match self.records.next_unverified() {
                None => break,
                Some(Err(e)) => return Err(e),
                Some(Ok((payload, check))) => {
                    chunk.data.extend_from_slice(payload);
                    chunk.ends.push(chunk.data.len());
                    chunk.checks.extend(check);
                }
            }
        }
        if chunk.ends.is_empty() {
            self.work = None;
            return Ok(false);
        }
        let chunk_len = chunk.ends.len();
        if work.send(chunk).is_err() {
            return Err(self.stopped());
        }
        self.batch_left -= chunk_len;
        if self.batch_left == 0 {
            self.batch_left = self.batch_size;
        }
        self.sent += 1;
        self.in_flight += 1;
        Ok(true)
    }

    /// The next chunk's rows in stream order, or `None` when every chunk is handed out.
    fn next_chunk(&mut self) -> Result<Option<RecordBatch>> {
        while self.read_error.is_none() && self.in_flight < self.limit {
            match self.send_chunk() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    self.read_error = Some(e);
                    self.work = None;
                }
            }
        }
        if self.in_flight == 0 {
            return self.read_error.take().map_or(Ok(None), Err);
        }
        let batch = loop {
            if let Some(batch) = self.early.remove(&self.next_out) {
                break batch;
            }
            let (sequence, batch) = self.results.recv().map_err(|_| self.stopped())?;
            self.early.insert(sequence, batch);
        };
        self.next_out += 1;
        self.in_flight -= 1;
        batch.map(Some)
    }

    fn fill(&mut self) -> Result<Option<RecordBatch>> {
        while self.pending_rows < self.batch_size {
            match self.next_chunk()? {
                Some(batch) => {
                    self.pending_rows += batch.num_rows();
                    self.pending.push(batch);
                }
                None => break,
            }
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        let batch = if self.pending.len() == 1 {
            self.pending.pop().expect("one pending batch")
        } else {
            concat_batches(&self.schema, &self.pending).map_err(|source| Error::Arrow {
                context: format!("{}: joining decoded rows", self.records.path()),
                source,
            })?
        };
        self.pending.clear();
        self.pending_rows = 0;
        Ok(Some(batch))
    }
}

impl<R: Read> Iterator for ParallelBatchReader<R> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.fill().transpose();
        if matches!(item, Some(Err(_))) {
            self.failed = true;
            self.work = None;
        }
        item
    }
}

/// A decoder thread: decodes chunks until the reader closes the queue or drops the results.
fn decode_chunks(
    mut decoder: RecordDecoder,
    queue: &Mutex<Receiver<Chunk>>,
    done: &Sender<Decoded>,
    path: &str,
) {
    loop {
        // The lock is held only to take a chunk: the decoding runs unlocked.
        let next = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let Ok(chunk) = next else { return };
        let batch = decode(&mut decoder, &chunk, path);
        if done.send((chunk.sequence, batch)).is_err() {
            return;
        }
    }
}

fn decode(decoder: &mut RecordDecoder, chunk: &Chunk, path: &str) -> Result<RecordBatch> {
    decoder.reserve(chunk.ends.len());
    let mut start = 0;
    for (i, &end) in chunk.ends.iter().enumerate() {
        let payload = &chunk.data[start..end];
        let checked = chunk.checks.get(i).map_or(Ok(()), |check| check.verify(payload, path));
        if let Err(e) = checked.and_then(|()| decoder.push(payload, path, chunk.first_record + i as u64)) {
            // Drop the rows of this chunk decoded so far: the next chunk starts clean.
            let _ = decoder.finish();
            return Err(e);
        }
        start = end;
    }
    decoder.finish()
}
