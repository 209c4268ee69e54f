//! L1 and L2 penalties per group of parameters, as Keras's `kernel_regularizer`,
//! `bias_regularizer` and `embeddings_regularizer` give them: the penalty
//! `l1·Σ|w| + l2·Σw²` of a group is added to the loss, so its gradient
//! `l1·sign(w) + 2·l2·w` is added to the averaged gradient of every step, before clipping and
//! the update. The loss the engine reports stays the data's own.
//!
//! Embedding tables are penalised on the rows a step touches (all rows with `sparse_tables`
//! off): a penalty on every row would make every step's table gradient dense.

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::params::Entry;

/// One group's penalty strengths.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Penalty {
    /// The L1 strength.
    #[serde(default)]
    pub l1: f32,
    /// The L2 strength.
    #[serde(default)]
    pub l2: f32,
}

impl Penalty {
    /// Whether the penalty does anything.
    pub fn is_zero(&self) -> bool {
        self.l1 == 0.0 && self.l2 == 0.0
    }

    /// Adds the penalty's gradient at `weights` to `grads`.
    pub fn add_gradient(&self, weights: &[f32], grads: &mut [f32]) {
        if self.is_zero() {
            return;
        }
        let (l1, twice_l2) = (self.l1, 2.0 * self.l2);
        for (g, &w) in grads.iter_mut().zip(weights) {
            // sign(0) is 0: a weight at zero feels no L1 pull, as in Keras.
            let sign = if w > 0.0 {
                1.0
            } else if w < 0.0 {
                -1.0
            } else {
                0.0
            };
            *g += l1 * sign + twice_l2 * w;
        }
    }
}

/// Which group a parameter belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A dense layer's weight matrix (`.../kernel`).
    Kernel,
    /// A dense layer's bias (`.../bias`).
    Bias,
    /// An embedding table (and the first-order weights per id).
    Embedding,
}

impl Role {
    /// The group of `entry`, from its kind and name.
    pub fn of(entry: &Entry) -> Role {
        if entry.table {
            Role::Embedding
        } else if entry.name.ends_with("bias") {
            Role::Bias
        } else {
            Role::Kernel
        }
    }
}

/// The penalties of every group; the default penalises nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regularization {
    /// On dense layers' weight matrices.
    #[serde(default)]
    pub kernel: Penalty,
    /// On biases.
    #[serde(default)]
    pub bias: Penalty,
    /// On embedding tables.
    #[serde(default)]
    pub embedding: Penalty,
}

impl Regularization {
    /// The penalty of `entry`'s group.
    pub fn of(&self, entry: &Entry) -> Penalty {
        match Role::of(entry) {
            Role::Kernel => self.kernel,
            Role::Bias => self.bias,
            Role::Embedding => self.embedding,
        }
    }

    /// Whether any group is penalised.
    pub fn is_zero(&self) -> bool {
        self.kernel.is_zero() && self.bias.is_zero() && self.embedding.is_zero()
    }

    /// Checks every strength is a finite, non-negative number.
    pub fn validate(&self) -> Result<()> {
        for (group, p) in [("kernel", self.kernel), ("bias", self.bias), ("embedding", self.embedding)] {
            for (name, v) in [("l1", p.l1), ("l2", p.l2)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(TrainError::InvalidArgument(format!(
                        "regularization: {group}.{name}={v} must be a non-negative number"
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gradient_is_l1_sign_plus_twice_l2_w() {
        let p = Penalty { l1: 0.1, l2: 0.5 };
        let mut g = vec![1.0, 1.0, 1.0];
        p.add_gradient(&[2.0, -1.0, 0.0], &mut g);
        assert_eq!(g, vec![1.0 + 0.1 + 2.0, 1.0 - 0.1 - 1.0, 1.0]);
    }

    #[test]
    fn groups_follow_the_parameter_names() {
        let entry =
            |name: &str, table: bool| Entry { name: name.into(), shape: vec![2, 2], offset: 0, table };
        let r = Regularization {
            kernel: Penalty { l1: 1.0, l2: 0.0 },
            bias: Penalty { l1: 2.0, l2: 0.0 },
            embedding: Penalty { l1: 3.0, l2: 0.0 },
        };
        assert_eq!(r.of(&entry("deep/dense_0/kernel", false)).l1, 1.0);
        assert_eq!(r.of(&entry("wide/bias", false)).l1, 2.0);
        assert_eq!(r.of(&entry("deep/embeddings", true)).l1, 3.0);
        let bad = Regularization { kernel: Penalty { l1: -1.0, l2: 0.0 }, ..Default::default() };
        assert!(bad.validate().unwrap_err().to_string().contains("kernel.l1=-1"));
    }
}
