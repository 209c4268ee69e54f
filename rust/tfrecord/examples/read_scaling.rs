//! Reads a TFRecord file of the Criteo-like table into Arrow batches of 65,536 rows on a given
//! number of decoder threads, and prints rows/s: the Rust-only view of `bench_tfrecord.py`'s
//! read lines, for profiling and for scaling on machines with more cores. Run it once per
//! thread count under `taskset`, so that N threads get N cores:
//!
//! `cargo build --release -p sparktrain-tfrecord --example read_scaling`
//! `for n in 1 2 4; do taskset -c 0-$((n-1)) target/release/examples/read_scaling $n; done`
//!
//! Arguments: `THREADS [REPEAT] [ROWS | FILE]`. With ROWS (default 1,000,000) it writes that
//! many rows to a temporary file first (not timed); a FILE is read with the table's schema.

use std::collections::HashMap;
use std::fs::File;

use sparktrain_tfrecord::{
    ExampleBatchReader, ExampleEncoder, ParallelBatchReader, ReaderOptions, RecordReader, RecordType,
    RecordWriter,
};

#[path = "common/allocator.rs"]
mod allocator;
#[path = "common/criteo.rs"]
mod criteo;
#[path = "common/timing.rs"]
mod timing;

const BATCH_ROWS: usize = 65_536;

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let repeat: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let input = args.next().unwrap_or_else(|| "1000000".into());
    let schema = criteo::table(1).schema();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = match input.parse::<usize>() {
        Ok(rows) => {
            let table = criteo::table(rows);
            let encoder = ExampleEncoder::new(table.schema(), &HashMap::new()).expect("supported schema");
            let path = dir.path().join("criteo.tfrecord");
            let mut writer = RecordWriter::new(File::create(&path).expect("writable"));
            for offset in (0..rows).step_by(BATCH_ROWS) {
                let slice = table.slice(offset, BATCH_ROWS.min(rows - offset));
                encoder.write_batch(&slice, &mut writer).expect("encodes");
            }
            writer.into_inner().expect("written").sync_all().expect("synced");
            path
        }
        Err(_) => input.into(),
    };
    let throughput = timing::measure(repeat, || {
        let file = File::open(&path).expect("readable");
        let records = RecordReader::new(file, path.display().to_string(), ReaderOptions::default());
        // One thread decodes in the calling thread, as the dataset reader does.
        let reader: Box<dyn Iterator<Item = _>> = if threads == 1 {
            Box::new(ExampleBatchReader::new(records, schema.clone(), BATCH_ROWS).expect("schema"))
        } else {
            let kind = RecordType::Example;
            Box::new(
                ParallelBatchReader::new(records, schema.clone(), BATCH_ROWS, kind, threads).expect("schema"),
            )
        };
        reader.map(|b| b.expect("decodes").num_rows()).sum::<usize>()
    });
    println!("{} rows, {threads} threads: {throughput}", throughput.rows);
}
