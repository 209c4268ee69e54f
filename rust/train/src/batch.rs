//! A batch as a model takes it (dense features, embedding ids and labels as tensors), and the
//! [`Lookup`] of the embedding rows it touches.

use std::collections::BTreeMap;

use candle_core::{Device, Tensor, Var};

use crate::error::{Result, TrainError};
use crate::features::Encoded;
use crate::params::Entry;
use crate::rows::gather_rows;

/// One worker's batch.
pub struct Batch {
    /// `[rows, dense]` float32 features.
    pub dense: Tensor,
    /// `[rows, ids]` ids in the feature spec's shared id space, for models with embeddings.
    pub ids: Option<Vec<u32>>,
    /// Ids per row.
    pub id_width: usize,
    /// `[rows]` labels (0/1 floats or class ids, as the loss wants).
    pub labels: Tensor,
}

impl Batch {
    /// The tensors of an encoded batch, in main memory.
    pub fn from_encoded(encoded: &Encoded) -> Result<Self> {
        Self::from_encoded_on(encoded, &Device::Cpu)
    }

    /// The tensors of an encoded batch, on `device`.
    pub fn from_encoded_on(encoded: &Encoded, device: &Device) -> Result<Self> {
        let rows = encoded.rows;
        let dense_width = encoded.dense.len().checked_div(rows).unwrap_or(0);
        let id_width = encoded.ids.len().checked_div(rows).unwrap_or(0);
        Ok(Batch {
            dense: Tensor::from_slice(&encoded.dense, (rows, dense_width), device)?,
            ids: (id_width > 0).then(|| encoded.ids.clone()),
            id_width,
            labels: Tensor::from_slice(&encoded.labels, rows, device)?,
        })
    }

    /// How many examples the batch holds.
    pub fn rows(&self) -> Result<usize> {
        Ok(self.labels.dim(0)?)
    }
}

/// The embedding rows one batch touches: its distinct ids, where each of its ids sits among
/// them, and for every table a small variable holding just those rows. Gradients flow into
/// those variables, so a table's gradient has one row per distinct id.
pub struct Lookup {
    /// The batch's distinct ids, ascending.
    pub unique: Vec<u32>,
    /// `[rows, ids]`: each id's index in `unique`.
    pub local: Tensor,
    /// Per table name: `[unique, dim]`, the table's rows for `unique`.
    pub rows: BTreeMap<String, Var>,
}

impl Lookup {
    /// Gathers the rows of `batch`'s ids from every table among `entries`, whose values are
    /// in `weights`, onto the batch's device; None when the batch has no ids.
    pub fn gather(batch: &Batch, entries: &[Entry], weights: &[f32]) -> Result<Option<Lookup>> {
        let Some(ids) = &batch.ids else { return Ok(None) };
        let device = batch.dense.device();
        let rows = batch.rows()?;
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        let local: Vec<u32> = ids
            .iter()
            .map(|id| unique.binary_search(id).expect("every id is among the distinct ids") as u32)
            .collect();
        let mut tables = BTreeMap::new();
        for entry in entries.iter().filter(|e| e.table) {
            let (size, width) = (entry.shape[0], entry.row_width());
            if let Some(&top) = unique.last()
                && top as usize >= size
            {
                return Err(TrainError::InvalidArgument(format!(
                    "id {top} is outside the embedding table '{}' of {size} rows: the data does not \
                     match the feature spec",
                    entry.name
                )));
            }
            let starts: Vec<usize> = unique.iter().map(|&id| entry.offset + id as usize * width).collect();
            let values = gather_rows(weights, &starts, width);
            let var = Var::from_vec(values, (unique.len(), width), device)?;
            tables.insert(entry.name.clone(), var);
        }
        let local = Tensor::from_vec(local, (rows, batch.id_width), device)?;
        Ok(Some(Lookup { unique, local, rows: tables }))
    }

    /// `[rows, ids, dim]`: each of the batch's ids looked up in `table`.
    pub fn embed(&self, table: &str) -> Result<Tensor> {
        let var = self.rows.get(table).ok_or_else(|| {
            TrainError::InvalidArgument(format!("the lookup holds no rows of table '{table}'"))
        })?;
        let (rows, width) = self.local.dims2()?;
        let dim = var.dim(1)?;
        Ok(var.as_tensor().index_select(&self.local.flatten_all()?, 0)?.reshape((rows, width, dim))?)
    }
}
