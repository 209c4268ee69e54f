//! The data plane for Python: a trainer's end of the ring, with all-reduce, broadcast and
//! all-gather over NumPy arrays' memory, the GIL released.

use std::net::TcpListener;
use std::os::fd::{BorrowedFd, RawFd};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sparktrain_cluster::JobSecret;
use sparktrain_collective::{CollectiveError, Communicator as Ring, Config, Element, ReduceOp, Wire};
use sparktrain_train::SharedRing;

use crate::errors::{Error, Result};
use crate::{detach, lock};

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
    fn new(address: usize, count: usize) -> Result<Self> {
        if address == 0 && count > 0 {
            return Err(Error::invalid("null buffer address"));
        }
        if !address.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::invalid(format!("buffer address {address:#x} is not aligned")));
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

/// A trainer's end of the ring, shared with the training engine (see [`Communicator::shared`]).
#[pyclass(module = "sparktrain._native", frozen)]
pub(crate) struct Communicator {
    ring: SharedRing,
}

impl Communicator {
    /// The ring, for the training engine: one connection serves both, one call at a time.
    pub(crate) fn shared(&self) -> SharedRing {
        self.ring.clone()
    }

    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> Result<T, CollectiveError> + Send,
    ) -> Result<T> {
        Ok(detach(py, || f(&mut lock(&self.ring)))?)
    }

    fn reduce<T: Element>(
        &self,
        py: Python<'_>,
        buffers: &[(usize, usize)],
        op: ReduceOp,
        wire: Wire,
    ) -> Result<()> {
        let mut views = buffers
            .iter()
            .map(|&(address, count)| Exclusive::<T>::new(address, count))
            .collect::<Result<Vec<_>>>()?;
        self.run(py, move |ring| {
            // SAFETY: the caller keeps the arrays alive for the duration of the call, and
            // checked that they do not overlap.
            let mut slices: Vec<&mut [T]> = views.iter_mut().map(|v| unsafe { v.slice() }).collect();
            ring.all_reduce_many(&mut slices, op, wire)
        })
    }
}

#[pymethods]
impl Communicator {
    /// Connects the ring through the listening socket `listener_fd` (duplicated: the caller
    /// keeps its own), with every rank's `host:port` in `peers`. Frames are sealed (encrypted
    /// and authenticated) unless `sealed` is false, which every rank must agree on; with
    /// `local`, connections between ranks in one network namespace move to unix-domain
    /// sockets, where frames are not sealed.
    #[new]
    #[pyo3(signature = (listener_fd, rank, peers, secret, timeout, chunk_bytes=sparktrain_collective::DEFAULT_CHUNK_BYTES, streams=1, sealed=true, local=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        listener_fd: RawFd,
        rank: usize,
        peers: Vec<String>,
        secret: &str,
        timeout: f64,
        chunk_bytes: usize,
        streams: usize,
        sealed: bool,
        local: bool,
    ) -> Result<Self> {
        let secret = JobSecret::from_hex(secret)?;
        let timeout = crate::cluster::seconds(timeout, "timeout")?;
        // SAFETY: the fd is open for the duration of this call (the caller's socket owns it);
        // it is duplicated before use, so Rust owns its copy.
        let owned = unsafe { BorrowedFd::borrow_raw(listener_fd) }
            .try_clone_to_owned()
            .map_err(|e| Error::invalid(format!("listener fd {listener_fd}: {e}")))?;
        let listener = TcpListener::from(owned);
        let config = Config {
            chunk_bytes,
            streams,
            sealed,
            local,
            // The ring's own key, derived from the secret: never the secret the control plane
            // derives its credential from.
            ..Config::new(rank, peers, secret.ring_key().to_vec(), timeout)
        };
        let ring = detach(py, || Ring::connect(listener, config))?;
        Ok(Communicator { ring: sparktrain_train::shared(ring) })
    }

    /// Reduces `counts[i]` values of `dtype` (float32, float64 or int64) at `addresses[i]`
    /// in place across all ranks, as one fused call; `op` is sum, mean, max or min and `wire`
    /// native, float16 or bfloat16. The caller keeps the memory alive.
    #[pyo3(signature = (addresses, counts, dtype, op, wire="native"))]
    fn allreduce_at(
        &self,
        py: Python<'_>,
        addresses: Vec<usize>,
        counts: Vec<usize>,
        dtype: &str,
        op: &str,
        wire: &str,
    ) -> Result<()> {
        let op: ReduceOp = op.parse()?;
        let wire: Wire = wire.parse()?;
        if addresses.len() != counts.len() {
            return Err(Error::invalid("allreduce_at needs one count per address"));
        }
        let width = match dtype {
            "float32" => 4,
            "float64" | "int64" => 8,
            _ => 0,
        };
        let buffers: Vec<(usize, usize)> = addresses.into_iter().zip(counts).collect();
        let mut spans: Vec<(usize, usize)> =
            buffers.iter().filter(|b| b.1 > 0).map(|&(a, n)| (a, a.saturating_add(n * width))).collect();
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[1].0 < w[0].1) {
            return Err(Error::invalid("a fused allreduce's buffers overlap"));
        }
        match dtype {
            "float32" => self.reduce::<f32>(py, &buffers, op, wire),
            "float64" => self.reduce::<f64>(py, &buffers, op, wire),
            "int64" => self.reduce::<i64>(py, &buffers, op, wire),
            other => Err(Error::invalid(format!("allreduce takes float32, float64 or int64, not {other}"))),
        }
    }

    /// Overwrites `nbytes` at `address` on every rank with rank `root`'s bytes. The caller
    /// keeps the memory alive.
    fn broadcast_at(&self, py: Python<'_>, address: usize, nbytes: usize, root: usize) -> Result<()> {
        let mut view = Exclusive::<u8>::new(address, nbytes)?;
        // SAFETY: the caller keeps the array alive for the duration of the call.
        self.run(py, move |ring| ring.broadcast(unsafe { view.slice() }, root))
    }

    /// Every rank's bytes, by rank.
    fn allgather<'py>(&self, py: Python<'py>, data: Vec<u8>) -> Result<Vec<Bound<'py, PyBytes>>> {
        let items = self.run(py, move |ring| ring.all_gather(&data))?;
        Ok(items.iter().map(|i| PyBytes::new(py, i)).collect())
    }

    /// Returns once every rank has called it.
    fn barrier(&self, py: Python<'_>) -> Result<()> {
        self.run(py, |ring| ring.barrier())
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> usize {
        lock(&self.ring).rank()
    }

    /// How many ranks the ring has.
    #[getter]
    fn size(&self) -> usize {
        lock(&self.ring).size()
    }

    /// Seconds this rank's connection to the next rank has had data in flight since the
    /// ring was connected; None for a ring of one, or where the system does not say.
    fn send_busy_seconds(&self, py: Python<'_>) -> Option<f64> {
        // The lock waits for a collective under way on another thread: without the GIL.
        detach(py, || lock(&self.ring).send_busy()).map(|d| d.as_secs_f64())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Communicator>()
}
