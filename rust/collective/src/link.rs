//! What the kernel does for a ring connection: bound how long a silent peer host is waited
//! for, and say how long the connection has been busy sending.
//!
//! - **A host gone silent.** Every read and write of the ring waits at most the configured
//!   time-out, except where a collective deliberately waits longer (the engine's checkpoint
//!   barrier waits up to an hour for a slow save). A peer whose host vanished (cut off, powered
//!   off) must not hold such a wait: [`bound_silence`] has the kernel probe an idle connection
//!   (TCP keepalive) and give up on one whose probes or data stay unacknowledged for the
//!   time-out (`TCP_USER_TIMEOUT`), whatever the application waits for. The read then fails
//!   at once, naming the peer. A host that answers, however slow its process, keeps the
//!   connection.
//! - **A slow link.** Every rank of a ring sends as much as every other, so a rank whose
//!   connection to the next rank stays busy (bytes sent and not yet acknowledged) much longer
//!   than the others' sits on a slow link. Linux counts that time for each TCP socket
//!   (`tcpi_busy_time` of `TCP_INFO`, since 4.10); the trainers report it and the driver names
//!   the host whose links, in and out, are the busiest (see the launcher's straggler report).
//!   Elsewhere the count is unknown.

use std::io;
use std::net::TcpStream;
use std::time::Duration;

/// Has the kernel drop `stream` once its peer host stays silent for about `timeout`: idle, it
/// is probed after half the time-out, then every eighth of it (at least every second), and data
/// or probes unacknowledged for the whole time-out break it. Not Linux: keepalive with the
/// system's timings only.
#[cfg(target_os = "linux")]
pub fn bound_silence(stream: &TcpStream, timeout: Duration) -> io::Result<()> {
    use std::os::fd::AsRawFd;

    let seconds = |d: Duration| d.as_secs().clamp(1, i32::MAX as u64) as libc::c_int;
    let millis = timeout.as_millis().clamp(1, libc::c_uint::MAX as u128) as libc::c_uint;
    let fd = stream.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| -> io::Result<()> {
        // SAFETY: `value` lives across the call and its size is passed along.
        let status = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if status == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, seconds(timeout / 2))?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, seconds(timeout / 8))?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 8)?;
    // Overrides the probe count: the connection breaks once the time-out has passed.
    set(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, millis as libc::c_int)
}

/// Not Linux: keepalive with the system's own timings.
#[cfg(not(target_os = "linux"))]
pub fn bound_silence(stream: &TcpStream, _timeout: Duration) -> io::Result<()> {
    let _ = stream;
    Ok(())
}

/// How long `stream` has had data in flight since it was opened; None where the kernel does
/// not say (not Linux, or a kernel older than 4.10).
#[cfg(target_os = "linux")]
pub fn busy_time(stream: &TcpStream) -> Option<Duration> {
    use std::os::fd::AsRawFd;

    /// Where `tcpi_busy_time` (microseconds, u64) sits in the kernel's `struct tcp_info`
    /// (uapi `linux/tcp.h`); the C library's copy of the struct stops before it.
    const BUSY_TIME_OFFSET: usize = 168;
    // u64 words, so the field is read aligned.
    let mut info = [0u64; 32];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes, and the kernel writes at most `len` bytes
    // and stores how many it wrote in `len`.
    let status = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if status != 0 || (len as usize) < BUSY_TIME_OFFSET + 8 {
        return None;
    }
    Some(Duration::from_micros(info[BUSY_TIME_OFFSET / 8]))
}

/// Not Linux: unknown.
#[cfg(not(target_os = "linux"))]
pub fn busy_time(_stream: &TcpStream) -> Option<Duration> {
    None
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use super::{bound_silence, busy_time};

    #[test]
    #[cfg(target_os = "linux")]
    fn a_bounded_connection_carries_its_timings() {
        use std::os::fd::AsRawFd;

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        bound_silence(&stream, Duration::from_secs(8)).unwrap();
        let get = |level, name| {
            let (mut value, mut len) =
                (0 as libc::c_int, std::mem::size_of::<libc::c_int>() as libc::socklen_t);
            // SAFETY: `value` is writable for `len` bytes.
            let status = unsafe {
                libc::getsockopt(
                    stream.as_raw_fd(),
                    level,
                    name,
                    (&mut value as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            assert_eq!(status, 0);
            value
        };
        assert_eq!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 4);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 8000);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_connection_that_sent_has_been_busy() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let before = busy_time(&sender).expect("Linux 4.10+ reports tcpi_busy_time");
        let data = vec![7u8; 8 << 20];
        let reading = std::thread::spawn(move || {
            let mut got = vec![0u8; 8 << 20];
            receiver.read_exact(&mut got).unwrap();
        });
        sender.write_all(&data).unwrap();
        reading.join().unwrap();
        let after = busy_time(&sender).unwrap();
        assert!(after > before, "busy {before:?} then {after:?} after sending 8 MiB");
    }
}
