//! The collectives over real sockets on 127.0.0.1, one thread per rank: results equal a plain
//! reduction for every type, op and awkward size, bit-identical on every rank; a dead or
//! stalled peer fails every rank in time, naming it; a wrong secret is refused.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use sparktrain_collective::{CollectiveError, Communicator, Config, Element, ReduceOp, Wire};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

/// Connects `n` ranks, each with what `configure` makes of the default configuration (the
/// job secret, a 10 s time-out).
fn connect_configured(
    n: usize,
    configure: impl Fn(Config) -> Config,
) -> Vec<Result<Communicator, CollectiveError>> {
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, listener)| {
            let config =
                configure(Config::new(rank, peers.clone(), SECRET.to_vec(), Duration::from_secs(10)));
            thread::spawn(move || Communicator::connect(listener, config))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Connects `n` ranks over `streams` parallel rings; `secret_of(rank)` lets a test give one
/// rank a wrong secret.
fn connect_rings(
    n: usize,
    streams: usize,
    timeout: Duration,
    chunk_bytes: usize,
    secret_of: impl Fn(usize) -> Vec<u8>,
) -> Vec<Result<Communicator, CollectiveError>> {
    connect_configured(n, |c| Config { chunk_bytes, streams, timeout, secret: secret_of(c.rank), ..c })
}

fn connect_ring(
    n: usize,
    timeout: Duration,
    chunk_bytes: usize,
    secret_of: impl Fn(usize) -> Vec<u8>,
) -> Vec<Result<Communicator, CollectiveError>> {
    connect_rings(n, 1, timeout, chunk_bytes, secret_of)
}

fn ring(n: usize, chunk_bytes: usize) -> Vec<Communicator> {
    rings(n, 1, chunk_bytes)
}

fn rings(n: usize, streams: usize, chunk_bytes: usize) -> Vec<Communicator> {
    connect_rings(n, streams, Duration::from_secs(10), chunk_bytes, |_| SECRET.to_vec())
        .into_iter()
        .map(|c| c.unwrap())
        .collect()
}

/// Runs `f` on every rank at once; returns the results by rank.
fn on_all<R: Send + 'static>(
    comms: Vec<Communicator>,
    f: impl Fn(&mut Communicator) -> R + Send + Sync + Clone + 'static,
) -> Vec<(Communicator, R)> {
    let handles: Vec<_> = comms
        .into_iter()
        .map(|mut c| {
            let f = f.clone();
            thread::spawn(move || {
                let r = f(&mut c);
                (c, r)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn value<T: From<i16>>(rank: usize, i: usize) -> T {
    // Distinct, sign-mixed, not too large: exact in f32 sums of a few ranks.
    T::from(((rank * 7919 + i * 104_729) % 2001) as i16 - 1000)
}

fn check<T>(n: usize, len: usize, op: ReduceOp, chunk_bytes: usize)
where
    T: Element + From<i16> + PartialEq + std::fmt::Debug + 'static,
{
    check_with::<T>(n, len, op, rings(n, 1, chunk_bytes), Wire::Native, value::<T>)
}

/// Reduces `value(rank, i)` over `comms` and compares with a plain reduction.
fn check_with<T>(
    n: usize,
    len: usize,
    op: ReduceOp,
    comms: Vec<Communicator>,
    wire: Wire,
    value: fn(usize, usize) -> T,
) where
    T: Element + PartialEq + std::fmt::Debug + 'static,
{
    let inputs: Vec<Vec<T>> = (0..n).map(|r| (0..len).map(|i| value(r, i)).collect()).collect();
    let expected: Vec<T> = (0..len)
        .map(|i| {
            let mut acc = [inputs[0][i]];
            for input in &inputs[1..] {
                T::combine(op, &mut acc, &[input[i]]);
            }
            if op == ReduceOp::Mean {
                T::divide(&mut acc, n);
            }
            acc[0]
        })
        .collect();
    let shared = std::sync::Arc::new(inputs);
    let results = on_all(comms, move |c| {
        let mut data = shared[c.rank()].clone();
        c.all_reduce_as(&mut data, op, wire).unwrap();
        data
    });
    for (c, got) in &results {
        // The inputs are small integers, so every order of summation gives the same values.
        assert_eq!(got, &expected, "{} n={n} len={len} {op:?} {wire:?} rank {}", T::NAME, c.rank());
        let bits: &[u8] = bytemuck_bytes(got);
        assert_eq!(bits, bytemuck_bytes(&results[0].1), "ranks differ");
    }
}

fn bytemuck_bytes<T: Element>(v: &[T]) -> &[u8] {
    // SAFETY: Element types are plain old data.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[test]
fn all_reduce_equals_a_plain_reduction_for_every_type_op_and_size() {
    for n in [2, 3, 4] {
        for len in [0, 1, n - 1, 1009, 40_000] {
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
                // 100-byte chunks split f64 and i64 values across chunks.
                check::<f32>(n, len, op, 100);
                check::<f64>(n, len, op, 100);
                check::<i64>(n, len, op, 4096);
            }
        }
    }
}

#[test]
fn all_reduce_of_64_mib_is_exact_and_identical_everywhere() {
    const BYTES: usize = 64 << 20;
    for n in [2, 3, 4] {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            check::<f32>(n, BYTES / 4, op, 1 << 20);
            check::<f64>(n, BYTES / 8, op, 1 << 20);
            check::<i64>(n, BYTES / 8, op, 1 << 20);
        }
    }
}

#[test]
fn parallel_rings_split_large_buffers_and_agree_with_one_ring() {
    for n in [2, 3] {
        // 4 MiB of f32 is split across the rings; 1009 values stay on the first.
        for len in [1 << 20, 1009] {
            check_with::<f32>(n, len, ReduceOp::Sum, rings(n, 3, 1 << 16), Wire::Native, value::<f32>);
            check_with::<f64>(n, len, ReduceOp::Mean, rings(n, 2, 1 << 16), Wire::Native, value::<f64>);
        }
    }
}

/// Small integers: exact in float16 and bfloat16, and so are their sums over 4 ranks.
fn small(rank: usize, i: usize) -> f32 {
    ((rank * 7 + i * 13) % 21) as f32 - 10.0
}

#[test]
fn sixteen_bit_wire_formats_reduce_exactly_what_they_can_hold() {
    for n in [2, 3, 4] {
        for wire in [Wire::F16, Wire::Bf16] {
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
                for len in [0, 1, n - 1, 1009, 300_000] {
                    check_with::<f32>(n, len, op, rings(n, 1, 1000), wire, small);
                }
            }
        }
    }
}

#[test]
fn sixteen_bit_wire_formats_round_once_and_agree_bit_for_bit() {
    let n = 3;
    let inputs: Vec<Vec<f32>> =
        (0..n).map(|r| (0..5000).map(|i| ((r * 5000 + i) as f32 * 0.618).sin() * 3.7).collect()).collect();
    let exact: Vec<f32> = (0..5000).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
    for (wire, tolerance) in [(Wire::F16, 4e-3), (Wire::Bf16, 3e-2)] {
        let shared = std::sync::Arc::new(inputs.clone());
        let results = on_all(rings(n, 1, 4096), move |c| {
            let mut data = shared[c.rank()].clone();
            c.all_reduce_as(&mut data, ReduceOp::Sum, wire).unwrap();
            data
        });
        for (_, got) in &results {
            assert_eq!(bytemuck_bytes(got), bytemuck_bytes(&results[0].1), "{wire:?}: ranks differ");
        }
        // And run after run.
        let shared = std::sync::Arc::new(inputs.clone());
        let again = on_all(rings(n, 1, 4096), move |c| {
            let mut data = shared[c.rank()].clone();
            c.all_reduce_as(&mut data, ReduceOp::Sum, wire).unwrap();
            data
        });
        assert_eq!(bytemuck_bytes(&again[0].1), bytemuck_bytes(&results[0].1), "{wire:?}: reruns differ");
        for (got, want) in results[0].1.iter().zip(&exact) {
            assert!((got - want).abs() <= tolerance * (1.0 + want.abs()), "{wire:?}: {got} vs {want}");
        }
    }
}

#[test]
fn only_float32_travels_in_sixteen_bits() {
    let mut comms = ring(1, 1 << 16);
    let err = comms[0].all_reduce_as(&mut [1i64, 2], ReduceOp::Sum, Wire::Bf16).unwrap_err();
    assert!(err.to_string().contains("int64 values travel only as themselves"), "{err}");
}

#[test]
fn a_fused_list_of_buffers_reduces_like_each_buffer_alone() {
    let results = on_all(ring(3, 256), |c| {
        let r = c.rank() as f64;
        let mut a = vec![r; 3];
        let mut b: Vec<f64> = vec![];
        let mut d: Vec<f64> = (0..1000).map(|i| i as f64 * (r + 1.0)).collect();
        c.all_reduce_many(&mut [&mut a, &mut b, &mut d], ReduceOp::Sum, Wire::Native).unwrap();
        (a, b, d)
    });
    for (_, (a, b, d)) in results {
        assert_eq!(a, vec![3.0; 3]);
        assert!(b.is_empty());
        assert_eq!(d, (0..1000).map(|i| i as f64 * 6.0).collect::<Vec<_>>());
    }
}

#[test]
fn broadcast_all_gather_and_barrier() {
    let results = on_all(ring(3, 64), |c| {
        let mut out = Vec::new();
        for root in 0..3 {
            let mut data: Vec<u8> =
                if c.rank() == root { (0..1000).map(|i| (i * root) as u8).collect() } else { vec![0; 1000] };
            c.broadcast(&mut data, root).unwrap();
            out.push(data);
        }
        let gathered = c.all_gather(&vec![c.rank() as u8; c.rank() * 100]).unwrap();
        c.barrier().unwrap();
        (out, gathered)
    });
    for (_, (broadcasts, gathered)) in &results {
        for (root, data) in broadcasts.iter().enumerate() {
            assert_eq!(*data, (0..1000).map(|i| (i * root) as u8).collect::<Vec<u8>>());
        }
        assert_eq!(*gathered, vec![vec![], vec![1u8; 100], vec![2u8; 200]]);
    }
}

#[test]
fn a_single_rank_needs_no_peers() {
    let mut comms = ring(1, 1 << 20);
    let mut data = [1.5f32, -2.0];
    comms[0].all_reduce(&mut data, ReduceOp::Mean).unwrap();
    assert_eq!(data, [1.5, -2.0]);
    assert_eq!(comms[0].all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
}

#[test]
fn a_dead_peer_fails_every_rank_at_once_naming_a_peer_and_the_operation() {
    let mut comms = ring(4, 1 << 16);
    let dead = comms.remove(2);
    let start = Instant::now();
    // Rank 2 dies while the others are inside the all-reduce: its sockets close.
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        drop(dead);
    });
    let results = on_all(comms, |c| {
        let mut data = vec![1.0f32; 1 << 20];
        c.all_reduce(&mut data, ReduceOp::Sum).unwrap_err()
    });
    killer.join().unwrap();
    for (c, err) in results {
        let text = err.to_string();
        assert!(text.starts_with("all_reduce(float32, Sum): rank "), "rank {}: {text}", c.rank());
        assert!(matches!(err, CollectiveError::PeerFailed { .. }), "rank {}: {text}", c.rank());
    }
    // Far below the 10 s time-out: the failure travels around the ring.
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_stalled_peer_fails_the_others_at_the_time_out() {
    let comms: Vec<Communicator> = connect_ring(3, Duration::from_millis(800), 1 << 16, |_| SECRET.to_vec())
        .into_iter()
        .map(|c| c.unwrap())
        .collect();
    let start = Instant::now();
    let results = on_all(comms, |c| {
        if c.rank() == 1 {
            thread::sleep(Duration::from_secs(3)); // alive, connections open, silent
            return None;
        }
        let mut data = vec![1i64; 1000];
        Some(c.all_reduce(&mut data, ReduceOp::Max).unwrap_err())
    });
    let errors: Vec<String> = results.iter().filter_map(|(_, e)| e.as_ref().map(|e| e.to_string())).collect();
    assert!(errors.iter().any(|e| e.contains("rank 1") && e.contains("did not answer")), "{errors:?}");
    assert!(errors.iter().all(|e| e.starts_with("all_reduce(int64, Max)")), "{errors:?}");
    assert!(start.elapsed() < Duration::from_secs(4));
}

#[test]
fn ranks_out_of_step_fail_instead_of_mixing_data() {
    let results = on_all(ring(2, 1 << 16), |c| {
        let mut data = vec![0f64; 10 + c.rank()];
        c.all_reduce(&mut data, ReduceOp::Sum).unwrap_err().to_string()
    });
    for (_, err) in results {
        assert!(err.contains("out of step"), "{err}");
    }
    // The same size in another wire format is a different call too.
    let results = on_all(ring(2, 1 << 16), |c| {
        let wire = if c.rank() == 0 { Wire::F16 } else { Wire::Native };
        c.all_reduce_as(&mut [1.0f32; 8], ReduceOp::Sum, wire).unwrap_err().to_string()
    });
    for (_, err) in results {
        assert!(err.contains("out of step") && err.contains("wire 1"), "{err}");
    }
}

#[test]
fn a_rank_without_the_secret_is_refused() {
    let outcomes = connect_ring(2, Duration::from_millis(1500), 1 << 16, |rank| {
        if rank == 1 { b"not the job secret".to_vec() } else { SECRET.to_vec() }
    });
    let errors: Vec<String> =
        outcomes.iter().map(|o| o.as_ref().err().expect("refused").to_string()).collect();
    assert!(errors.iter().any(|e| e.contains("refused")), "{errors:?}");
}

#[test]
fn a_barrier_within_a_longer_wait_outlasts_the_ring_time_out_once() {
    let comms: Vec<Communicator> = connect_ring(2, Duration::from_millis(300), 1 << 20, |_| SECRET.to_vec())
        .into_iter()
        .map(|c| c.unwrap())
        .collect();
    let results = on_all(comms, |comm| {
        // Rank 0 is busy (a chief writing a checkpoint) for longer than the ring's time-out.
        if comm.rank() == 0 {
            thread::sleep(Duration::from_millis(900));
        }
        let within = comm.barrier_within(Duration::from_secs(10));
        // Afterwards the ring's own time-out applies again.
        if comm.rank() == 0 {
            thread::sleep(Duration::from_millis(900));
        }
        (within, comm.barrier())
    });
    for (comm, (within, after)) in results {
        within.unwrap();
        if comm.rank() == 1 {
            let err = after.unwrap_err();
            assert!(matches!(err, CollectiveError::Timeout { peer: 0, .. }), "{err}");
        }
    }
}

#[test]
fn an_all_gather_item_over_the_limit_fails_every_rank_naming_its_size() {
    let comms: Vec<Communicator> = connect_configured(3, |c| Config { max_gather_bytes: 1024, ..c })
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let handles: Vec<_> = comms
        .into_iter()
        .map(|mut comm| {
            thread::spawn(move || {
                // Rank 1's item is 4 KiB, over the limit; the others send a little.
                let item = vec![7u8; if comm.rank() == 1 { 4096 } else { 10 }];
                let first = comm.all_gather(&item);
                let after = comm.barrier();
                (comm.rank(), first, after)
            })
        })
        .collect();
    for handle in handles {
        let (rank, first, after) = handle.join().unwrap();
        // Not a lost peer, which a restart might cure: the same item would fail again.
        let err = first.unwrap_err();
        assert!(
            matches!(&err, CollectiveError::InvalidArgument(m)
                if m == "all_gather: rank 1's item is 4096 bytes, more than the limit of 1024"),
            "rank {rank}: {err}"
        );
        // Whatever happened, the ring is not used out of step afterwards.
        assert!(after.is_err());
    }
}

#[test]
fn a_configuration_prints_without_its_secret() {
    let config = Config::new(0, vec!["127.0.0.1:1".into()], SECRET.to_vec(), Duration::from_secs(1));
    let printed = format!("{config:?}");
    let bytes = format!("{:?}", SECRET.to_vec());
    assert!(!printed.contains(&bytes[1..bytes.len() - 1]), "{printed}");
    assert!(printed.contains("rank: 0") && printed.contains("127.0.0.1:1"), "{printed}");
}

#[test]
fn sixty_four_idle_sockets_do_not_keep_the_peer_out() {
    let listeners: Vec<TcpListener> = (0..2).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    // As many silent connections as a rank answers at once, held open to each rank's port
    // before the ring forms; each would hold its slot for 5 s.
    let idle: Vec<std::net::TcpStream> =
        peers.iter().flat_map(|p| (0..64).map(move |_| std::net::TcpStream::connect(p).unwrap())).collect();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, listener)| {
            // A deadline shorter than the idle connections' 5 s: waiting them out is no way in.
            let config = Config::new(rank, peers.clone(), SECRET.to_vec(), Duration::from_secs(3));
            thread::spawn(move || Communicator::connect(listener, config))
        })
        .collect();
    let comms: Vec<Communicator> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    let results = on_all(comms, |comm| comm.barrier());
    assert!(results.into_iter().all(|(_, r)| r.is_ok()));
    drop(idle);
}

#[test]
fn silent_connections_do_not_hold_up_the_ring() {
    let listeners: Vec<TcpListener> = (0..2).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    // Connections that never greet: each would hold a one-at-a-time listener for 5 s.
    let silent: Vec<std::net::TcpStream> =
        peers.iter().flat_map(|p| (0..20).map(move |_| std::net::TcpStream::connect(p).unwrap())).collect();
    let started = Instant::now();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, listener)| {
            let config = Config::new(rank, peers.clone(), SECRET.to_vec(), Duration::from_secs(8));
            thread::spawn(move || Communicator::connect(listener, config))
        })
        .collect();
    let comms: Vec<Communicator> = handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
    assert!(started.elapsed() < Duration::from_secs(4), "the ring took {:?}", started.elapsed());
    // And it works.
    let results = on_all(comms, |comm| comm.barrier());
    assert!(results.into_iter().all(|(_, r)| r.is_ok()));
    drop(silent);
}

/// A party on the path from rank 0 to rank 1: relays both ways, records what rank 0 sends
/// and flips one bit of it at `flip` (counted from the connection's first byte).
fn on_path(rank1: String, flip: Option<usize>) -> (String, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    thread::spawn(move || {
        let (mut from0, _) = listener.accept().unwrap();
        let mut to1 = std::net::TcpStream::connect(rank1).unwrap();
        let (mut back1, mut back0) = (to1.try_clone().unwrap(), from0.try_clone().unwrap());
        thread::spawn(move || std::io::copy(&mut back1, &mut back0));
        let mut buf = [0u8; 4096];
        let mut at = 0;
        while let Ok(n) = from0.read(&mut buf) {
            if n == 0 {
                break;
            }
            if let Some(i) = flip.filter(|i| (at..at + n).contains(i)) {
                buf[i - at] ^= 0x01;
            }
            record.lock().unwrap().extend_from_slice(&buf[..n]);
            at += n;
            if to1.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    (address, seen)
}

/// Two ranks whose connection from rank 0 to rank 1 runs through [`on_path`].
fn ring_through(flip: Option<usize>) -> (Vec<Communicator>, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    let listeners: Vec<TcpListener> = (0..2).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let real: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    let (relay, seen) = on_path(real[1].clone(), flip);
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, listener)| {
            // Rank 0 reaches rank 1 through the relay; rank 1 reaches rank 0 directly.
            let peers = if rank == 0 { vec![real[0].clone(), relay.clone()] } else { real.clone() };
            // Over TCP, as between hosts: on one host the ranks would move off the relay's path.
            let config =
                Config { local: false, ..Config::new(rank, peers, SECRET.to_vec(), Duration::from_secs(10)) };
            thread::spawn(move || Communicator::connect(listener, config).unwrap())
        })
        .collect();
    (handles.into_iter().map(|h| h.join().unwrap()).collect(), seen)
}

/// The bytes rank 0 sends before the first sealed frame: its 43-byte greeting, its 32-byte
/// proof, and the byte that declines a local socket.
const HANDSHAKE_BYTES: usize = 43 + 32 + 1;

#[test]
fn values_cross_the_network_encrypted() {
    let (comms, seen) = ring_through(None);
    let marker = 1234.5678f32;
    let results = on_all(comms, move |c| {
        let mut data = vec![marker; 4096];
        c.all_reduce(&mut data, ReduceOp::Max).map(|_| data[0])
    });
    assert!(results.iter().all(|(_, r)| *r.as_ref().unwrap() == marker));
    let seen = seen.lock().unwrap();
    assert!(seen.len() > 4096 * 2, "the relay saw the values' bytes go by");
    let plain: Vec<u8> = [marker.to_le_bytes(), marker.to_le_bytes()].concat();
    assert!(!seen.windows(8).any(|w| w == plain), "a value crossed the network in the clear");
}

#[test]
fn a_frame_altered_on_the_way_breaks_the_ring_on_every_rank() {
    // One bit of the first call's header, then one bit deep inside the values.
    for flip in [HANDSHAKE_BYTES + 3, HANDSHAKE_BYTES + 40 + 5000] {
        let (comms, _) = ring_through(Some(flip));
        let results = on_all(comms, |c| {
            let mut data = vec![1.0f32; 1 << 16];
            c.all_reduce(&mut data, ReduceOp::Sum).unwrap_err().to_string()
        });
        let errors: Vec<&String> = results.iter().map(|(_, e)| e).collect();
        assert!(
            errors.iter().any(|e| e.contains("rank 0") && e.contains("authentication check")),
            "flip at {flip}: {errors:?}"
        );
        assert!(errors.iter().all(|e| e.starts_with("all_reduce(float32, Sum)")), "{errors:?}");
    }
}

#[test]
fn frames_in_the_clear_reduce_the_same_and_ranks_must_agree_on_sealing() {
    let connect = |sealed_of: fn(usize) -> bool| {
        connect_configured(3, |c| Config {
            sealed: sealed_of(c.rank),
            timeout: Duration::from_millis(1500),
            ..c
        })
    };
    let plain: Vec<Communicator> = connect(|_| false).into_iter().map(Result::unwrap).collect();
    for (c, data) in on_all(plain, |c| {
        let mut data: Vec<f64> = (0..5000).map(|i| value(c.rank(), i)).collect();
        c.all_reduce(&mut data, ReduceOp::Sum).unwrap();
        data
    }) {
        let expected: Vec<f64> = (0..5000).map(|i| (0..3).map(|r| value::<f64>(r, i)).sum()).collect();
        assert_eq!(data, expected, "rank {}", c.rank());
    }
    // Rank 1 alone sends in the clear: rank 2 refuses it and says why.
    let outcomes = connect(|rank| rank != 1);
    assert!(outcomes.iter().all(Result::is_err));
    let refused: Vec<String> = outcomes
        .iter()
        .map(|o| o.as_ref().err().unwrap().to_string())
        .filter(|e| e.contains("spark.sparktrain.collective.seal"))
        .collect();
    assert!(
        !refused.is_empty(),
        "{:?}",
        outcomes.iter().map(|o| o.as_ref().err().unwrap().to_string()).collect::<Vec<_>>()
    );
}

/// Runs one sum of 3 MiB of distinct values on every rank; returns each rank's local
/// connections, bytes sent by the call, and result.
fn sum_once(comms: Vec<Communicator>) -> Vec<(usize, u64, Vec<f32>)> {
    on_all(comms, |c| {
        let mut data: Vec<f32> = (0..3 << 18).map(|i| value::<f32>(c.rank(), i) / 7.0).collect();
        let before = c.bytes_sent();
        c.all_reduce(&mut data, ReduceOp::Sum).unwrap();
        (c.local_connections(), c.bytes_sent() - before, data)
    })
    .into_iter()
    .map(|(_, r)| r)
    .collect()
}

#[test]
fn ranks_on_one_host_move_to_local_sockets_unsealed_and_reduce_the_same_bits() {
    let rings_with = |local: bool| {
        connect_configured(3, |c| Config { streams: 2, local, ..c }).into_iter().map(Result::unwrap).collect()
    };
    let local = sum_once(rings_with(true));
    let tcp = sum_once(rings_with(false));
    // Each rank sends 2(N-1)/N of the buffer, plus a 24-byte header per call.
    let payload = (2 * 2 * (3 << 20) / 3 + 24) as u64;
    for rank in 0..3 {
        let (on_host, sent_local, summed_local) = &local[rank];
        let (over_tcp, sent_tcp, summed_tcp) = &tcp[rank];
        // Both parallel rings, to the next rank and from the previous one.
        assert_eq!((*on_host, *over_tcp), (4, 0), "rank {rank}");
        assert_eq!(summed_local, summed_tcp, "rank {rank}: the same bits either way");
        // No frame's tag on a local socket: nothing to seal against there.
        assert_eq!(*sent_local, payload, "rank {rank}");
        assert!(*sent_tcp > payload, "rank {rank}: sealed frames carry tags over TCP");
    }
}

#[test]
fn a_rank_that_declines_local_sockets_keeps_its_own_connections_on_tcp() {
    let comms: Vec<Communicator> = connect_configured(3, |c| Config { local: c.rank != 1, ..c })
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let results = sum_once(comms);
    // Rank 1's connections both ways stay on TCP; the ring's third one, 2 → 0, moves.
    let on_host: Vec<usize> = results.iter().map(|r| r.0).collect();
    assert_eq!(on_host, vec![1, 0, 1]);
    let expected: Vec<f32> =
        (0..3 << 18).map(|i| (0..3).map(|r| value::<f32>(r, i) / 7.0).fold(0.0, |a, b| a + b)).collect();
    for (rank, (_, _, summed)) in results.iter().enumerate() {
        // Sums of three values in ring order: close to any other order's.
        let worst = summed.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst < 1e-3, "rank {rank}: {worst}");
    }
    assert_eq!(results[0].2, results[2].2, "every rank ends with the same bits");
}
