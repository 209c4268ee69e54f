//! A batch as a model takes it (dense features, embedding ids and labels as tensors), and the
//! [`Lookup`] of the embedding rows it touches, which also pools multi-hot columns.
//!
//! A lookup hands the model its rows in one of two layouts ([`Gather`]), chosen by the
//! batch's device: on the CPU a variable of the distinct rows, gathered per id; elsewhere a
//! variable of one row per id, whose gradient `segments::SegmentSum` sums into the distinct rows
//! with kernels that are parallel over their output.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};

use crate::device_tables::RowPlaces;
use crate::distinct::{all_ids, distinct};
use crate::error::{Result, TrainError};
use crate::features::{Encoded, Pooling};
use crate::params::Entry;
use crate::rows::gather_rows;
use crate::segments::{NONE, SegmentSum};

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

/// How a [`Lookup`] lays out the rows it hands the model, which decides how their gradients
/// come back as one row per distinct id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gather {
    /// A variable of the distinct rows, looked up per id with `index_select`. Its backward
    /// pass is an `index_add` over the batch's ids: one pass on the CPU, but on CUDA one
    /// thread per value of a row, each looping over every id of the batch.
    Distinct,
    /// A variable of one row per id of the batch (multi-hot lists padded to the longest),
    /// whose gradient is then summed into the distinct rows (`segments::SegmentSum`): gathers and
    /// sums only, each parallel over its output and the same from run to run.
    PerPosition,
}

impl Gather {
    /// The layout for tensors on `device`.
    pub fn for_device(device: &Device) -> Gather {
        if device.is_cpu() { Gather::Distinct } else { Gather::PerPosition }
    }
}

/// The embedding rows one batch touches: its distinct ids, and for every table a small
/// variable holding their rows (in the [`Gather`] layout). Gradients flow into those
/// variables; [`Lookup::row_grads`] gives a table's gradient as one row per distinct id.
pub struct Lookup {
    /// The batch's distinct ids, ascending.
    pub unique: Vec<u32>,
    /// Per table name, the variable gradients flow into.
    rows: BTreeMap<String, Var>,
    form: Form,
    /// The ids' places in tables on the device, when made ahead with the plan.
    places: Option<RowPlaces>,
}

/// Everything of a [`Lookup`] that depends on the batch alone: its distinct ids, where each
/// of its ids sits among them, and the layout its rows will take, the layout's index tensors
/// already on the batch's device. A step makes one from its batch, or is handed one made
/// ahead on the prefetch thread (`prefetch.rs`), and then only brings the rows.
pub(crate) struct LookupPlan {
    /// The batch's distinct ids, ascending.
    pub(crate) unique: Vec<u32>,
    form: Form,
    /// Their places in tables on the device ([`LookupPlan::place_rows`]).
    pub(crate) places: Option<RowPlaces>,
}

impl LookupPlan {
    /// The plan of `batch`'s ids, laid out for its device; None when it has no ids.
    pub(crate) fn of(batch: &Batch) -> Result<Option<LookupPlan>> {
        Self::of_as(batch, Gather::for_device(batch.dense.device()))
    }

    /// [`LookupPlan::of`], laid out as `gather` says.
    pub(crate) fn of_as(batch: &Batch, gather: Gather) -> Result<Option<LookupPlan>> {
        let Some(ids) = all_ids(batch) else { return Ok(None) };
        let (unique, mut local) = distinct(&ids);
        let bag_local = local.split_off(batch.ids.as_ref().map_or(0, Vec::len));
        Self::placed(batch, unique, local, bag_local, gather).map(Some)
    }

    /// The plan of `batch`, whose single ids are `unique[local[i]]` and multi-hot ids
    /// `unique[bag_local[i]]`.
    fn placed(
        batch: &Batch,
        unique: Vec<u32>,
        local: Vec<u32>,
        bag_local: Vec<u32>,
        gather: Gather,
    ) -> Result<LookupPlan> {
        let device = batch.dense.device().clone();
        let rows = batch.rows()?;
        let id_width = if batch.ids.is_some() { batch.id_width } else { 0 };
        let slots = match (gather, &batch.bags) {
            (Gather::Distinct, _) => None,
            (Gather::PerPosition, bags) => {
                per_position_slots(&local, &bag_local, bags.as_ref(), rows, &device)?
            }
        };
        let form = match slots {
            Some((slots, bags)) => {
                let at = Tensor::from_slice(&slots, slots.len(), &device)?;
                Form::PerPosition { rows, id_width, bags, slots, at, sum: OnceLock::new() }
            }
            None => {
                let bags =
                    batch.bags.as_ref().map(|b| PooledBags::new(b, rows, bag_local, &device)).transpose()?;
                let local = Tensor::from_vec(local, (rows, id_width), &device)?;
                Form::Distinct { local, bags }
            }
        };
        Ok(LookupPlan { unique, form, places: None })
    }

    /// The device of the batch the plan was made for: where its index tensors are.
    fn device(&self) -> &Device {
        match &self.form {
            Form::Distinct { local, .. } => local.device(),
            Form::PerPosition { at, .. } => at.device(),
        }
    }

    /// Makes now what [`Lookup::row_grads`] would make on its first call: the plan that sums
    /// the gradient of one row per id into one per distinct id. For batches that will be
    /// trained on, so that the step finds it made.
    pub(crate) fn plan_gradients(&self) -> Result<()> {
        if let Form::PerPosition { slots, sum, .. } = &self.form {
            gradient_sums(sum, slots, self.unique.len(), self.device())?;
        }
        Ok(())
    }

    /// Makes the places of the distinct ids on the plan's device, where a trainer alone reads
    /// and updates their rows: for batches that will be trained on, so that the step finds
    /// them made.
    pub(crate) fn place_rows(&mut self) -> Result<()> {
        self.places = Some(RowPlaces::new(&self.unique, self.device())?);
        Ok(())
    }

    /// The lookup with the rows of every table among `entries`, whose values are in `weights`.
    pub(crate) fn gather(self, entries: &[Entry], weights: &[f32]) -> Result<Lookup> {
        let mut tables = Vec::new();
        for entry in entries.iter().filter(|e| e.table) {
            check_ids(&self.unique, entry)?;
            let width = entry.row_width();
            let starts: Vec<usize> =
                self.unique.iter().map(|&id| entry.offset + id as usize * width).collect();
            tables.push((entry.name.clone(), width, gather_rows(weights, &starts, width)));
        }
        self.with_host_rows(tables)
    }

    /// The lookup given every table's rows of `unique`: `(name, width, values)`, row after row.
    pub(crate) fn with_host_rows(self, tables: Vec<(String, usize, Vec<f32>)>) -> Result<Lookup> {
        let tables = tables.into_iter().map(|(name, width, values)| (name, width, Rows::Host(values)));
        self.with(tables.collect())
    }

    /// The lookup given every table's rows of `unique` as `[unique, width]` tensors already on
    /// the batch's device.
    pub(crate) fn with_device_rows(self, tables: Vec<(String, Tensor)>) -> Result<Lookup> {
        let tables = tables
            .into_iter()
            .map(|(name, rows)| Ok((name, rows.dim(1)?, Rows::Device(rows))))
            .collect::<Result<_>>()?;
        self.with(tables)
    }

    /// The lookup given every table's rows of `unique`, in main memory or on the device.
    fn with(self, tables: Vec<(String, usize, Rows)>) -> Result<Lookup> {
        let device = self.device().clone();
        let LookupPlan { unique, form, places } = self;
        let mut vars = BTreeMap::new();
        for (name, width, values) in tables {
            let count = match &values {
                Rows::Host(values) => values.len(),
                Rows::Device(rows) => rows.elem_count(),
            };
            if count != unique.len() * width {
                return Err(TrainError::InvalidArgument(format!(
                    "{count} values of table '{name}' for {} ids of {width} values",
                    unique.len()
                )));
            }
            let var = match (&form, values) {
                (Form::Distinct { .. }, Rows::Host(values)) => {
                    Var::from_vec(values, (unique.len(), width), &device)?
                }
                (Form::Distinct { .. }, Rows::Device(rows)) => Var::from_tensor(&rows)?,
                (Form::PerPosition { at, .. }, Rows::Host(values)) => {
                    let table = Tensor::from_vec(values, (unique.len(), width), &device)?;
                    Var::from_tensor(&table.index_select(at, 0)?)?
                }
                (Form::PerPosition { at, .. }, Rows::Device(rows)) => {
                    Var::from_tensor(&rows.index_select(at, 0)?)?
                }
            };
            vars.insert(name, var);
        }
        Ok(Lookup { unique, rows: vars, form, places })
    }
}

/// The plan in `sum` that adds the gradients of `slots` into `groups` rows, made on first use.
fn gradient_sums<'a>(
    sum: &'a OnceLock<SegmentSum>,
    slots: &[u32],
    groups: usize,
    device: &Device,
) -> Result<&'a SegmentSum> {
    if let Some(plan) = sum.get() {
        return Ok(plan);
    }
    let plan = SegmentSum::new(slots, groups, device)?;
    Ok(sum.get_or_init(|| plan))
}

/// A table's rows of a batch's distinct ids, as a lookup is given them.
enum Rows {
    /// Row after row, in main memory.
    Host(Vec<f32>),
    /// `[unique, width]`, on the batch's device.
    Device(Tensor),
}

/// Where each of the batch's ids finds its row in the tables' variables.
enum Form {
    /// Variables of `[unique, dim]`.
    Distinct {
        /// `[rows, ids]`: each id's index in `unique`.
        local: Tensor,
        /// The multi-hot ids, placed for pooling.
        bags: Option<PooledBags>,
    },
    /// Variables of `[rows · ids + bags · longest, dim]`: the single ids' rows, row after row,
    /// then every bag's, each padded with zero rows to the longest bag.
    PerPosition {
        rows: usize,
        id_width: usize,
        bags: Option<PaddedBags>,
        /// Each slot's index among the distinct ids ([`NONE`] for padding).
        slots: Vec<u32>,
        /// `slots` on the batch's device, padding as the index of a zero row.
        at: Tensor,
        /// The plan that sums gradients by distinct id: made ahead for training
        /// ([`LookupPlan::plan_gradients`]) or by the first [`Lookup::row_grads`], so that
        /// lookups for scoring alone never pay for it.
        sum: OnceLock<SegmentSum>,
    },
}

/// A batch's bags laid out for [`Gather::PerPosition`]: `rows × width` bags of `longest`
/// slots each.
struct PaddedBags {
    width: usize,
    longest: usize,
    /// `[bags, 1]`: the factor on each bag's sum (1, or 1/count for a mean).
    scale: Tensor,
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
    /// The places of the ids in tables on the device, when the plan had them made ahead.
    pub(crate) fn take_places(&mut self) -> Option<RowPlaces> {
        self.places.take()
    }

    /// The batch's distinct ids (single and multi-hot), ascending; None when it has none.
    pub fn distinct_ids(batch: &Batch) -> Option<Vec<u32>> {
        Some(distinct(&all_ids(batch)?).0)
    }

    /// Gathers the rows of `batch`'s ids from every table among `entries`, whose values are
    /// in `weights`, onto the batch's device; None when the batch has no ids.
    pub fn gather(batch: &Batch, entries: &[Entry], weights: &[f32]) -> Result<Option<Lookup>> {
        Self::gather_as(batch, entries, weights, Gather::for_device(batch.dense.device()))
    }

    /// [`Lookup::gather`], laid out as `gather` says.
    pub fn gather_as(
        batch: &Batch,
        entries: &[Entry],
        weights: &[f32],
        gather: Gather,
    ) -> Result<Option<Lookup>> {
        LookupPlan::of_as(batch, gather)?.map(|plan| plan.gather(entries, weights)).transpose()
    }

    /// The lookup of `batch` whose distinct ids ([`Lookup::distinct_ids`]) are `unique`,
    /// given every table's rows of them: `(name, width, values)`, row after row; laid out
    /// for the batch's device.
    pub fn with_rows(
        batch: &Batch,
        unique: Vec<u32>,
        tables: Vec<(String, usize, Vec<f32>)>,
    ) -> Result<Lookup> {
        let gather = Gather::for_device(batch.dense.device());
        Self::with_rows_as(batch, unique, tables, gather)
    }

    /// [`Lookup::with_rows`], laid out as `gather` says.
    pub fn with_rows_as(
        batch: &Batch,
        unique: Vec<u32>,
        tables: Vec<(String, usize, Vec<f32>)>,
        gather: Gather,
    ) -> Result<Lookup> {
        let no_ids = Vec::new();
        let ids = batch.ids.as_ref().unwrap_or(&no_ids);
        let bag_ids = batch.bags.as_ref().map_or(&no_ids, |b| &b.ids);
        let position = |id: &u32| {
            unique.binary_search(id).map(|p| p as u32).map_err(|_| {
                TrainError::InvalidArgument(format!("id {id} of the batch is not among the looked-up ids"))
            })
        };
        let local: Vec<u32> = ids.iter().map(position).collect::<Result<_>>()?;
        let bag_local: Vec<u32> = bag_ids.iter().map(position).collect::<Result<_>>()?;
        LookupPlan::placed(batch, unique, local, bag_local, gather)?.with_host_rows(tables)
    }

    /// `[rows, fields, dim]`: each of the batch's ids looked up in `table`, then each
    /// multi-hot column's rows of it pooled into one.
    pub fn embed(&self, table: &str) -> Result<Tensor> {
        let var = self.var(table)?.as_tensor();
        let dim = var.dim(1)?;
        let (rows, single, pooled) = match &self.form {
            Form::Distinct { local, bags } => {
                let (rows, width) = local.dims2()?;
                let single = (width > 0)
                    .then(|| var.index_select(&local.flatten_all()?, 0)?.reshape((rows, width, dim)))
                    .transpose()?;
                (rows, single, bags.as_ref().map(|b| b.pool(var, dim)).transpose()?)
            }
            Form::PerPosition { rows, id_width, bags, .. } => {
                let (rows, singles) = (*rows, rows * id_width);
                let single = (*id_width > 0)
                    .then(|| var.narrow(0, 0, singles)?.reshape((rows, *id_width, dim)))
                    .transpose()?;
                let pooled = bags.as_ref().map(|b| b.pool(var, singles, rows, dim)).transpose()?;
                (rows, single, pooled)
            }
        };
        Ok(match (single, pooled) {
            (Some(s), Some(p)) => Tensor::cat(&[&s, &p], 1)?,
            (Some(s), None) => s,
            (None, Some(p)) => p,
            (None, None) => Tensor::zeros((rows, 0, dim), DType::F32, var.device())?,
        })
    }

    /// `[unique, dim]`: the gradient of `table`'s rows of the distinct ids, from the backward
    /// pass `grads` (None when the loss does not depend on them).
    pub fn row_grads(&self, table: &str, grads: &GradStore) -> Result<Option<Tensor>> {
        let Some(grad) = grads.get(self.var(table)?.as_tensor()) else { return Ok(None) };
        match &self.form {
            Form::Distinct { .. } => Ok(Some(grad.clone())),
            Form::PerPosition { slots, sum, .. } => {
                gradient_sums(sum, slots, self.unique.len(), grad.device())?.apply(grad).map(Some)
            }
        }
    }

    fn var(&self, table: &str) -> Result<&Var> {
        self.rows.get(table).ok_or_else(|| {
            TrainError::InvalidArgument(format!("the lookup holds no rows of table '{table}'"))
        })
    }
}

/// For [`Gather::PerPosition`]: each slot's index among the distinct ids (single ids first,
/// then every bag padded with [`NONE`] to the longest), and the bags' layout. None where the
/// padding would cost more than four times the bags' own ids: one long list would make every
/// bag that long, so such a batch keeps the distinct layout.
fn per_position_slots(
    local: &[u32],
    bag_local: &[u32],
    bags: Option<&Bags>,
    rows: usize,
    device: &Device,
) -> Result<Option<(Vec<u32>, Option<PaddedBags>)>> {
    let Some(bags) = bags else {
        return Ok((!local.is_empty()).then(|| (local.to_vec(), None)));
    };
    let width = bags.width();
    check_bag_counts(bags, rows, bag_local.len())?;
    let longest = bags.lengths.iter().copied().max().unwrap_or(0) as usize;
    let padded = bags.lengths.len() * longest;
    if padded > 4 * bag_local.len().max(bags.lengths.len()) || local.len() + padded == 0 {
        return Ok(None);
    }
    let mut slots = Vec::with_capacity(local.len() + padded);
    slots.extend_from_slice(local);
    let mut at = 0;
    for &n in &bags.lengths {
        let n = n as usize;
        slots.extend_from_slice(&bag_local[at..at + n]);
        slots.resize(slots.len() + longest - n, NONE);
        at += n;
    }
    let scale = Tensor::from_vec(bag_scales(bags), (bags.lengths.len(), 1), device)?;
    Ok(Some((slots, Some(PaddedBags { width, longest, scale }))))
}

/// Each bag's factor on its sum: 1, or 1/count for a mean.
fn bag_scales(bags: &Bags) -> Vec<f32> {
    let width = bags.width();
    bags.lengths
        .iter()
        .enumerate()
        .map(|(bag, &n)| match bags.pooling[bag % width] {
            Pooling::Mean if n > 0 => 1.0 / n as f32,
            _ => 1.0,
        })
        .collect()
}

/// Refuses multi-hot counts that do not fit the batch.
fn check_bag_counts(bags: &Bags, rows: usize, ids: usize) -> Result<()> {
    let width = bags.width();
    if bags.lengths.len() != rows * width {
        return Err(TrainError::InvalidArgument(format!(
            "{} multi-hot counts for {rows} rows of {width} columns",
            bags.lengths.len()
        )));
    }
    let counted: usize = bags.lengths.iter().map(|&n| n as usize).sum();
    if counted != ids {
        return Err(TrainError::InvalidArgument(format!(
            "the multi-hot counts add up to {counted}, the batch has {ids} ids"
        )));
    }
    Ok(())
}

impl PaddedBags {
    /// `[rows, width, dim]`: every bag's slots of `var`, which start after `singles` rows,
    /// summed and scaled.
    fn pool(&self, var: &Tensor, singles: usize, rows: usize, dim: usize) -> Result<Tensor> {
        let bags = rows * self.width;
        let sums = if self.longest == 0 {
            Tensor::zeros((bags, dim), DType::F32, var.device())?
        } else {
            var.narrow(0, singles, bags * self.longest)?.reshape((bags, self.longest, dim))?.sum(1)?
        };
        Ok(sums.broadcast_mul(&self.scale)?.reshape((rows, self.width, dim))?)
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
        check_bag_counts(bags, rows, local.len())?;
        let bag_of: Vec<u32> = bags
            .lengths
            .iter()
            .enumerate()
            .flat_map(|(bag, &n)| std::iter::repeat_n(bag as u32, n as usize))
            .collect();
        let scale = bag_scales(bags);
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
