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
    /// A registration claims a task index that is registered already in this generation. A
    /// later attempt does not take the place of the registered one: only the driver's restart
    /// logic opens a new attempt, in the job's next generation.
    #[error(
        "task {task_index} is registered already (attempt {registered}); attempt {attempt} cannot take \
         its place: a new attempt registers in the job's next generation, which the driver starts"
    )]
    DuplicateRegistration {
        /// The task index.
        task_index: u32,
        /// The attempt number the refused registration gave.
        attempt: u32,
        /// The attempt number of the registration that holds the index.
        registered: u32,
    },
    /// No port of the configured range could be bound.
    #[error("cannot listen on {host} ports {ports}: {reason}")]
    Bind {
        /// The host.
        host: String,
        /// The port range tried.
        ports: String,
        /// The last error.
        reason: String,
    },
    /// The driver did not answer within the time-out.
    #[error("the driver at {address} did not answer within {waited:?}: {reason}")]
    Unreachable {
        /// The driver's address.
        address: String,
        /// How long the task tried.
        waited: std::time::Duration,
        /// The last connection error.
        reason: String,
    },
    /// A call claimed a task without the token its registration returned, or before it
    /// registered.
    #[error(
        "refused: task {task_index}'s calls must carry the token its registration returned (a task \
         calls only after it registered)"
    )]
    NotTheTask {
        /// The task index the call claimed.
        task_index: u32,
    },
    /// The driver refused the call's secret.
    #[error("the driver at {address} refused this task: {reason}")]
    Unauthenticated {
        /// The driver's address.
        address: String,
        /// What the driver said.
        reason: String,
    },
    /// The driver answered a call with an error (a rendezvous time-out naming the missing
    /// tasks, a refused registration, ...).
    #[error("the driver at {address} answered {code}: {message}")]
    Remote {
        /// The driver's address.
        address: String,
        /// The gRPC status code.
        code: String,
        /// The driver's message.
        message: String,
    },
    /// Not every task reached a barrier in time.
    #[error("barrier '{name}': {} of {total} tasks never arrived: {missing:?}", missing.len())]
    BarrierTimeout {
        /// The barrier's name.
        name: String,
        /// The task indexes that did not arrive.
        missing: Vec<u32>,
        /// How many tasks the job has.
        total: u32,
    },
    /// The job failed elsewhere (a trainer died, the driver gave up): every wait ends with
    /// the first reason.
    #[error("the job was aborted: {0}")]
    Aborted(String),
    /// The TLS certificate, key or CA could not be used.
    #[error("control-plane TLS: {}", causes(source))]
    Tls {
        /// The transport's error.
        #[source]
        source: tonic::transport::Error,
    },
    /// A local I/O error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A secret could not be made or read.
    #[error("job secret: {0}")]
    Secret(String),
}

/// The result type of this crate.
pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

/// An error with every cause under it, `outer: inner: ...`: tonic's transport error says only
/// "transport error", and what was wrong with a certificate or key is in its sources.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}
