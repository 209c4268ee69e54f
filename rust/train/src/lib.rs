//! Synchronous data-parallel training on candle, as pure Rust.
//!
//! - [`params`]: a model's variables in name order, flattened for the all-reduce;
//! - [`model`]: logistic regression and the MLP;
//! - [`loss`]: binary and softmax cross-entropy that stay finite for any logit;
//! - [`optim`]: SGD, Adam/AdamW, Adagrad and FTRL over flat buffers, with savable state;
//! - [`step`]: [`DataParallel`], the all-reduced step every worker takes together.

pub mod error;
pub mod loss;
pub mod model;
pub mod optim;
pub mod params;
pub mod step;

pub use error::{Result, TrainError};
pub use loss::Loss;
pub use model::{LogisticRegression, Mlp, Model};
pub use optim::{Optimizer, OptimizerState, Rule};
pub use params::Parameters;
pub use step::{Batch, DataParallel, StepStats};
