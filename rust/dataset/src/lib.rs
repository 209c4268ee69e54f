//! TFRecord datasets on storage.
//!
//! This crate joins the codec (`sparktrain-tfrecord`) to storage (`sparktrain-storage`): it
//! expands a folder, file or glob into input files, picks each file's compression (given,
//! from its extension, or sniffed from its first bytes), infers a schema from a sample spread
//! over all files, reads Arrow batches across files, and writes files that appear atomically.

pub mod error;
mod files_in_parallel;
pub mod infer;
pub mod open;
pub mod read;
pub mod write;

pub use error::{Error, Result};
pub use infer::{InferOptions, infer_schema};
pub use open::{input_files, open_records};
pub use read::{DatasetReader, ReadOptions, SkippedInFile};
pub use write::{ExampleFileWriter, RecordFileWriter};
