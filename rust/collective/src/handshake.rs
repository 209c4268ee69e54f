//! The connection handshake: each side proves it knows the ring's key (derived from the job
//! secret; called the secret below) without sending it.
//!
//! The connecting rank sends a magic tag, its rank, the index of the connection (one per
//! parallel ring), whether it seals frames, and a fresh nonce; the accepting rank answers with
//! its own nonce and an HMAC-SHA256 over both nonces; the connecting rank checks it and answers
//! with its own HMAC, which also covers its rank, the index and the sealing. A peer without the secret
//! cannot produce either MAC, and a recorded exchange is useless later (fresh nonces).
//!
//! Both sides then derive the connection's frame key (an HMAC of the secret over both nonces,
//! the rank and the index), with which [`crate::seal`] protects everything sent after.
//!
//! The accepting rank ends the handshake with one byte: 1 when it takes the connection, 0 when
//! it refuses a peer that proved the secret but is not the one it waits for (another rank, a
//! repeated connection, other sealing). A connection closed without that byte was turned
//! away before its turn (see [`accept`]), and the connecting rank tries again within its
//! deadline; a refusal is final.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{CollectiveError, Result};
use crate::seal::KEY_BYTES;

const MAGIC: &[u8; 4] = b"STDP";
// 4: the move to a unix-domain socket follows the handshake (`crate::local`).
const VERSION: u8 = 4;
const NONCE: usize = 32;
const MAC: usize = 32;
const HELLO: usize = 4 + 1 + 4 + 1 + 1 + NONCE;

/// What a connecting rank says of itself.
#[derive(Debug, Clone, Copy)]
pub struct Hello {
    /// Its rank.
    pub rank: usize,
    /// Which of its parallel connections this is.
    pub index: u8,
    /// Whether it seals frames.
    pub sealed: bool,
}

/// Whom an accepting rank waits for.
#[derive(Debug, Clone, Copy)]
pub struct Expected {
    /// The previous rank of the ring.
    pub rank: usize,
    /// How many connections it opens.
    pub count: usize,
    /// Whether this rank seals frames: the peer must too.
    pub sealed: bool,
}

/// HMAC-SHA256 of `label` and `parts` under `secret`.
pub(crate) fn mac(secret: &[u8], label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(label);
    for part in parts {
        mac.update(part);
    }
    mac
}

/// The key of the frames on one connection: fresh for every connection, since both nonces are.
fn frame_key(secret: &[u8], accepting: &[u8], connecting: &[u8], rank: &[u8], index: u8) -> [u8; KEY_BYTES] {
    mac(secret, b"frames", &[accepting, connecting, rank, &[index]]).finalize().into_bytes().into()
}

fn nonce() -> Result<[u8; NONCE]> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n).map_err(|e| CollectiveError::local(format!("no randomness for a nonce: {e}")))?;
    Ok(n)
}

fn setup_error(what: &str, address: &str, e: std::io::Error) -> CollectiveError {
    CollectiveError::io(format!("{what} {address}"), e)
}

/// The longest a single connection attempt waits for the peer to accept.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(5);

/// A TCP connection to `address` (`host:port`), each resolved address tried for at most
/// `timeout`.
fn connect_within(address: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = None;
    for resolved in std::net::ToSocketAddrs::to_socket_addrs(address)? {
        match TcpStream::connect_timeout(&resolved, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "the address resolves to nothing")
    }))
}

/// How one try at the handshake went wrong.
enum Failed {
    /// Worth another try: the connection was turned away, or nothing listened yet.
    Again(CollectiveError),
    /// A wrong secret or a refusal: another try would end alike.
    Final(CollectiveError),
}

/// The longest pause between two tries of a connection.
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// Opens the connection `hello` describes to the peer at `address` and proves this rank
/// knows `secret`; tries again, until `timeout` has passed, while the peer is not listening
/// yet or turns the connection away before the handshake's end (a crowd of other
/// connections). Returns the connection and its frame key.
pub fn connect(
    address: &str,
    hello: Hello,
    secret: &[u8],
    timeout: Duration,
) -> Result<(TcpStream, [u8; KEY_BYTES])> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        match try_connect(address, hello, secret, deadline) {
            Ok(done) => return Ok(done),
            Err(Failed::Final(e)) => return Err(e),
            Err(Failed::Again(e)) => {
                if Instant::now() + pause >= deadline {
                    return Err(e);
                }
                thread::sleep(pause);
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

/// One try of [`connect`], over by `deadline`.
fn try_connect(
    address: &str,
    hello: Hello,
    secret: &[u8],
    deadline: Instant,
) -> std::result::Result<(TcpStream, [u8; KEY_BYTES]), Failed> {
    let Hello { rank, index, sealed } = hello;
    let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    // Each attempt is bounded too: a peer that drops SYNs must not hold this past the deadline.
    let mut stream = connect_within(address, left().min(CONNECT_ATTEMPT))
        .map_err(|e| Failed::Again(setup_error("cannot connect to", address, e)))?;
    let configure =
        |s: &TcpStream| s.set_read_timeout(Some(left())).and_then(|_| s.set_write_timeout(Some(left())));
    configure(&stream).map_err(|e| Failed::Final(setup_error("configuring", address, e)))?;
    let mine = nonce().map_err(Failed::Final)?;
    let rank_bytes = (rank as u32).to_le_bytes();
    let mut greeting = Vec::with_capacity(HELLO);
    greeting.extend_from_slice(MAGIC);
    greeting.push(VERSION);
    greeting.extend_from_slice(&rank_bytes);
    greeting.push(index);
    greeting.push(u8::from(sealed));
    greeting.extend_from_slice(&mine);
    let turned_away = |e: std::io::Error| {
        if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
            // The deadline passed: nothing is left to try again.
            return Failed::Final(setup_error("no answer in time to the handshake with", address, e));
        }
        Failed::Again(CollectiveError::Refused {
            address: address.to_string(),
            reason: format!(
                "the peer closed the handshake ({e}): it was turned away, or it does not share this \
                 job's secret"
            ),
        })
    };
    stream.write_all(&greeting).map_err(turned_away)?;
    let mut answer = [0u8; NONCE + MAC];
    stream.read_exact(&mut answer).map_err(turned_away)?;
    let (theirs, their_mac) = answer.split_at(NONCE);
    mac(secret, b"accept", &[&mine, theirs]).verify_slice(their_mac).map_err(|_| {
        Failed::Final(CollectiveError::Refused {
            address: address.to_string(),
            reason: "the listener does not know the job secret".into(),
        })
    })?;
    let proof = mac(secret, b"connect", &[theirs, &mine, &rank_bytes, &[index, u8::from(sealed)]])
        .finalize()
        .into_bytes();
    stream.write_all(&proof).map_err(turned_away)?;
    let mut verdict = [0u8; 1];
    stream.read_exact(&mut verdict).map_err(turned_away)?;
    if verdict[0] != 1 {
        return Err(Failed::Final(CollectiveError::Refused {
            address: address.to_string(),
            reason: "the listener refused this rank; its own log says why (another rank, a repeated \
                     connection, or ranks that disagree on spark.sparktrain.collective.seal)"
                .into(),
        }));
    }
    stream.set_nodelay(true).map_err(|e| Failed::Final(setup_error("configuring", address, e)))?;
    Ok((stream, frame_key(secret, theirs, &mine, &rank_bytes, index)))
}

/// What the accepting side learns from a handshake: what the peer said of itself, and the
/// connection's frame key.
type Answer = (Hello, [u8; KEY_BYTES]);

/// Fills `buf` from `stream` by `deadline`, however the bytes trickle in: a per-read
/// time-out alone would let a peer sending a byte at a time hold the handshake for minutes.
fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the handshake took too long"));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Runs the accepting side of one handshake, which must be over by `deadline`.
fn answer(stream: &mut TcpStream, secret: &[u8], deadline: Instant) -> std::result::Result<Answer, String> {
    let mut hello = [0u8; HELLO];
    read_by(stream, &mut hello, deadline).map_err(|e| format!("no greeting: {e}"))?;
    if &hello[..4] != MAGIC || hello[4] != VERSION {
        return Err("not a sparktrain data-plane greeting".into());
    }
    let rank_bytes: [u8; 4] = hello[5..9].try_into().expect("4 bytes");
    let index = hello[9];
    let sealing = hello[10];
    let theirs = &hello[11..];
    let mine = nonce().map_err(|e| e.to_string())?;
    let proof = mac(secret, b"accept", &[theirs, &mine]).finalize().into_bytes();
    let mut reply = Vec::with_capacity(NONCE + MAC);
    reply.extend_from_slice(&mine);
    reply.extend_from_slice(&proof);
    stream.write_all(&reply).map_err(|e| format!("handshake: {e}"))?;
    let mut their_mac = [0u8; MAC];
    read_by(stream, &mut their_mac, deadline).map_err(|e| format!("no proof: {e}"))?;
    mac(secret, b"connect", &[&mine, theirs, &rank_bytes, &[index, sealing]])
        .verify_slice(&their_mac)
        .map_err(|_| "it does not know the job secret".to_string())?;
    let key = frame_key(secret, &mine, theirs, &rank_bytes, index);
    let peer = Hello { rank: u32::from_le_bytes(rank_bytes) as usize, index, sealed: sealing != 0 };
    Ok((peer, key))
}

/// The longest one handshake may take on the accepting side.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(5);

/// Handshakes answered at once. When they are all under way, the oldest is cut off to make
/// room for the newest: the expected peer finishes its handshake within a round trip, so a
/// crowd of silent connections cannot keep it out, and it tries again if it was cut off.
const MAX_PENDING: usize = 64;

/// Refusals kept for the caller (the latest ones): a flood of connections cannot grow them.
const REFUSALS_KEPT: usize = 256;

/// A connection's handshake, answered on a thread of its own.
struct Answered {
    id: u64,
    stream: TcpStream,
    peer: std::net::SocketAddr,
    outcome: std::result::Result<Answer, String>,
}

/// A handshake under way: a handle on its connection, to cut it off.
struct Pending {
    id: u64,
    stream: TcpStream,
    peer: std::net::SocketAddr,
}

/// Adds `e` to `refused`, keeping the latest [`REFUSALS_KEPT`].
fn note(refused: &mut Vec<CollectiveError>, e: CollectiveError) {
    if refused.len() >= REFUSALS_KEPT {
        refused.remove(0);
    }
    refused.push(e);
}

/// Accepts connections on `listener` until the `expected` rank has opened its connections
/// with the secret, or `timeout` passes; returns them by index, each with its frame key.
/// Handshakes run concurrently (at most [`MAX_PENDING`] at once, the oldest cut off for a new
/// one beyond), each on its own thread, so a silent or slow caller delays no other; the
/// deadline holds whatever they do. Callers that fail the handshake, claim another rank,
/// repeat an index or disagree on sealing are refused and reported through `refused` (the
/// latest [`REFUSALS_KEPT`]).
pub fn accept(
    listener: &TcpListener,
    expected: Expected,
    secret: &[u8],
    timeout: Duration,
    refused: &mut Vec<CollectiveError>,
) -> Result<Vec<(TcpStream, [u8; KEY_BYTES])>> {
    let deadline = Instant::now() + timeout;
    let count = expected.count;
    let mut accepted: Vec<Option<(TcpStream, [u8; KEY_BYTES])>> = (0..count).map(|_| None).collect();
    listener.set_nonblocking(true).map_err(|e| CollectiveError::io("listener", e))?;
    let (done, answers) = std::sync::mpsc::channel::<Answered>();
    let mut pending: std::collections::VecDeque<Pending> = std::collections::VecDeque::new();
    let mut next_id = 0u64;
    loop {
        let mut busy = false;
        // Finished handshakes first, so that none is cut off for want of being looked at.
        while let Ok(Answered { id, mut stream, peer, outcome }) = answers.try_recv() {
            busy = true;
            let Some(at) = pending.iter().position(|p| p.id == id) else {
                // Cut off meanwhile (and recorded then); its caller tries again.
                continue;
            };
            pending.remove(at);
            let refusal = match outcome {
                Ok((Hello { rank, index, sealed }, key))
                    if rank == expected.rank
                        && sealed == expected.sealed
                        && accepted.get(index as usize).is_some_and(Option::is_none) =>
                {
                    let ready = stream
                        .write_all(&[1])
                        .and_then(|_| stream.set_read_timeout(Some(timeout)))
                        .and_then(|_| stream.set_write_timeout(Some(timeout)))
                        .and_then(|_| stream.set_nodelay(true));
                    match ready {
                        Ok(()) => {
                            accepted[index as usize] = Some((stream, key));
                            if accepted.iter().all(Option::is_some) {
                                return Ok(accepted.into_iter().flatten().collect());
                            }
                        }
                        // Its caller sees the connection close and tries again.
                        Err(e) => note(refused, CollectiveError::io(format!("handshake with {peer}"), e)),
                    }
                    continue;
                }
                Ok((Hello { rank, sealed, .. }, _)) if rank == expected.rank && sealed != expected.sealed => {
                    let said = |s: bool| if s { "sealed" } else { "in the clear" };
                    format!(
                        "it sends frames {}, this rank {}: every rank must have the same \
                         spark.sparktrain.collective.seal",
                        said(sealed),
                        said(expected.sealed)
                    )
                }
                Ok((Hello { rank, index, .. }, _)) if rank == expected.rank => {
                    format!("connection {index} is a repeat or beyond the {count} expected")
                }
                Ok((Hello { rank, .. }, _)) => {
                    format!("it claims rank {rank}, this rank expects rank {}", expected.rank)
                }
                Err(reason) => {
                    note(refused, CollectiveError::Refused { address: peer.to_string(), reason });
                    continue;
                }
            };
            // It proved the secret: tell it that this is final, so it does not try again.
            let _ = stream.write_all(&[0]);
            note(refused, CollectiveError::Refused { address: peer.to_string(), reason: refusal });
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                busy = true;
                if pending.len() >= MAX_PENDING
                    && let Some(oldest) = pending.pop_front()
                {
                    let _ = oldest.stream.shutdown(std::net::Shutdown::Both);
                    let reason = format!(
                        "cut off before the end of its handshake: {MAX_PENDING} handshakes were under way"
                    );
                    note(refused, CollectiveError::Refused { address: oldest.peer.to_string(), reason });
                }
                let wait = HANDSHAKE_WAIT.min(timeout);
                let configure = stream
                    .set_nonblocking(false)
                    .and_then(|_| stream.set_write_timeout(Some(wait)))
                    .and_then(|_| stream.try_clone());
                match configure {
                    Err(e) => note(refused, CollectiveError::io(format!("configuring {peer}"), e)),
                    Ok(handle) => {
                        let (done, secret, id) = (done.clone(), secret.to_vec(), next_id);
                        next_id += 1;
                        pending.push_back(Pending { id, stream: handle, peer });
                        thread::spawn(move || {
                            let mut stream = stream;
                            let outcome = answer(&mut stream, &secret, Instant::now() + wait);
                            let _ = done.send(Answered { id, stream, peer, outcome });
                        });
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(CollectiveError::io("accept", e)),
        }
        if Instant::now() >= deadline {
            return Err(CollectiveError::Timeout {
                op: "connect".into(),
                peer: expected.rank,
                address: "(its own address)".into(),
                waited: timeout,
            });
        }
        if !busy {
            thread::sleep(Duration::from_millis(2));
        }
    }
}
