//! Checkpoints on local files and on a real HDFS (MiniDFS): a run resumed from a checkpoint
//! ends with exactly the weights of an uninterrupted run, tensors larger than a shard are cut
//! across files, only the last few checkpoints are kept, and a model that does not fit the
//! checkpoint is refused by name.

#[path = "../../storage/tests/common/mod.rs"]
mod common;

use candle_core::{Device, Tensor};
use sparktrain_train::{
    Batch, CheckpointOptions, DataParallel, Loss, Mlp, OptimizerConfig, Progress, Rule, TrainError,
};

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
    let model = Mlp::new(3, &[32, 16], 1, 11).unwrap();
    let optimizer = OptimizerConfig::new(Rule::adam(0.01));
    DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, None).unwrap()
}

fn resume_matches_an_uninterrupted_run(model_dir: &str) {
    let mut straight = trainer();
    for s in 0..12 {
        straight.step(Some(&batch(s))).unwrap();
    }
    // 256-byte shards: the 3x32 kernel (384 bytes) and Adam's moments are cut across files.
    let options = CheckpointOptions { max_shard_bytes: 256, keep: 2, ..CheckpointOptions::default() };
    let mut first = trainer();
    for s in 0..6 {
        first.step(Some(&batch(s))).unwrap();
        if s % 2 == 1 {
            let progress = Progress {
                step: s as u64 + 1,
                epoch: 0,
                batches_in_epoch: s as u64 + 1,
                workers: 1,
                ..Progress::default()
            };
            first.save_checkpoint(model_dir, progress, &options).unwrap();
        }
    }
    let names: Vec<String> = sparktrain_storage::list(model_dir)
        .unwrap()
        .into_iter()
        .map(|f| f.url.rsplit('/').next().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        ["_index", "checkpoint.json", "ckpt-0000000004-g0", "ckpt-0000000006-g0"],
        "only the last 2 are kept"
    );
    let shards = sparktrain_storage::list(&format!("{model_dir}/ckpt-0000000006-g0")).unwrap();
    assert!(shards.len() > 10, "{} files", shards.len());

    let mut resumed = trainer();
    let progress = resumed.restore(model_dir).unwrap().expect("a checkpoint");
    assert_eq!(
        progress,
        Progress { step: 6, epoch: 0, batches_in_epoch: 6, workers: 1, ..Progress::default() }
    );
    assert_eq!(resumed.optimizers().steps(), 6);
    for s in 6..12 {
        resumed.step(Some(&batch(s))).unwrap();
    }
    assert_eq!(resumed.weights().unwrap(), straight.weights().unwrap());
}

#[test]
fn resuming_from_a_local_checkpoint_matches_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    resume_matches_an_uninterrupted_run(&dir.path().join("model").to_string_lossy());
}

#[test]
fn resuming_from_an_hdfs_checkpoint_matches_an_uninterrupted_run() {
    let dir = common::test_dir("train-checkpoint");
    resume_matches_an_uninterrupted_run(&format!("{}/model", dir.url));
}

#[test]
fn no_checkpoint_is_none_and_another_model_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().to_string_lossy().into_owned();
    let mut t = trainer();
    assert_eq!(t.restore(&model_dir).unwrap(), None);
    t.save_checkpoint(&model_dir, Progress::default(), &CheckpointOptions::default()).unwrap();
    let model = Mlp::new(3, &[8], 1, 11).unwrap();
    let optimizer = OptimizerConfig::new(Rule::adam(0.01));
    let mut other = DataParallel::new(model, Loss::BinaryCrossEntropy, &optimizer, None).unwrap();
    let err = other.restore(&model_dir).unwrap_err().to_string();
    assert!(err.contains("'dense_0/bias' has shape [32] there, the model has [8]"), "{err}");
}

/// `checkpoint.json` names folders that training prunes recursively: an entry that is not a
/// checkpoint folder of this `model_dir` (`../victim`, an absolute path) is refused, and
/// nothing outside `model_dir` is touched.
#[test]
fn an_index_naming_other_folders_is_refused_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    let victim = dir.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("precious"), b"keep me").unwrap();
    let model_url = model_dir.to_string_lossy().into_owned();
    let t = trainer();
    t.save_checkpoint(&model_url, Progress::default(), &CheckpointOptions::default()).unwrap();
    for bad in ["../victim", "/tmp", "ckpt-12/../../victim", "ckpt-1-g../../victim"] {
        let index = format!(r#"{{"latest": "ckpt-0000000000-g0", "kept": ["{bad}", "ckpt-0000000000-g0"]}}"#);
        // The index the engine reads is its newest version (`checkpoint.json` is a copy).
        std::fs::write(model_dir.join("_index/00000000000000000001.json"), index).unwrap();
        let options = CheckpointOptions { keep: 1, ..CheckpointOptions::default() };
        match t.save_checkpoint(&model_url, Progress { step: 5, ..Progress::default() }, &options) {
            Err(TrainError::Format { path, source }) => {
                assert!(path.ends_with("_index/00000000000000000001.json"), "{path}");
                assert!(source.to_string().contains(bad), "{source}");
            }
            other => panic!("expected a format error naming {bad}, got {other:?}"),
        }
        assert!(victim.join("precious").exists());
    }
}

/// A manifest whose tensor names a shard that does not exist is an error naming the file,
/// not a panic.
#[test]
fn a_manifest_naming_a_missing_shard_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let model_url = dir.path().to_string_lossy().into_owned();
    let t = trainer();
    let folder = t.save_checkpoint(&model_url, Progress::default(), &CheckpointOptions::default()).unwrap();
    let manifest = std::path::Path::new(&folder).join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["tensors"][0]["pieces"][0][0] = serde_json::json!(7);
    std::fs::write(&manifest, json.to_string()).unwrap();
    match trainer().restore(&model_url) {
        Err(TrainError::Format { path, source }) => {
            assert!(path.ends_with("manifest.json"), "{path}");
            assert!(source.to_string().contains("names shard 7, but there are 1"), "{source}");
        }
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn what_a_save_killed_midway_left_is_removed_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().to_str().unwrap();
    let options = CheckpointOptions { max_shard_bytes: 256, keep: 3, ..CheckpointOptions::default() };
    let mut first = trainer();
    first.step(Some(&batch(0))).unwrap();
    first
        .save_checkpoint(
            model_dir,
            Progress { step: 1, epoch: 0, batches_in_epoch: 1, workers: 1, ..Progress::default() },
            &options,
        )
        .unwrap();
    // Chiefs killed while writing step 2: one of an earlier version (its folder in place),
    // one of this version (its staging folder) and one publishing the index.
    std::fs::create_dir(dir.path().join("ckpt-0000000002")).unwrap();
    std::fs::write(dir.path().join("ckpt-0000000002/shard-00000-of-00009.safetensors"), b"partial").unwrap();
    let staging = dir.path().join(".ckpt-0000000002-g1.0f3a.tmp");
    std::fs::create_dir(&staging).unwrap();
    std::fs::write(staging.join("shard-00000-of-00009.safetensors"), b"partial").unwrap();
    std::fs::write(dir.path().join(".checkpoint.json.0f3a.tmp"), b"{\"lat").unwrap();
    std::fs::write(dir.path().join("_index/.00000000000000000002.json.0f3a.tmp"), b"{\"lat").unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"the user's own file stays").unwrap();

    let mut resumed = trainer();
    let progress = resumed.restore(model_dir).unwrap().expect("a checkpoint");
    assert_eq!(progress.step, 1, "the previous checkpoint is the one resumed");
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["_index", "checkpoint.json", "ckpt-0000000001-g0", "notes.txt"]);
    let versions: Vec<String> = std::fs::read_dir(dir.path().join("_index"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(versions, ["00000000000000000001.json"]);
}

/// The fix for a damaged checkpoint is to remove it: training then resumes from the newest
/// checkpoint kept before it, and a checkpoint missing one of its files says to do so.
#[test]
fn a_removed_latest_checkpoint_resumes_from_the_one_before_and_a_missing_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let model_url = dir.path().to_string_lossy().into_owned();
    let options = CheckpointOptions { keep: 3, ..CheckpointOptions::default() };
    let mut t = trainer();
    let mut folders = Vec::new();
    let mut weights = Vec::new();
    for step in 1..=3u64 {
        t.step(Some(&batch(step as usize))).unwrap();
        let progress = Progress { step, batches_in_epoch: step, workers: 1, ..Progress::default() };
        folders.push(t.save_checkpoint(&model_url, progress, &options).unwrap());
        weights.push(t.weights().unwrap().to_vec());
    }
    // One of the latest checkpoint's files gone: named, with the fix.
    let shard = std::fs::read_dir(&folders[2])
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    std::fs::remove_file(&shard).unwrap();
    match trainer().restore(&model_url) {
        Err(TrainError::Format { path, source }) => {
            assert!(path.ends_with(".safetensors"), "{path}");
            assert!(
                source.to_string().contains("remove that folder to resume from the checkpoint before it")
            );
        }
        other => panic!("expected a format error, got {other:?}"),
    }
    // The fix applied: the one before it is restored.
    std::fs::remove_dir_all(&folders[2]).unwrap();
    let mut resumed = trainer();
    assert_eq!(resumed.restore(&model_url).unwrap().map(|p| p.step), Some(2));
    assert_eq!(resumed.weights().unwrap().to_vec(), weights[1]);
    // None left: the index names what to do.
    std::fs::remove_dir_all(&folders[1]).unwrap();
    std::fs::remove_dir_all(&folders[0]).unwrap();
    let err = trainer().restore(&model_url).unwrap_err().to_string();
    assert!(err.contains("which is gone, and no checkpoint it keeps is there"), "{err}");
}
