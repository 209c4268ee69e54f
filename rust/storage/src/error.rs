//! The crate's error type.
//!
//! Every variant names the URL (or scheme) at fault, because the caller that finally shows the
//! error (usually Python, through the binding crate) has lost track of which of the many files of
//! a job was being touched.

use std::io;

/// An error from a storage operation.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The file or folder does not exist (or a parent of it does not).
    #[error("not found: {url}")]
    NotFound {
        /// The URL or path that was looked for.
        url: String,
    },

    /// Something already exists under a name that had to be free.
    #[error("already exists: {url}")]
    AlreadyExists {
        /// The URL or path that is taken.
        url: String,
    },

    /// The string could not be understood as a path or URL, or the operation makes no sense for
    /// it (such as renaming across two file systems).
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as the caller gave it.
        url: String,
        /// Why it was refused.
        reason: String,
    },

    /// A local file system call failed.
    #[error("I/O error on {url}: {source}")]
    Io {
        /// The URL or path being accessed.
        url: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// The HDFS client reported an error.
    #[error("HDFS error on {url}: {}", first_line(source))]
    Hdfs {
        /// The URL being accessed.
        url: String,
        /// The error from `hdfs-native`.
        #[source]
        source: hdfs_native::HdfsError,
    },

    /// An object store (S3, GCS, Azure) reported an error.
    #[error("object store error on {url}: {}", first_line(&**source))]
    ObjectStore {
        /// The URL being accessed.
        url: String,
        /// The error from `object_store` (boxed: it is large).
        #[source]
        source: Box<object_store::Error>,
    },

    /// A setting of the storage backends is wrong (an object-store key's value, or its file).
    #[error("storage setting {key}: {reason}")]
    Config {
        /// The key (or the configuration file) at fault.
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The URL scheme is not one this crate serves.
    #[error(
        "unsupported URL scheme {scheme:?} (supported: bare paths, file://, hdfs://, viewfs://, s3://, s3a://, gs://, abfs://, abfss://)"
    )]
    Unsupported {
        /// The scheme, as written in the URL.
        scheme: String,
    },

    /// A blocking call was made from a thread that is driving a tokio runtime, where blocking
    /// would stall (or deadlock) that runtime; tokio itself would panic.
    #[error(
        "blocking storage call made from inside a tokio runtime (use spawn_blocking, or call from a plain thread)"
    )]
    InsideRuntime,

    /// The process-wide tokio runtime could not be built.
    #[error("cannot start the storage I/O runtime: {source}")]
    Runtime {
        /// The error from tokio's builder.
        #[source]
        source: io::Error,
    },
}

/// The first line of an HDFS error: NameNode errors carry the whole Java stack trace, which the
/// source error keeps for whoever wants it but which drowns the message.
fn first_line(e: &dyn std::error::Error) -> String {
    let text = e.to_string();
    match text.split_once('\n') {
        Some((first, _)) => format!("{} (Java stack trace omitted)", first.trim_end()),
        None => text,
    }
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, StorageError>;

impl StorageError {
    /// Wraps a local I/O error, turning the kinds that have their own variant into it so that
    /// callers can match on `NotFound`/`AlreadyExists` whatever the backend.
    pub(crate) fn local(url: &str, source: io::Error) -> Self {
        match source.kind() {
            io::ErrorKind::NotFound => StorageError::NotFound { url: url.to_string() },
            io::ErrorKind::AlreadyExists => StorageError::AlreadyExists { url: url.to_string() },
            _ => StorageError::Io { url: url.to_string(), source },
        }
    }

    /// Wraps an HDFS error the same way. The NameNode reports missing or taken names as Java
    /// exceptions (class name plus message) inside an RPC error, so those are recognised by
    /// class name.
    pub(crate) fn hdfs(url: &str, source: hdfs_native::HdfsError) -> Self {
        use hdfs_native::HdfsError as H;
        let url = url.to_string();
        match &source {
            H::FileNotFound(_) => StorageError::NotFound { url },
            H::AlreadyExists(_) => StorageError::AlreadyExists { url },
            // The NameNode also uses FileNotFoundException for "Path is not a file" (opening a
            // directory); that one is not a missing name.
            H::RPCError(class, msg)
                if class == "java.io.FileNotFoundException" && !msg.contains("is not a file") =>
            {
                StorageError::NotFound { url }
            }
            H::RPCError(class, _) if class == "org.apache.hadoop.fs.FileAlreadyExistsException" => {
                StorageError::AlreadyExists { url }
            }
            _ => StorageError::Hdfs { url, source },
        }
    }

    /// Wraps an object-store error the same way: missing keys become `NotFound`, and a
    /// conditional write that lost the race `AlreadyExists`.
    pub(crate) fn object(url: &str, source: object_store::Error) -> Self {
        use object_store::Error as E;
        let url = url.to_string();
        match source {
            E::NotFound { .. } => StorageError::NotFound { url },
            E::AlreadyExists { .. } | E::Precondition { .. } => StorageError::AlreadyExists { url },
            source => StorageError::ObjectStore { url, source: Box::new(source) },
        }
    }

    /// True for [`StorageError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::NotFound { .. })
    }

    /// True for [`StorageError::AlreadyExists`].
    pub fn is_already_exists(&self) -> bool {
        matches!(self, StorageError::AlreadyExists { .. })
    }

    /// Converts into an `io::Error` for `Read`/`Write` implementations, keeping this error as the
    /// inner error so that callers can downcast it back.
    pub(crate) fn into_io(self) -> io::Error {
        let kind = match &self {
            StorageError::NotFound { .. } => io::ErrorKind::NotFound,
            StorageError::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
            StorageError::InvalidUrl { .. } => io::ErrorKind::InvalidInput,
            StorageError::Unsupported { .. } => io::ErrorKind::Unsupported,
            StorageError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, self)
    }
}
