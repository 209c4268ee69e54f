//! A real HDFS for integration tests: Hadoop's MiniDFSCluster, through our launcher.
//!
//! `SPARKTRAIN_TEST_HDFS=hdfs://host:port` uses a cluster that is already running (the suite
//! runner starts one for all tests). Otherwise the first test to ask starts
//! `tests/minidfs/start.sh`, which prints `MINIDFS_READY hdfs://127.0.0.1:<port>` once up and
//! shuts the cluster down when its stdin reaches end-of-file. One cluster serves every test of
//! the binary; each test works in its own folder.
//!
//! The cluster lives in a static, and Rust never drops statics, so it is stopped by the exit of
//! the test process instead: the OS closes our end of the launcher's stdin, and the launcher
//! shuts down on that end-of-file.

#![allow(dead_code)]

pub mod s3;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

/// How long the launcher may take (the first run may also build the Java side).
const READY_TIMEOUT: Duration = Duration::from_secs(180);
const READY_PREFIX: &str = "MINIDFS_READY ";

/// A running MiniDFS cluster started by this process; stopped on drop.
pub struct MiniDfs {
    /// `hdfs://127.0.0.1:<port>`.
    pub url: String,
    child: Child,
    /// Closing this is the launcher's signal to shut down.
    stdin: Option<ChildStdin>,
}

impl MiniDfs {
    /// Starts the launcher and waits for its ready line.
    pub fn start() -> Result<MiniDfs, String> {
        let root = repo_root();
        let script = root.join("tests/minidfs/start.sh");
        if !script.exists() {
            return Err(format!(
                "{} does not exist: set SPARKTRAIN_TEST_HDFS to a running cluster, or add the launcher",
                script.display()
            ));
        }
        // stderr goes to a file: a pipe nobody drains would block the JVM once full, and the
        // file keeps the tail for the failure message.
        // Under target/tmp, so that old logs go away with the build directory.
        let log_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("minidfs-storage-{}.log", std::process::id()));
        let log = File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut child = Command::new("bash")
            .arg(&script)
            // Small blocks (the default is 128 MiB) so that a few MiB of test data spans
            // several blocks, on write and on read.
            .args(["--block-size", "1048576"])
            .current_dir(&root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("cannot run bash {}: {e}", script.display()))?;
        let stdin = child.stdin.take();
        let Some(stdout) = child.stdout.take() else {
            return Err("launcher has no stdout pipe".to_string());
        };
        let (tx, rx) = mpsc::channel::<Option<String>>();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !sent && let Some(url) = line.trim().strip_prefix(READY_PREFIX) {
                    let _ = tx.send(Some(url.trim().to_string()));
                    sent = true;
                }
                // Keep draining so the launcher never blocks on a full pipe.
            }
            if !sent {
                let _ = tx.send(None);
            }
        });
        let mut cluster = MiniDfs { url: String::new(), child, stdin };
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Some(url)) => {
                cluster.url = url;
                Ok(cluster)
            }
            Ok(None) => Err(format!(
                "the MiniDFS launcher exited before it was ready; its stderr ends with:\n{}",
                tail(&log_path, 60)
            )),
            Err(_) => Err(format!(
                "the MiniDFS launcher printed no ready line within {} s; its stderr ends with:\n{}",
                READY_TIMEOUT.as_secs(),
                tail(&log_path, 60)
            )),
        }
        // On the error paths `cluster` is dropped here, which stops the launcher.
    }
}

impl Drop for MiniDfs {
    fn drop(&mut self) {
        // End-of-file on stdin asks the launcher to shut the cluster down cleanly.
        drop(self.stdin.take());
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo_root() -> PathBuf {
    // rust/storage -> repository root
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The last `lines` lines of a file, for error messages.
fn tail(path: &PathBuf, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let _ = f.read_to_string(&mut text);
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

enum Cluster {
    External(String),
    Started(MiniDfs),
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The URL of the shared test cluster, starting it on first use. Panics (failing the test)
/// with the launcher's output if it cannot be had.
pub fn hdfs_url() -> String {
    let cluster = CLUSTER.get_or_init(|| match std::env::var("SPARKTRAIN_TEST_HDFS") {
        Ok(url) if !url.trim().is_empty() => Ok(Cluster::External(url.trim().to_string())),
        _ => MiniDfs::start().map(Cluster::Started),
    });
    match cluster {
        Ok(Cluster::External(url)) => url.trim_end_matches('/').to_string(),
        Ok(Cluster::Started(c)) => c.url.trim_end_matches('/').to_string(),
        Err(message) => panic!("no HDFS for the test: {message}"),
    }
}

/// A fresh, empty folder for one test, `<cluster>/sparktrain-tests/storage/<name>-<pid>`,
/// removed when the test passes (kept for inspection when it fails).
pub struct TestDir {
    /// The folder's URL.
    pub url: String,
}

/// Creates the [`TestDir`] for the test `name`.
pub fn test_dir(name: &str) -> TestDir {
    let url = format!("{}/sparktrain-tests/storage/{name}-{}", hdfs_url(), std::process::id());
    sparktrain_storage::delete(&url, true).expect("clean the test folder");
    sparktrain_storage::mkdirs(&url).expect("create the test folder");
    TestDir { url }
}

impl std::ops::Deref for TestDir {
    type Target = str;
    fn deref(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Display for TestDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = sparktrain_storage::delete(&self.url, true);
        }
    }
}

/// `len` bytes of a pattern that is not periodic in 1 MiB, so a misplaced chunk is noticed.
pub fn data(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}
