//! Synchronous data-parallel training on candle, as pure Rust.
//!
//! - [`batch`]: a batch as tensors, and the embedding rows it touches;
//! - [`checkpoint`]: the chief's sharded, atomic checkpoints on any storage URL, fenced by
//!   generation;
//! - [`export`]: the self-contained model folder, and scoring Arrow batches with it;
//! - [`features`]: the feature spec and the encoding of Arrow batches for a model;
//! - [`groups`]: which optimizer trains which parameters (FTRL for the wide part);
//! - [`input`]: a worker's share of the data (static files, a driver's work queue or the
//!   Spark feed), shuffled and batched on a background thread;
//! - [`prefetch`]: the next batch put on the device and its ids placed while a step runs;
//! - [`params`]: a model's variables and embedding tables in name order, flattened;
//! - [`metrics`]: loss, accuracy and AUC summed over every worker's share;
//! - [`model`]: logistic regression and the MLP;
//! - [`onnx`]: the exported model as ONNX, hashing included, for serving elsewhere;
//! - [`named`]: models and update rules from the names and settings users write;
//! - [`embedding`]: Wide&Deep, DeepFM and DCN over embeddings of categorical features;
//! - [`loss`]: binary and softmax cross-entropy that stay finite for any logit, squared error,
//!   with optional class weights;
//! - [`optim`]: SGD, Adam/AdamW, Adagrad and FTRL over flat buffers, with savable state;
//! - [`schedule`]: learning-rate warm-up and decay, a factor on every rule's step size;
//! - [`regularize`]: L1/L2 penalties on kernels, biases and embedding tables;
//! - [`tensorboard`]: scalar event files TensorBoard reads, rolled on HDFS;
//! - [`shard`]: row-wise sharded embedding tables: the owner of a row, the owner's side
//!   ([`TableShard`]) and when tables are sharded ([`TableOptions`]);
//! - [`step`]: [`DataParallel`], the all-reduced step every worker takes together (and, with
//!   sharded tables, the all-to-all exchange of ids, rows and gradients with their owners);
//! - [`trainer`]: [`Trainer`], the training loop with the chief's checkpoints, event files,
//!   evaluation and export.

mod background;
pub mod batch;
pub mod checkpoint;
pub mod device;
mod device_tables;
mod device_vars;
mod distinct;
pub mod embedding;
pub mod error;
pub mod export;
pub mod features;
mod fused;
pub mod groups;
pub mod input;
#[cfg(test)]
mod kernels_on_cpu;
pub mod loss;
pub mod metrics;
pub mod model;
pub mod named;
pub mod onnx;
pub mod optim;
mod overlap;
pub mod params;
pub mod prefetch;
pub mod regularize;
mod rng;
mod rows;
mod rule_passes;
mod scaling;
pub mod schedule;
mod segments;
pub mod shard;
mod sharded;
pub mod step;
pub mod tensorboard;
pub mod trainer;

pub use batch::{Batch, Gather, Lookup};
pub use checkpoint::{Best, CheckpointOptions, Fence, Progress, Restored};
pub use embedding::{Dcn, DeepFm, EmbeddingConfig, WideDeep};
pub use error::{Result, TrainError};
pub use export::{Exported, ModelKind};
pub use features::{Categorical, Crossed, Encoded, FeatureSpec, KeyKind, KeyKinds, ServingInputs};
pub use groups::{GradientWire, GroupState, OptimizerConfig, Optimizers};
pub use input::{Input, InputOptions, Plan, Shard, WorkQueue, plan_shard};
pub use loss::Loss;
pub use metrics::{Evaluation, Metrics};
pub use model::{LogisticRegression, Mlp, Model};
pub use optim::{Optimizer, OptimizerState, Rule, Segment};
pub use params::{Entry, Parameters, TableInit};
pub use prefetch::{Prefetch, Prepared};
pub use regularize::{Penalty, Regularization};
pub use schedule::{Decay, Schedule};
pub use shard::{FixedShard, Placement, RowId, ShardTables, TableOptions, TableShard};
pub use step::{DataParallel, SharedRing, StepStats, shared};
pub use tensorboard::EventWriter;
pub use trainer::{
    EarlyStopping, EvalLine, FitOptions, FitSummary, Hooks, LogLine, Monitor, TablePlan, Trainer,
    TrainerConfig, table_plan,
};
