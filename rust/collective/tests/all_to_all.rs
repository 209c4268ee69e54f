//! All-to-all over real sockets on 127.0.0.1, one thread per rank, on both routes: every rank
//! gets exactly what each rank sent it, whatever the sizes (zero, uneven, many frames); each
//! buffer crosses the network once on the mesh; a dead, failing or silent peer fails every
//! rank in time, naming it; a frame altered on the way fails the call; ranks out of step fail.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use sparktrain_collective::{CollectiveError, Communicator, Config, ReduceOp, Route};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

/// Connects `n` ranks whose listeners are `listeners`, reached at `peers`, each configured by
/// `configure`.
fn connect_through(
    listeners: Vec<TcpListener>,
    peers: Vec<String>,
    configure: impl Fn(Config) -> Config,
) -> Vec<Communicator> {
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, listener)| {
            let config =
                configure(Config::new(rank, peers.clone(), SECRET.to_vec(), Duration::from_secs(10)));
            thread::spawn(move || Communicator::connect(listener, config).unwrap())
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn listeners(n: usize) -> (Vec<TcpListener>, Vec<String>) {
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    (listeners, peers)
}

fn connect(n: usize, configure: impl Fn(Config) -> Config) -> Vec<Communicator> {
    let (listeners, peers) = listeners(n);
    connect_through(listeners, peers, configure)
}

fn on_route(n: usize, route: Route) -> Vec<Communicator> {
    connect(n, |c| Config { all_to_all: route, ..c })
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

/// What rank `from` sends rank `to` in round `round`: sizes from empty through a few bytes to
/// many frames, different for every pair and round, and bytes that name the pair.
fn item(from: usize, to: usize, round: usize) -> Vec<u8> {
    let sizes = [0, 1, 7, 8 << 10, (8 << 10) + 1, 100_003, 700_001];
    let len = sizes[(from * 5 + to * 3 + round) % sizes.len()];
    (0..len).map(|i| (i * 31 + from * 7 + to * 13 + round) as u8).collect()
}

#[test]
fn every_rank_gets_what_each_rank_sent_it_whatever_the_sizes() {
    for route in [Route::Mesh, Route::Ring] {
        for n in [2, 3, 4] {
            let results = on_all(on_route(n, route), move |c| {
                let (rank, n) = (c.rank(), c.size());
                let mut rounds = Vec::new();
                for round in 0..8 {
                    let items: Vec<Vec<u8>> = (0..n).map(|to| item(rank, to, round)).collect();
                    rounds.push(c.all_to_all(&items).unwrap());
                    // Other collectives in between stay in step.
                    let mut token = [1i64];
                    c.all_reduce(&mut token, ReduceOp::Sum).unwrap();
                    assert_eq!(token[0], n as i64);
                }
                // Every item empty.
                rounds.push(c.all_to_all(&vec![Vec::<u8>::new(); n]).unwrap());
                rounds
            });
            for (c, rounds) in results {
                let rank = c.rank();
                for (round, got) in rounds.iter().enumerate().take(8) {
                    for (from, bytes) in got.iter().enumerate() {
                        assert!(
                            *bytes == item(from, rank, round),
                            "{route:?} n={n} round {round}: {from}→{rank}"
                        );
                    }
                }
                assert_eq!(rounds[8], vec![Vec::<u8>::new(); n]);
            }
        }
    }
}

#[test]
fn on_the_mesh_each_buffer_crosses_the_network_once_along_the_ring_k_links() {
    const ITEM: usize = 1 << 20;
    let n = 4;
    for (route, hops) in [(Route::Mesh, 3.0), (Route::Ring, 6.0)] {
        let results = on_all(on_route(n, route), |c| {
            let items = vec![vec![c.rank() as u8; ITEM]; c.size()];
            // The first call connects the mesh: measure the second.
            c.all_to_all(&items).unwrap();
            let before = c.bytes_sent();
            c.all_to_all(&items).unwrap();
            c.bytes_sent() - before
        });
        for (c, sent) in results {
            // To every other rank: 1, 2 and 3 links away along the ring; once each on the mesh.
            let ratio = sent as f64 / ITEM as f64;
            assert!((hops..hops * 1.01).contains(&ratio), "{route:?} rank {}: {ratio} MiB sent", c.rank());
        }
    }
}

#[test]
fn one_rank_gets_its_own_item_back_and_a_wrong_count_is_refused() {
    let mut comms = connect(1, |c| c);
    assert_eq!(comms[0].all_to_all(&[b"mine"]).unwrap(), vec![b"mine".to_vec()]);
    let err = comms[0].all_to_all(&[b"a".as_slice(), b"b"]).unwrap_err();
    assert!(matches!(err, CollectiveError::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("2 items for 1 ranks"), "{err}");
}

#[test]
fn a_dead_peer_fails_every_rank_at_once_naming_it() {
    let mut comms = on_route(4, Route::Mesh);
    // The mesh is connected by a first call on every rank.
    let comms_back = on_all(std::mem::take(&mut comms), |c| c.all_to_all(&vec![vec![1u8; 10]; 4]).unwrap());
    let mut comms: Vec<Communicator> = comms_back.into_iter().map(|(c, _)| c).collect();
    let dead = comms.remove(2);
    let start = Instant::now();
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        drop(dead);
    });
    let results = on_all(comms, |c| c.all_to_all(&vec![vec![7u8; 1 << 20]; 4]).unwrap_err());
    killer.join().unwrap();
    let texts: Vec<String> = results.iter().map(|(_, e)| e.to_string()).collect();
    for (c, err) in &results {
        assert!(matches!(err, CollectiveError::PeerFailed { .. }), "rank {}: {err}", c.rank());
        assert!(err.to_string().starts_with("all_to_all: rank "), "rank {}: {err}", c.rank());
    }
    assert!(texts.iter().any(|t| t.contains("rank 2 (")), "{texts:?}");
    // Far below the 10 s time-out.
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
}

#[test]
fn a_rank_that_fails_inside_the_call_fails_every_rank_with_it() {
    // Rank 2 refuses what rank 0 announces (over its limit) after the header: its failure
    // cuts its connections, and every other rank's call fails at once.
    let comms = connect(4, |c| Config { max_gather_bytes: if c.rank == 2 { 1000 } else { 1 << 30 }, ..c });
    let start = Instant::now();
    let results = on_all(comms, |c| {
        let items: Vec<Vec<u8>> = (0..4).map(|to| vec![0u8; if to == 2 { 5000 } else { 300_000 }]).collect();
        c.all_to_all(&items).map(|_| ()).unwrap_err()
    });
    for (c, err) in &results {
        assert!(matches!(err, CollectiveError::PeerFailed { .. }), "rank {}: {err}", c.rank());
    }
    let rank2 = &results[2].1.to_string();
    assert!(rank2.contains("announced 5000 bytes, more than the limit of 1000"), "{rank2}");
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    // The ring is broken for good on every rank.
    for (mut c, _) in results {
        let err = c.barrier().unwrap_err().to_string();
        assert!(err.contains("broken by an earlier failure"), "{err}");
    }
}

#[test]
fn a_silent_peer_fails_the_others_at_the_time_out_naming_it() {
    let comms = connect(3, |c| Config { timeout: Duration::from_millis(800), ..c });
    let warm = on_all(comms, |c| c.all_to_all(&vec![vec![1u8; 100]; 3]).unwrap());
    let comms: Vec<Communicator> = warm.into_iter().map(|(c, _)| c).collect();
    let results = on_all(comms, |c| {
        if c.rank() == 1 {
            thread::sleep(Duration::from_secs(3)); // alive, connections open, silent
            return None;
        }
        let start = Instant::now();
        let err = c.all_to_all(&vec![vec![5u8; 100_000]; 3]).unwrap_err().to_string();
        Some((err, start.elapsed()))
    });
    let errors: Vec<(String, Duration)> = results.into_iter().filter_map(|(_, e)| e).collect();
    assert!(errors.iter().any(|(e, _)| e.contains("rank 1") && e.contains("did not answer")), "{errors:?}");
    for (err, waited) in &errors {
        assert!(err.starts_with("all_to_all"), "{err}");
        // The time-out, not the silent rank's three seconds.
        assert!(*waited < Duration::from_millis(2000), "{err} after {waited:?}");
    }
}

/// Relays every connection made to the returned address to `target`, flipping one bit of the
/// byte at `offset` of what the caller sends (past the handshake, in the sealed frames).
fn tampering_proxy(target: String, offset: usize) -> String {
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = proxy.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for caller in proxy.incoming() {
            let Ok(caller) = caller else { return };
            let Ok(server) = TcpStream::connect(&target) else { return };
            let (mut caller_in, mut server_out) = (caller.try_clone().unwrap(), server.try_clone().unwrap());
            thread::spawn(move || {
                let mut seen = 0;
                let mut buf = [0u8; 4096];
                while let Ok(n) = caller_in.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if (seen..seen + n).contains(&offset) {
                        buf[offset - seen] ^= 0x10;
                    }
                    seen += n;
                    if server_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = server_out.shutdown(std::net::Shutdown::Both);
            });
            let (mut server_in, mut caller_out) = (server, caller);
            thread::spawn(move || {
                let _ = std::io::copy(&mut server_in, &mut caller_out);
                let _ = caller_out.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    address
}

#[test]
fn a_frame_altered_on_the_way_fails_the_call_naming_its_sender() {
    // Every connection to rank 1 passes through a proxy that flips a bit 5000 bytes in: far
    // past the handshake and the ring's small messages, inside the all-to-all's buffers.
    let (listeners, mut peers) = listeners(3);
    peers[1] = tampering_proxy(peers[1].clone(), 5000);
    // Over TCP, as between hosts: on one host the ranks would move off the proxy's path.
    let comms = connect_through(listeners, peers, |c| Config { local: false, ..c });
    let results = on_all(comms, |c| {
        let outcome = c.all_to_all(&vec![vec![c.rank() as u8; 100_000]; 3]).map(|_| ());
        // A rank that had all it needed before rank 1 failed ends its call; its next one fails.
        (outcome.is_ok(), outcome.and_then(|_| c.barrier()).unwrap_err().to_string())
    });
    let (completed, rank1) = &results[1].1;
    assert!(!completed);
    assert!(rank1.starts_with("all_to_all: rank 0 ("), "{rank1}");
    assert!(rank1.contains("failed its authentication check"), "{rank1}");
}

#[test]
fn ranks_out_of_step_fail_instead_of_mixing_data() {
    let results = on_all(on_route(2, Route::Mesh), |c| {
        if c.rank() == 0 {
            c.all_to_all(&[b"x".as_slice(), b"y"]).map(|_| ()).unwrap_err().to_string()
        } else {
            c.all_gather(b"z").map(|_| ()).unwrap_err().to_string()
        }
    });
    for (_, err) in results {
        assert!(err.contains("out of step") && err.contains("all_to_all"), "{err}");
    }
    // Ranks that disagree on the route are out of step too.
    let comms =
        connect(2, |c| Config { all_to_all: if c.rank == 0 { Route::Ring } else { Route::Mesh }, ..c });
    let results =
        on_all(comms, |c| c.all_to_all(&[b"x".as_slice(), b"y"]).map(|_| ()).unwrap_err().to_string());
    for (_, err) in results {
        assert!(err.contains("out of step"), "{err}");
    }
}
