//! The process-wide tokio runtime, and the caches of HDFS clients and object stores that live
//! on it.
//!
//! `hdfs-native` is async; this crate's interface is blocking. Every blocking call enters one
//! small multi-thread runtime, built lazily on first use. Other crates (the cluster control
//! plane) share it through [`runtime`] and [`block_on`] rather than starting their own.
//!
//! A tokio runtime does not survive `fork()`: the child gets the runtime's memory but none of
//! its worker threads, and any lock another thread held at the time stays locked forever.
//! PySpark forks its Python workers from a daemon that may already have used this crate, so the
//! runtime (and the clients bound to it) is remembered together with the pid that built it; a
//! process whose pid differs builds its own. The inherited one is deliberately leaked: dropping
//! it would wait for worker threads that do not exist in the child.

use std::collections::HashMap;
use std::future::Future;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

use hdfs_native::Client;
use object_store::ObjectStore;
use tokio::runtime::{Handle, Runtime};

use crate::error::{Result, StorageError};

/// Worker threads of the shared runtime. The work is network I/O for a handful of open files
/// at a time; trainers want their cores for compute.
const WORKER_THREADS: usize = 2;

/// Everything that belongs to one process: the runtime and the clients whose background tasks
/// run on it. Allocated once per process and never freed (see the module notes).
struct ProcessState {
    pid: u32,
    runtime: Runtime,
    /// Keyed by `scheme://authority`. This mutex is never held across a fork in a way that
    /// matters: a forked child builds a new `ProcessState` with a new mutex.
    clients: Mutex<HashMap<String, Arc<Client>>>,
    /// Object stores, keyed by `scheme://bucket`, under the same rule.
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
}

/// The current process's state, or null before first use. Only ever set to pointers obtained
/// from `Box::into_raw` that are never freed afterwards, which is what makes handing out
/// `&'static` references sound.
static STATE: AtomicPtr<ProcessState> = AtomicPtr::new(ptr::null_mut());

fn state() -> Result<&'static ProcessState> {
    let pid = std::process::id();
    let current = STATE.load(Ordering::Acquire);
    // SAFETY: non-null values of STATE come from `Box::into_raw` below and are never freed, so
    // the pointee is valid for the rest of the program.
    if let Some(existing) = unsafe { current.as_ref() }
        && existing.pid == pid
    {
        return Ok(existing);
    }
    // First use in this process (or first use after a fork): build a fresh runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .thread_name("sparktrain-io")
        .enable_all()
        .build()
        .map_err(|source| StorageError::Runtime { source })?;
    let fresh = Box::into_raw(Box::new(ProcessState {
        pid,
        runtime,
        clients: Mutex::new(HashMap::new()),
        stores: Mutex::new(HashMap::new()),
    }));
    match STATE.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // The previous value (null, or a forked parent's state) is leaked on purpose.
        // SAFETY: `fresh` was just made by `Box::into_raw` and is now owned by STATE forever.
        Ok(_) => Ok(unsafe { &*fresh }),
        Err(winner) => {
            // Another thread of this process got there first: use its runtime, discard ours.
            // SAFETY: `fresh` was never published, so this is its only owner.
            let ours = unsafe { Box::from_raw(fresh) };
            // `shutdown_background` does not wait, so it is safe even inside an async context.
            ours.runtime.shutdown_background();
            // SAFETY: as above, non-null values of STATE are never freed.
            match unsafe { winner.as_ref() } {
                Some(w) if w.pid == pid => Ok(w),
                // Raced with a state from another pid: impossible in practice (a fork copies
                // only the forking thread), but retrying is the correct answer if it happens.
                _ => state(),
            }
        }
    }
}

/// The shared I/O runtime of this process, built on first use (and rebuilt in a forked child).
///
/// Use it to `spawn` background tasks. To wait for a future from blocking code, use
/// [`block_on`], which refuses to run on a runtime thread instead of panicking.
pub fn runtime() -> Result<&'static Runtime> {
    Ok(&state()?.runtime)
}

/// Fails with [`StorageError::InsideRuntime`] when called on a thread that drives a tokio
/// runtime (any runtime, not just ours), where blocking would panic or stall it.
pub(crate) fn ensure_blocking_allowed() -> Result<()> {
    if Handle::try_current().is_ok() { Err(StorageError::InsideRuntime) } else { Ok(()) }
}

/// Runs `future` to completion on the shared runtime, blocking the calling thread.
///
/// Returns [`StorageError::InsideRuntime`] (and does not run the future) when called from
/// inside a tokio runtime, where `Runtime::block_on` would panic.
pub fn block_on<F: Future>(future: F) -> Result<F::Output> {
    ensure_blocking_allowed()?;
    Ok(runtime()?.block_on(future))
}

/// The client for `scheme://authority`, built on first use and cached for the process.
///
/// An empty authority means `fs.defaultFS` from the Hadoop configuration.
pub(crate) fn client(scheme: &str, authority: &str) -> Result<Arc<Client>> {
    let state = state()?;
    let key = format!("{scheme}://{}", authority.to_ascii_lowercase());
    let url = format!("{scheme}://{authority}");
    // Recover from a poisoned lock: the map only ever holds fully built clients.
    if let Some(client) = state.clients.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&key) {
        return Ok(Arc::clone(client));
    }
    // Build outside the lock: building reads the Hadoop configuration from disk.
    let mut builder = hdfs_native::ClientBuilder::new().with_io_runtime(state.runtime.handle().clone());
    if !authority.is_empty() {
        builder = builder.with_url(url.clone());
    }
    let built = Arc::new(builder.build().map_err(|e| StorageError::hdfs(&url, e))?);
    let mut clients = state.clients.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // If another thread built one meanwhile, keep the first so everyone shares it.
    Ok(Arc::clone(clients.entry(key).or_insert(built)))
}

/// The object store for `scheme://bucket`, built on first use and cached for the process.
pub(crate) fn object_store(scheme: &str, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    let state = state()?;
    let key = format!("{scheme}://{bucket}");
    if let Some(store) = state.stores.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(&key) {
        return Ok(Arc::clone(store));
    }
    let built = crate::faults::wrap(crate::object_config::build_store(scheme, bucket)?)?;
    let mut stores = state.stores.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    Ok(Arc::clone(stores.entry(key).or_insert(built)))
}

/// Drops the cached object stores, so that the next call builds them with the current settings.
pub(crate) fn forget_object_stores() {
    if let Ok(state) = state() {
        state.stores.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_on_runs_futures() {
        assert_eq!(block_on(async { 41 + 1 }).unwrap(), 42);
        // The same runtime every time in one process.
        let a = runtime().unwrap() as *const Runtime;
        let b = runtime().unwrap() as *const Runtime;
        assert_eq!(a, b);
    }

    #[test]
    fn block_on_inside_runtime_is_an_error_not_a_panic() {
        let rt = runtime().unwrap();
        let inner = rt.block_on(async { block_on(async { 1 }) });
        assert!(matches!(inner, Err(StorageError::InsideRuntime)));
    }
}
