//! Ranks on one host: a connection whose two ends share a network namespace moves from TCP to
//! a unix-domain socket, and its frames are not sealed.
//!
//! Spark often places several executors on one machine, and a one-host job places all of
//! them there. Between two such ranks TCP over loopback costs a trip through the kernel's
//! network stack for every chunk (under gVisor, through its user-space one), and sealing costs
//! the cipher on both ends, although nothing crosses a network: a unix-domain stream carries
//! the same bytes in fewer copies, and only root can read or alter it on the way, as root can
//! read either process's memory anyway.
//!
//! The move is tried on every connection right after its handshake, over the connection
//! itself, so the ring's key still decides who may join:
//!
//! 1. The accepting rank binds a unix socket under a fresh random name in Linux's abstract
//!    namespace, which belongs to a network namespace: ranks on other hosts (or in other
//!    namespaces, as the many-hosts tests' are) cannot reach it. It sends the name over TCP,
//!    or an empty name when it cannot or will not move.
//! 2. The connecting rank connects to that name, sends a proof there (an HMAC of the
//!    connection's frame key, which only the two ends hold) and says over TCP whether it did.
//! 3. The accepting rank takes one connection on its socket, checks the proof and answers
//!    with a proof of its own; the connecting rank checks that. Both ends then drop the TCP
//!    connection; any failed step leaves both on TCP.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
#[cfg(target_os = "linux")]
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::thread;
use std::time::{Duration, Instant};

use hmac::Mac;

use crate::error::{CollectiveError, Result};
use crate::handshake::mac;
use crate::ring::{Config, Connection};
use crate::seal::KEY_BYTES;

/// A connection between two ranks: TCP, or a unix-domain socket when both share a host.
pub enum Stream {
    /// Over TCP: between hosts, or where the two ends could not agree on a local socket.
    Tcp(TcpStream),
    /// Within one network namespace: frames travel unsealed.
    Local(UnixStream),
}

impl Stream {
    /// Another handle on the same connection, to cut it from another thread.
    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Local(s) => Stream::Local(s.try_clone()?),
        })
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Local(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Local(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Local(s) => s.flush(),
        }
    }
}

impl Connection for Stream {
    fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_timeout(timeout),
            Stream::Local(s) => {
                s.set_read_timeout(Some(timeout)).and_then(|_| s.set_write_timeout(Some(timeout)))
            }
        }
    }

    fn shutdown(&self) {
        match self {
            Stream::Tcp(s) => Connection::shutdown(s),
            Stream::Local(s) => {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    fn busy_time(&self) -> Option<Duration> {
        match self {
            Stream::Tcp(s) => s.busy_time(),
            Stream::Local(_) => None,
        }
    }

    fn is_local(&self) -> bool {
        matches!(self, Stream::Local(_))
    }
}

/// The longest name this side offers or takes.
const NAME_BYTES: usize = 64;
const PROOF: usize = 32;

/// A connection's frame key, from its handshake.
type Key = [u8; KEY_BYTES];

/// A connection with its frame key.
type Keyed<S> = (S, Key);

/// A rank's connections once settled: those it connected, those it accepted.
type Settled = (Vec<Keyed<Stream>>, Vec<Keyed<Stream>>);

/// The longest the accepting end waits for a connection already made and a proof already sent.
const PROOF_WAIT: Duration = Duration::from_secs(5);

/// Kernel buffers asked for a local connection: room for a whole 1 MiB chunk and more in
/// flight, where the default holds about 200 KiB (the kernel caps it at `net.core.wmem_max`).
const BUFFER_BYTES: libc::c_int = 4 << 20;

fn proof(key: &[u8; KEY_BYTES], label: &[u8]) -> [u8; PROOF] {
    mac(key, label, &[]).finalize().into_bytes().into()
}

fn checks(key: &[u8; KEY_BYTES], label: &[u8], theirs: &[u8]) -> bool {
    mac(key, label, &[]).verify_slice(theirs).is_ok()
}

const CONNECTING: &[u8] = b"sparktrain local connect";
const ACCEPTING: &[u8] = b"sparktrain local accept";

fn configured(stream: UnixStream, timeout: Duration) -> io::Result<UnixStream> {
    use std::os::fd::AsRawFd;
    for option in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: a valid descriptor and a c_int option value of the right size.
        let set = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&BUFFER_BYTES as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if set != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// A listener under a fresh random name in the abstract namespace, and the name.
fn listen() -> Option<(UnixListener, Vec<u8>)> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).ok()?;
    let name: Vec<u8> = b"sparktrain-"
        .iter()
        .copied()
        .chain(random.iter().flat_map(|b| format!("{b:02x}").into_bytes()))
        .collect();
    let listener = UnixListener::bind_addr(&abstract_address(&name)?).ok()?;
    Some((listener, name))
}

/// `name` in Linux's abstract namespace, which belongs to the network namespace; elsewhere
/// there is none, and ranks stay on TCP.
#[cfg(target_os = "linux")]
fn abstract_address(name: &[u8]) -> Option<SocketAddr> {
    SocketAddr::from_abstract_name(name).ok()
}

#[cfg(not(target_os = "linux"))]
fn abstract_address(_name: &[u8]) -> Option<SocketAddr> {
    None
}

/// The accepting end of an established, keyed connection: offers a local socket when the
/// configuration wants it ([`Config::local`]), and returns the stream to use. Errors are the
/// TCP connection's own (the peer went away mid-way); a peer that cannot or will not move
/// leaves the connection on TCP.
pub(crate) fn offer((mut tcp, frame_key): Keyed<TcpStream>, config: &Config) -> io::Result<Keyed<Stream>> {
    let (key, wanted, timeout) = (&frame_key, config.local, config.timeout);
    tcp.set_timeout(timeout)?;
    let listening = if wanted { listen() } else { None };
    let name = listening.as_ref().map(|(_, name)| name.as_slice()).unwrap_or_default();
    let mut message = vec![name.len() as u8];
    message.extend_from_slice(name);
    tcp.write_all(&message)?;
    let mut connected = [0u8; 1];
    tcp.read_exact(&mut connected)?;
    let Some((listener, _)) = listening else { return Ok((Stream::Tcp(tcp), frame_key)) };
    if connected[0] != 1 {
        return Ok((Stream::Tcp(tcp), frame_key));
    }
    // The peer has connected already: its connection waits in the listener's queue.
    let deadline = Instant::now() + timeout.min(PROOF_WAIT);
    listener.set_nonblocking(true)?;
    let stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return Ok((Stream::Tcp(tcp), frame_key)),
        }
    };
    // The peer wrote its proof before saying it connected, so it waits in the socket already:
    // a short wait bounds the delay a stranger who connected first can cause.
    let moved = stream.set_nonblocking(false).and_then(|_| configured(stream, timeout)).and_then(|mut s| {
        s.set_read_timeout(Some(timeout.min(PROOF_WAIT)))?;
        let mut theirs = [0u8; PROOF];
        s.read_exact(&mut theirs)?;
        s.set_read_timeout(Some(timeout))?;
        if !checks(key, CONNECTING, &theirs) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "a wrong proof"));
        }
        s.write_all(&proof(key, ACCEPTING))?;
        Ok(s)
    });
    let stream = match moved {
        Ok(local) => Stream::Local(local),
        Err(_) => Stream::Tcp(tcp),
    };
    Ok((stream, frame_key))
}

/// The connecting end of an established, keyed connection: takes the peer's offer when the
/// configuration wants it and it can reach it, and returns the stream to use.
pub(crate) fn take((mut tcp, frame_key): Keyed<TcpStream>, config: &Config) -> io::Result<Keyed<Stream>> {
    let (key, wanted, timeout) = (&frame_key, config.local, config.timeout);
    tcp.set_timeout(timeout)?;
    let mut length = [0u8; 1];
    tcp.read_exact(&mut length)?;
    let mut name = vec![0u8; length[0] as usize];
    tcp.read_exact(&mut name)?;
    let reached = (wanted && !name.is_empty() && name.len() <= NAME_BYTES)
        .then(|| abstract_address(&name))
        .flatten()
        .and_then(|address| UnixStream::connect_addr(&address).ok())
        .and_then(|stream| configured(stream, timeout).ok())
        .and_then(|mut stream| stream.write_all(&proof(key, CONNECTING)).ok().map(|_| stream));
    tcp.write_all(&[u8::from(reached.is_some())])?;
    let Some(mut stream) = reached else { return Ok((Stream::Tcp(tcp), frame_key)) };
    let mut theirs = [0u8; PROOF];
    let stream = match stream.read_exact(&mut theirs) {
        Ok(()) if checks(key, ACCEPTING, &theirs) => Stream::Local(stream),
        _ => Stream::Tcp(tcp),
    };
    Ok((stream, frame_key))
}

/// Moves a rank's keyed connections where both ends can: `outgoing` to `to` (this rank
/// connected them) and `incoming` from `from` (this rank accepted them), side by side, as
/// their peers do the same with theirs; each keeps its index and frame key.
pub(crate) fn settle(
    outgoing: Vec<Keyed<TcpStream>>,
    incoming: Vec<Keyed<TcpStream>>,
    config: &Config,
    to: usize,
    from: usize,
) -> Result<Settled> {
    let failed = |peer: usize, e: io::Error| CollectiveError::PeerFailed {
        op: "connect".into(),
        peer,
        address: config.peers[peer].clone(),
        reason: format!("the connection broke while moving it within the host: {e}"),
    };
    thread::scope(|scope| {
        let offering = scope.spawn(move || {
            incoming.into_iter().map(|keyed| offer(keyed, config)).collect::<io::Result<Vec<_>>>()
        });
        let taken = outgoing.into_iter().map(|keyed| take(keyed, config)).collect::<io::Result<Vec<_>>>();
        let offered = offering.join().unwrap_or_else(|_| Err(io::Error::other("offering panicked")));
        Ok((taken.map_err(|e| failed(to, e))?, offered.map_err(|e| failed(from, e))?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const WAIT: Duration = Duration::from_secs(10);

    fn wanting(local: bool) -> Config {
        Config { local, ..Config::new(0, vec!["127.0.0.1:1".into()], Vec::new(), WAIT) }
    }

    /// A connected TCP pair: (accepted, connected).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let connected = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (listener.accept().unwrap().0, connected)
    }

    /// Runs both ends at once; true where each ended on a local socket.
    fn settle_pair(accepting: ([u8; KEY_BYTES], bool), connecting: ([u8; KEY_BYTES], bool)) -> (bool, bool) {
        let (a, c) = pair();
        let offering =
            thread::spawn(move || offer((a, accepting.0), &wanting(accepting.1)).unwrap().0.is_local());
        let taken = take((c, connecting.0), &wanting(connecting.1)).unwrap().0.is_local();
        (offering.join().unwrap(), taken)
    }

    #[test]
    fn both_ends_move_only_when_both_want_it_and_hold_the_same_key() {
        let key = [7u8; KEY_BYTES];
        assert_eq!(settle_pair((key, true), (key, true)), (true, true));
        assert_eq!(settle_pair((key, false), (key, true)), (false, false));
        assert_eq!(settle_pair((key, true), (key, false)), (false, false));
        assert_eq!(settle_pair((key, true), ([8u8; KEY_BYTES], true)), (false, false));
    }

    #[test]
    fn a_local_connection_carries_bytes_both_ways() {
        let (a, c) = pair();
        let key = [1u8; KEY_BYTES];
        let offering = thread::spawn(move || offer((a, key), &wanting(true)).unwrap().0);
        let mut taken = take((c, key), &wanting(true)).unwrap().0;
        let mut offered = offering.join().unwrap();
        let sent: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let writer = {
            let sent = sent.clone();
            thread::spawn(move || taken.write_all(&sent).map(|_| taken))
        };
        let mut received = vec![0u8; sent.len()];
        offered.read_exact(&mut received).unwrap();
        assert_eq!(received, sent);
        let mut taken = writer.join().unwrap().unwrap();
        offered.write_all(b"back").unwrap();
        let mut back = [0u8; 4];
        taken.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"back");
    }

    #[test]
    fn a_stranger_that_connects_first_leaves_the_connection_on_tcp() {
        let (a, mut c) = pair();
        let key = [3u8; KEY_BYTES];
        let offering = thread::spawn(move || offer((a, key), &wanting(true)).unwrap().0.is_local());
        // Playing the connecting end by hand: a stranger reaches the offered name first.
        let mut length = [0u8; 1];
        c.read_exact(&mut length).unwrap();
        let mut name = vec![0u8; length[0] as usize];
        c.read_exact(&mut name).unwrap();
        let mut stranger = UnixStream::connect_addr(&abstract_address(&name).unwrap()).unwrap();
        stranger.write_all(&[0u8; PROOF]).unwrap();
        c.write_all(&[1]).unwrap();
        assert!(!offering.join().unwrap(), "a wrong proof keeps TCP");
        // The stranger learns nothing: the accepting end closed its side without a word.
        stranger.set_read_timeout(Some(WAIT)).unwrap();
        let mut anything = [0u8; 1];
        assert!(matches!(stranger.read(&mut anything), Ok(0) | Err(_)));
    }

    #[test]
    fn an_unreachable_name_leaves_the_connection_on_tcp() {
        let (mut a, c) = pair();
        let key = [5u8; KEY_BYTES];
        // An offer of a name nothing listens under, as from a rank in another network namespace.
        let name = b"sparktrain-nobody-listens-here";
        a.write_all(&[name.len() as u8]).unwrap();
        a.write_all(name).unwrap();
        assert!(!take((c, key), &wanting(true)).unwrap().0.is_local());
        let mut answer = [9u8; 1];
        a.read_exact(&mut answer).unwrap();
        assert_eq!(answer, [0], "it says it did not connect");
    }
}
