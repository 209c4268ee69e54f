//! TFRecord's masked CRC-32C.
//!
//! TensorFlow stores CRCs "masked" so that a CRC computed over data that itself contains CRCs does
//! not degenerate; the mask is a 15-bit right rotation plus a constant. The checksum itself is
//! CRC-32C (Castagnoli), computed with the CPU's CRC or carry-less multiply instructions where
//! it has them: short inputs by the `crc32c` crate, whose one-instruction-per-word loop has the
//! least set-up, and longer ones (payloads) by `crc-fast`, which folds 64 or more bytes per step
//! and is about 1.6x faster on 700-byte records. A record header's eight length bytes, checked
//! once per record on the thread that frames the stream, go through tables instead: eight
//! look-ups take ~2.5 ns where a call into either crate takes ~10.

const MASK_DELTA: u32 = 0xa282_ead8;

/// Inputs from this length on go to `crc-fast`.
const FOLDING_FROM: usize = 256;

/// CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    if data.len() < FOLDING_FROM {
        crc32c::crc32c(data)
    } else {
        // CRC-32/ISCSI is CRC-32C; the 64-bit return holds the 32-bit CRC.
        crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
    }
}

/// CRC-32C tables for eight bytes at a time ("slicing by 8"): `TABLES[k][b]` is the CRC
/// contribution of byte `b` followed by `k` zero bytes.
static TABLES: [[u32; 256]; 8] = slicing_tables();

const fn slicing_tables() -> [[u32; 256]; 8] {
    // CRC-32C's polynomial, bit-reversed as the right-shifting form needs it.
    const POLY: u32 = 0x82f6_3b78;
    let mut tables = [[0u32; 256]; 8];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ POLY } else { crc >> 1 };
            bit += 1;
        }
        tables[0][byte] = crc;
        byte += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut byte = 0;
        while byte < 256 {
            let prev = tables[k - 1][byte];
            tables[k][byte] = (prev >> 8) ^ tables[0][(prev & 0xff) as usize];
            byte += 1;
        }
        k += 1;
    }
    tables
}

/// CRC-32C of exactly eight bytes (a record header's length).
#[inline]
pub fn crc32c_8(bytes: [u8; 8]) -> u32 {
    let x = u64::from_le_bytes(bytes) ^ 0xffff_ffff;
    let byte = |i: usize| ((x >> (8 * i)) & 0xff) as usize;
    !(0..8).fold(0, |crc, i| crc ^ TABLES[7 - i][byte(i)])
}

/// Masks a CRC the way TensorFlow's `crc32c::Mask` does.
#[inline]
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The masked CRC-32C of a record's length, as stored in its header.
#[inline]
pub fn masked_length_crc(len: [u8; 8]) -> u32 {
    mask(crc32c_8(len))
}

/// Inverse of [`mask`].
#[inline]
pub fn unmask(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// The masked CRC-32C of `data`, as stored in TFRecord framing.
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask(crc32c(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_vectors() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(masked_crc32c(b"\x1a\x11CRC test, one two"), 0x5794_d08a);
        // The header of an empty record: the CRC of eight zero length bytes.
        assert_eq!(masked_crc32c(&0u64.to_le_bytes()), 0x0798_0329);
        assert_eq!(masked_length_crc([0; 8]), 0x0798_0329);
    }

    /// Both implementations agree on every length around the switch and on long inputs.
    #[test]
    fn short_and_long_inputs_agree() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for len in (0..600).chain([1000, 4096, 5000]) {
            assert_eq!(crc32c(&data[..len]), crc32c::crc32c(&data[..len]), "{len}");
        }
    }

    #[test]
    fn eight_bytes_through_the_tables_agree() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in [0u64, 1, 255, 256, 700, 1 << 31, u64::MAX] {
            assert_eq!(crc32c_8(len.to_le_bytes()), crc32c::crc32c(&len.to_le_bytes()), "{len}");
        }
        for _ in 0..10_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            assert_eq!(crc32c_8(x.to_le_bytes()), crc32c::crc32c(&x.to_le_bytes()), "{x}");
        }
    }

    #[test]
    fn unmask_inverts_mask() {
        for crc in [0u32, 1, 0xdead_beef, u32::MAX, 0x8000_0000] {
            assert_eq!(unmask(mask(crc)), crc);
        }
    }
}
