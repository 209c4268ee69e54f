//! The tasks' and trainers' side of the control plane: connect (retrying until a time-out),
//! register and get the cluster spec, heart-beat, meet at barriers, take input items from the
//! driver's work queue, report metrics and exits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use crate::error::{ClusterError, Result};
use crate::job::Stream;
use crate::rendezvous::proto::rendezvous_client::RendezvousClient;
use crate::rendezvous::proto::{
    BarrierRequest, CheckpointedRequest, ExitRequest, HeartbeatRequest, LogLine, RegisterReply,
    RegisterRequest, ReportRequest, WorkRequest,
};
use crate::rendezvous::{CREDENTIAL_HEADER, TOKEN_HEADER};
use crate::secret::JobSecret;
use crate::spec::Registration;
use crate::tokens::{self, TokensKey};

/// How a task checks the driver's TLS certificate.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// The CA (or the self-signed certificate itself) that signed the driver's certificate, as PEM.
    pub ca_pem: String,
    /// The name the certificate must carry: the driver's host.
    pub domain: String,
}

/// A connection to the driver's rendezvous service. Cloning is cheap and shares the connection.
#[derive(Clone)]
pub struct TaskClient {
    address: String,
    /// The job's control credential (never the secret itself).
    credential: String,
    /// The token of the task this client acts for, once known; shared by its clones.
    token: Arc<Mutex<Option<String>>>,
    /// The key that opens the driver's delegation tokens.
    tokens_key: TokensKey,
    /// The delegation tokens received: the latest version, and the bytes not yet taken.
    tokens: Arc<Mutex<(u64, Option<Vec<u8>>)>>,
    client: RendezvousClient<Channel>,
}

impl TaskClient {
    /// Connects to `address` (`host:port`), retrying until `timeout` has passed; the error
    /// names the address that did not answer.
    pub async fn connect(address: &str, secret: &JobSecret, timeout: Duration) -> Result<Self> {
        Self::connect_with(address, secret, timeout, None).await
    }

    /// [`TaskClient::connect`], over TLS when `tls` is given.
    pub async fn connect_with(
        address: &str,
        secret: &JobSecret,
        timeout: Duration,
        tls: Option<&ClientTls>,
    ) -> Result<Self> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| ClusterError::InvalidArgument(format!("bad driver address {address}: {e}")))?
            .connect_timeout(Duration::from_secs(2))
            // A driver that vanishes without closing the connection (its host gone) would
            // otherwise leave a call without a deadline, such as a barrier, waiting for ever.
            .http2_keep_alive_interval(crate::limits::KEEPALIVE_INTERVAL)
            .keep_alive_timeout(crate::limits::KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if let Some(tls) = tls {
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                .domain_name(tls.domain.clone());
            endpoint = endpoint.tls_config(config).map_err(|source| ClusterError::Tls { source })?;
        }
        let start = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            match endpoint.connect().await {
                Ok(channel) => {
                    return Ok(TaskClient {
                        address: address.to_string(),
                        credential: secret.control_credential(),
                        token: Arc::default(),
                        tokens_key: secret.tokens_key(),
                        tokens: Arc::default(),
                        client: RendezvousClient::new(channel),
                    });
                }
                Err(e) if start.elapsed() >= timeout => {
                    return Err(ClusterError::Unreachable {
                        address: address.to_string(),
                        waited: start.elapsed(),
                        reason: e.to_string(),
                    });
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    fn request<T>(&self, message: T, timeout: Option<Duration>) -> Result<Request<T>> {
        let mut request = Request::new(message);
        let credential = self.credential.parse().map_err(|_| ClusterError::Secret("not ASCII".into()))?;
        request.metadata_mut().insert(CREDENTIAL_HEADER, credential);
        if let Some(token) = self.token() {
            let token =
                token.parse().map_err(|_| ClusterError::Secret("a task token that is not ASCII".into()))?;
            request.metadata_mut().insert(TOKEN_HEADER, token);
        }
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        Ok(request)
    }

    fn error_of(&self, status: Status) -> ClusterError {
        let message = status.message();
        match status.code() {
            // A wrong secret, or a call for a task without its token.
            Code::Unauthenticated | Code::PermissionDenied => {
                ClusterError::Unauthenticated { address: self.address.clone(), reason: message.to_string() }
            }
            Code::Aborted => ClusterError::Aborted(
                message.strip_prefix("the job was aborted: ").unwrap_or(message).to_string(),
            ),
            code => ClusterError::Remote {
                address: self.address.clone(),
                code: format!("{code:?}"),
                message: message.to_string(),
            },
        }
    }

    /// The token of the task this client acts for (set by [`TaskClient::register`]).
    pub fn token(&self) -> Option<String> {
        self.token.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Acts for the task whose registration returned `token` (a trainer gets it from its
    /// task); an empty token clears it.
    pub fn use_token(&self, token: &str) {
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) =
            (!token.is_empty()).then(|| token.to_string());
    }

    /// The driver's delegation tokens received since the last call (Hadoop's token storage
    /// format), if newer ones came; each version is returned once.
    pub fn take_tokens(&self) -> Option<Vec<u8>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner()).1.take()
    }

    /// Keeps `sealed` tokens of `version` when they are newer than those held.
    fn receive_tokens(&self, version: u64, sealed: &[u8]) -> Result<()> {
        let mut held = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if sealed.is_empty() || version <= held.0 {
            return Ok(());
        }
        *held = (version, Some(tokens::open(&self.tokens_key, version, sealed)?));
        Ok(())
    }

    /// Registers this task and waits for the others; `timeout` bounds the whole wait (the
    /// driver's own registration time-out usually answers first, naming the missing tasks).
    pub async fn register(
        &mut self,
        registration: &Registration,
        timeout: Duration,
    ) -> Result<RegisterReply> {
        let request = self.request(
            RegisterRequest {
                task_index: registration.task_index,
                attempt: registration.attempt,
                host: registration.host.clone(),
                pid: registration.pid,
                executor_id: registration.executor_id.clone(),
                data_port: registration.data_port.into(),
                tf_port: registration.tf_port.into(),
                gpus: registration.gpus.clone(),
            },
            Some(timeout),
        )?;
        match self.client.register(request).await {
            Ok(reply) => {
                let mut reply = reply.into_inner();
                self.use_token(&reply.token);
                self.receive_tokens(reply.tokens_version, &std::mem::take(&mut reply.tokens))?;
                Ok(reply)
            }
            Err(status) => Err(self.error_of(status)),
        }
    }

    /// Sends one heartbeat with the trainer's new output lines; returns the driver's abort
    /// reason when the trainer must stop.
    pub async fn heartbeat(
        &mut self,
        task_index: u32,
        attempt: u32,
        lines: Vec<(Stream, String)>,
        timeout: Duration,
    ) -> Result<Option<String>> {
        let lines = lines
            .into_iter()
            .map(|(stream, text)| LogLine { stream: if stream == Stream::Stderr { 2 } else { 1 }, text })
            .collect();
        let tokens_version = self.tokens.lock().unwrap_or_else(|p| p.into_inner()).0;
        let request =
            self.request(HeartbeatRequest { task_index, attempt, lines, tokens_version }, Some(timeout))?;
        let reply = self.client.heartbeat(request).await.map_err(|s| self.error_of(s))?.into_inner();
        self.receive_tokens(reply.tokens_version, &reply.tokens)?;
        Ok(reply.abort.then_some(reply.reason))
    }

    /// Waits until every task has reached the barrier `name`. Without a time-out the wait
    /// still ends when the job is aborted.
    pub async fn barrier(&mut self, task_index: u32, name: &str, timeout: Option<Duration>) -> Result<()> {
        let timeout_ms = timeout.map_or(0, |t| t.as_millis().clamp(1, u64::MAX.into()) as u64);
        // The driver answers a time-out itself, naming who is missing; the call's own deadline
        // only guards against a driver that stopped answering.
        let request = self.request(
            BarrierRequest { task_index, name: name.to_string(), timeout_ms },
            timeout.map(|t| t + Duration::from_secs(10)),
        )?;
        let reply = self.client.barrier(request).await.map_err(|s| self.error_of(s))?.into_inner();
        if reply.missing.is_empty() {
            return Ok(());
        }
        Err(ClusterError::BarrierTimeout {
            name: name.to_string(),
            missing: reply.missing,
            total: reply.total,
        })
    }

    /// Sends metrics.
    pub async fn report(
        &mut self,
        task_index: u32,
        step: Option<i64>,
        metrics: Vec<(String, f64)>,
        timeout: Duration,
    ) -> Result<()> {
        let request = self.request(
            ReportRequest { task_index, step, metrics: metrics.into_iter().collect() },
            Some(timeout),
        )?;
        self.client.report(request).await.map_err(|s| self.error_of(s))?;
        Ok(())
    }

    /// Takes the next item of `epoch` from the driver's work queue (dynamic sharding); None
    /// once every item of that epoch has been handed out, to this task or another. The driver
    /// refuses the call when no work was set or the job was aborted.
    pub async fn next_work(
        &mut self,
        task_index: u32,
        epoch: u64,
        timeout: Duration,
    ) -> Result<Option<String>> {
        let request = self.request(WorkRequest { task_index, epoch }, Some(timeout))?;
        let reply = self.client.next_work(request).await.map_err(|s| self.error_of(s))?.into_inner();
        Ok(reply.item)
    }

    /// Tells the driver's work queue that the chief committed a checkpoint made during
    /// `epoch`, so that it forgets what earlier epochs handed out.
    pub async fn work_checkpointed(&mut self, task_index: u32, epoch: u64, timeout: Duration) -> Result<()> {
        let request = self.request(CheckpointedRequest { task_index, epoch }, Some(timeout))?;
        self.client.work_checkpointed(request).await.map_err(|s| self.error_of(s))?;
        Ok(())
    }

    /// Tells the driver how the trainer ended: its exit code (`-N` for signal N) and the last
    /// lines of its stderr.
    pub async fn exit(
        &mut self,
        task_index: u32,
        attempt: u32,
        exit_code: i32,
        stderr_tail: String,
        timeout: Duration,
    ) -> Result<()> {
        let request =
            self.request(ExitRequest { task_index, attempt, exit_code, stderr_tail }, Some(timeout))?;
        self.client.exit(request).await.map_err(|s| self.error_of(s))?;
        Ok(())
    }
}
