//! The collectives on what a hostile or broken previous rank sends: they fail cleanly and
//! never panic, hang or allocate what a peer asks for (the same routine the fuzz target in
//! `rust/collective/fuzz` runs).

use sparktrain_collective::untrusted::{exercise, honest_peer, honest_peer_along_ring};

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

/// Where each message of the scripted peer starts: after the mode byte, `[length][message]`.
fn messages(script: &[u8]) -> Vec<(usize, usize)> {
    let mut at = 1;
    let mut out = Vec::new();
    while at + 2 <= script.len() {
        // The top bit sends the message on the all-to-all's direct connection.
        let len = usize::from(u16::from_le_bytes([script[at], script[at + 1]]) & 0x7fff);
        out.push((at + 2, len));
        at += 2 + len;
    }
    out
}

#[test]
fn an_honest_peer_completes_every_collective() {
    assert_eq!(exercise(&honest_peer()), 7);
    assert_eq!(exercise(&honest_peer_along_ring()), 7);
}

#[test]
fn an_outsider_without_the_key_gets_nothing_through() {
    // Bytes that were not sealed with the connection's key fail the first frame's check.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..300 {
        let len = rng.below(600);
        let mut data = vec![0u8];
        data.extend((0..len).map(|_| rng.next() as u8));
        assert_eq!(exercise(&data), 0, "random bytes passed a frame check");
    }
}

#[test]
fn a_peer_with_the_key_cannot_break_the_parsers() {
    for honest in [honest_peer(), honest_peer_along_ring()] {
        a_peer_with_the_key_cannot_break_the_parsers_of(honest);
    }
}

fn a_peer_with_the_key_cannot_break_the_parsers_of(honest: Vec<u8>) {
    let mut rng = Rng(42);
    for (start, len) in messages(&honest) {
        // Every byte of every message, changed: a header out of step, a huge gather length,
        // an all-to-all bundle that lies, values of any bits.
        for i in start..start + len {
            for value in [0u8, 0xff, honest[i] ^ 0x80] {
                let mut mutated = honest.clone();
                mutated[i] = value;
                assert!(exercise(&mutated) <= 7);
            }
        }
    }
    // An all-gather or all-to-all length past the limit, and one past the address space.
    for (message, succeeding) in [(12, 3), (18, 5)] {
        for claim in [(1u64 << 16) + 1, u64::MAX] {
            let mut mutated = honest.clone();
            let (start, _) = messages(&honest)[message];
            mutated[start..start + 8].copy_from_slice(&claim.to_le_bytes());
            assert_eq!(exercise(&mutated), succeeding, "refused, and the ring stays broken");
        }
    }
    for _ in 0..2000 {
        let mut mutated = honest.clone();
        for _ in 0..1 + rng.below(4) {
            let i = 1 + rng.below(mutated.len() - 1);
            match rng.below(3) {
                0 => mutated[i] = rng.next() as u8,
                1 => {
                    mutated.remove(i);
                }
                _ => mutated.insert(i, rng.next() as u8),
            }
        }
        assert!(exercise(&mutated) <= 7);
    }
}
