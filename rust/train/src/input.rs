//! The input pipeline: a worker's shard of a TFRecord dataset on any storage URL, shuffled,
//! encoded by the feature spec and cut into fixed-size batches on a background thread.
//!
//! - **Sharding.** With at least as many files as workers, each worker reads whole files,
//!   assigned largest first to the worker with the fewest bytes so far (the same plan on
//!   every worker). With fewer files, every worker reads every file and keeps every N-th
//!   record, so no worker sits idle.
//! - **Shuffling.** Files are read in a fresh order each epoch, and rows pass through a
//!   shuffle buffer; both draw from a seed, the epoch and the worker, so reruns repeat.
//! - **Epochs.** [`Input::epoch`] streams one pass over the shard; the last batch may be
//!   short. Prefetching runs a few batches ahead of training.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{self, JoinHandle};

use arrow::datatypes::SchemaRef;
use sparktrain_dataset::{DatasetReader, ReadOptions};
use sparktrain_storage::FileStatus;

use crate::error::{Result, TrainError};
use crate::features::{Encoded, FeatureSpec};
use crate::rng::SplitMix;

/// How a worker's batches are made.
#[derive(Debug, Clone)]
pub struct InputOptions {
    /// Examples per batch on this worker.
    pub batch_size: usize,
    /// Rows held for shuffling; 0 or 1 keeps the files' order.
    pub shuffle_buffer: usize,
    /// The seed of file order and shuffling.
    pub seed: u64,
    /// Batches prepared ahead of training.
    pub prefetch: usize,
}

impl Default for InputOptions {
    fn default() -> Self {
        InputOptions { batch_size: 256, shuffle_buffer: 10_000, seed: 0, prefetch: 4 }
    }
}

/// What one worker reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// File URLs, in the order of the plan.
    pub files: Vec<String>,
    /// `(workers, worker)` when every worker reads every file and keeps every N-th record.
    pub interleave: Option<(usize, usize)>,
}

/// The files of `worker` among `workers` (see the module's notes).
pub fn plan_shard(files: &[FileStatus], workers: usize, worker: usize) -> Shard {
    if files.len() < workers {
        let files = files.iter().map(|f| f.url.clone()).collect();
        return Shard { files, interleave: Some((workers, worker)) };
    }
    let mut order: Vec<&FileStatus> = files.iter().collect();
    order.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.url.cmp(&b.url)));
    let mut loads = vec![0u64; workers];
    let mut mine = Vec::new();
    for file in order {
        let (lightest, _) =
            loads.iter().enumerate().min_by_key(|&(i, load)| (*load, i)).expect("workers > 0");
        loads[lightest] += file.size.max(1);
        if lightest == worker {
            mine.push(file.url.clone());
        }
    }
    Shard { files: mine, interleave: None }
}

/// A dataset opened for one worker.
pub struct Input {
    shard: Shard,
    schema: SchemaRef,
    spec: Arc<FeatureSpec>,
    options: InputOptions,
    worker: usize,
}

impl Input {
    /// Opens the dataset at `path_or_glob` for `worker` of `workers`; the schema is inferred
    /// once from a sample of the files.
    pub fn open(
        path_or_glob: &str,
        spec: FeatureSpec,
        workers: usize,
        worker: usize,
        options: InputOptions,
    ) -> Result<Self> {
        if workers == 0 || worker >= workers {
            return Err(TrainError::InvalidArgument(format!("worker {worker} of {workers}")));
        }
        if options.batch_size == 0 {
            return Err(TrainError::InvalidArgument("batch_size must be at least 1".into()));
        }
        spec.validate()?;
        let dataset = DatasetReader::open(path_or_glob, ReadOptions::default())?;
        let shard = plan_shard(dataset.files(), workers, worker);
        Ok(Input { shard, schema: dataset.schema().clone(), spec: Arc::new(spec), options, worker })
    }

    /// The schema of the data.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The files this worker reads.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// Starts one pass over the shard.
    pub fn epoch(&self, epoch: u64) -> Epoch {
        let (sender, receiver) = sync_channel(self.options.prefetch.max(1));
        let mut rng =
            SplitMix::new(self.options.seed ^ epoch.wrapping_mul(0x1000_0001) ^ (self.worker as u64) << 40);
        let mut files = self.shard.files.clone();
        if self.options.shuffle_buffer > 1 {
            // Fisher-Yates; the interleaved shard keeps one order on every worker.
            if self.shard.interleave.is_none() {
                for i in (1..files.len()).rev() {
                    files.swap(i, rng.below(i + 1));
                }
            }
        }
        let job = Reading {
            files,
            interleave: self.shard.interleave,
            schema: self.schema.clone(),
            spec: self.spec.clone(),
            options: self.options.clone(),
            rng,
        };
        let thread = thread::Builder::new()
            .name("sparktrain-input".into())
            .spawn(move || job.run(&sender))
            .expect("spawning the input thread");
        Epoch { receiver, thread: Some(thread) }
    }
}

/// One pass over a shard: batches in the order the pipeline made them.
pub struct Epoch {
    receiver: Receiver<Result<Encoded>>,
    thread: Option<JoinHandle<()>>,
}

impl Iterator for Epoch {
    type Item = Result<Encoded>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.receiver.recv().ok();
        if item.is_none()
            && let Some(t) = self.thread.take()
        {
            let _ = t.join();
        }
        item
    }
}

struct Reading {
    files: Vec<String>,
    interleave: Option<(usize, usize)>,
    schema: SchemaRef,
    spec: Arc<FeatureSpec>,
    options: InputOptions,
    rng: SplitMix,
}

impl Reading {
    /// Reads every file, sending batches until done or the receiver is gone.
    fn run(mut self, out: &SyncSender<Result<Encoded>>) {
        let mut pool = Rows::new(self.spec.dense_width(), self.spec.id_width());
        let mut record = 0usize;
        let capacity = self.options.shuffle_buffer.max(self.options.batch_size);
        for url in std::mem::take(&mut self.files) {
            let read =
                ReadOptions { schema: Some(self.schema.clone()), batch_size: 4096, ..ReadOptions::default() };
            let reader = match DatasetReader::open(&url, read) {
                Ok(r) => r,
                Err(e) => return drop(out.send(Err(e.into()))),
            };
            for batch in reader {
                let encoded = batch.map_err(TrainError::from).and_then(|b| self.spec.encode(&b));
                let encoded = match encoded {
                    Ok(e) => e,
                    Err(e) => return drop(out.send(Err(e))),
                };
                for row in 0..encoded.rows {
                    record += 1;
                    if let Some((n, w)) = self.interleave
                        && (record - 1) % n != w
                    {
                        continue;
                    }
                    pool.push(&encoded, row);
                    if pool.len() >= capacity && !self.emit(&mut pool, out) {
                        return;
                    }
                }
            }
        }
        while !pool.is_empty() {
            if !self.emit(&mut pool, out) {
                return;
            }
        }
    }

    /// Sends one batch drawn from `pool`; false when nobody listens any more.
    fn emit(&mut self, pool: &mut Rows, out: &SyncSender<Result<Encoded>>) -> bool {
        let shuffle = self.options.shuffle_buffer > 1;
        let rows = self.options.batch_size.min(pool.len());
        let mut batch = Encoded::default();
        for _ in 0..rows {
            let pick = if shuffle { self.rng.below(pool.len()) } else { 0 };
            pool.take(pick, &mut batch, shuffle);
        }
        out.send(Ok(batch)).is_ok()
    }
}

/// Encoded rows waiting to be batched.
struct Rows {
    dense_width: usize,
    id_width: usize,
    held: Encoded,
    /// The first row not yet taken, when taking in order.
    start: usize,
}

impl Rows {
    fn new(dense_width: usize, id_width: usize) -> Self {
        Rows { dense_width, id_width, held: Encoded::default(), start: 0 }
    }

    fn len(&self) -> usize {
        self.held.rows - self.start
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push(&mut self, from: &Encoded, row: usize) {
        let (d, c) = (self.dense_width, self.id_width);
        self.held.dense.extend_from_slice(&from.dense[row * d..(row + 1) * d]);
        self.held.ids.extend_from_slice(&from.ids[row * c..(row + 1) * c]);
        self.held.labels.push(from.labels[row]);
        self.held.rows += 1;
    }

    /// Moves row `start + index` into `into`: swapped with the last row when shuffling,
    /// else taken from the front.
    fn take(&mut self, index: usize, into: &mut Encoded, shuffle: bool) {
        let (d, c) = (self.dense_width, self.id_width);
        let row = self.start + index;
        into.dense.extend_from_slice(&self.held.dense[row * d..(row + 1) * d]);
        into.ids.extend_from_slice(&self.held.ids[row * c..(row + 1) * c]);
        into.labels.push(self.held.labels[row]);
        into.rows += 1;
        if shuffle {
            let last = self.held.rows - 1;
            self.held.dense.copy_within(last * d..(last + 1) * d, row * d);
            self.held.ids.copy_within(last * c..(last + 1) * c, row * c);
            self.held.labels[row] = self.held.labels[last];
            self.held.dense.truncate(last * d);
            self.held.ids.truncate(last * c);
            self.held.labels.truncate(last);
            self.held.rows = last;
        } else {
            self.start += 1;
            if self.start == self.held.rows {
                self.held = Encoded::default();
                self.start = 0;
            }
        }
    }
}
