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
    /// A newer writer owns `model_dir`: a later generation of this job, or another job that
    /// took the folder over. This trainer's generation is lost and may no longer write there;
    /// no restart of it can.
    #[error("{model_dir}: {}", superseded(*generation, by_job.as_deref(), *by_generation))]
    Superseded {
        /// The checkpoint folder.
        model_dir: String,
        /// The generation of the trainer that was refused.
        generation: u64,
        /// The job that now writes there, when it is another job (None: this job).
        by_job: Option<String>,
        /// The generation that now writes there.
        by_generation: u64,
    },
    /// The tensor engine failed.
    #[error("tensor engine: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A collective with the other workers failed (it names the peer).
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    /// The device asked for cannot be opened here: the build has no CUDA, a library or the
    /// driver is missing, or the process sees no such GPU.
    #[error("device '{device}': {reason}")]
    DeviceUnavailable {
        /// The device as asked for (`cuda:0`).
        device: String,
        /// The missing library's file (`libcublas.so.13`), when that is the reason.
        library: Option<String>,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The embedding tables, with their optimizer state, do not fit a trainer's table memory
    /// budget where they would live: whole on every trainer, or as each trainer's share.
    #[error("{}", over_budget(*needed, *budget, *workers, *sharded))]
    TablesOverBudget {
        /// The bytes one trainer's tables would take.
        needed: u64,
        /// The budget per trainer (`table_budget_bytes`).
        budget: u64,
        /// The trainers.
        workers: usize,
        /// Whether `needed` is a sharded trainer's share rather than the whole tables.
        sharded: bool,
    },
}

fn superseded(generation: u64, by_job: Option<&str>, by_generation: u64) -> String {
    match by_job {
        None => format!(
            "generation {generation} of this job may no longer write checkpoints here: generation \
             {by_generation} does (the job was restarted without this trainer)"
        ),
        Some("") => format!(
            "this job (generation {generation}) may no longer write checkpoints here: a trainer \
             outside any job has taken the folder over"
        ),
        Some(job) => format!(
            "this job (generation {generation}) may no longer write checkpoints here: another job \
             ('{job}', generation {by_generation}) has taken the folder over"
        ),
    }
}

fn over_budget(needed: u64, budget: u64, workers: usize, sharded: bool) -> String {
    let (needed, budget) = (crate::shard::human(needed), crate::shard::human(budget));
    if sharded {
        format!(
            "each trainer's share of the embedding tables, sharded across {workers} trainers, needs \
             {needed} with its optimizer state, over the table memory budget of {budget} per trainer \
             (table_budget_bytes): train on more trainers or raise table_budget_bytes"
        )
    } else {
        let advice = if workers > 1 {
            format!("shard them across the {workers} trainers with shard_tables='auto' or 'on'")
        } else {
            "train on several trainers with shard_tables='auto' or 'on'".to_string()
        };
        format!(
            "the embedding tables need {needed} with their optimizer state on every trainer, over the \
             table memory budget of {budget} per trainer (table_budget_bytes) with shard_tables='off': \
             {advice}, or raise table_budget_bytes"
        )
    }
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
