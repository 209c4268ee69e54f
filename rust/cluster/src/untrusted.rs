//! One routine that pushes arbitrary bytes through the control plane's message handling, as
//! the rendezvous service does after a call passed its secret check: the bytes are cut into
//! protobuf messages of every request type, decoded, and applied to a live [`Job`]. It is
//! shared by the fuzz target (`rust/cluster/fuzz`) and the tests, so both exercise the same
//! code. Any panic is a bug.

use std::time::Duration;

use prost::Message;

use crate::job::{Job, Stream};
use crate::rendezvous::proto::{
    BarrierRequest, ExitRequest, HeartbeatRequest, RegisterRequest, ReportRequest, WorkRequest,
};
use crate::rendezvous::registration_of;
use crate::spec::ClusterSpec;

/// Reads `data` as a sequence of `[kind: u8][length: u16 LE][message]` chunks, decodes each
/// message as the request type `kind` picks and hands it to a job of three workers and an
/// evaluator with a work queue, draining its events after each. Returns how many messages
/// decoded.
pub fn exercise(data: &[u8]) -> usize {
    let Ok(spec) = ClusterSpec::new(3, 1) else { return 0 };
    let job = Job::new(spec, Duration::from_millis(1), Duration::from_secs(60));
    job.set_work(vec![("hdfs://nn/a".into(), 30), ("hdfs://nn/b".into(), 10)]);
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_time().build() else { return 0 };
    let mut decoded = 0;
    let mut rest = data;
    while rest.len() >= 3 {
        let kind = rest[0];
        let end = (3 + usize::from(u16::from_le_bytes([rest[1], rest[2]]))).min(rest.len());
        let body = &rest[3..end];
        rest = &rest[end..];
        let handled = match kind % 6 {
            0 => RegisterRequest::decode(body).ok().map(|r| {
                if let Ok(registration) = registration_of(r) {
                    now(&runtime, job.register(registration));
                }
            }),
            1 => HeartbeatRequest::decode(body).ok().map(|r| {
                let lines = r
                    .lines
                    .into_iter()
                    .map(|l| (if l.stream == 2 { Stream::Stderr } else { Stream::Stdout }, l.text))
                    .collect();
                let _ = job.heartbeat(r.task_index, lines);
                let _ = job.check_token(r.task_index, None);
            }),
            2 => BarrierRequest::decode(body).ok().map(|r| {
                let timeout = (r.timeout_ms > 0).then(|| Duration::from_millis(r.timeout_ms));
                now(&runtime, job.barrier(r.task_index, &r.name, timeout));
            }),
            3 => ReportRequest::decode(body).ok().map(|r| {
                let _ = job.report(r.task_index, r.step, r.metrics.into_iter().collect());
            }),
            4 => ExitRequest::decode(body).ok().map(|r| {
                let _ = job.exited(r.task_index, r.exit_code, r.stderr_tail);
            }),
            _ => WorkRequest::decode(body).ok().map(|r| {
                let _ = job.next_work(r.task_index, r.epoch);
            }),
        };
        decoded += usize::from(handled.is_some());
        let _ = runtime.block_on(job.events(Duration::ZERO));
    }
    decoded
}

/// Polls `future` once on `runtime`: a wait must not hold a fuzz run.
fn now<T>(runtime: &tokio::runtime::Runtime, future: impl std::future::Future<Output = T>) -> Option<T> {
    runtime.block_on(async { tokio::time::timeout(Duration::ZERO, future).await.ok() })
}
