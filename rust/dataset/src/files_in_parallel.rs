//! Reading several files of a dataset at once, one thread per file.
//!
//! A dataset is usually many part files. Giving each of `threads` threads a whole file (its
//! reads, framing, CRCs and decoding) scales with the cores, where splitting one file keeps the
//! reading and framing on one thread. Batches never span two files, so handing out each file's
//! batches in turn, in file order, gives exactly the batches of reading the files one by one.
//! Each file thread runs at most two batches ahead of the caller, so memory stays bounded.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread;

use arrow::record_batch::RecordBatch;
use sparktrain_storage::FileStatus;
use sparktrain_tfrecord::SkippedRegion;

use crate::error::{Error, Result};
use crate::read::FileSettings;

/// What a file thread sends: its batches, then its skip report.
enum FromFile {
    Batch(Result<RecordBatch>),
    Done(Vec<SkippedRegion>),
}

/// Batches of many files, read `threads` files at a time and handed out in file order.
pub(crate) struct FilesInParallel {
    files: Vec<FileStatus>,
    settings: FileSettings,
    threads: usize,
    /// The next file to start.
    next_file: usize,
    /// Files started and not yet finished, in file order.
    running: VecDeque<(String, Receiver<FromFile>)>,
}

impl FilesInParallel {
    pub fn new(files: Vec<FileStatus>, settings: FileSettings, threads: usize) -> Self {
        FilesInParallel { files, settings, threads, next_file: 0, running: VecDeque::new() }
    }

    fn start_files(&mut self) -> Result<()> {
        while self.running.len() < self.threads && self.next_file < self.files.len() {
            let url = self.files[self.next_file].url.clone();
            self.next_file += 1;
            // Two batches ahead: one being handed out, one ready.
            let (send, receive) = sync_channel(2);
            let settings = self.settings.clone();
            let name = url.clone();
            thread::Builder::new()
                .name("tfrecord-file".into())
                .spawn(move || read_file(&name, &settings, &send))
                .map_err(|source| {
                    Error::from(sparktrain_tfrecord::Error::Io { path: url.clone(), offset: 0, source })
                })?;
            self.running.push_back((url, receive));
        }
        Ok(())
    }

    /// The next batch in file order; `skipped` gets the skip report of each file finished.
    pub fn next(&mut self, skipped: &mut Vec<(String, SkippedRegion)>) -> Option<Result<RecordBatch>> {
        loop {
            if let Err(e) = self.start_files() {
                return Some(Err(e));
            }
            let (url, receive) = self.running.front()?;
            match receive.recv() {
                Ok(FromFile::Batch(batch)) => return Some(batch),
                Ok(FromFile::Done(regions)) => {
                    skipped.extend(regions.into_iter().map(|r| (url.clone(), r)));
                    self.running.pop_front();
                }
                Err(_) => {
                    let path = url.clone();
                    return Some(Err(sparktrain_tfrecord::Error::DecoderStopped { path }.into()));
                }
            }
        }
    }
}

/// A file thread: sends the batches of `url`, then its skip report. Stops at the first error,
/// or as soon as the reader is dropped.
fn read_file(url: &str, settings: &FileSettings, send: &SyncSender<FromFile>) {
    let mut batches = match settings.open(url, 1) {
        Ok(batches) => batches,
        Err(e) => {
            let _ = send.send(FromFile::Batch(Err(e)));
            return;
        }
    };
    while let Some(batch) = batches.next() {
        let failed = batch.is_err();
        if send.send(FromFile::Batch(batch.map_err(Error::from))).is_err() || failed {
            return;
        }
    }
    let _ = send.send(FromFile::Done(batches.records().skipped().to_vec()));
}
