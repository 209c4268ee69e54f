//! Bounds on what the rendezvous service accepts from the network, so that neither a flood of
//! calls nor a crowd of idle connections can grow the driver's memory or keep it from
//! serving its tasks.
//!
//! - Calls are authenticated on their headers, before tonic reads and decodes their body (see
//!   [`crate::rendezvous`]); a decoded message larger than [`MAX_MESSAGE_BYTES`] is refused.
//! - At most [`MAX_CONNECTIONS`] connections are served at once: one more is closed as soon as
//!   it is accepted. [`Limited`] wraps the listener's stream of connections to do it.
//! - A connection carries at most [`MAX_STREAMS_PER_CONNECTION`] calls at once, and idle
//!   connections are probed by HTTP/2 and TCP keepalives (the timings below), so that a peer
//!   that vanished does not hold a slot.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::Stream;
use tonic::transport::server::Connected;

/// The largest message the service decodes. A heartbeat, the largest message tasks send,
/// carries at most 768 KiB of output lines.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// Connections served at once; a job has a few per task.
pub const MAX_CONNECTIONS: usize = 2048;
/// Calls in flight on one connection (a task and its trainer use a handful).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 64;
/// The largest block of request headers.
pub const MAX_HEADER_BYTES: u32 = 16 << 10;
/// How often an idle connection is probed with an HTTP/2 ping, and how long the answer may
/// take before the connection is closed.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// See [`KEEPALIVE_INTERVAL`].
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Idle time before the kernel starts TCP keepalive probes.
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// A stream of accepted connections of which at most `limit` are open at once; those beyond
/// are dropped (closed) as they arrive and counted.
pub struct Limited<S> {
    inner: S,
    slots: Arc<Semaphore>,
    turned_away: Arc<AtomicU64>,
}

impl<S> Limited<S> {
    /// Serves at most `limit` of the connections `inner` accepts at once; `turned_away` counts
    /// those closed for want of a slot.
    pub fn new(inner: S, limit: usize, turned_away: Arc<AtomicU64>) -> Self {
        Limited { inner, slots: Arc::new(Semaphore::new(limit)), turned_away }
    }
}

impl<S, IO, E> Stream for Limited<S>
where
    S: Stream<Item = Result<IO, E>> + Unpin,
{
    type Item = Result<Counted<IO>, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let item = match Pin::new(&mut self.inner).poll_next(cx) {
                Poll::Ready(Some(Ok(io))) => io,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            };
            match self.slots.clone().try_acquire_owned() {
                Ok(permit) => return Poll::Ready(Some(Ok(Counted { io: item, _permit: permit }))),
                // Dropping the connection closes it; go on with the next one.
                Err(_) => {
                    self.turned_away.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// A served connection; its slot frees when it is dropped.
pub struct Counted<IO> {
    io: IO,
    _permit: OwnedSemaphorePermit,
}

impl<IO: Connected> Connected for Counted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
