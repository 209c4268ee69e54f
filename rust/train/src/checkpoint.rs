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
//!
//! Sharded embedding tables ([`crate::shard`]) are saved by their owners, in parallel, with no
//! gathering on the chief: owner `r` of `n` writes `ckpt-<step>/tables-<r>-of-<n>-<part>`
//! files holding its rows (local row `k` is id `r + k·n`) as `<table>` and
//! `optimizer/<buffer>/<table>` tensors of `[rows, width]`, cut between rows at
//! `max_shard_bytes`. The manifest's `tables` section ([`TableFiles`]) lists every owner's
//! files; its optimizer groups still name the tables they train. The chief writes the manifest
//! and the index only once every owner has written its files. A restore with the same number
//! of trainers reads each owner's own files; with another, each trainer reads the rows it now
//! owns from every old owner's files ([`restore_rows`]). A replicated run restores a sharded
//! checkpoint (the tables are put together whole) and a sharded run a replicated one.

use std::collections::HashMap;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::groups::GroupState;
use crate::optim::OptimizerState;
use crate::shard::RowsView;

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
    save_with(model_dir, layout, weights, optimizer, progress, options, None)
}

/// The folder of the checkpoint of step `step` under `model_dir`.
pub fn folder_of(model_dir: &str, step: u64) -> String {
    sparktrain_storage::join_url(model_dir, &format!("ckpt-{step:010}"))
}

/// [`save`], for a run whose sharded tables their owners saved as `tables` says (with
/// [`save_rows`]): `layout` and `weights` leave them out, and the optimizer groups name them
/// among the tensors they train but hold state for the rest alone. The chief calls it once
/// every owner's files are written.
pub fn save_with(
    model_dir: &str,
    layout: &Layout,
    weights: &[f32],
    optimizer: &[GroupState],
    progress: Progress,
    options: &CheckpointOptions,
    tables: Option<&TableFiles>,
) -> Result<String> {
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

    let folder_name = format!("ckpt-{:010}", progress.step);
    let folder = folder_of(model_dir, progress.step);
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
    let manifest =
        Manifest { progress, groups, shards: shard_names, tensors: entries, tables: tables.cloned() };
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
        sparktrain_storage::write(&url, &bytes, true)?;
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
/// Tables that a sharded run saved by owner are put together whole.
pub fn restore(model_dir: &str, layout: &Layout) -> Result<Option<Restored>> {
    restore_except(model_dir, layout, &[])
}

/// [`restore`] for a run whose tables named in `sharded` are sharded: `layout` leaves them
/// out, and so do the weights and optimizer groups given back; each owner then reads its rows
/// from the folder given back with [`restore_rows`].
pub fn restore_except(model_dir: &str, layout: &Layout, sharded: &[String]) -> Result<Option<Restored>> {
    let Some(index) = read_index(model_dir)? else { return Ok(None) };
    let folder = sparktrain_storage::join_url(model_dir, &index.latest);
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
    Ok(Some(Restored { progress: manifest.progress, weights, optimizer: groups, folder }))
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
