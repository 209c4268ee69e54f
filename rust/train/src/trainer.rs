//! The training loop every worker runs: epochs over its share of the input, the synchronous
//! step, evaluation across all workers, and the chief's side jobs (checkpoints, TensorBoard
//! event files, the exported model).
//!
//! Resuming: when `model_dir` holds a checkpoint, the chief reads it and broadcasts it, so
//! only the chief needs to see `model_dir`. Training goes on from the checkpoint's step; each
//! worker skips the batches it had already taken in the interrupted epoch (its batches repeat
//! from the seed; with a work queue, the driver hands each worker the same files again after a
//! restart), so a resumed run ends where an uninterrupted one would.
//!
//! Stopping early: at every evaluation the metrics are the same on every worker (they are
//! all-reduced), so every worker tracks the best one alike; the chief also asks the caller's
//! `on_eval` and broadcasts the verdict, so all stop at the same step. The chief writes the
//! best model as a checkpoint under `<model_dir>/best`, and at the end the best weights are
//! restored (from memory, or from that checkpoint after a restart).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::batch::Batch;
use crate::checkpoint::{self, Best, CheckpointOptions, Fence, MAX_SHARD_BYTES, Progress, Restored};
use crate::error::{Result, TrainError};
use crate::export::{self, ModelKind};
use crate::features::{FeatureSpec, KeyKinds};
use crate::groups::{GroupState, OptimizerConfig};
use crate::input::{Input, Plan};
use crate::loss::Loss;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::optim::OptimizerState;
use crate::prefetch::Prefetch;
use crate::shard::{ShardTables, TableOptions};
use crate::step::{DataParallel, SharedRing, lock};
use crate::tensorboard::EventWriter;

/// How long workers wait for the chief to write a checkpoint during `fit`. A chief that dies
/// meanwhile fails the wait at once (its connections close) and one that stops responding is
/// killed by its task, so only a slow but live save can use all of it.
pub const CHECKPOINT_WAIT: Duration = Duration::from_secs(3600);

/// The folder under `model_dir` of the best model's checkpoint (early stopping).
pub const BEST_DIR: &str = "best";

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
    /// Each class's weight in the loss (index: the class id; a binary model has two).
    #[serde(default)]
    pub class_weights: Option<Vec<f32>>,
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
    /// Where the model computes: `cpu`, `cuda` / `cuda:<n>` (a build with the `cuda` feature;
    /// `n` counts the GPUs the process sees, as `CUDA_VISIBLE_DEVICES` sets them), or `auto`:
    /// the first GPU when the build has CUDA and the driver lists one, else the CPU.
    #[serde(default = "defaults::device")]
    pub device: String,
    /// Whether the embedding tables are sharded across the trainers (`auto`: when they do not
    /// fit `table_budget_bytes`).
    #[serde(default)]
    pub shard_tables: ShardTables,
    /// The most bytes one trainer's embedding tables, with their optimizer state, may take;
    /// None: half the memory the trainer may use ([`crate::shard::default_table_budget`]).
    #[serde(default)]
    pub table_budget_bytes: Option<u64>,
    /// Whether embedding tables that are not sharded live on the model's device with their
    /// optimizer state; None: on a GPU when they fit half its memory, never on the CPU
    /// ([`TableOptions::on_device`]).
    #[serde(default)]
    pub tables_on_device: Option<bool>,
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
        "auto".into()
    }
    pub fn restore_best() -> bool {
        true
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
            ("table_budget_bytes", self.table_budget_bytes.unwrap_or(1)),
        ];
        if let Some((name, value)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(TrainError::InvalidArgument(format!("{name}={value} must be at least 1")));
        }
        crate::device::check_name(&self.device)?;
        self.optimizer.validate()?;
        if self.optimizer.update_on_device == Some(true) {
            let elsewhere = match (self.tables_on_device, self.shard_tables) {
                (Some(false), _) => Some("tables_on_device=False"),
                (_, ShardTables::On) => Some("shard_tables='on'"),
                _ => None,
            };
            if let Some(setting) = elsewhere {
                return Err(TrainError::InvalidArgument(format!(
                    "update_on_device=True updates the variables on the device beside the embedding \
                     tables, which {setting} keeps elsewhere"
                )));
            }
        }
        if let Some(weights) = &self.class_weights {
            let classes = match &self.model {
                ModelKind::LogisticRegression { outputs } | ModelKind::Mlp { outputs, .. } => *outputs,
                _ => 1,
            };
            let want = if classes == 1 { 2 } else { classes };
            if !self.loss.is_classification() {
                return Err(TrainError::InvalidArgument(
                    "class_weight: a regression model has no classes".into(),
                ));
            }
            if weights.len() != want {
                return Err(TrainError::InvalidArgument(format!(
                    "class_weight has {} weights, the model has {want} classes",
                    weights.len()
                )));
            }
            if let Some(bad) = weights.iter().find(|w| !(w.is_finite() && **w >= 0.0)) {
                return Err(TrainError::InvalidArgument(format!(
                    "class_weight: {bad} is not a non-negative number"
                )));
            }
        }
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitOptions {
    /// Passes over the data (counting from the start of training, not of this call).
    pub epochs: u64,
    /// Stop at this many steps in all, even mid-epoch.
    pub max_steps: Option<u64>,
    /// Evaluate on the evaluation input every this many steps (besides at the end).
    pub eval_every: Option<u64>,
    /// Stop when an evaluation metric stops improving.
    #[serde(default)]
    pub early_stopping: Option<EarlyStopping>,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions { epochs: 1, max_steps: None, eval_every: None, early_stopping: None }
    }
}

/// The evaluation metric early stopping watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Monitor {
    /// The evaluation loss; lower is better.
    Loss,
    /// The accuracy; higher is better.
    Accuracy,
    /// The AUC (binary models); higher is better.
    Auc,
}

impl Monitor {
    /// The metric's name, as settings spell it.
    pub fn name(self) -> &'static str {
        match self {
            Monitor::Loss => "loss",
            Monitor::Accuracy => "accuracy",
            Monitor::Auc => "auc",
        }
    }

    /// Whether a model trained with `loss` has this metric in its evaluations.
    fn measured_with(self, loss: Loss) -> bool {
        match self {
            Monitor::Loss => true,
            Monitor::Accuracy => loss.is_classification(),
            Monitor::Auc => loss == Loss::BinaryCrossEntropy,
        }
    }

    /// The metric's value in `m`, if the model has it.
    fn value(self, m: &Metrics) -> Option<f64> {
        match self {
            Monitor::Loss => Some(m.loss),
            Monitor::Accuracy => m.accuracy,
            Monitor::Auc => m.auc,
        }
        .filter(|v| v.is_finite())
    }

    /// Whether `value` improves on `best` by more than `min_delta`.
    fn improves(self, value: f64, best: f64, min_delta: f64) -> bool {
        match self {
            Monitor::Loss => value < best - min_delta,
            Monitor::Accuracy | Monitor::Auc => value > best + min_delta,
        }
    }
}

/// Keras's `EarlyStopping` on the evaluations `fit` runs (it needs evaluation data).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyStopping {
    /// The metric watched.
    pub monitor: Monitor,
    /// Evaluations without improvement tolerated before stopping (0: stop at the first).
    #[serde(default)]
    pub patience: u64,
    /// The least change that counts as an improvement.
    #[serde(default)]
    pub min_delta: f64,
    /// End with the best evaluation's weights (so `export` writes them), not the last ones.
    #[serde(default = "defaults::restore_best")]
    pub restore_best: bool,
}

impl EarlyStopping {
    /// Checks the settings for a model trained with `loss`, whose evaluations must have the
    /// monitored metric (AUC needs a binary model, accuracy a classifier).
    pub fn validate(&self, loss: Loss) -> Result<()> {
        if !(self.min_delta.is_finite() && self.min_delta >= 0.0) {
            return Err(TrainError::InvalidArgument(format!(
                "early_stopping: min_delta={} must be a non-negative number",
                self.min_delta
            )));
        }
        if !self.monitor.measured_with(loss) {
            return Err(TrainError::InvalidArgument(format!(
                "early_stopping: a model trained with {} has no '{}' to watch",
                loss.name(),
                self.monitor.name()
            )));
        }
        Ok(())
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
    /// Whether training stopped before its epochs or steps were done (early stopping or the
    /// chief's `on_eval`).
    pub stopped_early: bool,
    /// The best evaluation's step and value of early stopping's metric; the model ends with
    /// its weights when `restore_best`.
    pub best: Option<Best>,
    /// The checkpoint of the best model (`<model_dir>/best`), when there is a `model_dir`.
    pub best_checkpoint: Option<String>,
}

/// The chief's hook on evaluations: whether to stop (true) or go on.
pub type OnEval<'a> = &'a mut dyn FnMut(&EvalLine) -> Result<bool>;

/// What the caller of [`Trainer::fit`] hears, and may answer.
pub struct Hooks<'a> {
    /// Sees every progress line; an error it returns (an interrupt, say) stops training.
    pub on_log: &'a mut dyn FnMut(&LogLine) -> Result<()>,
    /// On the chief only: sees every evaluation and answers whether to stop (true) or go on.
    /// Every worker follows the chief's answer.
    pub on_eval: Option<OnEval<'a>>,
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
    /// Who writes checkpoints: this trainer's job and generation.
    fence: Fence,
    /// The checkpoint folders (`model_dir`, the best model's) this trainer claimed before its
    /// first save there.
    claimed: Vec<String>,
    /// The best evaluation's weights (the variables' and this worker's rows of sharded
    /// tables), when early stopping restores them from memory.
    best_weights: Option<(Vec<f32>, Vec<Vec<f32>>)>,
    /// The kind of each key column in the data `fit` trained on, for the export.
    key_kinds: KeyKinds,
}

/// How large a model's embedding tables are, and where they would live among some number of
/// trainers: what [`Trainer::new`] decides, worked out without allocating a table, so that
/// the driver can report it, or refuse a job that would fail, before any trainer starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TablePlan {
    /// The bytes of the tables with their optimizer state, whole on one trainer.
    pub whole_bytes: u64,
    /// The bytes of the largest trainer's share when the tables are sharded.
    pub shard_bytes: u64,
    /// Where they would live under the budget given: None when no budget is known.
    pub placement: Option<crate::shard::Placement>,
}

/// The [`TablePlan`] of `config`'s model over `features` among `workers` trainers, each
/// allowed `config.table_budget_bytes`, else `budget` (what the driver knows of the trainers'
/// memory), else nothing known. Raises the error [`Trainer::new`] would for tables that do not
/// fit where they would live.
pub fn table_plan(
    config: &TrainerConfig,
    features: &FeatureSpec,
    workers: usize,
    budget: Option<u64>,
) -> Result<TablePlan> {
    config.validate()?;
    features.validate()?;
    let model = config.model.build(features, config.seed)?;
    let tables = model.parameters().table_entries();
    let rule = |e: &crate::params::Entry| crate::sharded::rule_of(&config.optimizer, e);
    let dense = !config.optimizer.sparse_tables;
    let unbounded = |shard| TableOptions { shard, budget_bytes: Some(u64::MAX), on_device: None };
    let whole_bytes = unbounded(ShardTables::Off).plan(&tables, rule, dense, workers.max(1))?.bytes;
    let shard_bytes = unbounded(ShardTables::On).plan(&tables, rule, dense, workers.max(1))?.bytes;
    let placement = config
        .table_budget_bytes
        .or(budget)
        .map(|budget| {
            TableOptions { shard: config.shard_tables, budget_bytes: Some(budget), on_device: None }.plan(
                &tables,
                rule,
                dense,
                workers.max(1),
            )
        })
        .transpose()?;
    Ok(TablePlan { whole_bytes, shard_bytes, placement })
}

impl Trainer {
    /// Builds the model for `features`, joins the ring (None: training alone), and resumes
    /// from the latest checkpoint in `model_dir` if there is one. Its checkpoints are written
    /// as a trainer outside any job ([`Fence::default`]).
    pub fn new(config: TrainerConfig, features: FeatureSpec, ring: Option<SharedRing>) -> Result<Self> {
        Self::with_fence(config, features, ring, Fence::default())
    }

    /// [`Trainer::new`] for a trainer of a job's generation, as `fence` says: its checkpoints
    /// carry the generation, and once a later generation (or another job) writes `model_dir`,
    /// its saves fail with [`TrainError::Superseded`].
    pub fn with_fence(
        config: TrainerConfig,
        features: FeatureSpec,
        ring: Option<SharedRing>,
        fence: Fence,
    ) -> Result<Self> {
        config.validate()?;
        features.validate()?;
        let rank = ring.as_ref().map_or(0, |r| lock(r).rank());
        let workers = ring.as_ref().map_or(1, |r| lock(r).size()) as u64;
        let device = crate::device::open(&config.device)?;
        let model = config.model.build_on(&device, &features, config.seed)?;
        let tables = TableOptions {
            shard: config.shard_tables,
            budget_bytes: config.table_budget_bytes,
            on_device: config.tables_on_device,
        };
        let mut dp = DataParallel::with_tables(model, config.loss, &config.optimizer, ring, &tables)?;
        dp.set_class_weights(config.class_weights.clone())?;
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
            fence,
            claimed: Vec::new(),
            best_weights: None,
            key_kinds: KeyKinds::new(),
        };
        if let Some(dir) = trainer.config.model_dir.clone()
            && let Some((progress, folder)) = trainer.restore(&dir)?
        {
            trainer.resumed_from = Some(progress.step);
            trainer.progress = progress;
            // The state of this step is saved already: saving it again would only copy it.
            trainer.last_checkpoint = Some((progress.step, folder));
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

    /// The weights, flat in parameter-name order (the variables alone when the tables are
    /// sharded or on the device; see [`Trainer::full_weights`]); copied from the device when
    /// the variables are updated there.
    pub fn weights(&self) -> Result<std::borrow::Cow<'_, [f32]>> {
        self.dp.weights()
    }

    /// Every parameter's values, tables included, in the layout of all parameters; with
    /// sharded tables, gathered from every trainer (all call it together).
    pub fn full_weights(&self) -> Result<Vec<f32>> {
        self.dp.full_weights()
    }

    /// Whether the embedding tables are sharded across the trainers.
    pub fn is_sharded(&self) -> bool {
        self.dp.is_sharded()
    }

    /// Where the model computes: `cpu` or `cuda:<n>` (what `auto` chose).
    pub fn device(&self) -> String {
        crate::device::name(&self.device)
    }

    /// The engine's data-parallel step, with the model and its weights.
    pub fn data_parallel(&self) -> &DataParallel<Box<dyn Model>> {
        &self.dp
    }

    /// Trains on `input` (this worker's share) together with every other worker: call on all
    /// of them with the same options. `hooks` hear of progress and evaluations.
    pub fn fit(
        &mut self,
        input: &Input,
        options: &FitOptions,
        eval: Option<&Input>,
        hooks: &mut Hooks<'_>,
    ) -> Result<FitSummary> {
        if options.eval_every == Some(0) {
            return Err(TrainError::InvalidArgument("eval_every must be at least 1".into()));
        }
        if let Some(es) = &options.early_stopping {
            es.validate(self.config.loss)?;
            if eval.is_none() {
                return Err(TrainError::InvalidArgument(
                    "early_stopping needs evaluation data (eval_data) to watch".into(),
                ));
            }
        }
        let started = Instant::now();
        let first_step = self.progress.step;
        self.key_kinds.extend(self.features.key_kinds(input.schema()));
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
            stopped_early: false,
            best: None,
            best_checkpoint: None,
        };
        let mut window = Window::new();
        let mut last_epoch = self.progress.epoch;
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
            // The next batch is put on the device and its ids placed while a step runs.
            let mut batches = Prefetch::for_step(batches, &self.dp)?;
            loop {
                if done(self.progress.step) {
                    break 'epochs;
                }
                let batch = batches.next().transpose()?;
                let Some(stats) = self.dp.step_prepared(batch)? else { break };
                self.progress.step = stats.step;
                self.progress.batches_in_epoch += 1;
                last_epoch = self.progress.epoch;
                summary.first_step_at.get_or_insert_with(unix_time);
                summary.examples += stats.examples;
                window.add(stats.loss as f64, stats.examples);
                if stats.step % self.config.log_every == 0 {
                    let line =
                        window.line(stats.step, self.progress.epoch, self.dp.optimizers().learning_rate());
                    self.log(&line)?;
                    (hooks.on_log)(&line)?;
                    summary.loss = Some(line.loss);
                    summary.history.push(line);
                }
                if self.config.checkpoint_every.is_some_and(|k| stats.step % k == 0) {
                    summary.checkpoint = self.checkpoint_together(input)?.or(summary.checkpoint);
                }
                if let (Some(k), Some(eval)) = (options.eval_every, eval)
                    && stats.step % k == 0
                    && self.evaluate_and_decide(eval, options, hooks, &mut summary)?
                {
                    summary.stopped_early = true;
                    break 'epochs;
                }
            }
            self.progress.epoch += 1;
            self.progress.batches_in_epoch = 0;
        }
        if window.steps > 0 {
            // The steps since the last progress line get one too, so that a run shorter than
            // `log_every`, or not a multiple of it, still logs its loss at its last step.
            let line = window.line(self.progress.step, last_epoch, self.dp.optimizers().learning_rate());
            self.log(&line)?;
            (hooks.on_log)(&line)?;
            summary.loss = Some(line.loss);
            summary.history.push(line);
        }
        if let Some(eval) = eval
            && summary.evaluations.last().is_none_or(|e| e.step != self.progress.step)
        {
            // The last evaluation counts for early stopping too; there is nothing left to stop.
            self.evaluate_and_decide(eval, options, hooks, &mut summary)?;
        }
        summary.checkpoint = self.checkpoint_together(input)?.or(summary.checkpoint);
        if let Some(es) = &options.early_stopping {
            if es.restore_best {
                self.restore_best()?;
            }
            summary.best = self.progress.best;
            summary.best_checkpoint = self.best_dir().filter(|_| self.progress.best.is_some());
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

    /// Evaluates, tracks the best evaluation and asks the chief's hook; returns whether every
    /// worker stops now (the chief's verdict, broadcast).
    fn evaluate_and_decide(
        &mut self,
        eval: &Input,
        options: &FitOptions,
        hooks: &mut Hooks<'_>,
        summary: &mut FitSummary,
    ) -> Result<bool> {
        let line = self.evaluate_logged(eval)?;
        let mut stop = match &options.early_stopping {
            Some(es) => self.track_best(&line, es)?,
            None => false,
        };
        if self.rank == 0
            && let Some(on_eval) = hooks.on_eval.as_mut()
        {
            stop |= on_eval(&line)?;
        }
        summary.evaluations.push(line);
        if let Some(ring) = self.dp.ring() {
            let mut verdict = [stop as u8];
            lock(ring).broadcast(&mut verdict, 0)?;
            stop = verdict[0] != 0;
        }
        Ok(stop)
    }

    /// Early stopping's bookkeeping for one evaluation: a better one is kept (its weights in
    /// memory, and as the chief's checkpoint under `<model_dir>/best`); returns whether the
    /// patience has run out.
    fn track_best(&mut self, line: &EvalLine, es: &EarlyStopping) -> Result<bool> {
        let Some(value) = es.monitor.value(&line.metrics) else {
            return Err(TrainError::InvalidArgument(format!(
                "early_stopping watches {}, which this model's evaluation does not have",
                es.monitor.name()
            )));
        };
        let better = match self.progress.best {
            None => true,
            Some(best) => es.monitor.improves(value, best.value, es.min_delta),
        };
        if !better {
            self.progress.evals_since_best += 1;
            return Ok(self.progress.evals_since_best > es.patience);
        }
        self.progress.best = Some(Best { step: line.step, value });
        self.progress.evals_since_best = 0;
        // Sharded tables are restored from the best checkpoint rather than kept twice in
        // memory, when there is one.
        if es.restore_best && !(self.dp.is_sharded() && self.best_dir().is_some()) {
            self.best_weights = Some(self.dp.snapshot()?);
        }
        if let Some(dir) = self.best_dir() {
            self.claim(&dir)?;
            let options = CheckpointOptions {
                max_shard_bytes: self.config.max_shard_bytes,
                keep: 1,
                fence: self.fence.clone(),
            };
            if self.dp.is_sharded() {
                self.dp.save_checkpoint(&dir, self.progress, &options)?;
            } else {
                if self.rank == 0 {
                    self.dp.save_checkpoint(&dir, self.progress, &options)?;
                }
                if let Some(ring) = self.dp.ring() {
                    lock(ring).barrier_within(CHECKPOINT_WAIT)?;
                }
            }
        }
        Ok(false)
    }

    /// Where the chief keeps the best model's checkpoint.
    fn best_dir(&self) -> Option<String> {
        self.config.model_dir.as_deref().map(|dir| sparktrain_storage::join_url(dir, BEST_DIR))
    }

    /// Gives the model the best evaluation's weights: those kept in memory, or after a
    /// restart those of `<model_dir>/best`. The step count stays as it is.
    fn restore_best(&mut self) -> Result<()> {
        let Some(best) = self.progress.best else { return Ok(()) };
        if best.step == self.progress.step {
            return Ok(());
        }
        if let Some(weights) = self.best_weights.take() {
            return self.dp.put_snapshot(weights);
        }
        let Some(dir) = self.best_dir() else { return Ok(()) };
        let progress = self.progress;
        let restored = self.restore(&dir)?;
        // A chief killed after saving a better model than its last checkpoint knew of leaves
        // that model in the folder: its own record of the best is the one to keep.
        let best = restored.and_then(|(r, _)| r.best).or(progress.best);
        self.progress = Progress { best, ..progress };
        Ok(())
    }

    fn evaluate_logged(&mut self, input: &Input) -> Result<EvalLine> {
        let metrics = self.evaluate(input)?;
        let step = self.progress.step;
        if let Some(events) = &mut self.events {
            let mut scalars = vec![("eval/loss", metrics.loss as f32)];
            if let Some(accuracy) = metrics.accuracy {
                scalars.push(("eval/accuracy", accuracy as f32));
            }
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
    /// chief by the next step's collective, whose time-out is far shorter. The chief then
    /// tells a driver's work queue ([`crate::input::WorkQueue::checkpointed`]).
    fn checkpoint_together(&mut self, input: &Input) -> Result<Option<String>> {
        let folder = self.save_checkpoint()?;
        if self.rank == 0
            && folder.is_some()
            && let Plan::Queue(queue) = input.plan()
        {
            queue.checkpointed(self.progress.epoch);
        }
        if self.config.model_dir.is_some()
            && !self.dp.is_sharded()
            && let Some(ring) = self.dp.ring()
        {
            lock(ring).barrier_within(CHECKPOINT_WAIT)?;
        }
        Ok(folder)
    }

    /// The chief writes a checkpoint of the current state to `model_dir` (once per step);
    /// returns its folder, or None on other workers or without `model_dir`. With sharded
    /// tables every worker calls it together and writes its own rows (each gets the folder).
    pub fn save_checkpoint(&mut self) -> Result<Option<String>> {
        let Some(dir) = self.config.model_dir.clone() else { return Ok(None) };
        let sharded = self.dp.is_sharded();
        if self.rank != 0 && !sharded {
            return Ok(None);
        }
        if let Some((step, folder)) = &self.last_checkpoint
            && *step == self.progress.step
        {
            return Ok(Some(folder.clone()));
        }
        self.claim(&dir)?;
        let options = CheckpointOptions {
            max_shard_bytes: self.config.max_shard_bytes,
            keep: self.config.keep_checkpoints,
            fence: self.fence.clone(),
        };
        let folder = self.dp.save_checkpoint(&dir, self.progress, &options)?;
        self.last_checkpoint = Some((self.progress.step, folder.clone()));
        Ok(Some(folder))
    }

    /// Before this trainer's first save into `dir`: the chief claims it for this generation
    /// ([`checkpoint::claim`]), which refuses a superseded generation and clears what a chief
    /// killed midway left, now that no older generation can publish any more (a trainer that
    /// only reads removes nothing). With sharded tables every worker calls it together, and no
    /// owner writes its rows before the chief has claimed.
    fn claim(&mut self, dir: &str) -> Result<()> {
        if self.claimed.iter().any(|d| d == dir) {
            return Ok(());
        }
        let sharded = self.dp.is_sharded();
        if self.rank == 0 || sharded {
            let claimed = if self.rank == 0 { checkpoint::claim(dir, &self.fence).map(drop) } else { Ok(()) };
            if sharded {
                self.dp.together(claimed, dir, "claim the checkpoint folder")?;
            } else {
                claimed?;
            }
        }
        self.claimed.push(dir.to_string());
        Ok(())
    }

    /// The chief writes the exported model into `dir`; returns whether this worker wrote it.
    /// With sharded tables every worker calls it together and writes its rows of the tables
    /// ([`export::export_sharded`]).
    pub fn export(&self, dir: &str) -> Result<bool> {
        if self.dp.is_sharded() {
            export::export_sharded(
                dir,
                &self.config.model,
                &self.features,
                &self.key_kinds,
                self.config.loss,
                &self.dp,
                self.config.max_shard_bytes,
            )?;
            return Ok(self.rank == 0);
        }
        if self.rank != 0 {
            return Ok(false);
        }
        let (entries, weights) = self.dp.export_weights()?;
        let kinds = &self.key_kinds;
        export::export(dir, &self.config.model, &self.features, kinds, self.config.loss, &entries, &weights)?;
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

    /// Loads the latest checkpoint: the chief reads it and every other worker receives it;
    /// with sharded tables, every worker then reads its own rows. Returns its progress and
    /// folder.
    fn restore(&mut self, model_dir: &str) -> Result<Option<(Progress, String)>> {
        let Some(restored) = self.read_checkpoint(model_dir)? else { return Ok(None) };
        let folder = restored.folder.clone();
        let progress = self.dp.load(restored)?;
        if self.dp.is_sharded() {
            let loaded = self.dp.load_table_rows(&folder);
            self.dp.together(loaded, &folder, "read its rows of the embedding tables")?;
        }
        Ok(Some((progress, folder)))
    }

    /// The latest checkpoint's weights, optimizer state and progress (sharded tables left to
    /// their owners): the chief reads it and every other worker receives it.
    fn read_checkpoint(&mut self, model_dir: &str) -> Result<Option<Restored>> {
        let (layout, sharded) = self.dp.restore_layout();
        let Some(ring) = self.dp.ring().cloned() else {
            return checkpoint::restore_except(model_dir, &layout, &sharded);
        };
        let mut ring = lock(&ring);
        // [status][length] then the payload: 0 none, 1 a checkpoint, 2 the chief failed (its
        // reason), 3 the checkpoint does not fit this model (the reason; no restart cures it).
        let (mut head, payload, failure) = if self.rank == 0 {
            match checkpoint::restore_except(model_dir, &layout, &sharded) {
                Ok(Some(r)) => {
                    let bytes = encode_restored(&r)?;
                    (head(1, bytes.len()), bytes, None)
                }
                Ok(None) => (head(0, 0), Vec::new(), None),
                // The others fail with the chief's reason, not only with the fact.
                Err(TrainError::StateMismatch(reason)) => {
                    let bytes = reason.clone().into_bytes();
                    (head(3, bytes.len()), bytes, Some(TrainError::StateMismatch(reason)))
                }
                Err(e) => {
                    let reason = e.to_string().into_bytes();
                    (head(2, reason.len()), reason, Some(e))
                }
            }
        } else {
            ([0u8; 9], Vec::new(), None)
        };
        ring.broadcast(&mut head, 0)?;
        let length = u64::from_le_bytes(head[1..].try_into().expect("8 bytes")) as usize;
        let mut payload = if self.rank == 0 { payload } else { vec![0u8; length] };
        if head[0] == 0 {
            return Ok(None);
        }
        ring.broadcast(&mut payload, 0)?;
        if head[0] == 3 {
            return Err(failure.unwrap_or_else(|| {
                let reason = String::from_utf8_lossy(&payload);
                TrainError::StateMismatch(format!("{reason} (the chief's reading of {model_dir})"))
            }));
        }
        if head[0] == 2 {
            return Err(failure.unwrap_or_else(|| {
                let reason = String::from_utf8_lossy(&payload);
                TrainError::format(
                    model_dir,
                    format!("the chief could not read the latest checkpoint: {reason}"),
                )
            }));
        }
        drop(ring);
        decode_restored(&payload).map(Some)
    }
}

/// Seconds since the Unix epoch.
fn unix_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
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
    folder: String,
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
        folder: r.folder.clone(),
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
    Ok(Restored { progress: head.progress, weights, optimizer, folder: head.folder })
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
