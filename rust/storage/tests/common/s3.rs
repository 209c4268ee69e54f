//! A real S3-compatible server for integration tests: `moto_server` (the `moto[server]` package
//! from PyPI, installed in the test virtualenv).
//!
//! `SPARKTRAIN_TEST_S3=http://host:port` uses a server that is already running (to share one
//! between runs). Otherwise the first test to ask starts `moto_server` from
//! `PATH` on a free port of 127.0.0.1; it stops when this process exits.
//! Every test binary gets a bucket of its own, and this process's storage is pointed at the
//! server with Hadoop's S3A keys, as a Spark user would configure it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A `moto_server` started by this process.
struct Moto {
    url: String,
    _child: Child,
}

fn start_moto() -> Result<Moto, String> {
    // Under a shell that kills the server when our end of its stdin closes, which happens
    // when this process exits however it ends (a parent-death signal would follow the thread
    // that started it, and test threads end early).
    let script = "moto_server -H 127.0.0.1 -p 0 & trap 'kill $!' EXIT; read -r _";
    let mut child = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run sh ({e})"))?;
    let stderr = child.stderr.take().ok_or("moto_server has no stderr pipe")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            // " * Running on http://127.0.0.1:PORT"
            if !sent && let Some(at) = line.find("http://127.0.0.1:") {
                let _ = tx.send(line[at..].trim().to_string());
                sent = true;
            }
        }
    });
    let url = rx.recv_timeout(READY_TIMEOUT).map_err(|_| {
        "moto_server printed no address (is it installed? pip install 'moto[server]', or set SPARKTRAIN_TEST_S3)"
            .to_string()
    })?;
    Ok(Moto { url, _child: child })
}

static SERVER: OnceLock<Result<(String, Option<Moto>), String>> = OnceLock::new();
static BUCKET: OnceLock<String> = OnceLock::new();

/// The server's endpoint, `http://127.0.0.1:<port>`, starting one on first use.
pub fn endpoint() -> String {
    let server = SERVER.get_or_init(|| match std::env::var("SPARKTRAIN_TEST_S3") {
        Ok(url) if !url.trim().is_empty() => Ok((url.trim().trim_end_matches('/').to_string(), None)),
        _ => start_moto().map(|m| (m.url.clone(), Some(m))),
    });
    match server {
        Ok((url, _)) => url.clone(),
        Err(message) => panic!("no S3 server for the test: {message}"),
    }
}

/// This test binary's bucket, created on first use, with the storage pointed at the server.
pub fn bucket() -> String {
    BUCKET
        .get_or_init(|| {
            let endpoint = endpoint();
            let name = format!("sparktrain-rust-{}", std::process::id());
            create_bucket(&endpoint, &name).unwrap_or_else(|e| panic!("cannot create bucket {name}: {e}"));
            sparktrain_storage::configure([
                ("fs.s3a.endpoint", endpoint.as_str()),
                ("fs.s3a.access.key", "test"),
                ("fs.s3a.secret.key", "test"),
                ("fs.s3a.endpoint.region", "us-east-1"),
                ("fs.s3a.path.style.access", "true"),
            ])
            .expect("configure S3");
            name
        })
        .clone()
}

/// A fresh folder (key prefix) for one test: `s3://<bucket>/<name>`.
pub fn s3_dir(name: &str) -> String {
    let url = format!("s3://{}/{name}", bucket());
    sparktrain_storage::delete(&url, true).expect("clean the test folder");
    url
}

/// Creates a bucket with a plain `PUT /<bucket>`, which moto accepts unsigned.
fn create_bucket(endpoint: &str, name: &str) -> Result<(), String> {
    let host = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).map_err(|e| format!("{endpoint}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let request =
        format!("PUT /{name} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    match response.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        _ => Err(format!("the server answered: {}", response.lines().next().unwrap_or(""))),
    }
}
