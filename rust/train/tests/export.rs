//! The export folder, locally and on a real HDFS (MiniDFS): a trained model loads back and
//! scores Arrow batches (without their label) exactly as it scored them in training, and a
//! damaged folder is named.

#[path = "../../storage/tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array, StringArray};
use arrow::record_batch::RecordBatch;
use sparktrain_train::{
    Batch, Categorical, DataParallel, Exported, FeatureSpec, Loss, ModelKind, OptimizerConfig, Rule,
    TrainError,
};

fn spec() -> FeatureSpec {
    FeatureSpec {
        dense: vec!["x".into(), "y".into()],
        categorical: vec![
            Categorical { name: "shop".into(), buckets: 32 },
            Categorical { name: "city".into(), buckets: 8 },
        ],
        crossed: vec![],
        multi_hot: vec![],
        label: "label".into(),
    }
}

fn table(start: i64, with_label: bool, classes: i64) -> RecordBatch {
    let rows = start..start + 50;
    let mut columns: Vec<(&str, ArrayRef)> = vec![
        ("x", Arc::new(Float32Array::from_iter_values(rows.clone().map(|i| (i % 13) as f32 / 13.0)))),
        ("y", Arc::new(Float32Array::from_iter_values(rows.clone().map(|i| (i % 7) as f32 / 7.0)))),
        ("shop", Arc::new(Int64Array::from_iter_values(rows.clone().map(|i| i % 5)))),
        ("city", Arc::new(StringArray::from_iter_values(rows.clone().map(|i| format!("c{}", i % 3))))),
    ];
    if with_label {
        columns.push(("label", Arc::new(Int64Array::from_iter_values(rows.map(|i| (i * 7 % 11) % classes)))));
    }
    RecordBatch::try_from_iter(columns).unwrap()
}

fn scores_per_row(loss: Loss, classes: i64) -> usize {
    if loss == Loss::SoftmaxCrossEntropy { classes as usize } else { 1 }
}

fn export_and_score(dir: &str, kind: ModelKind, loss: Loss, classes: i64) {
    let model = kind.build(&spec(), 3).unwrap();
    let optimizer = OptimizerConfig::new(Rule::adam(0.05));
    let mut dp = DataParallel::new(model, loss, &optimizer, None).unwrap();
    for s in 0..5 {
        dp.step(Some(&Batch::from_encoded(&spec().encode(&table(s * 50, true, classes)).unwrap()).unwrap()))
            .unwrap();
    }
    let kinds = spec().key_kinds(&table(0, true, classes).schema());
    assert_eq!(kinds.len(), 2);
    sparktrain_train::export::export(dir, &kind, &spec(), &kinds, loss, dp.entries(), &dp.weights().unwrap())
        .unwrap();

    let loaded = Exported::load(dir).unwrap();
    assert_eq!(loaded.features(), &spec());
    // No rows have no scores; their columns are still checked.
    assert_eq!(loaded.predict(&table(1000, false, classes).slice(0, 0)).unwrap(), Vec::<f32>::new());
    let without_x = table(1000, false, classes).slice(0, 0).project(&[1, 2, 3]).unwrap();
    assert!(loaded.predict(&without_x).unwrap_err().to_string().contains("'x'"));
    // Ids of another kind than in training would hash to other rows: refused, naming the column.
    let batch = table(1000, false, classes);
    let shops = arrow::compute::cast(batch.column(2), &arrow::datatypes::DataType::Utf8).unwrap();
    let as_strings = RecordBatch::try_from_iter(vec![
        ("x", batch.column(0).clone()),
        ("y", batch.column(1).clone()),
        ("shop", shops),
        ("city", batch.column(3).clone()),
    ])
    .unwrap();
    let refused = loaded.predict(&as_strings).unwrap_err().to_string();
    assert!(
        refused.contains("column 'shop' holds strings or bytes, but the model was trained on integers"),
        "{refused}"
    );
    // A column of nulls alone has no keys to be wrong, whatever its type.
    let no_shops: ArrayRef = Arc::new(StringArray::from(vec![None::<&str>; batch.num_rows()]));
    let columns =
        vec![(0, "x"), (1, "y"), (3, "city")].into_iter().map(|(i, n)| (n, batch.column(i).clone()));
    let nulls = RecordBatch::try_from_iter(columns.chain([("shop", no_shops)])).unwrap();
    assert_eq!(loaded.predict(&nulls).unwrap().len(), scores_per_row(loss, classes) * batch.num_rows());
    let scores = loaded.predict(&table(1000, false, classes)).unwrap();
    let logits =
        dp.logits(&Batch::from_encoded(&spec().encode(&table(1000, true, classes)).unwrap()).unwrap());
    let logits = logits.unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    match loss {
        Loss::BinaryCrossEntropy => {
            assert_eq!(scores.len(), 50);
            for (s, z) in scores.iter().zip(&logits) {
                assert!((s - 1.0 / (1.0 + (-z).exp())).abs() < 1e-6, "{s} vs sigmoid({z})");
            }
        }
        Loss::SoftmaxCrossEntropy => {
            assert_eq!(scores.len(), 50 * classes as usize);
            for row in scores.chunks(classes as usize) {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
            }
        }
        Loss::MeanSquaredError => assert_eq!(scores, logits),
    }
}

#[test]
fn exported_models_score_as_they_did_in_training() {
    let dir = tempfile::tempdir().unwrap();
    let url = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    export_and_score(
        &url("wd"),
        ModelKind::WideDeep { dim: 4, hidden: vec![8] },
        Loss::BinaryCrossEntropy,
        2,
    );
    export_and_score(&url("fm"), ModelKind::DeepFm { dim: 4, hidden: vec![8] }, Loss::BinaryCrossEntropy, 2);
    export_and_score(
        &url("mlp"),
        ModelKind::Mlp { hidden: vec![8], outputs: 3 },
        Loss::SoftmaxCrossEntropy,
        3,
    );
    let lr = ModelKind::LogisticRegression { outputs: 1 };
    export_and_score(&url("lr"), lr, Loss::BinaryCrossEntropy, 2);
    let dcn = ModelKind::Dcn { dim: 4, hidden: vec![8], cross_layers: 2 };
    export_and_score(&url("dcn"), dcn, Loss::BinaryCrossEntropy, 2);
    let regression = ModelKind::WideDeep { dim: 4, hidden: vec![8] };
    export_and_score(&url("regression"), regression, Loss::MeanSquaredError, 2);
}

#[test]
fn an_export_on_hdfs_loads_back() {
    let dir = common::test_dir("train-export");
    let kind = ModelKind::WideDeep { dim: 4, hidden: vec![8] };
    export_and_score(&format!("{}/export", dir.url), kind, Loss::BinaryCrossEntropy, 2);
}

#[test]
fn a_damaged_export_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().to_string_lossy().into_owned();
    export_and_score(&url, ModelKind::Mlp { hidden: vec![4], outputs: 1 }, Loss::BinaryCrossEntropy, 2);
    std::fs::write(dir.path().join("model.json"), b"{ not json").unwrap();
    match Exported::load(&url).err().expect("refused") {
        TrainError::Format { path, .. } => assert!(path.ends_with("/model.json"), "{path}"),
        other => panic!("expected a format error naming model.json, got {other:?}"),
    }
}

#[test]
fn a_missing_export_is_a_storage_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("nothing").to_string_lossy().into_owned();
    match Exported::load(&url).err().expect("refused") {
        TrainError::Storage(e) => {
            assert!(e.is_not_found(), "{e}");
            assert!(e.to_string().contains("nothing/model.json"), "{e}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
}

#[test]
fn a_new_export_replaces_the_old_pair_as_a_whole() {
    let root = tempfile::tempdir().unwrap();
    let url = root.path().join("export").to_string_lossy().into_owned();
    export_and_score(&url, ModelKind::Mlp { hidden: vec![4], outputs: 1 }, Loss::BinaryCrossEntropy, 2);
    std::fs::write(root.path().join("export/stale.txt"), b"from before").unwrap();
    export_and_score(&url, ModelKind::Mlp { hidden: vec![6], outputs: 1 }, Loss::BinaryCrossEntropy, 2);
    let mut files: Vec<String> = std::fs::read_dir(root.path().join("export"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["model.json", "model.safetensors"]);
    // Nothing is left beside it: no staging folder, no replaced export.
    let beside: Vec<_> = std::fs::read_dir(root.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(beside, ["export"]);
    assert!(
        std::fs::read_to_string(root.path().join("export/model.json"))
            .unwrap()
            .contains("\"hidden\": [\n      6")
    );
}
