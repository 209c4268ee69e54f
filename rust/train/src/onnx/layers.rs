//! The built-in models as ONNX operators over the exported weights, mirroring
//! [`crate::model`] and [`crate::embedding`] layer by layer and in the same order of sums.

use super::graph::{Attr, Graph};
use crate::error::{Result, TrainError};
use crate::export::{Exported, ModelKind};

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

/// `[batch, outputs]` logits of `model`, from the graph's `dense` values (None when the model
/// takes none) and `ids` (None for models without embeddings).
pub(crate) fn logits(
    g: &mut Graph,
    model: &Exported,
    dense_in: Option<&str>,
    ids: Option<&str>,
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
        ModelKind::WideDeep { dim, hidden } | ModelKind::DeepFm { dim, hidden } => {
            let ids = need(ids, "categorical or crossed columns")?;
            // First order: the ids' own weights, summed, plus the linear part or the bias.
            let wide_table = weight(g, model, "wide/ids")?;
            let wide = g.op("Gather", &[&wide_table, &ids], &[Attr::Int("axis", 0)]);
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
            let table = weight(g, model, "deep/embeddings")?;
            let e = g.op("Gather", &[&table, &ids], &[Attr::Int("axis", 0)]);
            let flat_shape = g.int64s("flat_shape", &[2], &[0, (spec.id_width() * dim) as i64]);
            let flat = g.op("Reshape", &[&e, &flat_shape], &[]);
            let inputs = match dense_in {
                Some(x) => g.op("Concat", &[&flat, x], &[Attr::Int("axis", 1)]),
                None => flat,
            };
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
