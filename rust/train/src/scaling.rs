//! A tensor multiplied or divided by one float32 number, rounded once as the host's loops
//! round it, for the step's arithmetic on the model's device (`step.rs`, `device_vars.rs`).

use candle_core::Tensor;

/// `x / s`, rounded as a float32 division (candle's `x / s` multiplies by `1 / s`).
pub(crate) fn div(x: &Tensor, s: f32) -> candle_core::Result<Tensor> {
    x.broadcast_div(&Tensor::new(s, x.device())?)
}

/// `x · s`, one rounding. candle's affine map computes `x · s + add`: adding -0 leaves every
/// product as it is, -0 included (adding +0 would turn -0 into +0), and it needs no scalar
/// copied to the device, as a tensor operand would.
pub(crate) fn mul(x: &Tensor, s: f32) -> candle_core::Result<Tensor> {
    x.affine(f64::from(s), -0.0)
}
