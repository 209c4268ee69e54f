//! A batch as a model takes it: dense features, embedding ids and labels as tensors.

use candle_core::{Device, Tensor};

use crate::error::Result;
use crate::features::Encoded;

/// One worker's batch.
pub struct Batch {
    /// `[rows, dense]` float32 features.
    pub dense: Tensor,
    /// `[rows, ids]` u32 ids in the feature spec's shared id space, for models with embeddings.
    pub ids: Option<Tensor>,
    /// `[rows]` labels (0/1 floats or class ids, as the loss wants).
    pub labels: Tensor,
}

impl Batch {
    /// The tensors of an encoded batch.
    pub fn from_encoded(encoded: &Encoded) -> Result<Self> {
        let rows = encoded.rows;
        let dense_width = encoded.dense.len().checked_div(rows).unwrap_or(0);
        let id_width = encoded.ids.len().checked_div(rows).unwrap_or(0);
        let ids = match id_width {
            0 => None,
            w => Some(Tensor::from_slice(&encoded.ids, (rows, w), &Device::Cpu)?),
        };
        Ok(Batch {
            dense: Tensor::from_slice(&encoded.dense, (rows, dense_width), &Device::Cpu)?,
            ids,
            labels: Tensor::from_slice(&encoded.labels, rows, &Device::Cpu)?,
        })
    }

    /// How many examples the batch holds.
    pub fn rows(&self) -> Result<usize> {
        Ok(self.labels.dim(0)?)
    }
}
