// The update rules' passes on the GPU (rust/train/src/rule_passes.rs, which says what each
// pass computes and runs the same arithmetic on the CPU).
//
// One pass writes one buffer of a rule (a moment, an accumulator, the parameters) in place,
// reading the others where they lie. Each thread computes one value. With ids, the buffers
// are tables of `width`-wide rows and thread i writes value i % width of row ids[i / width],
// whose gradient is row i / width of `g`; a lazy pass leaves a row whose gradient is all zeros
// as it is. Without ids, thread i writes value i of flat buffers as long as `g`. An id at or
// past the table's rows is skipped (the callers check the ids on the host; the CPU pass
// refuses them).
//
// Every operation is rounded alone (the __*_rn intrinsics: no fused multiply-adds, a division
// and a square root rounded as IEEE 754 says), so a value is the CPU loop's to the bit.

// The passes, numbered as `Pass` in rule_passes.rs.
#define ADAM_M 0
#define ADAM_V 1
#define ADAM_P 2
#define SGD_P 3
#define SGD_V 4
#define SGD_MOMENTUM_P 5
#define SQUARES 6
#define ADAGRAD_P 7
#define FTRL_Z 8
#define FTRL_P 9

// The new value of a buffer's element `d` (at `at`) by pass `pass`, from its gradient `g`,
// element `at` of the pass's other buffers `a` and `b` (read only by the passes that have
// them: the others are given any buffer), and the pass's numbers `s`.
__device__ __forceinline__ float pass_value(
    const unsigned int pass, const float g, const float d, const float *a, const float *b,
    const size_t at, const float s0, const float s1, const float s2, const float s3
) {
    switch (pass) {
    case ADAM_M: {
        // s: grad_decay, beta1, 1 - beta1; a: the parameters.
        const float gd = __fadd_rn(g, __fmul_rn(s0, a[at]));
        return __fadd_rn(__fmul_rn(s1, d), __fmul_rn(s2, gd));
    }
    case ADAM_V: {
        // s: grad_decay, beta2, 1 - beta2; a: the parameters.
        const float gd = __fadd_rn(g, __fmul_rn(s0, a[at]));
        return __fadd_rn(__fmul_rn(s1, d), __fmul_rn(__fmul_rn(s2, gd), gd));
    }
    case ADAM_P: {
        // s: weight_decay, step, 1 / c2, eps; a: the first moments, b: the second.
        const float denominator = __fadd_rn(__fsqrt_rn(__fmul_rn(b[at], s2)), s3);
        return __fsub_rn(__fsub_rn(d, __fmul_rn(s0, d)), __fdiv_rn(__fmul_rn(s1, a[at]), denominator));
    }
    case SGD_P:
        // s: lr, weight_decay.
        return __fsub_rn(d, __fmul_rn(s0, __fadd_rn(g, __fmul_rn(s1, d))));
    case SGD_V: {
        // s: weight_decay, momentum; a: the parameters.
        const float gd = __fadd_rn(g, __fmul_rn(s0, a[at]));
        return __fadd_rn(__fmul_rn(s1, d), gd);
    }
    case SGD_MOMENTUM_P: {
        // s: lr, weight_decay, momentum, nesterov (1 or 0); a: the new velocities.
        const float gd = __fadd_rn(g, __fmul_rn(s1, d));
        const float direction = s3 != 0.0f ? __fadd_rn(gd, __fmul_rn(s2, a[at])) : a[at];
        return __fsub_rn(d, __fmul_rn(s0, direction));
    }
    case SQUARES:
        return __fadd_rn(d, __fmul_rn(g, g));
    case ADAGRAD_P:
        // s: lr, eps; a: the new accumulators.
        return __fsub_rn(d, __fdiv_rn(__fmul_rn(s0, g), __fadd_rn(__fsqrt_rn(a[at]), s1)));
    case FTRL_Z: {
        // s: lr; a: the accumulators before this step, b: the parameters.
        const float fresh = __fadd_rn(a[at], __fmul_rn(g, g));
        const float sigma = __fdiv_rn(__fsub_rn(__fsqrt_rn(fresh), __fsqrt_rn(a[at])), s0);
        return __fadd_rn(d, __fsub_rn(g, __fmul_rn(sigma, b[at])));
    }
    case FTRL_P: {
        // s: lr, l1, 2 * l2; a: the new linear terms, b: the new accumulators.
        const float z = a[at];
        if (!(fabsf(z) > s1)) {
            return 0.0f;
        }
        const float quadratic = __fadd_rn(__fdiv_rn(__fsqrt_rn(b[at]), s0), s2);
        return __fdiv_rn(__fsub_rn(__fmul_rn(s1, copysignf(1.0f, z)), z), quadratic);
    }
    default:
        return d;
    }
}

extern "C" __global__ void rule_pass_f32(
    const unsigned int pass,
    const unsigned int *ids,
    const unsigned int has_ids,
    const unsigned int lazy,
    const size_t n_rows,
    const size_t width,
    const size_t table_rows,
    float *dst,
    const float *g,
    const float *a,
    const float *b,
    const float s0,
    const float s1,
    const float s2,
    const float s3
) {
    const size_t n = n_rows * width;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        const size_t k = i / width;
        const size_t row = has_ids ? (size_t)ids[k] : k;
        if (row >= table_rows) {
            continue;
        }
        if (lazy) {
            bool live = false;
            for (size_t j = k * width; j < (k + 1) * width; ++j) {
                live = live || g[j] != 0.0f;
            }
            if (!live) {
                continue;
            }
        }
        const size_t at = row * width + (i - k * width);
        dst[at] = pass_value(pass, g[i], dst[at], a, b, at, s0, s1, s2, s3);
    }
}
