//! A dense layer as CPU operations with their own gradients.
//!
//! Written with candle's basic operations, `relu(x W + b)` costs a zero-filled product, a
//! broadcast add, a ReLU and, going back, a comparison, a type conversion, a product and a
//! column sum, each a pass over the activations with a fresh buffer, and candle's backward pass
//! adds a zero-filled buffer and a sum for the gradient of every intermediate result. [`dense`]
//! is the whole layer as one operation: the product written straight into its output, the bias
//! and activation applied there in the same pass, and, going back, the mask, the two products
//! and the column sum, with no intermediate result for the backward pass to accumulate. On
//! other devices the layer uses candle's operations.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Tensor};
use gemm::Parallelism;

use crate::error::Result;

/// `max(x w + b, 0)` with `relu`, else `x w + b`, for `x: [rows, inputs]`, `w: [inputs,
/// outputs]` and `b: [outputs]` float32 tensors on the CPU.
pub fn dense(x: &Tensor, w: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    Ok(x.contiguous()?.apply_op3(&w.contiguous()?, b, Dense { relu })?)
}

/// `grad` where `out` (a ReLU's output) is positive, else 0: the fused layer's mask.
pub(crate) fn relu_mask(grad: &Tensor, out: &Tensor) -> Result<Tensor> {
    Ok(grad.contiguous()?.apply_op2_no_bwd(&out.contiguous()?, &ReluMask)?)
}

/// The sum of each column of a `[rows, cols]` float32 matrix, as the fused layer's bias
/// gradient.
pub(crate) fn column_sum(grad: &Tensor) -> Result<Tensor> {
    Ok(grad.contiguous()?.apply_op1_no_bwd(&ColumnSum)?)
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

struct Dense {
    relu: bool,
}

impl CustomOp3 for Dense {
    fn name(&self) -> &'static str {
        "dense"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, inputs) = matrix_dims(l1, self.name())?;
        let (w_rows, outputs) = matrix_dims(l2, self.name())?;
        let (x, w, b) =
            (floats(s1, l1, self.name())?, floats(s2, l2, self.name())?, floats(s3, l3, self.name())?);
        if w_rows != inputs || b.len() != outputs {
            return Err(candle_core::Error::Msg(format!(
                "a dense layer of {w_rows}x{outputs} weights and {} biases for {inputs} inputs",
                b.len()
            )));
        }
        let threads = candle_core::utils::get_num_threads();
        let parallelism = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
        let mut out: Vec<f32> = Vec::with_capacity(rows * outputs);
        // SAFETY: the three matrices are contiguous and row-major with the dimensions checked
        // above, and `out` has room for rows x outputs values, each of which gemm writes
        // without reading (read_dst is false) before the length is set.
        unsafe {
            gemm::gemm(
                rows,
                outputs,
                inputs,
                out.as_mut_ptr(),
                1,
                outputs as isize,
                false,
                x.as_ptr(),
                1,
                inputs as isize,
                w.as_ptr(),
                1,
                outputs as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
            out.set_len(rows * outputs);
        }
        for row in out.chunks_exact_mut(outputs.max(1)) {
            if self.relu {
                row.iter_mut().zip(b).for_each(|(z, b)| *z = (*z + b).max(0.0));
            } else {
                row.iter_mut().zip(b).for_each(|(z, b)| *z += b);
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((rows, outputs))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let grad_z = if self.relu { grad.apply_op2_no_bwd(&res.contiguous()?, &ReluMask)? } else { grad };
        // Detached: the products of the backward pass are not themselves differentiated.
        let grad_x = grad_z.matmul(&w.detach().t()?)?;
        let grad_w = x.detach().t()?.matmul(&grad_z)?;
        let grad_b = grad_z.apply_op1_no_bwd(&ColumnSum)?;
        Ok((Some(grad_x), Some(grad_w), Some(grad_b)))
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

    /// The whole fused layer and candle's own operations agree, values and gradients.
    #[test]
    fn dense_matches_candles_operations() {
        let values = |n: usize, k: u32| (0..n).map(|i| ((i as u32 * k) % 23) as f32 / 7.0 - 1.5).collect();
        // A small layer, and one past the matrix product's blocks in every dimension.
        for (relu, (rows, inputs, outputs)) in [(true, (5, 3, 4)), (false, (5, 3, 4)), (true, (67, 33, 29))] {
            let x = Var::from_vec(values(rows * inputs, 5), (rows, inputs), &Device::Cpu).unwrap();
            let w = Var::from_vec(values(inputs * outputs, 7), (inputs, outputs), &Device::Cpu).unwrap();
            let b = Var::from_vec(values(outputs, 3), outputs, &Device::Cpu).unwrap();
            let fused = dense(x.as_tensor(), w.as_tensor(), b.as_tensor(), relu).unwrap();
            let plain = x.as_tensor().matmul(w.as_tensor()).unwrap().broadcast_add(b.as_tensor()).unwrap();
            let plain = if relu { plain.relu().unwrap() } else { plain };
            assert_eq!(fused.to_vec2::<f32>().unwrap(), plain.to_vec2::<f32>().unwrap());
            let weights =
                Tensor::from_vec(values(rows * outputs, 11), (rows, outputs), &Device::Cpu).unwrap();
            let a = (fused * &weights).unwrap().sum_all().unwrap().backward().unwrap();
            let p = (plain * &weights).unwrap().sum_all().unwrap().backward().unwrap();
            for var in [&x, &w, &b] {
                let (a, p) = (a.get(var.as_tensor()).unwrap(), p.get(var.as_tensor()).unwrap());
                let (a, p) = (
                    a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    p.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                );
                for (x, y) in a.iter().zip(&p) {
                    assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "relu={relu}: {x} vs {y}");
                }
            }
        }
    }
}
