//! Writing TFRecord files that appear atomically: records go to a temporary name in the
//! destination folder and the file is renamed into place on commit, so a failed or abandoned
//! writer leaves nothing under the final name.

use std::collections::HashMap;

use arrow::record_batch::RecordBatch;
use sparktrain_storage::AtomicWriter;
use sparktrain_tfrecord::compression::CompressedWriter;
use sparktrain_tfrecord::proto::Feature;
use sparktrain_tfrecord::{Compression, RecordEncoder, RecordType, RecordWriter};

use crate::error::{Error, Result};

/// Raw records into one file on storage.
pub struct RecordFileWriter {
    url: String,
    records: RecordWriter<CompressedWriter<AtomicWriter>>,
}

impl RecordFileWriter {
    /// Starts the file `url`. The compression is `compression` when given, else what the
    /// file name implies, else none. With `overwrite` false, an existing file is an error.
    pub fn create(url: &str, compression: Option<Compression>, overwrite: bool) -> Result<Self> {
        let compression = compression.or_else(|| Compression::from_path(url)).unwrap_or_default();
        let file = sparktrain_storage::create(url, overwrite)?;
        Ok(RecordFileWriter { url: url.to_string(), records: RecordWriter::new(compression.encoder(file)) })
    }

    /// The destination.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.records.records_written()
    }

    /// Appends one record.
    pub fn write_record(&mut self, payload: &[u8]) -> Result<()> {
        let offset = self.records.bytes_written();
        self.records.write_record(payload).map_err(|source| self.io_error(offset, source))
    }

    fn io_error(&self, offset: u64, source: std::io::Error) -> Error {
        Error::Record(sparktrain_tfrecord::Error::Io { path: self.url.clone(), offset, source })
    }

    /// Finishes the file and publishes it under its final name; returns the records written.
    pub fn commit(self) -> Result<u64> {
        let count = self.records.records_written();
        let offset = self.records.bytes_written();
        let url = self.url.clone();
        let io = |source| Error::Record(sparktrain_tfrecord::Error::Io { path: url.clone(), offset, source });
        let compressed = self.records.into_inner().map_err(io)?;
        let file = compressed.finish().map_err(io)?;
        file.commit()?;
        Ok(count)
    }
}

/// Arrow batches into one file of `tf.train.Example`s, `SequenceExample`s or raw records.
pub struct ExampleFileWriter {
    file: RecordFileWriter,
    defaults: HashMap<String, Feature>,
    record_type: RecordType,
    encoder: Option<RecordEncoder>,
}

impl ExampleFileWriter {
    /// Starts the file `url` (see [`RecordFileWriter::create`]). `defaults` gives the feature
    /// written for a column's null rows; without one a null omits the feature.
    pub fn create(
        url: &str,
        compression: Option<Compression>,
        overwrite: bool,
        defaults: HashMap<String, Feature>,
    ) -> Result<Self> {
        Ok(ExampleFileWriter {
            file: RecordFileWriter::create(url, compression, overwrite)?,
            defaults,
            record_type: RecordType::Example,
            encoder: None,
        })
    }

    /// Writes records of `record_type` instead of `Example`s (before the first batch).
    pub fn with_record_type(mut self, record_type: RecordType) -> Self {
        self.record_type = record_type;
        self
    }

    /// Appends one row per row of `batch`. The first batch fixes the schema; later batches must
    /// have the same one. Returns the rows written.
    pub fn write_batch(&mut self, batch: &RecordBatch) -> Result<u64> {
        let encoder = match &mut self.encoder {
            Some(encoder) => encoder,
            slot @ None => slot.insert(RecordEncoder::new(self.record_type, batch.schema(), &self.defaults)?),
        };
        let file = &mut self.file;
        encoder.encode(batch, |payload| {
            file.write_record(payload).map_err(|e| match e {
                Error::Record(inner) => inner,
                other => sparktrain_tfrecord::Error::InvalidArgument(other.to_string()),
            })
        })?;
        Ok(batch.num_rows() as u64)
    }

    /// Finishes the file and publishes it; returns the rows written.
    pub fn commit(self) -> Result<u64> {
        self.file.commit()
    }
}
