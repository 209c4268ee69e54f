//! A model's parameters: candle variables and embedding tables, kept in name order so that
//! every worker lays them out (and their gradients) the same way in one flat buffer for the
//! all-reduce, the optimizer and checkpoints. Variable ids are process-local; names are not.
//!
//! Embedding tables are not candle variables. Their values live in the flat buffer, and each
//! step gathers only the rows its batch touches into a small variable (see
//! [`crate::batch::Lookup`]), so a step costs what the batch touches, not the table's size,
//! and a table's gradient comes out sparse: one row per id in the batch.

use std::collections::BTreeMap;

use candle_core::backprop::GradStore;
use candle_core::{Device, Shape, Tensor, Var};

use crate::error::{Result, TrainError};
use crate::rng::{GOLDEN, SplitMix, mix};

/// Where one parameter lives in the flat buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The parameter's name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// The first value's index in the flat buffer.
    pub offset: usize,
    /// An embedding table (`[rows, dim]`, gathered by row) rather than a candle variable.
    pub table: bool,
}

impl Entry {
    /// How many values the parameter holds.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Values per row of a table (1 for a vector).
    pub fn row_width(&self) -> usize {
        self.shape.get(1).copied().unwrap_or(1)
    }
}

/// How an embedding table's rows start.
#[derive(Debug, Clone, PartialEq)]
pub enum TableInit {
    /// Uniform in `[-scale, scale)`, value `k` of the table (row after row) drawn as the
    /// `k`-th of a SplitMix64 stream from `seed`. Any row can be made alone, so the owner of
    /// a share of a sharded table makes its rows without the rest.
    Uniform {
        /// Half the range.
        scale: f32,
        /// The stream's seed.
        seed: u64,
    },
    /// Given values, row after row (emptied once a flat buffer holds them).
    Values(Vec<f32>),
}

impl TableInit {
    /// Writes row `id` of a table of rows of `dim` values into `out`.
    pub fn row(&self, id: usize, dim: usize, out: &mut [f32]) -> Result<()> {
        match self {
            TableInit::Uniform { scale, seed } => {
                let first = (id * dim) as u64;
                for (k, v) in out.iter_mut().enumerate() {
                    // The stream's value number `first + k`, as SplitMix::unit draws it.
                    let bits = mix(seed.wrapping_add((first + k as u64).wrapping_mul(GOLDEN)));
                    let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
                    *v = ((unit * 2.0 - 1.0) as f32) * scale;
                }
                Ok(())
            }
            TableInit::Values(values) => {
                let row = values.get(id * dim..(id + 1) * dim).ok_or_else(|| {
                    TrainError::InvalidArgument(format!(
                        "the table's initial values were released or hold no row {id}"
                    ))
                })?;
                out.copy_from_slice(row);
                Ok(())
            }
        }
    }
}

enum Param {
    Var(Var),
    /// A table's shape and how its rows start.
    Table {
        rows: usize,
        dim: usize,
        init: TableInit,
    },
}

/// Named float32 variables and embedding tables, in name order.
pub struct Parameters {
    params: BTreeMap<String, Param>,
    device: Device,
}

impl Default for Parameters {
    fn default() -> Self {
        Self::on(&Device::Cpu)
    }
}

impl Parameters {
    /// An empty set in main memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty set whose variables live on `device`.
    pub fn on(device: &Device) -> Self {
        Parameters { params: BTreeMap::new(), device: device.clone() }
    }

    /// Where the variables live.
    pub fn device(&self) -> &Device {
        &self.device
    }

    fn check_new(&self, name: &str) -> Result<()> {
        if self.params.contains_key(name) {
            return Err(TrainError::InvalidArgument(format!("parameter '{name}' is defined twice")));
        }
        Ok(())
    }

    /// Adds a variable of `shape` holding `values`; names are unique.
    pub fn add(&mut self, name: &str, shape: impl Into<Shape>, values: Vec<f32>) -> Result<Var> {
        self.check_new(name)?;
        let var = Var::from_vec(values, shape, &self.device)?;
        self.params.insert(name.to_string(), Param::Var(var.clone()));
        Ok(var)
    }

    /// Adds an embedding table of `rows × dim` holding `values`.
    pub fn add_table(&mut self, name: &str, rows: usize, dim: usize, values: Vec<f32>) -> Result<()> {
        self.check_new(name)?;
        if values.len() != rows * dim {
            return Err(TrainError::InvalidArgument(format!(
                "table '{name}': {} values for {rows} × {dim}",
                values.len()
            )));
        }
        self.params.insert(name.to_string(), Param::Table { rows, dim, init: TableInit::Values(values) });
        Ok(())
    }

    /// Adds an embedding table of `rows × dim` values drawn uniformly from `[-scale, scale)`
    /// by a stream seeded with `seed` (see [`TableInit::Uniform`]): no value is made until a
    /// row is asked for.
    pub fn add_table_uniform(
        &mut self,
        name: &str,
        rows: usize,
        dim: usize,
        scale: f32,
        seed: u64,
    ) -> Result<()> {
        self.check_new(name)?;
        self.params
            .insert(name.to_string(), Param::Table { rows, dim, init: TableInit::Uniform { scale, seed } });
        Ok(())
    }

    /// How the table called `name` starts.
    pub fn table_init(&self, name: &str) -> Option<&TableInit> {
        match self.params.get(name) {
            Some(Param::Table { init, .. }) => Some(init),
            _ => None,
        }
    }

    /// The variable called `name`.
    pub fn get(&self, name: &str) -> Option<&Var> {
        match self.params.get(name) {
            Some(Param::Var(v)) => Some(v),
            _ => None,
        }
    }

    /// Names and variables (tables left out), in name order.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &Var)> {
        self.params.iter().filter_map(|(k, p)| match p {
            Param::Var(v) => Some((k.as_str(), v)),
            Param::Table { .. } => None,
        })
    }

    /// Every parameter's place in the flat buffer, in name order.
    pub fn entries(&self) -> Vec<Entry> {
        let mut offset = 0;
        self.params
            .iter()
            .map(|(name, p)| {
                let (shape, table) = match p {
                    Param::Var(v) => (v.dims().to_vec(), false),
                    Param::Table { rows, dim, .. } => (vec![*rows, *dim], true),
                };
                let entry = Entry { name: name.clone(), shape, offset, table };
                offset += entry.len();
                entry
            })
            .collect()
    }

    /// The variables' places in a flat buffer of the variables alone (tables left out), in
    /// name order: the layout of [`Parameters::flat_vars`].
    pub fn var_entries(&self) -> Vec<Entry> {
        let mut offset = 0;
        self.entries()
            .into_iter()
            .filter(|e| !e.table)
            .map(|mut e| {
                e.offset = offset;
                offset += e.len();
                e
            })
            .collect()
    }

    /// Every table's entry (its offset in the layout of [`Parameters::flat`]).
    pub fn table_entries(&self) -> Vec<Entry> {
        self.entries().into_iter().filter(|e| e.table).collect()
    }

    /// Names and shapes, in name order: how [`Parameters::flat`] lays values out.
    pub fn layout(&self) -> Vec<(String, Vec<usize>)> {
        self.entries().into_iter().map(|e| (e.name, e.shape)).collect()
    }

    /// How many values all the parameters hold together.
    pub fn len(&self) -> usize {
        self.entries().iter().map(Entry::len).sum()
    }

    /// Whether there are no values at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every value, parameter after parameter in name order: the variables' current values
    /// and the tables' initial ones.
    pub fn flat(&self) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(self.len());
        for p in self.params.values() {
            match p {
                Param::Var(var) => out.extend(var.flatten_all()?.to_vec1::<f32>()?),
                Param::Table { init: TableInit::Values(values), .. } => out.extend_from_slice(values),
                Param::Table { rows, dim, init } => {
                    let start = out.len();
                    out.resize(start + rows * dim, 0.0);
                    for (id, row) in out[start..].chunks_exact_mut((*dim).max(1)).enumerate() {
                        init.row(id, *dim, row)?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// The variables' current values alone, variable after variable in name order (the
    /// layout of [`Parameters::var_entries`]).
    pub fn flat_vars(&self) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        for (_, var) in self.vars() {
            out.extend(var.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// Frees the tables' given initial values, once a flat buffer holds the tables.
    pub fn release_tables(&mut self) {
        for p in self.params.values_mut() {
            if let Param::Table { init: TableInit::Values(values), .. } = p {
                *values = Vec::new();
            }
        }
    }

    /// Overwrites every variable from `values`, laid out as [`Parameters::flat_vars`] returns
    /// them.
    pub fn set_flat_vars(&self, values: &[f32]) -> Result<()> {
        let total: usize = self.vars().map(|(_, v)| v.elem_count()).sum();
        if values.len() != total {
            return Err(TrainError::StateMismatch(format!("{} values for {total} variables", values.len())));
        }
        let mut offset = 0;
        for (_, var) in self.vars() {
            let n = var.elem_count();
            var.set(&Tensor::from_slice(&values[offset..offset + n], var.shape(), var.device())?)?;
            offset += n;
        }
        Ok(())
    }

    /// Overwrites every variable from `values`, laid out as [`Parameters::flat`] returns them
    /// (tables are read from the buffer itself when a batch gathers them).
    pub fn set_flat(&self, values: &[f32]) -> Result<()> {
        if values.len() != self.len() {
            return Err(TrainError::StateMismatch(format!(
                "{} values for {} parameters",
                values.len(),
                self.len()
            )));
        }
        let mut offset = 0;
        for p in self.params.values() {
            match p {
                Param::Var(var) => {
                    let n = var.elem_count();
                    var.set(&Tensor::from_slice(&values[offset..offset + n], var.shape(), var.device())?)?;
                    offset += n;
                }
                Param::Table { rows, dim, .. } => offset += rows * dim,
            }
        }
        Ok(())
    }

    /// Writes every variable's gradient into `into`, variable after variable in name order
    /// (tables left out: their gradients are per gathered row), each multiplied by `scale`;
    /// a variable the loss does not depend on gets zeros.
    pub fn var_grads(&self, grads: &GradStore, scale: f32, into: &mut [f32]) -> Result<()> {
        let mut offset = 0;
        for (_, var) in self.vars() {
            let n = var.elem_count();
            grad_into(grads, var, scale, &mut into[offset..offset + n])?;
            offset += n;
        }
        Ok(())
    }
}

/// `var`'s gradient in `grads` times `scale` into `target` (zeros where it has none).
pub(crate) fn grad_into(grads: &GradStore, var: &Var, scale: f32, target: &mut [f32]) -> Result<()> {
    match grads.get(var.as_tensor()) {
        Some(g) => scaled_into(g, scale, target),
        None => {
            target.fill(0.0);
            Ok(())
        }
    }
}

/// `grad`'s values times `scale` into `target`, which has as many.
pub(crate) fn scaled_into(grad: &Tensor, scale: f32, target: &mut [f32]) -> Result<()> {
    let values = grad.flatten_all()?.to_vec1::<f32>()?;
    target.iter_mut().zip(values).for_each(|(t, v)| *t = v * scale);
    Ok(())
}

/// Glorot-uniform values for a `fan_in × fan_out` weight, the same for a given `seed` on
/// every machine (a SplitMix64 stream, not the engine's random generator).
pub fn glorot_uniform(fan_in: usize, fan_out: usize, seed: u64) -> Vec<f32> {
    let limit = (6.0 / (fan_in + fan_out) as f64).sqrt();
    let mut rng = SplitMix::new(seed);
    (0..fan_in * fan_out).map(|_| ((rng.unit() * 2.0 - 1.0) * limit) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uniform_tables_rows_are_its_stream_drawn_in_order() {
        let (rows, dim, scale, seed) = (7, 3, 0.05f32, 42);
        let mut rng = SplitMix::new(seed);
        let eager: Vec<f32> = (0..rows * dim).map(|_| ((rng.unit() * 2.0 - 1.0) as f32) * scale).collect();
        let init = TableInit::Uniform { scale, seed };
        let mut row = vec![0.0; dim];
        for id in 0..rows {
            init.row(id, dim, &mut row).unwrap();
            assert_eq!(row, eager[id * dim..(id + 1) * dim], "row {id}");
        }
        let mut params = Parameters::new();
        params.add_table_uniform("t", rows, dim, scale, seed).unwrap();
        assert_eq!(params.flat().unwrap(), eager);
    }
}
