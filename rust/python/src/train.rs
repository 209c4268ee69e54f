//! The training engine for Python: the trainer's configuration, a worker's input, its
//! trainer, and exported models. Options are keyword arguments whose defaults are the
//! engine's own (`TrainerConfig`'s serde defaults, `FitOptions::default()`); results are frozen
//! classes mirroring the engine's structs. Every long call runs without the GIL; the progress
//! callback takes it back briefly, and an exception it raises (Ctrl-C included) stops training.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use arrow::array::{Array, ArrayData, BooleanArray, Float32Array, Int64Array, RecordBatch, UInt32Array};
use arrow::datatypes::Schema;
use arrow::pyarrow::{FromPyArrow, ToPyArrow};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sparktrain_cluster::TaskClient;
use sparktrain_train::features::DEFAULT_BUCKETS;
use sparktrain_train::features::{MultiHot, Pooling};
use sparktrain_train::named::{HYPERPARAMETERS, LEARNING_RATES, LOSSES, MODELS};
use sparktrain_train::{
    Categorical, Crossed, EarlyStopping, EvalLine as RustEvalLine, Exported, Fence, FitOptions, GradientWire,
    Hooks, Input as RustInput, LogLine as RustLogLine, Loss, ModelKind, OptimizerConfig, Regularization,
    Rule, Schedule, ShardTables, TrainError, Trainer as RustTrainer, WorkQueue,
};

use crate::cluster::ControlClient;
use crate::collective::Communicator;
use crate::errors::{Error, Result};
use crate::{detach, lock};

/// How long one request for the next input file waits for the driver.
const WORK_TIMEOUT: Duration = Duration::from_secs(60);

/// Keeps freed memory in the process: the engine allocates fresh buffers for every
/// operation, and glibc's default thresholds hand large ones back to the kernel and fault
/// them in again each step (a quarter of a small model's step time here).
fn tune_allocator() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: mallopt only sets allocator parameters; it is called once, before the
        // engine allocates its buffers.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        }
    });
}

/// The driver's work queue, reached through the trainer's control-plane connection.
struct DriverQueue {
    client: TaskClient,
    task_index: u32,
    /// The job was restarted and no epoch has started yet: the driver hands this task again
    /// what it took before.
    restarted: std::sync::atomic::AtomicBool,
}

impl WorkQueue for DriverQueue {
    fn next(&self, epoch: u64) -> sparktrain_train::Result<Option<String>> {
        let mut client = self.client.clone();
        let task = self.task_index;
        let answer =
            sparktrain_storage::block_on(async move { client.next_work(task, epoch, WORK_TIMEOUT).await });
        let queue = "the driver's work queue";
        answer.map_err(|e| TrainError::read(queue, e))?.map_err(|e| TrainError::read(queue, e))
    }

    fn replays(&self) -> bool {
        // Only the first epoch after a restart: a later pass gets new files.
        self.restarted.swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    fn checkpointed(&self, epoch: u64) {
        let mut client = self.client.clone();
        let task = self.task_index;
        // Best effort: a driver that missed it only keeps more of the queue's history, and a
        // driver that is gone fails the next step anyway.
        let _ =
            sparktrain_storage::block_on(
                async move { client.work_checkpointed(task, epoch, WORK_TIMEOUT).await },
            );
    }
}

/// Which columns feed the model, and how: `dense` float columns, `categorical` columns
/// hashed into `(name, buckets)` ids, `crossed` column tuples hashed together, the `label`.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, eq)]
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureSpec {
    inner: sparktrain_train::FeatureSpec,
}

#[pymethods]
impl FeatureSpec {
    /// Checks the spec (buckets, duplicate names, the id space) as it is built.
    #[new]
    #[pyo3(signature = (
        dense=Vec::new(), categorical=Vec::new(), crossed=Vec::new(), label="label", multi_hot=Vec::new(),
    ))]
    fn new(
        dense: Vec<String>,
        categorical: Vec<(String, u32)>,
        crossed: Vec<(Vec<String>, u32)>,
        label: &str,
        multi_hot: Vec<(String, u32, String)>,
    ) -> Result<Self> {
        let multi_hot = multi_hot
            .into_iter()
            .map(|(name, buckets, pooling)| {
                let pooling = match pooling.as_str() {
                    "sum" => Pooling::Sum,
                    "mean" => Pooling::Mean,
                    other => {
                        return Err(Error::invalid(format!(
                            "multi-hot column '{name}': pooling '{other}', use 'sum' or 'mean'"
                        )));
                    }
                };
                Ok(MultiHot { name, buckets, pooling })
            })
            .collect::<Result<Vec<_>>>()?;
        let inner = sparktrain_train::FeatureSpec {
            dense,
            categorical: categorical
                .into_iter()
                .map(|(name, buckets)| Categorical { name, buckets })
                .collect(),
            crossed: crossed.into_iter().map(|(names, buckets)| Crossed { names, buckets }).collect(),
            multi_hot,
            label: label.to_string(),
        };
        inner.validate()?;
        Ok(FeatureSpec { inner })
    }

    /// Numeric columns taken as float32 values.
    #[getter]
    fn dense(&self) -> Vec<String> {
        self.inner.dense.clone()
    }

    /// `(column, buckets)` for each hashed column.
    #[getter]
    fn categorical(&self) -> Vec<(String, u32)> {
        self.inner.categorical.iter().map(|c| (c.name.clone(), c.buckets)).collect()
    }

    /// `(columns, buckets)` for each crossed tuple of columns.
    #[getter]
    fn crossed(&self) -> Vec<(Vec<String>, u32)> {
        self.inner.crossed.iter().map(|c| (c.names.clone(), c.buckets)).collect()
    }

    /// `(column, buckets, pooling)` for each multi-hot (list) column; pooling is `sum` or `mean`.
    #[getter]
    fn multi_hot(&self) -> Vec<(String, u32, &'static str)> {
        let name = |p: Pooling| match p {
            Pooling::Sum => "sum",
            Pooling::Mean => "mean",
        };
        self.inner.multi_hot.iter().map(|m| (m.name.clone(), m.buckets, name(m.pooling))).collect()
    }

    /// The label column.
    #[getter]
    fn label(&self) -> String {
        self.inner.label.clone()
    }

    /// The columns whose values the ONNX model takes as keys, in the `keys` input's order.
    #[getter]
    fn key_columns(&self) -> Vec<String> {
        self.inner.key_columns()
    }

    /// The features of a `pyarrow.RecordBatch` as the exported ONNX model takes them:
    /// `(rows, dense, keys, missing, bags)`, flat `pyarrow` arrays (float32, int64, bool) row
    /// after row, and for each multi-hot column `(width, keys, present)`.
    #[allow(clippy::type_complexity)]
    fn serving_inputs<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
    ) -> Result<(
        usize,
        Bound<'py, PyAny>,
        Bound<'py, PyAny>,
        Bound<'py, PyAny>,
        Vec<(usize, Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    )> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let inputs = detach(py, || self.inner.serving_inputs(&batch))?;
        let bags = inputs
            .bags
            .into_iter()
            .map(|b| {
                Ok((
                    b.width,
                    Int64Array::from(b.keys).to_data().to_pyarrow(py)?,
                    BooleanArray::from(b.present).to_data().to_pyarrow(py)?,
                ))
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok((
            inputs.rows,
            Float32Array::from(inputs.dense).to_data().to_pyarrow(py)?,
            Int64Array::from(inputs.keys).to_data().to_pyarrow(py)?,
            BooleanArray::from(inputs.missing).to_data().to_pyarrow(py)?,
            bags,
        ))
    }

    fn __repr__(&self) -> String {
        format!(
            "FeatureSpec(dense={:?}, categorical={:?}, crossed={:?}, multi_hot={:?}, label={:?})",
            self.dense(),
            self.categorical(),
            self.crossed(),
            self.multi_hot(),
            self.inner.label
        )
    }
}

/// Everything about a training run but its data. Each keyword left out (or None) takes the
/// engine's default, which the getters show; the configuration is checked as it is built, so
/// the driver refuses a bad one before any Spark job starts.
#[pyclass(module = "sparktrain._native", frozen)]
pub struct TrainerConfig {
    inner: sparktrain_train::TrainerConfig,
    classes: usize,
    optimizer: String,
}

/// `(name, learning rate, settings)` of an update rule as Python gives it.
type RuleArgs = (String, Option<f64>, BTreeMap<String, f64>);

/// `shard_tables` as Python gives it: True or False, or `"auto"`, `"on"` or `"off"`.
#[derive(FromPyObject)]
enum ShardArg {
    Flag(bool),
    Name(String),
}

impl ShardArg {
    fn parse(self) -> Result<ShardTables> {
        match self {
            ShardArg::Flag(true) => Ok(ShardTables::On),
            ShardArg::Flag(false) => Ok(ShardTables::Off),
            ShardArg::Name(name) => Ok(name.parse()?),
        }
    }
}

/// A setting given as JSON by the Python layer (a dict there), read into the engine's own
/// type, which holds its defaults and refuses unknown keys; `parameter` names it in errors.
fn from_json<T: serde::de::DeserializeOwned>(parameter: &str, json: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| Error::invalid(format!("{parameter}: {e}")))
}

#[pymethods]
impl TrainerConfig {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (
        *, model="mlp", classes=1, hidden=None, dim=None, optimizer=("adam".to_string(), None, BTreeMap::new()),
        wide_optimizer=None, sparse_tables=None, threads=None, batch_size=None, shuffle_buffer=None,
        prefetch=None, seed=None, model_dir=None, checkpoint_every=None, keep_checkpoints=None,
        max_shard_bytes=None, tensorboard_dir=None, log_every=None, device=None, loss=None,
        class_weight=None, lr_schedule=None, clip_norm=None, regularization=None, cross_layers=None,
        shard_tables=None, table_budget_bytes=None, gradient_wire=None, tables_on_device=None,
        overlap_gradients=None, update_on_device=None,
    ))]
    fn new(
        model: &str,
        classes: usize,
        hidden: Option<Vec<usize>>,
        dim: Option<usize>,
        optimizer: RuleArgs,
        wide_optimizer: Option<RuleArgs>,
        sparse_tables: Option<bool>,
        threads: Option<usize>,
        batch_size: Option<usize>,
        shuffle_buffer: Option<usize>,
        prefetch: Option<usize>,
        seed: Option<u64>,
        model_dir: Option<String>,
        checkpoint_every: Option<u64>,
        keep_checkpoints: Option<usize>,
        max_shard_bytes: Option<u64>,
        tensorboard_dir: Option<String>,
        log_every: Option<u64>,
        device: Option<String>,
        loss: Option<&str>,
        class_weight: Option<Vec<f32>>,
        lr_schedule: Option<&str>,
        clip_norm: Option<f32>,
        regularization: Option<&str>,
        cross_layers: Option<usize>,
        shard_tables: Option<ShardArg>,
        table_budget_bytes: Option<u64>,
        gradient_wire: Option<&str>,
        tables_on_device: Option<bool>,
        overlap_gradients: Option<bool>,
        update_on_device: Option<bool>,
    ) -> Result<Self> {
        let rule = |(name, lr, settings): &RuleArgs| Rule::named(name, *lr, settings);
        let mut optimizers = OptimizerConfig::new(rule(&optimizer)?);
        optimizers.wide = wide_optimizer.as_ref().map(rule).transpose()?;
        optimizers.threads = threads.unwrap_or(optimizers.threads);
        optimizers.sparse_tables = sparse_tables.unwrap_or(optimizers.sparse_tables);
        optimizers.clip_norm = clip_norm;
        optimizers.overlap_gradients = overlap_gradients.unwrap_or(optimizers.overlap_gradients);
        optimizers.update_on_device = update_on_device;
        if let Some(name) = gradient_wire {
            optimizers.gradient_wire = GradientWire::named(name)?;
        }
        if let Some(json) = lr_schedule {
            optimizers.schedule = from_json::<Schedule>("lr_schedule", json)?;
        }
        if let Some(json) = regularization {
            optimizers.regularization = from_json::<Regularization>("regularization", json)?;
        }
        let model = ModelKind::named(model, classes, hidden, dim, cross_layers)?;
        let mut config = sparktrain_train::TrainerConfig::new(model, optimizers);
        config.loss = Loss::named(loss, classes)?;
        config.class_weights = class_weight;
        macro_rules! given {
            ($($field:ident),*) => {
                $(if let Some(value) = $field {
                    config.$field = value;
                })*
            };
        }
        given!(
            batch_size,
            shuffle_buffer,
            prefetch,
            seed,
            keep_checkpoints,
            max_shard_bytes,
            log_every,
            device
        );
        config.model_dir = model_dir;
        config.checkpoint_every = checkpoint_every;
        config.tensorboard_dir = tensorboard_dir;
        if let Some(shard) = shard_tables {
            config.shard_tables = shard.parse()?;
        }
        config.table_budget_bytes = table_budget_bytes;
        config.tables_on_device = tables_on_device;
        config.validate()?;
        Ok(TrainerConfig { inner: config, classes, optimizer: optimizer.0 })
    }

    /// The model's name.
    #[getter]
    fn model(&self) -> &'static str {
        self.inner.model.name()
    }

    /// Outputs per example (1: a binary model).
    #[getter]
    fn classes(&self) -> usize {
        self.classes
    }

    /// `binary_cross_entropy`, `softmax_cross_entropy` or `mean_squared_error`.
    #[getter]
    fn loss(&self) -> &'static str {
        self.inner.loss.name()
    }

    /// Each class's weight in the loss, if given.
    #[getter]
    fn class_weight(&self) -> Option<Vec<f32>> {
        self.inner.class_weights.clone()
    }

    /// The learning-rate schedule, as JSON.
    #[getter]
    fn lr_schedule(&self) -> String {
        serde_json::to_string(&self.inner.optimizer.schedule).expect("a schedule serializes")
    }

    /// The global gradient norm steps are clipped to, if any.
    #[getter]
    fn clip_norm(&self) -> Option<f32> {
        self.inner.optimizer.clip_norm
    }

    /// How the dense layers' gradients travel in the step's all-reduce: `f32`, `bf16` or `f16`.
    #[getter]
    fn gradient_wire(&self) -> &'static str {
        self.inner.optimizer.gradient_wire.name()
    }

    /// Whether several trainers on the CPU all-reduce the dense tower's gradients in buckets
    /// while the backward pass goes on, rather than in one call after it.
    #[getter]
    fn overlap_gradients(&self) -> bool {
        self.inner.optimizer.overlap_gradients
    }

    /// The L1/L2 penalties per group, as JSON.
    #[getter]
    fn regularization(&self) -> String {
        serde_json::to_string(&self.inner.optimizer.regularization).expect("penalties serialize")
    }

    /// The optimizer's name.
    #[getter]
    fn optimizer(&self) -> String {
        self.optimizer.clone()
    }

    /// Examples per batch on each worker.
    #[getter]
    fn batch_size(&self) -> usize {
        self.inner.batch_size
    }

    /// Rows held for shuffling (0 or 1: none).
    #[getter]
    fn shuffle_buffer(&self) -> usize {
        self.inner.shuffle_buffer
    }

    /// Batches prepared ahead of training.
    #[getter]
    fn prefetch(&self) -> usize {
        self.inner.prefetch
    }

    /// The seed of the initial weights, the file order and shuffling.
    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// Where checkpoints go, and are resumed from.
    #[getter]
    fn model_dir(&self) -> Option<String> {
        self.inner.model_dir.clone()
    }

    /// Steps between checkpoints (None: only at the end).
    #[getter]
    fn checkpoint_every(&self) -> Option<u64> {
        self.inner.checkpoint_every
    }

    /// Checkpoints kept.
    #[getter]
    fn keep_checkpoints(&self) -> usize {
        self.inner.keep_checkpoints
    }

    /// The largest checkpoint shard file, in bytes.
    #[getter]
    fn max_shard_bytes(&self) -> u64 {
        self.inner.max_shard_bytes
    }

    /// Where TensorBoard event files go.
    #[getter]
    fn tensorboard_dir(&self) -> Option<String> {
        self.inner.tensorboard_dir.clone()
    }

    /// Steps between progress lines.
    #[getter]
    fn log_every(&self) -> u64 {
        self.inner.log_every
    }

    /// Threads that share a large optimizer update.
    #[getter]
    fn threads(&self) -> usize {
        self.inner.optimizer.threads
    }

    /// Whether only the embedding rows a step touched are updated.
    #[getter]
    fn sparse_tables(&self) -> bool {
        self.inner.optimizer.sparse_tables
    }

    /// `cpu`, `auto`, `cuda` or `cuda:<n>`.
    #[getter]
    fn device(&self) -> String {
        self.inner.device.clone()
    }

    /// Whether embedding tables are sharded across the trainers: `auto` (when they do not fit
    /// `table_budget_bytes`), `on` or `off`.
    #[getter]
    fn shard_tables(&self) -> &'static str {
        self.inner.shard_tables.name()
    }

    /// The most bytes one trainer's embedding tables (with their optimizer state) may take;
    /// None: half the memory the trainer may use.
    #[getter]
    fn table_budget_bytes(&self) -> Option<u64> {
        self.inner.table_budget_bytes
    }

    /// Whether embedding tables that are not sharded live on the GPU with their optimizer
    /// state; None: when they fit half its memory (never on the CPU).
    #[getter]
    fn tables_on_device(&self) -> Option<bool> {
        self.inner.tables_on_device
    }

    /// Whether the variables' update runs on the GPU with their optimizer state; None: on a
    /// GPU, when the tables are there too or there are none (never on the CPU).
    #[getter]
    fn update_on_device(&self) -> Option<bool> {
        self.inner.optimizer.update_on_device
    }

    /// The whole configuration as the engine resolved it, as JSON: every default filled in
    /// (each rule's settings, the model's shape), for experiment trackers to record.
    fn to_json(&self) -> String {
        serde_json::to_string(&self.inner).expect("a configuration serializes")
    }
}

/// One worker's share of the training data.
#[pyclass(module = "sparktrain._native", frozen)]
struct Input {
    inner: Arc<RustInput>,
}

#[pymethods]
impl Input {
    /// The files at `path` (a folder, file or glob; TFRecord or Parquet), this worker's
    /// fixed share of them, batched as `config` says.
    #[staticmethod]
    fn files(
        py: Python<'_>,
        path: String,
        workers: usize,
        worker: usize,
        config: &TrainerConfig,
    ) -> Result<Self> {
        let options = config.inner.input_options();
        let input = detach(py, || RustInput::open(&path, workers, worker, options))?;
        Ok(Input { inner: Arc::new(input) })
    }

    /// The files at `path`, taken one at a time from the driver's work queue through
    /// `client` as task `task_index`; `restarted` when the job was restarted, so that the
    /// queue first hands this task again the files it took before.
    #[staticmethod]
    #[pyo3(signature = (path, client, task_index, config, restarted=false))]
    fn queued(
        py: Python<'_>,
        path: String,
        client: &ControlClient,
        task_index: u32,
        config: &TrainerConfig,
        restarted: bool,
    ) -> Result<Self> {
        let options = config.inner.input_options();
        let queue =
            Arc::new(DriverQueue { client: client.task_client(), task_index, restarted: restarted.into() });
        let input = detach(py, || RustInput::queued(&path, queue, task_index as usize, options))?;
        Ok(Input { inner: Arc::new(input) })
    }

    /// The Arrow IPC stream served on the Unix socket `path` (the task's Spark partition).
    #[staticmethod]
    fn feed(py: Python<'_>, path: String, worker: usize, config: &TrainerConfig) -> Result<Self> {
        let options = config.inner.input_options();
        let input = detach(py, || RustInput::feed(&path, worker, options))?;
        Ok(Input { inner: Arc::new(input) })
    }

    /// The `pyarrow.Schema` of the data.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyAny>> {
        Ok(self.inner.schema().as_ref().to_pyarrow(py)?)
    }
}

/// The feature spec inferred from `schema`: floating-point columns dense, integer and string
/// columns hashed into `buckets` ids each.
#[pyfunction]
#[pyo3(signature = (schema, label, buckets=DEFAULT_BUCKETS))]
fn infer_features(schema: &Bound<'_, PyAny>, label: &str, buckets: u32) -> Result<FeatureSpec> {
    let schema = Schema::from_pyarrow_bound(schema)?;
    Ok(FeatureSpec { inner: sparktrain_train::FeatureSpec::infer(&schema, label, buckets)? })
}

/// A progress line, every `log_every` steps.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, get_all)]
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Steps taken.
    step: u64,
    /// The epoch under way (from 0).
    epoch: u64,
    /// The mean loss over the steps since the last line.
    loss: f64,
    /// Examples per second over all workers since the last line.
    examples_per_sec: f64,
    /// The (first) optimizer's step size.
    learning_rate: f32,
    /// Seconds since the Unix epoch when the line was made.
    wall_time: f64,
}

impl From<&RustLogLine> for LogLine {
    fn from(l: &RustLogLine) -> Self {
        LogLine {
            step: l.step,
            epoch: l.epoch,
            loss: l.loss,
            examples_per_sec: l.examples_per_sec,
            learning_rate: l.learning_rate,
            wall_time: l.wall_time,
        }
    }
}

/// An evaluation over every worker's share: the mean loss, the accuracy (threshold 0.5, or
/// the largest logit; None for regression) and, for binary models, the AUC.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, get_all)]
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Examples evaluated, over all workers.
    examples: u64,
    /// Mean loss.
    loss: f64,
    /// Fraction predicted right (None for regression).
    accuracy: Option<f64>,
    /// Area under the ROC curve (None for softmax models or one class only).
    auc: Option<f64>,
}

impl From<sparktrain_train::Metrics> for Metrics {
    fn from(m: sparktrain_train::Metrics) -> Self {
        Metrics { examples: m.examples, loss: m.loss, accuracy: m.accuracy, auc: m.auc }
    }
}

/// An evaluation during or after training.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, get_all)]
#[derive(Debug, Clone)]
pub struct EvalLine {
    /// Steps taken when it ran.
    step: u64,
    /// Its figures.
    metrics: Metrics,
}

impl From<&RustEvalLine> for EvalLine {
    fn from(e: &RustEvalLine) -> Self {
        EvalLine { step: e.step, metrics: e.metrics.into() }
    }
}

/// What `Trainer.fit` did.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, get_all)]
#[derive(Debug, Clone)]
pub struct FitSummary {
    /// Steps taken in all (a resumed run counts the earlier ones).
    steps: u64,
    /// Steps this call took.
    new_steps: u64,
    /// Examples all workers used in this call.
    examples: u64,
    /// Wall seconds of this call.
    seconds: f64,
    /// `examples / seconds`.
    examples_per_sec: f64,
    /// Epochs completed in all.
    epochs: u64,
    /// The mean loss over the last progress window.
    loss: Option<f64>,
    /// The step this call resumed from, if it did.
    resumed_from: Option<u64>,
    /// The progress lines.
    history: Vec<LogLine>,
    /// The evaluations.
    evaluations: Vec<EvalLine>,
    /// The last checkpoint written.
    checkpoint: Option<String>,
    /// Seconds since the Unix epoch when this call's first step ended.
    first_step_at: Option<f64>,
    /// Whether training stopped before its epochs or steps were done.
    stopped_early: bool,
    /// The best evaluation's step and metric value (early stopping).
    best: Option<(u64, f64)>,
    /// The best model's checkpoint folder, when there is a `model_dir`.
    best_checkpoint: Option<String>,
}

impl From<sparktrain_train::FitSummary> for FitSummary {
    fn from(s: sparktrain_train::FitSummary) -> Self {
        FitSummary {
            steps: s.steps,
            new_steps: s.new_steps,
            examples: s.examples,
            seconds: s.seconds,
            examples_per_sec: s.examples_per_sec,
            epochs: s.epochs,
            loss: s.loss,
            resumed_from: s.resumed_from,
            history: s.history.iter().map(LogLine::from).collect(),
            evaluations: s.evaluations.iter().map(EvalLine::from).collect(),
            checkpoint: s.checkpoint,
            first_step_at: s.first_step_at,
            stopped_early: s.stopped_early,
            best: s.best.map(|b| (b.step, b.value)),
            best_checkpoint: s.best_checkpoint,
        }
    }
}

/// How far training has come.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, get_all)]
#[derive(Debug, Clone)]
pub struct Progress {
    /// Steps taken.
    step: u64,
    /// The epoch under way.
    epoch: u64,
    /// Batches this worker had taken in that epoch.
    batches_in_epoch: u64,
}

/// One worker's trainer.
#[pyclass(module = "sparktrain._native", frozen)]
struct Trainer {
    inner: Mutex<RustTrainer>,
}

#[pymethods]
impl Trainer {
    /// A trainer for `config` and `features`, joined to the other workers through
    /// `communicator` (None: alone). Resumes from the latest checkpoint in the
    /// configuration's `model_dir`. `job` and `generation` name the job (the same id in every
    /// generation) and its generation, which fence its checkpoints: once a later generation
    /// writes `model_dir`, this trainer's saves raise `GenerationSuperseded`.
    #[new]
    #[pyo3(signature = (config, features, communicator=None, *, job="", generation=0))]
    fn new(
        py: Python<'_>,
        config: &TrainerConfig,
        features: &FeatureSpec,
        communicator: Option<&Communicator>,
        job: &str,
        generation: u64,
    ) -> Result<Self> {
        tune_allocator();
        let (config, features) = (config.inner.clone(), features.inner.clone());
        let ring = communicator.map(Communicator::shared);
        let fence = Fence { job: job.to_string(), generation };
        let trainer = detach(py, || RustTrainer::with_fence(config, features, ring, fence))?;
        Ok(Trainer { inner: Mutex::new(trainer) })
    }

    /// Trains on `input` for `epochs` passes (counted from the start of training) or until
    /// `max_steps` steps in all, evaluating on `eval` every `eval_every` steps and at the end;
    /// `on_log(line)` gets every progress line. `early_stopping` (JSON of the engine's
    /// `EarlyStopping`) stops when an evaluation metric stops improving; on the chief,
    /// `on_eval(line)` sees every evaluation and stops every worker by returning true.
    #[pyo3(signature = (
        input, *, epochs=FitOptions::default().epochs, max_steps=FitOptions::default().max_steps,
        eval_every=FitOptions::default().eval_every, eval=None, on_log=None, early_stopping=None,
        on_eval=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn fit(
        &self,
        py: Python<'_>,
        input: &Input,
        epochs: u64,
        max_steps: Option<u64>,
        eval_every: Option<u64>,
        eval: Option<&Input>,
        on_log: Option<Py<PyAny>>,
        early_stopping: Option<&str>,
        on_eval: Option<Py<PyAny>>,
    ) -> Result<FitSummary> {
        if eval_every == Some(0) {
            return Err(Error::invalid("eval_every=0 must be at least 1"));
        }
        let early_stopping =
            early_stopping.map(|json| from_json::<EarlyStopping>("early_stopping", json)).transpose()?;
        let options = FitOptions { epochs, max_steps, eval_every, early_stopping };
        let (input, eval) = (input.inner.clone(), eval.map(|e| e.inner.clone()));
        let raised: Mutex<Option<PyErr>> = Mutex::new(None);
        // Runs a Python callback with the GIL; an exception it raises (Ctrl-C included) is kept
        // for the caller and stops training.
        let call = |callback: &dyn Fn(Python<'_>) -> PyResult<bool>| -> sparktrain_train::Result<bool> {
            let outcome = Python::attach(|py| -> PyResult<bool> {
                py.check_signals()?;
                callback(py)
            });
            outcome.map_err(|e| {
                *lock(&raised) = Some(e);
                TrainError::InvalidArgument("training was interrupted".into())
            })
        };
        let summary = detach(py, || {
            let mut trainer = lock(&self.inner);
            let mut log_hook = |line: &RustLogLine| -> sparktrain_train::Result<()> {
                call(&|py| {
                    if let Some(callback) = &on_log {
                        callback.call1(py, (LogLine::from(line),))?;
                    }
                    Ok(false)
                })
                .map(drop)
            };
            let mut eval_hook = |line: &RustEvalLine| -> sparktrain_train::Result<bool> {
                call(&|py| match &on_eval {
                    Some(callback) => callback.bind(py).call1((EvalLine::from(line),))?.is_truthy(),
                    None => Ok(false),
                })
            };
            let mut hooks = Hooks { on_log: &mut log_hook, on_eval: Some(&mut eval_hook) };
            trainer.fit(&input, &options, eval.as_deref(), &mut hooks)
        });
        if let Some(e) = raised.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e.into());
        }
        Ok(summary?.into())
    }

    /// Evaluates on `input` together with the other workers.
    fn evaluate(&self, py: Python<'_>, input: &Input) -> Result<Metrics> {
        let input = input.inner.clone();
        Ok(detach(py, || lock(&self.inner).evaluate(&input))?.into())
    }

    /// The chief writes the exported model into `dir`; returns whether this worker wrote it.
    /// With sharded tables every trainer calls it and writes its rows.
    fn export(&self, py: Python<'_>, dir: String) -> Result<bool> {
        Ok(detach(py, || lock(&self.inner).export(&dir))?)
    }

    /// The chief writes a checkpoint; its folder, or None on other workers. With sharded
    /// tables every trainer calls it, writes its rows and gets the folder.
    fn save_checkpoint(&self, py: Python<'_>) -> Result<Option<String>> {
        Ok(detach(py, || lock(&self.inner).save_checkpoint())?)
    }

    /// The chief adds the scalar `tag` at the current step to its TensorBoard event file
    /// (a no-op elsewhere, or without `tensorboard_dir`).
    fn scalar(&self, py: Python<'_>, tag: String, value: f32) -> Result<()> {
        Ok(detach(py, || lock(&self.inner).scalar(&tag, value))?)
    }

    /// Closes the TensorBoard event file.
    fn close(&self, py: Python<'_>) -> Result<()> {
        Ok(detach(py, || lock(&self.inner).close())?)
    }

    /// The weights, flat in parameter-name order, as a `pyarrow.Float32Array` (the variables
    /// alone when the tables are sharded; tables kept on a GPU are copied out).
    fn weights<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyAny>> {
        let values = {
            let trainer = lock(&self.inner);
            if trainer.is_sharded() { trainer.weights()?.into_owned() } else { trainer.full_weights()? }
        };
        let values = Float32Array::from(values);
        Ok(values.to_data().to_pyarrow(py)?)
    }

    /// How far training has come.
    #[getter]
    fn progress(&self) -> Progress {
        let p = lock(&self.inner).progress();
        Progress { step: p.step, epoch: p.epoch, batches_in_epoch: p.batches_in_epoch }
    }

    /// The step training resumed from, if it did.
    #[getter]
    fn resumed_from(&self) -> Option<u64> {
        lock(&self.inner).resumed_from()
    }

    /// The feature spec.
    #[getter]
    fn features(&self) -> FeatureSpec {
        FeatureSpec { inner: lock(&self.inner).features().clone() }
    }

    /// Whether the embedding tables are sharded across the trainers.
    #[getter]
    fn sharded_tables(&self) -> bool {
        lock(&self.inner).is_sharded()
    }

    /// Where the model computes: `cpu` or `cuda:<n>` (what `auto` chose).
    #[getter]
    fn device(&self) -> String {
        lock(&self.inner).device()
    }
}

/// An exported model, loaded to score Arrow batches: whole, or without its embedding tables,
/// to score with rows looked up elsewhere (`predict_with_rows`).
#[pyclass(module = "sparktrain._native", frozen)]
struct ExportedModel {
    inner: Exported,
}

#[pymethods]
impl ExportedModel {
    /// Loads the export folder `dir` (any storage URL); with `tables=False` its embedding
    /// tables are left where they are (their files are not read).
    #[new]
    #[pyo3(signature = (dir, tables = true))]
    fn new(py: Python<'_>, dir: String, tables: bool) -> Result<Self> {
        tune_allocator();
        let inner =
            detach(py, || if tables { Exported::load(&dir) } else { Exported::load_without_tables(&dir) })?;
        Ok(ExportedModel { inner })
    }

    /// Scores a `pyarrow.RecordBatch`: a `pyarrow.Float32Array` of one probability per row,
    /// or of `classes` probabilities per row, row after row, for a softmax model.
    fn predict<'py>(&self, py: Python<'py>, batch: &Bound<'py, PyAny>) -> Result<Bound<'py, PyAny>> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let scores = detach(py, || self.inner.predict(&batch))?;
        Ok(Float32Array::from(scores).to_data().to_pyarrow(py)?)
    }

    /// The distinct embedding ids the rows of `batch` use, ascending, as a
    /// `pyarrow.UInt32Array`: the rows `predict_with_rows` needs.
    fn ids<'py>(&self, py: Python<'py>, batch: &Bound<'py, PyAny>) -> Result<Bound<'py, PyAny>> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let ids = detach(py, || self.inner.ids(&batch))?;
        Ok(UInt32Array::from(ids).to_data().to_pyarrow(py)?)
    }

    /// Scores `batch` as `predict` does, given the tables' rows: `ids` (a `pyarrow.UInt32Array`,
    /// distinct and ascending, holding at least the batch's `ids`) and, for every table by
    /// name, a `pyarrow.Float32Array` of its rows of those ids, row after row.
    fn predict_with_rows<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
        ids: &Bound<'py, PyAny>,
        rows: BTreeMap<String, Bound<'py, PyAny>>,
    ) -> Result<Bound<'py, PyAny>> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let ids = arrow::array::make_array(ArrayData::from_pyarrow_bound(ids)?);
        let ids = ids.as_any().downcast_ref::<UInt32Array>().ok_or_else(|| {
            Error::invalid(format!("ids must be a pyarrow.UInt32Array, not {}", ids.data_type()))
        })?;
        let mut tables = Vec::with_capacity(rows.len());
        for (name, values) in &rows {
            let values = arrow::array::make_array(ArrayData::from_pyarrow_bound(values)?);
            let values = values.as_any().downcast_ref::<Float32Array>().cloned().ok_or_else(|| {
                Error::invalid(format!(
                    "rows['{name}'] must be a pyarrow.Float32Array, not {}",
                    values.data_type()
                ))
            })?;
            tables.push((name.as_str(), values));
        }
        let ids: Vec<u32> = ids.values().to_vec();
        let scores = detach(py, || {
            let given: Vec<(&str, &[f32])> = tables.iter().map(|(n, v)| (*n, v.values().as_ref())).collect();
            self.inner.predict_with_rows(&batch, &ids, &given)
        })?;
        Ok(Float32Array::from(scores).to_data().to_pyarrow(py)?)
    }

    /// The feature spec the model was trained on.
    #[getter]
    fn features(&self) -> FeatureSpec {
        FeatureSpec { inner: self.inner.features().clone() }
    }

    /// The loss it was trained with (`binary_cross_entropy` or `softmax_cross_entropy`).
    #[getter]
    fn loss(&self) -> &'static str {
        self.inner.loss().name()
    }

    /// The embedding tables: `(name, rows, width)` each, held or not.
    #[getter]
    fn tables(&self) -> Vec<(String, usize, usize)> {
        self.inner.tables().iter().map(|e| (e.name.clone(), e.shape[0], e.row_width())).collect()
    }

    /// The bytes of the embedding tables, whole.
    #[getter]
    fn table_bytes(&self) -> u64 {
        self.inner.table_bytes()
    }

    /// Whether the export keeps its tables sharded across its owners' files.
    #[getter]
    fn sharded_tables(&self) -> bool {
        self.inner.sharded()
    }
}

/// Checks early stopping's settings (JSON of the engine's `EarlyStopping`) against the
/// configuration's loss, so the driver refuses bad ones before any Spark job starts.
#[pyfunction]
fn check_early_stopping(json: &str, config: &TrainerConfig) -> Result<()> {
    from_json::<EarlyStopping>("early_stopping", json)?.validate(config.inner.loss)?;
    Ok(())
}

/// How large the embedding tables of `config`'s model over `features` are, and where they
/// would live among `workers` trainers each allowed `budget_bytes` (the configuration's own
/// budget first; None: not known): `(whole_bytes, shard_bytes, sharded)`, `sharded` None when
/// no budget is known. Raises the error training would raise for tables over the budget.
#[pyfunction]
#[pyo3(signature = (config, features, workers, budget_bytes = None))]
fn table_plan(
    config: &TrainerConfig,
    features: &FeatureSpec,
    workers: usize,
    budget_bytes: Option<u64>,
) -> Result<(u64, u64, Option<bool>)> {
    let plan = sparktrain_train::table_plan(&config.inner, &features.inner, workers, budget_bytes)?;
    Ok((plan.whole_bytes, plan.shard_bytes, plan.placement.map(|p| p.sharded)))
}

/// Writes the ONNX model of the export folder `export_dir` to the file `out` (both any
/// storage URL).
#[pyfunction]
fn export_onnx(py: Python<'_>, export_dir: String, out: String) -> Result<()> {
    detach(py, || sparktrain_train::onnx::export_onnx(&export_dir, &out))?;
    Ok(())
}

/// The feature spec in the metadata of the ONNX model at `path` (any storage URL), and the
/// names of the inputs its graph takes.
#[pyfunction]
fn onnx_signature(py: Python<'_>, path: String) -> Result<(FeatureSpec, Vec<String>)> {
    let (inner, inputs) = detach(py, || sparktrain_train::onnx::read_signature(&path))?;
    Ok((FeatureSpec { inner }, inputs))
}

/// What this process can see of CUDA, as a dict: `built` (the build has the `cuda` feature),
/// `toolkit` (the CUDA version it targets), `libraries` (each with `name`, `files` tried,
/// `found`, `hint`), `driver` (its CUDA version, or None), `cards` (`ordinal`, `name`,
/// `capability` as `"9.0"`, `memory_bytes`) and `error` (why the driver could not list them).
#[pyfunction]
fn cuda_report(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let report = detach(py, sparktrain_train::device::cuda_report);
    let out = PyDict::new(py);
    out.set_item("built", report.built)?;
    out.set_item("toolkit", report.toolkit)?;
    let libraries = PyList::empty(py);
    for library in report.libraries {
        let entry = PyDict::new(py);
        entry.set_item("name", library.name)?;
        entry.set_item("files", library.files)?;
        entry.set_item("found", library.found)?;
        entry.set_item("hint", library.hint)?;
        libraries.append(entry)?;
    }
    out.set_item("libraries", libraries)?;
    out.set_item("driver", report.driver)?;
    let cards = PyList::empty(py);
    for card in report.cards {
        let entry = PyDict::new(py);
        entry.set_item("ordinal", card.ordinal)?;
        entry.set_item("name", card.name)?;
        entry.set_item("capability", format!("{}.{}", card.capability.0, card.capability.1))?;
        entry.set_item("memory_bytes", card.memory_bytes)?;
        cards.append(entry)?;
    }
    out.set_item("cards", cards)?;
    out.set_item("error", report.error)?;
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cuda_report, m)?)?;
    m.add("CUDA", cfg!(feature = "cuda"))?;
    m.add_class::<FeatureSpec>()?;
    m.add_class::<TrainerConfig>()?;
    m.add_class::<Input>()?;
    m.add_class::<Trainer>()?;
    m.add_class::<ExportedModel>()?;
    m.add_function(wrap_pyfunction!(table_plan, m)?)?;
    m.add_class::<LogLine>()?;
    m.add_class::<Metrics>()?;
    m.add_class::<EvalLine>()?;
    m.add_class::<FitSummary>()?;
    m.add_class::<Progress>()?;
    m.add_function(wrap_pyfunction!(infer_features, m)?)?;
    m.add_function(wrap_pyfunction!(export_onnx, m)?)?;
    m.add_function(wrap_pyfunction!(check_early_stopping, m)?)?;
    m.add_function(wrap_pyfunction!(onnx_signature, m)?)?;
    m.add("DEFAULT_BUCKETS", DEFAULT_BUCKETS)?;
    m.add("FEED_ERROR_FILE", sparktrain_train::input::FEED_ERROR_FILE)?;
    m.add("MODELS", MODELS.to_vec())?;
    m.add("LOSSES", LOSSES.to_vec())?;
    m.add("LEARNING_RATES", LEARNING_RATES.to_vec())?;
    m.add("HYPERPARAMETERS", HYPERPARAMETERS.to_vec())?;
    Ok(())
}
