//! The data plane for Python: a trainer's end of the ring, with all-reduce, broadcast and
//! all-gather over NumPy arrays' memory, the GIL released.

use std::net::TcpListener;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sparktrain_cluster::JobSecret;
use sparktrain_collective::{CollectiveError, Communicator as Ring, Config, Element, ReduceOp};

use crate::{detach, errors};

/// Memory owned by a NumPy array on the Python side, reachable without the GIL.
///
/// The abi3 build (Python 3.10) has no buffer protocol, so `sparktrain.cluster.context` hands
/// over `__array_interface__` addresses after checking that the array is C-contiguous,
/// writable and of the right type, and keeps the array alive during the call.
struct Exclusive<T>(*mut T, usize);

// SAFETY: the pointer is only dereferenced inside `detach` while the Python caller keeps the
// array alive; concurrent mutation from other Python threads is the caller's business, as
// with any extension that releases the GIL.
unsafe impl<T> Send for Exclusive<T> {}

impl<T> Exclusive<T> {
    fn new(address: usize, count: usize) -> PyResult<Self> {
        if address == 0 && count > 0 {
            return Err(errors::invalid("null buffer address"));
        }
        if !address.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(errors::invalid(format!("buffer address {address:#x} is not aligned")));
        }
        Ok(Exclusive(address as *mut T, count))
    }

    /// SAFETY: only while the array the address came from is alive.
    unsafe fn slice(&mut self) -> &mut [T] {
        if self.1 == 0 {
            return &mut [];
        }
        // SAFETY: as promised by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
    }
}

fn collective_error(e: CollectiveError) -> PyErr {
    match e {
        CollectiveError::InvalidArgument(m) => errors::invalid(m),
        other => errors::collective(other),
    }
}

/// A trainer's end of the ring.
#[pyclass(module = "sparktrain._native", frozen)]
struct Communicator {
    ring: Mutex<Ring>,
}

impl Communicator {
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> Result<T, CollectiveError> + Send,
    ) -> PyResult<T> {
        detach(py, || {
            let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut ring)
        })
        .map_err(collective_error)
    }

    fn reduce<T: Element>(&self, py: Python<'_>, address: usize, count: usize, op: ReduceOp) -> PyResult<()> {
        let mut view = Exclusive::<T>::new(address, count)?;
        // SAFETY: the caller keeps the array alive for the duration of the call.
        self.run(py, move |ring| ring.all_reduce(unsafe { view.slice() }, op))
    }
}

#[pymethods]
impl Communicator {
    /// Connects the ring through the listening socket `listener_fd` (duplicated: the caller
    /// keeps its own), with every rank's `host:port` in `peers`.
    #[new]
    #[pyo3(signature = (listener_fd, rank, peers, secret, timeout, chunk_bytes=sparktrain_collective::DEFAULT_CHUNK_BYTES))]
    fn new(
        py: Python<'_>,
        listener_fd: RawFd,
        rank: usize,
        peers: Vec<String>,
        secret: &str,
        timeout: f64,
        chunk_bytes: usize,
    ) -> PyResult<Self> {
        let secret = JobSecret::from_hex(secret).map_err(errors::cluster)?;
        let timeout =
            Duration::try_from_secs_f64(timeout).map_err(|_| errors::invalid("timeout must be >= 0"))?;
        // SAFETY: the fd is open for the duration of this call (the caller's socket owns it);
        // it is duplicated before use, so Rust owns its copy.
        let owned = unsafe { BorrowedFd::borrow_raw(listener_fd) }
            .try_clone_to_owned()
            .map_err(|e| errors::invalid(format!("listener fd {listener_fd}: {e}")))?;
        let listener = TcpListener::from(owned);
        let config = Config { rank, peers, secret: secret.as_bytes().to_vec(), timeout, chunk_bytes };
        let ring = detach(py, || Ring::connect(listener, config)).map_err(collective_error)?;
        Ok(Communicator { ring: Mutex::new(ring) })
    }

    /// Reduces `count` values of `dtype` (float32, float64 or int64) at `address` in place
    /// across all ranks; `op` is sum, mean, max or min. The caller keeps the memory alive.
    fn allreduce_at(
        &self,
        py: Python<'_>,
        address: usize,
        count: usize,
        dtype: &str,
        op: &str,
    ) -> PyResult<()> {
        let op: ReduceOp = op.parse().map_err(collective_error)?;
        match dtype {
            "float32" => self.reduce::<f32>(py, address, count, op),
            "float64" => self.reduce::<f64>(py, address, count, op),
            "int64" => self.reduce::<i64>(py, address, count, op),
            other => Err(errors::invalid(format!("allreduce takes float32, float64 or int64, not {other}"))),
        }
    }

    /// Overwrites `nbytes` at `address` on every rank with rank `root`'s bytes. The caller
    /// keeps the memory alive.
    fn broadcast_at(&self, py: Python<'_>, address: usize, nbytes: usize, root: usize) -> PyResult<()> {
        let mut view = Exclusive::<u8>::new(address, nbytes)?;
        // SAFETY: the caller keeps the array alive for the duration of the call.
        self.run(py, move |ring| ring.broadcast(unsafe { view.slice() }, root))
    }

    /// Every rank's bytes, by rank.
    fn allgather<'py>(&self, py: Python<'py>, data: Vec<u8>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let items = self.run(py, move |ring| ring.all_gather(&data))?;
        Ok(items.iter().map(|i| PyBytes::new(py, i)).collect())
    }

    /// Returns once every rank has called it.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |ring| ring.barrier())
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> usize {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).rank()
    }

    /// How many ranks the ring has.
    #[getter]
    fn size(&self) -> usize {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).size()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Communicator>()
}
