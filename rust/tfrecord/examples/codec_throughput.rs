//! Measures the codec alone, in memory: Arrow → framed `tf.train.Example`s → Arrow, for a
//! Criteo-like table (a label, 13 float32 columns, 26 int64 id columns).
//!
//! `cargo run --release -p sparktrain-tfrecord --example codec_throughput [rows]`

use std::collections::HashMap;
use std::time::Instant;

use sparktrain_tfrecord::{ExampleBatchReader, ExampleEncoder, ReaderOptions, RecordReader, RecordWriter};

#[path = "common/criteo.rs"]
mod criteo;

fn main() {
    let rows: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let batch = criteo::table(rows);
    let encoder = ExampleEncoder::new(batch.schema(), &HashMap::new()).expect("supported schema");

    let start = Instant::now();
    let mut writer = RecordWriter::new(Vec::with_capacity(rows * 800));
    for offset in (0..rows).step_by(65_536) {
        let slice = batch.slice(offset, 65_536.min(rows - offset));
        encoder.write_batch(&slice, &mut writer).expect("encodes");
    }
    let bytes = writer.into_inner().expect("in memory");
    let encode = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut records = RecordReader::new(&bytes[..], "memory", ReaderOptions::default());
    let mut framed = 0usize;
    while let Some(record) = records.next() {
        framed += record.expect("valid framing").len();
    }
    let framing = start.elapsed().as_secs_f64();
    assert!(framed > 0);

    let start = Instant::now();
    let records = RecordReader::new(&bytes[..], "memory", ReaderOptions::default());
    let reader = ExampleBatchReader::new(records, batch.schema(), 65_536).expect("schema");
    let mut decoded = 0;
    for b in reader {
        decoded += b.expect("decodes").num_rows();
    }
    let decode = start.elapsed().as_secs_f64();
    assert_eq!(decoded, rows);

    let mb = bytes.len() as f64 / 1e6;
    println!("rows {rows} bytes_per_row {:.1}", bytes.len() as f64 / rows as f64);
    println!(
        "encode_rows_per_s {:.0} encode_mb_per_s {:.0} encode_ns_per_row {:.0}",
        rows as f64 / encode,
        mb / encode,
        encode * 1e9 / rows as f64
    );
    println!(
        "framing_rows_per_s {:.0} framing_ns_per_row {:.0}",
        rows as f64 / framing,
        framing * 1e9 / rows as f64
    );
    println!(
        "decode_rows_per_s {:.0} decode_mb_per_s {:.0} decode_ns_per_row {:.0}",
        rows as f64 / decode,
        mb / decode,
        decode * 1e9 / rows as f64
    );
}
