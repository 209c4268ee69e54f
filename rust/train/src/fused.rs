//! A dense layer's bias and activation as one CPU operation with its own gradient.
//!
//! Written with candle's basic operations, `relu(x W + b)` costs a broadcast add, a ReLU and,
//! going back, a comparison, a type conversion, a product and a column sum, each a pass over
//! the activations with a fresh buffer; candle's column sum alone cost more than the layer's
//! matrix products here. [`bias_act`] does the forward in one pass and the backward in two
//! (mask the gradient, sum its columns). On other devices the layer uses candle's operations.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

use crate::error::Result;

/// `max(z + b, 0)` with `relu`, else `z + b`, for `z: [rows, cols]` and `b: [cols]` float32
/// tensors on the CPU.
pub fn bias_act(z: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    Ok(z.apply_op2(b, BiasAct { relu })?)
}

/// A contiguous float32 storage as a slice.
fn floats<'a>(storage: &'a CpuStorage, layout: &Layout, op: &'static str) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(values) = storage else {
        return Err(candle_core::Error::Msg(format!("{op} takes float32 tensors")));
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&values[start..end]),
        None => Err(candle_core::Error::Msg(format!("{op} takes contiguous tensors"))),
    }
}

fn matrix_dims(layout: &Layout, op: &'static str) -> candle_core::Result<(usize, usize)> {
    match layout.shape().dims() {
        [rows, cols] => Ok((*rows, *cols)),
        dims => Err(candle_core::Error::Msg(format!("{op} takes a matrix, not a tensor of shape {dims:?}"))),
    }
}

struct BiasAct {
    relu: bool,
}

impl CustomOp2 for BiasAct {
    fn name(&self) -> &'static str {
        "bias-act"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, cols) = matrix_dims(l1, self.name())?;
        let (z, b) = (floats(s1, l1, self.name())?, floats(s2, l2, self.name())?);
        if b.len() != cols {
            return Err(candle_core::Error::Msg(format!("a bias of {} for {cols} columns", b.len())));
        }
        let mut out = Vec::with_capacity(rows * cols);
        for row in z.chunks_exact(cols) {
            if self.relu {
                out.extend(row.iter().zip(b).map(|(z, b)| (z + b).max(0.0)));
            } else {
                out.extend(row.iter().zip(b).map(|(z, b)| z + b));
            }
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _z: &Tensor,
        _b: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let grad_z = if self.relu { grad.apply_op2_no_bwd(&res.contiguous()?, &ReluMask)? } else { grad };
        let grad_b = grad_z.apply_op1_no_bwd(&ColumnSum)?;
        Ok((Some(grad_z), Some(grad_b)))
    }
}

/// `grad` where the ReLU's output is positive, else 0.
struct ReluMask;

impl CustomOp2 for ReluMask {
    fn name(&self) -> &'static str {
        "relu-mask"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (grad, out) = (floats(s1, l1, self.name())?, floats(s2, l2, self.name())?);
        let masked = grad.iter().zip(out).map(|(g, y)| if *y > 0.0 { *g } else { 0.0 }).collect();
        Ok((CpuStorage::F32(masked), l1.shape().clone()))
    }
}

/// `[rows, cols]` → `[cols]`, the sum of each column.
struct ColumnSum;

impl CustomOp1 for ColumnSum {
    fn name(&self) -> &'static str {
        "column-sum"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, cols) = matrix_dims(layout, self.name())?;
        let values = floats(storage, layout, self.name())?;
        let mut sums = vec![0f32; cols];
        for row in values.chunks_exact(cols) {
            sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
        }
        Ok((CpuStorage::F32(sums), Shape::from(cols)))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};

    use super::*;

    /// The fused layer and candle's own operations agree, values and gradients.
    #[test]
    fn bias_act_matches_candles_operations() {
        let values = |n: usize, k: u32| (0..n).map(|i| ((i as u32 * k) % 23) as f32 / 7.0 - 1.5).collect();
        for relu in [true, false] {
            let z = Var::from_vec(values(5 * 4, 7), (5, 4), &Device::Cpu).unwrap();
            let b = Var::from_vec(values(4, 3), 4, &Device::Cpu).unwrap();
            let fused = bias_act(z.as_tensor(), b.as_tensor(), relu).unwrap();
            let plain = z.as_tensor().broadcast_add(b.as_tensor()).unwrap();
            let plain = if relu { plain.relu().unwrap() } else { plain };
            assert_eq!(fused.to_vec2::<f32>().unwrap(), plain.to_vec2::<f32>().unwrap());
            // A loss that weighs every output differently.
            let weights = Tensor::from_vec(values(5 * 4, 11), (5, 4), &Device::Cpu).unwrap();
            let a = (fused * &weights).unwrap().sum_all().unwrap().backward().unwrap();
            let p = (plain * &weights).unwrap().sum_all().unwrap().backward().unwrap();
            for var in [&z, &b] {
                let (a, p) = (a.get(var.as_tensor()).unwrap(), p.get(var.as_tensor()).unwrap());
                let (a, p) = (
                    a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    p.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                );
                for (x, y) in a.iter().zip(&p) {
                    assert!((x - y).abs() < 1e-5, "relu={relu}: {a:?} vs {p:?}");
                }
            }
        }
    }
}
