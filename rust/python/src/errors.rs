//! Maps the Rust crates' errors onto the `sparktrain.errors` hierarchy.
//!
//! The exception classes are defined in Python (`python/sparktrain/errors.py`) so that they are
//! documented, typed and picklable there; this module looks them up by name and raises them with
//! keyword attributes such as `path` and `offset`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sparktrain_cluster::ClusterError;
use sparktrain_collective::CollectiveError;
use sparktrain_dataset::Error as DatasetError;
use sparktrain_storage::StorageError;
use sparktrain_tfrecord::Error as RecordError;
use sparktrain_train::TrainError;

/// Builds `sparktrain.errors.<class>(message, **attrs)`.
fn raise(class: &str, message: String, attrs: &[(&str, Option<String>)], ints: &[(&str, u64)]) -> PyErr {
    Python::attach(|py| {
        let build = || -> PyResult<PyErr> {
            let module = py.import("sparktrain.errors")?;
            let kwargs = PyDict::new(py);
            for (k, v) in attrs {
                kwargs.set_item(*k, v)?;
            }
            for (k, v) in ints {
                kwargs.set_item(*k, *v)?;
            }
            let instance = module.getattr(class)?.call((message.clone(),), Some(&kwargs))?;
            Ok(PyErr::from_value(instance))
        };
        build().unwrap_or_else(|e| PyRuntimeError::new_err(format!("{message} (and raising it failed: {e})")))
    })
}

/// Converts a storage error.
pub fn storage(e: StorageError) -> PyErr {
    let message = e.to_string();
    let url = match &e {
        StorageError::NotFound { url }
        | StorageError::AlreadyExists { url }
        | StorageError::InvalidUrl { url, .. }
        | StorageError::Io { url, .. }
        | StorageError::Hdfs { url, .. } => Some(url.clone()),
        _ => None,
    };
    let class = if e.is_not_found() {
        "PathNotFoundError"
    } else if e.is_already_exists() {
        "PathExistsError"
    } else {
        "StorageError"
    };
    raise(class, message, &[("path", url)], &[])
}

/// Converts a codec error.
pub fn record(e: RecordError) -> PyErr {
    let message = e.to_string();
    match e {
        RecordError::Corrupt { path, offset, kind, .. } => raise(
            "TFRecordCorruptError",
            message,
            &[("path", Some(path)), ("kind", Some(kind.as_str().to_string()))],
            &[("offset", offset)],
        ),
        RecordError::Io { path, offset, .. } => {
            raise("StorageError", message, &[("path", Some(path))], &[("offset", offset)])
        }
        RecordError::BadMessage { path, record, .. } => {
            raise("RecordDecodeError", message, &[("path", Some(path))], &[("record", record)])
        }
        RecordError::FeatureConflict { path, record, feature, .. } => raise(
            "RecordDecodeError",
            message,
            &[("path", Some(path)), ("feature", Some(feature))],
            &[("record", record)],
        ),
        RecordError::UnsupportedColumn { column, .. } => {
            raise("SchemaError", message, &[("column", Some(column))], &[])
        }
        RecordError::BadValue { column, row, .. } => {
            raise("SchemaError", message, &[("column", Some(column))], &[("row", row as u64)])
        }
        RecordError::Arrow { .. } => raise("SchemaError", message, &[], &[]),
        RecordError::InvalidArgument(_) => raise("InvalidArgumentError", message, &[], &[]),
    }
}

/// Converts a dataset error.
pub fn dataset(e: DatasetError) -> PyErr {
    match e {
        DatasetError::Storage(e) => storage(e),
        DatasetError::Record(e) => record(e),
        DatasetError::NoInputs(pattern) => raise(
            "PathNotFoundError",
            format!("no input files match '{pattern}'"),
            &[("path", Some(pattern))],
            &[],
        ),
        DatasetError::InvalidArgument(_) => raise("InvalidArgumentError", e.to_string(), &[], &[]),
    }
}

/// Converts a training error.
pub fn train(e: TrainError) -> PyErr {
    match e {
        TrainError::Input(e) => dataset(e),
        TrainError::Collective(e) => collective(e),
        TrainError::InvalidArgument(m) => invalid(m),
        TrainError::Read { ref input, .. } => {
            let input = input.clone();
            raise("InputError", e.to_string(), &[("path", Some(input))], &[])
        }
        TrainError::StateMismatch(_) | TrainError::Output(_) => {
            raise("CheckpointError", e.to_string(), &[], &[])
        }
        TrainError::Tensor(_) => raise("TrainingError", e.to_string(), &[], &[]),
    }
}

/// An invalid argument detected in the binding itself.
pub fn invalid(message: impl Into<String>) -> PyErr {
    raise("InvalidArgumentError", message.into(), &[], &[])
}

/// Converts a control-plane error.
pub fn cluster(e: ClusterError) -> PyErr {
    let message = e.to_string();
    Python::attach(|py| {
        let build = || -> PyResult<PyErr> {
            let kwargs = PyDict::new(py);
            let class = match e {
                ClusterError::RendezvousTimeout { missing, total } => {
                    kwargs.set_item("missing", missing)?;
                    kwargs.set_item("total", total)?;
                    "RendezvousTimeout"
                }
                ClusterError::BarrierTimeout { name, missing, total } => {
                    kwargs.set_item("name", name)?;
                    kwargs.set_item("missing", missing)?;
                    kwargs.set_item("total", total)?;
                    "BarrierTimeout"
                }
                ClusterError::Aborted(reason) => {
                    kwargs.set_item("reason", reason)?;
                    "JobAborted"
                }
                ClusterError::Unreachable { address, .. } => {
                    kwargs.set_item("address", address)?;
                    "DriverUnreachable"
                }
                ClusterError::Unauthenticated { address, .. } => {
                    kwargs.set_item("address", address)?;
                    "Unauthenticated"
                }
                ClusterError::Remote { address, code, .. } => {
                    kwargs.set_item("address", address)?;
                    kwargs.set_item("code", code)?;
                    "ControlPlaneError"
                }
                ClusterError::InvalidArgument(_) => "InvalidArgumentError",
                _ => "ControlPlaneError",
            };
            let instance =
                py.import("sparktrain.errors")?.getattr(class)?.call((message.clone(),), Some(&kwargs))?;
            Ok(PyErr::from_value(instance))
        };
        build().unwrap_or_else(|err| {
            PyRuntimeError::new_err(format!("{message} (and raising it failed: {err})"))
        })
    })
}

/// Converts a data-plane error: `CollectiveTimeout` and `PeerFailed` carry `peer` (the rank)
/// and `op`; refusals are `Unauthenticated`.
pub fn collective(e: CollectiveError) -> PyErr {
    let message = e.to_string();
    Python::attach(|py| {
        let build = || -> PyResult<PyErr> {
            let kwargs = PyDict::new(py);
            let class = match &e {
                CollectiveError::Timeout { op, peer, address, .. } => {
                    kwargs.set_item("op", op)?;
                    kwargs.set_item("peer", peer)?;
                    kwargs.set_item("address", address)?;
                    "CollectiveTimeout"
                }
                CollectiveError::PeerFailed { op, peer, address, .. }
                | CollectiveError::OutOfStep { op, peer, ours: address, .. } => {
                    kwargs.set_item("op", op)?;
                    kwargs.set_item("peer", peer)?;
                    kwargs.set_item("address", address)?;
                    "PeerFailed"
                }
                CollectiveError::Refused { address, .. } => {
                    kwargs.set_item("address", address)?;
                    "Unauthenticated"
                }
                CollectiveError::InvalidArgument(_) => "InvalidArgumentError",
                CollectiveError::Io(_) => "CollectiveError",
            };
            let instance =
                py.import("sparktrain.errors")?.getattr(class)?.call((message.clone(),), Some(&kwargs))?;
            Ok(PyErr::from_value(instance))
        };
        build().unwrap_or_else(|err| {
            PyRuntimeError::new_err(format!("{message} (and raising it failed: {err})"))
        })
    })
}
