//! The synchronous data-parallel step, MultiWorkerMirroredStrategy-style: every worker
//! computes gradients on its own batch, the ring all-reduce averages them weighted by each
//! worker's example count, and every worker applies the same update to the same weights.
//!
//! - The chief's initial weights are broadcast first, so every worker starts identical.
//! - Gradients are flattened in variable-name order with two extra slots (the example count
//!   and the summed loss) and reduced as one buffer: one round of the ring per step.
//! - A worker with no batch left contributes zeros and a count of zero; the step returns None
//!   on every worker at once when the total count is zero, so uneven shards never hang.
//! - All-reduced values are bit-identical on every worker, so weights never drift apart.

use sparktrain_collective::{Communicator, ReduceOp};

use crate::batch::Batch;
use crate::checkpoint::{self, CheckpointOptions, Progress};
use crate::error::{Result, TrainError};
use crate::loss::Loss;
use crate::metrics::{Evaluation, Metrics};
use crate::model::Model;
use crate::optim::Optimizer;

/// What one step did, over all workers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// The step's number, from 1.
    pub step: u64,
    /// The mean loss over every worker's examples (before the update).
    pub loss: f32,
    /// The examples all workers used.
    pub examples: u64,
}

/// A model, its optimizer and (with more than one worker) the ring to the others.
pub struct DataParallel<M: Model> {
    model: M,
    loss: Loss,
    optimizer: Optimizer,
    ring: Option<Communicator>,
    weights: Vec<f32>,
    reduced: Vec<f32>,
}

impl<M: Model> DataParallel<M> {
    /// Joins the model to the ring (None: training alone) and makes every worker's weights
    /// the chief's (rank 0).
    pub fn new(model: M, loss: Loss, optimizer: Optimizer, mut ring: Option<Communicator>) -> Result<Self> {
        let mut weights = model.parameters().flat()?;
        if let Some(ring) = ring.as_mut() {
            ring.broadcast(bytemuck::cast_slice_mut(&mut weights), 0)?;
            model.parameters().set_flat(&weights)?;
        }
        let n = weights.len();
        Ok(DataParallel { model, loss, optimizer, ring, weights, reduced: vec![0.0; n + 2] })
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The optimizer (its state goes into checkpoints).
    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    /// The weights, flat in variable-name order.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Evaluates the model on this worker's `batches`, together with every other worker
    /// (call on all of them, with their own shares); the figures cover all the data.
    pub fn evaluate<'a>(&mut self, batches: impl IntoIterator<Item = &'a Batch>) -> Result<Metrics> {
        let mut evaluation = Evaluation::new(self.loss);
        for batch in batches {
            if batch.rows()? > 0 {
                evaluation.add(&self.model.forward(batch)?, &batch.labels)?;
            }
        }
        evaluation.finish(self.ring.as_mut())
    }

    /// Writes a checkpoint under `model_dir` (the chief's job); returns its folder.
    pub fn save_checkpoint(
        &self,
        model_dir: &str,
        progress: Progress,
        options: &CheckpointOptions,
    ) -> Result<String> {
        let layout = self.model.parameters().layout();
        checkpoint::save(model_dir, &layout, &self.weights, &self.optimizer.state(), progress, options)
    }

    /// Loads the latest checkpoint under `model_dir`, if any, into the weights and the
    /// optimizer; returns how far that training had come. Every worker reads the same files.
    pub fn restore(&mut self, model_dir: &str) -> Result<Option<Progress>> {
        let Some(restored) = checkpoint::restore(model_dir, &self.model.parameters().layout())? else {
            return Ok(None);
        };
        self.optimizer.load_state(restored.optimizer)?;
        self.model.parameters().set_flat(&restored.weights)?;
        self.weights = restored.weights;
        Ok(Some(restored.progress))
    }

    /// One synchronous step with this worker's `batch` (None once its data has run out).
    /// Returns None, on every worker together, when no worker had a batch.
    pub fn step(&mut self, batch: Option<&Batch>) -> Result<Option<StepStats>> {
        let n = self.weights.len();
        let rows = match batch {
            Some(b) => b.rows()?,
            None => 0,
        };
        if rows > 0 {
            let batch = batch.expect("rows > 0");
            let logits = self.model.forward(batch)?;
            let loss = self.loss.compute(&logits, &batch.labels)?;
            let grads = loss.backward()?;
            // Weighted by the example count, so that the sum over workers divided by the
            // total count is the mean gradient over every example of the step.
            self.model.parameters().flat_grads(&grads, rows as f32, &mut self.reduced[..n])?;
            self.reduced[n] = rows as f32;
            self.reduced[n + 1] = loss.to_scalar::<f32>()? * rows as f32;
        } else {
            self.reduced.fill(0.0);
        }
        if let Some(ring) = self.ring.as_mut() {
            ring.all_reduce(&mut self.reduced, ReduceOp::Sum)?;
        }
        let total = self.reduced[n];
        if total == 0.0 {
            return Ok(None);
        }
        if !total.is_finite() || total.fract() != 0.0 {
            return Err(TrainError::InvalidArgument(format!("the workers' example count summed to {total}")));
        }
        self.reduced[..n].iter_mut().for_each(|g| *g /= total);
        self.optimizer.step(&mut self.weights, &self.reduced[..n])?;
        self.model.parameters().set_flat(&self.weights)?;
        Ok(Some(StepStats {
            step: self.optimizer.steps(),
            loss: self.reduced[n + 1] / total,
            examples: total as u64,
        }))
    }
}
