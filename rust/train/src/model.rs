//! Models as candle computations over [`Parameters`]: logistic regression and the
//! multi-layer perceptron.

use candle_core::{Tensor, Var};

use crate::error::{Result, TrainError};
use crate::params::{Parameters, glorot_uniform};

/// A model maps a `[batch, inputs]` float32 tensor to `[batch, outputs]` logits.
pub trait Model: Send {
    /// The logits of a batch.
    fn forward(&self, features: &Tensor) -> Result<Tensor>;
    /// The trainable variables.
    fn parameters(&self) -> &Parameters;
}

/// `x W + b`.
struct Dense {
    weight: Var,
    bias: Var,
}

impl Dense {
    fn new(params: &mut Parameters, name: &str, inputs: usize, outputs: usize, seed: u64) -> Result<Self> {
        let weight = params.add(
            &format!("{name}/kernel"),
            (inputs, outputs),
            glorot_uniform(inputs, outputs, seed),
        )?;
        let bias = params.add(&format!("{name}/bias"), outputs, vec![0.0; outputs])?;
        Ok(Dense { weight, bias })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.matmul(self.weight.as_tensor())?.broadcast_add(self.bias.as_tensor())?)
    }
}

fn check_inputs(features: &Tensor, inputs: usize) -> Result<()> {
    let (_, width) = features.dims2()?;
    if width != inputs {
        return Err(TrainError::InvalidArgument(format!(
            "the model takes {inputs} features per example, the batch has {width}"
        )));
    }
    Ok(())
}

/// One dense layer: logistic regression with one output, softmax regression with several.
pub struct LogisticRegression {
    params: Parameters,
    dense: Dense,
    inputs: usize,
}

impl LogisticRegression {
    /// A model over `inputs` features with `outputs` logits, initialized from `seed`.
    pub fn new(inputs: usize, outputs: usize, seed: u64) -> Result<Self> {
        let mut params = Parameters::new();
        let dense = Dense::new(&mut params, "linear", inputs, outputs, seed)?;
        Ok(LogisticRegression { params, dense, inputs })
    }
}

impl Model for LogisticRegression {
    fn forward(&self, features: &Tensor) -> Result<Tensor> {
        check_inputs(features, self.inputs)?;
        self.dense.forward(features)
    }

    fn parameters(&self) -> &Parameters {
        &self.params
    }
}

/// Dense layers with ReLU between them.
pub struct Mlp {
    params: Parameters,
    layers: Vec<Dense>,
    inputs: usize,
}

impl Mlp {
    /// `inputs` → each of `hidden` → `outputs`, initialized from `seed`.
    pub fn new(inputs: usize, hidden: &[usize], outputs: usize, seed: u64) -> Result<Self> {
        let mut params = Parameters::new();
        let widths: Vec<usize> =
            std::iter::once(inputs).chain(hidden.iter().copied()).chain([outputs]).collect();
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                Dense::new(&mut params, &format!("dense_{i}"), w[0], w[1], seed.wrapping_add(i as u64))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Mlp { params, layers, inputs })
    }
}

impl Model for Mlp {
    fn forward(&self, features: &Tensor) -> Result<Tensor> {
        check_inputs(features, self.inputs)?;
        let (last, hidden) = self.layers.split_last().expect("at least one layer");
        let mut x = features.clone();
        for layer in hidden {
            x = layer.forward(&x)?.relu()?;
        }
        last.forward(&x)
    }

    fn parameters(&self) -> &Parameters {
        &self.params
    }
}
