//! The training engine for Python: a worker's input, its trainer, and exported models, with
//! configurations and results passed as JSON (the typed API is `sparktrain.training`). Every
//! long call runs without the GIL; the progress callback takes it back briefly, and an
//! exception it raises (Ctrl-C included) stops training.

use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;

use arrow::array::{Array, Float32Array, RecordBatch};
use arrow::datatypes::Schema;
use arrow::pyarrow::{FromPyArrow, ToPyArrow};
use pyo3::prelude::*;
use sparktrain_cluster::TaskClient;
use sparktrain_train::{
    Exported, FeatureSpec, FitOptions, Input as RustInput, InputOptions, LogLine, TrainError,
    Trainer as RustTrainer, TrainerConfig, WorkQueue,
};

use crate::cluster::ControlClient;
use crate::collective::Communicator;
use crate::{detach, errors};

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

fn json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> PyResult<T> {
    serde_json::from_str(text).map_err(|e| errors::invalid(format!("{what}: {e}")))
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("results serialize")
}

/// The driver's work queue, reached through the trainer's control-plane connection.
struct DriverQueue {
    client: TaskClient,
    task_index: u32,
}

impl WorkQueue for DriverQueue {
    fn next(&self, epoch: u64) -> sparktrain_train::Result<Option<String>> {
        let mut client = self.client.clone();
        let task = self.task_index;
        sparktrain_storage::block_on(async move { client.next_work(task, epoch, WORK_TIMEOUT).await })
            .map_err(|e| TrainError::Read {
                input: "the driver's work queue".into(),
                message: e.to_string(),
            })?
            .map_err(|e| TrainError::Read { input: "the driver's work queue".into(), message: e.to_string() })
    }
}

/// One worker's share of the training data.
#[pyclass(module = "sparktrain._native", frozen)]
struct Input {
    inner: Arc<RustInput>,
}

/// `(batch_size, shuffle_buffer, seed, prefetch)` from Python.
type Options = (usize, usize, u64, usize);

fn input_options((batch_size, shuffle_buffer, seed, prefetch): Options) -> InputOptions {
    InputOptions { batch_size, shuffle_buffer, seed, prefetch }
}

#[pymethods]
impl Input {
    /// The files at `path` (a folder, file or glob; TFRecord or Parquet), this worker's
    /// fixed share of them; `options` is `(batch_size, shuffle_buffer, seed, prefetch)`.
    #[staticmethod]
    fn files(
        py: Python<'_>,
        path: String,
        workers: usize,
        worker: usize,
        options: Options,
    ) -> PyResult<Self> {
        let options = input_options(options);
        let input = detach(py, || RustInput::open(&path, workers, worker, options)).map_err(errors::train)?;
        Ok(Input { inner: Arc::new(input) })
    }

    /// The files at `path`, taken one at a time from the driver's work queue through
    /// `client` as task `task_index`.
    #[staticmethod]
    fn queued(
        py: Python<'_>,
        path: String,
        client: &ControlClient,
        task_index: u32,
        options: Options,
    ) -> PyResult<Self> {
        let options = input_options(options);
        let queue = Arc::new(DriverQueue { client: client.task_client(), task_index });
        let input = detach(py, || RustInput::queued(&path, queue, task_index as usize, options))
            .map_err(errors::train)?;
        Ok(Input { inner: Arc::new(input) })
    }

    /// The Arrow IPC stream served on the Unix socket `path` (the task's Spark partition).
    #[staticmethod]
    fn feed(py: Python<'_>, path: String, worker: usize, options: Options) -> PyResult<Self> {
        let options = input_options(options);
        let input = detach(py, || RustInput::feed(&path, worker, options)).map_err(errors::train)?;
        Ok(Input { inner: Arc::new(input) })
    }

    /// The `pyarrow.Schema` of the data.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.schema().as_ref().to_pyarrow(py)
    }
}

/// The feature spec (JSON) inferred from `schema`: floating-point columns dense, integer and
/// string columns hashed into `buckets` ids each.
#[pyfunction]
fn infer_features(schema: &Bound<'_, PyAny>, label: &str, buckets: u32) -> PyResult<String> {
    let schema = Schema::from_pyarrow_bound(schema)?;
    let spec = FeatureSpec::infer(&schema, label, buckets).map_err(errors::train)?;
    Ok(to_json(&spec))
}

/// One worker's trainer.
#[pyclass(module = "sparktrain._native", frozen)]
struct Trainer {
    inner: Mutex<RustTrainer>,
}

impl Trainer {
    fn lock(&self) -> MutexGuard<'_, RustTrainer> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl Trainer {
    /// A trainer for the configuration and feature spec (JSON), joined to the other workers
    /// through `communicator` (None: alone). Resumes from the latest checkpoint in the
    /// configuration's `model_dir`.
    #[new]
    #[pyo3(signature = (config, features, communicator=None))]
    fn new(
        py: Python<'_>,
        config: &str,
        features: &str,
        communicator: Option<&Communicator>,
    ) -> PyResult<Self> {
        tune_allocator();
        let config: TrainerConfig = json(config, "trainer configuration")?;
        let features: FeatureSpec = json(features, "feature spec")?;
        let ring = communicator.map(Communicator::shared);
        let trainer = detach(py, || RustTrainer::new(config, features, ring)).map_err(errors::train)?;
        Ok(Trainer { inner: Mutex::new(trainer) })
    }

    /// Trains on `input` with the options (JSON: epochs, max_steps, eval_every), evaluating
    /// on `eval`; `on_log(line)` gets every progress line as JSON. Returns the summary as JSON.
    #[pyo3(signature = (input, options, eval=None, on_log=None))]
    fn fit(
        &self,
        py: Python<'_>,
        input: &Input,
        options: &str,
        eval: Option<&Input>,
        on_log: Option<Py<PyAny>>,
    ) -> PyResult<String> {
        let options: FitOptions = json(options, "fit options")?;
        let (input, eval) = (input.inner.clone(), eval.map(|e| e.inner.clone()));
        let raised: Mutex<Option<PyErr>> = Mutex::new(None);
        let summary = detach(py, || {
            let mut trainer = self.lock();
            let mut hook = |line: &LogLine| -> sparktrain_train::Result<()> {
                let outcome = Python::attach(|py| -> PyResult<()> {
                    py.check_signals()?;
                    if let Some(callback) = &on_log {
                        callback.call1(py, (to_json(line),))?;
                    }
                    Ok(())
                });
                outcome.map_err(|e| {
                    *raised.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    TrainError::InvalidArgument("training was interrupted".into())
                })
            };
            trainer.fit(&input, &options, eval.as_deref(), &mut hook)
        });
        if let Some(e) = raised.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        summary.map(|s| to_json(&s)).map_err(errors::train)
    }

    /// Evaluates on `input` together with the other workers; the metrics as JSON.
    fn evaluate(&self, py: Python<'_>, input: &Input) -> PyResult<String> {
        let input = input.inner.clone();
        detach(py, || self.lock().evaluate(&input)).map(|m| to_json(&m)).map_err(errors::train)
    }

    /// The chief writes the exported model into `dir`; returns whether this worker wrote it.
    fn export(&self, py: Python<'_>, dir: String) -> PyResult<bool> {
        detach(py, || self.lock().export(&dir)).map_err(errors::train)
    }

    /// The chief writes a checkpoint; its folder, or None on other workers.
    fn save_checkpoint(&self, py: Python<'_>) -> PyResult<Option<String>> {
        detach(py, || self.lock().save_checkpoint()).map_err(errors::train)
    }

    /// Closes the TensorBoard event file.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        detach(py, || self.lock().close()).map_err(errors::train)
    }

    /// The weights, flat in parameter-name order, as a `pyarrow.Float32Array`.
    fn weights<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let values = Float32Array::from(self.lock().weights().to_vec());
        values.to_data().to_pyarrow(py)
    }

    /// How far training has come (JSON: step, epoch, batches_in_epoch).
    #[getter]
    fn progress(&self) -> String {
        to_json(&self.lock().progress())
    }

    /// The step training resumed from, if it did.
    #[getter]
    fn resumed_from(&self) -> Option<u64> {
        self.lock().resumed_from()
    }

    /// The feature spec, as JSON.
    #[getter]
    fn features(&self) -> String {
        to_json(self.lock().features())
    }
}

/// An exported model, loaded to score Arrow batches.
#[pyclass(module = "sparktrain._native", frozen)]
struct ExportedModel {
    inner: Exported,
}

#[pymethods]
impl ExportedModel {
    /// Loads the export folder `dir` (any storage URL).
    #[new]
    fn new(py: Python<'_>, dir: String) -> PyResult<Self> {
        tune_allocator();
        let inner = detach(py, || Exported::load(&dir)).map_err(errors::train)?;
        Ok(ExportedModel { inner })
    }

    /// Scores a `pyarrow.RecordBatch`: a `pyarrow.Float32Array` of one probability per row,
    /// or of `classes` probabilities per row, row after row, for a softmax model.
    fn predict<'py>(&self, py: Python<'py>, batch: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let scores = detach(py, || self.inner.predict(&batch)).map_err(errors::train)?;
        Float32Array::from(scores).to_data().to_pyarrow(py)
    }

    /// The feature spec the model was trained on, as JSON.
    #[getter]
    fn features(&self) -> String {
        to_json(self.inner.features())
    }

    /// The loss it was trained with (`binary_cross_entropy` or `softmax_cross_entropy`).
    #[getter]
    fn loss(&self) -> String {
        to_json(&self.inner.loss()).trim_matches('"').to_string()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Input>()?;
    m.add_class::<Trainer>()?;
    m.add_class::<ExportedModel>()?;
    m.add_function(wrap_pyfunction!(infer_features, m)?)?;
    Ok(())
}
