//! The communicator: each rank holds a connection to the next rank of the ring (to send) and
//! one from the previous rank (to receive), and runs every collective over them.
//!
//! - All-reduce is a reduce-scatter then an all-gather: each rank sends 2(N-1)/N of the
//!   buffer. Within a step, sending, receiving and reducing overlap chunk by chunk.
//! - Every segment is reduced in the same ring order on every run, and the all-gather copies
//!   the reduced values, so all ranks get bit-identical results, run after run.
//! - Each call starts with a header that names the operation, type, reduction, size and call
//!   number, so ranks that call different things fail at once instead of mixing data.
//! - A failed call shuts both connections down: the neighbours fail at once too, and so on
//!   around the ring, so no rank waits for its time-out when a peer is gone.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use crate::element::{Element, ReduceOp};
use crate::error::{CollectiveError, Result};
use crate::handshake;

/// How a communicator connects and behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// This rank, `0..size`.
    pub rank: usize,
    /// `host:port` of every rank's listener, by rank.
    pub peers: Vec<String>,
    /// The job secret, proven (never sent) when connecting.
    pub secret: Vec<u8>,
    /// How long any wait for a peer may take.
    pub timeout: Duration,
    /// Bytes per chunk of the pipeline.
    pub chunk_bytes: usize,
}

/// The default chunk size: large enough to amortize system calls, small enough to overlap.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

const HEADER: usize = 24;

struct Links {
    next: TcpStream,
    prev: TcpStream,
}

/// One rank's end of the ring.
pub struct Communicator {
    config: Config,
    links: Option<Links>,
    calls: u64,
    /// Connections refused while setting up (wrong secret, wrong rank).
    refused: Vec<CollectiveError>,
}

#[derive(Clone, Copy)]
enum Side {
    Next,
    Prev,
}

impl Communicator {
    /// Connects the ring: accepts the previous rank on `listener` while connecting to the next.
    pub fn connect(listener: TcpListener, config: Config) -> Result<Self> {
        let size = config.peers.len();
        if config.rank >= size {
            return Err(CollectiveError::InvalidArgument(format!(
                "rank {} is out of range for {size} peers",
                config.rank
            )));
        }
        if config.chunk_bytes < 64 {
            return Err(CollectiveError::InvalidArgument(format!(
                "chunk_bytes {} is too small",
                config.chunk_bytes
            )));
        }
        let mut refused = Vec::new();
        let links = if size == 1 {
            None
        } else {
            let next_rank = (config.rank + 1) % size;
            let prev_rank = (config.rank + size - 1) % size;
            let (prev, next) = thread::scope(|scope| {
                let accepting = scope.spawn(|| {
                    handshake::accept(&listener, prev_rank, &config.secret, config.timeout, &mut refused)
                });
                let next =
                    handshake::connect(&config.peers[next_rank], config.rank, &config.secret, config.timeout);
                let prev =
                    accepting.join().unwrap_or_else(|_| Err(CollectiveError::Io("accept panicked".into())));
                (prev, next)
            });
            Some(Links { next: next?, prev: prev? })
        };
        Ok(Communicator { config, links, calls: 0, refused })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.config.rank
    }

    /// How many ranks the ring has.
    pub fn size(&self) -> usize {
        self.config.peers.len()
    }

    /// Connections refused while connecting.
    pub fn refused(&self) -> &[CollectiveError] {
        &self.refused
    }

    fn peer_of(&self, side: Side) -> usize {
        let n = self.size();
        match side {
            Side::Next => (self.rank() + 1) % n,
            Side::Prev => (self.rank() + n - 1) % n,
        }
    }

    fn io_error(&self, op: &str, side: Side, e: io::Error) -> CollectiveError {
        let peer = self.peer_of(side);
        let address = self.config.peers[peer].clone();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                CollectiveError::Timeout { op: op.to_string(), peer, address, waited: self.config.timeout }
            }
            io::ErrorKind::UnexpectedEof => CollectiveError::PeerFailed {
                op: op.to_string(),
                peer,
                address,
                reason: "it closed the connection".into(),
            },
            _ => CollectiveError::PeerFailed { op: op.to_string(), peer, address, reason: e.to_string() },
        }
    }

    /// Runs one collective: checks that the previous rank called the same thing, then `body`.
    /// Any failure breaks the ring for good, so the neighbours fail at once.
    fn call<T>(
        &mut self,
        op: &str,
        signature: [u8; 3],
        len: u64,
        body: impl FnOnce(&mut Self, &str) -> Result<T>,
    ) -> Result<T> {
        if self.links.is_none() {
            if self.size() == 1 {
                return body(self, op);
            }
            return Err(CollectiveError::InvalidArgument(format!(
                "{op}: the ring was broken by an earlier failure"
            )));
        }
        self.calls += 1;
        let mut header = [0u8; HEADER];
        header[..3].copy_from_slice(&signature);
        header[8..16].copy_from_slice(&self.calls.to_le_bytes());
        header[16..24].copy_from_slice(&len.to_le_bytes());
        let outcome = self.exchange_header(op, &header).and_then(|_| body(self, op));
        if outcome.is_err()
            && let Some(links) = self.links.take()
        {
            let _ = links.next.shutdown(Shutdown::Both);
            let _ = links.prev.shutdown(Shutdown::Both);
        }
        outcome
    }

    fn exchange_header(&mut self, op: &str, header: &[u8; HEADER]) -> Result<()> {
        let mut theirs = [0u8; HEADER];
        self.send_recv(op, header, &mut theirs)?;
        if theirs != *header {
            let describe = |h: &[u8; HEADER]| {
                format!(
                    "call #{} ({}, type {}, op {}, {} elements)",
                    u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")),
                    match h[0] {
                        1 => "all_reduce",
                        2 => "broadcast",
                        3 => "all_gather",
                        _ => "unknown",
                    },
                    h[1],
                    h[2],
                    u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"))
                )
            };
            return Err(CollectiveError::OutOfStep {
                op: op.to_string(),
                peer: self.peer_of(Side::Prev),
                ours: describe(header),
                theirs: describe(&theirs),
            });
        }
        Ok(())
    }

    /// Sends `out` to the next rank while receiving `into` from the previous one.
    fn send_recv(&mut self, op: &str, out: &[u8], into: &mut [u8]) -> Result<()> {
        let links = self.links.as_mut().expect("connected");
        let (next, prev) = (&mut links.next, &mut links.prev);
        let (sent, received) = thread::scope(|scope| {
            let sending = scope.spawn(|| next.write_all(out));
            let received = prev.read_exact(into);
            (sending.join().unwrap_or_else(|_| Err(io::Error::other("send panicked"))), received)
        });
        sent.map_err(|e| self.io_error(op, Side::Next, e))?;
        received.map_err(|e| self.io_error(op, Side::Prev, e))
    }

    /// Sends `out` to the next rank chunk by chunk while receiving as many bytes from the
    /// previous one, handing each received chunk to `on_chunk(offset, bytes)`.
    fn stream<F: FnMut(usize, &[u8])>(
        &mut self,
        op: &str,
        out: &[u8],
        len: usize,
        mut on_chunk: F,
    ) -> Result<()> {
        let chunk = self.config.chunk_bytes;
        let links = self.links.as_mut().expect("connected");
        let (next, prev) = (&mut links.next, &mut links.prev);
        let mut scratch = vec![0u8; chunk.min(len)];
        let (sent, received) = thread::scope(|scope| {
            let sending = scope.spawn(|| out.chunks(chunk).try_for_each(|c| next.write_all(c)));
            let mut offset = 0;
            let received = loop {
                if offset >= len {
                    break Ok(());
                }
                let n = chunk.min(len - offset);
                if let Err(e) = prev.read_exact(&mut scratch[..n]) {
                    break Err(e);
                }
                on_chunk(offset, &scratch[..n]);
                offset += n;
            };
            (sending.join().unwrap_or_else(|_| Err(io::Error::other("send panicked"))), received)
        });
        received.map_err(|e| self.io_error(op, Side::Prev, e))?;
        sent.map_err(|e| self.io_error(op, Side::Next, e))
    }

    /// Reduces `data` element-wise across all ranks, in place; every rank ends with the same
    /// bits.
    pub fn all_reduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let name = format!("all_reduce({}, {op:?})", T::NAME);
        self.call(&name, [1, T::CODE, op.code()], data.len() as u64, |c, name| {
            let n = c.size();
            if n > 1 {
                let total = data.len();
                let bounds = |i: usize| (i * total / n, (i + 1) * total / n);
                let rank = c.rank();
                // Reduce-scatter: after step s, segment (rank - s - 1) holds s + 2 ranks' values.
                for s in 0..n - 1 {
                    let send = bounds((rank + n - s) % n);
                    let recv = bounds((rank + 2 * n - s - 1) % n);
                    c.step(name, data, send, recv, Some(op))?;
                }
                // All-gather: pass the reduced segments around.
                for s in 0..n - 1 {
                    let send = bounds((rank + 1 + n - s) % n);
                    let recv = bounds((rank + n - s) % n);
                    c.step(name, data, send, recv, None)?;
                }
            }
            if op == ReduceOp::Mean {
                T::divide(data, n);
            }
            Ok(())
        })
    }

    /// One ring step: sends `data[send]`, receives into `data[recv]` (reducing with `op`, or
    /// copying when None). The two ranges never overlap.
    fn step<T: Element>(
        &mut self,
        name: &str,
        data: &mut [T],
        send: (usize, usize),
        recv: (usize, usize),
        op: Option<ReduceOp>,
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        // Split so the sender thread reads one segment while this thread writes the other
        // (non-empty segments never overlap).
        let (out, into): (&[T], &mut [T]) = if send.0 == send.1 {
            (&[], &mut data[recv.0..recv.1])
        } else if recv.0 == recv.1 {
            (&data[send.0..send.1], &mut [])
        } else if send.0 < recv.0 {
            let (a, b) = data.split_at_mut(recv.0);
            (&a[send.0..send.1], &mut b[..recv.1 - recv.0])
        } else {
            let (a, b) = data.split_at_mut(send.0);
            (&b[..send.1 - send.0], &mut a[recv.0..recv.1])
        };
        let len = std::mem::size_of_val(into);
        let mut pending: Vec<u8> = Vec::new();
        let mut values: Vec<T> = Vec::new();
        let mut reduce_bytes = |offset: usize, bytes: &[u8]| {
            // Chunks hold whole elements unless the chunk size is not a multiple of the
            // element size; carry a partial element over to the next chunk.
            let start = offset - pending.len();
            pending.extend_from_slice(bytes);
            let whole = pending.len() / size * size;
            values.clear();
            values.resize(whole / size, T::zeroed());
            bytemuck::cast_slice_mut::<T, u8>(&mut values).copy_from_slice(&pending[..whole]);
            let target = &mut into[start / size..(start + whole) / size];
            match op {
                Some(op) => T::combine(op, target, &values),
                None => target.copy_from_slice(&values),
            }
            pending.drain(..whole);
        };
        self.stream(name, bytemuck::cast_slice(out), len, &mut reduce_bytes)
    }

    /// Copies `data` from rank `root` to every rank, chunk by chunk along the ring.
    pub fn broadcast(&mut self, data: &mut [u8], root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(CollectiveError::InvalidArgument(format!(
                "root {root} is out of range for {} ranks",
                self.size()
            )));
        }
        let name = format!("broadcast(root {root})");
        self.call(&name, [2, 0, root as u8], data.len() as u64, |c, name| {
            let n = c.size();
            if n == 1 {
                return Ok(());
            }
            let chunk = c.config.chunk_bytes;
            let last = (root + n - 1) % n;
            let me = c.rank();
            for piece in data.chunks_mut(chunk) {
                let links = c.links.as_mut().expect("connected");
                if me != root
                    && let Err(e) = links.prev.read_exact(piece)
                {
                    return Err(c.io_error(name, Side::Prev, e));
                }
                let links = c.links.as_mut().expect("connected");
                if me != last
                    && let Err(e) = links.next.write_all(piece)
                {
                    return Err(c.io_error(name, Side::Next, e));
                }
            }
            Ok(())
        })
    }

    /// Every rank's `data` (any length), by rank.
    pub fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.call("all_gather", [3, 0, 0], 0, |c, name| {
            let n = c.size();
            let rank = c.rank();
            let mut items: Vec<Vec<u8>> = vec![Vec::new(); n];
            items[rank] = data.to_vec();
            for s in 0..n.saturating_sub(1) {
                let send = (rank + n - s) % n;
                let recv = (rank + 2 * n - s - 1) % n;
                let mut len = [0u8; 8];
                c.send_recv(name, &(items[send].len() as u64).to_le_bytes(), &mut len)?;
                let mut received = vec![0u8; u64::from_le_bytes(len) as usize];
                let out = std::mem::take(&mut items[send]);
                let outcome = c.send_recv(name, &out, &mut received);
                items[send] = out;
                outcome?;
                items[recv] = received;
            }
            Ok(items)
        })
    }

    /// Returns once every rank has called it.
    pub fn barrier(&mut self) -> Result<()> {
        let mut token = [0i64];
        self.all_reduce(&mut token, ReduceOp::Sum)
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if let Some(links) = self.links.take() {
            let _ = links.next.shutdown(Shutdown::Both);
            let _ = links.prev.shutdown(Shutdown::Both);
        }
    }
}
