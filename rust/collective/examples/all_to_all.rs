//! All-to-all on both routes, side by side: the median time of a call and the bytes each rank
//! puts on the wire, for 2 to 4 ranks (threads of this process over loopback TCP, sealed
//! frames) and buffers of a few sizes per peer.
//!
//! `cargo run --release -p sparktrain-collective --example all_to_all [calls]`
//!
//! Measured here (2 cores shared by every rank, 60 calls, median ms of a call; bytes per rank
//! per call, tags and lengths included):
//!
//! ```text
//! ranks  per peer   mesh ms  ring ms  ring/mesh   mesh bytes/rank  ring bytes/rank
//!     2       1 KiB    0.126    0.042       0.33              1168             1188
//!     2      64 KiB    0.239    0.269       1.12             65680            65700
//!     2    1024 KiB    1.407    1.379       0.98           1048768          1048804
//!     3       1 KiB    0.128    0.196       1.53              2232             3312
//!     3      64 KiB    0.547    0.754       1.38            131256           196848
//!     3    1024 KiB    3.263   15.509       4.75           2097432          3146160
//!     4       1 KiB    0.224    0.370       1.66              3320             6500
//!     4      64 KiB    1.261    1.629       1.29            196856           393572
//!     4    1024 KiB    7.287   33.467       4.59           3146120          6292196
//! ```
//!
//! Two ranks are each other's only peer, so both routes move the same bytes; from three on,
//! the ring moves N/2 times the bytes in N-1 steps and falls behind (the few-kilobyte times
//! of two ranks are within this machine's noise).

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use sparktrain_collective::{Communicator, Config, Route};

fn connect(n: usize, route: Route) -> Vec<Communicator> {
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, listener)| {
            // Over TCP, sealed, as between hosts: on one host the ranks would move to unix sockets.
            let config = Config {
                all_to_all: route,
                local: false,
                ..Config::new(rank, peers.clone(), b"bench secret".to_vec(), Duration::from_secs(30))
            };
            thread::spawn(move || Communicator::connect(listener, config).unwrap())
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Median seconds of a call and bytes sent per rank per call.
fn measure(n: usize, route: Route, per_peer: usize, calls: usize) -> (f64, f64) {
    let handles: Vec<_> = connect(n, route)
        .into_iter()
        .map(|mut c| {
            thread::spawn(move || {
                let items = vec![vec![c.rank() as u8; per_peer]; c.size()];
                c.all_to_all(&items).unwrap(); // connects the mesh
                let before = c.bytes_sent();
                let mut times = Vec::with_capacity(calls);
                for _ in 0..calls {
                    c.barrier().unwrap();
                    let start = Instant::now();
                    c.all_to_all(&items).unwrap();
                    times.push(start.elapsed().as_secs_f64());
                }
                // The barriers' bytes are a few dozen per call: left in, they change nothing.
                (times, (c.bytes_sent() - before) as f64 / calls as f64)
            })
        })
        .collect();
    let results: Vec<(Vec<f64>, f64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // A call ends when its slowest rank does.
    let mut slowest: Vec<f64> =
        (0..calls).map(|i| results.iter().map(|(t, _)| t[i]).fold(0.0, f64::max)).collect();
    slowest.sort_by(f64::total_cmp);
    (slowest[calls / 2], results[0].1)
}

fn main() {
    let calls: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(30);
    println!("ranks  per peer   mesh ms  ring ms  ring/mesh   mesh bytes/rank  ring bytes/rank");
    for n in [2, 3, 4] {
        for per_peer in [1 << 10, 64 << 10, 1 << 20] {
            let (mesh, mesh_bytes) = measure(n, Route::Mesh, per_peer, calls);
            let (ring, ring_bytes) = measure(n, Route::Ring, per_peer, calls);
            println!(
                "{n:>5}  {:>6} KiB  {:>7.3}  {:>7.3}  {:>9.2}   {:>15.0}  {:>15.0}",
                per_peer >> 10,
                mesh * 1e3,
                ring * 1e3,
                ring / mesh,
                mesh_bytes,
                ring_bytes
            );
        }
    }
}
