//! The binding's one error type: [`Error`] wraps every core crate's error, and its single
//! conversion into `PyErr` raises the matching `sparktrain.errors` class with the attributes
//! that name what is at fault (`path`, `offset`, `column`, `missing`, `peer`...).
//!
//! The exception classes are defined in Python (`python/sparktrain/errors.py`) so that they
//! are documented, typed and picklable there; `import_exception!` binds each one by its module
//! path at compile time, so a renamed class fails the binding's tests instead of raising a
//! different error at run time. Methods return `Result<T, Error>` and use `?` on core calls.

use pyo3::PyTypeInfo;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};
use sparktrain_cluster::ClusterError;
use sparktrain_collective::CollectiveError;
use sparktrain_dataset::Error as DatasetError;
use sparktrain_storage::StorageError;
use sparktrain_tfrecord::Error as RecordError;
use sparktrain_train::TrainError;

/// The `sparktrain.errors` classes, bound by their module path.
mod py {
    use pyo3::import_exception;

    import_exception!(sparktrain.errors, InvalidArgumentError);
    import_exception!(sparktrain.errors, MissingDependencyError);
    import_exception!(sparktrain.errors, ClosedError);
    import_exception!(sparktrain.errors, StorageError);
    import_exception!(sparktrain.errors, PathNotFoundError);
    import_exception!(sparktrain.errors, PathExistsError);
    import_exception!(sparktrain.errors, TFRecordError);
    import_exception!(sparktrain.errors, TFRecordCorruptError);
    import_exception!(sparktrain.errors, CheckpointMismatch);
    import_exception!(sparktrain.errors, RecordDecodeError);
    import_exception!(sparktrain.errors, SchemaError);
    import_exception!(sparktrain.errors, ControlPlaneError);
    import_exception!(sparktrain.errors, RendezvousTimeout);
    import_exception!(sparktrain.errors, BarrierTimeout);
    import_exception!(sparktrain.errors, DriverUnreachable);
    import_exception!(sparktrain.errors, Unauthenticated);
    import_exception!(sparktrain.errors, JobAborted);
    import_exception!(sparktrain.errors, CollectiveError);
    import_exception!(sparktrain.errors, PeerFailed);
    import_exception!(sparktrain.errors, CollectiveTimeout);
    import_exception!(sparktrain.errors, TrainingError);
    import_exception!(sparktrain.errors, InputError);
    import_exception!(sparktrain.errors, CheckpointError);
    import_exception!(sparktrain.errors, GenerationSuperseded);
}

/// An error of any core crate, or of the binding itself.
#[derive(Debug)]
pub enum Error {
    /// A storage operation failed.
    Storage(StorageError),
    /// The TFRecord codec failed.
    Record(RecordError),
    /// Reading a dataset failed.
    Dataset(DatasetError),
    /// The training engine failed.
    Train(TrainError),
    /// The control plane failed.
    Cluster(ClusterError),
    /// The data plane failed.
    Collective(CollectiveError),
    /// An argument the binding itself checks.
    InvalidArgument(String),
    /// A call on an object after its `close()`; names the object.
    Closed(&'static str),
    /// An error Python raised (a callback's, or a failed conversion).
    Python(PyErr),
}

/// The result type of the binding's functions and methods.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::InvalidArgument`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument(message.into())
    }
}

macro_rules! from_core {
    ($($core:ty => $variant:ident),* $(,)?) => {
        $(impl From<$core> for Error {
            fn from(e: $core) -> Self {
                Error::$variant(e)
            }
        })*
    };
}

from_core! {
    StorageError => Storage,
    RecordError => Record,
    DatasetError => Dataset,
    TrainError => Train,
    ClusterError => Cluster,
    CollectiveError => Collective,
    PyErr => Python,
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        Python::attach(|py| {
            let message = e.message();
            e.raise(py, &message).unwrap_or_else(|err| {
                PyRuntimeError::new_err(format!("{message} (and raising it failed: {err})"))
            })
        })
    }
}

/// The attributes an exception carries besides its message.
type Attrs<'py> = Bound<'py, PyDict>;

/// Builds `class(message, **attrs)` as a `PyErr`.
fn build(class: &Bound<'_, PyType>, message: &str, attrs: &Attrs<'_>) -> PyResult<PyErr> {
    Ok(PyErr::from_value(class.call((message,), Some(attrs))?))
}

impl Error {
    fn message(&self) -> String {
        match self {
            Error::Storage(e) => e.to_string(),
            Error::Record(e) => e.to_string(),
            Error::Dataset(DatasetError::NoInputs(pattern)) => format!("no input files match '{pattern}'"),
            Error::Dataset(e) => e.to_string(),
            Error::Train(e) => e.to_string(),
            Error::Cluster(e) => e.to_string(),
            Error::Collective(e) => e.to_string(),
            Error::InvalidArgument(m) => m.clone(),
            Error::Closed(what) => format!("the {what} is closed"),
            Error::Python(e) => e.to_string(),
        }
    }

    fn raise(self, py: Python<'_>, message: &str) -> PyResult<PyErr> {
        let attrs = PyDict::new(py);
        let class = match self {
            Error::Python(e) => return Ok(e),
            Error::Storage(e) => storage(py, e, &attrs)?,
            Error::Record(e) => record(py, e, &attrs)?,
            Error::Dataset(e) => dataset(py, e, &attrs)?,
            Error::Train(e) => train(py, e, &attrs)?,
            Error::Cluster(e) => cluster(py, e, &attrs)?,
            Error::Collective(e) => collective(py, e, &attrs)?,
            Error::InvalidArgument(_) => py::InvalidArgumentError::type_object(py),
            Error::Closed(_) => py::ClosedError::type_object(py),
        };
        build(&class, message, &attrs)
    }
}

fn storage<'py>(py: Python<'py>, e: StorageError, attrs: &Attrs<'py>) -> PyResult<Bound<'py, PyType>> {
    let url = match &e {
        StorageError::NotFound { url }
        | StorageError::AlreadyExists { url }
        | StorageError::InvalidUrl { url, .. }
        | StorageError::Io { url, .. }
        | StorageError::Hdfs { url, .. }
        | StorageError::ObjectStore { url, .. }
        | StorageError::Commit { url, .. } => Some(url.clone()),
        // A wrong setting, not a failed operation: the message names the key.
        StorageError::Config { .. } => return Ok(py::InvalidArgumentError::type_object(py)),
        _ => None,
    };
    attrs.set_item("path", url)?;
    Ok(if e.is_not_found() {
        py::PathNotFoundError::type_object(py)
    } else if e.is_already_exists() {
        py::PathExistsError::type_object(py)
    } else {
        py::StorageError::type_object(py)
    })
}

fn record<'py>(py: Python<'py>, e: RecordError, attrs: &Attrs<'py>) -> PyResult<Bound<'py, PyType>> {
    Ok(match e {
        RecordError::Corrupt { path, offset, kind, .. } => {
            attrs.set_item("path", path)?;
            attrs.set_item("offset", offset)?;
            attrs.set_item("kind", kind.as_str())?;
            py::TFRecordCorruptError::type_object(py)
        }
        RecordError::Io { path, offset, .. } => {
            attrs.set_item("path", path)?;
            attrs.set_item("offset", offset)?;
            py::StorageError::type_object(py)
        }
        RecordError::BadMessage { path, record, .. } => {
            attrs.set_item("path", path)?;
            attrs.set_item("record", record)?;
            py::RecordDecodeError::type_object(py)
        }
        RecordError::FeatureConflict { path, record, feature, .. } => {
            attrs.set_item("path", path)?;
            attrs.set_item("record", record)?;
            attrs.set_item("feature", feature)?;
            py::RecordDecodeError::type_object(py)
        }
        RecordError::UnsupportedColumn { column, .. } => {
            attrs.set_item("column", column)?;
            py::SchemaError::type_object(py)
        }
        // Decoded rows without their file (the readers name it: `FeatureConflict`).
        RecordError::DoesNotFit { column, row, .. } => {
            attrs.set_item("column", column)?;
            attrs.set_item("row", row)?;
            py::SchemaError::type_object(py)
        }
        RecordError::BadValue { column, row, .. } => {
            attrs.set_item("column", column)?;
            attrs.set_item("row", row)?;
            py::SchemaError::type_object(py)
        }
        RecordError::Arrow { .. } => py::SchemaError::type_object(py),
        RecordError::DecoderStopped { path } => {
            attrs.set_item("path", path)?;
            py::TFRecordError::type_object(py)
        }
        RecordError::InvalidArgument(_) => py::InvalidArgumentError::type_object(py),
    })
}

fn dataset<'py>(py: Python<'py>, e: DatasetError, attrs: &Attrs<'py>) -> PyResult<Bound<'py, PyType>> {
    match e {
        DatasetError::Storage(e) => storage(py, e, attrs),
        DatasetError::Record(e) => record(py, e, attrs),
        DatasetError::NoInputs(pattern) => {
            attrs.set_item("path", pattern)?;
            Ok(py::PathNotFoundError::type_object(py))
        }
        DatasetError::InvalidArgument(_) => Ok(py::InvalidArgumentError::type_object(py)),
    }
}

fn train<'py>(py: Python<'py>, e: TrainError, attrs: &Attrs<'py>) -> PyResult<Bound<'py, PyType>> {
    match e {
        TrainError::Input(e) => dataset(py, e, attrs),
        TrainError::Storage(e) => storage(py, e, attrs),
        TrainError::Collective(e) => collective(py, e, attrs),
        TrainError::InvalidArgument(_) => Ok(py::InvalidArgumentError::type_object(py)),
        TrainError::Read { input, .. } => {
            attrs.set_item("path", input)?;
            Ok(py::InputError::type_object(py))
        }
        TrainError::Format { path, .. } => {
            attrs.set_item("path", path)?;
            Ok(py::CheckpointError::type_object(py))
        }
        TrainError::StateMismatch(_) => {
            attrs.set_item("path", None::<String>)?;
            Ok(py::CheckpointMismatch::type_object(py))
        }
        TrainError::Superseded { model_dir, generation, by_job, by_generation } => {
            attrs.set_item("path", model_dir)?;
            attrs.set_item("generation", generation)?;
            attrs.set_item("by_job", by_job)?;
            attrs.set_item("by_generation", by_generation)?;
            Ok(py::GenerationSuperseded::type_object(py))
        }
        TrainError::Tensor(_) => Ok(py::TrainingError::type_object(py)),
        // A missing library is a dependency to install; anything else, a setting to change.
        TrainError::DeviceUnavailable { library: Some(library), .. } => {
            attrs.set_item("package", library)?;
            attrs.set_item("extra", "cuda")?;
            Ok(py::MissingDependencyError::type_object(py))
        }
        TrainError::DeviceUnavailable { device, library: None, .. } => {
            attrs.set_item("parameter", "device")?;
            attrs.set_item("value", device)?;
            Ok(py::InvalidArgumentError::type_object(py))
        }
        // A setting to change, which no restart cures.
        TrainError::TablesOverBudget { needed, budget, workers, sharded } => {
            attrs.set_item("parameter", "table_budget_bytes")?;
            attrs.set_item("needed", needed)?;
            attrs.set_item("budget", budget)?;
            attrs.set_item("workers", workers)?;
            attrs.set_item("sharded", sharded)?;
            Ok(py::InvalidArgumentError::type_object(py))
        }
    }
}

fn cluster<'py>(py: Python<'py>, e: ClusterError, attrs: &Attrs<'py>) -> PyResult<Bound<'py, PyType>> {
    Ok(match e {
        ClusterError::RendezvousTimeout { missing, total } => {
            attrs.set_item("missing", missing)?;
            attrs.set_item("total", total)?;
            py::RendezvousTimeout::type_object(py)
        }
        ClusterError::BarrierTimeout { name, missing, total } => {
            attrs.set_item("name", name)?;
            attrs.set_item("missing", missing)?;
            attrs.set_item("total", total)?;
            py::BarrierTimeout::type_object(py)
        }
        ClusterError::Aborted(reason) => {
            attrs.set_item("reason", reason)?;
            py::JobAborted::type_object(py)
        }
        ClusterError::Unreachable { address, .. } => {
            attrs.set_item("address", address)?;
            py::DriverUnreachable::type_object(py)
        }
        ClusterError::Unauthenticated { address, .. } => {
            attrs.set_item("address", address)?;
            py::Unauthenticated::type_object(py)
        }
        ClusterError::Remote { address, code, .. } => {
            attrs.set_item("address", address)?;
            attrs.set_item("code", code)?;
            py::ControlPlaneError::type_object(py)
        }
        ClusterError::InvalidArgument(_) => py::InvalidArgumentError::type_object(py),
        ClusterError::DuplicateRegistration { .. }
        | ClusterError::NotTheTask { .. }
        | ClusterError::Bind { .. }
        | ClusterError::Tls { .. }
        | ClusterError::Io { .. }
        | ClusterError::Secret(_) => py::ControlPlaneError::type_object(py),
    })
}

/// `CollectiveTimeout` and `PeerFailed` carry `op`, `peer` (the rank) and, where it is known,
/// `address` (the peer's data-plane address); refusals are `Unauthenticated`.
fn collective<'py>(py: Python<'py>, e: CollectiveError, attrs: &Attrs<'py>) -> PyResult<Bound<'py, PyType>> {
    Ok(match e {
        CollectiveError::Timeout { op, peer, address, .. } => {
            attrs.set_item("op", op)?;
            attrs.set_item("peer", peer)?;
            attrs.set_item("address", address)?;
            py::CollectiveTimeout::type_object(py)
        }
        CollectiveError::PeerFailed { op, peer, address, .. } => {
            attrs.set_item("op", op)?;
            attrs.set_item("peer", peer)?;
            attrs.set_item("address", address)?;
            py::PeerFailed::type_object(py)
        }
        CollectiveError::OutOfStep { op, peer, .. } => {
            attrs.set_item("op", op)?;
            attrs.set_item("peer", peer)?;
            attrs.set_item("address", None::<String>)?;
            py::PeerFailed::type_object(py)
        }
        CollectiveError::Refused { address, .. } => {
            attrs.set_item("address", address)?;
            py::Unauthenticated::type_object(py)
        }
        CollectiveError::InvalidArgument(_) => py::InvalidArgumentError::type_object(py),
        CollectiveError::Io { .. } => py::CollectiveError::type_object(py),
    })
}
