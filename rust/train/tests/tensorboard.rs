//! Event files, local and on a real HDFS (MiniDFS): they start with the version record and
//! hold the scalars in order; a local file is readable after each flush, and HDFS files roll
//! so that progress appears while training runs.

#[path = "../../storage/tests/common/mod.rs"]
mod common;

use std::time::Duration;

use prost::Message;
use sparktrain_tfrecord::proto::{Event, EventWhat, SummaryValueKind};
use sparktrain_tfrecord::{ReaderOptions, RecordReader};
use sparktrain_train::EventWriter;

/// (step, tag, value) of every scalar in the folder's event files, file after file.
fn scalars(dir: &str) -> Vec<(i64, String, f32)> {
    let mut out = Vec::new();
    for file in sparktrain_storage::list(dir).unwrap() {
        let name = file.url.rsplit('/').next().unwrap().to_string();
        assert!(name.starts_with("events.out.tfevents.") && name.ends_with(".v2"), "{name}");
        let mut reader = RecordReader::new(
            sparktrain_storage::open(&file.url).unwrap(),
            &file.url,
            ReaderOptions::default(),
        );
        let events: Vec<Event> =
            reader.read_all().unwrap().iter().map(|r| Event::decode(r.as_slice()).unwrap()).collect();
        assert_eq!(events[0].what, Some(EventWhat::FileVersion("brain.Event:2".into())), "{name}");
        for event in &events[1..] {
            let Some(EventWhat::Summary(summary)) = &event.what else { panic!("{event:?}") };
            for v in &summary.value {
                let Some(SummaryValueKind::SimpleValue(x)) = v.value else { panic!("{v:?}") };
                out.push((event.step, v.tag.clone(), x));
            }
        }
    }
    out
}

#[test]
fn local_event_files_are_readable_after_each_flush() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs").to_string_lossy().into_owned();
    let mut w = EventWriter::create(&logs, Duration::from_secs(3600)).unwrap();
    w.scalars(1, &[("loss", 0.5), ("accuracy", 0.75)]).unwrap();
    w.flush().unwrap();
    assert_eq!(scalars(&logs), vec![(1, "loss".into(), 0.5), (1, "accuracy".into(), 0.75)]);
    w.scalars(2, &[("loss", 0.25)]).unwrap();
    w.close().unwrap();
    assert_eq!(scalars(&logs).last(), Some(&(2, "loss".into(), 0.25)));
}

#[test]
fn hdfs_event_files_roll_so_progress_appears() {
    let dir = common::test_dir("train-tensorboard");
    let logs = format!("{}/logs", dir.url);
    let mut w = EventWriter::create(&logs, Duration::ZERO).unwrap();
    for step in 0..3 {
        w.scalars(step, &[("loss", step as f32)]).unwrap();
        w.flush().unwrap();
        // Each flush committed a file: everything so far is visible.
        assert_eq!(scalars(&logs).len(), step as usize + 1);
    }
    w.close().unwrap();
    assert_eq!(sparktrain_storage::list(&logs).unwrap().len(), 3);
    assert_eq!(scalars(&logs), (0..3).map(|s| (s, "loss".to_string(), s as f32)).collect::<Vec<_>>());
}
