//! The optimizers against their update rules written out by hand, and the properties
//! checkpoints and multi-threading rely on: a restored state continues exactly, and threads
//! change nothing.

use sparktrain_train::{Optimizer, Rule, Segment};

fn grads_at(params: &[f32]) -> Vec<f32> {
    // The gradient of sum((p - 3)^2) / 2 plus a little per-index wobble.
    params.iter().enumerate().map(|(i, p)| p - 3.0 + (i % 7) as f32 * 0.01).collect()
}

fn run(rule: Rule, len: usize, steps: usize, threads: usize) -> (Vec<f32>, Optimizer) {
    let mut params: Vec<f32> = (0..len).map(|i| (i % 11) as f32 * 0.1 - 0.5).collect();
    let mut opt = Optimizer::new(rule, len, threads);
    for _ in 0..steps {
        let g = grads_at(&params);
        opt.step(&mut params, &g).unwrap();
    }
    (params, opt)
}

fn all_rules() -> Vec<Rule> {
    vec![
        Rule::sgd(0.1),
        Rule::Sgd { lr: 0.05, momentum: 0.9, nesterov: false, weight_decay: 0.01 },
        Rule::Sgd { lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 0.0 },
        Rule::adam(0.05),
        Rule::adamw(0.05, 0.01),
        Rule::adagrad(0.5),
        Rule::ftrl(0.5, 0.01, 0.01),
    ]
}

#[test]
fn sgd_with_momentum_follows_the_rule() {
    let mut p = [1.0f32];
    let mut opt =
        Optimizer::new(Rule::Sgd { lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0.0 }, 1, 1);
    opt.step(&mut p, &[2.0]).unwrap(); // v = 2, p = 1 - 0.2
    assert!((p[0] - 0.8).abs() < 1e-7);
    opt.step(&mut p, &[1.0]).unwrap(); // v = 0.9 * 2 + 1 = 2.8, p = 0.8 - 0.28
    assert!((p[0] - 0.52).abs() < 1e-6);
}

#[test]
fn adam_moves_each_weight_by_the_learning_rate_on_its_first_step() {
    let mut p = [0.0f32, 0.0, 0.0];
    let mut opt = Optimizer::new(Rule::adam(0.01), 3, 1);
    opt.step(&mut p, &[5.0, -0.001, 300.0]).unwrap();
    for (got, want) in p.iter().zip([-0.01, 0.01, -0.01]) {
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }
}

#[test]
fn adamw_decays_weights_even_without_gradient() {
    let mut p = [2.0f32];
    let mut opt = Optimizer::new(Rule::adamw(0.1, 0.5), 1, 1);
    opt.step(&mut p, &[0.0]).unwrap();
    assert!((p[0] - 2.0 * (1.0 - 0.1 * 0.5)).abs() < 1e-6, "{}", p[0]);
}

#[test]
fn adagrad_follows_the_rule() {
    let mut p = [1.0f32];
    let mut opt = Optimizer::new(Rule::adagrad(0.1), 1, 1);
    opt.step(&mut p, &[0.3]).unwrap(); // acc = 0.1 + 0.09
    let want = 1.0 - 0.1 * 0.3 / (0.19f32.sqrt() + 1e-7);
    assert!((p[0] - want).abs() < 1e-7);
}

#[test]
fn ftrl_follows_the_rule_and_l1_makes_exact_zeros() {
    let mut p = [0.0f32];
    let mut opt = Optimizer::new(Rule::ftrl(0.1, 0.0, 0.0), 1, 1);
    opt.step(&mut p, &[0.5]).unwrap();
    // acc 0.1 -> 0.35, z = 0.5 - 0 (p was 0), p = -z / (sqrt(0.35) / 0.1)
    let want = -0.5 / (0.35f32.sqrt() / 0.1);
    assert!((p[0] - want).abs() < 1e-7, "{} vs {want}", p[0]);

    let mut p = [0.7f32, -0.2];
    let mut opt = Optimizer::new(Rule::ftrl(0.1, 10.0, 0.0), 2, 1);
    opt.step(&mut p, &[0.5, -0.4]).unwrap();
    assert_eq!(p, [0.0, 0.0]);
}

#[test]
fn every_rule_minimizes_a_quadratic() {
    for rule in all_rules() {
        let (params, _) = run(rule, 50, 400, 1);
        let g = grads_at(&params);
        let worst = g.iter().map(|g| g.abs()).fold(0.0, f32::max);
        // AdamW and FTRL's penalties pull the optimum a little towards zero.
        assert!(worst < 0.2, "{rule:?}: largest gradient left {worst}");
    }
}

#[test]
fn threads_change_nothing() {
    for rule in all_rules() {
        let (one, _) = run(rule, 300_001, 3, 1);
        let (four, _) = run(rule, 300_001, 3, 4);
        assert!(one.iter().zip(&four).all(|(a, b)| a.to_bits() == b.to_bits()), "{rule:?}");
    }
}

#[test]
fn a_restored_state_continues_exactly() {
    for rule in all_rules() {
        let (straight, _) = run(rule, 40, 6, 1);
        let (mut params, first) = run(rule, 40, 3, 1);
        let mut resumed = Optimizer::new(rule, 40, 1);
        resumed.load_state(first.state()).unwrap();
        for _ in 0..3 {
            let g = grads_at(&params);
            resumed.step(&mut params, &g).unwrap();
        }
        assert_eq!(params, straight, "{rule:?}");
        assert_eq!(resumed.steps(), 6);
    }
}

#[test]
fn a_state_that_does_not_fit_is_refused() {
    let (_, adam) = run(Rule::adam(0.1), 10, 1, 1);
    let mut other = Optimizer::new(Rule::adam(0.1), 11, 1);
    let err = other.load_state(adam.state()).unwrap_err().to_string();
    assert!(err.contains("'m' holds 10 values for 11 parameters"), "{err}");
    let mut sgd = Optimizer::new(Rule::sgd(0.1), 10, 1);
    assert!(sgd.load_state(adam.state()).is_err());
}

/// Rows of `width` at every third row of a buffer, updated by `update_rows` on `threads`
/// threads, and the same rows as one segment each (the rule applied to each row alone).
fn rows_both_ways(rule: Rule, rows: usize, width: usize, threads: usize) -> (Vec<f32>, Vec<f32>) {
    let len = 3 * rows * width + 5;
    let starts: Vec<usize> = (0..rows).map(|r| 3 * r * width + 2).collect();
    let start: Vec<f32> = (0..len).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    let (mut by_rows, mut by_segments) = (start.clone(), start);
    let (mut fast, mut slow) = (Optimizer::new(rule, len, threads), Optimizer::new(rule, len, 1));
    for step in 0..3 {
        let grads: Vec<f32> = (0..rows * width).map(|i| ((i + step) % 17) as f32 * 0.05 - 0.4).collect();
        fast.advance();
        fast.update_rows(&mut by_rows, &grads, &starts, width).unwrap();
        let segments: Vec<Segment> = starts
            .iter()
            .enumerate()
            .map(|(r, &s)| Segment { param: s, grad: r * width, len: width })
            .collect();
        slow.advance();
        slow.update(&mut by_segments, &grads, &segments).unwrap();
    }
    assert_eq!(fast.state(), slow.state(), "{rule:?}: the state buffers");
    (by_rows, by_segments)
}

#[test]
fn updating_rows_in_place_is_updating_each_row_on_any_thread_count() {
    for rule in all_rules() {
        for (rows, width, threads) in [(7, 16, 1), (100_000, 4, 3), (9_001, 17, 4)] {
            let (by_rows, by_segments) = rows_both_ways(rule, rows, width, threads);
            assert!(
                by_rows.iter().zip(&by_segments).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{rule:?}, {rows} rows of {width} on {threads} threads"
            );
        }
    }
}

#[test]
fn rows_out_of_order_or_overlapping_are_refused() {
    let mut params = vec![0.0; 64];
    let mut opt = Optimizer::new(Rule::adam(0.1), 64, 1);
    opt.advance();
    for starts in [[8, 0], [0, 3], [0, 62]] {
        let err = opt.update_rows(&mut params, &[1.0; 8], &starts, 4).unwrap_err();
        assert!(err.to_string().contains("rows of 4"), "{starts:?}: {err}");
    }
    assert!(params.iter().all(|p| *p == 0.0), "a refused update changes nothing");
}
