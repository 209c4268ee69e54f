//! The chief's checkpoints: weights, optimizer state and input position, on any storage URL.
//!
//! Layout under `model_dir`:
//! - `ckpt-<step>-g<generation>/shard-<i>-of-<n>.safetensors`: every weight and optimizer
//!   buffer as flat float32 pieces, at most `max_shard_bytes` per file (1 GiB by default), a
//!   large tensor cut across files, so that models over 4 GB store fine on HDFS;
//! - `ckpt-<step>-g<generation>/manifest.json`: shapes, where each piece lives, and the progress;
//! - `_index/<version>.json`: the index, one file per version: the latest checkpoint, those
//!   kept, and who wrote it (a [`Fence`]: the job and its generation), written last;
//! - `checkpoint.json`: a copy of the newest version, for people and tools.
//!
//! Earlier versions wrote `ckpt-<step>` folders and `checkpoint.json` alone: they are read,
//! kept and pruned the same way.
//!
//! Every file appears atomically, and the index only names a checkpoint once all of its files
//! are in place, so a job killed mid-save resumes from the previous one. What such a save left
//! behind (a checkpoint folder the index does not name, a hidden temporary file or staging
//! folder) is removed by the next writer before its first save ([`claim`]).
//!
//! Writers are fenced by generation, since a chief cut off from the driver but not from
//! storage may go on saving after the driver started the next generation:
//! - a checkpoint's folder carries its writer's generation, and a folder that exists is never
//!   written into: it is written under a hidden temporary name and renamed into place without
//!   replacing (on object stores, which cannot rename, each file is created only if absent);
//! - the index never moves back to an older generation: version `n + 1` is created only if
//!   absent, after the writer checked version `n`, so each version was checked against the one
//!   before it, and a writer refuses ([`TrainError::Superseded`]) to publish over an index of a
//!   later generation of its own job or of a job that took the folder over from its own;
//! - a writer claims `model_dir` before its first save ([`claim`]): from then on, older
//!   generations are refused, and what they leave is removed as partial.
//!
//! Generations count restarts within one job, so a job takes over an index that another job
//! wrote (an earlier run in the same `model_dir`), and records that job as superseded. How far
//! this holds depends on the store: see `docs/architecture.md`.
//!
//! Sharded embedding tables ([`crate::shard`]) are saved by their owners, in parallel, with no
//! gathering on the chief: owner `r` of `n` writes `tables-<r>-of-<n>-<part>` files in the
//! checkpoint's staging folder ([`stage`]) holding its rows (local row `k` is id `r + k·n`) as
//! `<table>` and `optimizer/<buffer>/<table>` tensors of `[rows, width]`, cut between rows at
//! `max_shard_bytes`. The manifest's `tables` section ([`TableFiles`]) lists every owner's
//! files; its optimizer groups still name the tables they train. The chief writes the manifest,
//! publishes the folder and the index only once every owner has written its files. A restore
//! with the same number of trainers reads each owner's own files; with another, each trainer
//! reads the rows it now owns from every old owner's files ([`restore_rows`]). A replicated run
//! restores a sharded checkpoint (the tables are put together whole) and a sharded run a
//! replicated one.

use std::collections::HashMap;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use sparktrain_storage::StorageError;

use crate::error::{Result, TrainError};
use crate::groups::GroupState;
use crate::optim::OptimizerState;
use crate::shard::RowsView;

/// The default largest shard file.
pub const MAX_SHARD_BYTES: u64 = 1 << 30;

/// The copy of the index's newest version.
const INDEX: &str = "checkpoint.json";
/// The folder of the index's versions.
const VERSIONS: &str = "_index";
const MANIFEST: &str = "manifest.json";
/// Versions of the index kept besides the newest (a reader that listed the versions just
/// before a writer pruned one lists them again).
const VERSIONS_KEPT: u64 = 16;
/// Jobs an index remembers as taken over, newest first.
const SUPERSEDED_KEPT: usize = 16;
/// Versions a writer tries to publish before giving up: each failed try means another writer
/// published that version meanwhile.
const PUBLISH_TRIES: usize = 64;
/// Reads of the newest version retried when it was pruned between the listing and the read.
const READ_TRIES: usize = 4;

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
    /// Who writes them.
    pub fence: Fence,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions { max_shard_bytes: MAX_SHARD_BYTES, keep: 3, fence: Fence::default() }
    }
}

/// Who writes a `model_dir`'s checkpoints: a job, by an id that is the same in every
/// generation, and the job's generation. A writer is refused once a later generation of its
/// job, or a job that took the folder over from its own, has published the index.
///
/// The default, an empty job at generation 0, is a writer outside any job (a trainer on its
/// own): it takes over any index and is refused only by the same empty job at a later
/// generation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The job's id; empty outside a job.
    pub job: String,
    /// The job's generation: 0, then one more after each restart.
    pub generation: u64,
}

impl Fence {
    /// Refuses `index` when a later generation of this job, or a job that took the folder over
    /// from this one, wrote it.
    fn admits(&self, model_dir: &str, index: &Index) -> Result<()> {
        let refused = |by_job: Option<String>| TrainError::Superseded {
            model_dir: model_dir.to_string(),
            generation: self.generation,
            by_job,
            by_generation: index.generation,
        };
        if index.job == self.job {
            if index.generation > self.generation {
                return Err(refused(None));
            }
        } else if !self.job.is_empty() && index.superseded.contains(&self.job) {
            return Err(refused(Some(index.job.clone())));
        }
        Ok(())
    }

    /// The next version of `previous` (None: there is none), as this writer publishes it: the
    /// same checkpoints, this writer's job and generation, and the jobs it took over from.
    fn next(&self, previous: Option<&Index>) -> Index {
        let superseded = match previous {
            Some(p) if p.job != self.job => {
                let mut jobs: Vec<String> = Vec::new();
                for job in std::iter::once(&p.job).chain(&p.superseded) {
                    if !job.is_empty() && job != &self.job && !jobs.contains(job) {
                        jobs.push(job.clone());
                    }
                }
                jobs.truncate(SUPERSEDED_KEPT);
                jobs
            }
            Some(p) => p.superseded.clone(),
            None => Vec::new(),
        };
        Index {
            latest: previous.and_then(|p| p.latest.clone()),
            kept: previous.map(|p| p.kept.clone()).unwrap_or_default(),
            version: previous.map_or(0, |p| p.version) + 1,
            job: self.job.clone(),
            generation: self.generation,
            superseded,
        }
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
    /// The checkpoint's folder (where sharded tables' rows are read from).
    pub folder: String,
}

/// The rows of the sharded tables one owner saved, by table: where they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableFiles {
    /// The trainers that owned the rows (owner `r` held ids `r, r + workers, ...`).
    pub workers: usize,
    /// The tables.
    pub tables: Vec<SavedTable>,
    /// By owner: its files, in the order of its rows.
    pub owners: Vec<Vec<RowFile>>,
}

/// A sharded table of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedTable {
    /// Its name.
    pub name: String,
    /// The whole table's shape, `[rows, width]`.
    pub shape: Vec<usize>,
    /// Its optimizer's buffers, saved beside its rows.
    pub buffers: Vec<String>,
}

/// A file of an owner's rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowFile {
    /// Its name in the checkpoint's folder.
    pub file: String,
    /// Its first row's index among the owner's rows.
    pub first: usize,
    /// How many rows it holds.
    pub rows: usize,
}

/// One table's rows that an owner saves.
pub struct OwnedTable<'a> {
    /// The table's name.
    pub name: &'a str,
    /// The whole table's shape.
    pub shape: &'a [usize],
    /// The owner's rows and their optimizer state.
    pub rows: RowsView<'a>,
}

/// One table's rows as [`restore_rows`] gives them to their new owner.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedRows {
    /// The rows (local row `k` is id `rank + k·workers`), row after row.
    pub values: Vec<f32>,
    /// The optimizer's buffers, laid out the same way.
    pub buffers: Vec<(String, Vec<f32>)>,
    /// The optimizer's step count: its group's.
    pub step: u64,
}

/// A version of the index. Earlier versions wrote only `latest` and `kept`: their writer is
/// read as the empty job at generation 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Index {
    /// The checkpoint to resume from; None once a writer claimed the folder before its first
    /// save.
    latest: Option<String>,
    /// The checkpoints kept, oldest first.
    kept: Vec<String>,
    /// The version (0: the `checkpoint.json` of an earlier version, with no `_index`).
    #[serde(default)]
    version: u64,
    /// The job that wrote it.
    #[serde(default)]
    job: String,
    /// That job's generation.
    #[serde(default)]
    generation: u64,
    /// Jobs that this index's job, or one before it, took the folder over from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    superseded: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Manifest {
    progress: Progress,
    groups: Vec<SavedGroup>,
    shards: Vec<String>,
    tensors: Vec<Entry>,
    /// The tables their owners saved, when they were sharded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tables: Option<TableFiles>,
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
    let staged = stage(model_dir, progress.step, &options.fence)?;
    save_with(model_dir, &staged, layout, weights, optimizer, progress, options, None)
}

/// The folder of the checkpoint of step `step` by generation `generation` under `model_dir`.
pub fn folder_of(model_dir: &str, step: u64, generation: u64) -> String {
    sparktrain_storage::join_url(model_dir, &format!("ckpt-{step:010}-g{generation}"))
}

/// A checkpoint being written: its files go into `staging`, which becomes `folder` when it is
/// published (the same folder on object stores, which cannot rename).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    /// The checkpoint's folder.
    pub folder: String,
    /// Where its files are written.
    pub staging: String,
}

/// Starts the checkpoint of step `step` by `fence` under `model_dir`: refuses a superseded
/// writer before anything is written, and a folder that exists (a committed checkpoint is
/// never written into), then makes the staging folder. [`save_with`] publishes it.
pub fn stage(model_dir: &str, step: u64, fence: &Fence) -> Result<Staged> {
    if let Some(index) = read_index(model_dir)? {
        fence.admits(model_dir, &index)?;
    }
    let folder = folder_of(model_dir, step, fence.generation);
    if sparktrain_storage::exists(&folder)? {
        return Err(StorageError::AlreadyExists { url: folder }.into());
    }
    let staging = if sparktrain_storage::renames_atomically(&folder)? {
        let staging = sparktrain_storage::sibling_temp(&folder)?;
        sparktrain_storage::mkdirs(&staging)?;
        staging
    } else {
        folder.clone()
    };
    Ok(Staged { folder, staging })
}

/// [`save`] into a checkpoint [`stage`] started, for a run whose sharded tables their owners
/// saved there as `tables` says (with [`save_rows`]): `layout` and `weights` leave them out,
/// and the optimizer groups name them among the tensors they train but hold state for the
/// rest alone. The chief calls it once every owner's files are written; it writes the rest,
/// publishes the folder, then the index (pruning what is no longer kept), and returns the
/// folder.
#[allow(clippy::too_many_arguments)]
pub fn save_with(
    model_dir: &str,
    staged: &Staged,
    layout: &Layout,
    weights: &[f32],
    optimizer: &[GroupState],
    progress: Progress,
    options: &CheckpointOptions,
    tables: Option<&TableFiles>,
) -> Result<String> {
    match write_files(staged, layout, weights, optimizer, progress, options, tables) {
        Ok(()) => commit(model_dir, staged, options),
        Err(e) => {
            // Nothing names the staged folder yet: remove it now rather than at the next claim.
            let _ = sparktrain_storage::delete(&staged.staging, true);
            Err(e)
        }
    }
}

/// Writes the shards and the manifest of [`save_with`] into the staging folder.
fn write_files(
    staged: &Staged,
    layout: &Layout,
    weights: &[f32],
    optimizer: &[GroupState],
    progress: Progress,
    options: &CheckpointOptions,
    tables: Option<&TableFiles>,
) -> Result<()> {
    let elsewhere: Vec<&str> =
        tables.map(|t| t.tables.iter().map(|t| t.name.as_str()).collect()).unwrap_or_default();
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
            for name in group.tensors.iter().filter(|n| !elsewhere.contains(&n.as_str())) {
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

    let folder = &staged.staging;
    let n = shards.len();
    let shard_names: Vec<String> = (0..n).map(|i| format!("shard-{i:05}-of-{n:05}.safetensors")).collect();
    for (pieces, file) in shards.iter().zip(&shard_names) {
        let views = pieces
            .iter()
            .map(|(key, values)| {
                let view = TensorView::new(Dtype::F32, vec![values.len()], bytemuck::cast_slice(values))
                    .map_err(|e| TrainError::format(sparktrain_storage::join_url(folder, file), e))?;
                Ok((key.clone(), view))
            })
            .collect::<Result<Vec<_>>>()?;
        let bytes = safetensors::serialize(views, None)
            .map_err(|e| TrainError::format(sparktrain_storage::join_url(folder, file), e))?;
        sparktrain_storage::write(&sparktrain_storage::join_url(folder, file), &bytes, false)?;
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
    let manifest =
        Manifest { progress, groups, shards: shard_names, tensors: entries, tables: tables.cloned() };
    let json = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
    sparktrain_storage::write(&sparktrain_storage::join_url(folder, MANIFEST), &json, false)?;
    Ok(())
}

/// Publishes a staged checkpoint: its folder (renamed into place without replacing), then
/// the index; prunes what is no longer kept. A superseded writer's folder is removed again.
fn commit(model_dir: &str, staged: &Staged, options: &CheckpointOptions) -> Result<String> {
    let folder = &staged.folder;
    if staged.staging != *folder
        && let Err(e) = sparktrain_storage::rename(&staged.staging, folder, false)
    {
        let _ = sparktrain_storage::delete(&staged.staging, true);
        return Err(e.into());
    }
    let name = folder.rsplit('/').next().unwrap_or(folder).to_string();
    let mut dropped = Vec::new();
    let published = publish(model_dir, &options.fence, |index| {
        index.kept.retain(|k| k != &name);
        index.kept.push(name.clone());
        dropped = index.kept.drain(..index.kept.len().saturating_sub(options.keep.max(1))).collect();
        index.latest = Some(name.clone());
    });
    if let Err(e) = published {
        if matches!(e, TrainError::Superseded { .. }) {
            // Nothing can name the folder any more: remove it now rather than at the next
            // claim. After other failures a version may name it (a lost answer, or the copy
            // failing after the version was created), so it stays.
            let _ = sparktrain_storage::delete(folder, true);
        }
        return Err(e);
    }
    for old in dropped {
        sparktrain_storage::delete(&sparktrain_storage::join_url(model_dir, &old), true)?;
    }
    Ok(folder.clone())
}

/// Publishes the next version of the index under `model_dir`, as `fence` and then `update`
/// make it from the newest one; returns it. A version that another writer created meanwhile is
/// read and checked in turn, so every version was checked against the one before it.
fn publish(model_dir: &str, fence: &Fence, mut update: impl FnMut(&mut Index)) -> Result<Index> {
    for _ in 0..PUBLISH_TRIES {
        let previous = read_index(model_dir)?;
        if let Some(next) = publish_over(model_dir, previous.as_ref(), fence, &mut update)? {
            return Ok(next);
        }
    }
    Err(TrainError::format(
        sparktrain_storage::join_url(model_dir, VERSIONS),
        format!("other writers published every one of {PUBLISH_TRIES} versions this writer tried"),
    ))
}

/// Publishes the version after `previous`, as read by this writer: None when another writer
/// created that version first (it must be read and checked in turn).
fn publish_over(
    model_dir: &str,
    previous: Option<&Index>,
    fence: &Fence,
    update: &mut impl FnMut(&mut Index),
) -> Result<Option<Index>> {
    if let Some(index) = previous {
        fence.admits(model_dir, index)?;
    }
    let mut next = fence.next(previous);
    update(&mut next);
    let json = serde_json::to_vec_pretty(&next).expect("an index serializes");
    match sparktrain_storage::write(&version_url(model_dir, next.version), &json, false) {
        Ok(_) => {}
        Err(StorageError::AlreadyExists { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // The copy may lag behind, even go back, when writers race: only the versions decide.
    sparktrain_storage::write(&sparktrain_storage::join_url(model_dir, INDEX), &json, true)?;
    if let Some(old) = next.version.checked_sub(VERSIONS_KEPT).filter(|v| *v > 0) {
        // Best effort: an old version left behind is only a small file.
        let _ = sparktrain_storage::delete(&version_url(model_dir, old), false);
    }
    Ok(Some(next))
}

/// Makes `fence` the writer of `model_dir` before its first save there: refuses it
/// ([`TrainError::Superseded`]) when a later generation of its job, or a job that took the
/// folder over from its own, writes there; otherwise records it in a new version of the index
/// (unless the newest one is its own already), so that from now on older generations are
/// refused, and then removes what an interrupted save left ([`remove_partial`]), which no
/// refused writer can publish any more. Returns what it removed.
pub fn claim(model_dir: &str, fence: &Fence) -> Result<Vec<String>> {
    let newest = read_index(model_dir)?;
    let own = newest.as_ref().is_some_and(|i| i.job == fence.job && i.generation == fence.generation);
    if !own {
        publish(model_dir, fence, |_| {})?;
    }
    remove_partial(model_dir)
}

/// Writes owner `rank`'s (of `workers`) rows of every sharded table into the checkpoint folder
/// `folder`: files of at most `max_shard_bytes` (a row is never cut), each holding the same
/// run of rows of every table and of its optimizer's buffers. Returns the files.
pub fn save_rows(
    folder: &str,
    rank: usize,
    workers: usize,
    tables: &[OwnedTable<'_>],
    max_shard_bytes: u64,
) -> Result<Vec<RowFile>> {
    let width = |t: &OwnedTable<'_>| t.shape.get(1).copied().unwrap_or(1).max(1);
    let held = tables.first().map_or(0, |t| t.rows.values.len() / width(t));
    if let Some(t) = tables.iter().find(|t| t.rows.values.len() != held * width(t)) {
        return Err(TrainError::InvalidArgument(format!("table '{}': not {held} rows", t.name)));
    }
    let row_bytes: usize = tables.iter().map(|t| width(t) * (1 + t.rows.buffers.len()) * 4).sum();
    let per_file = (max_shard_bytes as usize / row_bytes.max(1)).max(1);
    let mut files = Vec::new();
    for (part, first) in (0..held).step_by(per_file).enumerate() {
        let rows = per_file.min(held - first);
        let file = format!("tables-{rank:05}-of-{workers:05}-{part:05}.safetensors");
        let url = sparktrain_storage::join_url(folder, &file);
        let mut views = Vec::new();
        for t in tables {
            let w = width(t);
            let piece = |values: &'_ [f32]| values[first * w..(first + rows) * w].to_vec();
            views.push((t.name.to_string(), piece(t.rows.values)));
            for (buffer, values) in &t.rows.buffers {
                views.push((format!("optimizer/{buffer}/{}", t.name), piece(values)));
            }
        }
        let tensors = views
            .iter()
            .zip(tables.iter().flat_map(|t| std::iter::repeat_n(width(t), 1 + t.rows.buffers.len())))
            .map(|((key, values), w)| {
                TensorView::new(Dtype::F32, vec![rows, w], bytemuck::cast_slice(values))
                    .map(|view| (key.clone(), view))
                    .map_err(|e| TrainError::format(url.clone(), e))
            })
            .collect::<Result<Vec<_>>>()?;
        let bytes = safetensors::serialize(tensors, None).map_err(|e| TrainError::format(url.clone(), e))?;
        sparktrain_storage::write(&url, &bytes, false)?;
        files.push(RowFile { file, first, rows });
    }
    Ok(files)
}

/// Whether `name` is a row file's name as [`save_rows`] makes them.
pub(crate) fn is_row_file_name(name: &str) -> bool {
    name.strip_prefix("tables-").and_then(|rest| rest.strip_suffix(".safetensors")).is_some_and(|middle| {
        let parts: Vec<&str> = middle.split(['-']).collect();
        matches!(parts.as_slice(), [r, "of", n, p] if [r, n, p].iter().all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit())))
    })
}

/// Whether `name` is a checkpoint folder's name as [`save`] makes them (`ckpt-<step>-g<generation>`,
/// or `ckpt-<step>` from earlier versions): the index names folders that are pruned
/// recursively, so nothing else may pass (`..`, a path).
fn is_checkpoint_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("ckpt-").is_some_and(|rest| match rest.split_once("-g") {
        Some((step, generation)) => digits(step) && digits(generation),
        None => digits(rest),
    })
}

/// Whether `name` is the hidden staging folder of a checkpoint ([`stage`]): other hidden
/// folders in `model_dir` (an export that `replace_dir` moved away and a crash left there) are
/// not a save's leftovers.
fn is_checkpoint_staging(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.strip_suffix(".tmp"))
        .and_then(|n| n.rsplit_once('.'))
        .is_some_and(|(of, _)| is_checkpoint_name(of))
}

/// Whether `name` is a shard file's name as [`save`] makes them.
fn is_shard_name(name: &str) -> bool {
    name.strip_prefix("shard-").and_then(|rest| rest.strip_suffix(".safetensors")).is_some_and(|middle| {
        middle.split_once("-of-").is_some_and(|(i, n)| {
            [i, n].iter().all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

/// The URL of the index's version `version`.
fn version_url(model_dir: &str, version: u64) -> String {
    let versions = sparktrain_storage::join_url(model_dir, VERSIONS);
    sparktrain_storage::join_url(&versions, &format!("{version:020}.json"))
}

/// The newest version of the index under `model_dir`, or None when there is none: from
/// `_index`, or from `checkpoint.json` alone where no writer of this version wrote yet.
fn read_index(model_dir: &str) -> Result<Option<Index>> {
    for _ in 0..READ_TRIES {
        let Some(version) = newest_version(model_dir)? else {
            let url = sparktrain_storage::join_url(model_dir, INDEX);
            if !sparktrain_storage::exists(&url)? {
                return Ok(None);
            }
            let bytes = sparktrain_storage::read(&url)?;
            return parse_index(&url, &bytes).map(|index| Some(Index { version: 0, ..index }));
        };
        let url = version_url(model_dir, version);
        match sparktrain_storage::read(&url) {
            // The file's name says its version, whatever it holds.
            Ok(bytes) => return parse_index(&url, &bytes).map(|index| Some(Index { version, ..index })),
            // Pruned since it was listed: a newer one exists.
            Err(StorageError::NotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(TrainError::format(
        sparktrain_storage::join_url(model_dir, VERSIONS),
        "the newest version kept disappearing while it was read",
    ))
}

/// The highest version in `_index`, if any.
fn newest_version(model_dir: &str) -> Result<Option<u64>> {
    let versions = sparktrain_storage::join_url(model_dir, VERSIONS);
    let listed = match sparktrain_storage::list(&versions) {
        Ok(listed) => listed,
        Err(StorageError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(listed
        .iter()
        .filter(|f| !f.is_dir)
        .filter_map(|f| f.name().strip_suffix(".json")?.parse::<u64>().ok())
        .max())
}

fn parse_index(url: &str, bytes: &[u8]) -> Result<Index> {
    let index: Index = serde_json::from_slice(bytes).map_err(|e| TrainError::format(url, e))?;
    if let Some(bad) = index.latest.iter().chain(&index.kept).find(|n| !is_checkpoint_name(n)) {
        return Err(TrainError::format(
            url,
            format!("'{bad}' is not a checkpoint folder (ckpt-<step>-g<generation>)"),
        ));
    }
    Ok(index)
}

/// Removes what a save killed midway left under `model_dir`: checkpoint folders that the index
/// does not name (all of them when there is no index), checkpoints' staging folders and hidden
/// temporary files. Returns what it removed. Only a writer that claimed the folder calls it
/// ([`claim`]): a save under way elsewhere would lose its files.
pub fn remove_partial(model_dir: &str) -> Result<Vec<String>> {
    if !sparktrain_storage::exists(model_dir)? {
        return Ok(Vec::new());
    }
    let kept = read_index(model_dir)?.map(|i| i.kept).unwrap_or_default();
    let mut removed = Vec::new();
    for entry in sparktrain_storage::list(model_dir)? {
        let name = entry.name().to_string();
        let partial = if entry.is_dir {
            (is_checkpoint_name(&name) && !kept.contains(&name)) || is_checkpoint_staging(&name)
        } else {
            sparktrain_storage::is_temp_name(&name)
        };
        if partial {
            sparktrain_storage::delete(&entry.url, true)?;
            removed.push(entry.url);
        }
    }
    // A version of the index whose writer died before renaming it into place.
    let versions = sparktrain_storage::join_url(model_dir, VERSIONS);
    if sparktrain_storage::exists(&versions)? {
        for entry in sparktrain_storage::list(&versions)? {
            if !entry.is_dir && sparktrain_storage::is_temp_name(entry.name()) {
                sparktrain_storage::delete(&entry.url, false)?;
                removed.push(entry.url);
            }
        }
    }
    Ok(removed)
}

/// The latest checkpoint under `model_dir`, or None when there is none; its tensors must
/// match `layout`. Reading changes nothing: what an interrupted save left behind is for the
/// next writer to remove ([`claim`]), since a save may be under way right now.
/// Tables that a sharded run saved by owner are put together whole.
pub fn restore(model_dir: &str, layout: &Layout) -> Result<Option<Restored>> {
    restore_except(model_dir, layout, &[])
}

/// [`restore`] for a run whose tables named in `sharded` are sharded: `layout` leaves them
/// out, and so do the weights and optimizer groups given back; each owner then reads its rows
/// from the folder given back with [`restore_rows`].
pub fn restore_except(model_dir: &str, layout: &Layout, sharded: &[String]) -> Result<Option<Restored>> {
    let Some(index) = read_index(model_dir)? else { return Ok(None) };
    let Some(folder) = resume_folder(model_dir, &index)? else { return Ok(None) };
    restore_from(&folder, layout, sharded).map(Some).map_err(|e| match e {
        // A file the manifest names is gone: the checkpoint is damaged, not the storage.
        TrainError::Storage(StorageError::NotFound { url }) => TrainError::format(
            url,
            format!(
                "a file of checkpoint {folder} is missing; remove that folder to resume from the \
                 checkpoint before it"
            ),
        ),
        e => e,
    })
}

/// The checkpoint to resume from: the index's latest, or, when its folder was removed (the
/// fix for a damaged checkpoint), the newest one the index keeps that is still there.
fn resume_folder(model_dir: &str, index: &Index) -> Result<Option<String>> {
    let Some(latest) = &index.latest else { return Ok(None) };
    let older = index.kept.iter().rev().filter(|name| *name != latest);
    for name in std::iter::once(latest).chain(older) {
        let folder = sparktrain_storage::join_url(model_dir, name);
        if !sparktrain_storage::exists(&sparktrain_storage::join_url(&folder, MANIFEST))? {
            continue;
        }
        if name != latest {
            eprintln!("{model_dir}: the latest checkpoint, {latest}, is gone; resuming from {name}");
        }
        return Ok(Some(folder));
    }
    Err(TrainError::format(
        sparktrain_storage::join_url(model_dir, INDEX),
        format!(
            "names checkpoint {latest}, which is gone, and no checkpoint it keeps is there: remove \
             {model_dir} to train afresh"
        ),
    ))
}

/// The state saved in the checkpoint `folder` (see [`restore_except`]).
fn restore_from(folder: &str, layout: &Layout, sharded: &[String]) -> Result<Restored> {
    let folder = folder.to_string(); // moved into the result
    let manifest = read_manifest(&folder)?;
    let saved: HashMap<&str, &Entry> = manifest.tensors.iter().map(|e| (e.name.as_str(), e)).collect();
    // The layout's tables that their owners saved: put together whole, as one owner's rows.
    let by_owner: Vec<&SavedTable> = manifest.tables.iter().flat_map(|t| &t.tables).collect();
    let whole_tables: Vec<(&String, &Vec<usize>, Vec<&str>)> = layout
        .iter()
        .filter_map(|(name, shape)| {
            let saved = by_owner.iter().find(|t| &t.name == name)?;
            Some((name, shape, saved.buffers.iter().map(String::as_str).collect()))
        })
        .collect();
    let requests: Vec<TableRequest<'_>> =
        whole_tables.iter().map(|(name, shape, buffers)| TableRequest { name, shape, buffers }).collect();
    let mut whole: HashMap<&str, OwnedRows> = whole_tables
        .iter()
        .map(|(n, ..)| n.as_str())
        .zip(restore_rows_from(&folder, &manifest, &requests, 0, 1)?)
        .collect();

    let mut shards = ShardCache::new(&manifest);
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
        match whole.get_mut(name.as_str()) {
            Some(rows) => weights.append(&mut rows.values),
            None => shards
                .load(&folder, find(name, shape)?, &mut |_, values| weights.extend_from_slice(values))?,
        }
    }
    let shapes: HashMap<&str, &Vec<usize>> = layout.iter().map(|(n, s)| (n.as_str(), s)).collect();
    let mut groups = Vec::new();
    for group in &manifest.groups {
        let tensors: Vec<String> = group.tensors.iter().filter(|n| !sharded.contains(n)).cloned().collect();
        let mut buffers = Vec::new();
        for buffer in &group.buffers {
            let mut values = Vec::new();
            for name in &tensors {
                let shape = shapes.get(name.as_str()).ok_or_else(|| {
                    TrainError::StateMismatch(format!(
                        "{folder}: the optimizer trained '{name}', the model has none"
                    ))
                })?;
                match whole.get_mut(name.as_str()) {
                    Some(rows) => {
                        let saved = rows.buffers.iter_mut().find(|(b, _)| b == buffer).ok_or_else(|| {
                            TrainError::StateMismatch(format!(
                                "{folder}: '{name}' has no optimizer buffer '{buffer}'"
                            ))
                        })?;
                        values.append(&mut saved.1);
                    }
                    None => shards.load(
                        &folder,
                        find(&format!("optimizer/{buffer}/{name}"), shape)?,
                        &mut |_, v| values.extend_from_slice(v),
                    )?,
                }
            }
            buffers.push((buffer.clone(), values));
        }
        groups.push(GroupState {
            group: group.group.clone(),
            tensors,
            state: OptimizerState { step: group.step, buffers },
        });
    }
    Ok(Restored { progress: manifest.progress, weights, optimizer: groups, folder })
}

/// A sharded table whose rows a trainer restores.
pub struct TableRequest<'a> {
    /// Its name.
    pub name: &'a str,
    /// The whole table's shape, `[rows, width]`.
    pub shape: &'a [usize],
    /// The optimizer buffers its rule keeps.
    pub buffers: &'a [&'a str],
}

/// Trainer `rank`'s (of `workers`) rows of every table of `tables` in the checkpoint folder
/// `folder`, with their optimizer state: from the files of every old owner that held some of
/// them (its own alone when the number of trainers is the same), or from the whole tensors of
/// a checkpoint that a replicated run wrote. Each file is read once.
pub fn restore_rows(
    folder: &str,
    tables: &[TableRequest<'_>],
    rank: usize,
    workers: usize,
) -> Result<Vec<OwnedRows>> {
    let manifest = read_manifest(folder)?;
    restore_rows_from(folder, &manifest, tables, rank, workers)
}

fn read_manifest(folder: &str) -> Result<Manifest> {
    let url = sparktrain_storage::join_url(folder, MANIFEST);
    let manifest: Manifest = serde_json::from_slice(&sparktrain_storage::read(&url)?)
        .map_err(|e| TrainError::format(url.clone(), e))?;
    if let Some(bad) = manifest.shards.iter().find(|s| !is_shard_name(s)) {
        return Err(TrainError::format(url, format!("'{bad}' is not a shard file name")));
    }
    let pieces = manifest.tensors.iter().flat_map(|e| e.pieces.iter().map(move |p| (e, p.0)));
    if let Some((entry, shard)) = pieces.into_iter().find(|(_, shard)| *shard >= manifest.shards.len()) {
        let n = manifest.shards.len();
        return Err(TrainError::format(
            url,
            format!("tensor '{}' names shard {shard}, but there are {n}", entry.name),
        ));
    }
    if let Some(files) = &manifest.tables {
        files.check().map_err(|why| TrainError::format(url, why))?;
    }
    Ok(manifest)
}

impl TableFiles {
    /// Refuses a list that names files outside the folder or rows its owners never held.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if self.workers == 0 || self.owners.len() != self.workers {
            return Err(format!("{} owners' files for {} owners", self.owners.len(), self.workers));
        }
        if let Some(t) = self.tables.iter().find(|t| t.shape.len() != 2 || t.shape[1] == 0) {
            return Err(format!("table '{}' has shape {:?}", t.name, t.shape));
        }
        let rows = self.tables.first().map_or(0, |t| t.shape[0]);
        if let Some(t) = self.tables.iter().find(|t| t.shape[0] != rows) {
            return Err(format!("table '{}' has {} rows, not {rows}", t.name, t.shape[0]));
        }
        for (owner, owned) in self.owners.iter().enumerate() {
            let mut next = 0;
            for f in owned {
                if !is_row_file_name(&f.file) || f.first != next {
                    return Err(format!("'{}' is not owner {owner}'s next row file", f.file));
                }
                next += f.rows;
            }
            if next > crate::shard::owned_rows(rows, owner, self.workers) {
                return Err(format!("owner {owner}'s files hold {next} rows, more than it owned"));
            }
        }
        Ok(())
    }
}

/// The shard files of a manifest's whole tensors, each read once and kept.
struct ShardCache<'m> {
    manifest: &'m Manifest,
    files: Vec<Option<Vec<u8>>>,
}

impl<'m> ShardCache<'m> {
    fn new(manifest: &'m Manifest) -> Self {
        ShardCache { manifest, files: vec![None; manifest.shards.len()] }
    }

    /// Hands `entry`'s values to `take` piece by piece, with the index of each piece's first
    /// value in the tensor.
    fn load(&mut self, folder: &str, entry: &Entry, take: &mut dyn FnMut(usize, &[f32])) -> Result<()> {
        let mut at = 0;
        for (shard, key, len) in &entry.pieces {
            let url = sparktrain_storage::join_url(folder, &self.manifest.shards[*shard]);
            let bytes = match &mut self.files[*shard] {
                Some(b) => b,
                slot => slot.insert(sparktrain_storage::read(&url)?),
            };
            let file = SafeTensors::deserialize(bytes).map_err(|e| TrainError::format(url.clone(), e))?;
            let view =
                file.tensor(key).map_err(|e| TrainError::format(url.clone(), format!("{key}: {e}")))?;
            if view.dtype() != Dtype::F32 || view.data().len() != len * 4 {
                return Err(TrainError::format(url, format!("{key} is not {len} float32 values")));
            }
            take(at, &floats(view.data()));
            at += len;
        }
        Ok(())
    }
}

/// Little-endian float32 bytes as values.
fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Fills `out` (by table, for the tables `wanted` says) with trainer `rank`'s (of `workers`)
/// rows from the files of every owner in `files` that held some of them, each read once.
pub(crate) fn rows_from_owners(
    folder: &str,
    files: &TableFiles,
    tables: &[TableRequest<'_>],
    wanted: &[bool],
    rank: usize,
    workers: usize,
    out: &mut [OwnedRows],
) -> Result<()> {
    let old = files.workers;
    let common = gcd(old, workers);
    for (q, owned) in files.owners.iter().enumerate() {
        // Ids q + j·old and rank + k·workers meet only when q ≡ rank (mod gcd).
        if q % common != rank % common {
            continue;
        }
        for f in owned {
            let url = sparktrain_storage::join_url(folder, &f.file);
            let bytes = sparktrain_storage::read(&url)?;
            let file = SafeTensors::deserialize(&bytes).map_err(|e| TrainError::format(url.clone(), e))?;
            for ((t, wanted), rows_out) in tables.iter().zip(wanted).zip(out.iter_mut()) {
                if !wanted {
                    continue;
                }
                let (rows, w) = (t.shape[0], t.shape[1]);
                let keys = std::iter::once(t.name.to_string())
                    .chain(t.buffers.iter().map(|b| format!("optimizer/{b}/{}", t.name)));
                let targets =
                    std::iter::once(&mut rows_out.values).chain(rows_out.buffers.iter_mut().map(|(_, v)| v));
                for (key, target) in keys.zip(targets) {
                    let view = file
                        .tensor(&key)
                        .map_err(|e| TrainError::format(url.clone(), format!("{key}: {e}")))?;
                    if view.dtype() != Dtype::F32 || view.shape() != [f.rows, w] {
                        return Err(TrainError::format(
                            url.clone(),
                            format!("{key} is not {} rows of {w} float32 values", f.rows),
                        ));
                    }
                    let values = floats(view.data());
                    for (k, row) in values.chunks_exact(w).enumerate() {
                        let id = q + (f.first + k) * old;
                        if id < rows && id % workers == rank {
                            let local = id / workers;
                            target[local * w..(local + 1) * w].copy_from_slice(row);
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

fn restore_rows_from(
    folder: &str,
    manifest: &Manifest,
    tables: &[TableRequest<'_>],
    rank: usize,
    workers: usize,
) -> Result<Vec<OwnedRows>> {
    let by_owner = manifest.tables.as_ref();
    let mut out = Vec::with_capacity(tables.len());
    // Where each table's rows are: Some(index among the owners' tables), or None (whole tensors).
    let mut sources = Vec::with_capacity(tables.len());
    for t in tables {
        let (rows, w) = (t.shape[0], t.shape.get(1).copied().unwrap_or(1));
        let step =
            manifest.groups.iter().find(|g| g.tensors.iter().any(|n| n == t.name)).map_or(0, |g| g.step);
        let held = crate::shard::owned_rows(rows, rank, workers);
        let buffers = t.buffers.iter().map(|b| (b.to_string(), vec![0.0; held * w])).collect();
        out.push(OwnedRows { values: vec![0.0; held * w], buffers, step });
        let saved = by_owner.and_then(|f| f.tables.iter().position(|s| s.name == t.name));
        if let Some(i) = saved {
            let s = &by_owner.expect("a table of the owners' files").tables[i];
            if s.shape != t.shape {
                return Err(TrainError::StateMismatch(format!(
                    "{folder}: '{}' has shape {:?} there, the model has {:?}",
                    t.name, s.shape, t.shape
                )));
            }
            if s.buffers.iter().map(String::as_str).ne(t.buffers.iter().copied()) {
                return Err(TrainError::StateMismatch(format!(
                    "{folder}: '{}' was trained with optimizer buffers {:?}, this optimizer keeps {:?}",
                    t.name, s.buffers, t.buffers
                )));
            }
        }
        sources.push(saved);
    }
    // Rows that their owners saved: every file of every old owner that held some of ours.
    if let Some(files) = by_owner.filter(|_| sources.iter().any(Option::is_some)) {
        let wanted: Vec<bool> = sources.iter().map(Option::is_some).collect();
        rows_from_owners(folder, files, tables, &wanted, rank, workers, &mut out)?;
    }
    // Rows in whole tensors (a replicated run's checkpoint).
    let mut shards = ShardCache::new(manifest);
    let saved: HashMap<&str, &Entry> = manifest.tensors.iter().map(|e| (e.name.as_str(), e)).collect();
    for ((t, source), rows_out) in tables.iter().zip(&sources).zip(&mut out) {
        if source.is_some() {
            continue;
        }
        let w = t.shape.get(1).copied().unwrap_or(1);
        let keys = std::iter::once(t.name.to_string())
            .chain(t.buffers.iter().map(|b| format!("optimizer/{b}/{}", t.name)));
        let targets =
            std::iter::once(&mut rows_out.values).chain(rows_out.buffers.iter_mut().map(|(_, v)| v));
        for (key, target) in keys.zip(targets) {
            let entry = match saved.get(key.as_str()) {
                Some(e) if e.shape == t.shape => e,
                Some(e) => {
                    return Err(TrainError::StateMismatch(format!(
                        "{folder}: '{key}' has shape {:?} there, the model has {:?}",
                        e.shape, t.shape
                    )));
                }
                None => return Err(TrainError::StateMismatch(format!("{folder} has no tensor '{key}'"))),
            };
            shards.load(folder, entry, &mut |start, values| {
                // The owned rows' values within [start, start + len): whole rows or their parts.
                let end = start + values.len();
                let mut id = start / w;
                while id * w < end {
                    if id % workers == rank {
                        let (from, to) = ((id * w).max(start), ((id + 1) * w).min(end));
                        let local = id / workers;
                        target[local * w + from - id * w..local * w + to - id * w]
                            .copy_from_slice(&values[from - start..to - start]);
                    }
                    id += 1;
                }
            })?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interleaving no timing makes reliable: an old generation checks version 1, the next
    /// generation publishes version 2, then the old one publishes what it checked. Its version
    /// 2 is refused by the store (created only if absent), and against the version that is
    /// there its writer is superseded.
    #[test]
    fn a_writer_that_checked_a_stale_version_cannot_publish_over_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let model_dir = dir.path().to_string_lossy().into_owned();
        let old = Fence { job: "job".into(), generation: 0 };
        let new = Fence { job: "job".into(), generation: 1 };
        publish(&model_dir, &old, |_| {}).unwrap();
        let checked = read_index(&model_dir).unwrap();
        assert_eq!(checked.as_ref().map(|i| (i.version, i.generation)), Some((1, 0)));

        publish(&model_dir, &new, |i| i.latest = Some("ckpt-0000000002-g1".into())).unwrap();
        let mut stale = |i: &mut Index| i.latest = Some("ckpt-0000000003-g0".into());
        assert_eq!(publish_over(&model_dir, checked.as_ref(), &old, &mut stale).unwrap(), None);
        match publish(&model_dir, &old, stale) {
            Err(TrainError::Superseded { generation: 0, by_job: None, by_generation: 1, .. }) => {}
            other => panic!("expected the old generation to be superseded, got {other:?}"),
        }
        let newest = read_index(&model_dir).unwrap().unwrap();
        assert_eq!((newest.version, newest.generation), (2, 1));
        assert_eq!(newest.latest.as_deref(), Some("ckpt-0000000002-g1"));
    }

    #[test]
    fn checkpoint_names_of_both_versions_pass_and_nothing_else() {
        for good in ["ckpt-0000000012", "ckpt-0000000012-g0", "ckpt-1-g31"] {
            assert!(is_checkpoint_name(good), "{good}");
        }
        for bad in ["ckpt-", "ckpt-12-g", "ckpt-12-g1/..", "ckpt-12/../x", "ckpt--g1", "ckpt-1-g2-g3", "best"]
        {
            assert!(!is_checkpoint_name(bad), "{bad}");
        }
        assert!(is_checkpoint_staging(".ckpt-0000000012-g3.0f3a9c.tmp"));
        assert!(!is_checkpoint_staging(".export.0f3a9c.tmp"));
        assert!(!is_checkpoint_staging(".ckpt-0000000012-g3"));
        assert!(!is_checkpoint_staging(".tmp"));
    }
}
