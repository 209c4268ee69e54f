//! Synchronous data-parallel training on candle, as pure Rust.
//!
//! - [`batch`]: a batch as tensors;
//! - [`checkpoint`]: the chief's sharded, atomic checkpoints on any storage URL;
//! - [`export`]: the self-contained model folder, and scoring Arrow batches with it;
//! - [`features`]: the feature spec and the encoding of Arrow batches for a model;
//! - [`input`]: a worker's shard of a dataset, shuffled and batched on a background thread;
//! - [`params`]: a model's variables in name order, flattened for the all-reduce;
//! - [`metrics`]: loss, accuracy and AUC summed over every worker's share;
//! - [`model`]: logistic regression and the MLP;
//! - [`embedding`]: Wide&Deep and DeepFM over embeddings of categorical features;
//! - [`loss`]: binary and softmax cross-entropy that stay finite for any logit;
//! - [`optim`]: SGD, Adam/AdamW, Adagrad and FTRL over flat buffers, with savable state;
//! - [`tensorboard`]: scalar event files TensorBoard reads, rolled on HDFS;
//! - [`step`]: [`DataParallel`], the all-reduced step every worker takes together.

pub mod batch;
pub mod checkpoint;
pub mod embedding;
pub mod error;
pub mod export;
pub mod features;
pub mod input;
pub mod loss;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod params;
mod rng;
pub mod step;
pub mod tensorboard;

pub use batch::Batch;
pub use checkpoint::{CheckpointOptions, Progress, Restored};
pub use embedding::{DeepFm, EmbeddingConfig, WideDeep};
pub use error::{Result, TrainError};
pub use export::{Exported, ModelKind};
pub use features::{Categorical, Crossed, Encoded, FeatureSpec};
pub use input::{Input, InputOptions, Shard, plan_shard};
pub use loss::Loss;
pub use metrics::{Evaluation, Metrics};
pub use model::{LogisticRegression, Mlp, Model};
pub use optim::{Optimizer, OptimizerState, Rule};
pub use params::Parameters;
pub use step::{DataParallel, StepStats};
pub use tensorboard::EventWriter;
