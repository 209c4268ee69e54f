//! The feature hashing of [`crate::features`] as ONNX operators: SplitMix64 of each key in
//! uint64 arithmetic (which wraps, as Rust's `wrapping_*` does), the missing values' hash,
//! crosses folded column by column, and each column's bucket and offset in the shared id
//! space. The result is bit for bit the engine's ids.

use super::graph::{Attr, Graph};
use super::proto::tensor_proto::DataType;
use crate::features::{CROSS_SEED, FeatureSpec, NULL_HASH};
use crate::rng::{GOLDEN, ROUNDS};

/// SplitMix64 of every element of the uint64 tensor `x`.
fn mix(g: &mut Graph, x: &str) -> String {
    let golden = g.uint64("golden", GOLDEN);
    let mut z = g.op("Add", &[x, &golden], &[]);
    for (shift, multiplier) in ROUNDS {
        let by = g.uint64("shift", shift);
        let shifted = g.op("BitShift", &[&z, &by], &[Attr::Text("direction", "RIGHT")]);
        z = g.op("BitwiseXor", &[&z, &shifted], &[]);
        if let Some(m) = multiplier {
            let m = g.uint64("multiplier", m);
            z = g.op("Mul", &[&z, &m], &[]);
        }
    }
    z
}

/// `[batch, ids]` int64 ids in the shared id space, from the graph inputs `keys` (int64
/// `[batch, key columns]`) and `missing` (bool, the same shape), laid out as
/// [`FeatureSpec::encode`] lays them out: categorical columns, then crosses.
pub(crate) fn ids(g: &mut Graph, spec: &FeatureSpec, keys: &str, missing: &str) -> String {
    let columns = spec.key_columns();
    let index = |name: &str| columns.iter().position(|c| c == name).expect("a key column") as i64;
    let layout = spec.id_ranges();

    // Where picks between int64s: its uint64 kernel is not in every runtime, and the casts
    // between int64 and uint64 keep the bits.
    let unsigned = g.op("Cast", &[keys], &[Attr::Int("to", DataType::Uint64 as i64)]);
    let mixed = mix(g, &unsigned);
    let mixed = g.op("Cast", &[&mixed], &[Attr::Int("to", DataType::Int64 as i64)]);
    let null = g.int64s("null_hash", &[], &[NULL_HASH as i64]);
    let hashes = g.op("Where", &[missing, &null, &mixed], &[]);
    let hashes = g.op("Cast", &[&hashes], &[Attr::Int("to", DataType::Uint64 as i64)]);

    let mut parts = Vec::new();
    let (categorical, crossed) = layout.split_at(spec.categorical.len());
    if !spec.categorical.is_empty() {
        let at: Vec<i64> = spec.categorical.iter().map(|c| index(&c.name)).collect();
        let at = g.int64s("categorical_columns", &[at.len()], &at);
        let picked = g.op("Gather", &[&hashes, &at], &[Attr::Int("axis", 1)]);
        parts.push(bucket(g, &picked, categorical));
    }
    for (cross, range) in spec.crossed.iter().zip(crossed) {
        let mut h = g.uint64("cross_seed", CROSS_SEED);
        for name in &cross.names {
            let at = g.int64s("cross_column", &[1], &[index(name)]);
            // `[batch, 1]`: the column keeps its axis, so the crosses concatenate as they are.
            let column = g.op("Gather", &[&hashes, &at], &[Attr::Int("axis", 1)]);
            let xored = g.op("BitwiseXor", &[&h, &column], &[]);
            h = mix(g, &xored);
        }
        parts.push(bucket(g, &h, std::slice::from_ref(range)));
    }
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let ids = if refs.len() == 1 { parts[0].clone() } else { g.op("Concat", &refs, &[Attr::Int("axis", 1)]) };
    g.op("Cast", &[&ids], &[Attr::Int("to", DataType::Int64 as i64)])
}

/// `[batch, values]` int64 ids of the spec's multi-hot column `j`, from the keys of its values
/// (int64 `[batch, values]`): each value hashed as a categorical value is, into the column's
/// range. Padding slots get some id too; the caller masks them out.
pub(crate) fn bag_ids(g: &mut Graph, spec: &FeatureSpec, j: usize, keys: &str) -> String {
    let range = spec.id_ranges()[spec.id_width() + j];
    let unsigned = g.op("Cast", &[keys], &[Attr::Int("to", DataType::Uint64 as i64)]);
    let mixed = mix(g, &unsigned);
    let ids = bucket(g, &mixed, &[range]);
    g.op("Cast", &[&ids], &[Attr::Int("to", DataType::Int64 as i64)])
}

/// `offset + hash % buckets` for each column of `hashes` (`[batch, ranges]`).
fn bucket(g: &mut Graph, hashes: &str, ranges: &[(u32, u32)]) -> String {
    let buckets: Vec<u64> = ranges.iter().map(|r| r.1 as u64).collect();
    let offsets: Vec<u64> = ranges.iter().map(|r| r.0 as u64).collect();
    let buckets = g.uint64s("buckets", &[ranges.len()], &buckets);
    let offsets = g.uint64s("offsets", &[ranges.len()], &offsets);
    let rest = g.op("Mod", &[hashes, &buckets], &[Attr::Int("fmod", 0)]);
    g.op("Add", &[&rest, &offsets], &[])
}
