//! The control plane's message handling on arbitrary and on mutated valid input: it never
//! panics (the same routine the fuzz target in `rust/cluster/fuzz` runs).

use prost::Message;
use sparktrain_cluster::rendezvous::proto::{
    BarrierRequest, CheckpointedRequest, HeartbeatRequest, LogLine, RegisterRequest, WorkRequest,
};
use sparktrain_cluster::untrusted::exercise;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A request without and with its task's token (a kind of 128 or more carries it).
fn both(kind: u8, message: &[u8]) -> Vec<u8> {
    let mut out = chunk(kind, message);
    out.extend(chunk(kind + 128, message));
    out
}

fn chunk(kind: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&(message.len() as u16).to_le_bytes());
    out.extend_from_slice(message);
    out
}

/// Valid requests, with the values a hostile caller would pick: indexes past the job, waits
/// that overflow the clock, ports beyond u16, empty and huge names.
fn valid_requests() -> Vec<u8> {
    let mut data = Vec::new();
    for task_index in [0, 3, 4, u32::MAX] {
        let register = RegisterRequest { task_index, data_port: 70_000, tf_port: 1, ..Default::default() };
        data.extend(chunk(0, &register.encode_to_vec()));
        let register = RegisterRequest { task_index, data_port: 7000, tf_port: 7001, ..Default::default() };
        data.extend(chunk(0, &register.encode_to_vec()));
        let lines =
            vec![LogLine { stream: 2, text: "x".repeat(100) }, LogLine { stream: 9, text: String::new() }];
        data.extend(both(
            1,
            &HeartbeatRequest { task_index, attempt: 0, lines, tokens_version: 0 }.encode_to_vec(),
        ));
        for timeout_ms in [0, 1, u64::MAX] {
            let barrier =
                BarrierRequest { task_index, name: "b".repeat(task_index as usize % 300), timeout_ms };
            data.extend(both(2, &barrier.encode_to_vec()));
        }
        for epoch in [0, u64::MAX] {
            data.extend(both(5, &WorkRequest { task_index, epoch }.encode_to_vec()));
            data.extend(both(6, &CheckpointedRequest { task_index, epoch }.encode_to_vec()));
        }
    }
    data
}

#[test]
fn valid_requests_with_hostile_values_never_panic() {
    assert!(exercise(&valid_requests()) >= 30);
}

#[test]
fn mutated_requests_never_panic() {
    let seed = valid_requests();
    let mut rng = Rng(7);
    for _ in 0..300 {
        let mut data = seed.clone();
        for _ in 0..=rng.below(8) {
            let i = rng.below(data.len());
            match rng.below(3) {
                0 => data[i] ^= 1 << rng.below(8),
                1 => data[i] = rng.next() as u8,
                _ => data.truncate(i),
            }
            if data.is_empty() {
                break;
            }
        }
        exercise(&data);
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(42);
    for len in [0usize, 1, 3, 4, 17, 100, 4096] {
        for _ in 0..40 {
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            exercise(&data);
        }
    }
}
