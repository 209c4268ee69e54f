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

    /// The HDFS client reported an error. Where the cause lies with this process (no Kerberos
    /// credentials, no Kerberos library) the message says what to do about it.
    #[error("HDFS error on {url}: {}", describe(source))]
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

    /// An output folder's commit found its own records inconsistent: a task manifest that
    /// cannot be read, or a file one lists that is missing or of another size.
    #[error("commit failed at {url}: {reason}")]
    Commit {
        /// The manifest, or the file it lists.
        url: String,
        /// What is wrong.
        reason: String,
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

/// The message of an HDFS error: what to do for the failures a user fixes on the client side,
/// else the client's own message, shortened.
fn describe(e: &hdfs_native::HdfsError) -> String {
    use hdfs_native::HdfsError as H;
    match e {
        H::GSSAPIError(major, _, message) => describe_gssapi(major.raw(), message),
        H::OperationFailed(message) if message.starts_with("Failed to load libgssapi") => {
            NO_GSSAPI.to_string()
        }
        // How hdfs-native reports a NameNode that closed the connection, after its retries
        // (about three minutes). A Kerberized NameNode does that at once to a client whose
        // configuration does not ask for Kerberos, which then looks like a network failure.
        H::IOError(io)
            if io.kind() == io::ErrorKind::ConnectionAborted && io.to_string() == LISTENER_GONE =>
        {
            format!(
                "{} (the NameNode closed the connection; a NameNode that wants Kerberos does so \
                 when the client's Hadoop configuration, HADOOP_CONF_DIR, does not set \
                 hadoop.security.authentication=kerberos)",
                first_line(e)
            )
        }
        _ => first_line(e),
    }
}

/// hdfs-native loads the Kerberos library at run time, on the first Kerberos connection.
const NO_GSSAPI: &str = "the Hadoop configuration asks for Kerberos (hadoop.security.authentication=kerberos), \
                         but the MIT Kerberos library libgssapi_krb5.so.2 cannot be loaded: install it \
                         (libgssapi-krb5-2 on Debian and Ubuntu, krb5-libs on RHEL)";

/// hdfs-native's message when the NameNode connection closed under a call.
const LISTENER_GONE: &str = "RPC listener disconnected";

/// The GSSAPI routine errors (numbered as in RFC 2744, section 3.9.1) that mean this process
/// holds no usable Kerberos credentials.
const GSS_S_NO_CRED: u32 = 7;
const GSS_S_DEFECTIVE_CREDENTIAL: u32 = 10;
const GSS_S_CREDENTIALS_EXPIRED: u32 = 11;

/// The routine error field of a GSSAPI major status (bits 16 to 23).
fn gss_routine_error(major: u32) -> u32 {
    (major >> 16) & 0xff
}

/// A GSSAPI failure in words. hdfs-native's own message starts with a debug dump of the status
/// codes; the library's text (`message`) says what went wrong, and for missing or expired
/// credentials (no `kinit` run, an unreadable ticket cache, a keytab that does not exist or the
/// KDC cannot be reached to use it) the ways to get credentials follow.
fn describe_gssapi(major: u32, message: &str) -> String {
    let routine = gss_routine_error(major);
    if matches!(routine, GSS_S_NO_CRED | GSS_S_DEFECTIVE_CREDENTIAL | GSS_S_CREDENTIALS_EXPIRED) {
        format!(
            "Kerberos credentials are missing or expired ({message}); the Hadoop configuration \
             asks for Kerberos (hadoop.security.authentication=kerberos). Get a ticket with \
             `kinit <principal>` or `kinit -kt <keytab> <principal>`, or point KRB5CCNAME at a \
             ticket cache that holds one, or set KRB5_CLIENT_KTNAME to a keytab (KRB5_CONFIG \
             names the realm's krb5.conf); in YARN containers the delegation tokens in \
             HADOOP_TOKEN_FILE_LOCATION serve instead"
        )
    } else {
        format!("Kerberos authentication failed (GSSAPI routine error {routine}): {message}")
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// MIT krb5's major status and text when no ticket cache exists and no keytab is set.
    const NO_CRED: u32 = 0x0007_0000;
    const NO_CRED_TEXT: &str = "No credentials were supplied, or the credentials were unavailable \
                                or inaccessible: No Kerberos credentials available (default cache: \
                                FILE:/tmp/krb5cc_1000)";

    #[test]
    fn missing_credentials_say_how_to_get_them() {
        let text = describe_gssapi(NO_CRED, NO_CRED_TEXT);
        assert!(text.starts_with("Kerberos credentials are missing or expired (No credentials"), "{text}");
        // The library's own detail (which cache was looked at) is kept.
        assert!(text.contains("FILE:/tmp/krb5cc_1000"), "{text}");
        for way in ["kinit", "KRB5CCNAME", "KRB5_CLIENT_KTNAME", "keytab", "HADOOP_TOKEN_FILE_LOCATION"] {
            assert!(text.contains(way), "{way} not in {text}");
        }
        // Expired and defective credentials are the same situation for the user.
        for routine in [GSS_S_CREDENTIALS_EXPIRED, GSS_S_DEFECTIVE_CREDENTIAL] {
            assert!(describe_gssapi(routine << 16, "x").starts_with("Kerberos credentials are missing"));
        }
    }

    #[test]
    fn other_gssapi_failures_keep_the_library_text_without_hints() {
        // GSS_S_FAILURE (13) with a supplementary bit set: only the routine field decides.
        let text = describe_gssapi((13 << 16) | 0x1, "Server not found in Kerberos database");
        assert_eq!(
            text,
            "Kerberos authentication failed (GSSAPI routine error 13): Server not found in Kerberos database"
        );
        assert_eq!(gss_routine_error(0x0107_0000), GSS_S_NO_CRED);
    }

    #[test]
    fn other_hdfs_errors_keep_their_first_line() {
        let e = StorageError::Hdfs {
            url: "hdfs://nn:9000/a".to_string(),
            source: hdfs_native::HdfsError::RPCError(
                "java.io.IOException".to_string(),
                "bad\n\tat x".to_string(),
            ),
        };
        assert_eq!(
            e.to_string(),
            "HDFS error on hdfs://nn:9000/a: RPC error: java.io.IOException bad (Java stack trace omitted)"
        );
        let e = StorageError::Hdfs {
            url: "hdfs://nn:9000/a".to_string(),
            source: hdfs_native::HdfsError::OperationFailed("Failed to load libgssapi_krb".to_string()),
        };
        assert!(e.to_string().contains("libgssapi-krb5-2"), "{e}");
    }

    #[test]
    fn a_closed_namenode_connection_names_the_kerberos_configuration() {
        let closed = |message: &str| StorageError::Hdfs {
            url: "hdfs://nn:9000/a".to_string(),
            source: hdfs_native::HdfsError::IOError(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                message,
            )),
        };
        let text = closed(LISTENER_GONE).to_string();
        assert!(text.starts_with("HDFS error on hdfs://nn:9000/a: IO error"), "{text}");
        assert!(text.contains("RPC listener disconnected (the NameNode closed the connection"), "{text}");
        assert!(text.contains("hadoop.security.authentication=kerberos"), "{text}");
        // Other I/O errors stay as they are.
        assert!(!closed("Connection reset by peer").to_string().contains("Kerberos"));
    }
}
