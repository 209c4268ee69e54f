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
use crate::rng::SplitMix;

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

enum Param {
    Var(Var),
    /// A table's shape and, until the buffer takes them over, its initial values.
    Table {
        rows: usize,
        dim: usize,
        initial: Vec<f32>,
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
        self.params.insert(name.to_string(), Param::Table { rows, dim, initial: values });
        Ok(())
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
                Param::Table { initial, .. } => out.extend_from_slice(initial),
            }
        }
        Ok(out)
    }

    /// Frees the tables' initial values, once a flat buffer holds the tables.
    pub fn release_tables(&mut self) {
        for p in self.params.values_mut() {
            if let Param::Table { initial, .. } = p {
                *initial = Vec::new();
            }
        }
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
            let target = &mut into[offset..offset + n];
            match grads.get(var.as_tensor()) {
                Some(g) => {
                    let values = g.flatten_all()?.to_vec1::<f32>()?;
                    target.iter_mut().zip(values).for_each(|(t, v)| *t = v * scale);
                }
                None => target.fill(0.0),
            }
            offset += n;
        }
        Ok(())
    }
}

/// Glorot-uniform values for a `fan_in × fan_out` weight, the same for a given `seed` on
/// every machine (a SplitMix64 stream, not the engine's random generator).
pub fn glorot_uniform(fan_in: usize, fan_out: usize, seed: u64) -> Vec<f32> {
    let limit = (6.0 / (fan_in + fan_out) as f64).sqrt();
    let mut rng = SplitMix::new(seed);
    (0..fan_in * fan_out).map(|_| ((rng.unit() * 2.0 - 1.0) * limit) as f32).collect()
}
