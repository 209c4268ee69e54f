//! Sharded embedding tables over real rings on 127.0.0.1, one thread per worker: a sharded
//! run ends with the parameters of the replicated run and of one worker with the global batch
//! (within 1e-5), for every rule, with 2, 3 and 4 workers, the same bits on every worker and
//! every run; tables over a worker's budget are refused before training when replicated and
//! train when sharded.

mod support;

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array, ListArray, StringArray};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use sparktrain_train::features::{MultiHot, Pooling};
use sparktrain_train::{
    Batch, Categorical, CheckpointOptions, DataParallel, DeepFm, EmbeddingConfig, FeatureSpec, Loss, Model,
    OptimizerConfig, Penalty, Progress, Regularization, Rule, Schedule, ShardTables, TableOptions,
    TrainError, WideDeep,
};
use sparktrain_train::{Decay, SharedRing};
use support::on_workers;

/// Two categorical columns and a multi-hot one: 64 + 61 + 37 = 162 ids, which no worker count
/// here splits evenly.
fn spec() -> FeatureSpec {
    FeatureSpec {
        dense: vec!["x".into()],
        categorical: vec![
            Categorical { name: "shop".into(), buckets: 64 },
            Categorical { name: "city".into(), buckets: 61 },
        ],
        crossed: vec![],
        multi_hot: vec![MultiHot { name: "tags".into(), buckets: 37, pooling: Pooling::Mean }],
        label: "label".into(),
    }
}

/// Rows `range`: shops drawn from a skewed (Zipf-like) law, so some ids are hot and most are
/// rare, cities uniformly, 0 to 3 tags; the label depends on all three.
fn batch(range: std::ops::Range<u64>) -> Batch {
    let mix = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    let shop: Vec<i64> = range.clone().map(|i| (1000 / (1 + mix(i) % 1000)) as i64).collect();
    let city: Vec<String> = range.clone().map(|i| format!("c{}", mix(i + 7) % 40)).collect();
    let tags: Vec<Vec<i64>> = range
        .clone()
        .map(|i| (0..mix(i + 11) % 4).map(|k| (mix(i + 13 + k) % 30) as i64).collect())
        .collect();
    let label: Vec<i64> = (0..shop.len())
        .map(|r| (((shop[r] % 3 == 0) != (city[r].as_str() < "c2")) != tags[r].contains(&3)) as i64)
        .collect();
    let x: Vec<f32> = range.map(|i| (mix(i + 3) % 100) as f32 / 100.0).collect();
    let lists = tags.into_iter().map(|t| Some(t.into_iter().map(Some).collect::<Vec<_>>()));
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("label", Arc::new(Int64Array::from(label))),
        ("x", Arc::new(Float32Array::from(x))),
        ("shop", Arc::new(Int64Array::from(shop))),
        ("city", Arc::new(StringArray::from(city))),
        ("tags", Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(lists))),
    ];
    Batch::from_encoded(&spec().encode(&RecordBatch::try_from_iter(columns).unwrap()).unwrap()).unwrap()
}

fn model(kind: &str) -> Box<dyn Model> {
    let config = EmbeddingConfig { dim: 4, hidden: vec![8], cross_layers: 0, seed: 9 };
    match kind {
        "wide_deep" => Box::new(WideDeep::new(&spec(), &config).unwrap()),
        _ => Box::new(DeepFm::new(&spec(), &config).unwrap()),
    }
}

const STEPS: u64 = 8;
const GLOBAL_BATCH: u64 = 48;

/// Trains `kind` on `n` workers for [`STEPS`] steps of the global batch split evenly (worker
/// `w` takes its slice of each step's rows), tables placed by `shard`; returns every worker's
/// parameters in the layout of all of them (tables whole) and the last step's gradient norm.
fn train(
    kind: &'static str,
    n: usize,
    optimizer: &OptimizerConfig,
    shard: ShardTables,
) -> Vec<(Vec<f32>, f32)> {
    let optimizer = optimizer.clone();
    on_workers(n, move |w, ring: Option<SharedRing>| {
        let tables = TableOptions { shard, budget_bytes: None, on_device: None };
        let mut dp =
            DataParallel::with_tables(model(kind), Loss::BinaryCrossEntropy, &optimizer, ring, &tables)
                .unwrap();
        assert_eq!(dp.is_sharded(), shard == ShardTables::On);
        let per = GLOBAL_BATCH / n as u64;
        let mut norm = 0.0;
        for s in 0..STEPS {
            let start = s * GLOBAL_BATCH + w as u64 * per;
            let end = if w + 1 == n { (s + 1) * GLOBAL_BATCH } else { start + per };
            norm = dp.step(Some(&batch(start..end))).unwrap().unwrap().grad_norm;
        }
        (dp.full_weights().unwrap(), norm)
    })
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in got.iter().zip(want).enumerate() {
        assert!((x - y).abs() <= 1e-5 * scale, "{what}: parameter {i}: {x} vs {y} (scale {scale})");
    }
}

fn rules() -> Vec<(&'static str, OptimizerConfig)> {
    let with =
        |rule: Rule, sparse_tables: bool| OptimizerConfig { sparse_tables, ..OptimizerConfig::new(rule) };
    vec![
        ("sgd", with(Rule::Sgd { lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0.0 }, true)),
        ("adagrad", with(Rule::adagrad(0.1), true)),
        ("ftrl", with(Rule::ftrl(0.1, 0.001, 0.002), true)),
        ("adam (every row)", with(Rule::adam(0.01), false)),
        ("lazy adam", with(Rule::adam(0.01), true)),
        (
            "adagrad, ftrl wide part, penalties, schedule",
            OptimizerConfig {
                wide: Some(Rule::ftrl(0.05, 0.001, 0.001)),
                schedule: Schedule { warmup_steps: 3, decay: Decay::Cosine { steps: 10, alpha: 0.1 } },
                regularization: Regularization {
                    kernel: Penalty { l1: 1e-4, l2: 1e-3 },
                    embedding: Penalty { l1: 1e-3, l2: 1e-2 },
                    ..Regularization::default()
                },
                ..with(Rule::adagrad(0.05), true)
            },
        ),
    ]
}

#[test]
fn sharded_runs_end_where_replicated_runs_and_one_worker_with_the_global_batch_end() {
    for kind in ["wide_deep", "deep_fm"] {
        for (name, optimizer) in rules() {
            let alone = train(kind, 1, &optimizer, ShardTables::Off);
            for n in [2, 3, 4] {
                let sharded = train(kind, n, &optimizer, ShardTables::On);
                let replicated = train(kind, n, &optimizer, ShardTables::Off);
                for (w, (weights, _)) in sharded.iter().enumerate() {
                    assert!(*weights == sharded[0].0, "{kind} {name} n={n}: worker {w} differs");
                }
                if optimizer.sparse_tables {
                    // The replicated run adds the rows' gradients up in rank order too (its
                    // all-gather path): the same sums in the same order, the same bits.
                    assert!(sharded[0].0 == replicated[0].0, "{kind} {name} n={n}: sharded vs replicated");
                    assert_eq!(sharded[0].1, replicated[0].1, "{kind} {name} n={n}: grad norm");
                } else {
                    // Updating every row, the replicated run all-reduces whole tables along
                    // the ring, which adds three or more workers' values in another order.
                    assert_close(
                        &sharded[0].0,
                        &replicated[0].0,
                        &format!("{kind} {name} n={n}: vs replicated"),
                    );
                }
                assert_close(&sharded[0].0, &alone[0].0, &format!("{kind} {name} n={n}: vs one worker"));
            }
        }
    }
}

#[test]
fn a_sharded_run_gives_the_same_bits_every_time() {
    let optimizer = OptimizerConfig { sparse_tables: false, ..OptimizerConfig::new(Rule::adam(0.01)) };
    let first = train("deep_fm", 3, &optimizer, ShardTables::On);
    let second = train("deep_fm", 3, &optimizer, ShardTables::On);
    assert!(first[0].0 == second[0].0 && first[0].1 == second[0].1);
}

#[test]
fn clipping_counts_the_sharded_rows_in_the_global_norm() {
    // A norm far below the gradient's, so every step is clipped: the factor depends on every
    // owner's rows. The norm is summed in another order than the replicated one: close, not
    // bit for bit.
    let optimizer = OptimizerConfig { clip_norm: Some(0.01), ..OptimizerConfig::new(Rule::sgd(0.5)) };
    let alone = train("wide_deep", 1, &optimizer, ShardTables::Off);
    for n in [2, 3, 4] {
        let sharded = train("wide_deep", n, &optimizer, ShardTables::On);
        let replicated = train("wide_deep", n, &optimizer, ShardTables::Off);
        assert!(sharded.iter().all(|(w, _)| *w == sharded[0].0), "n={n}: workers differ");
        assert!(sharded[0].1 > 0.01 * 10.0, "n={n}: the clipping bites");
        assert!((sharded[0].1 - replicated[0].1).abs() <= 1e-5 * replicated[0].1, "n={n}: grad norm");
        assert_close(&sharded[0].0, &replicated[0].0, &format!("n={n}: vs replicated"));
        assert_close(&sharded[0].0, &alone[0].0, &format!("n={n}: vs one worker"));
    }
}

#[test]
fn workers_whose_data_ran_out_still_answer_for_their_rows() {
    // Worker 1 has one batch, worker 0 three: in the later steps worker 1 only owns rows.
    let run = |shard| {
        let optimizer = OptimizerConfig::new(Rule::adagrad(0.1));
        on_workers(2, move |w, ring| {
            let tables = TableOptions { shard, budget_bytes: None, on_device: None };
            let mut dp = DataParallel::with_tables(
                model("wide_deep"),
                Loss::BinaryCrossEntropy,
                &optimizer,
                ring,
                &tables,
            )
            .unwrap();
            let batches: Vec<Batch> = if w == 0 {
                (0..3).map(|s| batch(s * 20..s * 20 + 20)).collect()
            } else {
                vec![batch(500..517)]
            };
            let mut next = batches.iter();
            let mut examples = Vec::new();
            while let Some(stats) = dp.step(next.next()).unwrap() {
                examples.push(stats.examples);
            }
            let eval: Vec<sparktrain_train::Result<Batch>> = if w == 0 {
                vec![Ok(batch(900..930)), Ok(batch(930..940))]
            } else {
                vec![Ok(batch(940..950))]
            };
            let metrics = dp.evaluate(eval).unwrap();
            (examples, dp.full_weights().unwrap(), metrics.examples, metrics.loss)
        })
    };
    let sharded = run(ShardTables::On);
    let replicated = run(ShardTables::Off);
    assert_eq!(sharded[0].0, vec![37, 20, 20]);
    assert_eq!(sharded[1].0, sharded[0].0);
    assert!(sharded[0].1 == replicated[0].1 && sharded[1].1 == replicated[0].1);
    assert_eq!(sharded[0].2, 50);
    assert_eq!(sharded[0].3, replicated[0].3, "the evaluation's loss");
}

#[test]
fn tables_over_the_budget_are_refused_replicated_and_train_sharded() {
    // 162 rows × (4 + 1) values with Adam (m, v): 162 × 5 × 3 × 4 = 9720 bytes in all, 2460
    // on the worker with the largest of four shares.
    let optimizer = OptimizerConfig::new(Rule::adam(0.01));
    let budget = Some(4000);
    let outcomes = on_workers(4, move |w, ring| {
        let refused = DataParallel::with_tables(
            model("wide_deep"),
            Loss::BinaryCrossEntropy,
            &optimizer,
            ring.clone(),
            &TableOptions { shard: ShardTables::Off, budget_bytes: budget, on_device: None },
        )
        .err()
        .expect("over budget");
        let mut dp = DataParallel::with_tables(
            model("wide_deep"),
            Loss::BinaryCrossEntropy,
            &optimizer,
            ring,
            &TableOptions { shard: ShardTables::Auto, budget_bytes: budget, on_device: None },
        )
        .unwrap();
        let placement = dp.placement();
        let stats = dp.step(Some(&batch(w as u64 * 12..w as u64 * 12 + 12))).unwrap().unwrap();
        (refused, placement, stats.examples)
    });
    for (refused, placement, examples) in outcomes {
        assert!(matches!(
            refused,
            TrainError::TablesOverBudget { needed: 9720, budget: 4000, sharded: false, .. }
        ));
        let text = refused.to_string();
        assert!(text.contains("9.49 KiB (9720 bytes)") && text.contains("3.91 KiB (4000 bytes)"), "{text}");
        assert!(
            text.contains("shard_tables='auto' or 'on'") && text.contains("table_budget_bytes"),
            "{text}"
        );
        assert!(placement.sharded && placement.bytes == 2460, "{placement:?}");
        assert_eq!(examples, 48);
    }
}

/// Trains `kind` for steps `from..to` of the global batch on `n` workers, tables placed by
/// `shard`, after restoring the checkpoint in `restore_from` if given; saves a checkpoint of
/// step `to` into `save_to` if given (files of at most 200 bytes: several per owner). Returns
/// every worker's parameters in the layout of all of them.
#[allow(clippy::too_many_arguments)]
fn train_between(
    kind: &'static str,
    n: usize,
    optimizer: &OptimizerConfig,
    shard: ShardTables,
    steps: std::ops::Range<u64>,
    restore_from: Option<String>,
    save_to: Option<String>,
) -> Vec<Vec<f32>> {
    let optimizer = optimizer.clone();
    on_workers(n, move |w, ring| {
        let tables = TableOptions { shard, budget_bytes: None, on_device: None };
        let mut dp =
            DataParallel::with_tables(model(kind), Loss::BinaryCrossEntropy, &optimizer, ring, &tables)
                .unwrap();
        if let Some(dir) = &restore_from {
            let progress = dp.restore(dir).unwrap().expect("a checkpoint");
            assert_eq!(progress.step, steps.start);
            assert_eq!(dp.optimizers().steps(), steps.start);
        }
        let per = GLOBAL_BATCH / n as u64;
        for s in steps.clone() {
            let start = s * GLOBAL_BATCH + w as u64 * per;
            let end = if w + 1 == n { (s + 1) * GLOBAL_BATCH } else { start + per };
            dp.step(Some(&batch(start..end))).unwrap().unwrap();
        }
        if let Some(dir) = &save_to
            && (dp.is_sharded() || w == 0)
        {
            let progress = Progress { step: steps.end, workers: n as u64, ..Progress::default() };
            let options = CheckpointOptions { max_shard_bytes: 200, keep: 2, ..CheckpointOptions::default() };
            dp.save_checkpoint(dir, progress, &options).unwrap();
        }
        dp.full_weights().unwrap()
    })
}

#[test]
fn a_checkpoint_of_four_owners_restores_onto_three_rehashed() {
    for (name, optimizer) in rules() {
        let alone = train_between("deep_fm", 1, &optimizer, ShardTables::Off, 0..STEPS, None, None);
        let mut ends = Vec::new();
        for (before, after) in [(ShardTables::On, ShardTables::On), (ShardTables::Off, ShardTables::Off)] {
            let dir = tempfile::tempdir().unwrap();
            let model_dir = dir.path().join("model").to_string_lossy().into_owned();
            let half = STEPS / 2;
            let saved = Some(model_dir.clone());
            train_between("deep_fm", 4, &optimizer, before, 0..half, None, saved.clone());
            let resumed = train_between("deep_fm", 3, &optimizer, after, half..STEPS, saved, None);
            assert!(resumed.iter().all(|w| *w == resumed[0]), "{name}: workers differ");
            assert_close(&resumed[0], &alone[0], &format!("{name} {before:?} → {after:?}: vs one worker"));
            ends.push(resumed.into_iter().next().unwrap());
        }
        if optimizer.sparse_tables {
            assert!(ends[0] == ends[1], "{name}: the sharded and replicated runs across a restore differ");
        } else {
            assert_close(&ends[0], &ends[1], &format!("{name}: sharded vs replicated across a restore"));
        }
    }
}

#[test]
fn sharded_and_replicated_checkpoints_restore_into_each_other() {
    let optimizer = OptimizerConfig::new(Rule::adam(0.01));
    let straight = train_between("wide_deep", 2, &optimizer, ShardTables::On, 0..STEPS, None, None);
    for (before, after) in [(ShardTables::On, ShardTables::Off), (ShardTables::Off, ShardTables::On)] {
        let dir = tempfile::tempdir().unwrap();
        let model_dir = dir.path().join("model").to_string_lossy().into_owned();
        let saved = Some(model_dir.clone());
        train_between("wide_deep", 2, &optimizer, before, 0..3, None, saved.clone());
        let resumed = train_between("wide_deep", 2, &optimizer, after, 3..STEPS, saved, None);
        // Two workers add gradients the same way whatever the placement: the same bits.
        assert!(resumed[0] == straight[0], "{before:?} → {after:?}");
    }
}

#[test]
fn the_same_number_of_owners_reads_only_its_own_files() {
    let optimizer = OptimizerConfig::new(Rule::adagrad(0.1));
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let saved = Some(model_dir.clone());
    let before = train_between("wide_deep", 3, &optimizer, ShardTables::On, 0..2, None, saved.clone());
    let folder = sparktrain_train::checkpoint::folder_of(&model_dir, 2, 0);
    let mut files: Vec<String> =
        sparktrain_storage::list(&folder).unwrap().into_iter().map(|f| f.name().to_string()).collect();
    files.sort();
    // Every owner wrote its own files, several each at 200 bytes; the chief the rest.
    for r in 0..3 {
        assert!(
            files.iter().filter(|f| f.starts_with(&format!("tables-{r:05}-of-00003-"))).count() > 1,
            "{files:?}"
        );
    }
    assert!(files.contains(&"manifest.json".to_string()), "{files:?}");
    // Owner 1's files gone: owners 0 and 2 still restore; owner 1 fails, and with it all.
    for f in files.iter().filter(|f| f.starts_with("tables-00001-")) {
        std::fs::rename(format!("{folder}/{f}"), format!("{folder}/moved-{f}")).unwrap();
    }
    let optimizer_for = optimizer.clone();
    let outcomes = on_workers(3, move |_, ring| {
        let tables = TableOptions { shard: ShardTables::On, budget_bytes: None, on_device: None };
        let mut dp = DataParallel::with_tables(
            model("wide_deep"),
            Loss::BinaryCrossEntropy,
            &optimizer_for,
            ring,
            &tables,
        )
        .unwrap();
        dp.restore(&model_dir).map(|_| ()).map_err(|e| e.to_string())
    });
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    assert!(outcomes[1].as_ref().unwrap_err().contains("tables-00001-of-00003-00000"), "{outcomes:?}");
    drop(before);
}

#[test]
fn workers_with_different_budgets_place_the_tables_alike() {
    // Only worker 1's budget is too small for the whole tables (9720 bytes): both shard.
    let outcomes = on_workers(2, |w, ring| {
        let budget = Some(if w == 1 { 6000 } else { 1 << 30 });
        let optimizer = OptimizerConfig::new(Rule::adam(0.01));
        let tables = TableOptions { shard: ShardTables::Auto, budget_bytes: budget, on_device: None };
        let mut dp = DataParallel::with_tables(
            model("wide_deep"),
            Loss::BinaryCrossEntropy,
            &optimizer,
            ring,
            &tables,
        )
        .unwrap();
        dp.step(Some(&batch(w as u64 * 10..w as u64 * 10 + 10))).unwrap().unwrap();
        dp.placement()
    });
    for placement in outcomes {
        assert!(placement.sharded && placement.budget == 6000, "{placement:?}");
    }
}
