//! The errors of training: bad arguments, the tensor engine's failures, storage and the data
//! plane's. Errors of the crates below keep their types (`#[from]`), so a caller can still tell
//! a missing file from a corrupt one and read the URL at fault.

use sparktrain_collective::CollectiveError;
use sparktrain_storage::StorageError;

/// Any error as the source of another, for the codecs (JSON, safetensors, Parquet, Arrow IPC)
/// whose error types say nothing the caller can act on beyond their message.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A training error.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The arguments make no sense (a shape that does not fit, an unknown name...).
    #[error("{0}")]
    InvalidArgument(String),
    /// A restored state does not fit the model or optimizer it is loaded into.
    #[error("the saved state does not fit: {0}")]
    StateMismatch(String),
    /// Reading the input failed (the error names the file, and the offset where it applies).
    #[error(transparent)]
    Input(#[from] sparktrain_dataset::Error),
    /// Reading input rows failed somewhere other than a TFRecord file (a Parquet file, the
    /// Spark feed, the driver's work queue); `input` names it.
    #[error("reading {input}: {source}")]
    Read {
        /// The file, socket or service.
        input: String,
        /// What went wrong.
        #[source]
        source: BoxError,
    },
    /// Reaching a checkpoint, event file or exported model on storage failed (the storage
    /// error names the URL).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A checkpoint, event file or exported model cannot be encoded or decoded.
    #[error("{path}: {source}")]
    Format {
        /// The file (or, for a checkpoint sent by the chief, the model folder).
        path: String,
        /// What is wrong with it.
        #[source]
        source: BoxError,
    },
    /// The tensor engine failed.
    #[error("tensor engine: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A collective with the other workers failed (it names the peer).
    #[error(transparent)]
    Collective(#[from] CollectiveError),
}

impl TrainError {
    /// A [`TrainError::Format`] error for `path`.
    pub fn format(path: impl Into<String>, source: impl Into<BoxError>) -> Self {
        TrainError::Format { path: path.into(), source: source.into() }
    }

    /// A [`TrainError::Read`] error for `input`.
    pub fn read(input: impl Into<String>, source: impl Into<BoxError>) -> Self {
        TrainError::Read { input: input.into(), source: source.into() }
    }
}

/// The result type of this crate.
pub type Result<T, E = TrainError> = std::result::Result<T, E>;
