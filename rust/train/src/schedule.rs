//! Learning-rate schedules: a factor on every optimizer's step size, a pure function of the
//! step number, so every worker uses the same rate at every step and a resumed run picks the
//! schedule up where it stopped (the step is in the checkpoint).
//!
//! A linear warm-up of `warmup_steps` comes first (the factor climbs from `1/warmup_steps` at
//! step 1 to 1), then the decay counts its steps from the end of the warm-up. The decays
//! follow Keras's `StepDecay`-style staircase, `ExponentialDecay` and `CosineDecay`.

use std::f64::consts::PI;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

/// How the step size decays after the warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum Decay {
    /// The step size stays where the warm-up left it.
    #[default]
    Constant,
    /// Multiplied by `rate` every `every` steps (a staircase).
    Step {
        /// Steps between drops.
        every: u64,
        /// The factor of each drop.
        rate: f64,
    },
    /// Multiplied by `rate` every `every` steps, smoothly: `rate^(t / every)`.
    Exponential {
        /// Steps over which the factor falls by `rate`.
        every: u64,
        /// The factor per `every` steps.
        rate: f64,
    },
    /// Half a cosine from 1 down to `alpha` over `steps` steps, then `alpha`.
    Cosine {
        /// Steps of the decay.
        steps: u64,
        /// The final factor.
        #[serde(default)]
        alpha: f64,
    },
}

/// A warm-up followed by a decay; the default changes nothing. As JSON, the decay's fields
/// sit beside `warmup_steps`: `{"name": "cosine", "steps": 10000, "warmup_steps": 500}`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Schedule {
    /// Steps of linear warm-up before the decay starts.
    #[serde(default)]
    pub warmup_steps: u64,
    /// The decay after the warm-up.
    #[serde(flatten)]
    pub decay: Decay,
}

impl Schedule {
    /// Checks the settings; `parameter` names the schedule in errors.
    pub fn validate(&self, parameter: &str) -> Result<()> {
        let bad = |what: String| Err(TrainError::InvalidArgument(format!("{parameter}: {what}")));
        match self.decay {
            Decay::Constant => Ok(()),
            Decay::Step { every: 0, .. } | Decay::Exponential { every: 0, .. } => {
                bad("every must be at least 1".into())
            }
            Decay::Step { rate, .. } | Decay::Exponential { rate, .. } if !(rate > 0.0 && rate <= 1.0) => {
                bad(format!("rate={rate} must be in (0, 1]"))
            }
            Decay::Cosine { steps: 0, .. } => bad("steps must be at least 1".into()),
            Decay::Cosine { alpha, .. } if !(0.0..=1.0).contains(&alpha) => {
                bad(format!("alpha={alpha} must be in [0, 1]"))
            }
            _ => Ok(()),
        }
    }

    /// The factor on the step size at `step` (counted from 1).
    pub fn factor(&self, step: u64) -> f32 {
        let step = step.max(1);
        if step <= self.warmup_steps {
            return (step as f64 / self.warmup_steps as f64) as f32;
        }
        let t = (step - self.warmup_steps) as f64;
        let factor = match self.decay {
            Decay::Constant => 1.0,
            Decay::Step { every, rate } => rate.powf((t / every as f64).floor()),
            Decay::Exponential { every, rate } => rate.powf(t / every as f64),
            Decay::Cosine { steps, alpha } => {
                let done = t.min(steps as f64) / steps as f64;
                alpha + (1.0 - alpha) * 0.5 * (1.0 + (PI * done).cos())
            }
        };
        factor as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_climbs_linearly_then_the_decay_starts() {
        let s = Schedule { warmup_steps: 4, decay: Decay::Step { every: 10, rate: 0.5 } };
        let f: Vec<f32> = [1, 2, 4, 5, 13, 14, 24].iter().map(|&t| s.factor(t)).collect();
        assert_eq!(f, vec![0.25, 0.5, 1.0, 1.0, 1.0, 0.5, 0.25]);
    }

    #[test]
    fn cosine_reaches_alpha_and_stays() {
        let s = Schedule { warmup_steps: 0, decay: Decay::Cosine { steps: 100, alpha: 0.1 } };
        assert!((s.factor(50) - 0.55).abs() < 1e-6);
        assert!((s.factor(100) - 0.1).abs() < 1e-6);
        assert!((s.factor(1000) - 0.1).abs() < 1e-6);
    }

    #[test]
    fn exponential_is_smooth() {
        let s = Schedule { warmup_steps: 0, decay: Decay::Exponential { every: 10, rate: 0.5 } };
        assert!((s.factor(5) - 0.5f32.powf(0.5)).abs() < 1e-6);
        assert!((s.factor(20) - 0.25).abs() < 1e-6);
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let s = Schedule { warmup_steps: 0, decay: Decay::Step { every: 0, rate: 0.5 } };
        assert!(s.validate("lr_schedule").unwrap_err().to_string().contains("lr_schedule: every"));
        let s = Schedule { warmup_steps: 0, decay: Decay::Exponential { every: 5, rate: 1.5 } };
        assert!(s.validate("lr_schedule").unwrap_err().to_string().contains("rate=1.5"));
        let json = r#"{"name": "cosine", "steps": 10, "warmup_steps": 3}"#;
        let s: Schedule = serde_json::from_str(json).unwrap();
        assert_eq!(s, Schedule { warmup_steps: 3, decay: Decay::Cosine { steps: 10, alpha: 0.0 } });
        let unknown = serde_json::from_str::<Schedule>(r#"{"name": "cosine", "steps": 10, "rate": 2}"#);
        assert!(unknown.unwrap_err().to_string().contains("rate"));
    }
}
