//! Reads a dataset of several TFRecord files of the Criteo-like table into Arrow batches of
//! 65,536 rows with a given number of threads, and prints rows/s: with at least as many files as
//! threads, each thread reads whole files. Run it once per thread count under `taskset`, so
//! that N threads get N cores:
//!
//! `cargo build --release -p sparktrain-dataset --example read_files_scaling`
//! `for n in 1 2 4; do taskset -c 0-$((n-1)) target/release/examples/read_files_scaling $n; done`
//!
//! Arguments: `THREADS [REPEAT] [FILES] [ROWS]` (defaults 7 runs, 8 files, 1,000,000 rows in
//! all), written to a temporary folder first (not timed).

use std::collections::HashMap;
use std::fs::File;

use sparktrain_dataset::{DatasetReader, ReadOptions};
use sparktrain_tfrecord::{ExampleEncoder, RecordWriter};

#[path = "../../tfrecord/examples/common/allocator.rs"]
mod allocator;
#[path = "../../tfrecord/examples/common/criteo.rs"]
mod criteo;
#[path = "../../tfrecord/examples/common/timing.rs"]
mod timing;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let threads = args.next().unwrap_or(1);
    let repeat = args.next().unwrap_or(7);
    let files = args.next().unwrap_or(8);
    let rows = args.next().unwrap_or(1_000_000);
    let table = criteo::table(rows);
    let encoder = ExampleEncoder::new(table.schema(), &HashMap::new()).expect("supported schema");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let per_file = rows.div_ceil(files);
    for (part, offset) in (0..rows).step_by(per_file).enumerate() {
        let path = dir.path().join(format!("part-{part:05}.tfrecord"));
        let mut writer = RecordWriter::new(File::create(&path).expect("writable"));
        encoder.write_batch(&table.slice(offset, per_file.min(rows - offset)), &mut writer).expect("encodes");
        writer.into_inner().expect("written").sync_all().expect("synced");
    }
    let url = dir.path().display().to_string();
    let throughput = timing::measure(repeat, || {
        let options = ReadOptions { schema: Some(table.schema()), threads, ..Default::default() };
        let read: usize =
            DatasetReader::open(&url, options).expect("opens").map(|b| b.expect("reads").num_rows()).sum();
        assert_eq!(read, rows);
        read
    });
    println!("{} rows in {files} files, {threads} threads: {throughput}", throughput.rows);
}
