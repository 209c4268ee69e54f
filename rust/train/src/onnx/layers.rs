//! The built-in models as ONNX operators over the exported weights, mirroring
//! [`crate::model`] and [`crate::embedding`] layer by layer and in the same order of sums.

use super::graph::{Attr, Graph};
use crate::error::{Result, TrainError};
use crate::export::{Exported, ModelKind};
use crate::features::Pooling;

/// A multi-hot column in the graph: its values' ids, which slots hold a value, and how many.
pub(crate) struct Bag {
    /// `[batch, values]` int64 ids.
    pub(crate) ids: String,
    /// `[batch, values, 1]` float32: 1 where a slot holds a value, 0 in padding.
    pub(crate) mask: String,
    /// `[batch, 1, 1]` float32: the values per row, at least 1 (a mean's divisor).
    pub(crate) count: String,
    pub(crate) pooling: Pooling,
}

impl Bag {
    /// The bag of ids `ids` whose slots `present` (bool `[batch, values]`) says are used.
    pub(crate) fn new(g: &mut Graph, ids: String, present: &str, pooling: Pooling) -> Self {
        let float =
            g.op("Cast", &[present], &[Attr::Int("to", super::proto::tensor_proto::DataType::Float as i64)]);
        let axes = g.int64s("axes", &[1], &[2]);
        let mask = g.op("Unsqueeze", &[&float, &axes], &[]);
        let values = sum(g, &mask, 1, true);
        let one = g.floats(&format!("{values}_one"), &[], &[1.0]);
        let count = g.op("Max", &[&values, &one], &[]);
        Bag { ids, mask, count, pooling }
    }
}

/// Adds the parameter `name` of `model` as an initializer of the same name.
fn weight(g: &mut Graph, model: &Exported, name: &str) -> Result<String> {
    let (shape, values) = model
        .parameter(name)
        .ok_or_else(|| TrainError::StateMismatch(format!("the exported model has no parameter '{name}'")))?;
    Ok(g.floats(name, shape, values))
}

/// `x W + b`, through a ReLU when `relu`: the layer `{name}/kernel`, `{name}/bias`.
fn dense(g: &mut Graph, model: &Exported, x: &str, name: &str, relu: bool) -> Result<String> {
    let kernel = weight(g, model, &format!("{name}/kernel"))?;
    let bias = weight(g, model, &format!("{name}/bias"))?;
    let product = g.op("MatMul", &[x, &kernel], &[]);
    let y = g.op("Add", &[&product, &bias], &[]);
    Ok(if relu { g.op("Relu", &[&y], &[]) } else { y })
}

/// The layers `{name}_0` ... `{name}_{hidden}` with ReLU between them.
fn tower(g: &mut Graph, model: &Exported, x: &str, name: &str, hidden: usize) -> Result<String> {
    let mut x = x.to_string();
    for i in 0..=hidden {
        x = dense(g, model, &x, &format!("{name}_{i}"), i < hidden)?;
    }
    Ok(x)
}

/// `ReduceSum` over `axis`.
fn sum(g: &mut Graph, x: &str, axis: i64, keep: bool) -> String {
    let axes = g.int64s("axes", &[1], &[axis]);
    g.op("ReduceSum", &[x, &axes], &[Attr::Int("keepdims", keep as i64)])
}

/// `[batch, fields, width]`: the rows of the table `name` for every id of `ids` (`[batch,
/// ids]`, None without categorical or crossed columns), then each bag's rows pooled, as
/// [`crate::batch::Lookup::embed`] lays them out.
fn fields(g: &mut Graph, model: &Exported, name: &str, ids: Option<&str>, bags: &[Bag]) -> Result<String> {
    let table = weight(g, model, name)?;
    let mut parts = Vec::new();
    if let Some(ids) = ids {
        parts.push(g.op("Gather", &[&table, ids], &[Attr::Int("axis", 0)]));
    }
    for bag in bags {
        let rows = g.op("Gather", &[&table, &bag.ids], &[Attr::Int("axis", 0)]);
        let kept = g.op("Mul", &[&rows, &bag.mask], &[]);
        let pooled = sum(g, &kept, 1, true);
        parts.push(match bag.pooling {
            Pooling::Sum => pooled,
            Pooling::Mean => g.op("Div", &[&pooled, &bag.count], &[]),
        });
    }
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    Ok(if refs.len() == 1 { parts[0].clone() } else { g.op("Concat", &refs, &[Attr::Int("axis", 1)]) })
}

/// `[batch, outputs]` logits of `model`, from the graph's `dense` values (None when the model
/// takes none), `ids` (None for models without embeddings, or without categorical and crossed
/// columns) and `bags` (its multi-hot columns).
pub(crate) fn logits(
    g: &mut Graph,
    model: &Exported,
    dense_in: Option<&str>,
    ids: Option<&str>,
    bags: &[Bag],
) -> Result<String> {
    let spec = model.features();
    let need = |x: Option<&str>, what: &str| {
        x.map(str::to_string).ok_or_else(|| {
            TrainError::InvalidArgument(format!("a {} model needs {what}", model.kind().name()))
        })
    };
    match model.kind() {
        ModelKind::LogisticRegression { .. } => {
            dense(g, model, &need(dense_in, "dense features")?, "linear", false)
        }
        ModelKind::Mlp { hidden, .. } => {
            tower(g, model, &need(dense_in, "dense features")?, "dense", hidden.len())
        }
        ModelKind::WideDeep { dim, hidden }
        | ModelKind::DeepFm { dim, hidden }
        | ModelKind::Dcn { dim, hidden, .. } => {
            if ids.is_none() && bags.is_empty() {
                need(None, "categorical, crossed or multi-hot columns")?;
            }
            // First order: the ids' own weights, summed, plus the linear part or the bias.
            let wide = fields(g, model, "wide/ids", ids, bags)?;
            let wide = sum(g, &wide, 1, false);
            let first = match dense_in {
                Some(x) => {
                    let linear = dense(g, model, x, "wide/dense", false)?;
                    g.op("Add", &[&wide, &linear], &[])
                }
                None => {
                    let bias = weight(g, model, "wide/bias")?;
                    g.op("Add", &[&wide, &bias], &[])
                }
            };
            // Deep: the embeddings, flattened per example, beside the dense values.
            let e = fields(g, model, "deep/embeddings", ids, bags)?;
            let flat_shape = g.int64s("flat_shape", &[2], &[0, (spec.fields() * dim) as i64]);
            let flat = g.op("Reshape", &[&e, &flat_shape], &[]);
            let x0 = match dense_in {
                Some(x) => g.op("Concat", &[&flat, x], &[Attr::Int("axis", 1)]),
                None => flat,
            };
            // DCN: x_{l+1} = x_0 ⊙ (x_l W_l + b_l) + x_l.
            let cross_layers = match model.kind() {
                ModelKind::Dcn { cross_layers, .. } => *cross_layers,
                _ => 0,
            };
            let mut inputs = x0.clone();
            for i in 0..cross_layers {
                let z = dense(g, model, &inputs, &format!("deep/cross_{i}"), false)?;
                let crossed = g.op("Mul", &[&x0, &z], &[]);
                inputs = g.op("Add", &[&crossed, &inputs], &[]);
            }
            let deep = tower(g, model, &inputs, "deep/dense", hidden.len())?;
            let first = if matches!(model.kind(), ModelKind::DeepFm { .. }) {
                // Σ_{i<j} <e_i, e_j> = ((Σ e_i)² - Σ e_i²) / 2, summed over the values.
                let s = sum(g, &e, 1, false);
                let square_of_sum = g.op("Mul", &[&s, &s], &[]);
                let squares = g.op("Mul", &[&e, &e], &[]);
                let sum_of_squares = sum(g, &squares, 1, false);
                let diff = g.op("Sub", &[&square_of_sum, &sum_of_squares], &[]);
                let half = g.floats(&format!("{diff}_half"), &[], &[0.5]);
                let halved = g.op("Mul", &[&diff, &half], &[]);
                let pairs = sum(g, &halved, 1, true);
                g.op("Add", &[&first, &pairs], &[])
            } else {
                first
            };
            Ok(g.op("Add", &[&first, &deep], &[]))
        }
    }
}
