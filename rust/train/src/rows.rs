//! Copying embedding rows between a flat buffer and a packed run of rows. Rows are short
//! (1 to 64 values) and many (thousands per step), so each copy is written for a length the
//! compiler knows: a few moves rather than a `memcpy` call per row.

use std::borrow::Cow;

/// The rows of `width` values starting at each of `rows` in `from`, one after the other.
pub(crate) fn gather_rows(from: &[f32], rows: &[usize], width: usize) -> Vec<f32> {
    let mut out = vec![0.0; rows.len() * width];
    gather_rows_into(from, rows, width, &mut out);
    out
}

/// [`gather_rows`] into `out` (`rows.len() × width` values).
pub(crate) fn gather_rows_into(from: &[f32], rows: &[usize], width: usize, out: &mut [f32]) {
    fn fixed<const W: usize>(from: &[f32], rows: &[usize], out: &mut [f32]) {
        for (chunk, &r) in out.chunks_exact_mut(W).zip(rows) {
            chunk.copy_from_slice(&from[r..r + W]);
        }
    }
    // A length the compiler knows turns each row's copy into a few moves instead of a call.
    match width {
        1 => fixed::<1>(from, rows, out),
        4 => fixed::<4>(from, rows, out),
        8 => fixed::<8>(from, rows, out),
        16 => fixed::<16>(from, rows, out),
        32 => fixed::<32>(from, rows, out),
        _ => {
            for (chunk, &r) in out.chunks_exact_mut(width.max(1)).zip(rows) {
                chunk.copy_from_slice(&from[r..r + width]);
            }
        }
    }
}

/// The rows of `values` (rows of `width`, the gradients of the rows `ids` name) that hold a
/// non-zero value, with their ids: a touched row whose gradient is zero is left alone, as a
/// dense update would leave it. Most steps have no such row, and then both are borrowed.
pub(crate) fn live_rows<'a, T: Copy>(
    ids: &'a [T],
    values: &'a [f32],
    width: usize,
) -> (Cow<'a, [T]>, Cow<'a, [f32]>) {
    let live = |row: &[f32]| row.iter().any(|v| *v != 0.0);
    if values.chunks_exact(width.max(1)).all(live) {
        return (Cow::Borrowed(ids), Cow::Borrowed(values));
    }
    let (mut kept, mut rows) = (Vec::new(), Vec::new());
    for (id, row) in ids.iter().zip(values.chunks_exact(width.max(1))) {
        if live(row) {
            kept.push(*id);
            rows.extend_from_slice(row);
        }
    }
    (Cow::Owned(kept), Cow::Owned(rows))
}

/// Writes `values` (rows of `width`, one after the other) back to where `rows` start in `to`.
pub(crate) fn scatter_rows(to: &mut [f32], values: &[f32], rows: &[usize], width: usize) {
    fn fixed<const W: usize>(to: &mut [f32], values: &[f32], rows: &[usize]) {
        for (chunk, &r) in values.chunks_exact(W).zip(rows) {
            to[r..r + W].copy_from_slice(chunk);
        }
    }
    match width {
        1 => fixed::<1>(to, values, rows),
        4 => fixed::<4>(to, values, rows),
        8 => fixed::<8>(to, values, rows),
        16 => fixed::<16>(to, values, rows),
        32 => fixed::<32>(to, values, rows),
        _ => {
            for (chunk, &r) in values.chunks_exact(width.max(1)).zip(rows) {
                to[r..r + width].copy_from_slice(chunk);
            }
        }
    }
}
