//! Decoding one TFRecord stream on several cores.
//!
//! The caller's thread keeps the [`RecordReader`] (the file's order, its offsets, its skip
//! report) and frames the stream into runs of records, each owning the buffer it was read into
//! ([`RecordReader::next_run`]), so that it copies no payload. `threads` decoder threads check
//! the payloads' CRCs, decode each run into rows, and join the runs of a batch: the thread that
//! decodes a batch's last run concatenates it. The caller's thread is left with reading and
//! framing, the part that cannot be split.
//!
//! Runs are smaller than a batch, so that even a file of one or two batches spreads over every
//! thread. The batches handed out are those of [`ExampleBatchReader`](crate::ExampleBatchReader),
//! errors included: the same batches, then the same error naming the same record.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::mpsc::{Receiver, Sender, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::framing::{RecordReader, RecordRun};
use crate::record_type::{RecordDecoder, RecordType};

/// Rows per run handed to a decoder thread: large enough that the hand-over costs nothing
/// beside decoding, small enough that a 64k-row batch spreads over many threads.
const RUN_ROWS: usize = 4096;

/// A run to decode: part `part` of batch `batch`.
struct Work {
    batch: u64,
    part: usize,
    run: RecordRun,
}

/// What decoder threads report: a batch joined (its number, how many runs it took, its rows),
/// or a run decoded, whose buffer the reader can frame another run into.
enum Done {
    Joined(u64, usize, Result<RecordBatch>),
    Decoded(RecordRun),
}

/// Yields batches of at most `batch_size` rows from a [`RecordReader`], decoded on `threads`
/// threads; the same batches as [`ExampleBatchReader`](crate::ExampleBatchReader) would give.
pub struct ParallelBatchReader<R: Read> {
    records: RecordReader<R>,
    batch_size: usize,
    run_rows: usize,
    /// `None` once the stream is exhausted or failed (the threads then finish what they hold
    /// and exit).
    work: Option<SyncSender<Work>>,
    results: Receiver<Done>,
    assembly: Arc<Assembly>,
    /// The batch being cut (every batch before it has all its runs sent), its runs so far, and
    /// the rows it still takes.
    cutting: u64,
    parts: usize,
    batch_left: usize,
    /// Runs sent for batches not yet handed out, at most `limit` (a batch's runs and two per
    /// thread): with the queue's bound on runs not yet decoded, this bounds the memory held.
    runs_held: usize,
    limit: usize,
    next_out: u64,
    early: BTreeMap<u64, (usize, Result<RecordBatch>)>,
    /// A read error and the batch it ends, raised in that batch's place (unless one of the
    /// batch's records before it fails to decode: that error comes first, as serially).
    read_error: Option<(u64, Error)>,
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
        let (work, queue) = sync_channel::<Work>(threads);
        let (done, results) = std::sync::mpsc::channel::<Done>();
        let queue = Arc::new(Mutex::new(queue));
        let assembly =
            Arc::new(Assembly { open: Mutex::new(HashMap::new()), schema, path: records.path().into() });
        for decoder in decoders {
            let (queue, done, assembly) = (queue.clone(), done.clone(), assembly.clone());
            thread::Builder::new()
                .name("tfrecord-decode".into())
                .spawn(move || decode_runs(decoder, &queue, &assembly, &done))
                .map_err(|e| Error::Io { path: records.path().to_string(), offset: 0, source: e })?;
        }
        // A batch is cut into equal runs of at most RUN_ROWS rows.
        let run_rows = batch_size.div_ceil(batch_size.div_ceil(RUN_ROWS));
        Ok(ParallelBatchReader {
            records,
            batch_size,
            run_rows,
            work: Some(work),
            results,
            assembly,
            cutting: 0,
            parts: 0,
            batch_left: batch_size,
            runs_held: 0,
            // The batch handed out next, whole, and two runs per thread beyond it: the threads
            // stay busy across a batch's end while the caller takes it.
            limit: batch_size.div_ceil(run_rows) + 2 * threads,
            next_out: 0,
            early: BTreeMap::new(),
            read_error: None,
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

    /// Frames the next run of the batch being cut and sends it; at the end of the stream or at
    /// a read error, closes the batch and stops cutting.
    fn cut_run(&mut self) -> Result<()> {
        let Some(work) = &self.work else { return Ok(()) };
        let run = match self.records.next_run(self.run_rows.min(self.batch_left)) {
            Ok(Some(run)) => run,
            Ok(None) => {
                self.close_stream();
                return Ok(());
            }
            Err(e) => {
                self.read_error = Some((self.cutting, e));
                self.close_stream();
                return Ok(());
            }
        };
        self.batch_left -= run.len();
        // Blocks while every thread has a run queued: that bounds the bytes read ahead.
        if work.send(Work { batch: self.cutting, part: self.parts, run }).is_err() {
            return Err(self.stopped());
        }
        self.parts += 1;
        self.runs_held += 1;
        if self.batch_left == 0 {
            self.close_batch();
        }
        Ok(())
    }

    fn close_stream(&mut self) {
        self.close_batch();
        self.work = None;
    }

    /// Tells the assembly how many runs the batch being cut has (joining it here if they are
    /// all decoded already) and moves on to the next batch.
    fn close_batch(&mut self) {
        if self.parts > 0 {
            if let Some(parts) = self.assembly.cut(self.cutting, self.parts) {
                self.early.insert(self.cutting, (self.parts, self.assembly.join(parts)));
            }
            self.cutting += 1;
            self.parts = 0;
        }
        self.batch_left = self.batch_size;
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            while let Ok(done) = self.results.try_recv() {
                self.take(done);
            }
            if let Some((runs, rows)) = self.early.remove(&self.next_out) {
                self.runs_held -= runs;
                let batch = self.next_out;
                self.next_out += 1;
                return match self.read_error.take_if(|(at, _)| *at == batch) {
                    // The batch's own decode error is the earlier one.
                    Some((_, error)) => rows.and(Err(error)),
                    None => rows.map(Some),
                };
            }
            if self.work.is_some() && self.runs_held < self.limit {
                self.cut_run()?;
                continue;
            }
            if self.next_out == self.cutting {
                // Every batch cut is handed out: the stream is done, or failed before a run of
                // the next batch.
                return self.read_error.take().map_or(Ok(None), |(_, error)| Err(error));
            }
            let done = self.results.recv().map_err(|_| self.stopped())?;
            self.take(done);
        }
    }

    fn take(&mut self, done: Done) {
        match done {
            Done::Joined(batch, runs, rows) => {
                self.early.insert(batch, (runs, rows));
            }
            Done::Decoded(run) => self.records.recycle(run),
        }
    }
}

impl<R: Read> Iterator for ParallelBatchReader<R> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.next_batch().transpose();
        if matches!(item, Some(Err(_))) {
            self.failed = true;
            self.work = None;
        }
        item
    }
}

/// The decoded runs of the batches not yet joined, shared by the decoder threads.
struct Assembly {
    open: Mutex<HashMap<u64, Parts>>,
    schema: SchemaRef,
    path: Arc<str>,
}

/// One batch's runs as they are decoded.
#[derive(Default)]
struct Parts {
    decoded: Vec<Option<Result<RecordBatch>>>,
    count: usize,
    /// How many runs the batch has, known once it is cut.
    total: Option<usize>,
}

impl Assembly {
    /// Stores run `part` of `batch`; the batch's runs if that was the last one missing.
    fn add(&self, batch: u64, part: usize, rows: Result<RecordBatch>) -> Option<Vec<Result<RecordBatch>>> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let parts = open.entry(batch).or_default();
        if parts.decoded.len() <= part {
            parts.decoded.resize_with(part + 1, || None);
        }
        parts.decoded[part] = Some(rows);
        parts.count += 1;
        take_if_complete(&mut open, batch)
    }

    /// Records that `batch` has `total` runs; its runs if all are decoded already.
    fn cut(&self, batch: u64, total: usize) -> Option<Vec<Result<RecordBatch>>> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.entry(batch).or_default().total = Some(total);
        take_if_complete(&mut open, batch)
    }

    /// A batch's rows from its decoded runs in order, or the first run's error: the record the
    /// serial reader would have failed at first.
    fn join(&self, parts: Vec<Result<RecordBatch>>) -> Result<RecordBatch> {
        let mut parts = parts.into_iter().collect::<Result<Vec<_>>>()?;
        if parts.len() == 1 {
            return Ok(parts.pop().expect("one run"));
        }
        concat_batches(&self.schema, &parts).map_err(|source| Error::Arrow {
            context: format!("{}: joining decoded rows", self.path),
            source,
        })
    }
}

fn take_if_complete(open: &mut HashMap<u64, Parts>, batch: u64) -> Option<Vec<Result<RecordBatch>>> {
    let parts = open.get(&batch)?;
    if parts.total != Some(parts.count) {
        return None;
    }
    let parts = open.remove(&batch)?;
    Some(parts.decoded.into_iter().flatten().collect())
}

/// A decoder thread: decodes runs until the reader closes the queue or drops the results.
fn decode_runs(
    mut decoder: RecordDecoder,
    queue: &Mutex<Receiver<Work>>,
    assembly: &Assembly,
    done: &Sender<Done>,
) {
    loop {
        // The lock is held only to take a run: the decoding runs unlocked.
        let next = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let Ok(Work { batch, part, run }) = next else { return };
        let rows = decode(&mut decoder, &run, &assembly.path);
        if done.send(Done::Decoded(run)).is_err() {
            return;
        }
        if let Some(parts) = assembly.add(batch, part, rows) {
            let runs = parts.len();
            if done.send(Done::Joined(batch, runs, assembly.join(parts))).is_err() {
                return;
            }
        }
    }
}

fn decode(decoder: &mut RecordDecoder, run: &RecordRun, path: &str) -> Result<RecordBatch> {
    decoder.reserve(run.len());
    for (i, payload) in run.payloads(path).enumerate() {
        if let Err(e) = payload.and_then(|payload| decoder.push(payload, path, run.first_record() + i as u64))
        {
            // Drop the rows of this run decoded so far: the next run starts clean.
            let _ = decoder.finish();
            return Err(e);
        }
    }
    decoder.finish().map_err(|e| e.at_records(path, run.first_record()))
}
