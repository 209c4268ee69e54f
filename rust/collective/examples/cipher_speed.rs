//! The frames' cipher against ring's, on one core: AES-256-GCM (and AES-128-GCM) sealing a
//! buffer in place, as `seal.rs` seals each frame, with aws-lc-rs (what the frames use) and
//! ring 0.17 (what they used before). Prints GB/s for each and aws-lc-rs's speed over ring's.
//!
//! Then the way a connection seals a large message frame by frame (`seal.rs`'s `Sealer`): each
//! frame copied out of the message and sealed in place, against sealed straight from the
//! message into the frame buffer; prints GB/s for each and the second's speed over the first's.
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
    frames_of_a_message();
}

/// A 64 MiB message (far larger than the caches, as a ring's gradients are) sealed in
/// 256 KiB frames, with a copy into the frame buffer and in place, or straight into it.
fn frames_of_a_message() {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[1u8; 32]).expect("a 32-byte key"));
    let message = vec![7u8; 64 << 20];
    let copied = frames_rate(&message, |number, piece, frame| {
        let (body, tag) = frame.split_at_mut(piece.len());
        body.copy_from_slice(piece);
        let nonce = Nonce::assume_unique_for_key(nonce_bytes(number));
        let sealed = key.seal_in_place_separate_tag(nonce, Aad::empty(), body).expect("seals");
        tag.copy_from_slice(sealed.as_ref());
    });
    let straight = frames_rate(&message, |number, piece, frame| {
        let nonce = Nonce::assume_unique_for_key(nonce_bytes(number));
        key.seal_in_place_scatter(nonce, Aad::empty(), &mut [], piece, frame).expect("seals");
    });
    println!(
        "a 64 MiB message in 256 KiB frames, AES-256-GCM: copied then sealed in place {:.2} GB/s, \
         sealed straight into the frame {:.2} GB/s, {:.2}x",
        copied / 1e9,
        straight / 1e9,
        straight / copied
    );
}

/// Seals `message` frame by frame, eight times over, with `seal` (given the frame number,
/// the piece and the frame buffer for its ciphertext and tag); returns the bytes per second.
fn frames_rate(message: &[u8], mut seal: impl FnMut(u64, &[u8], &mut [u8])) -> f64 {
    const FRAME: usize = 1 << 18;
    const TAG: usize = 16;
    const ROUNDS: usize = 8;
    let mut frame = vec![0u8; FRAME + TAG];
    let mut number = 0;
    let started = Instant::now();
    for _ in 0..ROUNDS {
        for piece in message.chunks(FRAME) {
            number += 1;
            seal(number, piece, &mut frame[..piece.len() + TAG]);
            black_box(frame[0]);
        }
    }
    (message.len() * ROUNDS) as f64 / started.elapsed().as_secs_f64()
}
