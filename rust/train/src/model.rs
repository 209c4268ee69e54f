//! Models as candle computations over [`Parameters`]: logistic regression and the
//! multi-layer perceptron.

use std::sync::{Mutex, MutexGuard};

use candle_core::{DType, Device, Tensor, Var};

use crate::batch::{Batch, Lookup};
use crate::error::{Result, TrainError};
use crate::fused;
use crate::params::{Parameters, glorot_uniform};

/// A model maps a batch to `[rows, outputs]` logits.
pub trait Model: Send + Sync {
    /// The logits of a batch; models with embedding tables read their rows from `lookup`
    /// (see [`Lookup::gather`]).
    fn forward(&self, batch: &Batch, lookup: Option<&Lookup>) -> Result<Tensor>;
    /// The trainable parameters.
    fn parameters(&self) -> &Parameters;
    /// The trainable parameters, to release what a flat buffer has taken over.
    fn parameters_mut(&mut self) -> &mut Parameters;
    /// The dense tower whose gradients a step may work out layer by layer, sending each
    /// layer's to the ring while the layers below it are still to go (see `overlap.rs`);
    /// None, the default, keeps the backward pass one call.
    fn tower(&self) -> Option<&Tower> {
        None
    }
}

impl Model for Box<dyn Model> {
    fn forward(&self, batch: &Batch, lookup: Option<&Lookup>) -> Result<Tensor> {
        (**self).forward(batch, lookup)
    }

    fn parameters(&self) -> &Parameters {
        (**self).parameters()
    }

    fn parameters_mut(&mut self) -> &mut Parameters {
        (**self).parameters_mut()
    }

    fn tower(&self) -> Option<&Tower> {
        (**self).tower()
    }
}

/// `x W + b`.
pub(crate) struct Dense {
    weight: Var,
    bias: Var,
}

impl Dense {
    pub(crate) fn new(
        params: &mut Parameters,
        name: &str,
        inputs: usize,
        outputs: usize,
        seed: u64,
    ) -> Result<Self> {
        let weight = params.add(
            &format!("{name}/kernel"),
            (inputs, outputs),
            glorot_uniform(inputs, outputs, seed),
        )?;
        let bias = params.add(&format!("{name}/bias"), outputs, vec![0.0; outputs])?;
        Ok(Dense { weight, bias })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_act(x, false)
    }

    /// `x W + b`, through a ReLU when `relu`.
    pub(crate) fn forward_act(&self, x: &Tensor, relu: bool) -> Result<Tensor> {
        if x.device().is_cpu() && x.dtype() == DType::F32 {
            return fused::dense(x, self.weight.as_tensor(), self.bias.as_tensor(), relu);
        }
        let z = x.matmul(self.weight.as_tensor())?;
        if x.device().is_cuda() && x.dtype() == DType::F32 {
            return fused::bias_act(&z, self.bias.as_tensor(), relu);
        }
        let y = z.broadcast_add(self.bias.as_tensor())?;
        Ok(if relu { y.relu()? } else { y })
    }
}

pub(crate) fn check_inputs(features: &Tensor, inputs: usize) -> Result<()> {
    let (_, width) = features.dims2()?;
    if width != inputs {
        return Err(TrainError::InvalidArgument(format!(
            "the model takes {inputs} dense features per example, the batch has {width}"
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
        Self::on(&Device::Cpu, inputs, outputs, seed)
    }

    /// [`LogisticRegression::new`] with its variables on `device`.
    pub fn on(device: &Device, inputs: usize, outputs: usize, seed: u64) -> Result<Self> {
        let mut params = Parameters::on(device);
        let dense = Dense::new(&mut params, "linear", inputs, outputs, seed)?;
        Ok(LogisticRegression { params, dense, inputs })
    }
}

impl Model for LogisticRegression {
    fn forward(&self, batch: &Batch, _: Option<&Lookup>) -> Result<Tensor> {
        check_inputs(&batch.dense, self.inputs)?;
        self.dense.forward(&batch.dense)
    }

    fn parameters(&self) -> &Parameters {
        &self.params
    }

    fn parameters_mut(&mut self) -> &mut Parameters {
        &mut self.params
    }
}

/// Dense layers with ReLU between them, the last one without: the deep part of the built-in
/// models.
///
/// While a step stages its backward pass ([`crate::overlap`]), the tower's forward pass on the
/// CPU runs outside candle's graph and records each layer's input and output: the step then
/// works out the layers' gradients itself, last layer first, and sends each bucket of them to
/// the ring before the layer's input gradient is computed.
pub struct Tower {
    layers: Vec<Dense>,
    /// Some while a step records the forward passes it will differentiate itself.
    staging: Mutex<Option<Vec<Staged>>>,
}

/// One staged forward pass through a [`Tower`].
pub(crate) struct Staged {
    /// The tower's input as the rest of the graph made it.
    pub(crate) source: Tensor,
    /// Each layer's input (the first is `source`, detached) and output.
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) outputs: Vec<Tensor>,
    /// The last output as a leaf of the graph after the tower: its gradient starts the
    /// tower's backward pass.
    pub(crate) out: Var,
}

impl Tower {
    /// `inputs` → each of `hidden` → `outputs`, its layers named `{name}_{i}`.
    pub(crate) fn new(
        params: &mut Parameters,
        name: &str,
        inputs: usize,
        hidden: &[usize],
        outputs: usize,
        seed: u64,
    ) -> Result<Self> {
        let widths: Vec<usize> =
            std::iter::once(inputs).chain(hidden.iter().copied()).chain([outputs]).collect();
        let layers = widths
            .windows(2)
            .enumerate()
            .map(|(i, w)| Dense::new(params, &format!("{name}_{i}"), w[0], w[1], seed.wrapping_add(i as u64)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tower { layers, staging: Mutex::new(None) })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(staged) = self.staging().as_mut()
            && x.device().is_cpu()
            && x.dtype() == DType::F32
        {
            let record = self.forward_staged(x)?;
            let out = record.out.as_tensor().clone();
            staged.push(record);
            return Ok(out);
        }
        let (last, hidden) = self.layers.split_last().expect("at least one layer");
        let mut x = x.clone();
        for layer in hidden {
            x = layer.forward_act(&x, true)?;
        }
        last.forward(&x)
    }

    /// The layers' (weight, bias) pairs, first layer first.
    pub(crate) fn layers(&self) -> impl Iterator<Item = (&Var, &Var)> {
        self.layers.iter().map(|d| (&d.weight, &d.bias))
    }

    /// Starts recording forward passes; [`Tower::take_staged`] ends it.
    pub(crate) fn begin_staging(&self) {
        *self.staging() = Some(Vec::new());
    }

    /// The forward passes recorded since [`Tower::begin_staging`].
    pub(crate) fn take_staged(&self) -> Vec<Staged> {
        self.staging().take().unwrap_or_default()
    }

    fn staging(&self) -> MutexGuard<'_, Option<Vec<Staged>>> {
        self.staging.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The same operations as the fused layers' forward pass, on detached tensors.
    fn forward_staged(&self, source: &Tensor) -> Result<Staged> {
        let last = self.layers.len() - 1;
        let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
        let mut x = source.detach();
        for (i, layer) in self.layers.iter().enumerate() {
            let (w, b) = (layer.weight.as_tensor().detach(), layer.bias.as_tensor().detach());
            let y = fused::dense(&x, &w, &b, i < last)?;
            inputs.push(x);
            outputs.push(y.clone());
            x = y;
        }
        let out = Var::from_tensor(&x)?;
        Ok(Staged { source: source.clone(), inputs, outputs, out })
    }
}

/// Dense layers with ReLU between them.
pub struct Mlp {
    params: Parameters,
    tower: Tower,
    inputs: usize,
}

impl Mlp {
    /// `inputs` → each of `hidden` → `outputs`, initialized from `seed`.
    pub fn new(inputs: usize, hidden: &[usize], outputs: usize, seed: u64) -> Result<Self> {
        Self::on(&Device::Cpu, inputs, hidden, outputs, seed)
    }

    /// [`Mlp::new`] with its variables on `device`.
    pub fn on(device: &Device, inputs: usize, hidden: &[usize], outputs: usize, seed: u64) -> Result<Self> {
        let mut params = Parameters::on(device);
        let tower = Tower::new(&mut params, "dense", inputs, hidden, outputs, seed)?;
        Ok(Mlp { params, tower, inputs })
    }
}

impl Model for Mlp {
    fn forward(&self, batch: &Batch, _: Option<&Lookup>) -> Result<Tensor> {
        check_inputs(&batch.dense, self.inputs)?;
        self.tower.forward(&batch.dense)
    }

    fn parameters(&self) -> &Parameters {
        &self.params
    }

    fn parameters_mut(&mut self) -> &mut Parameters {
        &mut self.params
    }

    fn tower(&self) -> Option<&Tower> {
        Some(&self.tower)
    }
}
