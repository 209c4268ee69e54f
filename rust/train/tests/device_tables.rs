//! Embedding tables kept on the model's device train exactly as tables in main memory do:
//! under every update rule (single ids and mean-pooled multi-hot lists), with updates of the
//! touched rows or of every row, penalties, clipping and a schedule, on one worker and on two;
//! a checkpoint written from either resumes in the other; and the training loop's best model,
//! checkpoints and export are the same wherever the tables lived. The same holds for the
//! variables' update on the device (`OptimizerConfig::update_on_device`), for models with
//! tables and without. The tests keep the tables and the update "on the device" on the CPU,
//! which runs the same tensor code a GPU does.

mod support;

use std::collections::HashMap;

use sparktrain_dataset::ExampleFileWriter;
use sparktrain_train::{
    Batch, CheckpointOptions, DataParallel, Dcn, Decay, DeepFm, EmbeddingConfig, GradientWire, Loss, Mlp,
    Model, OptimizerConfig, Penalty, Progress, Regularization, Rule, Schedule, ShardTables, TableOptions,
    WideDeep,
};
use sparktrain_train::{
    EarlyStopping, Exported, FitOptions, Hooks, Input, ModelKind, Monitor, Trainer, TrainerConfig,
};
use support::{on_workers, tagged_rows as rows, tagged_spec as spec};

/// Rows `range`: low shop ids are hot, so a batch touches some rows many times and most
/// rows never; each row has 0 to 3 tags, pooled by their mean.
fn batch(range: std::ops::Range<u64>) -> Batch {
    Batch::from_encoded(&spec().encode(&rows(range)).unwrap()).unwrap()
}

fn model() -> WideDeep {
    WideDeep::new(&spec(), &EmbeddingConfig { dim: 4, hidden: vec![8], cross_layers: 0, seed: 3 }).unwrap()
}

fn tables(on_device: bool) -> TableOptions {
    TableOptions { shard: ShardTables::Off, budget_bytes: None, on_device: Some(on_device) }
}

/// Every rule and setting the tables' update takes, each with a name for failures.
fn optimizers() -> Vec<(&'static str, OptimizerConfig)> {
    let sgd = Rule::Sgd { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.01 };
    let adam =
        Rule::Adam { lr: 0.01, beta1: 0.8, beta2: 0.99, eps: 1e-6, weight_decay: 0.02, decoupled: false };
    let penalties = Regularization {
        kernel: Penalty { l1: 0.0, l2: 0.001 },
        bias: Penalty::default(),
        embedding: Penalty { l1: 0.0005, l2: 0.002 },
    };
    let schedule = Schedule { warmup_steps: 3, decay: Decay::Constant };
    vec![
        ("sgd", OptimizerConfig::new(Rule::sgd(0.3))),
        ("sgd with Nesterov momentum and decay", OptimizerConfig::new(sgd)),
        ("adam", OptimizerConfig::new(Rule::adam(0.02))),
        ("adam with decay", OptimizerConfig::new(adam)),
        ("adamw", OptimizerConfig::new(Rule::adamw(0.02, 0.05))),
        ("adagrad", OptimizerConfig::new(Rule::adagrad(0.2))),
        ("ftrl", OptimizerConfig::new(Rule::ftrl(0.2, 0.01, 0.01))),
        (
            "adam, ftrl on the wide part, penalties, clipping and warm-up",
            OptimizerConfig {
                wide: Some(Rule::ftrl(0.1, 0.001, 0.002)),
                clip_norm: Some(0.05),
                regularization: penalties,
                schedule,
                ..OptimizerConfig::new(Rule::adam(0.02))
            },
        ),
    ]
}

/// The weights of all parameters after `steps` steps of `workers` workers, each with its
/// half of every batch, tables on the device or in memory; and every step's loss and norm.
fn train(
    optimizer: &OptimizerConfig,
    on_device: bool,
    workers: usize,
    steps: u64,
) -> (Vec<f32>, Vec<(f32, f32)>) {
    let optimizer = optimizer.clone();
    let runs = on_workers(workers, move |w, ring| {
        let mut dp = DataParallel::with_tables(
            model(),
            Loss::BinaryCrossEntropy,
            &optimizer,
            ring,
            &tables(on_device),
        )
        .unwrap();
        assert_eq!(dp.tables_on_device(), on_device);
        let share = 64 / workers as u64;
        let stats: Vec<(f32, f32)> = (0..steps)
            .map(|s| {
                let start = s * 64 + w as u64 * share;
                let stats = dp.step(Some(&batch(start..start + share))).unwrap().unwrap();
                (stats.loss, stats.grad_norm)
            })
            .collect();
        (dp.full_weights().unwrap(), stats)
    });
    runs.into_iter().next().unwrap()
}

#[test]
fn tables_on_the_device_train_bit_for_bit_as_tables_in_memory() {
    for (name, optimizer) in optimizers() {
        for sparse_tables in [true, false] {
            let optimizer = OptimizerConfig { sparse_tables, ..optimizer.clone() };
            for workers in [1, 2] {
                let (memory, memory_stats) = train(&optimizer, false, workers, 6);
                let (device, device_stats) = train(&optimizer, true, workers, 6);
                let case = format!("{name}, sparse_tables={sparse_tables}, {workers} worker(s)");
                assert_eq!(device_stats, memory_stats, "{case}: losses and norms");
                let all = model().parameters().entries();
                let differing = memory.iter().zip(&device).position(|(a, b)| a.to_bits() != b.to_bits());
                if let Some(i) = differing {
                    let e = all.iter().find(|e| e.offset <= i && i < e.offset + e.len()).expect("an entry");
                    let (at, ours, theirs) = (i - e.offset, device[i], memory[i]);
                    panic!(
                        "{case}: '{}'[{at}] is {ours} with tables on the device, {theirs} in memory",
                        e.name
                    );
                }
            }
        }
    }
}

/// Steps `from` to `to` of one worker, 64 rows each.
fn run_steps<M: Model>(dp: &mut DataParallel<M>, from: u64, to: u64) {
    for s in from..to {
        dp.step(Some(&batch(s * 64..s * 64 + 64))).unwrap();
    }
}

#[test]
fn a_checkpoint_from_either_place_resumes_in_the_other() {
    let optimizer = OptimizerConfig {
        wide: Some(Rule::ftrl(0.1, 0.001, 0.002)),
        ..OptimizerConfig::new(Rule::adam(0.02))
    };
    let make = |on_device| {
        DataParallel::with_tables(model(), Loss::BinaryCrossEntropy, &optimizer, None, &tables(on_device))
            .unwrap()
    };
    let mut straight = make(false);
    run_steps(&mut straight, 0, 8);
    let expected = straight.full_weights().unwrap();
    for (written_on_device, read_on_device) in [(true, false), (false, true), (true, true)] {
        let dir = tempfile::tempdir().unwrap();
        let model_dir = dir.path().to_str().unwrap();
        let mut first = make(written_on_device);
        run_steps(&mut first, 0, 4);
        let progress = Progress { step: 4, workers: 1, ..Progress::default() };
        first.save_checkpoint(model_dir, progress, &CheckpointOptions::default()).unwrap();
        let mut resumed = make(read_on_device);
        assert_eq!(resumed.restore(model_dir).unwrap().map(|p| p.step), Some(4));
        assert_eq!(resumed.optimizers().steps(), 4);
        run_steps(&mut resumed, 4, 8);
        let case = format!("written with tables on the device: {written_on_device}, read: {read_on_device}");
        assert!(resumed.full_weights().unwrap() == expected, "{case}: the resumed run differs");
    }
}

#[test]
fn a_snapshot_puts_back_the_tables_on_the_device() {
    let optimizer = OptimizerConfig::new(Rule::adagrad(0.2));
    let model =
        DeepFm::new(&spec(), &EmbeddingConfig { dim: 4, hidden: vec![8], cross_layers: 0, seed: 9 }).unwrap();
    let mut dp =
        DataParallel::with_tables(model, Loss::BinaryCrossEntropy, &optimizer, None, &tables(true)).unwrap();
    for s in 0..3 {
        dp.step(Some(&batch(s * 64..s * 64 + 64))).unwrap();
    }
    let (snapshot, at_snapshot) = (dp.snapshot().unwrap(), dp.full_weights().unwrap());
    let test = batch(10_000..10_256);
    let logits = dp.logits(&test).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for s in 3..6 {
        dp.step(Some(&batch(s * 64..s * 64 + 64))).unwrap();
    }
    assert!(dp.full_weights().unwrap() != at_snapshot, "training moved the weights");
    dp.put_snapshot(snapshot).unwrap();
    assert!(dp.full_weights().unwrap() == at_snapshot);
    assert_eq!(dp.logits(&test).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap(), logits);
}

#[test]
fn the_variables_alone_are_the_weights_when_the_tables_are_on_the_device() {
    let optimizer = OptimizerConfig::new(Rule::adam(0.01));
    let on_device =
        DataParallel::with_tables(model(), Loss::BinaryCrossEntropy, &optimizer, None, &tables(true))
            .unwrap();
    let in_memory =
        DataParallel::with_tables(model(), Loss::BinaryCrossEntropy, &optimizer, None, &tables(false))
            .unwrap();
    let all = in_memory.model().parameters().entries();
    let vars: usize = all.iter().filter(|e| !e.table).map(|e| e.len()).sum();
    assert_eq!(on_device.weights().unwrap().len(), vars);
    assert!(on_device.entries().iter().all(|e| !e.table));
    assert_eq!(in_memory.weights().unwrap().len(), all.iter().map(|e| e.len()).sum::<usize>());
    assert!(in_memory.weights().unwrap() == on_device.full_weights().unwrap(), "the same starting weights");
    // By default only a device other than the CPU keeps them.
    let default = DataParallel::new(model(), Loss::BinaryCrossEntropy, &optimizer, None).unwrap();
    assert!(!default.tables_on_device());
}

/// Eight TFRecord files of 48 rows under `dir`, from row `first` on.
fn write_files(dir: &std::path::Path, first: u64) -> String {
    for i in 0..8u64 {
        let url = dir.join(format!("part-{i:05}.tfrecord")).to_string_lossy().into_owned();
        let mut w = ExampleFileWriter::create(&url, None, false, HashMap::new()).unwrap();
        w.write_batch(&rows(first + i * 48..first + i * 48 + 48)).unwrap();
        w.commit().unwrap();
    }
    dir.to_string_lossy().into_owned()
}

#[test]
fn the_training_loop_ends_the_same_wherever_the_tables_live() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_files(&dir.path().join("train"), 0);
    let eval = write_files(&dir.path().join("eval"), 50_000);
    let outcome = |on_device: bool, update_on_device: bool| {
        let place = format!("{on_device}-{update_on_device}");
        let model_dir = dir.path().join(format!("model-{place}")).to_string_lossy().into_owned();
        let export_dir = dir.path().join(format!("export-{place}")).to_string_lossy().into_owned();
        let (da, ev, md, ed) = (data.clone(), eval.clone(), model_dir.clone(), export_dir.clone());
        let runs = on_workers(2, move |w, ring| {
            let mut config = TrainerConfig::new(
                ModelKind::WideDeep { dim: 4, hidden: vec![8] },
                OptimizerConfig {
                    wide: Some(Rule::ftrl(0.1, 0.001, 0.002)),
                    update_on_device: Some(update_on_device),
                    ..OptimizerConfig::new(Rule::adam(0.02))
                },
            );
            (config.batch_size, config.shuffle_buffer, config.seed) = (16, 0, 3);
            (config.model_dir, config.checkpoint_every) = (Some(md.clone()), Some(4));
            (config.shard_tables, config.tables_on_device) = (ShardTables::Off, Some(on_device));
            let mut trainer = Trainer::new(config, spec(), ring).unwrap();
            assert_eq!(trainer.data_parallel().tables_on_device(), on_device);
            assert_eq!(trainer.data_parallel().update_on_device(), update_on_device);
            let input = Input::open(&da, 2, w, trainer.config().input_options()).unwrap();
            let eval = Input::open(&ev, 2, w, trainer.config().input_options()).unwrap();
            // No evaluation after the first counts as better: step 2's model is restored.
            let early_stopping =
                EarlyStopping { monitor: Monitor::Loss, patience: 100, min_delta: 1e9, restore_best: true };
            let options = FitOptions {
                epochs: 1,
                max_steps: Some(10),
                eval_every: Some(2),
                early_stopping: Some(early_stopping),
            };
            let mut on_log = |_: &_| Ok(());
            let mut hooks = Hooks { on_log: &mut on_log, on_eval: None };
            let summary = trainer.fit(&input, &options, Some(&eval), &mut hooks).unwrap();
            trainer.export(&ed).unwrap();
            (summary.steps, summary.best.map(|b| b.step), trainer.full_weights().unwrap())
        });
        assert!(runs.iter().all(|r| r == &runs[0]), "every trainer ends alike");
        let (steps, best, weights) = runs.into_iter().next().unwrap();
        assert_eq!((steps, best), (10, Some(2)));
        let exported = Exported::load(&export_dir).unwrap();
        (weights, exported.predict(&rows(90_000..90_064)).unwrap(), model_dir)
    };
    let (memory, memory_scores, memory_dir) = outcome(false, false);
    let (device, device_scores, device_dir) = outcome(true, false);
    assert!(device == memory, "the best model's weights");
    assert_eq!(device_scores, memory_scores, "the exported models' scores");
    let (all, all_scores, all_dir) = outcome(true, true);
    assert!(all == memory, "the best model's weights, the variables updated on the device");
    assert_eq!(all_scores, memory_scores, "the exported models' scores, the variables updated on the device");
    // The last checkpoints (step 10, at the end) hold the same parameters and optimizer state: a run of
    // two more steps from either, with tables in memory, ends alike.
    let resume = |model_dir: &str| {
        let optimizer = OptimizerConfig {
            wide: Some(Rule::ftrl(0.1, 0.001, 0.002)),
            ..OptimizerConfig::new(Rule::adam(0.02))
        };
        let model = ModelKind::WideDeep { dim: 4, hidden: vec![8] }.build(&spec(), 3).unwrap();
        let mut dp =
            DataParallel::with_tables(model, Loss::BinaryCrossEntropy, &optimizer, None, &tables(false))
                .unwrap();
        assert_eq!(dp.restore(model_dir).unwrap().map(|p| p.step), Some(10));
        for s in 0..2 {
            dp.step(Some(&batch(s * 32..s * 32 + 32))).unwrap();
        }
        dp.full_weights().unwrap()
    };
    let from_memory = resume(&memory_dir);
    assert!(resume(&device_dir) == from_memory, "the checkpoints resume alike");
    assert!(resume(&all_dir) == from_memory, "the checkpoint of the update on the device resumes alike");
}

// --- the variables' update on the device ---------------------------------------------------

/// The models the variables' update is checked on: an MLP (no tables), Wide&Deep and DCN
/// (tables on the device), each with a name for failures.
fn models() -> Vec<(&'static str, Make)> {
    vec![
        ("mlp", || Trained::Mlp(Mlp::new(1, &[8, 4], 1, 5).unwrap())),
        ("wide&deep", || Trained::WideDeep(model())),
        ("dcn", || {
            let config = EmbeddingConfig { dim: 4, hidden: vec![8], cross_layers: 2, seed: 4 };
            Trained::Dcn(Dcn::new(&spec(), &config).unwrap())
        }),
    ]
}

/// Builds a fresh model of [`models`].
type Make = fn() -> Trained;

/// A model of [`models`].
enum Trained {
    Mlp(Mlp),
    WideDeep(WideDeep),
    Dcn(Dcn),
}

/// `optimizer` with the variables' update on the device or on the host.
fn update(optimizer: &OptimizerConfig, on_device: bool) -> OptimizerConfig {
    OptimizerConfig { update_on_device: Some(on_device), ..optimizer.clone() }
}

/// A trainer of `model` with `optimizer`, its tables on the device.
fn data_parallel<M: Model>(
    model: M,
    optimizer: &OptimizerConfig,
    ring: Option<sparktrain_train::SharedRing>,
) -> DataParallel<M> {
    DataParallel::with_tables(model, Loss::BinaryCrossEntropy, optimizer, ring, &tables(true)).unwrap()
}

/// The weights of all parameters and every step's loss and norm after `steps` steps of
/// `workers` workers (worker 1 without a batch in the last step when there are two).
fn train_vars<M: Model>(
    dp: &mut DataParallel<M>,
    w: usize,
    workers: usize,
    steps: u64,
) -> (Vec<f32>, Vec<(f32, f32)>) {
    let share = 64 / workers as u64;
    let stats = (0..steps)
        .map(|s| {
            let start = s * 64 + w as u64 * share;
            let last_of_worker_1 = w == 1 && s + 1 == steps;
            let batch = (!last_of_worker_1).then(|| batch(start..start + share));
            let stats = dp.step(batch.as_ref()).unwrap().unwrap();
            (stats.loss, stats.grad_norm)
        })
        .collect();
    (dp.full_weights().unwrap(), stats)
}

/// [`train_vars`] of a fresh model from `make` on `workers` workers with `optimizer`,
/// checking where the update ran; worker 0's result.
fn train_model(make: Make, optimizer: &OptimizerConfig, workers: usize) -> (Vec<f32>, Vec<(f32, f32)>) {
    let optimizer = optimizer.clone();
    let runs = on_workers(workers, move |w, ring| {
        let on_device = optimizer.update_on_device == Some(true);
        match make() {
            Trained::Mlp(m) => {
                let mut dp = data_parallel(m, &optimizer, ring);
                assert_eq!(dp.update_on_device(), on_device);
                train_vars(&mut dp, w, workers, 6)
            }
            Trained::WideDeep(m) => {
                let mut dp = data_parallel(m, &optimizer, ring);
                assert_eq!(dp.update_on_device(), on_device);
                train_vars(&mut dp, w, workers, 6)
            }
            Trained::Dcn(m) => {
                let mut dp = data_parallel(m, &optimizer, ring);
                assert_eq!(dp.update_on_device(), on_device);
                train_vars(&mut dp, w, workers, 6)
            }
        }
    });
    assert!(runs.iter().all(|r| r.0 == runs[0].0), "every worker ends with the same weights");
    runs.into_iter().next().unwrap()
}

/// Fails naming the first parameter whose bits differ between `host` and `device`.
fn assert_same_bits(case: &str, entries: &[sparktrain_train::Entry], host: &[f32], device: &[f32]) {
    assert_eq!(host.len(), device.len(), "{case}: the parameters' count");
    if let Some(i) = host.iter().zip(device).position(|(a, b)| a.to_bits() != b.to_bits()) {
        let e = entries.iter().find(|e| e.offset <= i && i < e.offset + e.len()).expect("an entry");
        let (at, ours, theirs) = (i - e.offset, device[i], host[i]);
        panic!("{case}: '{}'[{at}] is {ours} updated on the device, {theirs} on the host", e.name);
    }
}

fn entries_of(make: Make) -> Vec<sparktrain_train::Entry> {
    match make() {
        Trained::Mlp(m) => m.parameters().entries(),
        Trained::WideDeep(m) => m.parameters().entries(),
        Trained::Dcn(m) => m.parameters().entries(),
    }
}

#[test]
fn the_variables_update_on_the_device_bit_for_bit_as_on_the_host() {
    for (model_name, make) in models() {
        for (name, optimizer) in optimizers() {
            if model_name == "mlp" && optimizer.wide.is_some() {
                continue; // an MLP has no wide part
            }
            for workers in [1, 2] {
                let case = format!("{model_name}, {name}, {workers} worker(s)");
                let (host, host_stats) = train_model(make, &update(&optimizer, false), workers);
                let (device, device_stats) = train_model(make, &update(&optimizer, true), workers);
                assert_eq!(device_stats, host_stats, "{case}: losses and norms");
                assert_same_bits(&case, &entries_of(make), &host, &device);
            }
        }
    }
    // Gradients that travel as bfloat16, and every row of the tables updated each step.
    let bf16 =
        OptimizerConfig { gradient_wire: GradientWire::Bf16, ..OptimizerConfig::new(Rule::adam(0.02)) };
    let dense_tables = OptimizerConfig { sparse_tables: false, ..OptimizerConfig::new(Rule::adam(0.02)) };
    for (case, optimizer) in [("bf16 on the wire", bf16), ("sparse_tables=false", dense_tables)] {
        let (host, host_stats) = train_model(models()[1].1, &update(&optimizer, false), 2);
        let (device, device_stats) = train_model(models()[1].1, &update(&optimizer, true), 2);
        assert_eq!(device_stats, host_stats, "wide&deep, {case}: losses and norms");
        assert_same_bits(&format!("wide&deep, {case}"), &entries_of(models()[1].1), &host, &device);
    }
}

#[test]
fn a_checkpoint_resumes_wherever_the_variables_were_updated() {
    let optimizer = OptimizerConfig {
        wide: Some(Rule::ftrl(0.1, 0.001, 0.002)),
        ..OptimizerConfig::new(Rule::adam(0.02))
    };
    let make = |on_device: bool| data_parallel(model(), &update(&optimizer, on_device), None);
    let make_mlp = |on_device: bool| {
        let optimizer = update(&OptimizerConfig::new(Rule::adam(0.02)), on_device);
        data_parallel(Mlp::new(1, &[8, 4], 1, 5).unwrap(), &optimizer, None)
    };
    // A model without tables resumes through another path.
    checkpoints_resume_across_the_update("wide&deep", make);
    checkpoints_resume_across_the_update("mlp", make_mlp);
}

/// 4 steps with the update on one side, a checkpoint, a resumption on the other side and 4
/// more steps end where 8 steps on the host end; `make(on_device)` builds the trainer.
fn checkpoints_resume_across_the_update<M: Model>(name: &str, make: impl Fn(bool) -> DataParallel<M>) {
    let mut straight = make(false);
    run_steps(&mut straight, 0, 8);
    let expected = straight.full_weights().unwrap();
    for (written_on_device, read_on_device) in [(true, false), (false, true), (true, true)] {
        let case = format!("written updating on the device: {written_on_device}, read: {read_on_device}");
        let progress = Progress { step: 4, workers: 1, ..Progress::default() };
        let dir = tempfile::tempdir().unwrap();
        let model_dir = dir.path().to_str().unwrap();
        let mut first = make(written_on_device);
        run_steps(&mut first, 0, 4);
        first.save_checkpoint(model_dir, progress, &CheckpointOptions::default()).unwrap();
        let mut resumed = make(read_on_device);
        assert_eq!(resumed.restore(model_dir).unwrap().map(|p| p.step), Some(4));
        run_steps(&mut resumed, 4, 8);
        assert!(resumed.full_weights().unwrap() == expected, "{name}, {case}: the resumed run differs");
    }
}

#[test]
fn snapshots_and_given_weights_reach_the_variables_updated_on_the_device() {
    let optimizer = update(&OptimizerConfig::new(Rule::adam(0.02)), true);
    let mut dp = data_parallel(Mlp::new(1, &[8, 4], 1, 5).unwrap(), &optimizer, None);
    assert!(dp.update_on_device());
    // Adam's moments live on the device alone: none are kept in main memory.
    let states = dp.optimizers().state();
    assert!(
        states.iter().all(|g| g.state.buffers.len() == 2 && g.state.buffers.iter().all(|b| b.1.is_empty()))
    );
    let start = dp.weights().unwrap().into_owned();
    run_steps(&mut dp, 0, 3);
    let (snapshot, at_snapshot) = (dp.snapshot().unwrap(), dp.weights().unwrap().into_owned());
    assert!(at_snapshot != start, "training moved the weights");
    let test = batch(10_000..10_256);
    let logits = dp.logits(&test).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    run_steps(&mut dp, 3, 6);
    dp.put_snapshot(snapshot).unwrap();
    assert!(dp.weights().unwrap() == at_snapshot);
    assert_eq!(dp.logits(&test).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap(), logits);
    dp.set_weights(start.clone()).unwrap();
    assert!(dp.weights().unwrap() == start);
    let err = dp.set_weights(vec![0.0; 3]).unwrap_err().to_string();
    assert!(err.contains("3 weights given for"), "{err}");
}

#[test]
fn the_update_goes_to_the_device_only_with_the_tables() {
    let optimizer = update(&OptimizerConfig::new(Rule::adam(0.02)), true);
    let refused =
        DataParallel::with_tables(model(), Loss::BinaryCrossEntropy, &optimizer, None, &tables(false));
    let err = refused.err().expect("tables in memory refuse the update on the device").to_string();
    assert!(err.contains("update_on_device"), "{err}");
    // By default only a device other than the CPU runs it.
    let default = OptimizerConfig::new(Rule::adam(0.02));
    assert!(!data_parallel(model(), &default, None).update_on_device());
    assert!(
        !DataParallel::new(Mlp::new(1, &[4], 1, 5).unwrap(), Loss::BinaryCrossEntropy, &default, None)
            .unwrap()
            .update_on_device()
    );
}
