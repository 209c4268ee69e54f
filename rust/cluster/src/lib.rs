//! The control plane of sparktrain's launcher, as pure Rust.
//!
//! One Spark task per trainer registers with the driver; once all have, each gets the cluster
//! spec and its own `TF_CONFIG`:
//!
//! - [`roles`]: which task is the chief, a worker or an evaluator;
//! - [`spec`]: the cluster spec built from the registrations, and `TF_CONFIG` for each task;
//! - [`secret`]: the per-job secret, and the keys derived from it: the credential every
//!   control-plane call carries (checked in constant time) and the ring's key;
//! - [`job`]: the driver's view of a running job: registrations, heartbeats, barriers, events,
//!   the work queue of input items (dynamic sharding) and the abort switch;
//! - [`rendezvous`] and [`client`]: the driver's gRPC service (tonic) where tasks register,
//!   heart-beat, meet at barriers, take work and report, and the tasks' side of it;
//! - [`tls`]: the certificate a driver makes for a job that brings none;
//! - [`tokens`]: the driver's Hadoop delegation tokens, sealed for the tasks;
//! - [`limits`]: what the service accepts from the network (sizes, connections, keepalives);
//! - [`untrusted`]: arbitrary bytes through the service's message handling, for the fuzz
//!   target and the tests.

pub mod client;
pub mod error;
pub mod job;
pub mod limits;
pub mod rendezvous;
pub mod roles;
pub mod secret;
pub mod spec;
pub mod tls;
pub mod tokens;
pub mod untrusted;

pub use client::{ClientTls, TaskClient};
pub use error::{ClusterError, Result};
pub use job::{Event, Job, Stream, WorkQueue};
pub use rendezvous::{CREDENTIAL_HEADER, REFUSED_KEPT, RendezvousServer, ServerConfig, ServerTls};
pub use roles::{Role, TaskRole, roles};
pub use secret::JobSecret;
pub use spec::{ClusterSpec, Registration, TaskEntry};
