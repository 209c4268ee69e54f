//! A blocking reader over a remote file's byte stream, read ahead on the shared runtime.
//!
//! HDFS and the object stores hand a file over as an async stream of chunks. A task on the
//! runtime pulls that stream into a small channel while the caller decodes what already
//! arrived, so network and decoding overlap.

use std::io::{self, Read};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::{Result, StorageError};
use crate::runtime;

/// Bytes handed from the read-ahead task to the reader at a time. Streams deliver 8-64 KiB
/// pieces; gathering them saves a channel hand-off per piece.
pub(crate) const READ_CHUNK: usize = 1 << 20;
/// Chunks buffered ahead of the reader (so up to ~5 MiB in flight per open file).
const READ_AHEAD_CHUNKS: usize = 4;

/// Starts reading `stream`, the `length` bytes of the file at `url`, ahead of the caller.
pub(crate) fn reader<S>(url: String, length: u64, mut stream: S) -> Result<Box<dyn Read + Send>>
where
    S: Stream<Item = Result<Bytes>> + Send + Unpin + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<Bytes>>(READ_AHEAD_CHUNKS);
    let task = runtime::runtime()?.spawn(async move {
        let mut pending = BytesMut::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(piece) => {
                    pending.extend_from_slice(&piece);
                    if pending.len() >= READ_CHUNK && tx.send(Ok(pending.split().freeze())).await.is_err() {
                        return; // the reader was dropped
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
        if !pending.is_empty() {
            let _ = tx.send(Ok(pending.freeze())).await;
        }
    });
    Ok(Box::new(ReadAhead { url, rx, current: Bytes::new(), remaining: length, task, failed: false }))
}

/// A blocking reader fed by the read-ahead task.
struct ReadAhead {
    url: String,
    rx: mpsc::Receiver<Result<Bytes>>,
    current: Bytes,
    /// Bytes not yet handed to the caller, to tell a clean end from a lost stream.
    remaining: u64,
    task: JoinHandle<()>,
    failed: bool,
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.current.is_empty() {
            if self.remaining == 0 {
                return Ok(0);
            }
            if self.failed {
                return Err(io::Error::other(format!(
                    "{}: reading stopped after an earlier error",
                    self.url
                )));
            }
            // `blocking_recv` panics on a runtime thread; report it instead.
            runtime::ensure_blocking_allowed().map_err(StorageError::into_io)?;
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => {
                    self.failed = true;
                    return Err(e.into_io());
                }
                None => {
                    self.failed = true;
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{}: stream ended {} bytes early", self.url, self.remaining),
                    ));
                }
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        self.remaining = self.remaining.saturating_sub(n as u64);
        Ok(n)
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Stop reading ahead a file nobody will read (the task would also stop at its next
        // send, but may be waiting on the server until then).
        self.task.abort();
    }
}
