//! The chief's checkpoints: weights, optimizer state and input position, on any storage URL.
//!
//! Layout under `model_dir`:
//! - `ckpt-<step>/shard-<i>-of-<n>.safetensors`: every weight and optimizer buffer as flat
//!   float32 pieces, at most `max_shard_bytes` per file (1 GiB by default), a large tensor cut
//!   across files, so that models over 4 GB store fine on HDFS;
//! - `ckpt-<step>/manifest.json`: shapes, where each piece lives, and the progress;
//! - `checkpoint.json`: the latest checkpoint and those kept, written last.
//!
//! Every file appears atomically, and `checkpoint.json` only names a checkpoint once all of
//! its files are in place, so a job killed mid-save resumes from the previous one. What such a
//! save left behind (a checkpoint folder the index does not name, a hidden temporary file) is
//! removed when training resumes.

use std::collections::HashMap;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::groups::GroupState;
use crate::optim::OptimizerState;

/// The default largest shard file.
pub const MAX_SHARD_BYTES: u64 = 1 << 30;

const INDEX: &str = "checkpoint.json";
const MANIFEST: &str = "manifest.json";

/// How far training had come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Steps taken.
    pub step: u64,
    /// The epoch under way.
    pub epoch: u64,
    /// Batches this worker had taken in that epoch.
    pub batches_in_epoch: u64,
    /// How many workers trained (0 in checkpoints that predate the field): the batches taken
    /// in the epoch only say where to go on with the same worker count.
    #[serde(default)]
    pub workers: u64,
    /// Early stopping's state: the best evaluation so far (see `EarlyStopping`).
    #[serde(default)]
    pub best: Option<Best>,
    /// Evaluations since the best one.
    #[serde(default)]
    pub evals_since_best: u64,
}

/// The best evaluation so far, by early stopping's metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Best {
    /// The step it was made at.
    pub step: u64,
    /// The metric's value.
    pub value: f64,
}

/// How checkpoints are written.
#[derive(Debug, Clone)]
pub struct CheckpointOptions {
    /// The largest shard file.
    pub max_shard_bytes: u64,
    /// Checkpoints kept; older ones are deleted.
    pub keep: usize,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions { max_shard_bytes: MAX_SHARD_BYTES, keep: 3 }
    }
}

/// A tensor's name and shape.
pub type Layout = Vec<(String, Vec<usize>)>;

/// What a checkpoint gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct Restored {
    /// How far training had come.
    pub progress: Progress,
    /// The weights, flat in the layout's order.
    pub weights: Vec<f32>,
    /// The optimizers' states, group by group.
    pub optimizer: Vec<GroupState>,
}

#[derive(Serialize, Deserialize)]
struct Index {
    latest: String,
    kept: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Manifest {
    progress: Progress,
    groups: Vec<SavedGroup>,
    shards: Vec<String>,
    tensors: Vec<Entry>,
}

/// An optimizer group: its step, its parameters and its buffers' names. A buffer's values
/// for parameter `p` are saved as the tensor `optimizer/<buffer>/<p>`.
#[derive(Serialize, Deserialize)]
struct SavedGroup {
    group: String,
    step: u64,
    tensors: Vec<String>,
    buffers: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    name: String,
    shape: Vec<usize>,
    /// (shard index, key in the shard, values).
    pieces: Vec<(usize, String, usize)>,
}

/// Writes a checkpoint of `weights` (flat in `layout`'s order), the optimizer groups' states
/// and `progress` under `model_dir`; returns its folder.
pub fn save(
    model_dir: &str,
    layout: &Layout,
    weights: &[f32],
    optimizer: &[GroupState],
    progress: Progress,
    options: &CheckpointOptions,
) -> Result<String> {
    let total: usize = layout.iter().map(|(_, s)| s.iter().product::<usize>()).sum();
    if total != weights.len() {
        return Err(TrainError::InvalidArgument(format!(
            "{} weights for a layout of {total}",
            weights.len()
        )));
    }
    let mut tensors: Vec<(String, Vec<usize>, &[f32])> = Vec::new();
    let mut offset = 0;
    for (name, shape) in layout {
        let n: usize = shape.iter().product();
        tensors.push((name.clone(), shape.clone(), &weights[offset..offset + n]));
        offset += n;
    }
    let shapes: HashMap<&str, &Vec<usize>> = layout.iter().map(|(n, s)| (n.as_str(), s)).collect();
    for group in optimizer {
        for (buffer, values) in &group.state.buffers {
            let mut offset = 0;
            for name in &group.tensors {
                let shape = shapes.get(name.as_str()).ok_or_else(|| {
                    TrainError::InvalidArgument(format!(
                        "optimizer group '{}' names no parameter '{name}'",
                        group.group
                    ))
                })?;
                let n: usize = shape.iter().product();
                let piece = values.get(offset..offset + n).ok_or_else(|| {
                    TrainError::InvalidArgument(format!("optimizer buffer '{buffer}' is too short"))
                })?;
                tensors.push((format!("optimizer/{buffer}/{name}"), (*shape).clone(), piece));
                offset += n;
            }
        }
    }

    // Pack pieces into shards of at most `cap` values, cutting tensors where they overflow.
    let cap = (options.max_shard_bytes / 4).max(1) as usize;
    let mut shards: Vec<Vec<(String, &[f32])>> = vec![Vec::new()];
    let mut filled = 0;
    let mut entries = Vec::with_capacity(tensors.len());
    for (name, shape, mut data) in tensors {
        let mut pieces = Vec::new();
        loop {
            if filled == cap {
                shards.push(Vec::new());
                filled = 0;
            }
            let take = data.len().min(cap - filled);
            let key = format!("{name}#{}", pieces.len());
            shards.last_mut().expect("a shard").push((key.clone(), &data[..take]));
            pieces.push((shards.len() - 1, key, take));
            filled += take;
            data = &data[take..];
            if data.is_empty() {
                break;
            }
        }
        entries.push(Entry { name, shape, pieces });
    }

    let folder_name = format!("ckpt-{:010}", progress.step);
    let folder = sparktrain_storage::join_url(model_dir, &folder_name);
    let n = shards.len();
    let shard_names: Vec<String> = (0..n).map(|i| format!("shard-{i:05}-of-{n:05}.safetensors")).collect();
    for (pieces, file) in shards.iter().zip(&shard_names) {
        let views = pieces
            .iter()
            .map(|(key, values)| {
                let view = TensorView::new(Dtype::F32, vec![values.len()], bytemuck::cast_slice(values))
                    .map_err(|e| TrainError::format(sparktrain_storage::join_url(&folder, file), e))?;
                Ok((key.clone(), view))
            })
            .collect::<Result<Vec<_>>>()?;
        let bytes = safetensors::serialize(views, None)
            .map_err(|e| TrainError::format(sparktrain_storage::join_url(&folder, file), e))?;
        sparktrain_storage::write(&sparktrain_storage::join_url(&folder, file), &bytes, true)?;
    }
    let groups = optimizer
        .iter()
        .map(|g| SavedGroup {
            group: g.group.clone(),
            step: g.state.step,
            tensors: g.tensors.clone(),
            buffers: g.state.buffers.iter().map(|(b, _)| b.clone()).collect(),
        })
        .collect();
    let manifest = Manifest { progress, groups, shards: shard_names, tensors: entries };
    let json = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
    sparktrain_storage::write(&sparktrain_storage::join_url(&folder, MANIFEST), &json, true)?;

    // Publish, then prune what is no longer kept.
    let mut kept = read_index(model_dir)?.map(|i| i.kept).unwrap_or_default();
    kept.retain(|k| k != &folder_name);
    kept.push(folder_name.clone());
    let dropped: Vec<String> = kept.drain(..kept.len().saturating_sub(options.keep.max(1))).collect();
    let index = Index { latest: folder_name, kept };
    let json = serde_json::to_vec_pretty(&index).expect("an index serializes");
    sparktrain_storage::write(&sparktrain_storage::join_url(model_dir, INDEX), &json, true)?;
    for old in dropped {
        sparktrain_storage::delete(&sparktrain_storage::join_url(model_dir, &old), true)?;
    }
    Ok(folder)
}

/// Whether `name` is a checkpoint folder's name as [`save`] makes them (`ckpt-<step>`): the
/// index names folders that are pruned recursively, so nothing else may pass (`..`, a path).
fn is_checkpoint_name(name: &str) -> bool {
    name.strip_prefix("ckpt-")
        .is_some_and(|step| !step.is_empty() && step.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `name` is a shard file's name as [`save`] makes them.
fn is_shard_name(name: &str) -> bool {
    name.strip_prefix("shard-").and_then(|rest| rest.strip_suffix(".safetensors")).is_some_and(|middle| {
        middle.split_once("-of-").is_some_and(|(i, n)| {
            [i, n].iter().all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

fn read_index(model_dir: &str) -> Result<Option<Index>> {
    let url = sparktrain_storage::join_url(model_dir, INDEX);
    if !sparktrain_storage::exists(&url)? {
        return Ok(None);
    }
    let bytes = sparktrain_storage::read(&url)?;
    let index: Index = serde_json::from_slice(&bytes).map_err(|e| TrainError::format(url.clone(), e))?;
    if let Some(bad) = std::iter::once(&index.latest).chain(&index.kept).find(|n| !is_checkpoint_name(n)) {
        return Err(TrainError::format(url, format!("'{bad}' is not a checkpoint folder (ckpt-<step>)")));
    }
    Ok(Some(index))
}

/// Removes what a save killed midway left under `model_dir`: checkpoint folders that the index
/// does not name (all of them when there is no index) and hidden temporary files. Returns
/// what it removed.
pub fn remove_partial(model_dir: &str) -> Result<Vec<String>> {
    if !sparktrain_storage::exists(model_dir)? {
        return Ok(Vec::new());
    }
    let kept = read_index(model_dir)?.map(|i| i.kept).unwrap_or_default();
    let mut removed = Vec::new();
    for entry in sparktrain_storage::list(model_dir)? {
        let name = entry.name().to_string();
        let partial = if entry.is_dir {
            is_checkpoint_name(&name) && !kept.contains(&name)
        } else {
            sparktrain_storage::is_temp_name(&name)
        };
        if partial {
            sparktrain_storage::delete(&entry.url, true)?;
            removed.push(entry.url);
        }
    }
    Ok(removed)
}

/// The latest checkpoint under `model_dir`, or None when there is none; its tensors must
/// match `layout`. Reading changes nothing: what an interrupted save left behind is for the
/// next writer to remove ([`remove_partial`]), since a save may be under way right now.
pub fn restore(model_dir: &str, layout: &Layout) -> Result<Option<Restored>> {
    let Some(index) = read_index(model_dir)? else { return Ok(None) };
    let folder = sparktrain_storage::join_url(model_dir, &index.latest);
    let manifest_url = sparktrain_storage::join_url(&folder, MANIFEST);
    let manifest: Manifest = serde_json::from_slice(&sparktrain_storage::read(&manifest_url)?)
        .map_err(|e| TrainError::format(manifest_url.clone(), e))?;
    if let Some(bad) = manifest.shards.iter().find(|s| !is_shard_name(s)) {
        return Err(TrainError::format(manifest_url, format!("'{bad}' is not a shard file name")));
    }
    let pieces = manifest.tensors.iter().flat_map(|e| e.pieces.iter().map(move |p| (e, p.0)));
    if let Some((entry, shard)) = pieces.into_iter().find(|(_, shard)| *shard >= manifest.shards.len()) {
        let n = manifest.shards.len();
        return Err(TrainError::format(
            manifest_url,
            format!("tensor '{}' names shard {shard}, but there are {n}", entry.name),
        ));
    }
    let saved: HashMap<&str, &Entry> = manifest.tensors.iter().map(|e| (e.name.as_str(), e)).collect();

    let mut shards: Vec<Option<Vec<u8>>> = vec![None; manifest.shards.len()];
    let mut load = |entry: &Entry, out: &mut Vec<f32>| -> Result<()> {
        for (shard, key, len) in &entry.pieces {
            let url = sparktrain_storage::join_url(&folder, &manifest.shards[*shard]);
            let bytes = match &mut shards[*shard] {
                Some(b) => b,
                slot => slot.insert(sparktrain_storage::read(&url)?),
            };
            let file = SafeTensors::deserialize(bytes).map_err(|e| TrainError::format(url.clone(), e))?;
            let view =
                file.tensor(key).map_err(|e| TrainError::format(url.clone(), format!("{key}: {e}")))?;
            if view.dtype() != Dtype::F32 || view.data().len() != len * 4 {
                return Err(TrainError::format(url, format!("{key} is not {len} float32 values")));
            }
            out.extend(view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        }
        Ok(())
    };
    let find = |name: &str, shape: &Vec<usize>| -> Result<&Entry> {
        match saved.get(name) {
            Some(e) if &e.shape == shape => Ok(e),
            Some(e) => Err(TrainError::StateMismatch(format!(
                "{folder}: '{name}' has shape {:?} there, the model has {shape:?}",
                e.shape
            ))),
            None => Err(TrainError::StateMismatch(format!("{folder} has no tensor '{name}'"))),
        }
    };
    let mut weights = Vec::new();
    for (name, shape) in layout {
        load(find(name, shape)?, &mut weights)?;
    }
    let shapes: HashMap<&str, &Vec<usize>> = layout.iter().map(|(n, s)| (n.as_str(), s)).collect();
    let mut groups = Vec::new();
    for group in &manifest.groups {
        let mut buffers = Vec::new();
        for buffer in &group.buffers {
            let mut values = Vec::new();
            for name in &group.tensors {
                let shape = shapes.get(name.as_str()).ok_or_else(|| {
                    TrainError::StateMismatch(format!(
                        "{folder}: the optimizer trained '{name}', the model has none"
                    ))
                })?;
                load(find(&format!("optimizer/{buffer}/{name}"), shape)?, &mut values)?;
            }
            buffers.push((buffer.clone(), values));
        }
        groups.push(GroupState {
            group: group.group.clone(),
            tensors: group.tensors.clone(),
            state: OptimizerState { step: group.step, buffers },
        });
    }
    Ok(Some(Restored { progress: manifest.progress, weights, optimizer: groups }))
}
