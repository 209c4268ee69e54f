//! The training loop every worker runs: epochs over its share of the input, the synchronous
//! step, evaluation across all workers, and the chief's side jobs (checkpoints, TensorBoard
//! event files, the exported model).
//!
//! Resuming: when `model_dir` holds a checkpoint, the chief reads it and broadcasts it, so
//! only the chief needs to see `model_dir`. Training goes on from the checkpoint's step; each
//! worker skips the batches it had already taken in the interrupted epoch (its batches repeat
//! from the seed; with a work queue, the driver hands each worker the same files again after a
//! restart), so a resumed run ends where an uninterrupted one would.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::batch::Batch;
use crate::checkpoint::{self, CheckpointOptions, MAX_SHARD_BYTES, Progress, Restored};
use crate::error::{Result, TrainError};
use crate::export::{self, ModelKind};
use crate::features::FeatureSpec;
use crate::groups::{GroupState, OptimizerConfig};
use crate::input::{Input, Plan};
use crate::loss::Loss;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::optim::OptimizerState;
use crate::step::{DataParallel, SharedRing, lock};
use crate::tensorboard::EventWriter;

/// How long workers wait for the chief to write a checkpoint during `fit`. A chief that dies
/// meanwhile fails the wait at once (its connections close) and one that stops responding is
/// killed by its task, so only a slow but live save can use all of it.
pub const CHECKPOINT_WAIT: Duration = Duration::from_secs(3600);

/// Everything about a training run but its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainerConfig {
    /// The model and its shape.
    pub model: ModelKind,
    /// The loss.
    #[serde(default = "defaults::loss")]
    pub loss: Loss,
    /// The optimizers.
    pub optimizer: OptimizerConfig,
    /// Examples per batch on each worker.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: usize,
    /// Rows held for shuffling (0 or 1: none).
    #[serde(default = "defaults::shuffle_buffer")]
    pub shuffle_buffer: usize,
    /// Batches prepared ahead of training.
    #[serde(default = "defaults::prefetch")]
    pub prefetch: usize,
    /// The seed of the initial weights, the file order and shuffling.
    #[serde(default)]
    pub seed: u64,
    /// Where checkpoints go, and are resumed from.
    #[serde(default)]
    pub model_dir: Option<String>,
    /// Steps between checkpoints (besides the one at the end); None: only at the end.
    #[serde(default)]
    pub checkpoint_every: Option<u64>,
    /// Checkpoints kept.
    #[serde(default = "defaults::keep")]
    pub keep_checkpoints: usize,
    /// The largest checkpoint shard file.
    #[serde(default = "defaults::max_shard_bytes")]
    pub max_shard_bytes: u64,
    /// Where TensorBoard event files go.
    #[serde(default)]
    pub tensorboard_dir: Option<String>,
    /// Steps between progress lines (and TensorBoard scalars).
    #[serde(default = "defaults::log_every")]
    pub log_every: u64,
    /// Seconds between new event files on storage without hflush (HDFS).
    #[serde(default = "defaults::roll_seconds")]
    pub tensorboard_roll_seconds: f64,
    /// Where the model computes: `cpu`, or `cuda` / `cuda:<n>` (a build with the `cuda`
    /// feature; `n` counts the GPUs the process sees, as `CUDA_VISIBLE_DEVICES` sets them).
    #[serde(default = "defaults::device")]
    pub device: String,
}

mod defaults {
    use crate::loss::Loss;

    pub fn loss() -> Loss {
        Loss::BinaryCrossEntropy
    }
    pub fn batch_size() -> usize {
        256
    }
    pub fn shuffle_buffer() -> usize {
        10_000
    }
    pub fn prefetch() -> usize {
        4
    }
    pub fn keep() -> usize {
        3
    }
    pub fn max_shard_bytes() -> u64 {
        super::MAX_SHARD_BYTES
    }
    pub fn log_every() -> u64 {
        100
    }
    pub fn roll_seconds() -> f64 {
        30.0
    }
    pub fn device() -> String {
        "cpu".into()
    }
}

impl TrainerConfig {
    /// A configuration with the defaults for everything but the model and optimizer.
    pub fn new(model: ModelKind, optimizer: OptimizerConfig) -> Self {
        serde_json::from_value(serde_json::json!({ "model": model, "optimizer": optimizer }))
            .expect("the defaults deserialize")
    }

    /// Checks what can be checked without data or a device: sizes, intervals and the
    /// device's name. The driver calls it before any Spark job starts.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("batch_size", self.batch_size as u64),
            ("log_every", self.log_every),
            ("keep_checkpoints", self.keep_checkpoints as u64),
            ("max_shard_bytes", self.max_shard_bytes),
            ("threads", self.optimizer.threads as u64),
            ("checkpoint_every", self.checkpoint_every.unwrap_or(1)),
        ];
        if let Some((name, value)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(TrainError::InvalidArgument(format!("{name}={value} must be at least 1")));
        }
        device_ordinal(&self.device)?;
        Ok(())
    }

    /// The input pipeline's options this configuration asks for.
    pub fn input_options(&self) -> crate::input::InputOptions {
        crate::input::InputOptions {
            batch_size: self.batch_size,
            shuffle_buffer: self.shuffle_buffer,
            seed: self.seed,
            prefetch: self.prefetch,
        }
    }
}

/// How long [`Trainer::fit`] trains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FitOptions {
    /// Passes over the data (counting from the start of training, not of this call).
    pub epochs: u64,
    /// Stop at this many steps in all, even mid-epoch.
    pub max_steps: Option<u64>,
    /// Evaluate on the evaluation input every this many steps (besides at the end).
    pub eval_every: Option<u64>,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions { epochs: 1, max_steps: None, eval_every: None }
    }
}

/// A progress line, every `log_every` steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogLine {
    /// Steps taken.
    pub step: u64,
    /// The epoch under way (from 0).
    pub epoch: u64,
    /// The mean loss over the steps since the last line.
    pub loss: f64,
    /// Examples per second over all workers since the last line.
    pub examples_per_sec: f64,
    /// The (first) optimizer's step size.
    pub learning_rate: f32,
    /// Seconds since the Unix epoch when the line was made.
    pub wall_time: f64,
}

/// An evaluation during or after training.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalLine {
    /// Steps taken when it ran.
    pub step: u64,
    /// Its figures.
    pub metrics: Metrics,
}

/// What [`Trainer::fit`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitSummary {
    /// Steps taken in all (a resumed run counts the earlier ones).
    pub steps: u64,
    /// Steps this call took.
    pub new_steps: u64,
    /// Examples all workers used in this call.
    pub examples: u64,
    /// Wall seconds of this call.
    pub seconds: f64,
    /// `examples / seconds`.
    pub examples_per_sec: f64,
    /// Epochs completed in all.
    pub epochs: u64,
    /// The mean loss over the last progress window.
    pub loss: Option<f64>,
    /// The step this call resumed from, if it did.
    pub resumed_from: Option<u64>,
    /// The progress lines.
    pub history: Vec<LogLine>,
    /// The evaluations.
    pub evaluations: Vec<EvalLine>,
    /// The last checkpoint written.
    pub checkpoint: Option<String>,
    /// Seconds since the Unix epoch when this call's first step ended.
    pub first_step_at: Option<f64>,
}

/// One worker's trainer.
pub struct Trainer {
    config: TrainerConfig,
    features: Arc<FeatureSpec>,
    dp: DataParallel<Box<dyn Model>>,
    device: Device,
    rank: usize,
    /// Workers training together (1 alone).
    workers: u64,
    progress: Progress,
    resumed_from: Option<u64>,
    events: Option<EventWriter>,
    last_checkpoint: Option<(u64, String)>,
}

impl Trainer {
    /// Builds the model for `features`, joins the ring (None: training alone), and resumes
    /// from the latest checkpoint in `model_dir` if there is one.
    pub fn new(config: TrainerConfig, features: FeatureSpec, ring: Option<SharedRing>) -> Result<Self> {
        config.validate()?;
        features.validate()?;
        let rank = ring.as_ref().map_or(0, |r| lock(r).rank());
        let workers = ring.as_ref().map_or(1, |r| lock(r).size()) as u64;
        let device = device(&config.device)?;
        let model = config.model.build_on(&device, &features, config.seed)?;
        let dp = DataParallel::new(model, config.loss, &config.optimizer, ring)?;
        let mut trainer = Trainer {
            config,
            features: Arc::new(features),
            dp,
            device,
            rank,
            workers,
            progress: Progress::default(),
            resumed_from: None,
            events: None,
            last_checkpoint: None,
        };
        if let Some(dir) = trainer.config.model_dir.clone()
            && let Some(progress) = trainer.restore(&dir)?
        {
            trainer.resumed_from = Some(progress.step);
            trainer.progress = progress;
        }
        if let (0, Some(dir)) = (rank, &trainer.config.tensorboard_dir) {
            let roll = Duration::try_from_secs_f64(trainer.config.tensorboard_roll_seconds.max(0.0))
                .unwrap_or(Duration::from_secs(30));
            trainer.events = Some(EventWriter::create(dir, roll)?);
        }
        Ok(trainer)
    }

    /// The configuration.
    pub fn config(&self) -> &TrainerConfig {
        &self.config
    }

    /// The feature spec.
    pub fn features(&self) -> &FeatureSpec {
        &self.features
    }

    /// Whether this worker is the chief.
    pub fn is_chief(&self) -> bool {
        self.rank == 0
    }

    /// How far training has come.
    pub fn progress(&self) -> Progress {
        self.progress
    }

    /// The step training resumed from, if it did.
    pub fn resumed_from(&self) -> Option<u64> {
        self.resumed_from
    }

    /// The weights, flat in parameter-name order.
    pub fn weights(&self) -> &[f32] {
        self.dp.weights()
    }

    /// Trains on `input` (this worker's share) together with every other worker: call on all
    /// of them with the same options. `on_log` sees every progress line; an error it returns
    /// (an interrupt, say) stops training.
    pub fn fit(
        &mut self,
        input: &Input,
        options: &FitOptions,
        eval: Option<&Input>,
        on_log: &mut dyn FnMut(&LogLine) -> Result<()>,
    ) -> Result<FitSummary> {
        if options.eval_every == Some(0) {
            return Err(TrainError::InvalidArgument("eval_every must be at least 1".into()));
        }
        let started = Instant::now();
        let first_step = self.progress.step;
        let mut summary = FitSummary {
            steps: first_step,
            new_steps: 0,
            examples: 0,
            seconds: 0.0,
            examples_per_sec: 0.0,
            epochs: self.progress.epoch,
            loss: None,
            resumed_from: self.resumed_from,
            history: Vec::new(),
            evaluations: Vec::new(),
            checkpoint: None,
            first_step_at: None,
        };
        let mut window = Window::new();
        let done = |step: u64| options.max_steps.is_some_and(|max| step >= max);
        'epochs: while self.progress.epoch < options.epochs && !done(self.progress.step) {
            let mut batches = input.epoch(self.progress.epoch, &self.features)?;
            // A resumed worker's batches repeat from the seed: its static share, or (after a
            // restart) the files the driver's queue hands it again, in the same order. A queue
            // that does not replay (a new job) hands out files in a new race: which rows were
            // taken cannot be replayed, so the epoch starts over.
            let replayable = match input.plan() {
                Plan::Queue(queue) => queue.replays(),
                _ => true,
            };
            // With another worker count (an elastic restart) the shares are planned anew, and
            // the batches taken say nothing about the new ones: the epoch starts over.
            let same_workers = self.progress.workers == 0 || self.progress.workers == self.workers;
            if !(replayable && same_workers) {
                self.progress.batches_in_epoch = 0;
            }
            self.progress.workers = self.workers;
            let taken = self.progress.batches_in_epoch;
            for _ in 0..taken {
                if batches.next().transpose()?.is_none() {
                    break;
                }
            }
            loop {
                if done(self.progress.step) {
                    break 'epochs;
                }
                let batch = batches
                    .next()
                    .transpose()?
                    .map(|e| Batch::from_encoded_on(&e, &self.device))
                    .transpose()?;
                let Some(stats) = self.dp.step(batch.as_ref())? else { break };
                self.progress.step = stats.step;
                self.progress.batches_in_epoch += 1;
                summary.first_step_at.get_or_insert_with(unix_time);
                summary.examples += stats.examples;
                window.add(stats.loss as f64, stats.examples);
                if stats.step % self.config.log_every == 0 {
                    let line =
                        window.line(stats.step, self.progress.epoch, self.dp.optimizers().learning_rate());
                    self.log(&line)?;
                    on_log(&line)?;
                    summary.loss = Some(line.loss);
                    summary.history.push(line);
                }
                if self.config.checkpoint_every.is_some_and(|k| stats.step % k == 0) {
                    summary.checkpoint = self.checkpoint_together()?.or(summary.checkpoint);
                }
                if let (Some(k), Some(eval)) = (options.eval_every, eval)
                    && stats.step % k == 0
                {
                    summary.evaluations.push(self.evaluate_logged(eval)?);
                }
            }
            self.progress.epoch += 1;
            self.progress.batches_in_epoch = 0;
        }
        if window.steps > 0 {
            summary.loss = Some(window.loss_sum / window.steps as f64);
        }
        summary.checkpoint = self.checkpoint_together()?.or(summary.checkpoint);
        if let Some(eval) = eval
            && summary.evaluations.last().is_none_or(|e| e.step != self.progress.step)
        {
            summary.evaluations.push(self.evaluate_logged(eval)?);
        }
        if let Some(events) = &mut self.events {
            events.flush()?;
        }
        summary.steps = self.progress.step;
        summary.new_steps = self.progress.step - first_step;
        summary.epochs = self.progress.epoch;
        summary.seconds = started.elapsed().as_secs_f64();
        summary.examples_per_sec = summary.examples as f64 / summary.seconds.max(1e-9);
        Ok(summary)
    }

    fn log(&mut self, line: &LogLine) -> Result<()> {
        if let Some(events) = &mut self.events {
            let scalars = [
                ("loss", line.loss as f32),
                ("examples_per_sec", line.examples_per_sec as f32),
                ("learning_rate", line.learning_rate),
            ];
            events.scalars(line.step as i64, &scalars)?;
            events.flush()?;
        }
        Ok(())
    }

    /// Evaluates on `input` (this worker's share) together with every other worker.
    pub fn evaluate(&mut self, input: &Input) -> Result<Metrics> {
        let epoch = input.epoch(0, &self.features)?;
        let device = self.device.clone();
        self.dp.evaluate(epoch.map(|e| e.and_then(|e| Batch::from_encoded_on(&e, &device))))
    }

    fn evaluate_logged(&mut self, input: &Input) -> Result<EvalLine> {
        let metrics = self.evaluate(input)?;
        let step = self.progress.step;
        if let Some(events) = &mut self.events {
            let mut scalars =
                vec![("eval/loss", metrics.loss as f32), ("eval/accuracy", metrics.accuracy as f32)];
            if let Some(auc) = metrics.auc {
                scalars.push(("eval/auc", auc as f32));
            }
            events.scalars(step as i64, &scalars)?;
            events.flush()?;
        }
        Ok(EvalLine { step, metrics })
    }

    /// Inside `fit`: the chief writes a checkpoint while every other worker waits for it at
    /// a barrier of up to [`CHECKPOINT_WAIT`], so that a long save is not taken for a dead
    /// chief by the next step's collective, whose time-out is far shorter.
    fn checkpoint_together(&mut self) -> Result<Option<String>> {
        let folder = self.save_checkpoint()?;
        if self.config.model_dir.is_some()
            && let Some(ring) = self.dp.ring()
        {
            lock(ring).barrier_within(CHECKPOINT_WAIT)?;
        }
        Ok(folder)
    }

    /// The chief writes a checkpoint of the current state to `model_dir` (once per step);
    /// returns its folder, or None on other workers or without `model_dir`.
    pub fn save_checkpoint(&mut self) -> Result<Option<String>> {
        let (0, Some(dir)) = (self.rank, self.config.model_dir.clone()) else { return Ok(None) };
        if let Some((step, folder)) = &self.last_checkpoint
            && *step == self.progress.step
        {
            return Ok(Some(folder.clone()));
        }
        if self.last_checkpoint.is_none() {
            // This chief's first save: clear what a chief killed midway left, now that no
            // other writer can be under way (a trainer that only reads removes nothing).
            checkpoint::remove_partial(&dir)?;
        }
        let options = CheckpointOptions {
            max_shard_bytes: self.config.max_shard_bytes,
            keep: self.config.keep_checkpoints,
        };
        let folder = self.dp.save_checkpoint(&dir, self.progress, &options)?;
        self.last_checkpoint = Some((self.progress.step, folder.clone()));
        Ok(Some(folder))
    }

    /// The chief writes the exported model into `dir`; returns whether this worker wrote it.
    pub fn export(&self, dir: &str) -> Result<bool> {
        if self.rank != 0 {
            return Ok(false);
        }
        export::export(
            dir,
            &self.config.model,
            &self.features,
            self.config.loss,
            self.dp.entries(),
            self.dp.weights(),
        )?;
        Ok(true)
    }

    /// The chief adds the scalar `tag` at the current step to its event file and flushes it;
    /// a no-op on other workers and without `tensorboard_dir`.
    pub fn scalar(&mut self, tag: &str, value: f32) -> Result<()> {
        let step = self.progress.step as i64;
        if let Some(events) = &mut self.events {
            events.scalars(step, &[(tag, value)])?;
            events.flush()?;
        }
        Ok(())
    }

    /// Ends training: closes the event file.
    pub fn close(&mut self) -> Result<()> {
        match self.events.take() {
            Some(events) => events.close(),
            None => Ok(()),
        }
    }

    /// Loads the latest checkpoint: the chief reads it and every other worker receives it.
    fn restore(&mut self, model_dir: &str) -> Result<Option<Progress>> {
        let layout = self.dp.model().parameters().layout();
        let Some(ring) = self.dp.ring().cloned() else {
            return match checkpoint::restore(model_dir, &layout)? {
                Some(restored) => self.dp.load(restored).map(Some),
                None => Ok(None),
            };
        };
        let mut ring = lock(&ring);
        // [status][length] then the payload: 0 none, 1 a checkpoint, 2 the chief failed.
        let (mut head, payload, failure) = if self.rank == 0 {
            match checkpoint::restore(model_dir, &layout) {
                Ok(Some(r)) => {
                    let bytes = encode_restored(&r)?;
                    (head(1, bytes.len()), bytes, None)
                }
                Ok(None) => (head(0, 0), Vec::new(), None),
                Err(e) => (head(2, 0), Vec::new(), Some(e)),
            }
        } else {
            ([0u8; 9], Vec::new(), None)
        };
        ring.broadcast(&mut head, 0)?;
        let length = u64::from_le_bytes(head[1..].try_into().expect("8 bytes")) as usize;
        let mut payload = if self.rank == 0 { payload } else { vec![0u8; length] };
        match head[0] {
            0 => return Ok(None),
            2 => {
                return Err(failure.unwrap_or_else(|| {
                    TrainError::format(model_dir, "the chief could not read the latest checkpoint")
                }));
            }
            _ => {}
        }
        ring.broadcast(&mut payload, 0)?;
        drop(ring);
        let restored = decode_restored(&payload)?;
        self.dp.load(restored).map(Some)
    }
}

/// Seconds since the Unix epoch.
fn unix_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The device `name` stands for.
/// The GPU ordinal `name` asks for (None: the CPU).
fn device_ordinal(name: &str) -> Result<Option<usize>> {
    match name {
        "cpu" => Ok(None),
        "cuda" => Ok(Some(0)),
        other => match other.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => Ok(Some(n)),
            None => Err(TrainError::InvalidArgument(format!("device '{name}': use cpu, cuda or cuda:<n>"))),
        },
    }
}

fn device(name: &str) -> Result<Device> {
    let Some(ordinal) = device_ordinal(name)? else { return Ok(Device::Cpu) };
    if !candle_core::utils::cuda_is_available() {
        return Err(TrainError::InvalidArgument(format!(
            "device '{name}' needs sparktrain built with the `cuda` feature (see the README)"
        )));
    }
    Ok(Device::new_cuda(ordinal)?)
}

fn head(status: u8, length: usize) -> [u8; 9] {
    let mut out = [status, 0, 0, 0, 0, 0, 0, 0, 0];
    out[1..].copy_from_slice(&(length as u64).to_le_bytes());
    out
}

/// The progress and optimizer groups' shape as JSON, then every value as float32.
#[derive(Serialize, Deserialize)]
struct RestoredHead {
    progress: Progress,
    weights: usize,
    groups: Vec<GroupHead>,
}

/// An optimizer group's name, parameters, step and buffers (name, length).
#[derive(Serialize, Deserialize)]
struct GroupHead {
    group: String,
    tensors: Vec<String>,
    step: u64,
    buffers: Vec<(String, usize)>,
}

fn encode_restored(r: &Restored) -> Result<Vec<u8>> {
    let head = RestoredHead {
        progress: r.progress,
        weights: r.weights.len(),
        groups: r
            .optimizer
            .iter()
            .map(|g| GroupHead {
                group: g.group.clone(),
                tensors: g.tensors.clone(),
                step: g.state.step,
                buffers: g.state.buffers.iter().map(|(n, b)| (n.clone(), b.len())).collect(),
            })
            .collect(),
    };
    let json = serde_json::to_vec(&head).expect("a checkpoint head serializes");
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(bytemuck::cast_slice(&r.weights));
    for g in &r.optimizer {
        for (_, b) in &g.state.buffers {
            out.extend_from_slice(bytemuck::cast_slice(b));
        }
    }
    Ok(out)
}

fn decode_restored(bytes: &[u8]) -> Result<Restored> {
    let bad = || TrainError::format("the checkpoint the chief sent", "malformed");
    let json_len = u64::from_le_bytes(bytes.get(..8).ok_or_else(bad)?.try_into().expect("8 bytes")) as usize;
    let head: RestoredHead =
        serde_json::from_slice(bytes.get(8..8 + json_len).ok_or_else(bad)?).map_err(|_| bad())?;
    let mut at = 8 + json_len;
    let mut floats = |n: usize| -> Result<Vec<f32>> {
        let raw = bytes.get(at..at + n * 4).ok_or_else(bad)?;
        at += n * 4;
        Ok(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    };
    let weights = floats(head.weights)?;
    let mut optimizer = Vec::new();
    for g in head.groups {
        let buffers = g.buffers.into_iter().map(|(name, n)| Ok((name, floats(n)?))).collect::<Result<_>>()?;
        optimizer.push(GroupState {
            group: g.group,
            tensors: g.tensors,
            state: OptimizerState { step: g.step, buffers },
        });
    }
    Ok(Restored { progress: head.progress, weights, optimizer })
}

/// Sums since the last progress line.
struct Window {
    loss_sum: f64,
    steps: u64,
    examples: u64,
    since: Instant,
}

impl Window {
    fn new() -> Self {
        Window { loss_sum: 0.0, steps: 0, examples: 0, since: Instant::now() }
    }

    fn add(&mut self, loss: f64, examples: u64) {
        self.loss_sum += loss;
        self.steps += 1;
        self.examples += examples;
    }

    /// The line for the window, which then starts afresh.
    fn line(&mut self, step: u64, epoch: u64, learning_rate: f32) -> LogLine {
        let seconds = self.since.elapsed().as_secs_f64().max(1e-9);
        let line = LogLine {
            step,
            epoch,
            loss: self.loss_sum / self.steps.max(1) as f64,
            examples_per_sec: self.examples as f64 / seconds,
            learning_rate,
            wall_time: unix_time(),
        };
        *self = Window::new();
        line
    }
}
