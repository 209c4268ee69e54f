//! A dense layer as operations with their own gradients.
//!
//! Written with candle's basic operations, `relu(x W + b)` costs a zero-filled product, a
//! broadcast add, a ReLU and, going back, a zero fill, a comparison, a type conversion, a
//! product and a column sum, each a pass over the activations with a fresh buffer. On the CPU,
//! [`dense`] is the whole layer as one operation: the product written straight into its output,
//! the bias and activation applied there in the same pass, and, going back, the mask, the two
//! products and the column sum, with no intermediate result for the backward pass to
//! accumulate. On a GPU the product stays cuBLAS's (candle's `matmul`) and [`bias_act`] does the
//! rest, one kernel each way (`kernels/dense.cu`): on a GPU whose step is bound by the host
//! queueing kernels, each kernel less is host time saved. On other devices the layer uses
//! candle's operations.

#[cfg(feature = "cuda")]
use candle_core::cuda_backend::{WrapErr, cudarc::driver::PushKernelArg};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Tensor};
use gemm::Parallelism;

use crate::error::Result;

/// `max(x w + b, 0)` with `relu`, else `x w + b`, for `x: [rows, inputs]`, `w: [inputs,
/// outputs]` and `b: [outputs]` float32 tensors on the CPU.
pub fn dense(x: &Tensor, w: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    Ok(x.contiguous()?.apply_op3(&w.contiguous()?, b, Dense { relu })?)
}

/// `max(z + b, 0)` with `relu`, else `z + b`, for `z: [rows, outputs]` and `b: [outputs]`
/// float32 tensors: a layer's bias and activation after its product.
pub(crate) fn bias_act(z: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    Ok(z.contiguous()?.apply_op2(&b.contiguous()?, BiasAct { relu })?)
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
        add_bias(&mut out, b, self.relu);
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

/// Adds `b` to each row of `values` (as wide as `b`), through a ReLU when `relu`.
fn add_bias(values: &mut [f32], b: &[f32], relu: bool) {
    for row in values.chunks_exact_mut(b.len().max(1)) {
        if relu {
            row.iter_mut().zip(b).for_each(|(z, b)| *z = (*z + b).max(0.0));
        } else {
            row.iter_mut().zip(b).for_each(|(z, b)| *z += b);
        }
    }
}

/// `z + b`, through a ReLU when `relu`.
struct BiasAct {
    relu: bool,
}

impl BiasAct {
    /// Checks `z`'s and `b`'s shapes: (rows, outputs).
    fn dims(&self, l1: &Layout, l2: &Layout) -> candle_core::Result<(usize, usize)> {
        let (rows, outputs) = matrix_dims(l1, self.name())?;
        if l2.shape().dims() != [outputs] {
            return Err(candle_core::Error::Msg(format!(
                "a bias of shape {:?} for {outputs} outputs",
                l2.shape().dims()
            )));
        }
        Ok((rows, outputs))
    }
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
        let (rows, outputs) = self.dims(l1, l2)?;
        let (z, b) = (floats(s1, l1, self.name())?, floats(s2, l2, self.name())?);
        let mut out = z.to_vec();
        add_bias(&mut out, b, self.relu);
        Ok((CpuStorage::F32(out), Shape::from((rows, outputs))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let (rows, outputs) = self.dims(l1, l2)?;
        let (z, b) = (cuda_floats(s1, l1, self.name())?, cuda_floats(s2, l2, self.name())?);
        let device = s1.device.clone();
        let n = rows * outputs;
        // SAFETY: the kernel writes every one of the n values before anything reads them.
        let mut y = unsafe { device.alloc::<f32>(n) }?;
        let func = device.get_or_load_custom_func("bias_act_f32", "sparktrain_dense", DENSE_PTX)?;
        let relu = u32::from(self.relu);
        let mut builder = func.builder();
        builder.arg(&n).arg(&outputs).arg(&relu).arg(&z).arg(&b).arg(&mut y);
        // SAFETY: the arguments are the kernel's, in its order, and the buffers hold n values
        // (z, y) and `outputs` values (b), as checked above.
        unsafe { builder.launch(launch_config(n)) }.w()?;
        Ok((candle_core::CudaStorage::wrap_cuda_slice(y, device), Shape::from((rows, outputs))))
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
        let grad_b =
            if grad_z.device().is_cpu() { grad_z.apply_op1_no_bwd(&ColumnSum)? } else { grad_z.sum(0)? };
        Ok((Some(grad_z), Some(grad_b)))
    }
}

/// The kernels of `kernels/dense.cu`.
#[cfg(feature = "cuda")]
const DENSE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/dense.ptx"));

/// One thread a value, in cudarc's blocks of 1,024 (for at most 2^32 - 1 values; the kernels'
/// threads stride over any beyond).
#[cfg(feature = "cuda")]
fn launch_config(n: usize) -> candle_core::cuda_backend::cudarc::driver::LaunchConfig {
    candle_core::cuda_backend::cudarc::driver::LaunchConfig::for_num_elems(
        u32::try_from(n).unwrap_or(u32::MAX),
    )
}

/// A contiguous float32 device buffer as a view of its values.
#[cfg(feature = "cuda")]
fn cuda_floats<'a>(
    storage: &'a candle_core::CudaStorage,
    layout: &Layout,
    op: &'static str,
) -> candle_core::Result<candle_core::cuda_backend::cudarc::driver::CudaView<'a, f32>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(storage.as_cuda_slice::<f32>()?.slice(start..end)),
        None => Err(candle_core::Error::Msg(format!("{op} takes contiguous tensors"))),
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

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        if l1.shape() != l2.shape() {
            return Err(candle_core::Error::Msg(format!(
                "a mask of shape {:?} for gradients of shape {:?}",
                l2.shape().dims(),
                l1.shape().dims()
            )));
        }
        let (grad, y) = (cuda_floats(s1, l1, self.name())?, cuda_floats(s2, l2, self.name())?);
        let device = s1.device.clone();
        let n = l1.shape().elem_count();
        // SAFETY: the kernel writes every one of the n values before anything reads them.
        let mut out = unsafe { device.alloc::<f32>(n) }?;
        let func = device.get_or_load_custom_func("relu_mask_f32", "sparktrain_dense", DENSE_PTX)?;
        let mut builder = func.builder();
        builder.arg(&n).arg(&grad).arg(&y).arg(&mut out);
        // SAFETY: the arguments are the kernel's, in its order; the three buffers hold n values.
        unsafe { builder.launch(launch_config(n)) }.w()?;
        Ok((candle_core::CudaStorage::wrap_cuda_slice(out, device), l1.shape().clone()))
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

    /// `layer(x, w, b, relu)` and candle's own operations for `relu(x w + b)` (or `x w + b`)
    /// agree, values and gradients, for a small layer and one past the matrix product's blocks
    /// in every dimension.
    fn agrees_with_candle(layer: impl Fn(&Tensor, &Tensor, &Tensor, bool) -> Result<Tensor>) {
        let values = |n: usize, k: u32| (0..n).map(|i| ((i as u32 * k) % 23) as f32 / 7.0 - 1.5).collect();
        for (relu, (rows, inputs, outputs)) in [(true, (5, 3, 4)), (false, (5, 3, 4)), (true, (67, 33, 29))] {
            let x = Var::from_vec(values(rows * inputs, 5), (rows, inputs), &Device::Cpu).unwrap();
            let w = Var::from_vec(values(inputs * outputs, 7), (inputs, outputs), &Device::Cpu).unwrap();
            let b = Var::from_vec(values(outputs, 3), outputs, &Device::Cpu).unwrap();
            let ours = layer(x.as_tensor(), w.as_tensor(), b.as_tensor(), relu).unwrap();
            let plain = x.as_tensor().matmul(w.as_tensor()).unwrap().broadcast_add(b.as_tensor()).unwrap();
            let plain = if relu { plain.relu().unwrap() } else { plain };
            assert_eq!(ours.to_vec2::<f32>().unwrap(), plain.to_vec2::<f32>().unwrap());
            let weights =
                Tensor::from_vec(values(rows * outputs, 11), (rows, outputs), &Device::Cpu).unwrap();
            let a = (ours * &weights).unwrap().sum_all().unwrap().backward().unwrap();
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

    /// The whole fused layer (the CPU's).
    #[test]
    fn dense_matches_candles_operations() {
        agrees_with_candle(dense);
    }

    /// candle's product, then the bias and activation as one operation (a GPU's); a bias of
    /// another width is refused.
    #[test]
    fn bias_act_matches_candles_operations() {
        agrees_with_candle(|x, w, b, relu| bias_act(&x.matmul(w)?, b, relu));
        let z = Tensor::zeros((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
        let short = Tensor::zeros(2, candle_core::DType::F32, &Device::Cpu).unwrap();
        let error = bias_act(&z, &short, true).unwrap_err();
        assert!(error.to_string().contains("a bias of shape [2] for 3 outputs"), "{error}");
    }

    /// `kernels/dense.cu` compiled for this CPU: each thread of a small grid (3 blocks of 4, so
    /// that threads stride) runs in turn. It reads the number of values, the columns, whether
    /// to apply the ReLU, then `z`, `b` and a gradient, and writes the layer's output and the
    /// gradient masked by it.
    const DENSE_ON_THE_CPU: &str = r#"
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <vector>
struct Index { unsigned int x; };
static Index blockIdx, blockDim, threadIdx, gridDim;
#define __global__
static float __fadd_rn(float a, float b) { return a + b; }
#include DENSE_CU
static std::vector<float> floats(uint64_t n) {
    std::vector<float> v(n + 1);
    if (fread(v.data(), 4, n, stdin) != n) return {};
    v.resize(n);
    return v;
}
int main() {
    uint64_t head[3];
    if (fread(head, 8, 3, stdin) != 3) return 2;
    const size_t n = head[0], cols = head[1];
    auto z = floats(n);
    auto b = floats(cols);
    auto g = floats(n);
    if (z.size() != n || b.size() != cols || g.size() != n) return 3;
    std::vector<float> y(n), masked(n);
    gridDim.x = 3;
    blockDim.x = 4;
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x)
        for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x)
            bias_act_f32(n, cols, (unsigned int)head[2], z.data(), b.data(), y.data());
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x)
        for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x)
            relu_mask_f32(n, g.data(), y.data(), masked.data());
    fwrite(y.data(), 4, n, stdout);
    fwrite(masked.data(), 4, n, stdout);
    return 0;
}
"#;

    /// The GPU's kernels compute the CPU's operations to the bit: the bias added and the ReLU
    /// applied (NaN, infinities and a negative zero among the values), and the mask going back.
    #[test]
    fn the_kernel_source_computes_the_cpu_operations() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = crate::kernels_on_cpu::compile(dir.path(), DENSE_ON_THE_CPU, "DENSE_CU", "dense.cu");
        let bits = |t: &Tensor| -> Vec<u32> {
            t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
        };
        let (rows, cols) = (7, 5);
        let mut z: Vec<f32> = (0..rows * cols).map(|i| ((i * 13) % 17) as f32 / 3.0 - 2.5).collect();
        z[..4].copy_from_slice(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0]);
        z[7] = -0.0; // plus a bias of +0.0: +0.0, which the ReLU keeps
        let b = vec![0.5, -1.25, 0.0, 0.25, 3.0];
        let g: Vec<f32> = (0..rows * cols).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        for relu in [true, false] {
            let mut input = Vec::new();
            for word in [(rows * cols) as u64, cols as u64, u64::from(relu)] {
                input.extend_from_slice(&word.to_le_bytes());
            }
            for v in z.iter().chain(&b).chain(&g) {
                input.extend_from_slice(&v.to_le_bytes());
            }
            let words = crate::kernels_on_cpu::run(&kernel, &input);
            let (from_kernel, masked_by_kernel) = words.split_at(rows * cols);
            let zt = Tensor::from_slice(&z, (rows, cols), &Device::Cpu).unwrap();
            let bt = Tensor::from_slice(&b, cols, &Device::Cpu).unwrap();
            let y = bias_act(&zt, &bt, relu).unwrap();
            assert_eq!(from_kernel, bits(&y), "relu={relu}");
            let gt = Tensor::from_slice(&g, (rows, cols), &Device::Cpu).unwrap();
            assert_eq!(masked_by_kernel, bits(&relu_mask(&gt, &y).unwrap()), "relu={relu}");
        }
    }
}
