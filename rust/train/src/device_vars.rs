//! The variables' update on the model's device, with their optimizer state kept there, for
//! models that compute on a GPU.
//!
//! On the host path every step copies each variable's gradient to main memory, runs the
//! update rule there and copies every variable back: on a GPU those copies, and the rule run
//! by the host for a model of millions of weights, cost more than the step's own kernels.
//! Here the step's gradient is one flat tensor on the device. It crosses to the host only
//! when there is a ring to sum it over (down once, back once); the mean, the penalties and
//! the clipping run in tensor operations, and the rule in passes that write each variable
//! and its state where they live (`rule_passes.rs`). Of each step only the loss and the
//! gradient's norm, a number each, reach the host.
//!
//! The arithmetic is the host path's, operation for operation: on the CPU the two train bit
//! for bit alike (`tests/device_tables.rs`), and on a GPU to its rounding of the same
//! operations. The norm adds float64 squares in another order than the host's loop, which
//! changes nothing a float32 can show but for rare ties.

use std::ops::Range;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};

use crate::error::{Result, TrainError};
use crate::groups::Optimizers;
use crate::optim::Rule;
use crate::params::{Entry, Parameters};
use crate::regularize::Regularization;
use crate::rule_passes::{Span, update_in_place};
use crate::scaling::{div, mul};

/// One optimizer group's variables and the rule's state for them.
struct DeviceGroup {
    /// Its variables, as indices into [`DeviceVars::vars`].
    vars: Range<usize>,
    /// Its values in the flat gradient.
    values: Range<usize>,
    rule: Rule,
    /// The rule's buffers ([`Rule::buffer_names`]), each `[values.len()]`.
    state: Vec<Tensor>,
}

/// Every variable of a model, updated where it lives.
pub(crate) struct DeviceVars {
    /// The model's variables (sharing their storage), with their entries, in flat order.
    vars: Vec<(Var, Entry)>,
    groups: Vec<DeviceGroup>,
    /// Each value's L1 strength and twice its L2 strength, when any penalty applies.
    penalties: Option<(Tensor, Tensor)>,
    device: Device,
}

impl DeviceVars {
    /// The variables of `params` (in their flat order, [`Parameters::var_entries`]), trained
    /// by the groups of `optimizers` (over the same layout) with the penalties of
    /// `regularization`. The groups' state moves to the device: their buffers in main memory
    /// are left empty.
    pub(crate) fn new(
        params: &Parameters,
        optimizers: &mut Optimizers,
        regularization: &Regularization,
    ) -> Result<Self> {
        let device = params.device().clone();
        let vars = params.vars().map(|(_, var)| var.clone()).zip(params.var_entries()).collect();
        let mut out = DeviceVars { vars, groups: Vec::new(), penalties: None, device };
        for group in optimizers.groups() {
            out.groups.push(DeviceGroup {
                vars: group.entries.clone(),
                values: group.values.clone(),
                rule: group.optimizer.rule(),
                state: Vec::new(),
            });
        }
        out.load(optimizers)?;
        if !regularization.is_zero() {
            let (mut l1, mut twice_l2) = (Vec::new(), Vec::new());
            for (_, entry) in &out.vars {
                let penalty = regularization.of(entry);
                l1.resize(l1.len() + entry.len(), penalty.l1);
                twice_l2.resize(twice_l2.len() + entry.len(), 2.0 * penalty.l2);
            }
            out.penalties = Some((out.upload(&l1)?, out.upload(&twice_l2)?));
        }
        Ok(out)
    }

    fn upload(&self, values: &[f32]) -> Result<Tensor> {
        Ok(Tensor::from_slice(values, values.len(), &self.device)?)
    }

    /// How many values the variables hold together.
    pub(crate) fn len(&self) -> usize {
        self.vars.iter().map(|(_, e)| e.len()).sum()
    }

    /// `parts` flattened and laid end to end.
    fn flat(&self, parts: impl Iterator<Item = candle_core::Result<Tensor>>) -> Result<Tensor> {
        let parts = parts.map(|t| t?.flatten_all()).collect::<candle_core::Result<Vec<_>>>()?;
        match parts.len() {
            0 => Ok(Tensor::zeros(0, DType::F32, &self.device)?),
            _ => Ok(Tensor::cat(&parts, 0)?),
        }
    }

    /// The values of `vars`, one flat tensor in flat order.
    fn values(&self, vars: &[(Var, Entry)]) -> Result<Tensor> {
        self.flat(vars.iter().map(|(v, _)| Ok(v.as_tensor().clone())))
    }

    /// The variables' gradient in `grads`, flat, times `scale` (zeros for a variable the
    /// loss does not depend on), as the host's `Parameters::var_grads` computes it.
    pub(crate) fn gradient(&self, grads: &GradStore, scale: f32) -> Result<Tensor> {
        let flat = self.flat(self.vars.iter().map(|(var, entry)| match grads.get(var.as_tensor()) {
            Some(g) => Ok(g.clone()),
            None => Tensor::zeros(entry.len(), DType::F32, &self.device),
        }))?;
        Ok(mul(&flat, scale)?)
    }

    /// `values` (a flat gradient from the host, after the ring) as a tensor on the device.
    pub(crate) fn gradient_from(&self, values: &[f32]) -> Result<Tensor> {
        if values.len() != self.len() {
            return Err(TrainError::StateMismatch(format!(
                "{} gradients for {} variable values",
                values.len(),
                self.len()
            )));
        }
        self.upload(values)
    }

    /// The gradient summed over `total` examples made the step's mean, with the penalties'
    /// gradients added at the current values; returns it with the sum of its squares.
    pub(crate) fn finish(&self, grad: &Tensor, total: f32) -> Result<(Tensor, f64)> {
        let (grad, squares) = self.finish_on_device(grad, total)?;
        Ok((grad, squares.to_scalar::<f64>()?))
    }

    /// [`Self::finish`], the sum of squares left on the device (a float64 scalar), so that
    /// the step reads it together with its other numbers.
    pub(crate) fn finish_on_device(&self, grad: &Tensor, total: f32) -> Result<(Tensor, Tensor)> {
        let mut grad = div(grad, total)?;
        if let Some((l1, twice_l2)) = &self.penalties {
            // The host adds `l1·sign(w) + 2·l2·w` to each gradient, in that order.
            let w = self.values(&self.vars)?;
            grad = (grad + ((w.sign()? * l1)? + (&w * twice_l2)?)?)?;
        }
        let squares = squares(&grad)?;
        Ok((grad, squares))
    }

    /// Updates group `g`'s variables with their part of `grad` (the step's, flat) by its rule
    /// with its step size times `scale`, as update `step` of the group.
    pub(crate) fn update(&mut self, g: usize, grad: &Tensor, scale: f32, step: u64) -> Result<()> {
        let group = &self.groups[g];
        if group.values.is_empty() {
            return Ok(());
        }
        let vars = &self.vars[group.vars.clone()];
        let rule = group.rule.scaled(scale);
        let grad = grad.narrow(0, group.values.start, group.values.len())?;
        // Each variable where it lives, with its part of the gradient and of the state.
        let mut at = 0;
        for (var, entry) in vars {
            let part = |t: &Tensor| t.narrow(0, at, entry.len());
            let g = part(&grad)?;
            let state = group.state.iter().map(part).collect::<candle_core::Result<Vec<_>>>()?;
            update_in_place(rule, step, var.as_tensor(), &g, &state, Span::Flat)?;
            at += entry.len();
        }
        Ok(())
    }

    /// Group `g`'s state buffers, copied to the host, in [`Rule::buffer_names`] order.
    pub(crate) fn state(&self, g: usize) -> Result<Vec<Vec<f32>>> {
        self.groups[g].state.iter().map(|s| Ok(s.to_vec1::<f32>()?)).collect()
    }

    /// Moves every group's state buffers from `optimizers` (new, or restored from a
    /// checkpoint) to the device, leaving theirs empty.
    pub(crate) fn load(&mut self, optimizers: &mut Optimizers) -> Result<()> {
        for (g, group) in optimizers.groups_mut().iter_mut().enumerate() {
            let state = (group.optimizer.state_mut().iter_mut())
                .map(|values| self.upload(&std::mem::take(values)))
                .collect::<Result<Vec<_>>>()?;
            self.groups[g].state = state;
        }
        Ok(())
    }
}

/// The sum of `values`' squares in float64, a scalar on their device.
pub(crate) fn squares(values: &Tensor) -> Result<Tensor> {
    // candle's CUDA sums give each output value one block of threads, so a whole tensor summed
    // into one value runs on one multiprocessor: for a table's million gradient values that
    // took 0.3 ms on an H200, a third of a Wide&Deep step's device time. Rows of `ROW` values
    // summed first spread the work over a block each; their sums, and the values past the
    // last whole row, are then few.
    const ROW: usize = 4096;
    let squared = values.flatten_all()?.to_dtype(DType::F64)?.sqr()?;
    let n = squared.elem_count();
    let rows = n / ROW;
    if rows < 2 {
        return Ok(squared.sum_all()?);
    }
    let mut sum = squared.narrow(0, 0, rows * ROW)?.reshape((rows, ROW))?.sum(1)?.sum_all()?;
    if rows * ROW < n {
        sum = (sum + squared.narrow(0, rows * ROW, n - rows * ROW)?.sum_all()?)?;
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    /// Summed by rows or whole, the squares are the host's sum (`step::sum_of_squares`) for
    /// every length: under one row, whole rows, and rows with values past them.
    #[test]
    fn squares_by_rows_are_the_whole_sum() {
        for n in [0, 1, 4095, 8192, 3 * 4096 + 17, 100_003] {
            let values: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0).collect();
            let on_device = squares(&Tensor::from_slice(&values, n, &Device::Cpu).unwrap()).unwrap();
            let want = crate::step::sum_of_squares(&values);
            let got = on_device.to_scalar::<f64>().unwrap();
            assert!((got - want).abs() <= want * 1e-12, "{n} values: {got} against {want}");
        }
    }
}
