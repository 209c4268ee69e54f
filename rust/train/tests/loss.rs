//! The losses against a float64 reference, at logits where naive formulas overflow, with
//! their gradients.

use candle_core::{Device, Tensor, Var};
use sparktrain_train::loss::{bce_with_logits, softmax_cross_entropy};

#[test]
fn binary_cross_entropy_is_finite_and_exact_at_any_logit() {
    let logits = [-100.0f32, -40.0, -1.0, 0.0, 2.0, 40.0, 100.0];
    let labels = [0.0f32, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0];
    let x = Var::from_slice(&logits, 7, &Device::Cpu).unwrap();
    let y = Tensor::from_slice(&labels, 7, &Device::Cpu).unwrap();
    let loss = bce_with_logits(x.as_tensor(), &y).unwrap();
    let want: f64 = logits
        .iter()
        .zip(&labels)
        .map(|(&x, &y)| {
            let (x, y) = (x as f64, y as f64);
            x.max(0.0) - x * y + (-x.abs()).exp().ln_1p()
        })
        .sum::<f64>()
        / 7.0;
    let got = loss.to_scalar::<f32>().unwrap() as f64;
    assert!((got - want).abs() < 1e-5 * want, "{got} vs {want}");
    // d/dx = (sigmoid(x) - y) / n
    let grads = loss.backward().unwrap();
    let g = grads.get(x.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
    for ((g, &x), &y) in g.iter().zip(&logits).zip(&labels) {
        let want = (1.0 / (1.0 + (-(x as f64)).exp()) - y as f64) / 7.0;
        assert!((*g as f64 - want).abs() < 1e-6, "{g} vs {want} at {x}");
    }
}

#[test]
fn softmax_cross_entropy_is_finite_and_exact_at_any_logit() {
    let rows = [[1000.0f32, 0.0, -1000.0], [0.5, 1.5, -0.5]];
    let labels = [2u32, 1];
    let x = Var::from_slice(rows.as_flattened(), (2, 3), &Device::Cpu).unwrap();
    let y = Tensor::from_slice(&labels, 2, &Device::Cpu).unwrap();
    let loss = softmax_cross_entropy(x.as_tensor(), &y).unwrap();
    let mut want = 0.0f64;
    let mut want_grad = Vec::new();
    for (row, &label) in rows.iter().zip(&labels) {
        let max = row.iter().fold(f64::MIN, |m, &v| m.max(v as f64));
        let norm: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        want += -((row[label as usize] as f64 - max) - norm.ln()) / 2.0;
        for (j, &v) in row.iter().enumerate() {
            let p = (v as f64 - max).exp() / norm;
            want_grad.push((p - if j == label as usize { 1.0 } else { 0.0 }) / 2.0);
        }
    }
    let got = loss.to_scalar::<f32>().unwrap() as f64;
    assert!((got - want).abs() < 1e-4 * want, "{got} vs {want}");
    let grads = loss.backward().unwrap();
    let g = grads.get(x.as_tensor()).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for (g, want) in g.iter().zip(want_grad) {
        assert!((*g as f64 - want).abs() < 1e-6, "{g} vs {want}");
    }
}

#[test]
fn mismatched_labels_are_refused() {
    let x = Tensor::zeros((4, 1), candle_core::DType::F32, &Device::Cpu).unwrap();
    let y = Tensor::zeros(3, candle_core::DType::F32, &Device::Cpu).unwrap();
    let err = bce_with_logits(&x, &y).unwrap_err().to_string();
    assert!(err.contains("4 logits, 3 labels"), "{err}");
}

#[test]
fn labels_that_are_no_class_are_refused_naming_the_value() {
    let x = Tensor::zeros((3, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
    for (bad, named) in [(-1.0f32, "label -1"), (2.5, "label 2.5"), (4.0, "label 4")] {
        let y = Tensor::from_slice(&[0.0f32, bad, 1.0], 3, &Device::Cpu).unwrap();
        let err = softmax_cross_entropy(&x, &y).unwrap_err().to_string();
        assert!(err.contains(&format!("{named} is not a class id: the model has 4 classes")), "{err}");
    }
    let y = Tensor::from_slice(&[0.0f32, 3.0, 1.0], 3, &Device::Cpu).unwrap();
    softmax_cross_entropy(&x, &y).unwrap();

    let x = Tensor::zeros(3, candle_core::DType::F32, &Device::Cpu).unwrap();
    let y = Tensor::from_slice(&[0.0f32, 0.25, 3.0], 3, &Device::Cpu).unwrap();
    let err = bce_with_logits(&x, &y).unwrap_err().to_string();
    assert!(err.contains("label 3: binary cross-entropy needs labels from 0 to 1"), "{err}");
}
