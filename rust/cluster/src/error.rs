//! The errors of the control plane; each names the task or value at fault.

/// A control-plane error.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The job's shape makes no sense (no workers, a task index out of range, ...).
    #[error("{0}")]
    InvalidArgument(String),
    /// Not every task registered in time.
    #[error("{} of {total} tasks never registered: {missing:?}", missing.len())]
    RendezvousTimeout {
        /// The task indexes that did not register.
        missing: Vec<u32>,
        /// How many tasks the job has.
        total: u32,
    },
    /// Two registrations claim the same task index and attempt.
    #[error("task {task_index} registered twice with attempt {attempt}")]
    DuplicateRegistration {
        /// The task index.
        task_index: u32,
        /// The attempt number both gave.
        attempt: u32,
    },
    /// A secret could not be made or read.
    #[error("job secret: {0}")]
    Secret(String),
}

/// The result type of this crate.
pub type Result<T, E = ClusterError> = std::result::Result<T, E>;
