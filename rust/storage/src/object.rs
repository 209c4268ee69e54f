//! The object-store backend (S3, GCS, Azure) on `object_store`.
//!
//! Object stores have keys, not folders: a "folder" here is a key prefix that holds at least one
//! object, so [`mkdirs`] creates nothing and a folder disappears with its last file. What
//! this changes for callers:
//!
//! - an upload is atomic by itself (a single PUT, or a multipart upload that appears only when
//!   completed), so [`crate::AtomicWriter`] writes to the final key with no temporary name;
//!   without `overwrite` it asks the store to refuse an existing key where the store can
//!   (S3's `If-None-Match`, GCS and Azure preconditions);
//! - there is no rename: [`rename`] copies each object and deletes the original, so renaming a
//!   folder (a checkpoint replacing the last one) is neither atomic nor cheap, and a rename
//!   without `overwrite` checks for the destination before copying (a writer racing in between
//!   is not detected). The output commit (the `output` module) therefore renames nothing here:
//!   a task commits with a conditional upload of its manifest, and the job commit copies the
//!   files the manifests list ([`copy_new`]).

use std::io::Read;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::FileStatus;
use crate::error::{Result, StorageError};
use crate::location::Location;
use crate::read_ahead;
use crate::runtime::{self, block_on};

/// The store for a location's bucket, and the key (without leading slash) inside it.
pub(crate) fn store_for(loc: &Location) -> Result<(Arc<dyn ObjectStore>, Path)> {
    match loc {
        Location::Object { scheme, bucket, path } => {
            let key = path.trim_start_matches('/');
            let key = Path::parse(key).map_err(|e| StorageError::InvalidUrl {
                url: loc.url(),
                reason: format!("not a valid object key: {e}"),
            })?;
            Ok((runtime::object_store(scheme, bucket)?, key))
        }
        _ => Err(StorageError::InvalidUrl {
            url: loc.url(),
            reason: "not an object-store location".to_string(),
        }),
    }
}

fn is_root(key: &Path) -> bool {
    key.as_ref().is_empty()
}

fn prefix(key: &Path) -> Option<&Path> {
    if is_root(key) { None } else { Some(key) }
}

fn file_status(loc: &Location, meta: &object_store::ObjectMeta) -> FileStatus {
    FileStatus {
        url: loc.url(),
        size: meta.size,
        is_dir: false,
        modified_ms: meta.last_modified.timestamp_millis(),
    }
}

fn dir_status(loc: &Location) -> FileStatus {
    FileStatus { url: loc.url(), size: 0, is_dir: true, modified_ms: 0 }
}

/// The status of `loc`: an object, a prefix with objects under it (a folder), or `None`.
pub(crate) fn stat(loc: &Location) -> Result<Option<FileStatus>> {
    let (store, key) = store_for(loc)?;
    if is_root(&key) {
        return Ok(Some(dir_status(loc))); // the bucket itself
    }
    match block_on(store.head(&key))? {
        Ok(meta) => return Ok(Some(file_status(loc, &meta))),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(StorageError::object(&loc.url(), e)),
    }
    let under = block_on(async { store.list(Some(&key)).next().await })?;
    match under {
        None => Ok(None),
        Some(Ok(_)) => Ok(Some(dir_status(loc))),
        Some(Err(e)) => Err(StorageError::object(&loc.url(), e)),
    }
}

/// The children of a folder, unsorted; `None` when `loc` is an object; `NotFound` when nothing
/// is under the prefix (as HDFS says of a missing folder).
pub(crate) fn list_dir(loc: &Location) -> Result<Option<Vec<FileStatus>>> {
    let (store, key) = store_for(loc)?;
    let listing = block_on(store.list_with_delimiter(prefix(&key)))?
        .map_err(|e| StorageError::object(&loc.url(), e))?;
    let mut out = Vec::with_capacity(listing.objects.len() + listing.common_prefixes.len());
    for meta in &listing.objects {
        if let Some(name) = meta.location.filename() {
            out.push(file_status(&loc.join(name), meta));
        }
    }
    for dir in &listing.common_prefixes {
        if let Some(name) = dir.filename() {
            out.push(dir_status(&loc.join(name)));
        }
    }
    if out.is_empty() && !is_root(&key) {
        return match stat(loc)? {
            Some(st) if !st.is_dir => Ok(None),
            _ => Err(StorageError::NotFound { url: loc.url() }),
        };
    }
    Ok(Some(out))
}

/// Object stores have no folders to create; an object under the name is `AlreadyExists`, as
/// a file in the way is on a file system.
pub(crate) fn mkdirs(loc: &Location) -> Result<()> {
    match stat(loc)? {
        Some(st) if !st.is_dir => Err(StorageError::AlreadyExists { url: loc.url() }),
        _ => Ok(()),
    }
}

/// Every object under `loc` (itself if it is one), recursively.
fn objects_under(loc: &Location) -> Result<Vec<Path>> {
    let (store, key) = store_for(loc)?;
    block_on(store.list(prefix(&key)).map_ok(|meta| meta.location).try_collect::<Vec<_>>())?
        .map_err(|e| StorageError::object(&loc.url(), e))
}

/// Copies then deletes: object stores have no rename (see the module notes).
pub(crate) fn rename(from: &Location, to: &Location, overwrite: bool) -> Result<()> {
    let (store, src) = store_for(from)?;
    let (_, dst) = store_for(to)?;
    let Some(source) = stat(from)? else {
        return Err(StorageError::NotFound { url: from.url() });
    };
    if let Some(existing) = stat(to)?
        && (!overwrite || existing.is_dir)
    {
        return Err(StorageError::AlreadyExists { url: to.url() });
    }
    if !source.is_dir {
        block_on(store.copy(&src, &dst))?.map_err(|e| StorageError::object(&to.url(), e))?;
        return block_on(store.delete(&src))?.map_err(|e| StorageError::object(&from.url(), e));
    }
    let moved = objects_under(from)?;
    let src_prefix = src.as_ref().to_string();
    block_on(async {
        for object in &moved {
            let rest =
                object.as_ref().strip_prefix(&src_prefix).unwrap_or(object.as_ref()).trim_start_matches('/');
            let target = Path::from(format!("{}/{rest}", dst.as_ref()));
            store.copy(object, &target).await?;
        }
        for object in &moved {
            store.delete(object).await?;
        }
        Ok::<(), object_store::Error>(())
    })?
    .map_err(|e| StorageError::object(&from.url(), e))
}

/// Copies at once: a job commit's copies are independent, and each waits mostly on the store.
const COPIES_IN_FLIGHT: usize = 8;

/// Copies each `(from, to)` object, several at a time, refusing a destination that exists
/// (checked before each copy, so a writer racing in between is not detected). The sources
/// stay: the output commit deletes them with their staging folder.
pub(crate) fn copy_new(pairs: &[(Location, Location)]) -> Result<()> {
    let copies = pairs
        .iter()
        .map(|(from, to)| {
            let (store, src) = store_for(from)?;
            let (_, dst) = store_for(to)?;
            Ok((store, src, dst, from.url(), to.url()))
        })
        .collect::<Result<Vec<_>>>()?;
    block_on(
        futures::stream::iter(copies)
            .map(|(store, src, dst, from, to)| async move {
                match store.head(&dst).await {
                    Ok(_) => return Err(StorageError::AlreadyExists { url: to }),
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(StorageError::object(&to, e)),
                }
                store.copy(&src, &dst).await.map_err(|e| match e {
                    object_store::Error::NotFound { .. } => StorageError::NotFound { url: from },
                    e => StorageError::object(&to, e),
                })
            })
            .buffer_unordered(COPIES_IN_FLIGHT)
            .try_collect::<Vec<()>>(),
    )?
    .map(drop)
}

/// Deletes an object, or every object under a prefix (`recursive`); whether anything was there.
pub(crate) fn delete(loc: &Location, recursive: bool) -> Result<bool> {
    let (store, key) = store_for(loc)?;
    match stat(loc)? {
        None => Ok(false),
        Some(st) if !st.is_dir => {
            block_on(store.delete(&key))?.map_err(|e| StorageError::object(&loc.url(), e))?;
            Ok(true)
        }
        Some(_) if !recursive => Err(StorageError::Io {
            url: loc.url(),
            source: std::io::Error::new(
                std::io::ErrorKind::DirectoryNotEmpty,
                "the folder is not empty (delete it recursively)",
            ),
        }),
        Some(_) => {
            let objects = objects_under(loc)?;
            let stream = futures::stream::iter(objects.into_iter().map(Ok)).boxed();
            block_on(store.delete_stream(stream).try_collect::<Vec<_>>())?
                .map_err(|e| StorageError::object(&loc.url(), e))?;
            Ok(true)
        }
    }
}

/// Opens an object and starts reading it ahead on the shared runtime.
pub(crate) fn open(loc: &Location) -> Result<Box<dyn Read + Send>> {
    let url = loc.url();
    let (store, key) = store_for(loc)?;
    let got = block_on(store.get(&key))?.map_err(|e| match StorageError::object(&url, e) {
        // A prefix is a folder, which cannot be opened: say so rather than "not found".
        StorageError::NotFound { .. } if matches!(stat(loc), Ok(Some(st)) if st.is_dir) => {
            StorageError::InvalidUrl { url: url.clone(), reason: "is a folder, not a file".to_string() }
        }
        other => other,
    })?;
    let length = got.meta.size;
    let error_url = url.clone();
    let stream = got.into_stream().map(move |r| r.map_err(|e| StorageError::object(&error_url, e)));
    read_ahead::reader(url, length, Box::pin(stream))
}
