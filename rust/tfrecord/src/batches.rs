//! Arrow record batches from one TFRecord stream of `Example`s, `SequenceExample`s or raw
//! records.

use std::io::Read;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::framing::RecordReader;
use crate::record_type::{RecordDecoder, RecordType};

/// Yields batches of at most `batch_size` rows decoded from a [`RecordReader`].
pub struct ExampleBatchReader<R: Read> {
    records: RecordReader<R>,
    /// The stream's name for errors, kept apart from `records` because a payload borrows it.
    path: String,
    decoder: RecordDecoder,
    batch_size: usize,
    done: bool,
    /// Set by an error: the reader ends there, as the parallel reader does, instead of
    /// raising it again for the rows decoded before it.
    failed: bool,
}

impl<R: Read> ExampleBatchReader<R> {
    /// A reader producing batches of `schema` from `records` of `tf.train.Example`s.
    pub fn new(records: RecordReader<R>, schema: SchemaRef, batch_size: usize) -> Result<Self> {
        Self::with_record_type(records, schema, batch_size, RecordType::Example)
    }

    /// A reader producing batches of `schema` from `records` of `record_type`.
    pub fn with_record_type(
        records: RecordReader<R>,
        schema: SchemaRef,
        batch_size: usize,
        record_type: RecordType,
    ) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::InvalidArgument("batch_size must be at least 1".into()));
        }
        let path = records.path().to_string();
        Ok(ExampleBatchReader {
            records,
            path,
            decoder: RecordDecoder::new(record_type, schema)?,
            batch_size,
            done: false,
            failed: false,
        })
    }

    /// The underlying record reader (for its skip report and position).
    pub fn records(&self) -> &RecordReader<R> {
        &self.records
    }

    fn fill(&mut self) -> Result<Option<RecordBatch>> {
        if self.decoder.is_empty() {
            self.decoder.reserve(self.batch_size.min(1 << 16));
        }
        // The reader counts only the records it returns, so a batch's records are consecutive.
        let first_record = self.records.records_read() - self.decoder.len() as u64;
        while self.decoder.len() < self.batch_size {
            let index = self.records.records_read();
            match self.records.next() {
                None => {
                    self.done = true;
                    break;
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Some(Ok(payload)) => {
                    if let Err(e) = self.decoder.push(payload, &self.path, index) {
                        self.done = true;
                        return Err(e);
                    }
                }
            }
        }
        if self.decoder.is_empty() {
            Ok(None)
        } else {
            self.decoder.finish().map(Some).map_err(|e| e.at_records(&self.path, first_record))
        }
    }
}

impl<R: Read> Iterator for ExampleBatchReader<R> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || (self.done && self.decoder.is_empty()) {
            return None;
        }
        let item = self.fill().transpose();
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}
