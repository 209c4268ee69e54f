//! Atomic publish: write under a hidden temporary name, then rename to the final name.
//!
//! Readers (and Spark, and `tf.data`) must never see a half-written file under its final name,
//! whether the writer fails, is killed, or is simply dropped. The temporary name sits in the
//! destination folder (a rename never crosses file systems or HDFS name services) and starts
//! with `.`, which globbing and [`crate::expand_inputs`] skip, as Hadoop's input formats do.
//!
//! Object stores need no temporary name: an upload appears whole when it completes (a single
//! PUT for a small file, a multipart upload for a large one), so the writer uploads to the
//! final key and completes the upload on commit.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::sync::Arc;

use bytes::BytesMut;
use hdfs_native::file::FileWriter;
use hdfs_native::{Client, WriteOptions};
use object_store::path::Path as ObjectKey;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tokio::task::JoinHandle;

use crate::error::{Result, StorageError};
use crate::location::Location;
use crate::runtime::{self, block_on};
use crate::{hdfs, local, object};

/// Bytes gathered before they are handed to the HDFS block writer. The writer cuts them into
/// 64 KiB packets itself; handing over big chunks keeps the blocking hand-offs rare.
const HDFS_WRITE_CHUNK: usize = 4 << 20;
/// Write buffer for local files.
const LOCAL_WRITE_BUFFER: usize = 1 << 20;
/// Bytes of one part of a multipart upload (S3 wants at least 5 MiB but for the last), and the
/// size under which a file goes up in one PUT.
const OBJECT_PART: usize = 8 << 20;
/// Parts uploading at once per file; a write waits for the oldest when more are under way.
const OBJECT_PARTS_IN_FLIGHT: usize = 2;
/// Longest part of the final name kept in the temporary name; file systems cap a name at 255
/// bytes and the temporary name adds 38.
const MAX_NAME_IN_TEMP: usize = 160;

enum Sink {
    Local(BufWriter<fs::File>),
    Hdfs {
        // Boxed: the HDFS writer is a few KiB, the local one a few words.
        writer: Box<FileWriter>,
        buffer: BytesMut,
    },
    Object(Box<ObjectUpload>),
}

/// An upload to an object store: buffered until a part is full, then a multipart upload whose
/// parts go up in the background.
struct ObjectUpload {
    store: std::sync::Arc<dyn ObjectStore>,
    key: ObjectKey,
    buffer: BytesMut,
    /// Started with the first full part; a smaller file goes up in one PUT at commit.
    upload: Option<Box<dyn MultipartUpload>>,
    parts: std::collections::VecDeque<JoinHandle<object_store::Result<()>>>,
}

/// A file being written; it appears under its final name only when [`commit`](Self::commit)
/// succeeds.
///
/// Created by [`crate::create`]. Implements [`Write`]; writes are buffered (HDFS: 4 MiB at a
/// time). If any write fails, or the writer is dropped without `commit`, the temporary file is
/// removed and nothing appears under the final name.
pub struct AtomicWriter {
    dest: Location,
    tmp: Location,
    overwrite: bool,
    written: u64,
    /// `None` once committed or aborted.
    sink: Option<Sink>,
    /// Whether the temporary file may still exist and must be removed on failure or drop.
    tmp_live: bool,
    /// Set when a write failed: the content is incomplete, so it must never be published.
    failed: bool,
    /// Kept for removing the temporary file after the sink is gone.
    hdfs_client: Option<Arc<Client>>,
}

/// A hidden name beside `name`, unique per writer.
pub(crate) fn temp_name(name: &str) -> String {
    let mut cut = name.len().min(MAX_NAME_IN_TEMP);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(".{}.{}.tmp", &name[..cut], uuid::Uuid::new_v4().simple())
}

/// A hidden name beside `dest`, in the same folder and unique to this call.
pub(crate) fn temp_beside(dest: &Location) -> Result<Location> {
    let (Some(name), Some(parent)) = (dest.file_name(), dest.parent()) else {
        return Err(StorageError::InvalidUrl {
            url: dest.url(),
            reason: "it needs a file name and a parent folder".to_string(),
        });
    };
    Ok(parent.join(&temp_name(name)))
}

impl AtomicWriter {
    pub(crate) fn create(dest: Location, overwrite: bool) -> Result<AtomicWriter> {
        let tmp = temp_beside(&dest)?;
        // Refuse early what commit would refuse anyway, before any bytes are produced.
        if let Some(existing) = crate::stat(&dest)?
            && (existing.is_dir || !overwrite)
        {
            return Err(StorageError::AlreadyExists { url: dest.url() });
        }
        let mut writer = AtomicWriter {
            dest,
            tmp,
            overwrite,
            written: 0,
            sink: None,
            tmp_live: false,
            failed: false,
            hdfs_client: None,
        };
        match &writer.tmp {
            Location::Local { .. } => {
                // The temporary file's folder is the destination's.
                if let Some(parent) = writer.tmp.parent() {
                    fs::create_dir_all(local::os_path(&parent))
                        .map_err(|e| StorageError::local(&parent.url(), e))?;
                }
                // create_new: the name is fresh by construction, but never clobber anything.
                let file = fs::File::create_new(local::os_path(&writer.tmp))
                    .map_err(|e| StorageError::local(&writer.tmp.url(), e))?;
                writer.tmp_live = true;
                writer.sink = Some(Sink::Local(BufWriter::with_capacity(LOCAL_WRITE_BUFFER, file)));
            }
            Location::Object { .. } => {
                // Keys under an object are possible in a store, but no file system (nor
                // Hadoop's S3A) lets a file be a folder too.
                if let Some(parent) = writer.dest.parent()
                    && crate::stat(&parent)?.is_some_and(|st| !st.is_dir)
                {
                    return Err(StorageError::InvalidUrl {
                        url: writer.dest.url(),
                        reason: format!("its parent {} is a file", parent.url()),
                    });
                }
                let (store, key) = object::store_for(&writer.dest)?;
                writer.sink = Some(Sink::Object(Box::new(ObjectUpload {
                    store,
                    key,
                    buffer: BytesMut::with_capacity(OBJECT_PART),
                    upload: None,
                    parts: Default::default(),
                })));
            }
            Location::Hdfs { .. } => {
                let (client, path) = hdfs::client_for(&writer.tmp)?;
                let options = WriteOptions::default().overwrite(false).create_parent(true);
                let file = block_on(client.create(path, options))?
                    .map_err(|e| StorageError::hdfs(&writer.tmp.url(), e))?;
                writer.tmp_live = true;
                writer.hdfs_client = Some(client);
                writer.sink = Some(Sink::Hdfs {
                    writer: Box::new(file),
                    buffer: BytesMut::with_capacity(HDFS_WRITE_CHUNK),
                });
            }
        }
        Ok(writer)
    }

    /// The final URL this writer publishes to.
    pub fn url(&self) -> String {
        self.dest.url()
    }

    /// Bytes accepted so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Finishes the file and publishes it under its final name; returns the bytes written.
    ///
    /// Flushes, closes (on HDFS: completes the last block with the NameNode), then renames.
    /// Without `overwrite`, fails with [`StorageError::AlreadyExists`] if the final name was
    /// taken meanwhile, even by a concurrent writer (the rename refuses to replace). On any
    /// error the temporary file is removed and nothing is published.
    pub fn commit(mut self) -> Result<u64> {
        let result = self.finish();
        if result.is_err() {
            self.abort();
        }
        result.map(|()| self.written)
    }

    fn finish(&mut self) -> Result<()> {
        if self.failed {
            return Err(StorageError::Io {
                url: self.dest.url(),
                source: io::Error::other("an earlier write failed; nothing was published"),
            });
        }
        let Some(sink) = self.sink.take() else {
            return Err(StorageError::Io {
                url: self.dest.url(),
                source: io::Error::other("writer already finished"),
            });
        };
        let tmp_url = self.tmp.url();
        match sink {
            Sink::Local(buffered) => {
                let file =
                    buffered.into_inner().map_err(|e| StorageError::local(&tmp_url, e.into_error()))?;
                // Durable before visible: after a crash the final name must not hold a
                // truncated file.
                file.sync_all().map_err(|e| StorageError::local(&tmp_url, e))?;
                drop(file);
                let (src, dst) = (local::os_path(&self.tmp), local::os_path(&self.dest));
                if self.overwrite {
                    fs::rename(&src, &dst).map_err(|e| StorageError::local(&self.dest.url(), e))?;
                } else {
                    local::publish_no_replace(&src, &dst, &self.dest)?;
                }
            }
            Sink::Hdfs { mut writer, buffer } => {
                let (client, tmp_path) = hdfs::client_for(&self.tmp)?;
                let (_, dest_path) = hdfs::client_for(&self.dest)?;
                let overwrite = self.overwrite;
                block_on(async {
                    if !buffer.is_empty() {
                        writer.write_bytes(buffer.freeze()).await?;
                    }
                    writer.close().await
                })?
                .map_err(|e| StorageError::hdfs(&tmp_url, e))?;
                // rename2 without OVERWRITE fails if the destination exists, atomically on the
                // NameNode, so two writers of one name cannot both win.
                block_on(client.rename(tmp_path, dest_path, overwrite))?
                    .map_err(|e| hdfs::rename_error(&self.tmp, &self.dest, e))?;
            }
            Sink::Object(mut upload) => match block_on(upload.finish(self.overwrite))? {
                Ok(()) => {}
                Err(e) => {
                    upload.abort();
                    return Err(StorageError::object(&self.dest.url(), e));
                }
            },
        }
        self.tmp_live = false;
        Ok(())
    }

    /// Drops the sink and removes the temporary file, best effort.
    fn abort(&mut self) {
        // Dropping an unclosed HDFS writer only forgets its lease locally; the delete below
        // removes the under-construction file from the NameNode. A multipart upload left
        // open costs storage until aborted.
        if let Some(Sink::Object(mut upload)) = self.sink.take() {
            upload.abort();
        }
        self.sink = None;
        if !self.tmp_live {
            return;
        }
        self.tmp_live = false;
        match &self.tmp {
            Location::Local { .. } => {
                let _ = fs::remove_file(local::os_path(&self.tmp));
            }
            // Object uploads have no temporary name (aborted above).
            Location::Object { .. } => {}
            Location::Hdfs { path, .. } => {
                let Some(client) = self.hdfs_client.clone() else {
                    return;
                };
                let path = path.clone();
                if runtime::ensure_blocking_allowed().is_ok() {
                    let _ = block_on(async move { client.delete(&path, false).await });
                } else if let Ok(rt) = runtime::runtime() {
                    // Dropped on a runtime thread, where blocking is not allowed: delete in the
                    // background instead.
                    rt.spawn(async move {
                        let _ = client.delete(&path, false).await;
                    });
                }
            }
        }
    }

    /// Marks the writer failed and cleans up, then hands the error back as an `io::Error`.
    fn fail(&mut self, e: StorageError) -> io::Error {
        self.failed = true;
        self.abort();
        e.into_io()
    }

    fn send_hdfs_buffer(&mut self) -> io::Result<()> {
        let Some(Sink::Hdfs { writer, buffer, .. }) = self.sink.as_mut() else {
            return Ok(());
        };
        if buffer.is_empty() {
            return Ok(());
        }
        let chunk = buffer.split().freeze();
        let sent = block_on(writer.write_bytes(chunk));
        // Reclaims the chunk's memory once the block writer has let go of it.
        buffer.reserve(HDFS_WRITE_CHUNK);
        match sent {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                let e = StorageError::hdfs(&self.tmp.url(), e);
                Err(self.fail(e))
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn closed_error(&self) -> io::Error {
        io::Error::other(format!(
            "{}: writer failed earlier or is finished; nothing will be published",
            self.dest.url()
        ))
    }
}

impl Write for AtomicWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let hdfs_full = match self.sink.as_mut() {
            None => return Err(self.closed_error()),
            Some(Sink::Local(w)) => match w.write(data) {
                Ok(n) => {
                    self.written += n as u64;
                    return Ok(n);
                }
                Err(e) => {
                    let e = StorageError::local(&self.tmp.url(), e);
                    return Err(self.fail(e));
                }
            },
            Some(Sink::Hdfs { buffer, .. }) => {
                buffer.extend_from_slice(data);
                buffer.len() >= HDFS_WRITE_CHUNK
            }
            Some(Sink::Object(upload)) => {
                upload.buffer.extend_from_slice(data);
                if upload.buffer.len() >= OBJECT_PART
                    && let Err(e) = upload.send_part()
                {
                    let e = StorageError::object(&self.dest.url(), e);
                    return Err(self.fail(e));
                }
                self.written += data.len() as u64;
                return Ok(data.len());
            }
        };
        self.written += data.len() as u64;
        if hdfs_full {
            self.send_hdfs_buffer()?;
        }
        Ok(data.len())
    }

    /// Pushes buffered bytes to the OS or to the HDFS block writer. The file stays invisible
    /// under its final name until `commit` either way (HDFS has no hflush in `hdfs-native`).
    fn flush(&mut self) -> io::Result<()> {
        match self.sink.as_mut() {
            None => Err(self.closed_error()),
            Some(Sink::Local(w)) => match w.flush() {
                Ok(()) => Ok(()),
                Err(e) => {
                    let e = StorageError::local(&self.tmp.url(), e);
                    Err(self.fail(e))
                }
            },
            Some(Sink::Hdfs { .. }) => self.send_hdfs_buffer(),
            // Parts go up when full: a smaller one would break S3's 5 MiB minimum part size.
            Some(Sink::Object(_)) => Ok(()),
        }
    }
}

impl ObjectUpload {
    /// Uploads the full buffer as the next part, starting the multipart upload with the first
    /// one, and waits for the oldest part when too many are under way.
    fn send_part(&mut self) -> object_store::Result<()> {
        let blocked =
            |e: StorageError| object_store::Error::Generic { store: "sparktrain", source: Box::new(e) };
        if self.upload.is_none() {
            let started = block_on(self.store.put_multipart(&self.key)).map_err(blocked)??;
            self.upload = Some(started);
        }
        let Some(upload) = self.upload.as_mut() else { return Ok(()) };
        let part = upload.put_part(PutPayload::from(self.buffer.split().freeze()));
        self.parts.push_back(runtime::runtime().map_err(blocked)?.spawn(part));
        self.buffer.reserve(OBJECT_PART);
        while self.parts.len() > OBJECT_PARTS_IN_FLIGHT {
            let oldest = self.parts.pop_front().expect("more parts than the limit");
            wait_part(block_on(oldest).map_err(blocked)?)?;
        }
        Ok(())
    }

    /// Completes the upload: one PUT when no part went up yet, else the last part and the
    /// completion. Without `overwrite`, an object that exists by then is `AlreadyExists`:
    /// refused by the store itself for a single PUT, checked just before completing otherwise.
    async fn finish(&mut self, overwrite: bool) -> object_store::Result<()> {
        let rest = self.buffer.split().freeze();
        let Some(upload) = self.upload.as_mut() else {
            let mode = if overwrite { PutMode::Overwrite } else { PutMode::Create };
            let opts = PutOptions { mode, ..Default::default() };
            return match self.store.put_opts(&self.key, PutPayload::from(rest.clone()), opts).await {
                // A store without conditional writes: check, then write.
                Err(object_store::Error::NotImplemented { .. }) => {
                    if self.store.head(&self.key).await.is_ok() {
                        return Err(object_store::Error::AlreadyExists {
                            path: self.key.to_string(),
                            source: "the object exists".into(),
                        });
                    }
                    self.store.put(&self.key, PutPayload::from(rest)).await.map(|_| ())
                }
                other => other.map(|_| ()),
            };
        };
        if !rest.is_empty() {
            self.parts.push_back(tokio::spawn(upload.put_part(PutPayload::from(rest))));
        }
        while let Some(part) = self.parts.pop_front() {
            wait_part(part.await)?;
        }
        if !overwrite && self.store.head(&self.key).await.is_ok() {
            return Err(object_store::Error::AlreadyExists {
                path: self.key.to_string(),
                source: "the object exists".into(),
            });
        }
        upload.complete().await.map(|_| ())
    }

    /// Abandons a started multipart upload, best effort (in the background when called on a
    /// runtime thread, where blocking is not allowed).
    fn abort(&mut self) {
        for part in self.parts.drain(..) {
            part.abort();
        }
        let Some(mut upload) = self.upload.take() else { return };
        if runtime::ensure_blocking_allowed().is_ok() {
            let _ = block_on(upload.abort());
        } else if let Ok(rt) = runtime::runtime() {
            rt.spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }
}

/// The outcome of a part's upload task.
fn wait_part(
    joined: std::result::Result<object_store::Result<()>, tokio::task::JoinError>,
) -> object_store::Result<()> {
    joined.map_err(|e| object_store::Error::Generic { store: "sparktrain", source: Box::new(e) })?
}

impl Drop for AtomicWriter {
    fn drop(&mut self) {
        self.abort();
    }
}

impl std::fmt::Debug for AtomicWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicWriter")
            .field("url", &self.dest.url())
            .field("tmp", &self.tmp.url())
            .field("overwrite", &self.overwrite)
            .field("written", &self.written)
            .finish()
    }
}
