//! Optimizers over flat float32 buffers: the parameters, the all-reduced gradients and the
//! optimizer's own state are each one contiguous buffer laid out the same way, so one fused
//! loop updates everything, split across threads, and the state is plain data a checkpoint
//! saves and restores.
//!
//! The update rules follow the usual definitions: SGD with (Nesterov) momentum and Adam/AdamW
//! as in PyTorch, Adagrad and FTRL-Proximal as in Keras (FTRL is what Keras's WideDeepModel
//! uses for the wide part).

use std::thread;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

/// Buffers shorter than this per thread are updated on one thread: a thread costs more.
const VALUES_PER_THREAD: usize = 1 << 16;

/// An optimizer's state: its step count and named buffers, each as long as the parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizerState {
    /// Updates applied so far.
    pub step: u64,
    /// Named per-parameter buffers (moments, accumulators...).
    pub buffers: Vec<(String, Vec<f32>)>,
}

/// A part of the parameters that one update touches, with where its gradients are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The first parameter (and state value).
    pub param: usize,
    /// The first gradient.
    pub grad: usize,
    /// How many values.
    pub len: usize,
}

/// The update rule and its hyperparameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum Rule {
    /// Stochastic gradient descent; `momentum` 0 disables the velocity buffer.
    Sgd {
        /// Step size.
        lr: f32,
        /// Velocity decay.
        momentum: f32,
        /// Nesterov's look-ahead form.
        nesterov: bool,
        /// L2 penalty added to the gradient.
        weight_decay: f32,
    },
    /// Adam; with `decoupled`, AdamW (weight decay applied to the weights, not the gradient).
    Adam {
        /// Step size.
        lr: f32,
        /// First-moment decay.
        beta1: f32,
        /// Second-moment decay.
        beta2: f32,
        /// Added to the denominator.
        eps: f32,
        /// Weight decay.
        weight_decay: f32,
        /// AdamW's decoupled weight decay.
        decoupled: bool,
    },
    /// Adagrad.
    Adagrad {
        /// Step size.
        lr: f32,
        /// The accumulators' starting value.
        initial_accumulator: f32,
        /// Added to the denominator.
        eps: f32,
    },
    /// FTRL-Proximal with learning-rate power -1/2.
    Ftrl {
        /// Step size.
        lr: f32,
        /// L1 strength: weights whose linear term stays within it are exactly zero.
        l1: f32,
        /// L2 strength.
        l2: f32,
        /// The accumulators' starting value.
        initial_accumulator: f32,
    },
}

impl Rule {
    /// SGD without momentum.
    pub fn sgd(lr: f32) -> Self {
        Rule::Sgd { lr, momentum: 0.0, nesterov: false, weight_decay: 0.0 }
    }

    /// Adam with the usual defaults (0.9, 0.999, 1e-8).
    pub fn adam(lr: f32) -> Self {
        Rule::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, decoupled: false }
    }

    /// AdamW with the usual defaults and `weight_decay`.
    pub fn adamw(lr: f32, weight_decay: f32) -> Self {
        Rule::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay, decoupled: true }
    }

    /// Adagrad with Keras's defaults (accumulators from 0.1, eps 1e-7).
    pub fn adagrad(lr: f32) -> Self {
        Rule::Adagrad { lr, initial_accumulator: 0.1, eps: 1e-7 }
    }

    /// FTRL with Keras's defaults (accumulators from 0.1).
    pub fn ftrl(lr: f32, l1: f32, l2: f32) -> Self {
        Rule::Ftrl { lr, l1, l2, initial_accumulator: 0.1 }
    }

    /// Whether updating only the rows a batch touched equals a dense update with zero
    /// gradients elsewhere, whatever the rows hold: true for SGD without momentum or weight
    /// decay, and Adagrad. Momentum and Adam would also move untouched rows (their moments
    /// decay), so their sparse updates are the "lazy" variant (as PyTorch's SparseAdam). FTRL
    /// computes a weight from its accumulators, so a dense update resets an untouched row to
    /// what they imply: the same only for rows that start at zero, as the wide part's do.
    pub fn sparse_exact(&self) -> bool {
        match *self {
            Rule::Sgd { momentum, weight_decay, .. } => momentum == 0.0 && weight_decay == 0.0,
            Rule::Adagrad { .. } => true,
            Rule::Adam { .. } | Rule::Ftrl { .. } => false,
        }
    }

    /// The names of the rule's per-parameter state buffers.
    pub(crate) fn buffer_names(&self) -> &'static [&'static str] {
        match self {
            Rule::Sgd { momentum, .. } if *momentum == 0.0 => &[],
            Rule::Sgd { .. } => &["velocity"],
            Rule::Adam { .. } => &["m", "v"],
            Rule::Adagrad { .. } => &["accumulator"],
            Rule::Ftrl { .. } => &["accumulator", "linear"],
        }
    }

    /// The starting value of state buffer `buffer`.
    pub(crate) fn initial_value(&self, buffer: usize) -> f32 {
        match self {
            Rule::Adagrad { initial_accumulator, .. } | Rule::Ftrl { initial_accumulator, .. }
                if buffer == 0 =>
            {
                *initial_accumulator
            }
            _ => 0.0,
        }
    }

    /// The rule's step size, before any schedule.
    pub fn learning_rate(&self) -> f32 {
        match *self {
            Rule::Sgd { lr, .. }
            | Rule::Adam { lr, .. }
            | Rule::Adagrad { lr, .. }
            | Rule::Ftrl { lr, .. } => lr,
        }
    }

    /// The same rule with its step size multiplied by `factor`.
    pub(crate) fn scaled(mut self, factor: f32) -> Self {
        match &mut self {
            Rule::Sgd { lr, .. }
            | Rule::Adam { lr, .. }
            | Rule::Adagrad { lr, .. }
            | Rule::Ftrl { lr, .. } => *lr *= factor,
        }
        self
    }
}

/// An optimizer over a flat parameter buffer of fixed length.
#[derive(Debug, Clone)]
pub struct Optimizer {
    rule: Rule,
    len: usize,
    step: u64,
    buffers: Vec<Vec<f32>>,
    threads: usize,
    /// The schedule's factor on the rule's step size for the coming updates.
    scale: f32,
}

impl Optimizer {
    /// An optimizer for `len` parameters, updating on up to `threads` threads.
    pub fn new(rule: Rule, len: usize, threads: usize) -> Self {
        let buffers = (0..rule.buffer_names().len()).map(|i| vec![rule.initial_value(i); len]).collect();
        Optimizer { rule, len, step: 0, buffers, threads: threads.max(1), scale: 1.0 }
    }

    /// The rule and hyperparameters.
    pub fn rule(&self) -> Rule {
        self.rule
    }

    /// The current step size: the rule's, times the schedule's factor.
    pub fn learning_rate(&self) -> f32 {
        self.rule.learning_rate() * self.scale
    }

    /// Multiplies the rule's step size by `scale` in the updates that follow (a schedule
    /// sets it before every step; it is not state: the step number determines it).
    pub fn set_scale(&mut self, scale: f32) {
        self.scale = scale;
    }

    /// Updates applied so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// Sets the updates applied so far (a restored share of a table takes its group's count).
    pub(crate) fn set_steps(&mut self, step: u64) {
        self.step = step;
    }

    /// The state buffers by name, without copying them.
    pub(crate) fn buffers(&self) -> Vec<(&'static str, &[f32])> {
        self.rule.buffer_names().iter().copied().zip(self.buffers.iter().map(Vec::as_slice)).collect()
    }

    /// The state buffers, to write restored values into.
    pub(crate) fn state_mut(&mut self) -> &mut [Vec<f32>] {
        &mut self.buffers
    }

    /// Applies one update to `params` with `grads`.
    pub fn step(&mut self, params: &mut [f32], grads: &[f32]) -> Result<()> {
        if grads.len() != self.len {
            return Err(TrainError::InvalidArgument(format!(
                "the optimizer holds state for {} parameters, got {} gradients",
                self.len,
                grads.len()
            )));
        }
        self.advance();
        self.update(params, grads, &[Segment { param: 0, grad: 0, len: self.len }])
    }

    /// Starts the next step: the updates that follow use its step count (Adam's bias
    /// correction).
    pub fn advance(&mut self) {
        self.step += 1;
    }

    /// Updates the parts of `params` that `segments` name, each with its slice of `grads`, as
    /// the current step (see [`Optimizer::advance`]); the rest of `params` and of the
    /// optimizer's state stays as it is. Call it once per part within a step. That is
    /// how a table's touched rows are updated alone: exactly what a dense update with zero
    /// gradients elsewhere would do for SGD without momentum and Adagrad (see
    /// [`Rule::sparse_exact`]), and the "lazy" form for the others.
    pub fn update(&mut self, params: &mut [f32], grads: &[f32], segments: &[Segment]) -> Result<()> {
        if params.len() != self.len {
            return Err(TrainError::InvalidArgument(format!(
                "the optimizer holds state for {} parameters, got {}",
                self.len,
                params.len()
            )));
        }
        if let Some(s) = segments.iter().find(|s| s.param + s.len > self.len || s.grad + s.len > grads.len())
        {
            return Err(TrainError::InvalidArgument(format!(
                "segment {s:?} is outside {} parameters or {} gradients",
                self.len,
                grads.len()
            )));
        }
        let threads = self.threads;
        self.run_rule(Segments { params, grads, segments, threads });
        Ok(())
    }

    /// Applies the rule, as the current step, to the values `target` names.
    fn run_rule(&mut self, target: impl Target) {
        let t = self.step.max(1) as i32;
        match self.rule.scaled(self.scale) {
            Rule::Sgd { lr, momentum, nesterov, weight_decay } => {
                if momentum == 0.0 {
                    target.run(self.buffers_mut(), |p, g, []| {
                        for (p, &g) in p.iter_mut().zip(g) {
                            *p -= lr * (g + weight_decay * *p);
                        }
                    })
                } else {
                    target.run(self.buffers_mut(), |p, g, [v]| {
                        for ((p, &g), v) in p.iter_mut().zip(g).zip(v.iter_mut()) {
                            let g = g + weight_decay * *p;
                            *v = momentum * *v + g;
                            *p -= lr * if nesterov { g + momentum * *v } else { *v };
                        }
                    })
                }
            }
            Rule::Adam { lr, beta1, beta2, eps, weight_decay, decoupled } => {
                let (c1, c2) = (1.0 - beta1.powi(t), 1.0 - beta2.powi(t));
                // Adam adds the decay to the gradient, AdamW takes it off the weight.
                let (grad_decay, weight_decay) =
                    if decoupled { (0.0, lr * weight_decay) } else { (weight_decay, 0.0) };
                let (step, inv_c2) = (lr / c1, 1.0 / c2);
                target.run(self.buffers_mut(), |p, g, [m, v]| {
                    // Indexed over slices of one length, so the loop vectorizes.
                    let n = p.len();
                    let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
                    for i in 0..n {
                        let g = g[i] + grad_decay * p[i];
                        m[i] = beta1 * m[i] + (1.0 - beta1) * g;
                        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
                        p[i] = p[i] - weight_decay * p[i] - step * m[i] / ((v[i] * inv_c2).sqrt() + eps);
                    }
                })
            }
            Rule::Adagrad { lr, eps, .. } => target.run(self.buffers_mut(), |p, g, [acc]| {
                for ((p, &g), a) in p.iter_mut().zip(g).zip(acc.iter_mut()) {
                    *a += g * g;
                    *p -= lr * g / (a.sqrt() + eps);
                }
            }),
            Rule::Ftrl { lr, l1, l2, .. } => target.run(self.buffers_mut(), |p, g, [acc, linear]| {
                for (((p, &g), a), z) in p.iter_mut().zip(g).zip(acc.iter_mut()).zip(linear.iter_mut()) {
                    let fresh = *a + g * g;
                    let sigma = (fresh.sqrt() - a.sqrt()) / lr;
                    *z += g - sigma * *p;
                    *a = fresh;
                    let quadratic = fresh.sqrt() / lr + 2.0 * l2;
                    *p = if z.abs() > l1 { (l1 * z.signum() - *z) / quadratic } else { 0.0 };
                }
            }),
        }
    }

    /// Updates `rows.len()` rows of `width` values, row `i` starting at `rows[i]` in `params`
    /// (and the state), with `grads` holding their gradients row after row. The starts must
    /// ascend without overlapping rows (a batch's distinct ids give that): each row is then
    /// updated where it lies, in one pass, and a long run of rows is split across threads.
    pub fn update_rows(
        &mut self,
        params: &mut [f32],
        grads: &[f32],
        rows: &[usize],
        width: usize,
    ) -> Result<()> {
        let ascending = rows.windows(2).all(|pair| pair[0] + width <= pair[1]);
        let inside = rows.last().is_none_or(|&last| last + width <= self.len);
        if grads.len() != rows.len() * width || params.len() != self.len || !ascending || !inside {
            return Err(TrainError::InvalidArgument(format!(
                "{} rows of {width} with {} gradients, in {} of {} parameters{}",
                rows.len(),
                grads.len(),
                params.len(),
                self.len,
                if ascending { "" } else { " (row starts must ascend without overlapping)" }
            )));
        }
        let threads = self.threads;
        self.run_rule(Rows { params, grads, starts: rows, width, threads });
        Ok(())
    }

    fn buffers_mut<const K: usize>(&mut self) -> [&mut [f32]; K] {
        let mut it = self.buffers.iter_mut();
        std::array::from_fn(|_| it.next().expect("the rule's buffers").as_mut_slice())
    }

    /// The state to save in a checkpoint.
    pub fn state(&self) -> OptimizerState {
        OptimizerState {
            step: self.step,
            buffers: self
                .rule
                .buffer_names()
                .iter()
                .map(|n| n.to_string())
                .zip(self.buffers.clone())
                .collect(),
        }
    }

    /// Restores a saved state; its buffers must be this optimizer's, by name and length.
    pub fn load_state(&mut self, state: OptimizerState) -> Result<()> {
        let names: Vec<&str> = state.buffers.iter().map(|(n, _)| n.as_str()).collect();
        if names != self.rule.buffer_names() {
            return Err(TrainError::StateMismatch(format!(
                "optimizer buffers {names:?}, expected {:?}",
                self.rule.buffer_names()
            )));
        }
        if let Some((name, b)) = state.buffers.iter().find(|(_, b)| b.len() != self.len) {
            return Err(TrainError::StateMismatch(format!(
                "optimizer buffer '{name}' holds {} values for {} parameters",
                b.len(),
                self.len
            )));
        }
        self.step = state.step;
        self.buffers = state.buffers.into_iter().map(|(_, b)| b).collect();
        Ok(())
    }
}

/// The values one update covers, and how its work is split: `run` calls `update` on matching
/// slices of the parameters, their gradients and the rule's `K` state buffers.
trait Target {
    fn run<const K: usize>(
        self,
        buffers: [&mut [f32]; K],
        update: impl Fn(&mut [f32], &[f32], [&mut [f32]; K]) + Sync,
    );
}

/// Segments of the parameters (checked to lie inside them), a long one split across threads.
struct Segments<'a> {
    params: &'a mut [f32],
    grads: &'a [f32],
    segments: &'a [Segment],
    threads: usize,
}

impl Target for Segments<'_> {
    fn run<const K: usize>(
        self,
        mut buffers: [&mut [f32]; K],
        update: impl Fn(&mut [f32], &[f32], [&mut [f32]; K]) + Sync,
    ) {
        for s in self.segments {
            let p = &mut self.params[s.param..s.param + s.len];
            let g = &self.grads[s.grad..s.grad + s.len];
            let states = buffers.each_mut().map(|b| &mut b[s.param..s.param + s.len]);
            let parts = self.threads.min(s.len / VALUES_PER_THREAD).max(1);
            fused(parts, p, g, states, &update);
        }
    }
}

/// Rows of `width` values at ascending, non-overlapping `starts` (checked), with their
/// gradients row after row; many rows are split across threads by row.
struct Rows<'a> {
    params: &'a mut [f32],
    grads: &'a [f32],
    starts: &'a [usize],
    width: usize,
    threads: usize,
}

impl Target for Rows<'_> {
    fn run<const K: usize>(
        self,
        buffers: [&mut [f32]; K],
        update: impl Fn(&mut [f32], &[f32], [&mut [f32]; K]) + Sync,
    ) {
        let Rows { params, grads, starts, width, threads } = self;
        let parts = threads.min(starts.len() * width / VALUES_PER_THREAD).max(1);
        if parts <= 1 {
            return each_row(params, 0, grads, starts, width, buffers, &update);
        }
        thread::scope(|scope| {
            // Each part takes the values from its first row's start to the next part's.
            let (mut params, mut states, mut base) = (params, buffers, 0);
            for i in 0..parts {
                let (first, end) = (i * starts.len() / parts, (i + 1) * starts.len() / parts);
                let split = starts.get(end).map_or(params.len(), |&next| next - base);
                let (p, p_rest) = params.split_at_mut(split);
                let (heads, rests) = split_each(states, split);
                let (g, mine) = (&grads[first * width..end * width], &starts[first..end]);
                let update = &update;
                scope.spawn(move || each_row(p, base, g, mine, width, heads, update));
                (params, states, base) = (p_rest, rests, base + split);
            }
        });
    }
}

/// Calls `update` on each row where it lies; `params` and `states` begin at value `base`.
fn each_row<const K: usize>(
    params: &mut [f32],
    base: usize,
    grads: &[f32],
    starts: &[usize],
    width: usize,
    mut states: [&mut [f32]; K],
    update: &impl Fn(&mut [f32], &[f32], [&mut [f32]; K]),
) {
    for (&start, g) in starts.iter().zip(grads.chunks_exact(width.max(1))) {
        let at = start - base;
        update(&mut params[at..at + width], g, states.each_mut().map(|s| &mut s[at..at + width]));
    }
}

/// Runs `update` over `parts` aligned slices of the parameters, gradients and state buffers,
/// one thread per part.
fn fused<const K: usize>(
    parts: usize,
    params: &mut [f32],
    grads: &[f32],
    states: [&mut [f32]; K],
    update: impl Fn(&mut [f32], &[f32], [&mut [f32]; K]) + Sync,
) {
    if parts <= 1 {
        return update(params, grads, states);
    }
    let total = params.len();
    thread::scope(|scope| {
        let (mut params, mut grads, mut states) = (params, grads, states);
        for i in 0..parts {
            let len = (i + 1) * total / parts - i * total / parts;
            let (p, p_rest) = params.split_at_mut(len);
            let (g, g_rest) = grads.split_at(len);
            let (heads, rests) = split_each(states, len);
            let update = &update;
            scope.spawn(move || update(p, g, heads));
            (params, grads, states) = (p_rest, g_rest, rests);
        }
    });
}

/// Each of the state buffers split at `at`: their heads and their rests.
fn split_each<const K: usize>(states: [&mut [f32]; K], at: usize) -> ([&mut [f32]; K], [&mut [f32]; K]) {
    let mut rests = Vec::with_capacity(K);
    let heads = states.map(|s| {
        let (head, rest) = s.split_at_mut(at);
        rests.push(rest);
        head
    });
    (heads, rests.try_into().unwrap_or_else(|_| unreachable!("K rests")))
}
