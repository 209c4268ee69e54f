//! Evaluation metrics that add up across workers: each worker accumulates sums over its
//! share of the data (loss, correct predictions, and score histograms per label for AUC),
//! one all-reduce adds them up, and every worker computes the same figures.
//!
//! AUC comes from histograms of the predicted probability in fixed buckets, as TensorFlow's
//! `tf.keras.metrics.AUC` does with thresholds: exact up to ties within a bucket.

use candle_core::{D, Tensor};
use sparktrain_collective::{Communicator, ReduceOp};

use crate::error::Result;
use crate::loss::Loss;

/// Probability buckets of the AUC histograms.
pub const AUC_BUCKETS: usize = 10_000;

/// The figures of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Metrics {
    /// Examples evaluated, over all workers.
    pub examples: u64,
    /// Mean loss.
    pub loss: f64,
    /// Fraction predicted right (threshold 0.5, or the largest logit); None for regression.
    pub accuracy: Option<f64>,
    /// Area under the ROC curve (binary models; None for softmax models or one class only).
    pub auc: Option<f64>,
}

/// Sums over the batches seen so far.
pub struct Evaluation {
    loss: Loss,
    /// examples, loss sum, correct, then the positive and negative histograms.
    sums: Vec<f64>,
}

impl Evaluation {
    /// An empty evaluation for models trained with `loss`.
    pub fn new(loss: Loss) -> Self {
        let histograms = if loss == Loss::BinaryCrossEntropy { 2 * AUC_BUCKETS } else { 0 };
        Evaluation { loss, sums: vec![0.0; 3 + histograms] }
    }

    /// Adds a batch's `[rows, outputs]` logits against its labels.
    pub fn add(&mut self, logits: &Tensor, labels: &Tensor) -> Result<()> {
        let rows = labels.elem_count();
        if rows == 0 {
            return Ok(());
        }
        let mean_loss = self.loss.compute(logits, labels)?.to_scalar::<f32>()? as f64;
        self.sums[0] += rows as f64;
        self.sums[1] += mean_loss * rows as f64;
        match self.loss {
            Loss::BinaryCrossEntropy => {
                let logits = logits.flatten_all()?.to_vec1::<f32>()?;
                let labels = labels.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?;
                for (&z, &y) in logits.iter().zip(&labels) {
                    let positive = y > 0.5;
                    self.sums[2] += ((z > 0.0) == positive) as u8 as f64;
                    let p = 1.0 / (1.0 + (-z as f64).exp());
                    let bucket = ((p * AUC_BUCKETS as f64) as usize).min(AUC_BUCKETS - 1);
                    self.sums[3 + bucket + if positive { 0 } else { AUC_BUCKETS }] += 1.0;
                }
            }
            Loss::SoftmaxCrossEntropy => {
                let predicted = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
                let labels = labels.flatten_all()?.to_dtype(candle_core::DType::U32)?.to_vec1::<u32>()?;
                self.sums[2] += predicted.iter().zip(&labels).filter(|(p, y)| p == y).count() as f64;
            }
            Loss::MeanSquaredError => {}
        }
        Ok(())
    }

    /// Adds up every worker's sums (call on every worker together; None: alone) and returns
    /// the figures, the same on every worker.
    pub fn finish(mut self, ring: Option<&mut Communicator>) -> Result<Metrics> {
        if let Some(ring) = ring {
            ring.all_reduce(&mut self.sums, ReduceOp::Sum)?;
        }
        let examples = self.sums[0];
        let per = |v: f64| if examples > 0.0 { v / examples } else { f64::NAN };
        let auc = (self.loss == Loss::BinaryCrossEntropy).then(|| auc(&self.sums[3..])).flatten();
        let accuracy = self.loss.is_classification().then(|| per(self.sums[2]));
        Ok(Metrics { examples: examples as u64, loss: per(self.sums[1]), accuracy, auc })
    }
}

/// The AUC from positive and negative counts per probability bucket: the chance that a random
/// positive scores above a random negative, ties counting half.
fn auc(histograms: &[f64]) -> Option<f64> {
    let (positives, negatives) = histograms.split_at(AUC_BUCKETS);
    let (p_total, n_total): (f64, f64) = (positives.iter().sum(), negatives.iter().sum());
    if p_total == 0.0 || n_total == 0.0 {
        return None;
    }
    let mut negatives_below = 0.0;
    let mut pairs = 0.0;
    for (p, n) in positives.iter().zip(negatives) {
        pairs += p * (negatives_below + n / 2.0);
        negatives_below += n;
    }
    Some(pairs / (p_total * n_total))
}
