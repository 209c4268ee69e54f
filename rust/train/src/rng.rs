//! SplitMix64: the small generator and hash behind initial weights, shuffling and feature
//! hashing. It is fixed here, not taken from a crate's default, because every host must draw
//! and hash the same values forever: an exported model's ids depend on it.

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Spreads every input bit over the output (SplitMix64's step and finalizer).
pub(crate) fn mix(z: u64) -> u64 {
    let mut z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A SplitMix64 stream.
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let out = mix(self.0);
        self.0 = self.0.wrapping_add(GOLDEN);
        out
    }

    /// A value in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A value in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
