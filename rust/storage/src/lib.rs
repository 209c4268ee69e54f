//! One blocking interface over local paths, `file://`, `hdfs://`, `viewfs://` and object
//! stores (`s3://`, `s3a://`, `gs://`, `abfs://`, `abfss://`).
//!
//! Every function takes a path or URL string:
//!
//! - a bare path (`/data/x`, `data/x`) or a `file:` URL (`file:///data/x`, `file:/data/x`): the
//!   local file system;
//! - `hdfs://host:port/path`: one NameNode;
//! - `hdfs://nameservice/path`, `hdfs:///path` (the `fs.defaultFS`) and `viewfs://cluster/path`:
//!   resolved by `hdfs-native` from the Hadoop configuration in `HADOOP_CONF_DIR` (or
//!   `HADOOP_HOME/etc/hadoop`). A `viewfs://` mount table needs a
//!   `fs.viewfs.mounttable.<name>.linkFallback` entry with this client, unlike Hadoop's own;
//! - `s3://bucket/key` (or `s3a://`), `gs://bucket/key`,
//!   `abfs[s]://container@account.dfs.core.windows.net/key`: an object store through the
//!   `object_store` crate, configured by Hadoop's keys or the cloud's environment variables
//!   ([`configure`]). Folders are key prefixes and there is no rename: see the `object` module
//!   for what that changes.
//!
//! A string is read as a URL when it starts with `scheme:` (two or more letters), so a relative
//! path whose first component holds a colon must be written `./a:b`.
//!
//! HDFS is reached through the `hdfs-native` crate: no JVM, no libhdfs, no `CLASSPATH`. Its
//! async API runs on one small process-wide tokio runtime ([`runtime`], [`block_on`]) that is
//! rebuilt in a forked child. URLs returned by [`list`], [`glob`] and [`expand_inputs`] keep the
//! caller's scheme and authority. Path strings are never percent-decoded (as in Hadoop).
//!
//! Files are published atomically: [`create`] returns an [`AtomicWriter`] that writes under a
//! hidden temporary name and renames on [`AtomicWriter::commit`].
//!
//! ```
//! # fn main() -> sparktrain_storage::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let base = dir.path().to_str().unwrap();
//! use std::io::{Read, Write};
//! use sparktrain_storage as storage;
//!
//! let url = storage::join_url(base, "out/part-00000");
//! let mut w = storage::create(&url, false)?;
//! w.write_all(b"hello").unwrap();
//! assert_eq!(w.commit()?, 5);
//!
//! let files = storage::expand_inputs(&storage::join_url(base, "out"))?;
//! assert_eq!(files.len(), 1);
//! let mut text = String::new();
//! storage::open(&files[0].url)?.read_to_string(&mut text).unwrap();
//! assert_eq!(text, "hello");
//! # Ok(())
//! # }
//! ```

mod error;
pub mod faults;
mod hdfs;
mod local;
mod location;
mod object;
mod object_config;
mod output;
mod pattern;
mod read_ahead;
mod runtime;
mod writer;

use std::io::{Read, Write};

pub use error::{Result, StorageError};
pub use location::join_url;
pub use object_config::{configure, configured, is_object_store_key};
pub use output::{JobCommit, OutputJob, STAGING_DIR, SUCCESS_MARKER};
pub use pattern::has_glob_chars;
pub use runtime::{block_on, runtime};
pub use writer::AtomicWriter;

use location::Location;
use pattern::ComponentPattern;

/// What a listing, glob or stat says about one file or folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStatus {
    /// Its URL, in the caller's form (same scheme and authority, or a bare path).
    pub url: String,
    /// Length in bytes; 0 for folders.
    pub size: u64,
    /// True for a folder.
    pub is_dir: bool,
    /// Last modification, in milliseconds since the Unix epoch.
    pub modified_ms: i64,
}

impl FileStatus {
    /// The last component of the URL (`part-00000` for `hdfs://nn:9000/d/part-00000`).
    pub fn name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or(&self.url)
    }
}

/// Names Hadoop's input formats skip: `_SUCCESS`, `_temporary`, `.crc` files, our own
/// in-flight `.name.uuid.tmp` files.
pub fn is_hidden_name(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('.')
}

fn stat(loc: &Location) -> Result<Option<FileStatus>> {
    match loc {
        Location::Local { .. } => local::stat(loc),
        Location::Hdfs { .. } => hdfs::stat(loc),
        Location::Object { .. } => object::stat(loc),
    }
}

fn list_dir(loc: &Location) -> Result<Option<Vec<FileStatus>>> {
    match loc {
        Location::Local { .. } => local::list_dir(loc),
        Location::Hdfs { .. } => hdfs::list_dir(loc),
        Location::Object { .. } => object::list_dir(loc),
    }
}

fn sort_by_url(v: &mut Vec<FileStatus>) {
    v.sort_by(|a, b| a.url.cmp(&b.url));
    v.dedup_by(|a, b| a.url == b.url);
}

/// Opens a file for reading, buffered (local: 1 MiB buffer; HDFS: read ahead in 1 MiB chunks
/// by a background task while the caller consumes).
///
/// The reader's I/O errors wrap a [`StorageError`] (retrievable with
/// `io::Error::get_ref`/`into_inner` and `downcast`) that names the URL.
pub fn open(url: &str) -> Result<Box<dyn Read + Send>> {
    let loc = Location::parse(url)?;
    match &loc {
        Location::Local { .. } => local::open(&loc),
        Location::Hdfs { .. } => hdfs::open(&loc),
        Location::Object { .. } => object::open(&loc),
    }
}

/// Reads a whole file into memory.
pub fn read(url: &str) -> Result<Vec<u8>> {
    let mut reader = open(url)?;
    let mut out = Vec::new();
    reader.read_to_end(&mut out).map_err(|source| StorageError::Io { url: url.to_string(), source })?;
    Ok(out)
}

/// Writes `data` to a file atomically (see [`create`]); returns the bytes written.
pub fn write(url: &str, data: &[u8], overwrite: bool) -> Result<u64> {
    let mut writer = create(url, overwrite)?;
    writer.write_all(data).map_err(|source| StorageError::Io { url: url.to_string(), source })?;
    writer.commit()
}

/// The local file system path that `url` names (a bare path or a `file:` URL), or None for
/// a remote file system, where writes only appear when a file is committed.
pub fn local_path(url: &str) -> Result<Option<String>> {
    Ok(match Location::parse(url)? {
        Location::Local { path, .. } => Some(path),
        _ => None,
    })
}

/// Whether [`rename`] on `url`'s file system moves a folder in one step that refuses to replace
/// an existing destination: true for local files and HDFS; false for object stores, where a
/// rename copies object by object (a writer that needs a folder to appear whole writes it in
/// place there instead).
pub fn renames_atomically(url: &str) -> Result<bool> {
    Ok(!matches!(Location::parse(url)?, Location::Object { .. }))
}

/// The status of one file or folder; [`StorageError::NotFound`] if there is none.
pub fn status(url: &str) -> Result<FileStatus> {
    let loc = Location::parse(url)?;
    stat(&loc)?.ok_or_else(|| StorageError::NotFound { url: loc.url() })
}

/// The length of a file in bytes (0 for a folder).
pub fn size(url: &str) -> Result<u64> {
    Ok(status(url)?.size)
}

/// Whether a file or folder exists.
pub fn exists(url: &str) -> Result<bool> {
    Ok(stat(&Location::parse(url)?)?.is_some())
}

/// The direct children of a folder, sorted by URL. Hidden names are included.
///
/// As in Hadoop's `listStatus`, a URL that names a file lists that one file.
pub fn list(url: &str) -> Result<Vec<FileStatus>> {
    let loc = Location::parse(url)?;
    match list_dir(&loc) {
        Ok(Some(mut children)) => {
            sort_by_url(&mut children);
            Ok(children)
        }
        Ok(None) => Ok(stat(&loc)?.into_iter().collect()),
        Err(e) => Err(e),
    }
}

/// The files and folders matching a shell-style pattern, sorted by URL.
///
/// Wildcards may appear in any path component: `*`, `?`, `[a-z]`, `[!a-z]`, `{a,b}`, and `\`
/// escapes one character. Wildcards do not match a leading `.`, so hidden files (such as the
/// temporary files of [`AtomicWriter`]) only match a component written with a leading `.`.
/// A pattern without wildcards returns the one file or folder it names (a folder is not
/// expanded; see [`expand_inputs`]). No match is an empty list, not an error.
pub fn glob(pattern: &str) -> Result<Vec<FileStatus>> {
    let mut out = Vec::new();
    for single in pattern::expand_braces(pattern)? {
        glob_one(pattern, &single, &mut out)?;
    }
    sort_by_url(&mut out);
    Ok(out)
}

/// Globs one brace-free pattern, appending matches to `out`. `full` is for error messages.
fn glob_one(full: &str, pattern: &str, out: &mut Vec<FileStatus>) -> Result<()> {
    let loc = Location::parse(pattern)?;
    let path = loc.path().to_string();
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let start = if path.starts_with('/') { "/".to_string() } else { String::new() };
    // Each candidate is a location reached so far, with its status when a listing gave it.
    let mut candidates: Vec<(Location, Option<FileStatus>)> = vec![(loc.with_path(start), None)];
    for (i, component) in components.iter().enumerate() {
        let is_last = i + 1 == components.len();
        let compiled = ComponentPattern::new(component, full)?;
        if let Some(literal) = compiled.literal() {
            // No wildcard: extend every candidate without touching the file system; the final
            // stat below drops the ones that do not exist.
            for (cand, status) in candidates.iter_mut() {
                *cand = cand.join(&literal);
                *status = None;
            }
            continue;
        }
        let mut next = Vec::new();
        for (cand, _) in &candidates {
            let children = match list_dir(cand) {
                Ok(Some(children)) => children,
                // A file, or a path that does not exist: nothing below it matches.
                Ok(None) | Err(StorageError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            for child in children {
                if (!is_last && !child.is_dir) || !compiled.matches(child.name()) {
                    continue;
                }
                let name = child.name().to_string();
                next.push((cand.join(&name), Some(child)));
            }
        }
        candidates = next;
        if candidates.is_empty() {
            return Ok(());
        }
    }
    for (cand, status) in candidates {
        match status {
            Some(status) => out.push(status),
            None => out.extend(stat(&cand)?),
        }
    }
    Ok(())
}

/// The input files a path or pattern stands for, sorted by URL, as Spark and Hadoop's input
/// formats read them:
///
/// - a folder: the files under it, descending into sub-folders (partitioned layouts such as
///   `dt=2024-01-01/`), skipping names that start with `_` or `.` (`_SUCCESS`, `_temporary`,
///   in-flight temporary files) at every level;
/// - a file: that file (even if its name starts with `_` or `.`: it was asked for by name);
/// - a pattern ([`has_glob_chars`]): its matches, hidden names dropped, folders expanded as
///   above.
///
/// A path without wildcards that does not exist is [`StorageError::NotFound`]; a pattern that
/// matches nothing gives an empty list.
pub fn expand_inputs(path_or_glob: &str) -> Result<Vec<FileStatus>> {
    let mut out = Vec::new();
    if has_glob_chars(path_or_glob) {
        for matched in glob(path_or_glob)? {
            if is_hidden_name(matched.name()) {
                continue;
            }
            if matched.is_dir {
                collect_files(&Location::parse(&matched.url)?, &mut out)?;
            } else {
                out.push(matched);
            }
        }
    } else {
        let st = status(path_or_glob)?;
        if st.is_dir {
            collect_files(&Location::parse(path_or_glob)?, &mut out)?;
        } else {
            out.push(st);
        }
    }
    sort_by_url(&mut out);
    Ok(out)
}

/// Appends the non-hidden files under `dir`, recursively.
fn collect_files(dir: &Location, out: &mut Vec<FileStatus>) -> Result<()> {
    let Some(children) = list_dir(dir)? else {
        return Ok(());
    };
    for child in children {
        if is_hidden_name(child.name()) {
            continue;
        }
        if child.is_dir {
            collect_files(&dir.join(child.name()), out)?;
        } else {
            out.push(child);
        }
    }
    Ok(())
}

/// Creates a folder and any missing parents. An existing folder is fine; a file in the way
/// is [`StorageError::AlreadyExists`].
pub fn mkdirs(url: &str) -> Result<()> {
    let loc = Location::parse(url)?;
    match &loc {
        Location::Local { .. } => local::mkdirs(&loc),
        Location::Hdfs { .. } => hdfs::mkdirs(&loc),
        Location::Object { .. } => object::mkdirs(&loc),
    }
}

/// Renames a file or folder within one file system.
///
/// Without `overwrite`, an existing destination is [`StorageError::AlreadyExists`] (checked
/// atomically for local files and on HDFS). With it, an existing file (or empty folder) is
/// replaced. A missing source is [`StorageError::NotFound`]; the destination's parent must
/// exist. Renaming across file systems is [`StorageError::InvalidUrl`].
pub fn rename(from: &str, to: &str, overwrite: bool) -> Result<()> {
    let src = Location::parse(from)?;
    let dst = Location::parse(to)?;
    if !src.same_fs(&dst) {
        return Err(StorageError::InvalidUrl {
            url: to.to_string(),
            reason: format!("cannot rename across file systems (from {from})"),
        });
    }
    match &src {
        Location::Local { .. } => local::rename(&src, &dst, overwrite),
        Location::Hdfs { .. } => hdfs::rename(&src, &dst, overwrite),
        Location::Object { .. } => object::rename(&src, &dst, overwrite),
    }
}

/// Deletes a file, or a folder (`recursive` to delete a non-empty one). Returns whether
/// something was deleted: a missing path is `Ok(false)`, not an error.
pub fn delete(url: &str, recursive: bool) -> Result<bool> {
    let loc = Location::parse(url)?;
    match &loc {
        Location::Local { .. } => local::delete(&loc, recursive),
        Location::Hdfs { .. } => hdfs::delete(&loc, recursive),
        Location::Object { .. } => object::delete(&loc, recursive),
    }
}

/// A hidden name beside `url`, in the same folder and unique to this call, of the kind
/// [`AtomicWriter`] writes to: for staging a folder that is to replace `url` as a whole
/// ([`replace_dir`]). [`is_temp_name`] is true of its last component.
pub fn sibling_temp(url: &str) -> Result<String> {
    Ok(writer::temp_beside(&Location::parse(url)?)?.url())
}

/// Whether `name` is one of the hidden temporary names [`AtomicWriter`] and [`sibling_temp`]
/// make: what a writer killed midway leaves behind.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// Puts the folder `staging` in place of the folder `dest`, as a whole: an existing `dest`
/// is renamed away to a hidden name beside it, `staging` is renamed to `dest`, and the old
/// one is deleted. A reader never sees a mix of the two; a process killed between the renames
/// leaves no `dest` and the old folder under a hidden temporary name.
pub fn replace_dir(staging: &str, dest: &str) -> Result<()> {
    let replaced = if exists(dest)? {
        let away = sibling_temp(dest)?;
        rename(dest, &away, false)?;
        Some(away)
    } else {
        None
    };
    rename(staging, dest, false)?;
    if let Some(away) = replaced {
        delete(&away, true)?;
    }
    Ok(())
}

/// Starts writing a file that appears under `url` only on [`AtomicWriter::commit`].
///
/// Missing parent folders are created. Without `overwrite`, an existing file is
/// [`StorageError::AlreadyExists`] now, and again at commit if one appeared meanwhile. A folder
/// under `url` is always [`StorageError::AlreadyExists`].
pub fn create(url: &str, overwrite: bool) -> Result<AtomicWriter> {
    AtomicWriter::create(Location::parse(url)?, overwrite)
}

#[cfg(test)]
mod tests;
