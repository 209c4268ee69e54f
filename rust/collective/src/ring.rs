//! The communicator: each rank holds connections to the next rank of the ring (to send) and
//! from the previous rank (to receive), one pair per parallel ring, and runs every collective
//! over them.
//!
//! - All-reduce is a reduce-scatter then an all-gather: each rank sends 2(N-1)/N of the
//!   buffer. Within a step, sending, receiving and reducing overlap chunk by chunk. With
//!   several parallel rings, a large buffer is cut into as many parts, reduced side by side.
//! - Every segment is reduced in the same ring order on every run, and the all-gather copies
//!   the reduced values, so all ranks get bit-identical results, run after run (with 16-bit
//!   wire formats too: a segment's owner rounds its own copy as the others receive it).
//! - Each call starts with a header that names the operation, type, reduction, wire format,
//!   size and call number, so ranks that call different things fail at once instead of
//!   mixing data.
//! - A failed call shuts every connection down: the neighbours fail at once too, and so on
//!   around the ring, so no rank waits for its time-out when a peer is gone.
//! - Every message that crosses a network is sealed ([`crate::seal`]): a frame that was
//!   altered on the way breaks the ring like a lost peer does. Connections between ranks on
//!   one host move to unix-domain sockets and go unsealed ([`crate::local`]).
//! - All-to-all ([`crate::all_to_all`]) runs over direct connections to every rank, made
//!   from the same listener with the same handshake the first time a job needs them.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use crate::all_to_all::{self, Mesh, Route};
use crate::element::{Element, ReduceOp};
use crate::error::{CollectiveError, Result};
use crate::handshake;
use crate::local::{self, Stream};
use crate::seal::{KEY_BYTES, Opener, Sealer};
use crate::wire::Wire;

/// What the ring needs of a connection: bytes both ways, a time-out and a way to cut it.
pub trait Connection: Read + Write + Send {
    /// Bounds every later read and write by `timeout`.
    fn set_timeout(&self, timeout: Duration) -> io::Result<()>;
    /// Cuts the connection both ways, so the peer's next read or write fails at once.
    fn shutdown(&self);
    /// How long the connection has had data in flight, where the system says ([`crate::link`]).
    fn busy_time(&self) -> Option<Duration> {
        None
    }
    /// Whether the connection stays within one host ([`crate::local`]): its frames are not
    /// sealed.
    fn is_local(&self) -> bool {
        false
    }
}

impl Connection for TcpStream {
    fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }

    fn shutdown(&self) {
        let _ = TcpStream::shutdown(self, Shutdown::Both);
    }

    fn busy_time(&self) -> Option<Duration> {
        crate::link::busy_time(self)
    }
}

/// How a communicator connects and behaves. Its `Debug` form leaves the key out.
#[derive(Clone)]
pub struct Config {
    /// This rank, `0..size`.
    pub rank: usize,
    /// `host:port` of every rank's listener, by rank.
    pub peers: Vec<String>,
    /// The ring's key, proven (never sent) when connecting: a key of the data plane's own,
    /// derived from the job secret (`JobSecret::ring_key` in `sparktrain-cluster`).
    pub secret: Vec<u8>,
    /// How long any wait for a peer may take.
    pub timeout: Duration,
    /// Bytes per chunk of the pipeline.
    pub chunk_bytes: usize,
    /// Parallel rings (TCP connection pairs); large all-reduces are split across them.
    pub streams: usize,
    /// The most bytes a peer may announce for its item of an all-gather or its buffer of an
    /// all-to-all.
    pub max_gather_bytes: u64,
    /// Whether frames are sealed (encrypted and authenticated, see [`crate::seal`]); every
    /// rank must agree. Only a job on a network it trusts should turn it off.
    pub sealed: bool,
    /// How all-to-all buffers travel: over direct connections between every pair of ranks
    /// (the default), or forwarded along the ring.
    pub all_to_all: Route,
    /// Whether connections between ranks in one network namespace move to unix-domain
    /// sockets, unsealed ([`crate::local`]); both ends must want it, or they stay on TCP.
    pub local: bool,
}

impl Config {
    /// A configuration with the default chunk size, one ring and the default all-gather limit.
    pub fn new(rank: usize, peers: Vec<String>, secret: Vec<u8>, timeout: Duration) -> Self {
        Config {
            rank,
            peers,
            secret,
            timeout,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            streams: 1,
            max_gather_bytes: MAX_GATHER_BYTES,
            sealed: true,
            all_to_all: Route::Mesh,
            local: true,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself: a configuration may end up in a log or a panic message.
        f.debug_struct("Config")
            .field("rank", &self.rank)
            .field("peers", &self.peers)
            .field("secret", &"<redacted>")
            .field("timeout", &self.timeout)
            .field("chunk_bytes", &self.chunk_bytes)
            .field("streams", &self.streams)
            .field("max_gather_bytes", &self.max_gather_bytes)
            .field("sealed", &self.sealed)
            .field("all_to_all", &self.all_to_all)
            .field("local", &self.local)
            .finish()
    }
}

/// The default chunk size: large enough to amortize system calls, small enough to overlap.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

/// The most parallel rings a communicator opens.
pub const MAX_STREAMS: usize = 16;

/// All-reduces smaller than this run on one ring: more threads would cost more than they save.
const SPLIT_BYTES: usize = 1 << 20;

/// Messages this small are written before reading, on the calling thread: the sockets'
/// buffers take them whole, and a thread costs more than the transfer.
pub(crate) const INLINE_BYTES: usize = 8 << 10;

const HEADER: usize = 24;

/// One ring's pair of connections, each with its frame key.
pub(crate) struct Link<C: Connection> {
    pub(crate) next: Sealer<C>,
    pub(crate) prev: Opener<C>,
}

impl<C: Connection> Link<C> {
    /// The link over `next` (to send) and `prev` (to receive), each with its frame key;
    /// frames travel in the clear unless `sealed` and the connection leaves the host.
    pub(crate) fn new(next: (C, [u8; KEY_BYTES]), prev: (C, [u8; KEY_BYTES]), sealed: bool) -> Self {
        let (next_key, prev_key) = (sealing(&next.0, &next.1, sealed), sealing(&prev.0, &prev.1, sealed));
        Link { next: Sealer::new(next.0, next_key.as_ref()), prev: Opener::new(prev.0, prev_key.as_ref()) }
    }

    fn shutdown(&self) {
        self.next.stream().shutdown();
        self.prev.stream().shutdown();
    }
}

/// The key `stream`'s frames are sealed under: none in the clear, or within the host.
pub(crate) fn sealing<C: Connection>(
    stream: &C,
    key: &[u8; KEY_BYTES],
    sealed: bool,
) -> Option<[u8; KEY_BYTES]> {
    (sealed && !stream.is_local()).then_some(*key)
}

#[derive(Clone, Copy)]
pub(crate) enum Side {
    Next,
    Prev,
}

/// What errors need to know about this rank's place in the ring.
pub(crate) struct Place<'a> {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) peers: &'a [String],
    pub(crate) timeout: Duration,
    pub(crate) chunk_bytes: usize,
    pub(crate) max_gather_bytes: u64,
}

impl Place<'_> {
    fn peer(&self, side: Side) -> usize {
        match side {
            Side::Next => (self.rank + 1) % self.size,
            Side::Prev => (self.rank + self.size - 1) % self.size,
        }
    }

    pub(crate) fn error(&self, op: &str, side: Side, e: io::Error) -> CollectiveError {
        self.error_with(op, self.peer(side), e)
    }

    /// The error of `op` when the connection to or from `peer` failed with `e`.
    pub(crate) fn error_with(&self, op: &str, peer: usize, e: io::Error) -> CollectiveError {
        let address = self.peers[peer].clone();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                CollectiveError::Timeout { op: op.to_string(), peer, address, waited: self.timeout }
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
}

/// The default most bytes a peer may announce for its item of an all-gather; more is refused
/// (the ring then breaks) rather than allocated.
pub const MAX_GATHER_BYTES: u64 = 1 << 30;

/// One rank's end of the ring, over TCP connections or, between ranks on one host, unix-domain
/// sockets ([`Stream`]).
pub struct Communicator<C: Connection = Stream> {
    config: Config,
    links: Vec<Link<C>>,
    /// The direct connections of all-to-all, made when first needed.
    mesh: Mesh<C>,
    broken: bool,
    calls: u64,
    /// Connections refused while setting up (wrong secret, wrong rank).
    refused: Vec<CollectiveError>,
}

impl Communicator {
    /// Connects the ring: accepts the previous rank on `listener` while connecting to the next.
    pub fn connect(listener: TcpListener, config: Config) -> Result<Self> {
        check(&config)?;
        let size = config.peers.len();
        let mut refused = Vec::new();
        let mut links = Vec::new();
        if size > 1 {
            let next_rank = (config.rank + 1) % size;
            let prev_rank = (config.rank + size - 1) % size;
            let (prev, next) = thread::scope(|scope| {
                let accepting = scope.spawn(|| {
                    let Config { secret, timeout, streams, sealed, .. } = &config;
                    let expected = handshake::Expected { rank: prev_rank, count: *streams, sealed: *sealed };
                    handshake::accept(&listener, expected, secret, *timeout, &mut refused)
                });
                let next: Result<Vec<_>> = (0..config.streams)
                    .map(|index| {
                        let address = &config.peers[next_rank];
                        let hello =
                            handshake::Hello { rank: config.rank, index: index as u8, sealed: config.sealed };
                        handshake::connect(address, hello, &config.secret, config.timeout)
                    })
                    .collect();
                let prev =
                    accepting.join().unwrap_or_else(|_| Err(CollectiveError::local("accept panicked")));
                (prev, next)
            });
            let (next, prev) = (next?, prev?);
            // A peer host that vanishes must not hold a wait longer than the time-out (the
            // engine's checkpoint barrier waits up to an hour for a live but slow chief).
            for (stream, _) in next.iter().chain(&prev) {
                crate::link::bound_silence(stream, config.timeout)
                    .map_err(|e| CollectiveError::io("bounding a ring connection's silence", e))?;
            }
            let (next, prev) = local::settle(next, prev, &config, next_rank, prev_rank)?;
            links =
                next.into_iter().zip(prev).map(|(next, prev)| Link::new(next, prev, config.sealed)).collect();
        }
        let mesh = Mesh::dialled_later(all_to_all::tcp_dialer(listener));
        Ok(Communicator { config, links, mesh, broken: false, calls: 0, refused })
    }
}

/// Refuses a configuration no ring can run with.
fn check(config: &Config) -> Result<()> {
    let size = config.peers.len();
    if config.rank >= size {
        return Err(CollectiveError::InvalidArgument(format!(
            "rank {} is out of range for {size} peers",
            config.rank
        )));
    }
    // The chunk size travels in each call's header as 32 bits.
    if !(64..=u32::MAX as usize).contains(&config.chunk_bytes) {
        return Err(CollectiveError::InvalidArgument(format!(
            "chunk_bytes must be 64 to {}, not {}",
            u32::MAX,
            config.chunk_bytes
        )));
    }
    if !(1..=MAX_STREAMS).contains(&config.streams) {
        return Err(CollectiveError::InvalidArgument(format!(
            "streams must be 1 to {MAX_STREAMS}, not {}",
            config.streams
        )));
    }
    Ok(())
}

impl<C: Connection> Communicator<C> {
    /// A communicator over links already connected and keyed: how the untrusted-input
    /// exercises run the real collectives over scripted connections.
    pub(crate) fn over(config: Config, links: Vec<Link<C>>, mesh: Mesh<C>) -> Result<Self> {
        check(&config)?;
        Ok(Communicator { config, links, mesh, broken: false, calls: 0, refused: Vec::new() })
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

    /// How long this rank's busiest connection to the next rank has had data in flight since
    /// the ring was connected: a rank on a slow link sees it grow faster than the others do
    /// (see [`crate::link`]). None for a ring of one, or where the system does not say.
    pub fn send_busy(&self) -> Option<Duration> {
        self.links.iter().filter_map(|link| link.next.stream().busy_time()).max()
    }

    /// How many of this rank's ring connections (to the next rank and from the previous one,
    /// over every parallel ring) stay within the host ([`crate::local`]).
    pub fn local_connections(&self) -> usize {
        self.links
            .iter()
            .map(|l| usize::from(l.next.stream().is_local()) + usize::from(l.prev.stream().is_local()))
            .sum()
    }

    /// Bytes this rank has written to its connections so far, frames' tags included: what
    /// its collectives cost on the wire.
    pub fn bytes_sent(&self) -> u64 {
        let ring: u64 = self.links.iter().map(|l| l.next.bytes_sent()).sum();
        ring + self.mesh.bytes_sent()
    }

    /// Runs one collective: checks that the previous rank called the same thing, then `body`.
    /// Any failure breaks the ring for good, so the neighbours fail at once.
    fn call<R>(
        &mut self,
        op: &str,
        signature: [u8; 4],
        len: u64,
        body: impl FnOnce(&Place<'_>, &mut [Link<C>], &mut Mesh<C>) -> Result<R>,
    ) -> Result<R> {
        if self.broken {
            return Err(CollectiveError::InvalidArgument(format!(
                "{op}: the ring was broken by an earlier failure"
            )));
        }
        self.calls += 1;
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(&signature);
        // Ranks that cut messages differently would fail every frame's check: say so instead.
        header[4..8].copy_from_slice(&(self.config.chunk_bytes as u32).to_le_bytes());
        header[8..16].copy_from_slice(&self.calls.to_le_bytes());
        header[16..24].copy_from_slice(&len.to_le_bytes());
        let place = Place {
            rank: self.config.rank,
            size: self.config.peers.len(),
            peers: &self.config.peers,
            timeout: self.config.timeout,
            chunk_bytes: self.config.chunk_bytes,
            max_gather_bytes: self.config.max_gather_bytes,
        };
        // Broken until the call succeeds: a panic that unwinds out of it (and is caught by a
        // caller) leaves the ring unusable rather than out of step.
        self.broken = !self.links.is_empty();
        let outcome = if self.links.is_empty() {
            body(&place, &mut [], &mut self.mesh)
        } else {
            exchange_header(&place, &mut self.links[0], op, &header)
                .and_then(|_| body(&place, &mut self.links, &mut self.mesh))
        };
        self.refused.append(&mut self.mesh.refused);
        if outcome.is_err() && !self.links.is_empty() {
            self.links.iter().for_each(Link::shutdown);
            self.mesh.shutdown();
        } else {
            self.broken = false;
        }
        outcome
    }

    /// Reduces `data` element-wise across all ranks, in place; every rank ends with the same
    /// bits.
    pub fn all_reduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp) -> Result<()> {
        self.all_reduce_as(data, op, Wire::Native)
    }

    /// [`Communicator::all_reduce`], with values travelling in the `wire` format: 16-bit
    /// formats halve the bytes sent while sums still accumulate in the values' own type.
    pub fn all_reduce_as<T: Element>(&mut self, data: &mut [T], op: ReduceOp, wire: Wire) -> Result<()> {
        if !T::travels_as(wire) {
            return Err(CollectiveError::InvalidArgument(format!(
                "{} values travel only as themselves: the {wire:?} wire format is for float32",
                T::NAME
            )));
        }
        let name = match wire {
            Wire::Native => format!("all_reduce({}, {op:?})", T::NAME),
            _ => format!("all_reduce({}, {op:?}, {wire:?} wire)", T::NAME),
        };
        let bytes = std::mem::size_of_val(data);
        self.call(&name, [1, T::CODE, op.code(), wire.code()], data.len() as u64, |place, links, _| {
            // Parts only for buffers worth it, decided the same way on every rank.
            let parts = if bytes >= SPLIT_BYTES { links.len() } else { links.len().min(1) };
            match parts {
                0 => Ok(()),
                1 => ring_all_reduce(place, &mut links[0], &name, data, op, wire),
                _ => {
                    let mut pieces = Vec::with_capacity(parts);
                    let mut rest = &mut *data;
                    let total = rest.len();
                    for p in 0..parts {
                        let len = (p + 1) * total / parts - p * total / parts;
                        let (piece, tail) = rest.split_at_mut(len);
                        pieces.push(piece);
                        rest = tail;
                    }
                    let outcomes: Vec<Result<()>> = thread::scope(|scope| {
                        let running: Vec<_> = links
                            .iter_mut()
                            .zip(pieces)
                            .map(|(link, piece)| {
                                let name = &name;
                                scope.spawn(move || ring_all_reduce(place, link, name, piece, op, wire))
                            })
                            .collect();
                        running
                            .into_iter()
                            .map(|r| {
                                r.join().unwrap_or_else(|_| Err(CollectiveError::local("ring panicked")))
                            })
                            .collect()
                    });
                    outcomes.into_iter().collect()
                }
            }?;
            if op == ReduceOp::Mean {
                T::divide(data, place.size);
            }
            Ok(())
        })
    }

    /// Reduces several buffers as one call (one header, one pipeline), as a fusion buffer
    /// does: they are copied into one contiguous buffer and back, which costs far less than a
    /// round of the ring per buffer for the many small tensors of a model.
    pub fn all_reduce_many<T: Element>(
        &mut self,
        buffers: &mut [&mut [T]],
        op: ReduceOp,
        wire: Wire,
    ) -> Result<()> {
        if let [only] = buffers {
            return self.all_reduce_as(only, op, wire);
        }
        let mut fused: Vec<T> = Vec::with_capacity(buffers.iter().map(|b| b.len()).sum());
        buffers.iter().for_each(|b| fused.extend_from_slice(b));
        self.all_reduce_as(&mut fused, op, wire)?;
        let mut offset = 0;
        for b in buffers.iter_mut() {
            b.copy_from_slice(&fused[offset..offset + b.len()]);
            offset += b.len();
        }
        Ok(())
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
        self.call(&name, [2, 0, root as u8, 0], data.len() as u64, |place, links, _| {
            let Some(link) = links.first_mut() else { return Ok(()) };
            let last = (root + place.size - 1) % place.size;
            for piece in data.chunks_mut(place.chunk_bytes) {
                if place.rank != root {
                    link.prev.receive(piece).map_err(|e| place.error(&name, Side::Prev, e))?;
                }
                if place.rank != last {
                    link.next.send(piece).map_err(|e| place.error(&name, Side::Next, e))?;
                }
            }
            Ok(())
        })
    }

    /// Every rank's `data` (any length), by rank.
    ///
    /// The items' lengths go round the ring first, so every rank knows them all before a byte
    /// of an item moves: an item over the limit fails the call on every rank alike, naming its
    /// rank and size, as an invalid argument (the same item would fail again after a restart)
    /// rather than as a peer that broke off.
    pub fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let name = "all_gather";
        self.call(name, [3, 0, 0, 0], 0, |place, links, _| {
            let (n, rank) = (place.size, place.rank);
            let mut items: Vec<Vec<u8>> = vec![Vec::new(); n];
            items[rank] = data.to_vec();
            let Some(link) = links.first_mut() else { return Ok(items) };
            // Step s sends the item (or length) of rank - s and receives that of rank - s - 1.
            let send = |s: usize| (rank + n - s) % n;
            let recv = |s: usize| (rank + 2 * n - s - 1) % n;
            let mut lengths = vec![0u64; n];
            lengths[rank] = data.len() as u64;
            for s in 0..n - 1 {
                let mut len = [0u8; 8];
                send_recv(place, link, name, &lengths[send(s)].to_le_bytes(), &mut len)?;
                lengths[recv(s)] = u64::from_le_bytes(len);
            }
            let limit = place.max_gather_bytes;
            if let Some((owner, len)) = lengths.iter().enumerate().find(|(_, len)| **len > limit) {
                return Err(CollectiveError::InvalidArgument(format!(
                    "{name}: rank {owner}'s item is {len} bytes, more than the limit of {limit}"
                )));
            }
            for s in 0..n - 1 {
                let mut received = vec![0u8; lengths[recv(s)] as usize];
                send_recv(place, link, name, &items[send(s)], &mut received)?;
                items[recv(s)] = received;
            }
            Ok(items)
        })
    }

    /// Sends `items[r]` to rank `r`, for every rank, and returns what each rank sent this
    /// one, by rank (this rank's own item comes back as it is). Items may differ in size and
    /// be empty; every rank must call it at the same time. See [`crate::all_to_all`].
    pub fn all_to_all<T: AsRef<[u8]> + Sync>(&mut self, items: &[T]) -> Result<Vec<Vec<u8>>> {
        let n = self.size();
        if items.len() != n {
            return Err(CollectiveError::InvalidArgument(format!(
                "all_to_all takes one item per rank: {} items for {n} ranks",
                items.len()
            )));
        }
        let route = self.config.all_to_all;
        let name = "all_to_all";
        let config = self.config.clone();
        self.call(name, [4, 0, 0, route.code()], n as u64, |place, links, mesh| match (route, links) {
            (_, []) => Ok(items.iter().map(|i| i.as_ref().to_vec()).collect()),
            (Route::Ring, [link, ..]) => all_to_all::along_ring(place, link, name, items),
            (Route::Mesh, [link, ..]) => {
                mesh.dial(&config, &mut || barrier_over(place, link))?;
                mesh.exchange(place, name, items)
            }
        })
    }

    /// Returns once every rank has called it.
    pub fn barrier(&mut self) -> Result<()> {
        let mut token = [0i64];
        self.all_reduce(&mut token, ReduceOp::Sum)
    }

    /// [`Communicator::barrier`], waiting up to `wait` rather than the ring's time-out: for
    /// a rank known to be busy for long, such as a chief writing a checkpoint. A rank that
    /// dies meanwhile still fails it at once (its connections close).
    pub fn barrier_within(&mut self, wait: Duration) -> Result<()> {
        let usual = self.config.timeout;
        self.set_timeout(wait)?;
        let outcome = self.barrier();
        let restored = self.set_timeout(usual);
        outcome.and(restored)
    }

    fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        for link in &self.links {
            for stream in [link.next.stream(), link.prev.stream()] {
                stream
                    .set_timeout(timeout)
                    .map_err(|e| CollectiveError::io("setting the ring's time-out", e))?;
            }
        }
        self.mesh.set_timeout(timeout)?;
        self.config.timeout = timeout;
        Ok(())
    }
}

impl<C: Connection> Drop for Communicator<C> {
    fn drop(&mut self) {
        self.links.iter().for_each(Link::shutdown);
        self.mesh.shutdown();
    }
}

/// A barrier inside another collective's call: a one-value all-reduce over `link`, which ends
/// on a rank only once every rank has reached it.
fn barrier_over<C: Connection>(place: &Place<'_>, link: &mut Link<C>) -> Result<()> {
    ring_all_reduce(place, link, "barrier", &mut [0i64], ReduceOp::Sum, Wire::Native)
}

fn exchange_header<C: Connection>(
    place: &Place<'_>,
    link: &mut Link<C>,
    op: &str,
    header: &[u8; HEADER],
) -> Result<()> {
    let mut theirs = [0u8; HEADER];
    send_recv(place, link, op, header, &mut theirs)?;
    if theirs != *header {
        let describe = |h: &[u8; HEADER]| {
            format!(
                "call #{} ({}, type {}, op {}, wire {}, {} elements, {}-byte chunks)",
                u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")),
                match h[0] {
                    1 => "all_reduce",
                    2 => "broadcast",
                    3 => "all_gather",
                    4 => "all_to_all",
                    _ => "unknown",
                },
                h[1],
                h[2],
                h[3],
                u64::from_le_bytes(h[16..24].try_into().expect("8 bytes")),
                u32::from_le_bytes(h[4..8].try_into().expect("4 bytes")),
            )
        };
        return Err(CollectiveError::OutOfStep {
            op: op.to_string(),
            peer: place.peer(Side::Prev),
            ours: describe(header),
            theirs: describe(&theirs),
        });
    }
    Ok(())
}

/// Sends `out` to the next rank while receiving `into` from the previous one.
pub(crate) fn send_recv<C: Connection>(
    place: &Place<'_>,
    link: &mut Link<C>,
    op: &str,
    out: &[u8],
    into: &mut [u8],
) -> Result<()> {
    let Link { next, prev } = link;
    let (sent, received) = if out.len() <= INLINE_BYTES {
        (next.send(out), prev.receive(into))
    } else {
        thread::scope(|scope| {
            let sending = scope.spawn(|| next.send(out));
            let received = prev.receive(into);
            (sending.join().unwrap_or_else(|_| Err(io::Error::other("send panicked"))), received)
        })
    };
    sent.map_err(|e| place.error(op, Side::Next, e))?;
    received.map_err(|e| place.error(op, Side::Prev, e))
}

/// The ring all-reduce of `data` over one link, without MEAN's final division.
fn ring_all_reduce<T: Element, C: Connection>(
    place: &Place<'_>,
    link: &mut Link<C>,
    name: &str,
    data: &mut [T],
    op: ReduceOp,
    wire: Wire,
) -> Result<()> {
    let (n, rank, total) = (place.size, place.rank, data.len());
    let bounds = |i: usize| (i * total / n, (i + 1) * total / n);
    // Reduce-scatter: after step s, segment (rank - s - 1) holds s + 2 ranks' values.
    for s in 0..n - 1 {
        let send = bounds((rank + n - s) % n);
        let recv = bounds((rank + 2 * n - s - 1) % n);
        step(place, link, name, data, send, recv, Some(op), wire)?;
    }
    // This rank's fully reduced segment travels rounded to the wire format: round its own
    // copy the same way, so every rank holds the same bits.
    let (start, end) = bounds((rank + 1) % n);
    round_to(wire, &mut data[start..end]);
    // All-gather: pass the reduced segments around.
    for s in 0..n - 1 {
        let send = bounds((rank + 1 + n - s) % n);
        let recv = bounds((rank + n - s) % n);
        step(place, link, name, data, send, recv, None, wire)?;
    }
    Ok(())
}

/// One ring step: sends `data[send]`, receives into `data[recv]` (reducing with `op`, or
/// copying when None). The two ranges never overlap.
#[allow(clippy::too_many_arguments)]
fn step<T: Element, C: Connection>(
    place: &Place<'_>,
    link: &mut Link<C>,
    name: &str,
    data: &mut [T],
    send: (usize, usize),
    recv: (usize, usize),
    op: Option<ReduceOp>,
    wire: Wire,
) -> Result<()> {
    // Split so one thread reads one segment while the other writes the other.
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
    // Chunks hold whole values, so both sides cut a segment at the same places.
    let width = wire.width(std::mem::size_of::<T>());
    let per_chunk = (place.chunk_bytes / width).max(1);
    let Link { next, prev } = link;
    let (sent, received) = if out.len() * width <= INLINE_BYTES {
        (send_values(next, out, per_chunk, wire), recv_values(prev, into, per_chunk, wire, op))
    } else {
        thread::scope(|scope| {
            let sending = scope.spawn(|| send_values(next, out, per_chunk, wire));
            let received = recv_values(prev, into, per_chunk, wire, op);
            (sending.join().unwrap_or_else(|_| Err(io::Error::other("send panicked"))), received)
        })
    };
    received.map_err(|e| place.error(name, Side::Prev, e))?;
    sent.map_err(|e| place.error(name, Side::Next, e))
}

fn send_values<T: Element, C: Connection>(
    to: &mut Sealer<C>,
    values: &[T],
    per_chunk: usize,
    wire: Wire,
) -> io::Result<()> {
    if wire == Wire::Native {
        return values.chunks(per_chunk).try_for_each(|c| to.send(bytemuck::cast_slice(c)));
    }
    let mut bits = vec![0u16; per_chunk.min(values.len())];
    values.chunks(per_chunk).try_for_each(|c| {
        let bits = &mut bits[..c.len()];
        T::encode(wire, c, bits);
        to.send(bytemuck::cast_slice(bits))
    })
}

fn recv_values<T: Element, C: Connection>(
    from: &mut Opener<C>,
    into: &mut [T],
    per_chunk: usize,
    wire: Wire,
    op: Option<ReduceOp>,
) -> io::Result<()> {
    let mut values: Vec<T> = Vec::new();
    let mut bits: Vec<u16> = Vec::new();
    for target in into.chunks_mut(per_chunk) {
        let n = target.len();
        match (wire, op) {
            (Wire::Native, None) => from.receive(bytemuck::cast_slice_mut(target))?,
            (Wire::Native, Some(op)) => {
                values.resize(n, T::zeroed());
                from.receive(bytemuck::cast_slice_mut(&mut values[..n]))?;
                T::combine(op, target, &values[..n]);
            }
            (_, None) => {
                bits.resize(n, 0);
                from.receive(bytemuck::cast_slice_mut(&mut bits[..n]))?;
                T::decode(wire, &bits[..n], target);
            }
            (_, Some(op)) => {
                bits.resize(n, 0);
                values.resize(n, T::zeroed());
                from.receive(bytemuck::cast_slice_mut(&mut bits[..n]))?;
                T::decode(wire, &bits[..n], &mut values[..n]);
                T::combine(op, target, &values[..n]);
            }
        }
    }
    Ok(())
}

/// Rounds `values` to the precision of `wire`, as a receiver decodes them.
fn round_to<T: Element>(wire: Wire, values: &mut [T]) {
    if wire != Wire::Native {
        let mut bits = vec![0u16; values.len()];
        T::encode(wire, values, &mut bits);
        T::decode(wire, &bits, values);
    }
}
