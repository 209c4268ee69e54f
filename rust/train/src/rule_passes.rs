//! The update rules of `optim.rs` as passes that write the parameters and the rule's state in
//! place, for state kept on the model's device (`device_tables.rs`, `device_vars.rs`).
//!
//! Each of a rule's buffers is written by one pass that reads the others where they lie:
//! Adam is three passes (first moments, second moments, parameters), plain SGD one, SGD with
//! momentum, Adagrad and FTRL two or three. A pass covers either rows of a table (its ids
//! and their gradients; a lazy pass leaves a row whose gradient is all zeros as it is, as
//! the host's update skips such rows) or every value of a flat buffer. On the CPU a pass is
//! a loop, on a GPU one kernel (`kernels/rules.cu`). Written as tensor operations, a rule took
//! 6 to 17 operations, each a kernel launch and a buffer of its own on a GPU, and a table's
//! update gathered its rows and their state, updated them and wrote them back: 29 launches a
//! table and step for Adam, where the passes take 3.
//!
//! Every value is computed by the same float32 operations in the same order as
//! `Optimizer::run_rule`'s loop, each rounded alone: on the CPU the two agree bit for bit
//! (`tests/device_tables.rs`), and the kernel rounds the same way (no fused multiply-adds).

use candle_core::{CpuStorage, DType, InplaceOpN, Layout, Tensor};

use crate::optim::Rule;

#[cfg(feature = "cuda")]
const RULES_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/rules.ptx"));

/// What a pass writes: rows of tables, or whole flat buffers.
#[derive(Clone, Copy)]
pub(crate) enum Span<'a> {
    /// Rows `ids` (`[n]`, u32, distinct) of `[rows, width]` buffers, with gradients
    /// `[n, width]`; `lazy`: a row whose gradient is all zeros keeps its values and state.
    Rows { ids: &'a Tensor, lazy: bool },
    /// Every value of the buffers, with gradients of their length.
    Flat,
}

/// One pass: which buffer it writes and how, numbered as in `kernels/rules.cu`.
#[derive(Clone, Copy, Debug)]
enum Pass {
    AdamM = 0,
    AdamV = 1,
    AdamP = 2,
    SgdP = 3,
    SgdV = 4,
    SgdMomentumP = 5,
    Squares = 6,
    AdagradP = 7,
    FtrlZ = 8,
    FtrlP = 9,
}

/// A pass with its numbers, the buffer it writes and the two it reads (where it reads fewer,
/// any buffer fills the place).
struct Step<'t> {
    pass: Pass,
    numbers: [f32; 4],
    dst: &'t Tensor,
    a: &'t Tensor,
    b: &'t Tensor,
}

/// Updates parameters `p` with gradients `g` by `rule` (its step size already scaled) as
/// update `step`, with the rule's state buffers `state` ([`Rule::buffer_names`] order), all
/// in place over `span`.
pub(crate) fn update_in_place(
    rule: Rule,
    step: u64,
    p: &Tensor,
    g: &Tensor,
    state: &[Tensor],
    span: Span<'_>,
) -> candle_core::Result<()> {
    if g.elem_count() == 0 {
        return Ok(());
    }
    let steps = passes(rule, step, p, g, state)?;
    // Every pass is checked before the first writes: a refused update changes nothing.
    for s in &steps {
        check(s.dst, g, s.a, s.b, span)?;
    }
    let lazy = matches!(span, Span::Rows { lazy: true, .. });
    for s in steps {
        let op = RulePass { pass: s.pass, numbers: s.numbers, lazy };
        match span {
            Span::Rows { ids, .. } => s.dst.inplace_op([ids, g, s.a, s.b], &op)?,
            Span::Flat => s.dst.inplace_op([g, s.a, s.b], &op)?,
        }
    }
    Ok(())
}

/// The passes of `rule` as update `step` of `p` with `g`, in the order they run.
fn passes<'t>(
    rule: Rule,
    step: u64,
    p: &'t Tensor,
    g: &'t Tensor,
    state: &'t [Tensor],
) -> candle_core::Result<Vec<Step<'t>>> {
    let t = step.max(1) as i32;
    let buffer = |i: usize| {
        state.get(i).ok_or_else(|| {
            candle_core::Error::Msg(format!("the rule's state has {} buffers, {} needed", state.len(), i + 1))
        })
    };
    let steps = match rule {
        Rule::Sgd { lr, momentum: 0.0, weight_decay, .. } => {
            vec![Step { pass: Pass::SgdP, numbers: [lr, weight_decay, 0.0, 0.0], dst: p, a: g, b: g }]
        }
        Rule::Sgd { lr, momentum, nesterov, weight_decay } => {
            let v = buffer(0)?;
            vec![
                Step { pass: Pass::SgdV, numbers: [weight_decay, momentum, 0.0, 0.0], dst: v, a: p, b: g },
                Step {
                    pass: Pass::SgdMomentumP,
                    numbers: [lr, weight_decay, momentum, if nesterov { 1.0 } else { 0.0 }],
                    dst: p,
                    a: v,
                    b: g,
                },
            ]
        }
        Rule::Adam { lr, beta1, beta2, eps, weight_decay, decoupled } => {
            let (c1, c2) = (1.0 - beta1.powi(t), 1.0 - beta2.powi(t));
            let (grad_decay, weight_decay) =
                if decoupled { (0.0, lr * weight_decay) } else { (weight_decay, 0.0) };
            let (m, v) = (buffer(0)?, buffer(1)?);
            vec![
                Step {
                    pass: Pass::AdamM,
                    numbers: [grad_decay, beta1, 1.0 - beta1, 0.0],
                    dst: m,
                    a: p,
                    b: g,
                },
                Step {
                    pass: Pass::AdamV,
                    numbers: [grad_decay, beta2, 1.0 - beta2, 0.0],
                    dst: v,
                    a: p,
                    b: g,
                },
                Step {
                    pass: Pass::AdamP,
                    numbers: [weight_decay, lr / c1, 1.0 / c2, eps],
                    dst: p,
                    a: m,
                    b: v,
                },
            ]
        }
        Rule::Adagrad { lr, eps, .. } => {
            let acc = buffer(0)?;
            vec![
                Step { pass: Pass::Squares, numbers: [0.0; 4], dst: acc, a: g, b: g },
                Step { pass: Pass::AdagradP, numbers: [lr, eps, 0.0, 0.0], dst: p, a: acc, b: g },
            ]
        }
        Rule::Ftrl { lr, l1, l2, .. } => {
            let (acc, z) = (buffer(0)?, buffer(1)?);
            // The linear terms read the accumulators before this step's squares join them.
            vec![
                Step { pass: Pass::FtrlZ, numbers: [lr, 0.0, 0.0, 0.0], dst: z, a: acc, b: p },
                Step { pass: Pass::Squares, numbers: [0.0; 4], dst: acc, a: g, b: g },
                Step { pass: Pass::FtrlP, numbers: [lr, l1, 2.0 * l2, 0.0], dst: p, a: z, b: acc },
            ]
        }
    };
    Ok(steps)
}

/// Refuses buffers of other types or shapes than a pass over `span` reads and writes.
fn check(dst: &Tensor, g: &Tensor, a: &Tensor, b: &Tensor, span: Span<'_>) -> candle_core::Result<()> {
    if [dst, g, a, b].iter().any(|t| t.dtype() != DType::F32) {
        candle_core::bail!("an update pass runs on float32 buffers");
    }
    // A pass reads its other buffers where it writes (or, when they fill an unused place,
    // where it reads the gradients).
    let fits = |t: &Tensor| match span {
        Span::Rows { .. } => t.dims() == dst.dims() || t.dims() == g.dims(),
        Span::Flat => t.elem_count() == dst.elem_count(),
    };
    let shapes_fit = match span {
        Span::Rows { ids, .. } => match (dst.dims2(), g.dims2()) {
            (Ok((_, width)), Ok((n, g_width))) => {
                ids.dtype() == DType::U32 && ids.dims() == [n] && width == g_width
            }
            _ => false,
        },
        Span::Flat => dst.elem_count() == g.elem_count(),
    };
    if !shapes_fit || !fits(a) || !fits(b) {
        candle_core::bail!(
            "an update pass over buffers of shape {:?} with gradients of shape {:?} ({:?}, {:?} read)",
            dst.dims(),
            g.dims(),
            a.dims(),
            b.dims()
        );
    }
    Ok(())
}

/// The in-place operation of one pass (over 3 tensors for flat buffers: the gradients and the
/// two read; over 4 for rows: their ids first).
struct RulePass {
    pass: Pass,
    numbers: [f32; 4],
    lazy: bool,
}

/// The values a layout covers, or an error for a strided one.
fn span_of(layout: &Layout) -> candle_core::Result<std::ops::Range<usize>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(start..end),
        None => candle_core::bail!("an update pass needs contiguous buffers"),
    }
}

fn f32s<'s>(storage: &'s CpuStorage, layout: &Layout) -> candle_core::Result<&'s [f32]> {
    match storage {
        CpuStorage::F32(values) => Ok(&values[span_of(layout)?]),
        _ => candle_core::bail!("an update pass runs on float32 buffers"),
    }
}

impl RulePass {
    /// The pass on the CPU: `dst` as `[rows, width]` rows `ids` (or flat, None).
    fn run_cpu(&self, dst: &mut [f32], width: usize, ids: Option<&[u32]>, g: &[f32], a: &[f32], b: &[f32]) {
        let [s0, s1, s2, s3] = self.numbers;
        match self.pass {
            Pass::AdamM => self.sweep(dst, width, ids, g, |g, d, at| {
                let g = g + s0 * a[at];
                s1 * d + s2 * g
            }),
            Pass::AdamV => self.sweep(dst, width, ids, g, |g, d, at| {
                let g = g + s0 * a[at];
                s1 * d + s2 * g * g
            }),
            Pass::AdamP => self
                .sweep(dst, width, ids, g, |_, d, at| d - s0 * d - s1 * a[at] / ((b[at] * s2).sqrt() + s3)),
            Pass::SgdP => self.sweep(dst, width, ids, g, |g, d, _| d - s0 * (g + s1 * d)),
            Pass::SgdV => self.sweep(dst, width, ids, g, |g, d, at| s1 * d + (g + s0 * a[at])),
            Pass::SgdMomentumP => self.sweep(dst, width, ids, g, |g, d, at| {
                let g = g + s1 * d;
                d - s0 * if s3 != 0.0 { g + s2 * a[at] } else { a[at] }
            }),
            Pass::Squares => self.sweep(dst, width, ids, g, |g, d, _| d + g * g),
            Pass::AdagradP => self.sweep(dst, width, ids, g, |g, d, at| d - s0 * g / (a[at].sqrt() + s1)),
            Pass::FtrlZ => self.sweep(dst, width, ids, g, |g, d, at| {
                let fresh = a[at] + g * g;
                let sigma = (fresh.sqrt() - a[at].sqrt()) / s0;
                d + (g - sigma * b[at])
            }),
            Pass::FtrlP => self.sweep(dst, width, ids, g, |_, _, at| {
                let z = a[at];
                if z.abs() > s1 { (s1 * z.signum() - z) / ((b[at].sqrt() / s0) + s2) } else { 0.0 }
            }),
        }
    }

    /// Writes `value(gradient, old value, place)` into every value of `dst` the pass covers.
    fn sweep(
        &self,
        dst: &mut [f32],
        width: usize,
        ids: Option<&[u32]>,
        g: &[f32],
        value: impl Fn(f32, f32, usize) -> f32,
    ) {
        let Some(ids) = ids else {
            for (at, (d, &g)) in dst.iter_mut().zip(g).enumerate() {
                *d = value(g, *d, at);
            }
            return;
        };
        for (&id, grads) in ids.iter().zip(g.chunks_exact(width)) {
            if self.lazy && grads.iter().all(|&v| v == 0.0) {
                continue;
            }
            let start = id as usize * width;
            for (j, &g) in grads.iter().enumerate() {
                dst[start + j] = value(g, dst[start + j], start + j);
            }
        }
    }
}

macro_rules! rule_pass_op {
    ($n:literal) => {
        impl InplaceOpN<$n> for RulePass {
            fn name(&self) -> &'static str {
                "rule-pass"
            }

            fn cpu_fwd(
                &self,
                dst: &mut CpuStorage,
                dst_layout: &Layout,
                srcs: [(&CpuStorage, &Layout); $n],
            ) -> candle_core::Result<()> {
                let CpuStorage::F32(values) = dst else {
                    candle_core::bail!("an update pass runs on float32 buffers");
                };
                let dst = &mut values[span_of(dst_layout)?];
                let [.., (g, gl), (a, al), (b, bl)] = srcs;
                let (g, a, b) = (f32s(g, gl)?, f32s(a, al)?, f32s(b, bl)?);
                let (ids, width) = if $n == 4 {
                    let (CpuStorage::U32(ids), layout) = srcs[0] else {
                        candle_core::bail!("an update pass takes u32 row ids");
                    };
                    let (ids, width) = (&ids[span_of(layout)?], dst_layout.dims()[1]);
                    let rows = dst_layout.dims()[0];
                    if let Some(&id) = ids.iter().find(|&&id| id as usize >= rows) {
                        candle_core::bail!("row {id} updated in a table of {rows} rows");
                    }
                    (Some(ids), width)
                } else {
                    (None, 1)
                };
                self.run_cpu(dst, width, ids, g, a, b);
                Ok(())
            }

            #[cfg(feature = "cuda")]
            fn cuda_fwd(
                &self,
                dst: &mut candle_core::CudaStorage,
                dst_layout: &Layout,
                srcs: [(&candle_core::CudaStorage, &Layout); $n],
            ) -> candle_core::Result<()> {
                let [.., g, a, b] = srcs;
                let ids = if $n == 4 { Some(srcs[0]) } else { None };
                self.launch(dst, dst_layout, ids, g, a, b)
            }
        }
    };
}

rule_pass_op!(3);
rule_pass_op!(4);

#[cfg(feature = "cuda")]
impl RulePass {
    /// The pass as one kernel on the buffers' device.
    fn launch(
        &self,
        dst: &mut candle_core::CudaStorage,
        dst_layout: &Layout,
        ids: Option<(&candle_core::CudaStorage, &Layout)>,
        (g, gl): (&candle_core::CudaStorage, &Layout),
        (a, al): (&candle_core::CudaStorage, &Layout),
        (b, bl): (&candle_core::CudaStorage, &Layout),
    ) -> candle_core::Result<()> {
        use candle_core::cuda_backend::WrapErr;
        use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};

        let device = dst.device.clone();
        let g = g.as_cuda_slice::<f32>()?.slice(span_of(gl)?);
        let a = a.as_cuda_slice::<f32>()?.slice(span_of(al)?);
        let b = b.as_cuda_slice::<f32>()?.slice(span_of(bl)?);
        let (ids, n_rows, width, table_rows) = match ids {
            Some((ids, layout)) => {
                let (rows, width) = (dst_layout.dims()[0], dst_layout.dims()[1]);
                (Some(ids.as_cuda_slice::<u32>()?.slice(span_of(layout)?)), layout.dims()[0], width, rows)
            }
            None => {
                let n = dst_layout.shape().elem_count();
                (None, n, 1, n)
            }
        };
        let mut dst = dst.as_cuda_slice_mut::<f32>()?.slice_mut(span_of(dst_layout)?);
        let func = device.get_or_load_custom_func("rule_pass_f32", "sparktrain_rules", RULES_PTX)?;
        let config = LaunchConfig::for_num_elems(u32::try_from(n_rows * width).unwrap_or(u32::MAX));
        let (pass, has_ids, lazy) = (self.pass as u32, u32::from(ids.is_some()), u32::from(self.lazy));
        let [s0, s1, s2, s3] = self.numbers;
        let mut builder = func.builder();
        builder.arg(&pass);
        // Without ids the kernel reads none: the gradients fill their place.
        match &ids {
            Some(ids) => builder.arg(ids),
            None => builder.arg(&g),
        };
        builder.arg(&has_ids);
        builder.arg(&lazy);
        builder.arg(&n_rows);
        builder.arg(&width);
        builder.arg(&table_rows);
        builder.arg(&mut dst);
        builder.arg(&g);
        builder.arg(&a);
        builder.arg(&b);
        builder.arg(&s0);
        builder.arg(&s1);
        builder.arg(&s2);
        builder.arg(&s3);
        unsafe { builder.launch(config) }.w()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;
    use crate::optim::Optimizer;

    fn rules() -> Vec<Rule> {
        vec![
            Rule::sgd(0.3),
            Rule::Sgd { lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0.0 },
            Rule::Sgd { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01 },
            Rule::adam(0.02),
            Rule::Adam { lr: 0.01, beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.02, decoupled: false },
            Rule::adamw(0.02, 0.05),
            Rule::adagrad(0.2),
            Rule::ftrl(0.2, 0.01, 0.01),
        ]
    }

    /// `n` values in [-1, 1) from `seed`, a tenth of them zero.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                if state.is_multiple_of(10) { 0.0 } else { (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0 }
            })
            .collect()
    }

    fn tensor(values: &[f32], shape: (usize, usize)) -> Tensor {
        Tensor::from_slice(values, shape, &Device::Cpu).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    fn host_bits(values: &[f32]) -> Vec<u32> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn every_rule_updates_a_flat_buffer_bit_for_bit_as_the_host() {
        let n = 37;
        for rule in rules() {
            let mut host = Optimizer::new(rule, n, 1);
            let mut params = values(n, 1);
            let p = tensor(&params, (1, n));
            let state: Vec<Tensor> =
                host.buffers().iter().map(|(_, b)| Tensor::from_slice(b, n, &Device::Cpu).unwrap()).collect();
            for step in 1..=4 {
                let grads = values(n, step + 10);
                host.step(&mut params, &grads).unwrap();
                let g = Tensor::from_slice(&grads, n, &Device::Cpu).unwrap();
                update_in_place(rule, step, &p, &g, &state, Span::Flat).unwrap();
                assert_eq!(bits(&p), host_bits(&params), "{rule:?}, step {step}");
                for ((name, buffer), tensor) in host.buffers().into_iter().zip(&state) {
                    assert_eq!(bits(tensor), host_bits(buffer), "{rule:?} {name}, step {step}");
                }
            }
        }
    }

    #[test]
    fn every_rule_updates_a_tables_rows_as_the_host_and_a_lazy_pass_skips_rows_without_gradient() {
        let (rows, width) = (9, 3);
        // Row 4's gradient is all zeros: a lazy pass leaves it and its state as they are.
        // Row 5's is zero but for its last value, and the row is updated.
        let ids = [1u32, 4, 5, 8];
        for rule in rules() {
            for lazy in [false, true] {
                let mut host = Optimizer::new(rule, rows * width, 1);
                let mut params = values(rows * width, 2);
                let table = tensor(&params, (rows, width));
                let state: Vec<Tensor> =
                    host.buffers().iter().map(|(_, b)| tensor(b, (rows, width))).collect();
                let at = Tensor::new(&ids, &Device::Cpu).unwrap();
                for step in 1..=3 {
                    let mut grads = values(ids.len() * width, step + 20);
                    grads[width..2 * width].fill(0.0);
                    grads[2 * width..3 * width - 1].fill(0.0);
                    let (live, live_grads) = if lazy {
                        crate::rows::live_rows(&ids, &grads, width)
                    } else {
                        (ids[..].into(), grads[..].into())
                    };
                    let starts: Vec<usize> = live.iter().map(|&id| id as usize * width).collect();
                    host.advance();
                    host.update_rows(&mut params, &live_grads, &starts, width).unwrap();
                    let g = tensor(&grads, (ids.len(), width));
                    update_in_place(rule, step, &table, &g, &state, Span::Rows { ids: &at, lazy }).unwrap();
                    let case = format!("{rule:?}, lazy {lazy}, step {step}");
                    assert_eq!(bits(&table), host_bits(&params), "{case}");
                    for ((name, buffer), tensor) in host.buffers().into_iter().zip(&state) {
                        assert_eq!(bits(tensor), host_bits(buffer), "{case}: {name}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_row_past_the_table_or_buffers_that_do_not_fit_are_refused_before_anything_is_written() {
        let table = tensor(&values(12, 3), (4, 3));
        let before = bits(&table);
        let g = tensor(&values(6, 4), (2, 3));
        let sgd = Rule::sgd(0.1);
        let past = Tensor::new(&[1u32, 4], &Device::Cpu).unwrap();
        let error =
            update_in_place(sgd, 1, &table, &g, &[], Span::Rows { ids: &past, lazy: false }).unwrap_err();
        assert!(error.to_string().contains("row 4 updated in a table of 4 rows"), "{error}");
        let short = Tensor::new(&[1u32], &Device::Cpu).unwrap();
        let error =
            update_in_place(sgd, 1, &table, &g, &[], Span::Rows { ids: &short, lazy: false }).unwrap_err();
        assert!(
            error.to_string().contains("buffers of shape [4, 3] with gradients of shape [2, 3]"),
            "{error}"
        );
        let error = update_in_place(Rule::adam(0.1), 1, &table, &g, &[], Span::Flat).unwrap_err();
        assert!(error.to_string().contains("state has 0 buffers, 1 needed"), "{error}");
        assert_eq!(bits(&table), before);
    }

    /// `kernels/rules.cu` compiled for this CPU: each thread of a small grid (3 blocks of 4,
    /// so that threads stride) runs in turn, the rounding intrinsics as the single operations
    /// they round like. It reads a pass and its buffers on standard input and writes the
    /// buffer it updated.
    const KERNEL_ON_THE_CPU: &str = r#"
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <vector>
struct Index { unsigned int x; };
static Index blockIdx, blockDim, threadIdx, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
static float __fadd_rn(float a, float b) { return a + b; }
static float __fsub_rn(float a, float b) { return a - b; }
static float __fmul_rn(float a, float b) { return a * b; }
static float __fdiv_rn(float a, float b) { return a / b; }
static float __fsqrt_rn(float a) { return std::sqrt(a); }
#include RULES_CU
template <typename T> static std::vector<T> array() {
    uint64_t n = 0;
    if (fread(&n, 8, 1, stdin) != 1) return {};
    std::vector<T> v(n + 1);
    if (fread(v.data(), sizeof(T), n, stdin) != n) return {};
    v.resize(n);
    return v;
}
int main() {
    uint32_t head[3];
    uint64_t sizes[3];
    float s[4];
    if (fread(head, 4, 3, stdin) != 3 || fread(sizes, 8, 3, stdin) != 3 || fread(s, 4, 4, stdin) != 4) return 2;
    auto ids = array<unsigned int>();
    auto dst = array<float>();
    auto g = array<float>();
    auto a = array<float>();
    auto b = array<float>();
    gridDim.x = 3;
    blockDim.x = 4;
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x)
        for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x)
            rule_pass_f32(head[0], ids.data(), head[1], head[2], sizes[0], sizes[1], sizes[2], dst.data(),
                          g.data(), a.data(), b.data(), s[0], s[1], s[2], s[3]);
    fwrite(dst.data(), 4, dst.size(), stdout);
    return 0;
}
"#;

    /// Runs `pass` through the kernel compiled at `kernel`: the buffer it writes.
    fn on_kernel(
        kernel: &std::path::Path,
        pass: &RulePass,
        ids: Option<&Tensor>,
        s: &Step<'_>,
        g: &Tensor,
    ) -> Vec<u32> {
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let (n_rows, width, table_rows) = match ids {
            Some(ids) => {
                let (rows, width) = s.dst.dims2().unwrap();
                (ids.elem_count() as u64, width as u64, rows as u64)
            }
            None => (s.dst.elem_count() as u64, 1, s.dst.elem_count() as u64),
        };
        let mut input = Vec::new();
        for word in [pass.pass as u32, u32::from(ids.is_some()), u32::from(pass.lazy)] {
            input.extend_from_slice(&word.to_le_bytes());
        }
        for size in [n_rows, width, table_rows] {
            input.extend_from_slice(&size.to_le_bytes());
        }
        for number in pass.numbers {
            input.extend_from_slice(&number.to_le_bytes());
        }
        let ids: Vec<u32> = ids.map(|ids| ids.to_vec1().unwrap()).unwrap_or_default();
        input.extend_from_slice(&(ids.len() as u64).to_le_bytes());
        ids.iter().for_each(|id| input.extend_from_slice(&id.to_le_bytes()));
        for t in [s.dst, g, s.a, s.b] {
            let values = flat(t);
            input.extend_from_slice(&(values.len() as u64).to_le_bytes());
            values.iter().for_each(|v| input.extend_from_slice(&v.to_le_bytes()));
        }
        crate::kernels_on_cpu::run(kernel, &input)
    }

    #[test]
    fn the_kernel_source_computes_every_pass_as_the_cpu_loop_does() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = crate::kernels_on_cpu::compile(dir.path(), KERNEL_ON_THE_CPU, "RULES_CU", "rules.cu");
        let (rows, width) = (9, 3);
        let ids = Tensor::new(&[1u32, 4, 5, 8], &Device::Cpu).unwrap();
        for rule in rules() {
            for (span, lazy) in [(false, false), (true, false), (true, true)] {
                let n = if span { rows * width } else { 29 };
                let shape = if span { (rows, width) } else { (1, n) };
                let p = tensor(&values(n, 5), shape);
                // State that earlier steps left: positive where a rule keeps sums of squares.
                let state: Vec<Tensor> = (0..rule.buffer_names().len())
                    .map(|i| {
                        tensor(
                            &values(n, 6 + i as u64).iter().map(|v| v.abs() + 0.1).collect::<Vec<_>>(),
                            shape,
                        )
                    })
                    .collect();
                let mut grads = values(if span { ids.elem_count() * width } else { n }, 9);
                if span {
                    // Row 4 has no gradient; row 5's is zero but for its last value.
                    grads[width..2 * width].fill(0.0);
                    grads[2 * width..3 * width - 1].fill(0.0);
                }
                let g = if span { tensor(&grads, (ids.elem_count(), width)) } else { tensor(&grads, (1, n)) };
                for s in passes(rule, 3, &p, &g, &state).unwrap() {
                    let pass = RulePass { pass: s.pass, numbers: s.numbers, lazy };
                    let ids = span.then_some(&ids);
                    let from_kernel = on_kernel(&kernel, &pass, ids, &s, &g);
                    match ids {
                        Some(ids) => s.dst.inplace_op([ids, &g, s.a, s.b], &pass).unwrap(),
                        None => s.dst.inplace_op([&g, s.a, s.b], &pass).unwrap(),
                    }
                    assert_eq!(from_kernel, bits(s.dst), "{rule:?} {:?}, rows {span}, lazy {lazy}", s.pass);
                }
            }
        }
    }
}
