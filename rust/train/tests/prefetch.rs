//! Batches prepared ahead on the prefetch thread (on the device, their ids placed) train
//! bit for bit as the same batches handed to the step directly, wherever the tables live
//! (in memory, on the device, sharded over two workers); batches laid out as a GPU's prefetch
//! lays them out train the same on the CPU; the prefetch keeps the input's order, ends with
//! an input's error in its place, and stops its thread when dropped.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use candle_core::Device;
use sparktrain_train::{
    Batch, DataParallel, EmbeddingConfig, Encoded, Gather, Loss, OptimizerConfig, Prefetch, Prepared, Rule,
    ShardTables, StepStats, TableOptions, TrainError, WideDeep,
};
use support::{on_workers, tagged_rows, tagged_spec};

/// Rows `range`, encoded.
fn encoded(range: std::ops::Range<u64>) -> Encoded {
    tagged_spec().encode(&tagged_rows(range)).unwrap()
}

/// Worker `w`'s share (of `workers`) of every step's 64 rows, for `steps` steps.
fn shares(w: usize, workers: usize, steps: u64) -> Vec<Encoded> {
    let share = 64 / workers as u64;
    (0..steps).map(|s| encoded(s * 64 + w as u64 * share..s * 64 + (w as u64 + 1) * share)).collect()
}

/// How a test hands its batches to the step.
#[derive(Clone, Copy)]
enum Feed {
    /// Each batch as it is (`DataParallel::step`).
    Direct,
    /// Through the prefetch thread.
    Prefetch,
    /// Prepared on the CPU in the given layout (`Prepared::with_layout`).
    Laid(Gather),
}

/// Every step's loss and norm, then the weights, after training `workers` workers with the
/// tables placed by `tables`, batches fed as `feed` says.
fn train(tables: TableOptions, optimizer: &OptimizerConfig, workers: usize, feed: Feed) -> Vec<Vec<f32>> {
    let optimizer = optimizer.clone();
    on_workers(workers, move |w, ring| {
        let model = WideDeep::new(
            &tagged_spec(),
            &EmbeddingConfig { dim: 4, hidden: vec![8], cross_layers: 0, seed: 3 },
        )
        .unwrap();
        let mut dp =
            DataParallel::with_tables(model, Loss::BinaryCrossEntropy, &optimizer, ring, &tables).unwrap();
        let mut out = Vec::new();
        // Worker 1 has one batch fewer: the last step runs with one batch among two.
        let steps = if w == 1 { 11 } else { 12 };
        let batches = shares(w, workers, steps);
        let mut record = |stats: Option<StepStats>| stats.map(|s| out.extend([s.loss, s.grad_norm]));
        match feed {
            Feed::Direct => {
                for e in batches {
                    record(dp.step(Some(&Batch::from_encoded(&e).unwrap())).unwrap());
                }
                while record(dp.step(None).unwrap()).is_some() {}
            }
            Feed::Prefetch => {
                for prepared in Prefetch::for_step(batches.into_iter().map(Ok), &dp).unwrap() {
                    record(dp.step_prepared(Some(prepared.unwrap())).unwrap());
                }
                while record(dp.step_prepared(None).unwrap()).is_some() {}
            }
            Feed::Laid(gather) => {
                for e in batches {
                    let prepared = Prepared::with_layout(&e, &Device::Cpu, gather).unwrap();
                    record(dp.step_prepared(Some(prepared)).unwrap());
                }
                while record(dp.step_prepared(None).unwrap()).is_some() {}
            }
        }
        out.extend(dp.weights().unwrap().iter());
        out
    })
}

#[test]
fn prepared_batches_train_bit_for_bit_as_the_batches_themselves() {
    let memory = TableOptions { shard: ShardTables::Off, budget_bytes: None, on_device: Some(false) };
    let on_device = TableOptions { on_device: Some(true), ..memory };
    let sharded = TableOptions { shard: ShardTables::On, budget_bytes: None, on_device: None };
    let adam = OptimizerConfig::new(Rule::adam(0.02));
    let update_on_device = OptimizerConfig { update_on_device: Some(true), ..adam.clone() };
    let cases = [
        ("tables in memory, one worker", memory, &adam, 1),
        ("tables in memory, two workers", memory, &adam, 2),
        ("tables and the update on the device, one worker", on_device, &update_on_device, 1),
        ("tables and the update on the device, two workers", on_device, &update_on_device, 2),
        ("sharded tables, two workers", sharded, &adam, 2),
    ];
    for (name, tables, optimizer, workers) in cases {
        let direct = train(tables, optimizer, workers, Feed::Direct);
        let prepared = train(tables, optimizer, workers, Feed::Prefetch);
        assert!(direct[0].iter().all(|v| v.is_finite()), "{name}");
        assert_eq!(direct, prepared, "{name}");
    }
}

#[test]
fn batches_prepared_in_a_gpus_layout_on_the_cpu_train_as_the_batches_themselves() {
    // One row per id, padded bags, and the gradients summed by the plan a GPU's prefetch
    // makes: the same training as the CPU's own layout, to the rounding of sums in another
    // order.
    let memory = TableOptions { shard: ShardTables::Off, budget_bytes: None, on_device: Some(false) };
    let adam = OptimizerConfig::new(Rule::adam(0.02));
    let direct = train(memory, &adam, 1, Feed::Direct).remove(0);
    let laid_out = train(memory, &adam, 1, Feed::Laid(Gather::PerPosition)).remove(0);
    assert_eq!(direct.len(), laid_out.len());
    let top = direct.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in direct.iter().zip(&laid_out).enumerate() {
        assert!((a - b).abs() <= 1e-5 * top, "value {i}: {a} in the CPU's layout, {b} in a GPU's");
    }
}

#[test]
fn the_prefetch_keeps_the_order_and_ends_with_an_error_in_its_place() {
    let batches: Vec<Result<Encoded, TrainError>> = vec![
        Ok(encoded(0..5)),
        Ok(encoded(5..12)),
        Err(TrainError::InvalidArgument("part-00003.parquet is cut short".into())),
        Ok(encoded(12..20)),
    ];
    let mut prefetch = Prefetch::start(batches.into_iter(), Device::Cpu).unwrap();
    for rows in [5, 7] {
        assert_eq!(prefetch.next().unwrap().unwrap().batch().rows().unwrap(), rows);
    }
    let err = prefetch.next().unwrap().err().unwrap().to_string();
    assert!(err.contains("part-00003.parquet is cut short"), "{err}");
    assert!(prefetch.next().is_none(), "nothing after the error");

    // A batch that cannot be placed (its multi-hot counts do not match its ids) fails there.
    let mut broken = encoded(20..30);
    broken.bag_lengths[0] += 1;
    let batches = vec![Ok(encoded(0..4)), Ok(broken), Ok(encoded(30..40))];
    let mut prefetch = Prefetch::start(batches.into_iter(), Device::Cpu).unwrap();
    assert!(prefetch.next().unwrap().is_ok());
    let err = prefetch.next().unwrap().err().unwrap().to_string();
    assert!(err.contains("multi-hot counts add up to"), "{err}");
    assert!(prefetch.next().is_none());
}

/// Counts the batches it makes, without end, and says when it is dropped.
struct Endless {
    made: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
}

impl Iterator for Endless {
    type Item = Result<Encoded, TrainError>;

    fn next(&mut self) -> Option<Self::Item> {
        let n = self.made.fetch_add(1, Ordering::SeqCst) as u64;
        Some(Ok(encoded(n * 8..n * 8 + 8)))
    }
}

impl Drop for Endless {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_dropped_prefetch_prepares_a_bounded_number_ahead_and_stops() {
    let (made, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let endless = Endless { made: made.clone(), dropped: dropped.clone() };
    let mut prefetch = Prefetch::start(endless, Device::Cpu).unwrap();
    for _ in 0..3 {
        prefetch.next().unwrap().unwrap();
    }
    // Taken, waiting in the channel, and the one being prepared; no more.
    let deadline = Instant::now() + Duration::from_secs(2);
    while made.load(Ordering::SeqCst) < 3 + Prefetch::DEPTH + 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(made.load(Ordering::SeqCst), 3 + Prefetch::DEPTH + 1);
    drop(prefetch);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dropped.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the prefetch thread kept its input after being dropped");
        std::thread::sleep(Duration::from_millis(5));
    }
}
