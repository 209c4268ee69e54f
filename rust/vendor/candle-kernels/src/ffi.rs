//! The entry points of candle's statically built MoE and GGUF kernels, without the kernels.
//!
//! Upstream compiles these into a static library linked against `libcudart` and `libstdc++`,
//! which ties every binary to the CUDA runtime's exact soname and needs the full toolkit to
//! build. sparktrain never runs quantized or mixture-of-experts models, so this copy keeps the
//! declarations candle-core calls (it compiles its quantized CUDA paths unconditionally) and
//! gives each a body that stops the process with the kernel's name, should one ever be reached.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments, non_snake_case, unused_variables)]

use core::ffi::c_void;

fn unavailable(kernel: &str) -> ! {
    eprintln!("candle-kernels: `{kernel}` is not built into sparktrain (quantized and MoE models are not supported)");
    std::process::abort()
}

#[cfg(feature = "cutile")]
pub unsafe extern "C" fn candle_launch_moe_align(topk_ids: *const i32, sorted_token_ids: *mut i32, expert_ids: *mut i32, num_tokens_post_pad: *mut i32, cumsum: *mut i32, num_experts: i32, block_size: i32, numel: i32, max_num_tokens_padded: i32, stream: *mut c_void) -> i32 {
    unavailable("candle_launch_moe_align")
}

pub unsafe extern "C" fn moe_gemm_wmma(input: *const c_void, weights: *const c_void, sorted_token_ids: *const i32, expert_ids: *const i32, topk_weights: *const f32, output: *mut c_void, expert_counts: *mut i32, expert_offsets: *mut i32, num_experts: i32, topk: i32, size_m: i32, size_n: i32, size_k: i32, dtype: i32, is_prefill: bool, stream: i64) {
    unavailable("moe_gemm_wmma")
}

pub unsafe extern "C" fn moe_gemm_gguf(input: *const f32, weights: *const c_void, sorted_token_ids: *const i32, expert_ids: *const i32, topk_weights: *const f32, output: *mut c_void, num_experts: i32, topk: i32, size_m: i32, size_n: i32, size_k: i32, gguf_dtype: i32, stream: i64) {
    unavailable("moe_gemm_gguf")
}

pub unsafe extern "C" fn moe_gemm_gguf_prefill(input: *const c_void, weights: *const u8, sorted_token_ids: *const i32, expert_ids: *const i32, topk_weights: *const f32, output: *mut c_void, num_experts: i32, topk: i32, size_m: i32, size_n: i32, size_k: i32, input_dtype: i32, gguf_dtype: i32, stream: i64) {
    unavailable("moe_gemm_gguf_prefill")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_0_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_0_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_1_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_1_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_0_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_0_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_1_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_1_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q8_0_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q8_0_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q2_k_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q2_k_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q3_k_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q3_k_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_k_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_k_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_k_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_k_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q6_k_bf16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q6_k_bf16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_0_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_0_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_1_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_1_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_0_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_0_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_1_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_1_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q8_0_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q8_0_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q2_k_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q2_k_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q3_k_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q3_k_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_k_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_k_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_k_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_k_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q6_k_f32_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q6_k_f32_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_0_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_0_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_1_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_1_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_0_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_0_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_1_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_1_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q8_0_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q8_0_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q2_k_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q2_k_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q3_k_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q3_k_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q4_k_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q4_k_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q5_k_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q5_k_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_q6_k_f16_plain(vx: *const c_void, vy: *const c_void, dst: *mut c_void, ncols_x: i32, nrows_x: i32, stride_col_y: i32, stride_col_dst: i32, b_size: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_q6_k_f16_plain")
}

pub unsafe extern "C" fn launch_mmvq_gguf_quantize_q8_1_bf16(x: *const c_void, vy: *mut c_void, kx: i32, kx_padded: i32, num_rows: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_quantize_q8_1_bf16")
}

pub unsafe extern "C" fn launch_mmvq_gguf_quantize_q8_1_f16(x: *const c_void, vy: *mut c_void, kx: i32, kx_padded: i32, num_rows: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_quantize_q8_1_f16")
}

pub unsafe extern "C" fn launch_mmvq_gguf_quantize_q8_1_f32(x: *const c_void, vy: *mut c_void, kx: i32, kx_padded: i32, num_rows: i32, stream: *mut c_void) {
    unavailable("launch_mmvq_gguf_quantize_q8_1_f32")
}

pub unsafe extern "C" fn launch_mmq_quantize_q8_1_D4(x: *const c_void, ids: *const i32, vy: *mut c_void, type_x: i32, ne00: i64, s01: i64, s02: i64, s03: i64, ne0: i64, ne1: i64, ne2: i64, ne3: i64, stream: *mut c_void) {
    unavailable("launch_mmq_quantize_q8_1_D4")
}

pub unsafe extern "C" fn launch_mmq_quantize_q8_1_DS4(x: *const c_void, ids: *const i32, vy: *mut c_void, type_x: i32, ne00: i64, s01: i64, s02: i64, s03: i64, ne0: i64, ne1: i64, ne2: i64, ne3: i64, stream: *mut c_void) {
    unavailable("launch_mmq_quantize_q8_1_DS4")
}

pub unsafe extern "C" fn launch_mmq_quantize_q8_1_D2S6(x: *const c_void, ids: *const i32, vy: *mut c_void, type_x: i32, ne00: i64, s01: i64, s02: i64, s03: i64, ne0: i64, ne1: i64, ne2: i64, ne3: i64, stream: *mut c_void) {
    unavailable("launch_mmq_quantize_q8_1_D2S6")
}

pub unsafe extern "C" fn launch_mmq_gguf_q4_0(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q4_0")
}

pub unsafe extern "C" fn launch_mmq_gguf_q4_1(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q4_1")
}

pub unsafe extern "C" fn launch_mmq_gguf_q5_0(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q5_0")
}

pub unsafe extern "C" fn launch_mmq_gguf_q5_1(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q5_1")
}

pub unsafe extern "C" fn launch_mmq_gguf_q8_0(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q8_0")
}

pub unsafe extern "C" fn launch_mmq_gguf_q2_k(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q2_k")
}

pub unsafe extern "C" fn launch_mmq_gguf_q3_k(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q3_k")
}

pub unsafe extern "C" fn launch_mmq_gguf_q4_k(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q4_k")
}

pub unsafe extern "C" fn launch_mmq_gguf_q5_k(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q5_k")
}

pub unsafe extern "C" fn launch_mmq_gguf_q6_k(tmp_fixup: *mut c_void, x: *const c_void, y: *const c_void, dst: *mut c_void, ncols_x: i64, nrows_x: i64, ncols_y: i64, stride_row_x: i64, stride_col_dst: i64, cc: i32, nsm: i32, smpbo: i64, warp_size: i32, stream: *mut c_void) {
    unavailable("launch_mmq_gguf_q6_k")
}
