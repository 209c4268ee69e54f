//! candle's backward pass as the engine uses it (its copy in `rust/vendor/candle-core` stores
//! a node's first gradient as it is rather than adding it to zeros): the gradients are the
//! analytic ones where a value feeds one consumer or several, through subtraction, negation,
//! broadcasts and transposes, and a first gradient that arrives strided is stored contiguous.

use candle_core::{Device, Tensor, Var};

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "value {i}: got {g}, want {w}");
    }
}

#[test]
fn a_value_used_several_times_sums_its_gradients() {
    let dev = Device::Cpu;
    let x = Var::from_vec(vec![1.0f32, -2.0, 3.0], 3, &dev).unwrap();
    // y = x·x + 3x - (-x) = x² + 4x: x feeds the product twice, the affine once, the negation once.
    let y = ((x.as_tensor() * x.as_tensor()).unwrap() + (x.as_tensor() * 3.0).unwrap()).unwrap();
    let y = (y - x.as_tensor().neg().unwrap()).unwrap();
    let grads = y.sum_all().unwrap().backward().unwrap();
    close(&values(grads.get(&x).unwrap()), &[6.0, 0.0, 10.0]);
}

#[test]
fn the_first_gradient_of_a_subtraction_or_negation_is_negated() {
    let dev = Device::Cpu;
    let a = Var::from_vec(vec![2.0f32, 5.0], 2, &dev).unwrap();
    let b = Var::from_vec(vec![1.0f32, 4.0], 2, &dev).unwrap();
    let c = Var::from_vec(vec![3.0f32, -1.0], 2, &dev).unwrap();
    // loss = Σ (a - b)·c + Σ -b: a and c reached once, b through a subtraction and a negation.
    let d = (a.as_tensor() - b.as_tensor()).unwrap();
    let loss = ((&d * c.as_tensor()).unwrap().sum_all().unwrap()
        + b.as_tensor().neg().unwrap().sum_all().unwrap())
    .unwrap();
    let grads = loss.backward().unwrap();
    close(&values(grads.get(&a).unwrap()), &[3.0, -1.0]);
    close(&values(grads.get(&b).unwrap()), &[-4.0, 0.0]);
    close(&values(grads.get(&c).unwrap()), &[1.0, 1.0]);
}

#[test]
fn a_broadcast_bias_and_a_transposed_weight_get_their_own_shapes() {
    let dev = Device::Cpu;
    let x = Tensor::new(&[[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]], &dev).unwrap();
    // w is used transposed: its first gradient comes back strided.
    let w = Var::new(&[[1.0f32, 0.0], [0.5, -1.0], [2.0, 1.0]], &dev).unwrap();
    let b = Var::new(&[0.1f32, -0.2, 0.3], &dev).unwrap();
    let out = x.matmul(&w.as_tensor().t().unwrap()).unwrap().broadcast_add(b.as_tensor()).unwrap();
    let weights = Tensor::new(&[[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], &dev).unwrap();
    let grads = (out * &weights).unwrap().sum_all().unwrap().backward().unwrap();
    let gw = grads.get(&w).unwrap();
    assert_eq!(gw.dims(), &[3, 2]);
    assert!(gw.is_contiguous(), "a stored gradient is contiguous, as a sum would be");
    // d/dw[j][k] = Σ_i weights[i][j]·x[i][k].
    close(&values(gw), &[48.0, 60.0, 57.0, 72.0, 66.0, 84.0]);
    let gb = grads.get(&b).unwrap();
    assert_eq!(gb.dims(), &[3]);
    close(&values(gb), &[12.0, 15.0, 18.0]);
}

#[test]
fn a_gradient_of_another_shape_is_refused() {
    // A custom operation whose backward returns a gradient of the wrong shape fails the
    // pass, as adding it to zeros of the right shape did.
    struct Wrong;
    impl candle_core::CustomOp1 for Wrong {
        fn name(&self) -> &'static str {
            "wrong"
        }
        fn cpu_fwd(
            &self,
            storage: &candle_core::CpuStorage,
            layout: &candle_core::Layout,
        ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
            let candle_core::CpuStorage::F32(v) = storage else { unreachable!() };
            let (start, end) = layout.contiguous_offsets().unwrap();
            Ok((candle_core::CpuStorage::F32(v[start..end].to_vec()), layout.shape().clone()))
        }
        fn bwd(&self, arg: &Tensor, _res: &Tensor, _grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
            Ok(Some(Tensor::zeros(arg.elem_count() + 1, arg.dtype(), arg.device())?))
        }
    }
    let x = Var::from_vec(vec![1.0f32, 2.0], 2, &Device::Cpu).unwrap();
    let y = x.as_tensor().apply_op1(Wrong).unwrap();
    let error = y.sum_all().unwrap().backward().unwrap_err().to_string();
    assert!(error.contains("shape mismatch") && error.contains("accumulate"), "{error}");
}
