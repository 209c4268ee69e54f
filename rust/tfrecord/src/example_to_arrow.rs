//! Serialized `tf.train.Example`s → Arrow `RecordBatch`es, and schema inference.
//!
//! The decoder parses each record's bytes in place and appends values straight into per-column
//! buffers; features that the schema does not name are skipped without decoding (column
//! pruning). A feature missing from a record is a null. Values widen along
//! int64 → float → bytes (numbers become their decimal text in a bytes column); anything else
//! that does not fit the column is an error naming the file, record and feature.
//!
//! Inference reads a sample of records, possibly from many files, and picks for each feature the
//! widest kind seen, a list type when any record holds a number of values other than one, and
//! `utf8` for bytes that are all valid UTF-8.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, Float32Array, Int64Array, ListArray, NullBufferBuilder, StringArray,
};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::compute::{CastOptions, cast_with_options};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

mod layout;

use layout::Layout;

use crate::error::{Error, Result};
use crate::wire::{
    Cursor, Kind, RawList, WIRE_LEN, WireError, for_each_field_body, for_each_map_entry, parse_feature,
};

/// What a schema field asks the decoder to build.
#[derive(Debug, Clone)]
struct Target {
    kind: Kind,
    list: bool,
    utf8: bool,
}

fn target_of(field: &Field) -> Result<Target> {
    fn scalar(dt: &DataType) -> Option<(Kind, bool)> {
        use DataType::*;
        Some(match dt {
            Boolean | Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => (Kind::Int64, false),
            Float16 | Float32 | Float64 => (Kind::Float, false),
            Utf8 | LargeUtf8 | Utf8View => (Kind::Bytes, true),
            Binary | LargeBinary | BinaryView => (Kind::Bytes, false),
            // Decimals are stored as their text.
            other => (crate::logical_types::stored_kind(other)?, true),
        })
    }
    let dt = field.data_type();
    let (inner, list) = match dt {
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            (item.data_type(), true)
        }
        other => (other, false),
    };
    let (kind, utf8) = scalar(inner).ok_or_else(|| Error::UnsupportedColumn {
        column: field.name().clone(),
        reason: format!("type {dt} cannot be read from a tf.train.Feature"),
    })?;
    Ok(Target { kind, list, utf8 })
}

/// One column being built.
struct ColumnBuilder {
    field: Arc<Field>,
    target: Target,
    nulls: NullBufferBuilder,
    /// List offsets into the value buffers (list columns only).
    list_offsets: Vec<i32>,
    ints: Vec<i64>,
    floats: Vec<f32>,
    bytes_offsets: Vec<i32>,
    bytes: Vec<u8>,
}

impl ColumnBuilder {
    fn new(field: Arc<Field>, target: Target) -> Self {
        let mut b = ColumnBuilder {
            field,
            target,
            nulls: NullBufferBuilder::new(0),
            list_offsets: Vec::new(),
            ints: Vec::new(),
            floats: Vec::new(),
            bytes_offsets: Vec::new(),
            bytes: Vec::new(),
        };
        b.reset();
        b
    }

    fn reset(&mut self) {
        self.nulls = NullBufferBuilder::new(1024);
        self.list_offsets.clear();
        self.list_offsets.push(0);
        self.ints.clear();
        self.floats.clear();
        self.bytes_offsets.clear();
        self.bytes_offsets.push(0);
        self.bytes.clear();
    }

    fn value_count(&self) -> usize {
        match self.target.kind {
            Kind::Int64 => self.ints.len(),
            Kind::Float => self.floats.len(),
            Kind::Bytes => self.bytes_offsets.len() - 1,
        }
    }

    fn push_placeholder(&mut self) {
        match self.target.kind {
            Kind::Int64 => self.ints.push(0),
            Kind::Float => self.floats.push(0.0),
            Kind::Bytes => self.bytes_offsets.push(self.bytes.len() as i32),
        }
    }

    fn push_null(&mut self) -> Result<(), String> {
        if !self.field.is_nullable() {
            return Err("missing, and the column is not nullable".into());
        }
        if self.target.list {
            self.list_offsets.push(self.value_count() as i32);
        } else {
            self.push_placeholder();
        }
        self.nulls.append_null();
        Ok(())
    }

    /// Appends one value of the list, widened to the column's kind. Returns an error message on
    /// a kind that does not fit.
    fn push_list(&mut self, raw: RawList<'_>) -> Result<(), String> {
        let before = self.value_count();
        let wire = |e: WireError| format!("malformed {}: {e}", raw.kind.name());
        match (self.target.kind, raw.kind) {
            (Kind::Int64, Kind::Int64) => raw.for_each_int64(|v| self.ints.push(v)).map_err(wire)?,
            (Kind::Float, Kind::Float) => raw.for_each_float(|v| self.floats.push(v)).map_err(wire)?,
            (Kind::Float, Kind::Int64) => raw.for_each_int64(|v| self.floats.push(v as f32)).map_err(wire)?,
            (Kind::Bytes, Kind::Bytes) => {
                let mut bad_utf8 = false;
                let check = self.target.utf8;
                raw.for_each_bytes(|v| {
                    bad_utf8 |= check && std::str::from_utf8(v).is_err();
                    self.bytes.extend_from_slice(v);
                    self.bytes_offsets.push(self.bytes.len() as i32);
                })
                .map_err(wire)?;
                if bad_utf8 {
                    self.truncate_values(before);
                    return Err("a value is not valid UTF-8 but the column is utf8".into());
                }
            }
            (Kind::Bytes, Kind::Int64) => {
                raw.for_each_int64(|v| self.push_text(v.to_string())).map_err(wire)?
            }
            (Kind::Bytes, Kind::Float) => {
                raw.for_each_float(|v| self.push_text(v.to_string())).map_err(wire)?
            }
            (column, found) => {
                return Err(format!("is a {} but the column holds {}", found.name(), column.name()));
            }
        }
        if self.bytes.len() > i32::MAX as usize {
            // Offsets past i32::MAX wrapped; the values before this record are still intact.
            self.truncate_values(before);
            return Err("more than 2 GiB of bytes in one batch; use a smaller batch size".into());
        }
        let n = self.value_count() - before;
        if self.target.list {
            self.list_offsets.push(self.value_count() as i32);
        } else if n != 1 {
            self.truncate_values(before);
            return Err(format!("holds {n} values but the column is a scalar (use a list type)"));
        }
        self.nulls.append_non_null();
        Ok(())
    }

    /// Appends a feature given as its `Feature` body, for the common layouts only; false means
    /// "not handled here" (nothing appended), and the general path takes over.
    #[inline]
    fn push_feature_fast(&mut self, body: &[u8]) -> bool {
        match (self.target.kind, self.target.list, body) {
            // float_list { packed [one float] }
            (Kind::Float, false, &[0x12, 6, 0x0a, 4, a, b, c, d]) => {
                self.floats.push(f32::from_le_bytes([a, b, c, d]));
                self.nulls.append_non_null();
                true
            }
            // int64_list { packed [one varint of n bytes] }
            (Kind::Int64, false, &[0x1a, list_len, 0x0a, n, ref value @ ..])
                if usize::from(list_len) == usize::from(n) + 2 && value.len() == usize::from(n) =>
            {
                let mut c = Cursor::new(value);
                match c.varint() {
                    Ok(v) if c.is_empty() => {
                        self.ints.push(v as i64);
                        self.nulls.append_non_null();
                        true
                    }
                    _ => false,
                }
            }
            _ => match parse_feature(body) {
                Ok(Some(raw)) if raw.kind == self.target.kind => self.push_list(raw).is_ok(),
                _ => false,
            },
        }
    }

    fn push_text(&mut self, text: String) {
        self.bytes.extend_from_slice(text.as_bytes());
        self.bytes_offsets.push(self.bytes.len() as i32);
    }

    fn truncate_values(&mut self, len: usize) {
        match self.target.kind {
            Kind::Int64 => self.ints.truncate(len),
            Kind::Float => self.floats.truncate(len),
            Kind::Bytes => {
                self.bytes_offsets.truncate(len + 1);
                self.bytes.truncate(self.bytes_offsets[len] as usize);
            }
        }
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        let stored: ArrayRef = match self.target.kind {
            Kind::Int64 => Arc::new(Int64Array::new(std::mem::take(&mut self.ints).into(), None)),
            Kind::Float => Arc::new(Float32Array::new(std::mem::take(&mut self.floats).into(), None)),
            Kind::Bytes => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut self.bytes_offsets)));
                let data = std::mem::take(&mut self.bytes).into();
                if self.target.utf8 {
                    // SAFETY: every value appended to a utf8 column was checked with
                    // `str::from_utf8` (or is the decimal text of a number), and the offsets
                    // are monotonic because they were appended as running lengths.
                    Arc::new(unsafe { StringArray::new_unchecked(offsets, data, None) })
                } else {
                    Arc::new(BinaryArray::new(offsets, data, None))
                }
            }
        };
        let item_type = match self.field.data_type() {
            DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
                item.data_type()
            }
            other => other,
        };
        let nulls = self.nulls.finish();
        let arrow_error =
            |source| Error::Arrow { context: format!("column '{}'", self.field.name()), source };
        // Dates, timestamps and decimals are converted from their stored values here, before the
        // list structure goes on: a cast of the whole column cannot read them. Scalar columns get
        // their nulls first, so that the placeholders of null rows are not parsed.
        let logical = crate::logical_types::stored_kind(item_type).is_some();
        let built: ArrayRef = if self.target.list {
            let values = if logical {
                crate::logical_types::from_stored(stored, item_type, self.field.name())?
            } else {
                stored
            };
            let item = Arc::new(Field::new_list_field(values.data_type().clone(), true));
            let offsets = OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut self.list_offsets)));
            Arc::new(ListArray::try_new(item, offsets, values, nulls).map_err(arrow_error)?)
        } else {
            let with_nulls = arrow::array::make_array(
                stored.to_data().into_builder().nulls(nulls).build().map_err(arrow_error)?,
            );
            if logical {
                crate::logical_types::from_stored(with_nulls, item_type, self.field.name())?
            } else {
                with_nulls
            }
        };
        self.reset();
        if built.data_type() == self.field.data_type() {
            return Ok(built);
        }
        let options = CastOptions { safe: false, ..Default::default() };
        let target = self.field.data_type();
        cast_with_options(&built, target, &options).map_err(|source| {
            // Only on failure: the row at fault, cast alone, for the error to name its record.
            let row = (0..built.len())
                .find(|&i| cast_with_options(&built.slice(i, 1), target, &options).is_err())
                .unwrap_or(0);
            Error::DoesNotFit {
                column: self.field.name().clone(),
                row,
                reason: format!("its value does not fit {target}: {source}"),
            }
        })
    }
}

/// Builds Arrow record batches of a given schema from serialized `tf.train.Example`s.
pub struct ExampleDecoder {
    schema: SchemaRef,
    columns: Vec<ColumnBuilder>,
    index: HashMap<Vec<u8>, usize>,
    prefixes: Vec<EntryPrefix>,
    /// The column found at each entry position of the previous record (`u32::MAX`: a feature
    /// outside the schema), the first guess for the next record.
    order: Vec<u32>,
    /// Per column, the byte range of its feature in the current record (last one wins).
    slots: Vec<Option<(usize, usize)>>,
    /// Per column, the generation of the last record that named it (fast path).
    seen: Vec<u32>,
    generation: u32,
    rows: usize,
    /// The layout of a recent record, replayed on the next ones (see [`Layout`]).
    layout: Option<Layout>,
    /// Records to decode without trying a layout, after a record that did not follow one.
    layout_cooldown: u32,
    /// Records in a row that did not follow the layout learned before them.
    layout_misses: u32,
}

impl ExampleDecoder {
    /// A decoder producing batches of `schema`. Every field must have a type that a feature can
    /// fill (see the crate documentation); extra features in the records are ignored.
    pub fn new(schema: SchemaRef) -> Result<Self> {
        crate::arrow_to_example::unique_names(&schema)?;
        let mut columns = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            columns.push(ColumnBuilder::new(field.clone(), target_of(field)?));
        }
        let names: Vec<Vec<u8>> = schema.fields().iter().map(|f| f.name().as_bytes().to_vec()).collect();
        let index = names.iter().enumerate().map(|(i, n)| (n.clone(), i)).collect();
        let prefixes = names.iter().map(|n| EntryPrefix::new(n)).collect();
        let slots = vec![None; columns.len()];
        let seen = vec![0; columns.len()];
        Ok(ExampleDecoder {
            schema,
            columns,
            index,
            prefixes,
            order: Vec::new(),
            slots,
            seen,
            generation: 0,
            rows: 0,
            layout: None,
            layout_cooldown: 0,
            layout_misses: 0,
        })
    }

    /// The schema of the batches produced.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Reserves room for `rows` more rows in every scalar column, so that a batch of known size
    /// fills without reallocating.
    pub fn reserve(&mut self, rows: usize) {
        for c in &mut self.columns {
            if !c.target.list {
                match c.target.kind {
                    Kind::Int64 => c.ints.reserve(rows),
                    Kind::Float => c.floats.reserve(rows),
                    Kind::Bytes => c.bytes_offsets.reserve(rows),
                }
            }
        }
    }

    /// Rows decoded since the last [`ExampleDecoder::finish`].
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True when no row is pending.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Appends one record. `path` and `record` name it in errors. On error nothing of the
    /// record is kept, so the decoder stays consistent and a caller may skip the record.
    pub fn push(&mut self, payload: &[u8], path: &str, record: u64) -> Result<()> {
        if let Some(layout) = &self.layout {
            if layout.replay(payload, &mut self.columns) {
                self.rows += 1;
                self.layout_misses = 0;
                return Ok(());
            }
            self.rollback();
            self.layout = None;
            self.back_off_layout();
        }
        if self.push_fast(payload) {
            self.rows += 1;
            if self.layout_cooldown == 0 {
                self.layout = Layout::learn(payload, &self.index, &self.prefixes, &self.columns);
                if self.layout.is_none() {
                    self.back_off_layout();
                }
            } else {
                self.layout_cooldown -= 1;
            }
            return Ok(());
        }
        self.rollback();
        self.push_general(payload, path, record)
    }

    /// Waits longer before the next replay or learning: records whose layout keeps changing, or
    /// cannot be replayed, pay for the attempt less and less often (after 2, 4 ... 1,024 records).
    fn back_off_layout(&mut self) {
        self.layout_misses = self.layout_misses.saturating_add(1);
        self.layout_cooldown = 1 << self.layout_misses.min(10);
    }

    /// Decodes a record in one pass, for the layout every TensorFlow writer produces: one
    /// `features` field, entries of key then value, each feature of its column's kind, scalars
    /// with one value, no feature named twice. Returns false, having possibly appended part of
    /// the record, as soon as anything else is met; [`ExampleDecoder::push_general`] then
    /// handles (or reports) the record.
    #[inline]
    fn push_fast(&mut self, payload: &[u8]) -> bool {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.seen.iter_mut().for_each(|g| *g = 0);
            self.generation = 1;
        }
        let generation = self.generation;
        let mut c = Cursor::new(payload);
        let Ok((1, WIRE_LEN)) = c.key() else { return payload.is_empty() && self.fill_missing(generation) };
        let Ok(features) = c.len_delimited() else { return false };
        if !c.is_empty() {
            return false;
        }
        let mut f = Cursor::new(features);
        let mut position = 0usize;
        while !f.is_empty() {
            let Ok((1, WIRE_LEN)) = f.key() else { return false };
            let Ok(entry) = f.len_delimited() else { return false };
            // Writers emit features in the same order record after record, so the column that
            // held this position in the previous record is tried first, by comparing the
            // entry's leading bytes (key field, name, value tag) with its in one 8-byte load.
            let guess = self.order.get(position).map_or(usize::MAX, |&c| c as usize);
            position += 1;
            let (col, body) = match self.prefixes.get(guess).and_then(|p| p.strip(entry)) {
                Some(rest) => {
                    let mut v = Cursor::new(rest);
                    let Ok(body) = v.len_delimited() else { return false };
                    if !v.is_empty() {
                        return false;
                    }
                    (guess, body)
                }
                None => {
                    let mut e = Cursor::new(entry);
                    let Ok((1, WIRE_LEN)) = e.key() else { return false };
                    let Ok(name) = e.len_delimited() else { return false };
                    let Ok((2, WIRE_LEN)) = e.key() else { return false };
                    let Ok(body) = e.len_delimited() else { return false };
                    if !e.is_empty() {
                        return false;
                    }
                    let col = self.index.get(name).copied().unwrap_or(usize::MAX);
                    // Remember the column at this position for the next record.
                    if self.order.len() < position {
                        self.order.resize(position, u32::MAX);
                    }
                    self.order[position - 1] = col as u32;
                    if col == usize::MAX {
                        continue;
                    }
                    (col, body)
                }
            };
            if self.seen[col] == generation {
                return false;
            }
            self.seen[col] = generation;
            if !self.columns[col].push_feature_fast(body) {
                return false;
            }
        }
        self.fill_missing(generation)
    }

    /// Appends a null to every column the current record did not name.
    #[inline]
    fn fill_missing(&mut self, generation: u32) -> bool {
        for (col, seen) in self.columns.iter_mut().zip(&self.seen) {
            if *seen != generation && col.push_null().is_err() {
                return false;
            }
        }
        true
    }

    fn push_general(&mut self, payload: &[u8], path: &str, record: u64) -> Result<()> {
        let bad = |e: WireError| Error::BadMessage {
            path: path.to_string(),
            record,
            message: "tf.train.Example",
            reason: e.to_string(),
        };
        self.slots.iter_mut().for_each(|s| *s = None);
        let base = payload.as_ptr() as usize;
        // Only records the fast path turned down come here, so a plain lookup is enough.
        let (index, slots) = (&self.index, &mut self.slots);
        for_each_field_body(payload, 1, |features| {
            for_each_map_entry(features, |name, body| {
                if let Some(&col) = index.get(name) {
                    let start = body.as_ptr() as usize - base;
                    slots[col] = Some((start, start + body.len()));
                }
                Ok(())
            })
        })
        .map_err(bad)?;
        for col in 0..self.columns.len() {
            let outcome = match self.slots[col] {
                None => self.columns[col].push_null(),
                Some((a, b)) => match parse_feature(&payload[a..b]).map_err(bad)? {
                    None => self.columns[col].push_null(),
                    Some(raw) => self.columns[col].push_list(raw),
                },
            };
            if let Err(reason) = outcome {
                self.rollback();
                return Err(Error::FeatureConflict {
                    path: path.to_string(),
                    record,
                    feature: self.schema.field(col).name().clone(),
                    reason,
                });
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// Removes whatever the current record appended to any column.
    fn rollback(&mut self) {
        let keep = self.rows;
        for c in &mut self.columns {
            if c.nulls.len() > keep {
                let values = if c.target.list { c.list_offsets[keep] as usize } else { keep };
                c.truncate_values(values);
                c.list_offsets.truncate(keep + 1);
                c.nulls.truncate(keep);
            }
        }
    }

    /// Returns the rows decoded so far as one batch and starts a new one.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let arrays = self.columns.iter_mut().map(|c| c.finish()).collect::<Result<Vec<_>>>()?;
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        self.rows = 0;
        RecordBatch::try_new_with_options(self.schema.clone(), arrays, &options)
            .map_err(|source| Error::Arrow { context: "assembling a batch".into(), source })
    }
}

/// The first bytes of a map entry that names one column: `0x0a len name 0x12`. The first 8 of
/// them (all of them for names of up to 5 bytes) are also kept as a word and a mask, so that
/// matching costs one load and one compare; longer prefixes are then compared as slices.
#[derive(Debug, Clone)]
struct EntryPrefix {
    bytes: Vec<u8>,
    word: u64,
    mask: u64,
}

impl EntryPrefix {
    fn new(name: &[u8]) -> Self {
        let mut bytes = vec![0x0a];
        crate::wire::put_varint(&mut bytes, name.len() as u64);
        bytes.extend_from_slice(name);
        bytes.push(0x12);
        let head = bytes.len().min(8);
        let mut w = [0u8; 8];
        w[..head].copy_from_slice(&bytes[..head]);
        let mask = if head == 8 { u64::MAX } else { (1u64 << (8 * head)) - 1 };
        EntryPrefix { word: u64::from_le_bytes(w), mask, bytes }
    }

    /// True when the word holds only the prefix's first 8 bytes.
    #[inline(always)]
    fn is_long(&self) -> bool {
        self.bytes.len() > 8
    }

    /// The rest of `entry` after this prefix, if `entry` starts with it.
    #[inline(always)]
    fn strip<'a>(&self, entry: &'a [u8]) -> Option<&'a [u8]> {
        let len = self.bytes.len();
        if !self.is_long()
            && let Some(head) = entry.get(..8)
        {
            let head: [u8; 8] = head.try_into().ok()?;
            return (u64::from_le_bytes(head) & self.mask == self.word).then(|| &entry[len..]);
        }
        entry.strip_prefix(self.bytes.as_slice())
    }
}

#[derive(Debug, Clone, Copy)]
struct FeatureStats {
    kind: Kind,
    list: bool,
    utf8: bool,
}

/// Infers an Arrow schema from a sample of serialized `tf.train.Example`s.
#[derive(Debug, Default)]
pub struct SchemaInference {
    features: BTreeMap<String, FeatureStats>,
    records: u64,
}

impl SchemaInference {
    /// An empty inference.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records observed so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Takes one record into account. `path` and `record` name it in errors.
    pub fn observe(&mut self, payload: &[u8], path: &str, record: u64) -> Result<()> {
        let bad = |e: WireError| Error::BadMessage {
            path: path.to_string(),
            record,
            message: "tf.train.Example",
            reason: e.to_string(),
        };
        let features = &mut self.features;
        for_each_field_body(payload, 1, |body| {
            for_each_map_entry(body, |name, feature| {
                let Some(raw) = parse_feature(feature)? else { return Ok(()) };
                let count = raw.count()?;
                let mut utf8 = true;
                if raw.kind == Kind::Bytes {
                    raw.for_each_bytes(|v| utf8 &= std::str::from_utf8(v).is_ok())?;
                }
                let name = String::from_utf8_lossy(name);
                let stats = features.entry(name.into_owned()).or_insert(FeatureStats {
                    kind: raw.kind,
                    list: false,
                    utf8: true,
                });
                stats.kind = stats.kind.max(raw.kind);
                stats.list |= count != 1;
                stats.utf8 &= utf8;
                Ok(())
            })
        })
        .map_err(bad)?;
        self.records += 1;
        Ok(())
    }

    /// The schema: one nullable field per feature seen, sorted by name.
    pub fn schema(&self) -> Schema {
        let fields: Vec<Field> = self
            .features
            .iter()
            .map(|(name, s)| {
                let item = match s.kind {
                    Kind::Int64 => DataType::Int64,
                    Kind::Float => DataType::Float32,
                    // Numbers widened into a bytes column become text, which is UTF-8.
                    Kind::Bytes if s.utf8 => DataType::Utf8,
                    Kind::Bytes => DataType::Binary,
                };
                let dt =
                    if s.list { DataType::List(Arc::new(Field::new_list_field(item, true))) } else { item };
                Field::new(name, dt, true)
            })
            .collect();
        Schema::new(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Example, Feature, Message};
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, Int32Type, Int64Type};

    fn records() -> Vec<Vec<u8>> {
        vec![
            Example::from_features([
                ("age", Feature::int64s(vec![30])),
                ("score", Feature::floats(vec![0.5])),
                ("name", Feature::bytes(["ann"])),
                ("tags", Feature::int64s(vec![1, 2])),
            ]),
            Example::from_features([
                ("age", Feature::int64s(vec![-4])),
                ("score", Feature::int64s(vec![2])),
                ("tags", Feature::int64s(vec![])),
                ("extra", Feature::bytes([vec![0xffu8]])),
            ]),
        ]
        .into_iter()
        .map(|e| e.encode_to_vec())
        .collect()
    }

    #[test]
    fn inference_widens_and_detects_lists() {
        let mut inf = SchemaInference::new();
        for (i, r) in records().iter().enumerate() {
            inf.observe(r, "mem", i as u64).unwrap();
        }
        let schema = inf.schema();
        let dt = |n: &str| schema.field_with_name(n).unwrap().data_type().clone();
        assert_eq!(dt("age"), DataType::Int64);
        assert_eq!(dt("score"), DataType::Float32);
        assert_eq!(dt("name"), DataType::Utf8);
        assert_eq!(dt("extra"), DataType::Binary);
        assert!(matches!(dt("tags"), DataType::List(_)));
    }

    #[test]
    fn decode_inferred_schema() {
        let recs = records();
        let mut inf = SchemaInference::new();
        recs.iter().enumerate().for_each(|(i, r)| inf.observe(r, "mem", i as u64).unwrap());
        let mut dec = ExampleDecoder::new(Arc::new(inf.schema())).unwrap();
        for (i, r) in recs.iter().enumerate() {
            dec.push(r, "mem", i as u64).unwrap();
        }
        let batch = dec.finish().unwrap();
        let col = |n: &str| batch.column_by_name(n).unwrap().clone();
        assert_eq!(col("age").as_primitive::<Int64Type>().values().to_vec(), vec![30, -4]);
        assert_eq!(col("score").as_primitive::<arrow::datatypes::Float32Type>().value(1), 2.0);
        assert!(col("name").is_null(1));
        assert_eq!(col("name").as_string::<i32>().value(0), "ann");
        let tags = col("tags");
        let tags = tags.as_list::<i32>();
        assert_eq!(tags.value(0).as_primitive::<Int64Type>().values().to_vec(), vec![1, 2]);
        assert_eq!(tags.value(1).len(), 0);
        assert!(!tags.is_null(1));
    }

    #[test]
    fn given_schema_casts_and_prunes() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("age", DataType::Int32, true),
            Field::new("score", DataType::Float64, true),
        ]));
        let mut dec = ExampleDecoder::new(schema).unwrap();
        for (i, r) in records().iter().enumerate() {
            dec.push(r, "mem", i as u64).unwrap();
        }
        let batch = dec.finish().unwrap();
        assert_eq!(batch.num_columns(), 2);
        assert_eq!(batch.column(0).as_primitive::<Int32Type>().values().to_vec(), vec![30, -4]);
        assert_eq!(batch.column(1).as_primitive::<Float64Type>().value(0), 0.5);
    }

    #[test]
    fn conflicts_name_file_record_feature_and_roll_back() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("age", DataType::Int64, true),
            Field::new("name", DataType::Int64, true),
        ]));
        let mut dec = ExampleDecoder::new(schema).unwrap();
        let recs = records();
        let err = dec.push(&recs[0], "f.tfrecord", 7).unwrap_err().to_string();
        assert_eq!(
            err,
            "f.tfrecord: record 7, feature 'name': is a bytes_list but the column holds int64_list"
        );
        dec.push(&recs[1], "f.tfrecord", 8).unwrap();
        let batch = dec.finish().unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().values().to_vec(), vec![-4]);
        assert!(batch.column(1).is_null(0));
    }

    /// The fast path learns the feature order of the previous record; records in other orders,
    /// with extra features, or with a feature named twice still decode right.
    #[test]
    fn feature_order_changes_and_duplicates() {
        use crate::proto::Feature as F;
        fn record(entries: &[(&str, i64)]) -> Vec<u8> {
            // Built by hand: prost would sort the map and merge duplicates.
            let mut features = Vec::new();
            for (name, v) in entries {
                let mut entry = Vec::new();
                crate::wire::put_key(&mut entry, 1, crate::wire::WIRE_LEN);
                crate::wire::put_varint(&mut entry, name.len() as u64);
                entry.extend_from_slice(name.as_bytes());
                let feature = F::int64s(vec![*v]).encode_to_vec();
                crate::wire::put_key(&mut entry, 2, crate::wire::WIRE_LEN);
                crate::wire::put_varint(&mut entry, feature.len() as u64);
                entry.extend_from_slice(&feature);
                crate::wire::put_key(&mut features, 1, crate::wire::WIRE_LEN);
                crate::wire::put_varint(&mut features, entry.len() as u64);
                features.extend_from_slice(&entry);
            }
            let mut out = Vec::new();
            crate::wire::put_key(&mut out, 1, crate::wire::WIRE_LEN);
            crate::wire::put_varint(&mut out, features.len() as u64);
            out.extend_from_slice(&features);
            out
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let mut dec = ExampleDecoder::new(schema).unwrap();
        let records = [
            record(&[("b", 1), ("a", 2), ("x", 3)]),
            record(&[("b", 4), ("a", 5), ("x", 6)]),
            record(&[("a", 7), ("b", 8)]),
            record(&[("x", 9), ("b", 10)]),
            record(&[("a", 11), ("a", 12), ("b", 13)]),
        ];
        for (i, r) in records.iter().enumerate() {
            dec.push(r, "mem", i as u64).unwrap();
        }
        let batch = dec.finish().unwrap();
        let a = batch.column(0).as_primitive::<Int64Type>();
        let b = batch.column(1).as_primitive::<Int64Type>();
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![Some(2), Some(5), Some(7), None, Some(12)]);
        assert_eq!(b.values().to_vec(), vec![1, 4, 8, 10, 13]);
    }

    /// Names of every length go through the fast path's prefix match, whatever the entry size.
    #[test]
    fn short_and_long_feature_names() {
        let names = ["a", "abcde", "abcdef", "a_much_longer_feature_name"];
        let record = Example::from_features(
            names.iter().enumerate().map(|(i, n)| (*n, Feature::int64s(vec![i as i64]))),
        )
        .encode_to_vec();
        let fields: Vec<Field> = names.iter().map(|n| Field::new(*n, DataType::Int64, true)).collect();
        let mut dec = ExampleDecoder::new(Arc::new(Schema::new(fields))).unwrap();
        for i in 0..3 {
            dec.push(&record, "mem", i).unwrap();
        }
        let batch = dec.finish().unwrap();
        for (i, name) in names.iter().enumerate() {
            let col = batch.column_by_name(name).unwrap().as_primitive::<Int64Type>();
            assert_eq!(col.values().to_vec(), vec![i as i64; 3], "{name}");
        }
    }

    #[test]
    fn scalar_column_refuses_lists() {
        let schema = Arc::new(Schema::new(vec![Field::new("tags", DataType::Int64, true)]));
        let mut dec = ExampleDecoder::new(schema).unwrap();
        let err = dec.push(&records()[0], "f", 0).unwrap_err().to_string();
        assert!(err.contains("holds 2 values"), "{err}");
    }

    #[test]
    fn garbage_is_a_bad_message_not_a_panic() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let mut dec = ExampleDecoder::new(schema).unwrap();
        let err = dec.push(&[0x0a, 0x05, 0x01], "f", 3).unwrap_err();
        assert!(matches!(err, Error::BadMessage { record: 3, .. }), "{err}");
    }
}
