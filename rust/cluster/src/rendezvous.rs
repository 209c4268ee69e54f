//! The driver's control-plane service over gRPC (tonic): each task registers and waits until
//! all have, then every task gets the whole cluster spec and its own `TF_CONFIG`; afterwards the
//! tasks heart-beat (carrying their trainer's output), trainers meet at named barriers, report
//! metrics and take their next input item from the job's work queue, and each task reports how
//! its trainer ended. The state behind the calls is [`Job`].
//!
//! Every call must carry the job's control credential ([`JobSecret::control_credential`], a
//! key derived from the job secret that cannot be turned back into it or into the ring's key)
//! in the [`CREDENTIAL_HEADER`] metadata; a call without it, or with another, is refused with
//! `UNAUTHENTICATED` and recorded with the caller's address ([`RendezvousServer::refused`]).
//! The credential is checked on the headers, by an interceptor, before the body is read: a
//! refused call costs no more than its headers. Only protobuf messages are read from the
//! network, within the bounds of [`crate::limits`].
//!
//! A registration returns a token for its task; every later call that names a registered task
//! must carry it ([`TOKEN_HEADER`]), so no other holder of the secret can act for that task.
//!
//! Delegation tokens: a driver that obtains Hadoop delegation tokens hands them to the tasks
//! ([`RendezvousServer::set_tokens`]): sealed for the caller's generation ([`crate::tokens`]),
//! in the registration reply, and in the reply to any heartbeat that names an older version.
//!
//! Generations: when the driver restarts a failed job it starts a new generation
//! ([`RendezvousServer::new_generation`]) with a fresh [`Job`] and a fresh secret. A task of an
//! earlier generation still presents that generation's credential; it is refused with
//! `ABORTED` (its task then stops its trainer at once) and its data-plane handshakes fail too,
//! since the ring's key derives from the same secret. The work queue carries over to the new
//! generation.

use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Response, Status};

use crate::error::{ClusterError, Result};
use crate::job::{Job, Stream};
use crate::limits;
use crate::secret::{self, JobSecret};
use crate::spec::{ClusterSpec, Registration};
use crate::tokens::{self, Tokens, TokensKey};

/// The generated protocol types and service stubs.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("sparktrain.cluster.v1");
}

use proto::rendezvous_server::{Rendezvous, RendezvousServer as GrpcServer};
use proto::{
    BarrierReply, BarrierRequest, CheckpointedReply, CheckpointedRequest, ExitReply, ExitRequest,
    HeartbeatReply, HeartbeatRequest, RegisterReply, RegisterRequest, ReportReply, ReportRequest, TaskInfo,
    WorkReply, WorkRequest,
};

/// The metadata key that carries the job's control credential (hex,
/// [`JobSecret::control_credential`]).
pub const CREDENTIAL_HEADER: &str = "x-sparktrain-credential";
/// The metadata key that carries the caller's task token (from its registration).
pub const TOKEN_HEADER: &str = "x-sparktrain-task-token";

/// How the rendezvous service runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The address to listen on (the driver's host as the executors reach it).
    pub host: IpAddr,
    /// The ports to try, in order; the first free one is kept bound and served.
    pub ports: RangeInclusive<u16>,
    /// The job's secret; the service keeps only the credential derived from it.
    pub secret: JobSecret,
    /// Training tasks, the chief included.
    pub num_workers: u32,
    /// Evaluator tasks.
    pub num_evaluators: u32,
    /// How long, from the start, every task has to register.
    pub registration_timeout: Duration,
    /// How long a registered task may go without a heartbeat before it counts as lost.
    pub heartbeat_timeout: Duration,
    /// Serve over TLS with this identity; plain HTTP/2 when None.
    pub tls: Option<ServerTls>,
    /// Connections served at once ([`limits::MAX_CONNECTIONS`] unless a test wants fewer).
    pub max_connections: usize,
}

/// The driver's TLS identity, as PEM.
#[derive(Clone)]
pub struct ServerTls {
    /// The certificate chain; it must name the host the tasks connect to.
    pub cert_pem: String,
    /// The private key.
    pub key_pem: String,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("cert_pem", &self.cert_pem.len()).finish_non_exhaustive()
    }
}

/// Refused calls kept by peer and reason; older ones are only counted, so a flood of bad
/// calls cannot grow the driver's memory.
pub const REFUSED_KEPT: usize = 100;

/// The calls refused so far: how many, and the latest [`REFUSED_KEPT`].
#[derive(Default)]
struct Refusals {
    total: u64,
    recent: std::collections::VecDeque<String>,
}

/// Credentials of earlier generations kept to tell a stale caller from a stranger.
const EARLIER_KEPT: usize = 64;

/// The generation being served: its number, credential, tokens key and job, and the
/// credentials of earlier ones; the delegation tokens handed out, plain and sealed under this
/// generation's key. The service keeps no secret itself, only keys derived from it.
struct Generation {
    number: u64,
    credential: String,
    tokens_key: TokensKey,
    job: Arc<Job>,
    earlier: std::collections::VecDeque<(u64, String)>,
    tokens: Option<Tokens>,
    sealed: SealedTokens,
}

impl Generation {
    /// Seals the tokens handed out under this generation's key (after either changed).
    fn reseal(&mut self) -> Result<()> {
        self.sealed = match &self.tokens {
            Some(t) => SealedTokens(Some(Arc::new((
                t.version,
                tokens::seal(&self.tokens_key, t.version, &t.plain)?,
            )))),
            None => SealedTokens::default(),
        };
        Ok(())
    }
}

/// The current delegation tokens as a call's reply carries them: version and sealed bytes.
#[derive(Clone, Default)]
struct SealedTokens(Option<Arc<(u64, Vec<u8>)>>);

impl SealedTokens {
    /// The sealed tokens when they are newer than `held`: (bytes, version), else empty.
    fn newer_than(&self, held: u64) -> (Vec<u8>, u64) {
        match &self.0 {
            Some(sealed) if sealed.0 > held => (sealed.1.clone(), sealed.0),
            _ => (Vec::new(), 0),
        }
    }
}

struct State {
    current: Mutex<Generation>,
    refused: Mutex<Refusals>,
    /// Connections closed at once for want of a slot ([`limits::MAX_CONNECTIONS`]).
    turned_away: Arc<std::sync::atomic::AtomicU64>,
}

/// The calls, once the [`Gate`] has let them through.
pub(crate) struct Service;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every update is one push: a panic elsewhere cannot leave the list half-written.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn registration_of(r: RegisterRequest) -> Result<Registration, Status> {
    let port = |p: u32, what: &str| {
        u16::try_from(p).map_err(|_| Status::invalid_argument(format!("{what} {p} is not a port")))
    };
    Ok(Registration {
        task_index: r.task_index,
        attempt: r.attempt,
        host: r.host,
        pid: r.pid,
        executor_id: r.executor_id,
        data_port: port(r.data_port, "data_port")?,
        tf_port: port(r.tf_port, "tf_port")?,
        gpus: r.gpus,
    })
}

/// The gRPC status that carries a control-plane error back to the caller.
fn status_of(e: ClusterError) -> Status {
    match e {
        ClusterError::RendezvousTimeout { .. } | ClusterError::BarrierTimeout { .. } => {
            Status::deadline_exceeded(e.to_string())
        }
        ClusterError::DuplicateRegistration { .. } => Status::already_exists(e.to_string()),
        ClusterError::Aborted(_) => Status::aborted(e.to_string()),
        ClusterError::InvalidArgument(_) => Status::invalid_argument(e.to_string()),
        ClusterError::NotTheTask { .. } => Status::permission_denied(e.to_string()),
        other => Status::internal(other.to_string()),
    }
}

fn reply_of(spec: &ClusterSpec, task_index: u32) -> Result<RegisterReply, Status> {
    let entries = spec.entries().map_err(status_of)?;
    let tasks = entries
        .into_iter()
        .map(|e| TaskInfo {
            task_index: e.registration.task_index,
            role: e.role.role.name().to_string(),
            index: e.role.index,
            host: e.registration.host,
            data_port: e.registration.data_port.into(),
            tf_port: e.registration.tf_port.into(),
            gpus: e.registration.gpus,
            executor_id: e.registration.executor_id,
        })
        .collect();
    let tf_config = spec.tf_config(task_index).map_err(status_of)?;
    Ok(RegisterReply { tasks, tf_config, token: String::new(), tokens: Vec::new(), tokens_version: 0 })
}

/// Checks each call's credential on its headers, before its body is read, and hands the
/// handler the job of the caller's generation.
#[derive(Clone)]
struct Gate(Arc<State>);

impl Gate {
    /// The job of the current generation and its sealed tokens when the call carries its
    /// credential; else the call is refused and recorded: `ABORTED` for a caller of an earlier
    /// generation, `UNAUTHENTICATED` for anyone else.
    fn authenticate<T>(&self, request: &Request<T>) -> Result<(Arc<Job>, SealedTokens), Status> {
        // Read once, outside the lock: None for no credential, Some(None) for one that is not
        // even text.
        let presented = request.metadata().get(CREDENTIAL_HEADER).map(|v| v.to_str().ok());
        let (why, status) = {
            let current = lock(&self.0.current);
            match presented {
                Some(Some(p)) if secret::same(p, &current.credential) => {
                    return Ok((current.job.clone(), current.sealed.clone()));
                }
                Some(p) => match p.and_then(|p| current.earlier.iter().find(|(_, c)| secret::same(p, c))) {
                    Some((stale, _)) => {
                        let why = format!(
                            "a task of generation {stale}, superseded by generation {}",
                            current.number
                        );
                        let status = Status::aborted(format!("refused: {why}"));
                        (why, status)
                    }
                    None => (
                        "a wrong job secret".to_string(),
                        Status::unauthenticated("refused: a wrong job secret"),
                    ),
                },
                None => ("no job secret".to_string(), Status::unauthenticated("refused: no job secret")),
            }
        };
        let peer = request.remote_addr().map_or_else(|| "an unknown peer".to_string(), |a| a.to_string());
        self.0.refuse(format!("{peer}: {why}"));
        Err(status)
    }
}

impl tonic::service::Interceptor for Gate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let (job, sealed) = self.authenticate(&request)?;
        request.extensions_mut().insert(job);
        request.extensions_mut().insert(sealed);
        Ok(request)
    }
}

impl State {
    /// Counts a refused call and keeps its description among the latest [`REFUSED_KEPT`].
    fn refuse(&self, what: String) {
        let mut refused = lock(&self.refused);
        refused.total += 1;
        if refused.recent.len() == REFUSED_KEPT {
            refused.recent.pop_front();
        }
        refused.recent.push_back(what);
    }
}

/// A request made for one task, named by its index.
pub(crate) trait ForTask {
    fn task_index(&self) -> u32;
}

macro_rules! for_task {
    ($($request:ty),*) => {$(
        impl ForTask for $request {
            fn task_index(&self) -> u32 {
                self.task_index
            }
        }
    )*};
}

for_task!(HeartbeatRequest, BarrierRequest, ReportRequest, ExitRequest, WorkRequest, CheckpointedRequest);

/// The job and the message of a call for a registered task, once the call is known to carry
/// that task's token (see [`Job::check_token`]).
fn admit<T: ForTask>(request: Request<T>) -> Result<(Arc<Job>, T), Status> {
    let job = job_of(&request)?;
    let token = request.metadata().get(TOKEN_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let message = request.into_inner();
    job.check_token(message.task_index(), token.as_deref()).map_err(status_of)?;
    Ok((job, message))
}

/// The sealed delegation tokens the [`Gate`] found current when it let the call through.
fn sealed_of<T>(request: &Request<T>) -> SealedTokens {
    request.extensions().get::<SealedTokens>().cloned().unwrap_or_default()
}

/// The job the [`Gate`] let the call through for.
fn job_of<T>(request: &Request<T>) -> Result<Arc<Job>, Status> {
    // The gate runs before every handler: a missing job is a wiring error, not a caller's.
    request
        .extensions()
        .get::<Arc<Job>>()
        .cloned()
        .ok_or_else(|| Status::internal("the call skipped the gate"))
}

#[tonic::async_trait]
impl Rendezvous for Service {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<RegisterReply>, Status> {
        let job = job_of(&request)?;
        let sealed = sealed_of(&request);
        let registration = registration_of(request.into_inner())?;
        let task_index = registration.task_index;
        let (spec, token) = job.register(registration).await.map_err(status_of)?;
        let mut reply = reply_of(&spec, task_index)?;
        reply.token = token;
        // The tokens of registration time: newer ones reach the task with its heartbeats.
        (reply.tokens, reply.tokens_version) = sealed.newer_than(0);
        Ok(Response::new(reply))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        let sealed = sealed_of(&request);
        let (job, r) = admit(request)?;
        let lines = r
            .lines
            .into_iter()
            .map(|l| (if l.stream == 2 { Stream::Stderr } else { Stream::Stdout }, l.text))
            .collect();
        let aborted = job.heartbeat(r.task_index, lines).map_err(status_of)?;
        let (tokens, tokens_version) = sealed.newer_than(r.tokens_version);
        Ok(Response::new(HeartbeatReply {
            abort: aborted.is_some(),
            reason: aborted.unwrap_or_default(),
            tokens,
            tokens_version,
        }))
    }

    async fn barrier(&self, request: Request<BarrierRequest>) -> Result<Response<BarrierReply>, Status> {
        let (job, r) = admit(request)?;
        let timeout = (r.timeout_ms > 0).then(|| Duration::from_millis(r.timeout_ms));
        match job.barrier(r.task_index, &r.name, timeout).await {
            Ok(()) => Ok(Response::new(BarrierReply { missing: vec![], total: 0 })),
            // A time-out is an answer, not a failure of the call: it names who never came.
            Err(ClusterError::BarrierTimeout { missing, total, .. }) => {
                Ok(Response::new(BarrierReply { missing, total }))
            }
            Err(e) => Err(status_of(e)),
        }
    }

    async fn report(&self, request: Request<ReportRequest>) -> Result<Response<ReportReply>, Status> {
        let (job, r) = admit(request)?;
        job.report(r.task_index, r.step, r.metrics.into_iter().collect()).map_err(status_of)?;
        Ok(Response::new(ReportReply {}))
    }

    async fn exit(&self, request: Request<ExitRequest>) -> Result<Response<ExitReply>, Status> {
        let (job, r) = admit(request)?;
        job.exited(r.task_index, r.exit_code, r.stderr_tail).map_err(status_of)?;
        Ok(Response::new(ExitReply {}))
    }

    async fn next_work(&self, request: Request<WorkRequest>) -> Result<Response<WorkReply>, Status> {
        let (job, r) = admit(request)?;
        let item = job.next_work(r.task_index, r.epoch).map_err(status_of)?;
        Ok(Response::new(WorkReply { item }))
    }

    async fn work_checkpointed(
        &self,
        request: Request<CheckpointedRequest>,
    ) -> Result<Response<CheckpointedReply>, Status> {
        let (job, r) = admit(request)?;
        job.work_checkpointed(r.epoch);
        Ok(Response::new(CheckpointedReply {}))
    }
}

/// The running rendezvous service. Dropping it stops the server.
pub struct RendezvousServer {
    address: SocketAddr,
    state: Arc<State>,
    registration_timeout: Duration,
    heartbeat_timeout: Duration,
    stop: Option<oneshot::Sender<()>>,
}

impl RendezvousServer {
    /// Binds the first free port of `config.ports` and serves on it. Must be called inside a
    /// tokio runtime.
    pub async fn start(config: ServerConfig) -> Result<Self> {
        let spec = ClusterSpec::new(config.num_workers, config.num_evaluators)?;
        let mut last_error = None;
        let mut bound = None;
        for port in config.ports.clone() {
            match TcpListener::bind((config.host, port)).await {
                Ok(listener) => {
                    bound = Some(listener);
                    break;
                }
                Err(e) => last_error = Some(e),
            }
        }
        let listener = bound.ok_or_else(|| ClusterError::Bind {
            host: config.host.to_string(),
            ports: format!("{}-{}", config.ports.start(), config.ports.end()),
            reason: last_error.map_or_else(|| "the range is empty".into(), |e| e.to_string()),
        })?;
        let address = listener.local_addr().map_err(|source| ClusterError::Io {
            what: "the rendezvous listener's address".into(),
            source,
        })?;
        let job = Arc::new(Job::new(spec, config.registration_timeout, config.heartbeat_timeout));
        let current = Generation {
            number: 0,
            credential: config.secret.control_credential(),
            tokens_key: config.secret.tokens_key(),
            job,
            earlier: Default::default(),
            tokens: None,
            sealed: SealedTokens::default(),
        };
        let state = Arc::new(State {
            current: Mutex::new(current),
            refused: Mutex::default(),
            turned_away: Arc::default(),
        });
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &config.tls {
            let identity = Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(identity))
                .map_err(|source| ClusterError::Tls { source })?;
        }
        let mut builder = builder
            .max_concurrent_streams(limits::MAX_STREAMS_PER_CONNECTION)
            .http2_max_header_list_size(limits::MAX_HEADER_BYTES)
            .http2_keepalive_interval(Some(limits::KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(limits::KEEPALIVE_TIMEOUT));
        let (stop, stopped) = oneshot::channel::<()>();
        let service = tonic::service::interceptor::InterceptedService::new(
            GrpcServer::new(Service).max_decoding_message_size(limits::MAX_MESSAGE_BYTES),
            Gate(state.clone()),
        );
        let incoming = tonic::transport::server::TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(limits::TCP_KEEPALIVE));
        let incoming = limits::Limited::new(incoming, config.max_connections, state.turned_away.clone());
        tokio::spawn(async move {
            let _ = builder
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(RendezvousServer {
            address,
            state,
            registration_timeout: config.registration_timeout,
            heartbeat_timeout: config.heartbeat_timeout,
            stop: Some(stop),
        })
    }

    /// The address the tasks connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The latest calls refused (at most [`REFUSED_KEPT`]), as `peer: reason`, oldest first.
    pub fn refused(&self) -> Vec<String> {
        lock(&self.state.refused).recent.iter().cloned().collect()
    }

    /// How many calls were refused in all.
    pub fn refused_total(&self) -> u64 {
        lock(&self.state.refused).total
    }

    /// How many connections were closed at once because `max_connections` were open.
    pub fn connections_turned_away(&self) -> u64 {
        self.state.turned_away.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The current generation's shared state: events, barriers, the work queue, the abort
    /// switch.
    pub fn job(&self) -> Arc<Job> {
        lock(&self.state.current).job.clone()
    }

    /// The number of the generation being served (0 for the first).
    pub fn generation(&self) -> u64 {
        lock(&self.state.current).number
    }

    /// The generation being served and its job, read together.
    pub fn current(&self) -> (u64, Arc<Job>) {
        let current = lock(&self.state.current);
        (current.number, current.job.clone())
    }

    /// Starts the next generation of the job: `num_workers` training tasks and
    /// `num_evaluators` evaluators must register anew, with `secret`, within the registration
    /// time-out from now. The previous generation is aborted (if it was not already), its
    /// callers are refused from now on, and its work queue carries over, each task being
    /// handed again what it took before ([`crate::job::WorkQueue::restarted`]). Returns the
    /// new generation's number.
    pub fn new_generation(&self, secret: JobSecret, num_workers: u32, num_evaluators: u32) -> Result<u64> {
        let spec = ClusterSpec::new(num_workers, num_evaluators)?;
        let job = Arc::new(Job::new(spec, self.registration_timeout, self.heartbeat_timeout));
        let mut current = lock(&self.state.current);
        let number = current.number + 1;
        // Aborted first, so a stale call for work meanwhile is told so rather than that there
        // is no queue.
        current.job.abort(&format!("superseded by generation {number}"));
        if let Some(queue) = current.job.take_work() {
            // Only training tasks (indexes below num_workers) take work: what a task from
            // there on took goes back to the front of the queue, even if an evaluator now
            // has its index.
            job.resume_work(queue.restarted(num_workers));
        }
        let old = std::mem::replace(&mut current.credential, secret.control_credential());
        current.tokens_key = secret.tokens_key();
        // The tokens carry over, sealed anew: the old generation's key opens nothing now.
        current.reseal()?;
        if current.earlier.len() == EARLIER_KEPT {
            current.earlier.pop_front();
        }
        let stale = current.number;
        current.earlier.push_back((stale, old));
        current.number = number;
        current.job = job;
        Ok(number)
    }

    /// Hands `tokens` (Hadoop delegation tokens in Hadoop's token storage format) to the tasks
    /// from now on, in place of any handed out before: tasks registering get them with the
    /// spec, running tasks with their next heartbeat. Returns their version (1, 2, ...).
    pub fn set_tokens(&self, tokens: Vec<u8>) -> Result<u64> {
        let mut current = lock(&self.state.current);
        let version = current.tokens.as_ref().map_or(0, |t| t.version) + 1;
        current.tokens = Some(Tokens { version, plain: tokens });
        current.reseal()?;
        Ok(version)
    }

    /// Waits until every task registered, or fails when the registration time-out passes,
    /// naming the missing tasks.
    pub async fn wait_ready(&self) -> Result<ClusterSpec> {
        self.job().wait_ready().await
    }
}

impl Drop for RendezvousServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
