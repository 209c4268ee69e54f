//! SplitMix64: the small generator and hash behind initial weights, shuffling and feature
//! hashing. It is fixed here, not taken from a crate's default, because every host must draw
//! and hash the same values forever: an exported model's ids depend on it.

pub(crate) const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The finalizer's rounds: shift right, xor, multiply (the last round has no multiplier).
/// The ONNX export builds the same rounds from these values, so they live in one place.
pub(crate) const ROUNDS: [(u64, Option<u64>); 3] =
    [(30, Some(0xBF58_476D_1CE4_E5B9)), (27, Some(0x94D0_49BB_1331_11EB)), (31, None)];

/// Spreads every input bit over the output (SplitMix64's step and finalizer).
pub(crate) fn mix(z: u64) -> u64 {
    ROUNDS.iter().fold(z.wrapping_add(GOLDEN), |z, &(shift, multiplier)| {
        let z = z ^ (z >> shift);
        multiplier.map_or(z, |m| z.wrapping_mul(m))
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_splitmix64() {
        // SplitMix64's published first outputs for seed 0: exported ids depend on them.
        let mut rng = SplitMix::new(0);
        assert_eq!(rng.next(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next(), 0x6E78_9E6A_A1B9_65F4);
    }
}
