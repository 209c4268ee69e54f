//! Replaying the layout of a record on the records after it.
//!
//! A writer emits its features in the same order, with the same names and value shapes, record
//! after record (TensorFlow's writers in their map's order, sparktrain's in schema order). The
//! decoder learns that layout from one record and checks each next record against it entry by
//! entry: one compare per name instead of a lookup, and the common scalar shapes read at fixed
//! offsets, with one-word varints. Any difference sends the record back to the general paths.

use std::collections::HashMap;

use super::{ColumnBuilder, EntryPrefix};
use crate::wire::{Cursor, Kind, WIRE_LEN};

/// How the entries of a [`Layout`] are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A feature outside the schema, stepped over.
    Skip,
    /// A float column, expecting `float_list { packed [one float] }`.
    Float,
    /// An int64 column, expecting `int64_list { packed [one varint] }`.
    Int64,
    /// Any other column, or a feature of another shape: the column's own fast decoding.
    Other,
}

/// One entry of a [`Layout`].
#[derive(Debug, Clone)]
struct Step {
    /// The entry's first bytes, `0x0a len name 0x12`.
    prefix: EntryPrefix,
    col: usize,
    shape: Shape,
}

/// The features of one record, in its order, each with the column it fills. A writer emits the
/// same layout record after record, so the decoder learns it from one record and replays it on
/// the next ones: each entry is then matched against one expected name with one compare, and
/// the common value shapes are read at fixed offsets. A record that departs from the layout in
/// any way is rolled back and decoded by the general paths, which give the same result.
pub(super) struct Layout {
    steps: Vec<Step>,
    /// Columns that no entry fills: null in every record that follows the layout.
    missing: Vec<usize>,
}

impl Layout {
    /// The layout of `payload`, a record the decoder has just taken, or `None` when replaying it
    /// would not decode like the general path (a column named twice, more than one `features`).
    pub(super) fn learn(
        payload: &[u8],
        index: &HashMap<Vec<u8>, usize>,
        prefixes: &[EntryPrefix],
        columns: &[ColumnBuilder],
    ) -> Option<Layout> {
        let mut c = Cursor::new(payload);
        let (1, WIRE_LEN) = c.key().ok()? else { return None };
        let features = c.len_delimited().ok()?;
        if !c.is_empty() {
            return None;
        }
        let mut named = vec![false; columns.len()];
        let mut steps = Vec::new();
        let mut f = Cursor::new(features);
        while !f.is_empty() {
            let (1, WIRE_LEN) = f.key().ok()? else { return None };
            let mut e = Cursor::new(f.len_delimited().ok()?);
            let (1, WIRE_LEN) = e.key().ok()? else { return None };
            let name = e.len_delimited().ok()?;
            let (col, shape, prefix) = match index.get(name) {
                Some(&col) => {
                    if std::mem::replace(&mut named[col], true) {
                        return None;
                    }
                    let shape = match (columns[col].target.kind, columns[col].target.list) {
                        (Kind::Float, false) => Shape::Float,
                        (Kind::Int64, false) => Shape::Int64,
                        _ => Shape::Other,
                    };
                    (col, shape, prefixes[col].clone())
                }
                None => (usize::MAX, Shape::Skip, EntryPrefix::new(name)),
            };
            steps.push(Step { prefix, col, shape });
        }
        let missing = (0..columns.len()).filter(|&c| !named[c]).collect();
        Some(Layout { steps, missing })
    }

    /// Appends `payload` to `columns` if it follows the layout. Returns false, having possibly
    /// appended part of the record, as soon as it does not.
    #[inline]
    pub(super) fn replay(&self, payload: &[u8], columns: &mut [ColumnBuilder]) -> bool {
        let mut c = Cursor::new(payload);
        let Ok((1, WIRE_LEN)) = c.key() else { return false };
        let Ok(f) = c.len_delimited() else { return false };
        if !c.is_empty() {
            return false;
        }
        let mut at = 0usize;
        for step in &self.steps {
            // The entry's key (field 1, length-delimited) and its length, mostly one byte.
            let (start, len) = match f.get(at..at + 2) {
                Some(&[0x0a, len]) if len < 0x80 => (at + 2, usize::from(len)),
                _ => {
                    let mut e = Cursor::new(&f[at.min(f.len())..]);
                    let Ok((1, WIRE_LEN)) = e.key() else { return false };
                    let Ok(entry) = e.len_delimited() else { return false };
                    (entry.as_ptr() as usize - f.as_ptr() as usize, entry.len())
                }
            };
            let end = start + len;
            let Some(entry) = f.get(start..end) else { return false };
            let prefix = &step.prefix;
            if entry.len() <= prefix.bytes.len() || word_at(f, start) & prefix.mask != prefix.word {
                return false;
            }
            if prefix.is_long() && !entry.starts_with(&prefix.bytes) {
                return false;
            }
            at = end;
            let rest = &entry[prefix.bytes.len()..];
            if step.shape == Shape::Skip {
                let mut v = Cursor::new(rest);
                if v.len_delimited().is_err() || !v.is_empty() {
                    return false;
                }
                continue;
            }
            let column = &mut columns[step.col];
            match (step.shape, rest) {
                // Feature length 8, float_list (field 2) of 6 bytes, packed values of 4.
                (Shape::Float, &[8, 0x12, 6, 0x0a, 4, a, b, c, d]) => {
                    column.floats.push(f32::from_le_bytes([a, b, c, d]));
                    column.nulls.append_non_null();
                    continue;
                }
                // Feature length n + 4, int64_list (field 3) of n + 2, packed values of n.
                (Shape::Int64, &[feature, 0x1a, list, 0x0a, n, ref value @ ..])
                    if value.len() == usize::from(n)
                        && usize::from(list) == value.len() + 2
                        && usize::from(feature) == value.len() + 4 =>
                {
                    let Some(v) = varint_exact(f, end - value.len(), value.len()) else { return false };
                    column.ints.push(v as i64);
                    column.nulls.append_non_null();
                    continue;
                }
                _ => {}
            }
            let mut v = Cursor::new(rest);
            let Ok(body) = v.len_delimited() else { return false };
            if !v.is_empty() || !column.push_feature_fast(body) {
                return false;
            }
        }
        if at != f.len() {
            return false;
        }
        self.missing.iter().all(|&col| columns[col].push_null().is_ok())
    }
}

/// The 8 bytes of `buf` from `at` as a little-endian word, zero past the end of `buf`.
#[inline(always)]
fn word_at(buf: &[u8], at: usize) -> u64 {
    match buf.get(at..at + 8) {
        Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")),
        None => {
            let tail = buf.get(at..).unwrap_or(&[]);
            let mut w = [0u8; 8];
            w[..tail.len()].copy_from_slice(tail);
            u64::from_le_bytes(w)
        }
    }
}

/// The varint that takes exactly the `n` bytes of `buf` from `at` (in bounds), or `None` when
/// they do not hold one. Up to 8 bytes it is decoded from one word without a loop.
#[inline(always)]
fn varint_exact(buf: &[u8], at: usize, n: usize) -> Option<u64> {
    if (1..=8).contains(&n) {
        let keep = u64::MAX >> (64 - 8 * n);
        let x = word_at(buf, at) & keep;
        // Every byte but the last carries the continuation bit.
        if x & 0x8080_8080_8080_8080 != 0x8080_8080_8080_8080 & (keep >> 8) {
            return None;
        }
        // Squeeze the 7-bit groups together: pairs, then quads, then the two halves.
        let x = x & 0x7f7f_7f7f_7f7f_7f7f;
        let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
        let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
        return Some((x & 0x0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4));
    }
    let mut c = Cursor::new(&buf[at..at + n]);
    let v = c.varint().ok()?;
    c.is_empty().then_some(v)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::AsArray;
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;
    use crate::example_to_arrow::ExampleDecoder;
    use crate::proto::Message;

    /// An `Example` with its entries in the given order, built by hand (prost sorts the map).
    fn example_in_order(entries: &[(&str, crate::proto::Feature)]) -> Vec<u8> {
        use crate::wire::{WIRE_LEN, put_key, put_varint};
        let mut features = Vec::new();
        for (name, feature) in entries {
            let body = feature.encode_to_vec();
            let mut entry = Vec::new();
            put_key(&mut entry, 1, WIRE_LEN);
            put_varint(&mut entry, name.len() as u64);
            entry.extend_from_slice(name.as_bytes());
            put_key(&mut entry, 2, WIRE_LEN);
            put_varint(&mut entry, body.len() as u64);
            entry.extend_from_slice(&body);
            put_key(&mut features, 1, WIRE_LEN);
            put_varint(&mut features, entry.len() as u64);
            features.extend_from_slice(&entry);
        }
        let mut out = Vec::new();
        put_key(&mut out, 1, WIRE_LEN);
        put_varint(&mut out, features.len() as u64);
        out.extend_from_slice(&features);
        out
    }

    /// Runs of records of one layout (learned, then replayed) broken by records that depart
    /// from it in every way a writer can: other values of every varint length, an unknown
    /// feature, a missing one, another order, a feature with no list, an int in a float column.
    /// Every record decodes as the general path alone decodes it.
    #[test]
    fn replayed_layouts_decode_like_the_general_path() {
        use crate::proto::Feature as F;
        let long = "a_much_longer_feature_name";
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("x", DataType::Float32, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("tags", DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))), true),
            Field::new(long, DataType::Int64, true),
            Field::new("w", DataType::Float32, true),
        ]));
        let usual = |a: i64, x: f32| {
            example_in_order(&[
                ("x", F::floats(vec![x])),
                ("a", F::int64s(vec![a])),
                ("name", F::bytes(["n"])),
                ("tags", F::int64s(vec![1, a])),
                (long, F::int64s(vec![a / 3])),
                ("w", F::floats(vec![0.25])),
            ])
        };
        let mut records = Vec::new();
        // Values of every varint length, negatives (ten bytes) included.
        for a in [0, 1, 127, 128, 1 << 20, 1 << 35, 1 << 55, 1 << 56, i64::MAX, -1, i64::MIN] {
            records.push(usual(a, a as f32));
        }
        records.push(example_in_order(&[
            ("x", F::floats(vec![1.5])),
            ("zz", F::bytes(["unknown"])),
            ("a", F::int64s(vec![7])),
            ("name", F::bytes(["m"])),
            ("tags", F::int64s(vec![])),
            (long, F::int64s(vec![8])),
            ("w", F::floats(vec![0.5])),
        ]));
        records.push(usual(9, 9.5));
        records.push(example_in_order(&[("a", F::int64s(vec![10])), ("x", F::floats(vec![2.0]))]));
        records.push(usual(11, 11.5));
        records.push(example_in_order(&[
            ("w", F::int64s(vec![3])),
            ("a", F::int64s(vec![12])),
            ("x", F::default()),
            ("name", F::bytes(["o"])),
            (long, F::int64s(vec![13])),
            ("tags", F::int64s(vec![4, 5, 6])),
        ]));
        for a in 14..40 {
            records.push(usual(a, 0.5));
        }
        let mut replayed = ExampleDecoder::new(schema.clone()).unwrap();
        let mut general = ExampleDecoder::new(schema).unwrap();
        for (i, r) in records.iter().enumerate() {
            replayed.push(r, "mem", i as u64).unwrap();
            general.push_general(r, "mem", i as u64).unwrap();
        }
        assert!(replayed.layout.is_some(), "the last run of records is replayed");
        assert_eq!(replayed.finish().unwrap(), general.finish().unwrap());
    }

    /// A record that follows the layout up to a value of the wrong kind fails as it would
    /// without the layout, keeps nothing of itself, and the next records replay again.
    #[test]
    fn a_conflict_inside_a_replayed_record_rolls_back() {
        use crate::proto::Feature as F;
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        let good = |v: i64| example_in_order(&[("a", F::int64s(vec![v])), ("b", F::int64s(vec![v]))]);
        let bad = example_in_order(&[("a", F::int64s(vec![5])), ("b", F::bytes(["five"]))]);
        let mut dec = ExampleDecoder::new(schema).unwrap();
        dec.push(&good(1), "f", 0).unwrap();
        dec.push(&good(2), "f", 1).unwrap();
        let err = dec.push(&bad, "f", 2).unwrap_err().to_string();
        assert_eq!(err, "f: record 2, feature 'b': is a bytes_list but the column holds int64_list");
        for i in 3..40 {
            dec.push(&good(i), "f", i as u64).unwrap();
        }
        let batch = dec.finish().unwrap();
        let a = batch.column(0).as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(a, [1, 2].into_iter().chain(3..40).collect::<Vec<i64>>());
        assert_eq!(batch.column(1).as_primitive::<Int64Type>().values().to_vec(), a);
    }

    /// The word-at-a-time varint agrees with the byte loop on every length, and refuses bytes
    /// that are not one varint of exactly that length.
    #[test]
    fn exact_length_varints() {
        for v in [0u64, 1, 127, 128, 300, 1 << 21, (1 << 28) - 1, 1 << 49, (1 << 56) - 1, 1 << 56, u64::MAX] {
            let mut buf = Vec::new();
            crate::wire::put_varint(&mut buf, v);
            let n = buf.len();
            // Alone, and followed by bytes that must not be read into it.
            assert_eq!(varint_exact(&buf, 0, n), Some(v), "{v}");
            buf.extend_from_slice(&[0xff; 9]);
            assert_eq!(varint_exact(&buf, 0, n), Some(v), "{v} followed by more bytes");
            if n > 1 {
                assert_eq!(varint_exact(&buf, 0, n - 1), None, "{v} cut short");
            }
            assert_eq!(varint_exact(&buf, 0, n + 1), None, "{v} with a byte too many");
        }
    }
}
