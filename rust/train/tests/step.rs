//! The synchronous step over real rings on 127.0.0.1, one thread per worker: N workers with
//! batch b end where 1 worker with batch N*b ends, with identical weights everywhere; uneven
//! shards end together; a model learns.

mod support;

use candle_core::{Device, Tensor};
use sparktrain_train::{
    Batch, DataParallel, LogisticRegression, Loss, Mlp, Model, OptimizerConfig, Rule, SharedRing,
};
use support::on_workers;

const INPUTS: usize = 6;

/// A binary classifier's synchronous trainer with `rule` on one thread.
fn trainer<M: Model>(model: M, rule: Rule, ring: Option<SharedRing>) -> DataParallel<M> {
    let optimizer = OptimizerConfig::new(rule);
    DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, ring).unwrap()
}

/// Example `i`: features in [-1, 1) and a label from a fixed linear rule.
fn example(i: usize) -> ([f32; INPUTS], f32) {
    let mut x = [0f32; INPUTS];
    let mut state = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for v in x.iter_mut() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *v = (state % 2000) as f32 / 1000.0 - 1.0;
    }
    let score = x[0] - 2.0 * x[1] + 0.5 * x[2] + x[3] * x[4];
    (x, if score > 0.0 { 1.0 } else { 0.0 })
}

fn batch(range: std::ops::Range<usize>) -> Batch {
    let rows: Vec<([f32; INPUTS], f32)> = range.map(example).collect();
    let features: Vec<f32> = rows.iter().flat_map(|(x, _)| *x).collect();
    let labels: Vec<f32> = rows.iter().map(|(_, y)| *y).collect();
    Batch {
        dense: Tensor::from_vec(features, (rows.len(), INPUTS), &Device::Cpu).unwrap(),
        ids: None,
        id_width: 0,
        labels: Tensor::from_vec(labels, rows.len(), &Device::Cpu).unwrap(),
    }
}

/// Trains on `n` workers for `steps` steps of `per_worker` examples each: at step s, worker w
/// takes examples `s*n*b + w*b ..`. Returns every worker's final weights and last loss.
fn train(n: usize, per_worker: usize, steps: usize, rule: Rule) -> Vec<(Vec<f32>, f32)> {
    on_workers(n, move |w, ring| {
        // Each worker starts from other weights: the chief's broadcast must win.
        let mut dp = trainer(Mlp::new(INPUTS, &[16, 8], 1, 7 + w as u64).unwrap(), rule, ring);
        let mut last = 0.0;
        for s in 0..steps {
            let start = s * n * per_worker + w * per_worker;
            let stats = dp.step(Some(&batch(start..start + per_worker))).unwrap().unwrap();
            assert_eq!(stats.examples as usize, n * per_worker);
            last = stats.loss;
        }
        (dp.weights().to_vec(), last)
    })
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= 1e-5 * scale, "{what}: weight {i}: {x} vs {y} (scale {scale})");
    }
}

#[test]
fn n_workers_with_batch_b_match_one_worker_with_batch_n_b() {
    let sgd = Rule::Sgd { lr: 0.2, momentum: 0.9, nesterov: false, weight_decay: 0.0 };
    for rule in [sgd, Rule::adam(0.01)] {
        for n in [2, 3] {
            let alone = train(1, n * 8, 25, rule);
            let together = train(n, 8, 25, rule);
            for (weights, loss) in &together {
                // Identical on every worker, bit for bit.
                assert_eq!(weights, &together[0].0, "{rule:?} n={n}: workers differ");
                assert_eq!(*loss, together[0].1);
            }
            assert_close(&together[0].0, &alone[0].0, &format!("{rule:?} n={n}"));
            assert!((together[0].1 - alone[0].1).abs() < 1e-5, "{rule:?} n={n}: loss");
        }
    }
}

#[test]
fn uneven_shards_end_together_and_drained_workers_add_nothing() {
    let results = on_workers(2, move |w, ring| {
        let mut dp = trainer(LogisticRegression::new(INPUTS, 1, 1).unwrap(), Rule::sgd(0.1), ring);
        // Worker 0 holds 5 batches, worker 1 holds 2 (the second one short).
        let batches: Vec<Batch> = if w == 0 {
            (0..5).map(|b| batch(b * 10..b * 10 + 10)).collect()
        } else {
            vec![batch(100..110), batch(110..113)]
        };
        let mut seen = Vec::new();
        let mut next = batches.iter();
        while let Some(stats) = dp.step(next.next()).unwrap() {
            seen.push(stats.examples);
        }
        (seen, dp.weights().to_vec())
    });
    assert_eq!(results[0].0, vec![20, 13, 10, 10, 10]);
    assert_eq!(results[0], results[1]);

    // The mean is weighted by example count: one worker on each step's union ends the same.
    let mut alone = trainer(LogisticRegression::new(INPUTS, 1, 1).unwrap(), Rule::sgd(0.1), None);
    let union = |a: Batch, b: Batch| Batch {
        dense: Tensor::cat(&[&a.dense, &b.dense], 0).unwrap(),
        ids: None,
        id_width: 0,
        labels: Tensor::cat(&[&a.labels, &b.labels], 0).unwrap(),
    };
    alone.step(Some(&union(batch(0..10), batch(100..110)))).unwrap();
    alone.step(Some(&union(batch(10..20), batch(110..113)))).unwrap();
    for b in 2..5 {
        alone.step(Some(&batch(b * 10..b * 10 + 10))).unwrap();
    }
    assert_close(&results[0].1, alone.weights(), "uneven shards");
}

#[test]
fn logistic_regression_learns_a_linear_rule() {
    let results = on_workers(2, move |w, ring| {
        let mut dp = trainer(LogisticRegression::new(INPUTS, 1, 3).unwrap(), Rule::adam(0.05), ring);
        let mut losses = Vec::new();
        for s in 0..300 {
            let start = (s * 2 + w) * 32 % 20_000;
            losses.push(dp.step(Some(&batch(start..start + 32))).unwrap().unwrap().loss);
        }
        let test = batch(50_000..52_000);
        let logits = dp.logits(&test).unwrap().flatten_all().unwrap();
        let predicted: Vec<f32> = logits.to_vec1::<f32>().unwrap();
        let labels: Vec<f32> = test.labels.to_vec1::<f32>().unwrap();
        let right = predicted.iter().zip(&labels).filter(|(p, y)| (**p > 0.0) == (**y > 0.5)).count();
        (losses, right as f64 / labels.len() as f64)
    });
    for (losses, accuracy) in results {
        let early: f32 = losses[..20].iter().sum::<f32>() / 20.0;
        let late: f32 = losses[280..].iter().sum::<f32>() / 20.0;
        assert!(late < early * 0.6, "loss {early} -> {late}");
        // The rule has a product term a linear model cannot express.
        assert!(accuracy > 0.85, "accuracy {accuracy}");
    }
}
