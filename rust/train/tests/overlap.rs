//! The all-reduce overlapped with the backward pass trains the model the one-call step
//! trains: on two workers with float32 on the wire to the bit (the same products, and a sum
//! of two is the same in any grouping), for the MLP, Wide&Deep and DCN, with clipping and
//! uneven shards (a worker without a batch sends its buckets as zeros); on three workers, with
//! bfloat16 on the wire (whose rounding depends on which worker owns a value's segment), and
//! for DeepFM (whose embeddings' gradients from the pairwise term and from the tower add up in
//! another order), to float32's rounding, with every worker's weights identical. With the
//! tables sharded across the workers the overlapped step trains the one-call step's model to
//! the bit too.

mod support;

use candle_core::{Device, Tensor};
use sparktrain_train::{
    Batch, Categorical, DataParallel, Dcn, DeepFm, EmbeddingConfig, FeatureSpec, GradientWire, Loss, Mlp,
    Model, OptimizerConfig, Rule, ShardTables, TableOptions, WideDeep,
};
use support::on_workers;

const INPUTS: usize = 12;
/// A hidden width whose 512×512 layer fills a bucket (1 MiB) by itself, so a step sends the
/// output layers' bucket while the first layer is still to go.
const WIDE: usize = 512;

fn spec() -> FeatureSpec {
    FeatureSpec {
        dense: (0..INPUTS).map(|i| format!("x{i}")).collect(),
        categorical: vec![
            Categorical { name: "shop".into(), buckets: 40 },
            Categorical { name: "city".into(), buckets: 30 },
        ],
        crossed: vec![],
        multi_hot: vec![],
        label: "label".into(),
    }
}

fn mix(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
}

/// Rows `range` of dense features, two ids each, and a label that depends on both.
fn batch(range: std::ops::Range<u64>) -> Batch {
    let n = range.clone().count();
    let dense: Vec<f32> = range
        .clone()
        .flat_map(|i| (0..INPUTS as u64).map(move |k| (mix(i * 31 + k) % 200) as f32 / 100.0 - 1.0))
        .collect();
    let ids: Vec<u32> =
        range.clone().flat_map(|i| [(mix(i + 1) % 40) as u32, 40 + (mix(i + 2) % 30) as u32]).collect();
    let labels: Vec<f32> = range
        .map(|i| {
            let x = (mix(i * 31) % 200) as f32 / 100.0 - 1.0;
            ((mix(i + 1) % 40).is_multiple_of(3) != (x > 0.2)) as u8 as f32
        })
        .collect();
    Batch {
        dense: Tensor::from_vec(dense, (n, INPUTS), &Device::Cpu).unwrap(),
        ids: Some(ids),
        id_width: 2,
        labels: Tensor::from_vec(labels, n, &Device::Cpu).unwrap(),
        bags: None,
    }
}

fn dense_batch(range: std::ops::Range<u64>) -> Batch {
    Batch { ids: None, id_width: 0, ..batch(range) }
}

fn embedding_config(cross_layers: usize) -> EmbeddingConfig {
    EmbeddingConfig { dim: 8, hidden: vec![WIDE, WIDE], cross_layers, seed: 11 }
}

type MakeModel = fn() -> Box<dyn Model>;
type MakeBatch = fn(std::ops::Range<u64>) -> Batch;

/// The models, each with the batches it takes.
fn models() -> Vec<(&'static str, MakeModel, MakeBatch)> {
    vec![
        ("mlp", || Box::new(Mlp::new(INPUTS, &[WIDE, WIDE], 1, 5).unwrap()), dense_batch),
        ("wide_deep", || Box::new(WideDeep::new(&spec(), &embedding_config(0)).unwrap()), batch),
        ("deepfm", || Box::new(DeepFm::new(&spec(), &embedding_config(0)).unwrap()), batch),
        ("dcn", || Box::new(Dcn::new(&spec(), &embedding_config(2)).unwrap()), batch),
    ]
}

/// Trains `model` on `n` workers for 4 steps of 32 rows each; in the last step only worker
/// 0 has a batch. Returns every worker's final weights and its losses.
fn train(
    n: usize,
    model: MakeModel,
    data: MakeBatch,
    optimizer: OptimizerConfig,
) -> Vec<(Vec<f32>, Vec<f32>)> {
    on_workers(n, move |w, ring| {
        let mut dp = DataParallel::new(model(), Loss::BinaryCrossEntropy, &optimizer, ring).unwrap();
        // The tower's 512×512 layer closes the first bucket; the rest goes in the second.
        assert_eq!(dp.gradient_buckets(), if optimizer.overlap_gradients { 2 } else { 1 });
        let mut losses = Vec::new();
        for step in 0..4u64 {
            let start = (step * n as u64 + w as u64) * 32;
            let batch = (step < 3 || w == 0).then(|| data(start..start + 32));
            losses.push(dp.step(batch.as_ref()).unwrap().unwrap().loss);
        }
        (dp.full_weights().unwrap(), losses)
    })
}

fn with_overlap(optimizer: &OptimizerConfig, overlap: bool) -> OptimizerConfig {
    OptimizerConfig { overlap_gradients: overlap, ..optimizer.clone() }
}

#[test]
fn two_workers_train_to_the_bit_with_the_all_reduce_overlapped() {
    let clipped = OptimizerConfig { clip_norm: Some(0.5), ..OptimizerConfig::new(Rule::adam(0.01)) };
    let sgd = OptimizerConfig::new(Rule::sgd(0.2));
    for (name, model, data) in models().into_iter().filter(|(name, _, _)| *name != "deepfm") {
        for (setting, optimizer) in [("adam, clipped", &clipped), ("sgd", &sgd)] {
            let one_call = train(2, model, data, with_overlap(optimizer, false));
            let overlapped = train(2, model, data, with_overlap(optimizer, true));
            assert_eq!(overlapped[0].1, one_call[0].1, "{name}, {setting}: losses");
            for w in 0..2 {
                assert!(overlapped[w].0 == one_call[w].0, "{name}, {setting}: worker {w}'s weights differ");
            }
        }
    }
}

#[test]
fn three_workers_and_bf16_overlapped_agree_with_each_other_and_with_the_one_call_step() {
    let adam = OptimizerConfig::new(Rule::adam(0.01));
    let bf16 = OptimizerConfig { gradient_wire: GradientWire::Bf16, ..OptimizerConfig::new(Rule::sgd(0.2)) };
    for ((name, model, data), (n, optimizer)) in
        models().into_iter().flat_map(|m| [(m, (3, &adam)), (m, (2, &bf16))])
    {
        let name = format!("{name} on {n} workers, {:?} wire", optimizer.gradient_wire);
        let one_call = train(n, model, data, with_overlap(optimizer, false));
        let overlapped = train(n, model, data, with_overlap(optimizer, true));
        for w in 1..n {
            assert!(overlapped[w].0 == overlapped[0].0, "{name}: worker {w} drifted from worker 0");
        }
        // bfloat16 rounds each value to 8 significant bits.
        let tolerance = if optimizer.gradient_wire == GradientWire::Bf16 { 2e-3 } else { 2e-5 };
        let (a, b) = (&overlapped[0].0, &one_call[0].0);
        let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(
            worst < tolerance,
            "{name}: the overlapped step's weights are {worst} from the one-call step's"
        );
        for (x, y) in overlapped[0].1.iter().zip(&one_call[0].1) {
            assert!((x - y).abs() < tolerance / 10.0, "{name}: losses {x} and {y}");
        }
    }
}

/// A worker that leaves mid-training fails the other's overlapped step with the ring's error
/// naming it, within the ring's time-out, and the step does not hang on its buckets.
#[test]
fn a_peer_that_leaves_fails_the_overlapped_step_naming_it() {
    let optimizer = OptimizerConfig::new(Rule::sgd(0.1));
    let outcomes = on_workers(2, move |w, ring| {
        let model = Mlp::new(INPUTS, &[WIDE, WIDE], 1, 5).unwrap();
        let mut dp = DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, ring).unwrap();
        assert_eq!(dp.gradient_buckets(), 2);
        dp.step(Some(&dense_batch(0..32))).unwrap();
        if w == 1 {
            return None; // leaves: its ring's connections close
        }
        let started = std::time::Instant::now();
        let error = dp.step(Some(&dense_batch(32..64))).unwrap_err().to_string();
        Some((error, started.elapsed()))
    });
    let (error, waited) = outcomes[0].clone().unwrap();
    assert!(error.contains("rank 1"), "{error}");
    assert!(waited < std::time::Duration::from_secs(20), "failed after {waited:?}");
}

#[test]
fn sharded_tables_train_to_the_bit_with_the_all_reduce_overlapped() {
    let run = |overlap: bool| {
        let optimizer =
            OptimizerConfig { overlap_gradients: overlap, ..OptimizerConfig::new(Rule::adam(0.01)) };
        on_workers(2, move |w, ring| {
            let model = WideDeep::new(&spec(), &embedding_config(0)).unwrap();
            let tables = TableOptions { shard: ShardTables::On, budget_bytes: None, on_device: None };
            let mut dp =
                DataParallel::with_tables(model, Loss::BinaryCrossEntropy, &optimizer, ring, &tables)
                    .unwrap();
            assert!(dp.is_sharded());
            assert_eq!(dp.gradient_buckets(), if overlap { 2 } else { 1 });
            let mut losses = Vec::new();
            for step in 0..4u64 {
                let start = (step * 2 + w as u64) * 32;
                losses.push(dp.step(Some(&batch(start..start + 32))).unwrap().unwrap().loss);
            }
            (dp.weights().unwrap().to_vec(), losses)
        })
    };
    let (one_call, overlapped) = (run(false), run(true));
    assert_eq!(overlapped[0].1, one_call[0].1, "losses");
    for w in 0..2 {
        assert!(overlapped[w].0 == one_call[w].0, "worker {w}'s variables differ");
    }
}
