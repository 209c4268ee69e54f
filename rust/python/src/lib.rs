//! `sparktrain._native`: the Python binding of sparktrain's Rust crates.
//!
//! This crate only converts types and maps errors; the logic lives in the pure-Rust crates.
//! Every call that does I/O or heavy work runs with the GIL released through [`detach`].

mod cluster;
mod collective;
mod convert;
mod errors;
mod fs;
mod tfrecord;
mod train;

use pyo3::prelude::*;

/// Runs `f` without the GIL, so other Python threads (and Spark's) run meanwhile.
pub(crate) fn detach<T: Send, F: FnOnce() -> T + Send>(py: Python<'_>, f: F) -> T {
    py.detach(f)
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
