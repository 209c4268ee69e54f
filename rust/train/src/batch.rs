//! A batch as a model takes it (dense features, embedding ids and labels as tensors), and the
//! [`Lookup`] of the embedding rows it touches, which also pools multi-hot columns.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor, Var};

use crate::error::{Result, TrainError};
use crate::features::{Encoded, Pooling};
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
    /// The multi-hot columns' ids, for models with embeddings.
    pub bags: Option<Bags>,
}

/// A batch's multi-hot ids: every row's lists, one per multi-hot column.
#[derive(Debug, Clone, PartialEq)]
pub struct Bags {
    /// `rows × width` counts of ids, row after row.
    pub lengths: Vec<u32>,
    /// The ids, in the order of `lengths`.
    pub ids: Vec<u32>,
    /// Each column's pooling (`width` of them).
    pub pooling: Vec<Pooling>,
}

impl Bags {
    /// Multi-hot columns per row.
    pub fn width(&self) -> usize {
        self.pooling.len()
    }
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
        let bags = (!encoded.pooling.is_empty()).then(|| Bags {
            lengths: encoded.bag_lengths.clone(),
            ids: encoded.bag_ids.clone(),
            pooling: encoded.pooling.clone(),
        });
        Ok(Batch {
            dense: Tensor::from_slice(&encoded.dense, (rows, dense_width), device)?,
            ids: (id_width > 0).then(|| encoded.ids.clone()),
            id_width,
            labels: Tensor::from_slice(&encoded.labels, rows, device)?,
            bags,
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
    /// The multi-hot ids, placed for pooling.
    bags: Option<PooledBags>,
}

/// Where a batch's multi-hot ids go when pooled: `rows × width` bags, bag `r · width + j`
/// holding row `r`'s ids of column `j`.
struct PooledBags {
    rows: usize,
    width: usize,
    /// `[ids]`: each id's index in `unique` (None when every bag is empty).
    local: Option<Tensor>,
    /// `[ids]`: each id's bag.
    bag_of: Option<Tensor>,
    /// `[bags, 1]`: the factor on each bag's sum (1, or 1/count for a mean).
    scale: Tensor,
}

impl Lookup {
    /// The batch's distinct ids (single and multi-hot), ascending; None when it has none.
    pub fn distinct_ids(batch: &Batch) -> Option<Vec<u32>> {
        if batch.ids.is_none() && batch.bags.is_none() {
            return None;
        }
        let no_ids = Vec::new();
        let ids = batch.ids.as_ref().unwrap_or(&no_ids);
        let bag_ids = batch.bags.as_ref().map_or(&no_ids, |b| &b.ids);
        let mut unique: Vec<u32> = ids.iter().chain(bag_ids).copied().collect();
        unique.sort_unstable();
        unique.dedup();
        Some(unique)
    }

    /// Gathers the rows of `batch`'s ids from every table among `entries`, whose values are
    /// in `weights`, onto the batch's device; None when the batch has no ids.
    pub fn gather(batch: &Batch, entries: &[Entry], weights: &[f32]) -> Result<Option<Lookup>> {
        let Some(unique) = Self::distinct_ids(batch) else { return Ok(None) };
        let mut tables = Vec::new();
        for entry in entries.iter().filter(|e| e.table) {
            check_ids(&unique, entry)?;
            let width = entry.row_width();
            let starts: Vec<usize> = unique.iter().map(|&id| entry.offset + id as usize * width).collect();
            tables.push((entry.name.clone(), width, gather_rows(weights, &starts, width)));
        }
        Self::with_rows(batch, unique, tables).map(Some)
    }

    /// The lookup of `batch` whose distinct ids ([`Lookup::distinct_ids`]) are `unique`,
    /// given every table's rows of them: `(name, width, values)`, row after row.
    pub fn with_rows(
        batch: &Batch,
        unique: Vec<u32>,
        tables: Vec<(String, usize, Vec<f32>)>,
    ) -> Result<Lookup> {
        let no_ids = Vec::new();
        let ids = batch.ids.as_ref().unwrap_or(&no_ids);
        let bag_ids = batch.bags.as_ref().map_or(&no_ids, |b| &b.ids);
        let device = batch.dense.device();
        let rows = batch.rows()?;
        let position = |id: &u32| {
            unique.binary_search(id).map(|p| p as u32).map_err(|_| {
                TrainError::InvalidArgument(format!("id {id} of the batch is not among the looked-up ids"))
            })
        };
        let local: Vec<u32> = ids.iter().map(position).collect::<Result<_>>()?;
        let bags = batch
            .bags
            .as_ref()
            .map(|b| -> Result<PooledBags> {
                let local = bag_ids.iter().map(position).collect::<Result<_>>()?;
                PooledBags::new(b, rows, local, device)
            })
            .transpose()?;
        let mut vars = BTreeMap::new();
        for (name, width, values) in tables {
            if values.len() != unique.len() * width {
                return Err(TrainError::InvalidArgument(format!(
                    "{} values of table '{name}' for {} ids of {width} values",
                    values.len(),
                    unique.len()
                )));
            }
            vars.insert(name, Var::from_vec(values, (unique.len(), width), device)?);
        }
        let id_width = if batch.ids.is_some() { batch.id_width } else { 0 };
        let local = Tensor::from_vec(local, (rows, id_width), device)?;
        Ok(Lookup { unique, local, rows: vars, bags })
    }

    /// `[rows, fields, dim]`: each of the batch's ids looked up in `table`, then each
    /// multi-hot column's rows of it pooled into one.
    pub fn embed(&self, table: &str) -> Result<Tensor> {
        let var = self.rows.get(table).ok_or_else(|| {
            TrainError::InvalidArgument(format!("the lookup holds no rows of table '{table}'"))
        })?;
        let (rows, width) = self.local.dims2()?;
        let dim = var.dim(1)?;
        let single = if width > 0 {
            Some(var.as_tensor().index_select(&self.local.flatten_all()?, 0)?.reshape((rows, width, dim))?)
        } else {
            None
        };
        let pooled = self.bags.as_ref().map(|b| b.pool(var.as_tensor(), dim)).transpose()?;
        Ok(match (single, pooled) {
            (Some(s), Some(p)) => Tensor::cat(&[&s, &p], 1)?,
            (Some(s), None) => s,
            (None, Some(p)) => p,
            (None, None) => Tensor::zeros((rows, 0, dim), DType::F32, var.device())?,
        })
    }
}

/// Refuses ids beyond the rows of the table `entry`: the data does not match the spec.
pub(crate) fn check_ids(unique: &[u32], entry: &Entry) -> Result<()> {
    let size = entry.shape[0];
    if let Some(&top) = unique.last()
        && top as usize >= size
    {
        return Err(TrainError::InvalidArgument(format!(
            "id {top} is outside the embedding table '{}' of {size} rows: the data does not match the \
             feature spec",
            entry.name
        )));
    }
    Ok(())
}

impl PooledBags {
    /// `bags` placed for pooling, `local` holding each of their ids' index in the lookup.
    fn new(bags: &Bags, rows: usize, local: Vec<u32>, device: &Device) -> Result<Self> {
        let width = bags.width();
        if bags.lengths.len() != rows * width {
            return Err(TrainError::InvalidArgument(format!(
                "{} multi-hot counts for {rows} rows of {width} columns",
                bags.lengths.len()
            )));
        }
        let bag_of: Vec<u32> = bags
            .lengths
            .iter()
            .enumerate()
            .flat_map(|(bag, &n)| std::iter::repeat_n(bag as u32, n as usize))
            .collect();
        if bag_of.len() != local.len() {
            return Err(TrainError::InvalidArgument(format!(
                "the multi-hot counts add up to {}, the batch has {} ids",
                bag_of.len(),
                local.len()
            )));
        }
        let scale: Vec<f32> = bags
            .lengths
            .iter()
            .enumerate()
            .map(|(bag, &n)| match bags.pooling[bag % width] {
                Pooling::Mean if n > 0 => 1.0 / n as f32,
                _ => 1.0,
            })
            .collect();
        let n = local.len();
        let (local, bag_of) = if n == 0 {
            (None, None)
        } else {
            (Some(Tensor::from_vec(local, n, device)?), Some(Tensor::from_vec(bag_of, n, device)?))
        };
        Ok(PooledBags {
            rows,
            width,
            local,
            bag_of,
            scale: Tensor::from_vec(scale, (rows * width, 1), device)?,
        })
    }

    /// `[rows, width, dim]`: every bag's rows of `table` (`[unique, dim]`), summed and scaled.
    fn pool(&self, table: &Tensor, dim: usize) -> Result<Tensor> {
        let zeros = Tensor::zeros((self.rows * self.width, dim), DType::F32, table.device())?;
        let sums = match (&self.local, &self.bag_of) {
            (Some(local), Some(bag_of)) => zeros.index_add(bag_of, &table.index_select(local, 0)?, 0)?,
            _ => zeros,
        };
        Ok(sums.broadcast_mul(&self.scale)?.reshape((self.rows, self.width, dim))?)
    }
}
