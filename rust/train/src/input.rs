//! The input pipeline: a worker's share of the training data, shuffled, encoded by the
//! feature spec and cut into fixed-size batches on a background thread.
//!
//! Rows come from one of three [`Plan`]s:
//!
//! - **Static files** (TFRecord or Parquet, any storage URL). With at least as many files as
//!   workers, each worker reads whole files, assigned largest first to the worker with the
//!   fewest bytes so far (the same plan on every worker). With fewer files, every worker reads
//!   every file and keeps every N-th record, so no worker sits idle.
//! - **A work queue**: the driver hands out one file at a time to whichever worker asks
//!   (see [`WorkQueue`]), so fast workers read more and the epoch ends when the queue is empty.
//! - **A feed**: an Arrow IPC stream on a local socket (the task's partition of a Spark
//!   DataFrame), read again for every epoch.
//!
//! Files are read in a fresh order each epoch and rows pass through a shuffle buffer; both
//! draw from the seed, the epoch and the worker, so a rerun (or a resumed run skipping the
//! batches it already took) sees the same batches. The last batch of an epoch may be short.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::record_batch::{RecordBatch, RecordBatchReader};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sparktrain_dataset::{DatasetReader, ReadOptions};
use sparktrain_storage::FileStatus;

use crate::background::Background;
use crate::error::{Result, TrainError};
use crate::features::{Encoded, FeatureSpec};
use crate::rng::SplitMix;

/// Rows per batch read from a file, before rows are regrouped into training batches.
const READ_BATCH: usize = 4096;

/// How long a read from the feed socket waits: the task behind it may be computing its
/// Spark partition, but a task that stops serving is named after this long.
const FEED_READ_TIMEOUT: Duration = Duration::from_secs(600);

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

/// What one worker reads from static files.
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

/// Hands out input files one at a time, shared by all workers (the driver holds it).
pub trait WorkQueue: Send + Sync {
    /// The next file of `epoch` for this worker, or None when that epoch's files are all
    /// taken.
    fn next(&self, epoch: u64) -> Result<Option<String>>;

    /// Asked as each epoch starts: whether this queue first hands this worker again the files
    /// it took before a restart, in the same order, so that the resumed epoch can skip the
    /// batches its checkpoint covers.
    fn replays(&self) -> bool {
        false
    }

    /// Told on the chief once a checkpoint made during `epoch` is committed: a restart resumes
    /// there or later, so the queue may forget what it handed out in earlier epochs. Best
    /// effort: what the queue remembers costs only memory.
    fn checkpointed(&self, _epoch: u64) {}
}

/// Where a worker's rows come from.
pub enum Plan {
    /// A fixed share of files.
    Files(Shard),
    /// Files pulled from the driver as the worker needs them.
    Queue(Arc<dyn WorkQueue>),
    /// An Arrow IPC stream on a Unix socket; each epoch reconnects. The first connection is
    /// opened early to learn the schema and serves the first epoch.
    Feed {
        /// The socket.
        path: PathBuf,
        /// The stream opened to read the schema, not yet consumed.
        first: Arc<Mutex<Option<StreamReader<UnixStream>>>>,
    },
}

/// The storage format of an input file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    TfRecord,
    Parquet,
}

/// Parquet by name (`.parquet`, `.parq`), else TFRecord (compressed or not).
fn format_of(url: &str) -> Format {
    let name = url.rsplit('/').next().unwrap_or(url);
    if name.ends_with(".parquet") || name.ends_with(".parq") { Format::Parquet } else { Format::TfRecord }
}

/// A dataset opened for one worker.
pub struct Input {
    plan: Plan,
    schema: SchemaRef,
    options: InputOptions,
    worker: usize,
}

impl Input {
    /// Opens the files at `path_or_glob` for `worker` of `workers`, planning its static share.
    pub fn open(path_or_glob: &str, workers: usize, worker: usize, options: InputOptions) -> Result<Self> {
        if workers == 0 || worker >= workers {
            return Err(TrainError::InvalidArgument(format!("worker {worker} of {workers}")));
        }
        let (files, schema) = inspect(path_or_glob)?;
        let shard = plan_shard(&files, workers, worker);
        Input::new(Plan::Files(shard), schema, worker, options)
    }

    /// Opens the files at `path_or_glob` (for their schema) for a worker that takes its
    /// files from `queue`.
    pub fn queued(
        path_or_glob: &str,
        queue: Arc<dyn WorkQueue>,
        worker: usize,
        options: InputOptions,
    ) -> Result<Self> {
        let (_, schema) = inspect(path_or_glob)?;
        Input::new(Plan::Queue(queue), schema, worker, options)
    }

    /// Connects to the Arrow IPC stream served on the Unix socket `path`.
    pub fn feed(path: impl AsRef<Path>, worker: usize, options: InputOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let reader = connect_feed(&path)?;
        let schema = reader.schema();
        let plan = Plan::Feed { path, first: Arc::new(Mutex::new(Some(reader))) };
        Input::new(plan, schema, worker, options)
    }

    fn new(plan: Plan, schema: SchemaRef, worker: usize, options: InputOptions) -> Result<Self> {
        if options.batch_size == 0 {
            return Err(TrainError::InvalidArgument("batch_size must be at least 1".into()));
        }
        Ok(Input { plan, schema, options, worker })
    }

    /// The schema of the data.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The plan this worker reads by.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The options.
    pub fn options(&self) -> &InputOptions {
        &self.options
    }

    /// Starts one pass over this worker's share, encoding rows with `spec`.
    pub fn epoch(&self, epoch: u64, spec: &Arc<FeatureSpec>) -> Result<Epoch> {
        spec.validate()?;
        let columns = spec.columns();
        let mut rng =
            SplitMix::new(self.options.seed ^ epoch.wrapping_mul(0x1000_0001) ^ (self.worker as u64) << 40);
        let (batches, interleave): (Batches, _) = match &self.plan {
            Plan::Files(shard) => {
                let mut files = shard.files.clone();
                // Fisher-Yates; the interleaved share keeps one order on every worker.
                if self.options.shuffle_buffer > 1 && shard.interleave.is_none() {
                    for i in (1..files.len()).rev() {
                        files.swap(i, rng.below(i + 1));
                    }
                }
                let schema = self.schema.clone();
                let batches = files.into_iter().map(move |url| file_batches(&url, &schema, &columns));
                (Box::new(FlattenFiles::new(batches)), shard.interleave)
            }
            Plan::Queue(queue) => {
                let (queue, schema) = (queue.clone(), self.schema.clone());
                let batches = std::iter::from_fn(move || match queue.next(epoch) {
                    Ok(Some(url)) => Some(file_batches(&url, &schema, &columns)),
                    Ok(None) => None,
                    Err(e) => Some(Err(e)),
                });
                (Box::new(FlattenFiles::new(batches)), None)
            }
            Plan::Feed { path, first } => {
                let held = first.lock().unwrap_or_else(|p| p.into_inner()).take();
                let reader = match held {
                    Some(r) => r,
                    None => connect_feed(path)?,
                };
                let name = path.display().to_string();
                let failed = path.clone();
                // A stream that ends early looks like a short one: the task's own word on why
                // it stopped serving turns it into an error.
                let batches = reader
                    .map(move |b| b.map_err(|e| TrainError::read(name.clone(), e)))
                    .chain(std::iter::once_with(move || feed_failure(&failed).map(Err)).flatten());
                (Box::new(batches), None)
            }
        };
        let job = Reading { batches, interleave, spec: spec.clone(), options: self.options.clone(), rng };
        let work = move |sender: SyncSender<Result<Encoded>>| job.run(&sender);
        Background::spawn("input", self.options.prefetch.max(1), work).map(Epoch)
    }
}

/// The files of `path_or_glob` and their schema: Parquet's own, or for TFRecord files one
/// inferred from a sample spread over all of them.
fn inspect(path_or_glob: &str) -> Result<(Vec<FileStatus>, SchemaRef)> {
    let files = sparktrain_dataset::input_files(path_or_glob)?;
    let formats: Vec<Format> = files.iter().map(|f| format_of(&f.url)).collect();
    if formats.iter().any(|f| *f != formats[0]) {
        return Err(TrainError::InvalidArgument(format!(
            "{path_or_glob} mixes Parquet and TFRecord files; give one format"
        )));
    }
    let schema = match formats[0] {
        Format::TfRecord => DatasetReader::open(path_or_glob, ReadOptions::default())?.schema().clone(),
        Format::Parquet => {
            let first = files.iter().find(|f| f.size > 0).unwrap_or(&files[0]);
            parquet_reader(&first.url, None)?.schema()
        }
    };
    Ok((files, schema))
}

type Batches = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// The batches of one file, reading only `columns` (those present).
fn file_batches(url: &str, schema: &SchemaRef, columns: &[String]) -> Result<Batches> {
    match format_of(url) {
        Format::TfRecord => {
            let wanted: Vec<_> =
                schema.fields().iter().filter(|f| columns.contains(f.name())).cloned().collect();
            let options = ReadOptions {
                schema: Some(Arc::new(Schema::new(wanted))),
                batch_size: READ_BATCH,
                ..ReadOptions::default()
            };
            let reader = DatasetReader::open(url, options)?;
            Ok(Box::new(reader.map(|b| b.map_err(TrainError::from))))
        }
        Format::Parquet => {
            let reader = parquet_reader(url, Some(columns))?;
            let url = url.to_string();
            Ok(Box::new(reader.map(move |b| b.map_err(|e| TrainError::read(url.clone(), e)))))
        }
    }
}

/// A Parquet file read whole into memory (storage readers are sequential), keeping the
/// top-level columns named in `columns` when given.
fn parquet_reader(
    url: &str,
    columns: Option<&[String]>,
) -> Result<parquet::arrow::arrow_reader::ParquetRecordBatchReader> {
    let bytes = bytes::Bytes::from(sparktrain_storage::read(url).map_err(sparktrain_dataset::Error::from)?);
    let mut builder =
        ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| TrainError::read(url, e))?;
    if let Some(columns) = columns {
        let roots: Vec<usize> = builder
            .schema()
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| columns.contains(f.name()))
            .map(|(i, _)| i)
            .collect();
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        builder = builder.with_projection(mask);
    }
    builder.with_batch_size(READ_BATCH).build().map_err(|e| TrainError::read(url, e))
}

/// The file in which a task that could not serve its feed says why (beside the socket).
pub const FEED_ERROR_FILE: &str = "feed.error";

/// The error the task serving the feed at `socket` reported, if it reported one.
fn feed_failure(socket: &Path) -> Option<TrainError> {
    let text = std::fs::read_to_string(socket.with_file_name(FEED_ERROR_FILE)).ok()?;
    Some(TrainError::read(
        socket.display().to_string(),
        format!("the Spark task serving this feed failed: {text}"),
    ))
}

fn connect_feed(path: &Path) -> Result<StreamReader<UnixStream>> {
    let fail = |e: &dyn std::fmt::Display| {
        feed_failure(path)
            .unwrap_or_else(|| TrainError::read(path.display().to_string(), format!("the input feed: {e}")))
    };
    let stream = UnixStream::connect(path).map_err(|e| fail(&e))?;
    stream.set_read_timeout(Some(FEED_READ_TIMEOUT)).map_err(|e| fail(&e))?;
    let reader = StreamReader::try_new(stream, None).map_err(|e| fail(&e))?;
    Ok(reader)
}

/// The batches of several files, one file after the other; a file that fails to open ends
/// the stream with its error.
struct FlattenFiles<I> {
    files: I,
    current: Option<Batches>,
    failed: bool,
}

impl<I> FlattenFiles<I> {
    fn new(files: I) -> Self {
        FlattenFiles { files, current: None, failed: false }
    }
}

impl<I: Iterator<Item = Result<Batches>>> Iterator for FlattenFiles<I> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.failed {
            if let Some(batch) = self.current.as_mut().and_then(Iterator::next) {
                self.failed = batch.is_err();
                return Some(batch);
            }
            match self.files.next()? {
                Ok(batches) => self.current = Some(batches),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// One pass over a worker's share: batches in the order the pipeline made them.
pub struct Epoch(Background<Encoded>);

impl Iterator for Epoch {
    type Item = Result<Encoded>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
}

struct Reading {
    batches: Batches,
    interleave: Option<(usize, usize)>,
    spec: Arc<FeatureSpec>,
    options: InputOptions,
    rng: SplitMix,
}

impl Reading {
    /// Reads every batch, sending training batches until done or the receiver is gone.
    fn run(mut self, out: &SyncSender<Result<Encoded>>) {
        let mut pool = Rows::new(&self.spec);
        let mut record = 0usize;
        let shuffle = self.options.shuffle_buffer > 1;
        let capacity = self.options.shuffle_buffer.max(self.options.batch_size);
        while let Some(batch) = self.batches.next() {
            let encoded = match batch.and_then(|b| self.spec.encode(&b)) {
                Ok(e) => e,
                Err(e) => return drop(out.send(Err(e))),
            };
            let bag_offsets = encoded.bag_offsets();
            for row in 0..encoded.rows {
                record += 1;
                if let Some((n, w)) = self.interleave
                    && (record - 1) % n != w
                {
                    continue;
                }
                pool.push(&encoded, &bag_offsets, row);
                // Without shuffling the pool is the batch being filled: sent when full.
                let full =
                    if shuffle { pool.len() >= capacity } else { pool.len() == self.options.batch_size };
                if full && !self.emit(&mut pool, out) {
                    return;
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
        if !shuffle && pool.start == 0 && pool.len() <= self.options.batch_size {
            // In order and no more than a batch: the pool is the batch.
            let empty = Encoded { pooling: pool.pooling.clone(), ..Encoded::default() };
            let mut batch = std::mem::replace(&mut pool.held, empty);
            batch.bag_ids = pool.bags.drain(..).flatten().collect();
            return out.send(Ok(batch)).is_ok();
        }
        let rows = self.options.batch_size.min(pool.len());
        let mut batch = Encoded { pooling: pool.pooling.clone(), ..Encoded::default() };
        for _ in 0..rows {
            let pick = if shuffle { self.rng.below(pool.len()) } else { 0 };
            pool.take(pick, &mut batch, shuffle);
        }
        out.send(Ok(batch)).is_ok()
    }
}

/// Encoded rows waiting to be batched. A row's multi-hot ids, of any number, are kept apart
/// (`bags`, one list per row), so that rows of fixed width can be swapped and moved alike.
struct Rows {
    dense_width: usize,
    id_width: usize,
    bag_width: usize,
    pooling: Vec<crate::features::Pooling>,
    /// Every field of the held rows but `bag_ids`.
    held: Encoded,
    /// Each held row's multi-hot ids (empty when the spec has no multi-hot column).
    bags: Vec<Vec<u32>>,
    /// The first row not yet taken, when taking in order.
    start: usize,
}

impl Rows {
    fn new(spec: &FeatureSpec) -> Self {
        let pooling: Vec<_> = spec.multi_hot.iter().map(|m| m.pooling).collect();
        Rows {
            dense_width: spec.dense_width(),
            id_width: spec.id_width(),
            bag_width: spec.bag_width(),
            held: Encoded { pooling: pooling.clone(), ..Encoded::default() },
            pooling,
            bags: Vec::new(),
            start: 0,
        }
    }

    fn len(&self) -> usize {
        self.held.rows - self.start
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Holds row `row` of `from`, whose multi-hot ids start at `bag_offsets[row]`.
    fn push(&mut self, from: &Encoded, bag_offsets: &[usize], row: usize) {
        let (d, c, b) = (self.dense_width, self.id_width, self.bag_width);
        self.held.dense.extend_from_slice(&from.dense[row * d..(row + 1) * d]);
        self.held.ids.extend_from_slice(&from.ids[row * c..(row + 1) * c]);
        self.held.labels.push(from.labels[row]);
        if b > 0 {
            self.held.bag_lengths.extend_from_slice(&from.bag_lengths[row * b..(row + 1) * b]);
            self.bags.push(from.bag_ids[bag_offsets[row]..bag_offsets[row + 1]].to_vec());
        }
        self.held.rows += 1;
    }

    /// Moves row `start + index` into `into`: swapped with the last row when shuffling,
    /// else taken from the front.
    fn take(&mut self, index: usize, into: &mut Encoded, shuffle: bool) {
        let (d, c, b) = (self.dense_width, self.id_width, self.bag_width);
        let row = self.start + index;
        into.dense.extend_from_slice(&self.held.dense[row * d..(row + 1) * d]);
        into.ids.extend_from_slice(&self.held.ids[row * c..(row + 1) * c]);
        into.labels.push(self.held.labels[row]);
        if b > 0 {
            into.bag_lengths.extend_from_slice(&self.held.bag_lengths[row * b..(row + 1) * b]);
        }
        into.rows += 1;
        if shuffle {
            let last = self.held.rows - 1;
            self.held.dense.copy_within(last * d..(last + 1) * d, row * d);
            self.held.ids.copy_within(last * c..(last + 1) * c, row * c);
            self.held.labels[row] = self.held.labels[last];
            self.held.bag_lengths.copy_within(last * b..(last + 1) * b, row * b);
            self.held.dense.truncate(last * d);
            self.held.ids.truncate(last * c);
            self.held.labels.truncate(last);
            self.held.bag_lengths.truncate(last * b);
            if b > 0 {
                into.bag_ids.extend(self.bags.swap_remove(row));
            }
            self.held.rows = last;
        } else {
            if b > 0 {
                into.bag_ids.extend(std::mem::take(&mut self.bags[row]));
            }
            self.start += 1;
            if self.start == self.held.rows {
                self.held = Encoded { pooling: self.pooling.clone(), ..Encoded::default() };
                self.bags.clear();
                self.start = 0;
            }
        }
    }
}
