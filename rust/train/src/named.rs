//! Models and update rules built from the names and keyword settings that users write
//! (`model="wide_deep"`, `optimizer="adamw"`, `weight_decay=0.01`): the one place where the
//! defaults of each rule's hyperparameters, the default learning rates and the model shapes
//! live, so the Python API and any configuration file share them.

use std::collections::BTreeMap;

use crate::error::{Result, TrainError};
use crate::export::ModelKind;
use crate::loss::Loss;
use crate::optim::Rule;

/// The models, by name.
pub const MODELS: [&str; 5] = ["logistic_regression", "mlp", "wide_deep", "deep_fm", "dcn"];

/// The losses, by name.
pub const LOSSES: [&str; 3] = ["binary_cross_entropy", "softmax_cross_entropy", "mean_squared_error"];

/// The update rules by name, with their default learning rates.
pub const LEARNING_RATES: [(&str, f64); 6] =
    [("sgd", 0.01), ("momentum", 0.01), ("adam", 0.001), ("adamw", 0.001), ("adagrad", 0.01), ("ftrl", 0.05)];

/// The hyperparameters an update rule may be given by name (each rule reads its own).
pub const HYPERPARAMETERS: [&str; 9] =
    ["momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps", "l1", "l2", "initial_accumulator"];

/// The hidden layer widths of the MLP when none are given.
pub const MLP_HIDDEN: [usize; 2] = [256, 256];
/// The hidden layer widths of Wide&Deep's and DeepFM's deep part when none are given.
pub const DEEP_HIDDEN: [usize; 2] = [256, 128];
/// Values per embedding of Wide&Deep, DeepFM and DCN when not given.
pub const EMBEDDING_DIM: usize = 8;
/// Cross layers of DCN when not given.
pub const CROSS_LAYERS: usize = 3;

fn invalid(message: String) -> TrainError {
    TrainError::InvalidArgument(message)
}

impl Rule {
    /// The rule called `name` (one of [`LEARNING_RATES`]' names) with step size
    /// `learning_rate` (the rule's default when None) and the hyperparameters in `settings`
    /// (names from [`HYPERPARAMETERS`]; `nesterov` is true when non-zero). A rule ignores the
    /// settings it has no use for, as Keras's optimizers ignore foreign keyword arguments.
    pub fn named(name: &str, learning_rate: Option<f64>, settings: &BTreeMap<String, f64>) -> Result<Rule> {
        let Some(&(_, default_lr)) = LEARNING_RATES.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = LEARNING_RATES.iter().map(|(n, _)| *n).collect();
            return Err(invalid(format!("optimizer '{name}': use one of {names:?}")));
        };
        if let Some(unknown) = settings.keys().find(|k| !HYPERPARAMETERS.contains(&k.as_str())) {
            return Err(invalid(format!(
                "unknown optimizer setting '{unknown}' (known: {})",
                HYPERPARAMETERS.join(", ")
            )));
        }
        let lr = learning_rate.unwrap_or(default_lr) as f32;
        if !(lr.is_finite() && lr > 0.0) {
            return Err(invalid(format!("learning_rate={lr} must be a positive number")));
        }
        for (key, &value) in settings {
            check_setting(key, value)?;
        }
        let get = |key: &str, default: f32| settings.get(key).map_or(default, |&v| v as f32);
        Ok(match name {
            "sgd" | "momentum" => Rule::Sgd {
                lr,
                momentum: get("momentum", if name == "momentum" { 0.9 } else { 0.0 }),
                nesterov: get("nesterov", 0.0) != 0.0,
                weight_decay: get("weight_decay", 0.0),
            },
            "adam" | "adamw" => Rule::Adam {
                lr,
                beta1: get("beta1", 0.9),
                beta2: get("beta2", 0.999),
                eps: get("eps", 1e-8),
                weight_decay: get("weight_decay", if name == "adamw" { 0.01 } else { 0.0 }),
                decoupled: name == "adamw",
            },
            "adagrad" => Rule::Adagrad {
                lr,
                initial_accumulator: get("initial_accumulator", 0.1),
                eps: get("eps", 1e-7),
            },
            _ => Rule::Ftrl {
                lr,
                l1: get("l1", 0.0),
                l2: get("l2", 0.0),
                initial_accumulator: get("initial_accumulator", 0.1),
            },
        })
    }
}

/// Refuses a rule's setting outside the values its update is defined for: out of them the
/// update divides by zero, takes the root of a negative number or grows without bound, and
/// training goes on with NaN weights rather than failing.
fn check_setting(key: &str, value: f64) -> Result<()> {
    let (ok, range) = match key {
        "momentum" | "beta1" | "beta2" => ((0.0..1.0).contains(&value), "from 0 up to (not including) 1"),
        "eps" => (value > 0.0, "above 0"),
        "weight_decay" | "l1" | "l2" | "initial_accumulator" => (value >= 0.0, "0 or more"),
        _ => (true, ""),
    };
    if value.is_finite() && ok {
        return Ok(());
    }
    Err(invalid(format!("{key}={value} must be a number {range}")))
}

impl Loss {
    /// The loss called `name` (one of [`LOSSES`]) for a model of `classes` outputs; None:
    /// binary cross-entropy for one output, softmax cross-entropy for several.
    pub fn named(name: Option<&str>, classes: usize) -> Result<Loss> {
        let loss = match name {
            None if classes > 1 => Loss::SoftmaxCrossEntropy,
            None | Some("binary_cross_entropy") => Loss::BinaryCrossEntropy,
            Some("softmax_cross_entropy") => Loss::SoftmaxCrossEntropy,
            Some("mean_squared_error") => Loss::MeanSquaredError,
            Some(other) => return Err(invalid(format!("loss '{other}': use one of {LOSSES:?}"))),
        };
        match (loss, classes) {
            (Loss::SoftmaxCrossEntropy, 1) => {
                Err(invalid("loss 'softmax_cross_entropy' needs classes=2 or more".into()))
            }
            (Loss::BinaryCrossEntropy | Loss::MeanSquaredError, c) if c > 1 => Err(invalid(format!(
                "loss '{}' takes one output: classes={c} needs 'softmax_cross_entropy'",
                loss.name()
            ))),
            _ => Ok(loss),
        }
    }
}

impl ModelKind {
    /// The model called `name` (one of [`MODELS`]) with `classes` outputs (1: a binary
    /// model), its hidden layer widths (the model's default when None) and, for Wide&Deep,
    /// DeepFM and DCN, `dim` values per embedding; DCN has `cross_layers` cross layers.
    pub fn named(
        name: &str,
        classes: usize,
        hidden: Option<Vec<usize>>,
        dim: Option<usize>,
        cross_layers: Option<usize>,
    ) -> Result<Self> {
        if classes < 1 {
            return Err(invalid(format!("classes={classes} must be at least 1")));
        }
        if let Some(h) = &hidden
            && h.contains(&0)
        {
            return Err(invalid(format!("hidden={h:?}: every layer needs at least one unit")));
        }
        if dim == Some(0) {
            return Err(invalid("dim=0: embeddings need at least one value".into()));
        }
        if cross_layers.is_some() && name != "dcn" {
            return Err(invalid(format!("cross_layers is a setting of 'dcn', not of '{name}'")));
        }
        let deep = |hidden: Option<Vec<usize>>| hidden.unwrap_or_else(|| DEEP_HIDDEN.to_vec());
        match name {
            "logistic_regression" => Ok(ModelKind::LogisticRegression { outputs: classes }),
            "mlp" => {
                Ok(ModelKind::Mlp { hidden: hidden.unwrap_or_else(|| MLP_HIDDEN.to_vec()), outputs: classes })
            }
            "wide_deep" | "deep_fm" | "dcn" if classes != 1 => Err(invalid(format!(
                "{name} is a binary model; classes={classes} needs 'mlp' or 'logistic_regression'"
            ))),
            "wide_deep" => {
                Ok(ModelKind::WideDeep { dim: dim.unwrap_or(EMBEDDING_DIM), hidden: deep(hidden) })
            }
            "deep_fm" => Ok(ModelKind::DeepFm { dim: dim.unwrap_or(EMBEDDING_DIM), hidden: deep(hidden) }),
            "dcn" => Ok(ModelKind::Dcn {
                dim: dim.unwrap_or(EMBEDDING_DIM),
                hidden: deep(hidden),
                cross_layers: cross_layers.unwrap_or(CROSS_LAYERS),
            }),
            other => Err(invalid(format!("model '{other}': use one of {MODELS:?}"))),
        }
    }

    /// The model's name, as [`ModelKind::named`] takes it.
    pub fn name(&self) -> &'static str {
        match self {
            ModelKind::LogisticRegression { .. } => "logistic_regression",
            ModelKind::Mlp { .. } => "mlp",
            ModelKind::WideDeep { .. } => "wide_deep",
            ModelKind::DeepFm { .. } => "deep_fm",
            ModelKind::Dcn { .. } => "dcn",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn every_rule_takes_its_default_learning_rate() {
        for (name, lr) in LEARNING_RATES {
            let rule = Rule::named(name, None, &BTreeMap::new()).unwrap();
            let got = match rule {
                Rule::Sgd { lr, .. }
                | Rule::Adam { lr, .. }
                | Rule::Adagrad { lr, .. }
                | Rule::Ftrl { lr, .. } => lr,
            };
            assert_eq!(got, lr as f32, "{name}");
        }
    }

    #[test]
    fn named_rules_match_the_constructors() {
        let none = BTreeMap::new();
        assert_eq!(Rule::named("adam", Some(0.1), &none).unwrap(), Rule::adam(0.1));
        assert_eq!(Rule::named("adamw", Some(0.1), &none).unwrap(), Rule::adamw(0.1, 0.01));
        assert_eq!(Rule::named("adagrad", Some(0.1), &none).unwrap(), Rule::adagrad(0.1));
        assert_eq!(
            Rule::named("ftrl", Some(0.1), &settings(&[("l1", 0.5)])).unwrap(),
            Rule::ftrl(0.1, 0.5, 0.0)
        );
        assert_eq!(
            Rule::named("momentum", Some(0.1), &settings(&[("nesterov", 1.0)])).unwrap(),
            Rule::Sgd { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0 }
        );
    }

    #[test]
    fn unknown_names_and_bad_rates_are_refused_by_name() {
        let err = Rule::named("adamax", None, &BTreeMap::new()).unwrap_err().to_string();
        assert!(err.contains("adamax") && err.contains("adagrad"), "{err}");
        let err = Rule::named("adam", None, &settings(&[("beta3", 0.5)])).unwrap_err().to_string();
        assert!(err.contains("beta3"), "{err}");
        let err = Rule::named("sgd", Some(-1.0), &BTreeMap::new()).unwrap_err().to_string();
        assert!(err.contains("learning_rate"), "{err}");
    }

    #[test]
    fn settings_out_of_their_rules_range_are_refused_by_name() {
        let refused = [
            ("adam", "beta1", 1.5),
            ("adam", "beta2", -0.1),
            ("adam", "eps", -1.0),
            ("adam", "eps", 0.0),
            ("momentum", "momentum", 2.0),
            ("momentum", "momentum", -0.5),
            ("adamw", "weight_decay", -1.0),
            ("adagrad", "initial_accumulator", -1.0),
            ("ftrl", "l1", -1.0),
            ("ftrl", "l2", f64::NAN),
        ];
        for (rule, key, value) in refused {
            let err = Rule::named(rule, None, &settings(&[(key, value)])).unwrap_err().to_string();
            assert!(err.starts_with(&format!("{key}={value} must be a number")), "{err}");
        }
        for (key, value) in [("beta1", 0.0), ("momentum", 0.99), ("l1", 0.0), ("initial_accumulator", 0.0)] {
            assert!(Rule::named("ftrl", None, &settings(&[(key, value)])).is_ok(), "{key}={value}");
        }
    }

    #[test]
    fn models_take_their_default_shapes_and_refuse_bad_ones() {
        assert_eq!(
            ModelKind::named("mlp", 1, None, None, None).unwrap(),
            ModelKind::Mlp { hidden: MLP_HIDDEN.to_vec(), outputs: 1 }
        );
        assert_eq!(
            ModelKind::named("deep_fm", 1, Some(vec![4]), Some(3), None).unwrap(),
            ModelKind::DeepFm { dim: 3, hidden: vec![4] }
        );
        for name in MODELS {
            assert_eq!(ModelKind::named(name, 1, None, None, None).unwrap().name(), name);
        }
        assert!(
            ModelKind::named("wide_deep", 3, None, None, None).unwrap_err().to_string().contains("binary")
        );
        assert!(ModelKind::named("mlp", 0, None, None, None).unwrap_err().to_string().contains("classes"));
        assert!(ModelKind::named("cnn", 1, None, None, None).unwrap_err().to_string().contains("cnn"));
        assert_eq!(
            ModelKind::named("dcn", 1, None, Some(4), Some(2)).unwrap(),
            ModelKind::Dcn { dim: 4, hidden: DEEP_HIDDEN.to_vec(), cross_layers: 2 }
        );
        let err = ModelKind::named("mlp", 1, None, None, Some(2)).unwrap_err().to_string();
        assert!(err.contains("cross_layers"), "{err}");
    }

    #[test]
    fn losses_follow_the_classes() {
        assert_eq!(Loss::named(None, 1).unwrap(), Loss::BinaryCrossEntropy);
        assert_eq!(Loss::named(None, 3).unwrap(), Loss::SoftmaxCrossEntropy);
        assert_eq!(Loss::named(Some("mean_squared_error"), 1).unwrap(), Loss::MeanSquaredError);
        assert!(Loss::named(Some("mean_squared_error"), 3).unwrap_err().to_string().contains("classes=3"));
        assert!(Loss::named(Some("softmax_cross_entropy"), 1).is_err());
        assert!(Loss::named(Some("hinge"), 1).unwrap_err().to_string().contains("hinge"));
        for name in LOSSES {
            let classes = if name == "softmax_cross_entropy" { 2 } else { 1 };
            assert_eq!(Loss::named(Some(name), classes).unwrap().name(), name);
        }
    }
}
