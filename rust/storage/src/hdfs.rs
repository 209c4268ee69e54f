//! The HDFS and viewfs backend, on `hdfs-native` (no JVM, no libhdfs).
//!
//! Every call blocks on the shared runtime ([`crate::runtime`]). Reads run ahead
//! ([`crate::read_ahead`]): a task on the runtime pulls the file from the DataNodes while the
//! caller decodes what arrived.

use std::io::Read;
use std::sync::Arc;

use futures::StreamExt;
use hdfs_native::{Client, HdfsError};

use crate::FileStatus;
use crate::error::{Result, StorageError};
use crate::location::Location;
use crate::read_ahead;
use crate::runtime::{self, block_on};

/// The client for a location's file system, and the path inside it.
pub(crate) fn client_for(loc: &Location) -> Result<(Arc<Client>, &str)> {
    match loc {
        Location::Hdfs { scheme, authority, path } => Ok((runtime::client(scheme, authority)?, path)),
        _ => Err(StorageError::InvalidUrl { url: loc.url(), reason: "not an HDFS location".to_string() }),
    }
}

fn status_from(loc: &Location, st: &hdfs_native::client::FileStatus) -> FileStatus {
    FileStatus {
        url: loc.url(),
        size: if st.isdir { 0 } else { st.length as u64 },
        is_dir: st.isdir,
        modified_ms: i64::try_from(st.modification_time).unwrap_or(i64::MAX),
    }
}

/// The status of `loc`, or `None` if nothing is there.
pub(crate) fn stat(loc: &Location) -> Result<Option<FileStatus>> {
    let (client, path) = client_for(loc)?;
    match block_on(client.get_file_info(path))? {
        Ok(st) => Ok(Some(status_from(loc, &st))),
        Err(e) => match StorageError::hdfs(&loc.url(), e) {
            StorageError::NotFound { .. } => Ok(None),
            other => Err(other),
        },
    }
}

/// The children of a directory, unsorted; `None` when `loc` is a file.
pub(crate) fn list_dir(loc: &Location) -> Result<Option<Vec<FileStatus>>> {
    let (client, path) = client_for(loc)?;
    let entries =
        block_on(client.list_status(path, false))?.map_err(|e| StorageError::hdfs(&loc.url(), e))?;
    // Listing a file returns the file itself, under the listed path (a child always has a
    // non-empty name appended).
    if let [only] = entries.as_slice()
        && only.path.trim_end_matches('/') == path.trim_end_matches('/')
        && !only.isdir
    {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(entries.len());
    for entry in &entries {
        let name = entry.path.rsplit('/').next().unwrap_or(&entry.path);
        if name.is_empty() {
            continue;
        }
        out.push(status_from(&loc.join(name), entry));
    }
    Ok(Some(out))
}

pub(crate) fn mkdirs(loc: &Location) -> Result<()> {
    let (client, path) = client_for(loc)?;
    // 0o755 before the NameNode's umask, as `hdfs dfs -mkdir -p` does. A file under the name
    // itself comes back as FileAlreadyExistsException (so AlreadyExists); a file in place of
    // a parent stays an HDFS error whose message names that parent.
    block_on(client.mkdirs(path, 0o755, true))?.map_err(|e| StorageError::hdfs(&loc.url(), e))
}

pub(crate) fn rename(from: &Location, to: &Location, overwrite: bool) -> Result<()> {
    let (client, src) = client_for(from)?;
    let (_, dst) = client_for(to)?;
    block_on(client.rename(src, dst, overwrite))?.map_err(|e| rename_error(from, to, e))
}

/// Names the right side of a failed rename: a missing source, a missing destination parent,
/// or a taken destination.
pub(crate) fn rename_error(from: &Location, to: &Location, e: HdfsError) -> StorageError {
    let mentions_destination = match &e {
        HdfsError::RPCError(_, msg) => msg.contains("destination"),
        _ => false,
    };
    match StorageError::hdfs(&from.url(), e) {
        StorageError::NotFound { .. } if mentions_destination => {
            StorageError::NotFound { url: to.parent().map(|p| p.url()).unwrap_or_else(|| to.url()) }
        }
        StorageError::AlreadyExists { .. } => StorageError::AlreadyExists { url: to.url() },
        other => other,
    }
}

pub(crate) fn delete(loc: &Location, recursive: bool) -> Result<bool> {
    let (client, path) = client_for(loc)?;
    match block_on(client.delete(path, recursive))? {
        Ok(deleted) => Ok(deleted),
        Err(e) => match StorageError::hdfs(&loc.url(), e) {
            StorageError::NotFound { .. } => Ok(false),
            other => Err(other),
        },
    }
}

/// Opens a file and starts reading it ahead on the shared runtime.
pub(crate) fn open(loc: &Location) -> Result<Box<dyn Read + Send>> {
    let url = loc.url();
    let (client, path) = client_for(loc)?;
    let reader = block_on(client.read(path))?.map_err(|e| StorageError::hdfs(&url, e))?;
    let length = reader.file_length();
    // One stream over the whole file: one block read request per block, not one per chunk.
    let error_url = url.clone();
    let stream =
        reader.read_range_stream(0, length).map(move |r| r.map_err(|e| StorageError::hdfs(&error_url, e)));
    read_ahead::reader(url, length as u64, Box::pin(stream))
}
