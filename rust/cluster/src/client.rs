//! The task's side of the rendezvous: connect (retrying until a time-out), register, and get
//! the cluster spec.

use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request};

use crate::error::{ClusterError, Result};
use crate::rendezvous::SECRET_HEADER;
use crate::rendezvous::proto::rendezvous_client::RendezvousClient;
use crate::rendezvous::proto::{RegisterReply, RegisterRequest};
use crate::secret::JobSecret;
use crate::spec::Registration;

/// A connection to the driver's rendezvous service.
pub struct TaskClient {
    address: String,
    secret: String,
    client: RendezvousClient<Channel>,
}

impl TaskClient {
    /// Connects to `address` (`host:port`), retrying until `timeout` has passed; the error
    /// names the address that did not answer.
    pub async fn connect(address: &str, secret: &JobSecret, timeout: Duration) -> Result<Self> {
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| ClusterError::InvalidArgument(format!("bad driver address {address}: {e}")))?
            .connect_timeout(Duration::from_secs(2));
        let start = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            match endpoint.connect().await {
                Ok(channel) => {
                    return Ok(TaskClient {
                        address: address.to_string(),
                        secret: secret.to_hex(),
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

    /// Registers this task and waits for the others; `timeout` bounds the whole wait (the
    /// driver's own registration time-out usually answers first, naming the missing tasks).
    pub async fn register(
        &mut self,
        registration: &Registration,
        timeout: Duration,
    ) -> Result<RegisterReply> {
        let mut request = Request::new(RegisterRequest {
            task_index: registration.task_index,
            attempt: registration.attempt,
            host: registration.host.clone(),
            pid: registration.pid,
            executor_id: registration.executor_id.clone(),
            data_port: registration.data_port.into(),
            tf_port: registration.tf_port.into(),
            gpus: registration.gpus.clone(),
        });
        let secret = self.secret.parse().map_err(|_| ClusterError::Secret("not ASCII".into()))?;
        request.metadata_mut().insert(SECRET_HEADER, secret);
        request.set_timeout(timeout);
        match self.client.register(request).await {
            Ok(reply) => Ok(reply.into_inner()),
            Err(status) => Err(match status.code() {
                Code::Unauthenticated => ClusterError::Unauthenticated {
                    address: self.address.clone(),
                    reason: status.message().to_string(),
                },
                _ => ClusterError::Remote {
                    address: self.address.clone(),
                    code: format!("{:?}", status.code()),
                    message: status.message().to_string(),
                },
            }),
        }
    }
}
