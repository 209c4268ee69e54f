//! The errors of the data plane; each names the peer and the operation at fault.

use std::time::Duration;

/// A data-plane error.
#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    /// The arguments make no sense (a rank out of range, buffers of different lengths...).
    #[error("{0}")]
    InvalidArgument(String),
    /// A peer did not answer within the time-out.
    #[error("{op}: rank {peer} ({address}) did not answer within {waited:?}")]
    Timeout {
        /// The operation that was waiting.
        op: String,
        /// The silent peer's rank.
        peer: usize,
        /// Its address.
        address: String,
        /// How long this rank waited.
        waited: Duration,
    },
    /// A peer closed its connection or the connection broke.
    #[error("{op}: rank {peer} ({address}) failed: {reason}")]
    PeerFailed {
        /// The operation under way.
        op: String,
        /// The peer's rank.
        peer: usize,
        /// Its address.
        address: String,
        /// What happened.
        reason: String,
    },
    /// A peer called another operation, or the same one with another size.
    #[error("{op}: rank {peer} is out of step: it called {theirs} while this rank called {ours}")]
    OutOfStep {
        /// The operation this rank called.
        op: String,
        /// The peer's rank.
        peer: usize,
        /// This rank's call.
        ours: String,
        /// The peer's call.
        theirs: String,
    },
    /// A connection did not prove knowledge of the job secret.
    #[error("refused a data-plane connection from {address}: {reason}")]
    Refused {
        /// The caller's address.
        address: String,
        /// Why.
        reason: String,
    },
    /// A local failure while setting up or tearing down the ring (a socket, a thread).
    #[error("{what}{}", source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error, when there is one.
        #[source]
        source: Option<std::io::Error>,
    },
}

impl CollectiveError {
    /// An [`CollectiveError::Io`] error: `what` failed with `source`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        CollectiveError::Io { what: what.into(), source: Some(source) }
    }

    /// An [`CollectiveError::Io`] error with no operating-system error behind it.
    pub fn local(what: impl Into<String>) -> Self {
        CollectiveError::Io { what: what.into(), source: None }
    }
}

/// The result type of this crate.
pub type Result<T, E = CollectiveError> = std::result::Result<T, E>;
