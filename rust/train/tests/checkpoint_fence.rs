//! Two chiefs writing one `model_dir`: a chief of an old generation, cut off from the driver
//! but not from storage, goes on saving after the driver started the next generation. Its
//! saves must neither change a committed checkpoint nor move the index back to its own
//! generation; on local files, a real HDFS (MiniDFS) and an S3 server (moto). Also: a new job
//! taking a `model_dir` over from earlier jobs, racing writers, checkpoints of earlier
//! versions, the training loop (one trainer, and sharded tables on two), what clearing
//! partial saves leaves alone, and the chief telling the driver's work queue which epoch its
//! committed checkpoints resume from.

#[path = "../../storage/tests/common/mod.rs"]
mod common;
mod support;

use std::collections::BTreeMap;

use candle_core::{Device, Tensor};
use sparktrain_train::checkpoint::{self, Layout};
use sparktrain_train::{
    Batch, CheckpointOptions, DataParallel, Fence, FitOptions, Hooks, Input, Loss, Mlp, OptimizerConfig,
    Progress, Rule, TrainError, Trainer,
};

const JOB: &str = "job-a";

fn batch(step: usize) -> Batch {
    let rows = 16;
    let dense: Vec<f32> =
        (0..rows * 3).map(|i| (((step * 131 + i * 17) % 23) as f32 - 11.0) / 11.0).collect();
    let labels: Vec<f32> = dense.chunks(3).map(|x| (x[0] + x[1] * x[2] > 0.0) as u8 as f32).collect();
    Batch {
        dense: Tensor::from_vec(dense, (rows, 3), &Device::Cpu).unwrap(),
        ids: None,
        id_width: 0,
        labels: Tensor::from_vec(labels, rows, &Device::Cpu).unwrap(),
        bags: None,
    }
}

fn trainer() -> DataParallel<Mlp> {
    let model = Mlp::new(3, &[8], 1, 11).unwrap();
    let optimizer = OptimizerConfig::new(Rule::adam(0.01));
    DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, None).unwrap()
}

fn layout(dp: &DataParallel<Mlp>) -> Layout {
    dp.entries().iter().map(|e| (e.name.clone(), e.shape.clone())).collect()
}

fn at(step: u64) -> Progress {
    Progress { step, epoch: 0, batches_in_epoch: step, workers: 1, ..Progress::default() }
}

/// How generation `generation` of job `job` writes checkpoints.
fn options(job: &str, generation: u64) -> CheckpointOptions {
    CheckpointOptions { max_shard_bytes: 256, keep: 3, fence: Fence { job: job.into(), generation } }
}

/// Every file under `folder`, by path relative to it, with its bytes.
fn files_under(folder: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![folder.to_string()];
    while let Some(dir) = pending.pop() {
        for entry in sparktrain_storage::list(&dir).unwrap() {
            if entry.is_dir {
                pending.push(entry.url);
            } else {
                let name = entry.url.strip_prefix(folder).unwrap().to_string();
                out.insert(name, sparktrain_storage::read(&entry.url).unwrap());
            }
        }
    }
    out
}

/// Generation 0 saves steps 2 and 4; generation 1 resumes from step 4 and saves step 6.
/// Returns the old chief (still alive, at step 4), the new one, and the folder of step 6.
fn two_generations(model_dir: &str) -> (DataParallel<Mlp>, DataParallel<Mlp>, String) {
    let mut old = trainer();
    for s in 0..4 {
        old.step(Some(&batch(s))).unwrap();
        if s % 2 == 1 {
            old.save_checkpoint(model_dir, at(s as u64 + 1), &options(JOB, 0)).unwrap();
        }
    }
    let mut new = trainer();
    assert_eq!(new.restore(model_dir).unwrap().map(|p| p.step), Some(4));
    for s in 4..6 {
        new.step(Some(&batch(s))).unwrap();
    }
    let folder = new.save_checkpoint(model_dir, at(6), &options(JOB, 1)).unwrap();
    (old, new, folder)
}

/// What a reader resumes from: the step and the weights.
fn latest(model_dir: &str, dp: &DataParallel<Mlp>) -> (u64, Vec<f32>) {
    let restored = checkpoint::restore(model_dir, &layout(dp)).unwrap().expect("a checkpoint");
    (restored.progress.step, restored.weights)
}

/// The old chief saves step 6 of its own run after generation 1 committed step 6: the
/// committed checkpoint keeps every byte, and readers still resume from generation 1's.
fn an_old_generation_cannot_overwrite_a_committed_checkpoint(model_dir: &str) {
    let (mut old, new, committed) = two_generations(model_dir);
    let before = files_under(&committed);
    // Other batches than generation 1 took: the old chief's weights differ from the new one's.
    for s in 100..102 {
        old.step(Some(&batch(s))).unwrap();
    }
    assert_ne!(old.weights().unwrap(), new.weights().unwrap());
    let late = old.save_checkpoint(model_dir, at(6), &options(JOB, 0));
    assert!(files_under(&committed) == before, "the committed checkpoint {committed} was written in place");
    assert_eq!(
        latest(model_dir, &new),
        (6, new.weights().unwrap().to_vec()),
        "readers resume from generation 1"
    );
    superseded(late, 0, None, 1);
}

/// The old chief, slower, saves step 5 after generation 1 committed step 6: the index stays
/// on generation 1's checkpoint.
fn an_old_generation_cannot_move_the_index_back(model_dir: &str) {
    let (mut old, new, _) = two_generations(model_dir);
    old.step(Some(&batch(4))).unwrap();
    let late = old.save_checkpoint(model_dir, at(5), &options(JOB, 0));
    assert_eq!(latest(model_dir, &new), (6, new.weights().unwrap().to_vec()), "the index moved back");
    superseded(late, 0, None, 1);
}

/// `result` is generation `generation`'s save refused because `by_job` (None: its own job)
/// at `by_generation` writes there now.
fn superseded(
    result: sparktrain_train::Result<String>,
    generation: u64,
    by_job: Option<&str>,
    by_generation: u64,
) {
    match result {
        Err(TrainError::Superseded { generation: g, by_job: j, by_generation: b, .. }) => {
            assert_eq!((g, j.as_deref(), b), (generation, by_job, by_generation));
        }
        other => panic!("the old generation's save was not refused as superseded: {other:?}"),
    }
}

#[test]
fn an_old_generation_cannot_overwrite_a_committed_local_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    an_old_generation_cannot_overwrite_a_committed_checkpoint(&dir.path().join("model").to_string_lossy());
}

#[test]
fn an_old_generation_cannot_move_a_local_index_back() {
    let dir = tempfile::tempdir().unwrap();
    an_old_generation_cannot_move_the_index_back(&dir.path().join("model").to_string_lossy());
}

#[test]
fn an_old_generation_cannot_overwrite_or_move_back_on_hdfs() {
    let dir = common::test_dir("train-fence");
    an_old_generation_cannot_overwrite_a_committed_checkpoint(&format!("{}/overwrite", dir.url));
    an_old_generation_cannot_move_the_index_back(&format!("{}/back", dir.url));
}

/// On an object store (S3, here moto's server) nothing is renamed: a checkpoint's files are
/// created in place, each only if absent, and the index's versions by conditional writes.
#[test]
fn an_old_generation_cannot_overwrite_or_move_back_on_s3() {
    let dir = common::s3::s3_dir("train-fence");
    an_old_generation_cannot_overwrite_a_committed_checkpoint(&format!("{dir}/overwrite"));
    an_old_generation_cannot_move_the_index_back(&format!("{dir}/back"));
}

/// The index's versions under `model_dir`, oldest first: (version, job, generation, latest).
fn versions(model_dir: &str) -> Vec<(u64, String, u64, Option<String>)> {
    let mut out: Vec<_> = sparktrain_storage::list(&format!("{model_dir}/_index"))
        .unwrap()
        .into_iter()
        .filter(|f| !sparktrain_storage::is_temp_name(f.name()))
        .map(|f| {
            let version = f.name().strip_suffix(".json").unwrap().parse::<u64>().unwrap();
            let json: serde_json::Value =
                serde_json::from_slice(&sparktrain_storage::read(&f.url).unwrap()).unwrap();
            let latest = json["latest"].as_str().map(String::from);
            (version, json["job"].as_str().unwrap().to_string(), json["generation"].as_u64().unwrap(), latest)
        })
        .collect();
    out.sort();
    out
}

/// A new job on a `model_dir` that an earlier job left at generation 2 starts at generation 0:
/// it resumes and writes there, and from its first save on, the stragglers of the earlier job,
/// and of the job that one took over from, are refused.
#[test]
fn a_new_job_takes_over_from_earlier_jobs_and_fences_their_stragglers() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let mut first = trainer();
    first.step(Some(&batch(0))).unwrap();
    first.save_checkpoint(&model_dir, at(1), &options("job-0", 0)).unwrap();
    let mut earlier = trainer();
    earlier.restore(&model_dir).unwrap();
    earlier.step(Some(&batch(1))).unwrap();
    earlier.save_checkpoint(&model_dir, at(2), &options("job-a", 2)).unwrap();

    let mut next = trainer();
    assert_eq!(next.restore(&model_dir).unwrap().map(|p| p.step), Some(2));
    next.step(Some(&batch(2))).unwrap();
    let folder = next.save_checkpoint(&model_dir, at(3), &options("job-b", 0)).unwrap();
    assert!(folder.ends_with("/ckpt-0000000003-g0"), "{folder}");

    // The earlier jobs' chiefs, still alive, are refused, in any generation.
    earlier.step(Some(&batch(7))).unwrap();
    superseded(earlier.save_checkpoint(&model_dir, at(4), &options("job-a", 2)), 2, Some("job-b"), 0);
    let claimed = checkpoint::claim(&model_dir, &Fence { job: "job-a".into(), generation: 3 });
    superseded(claimed.map(|_| String::new()), 3, Some("job-b"), 0);
    superseded(first.save_checkpoint(&model_dir, at(4), &options("job-0", 0)), 0, Some("job-b"), 0);
    assert_eq!(latest(&model_dir, &next), (3, next.weights().unwrap().to_vec()));
    // Job b's own next save, and a writer outside any job, go on.
    next.step(Some(&batch(3))).unwrap();
    next.save_checkpoint(&model_dir, at(4), &options("job-b", 0)).unwrap();
    next.save_checkpoint(&model_dir, at(5), &options("", 0)).unwrap();
}

/// Two writers racing to publish: an old generation saving as fast as it can while the next
/// one starts. Versions are created only if absent, so each is checked against the one before
/// it: once generation 1 has published, no version of generation 0 follows.
#[test]
fn racing_generations_never_move_the_index_back() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let mut seed = trainer();
    seed.step(Some(&batch(0))).unwrap();
    seed.save_checkpoint(&model_dir, at(1), &options(JOB, 0)).unwrap();
    let race = |generation: u64, steps: std::ops::Range<u64>, after: u64| {
        let model_dir = model_dir.clone();
        std::thread::spawn(move || {
            let dp = trainer();
            // Starts once the index has `after` versions: in the middle of the other's saves.
            let version = format!("{model_dir}/_index/{after:020}.json");
            while !sparktrain_storage::exists(&version).unwrap() {
                std::thread::yield_now();
            }
            let options = CheckpointOptions { keep: 2, ..options(JOB, generation) };
            let mut saved = 0;
            for step in steps {
                match dp.save_checkpoint(&model_dir, at(step), &options) {
                    Ok(_) => saved += 1,
                    Err(TrainError::Superseded { .. }) => break,
                    Err(e) => panic!("generation {generation}, step {step}: {e}"),
                }
            }
            saved
        })
    };
    let old = race(0, 2..40, 1);
    let new = race(1, 100..110, 4);
    let (old, new) = (old.join().unwrap(), new.join().unwrap());
    assert_eq!(new, 10, "generation 1 saved every checkpoint");
    let seen = versions(&model_dir);
    let first_new = seen.iter().position(|v| v.2 == 1).expect("a version of generation 1");
    assert!(seen[first_new..].iter().all(|v| v.2 == 1), "generation 0 after generation 1: {seen:?}");
    assert!(seen.windows(2).all(|w| w[1].0 == w[0].0 + 1), "versions skipped: {seen:?}");
    assert_eq!(seen.last().unwrap().3.as_deref(), Some("ckpt-0000000109-g1"));
    eprintln!("generation 0 saved {old} checkpoints before it was refused");
}

/// Checkpoints of earlier versions (`ckpt-<step>` folders, `checkpoint.json` alone) restore,
/// are kept and pruned with the new ones, and a partial one is still cleared.
#[test]
fn checkpoints_of_earlier_versions_restore_and_are_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let mut old = trainer();
    old.step(Some(&batch(0))).unwrap();
    let folder = old.save_checkpoint(&model_dir, at(1), &options("", 0)).unwrap();
    // As an earlier version left it.
    std::fs::rename(&folder, format!("{model_dir}/ckpt-0000000001")).unwrap();
    std::fs::remove_dir_all(format!("{model_dir}/_index")).unwrap();
    std::fs::write(
        format!("{model_dir}/checkpoint.json"),
        r#"{"latest": "ckpt-0000000001", "kept": ["ckpt-0000000001"]}"#,
    )
    .unwrap();
    std::fs::create_dir(format!("{model_dir}/ckpt-0000000002")).unwrap();

    let mut resumed = trainer();
    assert_eq!(resumed.restore(&model_dir).unwrap().map(|p| p.step), Some(1));
    assert_eq!(resumed.weights().unwrap(), old.weights().unwrap());
    assert!(!sparktrain_storage::exists(&format!("{model_dir}/ckpt-0000000002")).unwrap(), "a partial one");
    let two = CheckpointOptions { keep: 2, ..options(JOB, 1) };
    for step in 2..4 {
        resumed.step(Some(&batch(step as usize))).unwrap();
        resumed.save_checkpoint(&model_dir, at(step), &two).unwrap();
        let kept: Vec<String> = sparktrain_storage::list(&model_dir)
            .unwrap()
            .into_iter()
            .filter(|f| f.is_dir && f.name().starts_with("ckpt-"))
            .map(|f| f.name().to_string())
            .collect();
        let expected: &[&str] = if step == 2 {
            &["ckpt-0000000001", "ckpt-0000000002-g1"]
        } else {
            &["ckpt-0000000002-g1", "ckpt-0000000003-g1"]
        };
        assert_eq!(kept, expected);
    }
    assert_eq!(latest(&model_dir, &resumed), (3, resumed.weights().unwrap().to_vec()));
}

/// A crash inside `replace_dir` while re-exporting into `<model_dir>/export` leaves the old
/// export under a hidden temporary name beside it; clearing what an interrupted save left
/// must not delete it.
#[test]
fn clearing_partial_saves_keeps_an_export_a_crash_left_under_a_temporary_name() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let dp = trainer();
    dp.save_checkpoint(&model_dir, at(0), &options(JOB, 0)).unwrap();
    let export = format!("{model_dir}/export");
    sparktrain_storage::write(&format!("{export}/model.json"), b"{}", false).unwrap();
    // replace_dir's first rename moved the old export away; the process died before the second.
    let away = sparktrain_storage::sibling_temp(&export).unwrap();
    sparktrain_storage::rename(&export, &away, false).unwrap();
    let staging = sparktrain_storage::sibling_temp(&export).unwrap();
    sparktrain_storage::write(&format!("{staging}/model.json"), b"{\"new\": true}", false).unwrap();

    let removed = checkpoint::remove_partial(&model_dir).unwrap();
    assert!(removed.is_empty(), "removed {removed:?}");
    assert_eq!(sparktrain_storage::read(&format!("{away}/model.json")).unwrap(), b"{}");
    assert!(sparktrain_storage::exists(&staging).unwrap());
}

/// Trainers of two generations through the training loop, on `workers` trainers each (with
/// sharded tables on more than one): generation 0 trains to step 4 and is cut off; generation
/// 1 resumes, and saving the step it resumed from writes nothing; it trains to step 6; then
/// generation 0 goes on, and its next checkpoint fails on every one of its trainers with
/// [`TrainError::Superseded`].
fn generations_through_the_trainer(workers: usize) {
    use std::sync::{Arc, Barrier};

    let dir = tempfile::tempdir().unwrap();
    let data = loop_data::write_files(&dir.path().join("train"));
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    // Both generations' trainers meet: once generation 0 is at step 4, once generation 1 is
    // at step 6.
    let meet = Arc::new(Barrier::new(2 * workers));
    let fit = |trainer: &mut Trainer, input: &Input, max_steps: u64| {
        let options = FitOptions { epochs: 1, max_steps: Some(max_steps), ..FitOptions::default() };
        let mut on_log = |_: &_| Ok(());
        trainer.fit(input, &options, None, &mut Hooks { on_log: &mut on_log, on_eval: None })
    };
    let generation = |g: u64| {
        let (meet, data, model_dir) = (meet.clone(), data.clone(), model_dir.clone());
        move |w: usize, ring| {
            let fence = Fence { job: JOB.into(), generation: g };
            if g == 1 {
                meet.wait();
            }
            let mut trainer =
                Trainer::with_fence(loop_data::config(&model_dir, workers), loop_data::spec(), ring, fence)
                    .unwrap();
            let input = Input::open(&data, workers, w, trainer.config().input_options()).unwrap();
            if g == 0 {
                let summary = fit(&mut trainer, &input, 4).unwrap();
                assert_eq!(
                    summary.checkpoint.as_deref().map(|c| c.ends_with("/ckpt-0000000004-g0")),
                    Some(true)
                );
                meet.wait();
                meet.wait();
                return fit(&mut trainer, &input, 8).map(|s| s.steps);
            }
            assert_eq!(trainer.resumed_from(), Some(4));
            let before = versions(&model_dir);
            let again = trainer.save_checkpoint().unwrap();
            assert_eq!(
                again.map(|c| c.ends_with("/ckpt-0000000004-g0")),
                (w == 0 || workers > 1).then_some(true)
            );
            assert_eq!(versions(&model_dir), before, "saving the step it resumed from wrote an index");
            let steps = fit(&mut trainer, &input, 6).map(|s| s.steps);
            meet.wait();
            steps
        }
    };
    let old = {
        let work = generation(0);
        std::thread::spawn(move || support::on_workers(workers, work))
    };
    let new = support::on_workers(workers, generation(1));
    let old = old.join().unwrap();
    assert!(new.iter().all(|s| matches!(s, Ok(6))), "{new:?}");
    // Every trainer of generation 0 fails as superseded, none as if a restart could help.
    for (w, outcome) in old.iter().enumerate() {
        match outcome {
            Err(TrainError::Superseded { generation: 0, by_job: None, by_generation: 1, .. }) => {}
            other => panic!("generation 0's trainer {w} was not superseded: {other:?}"),
        }
    }
    let newest = versions(&model_dir).pop().unwrap();
    assert_eq!((newest.1.as_str(), newest.2, newest.3.as_deref()), (JOB, 1, Some("ckpt-0000000006-g1")));
    let folders: Vec<String> = sparktrain_storage::list(&model_dir)
        .unwrap()
        .into_iter()
        .filter(|f| f.is_dir && !f.name().starts_with('_'))
        .map(|f| f.name().to_string())
        .collect();
    assert_eq!(folders, ["ckpt-0000000002-g0", "ckpt-0000000004-g0", "ckpt-0000000006-g1"]);
}

#[test]
fn a_superseded_generation_fails_through_the_trainer() {
    generations_through_the_trainer(1);
}

#[test]
fn a_superseded_generation_of_sharded_trainers_fails_on_every_trainer() {
    generations_through_the_trainer(2);
}

#[test]
fn every_trainer_names_why_the_chief_could_not_read_a_checkpoint_of_another_model() {
    let dir = tempfile::tempdir().unwrap();
    let data = loop_data::write_files(&dir.path().join("train"));
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let fence = || Fence { job: JOB.into(), generation: 0 };
    let mut first =
        Trainer::with_fence(loop_data::config(&model_dir, 1), loop_data::spec(), None, fence()).unwrap();
    let input = Input::open(&data, 1, 0, first.config().input_options()).unwrap();
    let options = FitOptions { epochs: 1, max_steps: Some(2), ..FitOptions::default() };
    let mut on_log = |_: &_| Ok(());
    first.fit(&input, &options, None, &mut Hooks { on_log: &mut on_log, on_eval: None }).unwrap();
    // Two trainers of a wider model take the same model_dir over.
    let errors = support::on_workers(2, move |_, ring| {
        let mut config = loop_data::config(&model_dir, 1);
        config.model = sparktrain_train::ModelKind::WideDeep { dim: 4, hidden: vec![16] };
        Trainer::with_fence(config, loop_data::spec(), ring, fence()).err()
    });
    for (w, error) in errors.into_iter().enumerate() {
        let error = error.unwrap_or_else(|| panic!("trainer {w} resumed from another model"));
        let text = error.to_string();
        assert!(
            text.contains("the saved state does not fit")
                && text.contains("has shape [8] there, the model has [16]"),
            "trainer {w}: {text}"
        );
        // A mismatch on every trainer, which the launcher does not retry: no restart cures it.
        assert!(matches!(error, TrainError::StateMismatch(_)), "trainer {w}: {error:?}");
    }
}

/// TFRecord files and a model for the training loop.
/// A work queue like the driver's: every epoch hands out the four files once; it records the
/// epochs the chief says its committed checkpoints resume from.
struct RecordingQueue {
    files: Vec<String>,
    taken: std::sync::Mutex<std::collections::HashMap<u64, usize>>,
    checkpointed: std::sync::Mutex<Vec<u64>>,
}

impl sparktrain_train::WorkQueue for RecordingQueue {
    fn next(&self, epoch: u64) -> sparktrain_train::Result<Option<String>> {
        let mut taken = self.taken.lock().unwrap();
        let next = taken.entry(epoch).or_default();
        *next += 1;
        Ok(self.files.get(*next - 1).cloned())
    }

    fn checkpointed(&self, epoch: u64) {
        self.checkpointed.lock().unwrap().push(epoch);
    }
}

#[test]
fn the_chief_tells_the_work_queue_the_epoch_of_each_committed_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let data = loop_data::write_files(&dir.path().join("train"));
    let model_dir = dir.path().join("model").to_string_lossy().into_owned();
    let files = (0..4).map(|f| format!("{data}/part-{f:05}.tfrecord")).collect();
    let queue = std::sync::Arc::new(RecordingQueue {
        files,
        taken: Default::default(),
        checkpointed: Default::default(),
    });
    let mut trainer = Trainer::new(loop_data::config(&model_dir, 1), loop_data::spec(), None).unwrap();
    let input = Input::queued(&data, queue.clone(), 0, trainer.config().input_options()).unwrap();
    let options = FitOptions { epochs: 2, ..FitOptions::default() };
    let mut on_log = |_: &_| Ok(());
    let summary =
        trainer.fit(&input, &options, None, &mut Hooks { on_log: &mut on_log, on_eval: None }).unwrap();
    // 160 rows in batches of 8: 20 steps an epoch, a checkpoint every 2, and one at the end,
    // after the last epoch (nothing is left to replay then).
    assert_eq!(summary.steps, 40);
    let told = queue.checkpointed.lock().unwrap().clone();
    assert_eq!(told, [vec![0; 10], vec![1; 10], vec![2]].concat());
}

mod loop_data {
    use std::collections::HashMap;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float32Array, Int64Array};
    use arrow::record_batch::RecordBatch;
    use sparktrain_dataset::ExampleFileWriter;
    use sparktrain_train::{
        Categorical, FeatureSpec, ModelKind, OptimizerConfig, Rule, ShardTables, TrainerConfig,
    };

    pub fn spec() -> FeatureSpec {
        FeatureSpec {
            dense: vec!["x".into()],
            categorical: vec![Categorical { name: "shop".into(), buckets: 64 }],
            crossed: vec![],
            multi_hot: vec![],
            label: "label".into(),
        }
    }

    /// Four files of 40 rows under `dir`.
    pub fn write_files(dir: &std::path::Path) -> String {
        let mix = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
        for f in 0..4u64 {
            let range = f * 40..f * 40 + 40;
            let shop: Vec<i64> = range.clone().map(|i| (mix(i) % 50) as i64).collect();
            let x: Vec<f32> = range.map(|i| (mix(i + 3) % 100) as f32 / 100.0).collect();
            let label: Vec<i64> =
                shop.iter().zip(&x).map(|(s, x)| ((s % 3 == 0) != (*x > 0.5)) as i64).collect();
            let columns: Vec<(&str, ArrayRef)> = vec![
                ("label", Arc::new(Int64Array::from(label))),
                ("x", Arc::new(Float32Array::from(x))),
                ("shop", Arc::new(Int64Array::from(shop))),
            ];
            let url = dir.join(format!("part-{f:05}.tfrecord")).to_string_lossy().into_owned();
            let mut w = ExampleFileWriter::create(&url, None, false, HashMap::new()).unwrap();
            w.write_batch(&RecordBatch::try_from_iter(columns).unwrap()).unwrap();
            w.commit().unwrap();
        }
        dir.to_string_lossy().into_owned()
    }

    /// Checkpoints every 2 steps under `model_dir`; tables sharded on more than one trainer.
    pub fn config(model_dir: &str, workers: usize) -> TrainerConfig {
        let mut config = TrainerConfig::new(
            ModelKind::WideDeep { dim: 4, hidden: vec![8] },
            OptimizerConfig::new(Rule::adam(0.02)),
        );
        config.batch_size = 8;
        config.shuffle_buffer = 0;
        config.seed = 3;
        config.model_dir = Some(model_dir.into());
        config.checkpoint_every = Some(2);
        config.max_shard_bytes = 300;
        config.shard_tables = if workers > 1 { ShardTables::On } else { ShardTables::Off };
        config
    }
}
