//! The training loop with sharded tables over real TFRecord files and real rings on
//! 127.0.0.1: checkpoints written by every owner, early stopping's best model restored from
//! its sharded checkpoint, an export whose tables stay sharded and load whole or row by row,
//! and a restart on fewer trainers that takes the checkpoint up where it stopped.

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array, ListArray, StringArray};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use sparktrain_dataset::ExampleFileWriter;
use sparktrain_train::export::ExportedTables;
use sparktrain_train::features::{MultiHot, Pooling};
use sparktrain_train::{
    Categorical, DataParallel, EarlyStopping, Exported, FeatureSpec, FitOptions, Hooks, Input, Loss,
    ModelKind, Monitor, OptimizerConfig, Rule, ShardTables, TableOptions, Trainer, TrainerConfig,
};
use support::on_workers;

fn spec() -> FeatureSpec {
    FeatureSpec {
        dense: vec!["x".into()],
        categorical: vec![
            Categorical { name: "shop".into(), buckets: 64 },
            Categorical { name: "city".into(), buckets: 61 },
        ],
        crossed: vec![],
        multi_hot: vec![MultiHot { name: "tags".into(), buckets: 37, pooling: Pooling::Sum }],
        label: "label".into(),
    }
}

fn rows(range: std::ops::Range<u64>) -> RecordBatch {
    let mix = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    let shop: Vec<i64> = range.clone().map(|i| (1000 / (1 + mix(i) % 1000)) as i64).collect();
    let city: Vec<String> = range.clone().map(|i| format!("c{}", mix(i + 7) % 40)).collect();
    let tags: Vec<Vec<i64>> = range
        .clone()
        .map(|i| (0..mix(i + 11) % 4).map(|k| (mix(i + 13 + k) % 30) as i64).collect())
        .collect();
    let label: Vec<i64> =
        (0..shop.len()).map(|r| ((shop[r] % 3 == 0) != tags[r].contains(&3)) as i64).collect();
    let x: Vec<f32> = range.map(|i| (mix(i + 3) % 100) as f32 / 100.0).collect();
    let lists = tags.into_iter().map(|t| Some(t.into_iter().map(Some).collect::<Vec<_>>()));
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("label", Arc::new(Int64Array::from(label))),
        ("x", Arc::new(Float32Array::from(x))),
        ("shop", Arc::new(Int64Array::from(shop))),
        ("city", Arc::new(StringArray::from(city))),
        ("tags", Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(lists))),
    ];
    RecordBatch::try_from_iter(columns).unwrap()
}

/// Twelve files of 40 rows under `dir`.
fn write_files(dir: &std::path::Path, first: u64) -> String {
    for i in 0..12u64 {
        let url = dir.join(format!("part-{i:05}.tfrecord")).to_string_lossy().into_owned();
        let mut w = ExampleFileWriter::create(&url, None, false, HashMap::new()).unwrap();
        w.write_batch(&rows(first + i * 40..first + i * 40 + 40)).unwrap();
        w.commit().unwrap();
    }
    dir.to_string_lossy().into_owned()
}

fn config(model_dir: &str) -> TrainerConfig {
    let mut config = TrainerConfig::new(
        ModelKind::WideDeep { dim: 4, hidden: vec![8] },
        OptimizerConfig::new(Rule::adam(0.02)),
    );
    config.batch_size = 8;
    config.shuffle_buffer = 0;
    config.seed = 3;
    config.model_dir = Some(model_dir.into());
    config.checkpoint_every = Some(4);
    config.max_shard_bytes = 300;
    config.shard_tables = ShardTables::On;
    config
}

#[test]
fn sharded_tables_checkpoint_stop_early_export_and_restart_on_fewer_trainers() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_files(&dir.path().join("train"), 0);
    let eval = write_files(&dir.path().join("eval"), 10_000);
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let export_dir = dir.path().join("export").to_string_lossy().into_owned();

    // Four trainers; early stopping counts no evaluation after the first as better (a huge
    // min_delta), so the best model is step 2's and is restored from its checkpoint at the end.
    let (md, ed, da, ev) = (model_dir.clone(), export_dir.clone(), data.clone(), eval.clone());
    let first = on_workers(4, move |w, ring| {
        let mut trainer = Trainer::new(config(&md), spec(), ring).unwrap();
        assert!(trainer.is_sharded());
        let input = Input::open(&da, 4, w, trainer.config().input_options()).unwrap();
        let eval = Input::open(&ev, 4, w, trainer.config().input_options()).unwrap();
        let options = FitOptions {
            epochs: 1,
            max_steps: Some(10),
            eval_every: Some(2),
            early_stopping: Some(EarlyStopping {
                monitor: Monitor::Loss,
                patience: 100,
                min_delta: 1e9,
                restore_best: true,
            }),
        };
        let mut on_log = |_: &_| Ok(());
        let mut hooks = Hooks { on_log: &mut on_log, on_eval: None };
        let summary = trainer.fit(&input, &options, Some(&eval), &mut hooks).unwrap();
        let wrote = trainer.export(&ed).unwrap();
        let weights = trainer.data_parallel().full_weights().unwrap();
        (summary, wrote, weights)
    });
    for (w, (summary, wrote, weights)) in first.iter().enumerate() {
        assert_eq!(summary.steps, 10);
        assert_eq!(summary.best.map(|b| b.step), Some(2));
        assert!(summary.best_checkpoint.as_deref().is_some_and(|b| b.ends_with("/best")));
        assert_eq!(*wrote, w == 0, "the chief reports the export");
        assert!(*weights == first[0].2, "every worker ends with the same parameters");
    }

    // The best model, restored from its sharded checkpoint by one replicated reader, is what
    // the trainers ended with and exported.
    let best_dir = format!("{model_dir}/best");
    let layout = TrainerConfig::new(
        ModelKind::WideDeep { dim: 4, hidden: vec![8] },
        OptimizerConfig::new(Rule::adam(0.02)),
    );
    let reader_model = layout.model.build(&spec(), 3).unwrap();
    let mut reader = DataParallel::with_tables(
        reader_model,
        Loss::BinaryCrossEntropy,
        &layout.optimizer,
        None,
        &TableOptions { shard: ShardTables::Off, budget_bytes: None, on_device: None },
    )
    .unwrap();
    assert_eq!(reader.restore(&best_dir).unwrap().map(|p| p.step), Some(2));
    assert!(reader.weights().unwrap() == first[0].2.as_slice(), "the best model's weights");

    // The export keeps the tables sharded, loads whole, and finds single rows.
    let files: Vec<String> =
        sparktrain_storage::list(&export_dir).unwrap().into_iter().map(|f| f.name().to_string()).collect();
    assert!(
        files.iter().any(|f| f == "tables.json")
            && files.iter().any(|f| f.starts_with("tables-00003-of-00004-"))
    );
    let exported = Exported::load(&export_dir).unwrap();
    let entries = reader.entries().to_vec();
    let tables = ExportedTables::open(&export_dir).unwrap();
    for e in &entries {
        let (_, values) = exported.parameter(&e.name).unwrap();
        assert!(values == &first[0].2[e.offset..e.offset + e.len()], "exported '{}'", e.name);
        if e.table {
            for id in [0u32, 1, 2, 77, 161] {
                let w = e.row_width();
                let row = tables.row(&e.name, id).unwrap();
                assert_eq!(row, values[id as usize * w..(id as usize + 1) * w], "'{}' row {id}", e.name);
            }
        }
    }
    let scores = exported.predict(&rows(50_000..50_010)).unwrap();
    assert_eq!(scores.len(), 10);

    // A restart on three trainers: each reads the rows it now owns from the four owners'
    // files of the last checkpoint (step 10), and training goes on from there.
    let (md, da) = (model_dir.clone(), data.clone());
    let second = on_workers(3, move |w, ring| {
        let mut trainer = Trainer::new(config(&md), spec(), ring).unwrap();
        let resumed = trainer.resumed_from();
        let input = Input::open(&da, 3, w, trainer.config().input_options()).unwrap();
        let options = FitOptions { epochs: 1, max_steps: Some(14), ..FitOptions::default() };
        let mut on_log = |_: &_| Ok(());
        let mut hooks = Hooks { on_log: &mut on_log, on_eval: None };
        let summary = trainer.fit(&input, &options, None, &mut hooks).unwrap();
        (resumed, summary.steps, summary.loss.unwrap(), trainer.data_parallel().full_weights().unwrap())
    });
    for (resumed, steps, loss, weights) in &second {
        assert_eq!(*resumed, Some(10));
        assert_eq!(*steps, 14);
        assert!(loss.is_finite());
        assert!(*weights == second[0].3);
    }
}
