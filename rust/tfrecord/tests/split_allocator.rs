//! The Python binding's global allocator (`rust/python/src/allocator.rs`, which routes blocks
//! by size between mimalloc and the C library), installed here as this test binary's allocator:
//! blocks that grow or shrink across the 128 KiB line keep their bytes, and Arrow batches
//! decoded through it are the ones written.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sparktrain_tfrecord::{ExampleBatchReader, ExampleEncoder, ReaderOptions, RecordReader, RecordWriter};

#[path = "../../python/src/allocator.rs"]
mod split;

#[global_allocator]
static ALLOCATOR: split::SplitAllocator = split::SplitAllocator;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

#[test]
fn a_block_resized_across_the_line_keeps_its_bytes() {
    for (from, to) in [(1_000, 300_000), (300_000, 1_000), (100_000, 200_000), (200_000, 4_000_000)] {
        let mut bytes = pattern(from);
        if to > from {
            bytes.reserve_exact(to - from);
            assert!(bytes.capacity() >= to);
            assert_eq!(bytes, pattern(from), "grown from {from} to {to}");
        } else {
            bytes.truncate(to);
            bytes.shrink_to_fit();
            assert_eq!(bytes, pattern(to), "shrunk from {from} to {to}");
        }
    }
}

#[test]
fn zeroed_blocks_on_both_sides_are_zero() {
    for len in [64, 128 * 1024 - 1, 128 * 1024, 1 << 22] {
        let zeros = vec![0u8; len];
        assert!(zeros.iter().all(|&b| b == 0), "{len} bytes");
    }
}

#[test]
fn batches_decoded_through_it_are_the_ones_written() {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let rows = 200_000;
    let ids = Int64Array::from_iter_values((0..rows as i64).map(|i| i * 7));
    let table = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids.clone())]).unwrap();
    let encoder = ExampleEncoder::new(schema.clone(), &HashMap::new()).unwrap();
    let mut writer = RecordWriter::new(Vec::new());
    encoder.write_batch(&table, &mut writer).unwrap();
    let bytes = writer.into_inner().unwrap();
    let records = RecordReader::new(bytes.as_slice(), "ids.tfrecord", ReaderOptions::default());
    let reader = ExampleBatchReader::new(records, schema, 65_536).unwrap();
    let mut read = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let column = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        read.extend(column.values().iter().copied());
    }
    assert_eq!(read, ids.values().to_vec());
}
