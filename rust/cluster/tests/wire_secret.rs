//! What a party on the network path learns from a control plane without TLS: a relay between a
//! task and the driver records the task's calls (a registration and heartbeats), HTTP/2 and
//! HPACK are decoded as any sniffer would, and nothing in them is the job secret or keys the
//! ring between the trainers: every header value, every 32 bytes of the calls' bodies and of
//! the raw stream (and the hex digits among them, decoded) is tried as the ring's key against a
//! live rank, and each is refused, while the key the trainers use is accepted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sparktrain_cluster::{JobSecret, Registration, RendezvousServer, ServerConfig, Stream, TaskClient};
use sparktrain_collective::handshake::{self, Expected, Hello};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The key the trainers' ring is keyed with for a job of `secret` (what the binding passes to
/// the data plane).
fn ring_key(secret: &JobSecret) -> Vec<u8> {
    secret.ring_key().to_vec()
}

/// A relay to `server` for one connection: copies both ways and records what the caller sends.
async fn relay(server: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        let (caller, _) = listener.accept().await.unwrap();
        let upstream = TcpStream::connect(server).await.unwrap();
        let (mut from_caller, mut to_caller) = caller.into_split();
        let (mut from_server, mut to_server) = upstream.into_split();
        tokio::spawn(async move { tokio::io::copy(&mut from_server, &mut to_caller).await });
        let mut buf = vec![0u8; 16 << 10];
        loop {
            match from_caller.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    record.lock().unwrap().extend_from_slice(&buf[..n]);
                    if to_server.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    (address, seen)
}

/// One decoded call: its headers (pseudo-headers included) and its body.
struct Call {
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// The calls in `recorded` (a client's side of an HTTP/2 connection), decoded by a real HTTP/2
/// server reading them from memory.
async fn decode(recorded: Vec<u8>) -> Vec<Call> {
    let (mut client, server) = tokio::io::duplex(1 << 22);
    client.write_all(&recorded).await.unwrap();
    // What the decoding server writes back is read and dropped, so it never blocks.
    let (mut replies, feed) = tokio::io::split(client);
    tokio::spawn(async move {
        let mut sink = vec![0u8; 1 << 16];
        while matches!(replies.read(&mut sink).await, Ok(n) if n > 0) {}
    });
    let mut connection = h2::server::handshake(server).await.expect("an HTTP/2 connection");
    let mut bodies = Vec::new();
    // The input stays open (at its end the server would stop before handing out the calls it
    // buffered): a second without a new call means the recording is used up.
    let _feed = feed;
    while let Ok(Some(accepted)) = tokio::time::timeout(Duration::from_secs(1), connection.accept()).await {
        let Ok((request, _respond)) = accepted else { break };
        let mut headers: Vec<(String, Vec<u8>)> = vec![
            (":method".into(), request.method().as_str().as_bytes().to_vec()),
            (":path".into(), request.uri().path().as_bytes().to_vec()),
        ];
        headers.extend(request.headers().iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())));
        let mut body = request.into_body();
        bodies.push(tokio::spawn(async move {
            let mut bytes = Vec::new();
            // Bounded too: a body cut short in the recording must not hang the test.
            while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(1), body.data()).await {
                let _ = body.flow_control().release_capacity(chunk.len());
                bytes.extend_from_slice(&chunk);
            }
            Call { headers, body: bytes }
        }));
    }
    let mut calls = Vec::new();
    for body in bodies {
        calls.push(body.await.unwrap());
    }
    calls
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if text.is_empty() || !text.len().is_multiple_of(2) || !text.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let digits = std::str::from_utf8(text).ok()?;
    (0..digits.len()).step_by(2).map(|i| u8::from_str_radix(&digits[i..i + 2], 16).ok()).collect()
}

/// What a sniffer could try as the ring's key: every header value as it is and hex-decoded,
/// every 32 bytes of every body and of the raw stream, and every run of 64 hex digits decoded.
fn candidates(calls: &[Call], raw: &[u8]) -> Vec<Vec<u8>> {
    let mut found: Vec<Vec<u8>> = Vec::new();
    for call in calls {
        for (_, value) in &call.headers {
            found.push(value.clone());
            found.extend(unhex(value));
        }
    }
    for bytes in calls.iter().map(|c| c.body.as_slice()).chain([raw]) {
        found.extend(bytes.windows(32).map(<[u8]>::to_vec));
        found.extend(bytes.windows(64).filter_map(unhex));
    }
    found.sort();
    found.dedup();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_control_call_neither_holds_the_secret_nor_opens_the_ring() {
    let secret = JobSecret::generate().unwrap();
    let server = RendezvousServer::start(ServerConfig {
        host: "127.0.0.1".parse().unwrap(),
        ports: 0..=0,
        secret: secret.clone(),
        num_workers: 1,
        num_evaluators: 0,
        registration_timeout: Duration::from_secs(20),
        heartbeat_timeout: Duration::from_secs(20),
        tls: None,
        max_connections: sparktrain_cluster::limits::MAX_CONNECTIONS,
    })
    .await
    .unwrap();
    let (through, seen) = relay(server.address()).await;
    let mut client =
        TaskClient::connect(&through.to_string(), &secret, Duration::from_secs(5)).await.unwrap();
    let registration = Registration {
        task_index: 0,
        attempt: 0,
        host: "trainer-host-marker".into(),
        pid: 4242,
        executor_id: "7".into(),
        data_port: 7000,
        tf_port: 8000,
        gpus: vec![],
    };
    client.register(&registration, Duration::from_secs(10)).await.unwrap();
    client.heartbeat(0, 0, vec![(Stream::Stdout, "step 1".into())], Duration::from_secs(5)).await.unwrap();
    drop(client);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let raw = seen.lock().unwrap().clone();
    let calls = decode(raw.clone()).await;

    // The capture is the real thing: both calls, decoded, the task's own words in them.
    let paths: Vec<String> = calls
        .iter()
        .flat_map(|c| c.headers.iter().filter(|(k, _)| k == ":path"))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(paths[0].ends_with("/Register") && paths[1].ends_with("/Heartbeat"), "{paths:?}");
    assert!(calls[0].body.windows(19).any(|w| w == b"trainer-host-marker"));

    // Nothing in it keys the ring: a live rank refuses every candidate, and accepts the key
    // the trainers hold.
    let key = ring_key(&secret);
    let tried = candidates(&calls, &raw);
    assert!(tried.len() > 100, "only {} candidates", tried.len());
    let opened = tokio::task::spawn_blocking(move || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let rank = {
            let key = key.clone();
            std::thread::spawn(move || {
                let expected = Expected { rank: 1, count: 1, sealed: true };
                handshake::accept(&listener, expected, &key, Duration::from_secs(120), &mut Vec::new())
            })
        };
        let hello = Hello { rank: 1, index: 0, sealed: true };
        // The rank stops listening at the first key it accepts.
        let opened = tried
            .into_iter()
            .find(|candidate| handshake::connect(&address, hello, candidate, Duration::from_secs(5)).is_ok());
        if opened.is_none() {
            let trainer = handshake::connect(&address, hello, &key, Duration::from_secs(5));
            assert!(trainer.is_ok(), "the trainers' own key was refused: {:?}", trainer.err());
        }
        assert!(rank.join().unwrap().is_ok());
        opened
    })
    .await
    .unwrap();
    assert!(opened.is_none(), "a value captured from a control call opens the ring: {opened:02x?}");

    // Nor is the secret itself in it, raw or in hex.
    let hex = secret.to_hex();
    let secret_forms = [secret.as_bytes().to_vec(), hex.as_bytes().to_vec(), hex.to_uppercase().into_bytes()];
    for call in &calls {
        for (name, value) in &call.headers {
            for form in &secret_forms {
                assert!(!value.windows(form.len()).any(|w| w == form), "header {name} carries the secret");
            }
        }
        for form in &secret_forms {
            assert!(!call.body.windows(form.len()).any(|w| w == form), "a body carries the secret");
        }
    }
    for form in &secret_forms {
        assert!(!raw.windows(form.len()).any(|w| w == form), "the raw stream carries the secret");
    }
}
