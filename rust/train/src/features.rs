//! The feature spec: which columns feed a model and how, and the encoding of Arrow batches
//! into the dense values, embedding ids and labels a model takes.
//!
//! - Dense columns (any numeric type) become float32 values; a missing value is 0.
//! - Categorical columns (integers, strings or bytes) are hashed into a fixed number of
//!   buckets; crossed columns hash a tuple of columns together. Every categorical and crossed
//!   column owns a range of one shared id space, so one embedding table serves them all.
//! - Multi-hot columns (lists of integers, strings or bytes, of any length) hash each value
//!   the same way into a range of their own; the model pools a row's embeddings of one column
//!   into one vector by their sum or mean (a null or empty list pools to zeros; a null value
//!   in a list is skipped).
//! - The hash (SplitMix64 over the value, FNV-1a for bytes) is fixed, so every worker, the
//!   exported model and later predictions agree on ids. It runs in two steps: each value's
//!   64-bit key (the integer itself, or FNV-1a of the bytes), then SplitMix64 of the key. The
//!   ONNX export computes the second step in its graph and takes the keys as inputs
//!   ([`FeatureSpec::serving_inputs`]).

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef, AsArray, GenericListArray, OffsetSizeTrait};
use arrow::datatypes::{DataType, Float32Type, Int64Type, Schema, UInt64Type};
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::rng::mix;

/// The hash of a missing categorical value, taken as it is (not mixed).
pub(crate) const NULL_HASH: u64 = 0x6e75_6c6c;

/// The hash a crossed column starts from before it mixes in each of its columns in turn.
pub(crate) const CROSS_SEED: u64 = 0x5171;

/// Buckets given to a categorical column when the spec is inferred.
pub const DEFAULT_BUCKETS: u32 = 10_000;

/// A categorical column hashed into `buckets` ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Categorical {
    /// The column.
    pub name: String,
    /// How many ids its values are hashed into.
    pub buckets: u32,
}

/// Several categorical columns hashed together into `buckets` ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crossed {
    /// The columns, in order.
    pub names: Vec<String>,
    /// How many ids their value tuples are hashed into.
    pub buckets: u32,
}

/// How a multi-hot column's embeddings become one vector per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// Their sum.
    Sum,
    /// Their mean (TensorFlow's `embedding_column` default).
    #[default]
    Mean,
}

/// A list column whose values are hashed into `buckets` ids and pooled per row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiHot {
    /// The column.
    pub name: String,
    /// How many ids its values are hashed into.
    pub buckets: u32,
    /// How a row's embeddings are pooled.
    #[serde(default)]
    pub pooling: Pooling,
}

/// How a key column's values become keys: an integer by its bits, a string or bytes by
/// FNV-1a of its bytes. The integer 5 and the string "5" are different keys, so a model
/// must be scored with its key columns of the kind it was trained on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    /// Signed or unsigned integers.
    Integer,
    /// Strings or bytes.
    Bytes,
}

impl KeyKind {
    /// The kind of a key column of type `t` (a multi-hot column's items), if it is a key type.
    pub fn of(t: &DataType) -> Option<KeyKind> {
        let t = list_item(t).unwrap_or(t);
        if t.is_integer() {
            Some(KeyKind::Integer)
        } else if is_bytes(t) {
            Some(KeyKind::Bytes)
        } else {
            None
        }
    }

    fn plural(self) -> &'static str {
        match self {
            KeyKind::Integer => "integers",
            KeyKind::Bytes => "strings or bytes",
        }
    }
}

/// The kind of each key column a model was trained on, by column name.
pub type KeyKinds = BTreeMap<String, KeyKind>;

/// Which columns feed the model, and the label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureSpec {
    /// Numeric columns taken as float32 values.
    pub dense: Vec<String>,
    /// Columns hashed into embedding ids.
    #[serde(default)]
    pub categorical: Vec<Categorical>,
    /// Column tuples hashed into embedding ids.
    #[serde(default)]
    pub crossed: Vec<Crossed>,
    /// List columns hashed into embedding ids and pooled per row.
    #[serde(default)]
    pub multi_hot: Vec<MultiHot>,
    /// The label column (0/1 or a class id).
    pub label: String,
}

/// A multi-hot column's values as the exported ONNX model takes them: `rows × width` keys,
/// each row's values first and the rest of the row padding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BagInputs {
    /// Values per row: the longest list (at least 1).
    pub width: usize,
    /// The keys, row after row; 0 in padding.
    pub keys: Vec<i64>,
    /// Whether each slot holds a value (false in padding).
    pub present: Vec<bool>,
}

/// A batch's features as the exported ONNX model takes them: dense values, and the key of
/// every categorical value with whether it is missing (see [`FeatureSpec::key_columns`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServingInputs {
    /// Examples in the batch.
    pub rows: usize,
    /// `rows × dense` values, row after row; a missing value is 0.
    pub dense: Vec<f32>,
    /// `rows × key columns` keys, row after row: an integer value itself (an unsigned one by
    /// its bit pattern), or FNV-1a 64 of a string's UTF-8 bytes (or of a binary value), as
    /// two's complement; 0 where the value is missing.
    pub keys: Vec<i64>,
    /// `rows × key columns`: whether the value is missing (null).
    pub missing: Vec<bool>,
    /// Every multi-hot column's values, in the spec's order.
    pub bags: Vec<BagInputs>,
}

/// A batch encoded for a model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Encoded {
    /// Examples in the batch.
    pub rows: usize,
    /// `rows × dense` values, row after row.
    pub dense: Vec<f32>,
    /// `rows × (categorical + crossed)` ids in the shared id space, row after row.
    pub ids: Vec<u32>,
    /// One label per row.
    pub labels: Vec<f32>,
    /// `rows × multi-hot columns` counts of ids, row after row.
    pub bag_lengths: Vec<u32>,
    /// The multi-hot columns' ids in the shared id space, row after row and column after
    /// column within a row, as many as `bag_lengths` says.
    pub bag_ids: Vec<u32>,
    /// Each multi-hot column's pooling.
    pub pooling: Vec<Pooling>,
}

impl Encoded {
    /// Where each row's multi-hot ids start in `bag_ids` (`rows + 1` offsets).
    pub fn bag_offsets(&self) -> Vec<usize> {
        let width = self.pooling.len();
        let mut offsets = Vec::with_capacity(self.rows + 1);
        offsets.push(0);
        if width == 0 {
            offsets.resize(self.rows + 1, 0);
            return offsets;
        }
        let mut at = 0;
        for row in self.bag_lengths.chunks_exact(width) {
            at += row.iter().map(|&n| n as usize).sum::<usize>();
            offsets.push(at);
        }
        offsets
    }
}

impl FeatureSpec {
    /// A spec for `schema`: `label` is the label; floating-point columns are dense; integer,
    /// string and binary columns are categorical with `buckets` each; lists of those are
    /// multi-hot with `buckets` each, mean-pooled. Other columns (lists of floats, structs...)
    /// are refused by name; leave them out of the data or write the spec by hand.
    pub fn infer(schema: &Schema, label: &str, buckets: u32) -> Result<Self> {
        if schema.field_with_name(label).is_err() {
            return Err(TrainError::InvalidArgument(format!(
                "the label column '{label}' is not in the data (columns: {})",
                schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        let mut spec = FeatureSpec {
            dense: vec![],
            categorical: vec![],
            crossed: vec![],
            multi_hot: vec![],
            label: label.into(),
        };
        for field in schema.fields().iter().filter(|f| f.name() != label) {
            let name = field.name().clone();
            match field.data_type() {
                DataType::Float16 | DataType::Float32 | DataType::Float64 => spec.dense.push(name),
                t if t.is_integer() || is_bytes(t) => spec.categorical.push(Categorical { name, buckets }),
                t if list_item(t).is_some_and(|v| v.is_integer() || is_bytes(v)) => {
                    spec.multi_hot.push(MultiHot { name, buckets, pooling: Pooling::default() })
                }
                other => {
                    return Err(TrainError::InvalidArgument(format!(
                        "column '{name}' has type {other}, which is neither numeric, string nor bytes: \
                         write the feature spec by hand without it"
                    )));
                }
            }
        }
        Ok(spec)
    }

    /// Every column the spec reads (the label included), each once.
    pub fn columns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let names = self
            .dense
            .iter()
            .chain(self.categorical.iter().map(|c| &c.name))
            .chain(self.crossed.iter().flat_map(|c| &c.names))
            .chain(self.multi_hot.iter().map(|m| &m.name))
            .chain([&self.label]);
        for name in names {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
        out
    }

    /// How many dense values each example has.
    pub fn dense_width(&self) -> usize {
        self.dense.len()
    }

    /// How many ids each example has (one per categorical and crossed column).
    pub fn id_width(&self) -> usize {
        self.categorical.len() + self.crossed.len()
    }

    /// How many multi-hot columns each example has.
    pub fn bag_width(&self) -> usize {
        self.multi_hot.len()
    }

    /// How many embeddings each example has once its multi-hot columns are pooled: one per
    /// categorical, crossed and multi-hot column.
    pub fn fields(&self) -> usize {
        self.id_width() + self.bag_width()
    }

    /// The kind of each of the spec's key columns (categorical, crossed, multi-hot) in
    /// `schema`, where it has one.
    pub fn key_kinds(&self, schema: &Schema) -> KeyKinds {
        let multi_hot = self.multi_hot.iter().map(|m| m.name.clone());
        self.key_columns()
            .into_iter()
            .chain(multi_hot)
            .filter_map(|name| {
                let field = schema.field_with_name(&name).ok()?;
                Some((name, KeyKind::of(field.data_type())?))
            })
            .collect()
    }

    /// Refuses `batch` when a key column holds another kind of value than the model was
    /// trained on (`trained`): its keys, and so its embeddings, would all be other ones. A
    /// column of nulls alone has no keys to be wrong (pandas may type it either way).
    pub fn check_key_kinds(&self, trained: &KeyKinds, batch: &RecordBatch) -> Result<()> {
        for (name, kind) in self.key_kinds(&batch.schema()) {
            let nulls_only = batch.column_by_name(&name).is_some_and(|c| c.null_count() == c.len());
            if let Some(&was) = trained.get(&name)
                && was != kind
                && !nulls_only
            {
                return Err(TrainError::InvalidArgument(format!(
                    "column '{name}' holds {}, but the model was trained on {} in it: they hash to \
                     other ids (5 and \"5\" differ); cast the column to what it was in training",
                    kind.plural(),
                    was.plural()
                )));
            }
        }
        Ok(())
    }

    /// The columns whose values are keyed and hashed into ids: every categorical column, then
    /// every column a cross reads that is not one already, each once, in order of appearance.
    pub fn key_columns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let names =
            self.categorical.iter().map(|c| &c.name).chain(self.crossed.iter().flat_map(|c| &c.names));
        for name in names {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
        out
    }

    /// The size of the shared id space.
    pub fn id_space(&self) -> usize {
        self.id_ranges().iter().map(|r| r.1 as usize).sum()
    }

    /// (offset, buckets) of each categorical, crossed then multi-hot column in the shared id
    /// space.
    pub(crate) fn id_ranges(&self) -> Vec<(u32, u32)> {
        let buckets = self
            .categorical
            .iter()
            .map(|c| c.buckets)
            .chain(self.crossed.iter().map(|c| c.buckets))
            .chain(self.multi_hot.iter().map(|m| m.buckets));
        let mut offset = 0u32;
        buckets
            .map(|b| {
                let range = (offset, b);
                offset += b;
                range
            })
            .collect()
    }

    /// Checks the spec against itself: buckets, duplicate names, a shared id space that fits.
    pub fn validate(&self) -> Result<()> {
        if let Some(c) = self.categorical.iter().find(|c| c.buckets == 0) {
            return Err(TrainError::InvalidArgument(format!(
                "categorical column '{}' has 0 buckets",
                c.name
            )));
        }
        if let Some(c) = self.crossed.iter().find(|c| c.buckets == 0 || c.names.len() < 2) {
            return Err(TrainError::InvalidArgument(format!(
                "crossed column {:?} needs at least two columns and one bucket",
                c.names
            )));
        }
        if let Some(m) = self.multi_hot.iter().find(|m| m.buckets == 0) {
            return Err(TrainError::InvalidArgument(format!("multi-hot column '{}' has 0 buckets", m.name)));
        }
        if let Some(m) = self.multi_hot.iter().find(|m| {
            self.dense.contains(&m.name)
                || self.categorical.iter().any(|c| c.name == m.name)
                || self.crossed.iter().any(|c| c.names.contains(&m.name))
        }) {
            return Err(TrainError::InvalidArgument(format!(
                "multi-hot column '{}' is a list: it cannot also be dense, categorical or crossed",
                m.name
            )));
        }
        let total: u64 = self.id_ranges().iter().map(|r| r.1 as u64).sum();
        if total > u32::MAX as u64 {
            return Err(TrainError::InvalidArgument(format!(
                "{total} embedding ids in all do not fit in 32 bits"
            )));
        }
        Ok(())
    }

    /// Encodes `batch`, whose columns are found by name.
    pub fn encode(&self, batch: &RecordBatch) -> Result<Encoded> {
        self.encode_with(batch, true)
    }

    /// Encodes the features of `batch` for scoring: the label column may be absent (the
    /// labels are then zeros).
    pub fn encode_inputs(&self, batch: &RecordBatch) -> Result<Encoded> {
        self.encode_with(batch, false)
    }

    fn encode_with(&self, batch: &RecordBatch, need_label: bool) -> Result<Encoded> {
        self.validate()?;
        let rows = batch.num_rows();
        let column = |name: &str| find_column(batch, name);
        let mut out = Encoded { rows, dense: self.dense_values(batch)?, ..Encoded::default() };

        let hashes = |name: &str| hash_column(name, column(name)?);
        let categorical: Vec<Vec<u64>> =
            self.categorical.iter().map(|c| hashes(&c.name)).collect::<Result<_>>()?;
        let crossed: Vec<Vec<u64>> = self
            .crossed
            .iter()
            .map(|c| {
                let parts: Vec<Vec<u64>> = c.names.iter().map(|n| hashes(n)).collect::<Result<_>>()?;
                Ok((0..rows).map(|r| parts.iter().fold(CROSS_SEED, |h, p| mix(h ^ p[r]))).collect())
            })
            .collect::<Result<_>>()?;
        let ranges = self.id_ranges();
        out.ids = (0..rows)
            .flat_map(|r| {
                categorical
                    .iter()
                    .chain(&crossed)
                    .zip(&ranges)
                    .map(move |(h, (offset, buckets))| offset + (h[r] % *buckets as u64) as u32)
            })
            .collect();
        self.encode_bags(batch, &ranges[self.id_width()..], &mut out)?;

        if !need_label && batch.column_by_name(&self.label).is_none() {
            out.labels = vec![0.0; rows];
            return Ok(out);
        }
        let labels = column(&self.label)?;
        if let Some(row) = (0..rows).find(|&r| labels.is_null(r)) {
            return Err(TrainError::InvalidArgument(format!(
                "the label column '{}' is empty in row {row}",
                self.label
            )));
        }
        out.labels = floats(&self.label, labels, f32::NAN)?;
        Ok(out)
    }

    /// Fills `out`'s multi-hot ids: each column's lists hashed into its range of `ranges`.
    fn encode_bags(&self, batch: &RecordBatch, ranges: &[(u32, u32)], out: &mut Encoded) -> Result<()> {
        let (rows, width) = (batch.num_rows(), self.multi_hot.len());
        out.pooling = self.multi_hot.iter().map(|m| m.pooling).collect();
        if width == 0 {
            return Ok(());
        }
        let lists: Vec<Vec<Vec<u64>>> = self
            .multi_hot
            .iter()
            .map(|m| list_keys(&m.name, find_column(batch, &m.name)?))
            .collect::<Result<_>>()?;
        out.bag_lengths = Vec::with_capacity(rows * width);
        for r in 0..rows {
            for (keys, (offset, buckets)) in lists.iter().zip(ranges) {
                out.bag_lengths.push(keys[r].len() as u32);
                out.bag_ids.extend(keys[r].iter().map(|&k| offset + (mix(k) % *buckets as u64) as u32));
            }
        }
        Ok(())
    }

    /// The features of `batch` as the exported ONNX model takes them; the label is not read.
    /// The ONNX graph hashes the keys exactly as [`FeatureSpec::encode`] hashes the values.
    pub fn serving_inputs(&self, batch: &RecordBatch) -> Result<ServingInputs> {
        self.validate()?;
        let rows = batch.num_rows();
        let names = self.key_columns();
        let mut out = ServingInputs {
            rows,
            dense: self.dense_values(batch)?,
            keys: vec![0; rows * names.len()],
            missing: vec![false; rows * names.len()],
            bags: Vec::with_capacity(self.multi_hot.len()),
        };
        for m in &self.multi_hot {
            let lists = list_keys(&m.name, find_column(batch, &m.name)?)?;
            let width = lists.iter().map(Vec::len).max().unwrap_or(0).max(1);
            let mut bag =
                BagInputs { width, keys: vec![0; rows * width], present: vec![false; rows * width] };
            for (r, keys) in lists.iter().enumerate() {
                for (i, &k) in keys.iter().enumerate() {
                    bag.keys[r * width + i] = k as i64;
                    bag.present[r * width + i] = true;
                }
            }
            out.bags.push(bag);
        }
        for (j, name) in names.iter().enumerate() {
            let keys = key_column(name, find_column(batch, name)?)?;
            let rows_out =
                out.keys.chunks_exact_mut(names.len()).zip(out.missing.chunks_exact_mut(names.len()));
            for ((key_row, missing_row), key) in rows_out.zip(keys) {
                match key {
                    Some(k) => key_row[j] = k as i64,
                    None => missing_row[j] = true,
                }
            }
        }
        Ok(out)
    }

    /// `rows × dense` values, row after row, a missing value as 0.
    fn dense_values(&self, batch: &RecordBatch) -> Result<Vec<f32>> {
        // Column by column into row-major order: each column is one strided pass.
        let width = self.dense.len();
        let mut out = vec![0.0; batch.num_rows() * width];
        for (j, name) in self.dense.iter().enumerate() {
            let values = floats(name, find_column(batch, name)?, 0.0)?;
            // A NaN or an infinity would turn every weight it reaches into NaN at the first
            // step, and the model would train on, and be exported, as nothing but NaN.
            if let Some(row) = values.iter().position(|v| !v.is_finite()) {
                return Err(TrainError::InvalidArgument(format!(
                    "the feature column '{name}' holds {} in row {row} of a batch of {}: dense features must be finite numbers (nulls become 0)",
                    values[row],
                    batch.num_rows()
                )));
            }
            for (row, value) in out.chunks_exact_mut(width).zip(values.iter()) {
                row[j] = *value;
            }
        }
        Ok(out)
    }
}

fn find_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| TrainError::InvalidArgument(format!("the feature column '{name}' is not in the data")))
}

fn is_bytes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Binary | DataType::LargeBinary
    )
}

/// A numeric column as float32, nulls as `missing`.
fn floats(name: &str, array: &ArrayRef, missing: f32) -> Result<Vec<f32>> {
    if !array.data_type().is_numeric() && array.data_type() != &DataType::Boolean {
        return Err(TrainError::InvalidArgument(format!(
            "column '{name}' has type {}, not a number",
            array.data_type()
        )));
    }
    let cast = arrow::compute::cast(array, &DataType::Float32)
        .map_err(|e| TrainError::InvalidArgument(format!("column '{name}': {e}")))?;
    let values = cast.as_primitive::<Float32Type>();
    if values.null_count() == 0 {
        return Ok(values.values().to_vec());
    }
    Ok((0..values.len()).map(|i| if values.is_null(i) { missing } else { values.value(i) }).collect())
}

/// Every value of a categorical column hashed to 64 bits; nulls get a hash of their own.
fn hash_column(name: &str, array: &ArrayRef) -> Result<Vec<u64>> {
    Ok(key_column(name, array)?.into_iter().map(|k| k.map_or(NULL_HASH, mix)).collect())
}

/// Every value of a categorical column as its 64-bit key (None for a null): an integer by
/// its two's complement bits, bytes and strings by FNV-1a.
fn key_column(name: &str, array: &ArrayRef) -> Result<Vec<Option<u64>>> {
    let t = array.data_type();
    let keys: Vec<Option<u64>> = if t.is_signed_integer() {
        let cast = arrow::compute::cast(array, &DataType::Int64).expect("integers widen to int64");
        let v = cast.as_primitive::<Int64Type>();
        (0..v.len()).map(|i| (!v.is_null(i)).then(|| v.value(i) as u64)).collect()
    } else if t.is_unsigned_integer() {
        let cast = arrow::compute::cast(array, &DataType::UInt64).expect("integers widen to uint64");
        let v = cast.as_primitive::<UInt64Type>();
        (0..v.len()).map(|i| (!v.is_null(i)).then(|| v.value(i))).collect()
    } else if is_bytes(t) {
        let cast = arrow::compute::cast(array, &DataType::LargeBinary).expect("strings are bytes");
        let v = cast.as_binary::<i64>();
        (0..v.len()).map(|i| (!v.is_null(i)).then(|| fnv1a(v.value(i)))).collect()
    } else {
        return Err(TrainError::InvalidArgument(format!(
            "categorical column '{name}' has type {t}: use integers, strings or bytes"
        )));
    };
    Ok(keys)
}

/// The item type of a list column's type.
fn list_item(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) => Some(f.data_type()),
        _ => None,
    }
}

/// Every row of a multi-hot column as the keys of its values, nulls (a null list, a null
/// value) left out.
fn list_keys(name: &str, array: &ArrayRef) -> Result<Vec<Vec<u64>>> {
    fn rows<O: OffsetSizeTrait>(name: &str, list: &GenericListArray<O>) -> Result<Vec<Vec<u64>>> {
        let keys = key_column(name, list.values())?;
        let offsets = list.value_offsets();
        Ok((0..list.len())
            .map(|r| {
                if list.is_null(r) {
                    return Vec::new();
                }
                keys[offsets[r].as_usize()..offsets[r + 1].as_usize()].iter().flatten().copied().collect()
            })
            .collect())
    }
    match array.data_type() {
        DataType::List(_) => rows(name, array.as_list::<i32>()),
        DataType::LargeList(_) => rows(name, array.as_list::<i64>()),
        other => Err(TrainError::InvalidArgument(format!(
            "multi-hot column '{name}' has type {other}: use a list of integers, strings or bytes"
        ))),
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}
