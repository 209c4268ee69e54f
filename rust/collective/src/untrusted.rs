//! One routine that feeds arbitrary bytes to the real collectives as what the previous rank
//! of a ring sends, shared by the fuzz target (`rust/collective/fuzz`) and the tests, so both
//! exercise the same code. Any panic, hang or outsized allocation is a bug.
//!
//! The bytes play one of two peers, picked by the first byte's lowest bit:
//! - an outsider on the network path, who does not know the frame key: the rest of the bytes
//!   arrive on the ring's connection as they are;
//! - a peer that holds the keys (a compromised rank): the rest is cut into messages, each
//!   sealed with the key of the connection it arrives on (the ring's, or the all-to-all's
//!   direct one), so the parsers behind the seal (headers, all-gather lengths, all-to-all
//!   lengths and bundles, values) see arbitrary content.
//!
//! The first byte's second bit picks the all-to-all's route (direct or along the ring).

use std::io::{self, Cursor, Read, Write};
use std::time::Duration;

use crate::all_to_all::{Mesh, MeshLink, Route};
use crate::element::ReduceOp;
use crate::ring::{Communicator, Config, Connection, Link};
use crate::seal::{KEY_BYTES, Sealer};
use crate::wire::Wire;

/// The frame key of the scripted connection from the previous rank.
const KEY: [u8; KEY_BYTES] = [0x5a; KEY_BYTES];

/// The frame key of the scripted direct connection from rank 1 (all-to-all).
const MESH_KEY: [u8; KEY_BYTES] = [0xa5; KEY_BYTES];

/// In a message's length, the bit that sends it on the direct connection.
const ON_MESH: u16 = 0x8000;

/// The all-gather limit of the exercise: far below the default, so an honoured length cannot
/// exhaust the fuzzer's memory, and a larger one must be refused.
const GATHER_LIMIT: u64 = 1 << 16;

/// A connection whose incoming bytes are fixed in advance; what is sent is dropped.
struct Scripted(Cursor<Vec<u8>>);

impl Read for Scripted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Scripted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Connection for Scripted {
    fn set_timeout(&self, _: Duration) -> io::Result<()> {
        Ok(())
    }

    fn shutdown(&self) {}
}

/// The bytes rank 1 sends on the ring's connection and on the direct one when `data` is read
/// as `[length: u16 LE][message]` chunks (the length's top bit: the direct connection), each
/// sealed with its connection's key.
fn sealed_by_peer(data: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut ring = Sealer::new(Vec::new(), Some(&KEY));
    let mut mesh = Sealer::new(Vec::new(), Some(&MESH_KEY));
    let mut rest = data;
    while rest.len() >= 2 {
        let head = u16::from_le_bytes([rest[0], rest[1]]);
        let end = (2 + usize::from(head & !ON_MESH)).min(rest.len());
        let sealer = if head & ON_MESH != 0 { &mut mesh } else { &mut ring };
        // Writing to a vector cannot fail.
        let _ = sealer.send(&rest[2..end]);
        rest = &rest[end..];
    }
    (ring.into_stream(), mesh.into_stream())
}

/// Runs rank 0 of a two-rank ring, whose previous rank sends what `data` says (see the module
/// header), through every collective in turn; returns how many of them succeeded. Each runs
/// until the first failure breaks the ring; the rest then fail at once.
pub fn exercise(data: &[u8]) -> usize {
    let Some((&mode, rest)) = data.split_first() else { return 0 };
    let (incoming, direct) = if mode % 2 == 0 { (rest.to_vec(), Vec::new()) } else { sealed_by_peer(rest) };
    let mut config = Config::new(0, vec!["rank0".into(), "rank1".into()], Vec::new(), Duration::from_secs(1));
    config.chunk_bytes = 64;
    config.max_gather_bytes = GATHER_LIMIT;
    config.all_to_all = if mode & 2 == 0 { Route::Mesh } else { Route::Ring };
    let quiet = || Scripted(Cursor::new(Vec::new()));
    let link = Link::new((quiet(), [0u8; KEY_BYTES]), (Scripted(Cursor::new(incoming)), KEY), true);
    let mesh =
        MeshLink::new((quiet(), [0u8; KEY_BYTES]), (Scripted(Cursor::new(direct)), MESH_KEY), quiet(), true);
    let Ok(mut ring) = Communicator::over(config, vec![link], Mesh::over(vec![mesh])) else { return 0 };
    let mut floats = [1.5f32; 40];
    let mut longs = [7i64; 3];
    let mut bytes = [9u8; 100];
    [
        ring.all_reduce(&mut floats, ReduceOp::Sum).is_ok(),
        ring.all_reduce_as(&mut floats, ReduceOp::Mean, Wire::Bf16).is_ok(),
        ring.all_reduce(&mut longs, ReduceOp::Max).is_ok(),
        ring.all_gather(b"rank zero's item").is_ok(),
        ring.broadcast(&mut bytes, 1).is_ok(),
        ring.all_to_all(&[b"to itself".as_slice(), b"to rank one"])
            .is_ok_and(|got| got[1] == b"from rank one"),
        ring.barrier().is_ok(),
    ]
    .into_iter()
    .filter(|ok| *ok)
    .count()
}

/// What an honest rank 1 sends for the calls [`exercise`] makes, as `[length][message]`
/// chunks after a mode byte of 1: a seed for the fuzzer, and the tests' proof that the
/// routine reaches every collective. Its all-to-all goes over the direct connection.
pub fn honest_peer() -> Vec<u8> {
    honest(Route::Mesh)
}

/// [`honest_peer`] with the all-to-all forwarded along the ring (a mode byte of 3).
pub fn honest_peer_along_ring() -> Vec<u8> {
    honest(Route::Ring)
}

fn honest(route: Route) -> Vec<u8> {
    fn header(kind: [u8; 4], call: u64, len: u64) -> Vec<u8> {
        let mut h = kind.to_vec();
        h.extend_from_slice(&64u32.to_le_bytes());
        h.extend_from_slice(&call.to_le_bytes());
        h.extend_from_slice(&len.to_le_bytes());
        h
    }
    let floats = |n: usize, v: f32| (0..n).flat_map(|_| v.to_le_bytes()).collect::<Vec<u8>>();
    let bf16s = |n: usize| (0..n).flat_map(|_| [0x80u8, 0x3f]).collect::<Vec<u8>>();
    let mut messages: Vec<Vec<u8>> = Vec::new();
    let mut direct = Vec::new();
    // all_reduce(f32 × 40, sum): 64-byte chunks hold 16 values; segments of 20 values.
    messages.push(header([1, 1, 1, 0], 1, 40));
    messages.extend([floats(16, 1.0), floats(4, 1.0), floats(16, 2.0), floats(4, 2.0)]);
    // The same with bfloat16 on the wire (32 values per chunk) and a mean.
    messages.push(header([1, 1, 2, 2], 2, 40));
    messages.extend([bf16s(20), bf16s(20)]);
    // all_reduce(i64 × 3, max): rank 0 receives the segment of 2 values, then that of 1.
    messages.push(header([1, 3, 3, 0], 3, 3));
    messages.extend([[9i64.to_le_bytes(), 9i64.to_le_bytes()].concat(), 5i64.to_le_bytes().to_vec()]);
    // all_gather: the length, then the item.
    messages.push(header([3, 0, 0, 0], 4, 0));
    messages.extend([5u64.to_le_bytes().to_vec(), b"hello".to_vec()]);
    // broadcast(100 bytes, root 1): chunks of 64 bytes.
    messages.push(header([2, 0, 1, 0], 5, 100));
    messages.extend([vec![3u8; 64], vec![3u8; 36]]);
    // all_to_all of two items: the header on the ring, then the buffer's length and the
    // buffer, over the direct connection or as a one-buffer bundle along the ring.
    messages.push(header([4, 0, 0, route.code()], 6, 2));
    let item = b"from rank one";
    match route {
        Route::Mesh => {
            direct.push(messages.len());
            messages.push((item.len() as u64).to_le_bytes().to_vec());
            direct.push(messages.len());
            messages.push(item.to_vec());
        }
        Route::Ring => {
            let mut bundle = 1u32.to_le_bytes().to_vec();
            bundle.extend_from_slice(&1u32.to_le_bytes());
            bundle.extend_from_slice(&0u32.to_le_bytes());
            bundle.extend_from_slice(&(item.len() as u64).to_le_bytes());
            bundle.extend_from_slice(item);
            messages.extend([(bundle.len() as u64).to_le_bytes().to_vec(), bundle]);
        }
    }
    // barrier: an all_reduce of one i64; the first segment is empty.
    messages.push(header([1, 3, 1, 0], 7, 1));
    messages.extend([Vec::new(), 1i64.to_le_bytes().to_vec()]);
    let mut script = vec![if route == Route::Mesh { 1u8 } else { 3u8 }];
    for (i, m) in messages.into_iter().enumerate() {
        let on_mesh = if direct.contains(&i) { ON_MESH } else { 0 };
        script.extend_from_slice(&(m.len() as u16 | on_mesh).to_le_bytes());
        script.extend_from_slice(&m);
    }
    script
}
