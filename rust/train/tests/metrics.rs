//! Evaluation: AUC against an exact pairwise count, and figures over two workers' shares that
//! equal one worker's over all the data.

mod support;

use candle_core::{Device, Tensor};
use sparktrain_train::{
    Batch, DataParallel, Evaluation, LogisticRegression, Loss, OptimizerConfig, Rule, SharedRing,
};
use support::on_workers;

fn tensor(values: &[f32]) -> Tensor {
    Tensor::from_slice(values, values.len(), &Device::Cpu).unwrap()
}

#[test]
fn auc_matches_an_exact_pairwise_count() {
    let logits: Vec<f32> = (0..2000).map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0).collect();
    let labels: Vec<f32> =
        (0..2000).map(|i| (((i * 7919) % 1000 + (i * 31) % 700) > 800) as u8 as f32).collect();
    let mut e = Evaluation::new(Loss::BinaryCrossEntropy);
    e.add(&tensor(&logits), &tensor(&labels)).unwrap();
    let got = e.finish(None).unwrap();
    let (mut pairs, mut count) = (0.0, 0.0);
    for (zp, _) in logits.iter().zip(&labels).filter(|(_, y)| **y > 0.5) {
        for (zn, _) in logits.iter().zip(&labels).filter(|(_, y)| **y < 0.5) {
            pairs += if zp > zn {
                1.0
            } else if zp == zn {
                0.5
            } else {
                0.0
            };
            count += 1.0;
        }
    }
    let exact = pairs / count;
    assert!((got.auc.unwrap() - exact).abs() < 1e-3, "{:?} vs {exact}", got.auc);
    assert_eq!(got.examples, 2000);

    let mut perfect = Evaluation::new(Loss::BinaryCrossEntropy);
    perfect.add(&tensor(&[-3.0, -1.0, 2.0, 4.0]), &tensor(&[0.0, 0.0, 1.0, 1.0])).unwrap();
    let perfect = perfect.finish(None).unwrap();
    assert_eq!((perfect.auc, perfect.accuracy), (Some(1.0), Some(1.0)));
    let mut one_class = Evaluation::new(Loss::BinaryCrossEntropy);
    one_class.add(&tensor(&[1.0, 2.0]), &tensor(&[1.0, 1.0])).unwrap();
    assert_eq!(one_class.finish(None).unwrap().auc, None);
}

fn batch(seed: usize) -> Batch {
    let dense: Vec<f32> = (0..64 * 2).map(|i| (((seed * 97 + i * 13) % 29) as f32 - 14.0) / 7.0).collect();
    let labels: Vec<f32> =
        dense.chunks(2).enumerate().map(|(i, x)| ((x[0] - x[1] > 0.0) ^ (i % 9 == 0)) as u8 as f32).collect();
    Batch {
        dense: Tensor::from_vec(dense, (64, 2), &Device::Cpu).unwrap(),
        ids: None,
        id_width: 0,
        labels: Tensor::from_vec(labels, 64, &Device::Cpu).unwrap(),
        bags: None,
    }
}

fn trainer(ring: Option<SharedRing>) -> DataParallel<LogisticRegression> {
    let model = LogisticRegression::new(2, 1, 4).unwrap();
    let optimizer = OptimizerConfig::new(Rule::sgd(0.5));
    let mut dp = DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, ring).unwrap();
    for b in 100..130 {
        dp.step(Some(&batch(b))).unwrap();
    }
    dp
}

#[test]
fn two_workers_evaluate_their_shares_like_one_worker_evaluates_all() {
    let together = on_workers(2, |w, ring| {
        let mut dp = trainer(ring);
        // Worker 1 has one batch more than worker 0.
        let share: Vec<Batch> = (0..3 + w).map(|b| batch(b * 2 + w)).collect();
        dp.evaluate(share.iter().map(Ok)).unwrap()
    });
    assert_eq!(together[0], together[1]);
    let all: Vec<Batch> = [0, 2, 4, 1, 3, 5, 7].into_iter().map(batch).collect();
    let alone = trainer(None).evaluate(all.iter().map(Ok)).unwrap();
    assert_eq!(together[0].examples, 7 * 64);
    assert!((together[0].loss - alone.loss).abs() < 1e-9);
    assert_eq!(together[0].accuracy, alone.accuracy);
    assert_eq!(together[0].auc, alone.auc);
    assert!(alone.auc.unwrap() > 0.7, "{alone:?}");
}
