//! `sparktrain._native`: the Python binding of sparktrain's Rust crates.
//!
//! This crate only converts types and maps errors; the logic lives in the pure-Rust crates.
//! Every call that does I/O or heavy work runs with the GIL released through [`detach`].
//! Results cross as frozen classes whose fields mirror the core's structs, options as keyword
//! arguments whose defaults come from the core's `Default`s, and errors as one [`errors::Error`]
//! that becomes the matching `sparktrain.errors` class.

mod allocator;
mod cluster;
mod collective;
mod convert;
mod errors;
mod fs;
mod tfrecord;
mod train;

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;

/// Large blocks from mimalloc, small ones from the C library (see [`allocator`]).
#[global_allocator]
static ALLOCATOR: allocator::SplitAllocator = allocator::SplitAllocator;

/// Runs `f` without the GIL, so other Python threads (and Spark's) run meanwhile.
pub(crate) fn detach<T: Send, F: FnOnce() -> T + Send>(py: Python<'_>, f: F) -> T {
    py.detach(f)
}

/// Locks a class's state. A lock is poisoned only when a call panicked while holding it; pyo3
/// has already raised that panic in Python, and every state guarded here (a reader's position,
/// a writer, a trainer) is left whole between the core's calls, so the next call goes on.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    tfrecord::register(m)?;
    fs::register(m)?;
    cluster::register(m)?;
    collective::register(m)?;
    train::register(m)?;
    Ok(())
}
