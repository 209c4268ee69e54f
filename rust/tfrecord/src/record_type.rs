//! The three record types a dataset can hold, and one encoder and decoder over them.
//!
//! - `Example`: each column is a feature ([`crate::arrow_to_example`]).
//! - `SequenceExample`: `list<list<T>>` columns are feature lists, the others context features
//!   ([`crate::sequence_example`]).
//! - `ByteArray`: one binary or string column, each value written as one raw record; read back
//!   as one binary column named [`BYTE_ARRAY_COLUMN`].

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::arrow_to_example::ExampleEncoder;
use crate::error::{Error, Result};
use crate::example_to_arrow::{ExampleDecoder, SchemaInference};
use crate::proto::Feature;
use crate::sequence_example::{SequenceExampleDecoder, SequenceExampleEncoder, SequenceSchemaInference};

/// The column a `ByteArray` dataset reads into (the name LinkedIn's spark-tfrecord uses).
pub const BYTE_ARRAY_COLUMN: &str = "byteArray";

/// What each record of a dataset holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RecordType {
    /// A serialized `tf.train.Example`.
    #[default]
    Example,
    /// A serialized `tf.train.SequenceExample`.
    SequenceExample,
    /// Any bytes, taken as they are.
    ByteArray,
}

impl FromStr for RecordType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "example" => Ok(RecordType::Example),
            "sequenceexample" => Ok(RecordType::SequenceExample),
            "bytearray" => Ok(RecordType::ByteArray),
            _ => Err(Error::InvalidArgument(format!(
                "unknown record type '{s}'; use Example, SequenceExample or ByteArray"
            ))),
        }
    }
}

/// The schema a `ByteArray` dataset reads into.
pub fn byte_array_schema() -> Schema {
    Schema::new(vec![Field::new(BYTE_ARRAY_COLUMN, DataType::Binary, false)])
}

/// Arrow batches of one schema → serialized records of one type.
pub enum RecordEncoder {
    /// Columns → features.
    Example(ExampleEncoder),
    /// Columns → context features and feature lists.
    SequenceExample(SequenceExampleEncoder),
    /// One binary column → raw records.
    ByteArray {
        /// The column's name, for errors.
        column: String,
    },
}

impl RecordEncoder {
    /// An encoder of `record_type` for batches of `schema`; `defaults` applies to features.
    pub fn new(
        record_type: RecordType,
        schema: Arc<Schema>,
        defaults: &HashMap<String, Feature>,
    ) -> Result<Self> {
        match record_type {
            RecordType::Example => Ok(RecordEncoder::Example(ExampleEncoder::new(schema, defaults)?)),
            RecordType::SequenceExample => {
                Ok(RecordEncoder::SequenceExample(SequenceExampleEncoder::new(schema, defaults)?))
            }
            RecordType::ByteArray => {
                let binary = |dt: &DataType| {
                    matches!(
                        dt,
                        DataType::Binary
                            | DataType::LargeBinary
                            | DataType::BinaryView
                            | DataType::FixedSizeBinary(_)
                            | DataType::Utf8
                            | DataType::LargeUtf8
                            | DataType::Utf8View
                    )
                };
                match schema.fields().as_ref() {
                    [field] if binary(field.data_type()) => {
                        Ok(RecordEncoder::ByteArray { column: field.name().clone() })
                    }
                    fields => Err(Error::InvalidArgument(format!(
                        "record type ByteArray writes exactly one binary or string column, not {} \
                         columns ({})",
                        fields.len(),
                        fields
                            .iter()
                            .map(|f| format!("{}: {}", f.name(), f.data_type()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))),
                }
            }
        }
    }

    /// Calls `sink` with each row of `batch` as one record, in row order.
    pub fn encode(&self, batch: &RecordBatch, mut sink: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        match self {
            RecordEncoder::Example(e) => e.encode(batch, sink),
            RecordEncoder::SequenceExample(e) => e.encode(batch, sink),
            RecordEncoder::ByteArray { column } => {
                let values = cast(batch.column(0), &DataType::LargeBinary)
                    .map_err(|source| Error::Arrow { context: format!("column '{column}'"), source })?;
                let values = values.as_binary::<i64>();
                for row in 0..values.len() {
                    if values.is_null(row) {
                        return Err(Error::BadValue {
                            column: column.clone(),
                            row,
                            reason: "a null cannot be written as a raw record".into(),
                        });
                    }
                    sink(values.value(row))?;
                }
                Ok(())
            }
        }
    }
}

/// Serialized records of one type → Arrow batches of one schema.
pub enum RecordDecoder {
    /// Features → columns.
    Example(ExampleDecoder),
    /// Context features and feature lists → columns.
    SequenceExample(SequenceExampleDecoder),
    /// Raw records → one binary column.
    ByteArray {
        /// The batch schema (one binary field).
        schema: SchemaRef,
        /// The records' bytes, back to back.
        data: Vec<u8>,
        /// Where each record ends in `data`, after a leading 0.
        offsets: Vec<i32>,
    },
}

impl RecordDecoder {
    /// A decoder of `record_type` producing batches of `schema` (for `ByteArray`, a schema of
    /// one binary field; see [`byte_array_schema`]).
    pub fn new(record_type: RecordType, schema: SchemaRef) -> Result<Self> {
        match record_type {
            RecordType::Example => Ok(RecordDecoder::Example(ExampleDecoder::new(schema)?)),
            RecordType::SequenceExample => {
                Ok(RecordDecoder::SequenceExample(SequenceExampleDecoder::new(schema)?))
            }
            RecordType::ByteArray => {
                if schema.fields().len() != 1 || schema.field(0).data_type() != &DataType::Binary {
                    return Err(Error::InvalidArgument(format!(
                        "record type ByteArray reads into one binary column, not {schema}"
                    )));
                }
                Ok(RecordDecoder::ByteArray { schema, data: Vec::new(), offsets: vec![0] })
            }
        }
    }

    /// Rows pending.
    pub fn len(&self) -> usize {
        match self {
            RecordDecoder::Example(d) => d.len(),
            RecordDecoder::SequenceExample(d) => d.len(),
            RecordDecoder::ByteArray { offsets, .. } => offsets.len() - 1,
        }
    }

    /// True when no row is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room for `rows` more rows.
    pub fn reserve(&mut self, rows: usize) {
        match self {
            RecordDecoder::Example(d) => d.reserve(rows),
            RecordDecoder::SequenceExample(_) => {}
            RecordDecoder::ByteArray { offsets, .. } => offsets.reserve(rows),
        }
    }

    /// Appends one record; `path` and `record` name it in errors.
    pub fn push(&mut self, payload: &[u8], path: &str, record: u64) -> Result<()> {
        match self {
            RecordDecoder::Example(d) => d.push(payload, path, record),
            RecordDecoder::SequenceExample(d) => d.push(payload, path, record),
            RecordDecoder::ByteArray { data, offsets, .. } => {
                let end = i32::try_from(data.len() + payload.len()).map_err(|_| {
                    Error::InvalidArgument(format!(
                        "{path}: record {record}: a batch of raw records over 2 GiB"
                    ))
                })?;
                data.extend_from_slice(payload);
                offsets.push(end);
                Ok(())
            }
        }
    }

    /// The pending rows as one batch.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        match self {
            RecordDecoder::Example(d) => d.finish(),
            RecordDecoder::SequenceExample(d) => d.finish(),
            RecordDecoder::ByteArray { schema, data, offsets } => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::replace(offsets, vec![0])));
                let column: ArrayRef = Arc::new(BinaryArray::new(offsets, std::mem::take(data).into(), None));
                RecordBatch::try_new(schema.clone(), vec![column])
                    .map_err(|source| Error::Arrow { context: "assembling a batch".into(), source })
            }
        }
    }
}

/// Schema inference for any record type.
#[derive(Debug)]
pub enum RecordSchemaInference {
    /// Over `Example`s.
    Example(SchemaInference),
    /// Over `SequenceExample`s.
    SequenceExample(SequenceSchemaInference),
    /// Nothing to infer: always [`byte_array_schema`].
    ByteArray,
}

impl RecordSchemaInference {
    /// An empty inference for `record_type`.
    pub fn new(record_type: RecordType) -> Self {
        match record_type {
            RecordType::Example => RecordSchemaInference::Example(SchemaInference::new()),
            RecordType::SequenceExample => {
                RecordSchemaInference::SequenceExample(SequenceSchemaInference::new())
            }
            RecordType::ByteArray => RecordSchemaInference::ByteArray,
        }
    }

    /// Whether records need to be read at all.
    pub fn needs_records(&self) -> bool {
        !matches!(self, RecordSchemaInference::ByteArray)
    }

    /// Records observed so far.
    pub fn records(&self) -> u64 {
        match self {
            RecordSchemaInference::Example(i) => i.records(),
            RecordSchemaInference::SequenceExample(i) => i.records(),
            RecordSchemaInference::ByteArray => 0,
        }
    }

    /// Takes one record into account.
    pub fn observe(&mut self, payload: &[u8], path: &str, record: u64) -> Result<()> {
        match self {
            RecordSchemaInference::Example(i) => i.observe(payload, path, record),
            RecordSchemaInference::SequenceExample(i) => i.observe(payload, path, record),
            RecordSchemaInference::ByteArray => Ok(()),
        }
    }

    /// The inferred schema.
    pub fn schema(&self) -> Schema {
        match self {
            RecordSchemaInference::Example(i) => i.schema(),
            RecordSchemaInference::SequenceExample(i) => i.schema(),
            RecordSchemaInference::ByteArray => byte_array_schema(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringArray;

    #[test]
    fn names_parse_case_insensitively() {
        assert_eq!("bytearray".parse::<RecordType>().unwrap(), RecordType::ByteArray);
        assert_eq!("SequenceExample".parse::<RecordType>().unwrap(), RecordType::SequenceExample);
        assert!("proto".parse::<RecordType>().unwrap_err().to_string().contains("ByteArray"));
    }

    #[test]
    fn byte_arrays_round_trip_and_nulls_are_refused() {
        let batch = RecordBatch::try_from_iter(vec![(
            "payload",
            Arc::new(StringArray::from(vec![Some("a"), Some(""), None])) as ArrayRef,
        )])
        .unwrap();
        let enc = RecordEncoder::new(RecordType::ByteArray, batch.schema(), &HashMap::new()).unwrap();
        let mut got = Vec::new();
        let err = enc
            .encode(&batch, |r| {
                got.push(r.to_vec());
                Ok(())
            })
            .unwrap_err();
        assert!(matches!(&err, Error::BadValue { column, row: 2, .. } if column == "payload"), "{err}");
        let mut dec = RecordDecoder::new(RecordType::ByteArray, Arc::new(byte_array_schema())).unwrap();
        for (i, r) in got.iter().enumerate() {
            dec.push(r, "mem", i as u64).unwrap();
        }
        let back = dec.finish().unwrap();
        let values: Vec<&[u8]> = back.column(0).as_binary::<i32>().iter().flatten().collect();
        assert_eq!(values, [b"a".as_slice(), b""]);
        let two = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Binary, true),
            Field::new("b", DataType::Binary, true),
        ]));
        assert!(RecordEncoder::new(RecordType::ByteArray, two, &HashMap::new()).is_err());
    }
}
