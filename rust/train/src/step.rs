//! The synchronous data-parallel step, MultiWorkerMirroredStrategy-style: every worker
//! computes gradients on its own batch, the workers average them weighted by each worker's
//! example count, and every worker applies the same update to the same weights.
//!
//! - The chief's initial weights are broadcast first, so every worker starts identical.
//! - The variables' gradients travel in variable-name order with three extra slots (the
//!   example count, the summed loss and the number of distinct embedding ids) as one
//!   all-reduced buffer; or, with several workers on the CPU, the dense tower's in buckets
//!   while the backward pass goes on, the rest and the slots last (`overlap.rs`).
//! - Embedding tables' gradients have one row per distinct id of the batch. When that is
//!   smaller than the tables, workers all-gather their (id, row) lists and add them up in rank
//!   order; otherwise the rows are scattered into dense tables and all-reduced. By default
//!   only the rows a step touched are updated (exact for SGD, Adagrad, and FTRL on rows that
//!   start at zero; the "lazy"
//!   form of momentum and Adam); with `sparse_tables` off, every row is, as a dense model
//!   would.
//! - On a GPU, whole tables live on the device with their optimizer state
//!   (`device_tables.rs`): rows are gathered there, and the summed row gradients update them
//!   there; the weights then hold the variables alone, as with sharded tables, and
//!   checkpoints, snapshots and exports copy the tables out.
//! - On a GPU the variables' update runs there too (`device_vars.rs`): the gradient stays
//!   on the device but for the ring, and only the loss and the norm reach the host.
//! - With sharded tables ([`crate::shard`]), each worker holds its share of every table and
//!   exchanges ids, rows and gradients with their owners (all-to-all, `sharded.rs`);
//!   owners sum and apply the tables' updates, the variables go as above. The tables' part of
//!   the gradient's norm is one more scalar all-reduce.
//! - A worker with no batch left contributes zeros and a count of zero; the step returns None
//!   on every worker at once when the total count is zero, so uneven shards never hang.
//! - Every worker computes bit-identical updates, so weights never drift apart.

use std::borrow::{Borrow, Cow};
use std::sync::{Arc, Mutex, MutexGuard};

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor};
use sparktrain_collective::{Communicator, ReduceOp, Wire};

use crate::batch::{Batch, Lookup, LookupPlan};
use crate::checkpoint::{self, CheckpointOptions, Progress, Restored, TableFiles};
use crate::device_tables::DeviceTables;
use crate::device_vars::{self, DeviceVars};
use crate::error::{Result, TrainError};
use crate::groups::{GroupState, OptimizerConfig, Optimizers};
use crate::loss::Loss;
use crate::metrics::{Evaluation, Metrics};
use crate::model::{Model, Staged};
use crate::optim::Segment;
use crate::overlap::Buckets;
use crate::params::Entry;
use crate::prefetch::Prepared;
use crate::regularize::Regularization;
use crate::rows::live_rows;
use crate::scaling::{div, mul};
use crate::schedule::Schedule;
use crate::shard::{Placement, TableOptions, default_table_budget};
use crate::sharded::{Fetched, OwnedGrads, ShardedTables, rule_of};

/// A worker's end of the ring, shared with other users of it (the Python API's collectives).
pub type SharedRing = Arc<Mutex<Communicator>>;

/// Wraps a ring for sharing.
pub fn shared(ring: Communicator) -> SharedRing {
    Arc::new(Mutex::new(ring))
}

pub(crate) fn lock(ring: &SharedRing) -> MutexGuard<'_, Communicator> {
    ring.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one step did, over all workers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// The step's number, from 1.
    pub step: u64,
    /// The mean loss over every worker's examples (before the update).
    pub loss: f32,
    /// The examples all workers used.
    pub examples: u64,
    /// The global L2 norm of the averaged gradient, penalties included, before clipping.
    pub grad_norm: f32,
}

/// Gradient rows of the embedding tables for a set of ids.
#[derive(Default)]
struct TableGrads {
    /// Ids, ascending.
    ids: Vec<u32>,
    /// Per table (in entry order), `ids.len() × width` values.
    rows: Vec<Vec<f32>>,
}

/// A model, its optimizers and (with more than one worker) the ring to the others.
pub struct DataParallel<M: Model> {
    model: M,
    loss: Loss,
    optimizers: Optimizers,
    ring: Option<SharedRing>,
    /// The flat weights' layout: every parameter, or the variables alone with sharded tables.
    entries: Vec<Entry>,
    /// Every table's entry in the layout of all parameters.
    tables: Vec<Entry>,
    /// This worker's shares of the tables, when they are sharded.
    sharded: Option<ShardedTables>,
    /// The tables, whole, on the model's device, when they are kept there.
    on_device: Option<DeviceTables>,
    /// The variables' update and optimizer state, when they run on the model's device; the
    /// weights are then the model's variables themselves, and `weights` is empty.
    vars_on_device: Option<DeviceVars>,
    placement: Placement,
    sparse_tables: bool,
    schedule: Schedule,
    clip_norm: Option<f32>,
    regularization: Regularization,
    /// The dense gradients' format in the step's all-reduce.
    gradient_wire: Wire,
    class_weights: Option<Vec<f32>>,
    weights: Vec<f32>,
    /// The variables' gradients (compact, in name order) and the three slots.
    reduced: Vec<f32>,
    /// Dense table gradients, laid out like the tables' part of the weights.
    table_dense: Vec<f32>,
    /// The buckets that overlap the all-reduce with the backward pass (`overlap.rs`).
    buckets: Option<Buckets>,
}

impl<M: Model> DataParallel<M> {
    /// Joins the model to the ring (None: training alone) and makes every worker's weights
    /// the chief's (rank 0); tables are placed by the default [`TableOptions`].
    pub fn new(model: M, loss: Loss, optimizer: &OptimizerConfig, ring: Option<SharedRing>) -> Result<Self> {
        Self::with_tables(model, loss, optimizer, ring, &TableOptions::default())
    }

    /// [`DataParallel::new`], with the embedding tables placed as `tables` says: whole on
    /// every worker, or sharded across them. Tables that do not fit the budget where they
    /// would live are refused here, before their memory is taken.
    pub fn with_tables(
        mut model: M,
        loss: Loss,
        optimizer: &OptimizerConfig,
        ring: Option<SharedRing>,
        tables: &TableOptions,
    ) -> Result<Self> {
        optimizer.validate()?;
        let table_entries = model.parameters().table_entries();
        let workers = ring.as_ref().map_or(1, |r| lock(r).size());
        // Every worker must place the tables alike, and machines differ: the tightest
        // worker's budget holds for all.
        let mut budget =
            [tables.budget_bytes.unwrap_or_else(default_table_budget).min(i64::MAX as u64) as i64];
        if let Some(ring) = &ring {
            lock(ring).all_reduce(&mut budget, ReduceOp::Min)?;
        }
        let tables = TableOptions { budget_bytes: Some(budget[0] as u64), ..*tables };
        let placement =
            tables.plan(&table_entries, |e| rule_of(optimizer, e), !optimizer.sparse_tables, workers)?;
        let (mut weights, mut entries) = if placement.sharded {
            (model.parameters().flat_vars()?, model.parameters().var_entries())
        } else {
            (model.parameters().flat()?, model.parameters().entries())
        };
        if let Some(ring) = &ring {
            lock(ring).broadcast(bytemuck::cast_slice_mut(&mut weights), 0)?;
        }
        let device = model.parameters().device().clone();
        // By default a GPU keeps the tables when they take at most half its memory (the rest
        // is the model's activations and the batches'); the CPU never: its in-place updates
        // are faster than tensor operations over gathered rows.
        let keep_on_device = || {
            tables.on_device.unwrap_or_else(|| {
                crate::device::memory_bytes(&device).is_some_and(|memory| placement.bytes <= memory / 2)
            })
        };
        let mut on_device = None;
        if placement.sharded {
            model.parameters().set_flat_vars(&weights)?;
        } else if !table_entries.is_empty() && keep_on_device() {
            let (vars, values) = split_flat(&entries, &weights)?;
            model.parameters().set_flat_vars(&vars)?;
            on_device = Some(DeviceTables::new(&table_entries, values, optimizer, &device)?);
            (weights, entries) = (vars, model.parameters().var_entries());
        } else {
            model.parameters().set_flat(&weights)?;
        }
        let sharded = placement
            .sharded
            .then(|| ShardedTables::new(model.parameters(), table_entries.clone(), optimizer, ring.as_ref()))
            .transpose()?;
        model.parameters_mut().release_tables();
        let mut optimizers = Optimizers::new(optimizer, &entries)?;
        let vars: usize = entries.iter().filter(|e| !e.table).map(Entry::len).sum();
        // The variables' update moves to the device with the tables, or when there are none.
        let tables_elsewhere = placement.sharded || (!table_entries.is_empty() && on_device.is_none());
        if optimizer.update_on_device == Some(true) && tables_elsewhere {
            return Err(TrainError::InvalidArgument(
                "update_on_device: the variables are updated on the device only when the embedding \
                 tables are there too (not sharded, and on the device)"
                    .into(),
            ));
        }
        let vars_on_device = (optimizer.update_on_device.unwrap_or(!device.is_cpu()) && !tables_elsewhere)
            .then(|| DeviceVars::new(model.parameters(), &mut optimizers, &optimizer.regularization))
            .transpose()?;
        if vars_on_device.is_some() {
            weights = Vec::new();
        }
        let buckets = (optimizer.overlap_gradients && workers > 1 && vars_on_device.is_none())
            .then(|| Buckets::plan(&model))
            .flatten();
        Ok(DataParallel {
            model,
            loss,
            optimizers,
            ring,
            entries,
            tables: table_entries,
            sharded,
            on_device,
            vars_on_device,
            placement,
            sparse_tables: optimizer.sparse_tables,
            schedule: optimizer.schedule,
            clip_norm: optimizer.clip_norm,
            regularization: optimizer.regularization,
            gradient_wire: optimizer.gradient_wire.wire(),
            class_weights: None,
            weights,
            reduced: vec![0.0; vars + 3],
            table_dense: Vec::new(),
            buckets,
        })
    }

    /// Whether the embedding tables are sharded across the workers.
    pub fn is_sharded(&self) -> bool {
        self.sharded.is_some()
    }

    /// Whether the embedding tables (whole) and their optimizer state live on the model's
    /// device rather than in main memory ([`TableOptions::on_device`]).
    pub fn tables_on_device(&self) -> bool {
        self.on_device.is_some()
    }

    /// Whether the variables' update runs on the model's device with their optimizer state
    /// (`OptimizerConfig::update_on_device`).
    pub fn update_on_device(&self) -> bool {
        self.vars_on_device.is_some()
    }

    /// What a batch prepared ahead of the step is made for ([`crate::Prefetch::for_step`]):
    /// the model's device, and whether the step reads and updates the batch's rows of tables
    /// there, so that their places can be made ahead (a trainer alone with its tables on the
    /// device; with a ring the rows updated are every worker's, known only in the step).
    pub(crate) fn preparation(&self) -> (Device, bool) {
        let device = self.model.parameters().device().clone();
        (device, self.on_device.is_some() && self.alone_on_device())
    }

    /// This worker's shares of the tables, when they are sharded.
    pub(crate) fn sharded(&self) -> Option<&ShardedTables> {
        self.sharded.as_ref()
    }

    /// Where the tables live and the memory they take on this worker.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// Every table's entry in the layout of all parameters ([`crate::Parameters::entries`]).
    pub fn table_entries(&self) -> &[Entry] {
        &self.tables
    }

    /// Every parameter's values, flat in the layout of all parameters, tables whole: with
    /// sharded tables, gathered from every worker (all call it together), so only for models
    /// that fit one worker; tables on the device are copied out.
    pub fn full_weights(&self) -> Result<Vec<f32>> {
        Ok(self.all_weights()?.into_owned())
    }

    /// [`DataParallel::full_weights`], borrowed when the weights already hold every
    /// parameter (tables whole in main memory), so that checkpoints and exports of large
    /// tables do not copy them.
    fn all_weights(&self) -> Result<Cow<'_, [f32]>> {
        let tables = match (&self.sharded, &self.on_device) {
            (Some(sharded), _) => sharded.gather(self.ring.as_ref())?,
            (None, Some(device)) => device.values()?,
            (None, None) => return self.weights(),
        };
        Ok(Cow::Owned(join_flat(&self.model.parameters().entries(), &self.weights()?, tables)))
    }

    /// Every parameter's entry and value, tables whole, for the chief's export when the
    /// tables are not sharded (wherever they live).
    pub(crate) fn export_weights(&self) -> Result<(Vec<Entry>, Cow<'_, [f32]>)> {
        Ok((self.model.parameters().entries(), self.all_weights()?))
    }

    /// Weighs each example's loss by its class (`weights[c]` for class `c`, as Keras's
    /// `class_weight`); None: every example counts the same.
    pub fn set_class_weights(&mut self, weights: Option<Vec<f32>>) -> Result<()> {
        if let Some(w) = &weights {
            if !self.loss.is_classification() {
                return Err(TrainError::InvalidArgument(
                    "class_weight: a regression model has no classes".into(),
                ));
            }
            if let Some(bad) = w.iter().find(|v| !(v.is_finite() && **v >= 0.0)) {
                return Err(TrainError::InvalidArgument(format!(
                    "class_weight: {bad} is not a non-negative number"
                )));
            }
        }
        self.class_weights = weights;
        Ok(())
    }

    /// Replaces the weights (every worker must pass the same ones).
    pub fn set_weights(&mut self, weights: Vec<f32>) -> Result<()> {
        if weights.len() != self.weights_len() {
            return Err(TrainError::StateMismatch(format!(
                "{} weights given for {} parameters",
                weights.len(),
                self.weights_len()
            )));
        }
        self.set_model_weights(&weights)?;
        self.keep_weights(weights);
        Ok(())
    }

    /// How many values [`DataParallel::weights`] holds.
    fn weights_len(&self) -> usize {
        self.vars_on_device.as_ref().map_or(self.weights.len(), DeviceVars::len)
    }

    /// Keeps `weights`, already in the model's variables, as the host's copy, unless the
    /// variables themselves are the weights (updated on the device).
    fn keep_weights(&mut self, weights: Vec<f32>) {
        if self.vars_on_device.is_none() {
            self.weights = weights;
        }
    }

    /// Puts `weights` (laid out as [`DataParallel::weights`]) into the model's variables.
    fn set_model_weights(&self, weights: &[f32]) -> Result<()> {
        if self.sharded.is_some() || self.on_device.is_some() {
            self.model.parameters().set_flat_vars(weights)
        } else {
            self.model.parameters().set_flat(weights)
        }
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The optimizers (their state goes into checkpoints). When the variables are updated on
    /// the device ([`DataParallel::update_on_device`]), their state lives there and these
    /// hold only the step counts and rules.
    pub fn optimizers(&self) -> &Optimizers {
        &self.optimizers
    }

    /// The weights, flat in parameter-name order (the variables alone when the tables are
    /// sharded or on the device: see [`DataParallel::full_weights`]); copied from the device
    /// when the variables are updated there.
    pub fn weights(&self) -> Result<Cow<'_, [f32]>> {
        match &self.vars_on_device {
            Some(_) => Ok(Cow::Owned(self.model.parameters().flat_vars()?)),
            None => Ok(Cow::Borrowed(&self.weights)),
        }
    }

    /// How many all-reduce calls carry a step's dense gradients: more than one when they are
    /// overlapped with the backward pass (`OptimizerConfig::overlap_gradients`), one otherwise.
    pub fn gradient_buckets(&self) -> usize {
        self.buckets.as_ref().map_or(1, Buckets::len)
    }

    /// The parameters' places in the weights.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The loss the model trains with.
    pub fn loss(&self) -> Loss {
        self.loss
    }

    /// The ring to the other workers, if any.
    pub fn ring(&self) -> Option<&SharedRing> {
        self.ring.as_ref()
    }

    /// The logits of `batch` with the current weights. With sharded tables every worker
    /// calls it together (each with its own batch), since the rows come from their owners.
    pub fn logits(&self, batch: &Batch) -> Result<Tensor> {
        let (lookup, _) = self.lookup(Some(batch), LookupPlan::of(batch)?)?;
        self.model.forward(batch, lookup.as_ref())
    }

    /// The embedding rows the step hands the model for `batch` (None when it has no ids):
    /// gathered where the tables live. With sharded tables every worker calls it together.
    pub fn lookup_of(&self, batch: &Batch) -> Result<Option<Lookup>> {
        Ok(self.lookup(Some(batch), LookupPlan::of(batch)?)?.0)
    }

    /// The batch's embedding rows, its ids placed by `plan` (the batch's, None when it has no
    /// ids): gathered from the weights, or with sharded tables asked of their owners (a
    /// collective: every worker calls it, with None when it has no batch).
    fn lookup(&self, batch: Option<&Batch>, plan: Option<LookupPlan>) -> Result<(Option<Lookup>, Fetched)> {
        let plan = plan.filter(|_| batch.is_some());
        if let Some(device) = &self.on_device {
            let Some(plan) = plan else { return Ok((None, Fetched::default())) };
            let ids = match &plan.places {
                Some(places) => places.at().clone(),
                None => device.ids(&plan.unique)?,
            };
            let tables = (self.tables.iter().enumerate())
                .map(|(t, e)| Ok((e.name.clone(), device.gather(t, &ids)?)))
                .collect::<Result<_>>()?;
            return Ok((Some(plan.with_device_rows(tables)?), Fetched::default()));
        }
        let Some(sharded) = &self.sharded else {
            if self.vars_on_device.is_some() {
                // No tables: the variables are on the device, and `weights` is empty.
                return Ok((None, Fetched::default()));
            }
            let lookup = plan.map(|p| p.gather(&self.entries, &self.weights)).transpose()?;
            return Ok((lookup, Fetched::default()));
        };
        let unique = plan.as_ref().map_or(&[][..], |p| &p.unique[..]);
        let mut fetched = sharded.fetch(self.ring.as_ref(), batch.is_some(), unique)?;
        let lookup = match plan {
            Some(plan) => {
                let tables = self
                    .tables
                    .iter()
                    .zip(std::mem::take(&mut fetched.rows))
                    .map(|(e, rows)| (e.name.clone(), e.row_width(), rows))
                    .collect();
                Some(plan.with_host_rows(tables)?)
            }
            None => None,
        };
        Ok((lookup, fetched))
    }

    /// Evaluates the model on this worker's `batches`, together with every other worker
    /// (call on all of them, with their own shares); the figures cover all the data.
    pub fn evaluate<B, I>(&mut self, batches: I) -> Result<Metrics>
    where
        B: Borrow<Batch>,
        I: IntoIterator<Item = Result<B>>,
    {
        let mut evaluation = Evaluation::new(self.loss);
        let mut batches = batches.into_iter().fuse();
        loop {
            let batch = batches.next().transpose()?;
            let batch = batch.as_ref().map(Borrow::borrow);
            let batch = match batch {
                Some(b) if b.rows()? == 0 => continue,
                other => other,
            };
            if self.sharded.is_none() {
                let Some(batch) = batch else { break };
                evaluation.add(&self.logits(batch)?, &batch.labels)?;
                continue;
            }
            // Owners answer for rows until no worker has a batch left.
            let plan = batch.map(LookupPlan::of).transpose()?.flatten();
            let (lookup, fetched) = self.lookup(batch, plan)?;
            if !fetched.anyone {
                break;
            }
            if let Some(batch) = batch {
                evaluation.add(&self.model.forward(batch, lookup.as_ref())?, &batch.labels)?;
            }
        }
        match &self.ring {
            Some(ring) => evaluation.finish(Some(&mut lock(ring))),
            None => evaluation.finish(None),
        }
    }

    /// Writes a checkpoint under `model_dir`; returns its folder. With tables whole on every
    /// worker this is the chief's job alone. With sharded tables every worker calls it
    /// together: the chief stages the checkpoint's folder, each worker writes its rows there,
    /// then the chief, once every worker's rows are written, writes the rest and publishes the
    /// folder and the index; a worker that fails to write fails every worker's call.
    /// `options.fence` names the writer (see [`checkpoint::Fence`]).
    pub fn save_checkpoint(
        &self,
        model_dir: &str,
        progress: Progress,
        options: &CheckpointOptions,
    ) -> Result<String> {
        let Some(sharded) = &self.sharded else {
            let layout = self.model.parameters().layout();
            let states = match &self.on_device {
                Some(device) => self.full_states(device, self.states()?)?,
                None => self.states()?,
            };
            let weights = self.all_weights()?;
            return checkpoint::save(model_dir, &layout, &weights, &states, progress, options);
        };
        let (rank, workers) = sharded.place();
        // The chief's staging folder, for everyone.
        let staged = match rank {
            0 => checkpoint::stage(model_dir, progress.step, &options.fence).map(Some),
            _ => Ok(None),
        };
        let staged = self.together(staged, model_dir, "stage the checkpoint")?;
        let staged = staged.into_iter().flatten().next().expect("the chief's staging folder");
        let written = checkpoint::save_rows(
            &staged.staging,
            rank,
            workers,
            &sharded.owned_tables(),
            options.max_shard_bytes,
        );
        let owners = self.together(written, &staged.folder, "write its rows of the embedding tables")?;
        let published = if rank == 0 {
            let files = TableFiles { workers, tables: sharded.saved_tables(), owners };
            let groups = sharded.group_states(self.optimizers.state());
            let layout = self.entries.iter().map(|e| (e.name.clone(), e.shape.clone())).collect();
            checkpoint::save_with(
                model_dir,
                &staged,
                &layout,
                &self.weights,
                &groups,
                progress,
                options,
                Some(&files),
            )
        } else {
            Ok(staged.folder.clone())
        };
        self.together(published, &staged.folder, "publish the checkpoint")?;
        Ok(staged.folder)
    }

    /// Every worker's `mine`, once every worker has one (a ring barrier that waits up to
    /// [`crate::trainer::CHECKPOINT_WAIT`], for workers writing files): a worker's failure
    /// fails every worker, the others with an error naming it and `what` it could not do, or,
    /// when a newer writer superseded it, with that same [`TrainError::Superseded`] (so that
    /// no trainer of a lost generation fails as if a restart could help).
    pub(crate) fn together<T: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        mine: Result<T>,
        path: &str,
        what: &str,
    ) -> Result<Vec<T>> {
        let report = match &mine {
            Ok(value) => serde_json::json!({ "ok": value }),
            Err(TrainError::Superseded { model_dir, generation, by_job, by_generation }) => {
                serde_json::json!({
                    "superseded": {
                        "model_dir": model_dir,
                        "generation": generation,
                        "by_job": by_job,
                        "by_generation": by_generation,
                    }
                })
            }
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        let bytes = serde_json::to_vec(&report).expect("a report serializes");
        let all = match &self.ring {
            Some(ring) => {
                let mut ring = lock(ring);
                ring.barrier_within(crate::trainer::CHECKPOINT_WAIT)?;
                ring.all_gather(&bytes)?
            }
            None => vec![bytes],
        };
        let mine = mine?;
        let mut out = Vec::with_capacity(all.len());
        for (worker, bytes) in all.iter().enumerate() {
            #[derive(serde::Deserialize)]
            #[serde(rename_all = "snake_case")]
            enum Report<T> {
                Ok(T),
                Error(String),
                Superseded { model_dir: String, generation: u64, by_job: Option<String>, by_generation: u64 },
            }
            let report: Report<T> = serde_json::from_slice(bytes)
                .map_err(|e| TrainError::format(path, format!("worker {worker}'s report: {e}")))?;
            match report {
                Report::Ok(value) => out.push(value),
                Report::Error(e) => {
                    return Err(TrainError::format(path, format!("worker {worker} could not {what}: {e}")));
                }
                Report::Superseded { model_dir, generation, by_job, by_generation } => {
                    return Err(TrainError::Superseded { model_dir, generation, by_job, by_generation });
                }
            }
        }
        drop(mine);
        Ok(out)
    }

    /// Loads a restored checkpoint into the weights and the optimizers (with sharded tables,
    /// the variables'; see [`DataParallel::load_table_rows`] for the tables).
    pub fn load(&mut self, restored: Restored) -> Result<Progress> {
        if self.on_device.is_some() {
            return self.load_with_device_tables(restored);
        }
        if restored.weights.len() != self.weights_len() {
            return Err(TrainError::StateMismatch(format!(
                "{} weights restored for {} parameters",
                restored.weights.len(),
                self.weights_len()
            )));
        }
        self.load_states(restored.optimizer)?;
        if self.sharded.is_some() {
            self.model.parameters().set_flat_vars(&restored.weights)?;
        } else {
            self.model.parameters().set_flat(&restored.weights)?;
        }
        self.keep_weights(restored.weights);
        Ok(restored.progress)
    }

    /// [`DataParallel::load`] of a checkpoint of all parameters into the variables here and
    /// the tables on the device.
    fn load_with_device_tables(&mut self, restored: Restored) -> Result<Progress> {
        let all = self.model.parameters().entries();
        let (vars, values) = split_flat(&all, &restored.weights)?;
        let mut states = restored.optimizer;
        let table_states = self.split_states(&all, &mut states)?;
        self.load_states(states)?;
        let device = self.on_device.as_mut().expect("tables on the device");
        device.put_values(values)?;
        for (t, buffers) in table_states.into_iter().enumerate() {
            device.put_state(t, buffers)?;
        }
        self.model.parameters().set_flat_vars(&vars)?;
        self.keep_weights(vars);
        Ok(restored.progress)
    }

    /// Every group's state, the variables' copied from the device when they are updated
    /// there (the tables' are not in it: see [`Self::full_states`]).
    fn states(&self) -> Result<Vec<GroupState>> {
        let mut states = self.optimizers.state();
        if let Some(device) = &self.vars_on_device {
            for (g, group) in states.iter_mut().enumerate() {
                for ((_, values), there) in group.state.buffers.iter_mut().zip(device.state(g)?) {
                    *values = there;
                }
            }
        }
        Ok(states)
    }

    /// Restores the optimizers' state (the variables' alone), onto the device too when the
    /// variables are updated there.
    fn load_states(&mut self, states: Vec<GroupState>) -> Result<()> {
        self.optimizers.load_state(states)?;
        if let Some(device) = &mut self.vars_on_device {
            device.load(&mut self.optimizers)?;
        }
        Ok(())
    }

    /// `states` (the variables', [`Self::states`]) in the layout of all parameters, as a
    /// checkpoint holds it: the tables' copied from the device.
    fn full_states(&self, device: &DeviceTables, mut states: Vec<GroupState>) -> Result<Vec<GroupState>> {
        for group in &mut states {
            let mut var_at = 0;
            let (mut tensors, mut buffers) = (Vec::new(), vec![Vec::new(); group.state.buffers.len()]);
            for e in self.model.parameters().entries() {
                if let Some(t) = self.tables.iter().position(|table| table.name == e.name) {
                    if device.group(t) != group.group {
                        continue;
                    }
                    for (merged, values) in buffers.iter_mut().zip(device.state(t)?) {
                        merged.extend(values);
                    }
                } else if group.tensors.contains(&e.name) {
                    for (merged, (_, values)) in buffers.iter_mut().zip(&group.state.buffers) {
                        merged.extend_from_slice(&values[var_at..var_at + e.len()]);
                    }
                    var_at += e.len();
                } else {
                    continue;
                }
                tensors.push(e.name);
            }
            group.tensors = tensors;
            for ((_, values), merged) in group.state.buffers.iter_mut().zip(buffers) {
                *values = merged;
            }
        }
        Ok(states)
    }

    /// Takes the tables' parts out of `states` (a checkpoint's, in the layout of all
    /// parameters `all`), leaving the variables' for the optimizers; returns each table's
    /// buffers, in table order. A table a checkpoint holds no state for is an error.
    fn split_states(&self, all: &[Entry], states: &mut [GroupState]) -> Result<Vec<Vec<Vec<f32>>>> {
        let mut tables: Vec<Option<Vec<Vec<f32>>>> = vec![None; self.tables.len()];
        for group in states.iter_mut() {
            let total: usize = (group.tensors.iter())
                .map(|name| all.iter().find(|e| &e.name == name).map_or(0, Entry::len))
                .sum();
            if let Some((name, values)) = group.state.buffers.iter().find(|(_, v)| v.len() != total) {
                return Err(TrainError::StateMismatch(format!(
                    "optimizer buffer '{name}' of group '{}' holds {} values for its {total} parameters",
                    group.group,
                    values.len()
                )));
            }
            let (mut at, mut vars) = (0, Vec::new());
            let mut kept = vec![Vec::new(); group.state.buffers.len()];
            for name in &group.tensors {
                let len = all.iter().find(|e| &e.name == name).map_or(0, Entry::len);
                let part = |b: &(String, Vec<f32>)| b.1[at..at + len].to_vec();
                match self.tables.iter().position(|t| &t.name == name) {
                    Some(t) => tables[t] = Some(group.state.buffers.iter().map(part).collect()),
                    None => {
                        for (kept, buffer) in kept.iter_mut().zip(&group.state.buffers) {
                            kept.extend_from_slice(&buffer.1[at..at + len]);
                        }
                        vars.push(name.clone());
                    }
                }
                at += len;
            }
            group.tensors = vars;
            for ((_, values), kept) in group.state.buffers.iter_mut().zip(kept) {
                *values = kept;
            }
        }
        (self.tables.iter().zip(tables))
            .map(|(e, state)| {
                state.ok_or_else(|| {
                    TrainError::StateMismatch(format!(
                        "the checkpoint holds no optimizer state for '{}'",
                        e.name
                    ))
                })
            })
            .collect()
    }

    /// With sharded tables: reads this worker's rows (and their optimizer state) from the
    /// checkpoint folder `folder`, whoever owned them when it was written.
    pub fn load_table_rows(&mut self, folder: &str) -> Result<()> {
        match &mut self.sharded {
            Some(sharded) => sharded.load(folder),
            None => Ok(()),
        }
    }

    /// The layout [`checkpoint::restore_except`] restores for this model, and the tables it
    /// leaves to their owners.
    pub(crate) fn restore_layout(&self) -> (checkpoint::Layout, Vec<String>) {
        match &self.sharded {
            None => (self.model.parameters().layout(), Vec::new()),
            Some(_) => (
                self.entries.iter().map(|e| (e.name.clone(), e.shape.clone())).collect(),
                self.tables.iter().map(|e| e.name.clone()).collect(),
            ),
        }
    }

    /// Resumes from the latest checkpoint under `model_dir`, if any: what an interrupted save
    /// left is removed, then the checkpoint is loaded into the weights and the optimizers;
    /// returns how far that training had come. For a single worker, which writes as well.
    pub fn restore(&mut self, model_dir: &str) -> Result<Option<Progress>> {
        checkpoint::remove_partial(model_dir)?;
        let (layout, sharded) = self.restore_layout();
        match checkpoint::restore_except(model_dir, &layout, &sharded)? {
            Some(restored) => {
                let folder = restored.folder.clone();
                let progress = self.load(restored)?;
                self.load_table_rows(&folder)?;
                Ok(Some(progress))
            }
            None => Ok(None),
        }
    }

    /// The weights that [`DataParallel::put_snapshot`] puts back: the variables', and this
    /// worker's rows of sharded tables or the tables on the device (copied out).
    pub fn snapshot(&self) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        let tables = match (&self.sharded, &self.on_device) {
            (Some(sharded), _) => sharded.values(),
            (None, Some(device)) => device.values()?,
            (None, None) => Vec::new(),
        };
        Ok((self.weights()?.into_owned(), tables))
    }

    /// Puts back weights taken by [`DataParallel::snapshot`]; the optimizers' state stays.
    pub fn put_snapshot(&mut self, snapshot: (Vec<f32>, Vec<Vec<f32>>)) -> Result<()> {
        let (weights, tables) = snapshot;
        if let Some(device) = &mut self.on_device {
            device.put_values(tables)?;
            return self.set_weights(weights);
        }
        if let Some(sharded) = &mut self.sharded {
            sharded.put_values(tables)?;
            if weights.len() != self.weights.len() {
                return Err(TrainError::StateMismatch(format!(
                    "{} weights given for {} variables",
                    weights.len(),
                    self.weights.len()
                )));
            }
            self.model.parameters().set_flat_vars(&weights)?;
            self.weights = weights;
            return Ok(());
        }
        self.set_weights(weights)
    }

    /// One synchronous step with this worker's `batch` (None once its data has run out).
    /// Returns None, on every worker together, when no worker had a batch.
    pub fn step(&mut self, batch: Option<&Batch>) -> Result<Option<StepStats>> {
        let plan = batch.map(LookupPlan::of).transpose()?.flatten();
        self.step_planned(batch, plan)
    }

    /// [`DataParallel::step`] with a batch made ready ahead ([`Prepared`]: its tensors on the
    /// device and its ids placed), as the training loop's prefetch thread hands them over.
    pub fn step_prepared(&mut self, prepared: Option<Prepared>) -> Result<Option<StepStats>> {
        match prepared {
            Some(prepared) => {
                let (batch, plan) = prepared.into_parts();
                self.step_planned(Some(&batch), plan)
            }
            None => self.step_planned(None, None),
        }
    }

    /// The step, `plan` placing the ids of `batch`.
    fn step_planned(&mut self, batch: Option<&Batch>, plan: Option<LookupPlan>) -> Result<Option<StepStats>> {
        let rows = match batch {
            Some(b) => b.rows()?,
            None => 0,
        };
        let batch = batch.filter(|_| rows > 0);
        let (lookup, fetched) = self.lookup(batch, plan)?;
        if self.vars_on_device.is_some() {
            return self.step_on_device(batch, lookup, rows);
        }
        let local = if let Some(mut buckets) = self.buckets.take() {
            let local = self.overlapped(&mut buckets, batch, lookup, rows);
            self.buckets = Some(buckets);
            local?
        } else {
            self.gradients(batch, lookup, rows)?
        };
        let Some(total) = self.total()? else { return Ok(None) };
        let factor = self.schedule.factor(self.optimizers.steps() + 1);
        let grad_norm = if let Some(sharded) = &self.sharded {
            let mut owned = sharded.push_grads(self.ring.as_ref(), &fetched, &local.rows)?;
            let norm = self.finish_sharded(&mut owned, total)?;
            self.optimizers.set_scale(factor);
            self.apply(Some(TableGrads::default()), factor, None)?;
            let sharded = self.sharded.as_mut().expect("sharded tables");
            sharded.apply(&owned, factor, self.sparse_tables)?;
            self.model.parameters().set_flat_vars(&self.weights)?;
            norm
        } else {
            let distinct_ids = self.reduced[self.reduced.len() - 1];
            let mut tables = self.exchange_tables(local, distinct_ids)?;
            let norm = self.finish_gradients(&mut tables, total)?;
            self.optimizers.set_scale(factor);
            self.apply(tables, factor, None)?;
            self.set_model_weights(&self.weights)?;
            norm
        };
        Ok(Some(self.stats(total, grad_norm)))
    }

    /// The step's example count over every worker from the reduced slots; None when no
    /// worker had a batch.
    fn total(&self) -> Result<Option<f32>> {
        let total = self.reduced[self.reduced.len() - 3];
        if total == 0.0 {
            return Ok(None);
        }
        if !total.is_finite() || total.fract() != 0.0 {
            return Err(TrainError::InvalidArgument(format!("the workers' example count summed to {total}")));
        }
        Ok(Some(total))
    }

    /// What the step just taken did, from the reduced slots.
    fn stats(&self, total: f32, grad_norm: f32) -> StepStats {
        StepStats {
            step: self.optimizers.steps(),
            loss: self.reduced[self.reduced.len() - 2] / total,
            examples: total as u64,
            grad_norm,
        }
    }

    /// [`DataParallel::step`] with the variables updated on the device (`device_vars.rs`):
    /// their gradient is one tensor there, and goes to the host only for the ring.
    fn step_on_device(
        &mut self,
        batch: Option<&Batch>,
        lookup: Option<Lookup>,
        rows: usize,
    ) -> Result<Option<StepStats>> {
        let lookup = match (self.alone_on_device(), batch, lookup) {
            (true, Some(batch), Some(lookup)) => {
                return self.step_alone_on_device(batch, lookup, rows).map(Some);
            }
            (_, _, lookup) => lookup,
        };
        let vars = self.reduced.len() - 3;
        let (local, mut grad) = match batch {
            Some(batch) => {
                let (grads, local) = self.backward(batch, lookup, rows)?;
                let device = self.vars_on_device.as_ref().expect("the update on the device");
                // Weighted by the example count, as the host's step does.
                (local, Some(device.gradient(&grads, rows as f32)?))
            }
            None => {
                self.reduced[vars..].fill(0.0);
                (TableGrads::default(), None)
            }
        };
        if self.ring.is_some() {
            match &grad {
                Some(g) => self.reduced[..vars].copy_from_slice(&g.to_vec1::<f32>()?),
                None => self.reduced[..vars].fill(0.0),
            }
            self.reduce()?;
            let device = self.vars_on_device.as_ref().expect("the update on the device");
            grad = Some(device.gradient_from(&self.reduced[..vars])?);
        }
        let Some(total) = self.total()? else { return Ok(None) };
        let grad = grad.expect("a worker alone has a gradient when it had examples");
        let factor = self.schedule.factor(self.optimizers.steps() + 1);
        let distinct_ids = self.reduced[vars + 2];
        let mut tables = self.exchange_tables(local, distinct_ids)?;
        let table_squares = self.finish_tables(&mut tables, total)?;
        let device = self.vars_on_device.as_ref().expect("the update on the device");
        let (mut grad, var_squares) = device.finish(&grad, total)?;
        let norm = (var_squares + table_squares).sqrt() as f32;
        if let Some(clip) = self.clip_norm
            && norm > clip
        {
            let factor = clip / norm;
            grad = mul(&grad, factor)?;
            self.clip_tables(&mut tables, factor);
        }
        self.optimizers.set_scale(factor);
        self.apply(tables, factor, Some(&grad))?;
        Ok(Some(self.stats(total, norm)))
    }

    /// Whether a step keeps everything on the device: a trainer alone (no ring to carry its
    /// gradients through main memory), its variables and tables updated there, the tables by
    /// the rows a step touches.
    fn alone_on_device(&self) -> bool {
        self.ring.is_none() && self.vars_on_device.is_some() && self.on_device.is_some() && self.sparse_tables
    }

    /// [`Self::step_on_device`] for a trainer alone ([`Self::alone_on_device`]): the tables'
    /// row gradients stay on the device with the variables', and the step waits for the
    /// device once, for its loss and norm together. The arithmetic is the host path's, in
    /// the same order.
    fn step_alone_on_device(&mut self, batch: &Batch, mut lookup: Lookup, rows: usize) -> Result<StepStats> {
        let logits = self.model.forward(batch, Some(&lookup))?;
        let loss = self.loss.compute_weighted(&logits, &batch.labels, self.class_weights.as_deref())?;
        let grads = loss.backward()?;
        // Weighted by the example count and then divided by the total, as with a ring.
        let (scale, total) = (rows as f32, rows as f32);
        let vars = self.vars_on_device.as_ref().expect("the update on the device");
        let (mut grad, var_squares) = vars.finish_on_device(&vars.gradient(&grads, scale)?, total)?;
        let tables = self.on_device.as_ref().expect("the tables on the device");
        let places = match lookup.take_places() {
            Some(places) => places,
            None => tables.places(&lookup.unique)?,
        };
        let at = (!self.regularization.is_zero()).then(|| places.at());
        let mut table_grads = Vec::with_capacity(self.tables.len());
        let mut squares = vec![var_squares];
        for (t, entry) in self.tables.iter().enumerate() {
            let g = match lookup.row_grads(&entry.name, &grads)? {
                Some(g) => div(&mul(&g, scale)?, total)?,
                None => Tensor::zeros((lookup.unique.len(), entry.row_width()), DType::F32, grad.device())?,
            };
            let penalty = self.regularization.of(entry);
            let g = match &at {
                Some(at) if !penalty.is_zero() => {
                    // The host adds `l1·sign(w) + 2·l2·w` to each gradient, in that order.
                    let w = tables.gather(t, at)?;
                    (g + (mul(&w.sign()?, penalty.l1)? + mul(&w, 2.0 * penalty.l2)?)?)?
                }
                _ => g,
            };
            squares.push(device_vars::squares(&g)?);
            table_grads.push(g);
        }
        // The step's one wait for the device.
        let loss_and_squares = Tensor::cat(
            &[loss.to_dtype(DType::F64)?.reshape(1)?, Tensor::stack(&squares, 0)?.sum_keepdim(0)?],
            0,
        )?
        .to_vec1::<f64>()?;
        let (loss, squares) = (loss_and_squares[0] as f32, loss_and_squares[1]);
        let slots = [scale, loss * scale, lookup.unique.len() as f32];
        let at = self.reduced.len() - 3;
        self.reduced[at..].copy_from_slice(&slots);
        let norm = squares.sqrt() as f32;
        if let Some(clip) = self.clip_norm
            && norm > clip
        {
            let factor = clip / norm;
            grad = mul(&grad, factor)?;
            for g in &mut table_grads {
                *g = mul(g, factor)?;
            }
        }
        let factor = self.schedule.factor(self.optimizers.steps() + 1);
        self.optimizers.set_scale(factor);
        let vars = self.vars_on_device.as_mut().expect("the update on the device");
        let tables = self.on_device.as_mut().expect("the tables on the device");
        for (g, group) in self.optimizers.groups_mut().iter_mut().enumerate() {
            group.optimizer.advance();
            let step = group.optimizer.steps();
            vars.update(g, &grad, factor, step)?;
            for (t, rows) in table_grads.iter().enumerate() {
                if tables.group(t) == group.name {
                    tables.update_rows_on_device(t, &places, rows, factor, step)?;
                }
            }
        }
        Ok(self.stats(total, norm))
    }

    /// All-reduces the step's buffer over the ring, the gradients in the wire's format.
    fn reduce(&mut self) -> Result<()> {
        let Some(ring) = &self.ring else { return Ok(()) };
        let vars = self.reduced.len() - 3;
        let mut ring = lock(ring);
        if self.gradient_wire == Wire::Native {
            ring.all_reduce(&mut self.reduced, ReduceOp::Sum)?;
        } else {
            // The example count and the loss must stay exact: they travel apart, as float32.
            let (grads, slots) = self.reduced.split_at_mut(vars);
            ring.all_reduce_as(grads, ReduceOp::Sum, self.gradient_wire)?;
            ring.all_reduce(slots, ReduceOp::Sum)?;
        }
        Ok(())
    }

    /// This worker's gradients of `batch`, weighted by its example count, all-reduced over
    /// the ring in one call once the backward pass has ended; returns its table rows'.
    fn gradients(
        &mut self,
        batch: Option<&Batch>,
        lookup: Option<Lookup>,
        rows: usize,
    ) -> Result<TableGrads> {
        let vars = self.reduced.len() - 3;
        let mut local = TableGrads::default();
        if let Some(batch) = batch {
            let grads;
            (grads, local) = self.backward(batch, lookup, rows)?;
            // Weighted by the example count, so that the sum over workers divided by the
            // total count is the mean gradient over every example of the step.
            self.model.parameters().var_grads(&grads, rows as f32, &mut self.reduced[..vars])?;
        } else {
            self.reduced.fill(0.0);
        }
        self.reduce()?;
        Ok(local)
    }

    /// The forward and backward passes of `batch` (`rows` examples): the gradients, and the
    /// tables' rows of them weighted by the example count; writes the step's three slots
    /// (the example count, the summed loss, the distinct ids) at the end of `reduced`.
    fn backward(
        &mut self,
        batch: &Batch,
        lookup: Option<Lookup>,
        rows: usize,
    ) -> Result<(GradStore, TableGrads)> {
        let logits = self.model.forward(batch, lookup.as_ref())?;
        let loss = self.loss.compute_weighted(&logits, &batch.labels, self.class_weights.as_deref())?;
        let grads = loss.backward()?;
        let local = match lookup {
            Some(lookup) => self.table_grads(&grads, lookup, rows as f32)?,
            None => TableGrads::default(),
        };
        let slots = [rows as f32, loss.to_scalar::<f32>()? * rows as f32, local.ids.len() as f32];
        let vars = self.reduced.len() - 3;
        self.reduced[vars..].copy_from_slice(&slots);
        Ok((grads, local))
    }

    /// [`DataParallel::gradients`] with the all-reduce overlapped with the backward pass: the
    /// tower's gradients go to the ring in `buckets` as its layers are differentiated.
    fn overlapped(
        &mut self,
        buckets: &mut Buckets,
        batch: Option<&Batch>,
        lookup: Option<Lookup>,
        rows: usize,
    ) -> Result<TableGrads> {
        let ring = self.ring.clone().expect("buckets are planned for a ring");
        let mut reduced = std::mem::take(&mut self.reduced);
        let this = &*self;
        let outcome = buckets.run(&ring, this.gradient_wire, &mut reduced, |sender| {
            let Some(batch) = batch else {
                sender.zeros();
                return Ok(TableGrads::default());
            };
            let tower = this.model.tower().expect("buckets are planned for a tower");
            tower.begin_staging();
            let logits = this.model.forward(batch, lookup.as_ref());
            let staged = tower.take_staged();
            let logits = logits?;
            let [staged] = <[Staged; 1]>::try_from(staged).map_err(|all| {
                TrainError::InvalidArgument(format!(
                    "a forward pass went through its tower {} times; overlap_gradients needs once",
                    all.len()
                ))
            })?;
            let loss = this.loss.compute_weighted(&logits, &batch.labels, this.class_weights.as_deref())?;
            let mut grads = loss.backward()?;
            let scale = rows as f32;
            if let Some(input_grad) = sender.tower(tower, &staged, &grads, scale)? {
                // The graph below the tower, from its input's gradient.
                grads.extend((&staged.source * &input_grad)?.sum_all()?.backward()?)?;
            }
            let ids = lookup.as_ref().map_or(0, |l| l.unique.len());
            let slots = [scale, loss.to_scalar::<f32>()? * scale, ids as f32];
            sender.finish(this.model.parameters(), &grads, scale, slots)?;
            match lookup {
                Some(lookup) => this.table_grads(&grads, lookup, scale),
                None => Ok(TableGrads::default()),
            }
        });
        self.reduced = reduced;
        outcome
    }

    /// Turns the summed gradients into the step's gradient, the same on every worker: the
    /// mean over `total` examples, plus the penalties' gradients, clipped to `clip_norm` by
    /// the global norm. Returns the norm before clipping.
    fn finish_gradients(&mut self, tables: &mut Option<TableGrads>, total: f32) -> Result<f32> {
        let vars = self.reduced.len() - 3;
        let grads = &mut self.reduced[..vars];
        grads.iter_mut().for_each(|g| *g /= total);
        if !self.regularization.is_zero() {
            let mut var_at = 0;
            for e in self.entries.iter().filter(|e| !e.table) {
                let penalty = self.regularization.of(e);
                let weights = &self.weights[e.offset..e.offset + e.len()];
                penalty.add_gradient(weights, &mut grads[var_at..var_at + e.len()]);
                var_at += e.len();
            }
        }
        let table_squares = self.finish_tables(tables, total)?;
        let grads = &mut self.reduced[..vars];
        let norm = (sum_of_squares(grads) + table_squares).sqrt() as f32;
        if let Some(clip) = self.clip_norm
            && norm > clip
        {
            let factor = clip / norm;
            grads.iter_mut().for_each(|g| *g *= factor);
            self.clip_tables(tables, factor);
        }
        Ok(norm)
    }

    /// The tables' part of [`Self::finish_gradients`]: their summed gradients (the touched
    /// rows', or the dense tables' when `tables` is None) made the mean over `total`
    /// examples with their penalties added; returns the sum of their squares.
    fn finish_tables(&mut self, tables: &mut Option<TableGrads>, total: f32) -> Result<f64> {
        match tables.as_mut() {
            Some(t) => t.rows.iter_mut().for_each(|rows| rows.iter_mut().for_each(|g| *g /= total)),
            None => self.table_dense.iter_mut().for_each(|g| *g /= total),
        }
        if !self.regularization.is_zero() {
            let mut dense_at = 0;
            for (t, e) in self.tables.iter().enumerate() {
                let (penalty, w, dense) =
                    (self.regularization.of(e), e.row_width(), dense_at..dense_at + e.len());
                dense_at += e.len();
                if penalty.is_zero() {
                    continue;
                }
                match (tables.as_mut(), &self.on_device) {
                    (Some(rows), None) => {
                        let weights = &self.weights[e.offset..e.offset + e.len()];
                        for (id, row) in rows.ids.iter().zip(rows.rows[t].chunks_exact_mut(w)) {
                            let at = *id as usize * w;
                            penalty.add_gradient(&weights[at..at + w], row);
                        }
                    }
                    (None, None) => {
                        let weights = &self.weights[e.offset..e.offset + e.len()];
                        penalty.add_gradient(weights, &mut self.table_dense[dense]);
                    }
                    (Some(rows), Some(device)) => {
                        penalty.add_gradient(&device.rows(t, &rows.ids)?, &mut rows.rows[t]);
                    }
                    (None, Some(device)) => {
                        penalty.add_gradient(&device.values_of(t)?, &mut self.table_dense[dense]);
                    }
                }
            }
        }
        Ok(match tables.as_ref() {
            Some(t) => t.rows.iter().map(|rows| sum_of_squares(rows)).sum(),
            None => sum_of_squares(&self.table_dense),
        })
    }

    /// Scales the tables' gradients by the clipping `factor`.
    fn clip_tables(&mut self, tables: &mut Option<TableGrads>, factor: f32) {
        match tables.as_mut() {
            Some(t) => t.rows.iter_mut().for_each(|rows| rows.iter_mut().for_each(|g| *g *= factor)),
            None => self.table_dense.iter_mut().for_each(|g| *g *= factor),
        }
    }

    /// With sharded tables: the variables' gradient made the step's as
    /// [`Self::finish_gradients`] does, and this worker's rows' (`owned`) by their owner's
    /// rules; the global norm adds up every owner's part with one scalar all-reduce.
    fn finish_sharded(&mut self, owned: &mut OwnedGrads, total: f32) -> Result<f32> {
        let vars = self.reduced.len() - 3;
        let grads = &mut self.reduced[..vars];
        grads.iter_mut().for_each(|g| *g /= total);
        if !self.regularization.is_zero() {
            for e in &self.entries {
                let penalty = self.regularization.of(e);
                penalty.add_gradient(
                    &self.weights[e.offset..e.offset + e.len()],
                    &mut grads[e.offset..e.offset + e.len()],
                );
            }
        }
        let sharded = self.sharded.as_ref().expect("sharded tables");
        let mut table_squares =
            [sharded.finish(owned, total, !self.sparse_tables, !self.regularization.is_zero())?];
        if let Some(ring) = &self.ring {
            lock(ring).all_reduce(&mut table_squares, ReduceOp::Sum)?;
        }
        let squares = sum_of_squares(grads) + table_squares[0];
        let norm = squares.sqrt() as f32;
        if let Some(clip) = self.clip_norm
            && norm > clip
        {
            let factor = clip / norm;
            grads.iter_mut().for_each(|g| *g *= factor);
            owned.rows.iter_mut().flatten().for_each(|g| *g *= factor);
        }
        Ok(norm)
    }

    /// The tables' gradient rows for the lookup's ids, times `scale`.
    fn table_grads(&self, grads: &GradStore, lookup: Lookup, scale: f32) -> Result<TableGrads> {
        let mut rows = Vec::new();
        for entry in &self.tables {
            let values = match lookup.row_grads(&entry.name, grads)? {
                Some(g) => g.flatten_all()?.to_vec1::<f32>()?.into_iter().map(|v| v * scale).collect(),
                None => vec![0.0; lookup.unique.len() * entry.row_width()],
            };
            rows.push(values);
        }
        Ok(TableGrads { ids: lookup.unique, rows })
    }

    fn table_widths(&self) -> Vec<usize> {
        self.tables.iter().map(Entry::row_width).collect()
    }

    /// Every worker's table gradients added up: None when the whole tables are to be
    /// updated from `table_dense` instead.
    fn exchange_tables(&mut self, local: TableGrads, distinct_ids: f32) -> Result<Option<TableGrads>> {
        let widths = self.table_widths();
        if widths.is_empty() {
            return Ok(Some(TableGrads::default()));
        }
        let table_values: usize = self.tables.iter().map(Entry::len).sum();
        let row_values: usize = widths.iter().sum::<usize>() + 1;
        // An all-gather moves each list once; an all-reduce moves about twice the tables.
        let sparse_cheaper = (distinct_ids as usize).saturating_mul(row_values) <= 2 * table_values;
        match (&self.ring, self.sparse_tables) {
            (None, true) => Ok(Some(local)),
            (Some(ring), true) if sparse_cheaper => {
                let mine = encode_rows(&local);
                let all = lock(ring).all_gather(&mine)?;
                merge_rows(&all, &widths).map(Some)
            }
            _ => {
                self.scatter_dense(&local);
                if let Some(ring) = &self.ring {
                    lock(ring).all_reduce(&mut self.table_dense, ReduceOp::Sum)?;
                }
                if !self.sparse_tables {
                    return Ok(None);
                }
                Ok(Some(self.gather_nonzero(&widths)))
            }
        }
    }

    /// Writes `local`'s rows into zeroed dense tables.
    fn scatter_dense(&mut self, local: &TableGrads) {
        let table_values: usize = self.tables.iter().map(Entry::len).sum();
        self.table_dense.clear();
        self.table_dense.resize(table_values, 0.0);
        let mut base = 0;
        for (entry, rows) in self.tables.iter().zip(&local.rows) {
            let w = entry.row_width();
            for (i, &id) in local.ids.iter().enumerate() {
                let at = base + id as usize * w;
                self.table_dense[at..at + w].copy_from_slice(&rows[i * w..(i + 1) * w]);
            }
            base += entry.len();
        }
    }

    /// The rows of the dense tables that hold a non-zero value in any table.
    fn gather_nonzero(&self, widths: &[usize]) -> TableGrads {
        let tables: Vec<&Entry> = self.tables.iter().collect();
        let bases: Vec<usize> = tables
            .iter()
            .scan(0, |base, e| {
                let here = *base;
                *base += e.len();
                Some(here)
            })
            .collect();
        let ids_in_space = tables.first().map_or(0, |e| e.shape[0]);
        let mut out = TableGrads { ids: Vec::new(), rows: vec![Vec::new(); tables.len()] };
        for id in 0..ids_in_space {
            let row =
                |t: usize| &self.table_dense[bases[t] + id * widths[t]..bases[t] + (id + 1) * widths[t]];
            if (0..tables.len()).any(|t| row(t).iter().any(|v| *v != 0.0)) {
                out.ids.push(id as u32);
                for t in 0..tables.len() {
                    out.rows[t].extend_from_slice(row(t));
                }
            }
        }
        out
    }

    /// Updates every group: its variables from the reduced buffer (or, when they are updated
    /// on the device, from `on_device`, the step's gradient there), its tables from `tables`
    /// (the rows of the touched ids) or, when None, from the dense tables; `factor` is the
    /// schedule's on the step size.
    fn apply(&mut self, tables: Option<TableGrads>, factor: f32, on_device: Option<&Tensor>) -> Result<()> {
        if let (Some(device), Some(grad)) = (&mut self.vars_on_device, on_device) {
            // No table lives in main memory here (see `with_tables`).
            for (g, group) in self.optimizers.groups_mut().iter_mut().enumerate() {
                group.optimizer.advance();
                device.update(g, grad, factor, group.optimizer.steps())?;
                if let Some(tables_there) = &mut self.on_device {
                    update_device_tables(
                        tables_there,
                        &self.tables,
                        group,
                        &tables,
                        &self.table_dense,
                        factor,
                    )?;
                }
            }
            return Ok(());
        }
        let vars = self.reduced.len() - 3;
        // Compact offsets: of each variable in the reduced buffer, of each table in the
        // table buffers.
        let mut var_offsets = Vec::with_capacity(self.entries.len());
        let (mut var_at, mut table_index, mut dense_at) = (0, 0, 0);
        for e in &self.entries {
            if e.table {
                var_offsets.push((table_index, dense_at));
                table_index += 1;
                dense_at += e.len();
            } else {
                var_offsets.push((var_at, 0));
                var_at += e.len();
            }
        }
        debug_assert_eq!(var_at, vars);
        for group in self.optimizers.groups_mut() {
            let start = group.values.start;
            let params = &mut self.weights[group.values.clone()];
            group.optimizer.advance();
            let mut var_segments = Vec::new();
            for i in group.entries.clone() {
                let e = &self.entries[i];
                if e.table {
                    let (t, dense) = var_offsets[i];
                    match &tables {
                        Some(rows) => {
                            let w = e.row_width();
                            let (ids, grads) = live_rows(&rows.ids, &rows.rows[t], w);
                            let starts: Vec<usize> =
                                ids.iter().map(|&id| e.offset - start + id as usize * w).collect();
                            group.optimizer.update_rows(params, &grads, &starts, w)?;
                        }
                        None => {
                            let segment = Segment { param: e.offset - start, grad: dense, len: e.len() };
                            group.optimizer.update(params, &self.table_dense, &[segment])?;
                        }
                    }
                } else {
                    var_segments.push(Segment {
                        param: e.offset - start,
                        grad: var_offsets[i].0,
                        len: e.len(),
                    });
                }
            }
            group.optimizer.update(params, &self.reduced[..vars], &var_segments)?;
            if let Some(device) = &mut self.on_device {
                update_device_tables(device, &self.tables, group, &tables, &self.table_dense, factor)?;
            }
        }
        Ok(())
    }
}

/// Updates the tables on the device that `group` trains (`entries`, by table), from `tables`
/// (the touched rows') or, when None, from `dense` (the dense tables' gradients), as the
/// group's current step.
fn update_device_tables(
    device: &mut DeviceTables,
    entries: &[Entry],
    group: &crate::groups::Group,
    tables: &Option<TableGrads>,
    dense: &[f32],
    factor: f32,
) -> Result<()> {
    let (step, mut dense_at) = (group.optimizer.steps(), 0);
    for (t, e) in entries.iter().enumerate() {
        let at = dense_at..dense_at + e.len();
        dense_at += e.len();
        if device.group(t) != group.name {
            continue;
        }
        match tables {
            Some(rows) => {
                let (ids, grads) = live_rows(&rows.ids, &rows.rows[t], e.row_width());
                device.update_rows(t, &ids, &grads, factor, step)?;
            }
            None => device.update_all(t, &dense[at], factor, step)?,
        }
    }
    Ok(())
}

/// The sum of the values' squares in float64, over eight running sums so that the additions
/// do not wait on one another (the same sum on every worker: the order is fixed).
pub(crate) fn sum_of_squares(values: &[f32]) -> f64 {
    let mut sums = [0f64; 8];
    let chunks = values.chunks_exact(8);
    let rest: f64 = chunks.remainder().iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    for chunk in chunks {
        for (sum, &v) in sums.iter_mut().zip(chunk) {
            *sum += f64::from(v) * f64::from(v);
        }
    }
    sums.iter().sum::<f64>() + rest
}

/// `[count][ids][rows of table 0][rows of table 1]...` as little-endian bytes.
fn encode_rows(grads: &TableGrads) -> Vec<u8> {
    let values: usize = grads.rows.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(4 + 4 * (grads.ids.len() + values));
    out.extend_from_slice(&(grads.ids.len() as u32).to_le_bytes());
    out.extend_from_slice(bytemuck::cast_slice(&grads.ids));
    for rows in &grads.rows {
        out.extend_from_slice(bytemuck::cast_slice(rows));
    }
    out
}

/// Adds up every worker's rows, in rank order so that every worker gets the same sums.
fn merge_rows(all: &[Vec<u8>], widths: &[usize]) -> Result<TableGrads> {
    let bad = |rank: usize| {
        TrainError::InvalidArgument(format!("worker {rank} sent malformed embedding gradients"))
    };
    let mut parsed = Vec::with_capacity(all.len());
    for (rank, bytes) in all.iter().enumerate() {
        let words: Vec<u32> =
            bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let count = *words.first().ok_or_else(|| bad(rank))? as usize;
        let need = 1 + count * (1 + widths.iter().sum::<usize>());
        if words.len() != need || bytes.len() != need * 4 {
            return Err(bad(rank));
        }
        parsed.push((count, words));
    }
    let mut ids: Vec<u32> = parsed.iter().flat_map(|(n, w)| w[1..1 + n].iter().copied()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut rows: Vec<Vec<f32>> = widths.iter().map(|w| vec![0.0; ids.len() * w]).collect();
    for (count, words) in &parsed {
        let their_ids = &words[1..1 + count];
        let positions: Vec<usize> =
            their_ids.iter().map(|id| ids.binary_search(id).expect("merged ids hold every id")).collect();
        let mut at = 1 + count;
        for (t, &w) in widths.iter().enumerate() {
            for (k, &pos) in positions.iter().enumerate() {
                let values = &words[at + k * w..at + (k + 1) * w];
                for (sum, bits) in rows[t][pos * w..(pos + 1) * w].iter_mut().zip(values) {
                    *sum += f32::from_bits(*bits);
                }
            }
            at += count * w;
        }
    }
    Ok(TableGrads { ids, rows })
}

/// `flat` (in the layout of all parameters `all`) cut into the variables' values, laid end
/// to end, and each table's.
fn split_flat(all: &[Entry], flat: &[f32]) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
    let total: usize = all.iter().map(Entry::len).sum();
    if flat.len() != total {
        return Err(TrainError::StateMismatch(format!(
            "{} weights given for {total} parameters",
            flat.len()
        )));
    }
    let (mut vars, mut tables) = (Vec::new(), Vec::new());
    for e in all {
        let values = &flat[e.offset..e.offset + e.len()];
        if e.table {
            tables.push(values.to_vec());
        } else {
            vars.extend_from_slice(values);
        }
    }
    Ok((vars, tables))
}

/// The inverse of [`split_flat`]: the variables' `vars` and each table's values, laid out as
/// `all` says.
fn join_flat(all: &[Entry], vars: &[f32], tables: Vec<Vec<f32>>) -> Vec<f32> {
    let mut out = Vec::with_capacity(all.iter().map(Entry::len).sum());
    let (mut tables, mut var_at) = (tables.into_iter(), 0);
    for e in all {
        if e.table {
            out.extend(tables.next().expect("a table per table entry"));
        } else {
            out.extend_from_slice(&vars[var_at..var_at + e.len()]);
            var_at += e.len();
        }
    }
    out
}
