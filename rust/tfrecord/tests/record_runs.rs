//! Runs of records framed for other threads (`RecordReader::next_run`) hold exactly what
//! reading record by record gives: the same payloads in order, the same error at the same
//! offset after the same records, the same skip report; with or without given-back buffers.

use std::io::{self, Read};

use sparktrain_tfrecord::{ReaderOptions, RecordReader, RecordWriter, SkippedRegion};

/// Payloads of mixed sizes: empty ones, small ones, and some longer than the reader's 256 KiB
/// reads, so that runs grow their buffer mid-run.
fn payloads(n: usize) -> Vec<Vec<u8>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = match i % 50 {
                7 => 0,
                23 => 300_000 + (state % 200_000) as usize,
                _ => (state % 1500) as usize,
            };
            (0..len).map(|j| (j as u64 ^ state) as u8).collect()
        })
        .collect()
}

fn file_of(records: &[Vec<u8>]) -> Vec<u8> {
    let mut writer = RecordWriter::new(Vec::new());
    for record in records {
        writer.write_record(record).unwrap();
    }
    writer.into_inner().unwrap()
}

fn options(skip_corrupt: bool) -> ReaderOptions {
    ReaderOptions { skip_corrupt, ..Default::default() }
}

/// What a reader gave: the payloads, the error it ended with, the regions it skipped.
#[derive(Debug, PartialEq)]
struct Outcome {
    records: Vec<Vec<u8>>,
    error: Option<String>,
    skipped: Vec<SkippedRegion>,
}

fn one_by_one<R: Read>(mut reader: RecordReader<R>) -> Outcome {
    let mut records = Vec::new();
    let error = loop {
        match reader.next() {
            None => break None,
            Some(Ok(payload)) => records.push(payload.to_vec()),
            Some(Err(e)) => break Some(e.to_string()),
        }
    };
    Outcome { records, error, skipped: reader.skipped().to_vec() }
}

fn by_runs<R: Read>(mut reader: RecordReader<R>, rows: usize, recycle: bool) -> Outcome {
    let mut records = Vec::new();
    let error = 'runs: loop {
        match reader.next_run(rows) {
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
            Ok(Some(run)) => {
                assert!(!run.is_empty() && run.len() <= rows, "{} records in a run of {rows}", run.len());
                assert_eq!(run.first_record(), records.len() as u64);
                for payload in run.payloads(reader.path()) {
                    match payload {
                        Ok(payload) => records.push(payload.to_vec()),
                        Err(e) => break 'runs Some(e.to_string()),
                    }
                }
                if recycle {
                    reader.recycle(run);
                }
            }
        }
    };
    Outcome { records, error, skipped: reader.skipped().to_vec() }
}

#[test]
fn runs_give_every_record_in_order_for_any_run_length() {
    let records = payloads(400);
    let bytes = file_of(&records);
    for rows in [1, 2, 7, 64, 1000] {
        for recycle in [false, true] {
            for skip in [false, true] {
                let got = by_runs(RecordReader::new(&bytes[..], "mem", options(skip)), rows, recycle);
                assert!(got.error.is_none(), "{rows} rows: {:?}", got.error);
                assert!(got.records == records, "{rows} rows, recycle {recycle}, skip {skip}");
            }
        }
    }
}

/// Damage in a header, a payload, a payload's CRC, and a cut-off end: the records before it,
/// then the error the one-by-one reader raises (kind, file, offset); in skip mode the same
/// records and the same skip report.
#[test]
fn damage_surfaces_at_the_same_record_and_offset() {
    let records = payloads(300);
    let clean = file_of(&records);
    let mut starts = vec![0usize];
    for record in &records {
        starts.push(starts.last().unwrap() + record.len() + 16);
    }
    let (k, last) = (starts[150], starts[299]);
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let damages: Vec<(&str, Damage)> = vec![
        ("first header", Box::new(|b: &mut Vec<u8>| b[2] ^= 0x10)),
        ("a header", Box::new(move |b: &mut Vec<u8>| b[k + 9] ^= 0x01)),
        ("a payload", Box::new(move |b: &mut Vec<u8>| b[k + 12] ^= 0x80)),
        ("a payload CRC", Box::new(move |b: &mut Vec<u8>| b[starts[151] - 2] ^= 0x04)),
        ("the end", Box::new(move |b: &mut Vec<u8>| b.truncate(last + 20))),
    ];
    for (what, damage) in damages {
        let mut bytes = clean.clone();
        damage(&mut bytes);
        for skip in [false, true] {
            let expected = one_by_one(RecordReader::new(&bytes[..], "part-3", options(skip)));
            assert_eq!(expected.error.is_some(), !skip, "{what}");
            for rows in [1, 16, 4096] {
                let got = by_runs(RecordReader::new(&bytes[..], "part-3", options(skip)), rows, true);
                assert!(
                    got == expected,
                    "{what}, {rows} rows, skip {skip}: {:?} / {:?}",
                    got.error,
                    expected.error
                );
            }
        }
    }
}

/// A stream that fails once after `good` bytes, then goes on: a run ends before the failure,
/// the next call raises it at the offset the one-by-one reader names, and a retry continues.
struct FailsOnce {
    bytes: Vec<u8>,
    at: usize,
    good: usize,
    failed: bool,
}

impl Read for FailsOnce {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.failed && self.at == self.good {
            self.failed = true;
            return Err(io::Error::other("connection reset"));
        }
        let end = if self.failed { self.bytes.len() } else { self.good };
        let n = buf.len().min(end - self.at);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[test]
fn a_read_error_ends_the_run_and_is_raised_by_the_next_call() {
    let records = payloads(100);
    let bytes = file_of(&records);
    let stream = |good| FailsOnce { bytes: bytes.clone(), at: 0, good, failed: false };
    let good = bytes.len() / 2 + 5;
    let expected = one_by_one(RecordReader::new(stream(good), "remote", options(false)));
    let message = expected.error.clone().expect("the one-by-one reader fails");
    assert!(message.contains("remote") && message.contains("connection reset"), "{message}");

    let mut reader = RecordReader::new(stream(good), "remote", options(false));
    let mut seen = Vec::new();
    let error = loop {
        match reader.next_run(1000) {
            Ok(Some(run)) => seen.extend(run.payloads("remote").map(|p| p.unwrap().to_vec())),
            Ok(None) => panic!("the stream fails before its end"),
            Err(e) => break e.to_string(),
        }
    };
    assert_eq!((&seen, &error), (&expected.records, &message));
    // The failed read consumed nothing: a retry reads on from the same record to the end.
    let mut rest = Vec::new();
    while let Some(run) = reader.next_run(1000).unwrap() {
        rest.extend(run.payloads("remote").map(|p| p.unwrap().to_vec()));
    }
    seen.extend(rest);
    assert!(seen == records);
}
