//! Wide&Deep and DeepFM learn a rule that lives in categorical features (an interaction a
//! linear model cannot express), train identically on one or two workers, and refuse ids
//! that do not match their feature spec.

mod support;

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array, StringArray};
use arrow::record_batch::RecordBatch;
use sparktrain_train::{
    Batch, Categorical, DataParallel, DeepFm, EmbeddingConfig, FeatureSpec, Lookup, Loss, Model,
    OptimizerConfig, Rule, WideDeep,
};
use support::on_workers;

fn spec() -> FeatureSpec {
    FeatureSpec {
        dense: vec!["x".into()],
        categorical: vec![
            Categorical { name: "shop".into(), buckets: 64 },
            Categorical { name: "city".into(), buckets: 64 },
        ],
        crossed: vec![],
        label: "label".into(),
    }
}

/// Rows `range`: the label is (shop is even) XOR (city is "c1"); `x` is noise.
fn batch(range: std::ops::Range<u64>) -> Batch {
    let mix = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    let shop: Vec<i64> = range.clone().map(|i| (mix(i) % 7) as i64).collect();
    let city: Vec<String> = range.clone().map(|i| format!("c{}", mix(i + 7) % 3)).collect();
    let label: Vec<i64> = shop.iter().zip(&city).map(|(s, c)| ((s % 2 == 0) != (c == "c1")) as i64).collect();
    let x: Vec<f32> = range.map(|i| (mix(i + 3) % 100) as f32 / 100.0).collect();
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("label", Arc::new(Int64Array::from(label))),
        ("x", Arc::new(Float32Array::from(x))),
        ("shop", Arc::new(Int64Array::from(shop))),
        ("city", Arc::new(StringArray::from(city))),
    ];
    Batch::from_encoded(&spec().encode(&RecordBatch::try_from_iter(columns).unwrap()).unwrap()).unwrap()
}

fn config() -> EmbeddingConfig {
    EmbeddingConfig { dim: 4, hidden: vec![16], seed: 5 }
}

fn accuracy<M: Model>(dp: &DataParallel<M>) -> f64 {
    let test = batch(100_000..102_000);
    let logits = dp.logits(&test).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let labels = test.labels.to_vec1::<f32>().unwrap();
    logits.iter().zip(&labels).filter(|(l, y)| (**l > 0.0) == (**y > 0.5)).count() as f64
        / labels.len() as f64
}

fn fit<M: Model>(model: M) -> DataParallel<M> {
    let optimizer = OptimizerConfig::new(Rule::adam(0.02));
    let mut dp = DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, None).unwrap();
    for s in 0..300u64 {
        dp.step(Some(&batch(s * 64..s * 64 + 64))).unwrap();
    }
    dp
}

#[test]
fn both_models_learn_an_interaction_of_categorical_features() {
    let wide_deep = fit(WideDeep::new(&spec(), &config()).unwrap());
    assert!(accuracy(&wide_deep) > 0.97, "Wide&Deep: {}", accuracy(&wide_deep));
    let deep_fm = fit(DeepFm::new(&spec(), &config()).unwrap());
    assert!(accuracy(&deep_fm) > 0.97, "DeepFM: {}", accuracy(&deep_fm));
}

#[test]
fn two_workers_train_wide_deep_like_one_with_their_union() {
    let rule = Rule::Sgd { lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0.0 };
    let together = on_workers(2, move |w, ring| {
        let model = WideDeep::new(&spec(), &EmbeddingConfig { dim: 4, hidden: vec![16], seed: 5 }).unwrap();
        let optimizer = OptimizerConfig::new(rule);
        let mut dp = DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, ring).unwrap();
        for s in 0..10u64 {
            let start = s * 32 + w as u64 * 16;
            dp.step(Some(&batch(start..start + 16))).unwrap();
        }
        dp.weights().to_vec()
    });
    assert_eq!(together[0], together[1]);
    let model = WideDeep::new(&spec(), &config()).unwrap();
    let optimizer = OptimizerConfig::new(rule);
    let mut alone = DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, None).unwrap();
    for s in 0..10u64 {
        alone.step(Some(&batch(s * 32..s * 32 + 32))).unwrap();
    }
    let scale = alone.weights().iter().fold(0f32, |m, v| m.max(v.abs()));
    for (a, b) in together[0].iter().zip(alone.weights()) {
        assert!((a - b).abs() <= 1e-5 * scale, "{a} vs {b}");
    }
}

#[test]
fn ids_that_do_not_match_the_spec_are_refused() {
    let model = WideDeep::new(&spec(), &config()).unwrap();
    let (entries, weights) = (model.parameters().entries(), model.parameters().flat().unwrap());
    let mut bad = batch(0..4);
    bad.ids = Some(vec![0u32, 1, 2, 500, 3, 4, 5, 6]);
    let err = Lookup::gather(&bad, &entries, &weights).err().unwrap().to_string();
    assert!(err.contains("id 500 is outside the embedding table 'deep/embeddings' of 128 rows"), "{err}");
    bad.ids = None;
    let err = model.forward(&bad, None).unwrap_err().to_string();
    assert!(err.contains("the model takes 2 ids per example, the batch has 0"), "{err}");
    let no_ids = FeatureSpec { categorical: vec![], ..spec() };
    assert!(WideDeep::new(&no_ids, &config()).is_err());
}

/// Updating only the touched rows is exactly a dense update for rules where an untouched row
/// does not move (Adagrad, SGD without momentum, FTRL on the wide part's zero-started rows),
/// on one worker and on two.
#[test]
fn sparse_table_updates_equal_dense_ones_where_untouched_rows_stay() {
    let ftrl_wide = Some(Rule::ftrl(0.1, 0.001, 0.001));
    for (rule, wide) in [(Rule::adagrad(0.1), None), (Rule::sgd(0.2), None), (Rule::adagrad(0.05), ftrl_wide)]
    {
        for workers in [1, 2] {
            let runs: Vec<Vec<f32>> = [true, false]
                .into_iter()
                .map(|sparse_tables| {
                    let optimizer = OptimizerConfig { sparse_tables, wide, ..OptimizerConfig::new(rule) };
                    let results = on_workers(workers, move |w, ring| {
                        let model = WideDeep::new(&spec(), &config()).unwrap();
                        let mut dp =
                            DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, ring).unwrap();
                        for s in 0..8u64 {
                            let start = s * 64 + w as u64 * 32;
                            dp.step(Some(&batch(start..start + 32))).unwrap();
                        }
                        dp.weights().to_vec()
                    });
                    results.into_iter().next().unwrap()
                })
                .collect();
            assert_eq!(runs[0], runs[1], "{rule:?} on {workers} worker(s)");
        }
    }
}
