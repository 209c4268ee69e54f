//! The control plane of sparktrain's launcher, as pure Rust.
//!
//! One Spark task per trainer registers with the driver; once all have, each gets the cluster
//! spec and its own `TF_CONFIG`. This crate holds the parts that do not touch the network:
//!
//! - [`roles`]: which task is the chief, a worker or an evaluator;
//! - [`spec`]: the cluster spec built from the registrations, and `TF_CONFIG` for each task;
//! - [`secret`]: the per-job secret every control-plane call carries, checked in constant time.

pub mod error;
pub mod roles;
pub mod secret;
pub mod spec;

pub use error::{ClusterError, Result};
pub use roles::{Role, TaskRole, roles};
pub use secret::JobSecret;
pub use spec::{ClusterSpec, Registration, TaskEntry};
