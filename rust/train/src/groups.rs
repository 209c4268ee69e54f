//! Optimizer groups: which update rule trains which parameters.
//!
//! One rule trains everything, or, as Keras's `WideDeepModel` does, the wide part
//! (parameters named `wide/...`, typically with FTRL) has a rule of its own. Parameters are
//! laid out in name order, so every group is one contiguous range of the flat buffer.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use sparktrain_collective::Wire;

use crate::error::{Result, TrainError};
use crate::optim::{Optimizer, OptimizerState, Rule};
use crate::params::Entry;
use crate::regularize::Regularization;
use crate::schedule::Schedule;

/// The prefix of the wide part's parameter names.
pub const WIDE_PREFIX: &str = "wide/";

/// How the parameters are optimized.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// The rule for every parameter (but the wide part's when `wide` is given).
    pub rule: Rule,
    /// The rule for the wide part of Wide&Deep and DeepFM (parameters named `wide/...`).
    #[serde(default)]
    pub wide: Option<Rule>,
    /// Threads that share a large update.
    #[serde(default = "one")]
    pub threads: usize,
    /// Update only the embedding rows a step touched (exact for SGD without momentum,
    /// Adagrad, and FTRL on rows that start at zero; the "lazy" form of momentum and Adam).
    /// Off: every row, every step.
    #[serde(default = "yes")]
    pub sparse_tables: bool,
    /// The learning-rate schedule, a factor on every rule's step size.
    #[serde(default)]
    pub schedule: Schedule,
    /// Scale each step's gradient (every parameter's, after averaging and the penalties) so
    /// that its global L2 norm is at most this; None: no clipping.
    #[serde(default)]
    pub clip_norm: Option<f32>,
    /// L1/L2 penalties per group of parameters.
    #[serde(default)]
    pub regularization: Regularization,
    /// How the dense layers' gradients travel in each step's all-reduce.
    #[serde(default)]
    pub gradient_wire: GradientWire,
    /// With more than one worker on the CPU, all-reduce the dense tower's gradients in
    /// buckets while the backward pass goes on (see `overlap.rs`); off: in one call after it.
    #[serde(default = "yes")]
    pub overlap_gradients: bool,
    /// Whether the variables' update runs on the model's device, their optimizer state kept
    /// there (see `device_vars.rs`); None: on a GPU yes, on the CPU no (its loop over the
    /// values in place is faster than tensor operations). It needs the embedding tables on
    /// the device too, or none, and tables that are not sharded.
    #[serde(default)]
    pub update_on_device: Option<bool>,
}

/// The format of the dense layers' gradients on the wire. The 16-bit formats halve the bytes
/// of the step's all-reduce; every sum still accumulates in float32 and every trainer ends
/// with the same bits, but each value that travels is rounded: to 8 significant bits (bf16,
/// float32's range) or 11 (f16, whose largest value is 65504). The example count, the loss
/// and the embedding tables' rows and gradients always travel as float32.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GradientWire {
    /// float32: exact, the same sums as training alone on the global batch.
    #[default]
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    F16,
}

impl GradientWire {
    /// The format named `name` (`f32`, `bf16` or `f16`).
    pub fn named(name: &str) -> Result<Self> {
        match name {
            "f32" => Ok(GradientWire::F32),
            "bf16" => Ok(GradientWire::Bf16),
            "f16" => Ok(GradientWire::F16),
            other => Err(TrainError::InvalidArgument(format!(
                "gradient_wire={other:?} is not a wire format: use \"f32\" (exact), \"bf16\" or \"f16\""
            ))),
        }
    }

    /// The format's name, as [`GradientWire::named`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            GradientWire::F32 => "f32",
            GradientWire::Bf16 => "bf16",
            GradientWire::F16 => "f16",
        }
    }

    /// The collective's wire format.
    pub fn wire(self) -> Wire {
        match self {
            GradientWire::F32 => Wire::Native,
            GradientWire::Bf16 => Wire::Bf16,
            GradientWire::F16 => Wire::F16,
        }
    }
}

fn one() -> usize {
    1
}

fn yes() -> bool {
    true
}

impl OptimizerConfig {
    /// One rule for everything, with the defaults a configuration file gets.
    pub fn new(rule: Rule) -> Self {
        OptimizerConfig {
            rule,
            wide: None,
            threads: one(),
            sparse_tables: yes(),
            schedule: Schedule::default(),
            clip_norm: None,
            regularization: Regularization::default(),
            gradient_wire: GradientWire::default(),
            overlap_gradients: yes(),
            update_on_device: None,
        }
    }

    /// Checks the schedule, the clipping norm and the penalties.
    pub fn validate(&self) -> Result<()> {
        self.schedule.validate("lr_schedule")?;
        if let Some(norm) = self.clip_norm
            && !(norm.is_finite() && norm > 0.0)
        {
            return Err(TrainError::InvalidArgument(format!("clip_norm={norm} must be a positive number")));
        }
        self.regularization.validate()
    }
}

/// A group's saved state.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupState {
    /// The group ("all", "deep" or "wide").
    pub group: String,
    /// The parameters it trains, in order; its buffers lay their values out the same way.
    pub tensors: Vec<String>,
    /// The optimizer's state.
    pub state: OptimizerState,
}

/// One rule over one contiguous range of parameters.
pub struct Group {
    /// "all", "deep" or "wide".
    pub name: String,
    /// The indices of its parameters among the entries.
    pub entries: Range<usize>,
    /// Its values in the flat buffer.
    pub values: Range<usize>,
    /// Its optimizer, over `values.len()` values.
    pub optimizer: Optimizer,
}

/// Every group's optimizer.
pub struct Optimizers {
    groups: Vec<Group>,
    entries: Vec<Entry>,
}

impl Optimizers {
    /// The optimizers `config` asks for, over the parameters `entries` (in flat order).
    pub fn new(config: &OptimizerConfig, entries: &[Entry]) -> Result<Self> {
        let total: usize = entries.iter().map(Entry::len).sum();
        let split = entries.iter().position(|e| e.name.starts_with(WIDE_PREFIX)).unwrap_or(entries.len());
        if entries[split..].iter().any(|e| !e.name.starts_with(WIDE_PREFIX)) {
            return Err(TrainError::InvalidArgument("the wide parameters are not contiguous".into()));
        }
        let group = |name: &str, rule: Rule, range: Range<usize>| {
            let start = entries.get(range.start).map_or(total, |e| e.offset);
            let end = entries.get(range.end).map_or(total, |e| e.offset);
            Group {
                name: name.into(),
                entries: range,
                values: start..end,
                optimizer: Optimizer::new(rule, end - start, config.threads),
            }
        };
        let groups = match config.wide {
            Some(wide) if split < entries.len() => {
                vec![group("deep", config.rule, 0..split), group("wide", wide, split..entries.len())]
            }
            Some(_) => {
                return Err(TrainError::InvalidArgument(
                    "a wide optimizer was given, but the model has no wide part".into(),
                ));
            }
            None => vec![group("all", config.rule, 0..entries.len())],
        };
        Ok(Optimizers { groups, entries: entries.to_vec() })
    }

    /// The groups, in flat order.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The groups, to update them.
    pub fn groups_mut(&mut self) -> &mut [Group] {
        &mut self.groups
    }

    /// Updates applied so far.
    pub fn steps(&self) -> u64 {
        self.groups[0].optimizer.steps()
    }

    /// The first group's step size (as the schedule last set it).
    pub fn learning_rate(&self) -> f32 {
        self.groups[0].optimizer.learning_rate()
    }

    /// Sets every group's factor on its step size (see [`Optimizer::set_scale`]).
    pub fn set_scale(&mut self, scale: f32) {
        for g in &mut self.groups {
            g.optimizer.set_scale(scale);
        }
    }

    /// Every group's state, to save.
    pub fn state(&self) -> Vec<GroupState> {
        self.groups
            .iter()
            .map(|g| GroupState {
                group: g.name.clone(),
                tensors: self.entries[g.entries.clone()].iter().map(|e| e.name.clone()).collect(),
                state: g.optimizer.state(),
            })
            .collect()
    }

    /// Restores saved states, group by group; names and parameters must match.
    pub fn load_state(&mut self, states: Vec<GroupState>) -> Result<()> {
        let saved: Vec<&str> = states.iter().map(|s| s.group.as_str()).collect();
        let ours: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
        if saved != ours {
            return Err(TrainError::StateMismatch(format!("optimizer groups {saved:?}, expected {ours:?}")));
        }
        for (group, state) in self.groups.iter_mut().zip(states) {
            let names: Vec<&str> =
                self.entries[group.entries.clone()].iter().map(|e| e.name.as_str()).collect();
            if state.tensors.iter().map(String::as_str).ne(names.iter().copied()) {
                return Err(TrainError::StateMismatch(format!(
                    "optimizer group '{}' trained {:?}, the model has {names:?}",
                    group.name, state.tensors
                )));
            }
            group.optimizer.load_state(state.state)?;
        }
        Ok(())
    }
}
