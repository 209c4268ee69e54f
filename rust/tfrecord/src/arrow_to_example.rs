//! Arrow `RecordBatch` → serialized `tf.train.Example`s.
//!
//! Each column becomes one feature per row, named after the column:
//!
//! | Arrow type | feature |
//! |---|---|
//! | bool, int8–int64, uint8–uint64 | `int64_list` (uint64 above 2^63-1 is an error) |
//! | float16, float32, float64 | `float_list` (float64 is rounded to float32, as TensorFlow stores it) |
//! | utf8, large_utf8, utf8_view, binary, large_binary, binary_view, fixed_size_binary | `bytes_list` |
//! | date32/64, timestamp, decimal128/256 | see [`crate::logical_types`]: int64 days, int64 microseconds, decimal text |
//! | dictionary of any of those | as its value type |
//! | list, large_list, fixed_size_list of any of those | the same list kind, one value per element |
//!
//! A null row omits the feature, or writes the column's default when one is given. A null
//! element inside a list cannot be represented and is an error naming the column and row.
//! Bytes are written straight from the column buffers; no per-row objects are built.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, LargeBinaryArray};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, Float32Type, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use prost::Message;

use crate::error::{Error, Result};
use crate::framing::{FOOTER_LEN, HEADER_LEN, RecordWriter, frame_in_place};
use crate::proto::{Feature, FeatureKind};
use crate::wire::{Kind, WIRE_LEN, len_field_size, put_key, put_varint, varint_len};

/// The feature kind and list-ness an Arrow type is written as, or why it cannot be.
pub fn feature_kind_of(data_type: &DataType) -> Result<(Kind, bool), String> {
    fn scalar(dt: &DataType) -> Result<Kind, String> {
        use DataType::*;
        match dt {
            Boolean | Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Ok(Kind::Int64),
            Float16 | Float32 | Float64 => Ok(Kind::Float),
            Utf8 | LargeUtf8 | Utf8View | Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => {
                Ok(Kind::Bytes)
            }
            Dictionary(_, value) => scalar(value),
            other => crate::logical_types::stored_kind(other).ok_or_else(|| {
                format!(
                    "type {other} has no tf.train.Feature representation (map, struct and union \
                     columns must be flattened or serialized first)"
                )
            }),
        }
    }
    match data_type {
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            match item.data_type() {
                DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => Err(format!(
                    "nested list type {data_type} cannot be an Example feature (a SequenceExample \
                     feature list can hold it)"
                )),
                inner => Ok((scalar(inner)?, true)),
            }
        }
        other => Ok((scalar(other)?, false)),
    }
}

fn storage_type(kind: Kind) -> DataType {
    match kind {
        Kind::Int64 => DataType::Int64,
        Kind::Float => DataType::Float32,
        Kind::Bytes => DataType::LargeBinary,
    }
}

/// How one column is written.
struct ColumnPlan {
    name: String,
    /// The map entry's key field, ready to copy: tag, length, name.
    key: Vec<u8>,
    kind: Kind,
    list: bool,
    /// The serialized `Feature` body written for a null row, if any.
    default: Option<Vec<u8>>,
}

/// A column's values in the one layout per kind that encoding reads.
enum Values {
    Int(ScalarBuffer<i64>),
    Float(ScalarBuffer<f32>),
    Bytes(LargeBinaryArray),
}

impl Values {
    /// Bytes of the packed (numbers) or repeated (bytes) values in `range`.
    #[inline]
    fn content_len(&self, range: std::ops::Range<usize>) -> usize {
        match self {
            Values::Int(v) => v[range].iter().map(|&x| varint_len(x as u64)).sum(),
            Values::Float(_) => 4 * range.len(),
            Values::Bytes(b) => range.map(|j| len_field_size(b.value_length(j) as usize)).sum(),
        }
    }
}

/// One column of one batch, ready to encode.
struct Prepared<'p> {
    plan: &'p ColumnPlan,
    nulls: Option<NullBuffer>,
    /// For list columns, row `i`'s values are `offsets[i]..offsets[i + 1]`.
    offsets: Option<ScalarBuffer<i64>>,
    values: Values,
}

/// A writing position in a pre-sized buffer.
struct At<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl At<'_> {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.buf[self.pos] = b;
        self.pos += 1;
    }

    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    #[inline(always)]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte((v as u8) | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    /// A length-delimited field header with a one-byte key.
    #[inline(always)]
    fn len_field(&mut self, key: u8, len: usize) {
        self.byte(key);
        self.varint(len as u64);
    }
}

/// `Features.feature` map entries are field 1; inside an entry the key is field 1 and the value
/// field 2; all length-delimited.
const ENTRY_KEY: u8 = 0x0a;
const VALUE_KEY: u8 = 0x12;

/// The layout of one general (list, bytes or defaulted) feature.
struct Layout {
    entry: usize,
    feature: usize,
    list_msg: usize,
    content: usize,
}

impl Prepared<'_> {
    #[inline]
    fn range(&self, row: usize) -> std::ops::Range<usize> {
        match &self.offsets {
            Some(o) => o[row] as usize..o[row + 1] as usize,
            None => row..row + 1,
        }
    }

    #[inline]
    fn is_null(&self, row: usize) -> bool {
        self.nulls.as_ref().is_some_and(|n| n.is_null(row))
    }

    fn layout(&self, row: usize) -> Layout {
        let key = self.plan.key.len();
        let range = self.range(row);
        let content = self.values.content_len(range.clone());
        let list_msg = match self.plan.kind {
            Kind::Bytes => content,
            _ if range.is_empty() => 0,
            _ => len_field_size(content),
        };
        let feature = len_field_size(list_msg);
        Layout { entry: key + len_field_size(feature), feature, list_msg, content }
    }

    /// The entry body length of a null row with a default.
    fn default_entry(&self, default: &[u8]) -> usize {
        self.plan.key.len() + len_field_size(default.len())
    }

    /// The bytes each row's map entry takes (0 when the feature is omitted), added to `lens`.
    /// One loop per column layout is much faster than switching on the type at every cell.
    fn add_entry_lens(&self, rows: std::ops::Range<usize>, lens: &mut [usize]) {
        let key = self.plan.key.len();
        for (len, row) in lens.iter_mut().zip(rows) {
            *len += if self.is_null(row) {
                self.plan.default.as_ref().map_or(0, |d| len_field_size(self.default_entry(d)))
            } else {
                match (&self.values, &self.offsets) {
                    // entry { key, Feature(8) { float_list(6) { packed(4) } } }
                    (Values::Float(_), None) => len_field_size(key + 10),
                    // entry { key, Feature(4 + n) { int64_list(2 + n) { packed(n) } } }
                    (Values::Int(v), None) => len_field_size(key + 6 + varint_len(v[row] as u64)),
                    _ => len_field_size(self.layout(row).entry),
                }
            };
        }
    }

    /// Writes each row's map entry at its cursor in `buf`, advancing the cursors.
    fn write_entries(&self, rows: std::ops::Range<usize>, buf: &mut [u8], cursors: &mut [usize]) {
        let key = &self.plan.key;
        for (cursor, row) in cursors.iter_mut().zip(rows) {
            let mut at = At { buf: &mut *buf, pos: *cursor };
            if self.is_null(row) {
                if let Some(default) = &self.plan.default {
                    at.len_field(ENTRY_KEY, self.default_entry(default));
                    at.bytes(key);
                    at.len_field(VALUE_KEY, default.len());
                    at.bytes(default);
                }
            } else {
                match (&self.values, &self.offsets) {
                    (Values::Float(v), None) => {
                        at.len_field(ENTRY_KEY, key.len() + 10);
                        at.bytes(key);
                        at.bytes(&[VALUE_KEY, 8, 0x12, 6, 0x0a, 4]);
                        at.bytes(&v[row].to_le_bytes());
                    }
                    (Values::Int(v), None) => {
                        let value = v[row] as u64;
                        let n = varint_len(value);
                        at.len_field(ENTRY_KEY, key.len() + 6 + n);
                        at.bytes(key);
                        at.bytes(&[VALUE_KEY, 4 + n as u8, 0x1a, 2 + n as u8, 0x0a, n as u8]);
                        at.varint(value);
                    }
                    _ => self.write_general(row, &mut at),
                }
            }
            *cursor = at.pos;
        }
    }

    /// The entry for any row of any column: lists, bytes, and the scalars too.
    fn write_general(&self, row: usize, at: &mut At<'_>) {
        let Layout { entry, feature, list_msg, content } = self.layout(row);
        let range = self.range(row);
        at.len_field(ENTRY_KEY, entry);
        at.bytes(&self.plan.key);
        at.len_field(VALUE_KEY, feature);
        at.len_field((self.plan.kind.field() as u8) << 3 | WIRE_LEN, list_msg);
        match &self.values {
            Values::Int(v) => {
                if !range.is_empty() {
                    at.len_field(0x0a, content);
                }
                v[range].iter().for_each(|&x| at.varint(x as u64));
            }
            Values::Float(v) => {
                if !range.is_empty() {
                    at.len_field(0x0a, content);
                }
                v[range].iter().for_each(|x| at.bytes(&x.to_le_bytes()));
            }
            Values::Bytes(b) => {
                for j in range {
                    let value = b.value(j);
                    at.len_field(0x0a, value.len());
                    at.bytes(value);
                }
            }
        }
    }
}

/// Rows encoded at a time: enough to amortise the per-column loops, few enough that the
/// chunk's records stay in cache while they are framed.
const ROWS_PER_CHUNK: usize = 1024;

/// A chunk of framed records and where each payload sits.
#[derive(Default)]
struct Chunk {
    buf: Vec<u8>,
    len: usize,
    payloads: Vec<std::ops::Range<usize>>,
    lens: Vec<usize>,
    cursors: Vec<usize>,
}

/// Turns Arrow record batches of one schema into serialized `tf.train.Example`s.
pub struct ExampleEncoder {
    schema: Arc<Schema>,
    plans: Vec<ColumnPlan>,
}

impl ExampleEncoder {
    /// An encoder for batches of `schema`. `defaults` maps a column name to the feature written
    /// for its null rows; its kind must match the column's.
    pub fn new(schema: Arc<Schema>, defaults: &HashMap<String, Feature>) -> Result<Self> {
        unique_names(&schema)?;
        for name in defaults.keys() {
            if schema.field_with_name(name).is_err() {
                return Err(Error::InvalidArgument(format!("default given for unknown column '{name}'")));
            }
        }
        let plans = schema
            .fields()
            .iter()
            .map(|field| plan_column(field, defaults.get(field.name())))
            .collect::<Result<Vec<_>>>()?;
        Ok(ExampleEncoder { schema, plans })
    }

    /// The schema this encoder takes.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// Calls `sink` with each row of `batch` as a serialized `Example`, in row order.
    pub fn encode(&self, batch: &RecordBatch, mut sink: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        self.encode_framed(batch, |chunk| chunk.payloads.iter().try_for_each(|p| sink(&chunk.buf[p.clone()])))
    }

    /// Encodes `batch` into `writer`, one record per row; returns the rows written.
    pub fn write_batch<W: Write>(&self, batch: &RecordBatch, writer: &mut RecordWriter<W>) -> Result<u64> {
        self.encode_framed(batch, |chunk| {
            let offset = writer.bytes_written();
            writer
                .write_framed(&chunk.buf[..chunk.len], chunk.payloads.len() as u64)
                .map_err(|source| Error::Io { path: "<output>".into(), offset, source })
        })?;
        Ok(batch.num_rows() as u64)
    }

    /// Encodes `batch` a chunk of rows at a time into framed TFRecords, laid out in place: the
    /// entry sizes are computed first, column by column, so that every column can then write
    /// its entries straight to their final positions with no assembly copy.
    fn encode_framed(&self, batch: &RecordBatch, mut emit: impl FnMut(&Chunk) -> Result<()>) -> Result<()> {
        self.check_schema(batch)?;
        let columns = batch
            .columns()
            .iter()
            .zip(&self.plans)
            .map(|(array, plan)| prepare(array, plan))
            .collect::<Result<Vec<_>>>()?;
        let mut chunk = Chunk::default();
        for start in (0..batch.num_rows()).step_by(ROWS_PER_CHUNK) {
            let rows = start..batch.num_rows().min(start + ROWS_PER_CHUNK);
            chunk.lens.clear();
            chunk.lens.resize(rows.len(), 0);
            for column in &columns {
                column.add_entry_lens(rows.clone(), &mut chunk.lens);
            }
            chunk.payloads.clear();
            chunk.cursors.clear();
            let mut end = 0;
            for &features in &chunk.lens {
                let payload = len_field_size(features);
                let at = end + HEADER_LEN;
                chunk.payloads.push(at..at + payload);
                chunk.cursors.push(at);
                end = at + payload + FOOTER_LEN;
            }
            chunk.len = end;
            if chunk.buf.len() < end {
                chunk.buf.resize(end, 0);
            }
            for (cursor, &features) in chunk.cursors.iter_mut().zip(&chunk.lens) {
                let mut at = At { buf: &mut chunk.buf, pos: *cursor };
                at.len_field(0x0a, features);
                *cursor = at.pos;
            }
            for column in &columns {
                column.write_entries(rows.clone(), &mut chunk.buf, &mut chunk.cursors);
            }
            for payload in &chunk.payloads {
                frame_in_place(&mut chunk.buf[payload.start - HEADER_LEN..payload.end + FOOTER_LEN]);
            }
            emit(&chunk)?;
        }
        Ok(())
    }

    fn check_schema(&self, batch: &RecordBatch) -> Result<()> {
        let theirs = batch.schema();
        let same = theirs.fields().len() == self.schema.fields().len()
            && theirs
                .fields()
                .iter()
                .zip(self.schema.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if same {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "batch schema {theirs} differs from the writer's schema {}",
                self.schema
            )))
        }
    }
}

/// Refuses a schema that names a column twice (Arrow allows it): a record holds one feature per
/// name, so one column's values would silently replace the other's, on writing as on reading.
pub(crate) fn unique_names(schema: &Schema) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(schema.fields().len());
    for field in schema.fields() {
        if !seen.insert(field.name().as_str()) {
            return Err(Error::UnsupportedColumn {
                column: field.name().clone(),
                reason:
                    "the schema has more than one column of this name; a record holds one feature per name"
                        .into(),
            });
        }
    }
    Ok(())
}

fn plan_column(field: &Field, default: Option<&Feature>) -> Result<ColumnPlan> {
    let name = field.name().clone();
    let (kind, list) = feature_kind_of(field.data_type())
        .map_err(|reason| Error::UnsupportedColumn { column: name.clone(), reason })?;
    let default = match default {
        None => None,
        Some(feature) => {
            let default_kind = match &feature.kind {
                Some(FeatureKind::Int64List(_)) => Some(Kind::Int64),
                Some(FeatureKind::FloatList(_)) => Some(Kind::Float),
                Some(FeatureKind::BytesList(_)) => Some(Kind::Bytes),
                None => None,
            };
            if default_kind.is_some_and(|k| k != kind) {
                return Err(Error::InvalidArgument(format!(
                    "the default for column '{name}' is not a {} like the column",
                    kind.name()
                )));
            }
            Some(feature.encode_to_vec())
        }
    };
    let mut key = Vec::with_capacity(name.len() + 3);
    put_key(&mut key, 1, WIRE_LEN);
    put_varint(&mut key, name.len() as u64);
    key.extend_from_slice(name.as_bytes());
    Ok(ColumnPlan { name, key, kind, list, default })
}

fn prepare<'p>(array: &ArrayRef, plan: &'p ColumnPlan) -> Result<Prepared<'p>> {
    let cast_error = |source| Error::Arrow {
        context: format!("column '{}': converting to {}", plan.name, plan.kind.name()),
        source,
    };
    let options = CastOptions { safe: false, ..Default::default() };
    let item_type = storage_type(plan.kind);
    let array = &crate::logical_types::to_stored(array, &plan.name)?;
    if !plan.list {
        let values = cast_with_options(array, &item_type, &options).map_err(cast_error)?;
        let nulls = array.logical_nulls();
        return Ok(Prepared { plan, nulls, offsets: None, values: values_of(&values, plan.kind) });
    }
    let target = DataType::LargeList(Arc::new(Field::new_list_field(item_type, true)));
    let cast = cast_with_options(array, &target, &options).map_err(cast_error)?;
    let list = cast.as_list::<i64>();
    let offsets = list.offsets().inner().clone();
    let values = list.values();
    if let Some(value_nulls) = values.logical_nulls().filter(|n| n.null_count() > 0) {
        let row = (0..list.len())
            .find(|&i| (offsets[i] as usize..offsets[i + 1] as usize).any(|j| value_nulls.is_null(j)));
        if let Some(row) = row {
            return Err(Error::BadValue {
                column: plan.name.clone(),
                row,
                reason: "a list element is null, which a tf.train.Feature cannot hold".into(),
            });
        }
    }
    Ok(Prepared {
        plan,
        nulls: list.logical_nulls(),
        offsets: Some(offsets),
        values: values_of(values, plan.kind),
    })
}

fn values_of(array: &ArrayRef, kind: Kind) -> Values {
    // `prepare` cast the array to exactly these types, so the downcasts cannot fail.
    match kind {
        Kind::Int64 => Values::Int(array.as_primitive::<Int64Type>().values().clone()),
        Kind::Float => Values::Float(array.as_primitive::<Float32Type>().values().clone()),
        Kind::Bytes => Values::Bytes(array.as_binary::<i64>().clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Example;
    use arrow::array::{
        BooleanArray, FixedSizeListArray, Float64Array, Int8Array, Int32Array, ListArray, StringArray,
        UInt32Array,
    };
    use arrow::datatypes::Int32Type;

    fn encode_all(batch: &RecordBatch, defaults: &HashMap<String, Feature>) -> Result<Vec<Example>> {
        let enc = ExampleEncoder::new(batch.schema(), defaults)?;
        let mut out = Vec::new();
        enc.encode(batch, |bytes| {
            out.push(Example::decode(bytes).expect("valid Example"));
            Ok(())
        })?;
        Ok(out)
    }

    fn feature<'a>(ex: &'a Example, name: &str) -> Option<&'a Feature> {
        ex.features.as_ref().unwrap().feature.get(name)
    }

    #[test]
    fn a_name_used_twice_is_refused_by_every_encoder_and_decoder() {
        let x = || Arc::new(Int32Array::from(vec![1])) as ArrayRef;
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int32, true),
            Field::new("y", DataType::Int32, true),
            Field::new("x", DataType::Int32, true),
        ]));
        let batch = RecordBatch::try_new(schema.clone(), vec![x(), x(), x()]).unwrap();
        let refused = |e: Error| matches!(e, Error::UnsupportedColumn { ref column, .. } if column == "x");
        assert!(refused(encode_all(&batch, &HashMap::new()).unwrap_err()));
        let sequence = crate::sequence_example::SequenceExampleEncoder::new(schema.clone(), &HashMap::new());
        assert!(refused(sequence.err().unwrap()));
        assert!(refused(crate::example_to_arrow::ExampleDecoder::new(schema.clone()).err().unwrap()));
        assert!(refused(crate::sequence_example::SequenceExampleDecoder::new(schema).err().unwrap()));
    }

    #[test]
    fn scalars_lists_and_nulls_match_prost() {
        let ids = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), Some(-2)]),
            Some(vec![]),
            None,
        ]);
        let fixed = FixedSizeListArray::from_iter_primitive::<Int32Type, _, _>(
            vec![Some(vec![Some(1), Some(2)]), Some(vec![Some(3), Some(4)]), Some(vec![Some(5), Some(6)])],
            2,
        );
        let batch = RecordBatch::try_from_iter(vec![
            ("b", Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])) as ArrayRef),
            ("i8", Arc::new(Int8Array::from(vec![-128, 0, 127])) as ArrayRef),
            ("u32", Arc::new(UInt32Array::from(vec![u32::MAX, 0, 1])) as ArrayRef),
            ("f", Arc::new(Float64Array::from(vec![Some(0.5), Some(-1e30), None])) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec![Some("é"), Some(""), None])) as ArrayRef),
            ("ids", Arc::new(ids) as ArrayRef),
            ("fixed", Arc::new(fixed) as ArrayRef),
        ])
        .unwrap();
        let mut defaults = HashMap::new();
        defaults.insert("s".to_string(), Feature::bytes([b"missing".to_vec()]));
        let rows = encode_all(&batch, &defaults).unwrap();
        assert_eq!(feature(&rows[0], "b"), Some(&Feature::int64s(vec![1])));
        assert_eq!(feature(&rows[1], "b"), None);
        assert_eq!(feature(&rows[0], "i8"), Some(&Feature::int64s(vec![-128])));
        assert_eq!(feature(&rows[0], "u32"), Some(&Feature::int64s(vec![i64::from(u32::MAX)])));
        assert_eq!(feature(&rows[1], "f"), Some(&Feature::floats(vec![-1e30f32])));
        assert_eq!(feature(&rows[0], "s"), Some(&Feature::bytes(["é".as_bytes()])));
        assert_eq!(feature(&rows[1], "s"), Some(&Feature::bytes([b"".to_vec()])));
        assert_eq!(feature(&rows[2], "s"), Some(&Feature::bytes([b"missing".to_vec()])));
        assert_eq!(feature(&rows[0], "ids"), Some(&Feature::int64s(vec![1, -2])));
        assert_eq!(feature(&rows[1], "ids"), Some(&Feature::int64s(vec![])));
        assert_eq!(feature(&rows[2], "ids"), None);
        assert_eq!(feature(&rows[2], "fixed"), Some(&Feature::int64s(vec![5, 6])));
    }

    #[test]
    fn byte_identical_to_prost_for_sorted_columns() {
        let batch = RecordBatch::try_from_iter(vec![
            ("a", Arc::new(Int32Array::from(vec![300])) as ArrayRef),
            ("b", Arc::new(StringArray::from(vec!["xy"])) as ArrayRef),
        ])
        .unwrap();
        let enc = ExampleEncoder::new(batch.schema(), &HashMap::new()).unwrap();
        let mut got = Vec::new();
        enc.encode(&batch, |b| {
            got = b.to_vec();
            Ok(())
        })
        .unwrap();
        let expected =
            Example::from_features([("a", Feature::int64s(vec![300])), ("b", Feature::bytes(["xy"]))]);
        assert_eq!(got, expected.encode_to_vec());
    }

    #[test]
    fn null_list_element_names_column_and_row() {
        let ids =
            ListArray::from_iter_primitive::<Int32Type, _, _>(vec![Some(vec![Some(1)]), Some(vec![None])]);
        let batch = RecordBatch::try_from_iter(vec![("ids", Arc::new(ids) as ArrayRef)]).unwrap();
        let err = encode_all(&batch, &HashMap::new()).unwrap_err().to_string();
        assert!(err.contains("column 'ids', row 1"), "{err}");
    }

    #[test]
    fn unsupported_types_name_the_column() {
        let schema = Schema::new(vec![Field::new(
            "m",
            DataType::Struct(vec![Field::new("x", DataType::Int32, true)].into()),
            true,
        )]);
        let err = ExampleEncoder::new(Arc::new(schema), &HashMap::new()).err().unwrap().to_string();
        assert!(err.starts_with("column 'm'"), "{err}");
    }

    #[test]
    fn sliced_batches_encode_their_own_rows() {
        let ids = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1)]),
            Some(vec![Some(2), Some(3)]),
            Some(vec![Some(4)]),
        ]);
        let batch = RecordBatch::try_from_iter(vec![
            ("ids", Arc::new(ids) as ArrayRef),
            ("s", Arc::new(StringArray::from(vec!["a", "b", "c"])) as ArrayRef),
        ])
        .unwrap()
        .slice(1, 2);
        let rows = encode_all(&batch, &HashMap::new()).unwrap();
        assert_eq!(feature(&rows[0], "ids"), Some(&Feature::int64s(vec![2, 3])));
        assert_eq!(feature(&rows[1], "s"), Some(&Feature::bytes(["c"])));
    }
}
