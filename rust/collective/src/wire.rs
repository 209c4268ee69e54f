//! How values travel between ranks: as they are, or (float32 only) rounded to 16 bits to
//! halve the bytes on the wire while every rank still accumulates in float32.

use std::str::FromStr;

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};

use crate::error::CollectiveError;

/// The format of values on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    /// The values' own bytes.
    #[default]
    Native,
    /// IEEE half precision (float32 values only): 10 bits of mantissa, range ±65504.
    F16,
    /// bfloat16 (float32 values only): float32's range, 7 bits of mantissa.
    Bf16,
}

impl Wire {
    pub(crate) fn code(self) -> u8 {
        match self {
            Wire::Native => 0,
            Wire::F16 => 1,
            Wire::Bf16 => 2,
        }
    }

    /// Bytes per value on the wire, for values of `native` bytes.
    pub(crate) fn width(self, native: usize) -> usize {
        match self {
            Wire::Native => native,
            Wire::F16 | Wire::Bf16 => 2,
        }
    }
}

impl FromStr for Wire {
    type Err = CollectiveError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "" | "native" | "none" => Ok(Wire::Native),
            "float16" | "f16" | "fp16" | "half" => Ok(Wire::F16),
            "bfloat16" | "bf16" => Ok(Wire::Bf16),
            _ => Err(CollectiveError::InvalidArgument(format!(
                "unknown wire format '{s}': use native, float16 or bfloat16"
            ))),
        }
    }
}

/// Rounds float32 `values` to 16 bits into `bits`, which has the same length.
pub(crate) fn encode_f32(wire: Wire, values: &[f32], bits: &mut [u16]) {
    match wire {
        Wire::F16 => bits.reinterpret_cast_mut::<f16>().convert_from_f32_slice(values),
        Wire::Bf16 => bits.reinterpret_cast_mut::<bf16>().convert_from_f32_slice(values),
        Wire::Native => unreachable!("native values are sent as they are"),
    }
}

/// Widens 16-bit `bits` back to float32 `values`, which has the same length.
pub(crate) fn decode_f32(wire: Wire, bits: &[u16], values: &mut [f32]) {
    match wire {
        Wire::F16 => bits.reinterpret_cast::<f16>().convert_to_f32_slice(values),
        Wire::Bf16 => bits.reinterpret_cast::<bf16>().convert_to_f32_slice(values),
        Wire::Native => unreachable!("native values are received as they are"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_bit_formats_round_trip_what_they_can_hold() {
        let values = [1.0f32, -0.5, 65504.0, 3.0e-5, 1.0e10];
        let mut bits = [0u16; 5];
        let mut back = [0f32; 5];
        encode_f32(Wire::Bf16, &values, &mut bits);
        decode_f32(Wire::Bf16, &bits, &mut back);
        assert_eq!(back[..3], [1.0, -0.5, 65536.0]); // bf16 keeps 8 bits of precision
        assert!((back[4] - 1.0e10).abs() / 1.0e10 < 1e-2);
        encode_f32(Wire::F16, &values, &mut bits);
        decode_f32(Wire::F16, &bits, &mut back);
        assert_eq!(back[..3], [1.0, -0.5, 65504.0]);
        assert!(back[4].is_infinite(), "f16 overflows past 65504");
    }

    #[test]
    fn names_parse() {
        assert_eq!("bfloat16".parse::<Wire>().unwrap(), Wire::Bf16);
        assert_eq!("float16".parse::<Wire>().unwrap(), Wire::F16);
        assert!("int8".parse::<Wire>().unwrap_err().to_string().contains("int8"));
    }
}
