//! The engine on a GPU against the same engine on the CPU, for `tests/gpu/check.sh`, which runs
//! it on a machine with an NVIDIA GPU beside PyTorch. Every mode takes the devices it compares
//! or times, so on a machine without a GPU the same binary checks itself with `cpu`:
//!
//! - `exact A B [steps]`: every built-in model under every optimizer rule, from the same seed
//!   and batches on device A and device B; prints the largest relative difference of the
//!   step losses and of the parameters, and fails when a loss differs by more than 1e-4 or
//!   the parameters by more than [`same_training`] allows.
//! - `step DEVICE ROWS [steps] [models]`: one worker's step (`DataParallel::step`, Adam) for the MLP
//!   (39-256-256-1), Wide&Deep, DeepFM and DCN (13 dense features, 26 columns of 10,000 ids,
//!   dimension 16, 256-256); a JSON line per model.
//! - `trainer DEVICE ROWS [steps] [models]`: the same models through `Trainer::fit` over Parquet files
//!   (the input pipeline included); a JSON line per model, its rate from the second progress
//!   window of ten steps on (`whole_fit_examples_per_sec` counts the whole fit, start-up
//!   included).
//! - `loop DEVICE ROWS [steps] [models]`: the `trainer` mode's training loop taken apart: the
//!   same files and input pipeline, batches prepared ahead by the prefetch thread
//!   (`Prefetch::for_step`) and stepped (`DataParallel::step_prepared`), with the training
//!   thread's time split between waiting for the next prepared batch and stepping; a JSON line
//!   per model, in examples per second and milliseconds per step (the means past the first ten
//!   steps), to tell a `Trainer` held up by its input from one whose step runs slower.
//! - `phases DEVICE ROWS [steps] [models]`: where a step's time goes, for the same models: the
//!   batch's copy to the device, the lookup of its rows, the forward pass, the loss and
//!   backward pass, and the gradients' copy to host memory (which the step makes only with a
//!   ring or with the update on the host), each timed to the device's completion, beside
//!   the whole `DataParallel::step` (the rest of which is the update, and with the update on
//!   the host the copy of the parameters back); a JSON line per model, in milliseconds per
//!   step.
//! - `prepare ROWS [batches] [models] [buckets]`: the host's share of preparing a batch for a
//!   step (`Prepared`: its distinct ids, each id's place among them, and in the layout of a GPU
//!   the plan of the gradient sums), on the CPU in both layouts, for Wide&Deep's and DeepFM's
//!   ids by default, with `buckets` ids a column (10,000 unless told); a JSON line per model
//!   with the median milliseconds a batch.
//! - `input ROWS [steps] [models]`: the `trainer` mode's input pipeline alone over the same
//!   files (read, encoded and cut into batches on its thread, then copied to the CPU as the
//!   trainer copies a batch to its device): the examples per second it can feed at most; a
//!   JSON line per model.
//! - `job DEVICE WORKERS [steps]`: WORKERS trainer processes on this machine, each on DEVICE,
//!   in one ring over loopback, training Wide&Deep; checks they end with the same parameters.
//! - `allreduce RANKS[,RANKS...] MIB[,MIB...] [CONTENDER,...]`: the ring's float32 sum alone,
//!   RANKS processes on one host, by default (unix-domain sockets) and over TCP as between
//!   hosts, sealed and in the clear, buffers of MIB MiB: the median call time on rank 0
//!   and the bus bandwidth (`2(N-1)/N × bytes / time`, as NCCL's tests count it), for
//!   `tests/gpu/gloo_peer.py`'s figures of PyTorch's gloo on the same machine. A contender
//!   named with `-xK` (`sealed-x4`) runs K parallel rings (`Config::streams`), to tell on a
//!   machine of many cores whether the default of one ring leaves them idle.
//!
//! `GPU_CHECK_TABLES=device` or `memory` keeps the embedding tables on the device or in main
//! memory (`TableOptions::on_device`); unset, the engine decides (on a GPU, on the device).
//! `GPU_CHECK_UPDATE=device` or `host` runs the variables' update on the device or on the host
//! (`OptimizerConfig::update_on_device`, which needs the tables on the device too); unset, the
//! engine decides (on a GPU, on the device). Every timed line says where both were.
//! `GPU_CHECK_BUCKETS` sets the ids in each categorical column (10,000 unless set; the
//! tables' rows are 26 times it), for the cost of a step against its tables' size.
//! `GPU_CHECK_EVENTS=tracked` gives each device buffer the pair of CUDA events cudarc makes by
//! default and the engine turns off (`device.rs`), for the `step`, `loop`, `phases` and
//! `exact` modes, whose lines say which it was.
//!
//! The C library's allocator is set as the Python binding sets it in trainer processes, so the
//! host's share of a step costs what it costs in the wheel.
//!
//! `cargo run --release -p sparktrain-train --features cuda --example gpu_check -- step cuda 4096`

use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Float32Array, Int64Array};
use arrow::record_batch::RecordBatch;
use candle_core::Device;
use sparktrain_collective::{Communicator, Config, MAX_STREAMS};
use sparktrain_train::input::Input;
use sparktrain_train::trainer::{FitOptions, Hooks, LogLine, Trainer, TrainerConfig};
use sparktrain_train::{
    Batch, Categorical, DataParallel, FeatureSpec, Gather, Loss, Model, ModelKind, OptimizerConfig, Prefetch,
    Prepared, Rule, ShardTables, TableOptions, shared,
};

const DENSE: usize = 13;
const COLUMNS: usize = 26;
const BUCKETS: u32 = 10_000;
const DIM: usize = 16;

fn main() -> ExitCode {
    // SAFETY: mallopt only sets allocator parameters, before any large allocation.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_owned());
    let number =
        |i: usize, default: usize| arg(i, &default.to_string()).parse::<usize>().expect("a whole number");
    match args.first().map(String::as_str) {
        Some("exact") => exact(&arg(1, "cpu"), &arg(2, "cuda"), number(3, 10)),
        Some("step") => step(&arg(1, "cuda"), number(2, 4096), number(3, 100), &timed(&arg(4, TIMED))),
        Some("trainer") => trainer(&arg(1, "cuda"), number(2, 4096), number(3, 100), &timed(&arg(4, TIMED))),
        Some("loop") => {
            training_loop(&arg(1, "cuda"), number(2, 4096), number(3, 100), &timed(&arg(4, TIMED)))
        }
        Some("phases") => phases(&arg(1, "cuda"), number(2, 4096), number(3, 50), &timed(&arg(4, TIMED))),
        Some("prepare") => prepare(
            number(1, 4096),
            number(2, 200),
            &timed(&arg(3, "wide_deep,deepfm")),
            number(4, BUCKETS as usize) as u32,
        ),
        Some("input") => input(number(1, 4096), number(2, 100), &timed(&arg(3, TIMED))),
        Some("job") => job(&arg(1, "cuda"), number(2, 2), number(3, 50)),
        Some("job-worker") => job_worker(&args[1..]),
        Some("allreduce") => all_reduce(&arg(1, "2,4,8"), &arg(2, "1,16,64"), &arg(3, "local,sealed,clear")),
        Some("allreduce-rank") => all_reduce_rank(&args[1..]),
        _ => {
            eprintln!(
                "usage: gpu_check exact A B [steps] | step DEVICE ROWS [steps] | trainer DEVICE ROWS [steps] | loop DEVICE ROWS [steps] | phases DEVICE ROWS [steps] | prepare ROWS [batches] [models] [buckets] | input ROWS [steps] | job DEVICE WORKERS [steps] | allreduce RANKS MIB [contenders]"
            );
            ExitCode::from(2)
        }
    }
}

/// The models `step` and `trainer` time unless told otherwise.
const TIMED: &str = "mlp,wide_deep,deepfm,dcn";

/// The models named in `list` (comma-separated), in `models()`'s order.
fn timed(list: &str) -> Vec<(&'static str, ModelKind)> {
    let names: Vec<&str> = list.split(',').collect();
    for name in &names {
        assert!(models().iter().any(|(m, _)| m == name), "unknown model {name}");
    }
    models().into_iter().filter(|(m, _)| names.contains(m)).collect()
}

/// Every built-in model, by name.
fn models() -> Vec<(&'static str, ModelKind)> {
    let hidden = vec![256, 256];
    vec![
        ("logistic_regression", ModelKind::LogisticRegression { outputs: 1 }),
        ("mlp", ModelKind::Mlp { hidden: hidden.clone(), outputs: 1 }),
        ("wide_deep", ModelKind::WideDeep { dim: DIM, hidden: hidden.clone() }),
        ("deepfm", ModelKind::DeepFm { dim: DIM, hidden: hidden.clone() }),
        ("dcn", ModelKind::Dcn { dim: DIM, hidden, cross_layers: 2 }),
    ]
}

/// The MLP reads 39 dense features; the others 13 dense and 26 categorical columns of
/// `GPU_CHECK_BUCKETS` ids each (10,000 unless set).
fn spec(model: &str) -> FeatureSpec {
    let buckets = match std::env::var("GPU_CHECK_BUCKETS") {
        Ok(n) => n.parse().unwrap_or_else(|_| panic!("GPU_CHECK_BUCKETS={n}: a count of ids")),
        Err(_) => BUCKETS,
    };
    spec_of(model, buckets)
}

/// The rows of `spec`'s tables, all columns together.
fn table_rows(spec: &FeatureSpec) -> usize {
    spec.categorical.iter().map(|c| c.buckets as usize).sum()
}

/// [`spec`] with `buckets` ids in each categorical column.
fn spec_of(model: &str, buckets: u32) -> FeatureSpec {
    let dense_only = matches!(model, "mlp" | "logistic_regression");
    FeatureSpec {
        dense: (0..if dense_only { 39 } else { DENSE }).map(|i| format!("d{i}")).collect(),
        categorical: if dense_only {
            vec![]
        } else {
            (0..COLUMNS).map(|c| Categorical { name: format!("c{c}"), buckets }).collect()
        },
        crossed: vec![],
        multi_hot: vec![],
        label: "label".into(),
    }
}

/// `rows` rows for `spec`, drawn from `seed`: dense values in [0, 1), ids with a skew (low ids
/// are hot), a label that depends on both.
fn rows(spec: &FeatureSpec, rows: usize, seed: u64) -> RecordBatch {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut columns: Vec<(String, ArrayRef)> = Vec::new();
    let mut score = vec![0.0f64; rows];
    for (i, name) in spec.dense.iter().enumerate() {
        let values: Vec<f32> = (0..rows).map(|_| next() as f32).collect();
        if i < 3 {
            score.iter_mut().zip(&values).for_each(|(s, v)| *s += *v as f64 - 0.5);
        }
        columns.push((name.clone(), Arc::new(Float32Array::from(values))));
    }
    for (c, column) in spec.categorical.iter().enumerate() {
        let ids: Vec<i64> = (0..rows).map(|_| (next().powi(3) * column.buckets as f64) as i64).collect();
        if c < 2 {
            score.iter_mut().zip(&ids).for_each(|(s, id)| *s += if id % 2 == 0 { 0.3 } else { -0.3 });
        }
        columns.push((column.name.clone(), Arc::new(Int64Array::from(ids))));
    }
    let label: Vec<i64> = score.iter().map(|s| i64::from(*s > 0.0)).collect();
    columns.push(("label".into(), Arc::new(Int64Array::from(label))));
    RecordBatch::try_from_iter(columns).expect("columns of one length")
}

fn open(device: &str) -> Device {
    match sparktrain_train::device::open(device) {
        Ok(d) => {
            track_events(&d);
            d
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}

/// With `GPU_CHECK_EVENTS=tracked`, gives every device buffer made from here on cudarc's pair
/// of events again, as before the engine turned them off (`device.rs`), to time the
/// difference; every other value, or none, leaves the engine's choice.
fn track_events(device: &Device) {
    if std::env::var("GPU_CHECK_EVENTS").as_deref() != Ok("tracked") {
        return;
    }
    #[cfg(feature = "cuda")]
    if let Device::Cuda(cuda) = device {
        // SAFETY: events only add work; every stream is the caller's per-thread one.
        unsafe { cuda.cuda_stream().context().enable_event_tracking() };
    }
    #[cfg(not(feature = "cuda"))]
    let _ = device;
}

/// Whether this process's device buffers get cudarc's events, for the result lines.
fn events_name(device: &Device) -> &'static str {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(cuda) = device {
        return if cuda.is_event_tracking() { "tracked" } else { "untracked" };
    }
    let _ = device;
    "none"
}

/// The rules every model is checked under: (name, rule, sparse table updates).
fn rules() -> Vec<(&'static str, Rule, bool)> {
    vec![
        ("sgd", Rule::sgd(0.05), true),
        ("adagrad", Rule::adagrad(0.05), true),
        ("ftrl", Rule::ftrl(0.05, 0.001, 0.001), true),
        ("adam", Rule::adam(0.001), false),
        ("lazy_adam", Rule::adam(0.001), true),
    ]
}

fn data_parallel(
    kind: &ModelKind,
    spec: &FeatureSpec,
    device: &Device,
    optimizer: &OptimizerConfig,
) -> DataParallel<Box<dyn Model>> {
    let model = kind.build_on(device, spec, 7).expect("the model builds");
    let tables = TableOptions { shard: ShardTables::Off, budget_bytes: None, on_device: tables_on_device() };
    let optimizer = OptimizerConfig { update_on_device: update_on_device(), ..optimizer.clone() };
    DataParallel::with_tables(model, Loss::BinaryCrossEntropy, &optimizer, None, &tables)
        .expect("the step builds")
}

/// Where `GPU_CHECK_UPDATE` runs the variables' update: `device`, `host`, or (unset or
/// `auto`) where the engine decides.
fn update_on_device() -> Option<bool> {
    on_device("GPU_CHECK_UPDATE", "host")
}

/// Where a step's variables were updated, for the result lines.
fn update_name<M: Model>(dp: &DataParallel<M>) -> &'static str {
    if dp.update_on_device() { "device" } else { "host" }
}

/// Where `GPU_CHECK_TABLES` puts the embedding tables: `device`, `memory`, or (unset or
/// `auto`) where the engine decides.
fn tables_on_device() -> Option<bool> {
    on_device("GPU_CHECK_TABLES", "memory")
}

/// The setting `variable` names: `device`, `elsewhere` (the host's word for the thing), or
/// (unset or `auto`) None.
fn on_device(variable: &str, elsewhere: &str) -> Option<bool> {
    match std::env::var(variable).as_deref() {
        Ok("device") => Some(true),
        Ok(word) if word == elsewhere => Some(false),
        Ok("auto") | Err(_) => None,
        Ok(other) => panic!("{variable}={other}: use device, {elsewhere} or auto"),
    }
}

/// Where a step's tables were, for the result lines.
fn tables_name<M: Model>(dp: &DataParallel<M>) -> &'static str {
    if dp.tables_on_device() { "device" } else { "memory" }
}

/// Whether parameters that ended `diff` apart at most (the largest being `scale`), `over`
/// of `count` of them by more than 1e-4 of `scale`, are the same training: for SGD and
/// Adagrad, whose steps are proportional to the gradient, every one within 1e-4 of `scale`;
/// for Adam and FTRL, which scale each value's step by its own gradient's size, a few
/// (at most 1%) may be up to `steps` steps of the learning rate apart: a value the loss
/// hardly depends on has a gradient at rounding level, and gets a whole step whose sign is
/// the rounding's.
fn same_training(
    rule: &str,
    lr: f32,
    steps: usize,
    scale: f64,
    diff: f64,
    over: usize,
    count: usize,
) -> bool {
    match rule {
        "adam" | "lazy_adam" | "ftrl" => {
            diff <= 1e-4 * scale || (diff <= f64::from(lr) * steps as f64 && over * 100 <= count)
        }
        _ => diff <= 1e-4 * scale,
    }
}

fn exact(a: &str, b: &str, steps: usize) -> ExitCode {
    let (da, db) = (open(a), open(b));
    let (mut worst_loss, mut worst, mut failed) = (0.0f64, 0.0f64, false);
    println!(
        "{:<20} {:<10} {:>13} {:>14} {:>16}  worst parameter",
        "model", "rule", "loss rel diff", "param rel diff", "params over 1e-4"
    );
    for (name, kind) in models() {
        let spec = spec(name);
        let batches: Vec<_> =
            (0..steps).map(|s| spec.encode(&rows(&spec, 256, s as u64 + 1)).expect("encodes")).collect();
        for (rule_name, rule, sparse) in rules() {
            let mut optimizer = OptimizerConfig::new(rule);
            optimizer.sparse_tables = sparse;
            let mut runs = Vec::new();
            let mut losses = Vec::new();
            let mut entries = Vec::new();
            for device in [&da, &db] {
                let mut dp = data_parallel(&kind, &spec, device, &optimizer);
                let mut trail = Vec::new();
                for encoded in &batches {
                    let batch = Batch::from_encoded_on(encoded, device).expect("the batch moves");
                    trail.push(dp.step(Some(&batch)).expect("the step runs").expect("a batch").loss);
                }
                runs.push(dp.full_weights().expect("weights"));
                losses.push(trail);
                entries = dp.model().parameters().entries();
            }
            let loss_diff = losses[0]
                .iter()
                .zip(&losses[1])
                .map(|(x, y)| f64::from((x - y).abs()) / f64::from(x.abs()).max(1e-6))
                .fold(0.0, f64::max);
            let scale = runs[0].iter().fold(0.0f64, |m, w| m.max(f64::from(w.abs()))).max(1e-6);
            let diffs: Vec<f64> =
                runs[0].iter().zip(&runs[1]).map(|(x, y)| f64::from((x - y).abs())).collect();
            let (at, diff) =
                diffs.iter().copied().enumerate().fold((0, 0.0), |m, d| if d.1 > m.1 { d } else { m });
            let over = diffs.iter().filter(|&&d| d > 1e-4 * scale).count();
            let entry =
                entries.iter().find(|e| e.offset <= at && at < e.offset + e.len()).map_or("-", |e| &e.name);
            let same = same_training(rule_name, rule.learning_rate(), steps, scale, diff, over, diffs.len());
            let bad = loss_diff > 1e-4 || !same;
            failed |= bad;
            worst_loss = worst_loss.max(loss_diff);
            worst = worst.max(diff / scale);
            println!(
                "{name:<20} {rule_name:<10} {loss_diff:>13.2e} {:>14.2e} {:>16}  {entry}{}",
                diff / scale,
                format!("{over} of {}", diffs.len()),
                if bad { "  OVER" } else { "" }
            );
        }
    }
    println!(
        "RESULT {}",
        serde_json::json!({"mode": "exact", "a": a, "b": b, "steps": steps, "worst": worst, "worst_loss": worst_loss, "failed": failed})
    );
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

fn step(device_name: &str, rows_per_step: usize, steps: usize, models: &[(&str, ModelKind)]) -> ExitCode {
    let device = open(device_name);
    for (name, kind) in models {
        let spec = spec(name);
        let encoded: Vec<_> =
            (0..8).map(|s| spec.encode(&rows(&spec, rows_per_step, s + 1)).expect("encodes")).collect();
        let mut dp = data_parallel(kind, &spec, &device, &OptimizerConfig::new(Rule::adam(1e-3)));
        let warm = (steps / 10).max(3);
        let mut run = |n: usize| {
            for s in 0..n {
                // Each step moves its batch to the device, as training does.
                let batch =
                    Batch::from_encoded_on(&encoded[s % encoded.len()], &device).expect("the batch moves");
                dp.step(Some(&batch)).expect("the step runs");
            }
        };
        run(warm);
        let started = Instant::now();
        run(steps);
        // A step returns once its loss and norm are on the host; the update may still be
        // queued on the device.
        device.synchronize().expect("the device finishes its work");
        let seconds = started.elapsed().as_secs_f64();
        let line = serde_json::json!({
            "mode": "step", "model": name, "device": device_name, "rows": rows_per_step, "steps": steps,
            "tables": tables_name(&dp), "update": update_name(&dp), "step_ms": seconds * 1e3 / steps as f64,
            "table_rows": table_rows(&spec), "events": events_name(&device),
            "examples_per_sec": (rows_per_step * steps) as f64 / seconds,
        });
        println!("RESULT {line}");
    }
    ExitCode::SUCCESS
}

/// The parts of a step, timed one by one, each until the device has finished it.
fn phases(device_name: &str, rows_per_step: usize, steps: usize, models: &[(&str, ModelKind)]) -> ExitCode {
    let device = open(device_name);
    let done = |t: Instant| -> f64 {
        device.synchronize().expect("the device finishes its work");
        t.elapsed().as_secs_f64() * 1e3
    };
    for (name, kind) in models {
        let spec = spec(name);
        let encoded: Vec<_> =
            (0..8).map(|s| spec.encode(&rows(&spec, rows_per_step, s + 1)).expect("encodes")).collect();
        let mut dp = data_parallel(kind, &spec, &device, &OptimizerConfig::new(Rule::adam(1e-3)));
        let entries = dp.entries().to_vec();
        let mut grads_out = vec![0f32; entries.iter().filter(|e| !e.table).map(|e| e.len()).sum()];
        let mut totals = [0f64; 8];
        let warm = (steps / 10).max(3);
        for s in 0..warm + steps {
            let t = Instant::now();
            let batch =
                Batch::from_encoded_on(&encoded[s % encoded.len()], &device).expect("the batch moves");
            let upload = done(t);
            let t = Instant::now();
            let lookup = dp.lookup_of(&batch).expect("the rows are gathered");
            let gather = done(t);
            let t = Instant::now();
            let logits = dp.model().forward(&batch, lookup.as_ref()).expect("the forward pass runs");
            let forward = done(t);
            let t = Instant::now();
            let loss = dp.loss().compute(&logits, &batch.labels).expect("the loss");
            let grads = loss.backward().expect("the backward pass runs");
            let backward = done(t);
            let t = Instant::now();
            dp.model()
                .parameters()
                .var_grads(&grads, 1.0, &mut grads_out)
                .expect("the variables' gradients come back");
            if let Some(lookup) = &lookup {
                for entry in dp.table_entries() {
                    if let Some(g) = lookup.row_grads(&entry.name, &grads).expect("the rows' gradients") {
                        g.flatten_all().and_then(|g| g.to_vec1::<f32>()).expect("they come back");
                    }
                }
            }
            let download = done(t);
            let t = Instant::now();
            dp.step(Some(&batch)).expect("the step runs");
            let whole = done(t);
            // What the training loop's prefetch thread takes off the step: the batch on the
            // device and its ids placed; then the step that is left.
            let t = Instant::now();
            let prepared =
                Prepared::for_step(&encoded[s % encoded.len()], &dp).expect("the batch is prepared");
            let prepare = done(t);
            let t = Instant::now();
            dp.step_prepared(Some(prepared)).expect("the step runs");
            let prepared_step = done(t);
            let phases = [upload, gather, forward, backward, download, whole, prepare, prepared_step];
            if s >= warm {
                for (total, ms) in totals.iter_mut().zip(phases) {
                    *total += ms;
                }
            }
        }
        let per = |i: usize| totals[i] / steps as f64;
        let line = serde_json::json!({
            "mode": "phases", "model": name, "device": device_name, "rows": rows_per_step, "steps": steps,
            "tables": tables_name(&dp), "update": update_name(&dp),
            "upload_ms": per(0), "lookup_ms": per(1), "forward_ms": per(2), "backward_ms": per(3),
            "grads_to_host_ms": per(4), "step_ms": per(5), "prepare_ms": per(6), "prepared_step_ms": per(7),
            "table_rows": table_rows(&spec), "events": events_name(&device),
        });
        println!("RESULT {line}");
    }
    ExitCode::SUCCESS
}

fn prepare(rows_per_step: usize, batches: usize, models: &[(&str, ModelKind)], buckets: u32) -> ExitCode {
    let batches = batches.max(1);
    for (name, _) in models {
        let spec = spec_of(name, buckets);
        let encoded: Vec<_> =
            (0..8).map(|s| spec.encode(&rows(&spec, rows_per_step, s + 1)).expect("encodes")).collect();
        let median = |gather: Gather| {
            let mut times: Vec<f64> = (0..batches)
                .map(|b| {
                    let t = Instant::now();
                    let prepared = Prepared::with_layout(&encoded[b % encoded.len()], &Device::Cpu, gather)
                        .expect("the batch is prepared");
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    drop(prepared);
                    ms
                })
                .collect();
            times.sort_by(f64::total_cmp);
            times[times.len() / 2]
        };
        let line = serde_json::json!({
            "mode": "prepare", "model": name, "rows": rows_per_step, "batches": batches, "buckets": buckets,
            "cpu_layout_ms": median(Gather::Distinct), "gpu_layout_ms": median(Gather::PerPosition),
        });
        println!("RESULT {line}");
    }
    ExitCode::SUCCESS
}

/// Writes `files` Parquet files of `rows_each` rows for `spec` into `folder`.
fn write_parquet(folder: &std::path::Path, spec: &FeatureSpec, files: usize, rows_each: usize) {
    std::fs::create_dir_all(folder).expect("the folder");
    for f in 0..files {
        let batch = rows(spec, rows_each, f as u64 + 100);
        let file = std::fs::File::create(folder.join(format!("part-{f}.parquet"))).expect("the file");
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).expect("the writer");
        writer.write(&batch).expect("writes");
        writer.close().expect("closes");
    }
}

fn config_for(kind: ModelKind, device: &str, rows_per_step: usize) -> TrainerConfig {
    let mut config = TrainerConfig::new(kind, OptimizerConfig::new(Rule::adam(1e-3)));
    config.device = device.into();
    config.batch_size = rows_per_step;
    config.shuffle_buffer = 0;
    config.log_every = u64::MAX / 2;
    config.tables_on_device = tables_on_device();
    config.optimizer.update_on_device = update_on_device();
    config
}

/// Four Parquet files under `dir`/`name` holding ten batches more than `steps`; their folder.
fn training_files(
    dir: &std::path::Path,
    name: &str,
    spec: &FeatureSpec,
    rows_per_step: usize,
    steps: usize,
) -> String {
    let folder = dir.join(name);
    write_parquet(&folder, spec, 4, rows_per_step * (steps + 10).div_ceil(4));
    folder.to_string_lossy().into_owned()
}

/// The steps of one progress line in the `trainer` mode.
const WINDOW: u64 = 10;

fn trainer(device: &str, rows_per_step: usize, steps: usize, models: &[(&str, ModelKind)]) -> ExitCode {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (name, kind) in models {
        let spec = spec(name);
        let path = training_files(dir.path(), name, &spec, rows_per_step, steps);
        // Progress every ten steps: the rate counts from the second window on, past the
        // first steps' start-up (the input's first files, the first kernels' compilation),
        // as the `step` mode's warm-up steps are left out of its rate.
        let mut config = config_for(kind.clone(), device, rows_per_step);
        config.log_every = WINDOW;
        let mut trainer = match Trainer::new(config, spec, None) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        let input = Input::open(&path, 1, 0, trainer.config().input_options()).expect("the input opens");
        let mut seconds = Vec::new();
        let mut on_log = |line: &LogLine| {
            seconds.push((WINDOW as usize * rows_per_step) as f64 / line.examples_per_sec);
            Ok(())
        };
        let mut hooks = Hooks { on_log: &mut on_log, on_eval: None };
        let options =
            FitOptions { epochs: 1, max_steps: Some(steps as u64 + WINDOW), ..FitOptions::default() };
        let summary = trainer.fit(&input, &options, None, &mut hooks).expect("training runs");
        let steady = &seconds[1.min(seconds.len())..];
        let steady_rate =
            (steady.len() * WINDOW as usize * rows_per_step) as f64 / steady.iter().sum::<f64>();
        let line = serde_json::json!({
            "mode": "trainer", "model": name, "device": device, "rows": rows_per_step,
            "tables": tables_name(trainer.data_parallel()), "update": update_name(trainer.data_parallel()),
            "steps": summary.new_steps, "examples_per_sec": steady_rate,
            "whole_fit_examples_per_sec": summary.examples_per_sec,
        });
        println!("RESULT {line}");
    }
    ExitCode::SUCCESS
}

/// The `trainer` mode's loop, timed on the training thread: waiting for each prepared batch,
/// and stepping on it.
fn training_loop(
    device_name: &str,
    rows_per_step: usize,
    steps: usize,
    models: &[(&str, ModelKind)],
) -> ExitCode {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let device = open(device_name);
    for (name, kind) in models {
        let spec = spec(name);
        let path = training_files(dir.path(), name, &spec, rows_per_step, steps);
        let config = config_for(kind.clone(), device_name, rows_per_step);
        let input = Input::open(&path, 1, 0, config.input_options()).expect("the input opens");
        let mut dp = data_parallel(kind, &spec, &device, &OptimizerConfig::new(Rule::adam(1e-3)));
        let batches = input.epoch(0, &Arc::new(spec)).expect("the epoch starts");
        let mut prepared = Prefetch::for_step(batches, &dp).expect("the prefetch starts");
        // As the `trainer` mode's rate, past the first window of ten steps.
        let warm = WINDOW as usize;
        let (mut waiting, mut stepping, mut examples) = (0f64, 0f64, 0u64);
        let mut timed_from = Instant::now();
        for s in 0..warm + steps {
            if s == warm {
                (waiting, stepping, examples, timed_from) = (0.0, 0.0, 0, Instant::now());
            }
            let t = Instant::now();
            let Some(batch) = prepared.next() else { break };
            let batch = batch.expect("a prepared batch");
            let waited = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let stats = dp.step_prepared(Some(batch)).expect("the step runs").expect("a step");
            stepping += t.elapsed().as_secs_f64();
            waiting += waited;
            examples += stats.examples;
        }
        let timed = (examples / rows_per_step as u64).max(1) as f64;
        let line = serde_json::json!({
            "mode": "loop", "model": name, "device": device_name, "rows": rows_per_step,
            "tables": tables_name(&dp), "update": update_name(&dp), "events": events_name(&device),
            "examples_per_sec": examples as f64 / timed_from.elapsed().as_secs_f64(),
            "wait_ms": waiting * 1e3 / timed, "step_ms": stepping * 1e3 / timed,
        });
        println!("RESULT {line}");
    }
    ExitCode::SUCCESS
}

/// The `trainer` mode's input pipeline alone: the examples per second it feeds.
fn input(rows_per_step: usize, steps: usize, models: &[(&str, ModelKind)]) -> ExitCode {
    let dir = tempfile::tempdir().expect("a temporary folder");
    for (name, kind) in models {
        let spec = spec(name);
        let path = training_files(dir.path(), name, &spec, rows_per_step, steps);
        let config = config_for(kind.clone(), "cpu", rows_per_step);
        let input = Input::open(&path, 1, 0, config.input_options()).expect("the input opens");
        let spec = Arc::new(spec);
        let (mut examples, mut started) = (0usize, None);
        for (i, encoded) in input.epoch(0, &spec).expect("the epoch starts").enumerate() {
            let batch = Batch::from_encoded(&encoded.expect("a batch")).expect("the batch's tensors");
            // The first batches fill the prefetch queue: the rate counts from the tenth on.
            if i == 10 {
                started = Some(Instant::now());
            } else if i > 10 {
                examples += batch.rows().expect("rows");
            }
        }
        let seconds = started.map_or(f64::NAN, |t| t.elapsed().as_secs_f64());
        let line = serde_json::json!({
            "mode": "input", "model": name, "rows": rows_per_step, "examples_per_sec": examples as f64 / seconds,
        });
        println!("RESULT {line}");
    }
    ExitCode::SUCCESS
}

/// Starts `workers` copies of this program as `job-worker`s, at once, and checks that they
/// trained to the same parameters.
fn job(device: &str, workers: usize, steps: usize) -> ExitCode {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let data = dir.path().join("data");
    write_parquet(&data, &spec("wide_deep"), workers * 2, 256 * (steps + 10).div_ceil(2));
    // Free ports for the ring, found by binding and letting go (each worker binds its own).
    let peers: Vec<String> = (0..workers)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string())
        .collect();
    let exe = std::env::current_exe().expect("this program");
    let mut children: Vec<_> = (0..workers)
        .map(|rank| {
            Command::new(&exe)
                .args(["job-worker", device, &rank.to_string(), &steps.to_string()])
                .arg(&data)
                .args(&peers)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("a worker starts")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    while children.iter_mut().any(|c| c.try_wait().expect("waits").is_none()) {
        if Instant::now() > deadline {
            children.iter_mut().for_each(|c| drop(c.kill()));
            eprintln!("the job's workers did not finish within 300 s");
            return ExitCode::FAILURE;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut reports = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("its output");
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(line) = text.lines().find_map(|l| l.strip_prefix("WORKER ")) else {
            eprintln!("worker {rank} failed ({}): {text}", out.status);
            return ExitCode::FAILURE;
        };
        reports.push(serde_json::from_str::<serde_json::Value>(line).expect("its report"));
    }
    let same = reports.iter().all(|r| r["weights"] == reports[0]["weights"]);
    let rate: f64 = reports.iter().map(|r| r["examples_per_sec"].as_f64().unwrap_or(0.0)).sum();
    let line = serde_json::json!({
        "mode": "job", "model": "wide_deep", "device": device, "workers": workers, "rows": 256,
        "examples_per_sec": rate, "same_parameters": same,
    });
    println!("RESULT {line}");
    if same { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// One worker of `job`: `DEVICE RANK STEPS DATA PEER...`.
fn job_worker(args: &[String]) -> ExitCode {
    let (device, rank, steps, data, peers) = (
        &args[0],
        args[1].parse::<usize>().expect("rank"),
        args[2].parse::<u64>().expect("steps"),
        &args[3],
        args[4..].to_vec(),
    );
    let workers = peers.len();
    let listener = std::net::TcpListener::bind(&peers[rank]).expect("its port");
    let config = Config::new(rank, peers, b"gpu-check".to_vec(), Duration::from_secs(120));
    let ring = shared(Communicator::connect(listener, config).expect("the ring"));
    let mut trainer = Trainer::new(
        config_for(ModelKind::WideDeep { dim: DIM, hidden: vec![256, 256] }, device, 256),
        spec("wide_deep"),
        Some(ring),
    )
    .unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    let input = Input::open(data, workers, rank, trainer.config().input_options()).expect("the input opens");
    let mut on_log = |_: &_| Ok(());
    let mut hooks = Hooks { on_log: &mut on_log, on_eval: None };
    let options = FitOptions { epochs: 1, max_steps: Some(steps), ..FitOptions::default() };
    let summary = trainer.fit(&input, &options, None, &mut hooks).expect("training runs");
    // A digest of the parameters' bits: equal on every worker of a synchronous job.
    let weights = trainer.data_parallel().full_weights().expect("weights");
    let digest = weights
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, w| (h ^ u64::from(w.to_bits())).wrapping_mul(0x100_0000_01b3));
    let line = serde_json::json!({"examples_per_sec": summary.examples_per_sec, "steps": summary.new_steps, "weights": format!("{digest:016x}")});
    println!("WORKER {line}");
    ExitCode::SUCCESS
}

/// Comma-separated whole numbers.
fn numbers(list: &str) -> Vec<usize> {
    list.split(',').map(|n| n.trim().parse().expect("a whole number")).collect()
}

/// An all-reduce contender's ring: `local` (the default: ranks on one host over unix-domain
/// sockets), `sealed` or `clear` (TCP over loopback as between hosts), each optionally with
/// `-xK` for K parallel rings. Returns (local, sealed, streams).
fn reducer(contender: &str) -> Option<(bool, bool, usize)> {
    let (kind, streams) = match contender.split_once("-x") {
        Some((kind, k)) => (kind, k.parse().ok().filter(|k| (1..=MAX_STREAMS).contains(k))?),
        None => (contender, 1),
    };
    match kind {
        "local" => Some((true, true, streams)),
        "sealed" => Some((false, true, streams)),
        "clear" => Some((false, false, streams)),
        _ => None,
    }
}

/// Starts RANKS `allreduce-rank` processes for every count in `ranks`, for every contender
/// named in `contenders` (see [`reducer`]), and prints rank 0's median call time and the bus
/// bandwidth for every size in `mib`.
fn all_reduce(ranks: &str, mib: &str, contenders: &str) -> ExitCode {
    let sizes: Vec<String> = numbers(mib).iter().map(|m| (m << 20).to_string()).collect();
    let contenders: Vec<&str> = contenders.split(',').map(str::trim).collect();
    if let Some(unknown) = contenders.iter().find(|c| reducer(c).is_none()) {
        eprintln!(
            "no all-reduce contender {unknown:?}: local, sealed or clear, optionally -x1 to -x{MAX_STREAMS}"
        );
        return ExitCode::FAILURE;
    }
    let exe = std::env::current_exe().expect("this program");
    for n in numbers(ranks) {
        for &contender in &contenders {
            // Free ports for the ring, found by binding and letting go (each rank binds its own).
            let peers: Vec<String> = (0..n)
                .map(|_| {
                    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
                })
                .collect();
            let children: Vec<_> = (0..n)
                .map(|rank| {
                    Command::new(&exe)
                        .args(["allreduce-rank", &rank.to_string(), contender, &sizes.join(",")])
                        .args(&peers)
                        .stdout(std::process::Stdio::piped())
                        .spawn()
                        .expect("a rank starts")
                })
                .collect();
            let mut outputs = Vec::new();
            for child in children {
                outputs.push(child.wait_with_output().expect("its output"));
            }
            if let Some(failed) = outputs.iter().find(|o| !o.status.success()) {
                eprintln!("a rank failed ({}) with {n} ranks, {contender}", failed.status);
                return ExitCode::FAILURE;
            }
            let text = String::from_utf8_lossy(&outputs[0].stdout).into_owned();
            for line in text.lines().filter_map(|l| l.strip_prefix("TIME ")) {
                let (bytes, seconds): (usize, f64) = serde_json::from_str(line).expect("a timing");
                let busbw = 2.0 * (n - 1) as f64 / n as f64 * bytes as f64 / seconds / 1e9;
                let line = serde_json::json!({
                    "mode": "allreduce", "contender": contender, "ranks": n,
                    "bytes": bytes, "seconds": seconds, "busbw_gbs": busbw,
                });
                println!("RESULT {line}");
            }
        }
    }
    ExitCode::SUCCESS
}

/// One rank of `allreduce`: `RANK CONTENDER SIZES PEER...` (a contender as [`reducer`] reads
/// it); rank 0 prints `TIME [bytes, median seconds]` per size.
fn all_reduce_rank(args: &[String]) -> ExitCode {
    let rank: usize = args[0].parse().expect("rank");
    let (local, sealed, streams) = reducer(&args[1]).expect("a contender all_reduce checked");
    let peers = args[3..].to_vec();
    let listener = std::net::TcpListener::bind(&peers[rank]).expect("its port");
    let config = Config {
        sealed,
        local,
        streams,
        ..Config::new(rank, peers, b"gpu-check".to_vec(), Duration::from_secs(120))
    };
    let mut ring = Communicator::connect(listener, config).expect("the ring");
    for bytes in numbers(&args[2]) {
        let mut data = vec![1.0f32; bytes / 4];
        for _ in 0..3 {
            ring.all_reduce(&mut data, sparktrain_collective::ReduceOp::Sum).expect("warms up");
        }
        let calls = if bytes >= 16 << 20 { 10 } else { 100 };
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls {
            ring.barrier().expect("a barrier");
            let started = Instant::now();
            ring.all_reduce(&mut data, sparktrain_collective::ReduceOp::Sum).expect("sums");
            times.push(started.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        if rank == 0 {
            println!("TIME {}", serde_json::json!([bytes, times[calls / 2]]));
        }
    }
    ExitCode::SUCCESS
}
