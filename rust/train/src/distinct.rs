//! A batch's distinct ids and each id's place among them, by marking them in a table or by a
//! radix sort: the first thing every lookup of embedding rows needs, and the host's largest
//! share of preparing an embedding model's batch.

use crate::batch::Batch;

/// The batch's single ids then its multi-hot ones, as one list; None when it has neither.
pub(crate) fn all_ids(batch: &Batch) -> Option<Vec<u32>> {
    if batch.ids.is_none() && batch.bags.is_none() {
        return None;
    }
    let no_ids = Vec::new();
    let ids = batch.ids.as_ref().unwrap_or(&no_ids);
    let bag_ids = batch.bags.as_ref().map_or(&no_ids, |b| &b.ids);
    Some(ids.iter().chain(bag_ids).copied().collect())
}

/// Bits of an id sorted on per pass of [`by_sorting`]: 2,048 counts a pass, which stay in
/// the core's first-level cache.
const DIGIT: u32 = 11;

/// Id spaces up to this many times the ids' count are marked in a table ([`by_marking`]);
/// wider ones are sorted. Marking reads the ids twice and goes over the table twice, where
/// sorting moves every id once per pass of [`DIGIT`] bits, with scattered writes. On either
/// side of the bound (`gpu_check prepare` with 16,000 and 16,800 ids a column: 3.9 and 4.1
/// times the batch's 106,496 ids), marking took 0.85 ms and sorting 1.29. Marking's cost
/// grows with the space (0.54 ms at 2×) where the sort's does not, and the bound keeps the
/// table it clears and walks within a few times the batch.
const MARKED_SPACE_PER_ID: usize = 4;

/// The distinct values of `ids`, ascending, and each id's index among them. Where the ids
/// lie in a space not much larger than their count (a batch's hundred thousand ids of tables
/// with a few hundred thousand rows in all), a table of that space marks the ids present;
/// otherwise a radix sort orders them. Either costs one or two milliseconds at most for a
/// batch, where a comparison sort and a binary search per id cost several.
pub(crate) fn distinct(ids: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let top = ids.iter().copied().max().unwrap_or(0) as usize;
    if top < ids.len().saturating_mul(MARKED_SPACE_PER_ID) {
        by_marking(ids, top)
    } else {
        by_sorting(ids, top as u32)
    }
}

/// [`distinct`] for ids no larger than `top`, through a table of `top + 1` entries: each
/// present id marked, the marks numbered in order, then every id given its number.
fn by_marking(ids: &[u32], top: usize) -> (Vec<u32>, Vec<u32>) {
    let mut index = vec![0u32; top + 1];
    for &id in ids {
        index[id as usize] = 1;
    }
    // Numbered without a branch: a quarter of the ids present, at random, would mispredict
    // one branch in four. Every id is written at the next free place, which only a present
    // one then keeps: the next free place is at most the count of distinct ids.
    let mut unique = vec![0u32; (top + 1).min(ids.len() + 1)];
    let mut count = 0u32;
    for (id, slot) in index.iter_mut().enumerate() {
        let present = *slot;
        *slot = count;
        unique[count as usize] = id as u32;
        count += present;
    }
    unique.truncate(count as usize);
    let local = ids.iter().map(|&id| index[id as usize]).collect();
    (unique, local)
}

/// [`distinct`] by a stable radix sort and one pass over the result. What is sorted is each
/// id with its position beside it in one 64-bit key, so that every pass reads its input in
/// order; the counts of every pass's digits come from one pass over the ids, and a pass whose
/// digit is the same for every id is skipped.
fn by_sorting(ids: &[u32], top: u32) -> (Vec<u32>, Vec<u32>) {
    const BUCKETS: usize = 1 << DIGIT;
    let passes = (u32::BITS - top.leading_zeros()).div_ceil(DIGIT).max(1) as usize;
    let digit = |id: u32, pass: usize| ((id >> (pass as u32 * DIGIT)) as usize) & (BUCKETS - 1);
    let mut counts = vec![[0u32; BUCKETS]; passes];
    for &id in ids {
        for (pass, count) in counts.iter_mut().enumerate() {
            count[digit(id, pass)] += 1;
        }
    }
    let mut keys: Vec<u64> =
        ids.iter().enumerate().map(|(position, &id)| (u64::from(id) << 32) | position as u64).collect();
    let mut next = vec![0u64; ids.len()];
    for (pass, count) in counts.iter().enumerate() {
        if count.iter().any(|&n| n as usize == ids.len()) {
            continue;
        }
        let mut starts = [0usize; BUCKETS];
        let mut total = 0;
        for (start, &n) in starts.iter_mut().zip(count) {
            (*start, total) = (total, total + n as usize);
        }
        for &key in &keys {
            let d = digit((key >> 32) as u32, pass);
            next[starts[d]] = key;
            starts[d] += 1;
        }
        std::mem::swap(&mut keys, &mut next);
    }
    let (mut unique, mut local) = (Vec::new(), vec![0u32; ids.len()]);
    for &key in &keys {
        let id = (key >> 32) as u32;
        if unique.last() != Some(&id) {
            unique.push(id);
        }
        local[key as u32 as usize] = (unique.len() - 1) as u32;
    }
    (unique, local)
}

#[cfg(test)]
mod tests {
    use super::{by_marking, by_sorting, distinct};

    /// What `distinct` must equal: a comparison sort, and a binary search per id.
    fn reference(ids: &[u32]) -> (Vec<u32>, Vec<u32>) {
        let mut unique = ids.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let local = ids.iter().map(|id| unique.binary_search(id).expect("present") as u32).collect();
        (unique, local)
    }

    #[test]
    fn distinct_ids_and_their_places_match_a_sort_for_every_id_range() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (n, top) in [(0, 1), (1, 1), (5, 3), (10_000, 100), (50_000, 1 << 20), (20_000, 1 << 32)] {
            let mut ids: Vec<u32> = (0..n).map(|_| (next() % top) as u32).collect();
            if n > 2 {
                ids[0] = (top - 1) as u32;
                ids[1] = 0;
            }
            let want = reference(&ids);
            assert_eq!(distinct(&ids), want, "{n} ids below {top}");
            let top = ids.iter().copied().max().unwrap_or(0);
            assert_eq!(by_sorting(&ids, top), want, "{n} ids below {top}, sorted");
            if top < 1 << 24 {
                assert_eq!(by_marking(&ids, top as usize), want, "{n} ids below {top}, marked");
            }
        }
        // Every id distinct, spread over a space larger than the batch: the last place taken
        // is the batch's length.
        let spread = [9u32, 3, 0, 7];
        assert_eq!(by_marking(&spread, 9), reference(&spread));
    }
}
