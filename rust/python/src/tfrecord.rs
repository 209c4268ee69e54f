//! TFRecord classes and functions: raw record reading and writing, Arrow batch reading and
//! writing, and schema inference.

use std::sync::{Arc, Mutex};

use arrow::datatypes::Schema;
use arrow::pyarrow::{FromPyArrow, ToPyArrow};
use arrow::record_batch::RecordBatch;
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use sparktrain_dataset::{
    DatasetReader, ExampleFileWriter, InferOptions, ReadOptions, RecordFileWriter, SkippedInFile,
    infer_schema, open_records,
};
use sparktrain_tfrecord::{DEFAULT_MAX_RECORD_BYTES, ReaderOptions};

use crate::errors::{Error, Result};
use crate::{convert, detach, lock};

/// A damaged region of an input file that a reader stepped over (`skip_corrupt=True`).
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, get_all, eq)]
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedRecord {
    /// The file.
    path: String,
    /// Offset of the region's first byte (in the decompressed stream).
    offset: u64,
    /// Length of the region in bytes.
    bytes: u64,
    /// The damage found at its start (`payload_crc_mismatch`, `truncated_header`...).
    kind: String,
}

impl From<&SkippedInFile> for SkippedRecord {
    fn from(s: &SkippedInFile) -> Self {
        SkippedRecord {
            path: s.path.clone(),
            offset: s.region.offset,
            bytes: s.region.bytes,
            kind: s.region.kind.as_str().to_string(),
        }
    }
}

#[pymethods]
impl SkippedRecord {
    /// `region["offset"]`: the mapping access of the dicts this class replaced.
    fn __getitem__(&self, py: Python<'_>, key: &str) -> Result<Py<PyAny>> {
        Ok(match key {
            "path" => self.path.clone().into_py_any(py)?,
            "offset" => self.offset.into_py_any(py)?,
            "bytes" => self.bytes.into_py_any(py)?,
            "kind" => self.kind.clone().into_py_any(py)?,
            other => return Err(Error::Python(PyKeyError::new_err(other.to_string()))),
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "SkippedRecord(path={:?}, offset={}, bytes={}, kind={:?})",
            self.path, self.offset, self.bytes, self.kind
        )
    }
}

/// Writes raw records to one file that appears atomically on `close`.
#[pyclass(module = "sparktrain._native")]
struct RecordWriter {
    inner: Mutex<Option<RecordFileWriter>>,
}

#[pymethods]
impl RecordWriter {
    #[new]
    #[pyo3(signature = (path, compression=None, overwrite=false))]
    fn new(py: Python<'_>, path: String, compression: Option<&str>, overwrite: bool) -> Result<Self> {
        let compression = convert::compression(compression)?;
        let writer = detach(py, || RecordFileWriter::create(&path, compression, overwrite))?;
        Ok(RecordWriter { inner: Mutex::new(Some(writer)) })
    }

    /// Appends one record.
    fn write(&self, py: Python<'_>, record: &[u8]) -> Result<()> {
        let mut guard = lock(&self.inner);
        let writer = guard.as_mut().ok_or_else(|| Error::Closed("RecordWriter"))?;
        Ok(detach(py, || writer.write_record(record))?)
    }

    /// Appends several records.
    fn write_many(&self, py: Python<'_>, records: Vec<Vec<u8>>) -> Result<()> {
        let mut guard = lock(&self.inner);
        let writer = guard.as_mut().ok_or_else(|| Error::Closed("RecordWriter"))?;
        Ok(detach(py, || records.iter().try_for_each(|r| writer.write_record(r)))?)
    }

    /// Finishes and publishes the file; returns the number of records.
    fn close(&self, py: Python<'_>) -> Result<u64> {
        let writer = lock(&self.inner).take().ok_or_else(|| Error::Closed("RecordWriter"))?;
        Ok(detach(py, || writer.commit())?)
    }

    /// Drops what was written; nothing appears under the final name.
    fn abort(&self, py: Python<'_>) -> Result<()> {
        let writer = lock(&self.inner).take();
        detach(py, || drop(writer));
        Ok(())
    }
}

/// Reads raw records from one file.
#[pyclass(module = "sparktrain._native")]
struct RecordReader {
    inner: Mutex<sparktrain_dataset::open::FileRecordReader>,
}

#[pymethods]
impl RecordReader {
    #[new]
    #[pyo3(signature = (path, compression=None, skip_corrupt=false, max_record_bytes=DEFAULT_MAX_RECORD_BYTES))]
    fn new(
        py: Python<'_>,
        path: String,
        compression: Option<&str>,
        skip_corrupt: bool,
        max_record_bytes: u64,
    ) -> Result<Self> {
        let compression = convert::compression(compression)?;
        let reader = detach(py, || {
            open_records(&path, compression, ReaderOptions { skip_corrupt, max_record_bytes })
        })?;
        Ok(RecordReader { inner: Mutex::new(reader) })
    }

    /// The next record, or `None` at the end.
    fn next_record<'py>(&self, py: Python<'py>) -> Result<Option<Bound<'py, PyBytes>>> {
        let mut guard = lock(&self.inner);
        let reader = &mut *guard;
        let next = detach(py, || reader.next().map(|r| r.map(|payload| payload.to_vec())));
        match next {
            None => Ok(None),
            Some(Ok(bytes)) => Ok(Some(PyBytes::new(py, &bytes))),
            Some(Err(e)) => Err(e.into()),
        }
    }

    /// Up to `n` next records (fewer at the end).
    fn next_records<'py>(&self, py: Python<'py>, n: usize) -> Result<Vec<Bound<'py, PyBytes>>> {
        let mut guard = lock(&self.inner);
        let reader = &mut *guard;
        let records = detach(py, || {
            let mut out = Vec::with_capacity(n.min(65_536));
            while out.len() < n {
                match reader.next() {
                    None => break,
                    Some(r) => out.push(r?.to_vec()),
                }
            }
            Ok::<_, sparktrain_tfrecord::Error>(out)
        })?;
        Ok(records.iter().map(|r| PyBytes::new(py, r)).collect())
    }

    /// Damaged regions stepped over so far.
    fn skipped(&self) -> Vec<SkippedRecord> {
        let guard = lock(&self.inner);
        let path = guard.path().to_string();
        guard.skipped().iter().map(|&region| (&SkippedInFile { path: path.clone(), region }).into()).collect()
    }
}

/// Writes Arrow record batches as `Example`s, `SequenceExample`s or raw records to one file
/// that appears on `close`.
#[pyclass(module = "sparktrain._native")]
struct ExampleWriter {
    inner: Mutex<Option<ExampleFileWriter>>,
}

#[pymethods]
impl ExampleWriter {
    #[new]
    #[pyo3(signature = (path, compression=None, overwrite=false, defaults=None, record_type="Example"))]
    fn new(
        py: Python<'_>,
        path: String,
        compression: Option<&str>,
        overwrite: bool,
        defaults: Option<&Bound<'_, PyDict>>,
        record_type: &str,
    ) -> Result<Self> {
        let compression = convert::compression(compression)?;
        let defaults = convert::defaults(defaults)?;
        let record_type = convert::record_type(record_type)?;
        let writer = detach(py, || {
            ExampleFileWriter::create(&path, compression, overwrite, defaults)
                .map(|w| w.with_record_type(record_type))
        })?;
        Ok(ExampleWriter { inner: Mutex::new(Some(writer)) })
    }

    /// Appends one row per row of a `pyarrow.RecordBatch`; returns the rows written.
    fn write_batch(&self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> Result<u64> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let mut guard = lock(&self.inner);
        let writer = guard.as_mut().ok_or_else(|| Error::Closed("ExampleWriter"))?;
        Ok(detach(py, || writer.write_batch(&batch))?)
    }

    /// Finishes and publishes the file; returns the number of rows.
    fn close(&self, py: Python<'_>) -> Result<u64> {
        let writer = lock(&self.inner).take().ok_or_else(|| Error::Closed("ExampleWriter"))?;
        Ok(detach(py, || writer.commit())?)
    }

    /// Drops what was written; nothing appears under the final name.
    fn abort(&self, py: Python<'_>) -> Result<()> {
        let writer = lock(&self.inner).take();
        detach(py, || drop(writer));
        Ok(())
    }
}

/// Reads a dataset of `tf.train.Example` files as Arrow record batches.
#[pyclass(module = "sparktrain._native")]
struct ExampleReader {
    inner: Mutex<DatasetReader>,
}

#[pymethods]
impl ExampleReader {
    #[new]
    #[pyo3(signature = (path, schema=None, columns=None, batch_size=ReadOptions::default().batch_size, compression=None, skip_corrupt=false, infer_max_records=InferOptions::default().max_records, record_type="Example", max_record_bytes=DEFAULT_MAX_RECORD_BYTES, threads=1))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: String,
        schema: Option<&Bound<'_, PyAny>>,
        columns: Option<Vec<String>>,
        batch_size: usize,
        compression: Option<&str>,
        skip_corrupt: bool,
        infer_max_records: usize,
        record_type: &str,
        max_record_bytes: u64,
        threads: usize,
    ) -> Result<Self> {
        let schema = schema.map(Schema::from_pyarrow_bound).transpose()?.map(Arc::new);
        let record_type = convert::record_type(record_type)?;
        let options = ReadOptions {
            schema,
            columns,
            batch_size,
            compression: convert::compression(compression)?,
            skip_corrupt,
            max_record_bytes,
            infer_max_records,
            record_type,
            threads,
        };
        let reader = detach(py, || DatasetReader::open(&path, options))?;
        Ok(ExampleReader { inner: Mutex::new(reader) })
    }

    /// The `pyarrow.Schema` of the batches.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> Result<Bound<'py, PyAny>> {
        Ok(lock(&self.inner).schema().as_ref().to_pyarrow(py)?)
    }

    /// The input files' URLs.
    #[getter]
    fn files(&self) -> Result<Vec<String>> {
        Ok(lock(&self.inner).files().iter().map(|f| f.url.clone()).collect())
    }

    /// The next `pyarrow.RecordBatch`, or `None` at the end.
    fn next_batch<'py>(&self, py: Python<'py>) -> Result<Option<Bound<'py, PyAny>>> {
        let mut guard = lock(&self.inner);
        let reader = &mut *guard;
        match detach(py, || reader.next()) {
            None => Ok(None),
            Some(Ok(batch)) => Ok(Some(batch.to_pyarrow(py)?)),
            Some(Err(e)) => Err(e.into()),
        }
    }

    /// Damaged regions stepped over so far.
    fn skipped(&self) -> Vec<SkippedRecord> {
        lock(&self.inner).skipped().iter().map(SkippedRecord::from).collect()
    }
}

/// The `pyarrow.Schema` inferred from a sample of the records under `path`.
#[pyfunction]
#[pyo3(signature = (path, compression=None, max_records=InferOptions::default().max_records, skip_corrupt=false, record_type="Example", max_record_bytes=DEFAULT_MAX_RECORD_BYTES))]
#[allow(clippy::too_many_arguments)]
fn infer_example_schema<'py>(
    py: Python<'py>,
    path: String,
    compression: Option<&str>,
    max_records: usize,
    skip_corrupt: bool,
    record_type: &str,
    max_record_bytes: u64,
) -> Result<Bound<'py, PyAny>> {
    let options = InferOptions {
        max_records,
        compression: convert::compression(compression)?,
        skip_corrupt,
        max_record_bytes,
        record_type: convert::record_type(record_type)?,
    };
    let schema = detach(py, || infer_schema(&path, &options))?;
    Ok(schema.to_pyarrow(py)?)
}

/// Adds this module's classes and functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RecordWriter>()?;
    m.add_class::<RecordReader>()?;
    m.add_class::<ExampleWriter>()?;
    m.add_class::<ExampleReader>()?;
    m.add_function(wrap_pyfunction!(infer_example_schema, m)?)?;
    m.add_class::<SkippedRecord>()?;
    m.add("DEFAULT_MAX_RECORD_BYTES", DEFAULT_MAX_RECORD_BYTES)?;
    Ok(())
}
