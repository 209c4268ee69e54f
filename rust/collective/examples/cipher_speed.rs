//! The frames' cipher against ring's, on one core: AES-256-GCM (and AES-128-GCM) sealing a
//! buffer in place, as `seal.rs` seals each frame, with aws-lc-rs (what the frames use) and
//! ring 0.17 (what they used before). Prints GB/s for each and aws-lc-rs's speed over ring's.
//!
//! `cargo run --release -p sparktrain-collective --example cipher_speed -- [KiB per buffer] [MiB in all]`
//! (defaults: 152, the half of a 304 KB gradient one rank seals in a two-rank all-reduce; 2048).

use std::hint::black_box;
use std::time::Instant;

/// Seals `buffer` in place `times` times with `seal` (given the frame number) and returns
/// the bytes sealed per second.
fn rate(buffer: &mut [u8], times: usize, mut seal: impl FnMut(u64, &mut [u8])) -> f64 {
    seal(0, buffer);
    let started = Instant::now();
    for frame in 1..=times as u64 {
        seal(frame, buffer);
    }
    (buffer.len() * times) as f64 / started.elapsed().as_secs_f64()
}

fn nonce_bytes(frame: u64) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[..8].copy_from_slice(&frame.to_le_bytes());
    nonce
}

/// The rate of AES-`bits`-GCM from `krate` (ring and aws-lc-rs share one `aead` API).
macro_rules! sealing_rate {
    ($krate:ident, $bits:expr, $buffer:expr, $times:expr) => {{
        use $krate::aead::{AES_128_GCM, AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
        let algorithm = if $bits == 256 { &AES_256_GCM } else { &AES_128_GCM };
        let key = vec![1u8; $bits / 8];
        let key = LessSafeKey::new(UnboundKey::new(algorithm, &key).expect("a key of the right length"));
        rate($buffer, $times, |frame, data| {
            let nonce = Nonce::assume_unique_for_key(nonce_bytes(frame));
            black_box(key.seal_in_place_separate_tag(nonce, Aad::empty(), data).expect("seals").as_ref()[0]);
        })
    }};
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("whole numbers: KiB per buffer, MiB in all"))
        .collect();
    let kib = args.first().copied().unwrap_or(152);
    let total_mib = args.get(1).copied().unwrap_or(2048);
    let mut buffer = vec![7u8; kib << 10];
    let times = ((total_mib << 20) / buffer.len()).max(1);
    println!("sealing {kib} KiB buffers in place, {times} times each, one core");
    for bits in [256usize, 128] {
        let ring_rate = sealing_rate!(ring, bits, &mut buffer, times);
        let aws_rate = sealing_rate!(aws_lc_rs, bits, &mut buffer, times);
        println!(
            "AES-{bits}-GCM: ring {:.2} GB/s, aws-lc-rs {:.2} GB/s, aws-lc-rs / ring {:.2}x",
            ring_rate / 1e9,
            aws_rate / 1e9,
            aws_rate / ring_rate
        );
    }
}
