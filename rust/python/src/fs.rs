//! File-system functions over local paths, `file://`, `hdfs://`, `viewfs://` and object stores.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sparktrain_storage::OutputJob as Job;

use crate::detach;
use crate::errors::Result;

/// What a file or folder is: its URL, size, kind and modification time.
#[pyclass(module = "sparktrain._native", frozen, skip_from_py_object, get_all, eq, str = "{path}")]
#[derive(Debug, Clone, PartialEq)]
pub struct FileStatus {
    /// The full URL (or absolute local path).
    path: String,
    /// Bytes (0 for a folder).
    size: u64,
    /// Whether it is a folder.
    is_dir: bool,
    /// Milliseconds since the Unix epoch when it last changed.
    modified_ms: i64,
}

impl From<sparktrain_storage::FileStatus> for FileStatus {
    fn from(f: sparktrain_storage::FileStatus) -> Self {
        FileStatus { path: f.url, size: f.size, is_dir: f.is_dir, modified_ms: f.modified_ms }
    }
}

#[pymethods]
impl FileStatus {
    fn __repr__(&self) -> String {
        format!(
            "FileStatus(path={:?}, size={}, is_dir={}, modified_ms={})",
            self.path,
            self.size,
            if self.is_dir { "True" } else { "False" },
            self.modified_ms
        )
    }
}

fn statuses(files: Vec<sparktrain_storage::FileStatus>) -> Vec<FileStatus> {
    files.into_iter().map(FileStatus::from).collect()
}

/// True when `path` exists.
#[pyfunction]
fn fs_exists(py: Python<'_>, path: String) -> Result<bool> {
    Ok(detach(py, || sparktrain_storage::exists(&path))?)
}

/// What `path` is.
#[pyfunction]
fn fs_status(py: Python<'_>, path: String) -> Result<FileStatus> {
    Ok(detach(py, || sparktrain_storage::status(&path))?.into())
}

/// The size of the file `path` in bytes.
#[pyfunction]
fn fs_size(py: Python<'_>, path: String) -> Result<u64> {
    Ok(detach(py, || sparktrain_storage::size(&path))?)
}

/// The direct children of the folder `path`, sorted by name.
#[pyfunction]
fn fs_list(py: Python<'_>, path: String) -> Result<Vec<FileStatus>> {
    Ok(statuses(detach(py, || sparktrain_storage::list(&path))?))
}

/// The files and folders that match a glob pattern, sorted.
#[pyfunction]
fn fs_glob(py: Python<'_>, pattern: String) -> Result<Vec<FileStatus>> {
    Ok(statuses(detach(py, || sparktrain_storage::glob(&pattern))?))
}

/// Creates the folder `path` and its parents.
#[pyfunction]
fn fs_mkdirs(py: Python<'_>, path: String) -> Result<()> {
    Ok(detach(py, || sparktrain_storage::mkdirs(&path))?)
}

/// Renames `src` to `dst` within one file system.
#[pyfunction]
#[pyo3(signature = (src, dst, overwrite=false))]
fn fs_rename(py: Python<'_>, src: String, dst: String, overwrite: bool) -> Result<()> {
    Ok(detach(py, || sparktrain_storage::rename(&src, &dst, overwrite))?)
}

/// Deletes `path` (a folder's contents too with `recursive`); returns whether it existed.
#[pyfunction]
#[pyo3(signature = (path, recursive=false))]
fn fs_delete(py: Python<'_>, path: String, recursive: bool) -> Result<bool> {
    Ok(detach(py, || sparktrain_storage::delete(&path, recursive))?)
}

/// The whole content of the file `path`.
#[pyfunction]
fn fs_read_bytes<'py>(py: Python<'py>, path: String) -> Result<Bound<'py, PyBytes>> {
    let data = detach(py, || sparktrain_storage::read(&path))?;
    Ok(PyBytes::new(py, &data))
}

/// Writes `data` to `path` atomically (the file appears whole or not at all).
#[pyfunction]
#[pyo3(signature = (path, data, overwrite=false))]
fn fs_write_bytes(py: Python<'_>, path: String, data: &[u8], overwrite: bool) -> Result<u64> {
    Ok(detach(py, || sparktrain_storage::write(&path, data, overwrite))?)
}

/// The files a path or pattern stands for, as Hadoop input formats read them: a folder's files
/// at any depth without hidden names (`_SUCCESS`, `_temporary`, `.x`), a file itself, a glob's
/// matches.
#[pyfunction]
fn fs_expand_inputs(py: Python<'_>, path: String) -> Result<Vec<FileStatus>> {
    Ok(statuses(detach(py, || sparktrain_storage::expand_inputs(&path))?))
}

/// Sets Hadoop-style object-store keys (`fs.s3a.*`, `fs.gs.*`, `fs.azure.*`) for this process.
#[pyfunction]
fn fs_configure(options: std::collections::BTreeMap<String, String>) -> Result<()> {
    Ok(sparktrain_storage::configure(options)?)
}

/// The object-store keys set with `fs_configure` in this process.
#[pyfunction]
fn fs_configured() -> std::collections::BTreeMap<String, String> {
    sparktrain_storage::configured()
}

/// One job writing a Hadoop-style output folder: per-attempt staging, task and job commit.
#[pyclass(module = "sparktrain._native", frozen)]
pub struct OutputJob {
    job: Job,
}

#[pymethods]
impl OutputJob {
    #[new]
    fn new(root: String, job_id: String) -> Result<Self> {
        Ok(OutputJob { job: Job::new(&root, &job_id)? })
    }

    #[getter]
    fn staging_url(&self) -> String {
        self.job.staging_url()
    }

    fn setup_task(&self, py: Python<'_>, task: u32, attempt: u32) -> Result<String> {
        Ok(detach(py, || self.job.setup_task(task, attempt))?)
    }

    fn commit_task(&self, py: Python<'_>, task: u32, attempt: u32) -> Result<bool> {
        Ok(detach(py, || self.job.commit_task(task, attempt))?)
    }

    fn abort_task(&self, py: Python<'_>, task: u32, attempt: u32) -> Result<()> {
        Ok(detach(py, || self.job.abort_task(task, attempt))?)
    }

    /// Returns the published file URLs.
    fn commit_job(&self, py: Python<'_>, tasks: Vec<u32>, overwrite: bool) -> Result<Vec<String>> {
        let done = detach(py, || self.job.commit_job(&tasks, overwrite))?;
        Ok(done.files)
    }

    fn abort_job(&self, py: Python<'_>) -> Result<()> {
        Ok(detach(py, || self.job.abort_job())?)
    }
}

/// Adds this module's functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fs_exists, m)?)?;
    m.add_function(wrap_pyfunction!(fs_size, m)?)?;
    m.add_function(wrap_pyfunction!(fs_status, m)?)?;
    m.add_function(wrap_pyfunction!(fs_list, m)?)?;
    m.add_function(wrap_pyfunction!(fs_glob, m)?)?;
    m.add_function(wrap_pyfunction!(fs_mkdirs, m)?)?;
    m.add_function(wrap_pyfunction!(fs_rename, m)?)?;
    m.add_function(wrap_pyfunction!(fs_delete, m)?)?;
    m.add_function(wrap_pyfunction!(fs_read_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(fs_write_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(fs_expand_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(fs_configure, m)?)?;
    m.add_function(wrap_pyfunction!(fs_configured, m)?)?;
    m.add_class::<OutputJob>()?;
    m.add_class::<FileStatus>()?;
    Ok(())
}
