//! The local file system backend (bare paths and `file:` URLs), on `std::fs`.

use std::fs;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::FileStatus;
use crate::error::{Result, StorageError};
use crate::location::Location;

/// Read buffer for local files: big enough that readers calling `read` with small slices (a
/// TFRecord header is 12 bytes) do not turn into one system call each, and smaller than the
/// 256 KiB reads of the record reader, which then go straight to the file (`BufReader` hands a
/// read at least as large as its buffer to the file when it holds nothing) instead of being
/// copied twice.
const READ_BUFFER: usize = 64 << 10;

/// The OS path for a local location; the empty path (a relative glob's start) is `.`.
pub(crate) fn os_path(loc: &Location) -> PathBuf {
    let p = loc.path();
    PathBuf::from(if p.is_empty() { "." } else { p })
}

fn status_from(loc: &Location, meta: &fs::Metadata) -> FileStatus {
    let modified_ms = meta
        .modified()
        .ok()
        .map(|t| match t.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        })
        .unwrap_or(0);
    let is_dir = meta.is_dir();
    FileStatus {
        url: loc.url(),
        // A directory's st_size is a file-system detail (4096 on ext4); HDFS reports 0.
        size: if is_dir { 0 } else { meta.len() },
        is_dir,
        modified_ms,
    }
}

/// The status of `loc`, or `None` if nothing is there.
pub(crate) fn stat(loc: &Location) -> Result<Option<FileStatus>> {
    match fs::metadata(os_path(loc)) {
        Ok(meta) => Ok(Some(status_from(loc, &meta))),
        // "Not a directory" means a parent is a file: nothing can be there either.
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(20) => Ok(None),
        Err(e) => Err(StorageError::local(&loc.url(), e)),
    }
}

/// The children of a directory, unsorted; `None` when `loc` is a file.
pub(crate) fn list_dir(loc: &Location) -> Result<Option<Vec<FileStatus>>> {
    let url = loc.url();
    let entries = match fs::read_dir(os_path(loc)) {
        Ok(entries) => entries,
        Err(e) if e.raw_os_error() == Some(20) => return Ok(None), // ENOTDIR
        Err(e) => return Err(StorageError::local(&url, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::local(&url, e))?;
        // Names are carried as UTF-8 strings (they end up in URLs and Python str). A name that
        // is not UTF-8 is shown lossily rather than hidden, so that it is at least noticed.
        let name = entry.file_name().to_string_lossy().into_owned();
        let child = loc.join(&name);
        // `metadata` follows symlinks, as opening would; a dangling link is skipped because it
        // cannot be read anyway.
        match fs::metadata(entry.path()) {
            Ok(meta) => out.push(status_from(&child, &meta)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(StorageError::local(&child.url(), e)),
        }
    }
    Ok(Some(out))
}

/// Opens a file for buffered reading.
pub(crate) fn open(loc: &Location) -> Result<Box<dyn Read + Send>> {
    let url = loc.url();
    let path = os_path(loc);
    let file = fs::File::open(&path).map_err(|e| StorageError::local(&url, e))?;
    let meta = file.metadata().map_err(|e| StorageError::local(&url, e))?;
    if meta.is_dir() {
        // Linux opens directories happily and fails only at the first read; fail here instead.
        return Err(StorageError::Io {
            url,
            source: io::Error::new(io::ErrorKind::IsADirectory, "is a directory"),
        });
    }
    Ok(Box::new(BufReader::with_capacity(READ_BUFFER, file)))
}

pub(crate) fn mkdirs(loc: &Location) -> Result<()> {
    let path = os_path(loc);
    match fs::create_dir_all(&path) {
        Ok(()) => Ok(()),
        // create_dir_all reports a file in the way as AlreadyExists only sometimes; normalise.
        Err(e) => {
            if path.is_file() {
                Err(StorageError::AlreadyExists { url: loc.url() })
            } else {
                Err(StorageError::local(&loc.url(), e))
            }
        }
    }
}

/// Renames a file or directory. Without `overwrite`, an existing destination is an error.
pub(crate) fn rename(from: &Location, to: &Location, overwrite: bool) -> Result<()> {
    let (src, dst) = (os_path(from), os_path(to));
    let src_meta = fs::symlink_metadata(&src).map_err(|e| StorageError::local(&from.url(), e))?;
    if !overwrite {
        if src_meta.is_file() {
            return publish_no_replace(&src, &dst, to);
        }
        // Directories cannot be hard-linked. Two task attempts may race to commit the same
        // folder, so the no-replace check must be atomic: renameat2(RENAME_NOREPLACE).
        match rename_no_replace(&src, &dst) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StorageError::AlreadyExists { url: to.url() });
            }
            // A file system without RENAME_NOREPLACE: check, then rename.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => {
                if fs::symlink_metadata(&dst).is_ok() {
                    return Err(StorageError::AlreadyExists { url: to.url() });
                }
            }
            Err(e) => return Err(rename_error(from, to, &src, e)),
        }
    }
    fs::rename(&src, &dst).map_err(|e| rename_error(from, to, &src, e))
}

/// Names the right side of a failed rename: a missing source, a missing destination parent,
/// or a taken destination.
fn rename_error(from: &Location, to: &Location, src: &Path, e: io::Error) -> StorageError {
    match e.kind() {
        io::ErrorKind::NotFound if src.exists() => {
            StorageError::NotFound { url: to.parent().map(|p| p.url()).unwrap_or_else(|| to.url()) }
        }
        io::ErrorKind::NotFound => StorageError::NotFound { url: from.url() },
        // rename(2) over a non-empty directory.
        _ if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY) | Some(libc::EEXIST)) => {
            StorageError::AlreadyExists { url: to.url() }
        }
        _ => StorageError::local(&to.url(), e),
    }
}

/// `renameat2(src, dst, RENAME_NOREPLACE)`: fails with `EEXIST` if `dst` exists.
///
/// Through `syscall(2)` rather than glibc's `renameat2` wrapper, which only glibc 2.28 has: the
/// wheel targets glibc 2.17 (manylinux2014), and a kernel without the call (before 3.15)
/// answers `ENOSYS`, which the caller handles.
fn rename_no_replace(src: &Path, dst: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let (src, dst) = (c(src)?, c(dst)?);
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            src.as_ptr(),
            libc::AT_FDCWD,
            dst.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Moves the file `src` to `dst` only if `dst` does not exist, atomically where the file system
/// allows: `link(2)` fails if the name is taken, so two writers can never both succeed.
pub(crate) fn publish_no_replace(src: &Path, dst: &Path, to: &Location) -> Result<()> {
    match fs::hard_link(src, dst) {
        Ok(()) => {
            // The data is now under both names; dropping the temporary one cannot lose it.
            let _ = fs::remove_file(src);
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            Err(StorageError::AlreadyExists { url: to.url() })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StorageError::local(&to.url(), e)),
        // Some file systems (FUSE mounts, some network shares) refuse hard links: fall back to
        // check-then-rename, which is only racy against a concurrent writer of the same name.
        Err(_) => {
            if fs::symlink_metadata(dst).is_ok() {
                return Err(StorageError::AlreadyExists { url: to.url() });
            }
            fs::rename(src, dst).map_err(|e| StorageError::local(&to.url(), e))
        }
    }
}

/// Deletes a file or directory; returns false if there was nothing to delete.
pub(crate) fn delete(loc: &Location, recursive: bool) -> Result<bool> {
    let path = os_path(loc);
    let meta = match fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(StorageError::local(&loc.url(), e)),
    };
    let result = if meta.is_dir() {
        if recursive { fs::remove_dir_all(&path) } else { fs::remove_dir(&path) }
    } else {
        fs::remove_file(&path)
    };
    match result {
        Ok(()) => Ok(true),
        // Someone else removed it first: the end state is what was asked for.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StorageError::local(&loc.url(), e)),
    }
}
