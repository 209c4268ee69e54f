//! Wide&Deep, DeepFM and DCN learn a rule that lives in categorical and multi-hot features
//! (an interaction a linear model cannot express), train identically on one or two workers,
//! pool multi-hot columns by their sum or mean, and refuse ids that do not match their
//! feature spec.

mod support;

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array, ListArray, StringArray};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use sparktrain_train::features::{MultiHot, Pooling};
use sparktrain_train::{
    Batch, Categorical, DataParallel, Dcn, DeepFm, EmbeddingConfig, FeatureSpec, Gather, Lookup, Loss, Model,
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
        multi_hot: vec![],
        label: "label".into(),
    }
}

/// [`spec`] plus the multi-hot column `tags`, pooled by `pooling`.
fn tagged_spec(pooling: Pooling) -> FeatureSpec {
    FeatureSpec { multi_hot: vec![MultiHot { name: "tags".into(), buckets: 64, pooling }], ..spec() }
}

/// Rows `range`, encoded for [`spec`].
fn batch(range: std::ops::Range<u64>) -> Batch {
    batch_for(&spec(), range)
}

/// Rows `range` encoded for `spec`: with [`spec`], the label is (shop is even) XOR (city is
/// "c1"); with `tags` too, XOR also (tag 3 is among the row's 0 to 3 tags). `x` is noise.
fn batch_for(spec: &FeatureSpec, range: std::ops::Range<u64>) -> Batch {
    let mix = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    let shop: Vec<i64> = range.clone().map(|i| (mix(i) % 7) as i64).collect();
    let city: Vec<String> = range.clone().map(|i| format!("c{}", mix(i + 7) % 3)).collect();
    let tags: Vec<Vec<i64>> =
        range.clone().map(|i| (0..mix(i + 11) % 4).map(|k| (mix(i + 13 + k) % 6) as i64).collect()).collect();
    let tagged = !spec.multi_hot.is_empty();
    let label: Vec<i64> = (0..shop.len())
        .map(|r| (((shop[r] % 2 == 0) != (city[r] == "c1")) != (tagged && tags[r].contains(&3))) as i64)
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
    Batch::from_encoded(&spec.encode(&RecordBatch::try_from_iter(columns).unwrap()).unwrap()).unwrap()
}

fn config() -> EmbeddingConfig {
    EmbeddingConfig { dim: 4, hidden: vec![16], cross_layers: 0, seed: 5 }
}

fn accuracy<M: Model>(dp: &DataParallel<M>) -> f64 {
    accuracy_on(dp, &spec())
}

fn accuracy_on<M: Model>(dp: &DataParallel<M>, spec: &FeatureSpec) -> f64 {
    let test = batch_for(spec, 100_000..102_000);
    let logits = dp.logits(&test).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let labels = test.labels.to_vec1::<f32>().unwrap();
    logits.iter().zip(&labels).filter(|(l, y)| (**l > 0.0) == (**y > 0.5)).count() as f64
        / labels.len() as f64
}

fn fit<M: Model>(model: M) -> DataParallel<M> {
    fit_on(model, &spec(), 300)
}

fn fit_on<M: Model>(model: M, spec: &FeatureSpec, steps: u64) -> DataParallel<M> {
    let optimizer = OptimizerConfig::new(Rule::adam(0.02));
    let mut dp = DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, None).unwrap();
    for s in 0..steps {
        dp.step(Some(&batch_for(spec, s * 64..s * 64 + 64))).unwrap();
    }
    dp
}

fn dcn_config() -> EmbeddingConfig {
    EmbeddingConfig { cross_layers: 2, ..config() }
}

#[test]
fn every_model_learns_an_interaction_of_categorical_features() {
    let wide_deep = fit(WideDeep::new(&spec(), &config()).unwrap());
    assert!(accuracy(&wide_deep) > 0.97, "Wide&Deep: {}", accuracy(&wide_deep));
    let deep_fm = fit(DeepFm::new(&spec(), &config()).unwrap());
    assert!(accuracy(&deep_fm) > 0.97, "DeepFM: {}", accuracy(&deep_fm));
    let dcn = fit(Dcn::new(&spec(), &dcn_config()).unwrap());
    assert!(accuracy(&dcn) > 0.97, "DCN: {}", accuracy(&dcn));
}

#[test]
fn every_model_learns_a_rule_that_needs_a_multi_hot_column() {
    for pooling in [Pooling::Sum, Pooling::Mean] {
        let spec = tagged_spec(pooling);
        let models: Vec<(&str, Box<dyn Model>)> = vec![
            ("Wide&Deep", Box::new(WideDeep::new(&spec, &config()).unwrap())),
            ("DeepFM", Box::new(DeepFm::new(&spec, &config()).unwrap())),
            ("DCN", Box::new(Dcn::new(&spec, &dcn_config()).unwrap())),
        ];
        for (name, model) in models {
            let dp = fit_on(model, &spec, 600);
            let accuracy = accuracy_on(&dp, &spec);
            assert!(accuracy > 0.95, "{name}, {pooling:?} pooling: {accuracy}");
        }
    }
}

#[test]
fn multi_hot_columns_pool_their_rows_by_sum_or_mean() {
    for pooling in [Pooling::Sum, Pooling::Mean] {
        let spec = tagged_spec(pooling);
        let model = WideDeep::new(&spec, &config()).unwrap();
        let (entries, weights) = (model.parameters().entries(), model.parameters().flat().unwrap());
        let batch = batch_for(&spec, 0..40);
        let lookup = Lookup::gather(&batch, &entries, &weights).unwrap().unwrap();
        let fields = lookup.embed("deep/embeddings").unwrap();
        assert_eq!(fields.dims(), [40, 3, 4], "shop, city, then the pooled tags");
        let table = entries.iter().find(|e| e.name == "deep/embeddings").unwrap();
        let row = |id: u32| &weights[table.offset + id as usize * 4..table.offset + id as usize * 4 + 4];
        let bags = batch.bags.as_ref().unwrap();
        let got = fields.to_vec3::<f32>().unwrap();
        let mut at = 0;
        for (r, &n) in bags.lengths.iter().enumerate() {
            let ids = &bags.ids[at..at + n as usize];
            at += n as usize;
            let mut want = [0f32; 4];
            for &id in ids {
                want.iter_mut().zip(row(id)).for_each(|(w, v)| *w += v);
            }
            if pooling == Pooling::Mean && n > 0 {
                want.iter_mut().for_each(|w| *w /= n as f32);
            }
            for (g, w) in got[r][2].iter().zip(want) {
                assert!((g - w).abs() < 1e-6, "row {r}, {pooling:?}: {:?} vs {want:?}", got[r][2]);
            }
        }
        assert!(bags.lengths.contains(&0), "an empty list pools to zeros, and is in the batch");
    }
}

/// Builds the model `name` for `spec`.
fn model(name: &str, spec: &FeatureSpec) -> Box<dyn Model> {
    match name {
        "wide_deep" => Box::new(WideDeep::new(spec, &config()).unwrap()),
        "deep_fm" => Box::new(DeepFm::new(spec, &config()).unwrap()),
        _ => Box::new(Dcn::new(spec, &dcn_config()).unwrap()),
    }
}

#[test]
fn two_workers_train_like_one_with_their_union() {
    let rule = Rule::Sgd { lr: 0.1, momentum: 0.9, nesterov: false, weight_decay: 0.0 };
    for (name, spec) in
        [("wide_deep", spec()), ("deep_fm", tagged_spec(Pooling::Mean)), ("dcn", tagged_spec(Pooling::Sum))]
    {
        let shared = spec.clone();
        let together = on_workers(2, move |w, ring| {
            let optimizer = OptimizerConfig::new(rule);
            let mut dp =
                DataParallel::new(model(name, &shared), Loss::BinaryCrossEntropy, &optimizer, ring).unwrap();
            for s in 0..10u64 {
                let start = s * 32 + w as u64 * 16;
                dp.step(Some(&batch_for(&shared, start..start + 16))).unwrap();
            }
            dp.weights().unwrap().to_vec()
        });
        assert_eq!(together[0], together[1], "{name}");
        let optimizer = OptimizerConfig::new(rule);
        let mut alone =
            DataParallel::new(model(name, &spec), Loss::BinaryCrossEntropy, &optimizer, None).unwrap();
        for s in 0..10u64 {
            alone.step(Some(&batch_for(&spec, s * 32..s * 32 + 32))).unwrap();
        }
        let scale = alone.weights().unwrap().iter().fold(0f32, |m, v| m.max(v.abs()));
        for (a, b) in together[0].iter().zip(alone.weights().unwrap().iter()) {
            assert!((a - b).abs() <= 1e-5 * scale, "{name}: {a} vs {b}");
        }
    }
}

/// The layout for GPUs (one row per id, gradients summed into the distinct rows afterwards)
/// gives the CPU layout's logits and the same gradient rows, for every model, with ids seen
/// up to 130 times in a batch (more than one segment's 64) and with multi-hot lists.
#[test]
fn both_gather_layouts_give_the_same_logits_and_row_gradients() {
    for spec in [spec(), tagged_spec(Pooling::Sum), tagged_spec(Pooling::Mean)] {
        for name in ["wide_deep", "deep_fm", "dcn"] {
            let model = model(name, &spec);
            let (entries, weights) = (model.parameters().entries(), model.parameters().flat().unwrap());
            let batch = batch_for(&spec, 0..400);
            let run = |gather: Gather| {
                let lookup = Lookup::gather_as(&batch, &entries, &weights, gather).unwrap().unwrap();
                let logits = model.forward(&batch, Some(&lookup)).unwrap();
                let grads = logits.sqr().unwrap().sum_all().unwrap().backward().unwrap();
                let rows: Vec<Vec<f32>> = ["wide/ids", "deep/embeddings"]
                    .iter()
                    .map(|t| {
                        let g =
                            lookup.row_grads(t, &grads).unwrap().expect("the loss depends on every table");
                        g.flatten_all().unwrap().to_vec1::<f32>().unwrap()
                    })
                    .collect();
                (logits.flatten_all().unwrap().to_vec1::<f32>().unwrap(), rows)
            };
            let (distinct, per_position) = (run(Gather::Distinct), run(Gather::PerPosition));
            let close = |a: &[f32], b: &[f32], what: &str| {
                assert_eq!(a.len(), b.len(), "{name}, {what}");
                let scale = a.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
                for (x, y) in a.iter().zip(b) {
                    assert!((x - y).abs() <= 1e-5 * scale, "{name}, {what}: {x} vs {y}");
                }
            };
            close(&distinct.0, &per_position.0, "logits");
            for (t, (a, b)) in distinct.1.iter().zip(&per_position.1).enumerate() {
                assert!(a.iter().any(|v| *v != 0.0), "{name}: table {t} got a gradient");
                close(a, b, &format!("table {t}'s gradient rows"));
            }
        }
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
                        dp.weights().unwrap().to_vec()
                    });
                    results.into_iter().next().unwrap()
                })
                .collect();
            assert_eq!(runs[0], runs[1], "{rule:?} on {workers} worker(s)");
        }
    }
}
