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

/// One round's plan, for groups numbered within the round.
struct Planned {
    /// None when no group has two rows.
    round: Option<Round>,
    /// Rows this round's sums make.
    rows: usize,
    /// Each group's sum, as a row of every round's rows laid end to end, where this round
    /// gives it; [`NONE`] for a group with no row or one still summing.
    pick: Vec<u32>,
    /// The groups still summing: `(group, first of its rows in this round's sums, rows)`.
    long: Vec<(usize, usize, usize)>,
}

/// Classes of segments: class `c` holds segments padded to `2 << c` rows, up to [`SEGMENT`].
const CLASSES: usize = SEGMENT.ilog2() as usize;

/// Entries past the classes that groups of no class count in, in turn ([`plan_round`]).
const SPREAD: usize = 8;

/// The class of the segments of a group of `n` rows; [`CLASSES`] (no class) for fewer than
/// two. Written to compile without a branch: groups of one row and of several come in no
/// order, and a mispredicted branch per group cost more than the rest of the pass.
fn class_of(n: usize) -> usize {
    let class = ((n.clamp(1, SEGMENT) - 1) | 1).ilog2() as usize;
    if n > 1 { class } else { CLASSES }
}

/// The round that sums `members` (each row's group below `groups`, or [`NONE`]), rows that
/// start at `offset` in every round's rows laid end to end. A group of up to [`SEGMENT`] rows
/// is one segment of its class; a longer one is a run of full-width segments, the last
/// padded, whose sums the next round adds. Every group's place in the gathers (or, for a
/// group of one row, in `pick`) is known from the counts alone, so each row is written
/// straight to its place: one pass to count, one over the groups, one to place.
fn plan_round(members: &[u32], groups: usize, offset: usize, device: &Device) -> Result<Planned> {
    let mut count = vec![0u32; groups];
    for &g in members {
        if g != NONE {
            count[g as usize] += 1;
        }
    }
    // Each class's segments. Groups of no class (one row or none), most groups where ids
    // are many, count in entries past the classes, eight of them in turn: adding into one
    // entry would chain each group's addition to the last through memory.
    let entry_of = |g: usize, n: usize| class_of(n) + (g % SPREAD) * usize::from(n < 2);
    let mut segments = [0usize; CLASSES + SPREAD];
    for (g, &n) in count.iter().enumerate() {
        segments[entry_of(g, n as usize)] += (n as usize).div_ceil(SEGMENT);
    }
    // Class after class, in the gathers and in the sums.
    let (mut at_of, mut row_of, mut layout) =
        ([0usize; CLASSES + SPREAD], [0usize; CLASSES + SPREAD], Vec::new());
    let (mut at_len, mut rows) = (0, 0);
    for c in 0..CLASSES {
        (at_of[c], row_of[c]) = (at_len, rows);
        if segments[c] > 0 {
            layout.push((at_len, segments[c], 2 << c));
        }
        at_len += segments[c] * (2 << c);
        rows += segments[c];
    }
    // The gathers, then each group's pick, in one buffer: a group of one row has its place
    // in the second part, so that placing a row needs no branch on its group's size.
    let mut places = vec![NONE; at_len + groups];
    let mut long = Vec::new();
    let sums = offset + members.len();
    // Each group's count becomes the place of its next row: one array of groups, not two,
    // for the placing pass's scattered reads and writes.
    let mut next = count;
    for (g, slot) in next.iter_mut().enumerate() {
        let n = *slot as usize;
        // A group of one row is picked from the input as it is, at its own row: only the
        // first round, whose input starts at 0, has such groups (later rounds sum runs of
        // at least two sums).
        debug_assert!(n != 1 || offset == 0, "a group of one row in a later round");
        let (c, run) = (entry_of(g, n), n.div_ceil(SEGMENT));
        *slot = if n == 1 { (at_len + g) as u32 } else { at_of[c] as u32 };
        at_of[c] += run << (c + 1);
        places[at_len + g] = if n > 1 && run == 1 { (sums + row_of[c]) as u32 } else { NONE };
        if run > 1 {
            long.push((g, row_of[c], run));
        }
        row_of[c] += run;
    }
    for (row, &g) in members.iter().enumerate() {
        if g != NONE {
            let at = &mut next[g as usize];
            places[*at as usize] = row as u32;
            *at += 1;
        }
    }
    let pick = places.split_off(at_len);
    let round = match at_len {
        0 => None,
        _ => Some(Round { at: Tensor::from_vec(places, at_len, device)?, classes: layout }),
    };
    Ok(Planned { round, rows, pick, long })
}

impl SegmentSum {
    /// The plan for `group_of[slot]` (a group below `groups`, or [`NONE`]), on `device`.
    pub fn new(group_of: &[u32], groups: usize, device: &Device) -> Result<Self> {
        let mut planned = plan_round(group_of, groups, 0, device)?;
        let mut pick = std::mem::take(&mut planned.pick);
        let mut rounds = Vec::new();
        // Each group of the latest round by its number among all (None: the same number).
        let mut names: Option<Vec<usize>> = None;
        let mut offset = group_of.len();
        loop {
            rounds.extend(planned.round.take());
            if planned.long.is_empty() {
                break;
            }
            let mut members = vec![NONE; planned.rows];
            let mut next_names = Vec::with_capacity(planned.long.len());
            for (k, &(g, first, run)) in planned.long.iter().enumerate() {
                members[first..first + run].fill(k as u32);
                next_names.push(names.as_ref().map_or(g, |n| n[g]));
            }
            let next = plan_round(&members, next_names.len(), offset, device)?;
            offset += planned.rows;
            for (k, &p) in next.pick.iter().enumerate() {
                if p != NONE {
                    pick[next_names[k]] = p;
                }
            }
            (planned, names) = (next, Some(next_names));
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

    /// `group_of` in another order, spread so that a group's rows are seldom adjacent.
    fn interleaved(group_of: Vec<u32>) -> Vec<u32> {
        let mut keyed: Vec<(usize, u32)> =
            group_of.into_iter().enumerate().map(|(i, g)| (i.wrapping_mul(2654435761) % 10_007, g)).collect();
        keyed.sort_unstable();
        keyed.into_iter().map(|(_, g)| g).collect()
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
        check(&interleaved(group_of), groups, 3);
    }

    #[test]
    fn a_hot_group_takes_several_rounds() {
        // Group 0 seen 6,667 times (three rounds of 64), beside 3,334 singletons.
        let mut group_of: Vec<u32> = (0..10_000).map(|i| if i % 3 == 0 { 1 + i / 3 } else { 0 }).collect();
        group_of.push(NONE);
        check(&group_of, 1 + 10_000 / 3 + 1, 16);
        let plan = SegmentSum::new(&group_of, 1 + 10_000 / 3 + 1, &Device::Cpu).unwrap();
        assert_eq!(plan.rounds.len(), 3);
    }

    #[test]
    fn several_hot_groups_sum_through_the_same_rounds() {
        // Groups that stop after one, two and three rounds, side by side, interleaved: each
        // must find its own sums in every round.
        let sizes = [4097usize, 1, 130, 8000, 65, 2, 64 * 64, 3];
        let group_of: Vec<u32> =
            sizes.iter().enumerate().flat_map(|(g, &n)| std::iter::repeat_n(g as u32, n)).collect();
        check(&interleaved(group_of), sizes.len() + 1, 5);
    }

    #[test]
    fn singletons_alone_are_one_gather() {
        let group_of: Vec<u32> = (0..50).rev().collect();
        let plan = SegmentSum::new(&group_of, 50, &Device::Cpu).unwrap();
        assert!(plan.rounds.is_empty());
        check(&group_of, 50, 1);
    }
}
