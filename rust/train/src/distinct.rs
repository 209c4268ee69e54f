//! A batch's distinct ids and each id's place among them, from one stable radix sort: the
//! first thing every lookup of embedding rows needs, and the host's largest share of an
//! embedding model's lookup.

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

/// Bits of an id sorted on per pass of [`distinct`].
const DIGIT: u32 = 11;

/// The distinct values of `ids`, ascending, and each id's index among them. A stable radix
/// sort of the ids' positions (as many passes of [`DIGIT`] bits as the largest id needs,
/// each linear) and one pass over the result: a batch's hundred thousand ids cost a few
/// hundred microseconds, where a comparison sort and a binary search per id cost several
/// milliseconds.
pub(crate) fn distinct(ids: &[u32]) -> (Vec<u32>, Vec<u32>) {
    const BUCKETS: usize = 1 << DIGIT;
    let mut order: Vec<u32> = (0..ids.len() as u32).collect();
    let mut next = vec![0u32; ids.len()];
    let top = ids.iter().copied().max().unwrap_or(0);
    let mut shift = 0;
    while shift < u32::BITS && (shift == 0 || top >> shift != 0) {
        let digit = |i: u32| ((ids[i as usize] >> shift) as usize) & (BUCKETS - 1);
        let mut starts = vec![0usize; BUCKETS + 1];
        for &i in &order {
            starts[digit(i) + 1] += 1;
        }
        for d in 1..=BUCKETS {
            starts[d] += starts[d - 1];
        }
        for &i in &order {
            let d = digit(i);
            next[starts[d]] = i;
            starts[d] += 1;
        }
        std::mem::swap(&mut order, &mut next);
        shift += DIGIT;
    }
    let (mut unique, mut local) = (Vec::new(), vec![0u32; ids.len()]);
    for &i in &order {
        let id = ids[i as usize];
        if unique.last() != Some(&id) {
            unique.push(id);
        }
        local[i as usize] = (unique.len() - 1) as u32;
    }
    (unique, local)
}

#[cfg(test)]
mod tests {
    use super::distinct;

    /// What `distinct` must equal: a comparison sort, and a binary search per id.
    fn by_sorting(ids: &[u32]) -> (Vec<u32>, Vec<u32>) {
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
            assert_eq!(distinct(&ids), by_sorting(&ids), "{n} ids below {top}");
        }
    }
}
