//! The step's all-reduce overlapped with its backward pass, in buckets, as DDP does.
//!
//! Without it, a step's gradients go to the ring in one call once the whole backward pass
//! has ended, and on a slow link the wire's time adds to the compute's. Here the model's dense
//! tower ([`Tower`]) is differentiated by the step itself, last layer first: a layer's weight
//! and bias gradients come before its input's gradient, and once a bucket's layers are done
//! it goes to a thread that all-reduces it while the layers below are worked out.
//!
//! - The tower's forward pass runs outside candle's graph ([`Tower::begin_staging`]); its
//!   output enters the graph as a leaf, so the loss's backward pass stops there and gives the
//!   tower its output's gradient. What feeds the tower (embeddings, cross layers) is reached
//!   afterwards through one more backward pass from the tower's input gradient, and the two
//!   passes' gradients are added where they meet.
//! - The buckets are fixed by the model alone (the tower's layers, last first, closed at
//!   [`BUCKET_BYTES`]; the last bucket holds the rest), so every worker makes the same calls in
//!   the same order, a worker without a batch included (it sends zeros).
//! - The products are the fused layers' own, so a step's gradients are the bits of the
//!   one-call backward pass; the all-reduce's sums may group differently from one buffer's
//!   (from three workers on), the same on every worker.
//! - Only on the CPU, where the tower's layers are the fused ones; elsewhere the backward pass
//!   stays one call.

use std::sync::mpsc;

use candle_core::backprop::GradStore;
use candle_core::{Tensor, TensorId};
use sparktrain_collective::{ReduceOp, Wire};

use crate::error::Result;
use crate::fused;
use crate::model::{Model, Staged, Tower};
use crate::params::{Parameters, grad_into};
use crate::step::{SharedRing, lock};

/// A bucket closes once its gradients reach this size: large enough that the ring's
/// per-call cost (2(N-1) messages) is small beside the bytes, small enough that the first
/// bucket leaves while the larger layers below are still to be differentiated.
pub const BUCKET_BYTES: usize = 1 << 20;

/// Where each variable's gradient travels: which bucket, at which offset.
pub(crate) struct Buckets {
    /// Per bucket, the variables (indices in the reduced buffer's order) it carries, in order.
    members: Vec<Vec<usize>>,
    /// Per variable: its offset and length in the reduced buffer.
    spans: Vec<(usize, usize)>,
    /// Per variable: its bucket and its offset there.
    places: Vec<(usize, usize)>,
    /// Per tower layer, first layer first: its weight's and bias's variables.
    layers: Vec<(usize, usize)>,
    /// Per bucket, the last tower layer whose gradients complete it (None: the last bucket).
    closes_after: Vec<Option<usize>>,
    /// Buffers kept from step to step.
    pool: Vec<Vec<f32>>,
}

impl Buckets {
    /// The buckets for `model`'s tower, or None where overlapping would gain nothing: no
    /// tower, not on the CPU, or a tower that fills no bucket before the last.
    pub(crate) fn plan<M: Model>(model: &M) -> Option<Buckets> {
        let tower = model.tower()?;
        if !model.parameters().device().is_cpu() {
            return None;
        }
        let mut spans = Vec::new();
        let mut ids: Vec<TensorId> = Vec::new();
        let mut at = 0;
        for (_, var) in model.parameters().vars() {
            spans.push((at, var.elem_count()));
            ids.push(var.as_tensor().id());
            at += var.elem_count();
        }
        let index = |id: TensorId| ids.iter().position(|i| *i == id);
        let layers = tower
            .layers()
            .map(|(w, b)| Some((index(w.as_tensor().id())?, index(b.as_tensor().id())?)))
            .collect::<Option<Vec<_>>>()?;
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut closes_after = Vec::new();
        let mut open = Vec::new();
        for (i, &(w, b)) in layers.iter().enumerate().rev() {
            open.extend([w, b]);
            let bytes: usize = open.iter().map(|&v| spans[v].1 * 4).sum();
            if bytes >= BUCKET_BYTES && i > 0 {
                members.push(std::mem::take(&mut open));
                closes_after.push(Some(i));
            }
        }
        if members.is_empty() {
            return None;
        }
        // The last bucket: the tower's remaining layers, then every other variable.
        let others: Vec<usize> =
            (0..spans.len()).filter(|v| !members.iter().flatten().chain(&open).any(|m| m == v)).collect();
        open.extend(others);
        members.push(open);
        closes_after.push(None);
        let mut places = vec![(0, 0); spans.len()];
        for (k, vars) in members.iter().enumerate() {
            let mut offset = 0;
            for &v in vars {
                places[v] = (k, offset);
                offset += spans[v].1;
            }
        }
        Some(Buckets { members, spans, places, layers, closes_after, pool: Vec::new() })
    }

    /// How many buckets a step sends.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// Runs `work` with a [`Sender`] whose buckets a thread all-reduces on `ring` as they
    /// come, then writes the sums into `reduced` (the variables' gradients, then the three
    /// slots, which travel as float32 whatever the `wire`).
    pub(crate) fn run<T>(
        &mut self,
        ring: &SharedRing,
        wire: Wire,
        reduced: &mut [f32],
        work: impl FnOnce(&mut Sender<'_>) -> Result<T>,
    ) -> Result<T> {
        let slots_apart = wire != Wire::Native;
        let mut buffers: Vec<Option<Vec<f32>>> = self
            .members
            .iter()
            .enumerate()
            .map(|(k, vars)| {
                let mut buffer = self.pool.pop().unwrap_or_default();
                let slots = if k + 1 == self.members.len() && !slots_apart { 3 } else { 0 };
                buffer.clear();
                buffer.resize(vars.iter().map(|&v| self.spans[v].1).sum::<usize>() + slots, 0.0);
                Some(buffer)
            })
            .collect();
        let (outcome, sums) = std::thread::scope(|scope| {
            let (to_ring, from_step) = mpsc::channel::<(usize, Vec<f32>, Wire)>();
            let reducer = scope.spawn(move || -> Result<Vec<(usize, Vec<f32>)>> {
                let mut ring = lock(ring);
                let mut done = Vec::new();
                for (k, mut values, wire) in from_step {
                    ring.all_reduce_as(&mut values, ReduceOp::Sum, wire)?;
                    done.push((k, values));
                }
                Ok(done)
            });
            let mut sender = Sender { plan: self, buffers: &mut buffers, to_ring, wire, slots_apart };
            let outcome = work(&mut sender);
            drop(sender);
            let sums = reducer.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (outcome, sums)
        });
        let value = outcome?;
        let sums = sums?;
        let vars = reduced.len() - 3;
        for (k, values) in sums {
            if k == self.members.len() {
                reduced[vars..].copy_from_slice(&values);
            } else {
                let mut offset = 0;
                for &v in &self.members[k] {
                    let (at, len) = self.spans[v];
                    reduced[at..at + len].copy_from_slice(&values[offset..offset + len]);
                    offset += len;
                }
                if offset < values.len() {
                    reduced[vars..].copy_from_slice(&values[offset..]);
                }
            }
            self.pool.push(values);
        }
        Ok(value)
    }
}

/// The step's side of [`Buckets::run`]: fills the buckets and hands each to the ring's thread
/// once complete.
pub(crate) struct Sender<'a> {
    plan: &'a Buckets,
    buffers: &'a mut Vec<Option<Vec<f32>>>,
    to_ring: mpsc::Sender<(usize, Vec<f32>, Wire)>,
    wire: Wire,
    slots_apart: bool,
}

impl Sender<'_> {
    /// Differentiates the tower's staged forward pass from the gradient of its output in
    /// `grads`, sending each bucket as its last layer is done; every gradient is times
    /// `scale`. Returns the gradient of the tower's input, when the graph needs it.
    pub(crate) fn tower(
        &mut self,
        tower: &Tower,
        staged: &Staged,
        grads: &GradStore,
        scale: f32,
    ) -> Result<Option<Tensor>> {
        let out = staged.out.as_tensor();
        let mut grad = match grads.get(out) {
            Some(g) => g.clone(),
            None => out.zeros_like()?,
        };
        let weights: Vec<Tensor> = tower.layers().map(|(w, _)| w.as_tensor().detach()).collect();
        let last = self.plan.layers.len() - 1;
        for i in (0..=last).rev() {
            let grad_z =
                if i < last { fused::relu_mask(&grad, &staged.outputs[i])? } else { grad.contiguous()? };
            let grad_w = staged.inputs[i].t()?.matmul(&grad_z)?;
            let grad_b = fused::column_sum(&grad_z)?;
            let (w, b) = self.plan.layers[i];
            self.write(w, &grad_w, scale)?;
            self.write(b, &grad_b, scale)?;
            if let Some(k) = self.plan.closes_after.iter().position(|c| *c == Some(i)) {
                self.send(k);
            }
            if i > 0 || staged.source.track_op() {
                grad = grad_z.matmul(&weights[i].t()?)?;
            }
        }
        Ok(staged.source.track_op().then_some(grad))
    }

    /// Fills the last bucket with every variable's gradient in `grads` outside the tower,
    /// times `scale`, adds the three `slots`, and sends what is left to send.
    pub(crate) fn finish(
        &mut self,
        params: &Parameters,
        grads: &GradStore,
        scale: f32,
        slots: [f32; 3],
    ) -> Result<()> {
        let tower: Vec<usize> = self.plan.layers.iter().flat_map(|&(w, b)| [w, b]).collect();
        for (v, (_, var)) in params.vars().enumerate() {
            if !tower.contains(&v) {
                let (k, offset) = self.plan.places[v];
                let buffer = self.buffers[k].as_mut().expect("the last bucket is sent last");
                grad_into(grads, var, scale, &mut buffer[offset..offset + self.plan.spans[v].1])?;
            }
        }
        self.send_last(slots);
        Ok(())
    }

    /// Sends every bucket as it is (zeros), for a worker without a batch.
    pub(crate) fn zeros(&mut self) {
        self.send_last([0.0; 3]);
    }

    fn send_last(&mut self, slots: [f32; 3]) {
        let last = self.plan.members.len() - 1;
        for k in 0..last {
            if self.buffers[k].is_some() {
                self.send(k);
            }
        }
        if let Some(buffer) = self.buffers[last].as_mut()
            && !self.slots_apart
        {
            let n = buffer.len();
            buffer[n - 3..].copy_from_slice(&slots);
        }
        self.send(last);
        if self.slots_apart {
            // The ring's thread may have stopped at an error; the step learns of it there.
            let _ = self.to_ring.send((last + 1, slots.to_vec(), Wire::Native));
        }
    }

    fn write(&mut self, v: usize, grad: &Tensor, scale: f32) -> Result<()> {
        let (k, offset) = self.plan.places[v];
        let len = self.plan.spans[v].1;
        let buffer = self.buffers[k].as_mut().expect("a bucket is sent after its last layer");
        let values = grad.flatten_all()?.to_vec1::<f32>()?;
        buffer[offset..offset + len].iter_mut().zip(values).for_each(|(t, g)| *t = g * scale);
        Ok(())
    }

    fn send(&mut self, k: usize) {
        if let Some(buffer) = self.buffers[k].take() {
            // As in send_last: a stopped ring's error comes back from its thread.
            let _ = self.to_ring.send((k, buffer, self.wire));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Mlp;

    /// Every variable travels in exactly one bucket, at its own place; the tower's wide
    /// layers close buckets from the output down, the narrow first layer rides with the rest.
    #[test]
    fn buckets_carry_every_variable_once() {
        let model = Mlp::new(39, &[1024, 1024, 512], 1, 1).unwrap();
        let plan = Buckets::plan(&model).unwrap();
        let mut seen: Vec<usize> = plan.members.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..plan.spans.len()).collect::<Vec<_>>());
        // Layers 3 (512×1) and 2 (1024×512: 2 MiB) close the first bucket, layer 1 (4 MiB)
        // the second; layer 0 (39×1024) goes last.
        assert_eq!(plan.closes_after, vec![Some(2), Some(1), None]);
        let sizes: Vec<usize> =
            plan.members.iter().map(|vars| vars.iter().map(|&v| plan.spans[v].1).sum()).collect();
        assert_eq!(sizes, vec![512 + 1 + 1024 * 512 + 512, 1024 * 1024 + 1024, 39 * 1024 + 1024]);
        for (k, vars) in plan.members.iter().enumerate() {
            let mut offset = 0;
            for &v in vars {
                assert_eq!(plan.places[v], (k, offset));
                offset += plan.spans[v].1;
            }
        }
        // Too small a tower fills no bucket before the last: the one-call step.
        assert!(Buckets::plan(&Mlp::new(39, &[64, 64], 1, 1).unwrap()).is_none());
    }
}
