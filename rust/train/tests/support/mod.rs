//! Rings of workers on 127.0.0.1 for the training tests, one thread per worker, and a small
//! embedding data set several tests train on.

#![allow(dead_code)]

use std::net::TcpListener;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use arrow::array::{ArrayRef, Float32Array, Int64Array, ListArray, StringArray};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use sparktrain_collective::{Communicator, Config};
use sparktrain_train::features::{MultiHot, Pooling};
use sparktrain_train::{Categorical, FeatureSpec, SharedRing, shared};

/// Connected rings for `n` workers; `[None]` for one worker alone.
pub fn rings(n: usize) -> Vec<Option<SharedRing>> {
    if n == 1 {
        return vec![None];
    }
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, l)| {
            let config = Config::new(rank, peers.clone(), b"test secret".to_vec(), Duration::from_secs(20));
            thread::spawn(move || Communicator::connect(l, config).unwrap())
        })
        .collect();
    handles.into_iter().map(|h| Some(shared(h.join().unwrap()))).collect()
}

/// Runs `work(worker, ring)` on `n` workers at once, one thread each; results by worker.
pub fn on_workers<R: Send + 'static>(
    n: usize,
    work: impl Fn(usize, Option<SharedRing>) -> R + Send + Clone + 'static,
) -> Vec<R> {
    let handles: Vec<_> = rings(n)
        .into_iter()
        .enumerate()
        .map(|(w, ring)| {
            let work = work.clone();
            thread::spawn(move || work(w, ring))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A dense column, two categorical ones and a multi-hot one pooled by its mean.
pub fn tagged_spec() -> FeatureSpec {
    FeatureSpec {
        dense: vec!["x".into()],
        categorical: vec![
            Categorical { name: "shop".into(), buckets: 50 },
            Categorical { name: "city".into(), buckets: 40 },
        ],
        crossed: vec![],
        multi_hot: vec![MultiHot { name: "tags".into(), buckets: 30, pooling: Pooling::Mean }],
        label: "label".into(),
    }
}

/// Rows `range` for [`tagged_spec`]: low shop ids are hot, so a batch touches some rows many
/// times and most rows never; each row has 0 to 3 tags.
pub fn tagged_rows(range: std::ops::Range<u64>) -> RecordBatch {
    let mix = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(23);
    let shop: Vec<i64> = range.clone().map(|i| ((mix(i) % 64) * (mix(i) % 64) / 64) as i64).collect();
    let city: Vec<String> = range.clone().map(|i| format!("c{}", mix(i + 5) % 30)).collect();
    let tags: Vec<Vec<i64>> = range
        .clone()
        .map(|i| (0..mix(i + 11) % 4).map(|k| (mix(i + 13 + k) % 20) as i64).collect())
        .collect();
    let label: Vec<i64> = (0..shop.len())
        .map(|r| (((shop[r] % 3 == 0) != city[r].ends_with('1')) != tags[r].contains(&3)) as i64)
        .collect();
    let x: Vec<f32> = range.map(|i| (mix(i + 3) % 100) as f32 / 50.0 - 1.0).collect();
    let lists = tags.into_iter().map(|t| Some(t.into_iter().map(Some).collect::<Vec<_>>()));
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("label", Arc::new(Int64Array::from(label))),
        ("x", Arc::new(Float32Array::from(x))),
        ("shop", Arc::new(Int64Array::from(shop))),
        ("city", Arc::new(StringArray::from(city))),
        ("tags", Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(lists))),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}
