//! Arrow ⇄ `tf.train.SequenceExample`.
//!
//! A column of lists of lists (`list<list<T>>`, any list flavour) is a feature list: each inner
//! list is one step's `Feature`. Every other column is a context feature, written and read
//! exactly as an `Example` feature (same types, same null rule). A null outer list omits the
//! feature list; a null inner list cannot be stored and is an error naming the column and row.
//!
//! The context is field 1 of a `SequenceExample` with the layout of an `Example`'s field 1, so
//! it goes through the `Example` encoder and decoder; feature lists go through prost.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Float32Array, Int64Array, ListArray, NullBufferBuilder,
    StringArray,
};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, Float32Type, Int64Type, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use prost::Message;

use crate::arrow_to_example::{ExampleEncoder, feature_kind_of};
use crate::error::{Error, Result};
use crate::example_to_arrow::{ExampleDecoder, SchemaInference};
use crate::logical_types::{from_stored, stored_kind, to_stored};
use crate::proto::{Feature, FeatureKind, FeatureList, FeatureLists};
use crate::wire::{Kind, WIRE_LEN, put_key, put_varint};

/// The item type of a feature-list column (`list<list<T>>`), or `None` for a context column.
pub fn feature_list_item(data_type: &DataType) -> Option<&DataType> {
    let inner = match data_type {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => f.data_type(),
        _ => return None,
    };
    match inner {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Some(f.data_type()),
        _ => None,
    }
}

/// Only the `feature_lists` field of a `SequenceExample`: decoding skips the context.
#[derive(Clone, PartialEq, prost::Message)]
struct ListsOnly {
    #[prost(message, optional, tag = "2")]
    feature_lists: Option<FeatureLists>,
}

fn split_schema(schema: &Schema) -> (Vec<usize>, Vec<usize>) {
    (0..schema.fields().len()).partition(|&i| feature_list_item(schema.field(i).data_type()).is_none())
}

/// A feature-list column ready to encode: `list<list<storage type>>` as large lists.
struct ListColumn {
    name: String,
    kind: Kind,
}

/// Turns Arrow record batches into serialized `tf.train.SequenceExample`s.
pub struct SequenceExampleEncoder {
    context: ExampleEncoder,
    context_columns: Vec<usize>,
    list_columns: Vec<(usize, ListColumn)>,
}

impl SequenceExampleEncoder {
    /// An encoder for batches of `schema`; `defaults` applies to context columns.
    pub fn new(schema: Arc<Schema>, defaults: &HashMap<String, Feature>) -> Result<Self> {
        crate::arrow_to_example::unique_names(&schema)?;
        let (context_columns, lists) = split_schema(&schema);
        let context =
            ExampleEncoder::new(Arc::new(schema.project(&context_columns).expect("indexes")), defaults)?;
        let list_columns = lists
            .into_iter()
            .map(|i| {
                let field = schema.field(i);
                let item = feature_list_item(field.data_type()).expect("split by this test");
                let kind = match feature_kind_of(item) {
                    Ok((kind, false)) => kind,
                    Ok((_, true)) | Err(_) => {
                        return Err(Error::UnsupportedColumn {
                            column: field.name().clone(),
                            reason: format!("a feature list holds lists of scalars, not {item}"),
                        });
                    }
                };
                Ok((i, ListColumn { name: field.name().clone(), kind }))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SequenceExampleEncoder { context, context_columns, list_columns })
    }

    /// Calls `sink` with each row of `batch` as a serialized `SequenceExample`, in row order.
    pub fn encode(&self, batch: &RecordBatch, mut sink: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let context_batch = batch
            .project(&self.context_columns)
            .map_err(|source| Error::Arrow { context: "selecting the context columns".into(), source })?;
        let mut records: Vec<Vec<u8>> = Vec::with_capacity(batch.num_rows());
        self.context.encode(&context_batch, |bytes| {
            records.push(bytes.to_vec());
            Ok(())
        })?;
        if self.context_columns.is_empty() {
            records = vec![Vec::new(); batch.num_rows()];
        }
        let columns = self
            .list_columns
            .iter()
            .map(|(i, plan)| stored_lists(batch.column(*i), plan))
            .collect::<Result<Vec<_>>>()?;
        let mut lists = Vec::new();
        for (row, record) in records.iter_mut().enumerate() {
            lists.clear();
            for ((_, plan), column) in self.list_columns.iter().zip(&columns) {
                if column.is_null(row) {
                    continue;
                }
                let steps = column.value(row);
                let steps = steps.as_list::<i64>();
                let mut list = FeatureList { feature: Vec::with_capacity(steps.len()) };
                for step in 0..steps.len() {
                    if steps.is_null(step) {
                        return Err(Error::BadValue {
                            column: plan.name.clone(),
                            row,
                            reason: format!("step {step} is null, which a feature list cannot hold"),
                        });
                    }
                    let values = steps.value(step);
                    if values.null_count() > 0 {
                        return Err(Error::BadValue {
                            column: plan.name.clone(),
                            row,
                            reason: format!("step {step} holds a null, which a tf.train.Feature cannot hold"),
                        });
                    }
                    list.feature.push(feature_of(&values, plan.kind));
                }
                // A map entry always carries its value, even an empty one: TensorFlow's parser
                // rejects an entry without it (prost would leave an empty message out).
                let body = list.encode_to_vec();
                let mut entry = Vec::with_capacity(plan.name.len() + body.len() + 8);
                put_key(&mut entry, 1, WIRE_LEN);
                put_varint(&mut entry, plan.name.len() as u64);
                entry.extend_from_slice(plan.name.as_bytes());
                put_key(&mut entry, 2, WIRE_LEN);
                put_varint(&mut entry, body.len() as u64);
                entry.extend_from_slice(&body);
                put_key(&mut lists, 1, WIRE_LEN);
                put_varint(&mut lists, entry.len() as u64);
                lists.extend_from_slice(&entry);
            }
            if !lists.is_empty() {
                put_key(record, 2, WIRE_LEN);
                put_varint(record, lists.len() as u64);
                record.extend_from_slice(&lists);
            }
            sink(record)?;
        }
        Ok(())
    }
}

/// A feature-list column as `large_list<large_list<int64 | float32 | large_binary>>`.
fn stored_lists(array: &ArrayRef, plan: &ListColumn) -> Result<arrow::array::LargeListArray> {
    let array = to_stored(array, &plan.name)?;
    let item = match plan.kind {
        Kind::Int64 => DataType::Int64,
        Kind::Float => DataType::Float32,
        Kind::Bytes => DataType::LargeBinary,
    };
    let inner = DataType::LargeList(Arc::new(Field::new_list_field(item, true)));
    let target = DataType::LargeList(Arc::new(Field::new_list_field(inner, true)));
    let options = CastOptions { safe: false, ..Default::default() };
    let cast = cast_with_options(&array, &target, &options).map_err(|source| Error::Arrow {
        context: format!("column '{}': converting to {}", plan.name, plan.kind.name()),
        source,
    })?;
    Ok(cast.as_list::<i64>().clone())
}

fn feature_of(values: &ArrayRef, kind: Kind) -> Feature {
    match kind {
        Kind::Int64 => Feature::int64s(values.as_primitive::<Int64Type>().values().to_vec()),
        Kind::Float => Feature::floats(values.as_primitive::<Float32Type>().values().to_vec()),
        Kind::Bytes => {
            Feature::bytes(values.as_binary::<i64>().iter().map(|v| v.unwrap_or_default().to_vec()))
        }
    }
}

/// One feature-list column being decoded.
struct ListBuilder {
    field: Arc<Field>,
    item: DataType,
    kind: Kind,
    utf8: bool,
    nulls: NullBufferBuilder,
    outer: Vec<i32>,
    inner: Vec<i32>,
    ints: Vec<i64>,
    floats: Vec<f32>,
    bytes: Vec<u8>,
    bytes_offsets: Vec<i32>,
}

impl ListBuilder {
    fn new(field: Arc<Field>) -> Result<Self> {
        let item = feature_list_item(field.data_type()).expect("a feature-list column").clone();
        let (kind, utf8) = match &item {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => (Kind::Bytes, true),
            other => match stored_kind(other) {
                Some(kind) => (kind, kind == Kind::Bytes),
                None => match feature_kind_of(other) {
                    Ok((kind, false)) => (kind, false),
                    _ => {
                        return Err(Error::UnsupportedColumn {
                            column: field.name().clone(),
                            reason: format!("a feature list cannot be read as lists of {other}"),
                        });
                    }
                },
            },
        };
        let mut b = ListBuilder {
            field,
            item,
            kind,
            utf8,
            nulls: NullBufferBuilder::new(0),
            outer: vec![0],
            inner: vec![0],
            ints: Vec::new(),
            floats: Vec::new(),
            bytes: Vec::new(),
            bytes_offsets: vec![0],
        };
        b.reset();
        Ok(b)
    }

    fn reset(&mut self) {
        self.nulls = NullBufferBuilder::new(1024);
        self.outer = vec![0];
        self.inner = vec![0];
        self.ints.clear();
        self.floats.clear();
        self.bytes.clear();
        self.bytes_offsets = vec![0];
    }

    fn values_len(&self) -> usize {
        match self.kind {
            Kind::Int64 => self.ints.len(),
            Kind::Float => self.floats.len(),
            Kind::Bytes => self.bytes_offsets.len() - 1,
        }
    }

    /// Appends one row: the feature list, or a null when the record has none.
    fn push(&mut self, list: Option<&FeatureList>) -> Result<(), String> {
        let Some(list) = list else {
            if !self.field.is_nullable() {
                return Err("missing, and the column is not nullable".into());
            }
            self.nulls.append_null();
            self.outer.push(*self.outer.last().expect("starts with 0"));
            return Ok(());
        };
        for feature in &list.feature {
            match (&feature.kind, self.kind) {
                (None, _) => {}
                (Some(FeatureKind::Int64List(v)), Kind::Int64) => self.ints.extend(&v.value),
                (Some(FeatureKind::Int64List(v)), Kind::Float) => {
                    self.floats.extend(v.value.iter().map(|&x| x as f32))
                }
                (Some(FeatureKind::FloatList(v)), Kind::Float) => self.floats.extend(&v.value),
                (Some(FeatureKind::BytesList(v)), Kind::Bytes) => {
                    for value in &v.value {
                        if self.utf8 && std::str::from_utf8(value).is_err() {
                            return Err("a value is not UTF-8 text".into());
                        }
                        self.bytes.extend_from_slice(value);
                        self.bytes_offsets.push(self.bytes.len() as i32);
                    }
                }
                (Some(other), want) => {
                    let found = match other {
                        FeatureKind::Int64List(_) => "int64_list",
                        FeatureKind::FloatList(_) => "float_list",
                        FeatureKind::BytesList(_) => "bytes_list",
                    };
                    return Err(format!("a step holds a {found}, the column wants {}", want.name()));
                }
            }
            self.inner.push(self.values_len() as i32);
        }
        self.nulls.append_non_null();
        self.outer.push((self.inner.len() - 1) as i32);
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        let stored: ArrayRef = match self.kind {
            Kind::Int64 => Arc::new(Int64Array::from(std::mem::take(&mut self.ints))),
            Kind::Float => Arc::new(Float32Array::from(std::mem::take(&mut self.floats))),
            Kind::Bytes => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut self.bytes_offsets)));
                let data = std::mem::take(&mut self.bytes).into();
                if self.utf8 {
                    Arc::new(StringArray::try_new(offsets, data, None).map_err(|source| Error::Arrow {
                        context: format!("column '{}'", self.field.name()),
                        source,
                    })?)
                } else {
                    Arc::new(BinaryArray::new(offsets, data, None))
                }
            }
        };
        let values = if stored.data_type() == &self.item {
            stored
        } else {
            from_stored(stored, &self.item, self.field.name())?
        };
        let name = self.field.name().clone();
        let arrow_error = |source| Error::Arrow { context: format!("column '{name}'"), source };
        let item_field = Arc::new(Field::new_list_field(self.item.clone(), true));
        let inner = ListArray::try_new(
            item_field.clone(),
            OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut self.inner))),
            values,
            None,
        )
        .map_err(arrow_error)?;
        let inner_field = Arc::new(Field::new_list_field(inner.data_type().clone(), true));
        let outer = ListArray::try_new(
            inner_field,
            OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut self.outer))),
            Arc::new(inner),
            self.nulls.finish(),
        )
        .map_err(arrow_error)?;
        self.reset();
        let outer: ArrayRef = Arc::new(outer);
        if outer.data_type() == self.field.data_type() {
            return Ok(outer);
        }
        let options = CastOptions { safe: false, ..Default::default() };
        cast_with_options(&outer, self.field.data_type(), &options).map_err(arrow_error)
    }
}

/// Builds Arrow record batches of a given schema from serialized `tf.train.SequenceExample`s.
pub struct SequenceExampleDecoder {
    schema: SchemaRef,
    context: ExampleDecoder,
    context_columns: Vec<usize>,
    lists: Vec<(usize, ListBuilder)>,
    rows: usize,
}

impl SequenceExampleDecoder {
    /// A decoder producing batches of `schema`.
    pub fn new(schema: SchemaRef) -> Result<Self> {
        crate::arrow_to_example::unique_names(&schema)?;
        let (context_columns, list_columns) = split_schema(&schema);
        let context = ExampleDecoder::new(Arc::new(schema.project(&context_columns).expect("indexes")))?;
        let lists = list_columns
            .into_iter()
            .map(|i| Ok((i, ListBuilder::new(Arc::new(schema.field(i).clone()))?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(SequenceExampleDecoder { schema, context, context_columns, lists, rows: 0 })
    }

    /// Rows decoded and not yet finished.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True when no row is pending.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Appends one record; `path` and `record` name it in errors.
    pub fn push(&mut self, payload: &[u8], path: &str, record: u64) -> Result<()> {
        let bad = |reason: String| Error::BadMessage {
            path: path.to_string(),
            record,
            message: "tf.train.SequenceExample",
            reason,
        };
        let lists = if self.lists.is_empty() {
            FeatureLists::default()
        } else {
            ListsOnly::decode(payload).map_err(|e| bad(e.to_string()))?.feature_lists.unwrap_or_default()
        };
        // Check every list before appending anything, so that an error leaves no partial row.
        for (_, builder) in &self.lists {
            if let Some(list) = lists.feature_list.get(builder.field.name()) {
                let mismatch = list.feature.iter().find_map(|f| match (&f.kind, builder.kind) {
                    (None, _)
                    | (Some(FeatureKind::Int64List(_)), Kind::Int64 | Kind::Float)
                    | (Some(FeatureKind::FloatList(_)), Kind::Float)
                    | (Some(FeatureKind::BytesList(_)), Kind::Bytes) => None,
                    _ => Some(()),
                });
                let not_text = builder.utf8
                    && list.feature.iter().any(|f| match &f.kind {
                        Some(FeatureKind::BytesList(v)) => {
                            v.value.iter().any(|b| std::str::from_utf8(b).is_err())
                        }
                        _ => false,
                    });
                if mismatch.is_some() || not_text {
                    let mut probe = ListBuilder::new(builder.field.clone())?;
                    let reason = probe.push(Some(list)).err().unwrap_or_default();
                    return Err(Error::FeatureConflict {
                        path: path.to_string(),
                        record,
                        feature: builder.field.name().clone(),
                        reason,
                    });
                }
            } else if !builder.field.is_nullable() {
                return Err(Error::FeatureConflict {
                    path: path.to_string(),
                    record,
                    feature: builder.field.name().clone(),
                    reason: "missing, and the column is not nullable".into(),
                });
            }
        }
        self.context.push(payload, path, record)?;
        for (_, builder) in &mut self.lists {
            builder.push(lists.feature_list.get(builder.field.name())).map_err(|reason| {
                Error::FeatureConflict {
                    path: path.to_string(),
                    record,
                    feature: builder.field.name().clone(),
                    reason,
                }
            })?;
        }
        self.rows += 1;
        Ok(())
    }

    /// Returns the rows decoded so far as one batch and starts a new one.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let context = self.context.finish()?;
        let mut columns: Vec<Option<ArrayRef>> = vec![None; self.schema.fields().len()];
        for (slot, array) in self.context_columns.iter().zip(context.columns()) {
            columns[*slot] = Some(array.clone());
        }
        for (slot, builder) in &mut self.lists {
            columns[*slot] = Some(builder.finish()?);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        self.rows = 0;
        let columns = columns.into_iter().map(|c| c.expect("every column filled")).collect();
        RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
            .map_err(|source| Error::Arrow { context: "assembling a batch".into(), source })
    }
}

/// Infers an Arrow schema from a sample of serialized `tf.train.SequenceExample`s.
#[derive(Debug, Default)]
pub struct SequenceSchemaInference {
    context: SchemaInference,
    lists: BTreeMap<String, (Kind, bool)>,
}

impl SequenceSchemaInference {
    /// An empty inference.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records observed so far.
    pub fn records(&self) -> u64 {
        self.context.records()
    }

    /// Takes one record into account.
    pub fn observe(&mut self, payload: &[u8], path: &str, record: u64) -> Result<()> {
        let lists = ListsOnly::decode(payload).map_err(|e| Error::BadMessage {
            path: path.to_string(),
            record,
            message: "tf.train.SequenceExample",
            reason: e.to_string(),
        })?;
        for (name, list) in lists.feature_lists.unwrap_or_default().feature_list {
            for feature in &list.feature {
                let (kind, utf8) = match &feature.kind {
                    None => continue,
                    Some(FeatureKind::Int64List(_)) => (Kind::Int64, true),
                    Some(FeatureKind::FloatList(_)) => (Kind::Float, true),
                    Some(FeatureKind::BytesList(v)) => {
                        (Kind::Bytes, v.value.iter().all(|b| std::str::from_utf8(b).is_ok()))
                    }
                };
                let entry = self.lists.entry(name.clone()).or_insert((kind, true));
                entry.0 = entry.0.max(kind);
                entry.1 &= utf8;
            }
            self.lists.entry(name).or_insert((Kind::Bytes, true));
        }
        self.context.observe(payload, path, record)
    }

    /// The schema: context features and feature lists, all nullable, sorted by name.
    pub fn schema(&self) -> Schema {
        let mut fields: Vec<Field> =
            self.context.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        for (name, &(kind, utf8)) in &self.lists {
            let item = match kind {
                Kind::Int64 => DataType::Int64,
                Kind::Float => DataType::Float32,
                Kind::Bytes if utf8 => DataType::Utf8,
                Kind::Bytes => DataType::Binary,
            };
            let inner = DataType::List(Arc::new(Field::new_list_field(item, true)));
            fields.retain(|f| f.name() != name);
            fields.push(Field::new(name, DataType::List(Arc::new(Field::new_list_field(inner, true))), true));
        }
        fields.sort_by(|a, b| a.name().cmp(b.name()));
        Schema::new(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Features, SequenceExample};
    use arrow::array::{Int64Builder, ListBuilder as ArrowListBuilder};

    fn tokens() -> ArrayRef {
        let mut b = ArrowListBuilder::new(ArrowListBuilder::new(Int64Builder::new()));
        // row 0: [[1, 2], [], [3]]
        b.values().values().append_slice(&[1, 2]);
        b.values().append(true);
        b.values().append(true);
        b.values().values().append_value(3);
        b.values().append(true);
        b.append(true);
        // row 1: null
        b.append(false);
        Arc::new(b.finish())
    }

    fn batch() -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            ("id", Arc::new(Int64Array::from(vec![7, 8])) as ArrayRef),
            ("tokens", tokens()),
        ])
        .unwrap()
    }

    #[test]
    fn round_trip_and_prost_agrees() {
        let b = batch();
        let enc = SequenceExampleEncoder::new(b.schema(), &HashMap::new()).unwrap();
        let mut records = Vec::new();
        enc.encode(&b, |r| {
            records.push(r.to_vec());
            Ok(())
        })
        .unwrap();
        let first = SequenceExample::decode(records[0].as_slice()).unwrap();
        let Features { feature } = first.context.unwrap();
        assert_eq!(feature["id"], Feature::int64s(vec![7]));
        let steps = &first.feature_lists.unwrap().feature_list["tokens"].feature;
        assert_eq!(steps, &[Feature::int64s(vec![1, 2]), Feature::int64s(vec![]), Feature::int64s(vec![3])]);
        assert!(SequenceExample::decode(records[1].as_slice()).unwrap().feature_lists.is_none());

        let mut dec = SequenceExampleDecoder::new(b.schema()).unwrap();
        for (i, r) in records.iter().enumerate() {
            dec.push(r, "mem", i as u64).unwrap();
        }
        let back = dec.finish().unwrap();
        assert_eq!(back, b);

        let mut inference = SequenceSchemaInference::new();
        for (i, r) in records.iter().enumerate() {
            inference.observe(r, "mem", i as u64).unwrap();
        }
        let schema = inference.schema();
        assert_eq!(schema.field(0).name(), "id");
        assert_eq!(feature_list_item(schema.field(1).data_type()), Some(&DataType::Int64));
    }

    #[test]
    fn a_null_step_is_refused_by_row() {
        let mut b = ArrowListBuilder::new(ArrowListBuilder::new(Int64Builder::new()));
        b.values().append(false);
        b.append(true);
        let col: ArrayRef = Arc::new(b.finish());
        let batch = RecordBatch::try_from_iter(vec![("seq", col)]).unwrap();
        let enc = SequenceExampleEncoder::new(batch.schema(), &HashMap::new()).unwrap();
        let err = enc.encode(&batch, |_| Ok(())).unwrap_err();
        assert!(matches!(&err, Error::BadValue { column, row: 0, .. } if column == "seq"), "{err}");
    }

    #[test]
    fn a_kind_conflict_names_the_feature() {
        let b = batch();
        let enc = SequenceExampleEncoder::new(b.schema(), &HashMap::new()).unwrap();
        let mut first = Vec::new();
        enc.encode(&b, |r| {
            if first.is_empty() {
                first = r.to_vec();
            }
            Ok(())
        })
        .unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "tokens",
            DataType::List(Arc::new(Field::new_list_field(
                DataType::List(Arc::new(Field::new_list_field(DataType::Binary, true))),
                true,
            ))),
            true,
        )]));
        let mut dec = SequenceExampleDecoder::new(schema).unwrap();
        let err = dec.push(&first, "f.tfrecord", 0).unwrap_err();
        assert!(matches!(&err, Error::FeatureConflict { feature, .. } if feature == "tokens"), "{err}");
        assert!(dec.is_empty());
    }
}
