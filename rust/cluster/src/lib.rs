//! The control plane of sparktrain's launcher, as pure Rust.
//!
//! One Spark task per trainer registers with the driver; once all have, each gets the cluster
//! spec and its own `TF_CONFIG`:
//!
//! - [`roles`]: which task is the chief, a worker or an evaluator;
//! - [`spec`]: the cluster spec built from the registrations, and `TF_CONFIG` for each task;
//! - [`secret`]: the per-job secret every control-plane call carries, checked in constant time;
//! - [`rendezvous`] and [`client`]: the driver's gRPC service (tonic) where tasks register and
//!   wait for each other, and the task's side of it.

pub mod client;
pub mod error;
pub mod rendezvous;
pub mod roles;
pub mod secret;
pub mod spec;

pub use client::TaskClient;
pub use error::{ClusterError, Result};
pub use rendezvous::{RendezvousServer, SECRET_HEADER, ServerConfig};
pub use roles::{Role, TaskRole, roles};
pub use secret::JobSecret;
pub use spec::{ClusterSpec, Registration, TaskEntry};
