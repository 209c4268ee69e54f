//! Summing the rows of a tensor into groups known on the host, with parallel kernels only.
//!
//! An embedding's gradient arrives with one row per id of the batch and must become one row
//! per distinct id. candle's `index_add` does that in one call, but its CUDA kernel runs one
//! thread per value of a row, each looping over every id: for a batch of 4096 rows of 26 ids
//! that is a serial loop of 106,496 steps. [`SegmentSum`] instead cuts every group into
//! segments of at most [`SEGMENT`] rows, pads each to a power of two, and sums each class of
//! segments with one gather and one reduction; groups longer than a segment go round again
//! with their segments' sums, so a hot id seen 100,000 times takes three rounds. Singletons
//! are never copied until the last gather picks every group's sum. The plan is made on the
//! host from the indexes (which the host has anyway) and the order of every sum is fixed by
//! it, so the result is the same from one run to the next.

use candle_core::{D, Device, Tensor};

use crate::error::Result;

/// A slot that belongs to no group (padding): its row is never summed.
pub const NONE: u32 = u32::MAX;

/// The most rows one segment sums at once.
pub const SEGMENT: usize = 64;

/// One round: segments of the previous round's rows, by class.
struct Round {
    /// Every class's gathers, one class after the other; padded with [`NONE`] (a zero row).
    at: Tensor,
    /// `(first index in at, segments, rows per segment)` of each class.
    classes: Vec<(usize, usize, usize)>,
}

/// A plan that sums the rows of a `[slots, dim]` tensor into `[groups, dim]`.
pub struct SegmentSum {
    rounds: Vec<Round>,
    /// `[groups]`: each group's sum, as a row of every round's rows laid end to end (the
    /// input's first); [`NONE`] for a group with no row.
    pick: Tensor,
}

impl SegmentSum {
    /// The plan for `group_of[slot]` (a group below `groups`, or [`NONE`]), on `device`.
    pub fn new(group_of: &[u32], groups: usize, device: &Device) -> Result<Self> {
        // The current round's rows by group, as offsets into one array (no allocation per
        // group: a batch has tens of thousands of distinct ids), from a counting sort of the
        // slots with 32-bit counters, which keep its scattered reads and writes in cache.
        let mut cursor = vec![0u32; groups];
        for &g in group_of {
            if g != NONE {
                cursor[g as usize] += 1;
            }
        }
        let mut starts = Vec::with_capacity(groups + 1);
        let mut total = 0u32;
        for count in &mut cursor {
            starts.push(total as usize);
            (*count, total) = (total, total + *count);
        }
        starts.push(total as usize);
        let mut items = vec![0u32; total as usize];
        for (slot, &g) in group_of.iter().enumerate() {
            if g != NONE {
                let at = &mut cursor[g as usize];
                items[*at as usize] = slot as u32;
                *at += 1;
            }
        }
        let mut ids: Vec<u32> = (0..groups as u32).collect();
        let mut pick = vec![NONE; groups];
        let (mut offset, mut rows) = (0usize, group_of.len());
        let mut rounds = Vec::new();
        let classes = SEGMENT.ilog2() as usize;
        let class_of = |len: usize| len.next_power_of_two().max(2).ilog2() as usize - 1;
        loop {
            let mut pending = Vec::new();
            for (k, &g) in ids.iter().enumerate() {
                let (s, e) = (starts[k], starts[k + 1]);
                match e - s {
                    0 => {}
                    1 => pick[g as usize] = (offset + items[s] as usize) as u32,
                    _ => pending.push((g, s, e)),
                }
            }
            if pending.is_empty() {
                break;
            }
            // The segments of each class (rows per segment, a power of two), then where each
            // class's gathers and sums go: class after class.
            let mut count = vec![0usize; classes];
            for &(_, s, e) in &pending {
                for from in (s..e).step_by(SEGMENT) {
                    count[class_of((e - from).min(SEGMENT))] += 1;
                }
            }
            let (mut row_of, mut at_of, mut layout) =
                (vec![0usize; classes], vec![0usize; classes], Vec::new());
            let (mut row, mut at_len) = (0, 0);
            for c in 0..classes {
                (row_of[c], at_of[c]) = (row, at_len);
                if count[c] > 0 {
                    layout.push((at_len, count[c], 2 << c));
                }
                row += count[c];
                at_len += count[c] * (2 << c);
            }
            let mut at = vec![NONE; at_len];
            let (mut next_ids, mut next_starts, mut next_items) = (Vec::new(), vec![0], Vec::new());
            for &(g, s, e) in &pending {
                for from in (s..e).step_by(SEGMENT) {
                    let len = (e - from).min(SEGMENT);
                    let c = class_of(len);
                    at[at_of[c]..at_of[c] + len].copy_from_slice(&items[from..from + len]);
                    at_of[c] += 2 << c;
                    next_items.push(row_of[c] as u32);
                    row_of[c] += 1;
                }
                next_ids.push(g);
                next_starts.push(next_items.len());
            }
            rounds.push(Round { at: Tensor::from_vec(at, at_len, device)?, classes: layout });
            offset += rows;
            rows = row;
            (ids, starts, items) = (next_ids, next_starts, next_items);
        }
        Ok(SegmentSum { rounds, pick: Tensor::from_vec(pick, groups, device)? })
    }

    /// `[groups, dim]`: the sums of `rows` (`[slots, dim]`) by group.
    pub fn apply(&self, rows: &Tensor) -> Result<Tensor> {
        let dim = rows.dim(D::Minus1)?;
        let mut every = vec![rows.contiguous()?];
        for round in &self.rounds {
            let previous = every.last().expect("the input at least");
            let mut sums = Vec::with_capacity(round.classes.len());
            for &(start, segments, width) in &round.classes {
                let at = round.at.narrow(0, start, segments * width)?;
                sums.push(previous.index_select(&at, 0)?.reshape((segments, width, dim))?.sum(1)?);
            }
            every.push(Tensor::cat(&sums, 0)?);
        }
        let all = if every.len() == 1 { every.pop().expect("one") } else { Tensor::cat(&every, 0)? };
        Ok(all.index_select(&self.pick, 0)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums on the host, in slot order, as the reference.
    fn reference(values: &[f32], group_of: &[u32], groups: usize, dim: usize) -> Vec<f32> {
        let mut out = vec![0.0f32; groups * dim];
        for (slot, &g) in group_of.iter().enumerate() {
            if g != NONE {
                for k in 0..dim {
                    out[g as usize * dim + k] += values[slot * dim + k];
                }
            }
        }
        out
    }

    fn check(group_of: &[u32], groups: usize, dim: usize) {
        let values: Vec<f32> =
            (0..group_of.len() * dim).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 250.0).collect();
        let rows = Tensor::from_vec(values.clone(), (group_of.len(), dim), &Device::Cpu).unwrap();
        let plan = SegmentSum::new(group_of, groups, &Device::Cpu).unwrap();
        let got = plan.apply(&rows).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let want = reference(&values, group_of, groups, dim);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "group {}, value {}: {g} vs {w}",
                i / dim,
                i % dim
            );
        }
    }

    #[test]
    fn sums_groups_of_every_size_including_ones_longer_than_a_segment() {
        // Group g holds g rows (group 0 none), spread over the slots, with padding between.
        let groups = 300;
        let mut group_of = Vec::new();
        for g in 0..groups as u32 {
            for _ in 0..g {
                group_of.push(g);
            }
            group_of.push(NONE);
        }
        // Interleave so that no group's rows are adjacent.
        group_of.sort_by_key(|g| g.wrapping_mul(2654435761) % 97);
        check(&group_of, groups, 3);
    }

    #[test]
    fn a_hot_group_takes_several_rounds() {
        // Group 0 seen 6,667 times (three rounds of 64), beside 3,334 singletons.
        let mut group_of: Vec<u32> = (0..10_000).map(|i| if i % 3 == 0 { 1 + i / 3 } else { 0 }).collect();
        group_of.push(NONE);
        check(&group_of, 1 + 10_000 / 3 + 1, 16);
    }

    #[test]
    fn singletons_alone_are_one_gather() {
        let group_of: Vec<u32> = (0..50).rev().collect();
        let plan = SegmentSum::new(&group_of, 50, &Device::Cpu).unwrap();
        assert!(plan.rounds.is_empty());
        check(&group_of, 50, 1);
    }
}
