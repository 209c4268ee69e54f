//! The update rules of `optim.rs` written in tensor operations, for state kept on the
//! model's device (embedding tables in `device_tables.rs`, the variables in
//! `device_vars.rs`).
//!
//! Every value is computed by the same float32 operations in the same order as
//! `Optimizer::run_rule`'s loop: on the CPU the two agree bit for bit, and on a GPU to its
//! rounding of the same operations.

use candle_core::Tensor;

use crate::optim::Rule;

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

/// `x + s`, one rounding (`x · 1` is exact).
fn add(x: &Tensor, s: f32) -> candle_core::Result<Tensor> {
    x.affine(1.0, f64::from(s))
}

/// The rule's update of parameters `p` with gradients `g` and state `state` (the rule's
/// buffers, shaped as `p`), as update `step`: the new parameters and state. The arithmetic
/// is `Optimizer::run_rule`'s, operation for operation.
pub(crate) fn apply_rule(
    rule: Rule,
    step: u64,
    p: &Tensor,
    g: &Tensor,
    state: &[Tensor],
) -> candle_core::Result<(Tensor, Vec<Tensor>)> {
    let t = step.max(1) as i32;
    Ok(match rule {
        Rule::Sgd { lr, momentum, nesterov, weight_decay } => {
            let g = (g + mul(p, weight_decay)?)?;
            if momentum == 0.0 {
                ((p - mul(&g, lr)?)?, Vec::new())
            } else {
                let v = (mul(&state[0], momentum)? + &g)?;
                let direction = if nesterov { (&g + mul(&v, momentum)?)? } else { v.clone() };
                ((p - mul(&direction, lr)?)?, vec![v])
            }
        }
        Rule::Adam { lr, beta1, beta2, eps, weight_decay, decoupled } => {
            let (c1, c2) = (1.0 - beta1.powi(t), 1.0 - beta2.powi(t));
            let (grad_decay, weight_decay) =
                if decoupled { (0.0, lr * weight_decay) } else { (weight_decay, 0.0) };
            let (step, inv_c2) = (lr / c1, 1.0 / c2);
            let g = (g + mul(p, grad_decay)?)?;
            let m = (mul(&state[0], beta1)? + mul(&g, 1.0 - beta1)?)?;
            let v = (mul(&state[1], beta2)? + (mul(&g, 1.0 - beta2)? * &g)?)?;
            let denominator = add(&mul(&v, inv_c2)?.sqrt()?, eps)?;
            let p = ((p - mul(p, weight_decay)?)? - (mul(&m, step)? / denominator)?)?;
            (p, vec![m, v])
        }
        Rule::Adagrad { lr, eps, .. } => {
            let acc = (&state[0] + g.sqr()?)?;
            let p = (p - (mul(g, lr)? / add(&acc.sqrt()?, eps)?)?)?;
            (p, vec![acc])
        }
        Rule::Ftrl { lr, l1, l2, .. } => {
            let (acc, linear) = (&state[0], &state[1]);
            let fresh = (acc + g.sqr()?)?;
            let sigma = div(&(fresh.sqrt()? - acc.sqrt()?)?, lr)?;
            let z = (linear + (g - (sigma * p)?)?)?;
            let quadratic = add(&div(&fresh.sqrt()?, lr)?, 2.0 * l2)?;
            let shrunk = ((mul(&z.sign()?, l1)? - &z)? / quadratic)?;
            let p = z.abs()?.gt(f64::from(l1))?.where_cond(&shrunk, &shrunk.zeros_like()?)?;
            (p, vec![fresh, z])
        }
    })
}
