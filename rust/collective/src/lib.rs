//! The data plane between sparktrain's trainers, as pure Rust: ring collectives over plain TCP
//! (unix-domain sockets between ranks on one host).
//!
//! The control plane (tonic, `sparktrain-cluster`) hands every trainer the address of every
//! other trainer's listener; the ring is keyed by a key of its own, derived from the job secret
//! (`JobSecret::ring_key`), which the control plane's credential cannot be turned into. This
//! crate connects the ring and moves the bulk bytes, which run several times faster over raw
//! TCP than over gRPC.
//!
//! - [`handshake`]: proving knowledge of the ring's key (HMAC-SHA256 over fresh nonces) and
//!   deriving each connection's frame key;
//! - [`seal`]: every message after the handshake that crosses a network encrypted and
//!   authenticated (AES-256-GCM);
//! - [`element`]: the element types (f32, f64, i64) and reductions (sum, mean, max, min);
//! - [`wire`]: how values travel (as they are, or float32 as float16/bfloat16);
//! - [`link`]: what the kernel says of a connection (how long it was busy sending);
//! - [`local`]: connections between ranks on one host moved to unix-domain sockets;
//! - [`ring`]: the [`Communicator`]: all-reduce (of one buffer or a fused list), broadcast,
//!   all-gather and barrier, over one or several parallel rings;
//! - [`all_to_all`]: every rank's buffer for every other rank, over direct connections (or
//!   forwarded along the ring);
//! - [`untrusted`]: arbitrary bytes from a peer through the real collectives, for the fuzz
//!   target and the tests.

#[cfg(target_endian = "big")]
compile_error!("the data plane sends values as their in-memory bytes and assumes little-endian hosts");

pub mod all_to_all;
pub mod element;
pub mod error;
pub mod handshake;
pub mod link;
pub mod local;
pub mod ring;
pub mod seal;
pub mod untrusted;
pub mod wire;

pub use all_to_all::Route;
pub use element::{Element, ReduceOp};
pub use error::{CollectiveError, Result};
pub use local::Stream;
pub use ring::{Communicator, Config, DEFAULT_CHUNK_BYTES, MAX_GATHER_BYTES, MAX_STREAMS};
pub use wire::Wire;
