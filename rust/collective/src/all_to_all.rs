//! All-to-all with variable sizes: every rank hands one byte buffer (possibly empty) to each
//! rank and gets one from each, as sharded embedding tables need to send ids to their owners
//! and rows back.
//!
//! Two routes, chosen by [`crate::Config::all_to_all`]:
//!
//! - [`Route::Mesh`] (the default): a direct connection from every rank to every other. Each
//!   buffer crosses the network once, all transfers run at once, and a call takes one round
//!   trip whatever the number of ranks.
//! - [`Route::Ring`]: buffers forwarded along the ring's own connections, N-1 steps, each rank
//!   passing on everything not yet delivered. No connection beyond the ring's, but a buffer to
//!   the rank k places on crosses k links: each rank sends about N/2 times the bytes of the
//!   mesh, in N-1 sequential steps.
//!
//! The mesh is the default because its cost per rank does not grow with N. Measured on
//! loopback (`cargo run --release -p sparktrain-collective --example all_to_all`, sealed
//! frames, two cores shared by all ranks; figures in that example's header): the same for two
//! ranks, and from three ranks on the ring takes 1.3 to 1.7 times as long for 1-64 KiB per
//! peer and 4.6 to 4.8 times for 1 MiB per peer, having sent N/2 times the bytes. On a real
//! network, where a link's bandwidth rather than the CPU bounds a call, the bytes decide.
//!
//! The mesh is made the first time a job calls all-to-all (a job that never does pays
//! nothing): in phases k = 1..N-1, each rank connects to rank + k and accepts rank - k on the
//! listener it connected the ring with, through the same handshake ([`crate::handshake`]), so
//! every connection is authenticated and its frames sealed under a key of its own; a barrier on
//! the ring separates the phases, so a listener only ever waits for the one rank it expects.
//! Each connection carries one direction, as the ring's do.
//!
//! A call is the ring's header (which catches ranks out of step), then every rank sends each
//! peer the length of its buffer, then the buffers: small ones from the calling thread, large
//! ones each from a thread of its own, while the calling thread receives from each peer in
//! turn. A sender only waits for its receiver, which reads every peer, so sizes that differ or
//! are zero cannot deadlock. A failure cuts every connection of the rank (the threads blocked
//! on them included), so the peers fail at once too; a silent peer fails the wait at the
//! time-out, named.

use std::borrow::Cow;
use std::io;
use std::net::TcpListener;
use std::str::FromStr;
use std::thread;
use std::time::Duration;

use crate::error::{CollectiveError, Result};
use crate::handshake;
use crate::local::{self, Stream};
use crate::ring::{Config, Connection, INLINE_BYTES, Link, Place, Side, sealing, send_recv};
use crate::seal::{KEY_BYTES, Opener, Sealer};

/// How all-to-all buffers travel between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Route {
    /// Direct connections between every pair of ranks.
    #[default]
    Mesh,
    /// Forwarded along the ring.
    Ring,
}

impl Route {
    pub(crate) fn code(self) -> u8 {
        match self {
            Route::Mesh => 0,
            Route::Ring => 1,
        }
    }
}

impl FromStr for Route {
    type Err = CollectiveError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "mesh" => Ok(Route::Mesh),
            "ring" => Ok(Route::Ring),
            _ => Err(CollectiveError::InvalidArgument(format!(
                "unknown all-to-all route '{s}': use mesh or ring"
            ))),
        }
    }
}

/// The connections to and from the rank `k` places on along the ring (to send) and `k`
/// places back (to receive).
pub(crate) struct MeshLink<C: Connection> {
    to: Sealer<C>,
    from: Opener<C>,
    /// A second handle on `to`'s connection: cutting it releases a thread blocked writing.
    cut: C,
}

impl<C: Connection> MeshLink<C> {
    /// The link over `to` and `from`, each with its frame key; `cut` is another handle on
    /// `to`. Frames travel in the clear unless `sealed` and the connection leaves the host.
    pub(crate) fn new(to: (C, [u8; KEY_BYTES]), from: (C, [u8; KEY_BYTES]), cut: C, sealed: bool) -> Self {
        let (to_key, from_key) = (sealing(&to.0, &to.1, sealed), sealing(&from.0, &from.1, sealed));
        MeshLink { to: Sealer::new(to.0, to_key.as_ref()), from: Opener::new(from.0, from_key.as_ref()), cut }
    }

    fn shutdown(&self) {
        self.cut.shutdown();
        self.from.stream().shutdown();
    }
}

/// Makes the mesh's links, by distance, given the configuration and a barrier over the ring;
/// refused callers go to the vector.
pub(crate) type Dialer<C> = Box<
    dyn FnMut(&Config, &mut dyn FnMut() -> Result<()>, &mut Vec<CollectiveError>) -> Result<Vec<MeshLink<C>>>
        + Send,
>;

/// A rank's direct connections to every other rank, made when first needed.
pub(crate) struct Mesh<C: Connection> {
    /// Links by distance - 1; empty until dialled.
    links: Vec<MeshLink<C>>,
    dialer: Option<Dialer<C>>,
    /// Connections refused while dialling, for the communicator's list.
    pub(crate) refused: Vec<CollectiveError>,
}

impl<C: Connection> Mesh<C> {
    /// A mesh that `dialer` connects on first use.
    pub(crate) fn dialled_later(dialer: Dialer<C>) -> Self {
        Mesh { links: Vec::new(), dialer: Some(dialer), refused: Vec::new() }
    }

    /// A mesh over links already connected (by distance from 1).
    pub(crate) fn over(links: Vec<MeshLink<C>>) -> Self {
        Mesh { links, dialer: None, refused: Vec::new() }
    }

    pub(crate) fn bytes_sent(&self) -> u64 {
        self.links.iter().map(|l| l.to.bytes_sent()).sum()
    }

    pub(crate) fn shutdown(&self) {
        self.links.iter().for_each(MeshLink::shutdown);
    }

    pub(crate) fn set_timeout(&self, timeout: Duration) -> Result<()> {
        for link in &self.links {
            for stream in [link.to.stream(), link.from.stream()] {
                stream
                    .set_timeout(timeout)
                    .map_err(|e| CollectiveError::io("setting the mesh's time-out", e))?;
            }
        }
        Ok(())
    }

    /// Connects every pair of ranks, unless done already; every rank calls it at once.
    pub(crate) fn dial(&mut self, config: &Config, barrier: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let n = config.peers.len();
        if self.links.len() + 1 == n {
            return Ok(());
        }
        let Some(dialer) = self.dialer.as_mut() else {
            return Err(CollectiveError::local(
                "all_to_all: this communicator has no listener to connect the other ranks through",
            ));
        };
        self.links = dialer(config, barrier, &mut self.refused)?;
        Ok(())
    }

    /// Sends `items[r]` to every other rank `r` and receives theirs, over the mesh.
    pub(crate) fn exchange<T: AsRef<[u8]> + Sync>(
        &mut self,
        place: &Place<'_>,
        op: &str,
        items: &[T],
    ) -> Result<Vec<Vec<u8>>> {
        let (n, rank) = (place.size, place.rank);
        let to = |k: usize| (rank + k + 1) % n;
        let from = |k: usize| (rank + n - k - 1) % n;
        // Eight bytes per connection: the sockets' buffers take them, so nothing waits here.
        for (k, link) in self.links.iter_mut().enumerate() {
            let len = items[to(k)].as_ref().len() as u64;
            link.to.send(&len.to_le_bytes()).map_err(|e| place.error_with(op, to(k), e))?;
        }
        let mut received: Vec<Vec<u8>> = vec![Vec::new(); n];
        for (k, link) in self.links.iter_mut().enumerate() {
            let mut len = [0u8; 8];
            link.from.receive(&mut len).map_err(|e| place.error_with(op, from(k), e))?;
            let len = u64::from_le_bytes(len);
            if len > place.max_gather_bytes {
                let limit = place.max_gather_bytes;
                let e = io::Error::other(format!("it announced {len} bytes, more than the limit of {limit}"));
                return Err(place.error_with(op, from(k), e));
            }
            received[from(k)] = vec![0u8; len as usize];
        }
        received[rank] = items[rank].as_ref().to_vec();
        let links = &mut self.links;
        thread::scope(|scope| {
            let mut failure: Option<CollectiveError> = None;
            let mut sending = Vec::new();
            let mut openers = Vec::with_capacity(links.len());
            let mut cutters = Vec::with_capacity(links.len());
            for (k, MeshLink { to: sealer, from: opener, cut }) in links.iter_mut().enumerate() {
                cutters.push(&*cut);
                openers.push((from(k), opener));
                let data = items[to(k)].as_ref();
                if data.len() > INLINE_BYTES {
                    sending.push((to(k), scope.spawn(move || sealer.send(data))));
                } else if failure.is_none() {
                    // Small enough for the socket's buffer: sent before any receiving.
                    failure = sealer.send(data).err().map(|e| place.error_with(op, to(k), e));
                }
            }
            let mut buffers: Vec<(usize, &mut Vec<u8>)> = received.iter_mut().enumerate().collect();
            for (peer, opener) in openers.iter_mut() {
                if failure.is_some() {
                    break;
                }
                let into = buffers.iter_mut().find(|(r, _)| r == peer).expect("a buffer per rank");
                failure = opener.receive(into.1).err().map(|e| place.error_with(op, *peer, e));
            }
            if failure.is_some() {
                // The senders may be blocked on peers that will never read: cut them loose.
                cutters.iter().for_each(|c| c.shutdown());
                openers.iter().for_each(|(_, o)| o.stream().shutdown());
            }
            for (peer, thread) in sending {
                let sent = thread.join().unwrap_or_else(|_| Err(io::Error::other("send panicked")));
                if let (None, Err(e)) = (&failure, sent) {
                    failure = Some(place.error_with(op, peer, e));
                }
            }
            failure.map_or(Ok(()), Err)
        })?;
        Ok(received)
    }
}

/// Connects a rank's mesh through `listener` (the one the ring was connected through); links
/// to ranks on the same host move to unix-domain sockets as the ring's do.
pub(crate) fn tcp_dialer(listener: TcpListener) -> Dialer<Stream> {
    Box::new(move |config, barrier, refused| {
        let (n, rank) = (config.peers.len(), config.rank);
        let mut links = Vec::with_capacity(n.saturating_sub(1));
        for k in 1..n {
            if k > 1 {
                // Every rank is done with the previous phase: the connections that arrive now
                // are this phase's.
                barrier()?;
            }
            let (to, from) = ((rank + k) % n, (rank + n - k) % n);
            let (accepted, connected) = thread::scope(|scope| {
                let accepting = scope.spawn(|| {
                    let expected = handshake::Expected { rank: from, count: 1, sealed: config.sealed };
                    handshake::accept(&listener, expected, &config.secret, config.timeout, refused)
                });
                let hello = handshake::Hello { rank, index: 0, sealed: config.sealed };
                let connected = handshake::connect(&config.peers[to], hello, &config.secret, config.timeout);
                let accepted =
                    accepting.join().unwrap_or_else(|_| Err(CollectiveError::local("accept panicked")));
                (accepted, connected)
            });
            let outgoing = connected?;
            let incoming =
                accepted?.pop().ok_or_else(|| CollectiveError::local("accept returned nothing"))?;
            // Like the ring's: a partitioned peer host breaks the connection within the time-out.
            for s in [&outgoing.0, &incoming.0] {
                crate::link::bound_silence(s, config.timeout).map_err(|e| {
                    CollectiveError::io(format!("bounding the silence of rank {to}'s mesh link"), e)
                })?;
            }
            let (mut outgoing, mut incoming) =
                local::settle(vec![outgoing], vec![incoming], config, to, from)?;
            let ((stream, key), incoming) = (outgoing.remove(0), incoming.remove(0));
            let cut = stream.try_clone().map_err(|e| {
                CollectiveError::io(format!("a second handle on the connection to rank {to}"), e)
            })?;
            links.push(MeshLink::new((stream, key), incoming, cut, config.sealed));
        }
        Ok(links)
    })
}

/// Bytes of a bundle's count and of each buffer's entry (source, destination, length).
const BUNDLE_HEAD: usize = 4;
const BUNDLE_ENTRY: usize = 16;

/// All-to-all forwarded along the ring over `link`: at step s, every rank passes on what it
/// received at step s-1 (at step 1, its own buffers) but the buffer that was for itself.
pub(crate) fn along_ring<C: Connection, T: AsRef<[u8]>>(
    place: &Place<'_>,
    link: &mut Link<C>,
    op: &str,
    items: &[T],
) -> Result<Vec<Vec<u8>>> {
    let (n, rank) = (place.size, place.rank);
    let mut received: Vec<Vec<u8>> = vec![Vec::new(); n];
    received[rank] = items[rank].as_ref().to_vec();
    // (destination, bytes): at step s, the buffers of rank - s + 1 not yet delivered.
    let mut held: Vec<(usize, Cow<'_, [u8]>)> =
        (1..n).map(|k| ((rank + k) % n, Cow::Borrowed(items[(rank + k) % n].as_ref()))).collect();
    let limit = BUNDLE_HEAD as u64 + (n as u64 - 1) * (BUNDLE_ENTRY as u64 + place.max_gather_bytes);
    for s in 1..n {
        let source = (rank + n - s + 1) % n;
        let mut bundle =
            Vec::with_capacity(BUNDLE_HEAD + held.iter().map(|(_, b)| BUNDLE_ENTRY + b.len()).sum::<usize>());
        bundle.extend_from_slice(&(held.len() as u32).to_le_bytes());
        for (destination, bytes) in &held {
            bundle.extend_from_slice(&(source as u32).to_le_bytes());
            bundle.extend_from_slice(&(*destination as u32).to_le_bytes());
            bundle.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        }
        held.iter().for_each(|(_, b)| bundle.extend_from_slice(b));
        let mut len = [0u8; 8];
        send_recv(place, link, op, &(bundle.len() as u64).to_le_bytes(), &mut len)?;
        let len = u64::from_le_bytes(len);
        if len > limit {
            let e = io::Error::other(format!("it announced {len} bytes, more than the limit of {limit}"));
            return Err(place.error(op, Side::Prev, e));
        }
        let mut incoming = vec![0u8; len as usize];
        send_recv(place, link, op, &bundle, &mut incoming)?;
        let entries = parse_bundle(&incoming, (rank + n - s) % n, s, place)
            .map_err(|why| place.error(op, Side::Prev, io::Error::new(io::ErrorKind::InvalidData, why)))?;
        held.clear();
        for (destination, range) in entries {
            let bytes = incoming[range].to_vec();
            if destination == rank {
                received[(rank + n - s) % n] = bytes;
            } else {
                held.push((destination, Cow::Owned(bytes)));
            }
        }
    }
    Ok(received)
}

/// The entries of a bundle received at step `s` (destination, where its bytes are), which
/// must be the buffers of `source` for the ranks `s` or more places on from it, each once.
fn parse_bundle(
    bundle: &[u8],
    source: usize,
    s: usize,
    place: &Place<'_>,
) -> std::result::Result<Vec<(usize, std::ops::Range<usize>)>, String> {
    let n = place.size;
    let word = |at: usize| bundle.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let count = word(0).ok_or("a bundle without its count")? as usize;
    if count != n - s {
        return Err(format!("a bundle of {count} buffers at step {s} of {n} ranks, not {}", n - s));
    }
    let mut at = BUNDLE_HEAD + count * BUNDLE_ENTRY;
    if bundle.len() < at {
        return Err("a bundle shorter than its entries".into());
    }
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let entry = BUNDLE_HEAD + i * BUNDLE_ENTRY;
        let (from, to) =
            (word(entry).expect("in bounds") as usize, word(entry + 4).expect("in bounds") as usize);
        let len = u64::from_le_bytes(bundle[entry + 8..entry + 16].try_into().expect("8 bytes"));
        // In order: the buffers for source + s, source + s + 1, ...
        let want = (source + s + i) % n;
        if from != source || to != want {
            return Err(format!("entry {i} is from rank {from} to rank {to}, not from {source} to {want}"));
        }
        if len > place.max_gather_bytes || len > (bundle.len() - at) as u64 {
            return Err(format!("entry {i} claims {len} bytes"));
        }
        entries.push((to, at..at + len as usize));
        at += len as usize;
    }
    if at != bundle.len() {
        return Err(format!("{} bytes after the bundle's buffers", bundle.len() - at));
    }
    Ok(entries)
}
