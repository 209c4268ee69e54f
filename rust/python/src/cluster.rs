//! The control plane for Python: the driver's rendezvous service and the client that tasks and
//! trainers use, as blocking calls that release the GIL. The driver's work queue (dynamic
//! sharding) is set on [`Rendezvous`] and drained through [`ControlClient`]; other modules of
//! this crate reach the client's Rust side through [`ControlClient::task_client`].
//!
//! Both run on the storage crate's process-wide runtime, which is rebuilt in a forked child, so
//! a PySpark worker forked from a daemon that already used it gets a working runtime.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use sparktrain_cluster::{
    ClientTls, ClusterError, JobSecret, Registration, RendezvousServer, ServerConfig, ServerTls, Stream,
    TaskClient,
};

use crate::errors::{Error, Result};
use crate::{detach, lock};

/// The longest wait a call accepts: beyond any job, and far below where adding it to the
/// clock overflows (a panic in the runtime rather than an error).
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(366 * 24 * 3600);

/// `value` seconds as a wait for the parameter `what`: not negative, not NaN, at most
/// [`MAX_WAIT`].
pub(crate) fn seconds(value: f64, what: &str) -> Result<Duration> {
    match Duration::try_from_secs_f64(value) {
        Ok(wait) if wait <= MAX_WAIT => Ok(wait),
        _ => Err(Error::invalid(format!(
            "{what}={value}: must be a number of seconds from 0 to {} (a year)",
            MAX_WAIT.as_secs()
        ))),
    }
}

/// Runs a control-plane future on the shared runtime without the GIL.
fn block<T: Send>(
    py: Python<'_>,
    future: impl std::future::Future<Output = Result<T, ClusterError>> + Send,
) -> Result<T> {
    Ok(detach(py, || sparktrain_storage::block_on(future))??)
}

/// A new random job secret, as hex.
#[pyfunction]
fn generate_secret() -> Result<String> {
    Ok(JobSecret::generate()?.to_hex())
}

/// A fresh self-signed certificate for the control plane of one job, its private key (PEM),
/// and the name in it that the tasks check ([`sparktrain_cluster::tls`]).
#[pyfunction]
fn job_certificate() -> Result<(String, String, &'static str)> {
    let (cert, key) = sparktrain_cluster::tls::self_signed()?;
    Ok((cert, key, sparktrain_cluster::tls::PINNED_NAME))
}

fn secret_of(hex: &str) -> Result<JobSecret> {
    Ok(JobSecret::from_hex(hex)?)
}

/// The driver's rendezvous service, serving until `close()` or garbage collection.
#[pyclass(module = "sparktrain._native", frozen)]
struct Rendezvous {
    server: Mutex<Option<RendezvousServer>>,
    address: String,
}

impl Rendezvous {
    fn with_server<T>(&self, f: impl FnOnce(&RendezvousServer) -> T) -> Result<T> {
        let guard = lock(&self.server);
        let server = guard.as_ref().ok_or(Error::Closed("rendezvous"))?;
        Ok(f(server))
    }
}

/// What the driver learns about the job, in order: registrations, readiness, output lines,
/// metrics, exits and lost tasks.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object)]
#[derive(Debug, Clone)]
pub enum Event {
    /// A task registered from `host`.
    Registered {
        /// The task.
        task_index: u32,
        /// Its host.
        host: String,
        /// Its Spark executor.
        executor_id: String,
    },
    /// Every task registered: the cluster spec is complete.
    Ready {},
    /// A line a trainer wrote.
    Log {
        /// The task.
        task_index: u32,
        /// `"stdout"` or `"stderr"`.
        stream: String,
        /// The line, without its newline.
        text: String,
    },
    /// Metrics a trainer reported.
    Metrics {
        /// The task.
        task_index: u32,
        /// The training step they belong to, if given.
        step: Option<i64>,
        /// Name and value, in the order reported.
        metrics: Vec<(String, f64)>,
    },
    /// A trainer exited (a negative code: killed by that signal).
    Exited {
        /// The task.
        task_index: u32,
        /// Its exit code.
        exit_code: i32,
        /// The last lines of its stderr.
        stderr_tail: String,
    },
    /// A task stopped heart-beating.
    Lost {
        /// The task.
        task_index: u32,
        /// Seconds since its last heartbeat.
        silent_for: f64,
    },
}

impl From<sparktrain_cluster::Event> for Event {
    fn from(event: sparktrain_cluster::Event) -> Self {
        use sparktrain_cluster::Event as Core;
        match event {
            Core::Registered { task_index, host, executor_id } => {
                Event::Registered { task_index, host, executor_id }
            }
            Core::Ready => Event::Ready {},
            Core::Log { task_index, stream, text } => {
                let stream = if stream == Stream::Stderr { "stderr" } else { "stdout" }.to_string();
                Event::Log { task_index, stream, text }
            }
            Core::Metrics { task_index, step, metrics } => Event::Metrics { task_index, step, metrics },
            Core::Exited { task_index, exit_code, stderr_tail } => {
                Event::Exited { task_index, exit_code, stderr_tail }
            }
            Core::Lost { task_index, silent_for } => {
                Event::Lost { task_index, silent_for: silent_for.as_secs_f64() }
            }
        }
    }
}

/// One task of the job as every trainer sees it once the rendezvous is complete.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, get_all, eq)]
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInfo {
    /// The task's index in the Spark stage (its rank).
    task_index: u32,
    /// `chief`, `worker` or `evaluator`.
    role: String,
    /// Its index within its role.
    index: u32,
    /// The host it runs on.
    host: String,
    /// The port of its end of the collectives' ring.
    data_port: u32,
    /// The port reserved for TensorFlow's own server.
    tf_port: u32,
    /// The GPUs Spark gave it.
    gpus: Vec<String>,
    /// Its Spark executor.
    executor_id: String,
}

#[pymethods]
impl TaskInfo {
    fn __repr__(&self) -> String {
        format!(
            "TaskInfo(task_index={}, role={:?}, index={}, host={:?}, data_port={}, tf_port={}, gpus={:?}, executor_id={:?})",
            self.task_index,
            self.role,
            self.index,
            self.host,
            self.data_port,
            self.tf_port,
            self.gpus,
            self.executor_id
        )
    }
}

#[pymethods]
impl Rendezvous {
    /// Binds the first free port of `port_start..=port_end` on `host` and serves there, over
    /// TLS when a PEM certificate and key are given.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (host, port_start, port_end, secret, num_workers, num_evaluators, registration_timeout, heartbeat_timeout, tls_cert_pem=None, tls_key_pem=None))]
    fn new(
        py: Python<'_>,
        host: &str,
        port_start: u16,
        port_end: u16,
        secret: &str,
        num_workers: u32,
        num_evaluators: u32,
        registration_timeout: f64,
        heartbeat_timeout: f64,
        tls_cert_pem: Option<String>,
        tls_key_pem: Option<String>,
    ) -> Result<Self> {
        let tls = match (tls_cert_pem, tls_key_pem) {
            (Some(cert_pem), Some(key_pem)) => Some(ServerTls { cert_pem, key_pem }),
            (None, None) => None,
            _ => return Err(Error::invalid("TLS needs both a certificate and a key")),
        };
        let config = ServerConfig {
            host: host.parse().map_err(|e| Error::invalid(format!("rendezvous host '{host}': {e}")))?,
            ports: port_start..=port_end,
            secret: secret_of(secret)?,
            num_workers,
            num_evaluators,
            registration_timeout: seconds(registration_timeout, "registration_timeout")?,
            heartbeat_timeout: seconds(heartbeat_timeout, "heartbeat_timeout")?,
            tls,
            max_connections: sparktrain_cluster::limits::MAX_CONNECTIONS,
        };
        let server = block(py, RendezvousServer::start(config))?;
        let address = server.address().to_string();
        Ok(Rendezvous { server: Mutex::new(Some(server)), address })
    }

    /// `host:port` where the service listens.
    #[getter]
    fn address(&self) -> String {
        self.address.clone()
    }

    /// The calls refused for a missing or wrong secret, as `peer: reason`.
    fn refused(&self) -> Result<Vec<String>> {
        self.with_server(|s| s.refused())
    }

    /// How many calls were refused in all (`refused()` keeps the latest ones).
    fn refused_total(&self) -> Result<u64> {
        self.with_server(|s| s.refused_total())
    }

    /// The task indexes that have not registered yet.
    fn missing(&self) -> Result<Vec<u32>> {
        self.with_server(|s| s.job().spec().missing())
    }

    /// The events since the last call, waiting up to `timeout` seconds for the first: what
    /// [`Rendezvous::poll`] returns, without the generation.
    fn events(&self, py: Python<'_>, timeout: f64) -> Result<Vec<Event>> {
        Ok(self.poll(py, timeout)?.1)
    }

    /// The generation being served and its events since the last call, waiting up to
    /// `timeout` seconds for the first: events of a generation that was superseded meanwhile
    /// are never mistaken for the new one's.
    fn poll(&self, py: Python<'_>, timeout: f64) -> Result<(u64, Vec<Event>)> {
        let timeout = seconds(timeout, "timeout")?;
        let (generation, job) = self.with_server(|s| s.current())?;
        let events = detach(py, || sparktrain_storage::block_on(job.events(timeout)))?;
        Ok((generation, events.into_iter().map(Event::from).collect()))
    }

    /// Sets the items, `(file URL, size in bytes)`, that every epoch of the work queue hands
    /// out, largest first; calling it again replaces the list and restarts every epoch.
    fn set_work(&self, items: Vec<(String, u64)>) -> Result<()> {
        self.with_server(|s| s.job().set_work(items))
    }

    /// How many work items each task took, by task index, over all epochs.
    fn work_taken(&self) -> Result<Vec<u64>> {
        self.with_server(|s| s.job().work_taken())
    }

    /// Starts the next generation of the job with a fresh `secret` (hex) and its own size:
    /// the current one is aborted and its tasks are refused from now on; the work queue's
    /// items carry over. Returns the new generation's number.
    fn new_generation(&self, secret: &str, num_workers: u32, num_evaluators: u32) -> Result<u64> {
        let secret = secret_of(secret)?;
        self.with_server(|s| s.new_generation(secret, num_workers, num_evaluators))?.map_err(Error::from)
    }

    /// Hands `tokens` (Hadoop delegation tokens, Hadoop's token storage format) to the tasks
    /// from now on: with the spec at registration, and to running tasks with their next
    /// heartbeat, sealed under a key derived from the job secret. Returns their version.
    fn set_tokens(&self, tokens: &[u8]) -> Result<u64> {
        self.with_server(|s| s.set_tokens(tokens.to_vec()))?.map_err(Error::from)
    }

    /// Fails every pending wait with `reason` and tells the tasks to stop their trainers.
    fn abort(&self, reason: &str) -> Result<()> {
        self.with_server(|s| s.job().abort(reason))
    }

    /// Stops serving.
    fn close(&self) {
        let server = lock(&self.server).take();
        drop(server);
    }
}

/// A connection to the driver's rendezvous service, for a task or a trainer.
#[pyclass(module = "sparktrain._native", frozen)]
pub(crate) struct ControlClient {
    client: TaskClient,
}

impl ControlClient {
    /// The Rust client behind this object, for other modules of the binding (a clone: cheap,
    /// and it shares the connection).
    pub(crate) fn task_client(&self) -> TaskClient {
        self.client.clone()
    }
}

#[pymethods]
impl ControlClient {
    /// Connects to `address`, retrying for up to `timeout` seconds; over TLS when the PEM CA
    /// that signed the driver's certificate is given (`tls_domain`: the name it carries).
    #[new]
    #[pyo3(signature = (address, secret, timeout, tls_ca_pem=None, tls_domain=None))]
    fn new(
        py: Python<'_>,
        address: &str,
        secret: &str,
        timeout: f64,
        tls_ca_pem: Option<String>,
        tls_domain: Option<String>,
    ) -> Result<Self> {
        let secret = secret_of(secret)?;
        let timeout = seconds(timeout, "timeout")?;
        let tls = tls_ca_pem.map(|ca_pem| ClientTls {
            ca_pem,
            domain: tls_domain
                .unwrap_or_else(|| address.rsplit_once(':').map_or(address, |(h, _)| h).to_string()),
        });
        let client =
            block(
                py,
                async move { TaskClient::connect_with(address, &secret, timeout, tls.as_ref()).await },
            )?;
        Ok(ControlClient { client })
    }

    /// Registers a task and waits for all; returns `(tasks, tf_config)` where `tasks` lists a
    /// dict per task by task index. From then on this client (and its clones) carries the
    /// task's token, which the driver requires of every later call for the task.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (task_index, attempt, host, pid, executor_id, data_port, tf_port, gpus, timeout))]
    fn register(
        &self,
        py: Python<'_>,
        task_index: u32,
        attempt: u32,
        host: String,
        pid: u32,
        executor_id: String,
        data_port: u16,
        tf_port: u16,
        gpus: Vec<String>,
        timeout: f64,
    ) -> Result<(Vec<TaskInfo>, String)> {
        let registration =
            Registration { task_index, attempt, host, pid, executor_id, data_port, tf_port, gpus };
        let timeout = seconds(timeout, "timeout")?;
        let mut client = self.client.clone();
        let reply = block(py, async move { client.register(&registration, timeout).await })?;
        let tasks = reply
            .tasks
            .into_iter()
            .map(|t| TaskInfo {
                task_index: t.task_index,
                role: t.role,
                index: t.index,
                host: t.host,
                data_port: t.data_port,
                tf_port: t.tf_port,
                gpus: t.gpus,
                executor_id: t.executor_id,
            })
            .collect();
        Ok((tasks, reply.tf_config))
    }

    /// The token of the task this client acts for, once it registered (or was given one).
    #[getter]
    fn token(&self) -> Option<String> {
        self.client.token()
    }

    /// Acts for the task whose registration returned `token`: a trainer gets it from its task.
    fn use_token(&self, token: &str) {
        self.client.use_token(token);
    }

    /// The driver's delegation tokens received since the last call (registration or a
    /// heartbeat brought newer ones), or None.
    fn take_tokens<'py>(&self, py: Python<'py>) -> Option<Bound<'py, pyo3::types::PyBytes>> {
        self.client.take_tokens().map(|t| pyo3::types::PyBytes::new(py, &t))
    }

    /// Sends a heartbeat with `(stream, line)` pairs (1 stdout, 2 stderr); returns the
    /// driver's abort reason, or None while the job goes on.
    fn heartbeat(
        &self,
        py: Python<'_>,
        task_index: u32,
        attempt: u32,
        lines: Vec<(u32, String)>,
        timeout: f64,
    ) -> Result<Option<String>> {
        let lines = lines
            .into_iter()
            .map(|(stream, text)| (if stream == 2 { Stream::Stderr } else { Stream::Stdout }, text))
            .collect();
        let timeout = seconds(timeout, "timeout")?;
        let mut client = self.client.clone();
        block(py, async move { client.heartbeat(task_index, attempt, lines, timeout).await })
    }

    /// Waits until every task reached the barrier `name` (no time-out when None).
    #[pyo3(signature = (task_index, name, timeout=None))]
    fn barrier(&self, py: Python<'_>, task_index: u32, name: String, timeout: Option<f64>) -> Result<()> {
        let timeout = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        let mut client = self.client.clone();
        block(py, async move { client.barrier(task_index, &name, timeout).await })
    }

    /// Sends metrics.
    #[pyo3(signature = (task_index, step, metrics, timeout))]
    fn report(
        &self,
        py: Python<'_>,
        task_index: u32,
        step: Option<i64>,
        metrics: Vec<(String, f64)>,
        timeout: f64,
    ) -> Result<()> {
        let timeout = seconds(timeout, "timeout")?;
        let mut client = self.client.clone();
        block(py, async move { client.report(task_index, step, metrics, timeout).await })
    }

    /// Takes the next item of `epoch` from the driver's work queue; None once every item of
    /// that epoch has been handed out.
    fn next_work(&self, py: Python<'_>, task_index: u32, epoch: u64, timeout: f64) -> Result<Option<String>> {
        let timeout = seconds(timeout, "timeout")?;
        let mut client = self.task_client();
        block(py, async move { client.next_work(task_index, epoch, timeout).await })
    }

    /// Reports how the trainer ended.
    fn exit(
        &self,
        py: Python<'_>,
        task_index: u32,
        attempt: u32,
        exit_code: i32,
        stderr_tail: String,
        timeout: f64,
    ) -> Result<()> {
        let timeout = seconds(timeout, "timeout")?;
        let mut client = self.client.clone();
        block(py, async move { client.exit(task_index, attempt, exit_code, stderr_tail, timeout).await })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(generate_secret, m)?)?;
    m.add_function(wrap_pyfunction!(job_certificate, m)?)?;
    m.add_class::<Rendezvous>()?;
    m.add_class::<ControlClient>()?;
    m.add_class::<Event>()?;
    m.add_class::<TaskInfo>()?;
    m.add("MAX_WAIT_SECONDS", MAX_WAIT.as_secs())?;
    Ok(())
}
