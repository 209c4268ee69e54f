//! One worker's synchronous step on an MLP (39 inputs, ReLU layers, 1 logit, Adam), alone,
//! for profiling the engine and for `tests/bench/bench_cpu_step.py`, which runs the same step
//! in PyTorch beside it: `RAYON_NUM_THREADS=1 cargo run --release -p sparktrain-train --example
//! step_speed -- [rows] [hidden,...] [steps]` (defaults: 256, 256,256, 1000). The allocator is
//! set as the Python binding sets it in trainer processes.

use std::time::Instant;

use candle_core::{Device, Tensor};
use sparktrain_train::{Batch, DataParallel, Loss, Mlp, Model, OptimizerConfig, Rule};

fn main() {
    // SAFETY: mallopt only sets allocator parameters, before any large allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rows: usize = args.first().map_or(256, |a| a.parse().expect("rows: a whole number"));
    let hidden: Vec<usize> = args
        .get(1)
        .map_or("256,256", String::as_str)
        .split(',')
        .map(|h| h.parse().expect("hidden: comma-separated widths"))
        .collect();
    let n: usize = args.get(2).map_or(1000, |a| a.parse().expect("steps: a whole number"));
    let inputs = 39usize;
    let x: Vec<f32> = (0..rows * inputs).map(|i| ((i * 7919) % 1000) as f32 / 1000.0).collect();
    let y: Vec<f32> = (0..rows).map(|i| (i % 2) as f32).collect();
    let batch = Batch {
        dense: Tensor::from_vec(x, (rows, inputs), &Device::Cpu).unwrap(),
        ids: None,
        id_width: 0,
        labels: Tensor::from_vec(y, rows, &Device::Cpu).unwrap(),
        bags: None,
    };
    let model = Mlp::new(inputs, &hidden, 1, 1).unwrap();
    let optimizer = OptimizerConfig::new(Rule::adam(1e-3));
    let mut dp = DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, None).unwrap();
    for _ in 0..(n / 20).max(3) {
        dp.step(Some(&batch)).unwrap();
    }
    let start = Instant::now();
    for _ in 0..n {
        dp.step(Some(&batch)).unwrap();
    }
    let step = start.elapsed().as_secs_f64() / n as f64;
    let start = Instant::now();
    for _ in 0..n {
        let logits = dp.model().forward(&batch, None).unwrap();
        let loss = Loss::BinaryCrossEntropy.compute(&logits, &batch.labels).unwrap();
        loss.backward().unwrap();
    }
    let forward_backward = start.elapsed().as_secs_f64() / n as f64;
    println!(
        "step {:.3} ms ({:.0} steps/s, {:.0} examples/s); forward and backward {:.3} ms",
        step * 1e3,
        1.0 / step,
        rows as f64 / step,
        forward_backward * 1e3
    );
}
