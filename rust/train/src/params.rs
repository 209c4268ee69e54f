//! A model's parameters: candle variables kept in name order, so that every worker flattens
//! them (and their gradients) into one buffer the same way for the all-reduce and the
//! optimizer. Variable ids are process-local; names are not.

use std::collections::BTreeMap;

use candle_core::backprop::GradStore;
use candle_core::{Device, Shape, Tensor, Var};

use crate::error::{Result, TrainError};
use crate::rng::SplitMix;

/// Named float32 variables, in name order.
#[derive(Default)]
pub struct Parameters {
    vars: BTreeMap<String, Var>,
}

impl Parameters {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a variable of `shape` holding `values`; names are unique.
    pub fn add(&mut self, name: &str, shape: impl Into<Shape>, values: Vec<f32>) -> Result<Var> {
        if self.vars.contains_key(name) {
            return Err(TrainError::InvalidArgument(format!("parameter '{name}' is defined twice")));
        }
        let var = Var::from_vec(values, shape, &Device::Cpu)?;
        self.vars.insert(name.to_string(), var.clone());
        Ok(var)
    }

    /// The variable called `name`.
    pub fn get(&self, name: &str) -> Option<&Var> {
        self.vars.get(name)
    }

    /// Names and variables, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Var)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Names and shapes, in name order: how [`Parameters::flat`] lays values out.
    pub fn layout(&self) -> Vec<(String, Vec<usize>)> {
        self.vars.iter().map(|(k, v)| (k.clone(), v.dims().to_vec())).collect()
    }

    /// How many values all the variables hold together.
    pub fn len(&self) -> usize {
        self.vars.values().map(|v| v.elem_count()).sum()
    }

    /// Whether there are no values at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every value, variable after variable in name order.
    pub fn flat(&self) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(self.len());
        for var in self.vars.values() {
            out.extend(var.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// Overwrites every variable from `values`, laid out as [`Parameters::flat`] returns them.
    pub fn set_flat(&self, values: &[f32]) -> Result<()> {
        if values.len() != self.len() {
            return Err(TrainError::StateMismatch(format!(
                "{} values for {} parameters",
                values.len(),
                self.len()
            )));
        }
        let mut offset = 0;
        for var in self.vars.values() {
            let n = var.elem_count();
            var.set(&Tensor::from_slice(&values[offset..offset + n], var.shape(), &Device::Cpu)?)?;
            offset += n;
        }
        Ok(())
    }

    /// Writes every gradient into `into`, laid out as [`Parameters::flat`], each multiplied
    /// by `scale`; a variable the loss does not depend on gets zeros.
    pub fn flat_grads(&self, grads: &GradStore, scale: f32, into: &mut [f32]) -> Result<()> {
        let mut offset = 0;
        for var in self.vars.values() {
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
