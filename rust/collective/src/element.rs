//! The element types a collective reduces, and the reductions.

use std::str::FromStr;

use crate::error::CollectiveError;
use crate::wire::{self, Wire};

/// How values from every rank combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The sum divided by the number of ranks (integer division for integers).
    Mean,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
}

impl ReduceOp {
    pub(crate) fn code(self) -> u8 {
        match self {
            ReduceOp::Sum => 1,
            ReduceOp::Mean => 2,
            ReduceOp::Max => 3,
            ReduceOp::Min => 4,
        }
    }
}

impl FromStr for ReduceOp {
    type Err = CollectiveError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "sum" => Ok(ReduceOp::Sum),
            "mean" | "avg" => Ok(ReduceOp::Mean),
            "max" => Ok(ReduceOp::Max),
            "min" => Ok(ReduceOp::Min),
            _ => Err(CollectiveError::InvalidArgument(format!(
                "unknown reduction '{s}': use sum, mean, max or min"
            ))),
        }
    }
}

/// A type the collectives move and reduce. Values travel as their little-endian bytes.
pub trait Element: bytemuck::Pod + Send + Sync {
    /// The type's name, for errors.
    const NAME: &'static str;
    /// A code that tells the type apart on the wire.
    const CODE: u8;
    /// `into[i] = op(into[i], from[i])`; MEAN sums here and divides once at the end.
    fn combine(op: ReduceOp, into: &mut [Self], from: &[Self]);
    /// Divides every value by `n` (for MEAN).
    fn divide(values: &mut [Self], n: usize);
    /// Whether values of this type may travel in the `wire` format.
    fn travels_as(wire: Wire) -> bool {
        wire == Wire::Native
    }
    /// Writes `values` as 16-bit `bits` (only for formats `travels_as` accepts).
    fn encode(_wire: Wire, _values: &[Self], _bits: &mut [u16]) {
        unreachable!("checked by travels_as")
    }
    /// Reads `values` back from 16-bit `bits` (only for formats `travels_as` accepts).
    fn decode(_wire: Wire, _bits: &[u16], _values: &mut [Self]) {
        unreachable!("checked by travels_as")
    }
}

macro_rules! element {
    ($t:ty, $name:literal, $code:literal, $max:expr, $min:expr, $div:expr $(, $extra:item)*) => {
        impl Element for $t {
            const NAME: &'static str = $name;
            const CODE: u8 = $code;

            fn combine(op: ReduceOp, into: &mut [Self], from: &[Self]) {
                let pairs = into.iter_mut().zip(from);
                match op {
                    ReduceOp::Sum | ReduceOp::Mean => pairs.for_each(|(a, b)| *a = add(*a, *b)),
                    ReduceOp::Max => pairs.for_each(|(a, b)| *a = $max(*a, *b)),
                    ReduceOp::Min => pairs.for_each(|(a, b)| *a = $min(*a, *b)),
                }
            }

            fn divide(values: &mut [Self], n: usize) {
                values.iter_mut().for_each(|v| *v = $div(*v, n));
            }

            $($extra)*
        }
    };
}

#[inline]
fn add<T: std::ops::Add<Output = T> + WrappingAdd>(a: T, b: T) -> T {
    a.wrapping_add(b)
}

/// Integer sums wrap (as NumPy's do) instead of panicking in debug builds.
trait WrappingAdd {
    fn wrapping_add(self, other: Self) -> Self;
}

impl WrappingAdd for f32 {
    fn wrapping_add(self, other: Self) -> Self {
        self + other
    }
}

impl WrappingAdd for f64 {
    fn wrapping_add(self, other: Self) -> Self {
        self + other
    }
}

impl WrappingAdd for i64 {
    fn wrapping_add(self, other: Self) -> Self {
        i64::wrapping_add(self, other)
    }
}

// NaN wins in MAX and MIN, as in NumPy's `maximum`/`minimum`.
element!(
    f32,
    "float32",
    1,
    |a: f32, b: f32| if a.is_nan() || a >= b { a } else { b },
    |a: f32, b: f32| if a.is_nan() || a <= b { a } else { b },
    |v: f32, n: usize| v / n as f32,
    fn travels_as(_wire: Wire) -> bool {
        true
    },
    fn encode(wire: Wire, values: &[f32], bits: &mut [u16]) {
        wire::encode_f32(wire, values, bits)
    },
    fn decode(wire: Wire, bits: &[u16], values: &mut [f32]) {
        wire::decode_f32(wire, bits, values)
    }
);
element!(
    f64,
    "float64",
    2,
    |a: f64, b: f64| if a.is_nan() || a >= b { a } else { b },
    |a: f64, b: f64| if a.is_nan() || a <= b { a } else { b },
    |v: f64, n: usize| v / n as f64
);
element!(i64, "int64", 3, |a: i64, b: i64| a.max(b), |a: i64, b: i64| a.min(b), |v: i64, n: usize| v
    .div_euclid(n as i64));
