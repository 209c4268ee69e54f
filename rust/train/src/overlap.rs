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
use sparktrain_collective::{CollectiveError, ReduceOp, Wire};

use crate::error::{Result, TrainError};
use crate::fused;
use crate::model::{Model, Staged, Tower};
use crate::params::{Parameters, grad_into, scaled_into};
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
    /// Each bucket's buffer, kept from step to step.
    pool: Vec<Vec<f32>>,
    /// The thread that all-reduces the buckets, made at the first step.
    reducer: Option<Reducer>,
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
        Some(Buckets { members, spans, places, layers, closes_after, pool: Vec::new(), reducer: None })
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
        self.pool.resize_with(self.members.len(), Vec::new);
        let mut buffers: Vec<Option<Vec<f32>>> = self
            .members
            .iter()
            .enumerate()
            .map(|(k, vars)| {
                let mut buffer = std::mem::take(&mut self.pool[k]);
                let slots = if k + 1 == self.members.len() && !slots_apart { 3 } else { 0 };
                buffer.clear();
                buffer.resize(vars.iter().map(|&v| self.spans[v].1).sum::<usize>() + slots, 0.0);
                Some(buffer)
            })
            .collect();
        let reducer = match self.reducer.take() {
            Some(reducer) => reducer,
            None => Reducer::start(ring.clone())?,
        };
        let mut sender = Sender { plan: self, buffers: &mut buffers, jobs: &reducer.jobs, wire };
        // A step that fails here leaves its buckets' calls unfinished on the ring: the thread
        // is let go rather than waited for, and the next step starts another.
        let value = work(&mut sender)?;
        let sums = reducer.finish()?;
        self.reducer = Some(reducer);
        let vars = reduced.len() - 3;
        for (k, values) in sums {
            if k == self.members.len() {
                reduced[vars..].copy_from_slice(&values);
                continue;
            }
            let mut offset = 0;
            for &v in &self.members[k] {
                let (at, len) = self.spans[v];
                reduced[at..at + len].copy_from_slice(&values[offset..offset + len]);
                offset += len;
            }
            if offset < values.len() {
                reduced[vars..].copy_from_slice(&values[offset..]);
            }
            self.pool[k] = values;
        }
        Ok(value)
    }
}

/// What the step asks of the [`Reducer`]'s thread.
enum Job {
    /// All-reduce bucket `k` in the wire format.
    Reduce(usize, Vec<f32>, Wire),
    /// The step has sent its last bucket: answer with the outcome.
    End,
}

/// What the [`Reducer`]'s thread answers.
enum Done {
    /// Bucket `k`, summed over the ring (as sent, after a failed call).
    Reduced(usize, Vec<f32>),
    /// The step's buckets are all done: the first failure among them, if any.
    End(Result<()>),
}

/// The thread that all-reduces a trainer's buckets, kept for the trainer's life rather than
/// made and ended at every step. Dropping it closes its channel, which ends the thread once
/// its call in flight (if a step failed) ends at the ring's time-out; it is not waited for.
struct Reducer {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Done>,
}

impl Reducer {
    fn start(ring: SharedRing) -> Result<Reducer> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (outbox, done) = mpsc::channel::<Done>();
        std::thread::Builder::new()
            .name("sparktrain-buckets".into())
            .spawn(move || {
                let mut failed = None;
                for job in inbox {
                    let answer = match job {
                        Job::Reduce(k, mut values, wire) => {
                            if failed.is_none()
                                && let Err(e) = lock(&ring).all_reduce_as(&mut values, ReduceOp::Sum, wire)
                            {
                                failed = Some(e);
                            }
                            Done::Reduced(k, values)
                        }
                        Job::End => Done::End(failed.take().map_or(Ok(()), |e| Err(e.into()))),
                    };
                    if outbox.send(answer).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| CollectiveError::io("starting the thread that all-reduces gradient buckets", e))?;
        Ok(Reducer { jobs, done })
    }

    /// Waits for the step's buckets: each with its sums, once every call has succeeded.
    fn finish(&self) -> Result<Vec<(usize, Vec<f32>)>> {
        let stopped = || {
            TrainError::Collective(CollectiveError::Io {
                what: "the thread that all-reduces gradient buckets stopped".into(),
                source: None,
            })
        };
        self.jobs.send(Job::End).map_err(|_| stopped())?;
        let mut sums = Vec::new();
        loop {
            match self.done.recv().map_err(|_| stopped())? {
                Done::Reduced(k, values) => sums.push((k, values)),
                Done::End(outcome) => return outcome.map(|()| sums),
            }
        }
    }
}

/// The step's side of [`Buckets::run`]: fills the buckets and hands each to the ring's thread
/// once complete.
pub(crate) struct Sender<'a> {
    plan: &'a Buckets,
    buffers: &'a mut Vec<Option<Vec<f32>>>,
    jobs: &'a mpsc::Sender<Job>,
    wire: Wire,
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
        let slots_apart = self.wire != Wire::Native;
        if let Some(buffer) = self.buffers[last].as_mut()
            && !slots_apart
        {
            let n = buffer.len();
            buffer[n - 3..].copy_from_slice(&slots);
        }
        self.send(last);
        if slots_apart {
            // The ring's thread may have stopped at an error; the step learns of it there.
            let _ = self.jobs.send(Job::Reduce(last + 1, slots.to_vec(), Wire::Native));
        }
    }

    fn write(&mut self, v: usize, grad: &Tensor, scale: f32) -> Result<()> {
        let (k, offset) = self.plan.places[v];
        let len = self.plan.spans[v].1;
        let buffer = self.buffers[k].as_mut().expect("a bucket is sent after its last layer");
        scaled_into(grad, scale, &mut buffer[offset..offset + len])
    }

    fn send(&mut self, k: usize) {
        if let Some(buffer) = self.buffers[k].take() {
            // As in send_last: a stopped ring's error comes back from its thread.
            let _ = self.jobs.send(Job::Reduce(k, buffer, self.wire));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::time::Duration;

    use sparktrain_collective::{Communicator, Config};

    use super::*;
    use crate::model::Mlp;
    use crate::step::shared;

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

    /// Each bucket keeps one buffer of its own size from step to step, whatever the wire
    /// (with a 16-bit wire the counts travel in a call of their own, whose small buffer must
    /// not take a bucket's place).
    #[test]
    fn buckets_keep_one_buffer_each_from_step_to_step() {
        for wire in [Wire::Native, Wire::Bf16] {
            let listeners: Vec<TcpListener> =
                (0..2).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
            let peers: Vec<String> = listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
            let workers: Vec<_> = listeners
                .into_iter()
                .enumerate()
                .map(|(rank, listener)| {
                    let config =
                        Config::new(rank, peers.clone(), b"secret".to_vec(), Duration::from_secs(20));
                    std::thread::spawn(move || {
                        let ring = shared(Communicator::connect(listener, config).unwrap());
                        let model = Mlp::new(39, &[1024, 1024], 1, 1).unwrap();
                        let mut plan = Buckets::plan(&model).unwrap();
                        let vars: usize = plan.spans.iter().map(|s| s.1).sum();
                        let mut reduced = vec![1.0; vars + 3];
                        for _ in 0..3 {
                            plan.run(&ring, wire, &mut reduced, |sender| {
                                sender.zeros();
                                Ok(())
                            })
                            .unwrap();
                        }
                        assert!(reduced.iter().all(|v| *v == 0.0), "{wire:?}: the sums of zeros");
                        let sizes: Vec<usize> = plan.pool.iter().map(Vec::len).collect();
                        let slots = if wire == Wire::Native { 3 } else { 0 };
                        assert_eq!(
                            sizes,
                            vec![1024 * 1024 + 1024 + 1024 + 1, 39 * 1024 + 1024 + slots],
                            "{wire:?}"
                        );
                    })
                })
                .collect();
            workers.into_iter().for_each(|w| w.join().unwrap());
        }
    }
}
