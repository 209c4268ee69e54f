//! The rendezvous service under hostile input, over real sockets on 127.0.0.1: the secret is
//! checked before a call's body is decoded, oversized messages are refused, and connections
//! beyond the cap are closed while the tasks are still served. (The driver's memory under a
//! flood of calls and idle connections is measured from outside its process, in
//! `tests/test_control_plane_limits.py`.)

use std::net::TcpStream;
use std::time::{Duration, Instant};

use sparktrain_cluster::limits::MAX_MESSAGE_BYTES;
use sparktrain_cluster::{
    ClusterError, JobSecret, Registration, RendezvousServer, ServerConfig, Stream, TaskClient,
};

fn config(secret: &JobSecret, max_connections: usize) -> ServerConfig {
    ServerConfig {
        host: "127.0.0.1".parse().unwrap(),
        ports: 0..=0,
        secret: secret.clone(),
        num_workers: 1,
        num_evaluators: 0,
        registration_timeout: Duration::from_secs(30),
        heartbeat_timeout: Duration::from_secs(30),
        tls: None,
        max_connections,
    }
}

fn registration() -> Registration {
    Registration {
        task_index: 0,
        attempt: 0,
        host: "127.0.0.1".into(),
        pid: 1,
        executor_id: "0".into(),
        data_port: 7000,
        tf_port: 8000,
        gpus: vec![],
    }
}

/// Heartbeat lines of about `bytes` in all.
fn lines(bytes: usize) -> Vec<(Stream, String)> {
    let line = "x".repeat(8000);
    (0..bytes / 8000).map(|_| (Stream::Stdout, line.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_is_checked_before_the_body_is_decoded() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 64)).await.unwrap();
    let address = server.address().to_string();
    let oversized = lines(2 * MAX_MESSAGE_BYTES);

    // A stranger's oversized call is refused for its secret: its body was never decoded.
    let mut stranger =
        TaskClient::connect(&address, &JobSecret::generate().unwrap(), Duration::from_secs(5)).await.unwrap();
    let err = stranger.heartbeat(0, 0, oversized.clone(), Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(err, ClusterError::Unauthenticated { .. }), "{err}");

    // The job's own oversized call is decoded, and refused for its size.
    let mut task = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
    let err = task.heartbeat(0, 0, oversized, Duration::from_secs(5)).await.unwrap_err();
    assert!(
        matches!(&err, ClusterError::Remote { code, message, .. }
            if (code == "OutOfRange" || code == "ResourceExhausted") && message.contains("message length too large")),
        "{err}"
    );
    // Once the task registered, a heartbeat within the cap goes through.
    task.register(&registration(), Duration::from_secs(5)).await.unwrap();
    assert_eq!(task.heartbeat(0, 0, lines(768 << 10), Duration::from_secs(5)).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_closed_and_the_tasks_are_still_served() {
    const CAP: usize = 64;
    const IDLE: usize = 400;
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, CAP)).await.unwrap();
    let address = server.address().to_string();
    let idle: Vec<TcpStream> = (0..IDLE).map(|_| TcpStream::connect(&address).unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.connections_turned_away() < (IDLE - CAP) as u64 {
        assert!(Instant::now() < deadline, "only {} turned away", server.connections_turned_away());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(idle);
    // Once the idle ones are gone, a task registers as usual.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut task = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
        match task.register(&registration(), Duration::from_secs(5)).await {
            Ok(reply) => {
                assert_eq!(reply.tasks.len(), 1);
                break;
            }
            // The server may not have seen the idle connections close yet.
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying after {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the task was not served: {e}"),
        }
    }
}
