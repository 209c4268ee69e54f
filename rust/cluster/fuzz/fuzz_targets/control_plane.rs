//! Fuzzes the control plane's message handling: arbitrary bytes cut into requests of every
//! type, decoded and applied to a live job (see `sparktrain_cluster::untrusted`).
//!
//! Run from `rust/cluster`: `cargo +nightly fuzz run control_plane -- -max_total_time=300`
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sparktrain_cluster::untrusted::exercise(data);
});
