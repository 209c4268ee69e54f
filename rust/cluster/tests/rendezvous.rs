//! The rendezvous over real sockets on 127.0.0.1: tasks register from separate tasks in any
//! order and all get the same spec; a wrong secret is refused and recorded; a missing task makes
//! both sides fail naming it; the work queue hands every item of an epoch to exactly one task.

use std::time::Duration;

use serde_json::Value;
use sparktrain_cluster::{
    ClientTls, ClusterError, Event, JobSecret, REFUSED_KEPT, Registration, RendezvousServer, ServerConfig,
    ServerTls, Stream, TaskClient,
};

fn config(secret: &JobSecret, workers: u32, evaluators: u32, timeout: Duration) -> ServerConfig {
    ServerConfig {
        host: "127.0.0.1".parse().unwrap(),
        ports: 0..=0,
        secret: secret.clone(),
        num_workers: workers,
        num_evaluators: evaluators,
        registration_timeout: timeout,
        heartbeat_timeout: Duration::from_secs(10),
        tls: None,
        max_connections: sparktrain_cluster::limits::MAX_CONNECTIONS,
    }
}

fn registration(task_index: u32) -> Registration {
    Registration {
        task_index,
        attempt: 0,
        host: "127.0.0.1".into(),
        pid: 1000 + task_index,
        executor_id: format!("{task_index}"),
        data_port: 7000 + task_index as u16,
        tf_port: 8000 + task_index as u16,
        gpus: vec![],
    }
}

/// Clients for tasks `0..n`, registered together (a registration waits for every task), each
/// holding its task's token.
async fn registered(address: &str, secret: &JobSecret, n: u32) -> Vec<TaskClient> {
    let mut handles = Vec::new();
    for task in 0..n {
        let (address, secret) = (address.to_string(), secret.clone());
        handles.push(tokio::spawn(async move {
            let mut client = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
            client.register(&registration(task), Duration::from_secs(10)).await.unwrap();
            client
        }));
    }
    let mut clients = Vec::new();
    for h in handles {
        clients.push(h.await.unwrap());
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_tasks_get_the_same_spec_and_their_own_tf_config() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 2, 1, Duration::from_secs(10))).await.unwrap();
    let address = server.address().to_string();
    let mut handles = Vec::new();
    for task in [2, 0, 1] {
        let (address, secret) = (address.clone(), secret.clone());
        handles.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30 * u64::from(task))).await;
            let mut client = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
            (task, client.register(&registration(task), Duration::from_secs(10)).await.unwrap())
        }));
    }
    let mut replies = Vec::new();
    for h in handles {
        replies.push(h.await.unwrap());
    }
    let spec = server.wait_ready().await.unwrap();
    assert!(spec.is_complete());
    for (task, reply) in &replies {
        assert_eq!(reply.tasks, replies[0].1.tasks, "task {task} sees another spec");
        let roles: Vec<(&str, u32, u32)> =
            reply.tasks.iter().map(|t| (t.role.as_str(), t.index, t.tf_port)).collect();
        assert_eq!(roles, [("chief", 0, 8000), ("worker", 0, 8001), ("evaluator", 0, 8002)]);
        let config: Value = serde_json::from_str(&reply.tf_config).unwrap();
        let expected = ["chief", "worker", "evaluator"][*task as usize];
        assert_eq!(config["task"]["type"], expected);
        assert_eq!(config["cluster"]["worker"][0], "127.0.0.1:8001");
    }
    assert!(server.refused().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_refused_and_recorded() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 1, 0, Duration::from_secs(5))).await.unwrap();
    let address = server.address().to_string();
    let intruder = JobSecret::generate().unwrap();
    let mut client = TaskClient::connect(&address, &intruder, Duration::from_secs(5)).await.unwrap();
    let err = client.register(&registration(0), Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(err, ClusterError::Unauthenticated { .. }), "{err}");
    let refused = server.refused();
    assert_eq!(refused.len(), 1);
    assert!(refused[0].contains("127.0.0.1") && refused[0].contains("wrong job secret"), "{refused:?}");
    // The slot stays free for the real task.
    let mut client = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
    client.register(&registration(0), Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refused_calls_is_counted_but_only_the_latest_are_kept() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 1, 0, Duration::from_secs(5))).await.unwrap();
    let intruder = JobSecret::generate().unwrap();
    let mut client =
        TaskClient::connect(&server.address().to_string(), &intruder, Duration::from_secs(5)).await.unwrap();
    let calls = REFUSED_KEPT as u64 + 50;
    for _ in 0..calls {
        client.register(&registration(0), Duration::from_secs(5)).await.unwrap_err();
    }
    assert_eq!(server.refused_total(), calls);
    assert_eq!(server.refused().len(), REFUSED_KEPT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_task_fails_both_sides_naming_it() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 3, 0, Duration::from_millis(600))).await.unwrap();
    let address = server.address().to_string();
    let mut waiting = Vec::new();
    for task in [0, 1] {
        let (address, secret) = (address.clone(), secret.clone());
        waiting.push(tokio::spawn(async move {
            let mut client = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
            client.register(&registration(task), Duration::from_secs(10)).await
        }));
    }
    let start = std::time::Instant::now();
    let err = server.wait_ready().await.unwrap_err();
    assert_eq!(err.to_string(), "1 of 3 tasks never registered: [2]");
    for w in waiting {
        let err = w.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("1 of 3 tasks never registered: [2]"), "{err}");
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_driver_is_named() {
    let secret = JobSecret::generate().unwrap();
    // A port that was free a moment ago: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let err = TaskClient::connect(&address, &secret, Duration::from_millis(300)).await.err().unwrap();
    assert!(matches!(&err, ClusterError::Unreachable { address: a, .. } if *a == address), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_rendezvous_tasks_meet_report_and_the_driver_sees_everything() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 2, 0, Duration::from_secs(5))).await.unwrap();
    let address = server.address().to_string();
    let mut clients = Vec::new();
    for task in [0, 1] {
        let (address, secret) = (address.clone(), secret.clone());
        clients.push(tokio::spawn(async move {
            let mut client = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
            client.register(&registration(task), Duration::from_secs(5)).await.unwrap();
            client
        }));
    }
    let mut c1 = clients.pop().unwrap().await.unwrap();
    let mut c0 = clients.pop().unwrap().await.unwrap();

    // The chief waits at the barrier until task 1 arrives.
    let chief = {
        let mut c0 = c0.clone();
        tokio::spawn(async move { c0.barrier(0, "exit", None).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!chief.is_finished());
    c1.report(1, Some(7), vec![("loss".into(), 0.5)], Duration::from_secs(5)).await.unwrap();
    let abort = c1.heartbeat(1, 0, vec![(Stream::Stdout, "step 7".into())], Duration::from_secs(5)).await;
    assert_eq!(abort.unwrap(), None);
    c1.barrier(1, "exit", Some(Duration::from_secs(5))).await.unwrap();
    chief.await.unwrap().unwrap();
    // A barrier that times out names the tasks that never came, as a typed error.
    let err = c1.barrier(1, "alone", Some(Duration::from_millis(50))).await.unwrap_err();
    assert!(
        matches!(&err, ClusterError::BarrierTimeout { name, missing, total: 2 } if name == "alone" && missing == &[0]),
        "{err}"
    );
    c1.exit(1, 0, 0, String::new(), Duration::from_secs(5)).await.unwrap();

    let events = server.job().events(Duration::from_secs(1)).await;
    assert!(events.contains(&Event::Ready));
    assert!(events.contains(&Event::Metrics {
        task_index: 1,
        step: Some(7),
        metrics: vec![("loss".into(), 0.5)]
    }));
    assert!(events.contains(&Event::Log { task_index: 1, stream: Stream::Stdout, text: "step 7".into() }));
    assert!(events.contains(&Event::Exited { task_index: 1, exit_code: 0, stderr_tail: String::new() }));

    // A failure elsewhere releases a waiting barrier and reaches heartbeats.
    let waiting = {
        let mut c0 = c0.clone();
        tokio::spawn(async move { c0.barrier(0, "never", Some(Duration::from_secs(30))).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.job().abort("task 1 (worker:0) exited with code 1");
    let err = waiting.await.unwrap().unwrap_err();
    assert!(matches!(&err, ClusterError::Aborted(r) if r == "task 1 (worker:0) exited with code 1"), "{err}");
    let abort = c0.heartbeat(0, 0, vec![], Duration::from_secs(5)).await.unwrap();
    assert_eq!(abort.as_deref(), Some("task 1 (worker:0) exited with code 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_tasks_register_and_a_plain_or_untrusting_client_gets_nowhere() {
    let issued = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert_pem = issued.cert.pem();
    let secret = JobSecret::generate().unwrap();
    let mut tls_config = config(&secret, 1, 0, Duration::from_secs(5));
    tls_config.tls =
        Some(ServerTls { cert_pem: cert_pem.clone(), key_pem: issued.signing_key.serialize_pem() });
    let server = RendezvousServer::start(tls_config).await.unwrap();
    let address = server.address().to_string();

    // A client that trusts another certificate cannot complete the handshake.
    let stranger = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let untrusting = ClientTls { ca_pem: stranger.cert.pem(), domain: "127.0.0.1".into() };
    let short = Duration::from_millis(500);
    let err = TaskClient::connect_with(&address, &secret, short, Some(&untrusting)).await.err().unwrap();
    assert!(matches!(err, ClusterError::Unreachable { .. }), "{err}");
    // Neither can a plain-text one.
    let mut plain = TaskClient::connect(&address, &secret, short).await.unwrap();
    assert!(plain.register(&registration(0), short).await.is_err());

    let trusting = ClientTls { ca_pem: cert_pem, domain: "127.0.0.1".into() };
    let mut client =
        TaskClient::connect_with(&address, &secret, Duration::from_secs(5), Some(&trusting)).await.unwrap();
    let reply = client.register(&registration(0), Duration::from_secs(5)).await.unwrap();
    assert_eq!(reply.tasks.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_queue_hands_every_item_of_an_epoch_to_one_task() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 2, 0, Duration::from_secs(5))).await.unwrap();
    let address = server.address().to_string();
    // A task calls only once it registered: a call for a task that has not is someone else's.
    let mut early = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
    let err = early.next_work(0, 0, Duration::from_secs(5)).await.unwrap_err();
    assert!(
        matches!(&err, ClusterError::Unauthenticated { reason, .. } if reason.contains("only after it registered")),
        "{err}"
    );
    let mut clients = registered(&address, &secret, 2).await;
    let tokens: Vec<String> = clients.iter().map(|c| c.token().unwrap()).collect();
    let err = clients[0].next_work(0, 0, Duration::from_secs(5)).await.unwrap_err();
    assert!(
        matches!(&err, ClusterError::Remote { code, message, .. }
            if code == "InvalidArgument" && message == "no work queue was set for this job"),
        "{err}"
    );

    let items: Vec<(String, u64)> =
        (0..200).map(|i| (format!("hdfs://nn/data/part-{i:05}.tfrecord"), 1000 + i % 5)).collect();
    let mut expected: Vec<String> = items.iter().map(|(url, _)| url.clone()).collect();
    expected.sort();
    server.job().set_work(items);

    for epoch in [0, 1] {
        let mut takers = Vec::new();
        for task in [0, 1] {
            let (address, secret, token) = (address.clone(), secret.clone(), tokens[task as usize].clone());
            takers.push(tokio::spawn(async move {
                let mut client =
                    TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
                client.use_token(&token);
                let mut taken = Vec::new();
                while let Some(item) = client.next_work(task, epoch, Duration::from_secs(5)).await.unwrap() {
                    taken.push(item);
                }
                taken
            }));
        }
        let mut all = Vec::new();
        for taker in takers {
            all.extend(taker.await.unwrap());
        }
        all.sort();
        assert_eq!(all, expected, "epoch {epoch}");
        assert_eq!(clients[0].next_work(0, epoch, Duration::from_secs(5)).await.unwrap(), None);
    }
    assert_eq!(server.job().work_taken().iter().sum::<u64>(), 400);

    let intruder = JobSecret::generate().unwrap();
    let mut stranger = TaskClient::connect(&address, &intruder, Duration::from_secs(5)).await.unwrap();
    let err = stranger.next_work(0, 2, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(err, ClusterError::Unauthenticated { .. }), "{err}");
    assert_eq!(server.refused().len(), 1);
    // The refused call took nothing: epoch 2 is whole.
    let mut count = 0;
    while clients[1].next_work(1, 2, Duration::from_secs(5)).await.unwrap().is_some() {
        count += 1;
    }
    assert_eq!(count, 200);

    server.job().abort("task 0 (chief:0) exited with code 1");
    let err = clients[0].next_work(0, 3, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(&err, ClusterError::Aborted(r) if r == "task 0 (chief:0) exited with code 1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_generation_refuses_the_old_one_and_keeps_the_work() {
    let first = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&first, 2, 0, Duration::from_secs(10))).await.unwrap();
    let address = server.address().to_string();
    server.job().set_work(vec![("a".into(), 2), ("b".into(), 1)]);
    let mut stale = registered(&address, &first, 2).await.remove(0);
    assert_eq!(stale.next_work(0, 0, Duration::from_secs(5)).await.unwrap().as_deref(), Some("a"));
    assert_eq!(server.generation(), 0);

    let second = JobSecret::generate().unwrap();
    assert_eq!(server.new_generation(second.clone(), 1, 0).unwrap(), 1);
    assert_eq!(server.generation(), 1);
    // A task of generation 0 is told to stop, and its refusal is recorded as stale.
    let err = stale.heartbeat(0, 0, vec![], Duration::from_secs(5)).await.unwrap_err();
    assert!(
        matches!(&err, ClusterError::Aborted(r) if r.contains("a task of generation 0, superseded by generation 1")),
        "{err}"
    );
    assert_eq!(server.refused_total(), 1);
    assert!(server.refused()[0].ends_with("a task of generation 0, superseded by generation 1"));

    // Generation 1 has its own size and registrations; task 0 is handed again what it took.
    let mut fresh = TaskClient::connect(&address, &second, Duration::from_secs(5)).await.unwrap();
    let reply = fresh.register(&registration(0), Duration::from_secs(5)).await.unwrap();
    assert_eq!(reply.tasks.len(), 1);
    assert_eq!(fresh.next_work(0, 0, Duration::from_secs(5)).await.unwrap().as_deref(), Some("a"));
    assert_eq!(fresh.next_work(0, 0, Duration::from_secs(5)).await.unwrap().as_deref(), Some("b"));
    assert_eq!(fresh.next_work(0, 0, Duration::from_secs(5)).await.unwrap(), None);

    // A stranger is still a stranger.
    let mut stranger =
        TaskClient::connect(&address, &JobSecret::generate().unwrap(), Duration::from_secs(5)).await.unwrap();
    let err = stranger.heartbeat(0, 0, vec![], Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(err, ClusterError::Unauthenticated { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_tasks_calls_need_its_token() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 1, 0, Duration::from_secs(10))).await.unwrap();
    let address = server.address().to_string();
    let mut task = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
    let reply = task.register(&registration(0), Duration::from_secs(5)).await.unwrap();
    assert_eq!(reply.token.len(), 32);
    assert_eq!(task.token().as_deref(), Some(reply.token.as_str()));
    assert_eq!(task.heartbeat(0, 0, vec![], Duration::from_secs(5)).await.unwrap(), None);

    // Another holder of the secret cannot act for task 0...
    let mut other = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
    for err in [
        other.heartbeat(0, 0, vec![], Duration::from_secs(5)).await.unwrap_err(),
        other.report(0, Some(1), vec![("loss".into(), 1.0)], Duration::from_secs(5)).await.unwrap_err(),
        other.exit(0, 0, 0, String::new(), Duration::from_secs(5)).await.unwrap_err(),
    ] {
        assert!(
            matches!(&err, ClusterError::Unauthenticated { reason, .. } if reason.contains("task 0's calls must carry the token")),
            "{err}"
        );
    }
    other.use_token("0123456789abcdef0123456789abcdef");
    assert!(other.heartbeat(0, 0, vec![], Duration::from_secs(5)).await.is_err());
    // ...unless its task hands it the token, as a task hands it to its trainer.
    other.use_token(&reply.token);
    assert_eq!(other.heartbeat(0, 0, vec![], Duration::from_secs(5)).await.unwrap(), None);
    // A second registration of the same task gets no token of its own.
    let mut thief = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
    assert!(thief.register(&registration(0), Duration::from_secs(5)).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_workers_files_go_to_the_remaining_workers_not_to_the_evaluator_at_its_index() {
    let first = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&first, 2, 1, Duration::from_secs(10))).await.unwrap();
    let address = server.address().to_string();
    server.job().set_work(vec![("a".into(), 3), ("b".into(), 2), ("c".into(), 1)]);
    let mut clients = registered(&address, &first, 3).await;
    assert_eq!(clients[1].next_work(1, 0, Duration::from_secs(5)).await.unwrap().as_deref(), Some("a"));

    // One worker and the evaluator come back: the evaluator now has task index 1.
    let second = JobSecret::generate().unwrap();
    server.new_generation(second.clone(), 1, 1).unwrap();
    let mut fresh = registered(&address, &second, 2).await;
    let mut taken = Vec::new();
    while let Some(item) = fresh[0].next_work(0, 0, Duration::from_secs(5)).await.unwrap() {
        taken.push(item);
    }
    assert_eq!(taken, ["a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_attempt_cannot_take_a_registered_tasks_token() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 1, 0, Duration::from_secs(10))).await.unwrap();
    let address = server.address().to_string();
    let mut task = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
    let token = task.register(&registration(0), Duration::from_secs(5)).await.unwrap().token;

    // Another holder of the secret claims to be Spark's next attempt of task 0.
    let mut thief = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
    let retry = Registration { attempt: 1, ..registration(0) };
    let stolen = thief.register(&retry, Duration::from_secs(5)).await;
    assert!(stolen.is_err(), "a second registration of task 0 was accepted: {stolen:?}");
    assert_eq!(thief.token(), None);
    // The real task goes on with its own token; the driver still holds that one.
    assert_eq!(task.heartbeat(0, 0, vec![], Duration::from_secs(5)).await.unwrap(), None);
    assert_eq!(server.job().token(0).as_deref(), Some(token.as_str()));
    assert!(thief.heartbeat(0, 1, vec![], Duration::from_secs(5)).await.is_err());
    let again = Registration { attempt: 2, ..registration(0) };
    assert!(thief.register(&again, Duration::from_secs(5)).await.is_err());
    // The driver hears of it once, as of a task Spark retried, and decides.
    let registered = server
        .job()
        .events(Duration::ZERO)
        .await
        .into_iter()
        .filter(|e| matches!(e, Event::Registered { task_index: 0, .. }))
        .count();
    assert_eq!(registered, 2);

    // Only the driver opens a new attempt: the next generation takes task 0 anew.
    let next = JobSecret::generate().unwrap();
    server.new_generation(next.clone(), 1, 0).unwrap();
    let mut retried = TaskClient::connect(&address, &next, Duration::from_secs(5)).await.unwrap();
    retried.register(&retry, Duration::from_secs(5)).await.unwrap();
    assert_eq!(retried.heartbeat(0, 1, vec![], Duration::from_secs(5)).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_registers_15_s_after_the_others_loses_no_one() {
    // The defaults of a job: 10 s without a heartbeat is a lost task; the registration window
    // is longer.
    let secret = JobSecret::generate().unwrap();
    let mut settings = config(&secret, 3, 0, Duration::from_secs(60));
    settings.heartbeat_timeout = Duration::from_secs(10);
    let server = RendezvousServer::start(settings).await.unwrap();
    let address = server.address().to_string();
    let job = server.job();
    // The driver watches the job all along, as the launcher does.
    let watcher = {
        let job = job.clone();
        tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let events = job.events(Duration::from_millis(500)).await;
                let done = events.iter().any(|e| matches!(e, Event::Log { text, .. } if text == "done"));
                seen.extend(events);
                if done {
                    return seen;
                }
            }
        })
    };
    let mut tasks = Vec::new();
    for task in 0..3u32 {
        let (address, secret) = (address.clone(), secret.clone());
        tasks.push(tokio::spawn(async move {
            if task == 2 {
                tokio::time::sleep(Duration::from_secs(15)).await;
            }
            let mut client = TaskClient::connect(&address, &secret, Duration::from_secs(5)).await.unwrap();
            client.register(&registration(task), Duration::from_secs(60)).await.unwrap();
            client
        }));
    }
    let mut clients = Vec::new();
    for task in tasks {
        clients.push(task.await.unwrap());
    }
    // Every task heart-beats once it has its spec; two more beats a second apart.
    for _ in 0..3 {
        for (task, client) in clients.iter_mut().enumerate() {
            let abort = client.heartbeat(task as u32, 0, vec![], Duration::from_secs(5)).await.unwrap();
            assert_eq!(abort, None, "task {task} was told to stop");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    clients[0].heartbeat(0, 0, vec![(Stream::Stdout, "done".into())], Duration::from_secs(5)).await.unwrap();
    let events = watcher.await.unwrap();
    let lost: Vec<&Event> = events.iter().filter(|e| matches!(e, Event::Lost { .. })).collect();
    assert!(lost.is_empty(), "{lost:?}");
    assert!(events.contains(&Event::Ready));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trainer_output_the_driver_does_not_take_is_bounded_and_counted() {
    use sparktrain_cluster::job::{EVENT_OVERHEAD_BYTES, MAX_QUEUED_OUTPUT_BYTES};
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 1, 0, Duration::from_secs(10))).await.unwrap();
    let address = server.address().to_string();
    let mut task = registered(&address, &secret, 1).await.remove(0);
    // A chatty trainer and a console that takes nothing: 64 MiB of lines in heartbeats of
    // 100 lines of 8000 bytes.
    let line = "x".repeat(8000);
    let (beats, per_beat) = (84usize, 100usize);
    for beat in 0..beats {
        let lines = (0..per_beat).map(|i| (Stream::Stdout, format!("{beat}:{i}:{line}"))).collect();
        task.heartbeat(0, 0, lines, Duration::from_secs(10)).await.unwrap();
    }
    let events = server.job().events(Duration::ZERO).await;
    let kept: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Log { text, .. } if text.ends_with(&line) => Some(text),
            _ => None,
        })
        .collect();
    let held: usize = kept.iter().map(|t| t.len() + EVENT_OVERHEAD_BYTES).sum();
    assert!(held <= MAX_QUEUED_OUTPUT_BYTES, "the driver held {} MiB of output", held >> 20);
    assert!(held > MAX_QUEUED_OUTPUT_BYTES - 10_000, "the queue kept only {held} bytes");
    // What was dropped is counted in a line of its own, and nothing is lost without a count.
    let notice = events
        .iter()
        .find_map(|e| match e {
            Event::Log { task_index: 0, text, .. } if text.contains("dropped") => Some(text.clone()),
            _ => None,
        })
        .expect("a notice of the dropped lines");
    let dropped = beats * per_beat - kept.len();
    assert!(notice.contains(&format!("{dropped} lines of stdout")), "{notice} ({dropped} dropped)");
    assert_eq!(server.job().output_dropped(), dropped as u64);
    // The queue takes lines again once the driver has taken it.
    task.heartbeat(0, 0, vec![(Stream::Stderr, "after".into())], Duration::from_secs(5)).await.unwrap();
    let events = server.job().events(Duration::ZERO).await;
    assert!(events.iter().any(|e| matches!(e, Event::Log { text, .. } if text == "after")), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegation_tokens_reach_tasks_at_registration_and_renewed_with_a_heartbeat_once_each() {
    let first = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&first, 2, 0, Duration::from_secs(10))).await.unwrap();
    let address = server.address().to_string();
    assert_eq!(server.set_tokens(b"tokens one".to_vec()).unwrap(), 1);
    let mut clients = registered(&address, &first, 2).await;
    for client in &clients {
        assert_eq!(client.take_tokens().as_deref(), Some(&b"tokens one"[..]));
        assert_eq!(client.take_tokens(), None, "each version is taken once");
    }
    // Nothing new: a heartbeat brings nothing.
    clients[0].heartbeat(0, 0, vec![], Duration::from_secs(5)).await.unwrap();
    assert_eq!(clients[0].take_tokens(), None);
    // Renewed on the driver: the next heartbeat brings them.
    assert_eq!(server.set_tokens(b"tokens two".to_vec()).unwrap(), 2);
    clients[1].heartbeat(1, 0, vec![], Duration::from_secs(5)).await.unwrap();
    assert_eq!(clients[1].take_tokens().as_deref(), Some(&b"tokens two"[..]));
    clients[1].heartbeat(1, 0, vec![], Duration::from_secs(5)).await.unwrap();
    assert_eq!(clients[1].take_tokens(), None);

    // A new generation: its tasks get the current tokens, sealed under its own key.
    let second = JobSecret::generate().unwrap();
    server.new_generation(second.clone(), 1, 0).unwrap();
    let mut fresh = TaskClient::connect(&address, &second, Duration::from_secs(5)).await.unwrap();
    let reply = fresh.register(&registration(0), Duration::from_secs(5)).await.unwrap();
    assert_eq!(reply.tokens_version, 2);
    assert!(reply.tokens.is_empty(), "the client keeps the opened tokens, not the sealed bytes");
    assert_eq!(fresh.take_tokens().as_deref(), Some(&b"tokens two"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_checkpoint_lets_the_work_queue_forget_earlier_epochs() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(config(&secret, 1, 0, Duration::from_secs(10))).await.unwrap();
    server.job().set_work(vec![("a".into(), 1)]);
    let mut chief = registered(&server.address().to_string(), &secret, 1).await.remove(0);
    for epoch in 0..5 {
        assert_eq!(chief.next_work(0, epoch, Duration::from_secs(5)).await.unwrap().as_deref(), Some("a"));
    }
    assert_eq!(server.job().work_epochs_kept(), [0, 1, 2, 3, 4]);
    chief.work_checkpointed(0, 3, Duration::from_secs(5)).await.unwrap();
    assert_eq!(server.job().work_epochs_kept(), [3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_certificate_is_pinned_under_its_own_name_whatever_the_address() {
    let secret = JobSecret::generate().unwrap();
    let (cert_pem, key_pem) = sparktrain_cluster::tls::self_signed().unwrap();
    let mut config = config(&secret, 1, 0, Duration::from_secs(10));
    config.tls = Some(ServerTls { cert_pem: cert_pem.clone(), key_pem });
    let server = RendezvousServer::start(config).await.unwrap();
    // The address names 127.0.0.1, which the certificate does not: the pinned name is checked.
    let address = server.address().to_string();
    let pinned = ClientTls { ca_pem: cert_pem, domain: sparktrain_cluster::tls::PINNED_NAME.into() };
    let mut client =
        TaskClient::connect_with(&address, &secret, Duration::from_secs(5), Some(&pinned)).await.unwrap();
    client.register(&registration(0), Duration::from_secs(5)).await.unwrap();
    // Another job's certificate, or the address as the name, is refused.
    let (other, _) = sparktrain_cluster::tls::self_signed().unwrap();
    for tls in [
        ClientTls { ca_pem: other, domain: sparktrain_cluster::tls::PINNED_NAME.into() },
        ClientTls { ca_pem: pinned.ca_pem.clone(), domain: "127.0.0.1".into() },
    ] {
        let refused =
            match TaskClient::connect_with(&address, &secret, Duration::from_millis(300), Some(&tls)).await {
                Err(e) => e.to_string(),
                Ok(mut c) => c.heartbeat(0, 0, vec![], Duration::from_secs(2)).await.unwrap_err().to_string(),
            };
        assert!(!refused.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_or_key_that_cannot_be_used_says_why() {
    let secret = JobSecret::generate().unwrap();
    let (cert_pem, key_pem) = sparktrain_cluster::tls::self_signed().unwrap();
    let (_, other_key) = sparktrain_cluster::tls::self_signed().unwrap();
    let garbage =
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n".to_string();
    for (cert_pem, key_pem, why) in [
        (garbage, key_pem.clone(), "certificate"),
        (cert_pem.clone(), "no key here".to_string(), "key"),
        (cert_pem, other_key, "key"),
    ] {
        let mut config = config(&secret, 1, 0, Duration::from_secs(10));
        config.tls = Some(ServerTls { cert_pem, key_pem });
        let message = match RendezvousServer::start(config).await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a server started with an unusable {why}"),
        };
        println!("{message}");
        assert!(message.starts_with("control-plane TLS: "), "{message}");
        assert!(message.to_lowercase().contains(why), "{message}");
    }
}
