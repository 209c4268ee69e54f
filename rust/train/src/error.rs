//! The errors of training: bad arguments, the tensor engine's failures and the data plane's.

use sparktrain_collective::CollectiveError;

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
    /// Spark feed); `input` names it.
    #[error("reading {input}: {message}")]
    Read {
        /// The file or socket.
        input: String,
        /// What went wrong.
        message: String,
    },
    /// Writing or reading a checkpoint, event file or export failed (the message names the
    /// file).
    #[error("{0}")]
    Output(String),
    /// The tensor engine failed.
    #[error("tensor engine: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A collective with the other workers failed (it names the peer).
    #[error(transparent)]
    Collective(#[from] CollectiveError),
}

/// The result type of this crate.
pub type Result<T, E = TrainError> = std::result::Result<T, E>;
