//! Rings of workers on 127.0.0.1 for the training tests, one thread per worker.

#![allow(dead_code)]

use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use sparktrain_collective::{Communicator, Config};
use sparktrain_train::{SharedRing, shared};

/// Connected rings for `n` workers; `[None]` for one worker alone.
pub fn rings(n: usize) -> Vec<Option<SharedRing>> {
    if n == 1 {
        return vec![None];
    }
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, l)| {
            let config = Config::new(rank, peers.clone(), b"test secret".to_vec(), Duration::from_secs(20));
            thread::spawn(move || Communicator::connect(l, config).unwrap())
        })
        .collect();
    handles.into_iter().map(|h| Some(shared(h.join().unwrap()))).collect()
}

/// Runs `work(worker, ring)` on `n` workers at once, one thread each; results by worker.
pub fn on_workers<R: Send + 'static>(
    n: usize,
    work: impl Fn(usize, Option<SharedRing>) -> R + Send + Clone + 'static,
) -> Vec<R> {
    let handles: Vec<_> = rings(n)
        .into_iter()
        .enumerate()
        .map(|(w, ring)| {
            let work = work.clone();
            thread::spawn(move || work(w, ring))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}
