//! TFRecord files for sparktrain: framing, compression, TensorFlow's record messages, and
//! conversion between Arrow record batches and `tf.train.Example`s.
//!
//! - [`framing`]: [`RecordReader`] and [`RecordWriter`], byte-compatible with TensorFlow.
//! - [`compression`]: NONE, GZIP and ZLIB whole-file compression.
//! - [`proto`]: `Example`, `SequenceExample`, `Event` and `Summary` as prost messages.
//! - [`arrow_to_example`] and [`example_to_arrow`]: the columnar fast paths, with schema
//!   inference.
//! - [`sequence_example`]: the same for `tf.train.SequenceExample`s; [`record_type`] chooses
//!   between them and raw byte records.
//! - [`batches`]: a reader that yields Arrow batches from one TFRecord stream.
//!
//! The crate does no file-system or network I/O of its own: it reads any [`std::io::Read`] and
//! writes any [`std::io::Write`].

pub mod arrow_to_example;
pub mod batches;
pub mod compression;
pub mod crc;
pub mod error;
pub mod example_to_arrow;
pub mod framing;
mod logical_types;
pub mod parallel;
pub mod proto;
pub mod record_type;
pub mod sequence_example;
#[doc(hidden)]
pub mod untrusted;
pub mod wire;

pub use arrow_to_example::ExampleEncoder;
pub use batches::ExampleBatchReader;
pub use compression::Compression;
pub use error::{CorruptionKind, Error, Result};
pub use example_to_arrow::{ExampleDecoder, SchemaInference};
pub use framing::{
    DEFAULT_MAX_RECORD_BYTES, ReaderOptions, RecordReader, RecordRun, RecordWriter, SkippedRegion,
};
pub use parallel::ParallelBatchReader;
pub use record_type::{RecordDecoder, RecordEncoder, RecordSchemaInference, RecordType};
pub use sequence_example::{SequenceExampleDecoder, SequenceExampleEncoder, SequenceSchemaInference};
