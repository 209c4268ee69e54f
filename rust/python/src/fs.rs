//! File-system functions over local paths, `file://`, `hdfs://` and `viewfs://`.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use sparktrain_storage::{FileStatus, OutputJob as Job};

use crate::{detach, errors};

fn status_to_py<'py>(py: Python<'py>, files: Vec<FileStatus>) -> PyResult<Vec<Bound<'py, PyDict>>> {
    files
        .into_iter()
        .map(|f| {
            let d = PyDict::new(py);
            d.set_item("path", f.url)?;
            d.set_item("size", f.size)?;
            d.set_item("is_dir", f.is_dir)?;
            d.set_item("modified_ms", f.modified_ms)?;
            Ok(d)
        })
        .collect()
}

/// True when `path` exists.
#[pyfunction]
fn fs_exists(py: Python<'_>, path: String) -> PyResult<bool> {
    detach(py, || sparktrain_storage::exists(&path)).map_err(errors::storage)
}

/// What `path` is.
#[pyfunction]
fn fs_status<'py>(py: Python<'py>, path: String) -> PyResult<Bound<'py, PyDict>> {
    let status = detach(py, || sparktrain_storage::status(&path)).map_err(errors::storage)?;
    Ok(status_to_py(py, vec![status])?.remove(0))
}

/// The size of the file `path` in bytes.
#[pyfunction]
fn fs_size(py: Python<'_>, path: String) -> PyResult<u64> {
    detach(py, || sparktrain_storage::size(&path)).map_err(errors::storage)
}

/// The direct children of the folder `path`, sorted by name.
#[pyfunction]
fn fs_list<'py>(py: Python<'py>, path: String) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let files = detach(py, || sparktrain_storage::list(&path)).map_err(errors::storage)?;
    status_to_py(py, files)
}

/// The files and folders that match a glob pattern, sorted.
#[pyfunction]
fn fs_glob<'py>(py: Python<'py>, pattern: String) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let files = detach(py, || sparktrain_storage::glob(&pattern)).map_err(errors::storage)?;
    status_to_py(py, files)
}

/// Creates the folder `path` and its parents.
#[pyfunction]
fn fs_mkdirs(py: Python<'_>, path: String) -> PyResult<()> {
    detach(py, || sparktrain_storage::mkdirs(&path)).map_err(errors::storage)
}

/// Renames `src` to `dst` within one file system.
#[pyfunction]
#[pyo3(signature = (src, dst, overwrite=false))]
fn fs_rename(py: Python<'_>, src: String, dst: String, overwrite: bool) -> PyResult<()> {
    detach(py, || sparktrain_storage::rename(&src, &dst, overwrite)).map_err(errors::storage)
}

/// Deletes `path` (a folder's contents too with `recursive`); returns whether it existed.
#[pyfunction]
#[pyo3(signature = (path, recursive=false))]
fn fs_delete(py: Python<'_>, path: String, recursive: bool) -> PyResult<bool> {
    detach(py, || sparktrain_storage::delete(&path, recursive)).map_err(errors::storage)
}

/// The whole content of the file `path`.
#[pyfunction]
fn fs_read_bytes<'py>(py: Python<'py>, path: String) -> PyResult<Bound<'py, PyBytes>> {
    let data = detach(py, || sparktrain_storage::read(&path)).map_err(errors::storage)?;
    Ok(PyBytes::new(py, &data))
}

/// Writes `data` to `path` atomically (the file appears whole or not at all).
#[pyfunction]
#[pyo3(signature = (path, data, overwrite=false))]
fn fs_write_bytes(py: Python<'_>, path: String, data: &[u8], overwrite: bool) -> PyResult<u64> {
    detach(py, || sparktrain_storage::write(&path, data, overwrite)).map_err(errors::storage)
}

/// The files a path or pattern stands for, as Hadoop input formats read them: a folder's files
/// at any depth without hidden names (`_SUCCESS`, `_temporary`, `.x`), a file itself, a glob's
/// matches.
#[pyfunction]
fn fs_expand_inputs<'py>(py: Python<'py>, path: String) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let files = detach(py, || sparktrain_storage::expand_inputs(&path)).map_err(errors::storage)?;
    status_to_py(py, files)
}

/// One job writing a Hadoop-style output folder: per-attempt staging, task and job commit.
#[pyclass(module = "sparktrain._native", frozen)]
pub struct OutputJob {
    job: Job,
}

#[pymethods]
impl OutputJob {
    #[new]
    fn new(root: String, job_id: String) -> PyResult<Self> {
        Ok(OutputJob { job: Job::new(&root, &job_id).map_err(errors::storage)? })
    }

    #[getter]
    fn staging_url(&self) -> String {
        self.job.staging_url()
    }

    fn setup_task(&self, py: Python<'_>, task: u32, attempt: u32) -> PyResult<String> {
        detach(py, || self.job.setup_task(task, attempt)).map_err(errors::storage)
    }

    fn commit_task(&self, py: Python<'_>, task: u32, attempt: u32) -> PyResult<bool> {
        detach(py, || self.job.commit_task(task, attempt)).map_err(errors::storage)
    }

    fn abort_task(&self, py: Python<'_>, task: u32, attempt: u32) -> PyResult<()> {
        detach(py, || self.job.abort_task(task, attempt)).map_err(errors::storage)
    }

    /// Returns the published file URLs.
    fn commit_job(&self, py: Python<'_>, tasks: Vec<u32>, overwrite: bool) -> PyResult<Vec<String>> {
        let done = detach(py, || self.job.commit_job(&tasks, overwrite)).map_err(errors::storage)?;
        Ok(done.files)
    }

    fn abort_job(&self, py: Python<'_>) -> PyResult<()> {
        detach(py, || self.job.abort_job()).map_err(errors::storage)
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
    m.add_class::<OutputJob>()?;
    Ok(())
}
