//! The benchmark examples' table: Criteo-like rows (a label, 13 float32 columns, 26 int64 id
//! columns), the same in every run.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array};
use arrow::record_batch::RecordBatch;

/// A small deterministic generator, so that runs are comparable.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

pub fn table(rows: usize) -> RecordBatch {
    let mut rng = SplitMix(7);
    let mut columns: Vec<(String, ArrayRef)> = Vec::new();
    let label: Int64Array = (0..rows).map(|_| (rng.next() & 1) as i64).collect();
    columns.push(("label".into(), Arc::new(label)));
    for i in 1..=13 {
        let values: Float32Array = (0..rows).map(|_| (rng.next() % 10_000) as f32 / 7.0).collect();
        columns.push((format!("I{i}"), Arc::new(values)));
    }
    for i in 1..=26 {
        let values: Int64Array = (0..rows).map(|_| (rng.next() >> 33) as i64).collect();
        columns.push((format!("C{i}"), Arc::new(values)));
    }
    RecordBatch::try_from_iter(columns).expect("valid columns")
}
