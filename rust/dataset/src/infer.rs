//! Schema inference over a sample spread across all input files.
//!
//! Inferring from the first record only (what TensorFlowOnSpark does) gets lists of length one
//! wrong as scalars and misses features that the first record lacks; this reads up to
//! `max_records` records, taken evenly from every file.

use arrow::datatypes::Schema;
use sparktrain_storage::FileStatus;
use sparktrain_tfrecord::{
    Compression, DEFAULT_MAX_RECORD_BYTES, ReaderOptions, RecordSchemaInference, RecordType,
};

use crate::error::Result;
use crate::open::{input_files, open_records};

/// How a schema is inferred.
#[derive(Debug, Clone, Copy)]
pub struct InferOptions {
    /// Most records read in all; each file contributes an equal share of at least one record.
    pub max_records: usize,
    /// The files' compression; `None` detects it per file.
    pub compression: Option<Compression>,
    /// Step over corrupt records instead of failing.
    pub skip_corrupt: bool,
    /// The longest record taken; a header claiming more is damage.
    pub max_record_bytes: u64,
    /// What the records hold.
    pub record_type: RecordType,
}

impl Default for InferOptions {
    fn default() -> Self {
        InferOptions {
            max_records: 10_000,
            compression: None,
            skip_corrupt: false,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            record_type: RecordType::Example,
        }
    }
}

/// The schema of the records under `path_or_glob`.
pub fn infer_schema(path_or_glob: &str, options: &InferOptions) -> Result<Schema> {
    infer_schema_of(&input_files(path_or_glob)?, options)
}

/// The schema of the records in `files`.
pub fn infer_schema_of(files: &[FileStatus], options: &InferOptions) -> Result<Schema> {
    let mut inference = RecordSchemaInference::new(options.record_type);
    if !inference.needs_records() {
        return Ok(inference.schema());
    }
    let budget = options.max_records.max(1);
    let per_file = (budget / files.len().max(1)).max(1);
    let reader_options =
        ReaderOptions { skip_corrupt: options.skip_corrupt, max_record_bytes: options.max_record_bytes };
    for file in files {
        if inference.records() as usize >= budget {
            break;
        }
        let mut records = open_records(&file.url, options.compression, reader_options)?;
        for index in 0..per_file as u64 {
            match records.next() {
                None => break,
                Some(payload) => inference.observe(payload?, &file.url, index)?,
            }
        }
    }
    Ok(inference.schema())
}
