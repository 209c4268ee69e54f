//! An iterator fed by a thread of its own through a bounded channel: the input pipeline's
//! reading and the prefetch of prepared batches both run this way.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{self, JoinHandle};

use crate::error::{Result, TrainError};

/// Items a thread makes ahead, at most `depth` waiting, in the order it sent them. Dropping
/// it leaves the thread to stop at its next send, which fails.
pub(crate) struct Background<T> {
    receiver: Receiver<Result<T>>,
    thread: Option<JoinHandle<()>>,
    name: &'static str,
}

impl<T: Send + 'static> Background<T> {
    /// Starts the thread `name`, running `work` with the sending end.
    pub(crate) fn spawn<F>(name: &'static str, depth: usize, work: F) -> Result<Self>
    where
        F: FnOnce(SyncSender<Result<T>>) + Send + 'static,
    {
        let (sender, receiver) = sync_channel(depth);
        let thread = thread::Builder::new()
            .name(format!("sparktrain-{name}"))
            .spawn(move || work(sender))
            .map_err(|e| TrainError::InvalidArgument(format!("cannot start the {name} thread: {e}")))?;
        Ok(Background { receiver, thread: Some(thread), name })
    }
}

impl<T> Iterator for Background<T> {
    type Item = Result<T>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.receiver.recv().ok();
        if item.is_none()
            && let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            // A panic must not pass for the end of the data.
            let name = self.name;
            return Some(Err(TrainError::InvalidArgument(format!("the {name} thread panicked"))));
        }
        item
    }
}
