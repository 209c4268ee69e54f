// A dense layer's bias and ReLU, and the ReLU's mask going back, on the GPU
// (rust/train/src/fused.rs, which runs the same arithmetic on the CPU).
//
// In candle's operations a layer's `relu(z + b)` is a broadcast add, which uploads its operands'
// shapes and strides on every call, then a ReLU; going back, the ReLU's gradient is a zero fill,
// a comparison, a type conversion and a product. Here each direction is one pass.
//
// Each thread computes one value, striding over the grid.

// y = z + b, each row of `z` (`cols` values) plus the bias `b`, through max(., 0) when `relu`;
// `n` values in all.
extern "C" __global__ void bias_act_f32(
    const size_t n,
    const size_t cols,
    const unsigned int relu,
    const float *z,
    const float *b,
    float *y
) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        const float v = __fadd_rn(z[i], b[i % cols]);
        y[i] = relu ? fmaxf(v, 0.0f) : v;
    }
}

// out = grad where the ReLU's output `y` is positive, else 0; `n` values.
extern "C" __global__ void relu_mask_f32(const size_t n, const float *grad, const float *y, float *out) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        out[i] = y[i] > 0.0f ? grad[i] : 0.0f;
    }
}
