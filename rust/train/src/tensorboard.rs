//! TensorBoard event files: `events.out.tfevents.<secs>.<host>.<pid>.<n>.v2` in a log
//! folder on any storage URL, each starting with the `brain.Event:2` version record, holding
//! scalar summaries that TensorBoard plots.
//!
//! A local file grows in place and is flushed on every [`EventWriter::flush`]. HDFS has no
//! hflush, so a remote file only appears when it is committed: the writer rolls to a new file
//! at a flush once `roll_every` has passed, so progress shows up while training runs.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;
use sparktrain_storage::AtomicWriter;
use sparktrain_tfrecord::RecordWriter;
use sparktrain_tfrecord::proto::{Event, EventWhat, Summary, SummaryValue, SummaryValueKind};

use crate::error::{Result, TrainError};

/// Event files this process has opened, which numbers their names.
static FILES_OPENED: AtomicU64 = AtomicU64::new(0);

enum Sink {
    Local(RecordWriter<BufWriter<File>>),
    Remote(RecordWriter<AtomicWriter>),
}

/// Writes scalars for TensorBoard into a log folder.
pub struct EventWriter {
    dir: String,
    local: bool,
    roll_every: Duration,
    sink: Option<(String, Sink)>,
    opened: Instant,
    files: usize,
}

fn io(url: &str, e: impl std::fmt::Display) -> TrainError {
    TrainError::format(url, format!("TensorBoard file: {e}"))
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl EventWriter {
    /// A writer into the folder `dir` (created if missing); remote files roll at most every
    /// `roll_every`.
    pub fn create(dir: &str, roll_every: Duration) -> Result<Self> {
        let local = sparktrain_storage::local_path(dir).map_err(|e| io(dir, e))?.is_some();
        sparktrain_storage::mkdirs(dir).map_err(|e| io(dir, e))?;
        Ok(EventWriter { dir: dir.into(), local, roll_every, sink: None, opened: Instant::now(), files: 0 })
    }

    /// The files written so far (the current one included).
    pub fn files(&self) -> usize {
        self.files
    }

    fn sink(&mut self) -> Result<&mut Sink> {
        if self.sink.is_none() {
            // The number is counted per process, not per writer, as TensorFlow's is: two
            // writers of one process in the same second must not pick the same name.
            let name = format!(
                "events.out.tfevents.{:010}.{}.{}.{}.v2",
                now() as u64,
                hostname(),
                std::process::id(),
                FILES_OPENED.fetch_add(1, Ordering::Relaxed)
            );
            let url = sparktrain_storage::join_url(&self.dir, &name);
            let mut sink = if self.local {
                let path =
                    sparktrain_storage::local_path(&url).map_err(|e| io(&url, e))?.expect("a local path");
                let file =
                    OpenOptions::new().create_new(true).write(true).open(&path).map_err(|e| io(&url, e))?;
                Sink::Local(RecordWriter::new(BufWriter::new(file)))
            } else {
                Sink::Remote(RecordWriter::new(
                    sparktrain_storage::create(&url, false).map_err(|e| io(&url, e))?,
                ))
            };
            let version = Event {
                wall_time: now(),
                step: 0,
                what: Some(EventWhat::FileVersion("brain.Event:2".into())),
            };
            write(&url, &mut sink, &version)?;
            self.sink = Some((url, sink));
            self.opened = Instant::now();
            self.files += 1;
        }
        Ok(&mut self.sink.as_mut().expect("opened").1)
    }

    /// Records scalar `values` (tag, value) at `step`.
    pub fn scalars(&mut self, step: i64, values: &[(&str, f32)]) -> Result<()> {
        let value = values
            .iter()
            .map(|(tag, v)| SummaryValue {
                tag: tag.to_string(),
                value: Some(SummaryValueKind::SimpleValue(*v)),
                ..SummaryValue::default()
            })
            .collect();
        let event = Event { wall_time: now(), step, what: Some(EventWhat::Summary(Summary { value })) };
        self.sink()?;
        let (url, sink) = self.sink.as_mut().expect("opened");
        write(url, sink, &event)
    }

    /// Makes what was written visible: a local file is flushed; a remote file is committed
    /// (and the next scalars start a new one) once `roll_every` has passed since it opened.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.sink {
            Some((url, Sink::Local(w))) => w.flush().map_err(|e| io(url, e)),
            Some((_, Sink::Remote(_))) if self.opened.elapsed() >= self.roll_every => self.commit(),
            _ => Ok(()),
        }
    }

    fn commit(&mut self) -> Result<()> {
        match self.sink.take() {
            Some((url, Sink::Local(w))) => {
                w.into_inner().and_then(|mut b| b.flush()).map_err(|e| io(&url, e))
            }
            Some((url, Sink::Remote(w))) => {
                let writer = w.into_inner().map_err(|e| io(&url, e))?;
                writer.commit().map(|_| ()).map_err(|e| io(&url, e))
            }
            None => Ok(()),
        }
    }

    /// Finishes the current file.
    pub fn close(mut self) -> Result<()> {
        self.commit()
    }
}

fn write(url: &str, sink: &mut Sink, event: &Event) -> Result<()> {
    let bytes = event.encode_to_vec();
    match sink {
        Sink::Local(w) => w.write_record(&bytes),
        Sink::Remote(w) => w.write_record(&bytes),
    }
    .map_err(|e| io(url, e))
}
