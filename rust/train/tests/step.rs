//! The synchronous step over real rings on 127.0.0.1, one thread per worker: N workers with
//! batch b end where 1 worker with batch N*b ends, with identical weights everywhere (also
//! with a schedule, clipping, penalties and class weights, whose effect on one step is checked
//! against its definition); uneven shards end together; a model learns; 16-bit gradients on
//! the wire halve the step's bytes and train identical workers to the exact run's loss.

mod support;

use candle_core::{Device, Tensor};
use sparktrain_train::{
    Batch, DataParallel, Decay, GradientWire, LogisticRegression, Loss, Mlp, Model, OptimizerConfig, Penalty,
    Regularization, Rule, Schedule, SharedRing,
};
use support::on_workers;

const INPUTS: usize = 6;

/// A binary classifier's synchronous trainer with `rule` on one thread.
fn trainer<M: Model>(model: M, rule: Rule, ring: Option<SharedRing>) -> DataParallel<M> {
    trainer_with(model, &OptimizerConfig::new(rule), None, ring)
}

/// [`trainer`] with every setting of `optimizer` and `class_weights`.
fn trainer_with<M: Model>(
    model: M,
    optimizer: &OptimizerConfig,
    class_weights: Option<Vec<f32>>,
    ring: Option<SharedRing>,
) -> DataParallel<M> {
    let mut dp = DataParallel::new(model, Loss::BinaryCrossEntropy, optimizer, ring).unwrap();
    dp.set_class_weights(class_weights).unwrap();
    dp
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
        bags: None,
    }
}

/// Trains on `n` workers for `steps` steps of `per_worker` examples each: at step s, worker w
/// takes examples `s*n*b + w*b ..`. Returns every worker's final weights and last loss.
fn train(n: usize, per_worker: usize, steps: usize, rule: Rule) -> Vec<(Vec<f32>, f32)> {
    train_with(n, per_worker, steps, OptimizerConfig::new(rule), None)
}

/// [`train`] with every setting of `optimizer` and `class_weights`.
fn train_with(
    n: usize,
    per_worker: usize,
    steps: usize,
    optimizer: OptimizerConfig,
    class_weights: Option<Vec<f32>>,
) -> Vec<(Vec<f32>, f32)> {
    on_workers(n, move |w, ring| {
        // Each worker starts from other weights: the chief's broadcast must win.
        let model = Mlp::new(INPUTS, &[16, 8], 1, 7 + w as u64).unwrap();
        let mut dp = trainer_with(model, &optimizer, class_weights.clone(), ring);
        let mut last = 0.0;
        for s in 0..steps {
            let start = s * n * per_worker + w * per_worker;
            let stats = dp.step(Some(&batch(start..start + per_worker))).unwrap().unwrap();
            assert_eq!(stats.examples as usize, n * per_worker);
            last = stats.loss;
        }
        (dp.weights().unwrap().to_vec(), last)
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
fn n_workers_match_one_with_a_schedule_clipping_penalties_and_class_weights() {
    let optimizer = OptimizerConfig {
        schedule: Schedule { warmup_steps: 5, decay: Decay::Cosine { steps: 20, alpha: 0.1 } },
        clip_norm: Some(0.05),
        regularization: Regularization {
            kernel: Penalty { l1: 1e-3, l2: 1e-2 },
            bias: Penalty { l1: 0.0, l2: 1e-3 },
            ..Regularization::default()
        },
        ..OptimizerConfig::new(Rule::adam(0.02))
    };
    let alone = train_with(1, 16, 25, optimizer.clone(), Some(vec![1.0, 3.0]));
    let together = train_with(2, 8, 25, optimizer, Some(vec![1.0, 3.0]));
    assert_eq!(together[0], together[1], "workers differ");
    assert_close(&together[0].0, &alone[0].0, "controls");
}

#[test]
fn sixteen_bit_gradients_halve_the_bytes_and_train_identical_workers_to_the_exact_loss() {
    for rule in [Rule::adam(0.01), Rule::adagrad(0.1)] {
        // Each worker's final weights, the bytes its ring sent and the mean loss of the last
        // 20 of 100 steps.
        let run = |wire: GradientWire| {
            let optimizer = OptimizerConfig { gradient_wire: wire, ..OptimizerConfig::new(rule) };
            on_workers(3, move |w, ring| {
                let model = Mlp::new(INPUTS, &[64, 32], 1, 7).unwrap();
                let mut dp = trainer_with(model, &optimizer, None, ring.clone());
                let sent = || ring.as_ref().unwrap().lock().unwrap().bytes_sent();
                let before = sent();
                let mut late = 0.0;
                for s in 0..100 {
                    let start = s * 3 * 8 + w * 8;
                    let stats = dp.step(Some(&batch(start..start + 8))).unwrap().unwrap();
                    // The example count travels as float32 whatever the gradients' format.
                    assert_eq!(stats.examples, 24);
                    late += if s >= 80 { stats.loss / 20.0 } else { 0.0 };
                }
                (dp.weights().unwrap().to_vec(), sent() - before, late)
            })
        };
        let exact = run(GradientWire::F32);
        for wire in [GradientWire::Bf16, GradientWire::F16] {
            let narrow = run(wire);
            for (weights, _, _) in &narrow {
                assert_eq!(weights, &narrow[0].0, "{rule:?} {wire:?}: workers differ");
            }
            // Rounded gradients take another path than the exact ones (bf16's 8 significant
            // bits drift the weights by several percent in 100 steps) to the same loss.
            assert_ne!(narrow[0].0, exact[0].0, "{rule:?} {wire:?}: nothing was rounded");
            let loss = (narrow[0].2 - exact[0].2).abs() / exact[0].2;
            assert!(loss <= 0.05, "{rule:?} {wire:?}: loss {} against {}", narrow[0].2, exact[0].2);
            // The gradients are nearly all of a step's bytes: 16 bits take about half of 32's.
            let ratio = narrow[0].1 as f64 / exact[0].1 as f64;
            assert!((0.45..0.6).contains(&ratio), "{rule:?} {wire:?}: {ratio} of float32's bytes");
        }
    }
}

/// The weights after one SGD step of `lr` 1 on examples 0..32, from the same start.
fn one_step(optimizer: OptimizerConfig, class_weights: Option<Vec<f32>>) -> (Vec<f32>, Vec<f32>, f32) {
    let model = LogisticRegression::new(INPUTS, 1, 11).unwrap();
    let mut dp = trainer_with(model, &optimizer, class_weights, None);
    let before = dp.weights().unwrap().to_vec();
    let stats = dp.step(Some(&batch(0..32))).unwrap().unwrap();
    (before, dp.weights().unwrap().to_vec(), stats.grad_norm)
}

fn deltas(before: &[f32], after: &[f32]) -> Vec<f32> {
    before.iter().zip(after).map(|(b, a)| b - a).collect()
}

#[test]
fn each_control_changes_one_step_as_defined() {
    let plain = OptimizerConfig::new(Rule::sgd(1.0));
    let (w0, w1, norm) = one_step(plain.clone(), None);
    let g = deltas(&w0, &w1); // lr 1: the step is the gradient
    let measured = g.iter().map(|v| v * v).sum::<f32>().sqrt();
    assert!((measured - norm).abs() < 1e-5 * norm, "grad_norm {norm} vs {measured}");

    // Clipping to a third of the norm scales the whole step by a third.
    let (_, clipped, reported) =
        one_step(OptimizerConfig { clip_norm: Some(norm / 3.0), ..plain.clone() }, None);
    assert_eq!(reported, norm, "the norm is reported before clipping");
    assert_close(&deltas(&w0, &clipped), &g.iter().map(|v| v / 3.0).collect::<Vec<_>>(), "clip");

    // The schedule's warm-up makes the first step a quarter of the rate.
    let warm = Schedule { warmup_steps: 4, decay: Decay::Constant };
    let (_, scheduled, _) = one_step(OptimizerConfig { schedule: warm, ..plain.clone() }, None);
    assert_close(&deltas(&w0, &scheduled), &g.iter().map(|v| v / 4.0).collect::<Vec<_>>(), "schedule");

    // An L2 penalty on the kernel adds 2·l2·w to its gradient, nothing to the bias.
    let l2 = Regularization { kernel: Penalty { l1: 0.0, l2: 0.25 }, ..Regularization::default() };
    let (_, penalised, _) = one_step(OptimizerConfig { regularization: l2, ..plain.clone() }, None);
    // Parameters in name order: linear/bias, then linear/kernel.
    let want: Vec<f32> =
        g.iter().zip(&w0).enumerate().map(|(i, (g, w))| if i == 0 { *g } else { g + 0.5 * w }).collect();
    assert_close(&deltas(&w0, &penalised), &want, "l2");

    // Weighing both classes by 2 doubles the gradient; by 1, it changes nothing.
    let (_, doubled, _) = one_step(plain.clone(), Some(vec![2.0, 2.0]));
    assert_close(&deltas(&w0, &doubled), &g.iter().map(|v| v * 2.0).collect::<Vec<_>>(), "class weights");
    let (_, same, _) = one_step(plain, Some(vec![1.0, 1.0]));
    assert_eq!(same, w1);
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
        (seen, dp.weights().unwrap().to_vec())
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
        bags: None,
    };
    alone.step(Some(&union(batch(0..10), batch(100..110)))).unwrap();
    alone.step(Some(&union(batch(10..20), batch(110..113)))).unwrap();
    for b in 2..5 {
        alone.step(Some(&batch(b * 10..b * 10 + 10))).unwrap();
    }
    assert_close(&results[0].1, &alone.weights().unwrap(), "uneven shards");
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
