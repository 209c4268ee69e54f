//! Losses that stay finite for any logit, written with differentiable candle ops, each
//! optionally weighted per class (Keras's `class_weight`: every example's loss is multiplied by
//! its class's weight, and the batch's mean is taken over examples, not weights).
//!
//! Both follow the log-sum-exp trick: `log(1 + e^x)` is computed as `max(x, 0) + log(1 +
//! e^-|x|)`, and softmax's log-normalizer subtracts each row's maximum first, so no
//! exponential overflows (candle's own binary cross-entropy returns inf at |logit| = 40).

use candle_core::{D, DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

/// Which loss a model trains with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// Binary cross-entropy on one logit per example; labels are 0/1 floats.
    BinaryCrossEntropy,
    /// Softmax cross-entropy on one logit per class; labels are class ids.
    SoftmaxCrossEntropy,
    /// Squared error of one output per example against a real-valued label (regression).
    MeanSquaredError,
}

impl Loss {
    /// The loss's name, as configurations and exported models spell it.
    pub fn name(self) -> &'static str {
        match self {
            Loss::BinaryCrossEntropy => "binary_cross_entropy",
            Loss::SoftmaxCrossEntropy => "softmax_cross_entropy",
            Loss::MeanSquaredError => "mean_squared_error",
        }
    }

    /// Whether labels are classes (so that class weights apply).
    pub fn is_classification(self) -> bool {
        self != Loss::MeanSquaredError
    }

    /// The mean loss of a batch: `logits` is `[batch, outputs]`, `labels` is `[batch]`.
    pub fn compute(self, logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
        self.compute_weighted(logits, labels, None)
    }

    /// [`Loss::compute`] with each example's loss multiplied by the weight of its class
    /// (`class_weights[c]` for class id `c`; a binary label `y` takes `w0 + (w1 - w0)·y`).
    pub fn compute_weighted(
        self,
        logits: &Tensor,
        labels: &Tensor,
        class_weights: Option<&[f32]>,
    ) -> Result<Tensor> {
        let per_example = match self {
            Loss::BinaryCrossEntropy => bce_per_example(logits, labels)?,
            Loss::SoftmaxCrossEntropy => softmax_per_example(logits, labels)?,
            Loss::MeanSquaredError => squared_error_per_example(logits, labels)?,
        };
        let Some(weights) = class_weights else { return Ok(per_example.mean_all()?) };
        let example_weights = self.example_weights(labels, weights)?.to_device(per_example.device())?;
        Ok((per_example * example_weights)?.mean_all()?)
    }

    /// `[batch]`: the weight of each example's class.
    fn example_weights(self, labels: &Tensor, weights: &[f32]) -> Result<Tensor> {
        let labels = labels.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        let values: Vec<f32> = match self {
            Loss::BinaryCrossEntropy => {
                let [w0, w1] = weights else {
                    return Err(TrainError::InvalidArgument(format!(
                        "class_weight: a binary model needs 2 weights, got {}",
                        weights.len()
                    )));
                };
                labels.iter().map(|y| w0 + (w1 - w0) * y).collect()
            }
            Loss::SoftmaxCrossEntropy => labels
                .iter()
                .map(|&y| {
                    weights.get(y as usize).copied().ok_or_else(|| {
                        TrainError::InvalidArgument(format!(
                            "class_weight has {} weights, label {y} needs more",
                            weights.len()
                        ))
                    })
                })
                .collect::<Result<_>>()?,
            Loss::MeanSquaredError => {
                return Err(TrainError::InvalidArgument(
                    "class_weight: a regression model has no classes".into(),
                ));
            }
        };
        let n = values.len();
        Ok(Tensor::from_vec(values, n, &candle_core::Device::Cpu)?)
    }
}

/// Mean binary cross-entropy between `sigmoid(logits)` and `labels` (`[batch]` or
/// `[batch, 1]` logits, `[batch]` labels in 0..=1).
pub fn bce_with_logits(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    Ok(bce_per_example(logits, labels)?.mean_all()?)
}

/// `[batch]`: each example's binary cross-entropy.
fn bce_per_example(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let logits = logits.flatten_all()?;
    let labels = labels.flatten_all()?.to_dtype(logits.dtype())?;
    if logits.dims() != labels.dims() {
        return Err(TrainError::InvalidArgument(format!(
            "binary cross-entropy needs one logit per label: {} logits, {} labels",
            logits.elem_count(),
            labels.elem_count()
        )));
    }
    if let Some(bad) =
        labels.to_dtype(DType::F32)?.to_vec1::<f32>()?.into_iter().find(|y| !(0.0..=1.0).contains(y))
    {
        return Err(TrainError::InvalidArgument(format!(
            "label {bad}: binary cross-entropy needs labels from 0 to 1 (class ids need a softmax model: \
             loss='softmax_cross_entropy', or numClasses in sparktrain.ml's Classifier)"
        )));
    }
    // max(x, 0) - x y + log(1 + e^-|x|)
    let softplus_tail = (logits.abs()?.neg()?.exp()? + 1.0)?.log()?;
    Ok(((logits.relu()? - (&logits * &labels)?)? + softplus_tail)?)
}

/// Mean softmax cross-entropy of `[batch, classes]` logits against `[batch]` class ids.
pub fn softmax_cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    Ok(softmax_per_example(logits, labels)?.mean_all()?)
}

/// `[batch]`: each example's softmax cross-entropy.
fn softmax_per_example(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let (batch, classes) = logits.dims2()?;
    if labels.elem_count() != batch {
        return Err(TrainError::InvalidArgument(format!(
            "softmax cross-entropy needs one class id per row: {batch} rows, {} labels",
            labels.elem_count()
        )));
    }
    // A cast to an id would turn -1 or 2.5 into some other class, or read out of bounds.
    let ids = labels.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    if let Some(bad) = ids.iter().find(|y| !(y.fract() == 0.0 && **y >= 0.0 && (**y as usize) < classes)) {
        return Err(TrainError::InvalidArgument(format!(
            "label {bad} is not a class id: the model has {classes} classes, ids 0 to {}",
            classes - 1
        )));
    }
    // The shift only steadies the exponentials; the gradient does not flow through it.
    let shifted = logits.broadcast_sub(&logits.max_keepdim(D::Minus1)?.detach())?;
    let log_norm = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let log_probs = shifted.broadcast_sub(&log_norm)?;
    let ids = labels.flatten_all()?.to_dtype(DType::U32)?.unsqueeze(1)?;
    Ok(log_probs.gather(&ids, 1)?.neg()?.flatten_all()?)
}

/// `[batch]`: each example's squared error (one output per example, any finite label).
fn squared_error_per_example(outputs: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let outputs = outputs.flatten_all()?;
    let labels = labels.flatten_all()?.to_dtype(outputs.dtype())?;
    if outputs.dims() != labels.dims() {
        return Err(TrainError::InvalidArgument(format!(
            "squared error needs one output per label: {} outputs, {} labels",
            outputs.elem_count(),
            labels.elem_count()
        )));
    }
    if let Some(bad) = labels.to_dtype(DType::F32)?.to_vec1::<f32>()?.into_iter().find(|y| !y.is_finite()) {
        return Err(TrainError::InvalidArgument(format!(
            "label {bad}: a regression label must be a finite number"
        )));
    }
    Ok((outputs - labels)?.sqr()?)
}
