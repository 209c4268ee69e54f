//! The crate's error type.
//!
//! Every error that comes from bad input names where it happened: the file (or stream) and byte
//! offset for framing damage, the feature and record for a conversion problem, the column for an
//! Arrow type that cannot become a feature.

use std::fmt;

/// What is wrong with a TFRecord stream at a given offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CorruptionKind {
    /// The stream ends inside a 12-byte record header.
    TruncatedHeader,
    /// The masked CRC-32C stored after the length does not match the length bytes.
    LengthCrcMismatch,
    /// The stream ends inside a record's payload or its trailing CRC.
    TruncatedPayload,
    /// The masked CRC-32C stored after the payload does not match the payload.
    PayloadCrcMismatch,
    /// The very first header of the stream is not a TFRecord header: the file is something else
    /// (or is compressed and was opened without the right compression).
    NotTfRecord,
    /// A header claims a record longer than the reader's `max_record_bytes`.
    RecordTooLong,
    /// The compressed stream around the records cannot be decompressed from here on (a corrupt
    /// deflate block, a bad header or checksum, or an end before the stream's own end).
    DamagedCompression,
}

impl CorruptionKind {
    /// A short, stable, snake_case name, used by the Python binding and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CorruptionKind::TruncatedHeader => "truncated_header",
            CorruptionKind::LengthCrcMismatch => "length_crc_mismatch",
            CorruptionKind::TruncatedPayload => "truncated_payload",
            CorruptionKind::PayloadCrcMismatch => "payload_crc_mismatch",
            CorruptionKind::NotTfRecord => "not_tfrecord",
            CorruptionKind::RecordTooLong => "record_too_long",
            CorruptionKind::DamagedCompression => "damaged_compression",
        }
    }
}

impl fmt::Display for CorruptionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            CorruptionKind::TruncatedHeader => "truncated record header",
            CorruptionKind::LengthCrcMismatch => "record length CRC mismatch",
            CorruptionKind::TruncatedPayload => "truncated record payload",
            CorruptionKind::PayloadCrcMismatch => "record payload CRC mismatch",
            CorruptionKind::NotTfRecord => "not a TFRecord file",
            CorruptionKind::RecordTooLong => "record longer than the limit",
            CorruptionKind::DamagedCompression => "damaged compressed stream",
        };
        f.write_str(text)
    }
}

/// Errors of the TFRecord codec.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The framing of a TFRecord stream is damaged.
    #[error("{path}: {kind} at byte offset {offset}{hint}")]
    Corrupt {
        /// The file (or a description of the stream) being read.
        path: String,
        /// Offset of the damaged record's first byte, in the decompressed stream.
        offset: u64,
        /// What is wrong.
        kind: CorruptionKind,
        /// Extra advice, e.g. that the file looks compressed; empty or starting with "; ".
        hint: String,
    },
    /// Reading or writing the underlying stream failed.
    #[error("{path}: I/O error at byte offset {offset}: {source}")]
    Io {
        /// The file (or a description of the stream).
        path: String,
        /// Offset in the decompressed stream where the failure happened.
        offset: u64,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A record's payload is not a valid protocol buffer of the expected message.
    #[error("{path}: record {record} is not a valid {message}: {reason}")]
    BadMessage {
        /// The file (or a description of the stream).
        path: String,
        /// Zero-based index of the record in its file.
        record: u64,
        /// The message type expected, e.g. `tf.train.Example`.
        message: &'static str,
        /// What the decoder found.
        reason: String,
    },
    /// A feature's values do not fit the Arrow type chosen for its column.
    #[error("{path}: record {record}, feature '{feature}': {reason}")]
    FeatureConflict {
        /// The file (or a description of the stream).
        path: String,
        /// Zero-based index of the record in its file.
        record: u64,
        /// The feature name.
        feature: String,
        /// What does not fit.
        reason: String,
    },
    /// A decoded value does not fit the type the schema gives its column (an int64 feature read
    /// as int8, say). Raised by a decoder, which knows the row of its batch but not the file:
    /// [`Error::at_records`] turns it into a [`Error::FeatureConflict`] naming both.
    #[error("column '{column}', row {row} of the batch: {reason}")]
    DoesNotFit {
        /// The column name.
        column: String,
        /// Zero-based row in the batch.
        row: usize,
        /// The value's type, the column's, and the cast's complaint.
        reason: String,
    },
    /// An Arrow column cannot be written as a feature.
    #[error("column '{column}': {reason}")]
    UnsupportedColumn {
        /// The column name.
        column: String,
        /// Why it is refused.
        reason: String,
    },
    /// A value in an Arrow column cannot be written (e.g. a null inside a list).
    #[error("column '{column}', row {row}: {reason}")]
    BadValue {
        /// The column name.
        column: String,
        /// Zero-based row index in the batch.
        row: usize,
        /// Why it is refused.
        reason: String,
    },
    /// An Arrow computation failed (e.g. building or casting an array).
    #[error("{context}: {source}")]
    Arrow {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A decoder thread of a parallel reader ended before its work was done (it panicked,
    /// or the process is short of threads).
    #[error("{path}: the decoder threads stopped before the end of the stream")]
    DecoderStopped {
        /// The file (or a description of the stream).
        path: String,
    },
    /// A caller passed an option that makes no sense.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// This error with the file and the record named, for an error of a decoder whose batch
    /// holds consecutive records of `path` from `first_record` on; other errors are unchanged.
    pub fn at_records(self, path: &str, first_record: u64) -> Error {
        match self {
            Error::DoesNotFit { column, row, reason } => Error::FeatureConflict {
                path: path.to_string(),
                record: first_record + row as u64,
                feature: column,
                reason,
            },
            other => other,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
