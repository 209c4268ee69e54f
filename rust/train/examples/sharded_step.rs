//! Sharded against replicated embedding tables, side by side: the synchronous step of a
//! Wide&Deep model over eight categorical columns whose values follow a Zipf law (a few very
//! hot values, a long tail, as click logs have), on 2 and 4 workers (threads of this process,
//! rings over loopback TCP, sealed frames). For each placement it prints the median step time
//! (the slowest worker's), the bytes each worker put on the wire per step, and each worker's
//! table memory; for the sharded step also the time of an all-to-all of one step's ids alone
//! (what sending the next batch's ids during the dense step could hide at most).
//!
//! `cargo run --release -p sparktrain-train --example sharded_step [buckets per column] [steps]`
//!
//! Measured here (2 cores shared by every worker, so 4 workers are CPU-bound; Adam; 512
//! rows per worker; the table memory is values and Adam's moments; a few hundred KiB per step
//! of wire traffic is mostly the dense layers' all-reduce, the same for both placements):
//!
//! ```text
//! 524288 ids (8 × 65536 buckets), 30 steps
//! workers  placement    step ms  wire KiB/step/worker  tables MiB/worker  ids all-to-all ms
//!       2  replicated     15.74                 201.2              102.0  -
//!       2  sharded        19.94                 197.4               51.0  0.092
//!       4  replicated     61.32                 541.9              102.0  -
//!       4  sharded        30.08                 295.4               25.5  0.369
//! 2097152 ids (8 × 262144 buckets), 30 steps
//!       2  replicated     46.33                 208.2              408.0  -
//!       2  sharded        25.13                 204.0              204.0  0.119
//!       4  replicated     92.97                 563.4              408.0  -
//!       4  sharded        36.00                 305.9              102.0  0.496
//! ```
//!
//! A rerun of the first case gave 19.4 ms replicated and 19.2 ms sharded for two workers:
//! there the two are within this machine's noise. The replicated exchange all-gathers every
//! worker's (id, row) lists around the ring, so its bytes grow with the workers; the sharded
//! one sends each row to and from its owner once. Sending one step's ids to their owners takes
//! under 2% of a step, so sending the next batch's ids during the dense step would save at
//! most that: not done.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Float32Array, Int64Array};
use arrow::record_batch::RecordBatch;
use sparktrain_collective::{Communicator, Config};
use sparktrain_train::shard::owner;
use sparktrain_train::{
    Batch, Categorical, DataParallel, EmbeddingConfig, FeatureSpec, Lookup, Loss, OptimizerConfig, Rule,
    ShardTables, SharedRing, TableOptions, WideDeep, shared,
};

const COLUMNS: usize = 8;
const ROWS: usize = 512;
const ZIPF: f64 = 1.1;

fn spec(buckets: u32) -> FeatureSpec {
    FeatureSpec {
        dense: vec!["x".into()],
        categorical: (0..COLUMNS).map(|c| Categorical { name: format!("c{c}"), buckets }).collect(),
        crossed: vec![],
        multi_hot: vec![],
        label: "label".into(),
    }
}

/// Draws ranks `0..n` with probability ∝ 1/(k+1)^s, by inverse CDF.
struct Zipf {
    cdf: Vec<f64>,
    state: u64,
}

impl Zipf {
    fn new(n: usize, s: f64, seed: u64) -> Self {
        let mut cdf: Vec<f64> = (0..n).map(|k| 1.0 / ((k + 1) as f64).powf(s)).collect();
        let mut sum = 0.0;
        for p in cdf.iter_mut() {
            sum += *p;
            *p = sum;
        }
        cdf.iter_mut().for_each(|p| *p /= sum);
        Zipf { cdf, state: seed }
    }

    fn next(&mut self) -> i64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let u = ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&p| p < u) as i64
    }
}

/// `count` batches of [`ROWS`] rows for `worker`, encoded for `spec`.
fn batches(spec: &FeatureSpec, buckets: u32, worker: usize, count: usize) -> Vec<Batch> {
    let mut zipf = Zipf::new(buckets as usize * 4, ZIPF, 7 + worker as u64);
    (0..count)
        .map(|_| {
            let mut columns: Vec<(String, ArrayRef)> = Vec::new();
            let values: Vec<Vec<i64>> =
                (0..COLUMNS).map(|_| (0..ROWS).map(|_| zipf.next()).collect()).collect();
            let label: Vec<i64> = (0..ROWS).map(|r| (values[0][r] % 3 == 0) as i64).collect();
            columns.push(("label".into(), Arc::new(Int64Array::from(label))));
            columns.push(("x".into(), Arc::new(Float32Array::from(vec![0.5f32; ROWS]))));
            for (c, v) in values.into_iter().enumerate() {
                columns.push((format!("c{c}"), Arc::new(Int64Array::from(v))));
            }
            let batch = RecordBatch::try_from_iter(columns).unwrap();
            Batch::from_encoded(&spec.encode(&batch).unwrap()).unwrap()
        })
        .collect()
}

fn rings(n: usize) -> Vec<SharedRing> {
    let listeners: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let peers: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(rank, l)| {
            // Over TCP, sealed, as between hosts: on one host the ranks would move to unix sockets.
            let config = Config {
                local: false,
                ..Config::new(rank, peers.clone(), b"bench".to_vec(), Duration::from_secs(60))
            };
            thread::spawn(move || shared(Communicator::connect(l, config).unwrap()))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

struct Figures {
    step: f64,
    bytes: f64,
    table_bytes: u64,
    ids_exchange: Option<f64>,
}

fn measure(n: usize, buckets: u32, steps: usize, shard: ShardTables) -> Figures {
    let spec = spec(buckets);
    let optimizer = OptimizerConfig::new(Rule::adam(1e-3));
    let warmup = 5;
    let handles: Vec<_> = rings(n)
        .into_iter()
        .enumerate()
        .map(|(w, ring)| {
            let (spec, optimizer) = (spec.clone(), optimizer.clone());
            thread::spawn(move || {
                let data = batches(&spec, buckets, w, warmup + steps);
                let config = EmbeddingConfig { dim: 16, hidden: vec![64, 32], cross_layers: 0, seed: 1 };
                let model = WideDeep::new(&spec, &config).unwrap();
                let tables = TableOptions { shard, budget_bytes: None, on_device: None };
                let mut dp = DataParallel::with_tables(
                    model,
                    Loss::BinaryCrossEntropy,
                    &optimizer,
                    Some(ring.clone()),
                    &tables,
                )
                .unwrap();
                let mut times = Vec::with_capacity(steps);
                let mut bytes = 0;
                for (i, batch) in data.iter().enumerate() {
                    let sent = ring.lock().unwrap().bytes_sent();
                    let start = Instant::now();
                    dp.step(Some(batch)).unwrap().unwrap();
                    if i >= warmup {
                        times.push(start.elapsed().as_secs_f64());
                        bytes += ring.lock().unwrap().bytes_sent() - sent;
                    }
                }
                // One step's ids sent to their owners, alone, as the sharded step sends them.
                let ids_exchange = dp.is_sharded().then(|| {
                    let mut exchange_times = Vec::new();
                    for batch in &data[warmup..] {
                        let unique = Lookup::distinct_ids(batch).unwrap();
                        let mut items = vec![vec![1u8]; n];
                        unique
                            .iter()
                            .for_each(|&id| items[owner(id, n)].extend_from_slice(&id.to_le_bytes()));
                        ring.lock().unwrap().barrier().unwrap();
                        let start = Instant::now();
                        ring.lock().unwrap().all_to_all(&items).unwrap();
                        exchange_times.push(start.elapsed().as_secs_f64());
                    }
                    exchange_times
                });
                (times, bytes as f64 / steps as f64, dp.placement().bytes, ids_exchange)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let median_of_slowest = |per_worker: Vec<&Vec<f64>>| {
        let count = per_worker[0].len();
        let mut slowest: Vec<f64> =
            (0..count).map(|i| per_worker.iter().map(|t| t[i]).fold(0.0, f64::max)).collect();
        slowest.sort_by(f64::total_cmp);
        slowest[count / 2]
    };
    let step = median_of_slowest(results.iter().map(|r| &r.0).collect());
    let ids_exchange = results[0]
        .3
        .as_ref()
        .map(|_| median_of_slowest(results.iter().map(|r| r.3.as_ref().unwrap()).collect()));
    let bytes = results.iter().map(|r| r.1).sum::<f64>() / n as f64;
    Figures { step, bytes, table_bytes: results.iter().map(|r| r.2).max().unwrap(), ids_exchange }
}

fn main() {
    // SAFETY: mallopt only sets allocator parameters, before any large allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
    let mut args = std::env::args().skip(1);
    let buckets: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1 << 16);
    let steps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);
    let ids = COLUMNS * buckets as usize;
    println!(
        "Wide&Deep, {COLUMNS} Zipf({ZIPF}) columns of {buckets} buckets ({ids} ids, dim 16), Adam, {ROWS} rows per \
         worker, {steps} steps"
    );
    println!("workers  placement    step ms  wire KiB/step/worker  tables MiB/worker  ids all-to-all ms");
    for n in [2, 4] {
        for shard in [ShardTables::Off, ShardTables::On] {
            let f = measure(n, buckets, steps, shard);
            println!(
                "{n:>7}  {:<10}  {:>8.2}  {:>20.1}  {:>17.1}  {}",
                if shard == ShardTables::On { "sharded" } else { "replicated" },
                f.step * 1e3,
                f.bytes / 1024.0,
                f.table_bytes as f64 / (1 << 20) as f64,
                f.ids_exchange.map_or("-".to_string(), |t| format!("{:.3}", t * 1e3)),
            );
        }
    }
}
