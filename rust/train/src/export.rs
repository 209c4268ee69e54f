//! The exported model: a self-contained folder that scores new data without the training
//! code's configuration.
//!
//! - `model.json`: the model's kind and shape, the loss it was trained with, and the feature
//!   spec (so ids hash the same way at prediction time);
//! - `model.safetensors`: every weight under its variable name and shape.
//!
//! The pair appears together: both files are written into a hidden folder beside `dir`, which
//! then replaces `dir` as a whole (`sparktrain_storage::replace_dir`), so a reader never sees
//! the weights of one export with the config of another.

use std::collections::HashMap;

use arrow::record_batch::RecordBatch;
use candle_core::{D, Device, Tensor};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use crate::batch::{Batch, Lookup};
use crate::embedding::{Dcn, DeepFm, EmbeddingConfig, WideDeep};
use crate::error::{Result, TrainError};
use crate::features::FeatureSpec;
use crate::loss::Loss;
use crate::model::{LogisticRegression, Mlp, Model};
use crate::params::Entry;

const CONFIG: &str = "model.json";
const WEIGHTS: &str = "model.safetensors";

/// Which model, with its shape; with a feature spec, enough to build it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelKind {
    /// [`LogisticRegression`] over the dense features.
    LogisticRegression {
        /// Logits per example.
        outputs: usize,
    },
    /// [`Mlp`] over the dense features.
    Mlp {
        /// Hidden layer widths.
        hidden: Vec<usize>,
        /// Logits per example.
        outputs: usize,
    },
    /// [`WideDeep`].
    WideDeep {
        /// Values per embedding.
        dim: usize,
        /// Hidden layer widths.
        hidden: Vec<usize>,
    },
    /// [`DeepFm`].
    DeepFm {
        /// Values per embedding.
        dim: usize,
        /// Hidden layer widths.
        hidden: Vec<usize>,
    },
    /// [`Dcn`].
    Dcn {
        /// Values per embedding.
        dim: usize,
        /// Hidden layer widths.
        hidden: Vec<usize>,
        /// Cross layers.
        cross_layers: usize,
    },
}

impl ModelKind {
    /// Builds the model for `features`, its weights drawn from `seed`, in main memory.
    pub fn build(&self, features: &FeatureSpec, seed: u64) -> Result<Box<dyn Model>> {
        self.build_on(&Device::Cpu, features, seed)
    }

    /// [`ModelKind::build`] with the variables on `device`.
    pub fn build_on(&self, device: &Device, features: &FeatureSpec, seed: u64) -> Result<Box<dyn Model>> {
        let inputs = features.dense_width();
        Ok(match self {
            ModelKind::LogisticRegression { outputs } => {
                Box::new(LogisticRegression::on(device, inputs, *outputs, seed)?)
            }
            ModelKind::Mlp { hidden, outputs } => Box::new(Mlp::on(device, inputs, hidden, *outputs, seed)?),
            ModelKind::WideDeep { dim, hidden } => {
                let config = EmbeddingConfig { dim: *dim, hidden: hidden.clone(), cross_layers: 0, seed };
                Box::new(WideDeep::on(device, features, &config)?)
            }
            ModelKind::DeepFm { dim, hidden } => {
                let config = EmbeddingConfig { dim: *dim, hidden: hidden.clone(), cross_layers: 0, seed };
                Box::new(DeepFm::on(device, features, &config)?)
            }
            ModelKind::Dcn { dim, hidden, cross_layers } => {
                let config =
                    EmbeddingConfig { dim: *dim, hidden: hidden.clone(), cross_layers: *cross_layers, seed };
                Box::new(Dcn::on(device, features, &config)?)
            }
        })
    }
}

#[derive(Serialize, Deserialize)]
struct Config {
    format: u32,
    model: ModelKind,
    loss: String,
    features: FeatureSpec,
}

/// Writes a model (of `kind`, trained with `loss` on `features`) whose parameters `entries`
/// hold `weights` into the folder `dir`.
pub fn export(
    dir: &str,
    kind: &ModelKind,
    features: &FeatureSpec,
    loss: Loss,
    entries: &[Entry],
    weights: &[f32],
) -> Result<()> {
    let fail = |file: &str, e: &dyn std::fmt::Display| {
        TrainError::format(sparktrain_storage::join_url(dir, file), format!("export: {e}"))
    };
    let views = entries
        .iter()
        .map(|e| {
            let values = weights.get(e.offset..e.offset + e.len()).ok_or_else(|| {
                TrainError::InvalidArgument(format!(
                    "{} weights do not hold parameter '{}'",
                    weights.len(),
                    e.name
                ))
            })?;
            TensorView::new(Dtype::F32, e.shape.clone(), bytemuck::cast_slice(values))
                .map(|v| (e.name.clone(), v))
                .map_err(|err| fail(WEIGHTS, &err))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::serialize(views, None).map_err(|e| fail(WEIGHTS, &e))?;
    let config =
        Config { format: 1, model: kind.clone(), loss: loss.name().into(), features: features.clone() };
    let json = serde_json::to_vec_pretty(&config).expect("a config serializes");

    let dir = dir.trim_end_matches('/');
    let staging = sparktrain_storage::sibling_temp(dir)?;
    sparktrain_storage::mkdirs(&staging)?;
    sparktrain_storage::write(&sparktrain_storage::join_url(&staging, WEIGHTS), &bytes, true)?;
    sparktrain_storage::write(&sparktrain_storage::join_url(&staging, CONFIG), &json, true)?;
    sparktrain_storage::replace_dir(&staging, dir)?;
    Ok(())
}

/// A model loaded from an export folder, ready to score Arrow batches.
pub struct Exported {
    model: Box<dyn Model>,
    kind: ModelKind,
    entries: Vec<Entry>,
    weights: Vec<f32>,
    features: FeatureSpec,
    loss: Loss,
}

impl Exported {
    /// Loads the export folder `dir`.
    pub fn load(dir: &str) -> Result<Self> {
        let url = |file: &str| sparktrain_storage::join_url(dir, file);
        let config: Config = serde_json::from_slice(&sparktrain_storage::read(&url(CONFIG))?)
            .map_err(|e| TrainError::format(url(CONFIG), e))?;
        let loss = match config.loss.as_str() {
            "binary_cross_entropy" => Loss::BinaryCrossEntropy,
            "softmax_cross_entropy" => Loss::SoftmaxCrossEntropy,
            "mean_squared_error" => Loss::MeanSquaredError,
            other => return Err(TrainError::format(url(CONFIG), format!("unknown loss '{other}'"))),
        };
        let mut model = config.model.build(&config.features, 0)?;
        model.parameters_mut().release_tables();
        let entries = model.parameters().entries();
        let bytes = sparktrain_storage::read(&url(WEIGHTS))?;
        let file = SafeTensors::deserialize(&bytes).map_err(|e| TrainError::format(url(WEIGHTS), e))?;
        let saved: HashMap<String, TensorView<'_>> = file.tensors().into_iter().collect();
        let mut flat = Vec::with_capacity(entries.iter().map(Entry::len).sum());
        for Entry { name, shape, .. } in &entries {
            let view = saved.get(name).ok_or_else(|| {
                TrainError::StateMismatch(format!("{dir}/{WEIGHTS} has no tensor '{name}'"))
            })?;
            if view.dtype() != Dtype::F32 || view.shape() != shape.as_slice() {
                return Err(TrainError::StateMismatch(format!(
                    "{dir}/{WEIGHTS}: '{name}' is {:?} {:?}, the model needs F32 {shape:?}",
                    view.dtype(),
                    view.shape()
                )));
            }
            flat.extend(view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        }
        model.parameters().set_flat(&flat)?;
        Ok(Exported { model, kind: config.model, entries, weights: flat, features: config.features, loss })
    }

    /// Which model, with its shape.
    pub fn kind(&self) -> &ModelKind {
        &self.kind
    }

    /// The shape and values of the parameter called `name` (a variable or a whole table).
    pub fn parameter(&self, name: &str) -> Option<(&[usize], &[f32])> {
        let entry = self.entries.iter().find(|e| e.name == name)?;
        Some((entry.shape.as_slice(), &self.weights[entry.offset..entry.offset + entry.len()]))
    }

    /// The loss the model was trained with.
    pub fn loss(&self) -> Loss {
        self.loss
    }

    /// The feature spec the model was trained on.
    pub fn features(&self) -> &FeatureSpec {
        &self.features
    }

    /// Scores `batch`: one probability per row for a binary model, one per class per row
    /// (row after row) for a softmax model. The label column may be absent.
    pub fn predict(&self, batch: &RecordBatch) -> Result<Vec<f32>> {
        let encoded = self.features.encode_inputs(batch)?;
        let batch = Batch::from_encoded(&encoded)?;
        let lookup = Lookup::gather(&batch, &self.entries, &self.weights)?;
        let logits = self.model.forward(&batch, lookup.as_ref())?;
        let scores = match self.loss {
            Loss::BinaryCrossEntropy => (logits.neg()?.exp()? + 1.0)?.recip()?.flatten_all()?,
            Loss::SoftmaxCrossEntropy => softmax(&logits)?.flatten_all()?,
            Loss::MeanSquaredError => logits.flatten_all()?,
        };
        Ok(scores.to_vec1::<f32>()?)
    }
}

fn softmax(logits: &Tensor) -> Result<Tensor> {
    let shifted = logits.broadcast_sub(&logits.max_keepdim(D::Minus1)?)?.exp()?;
    Ok(shifted.broadcast_div(&shifted.sum_keepdim(D::Minus1)?)?)
}
