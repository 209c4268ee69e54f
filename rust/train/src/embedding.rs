//! Models over embeddings of the feature spec's shared id space: Wide&Deep, DeepFM and DCN.
//!
//! All have a first-order part (one learned weight per id, summed, plus a linear layer over
//! the dense features) and a deep part (each example's embeddings, concatenated with its
//! dense features, through an MLP). DeepFM adds factorization-machine interactions between
//! the embeddings, which it shares with its deep part. DCN (DCN-v2, stacked) puts cross
//! layers `x_{l+1} = x_0 ⊙ (x_l W_l + b_l) + x_l` in front of the MLP, so the deep part sees
//! explicit feature crosses of every order up to the number of layers.

use candle_core::{D, Device, Tensor, Var};

use crate::batch::{Batch, Lookup};
use crate::error::{Result, TrainError};
use crate::features::FeatureSpec;
use crate::model::{Dense, Model, Tower, check_inputs};
use crate::params::Parameters;

/// The shape of an embedding model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingConfig {
    /// Values per embedding.
    pub dim: usize,
    /// Hidden layer widths of the deep part.
    pub hidden: Vec<usize>,
    /// Cross layers in front of the deep part (DCN; 0 for the others).
    pub cross_layers: usize,
    /// The seed of the initial weights.
    pub seed: u64,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig { dim: 8, hidden: vec![256, 128], cross_layers: 0, seed: 0 }
    }
}

/// Adds a table of `rows × dim` values drawn uniformly from `[-scale, scale)`, made only
/// when rows are asked for (a sharded table's owner makes only its own).
fn table(params: &mut Parameters, name: &str, rows: usize, dim: usize, scale: f32, seed: u64) -> Result<()> {
    params.add_table_uniform(name, rows, dim, scale, seed)
}

/// The table of one weight per id.
pub const FIRST_ORDER: &str = "wide/ids";
/// The table of embeddings.
pub const EMBEDDINGS: &str = "deep/embeddings";

/// The parts both models share.
struct Parts {
    params: Parameters,
    dense_width: usize,
    id_width: usize,
    bag_width: usize,
    /// A linear layer over the dense features (its bias is the model's bias).
    linear: Option<Dense>,
    bias: Option<Var>,
    /// DCN's cross layers, each `d × d` over the deep part's `d` inputs.
    cross: Vec<Dense>,
    tower: Tower,
}

impl Parts {
    fn new(device: &Device, spec: &FeatureSpec, config: &EmbeddingConfig) -> Result<Self> {
        spec.validate()?;
        if spec.fields() == 0 {
            return Err(TrainError::InvalidArgument(
                "embedding models need at least one categorical, crossed or multi-hot column".into(),
            ));
        }
        let (ids, dense_width, seed) = (spec.id_space(), spec.dense_width(), config.seed);
        let mut params = Parameters::on(device);
        table(&mut params, FIRST_ORDER, ids, 1, 0.0, seed)?;
        let (linear, bias) = if dense_width > 0 {
            (Some(Dense::new(&mut params, "wide/dense", dense_width, 1, seed ^ 1)?), None)
        } else {
            (None, Some(params.add("wide/bias", 1, vec![0.0])?))
        };
        table(&mut params, EMBEDDINGS, ids, config.dim, 0.05, seed ^ 2)?;
        let inputs = spec.fields() * config.dim + dense_width;
        let cross = (0..config.cross_layers)
            .map(|i| {
                Dense::new(&mut params, &format!("deep/cross_{i}"), inputs, inputs, seed ^ (4 + i as u64))
            })
            .collect::<Result<Vec<_>>>()?;
        let tower = Tower::new(&mut params, "deep/dense", inputs, &config.hidden, 1, seed ^ 3)?;
        Ok(Parts {
            params,
            dense_width,
            id_width: spec.id_width(),
            bag_width: spec.bag_width(),
            linear,
            bias,
            cross,
            tower,
        })
    }

    /// The batch's rows of the tables, checked against the spec.
    fn lookup<'a>(&self, batch: &Batch, lookup: Option<&'a Lookup>) -> Result<&'a Lookup> {
        check_inputs(&batch.dense, self.dense_width)?;
        let ids = if batch.ids.is_some() { batch.id_width } else { 0 };
        if ids != self.id_width {
            return Err(TrainError::InvalidArgument(format!(
                "the model takes {} ids per example, the batch has {ids}",
                self.id_width
            )));
        }
        let bags = batch.bags.as_ref().map_or(0, |b| b.width());
        if bags != self.bag_width {
            return Err(TrainError::InvalidArgument(format!(
                "the model takes {} multi-hot columns per example, the batch has {bags}",
                self.bag_width
            )));
        }
        lookup.ok_or_else(|| {
            TrainError::InvalidArgument(
                "the batch's embedding rows were not gathered (Lookup::gather)".into(),
            )
        })
    }

    /// `[batch, 1]`: the summed id weights plus the linear part over dense features.
    fn first_order(&self, batch: &Batch, lookup: &Lookup) -> Result<Tensor> {
        let wide = lookup.embed(FIRST_ORDER)?.sum(1)?;
        Ok(match (&self.linear, &self.bias) {
            (Some(linear), _) => (wide + linear.forward(&batch.dense)?)?,
            (None, Some(bias)) => wide.broadcast_add(bias.as_tensor())?,
            (None, None) => wide,
        })
    }

    /// `[batch, 1]`: the MLP over the embeddings `e` (`[batch, ids, dim]`) and dense features.
    fn deep(&self, batch: &Batch, e: &Tensor) -> Result<Tensor> {
        let (rows, width, dim) = e.dims3()?;
        let flat = e.reshape((rows, width * dim))?;
        let x0 = if self.dense_width > 0 { Tensor::cat(&[&flat, &batch.dense], 1)? } else { flat };
        let mut x = x0.clone();
        for layer in &self.cross {
            x = ((&x0 * layer.forward(&x)?)? + &x)?;
        }
        self.tower.forward(&x)
    }

    fn forward(&self, batch: &Batch, lookup: Option<&Lookup>) -> Result<Tensor> {
        let lookup = self.lookup(batch, lookup)?;
        let e = lookup.embed(EMBEDDINGS)?;
        Ok((self.first_order(batch, lookup)? + self.deep(batch, &e)?)?)
    }
}

/// Wide&Deep: a linear model over ids and dense features plus an MLP over embeddings.
pub struct WideDeep(Parts);

impl WideDeep {
    /// A model for the columns of `spec`.
    pub fn new(spec: &FeatureSpec, config: &EmbeddingConfig) -> Result<Self> {
        Self::on(&Device::Cpu, spec, config)
    }

    /// [`WideDeep::new`] with its variables on `device`.
    pub fn on(device: &Device, spec: &FeatureSpec, config: &EmbeddingConfig) -> Result<Self> {
        Ok(WideDeep(Parts::new(device, spec, config)?))
    }
}

impl Model for WideDeep {
    fn forward(&self, batch: &Batch, lookup: Option<&Lookup>) -> Result<Tensor> {
        self.0.forward(batch, lookup)
    }

    fn parameters(&self) -> &Parameters {
        &self.0.params
    }

    fn parameters_mut(&mut self) -> &mut Parameters {
        &mut self.0.params
    }

    fn tower(&self) -> Option<&Tower> {
        Some(&self.0.tower)
    }
}

/// DeepFM: Wide&Deep's parts plus pairwise interactions between the embeddings.
pub struct DeepFm(Parts);

impl DeepFm {
    /// A model for the columns of `spec`.
    pub fn new(spec: &FeatureSpec, config: &EmbeddingConfig) -> Result<Self> {
        Self::on(&Device::Cpu, spec, config)
    }

    /// [`DeepFm::new`] with its variables on `device`.
    pub fn on(device: &Device, spec: &FeatureSpec, config: &EmbeddingConfig) -> Result<Self> {
        Ok(DeepFm(Parts::new(device, spec, config)?))
    }
}

impl Model for DeepFm {
    fn forward(&self, batch: &Batch, lookup: Option<&Lookup>) -> Result<Tensor> {
        let lookup = self.0.lookup(batch, lookup)?;
        let e = lookup.embed(EMBEDDINGS)?;
        // Σ_{i<j} <e_i, e_j> = ((Σ e_i)² - Σ e_i²) / 2, summed over the embedding's values.
        let sum = e.sum(1)?;
        let pairs = ((sum.sqr()? - e.sqr()?.sum(1)?)? * 0.5)?.sum_keepdim(D::Minus1)?;
        Ok(((self.0.first_order(batch, lookup)? + pairs)? + self.0.deep(batch, &e)?)?)
    }

    fn parameters(&self) -> &Parameters {
        &self.0.params
    }

    fn parameters_mut(&mut self) -> &mut Parameters {
        &mut self.0.params
    }

    fn tower(&self) -> Option<&Tower> {
        Some(&self.0.tower)
    }
}

/// DCN-v2 (stacked): Wide&Deep's first-order part plus cross layers in front of its MLP.
pub struct Dcn(Parts);

impl Dcn {
    /// A model for the columns of `spec`, with `config.cross_layers` cross layers.
    pub fn new(spec: &FeatureSpec, config: &EmbeddingConfig) -> Result<Self> {
        Self::on(&Device::Cpu, spec, config)
    }

    /// [`Dcn::new`] with its variables on `device`.
    pub fn on(device: &Device, spec: &FeatureSpec, config: &EmbeddingConfig) -> Result<Self> {
        if config.cross_layers == 0 {
            return Err(TrainError::InvalidArgument("dcn needs at least one cross layer".into()));
        }
        Ok(Dcn(Parts::new(device, spec, config)?))
    }
}

impl Model for Dcn {
    fn forward(&self, batch: &Batch, lookup: Option<&Lookup>) -> Result<Tensor> {
        self.0.forward(batch, lookup)
    }

    fn parameters(&self) -> &Parameters {
        &self.0.params
    }

    fn parameters_mut(&mut self) -> &mut Parameters {
        &mut self.0.params
    }

    fn tower(&self) -> Option<&Tower> {
        Some(&self.0.tower)
    }
}
