//! Fuzzes the ring's frame handling: arbitrary bytes as what the previous rank sends, raw (an
//! outsider without the frame key) or sealed with the key (a compromised rank), through every
//! collective (see `sparktrain_collective::untrusted`).
//!
//! Run from `rust/collective`: `cargo +nightly fuzz run ring_frames -- -max_total_time=300`
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sparktrain_collective::untrusted::exercise(data);
});
