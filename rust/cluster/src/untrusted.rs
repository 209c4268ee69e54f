//! One routine that pushes arbitrary bytes through the control plane's request handlers, as
//! the rendezvous service runs them after a call passed its secret check: the bytes are cut
//! into protobuf messages of every request type, decoded, and handed to the service's own
//! handlers over a live [`Job`]. It is shared by the fuzz target (`rust/cluster/fuzz`) and the
//! tests, so both exercise the same code. Any panic is a bug.

use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tonic::Request;

use crate::job::Job;
use crate::rendezvous::proto::rendezvous_server::Rendezvous;
use crate::rendezvous::proto::{
    BarrierRequest, CheckpointedRequest, ExitRequest, HeartbeatRequest, RegisterRequest, ReportRequest,
    WorkRequest,
};
use crate::rendezvous::{ForTask, Service, TOKEN_HEADER};
use crate::spec::ClusterSpec;

/// Reads `data` as a sequence of `[kind: u8][length: u16 LE][message]` chunks, decodes each
/// message as the request type `(kind mod 128) mod 7` picks and hands it to the service's handler, over a
/// job of three workers and an evaluator with a work queue, draining its events after each.
/// A `kind` of 128 or more makes the call carry its task's token (once that task registered).
/// Returns how many messages decoded.
pub fn exercise(data: &[u8]) -> usize {
    let Ok(spec) = ClusterSpec::new(3, 1) else { return 0 };
    let job = Arc::new(Job::new(spec, Duration::from_millis(1), Duration::from_secs(60)));
    job.set_work(vec![("hdfs://nn/a".into(), 30), ("hdfs://nn/b".into(), 10)]);
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_time().build() else { return 0 };
    let mut decoded = 0;
    let mut rest = data;
    while rest.len() >= 3 {
        let kind = rest[0];
        let end = (3 + usize::from(u16::from_le_bytes([rest[1], rest[2]]))).min(rest.len());
        let body = &rest[3..end];
        rest = &rest[end..];
        let token = kind >= 128;
        let handled = match (kind & 0x7f) % 7 {
            0 => RegisterRequest::decode(body).ok().map(|m| {
                let mut request = Request::new(m);
                request.extensions_mut().insert(job.clone());
                now(&runtime, Service.register(request));
            }),
            1 => HeartbeatRequest::decode(body).ok().map(|m| {
                now(&runtime, Service.heartbeat(call(&job, m, token)));
            }),
            2 => BarrierRequest::decode(body).ok().map(|m| {
                now(&runtime, Service.barrier(call(&job, m, token)));
            }),
            3 => ReportRequest::decode(body).ok().map(|m| {
                now(&runtime, Service.report(call(&job, m, token)));
            }),
            4 => ExitRequest::decode(body).ok().map(|m| {
                now(&runtime, Service.exit(call(&job, m, token)));
            }),
            5 => WorkRequest::decode(body).ok().map(|m| {
                now(&runtime, Service.next_work(call(&job, m, token)));
            }),
            _ => CheckpointedRequest::decode(body).ok().map(|m| {
                now(&runtime, Service.work_checkpointed(call(&job, m, token)));
            }),
        };
        decoded += usize::from(handled.is_some());
        let _ = runtime.block_on(job.events(Duration::ZERO));
    }
    decoded
}

/// `message` as a call that passed the secret check, carrying its task's token if asked to
/// and the task has one.
fn call<T: ForTask>(job: &Arc<Job>, message: T, token: bool) -> Request<T> {
    let task_token = job.token(message.task_index()).filter(|_| token);
    let mut request = Request::new(message);
    request.extensions_mut().insert(job.clone());
    if let Some(value) = task_token.and_then(|t| t.parse().ok()) {
        request.metadata_mut().insert(TOKEN_HEADER, value);
    }
    request
}

/// Polls `future` once on `runtime`: a wait must not hold a fuzz run.
fn now<T>(runtime: &tokio::runtime::Runtime, future: impl std::future::Future<Output = T>) -> Option<T> {
    runtime.block_on(async { tokio::time::timeout(Duration::ZERO, future).await.ok() })
}
