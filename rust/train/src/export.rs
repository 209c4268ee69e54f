//! The exported model: a self-contained folder that scores new data without the training
//! code's configuration.
//!
//! - `model.json`: the model's kind and shape, the loss it was trained with, and the feature
//!   spec (so ids hash the same way at prediction time);
//! - `model.safetensors`: every weight under its variable name and shape.
//!
//! The pair appears together: both files are written into a hidden folder beside `dir`, which
//! then replaces `dir` as a whole (`sparktrain_storage::replace_dir`), so a reader never sees
//! the weights of one export with the config of another.
//!
//! A model trained with sharded tables keeps them sharded ([`export_sharded`]): each owner
//! writes its rows into the staging folder as `tables-<r>-of-<n>-<part>.safetensors` files
//! (tensor `<table>`, `[rows, width]`: the owner's local row `k` is id `r + k·n`), and the
//! chief, once all are written, writes `model.safetensors` (the other weights), `tables.json`
//! (the manifest: [`TableManifest`], which [`ExportedTables`] reads to find a row) and
//! `model.json`, which names the manifest. [`Exported::load`] puts such tables together
//! whole, for models that fit one scorer.

use std::collections::HashMap;

use arrow::record_batch::RecordBatch;
use candle_core::{D, Device, Tensor};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use crate::batch::{Batch, Lookup};
use crate::checkpoint::{self, OwnedRows, OwnedTable, SavedTable, TableFiles, TableRequest};
use crate::embedding::{Dcn, DeepFm, EmbeddingConfig, WideDeep};
use crate::error::{Result, TrainError};
use crate::features::{FeatureSpec, KeyKinds};
use crate::loss::Loss;
use crate::model::{LogisticRegression, Mlp, Model};
use crate::params::Entry;
use crate::rows::gather_rows;
use crate::shard::{RowId, RowsView, owner};
use crate::step::DataParallel;

const CONFIG: &str = "model.json";
const WEIGHTS: &str = "model.safetensors";
const TABLES: &str = "tables.json";

/// Which model, with its shape; with a feature spec, enough to build it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelKind {
    /// [`LogisticRegression`] over the dense features.
    LogisticRegression {
        /// Logits per example.
        outputs: usize,
    },
    /// [`Mlp`] over the dense features.
    Mlp {
        /// Hidden layer widths.
        hidden: Vec<usize>,
        /// Logits per example.
        outputs: usize,
    },
    /// [`WideDeep`].
    WideDeep {
        /// Values per embedding.
        dim: usize,
        /// Hidden layer widths.
        hidden: Vec<usize>,
    },
    /// [`DeepFm`].
    DeepFm {
        /// Values per embedding.
        dim: usize,
        /// Hidden layer widths.
        hidden: Vec<usize>,
    },
    /// [`Dcn`].
    Dcn {
        /// Values per embedding.
        dim: usize,
        /// Hidden layer widths.
        hidden: Vec<usize>,
        /// Cross layers.
        cross_layers: usize,
    },
}

impl ModelKind {
    /// Builds the model for `features`, its weights drawn from `seed`, in main memory.
    pub fn build(&self, features: &FeatureSpec, seed: u64) -> Result<Box<dyn Model>> {
        self.build_on(&Device::Cpu, features, seed)
    }

    /// [`ModelKind::build`] with the variables on `device`.
    pub fn build_on(&self, device: &Device, features: &FeatureSpec, seed: u64) -> Result<Box<dyn Model>> {
        let inputs = features.dense_width();
        Ok(match self {
            ModelKind::LogisticRegression { outputs } => {
                Box::new(LogisticRegression::on(device, inputs, *outputs, seed)?)
            }
            ModelKind::Mlp { hidden, outputs } => Box::new(Mlp::on(device, inputs, hidden, *outputs, seed)?),
            ModelKind::WideDeep { dim, hidden } => {
                let config = EmbeddingConfig { dim: *dim, hidden: hidden.clone(), cross_layers: 0, seed };
                Box::new(WideDeep::on(device, features, &config)?)
            }
            ModelKind::DeepFm { dim, hidden } => {
                let config = EmbeddingConfig { dim: *dim, hidden: hidden.clone(), cross_layers: 0, seed };
                Box::new(DeepFm::on(device, features, &config)?)
            }
            ModelKind::Dcn { dim, hidden, cross_layers } => {
                let config =
                    EmbeddingConfig { dim: *dim, hidden: hidden.clone(), cross_layers: *cross_layers, seed };
                Box::new(Dcn::on(device, features, &config)?)
            }
        })
    }
}

#[derive(Serialize, Deserialize)]
struct Config {
    format: u32,
    model: ModelKind,
    loss: String,
    features: FeatureSpec,
    /// The kind of each key column in training (none in an export older than the field):
    /// scoring refuses another kind, which would hash to other ids.
    #[serde(default, skip_serializing_if = "KeyKinds::is_empty")]
    key_kinds: KeyKinds,
    /// The manifest of the sharded tables, when the tables are sharded (not in
    /// `model.safetensors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tables: Option<String>,
}

/// `tables.json` of an export with sharded tables: how to find a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableManifest {
    /// The manifest's format (1).
    pub format: u32,
    /// How a row is found, in words, for readers of the file.
    pub layout: String,
    /// The owners, their files and the tables (each file holds the same rows of every table).
    #[serde(flatten)]
    pub files: TableFiles,
}

/// How [`TableManifest::layout`] reads.
const LAYOUT: &str = "row id i of a table lives with owner i % workers, as that owner's row i / workers: \
                      in the owner's file whose rows [first, first + rows) hold it, at row i / workers - first \
                      of the tensor named after the table";

/// Writes a model (of `kind`, trained with `loss` on `features`, their key columns of
/// `key_kinds`) whose parameters `entries` hold `weights` into the folder `dir`.
pub fn export(
    dir: &str,
    kind: &ModelKind,
    features: &FeatureSpec,
    key_kinds: &KeyKinds,
    loss: Loss,
    entries: &[Entry],
    weights: &[f32],
) -> Result<()> {
    let fail = |file: &str, e: &dyn std::fmt::Display| {
        TrainError::format(sparktrain_storage::join_url(dir, file), format!("export: {e}"))
    };
    let views = entries
        .iter()
        .map(|e| {
            let values = weights.get(e.offset..e.offset + e.len()).ok_or_else(|| {
                TrainError::InvalidArgument(format!(
                    "{} weights do not hold parameter '{}'",
                    weights.len(),
                    e.name
                ))
            })?;
            TensorView::new(Dtype::F32, e.shape.clone(), bytemuck::cast_slice(values))
                .map(|v| (e.name.clone(), v))
                .map_err(|err| fail(WEIGHTS, &err))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::serialize(views, None).map_err(|e| fail(WEIGHTS, &e))?;
    let config = Config {
        format: 1,
        model: kind.clone(),
        loss: loss.name().into(),
        features: features.clone(),
        key_kinds: key_kinds.clone(),
        tables: None,
    };
    let json = serde_json::to_vec_pretty(&config).expect("a config serializes");

    let dir = dir.trim_end_matches('/');
    let staging = sparktrain_storage::sibling_temp(dir)?;
    sparktrain_storage::mkdirs(&staging)?;
    sparktrain_storage::write(&sparktrain_storage::join_url(&staging, WEIGHTS), &bytes, true)?;
    sparktrain_storage::write(&sparktrain_storage::join_url(&staging, CONFIG), &json, true)?;
    sparktrain_storage::replace_dir(&staging, dir)?;
    Ok(())
}

/// A model loaded from an export folder, ready to score Arrow batches: whole, or without its
/// embedding tables ([`Exported::load_without_tables`]), when the tables are too large for one
/// process and a batch's rows are looked up where they are ([`Exported::predict_with_rows`]).
pub struct Exported {
    model: Box<dyn Model>,
    kind: ModelKind,
    /// The parameters held in `weights` (the variables alone when the tables were left out).
    entries: Vec<Entry>,
    weights: Vec<f32>,
    /// Every table of the model (name, shape), held or not.
    tables: Vec<Entry>,
    with_tables: bool,
    sharded: bool,
    features: FeatureSpec,
    key_kinds: KeyKinds,
    loss: Loss,
}

impl Exported {
    /// Loads the export folder `dir`.
    pub fn load(dir: &str) -> Result<Self> {
        Self::load_with(dir, true)
    }

    /// Loads the export folder `dir` without its embedding tables: the variables alone, for
    /// [`Exported::predict_with_rows`]. A sharded export's table files are not read.
    pub fn load_without_tables(dir: &str) -> Result<Self> {
        Self::load_with(dir, false)
    }

    fn load_with(dir: &str, with_tables: bool) -> Result<Self> {
        let url = |file: &str| sparktrain_storage::join_url(dir, file);
        let config: Config = serde_json::from_slice(&sparktrain_storage::read(&url(CONFIG))?)
            .map_err(|e| TrainError::format(url(CONFIG), e))?;
        let loss = match config.loss.as_str() {
            "binary_cross_entropy" => Loss::BinaryCrossEntropy,
            "softmax_cross_entropy" => Loss::SoftmaxCrossEntropy,
            "mean_squared_error" => Loss::MeanSquaredError,
            other => return Err(TrainError::format(url(CONFIG), format!("unknown loss '{other}'"))),
        };
        let mut model = config.model.build(&config.features, 0)?;
        model.parameters_mut().release_tables();
        let tables = model.parameters().table_entries();
        let entries =
            if with_tables { model.parameters().entries() } else { model.parameters().var_entries() };
        let bytes = sparktrain_storage::read(&url(WEIGHTS))?;
        let file = SafeTensors::deserialize(&bytes).map_err(|e| TrainError::format(url(WEIGHTS), e))?;
        let saved: HashMap<String, TensorView<'_>> = file.tensors().into_iter().collect();
        // Sharded tables, put together whole.
        let mut whole: HashMap<String, Vec<f32>> = match &config.tables {
            Some(_) if with_tables => {
                let tables = ExportedTables::open(dir)?;
                let requests: Vec<TableRequest<'_>> = entries
                    .iter()
                    .filter(|e| e.table)
                    .map(|e| TableRequest { name: &e.name, shape: &e.shape, buffers: &[] })
                    .collect();
                let rows = tables.whole(&requests)?;
                requests.iter().map(|r| r.name.to_string()).zip(rows.into_iter().map(|r| r.values)).collect()
            }
            _ => HashMap::new(),
        };
        let mut flat = Vec::with_capacity(entries.iter().map(Entry::len).sum());
        for Entry { name, shape, .. } in &entries {
            if let Some(values) = whole.get_mut(name) {
                flat.append(values);
                continue;
            }
            let view = saved.get(name).ok_or_else(|| {
                TrainError::StateMismatch(format!("{dir}/{WEIGHTS} has no tensor '{name}'"))
            })?;
            if view.dtype() != Dtype::F32 || view.shape() != shape.as_slice() {
                return Err(TrainError::StateMismatch(format!(
                    "{dir}/{WEIGHTS}: '{name}' is {:?} {:?}, the model needs F32 {shape:?}",
                    view.dtype(),
                    view.shape()
                )));
            }
            flat.extend(view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        }
        if with_tables {
            model.parameters().set_flat(&flat)?;
        } else {
            model.parameters().set_flat_vars(&flat)?;
        }
        Ok(Exported {
            model,
            kind: config.model,
            entries,
            weights: flat,
            tables,
            with_tables,
            sharded: config.tables.is_some(),
            features: config.features,
            key_kinds: config.key_kinds,
            loss,
        })
    }

    /// Which model, with its shape.
    pub fn kind(&self) -> &ModelKind {
        &self.kind
    }

    /// The shape and values of the parameter called `name` (a variable, or a whole table when
    /// the tables were loaded).
    pub fn parameter(&self, name: &str) -> Option<(&[usize], &[f32])> {
        let entry = self.entries.iter().find(|e| e.name == name)?;
        Some((entry.shape.as_slice(), &self.weights[entry.offset..entry.offset + entry.len()]))
    }

    /// The loss the model was trained with.
    pub fn loss(&self) -> Loss {
        self.loss
    }

    /// The feature spec the model was trained on.
    pub fn features(&self) -> &FeatureSpec {
        &self.features
    }

    /// The embedding tables (name and `[rows, width]`), held or not.
    pub fn tables(&self) -> &[Entry] {
        &self.tables
    }

    /// The bytes of the variables (every parameter but the tables).
    pub fn variable_bytes(&self) -> u64 {
        self.entries.iter().filter(|e| !e.table).map(|e| e.len() as u64 * 4).sum()
    }

    /// The bytes of the embedding tables, whole.
    pub fn table_bytes(&self) -> u64 {
        self.tables.iter().map(|e| e.len() as u64 * 4).sum()
    }

    /// Whether the export keeps its tables sharded (in its owners' files, `tables.json`).
    pub fn sharded(&self) -> bool {
        self.sharded
    }

    /// Scores `batch`: one probability per row for a binary model, one per class per row
    /// (row after row) for a softmax model. The label column may be absent.
    pub fn predict(&self, batch: &RecordBatch) -> Result<Vec<f32>> {
        if !self.with_tables && !self.tables.is_empty() {
            return Err(TrainError::InvalidArgument(
                "this model was loaded without its embedding tables: score with predict_with_rows".into(),
            ));
        }
        self.features.check_key_kinds(&self.key_kinds, batch)?;
        let encoded = self.features.encode_inputs(batch)?;
        if encoded.rows == 0 {
            // The columns were checked; no rows have no scores (a batch of no rows has no
            // width to check the dense features by).
            return Ok(Vec::new());
        }
        let batch = Batch::from_encoded(&encoded)?;
        let lookup = Lookup::gather(&batch, &self.entries, &self.weights)?;
        self.scores(&batch, lookup.as_ref())
    }

    /// The distinct embedding ids `batch`'s rows use (single and multi-hot), ascending: the
    /// rows [`Exported::predict_with_rows`] needs. Empty for a model without tables.
    pub fn ids(&self, batch: &RecordBatch) -> Result<Vec<RowId>> {
        if self.tables.is_empty() {
            return Ok(Vec::new());
        }
        self.features.check_key_kinds(&self.key_kinds, batch)?;
        let encoded = self.features.encode_inputs(batch)?;
        Ok(Lookup::distinct_ids(&Batch::from_encoded(&encoded)?).unwrap_or_default())
    }

    /// Scores `batch` as [`Exported::predict`] does, with the tables' rows given rather than
    /// held: `ids` ascending and distinct (any superset of what [`Exported::ids`] gives), and
    /// for every table its rows of those ids, row after row.
    pub fn predict_with_rows(
        &self,
        batch: &RecordBatch,
        ids: &[RowId],
        rows: &[(&str, &[f32])],
    ) -> Result<Vec<f32>> {
        self.features.check_key_kinds(&self.key_kinds, batch)?;
        let encoded = self.features.encode_inputs(batch)?;
        if encoded.rows == 0 {
            return Ok(Vec::new());
        }
        let batch = Batch::from_encoded(&encoded)?;
        let Some(unique) = Lookup::distinct_ids(&batch) else { return self.scores(&batch, None) };
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err(TrainError::InvalidArgument("the ids given must be distinct and ascending".into()));
        }
        let positions: Vec<usize> = unique
            .iter()
            .map(|id| {
                ids.binary_search(id).map_err(|_| {
                    TrainError::InvalidArgument(format!("no row is given for id {id} of the batch"))
                })
            })
            .collect::<Result<_>>()?;
        let mut tables = Vec::with_capacity(self.tables.len());
        for entry in &self.tables {
            let width = entry.row_width();
            let (_, values) = rows.iter().find(|(name, _)| *name == entry.name).ok_or_else(|| {
                TrainError::InvalidArgument(format!("no rows are given for table '{}'", entry.name))
            })?;
            if values.len() != ids.len() * width {
                return Err(TrainError::InvalidArgument(format!(
                    "{} values given for table '{}', which needs {width} for each of {} ids",
                    values.len(),
                    entry.name,
                    ids.len()
                )));
            }
            let starts: Vec<usize> = positions.iter().map(|p| p * width).collect();
            tables.push((entry.name.clone(), width, gather_rows(values, &starts, width)));
        }
        let lookup = Lookup::with_rows(&batch, unique, tables)?;
        self.scores(&batch, Some(&lookup))
    }

    fn scores(&self, batch: &Batch, lookup: Option<&Lookup>) -> Result<Vec<f32>> {
        let logits = self.model.forward(batch, lookup)?;
        let scores = match self.loss {
            Loss::BinaryCrossEntropy => (logits.neg()?.exp()? + 1.0)?.recip()?.flatten_all()?,
            Loss::SoftmaxCrossEntropy => softmax(&logits)?.flatten_all()?,
            Loss::MeanSquaredError => logits.flatten_all()?,
        };
        Ok(scores.to_vec1::<f32>()?)
    }
}

/// Writes a model trained with sharded tables into the folder `dir`, tables kept sharded:
/// every worker calls it together and writes its rows (files of at most `max_file_bytes`);
/// the chief writes the rest once every worker's rows are written, and the folder appears
/// whole, as [`export`]'s does.
pub fn export_sharded<M: Model>(
    dir: &str,
    kind: &ModelKind,
    features: &FeatureSpec,
    key_kinds: &KeyKinds,
    loss: Loss,
    dp: &DataParallel<M>,
    max_file_bytes: u64,
) -> Result<()> {
    let sharded = dp.sharded().ok_or_else(|| {
        TrainError::InvalidArgument("export_sharded: the model's tables are not sharded".into())
    })?;
    let (rank, workers) = sharded.place();
    let dir = dir.trim_end_matches('/');
    // The chief's staging folder, for everyone.
    let staging = if rank == 0 {
        sparktrain_storage::sibling_temp(dir).and_then(|s| sparktrain_storage::mkdirs(&s).map(|_| Some(s)))
    } else {
        Ok(None)
    };
    let staging = dp.together(staging.map_err(TrainError::from), dir, "stage the export")?;
    let staging = staging.into_iter().flatten().next().expect("the chief's staging folder");
    let tables: Vec<OwnedTable<'_>> = sharded
        .owned_tables()
        .into_iter()
        .map(|t| OwnedTable { rows: RowsView { buffers: Vec::new(), ..t.rows }, ..t })
        .collect();
    let written = checkpoint::save_rows(&staging, rank, workers, &tables, max_file_bytes);
    let owners = dp.together(written, dir, "write its rows of the embedding tables")?;
    let published = if rank == 0 {
        let files = TableFiles {
            workers,
            tables: tables
                .iter()
                .map(|t| SavedTable {
                    name: t.name.to_string(),
                    shape: t.shape.to_vec(),
                    buffers: Vec::new(),
                })
                .collect(),
            owners,
        };
        publish_sharded(dir, &staging, kind, features, key_kinds, loss, dp.entries(), &dp.weights()?, files)
    } else {
        Ok(())
    };
    dp.together(published, dir, "publish the export").map(drop)
}

/// The chief's part of [`export_sharded`]: the other weights, the manifest and the config,
/// then the staging folder in place of `dir`.
#[allow(clippy::too_many_arguments)]
fn publish_sharded(
    dir: &str,
    staging: &str,
    kind: &ModelKind,
    features: &FeatureSpec,
    key_kinds: &KeyKinds,
    loss: Loss,
    entries: &[Entry],
    weights: &[f32],
    files: TableFiles,
) -> Result<()> {
    let fail = |file: &str, e: &dyn std::fmt::Display| {
        TrainError::format(sparktrain_storage::join_url(dir, file), format!("export: {e}"))
    };
    let views = entries
        .iter()
        .map(|e| {
            TensorView::new(
                Dtype::F32,
                e.shape.clone(),
                bytemuck::cast_slice(&weights[e.offset..e.offset + e.len()]),
            )
            .map(|v| (e.name.clone(), v))
            .map_err(|err| fail(WEIGHTS, &err))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::serialize(views, None).map_err(|e| fail(WEIGHTS, &e))?;
    let manifest = TableManifest { format: 1, layout: LAYOUT.into(), files };
    let config = Config {
        format: 1,
        model: kind.clone(),
        loss: loss.name().into(),
        features: features.clone(),
        key_kinds: key_kinds.clone(),
        tables: Some(TABLES.into()),
    };
    let manifest = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
    let config = serde_json::to_vec_pretty(&config).expect("a config serializes");
    sparktrain_storage::write(&sparktrain_storage::join_url(staging, WEIGHTS), &bytes, true)?;
    sparktrain_storage::write(&sparktrain_storage::join_url(staging, TABLES), &manifest, true)?;
    sparktrain_storage::write(&sparktrain_storage::join_url(staging, CONFIG), &config, true)?;
    sparktrain_storage::replace_dir(staging, dir)?;
    Ok(())
}

/// The sharded tables of an export folder, read through their manifest (`tables.json`): a
/// row is found without reading the other owners' files.
#[derive(Debug, Clone)]
pub struct ExportedTables {
    dir: String,
    manifest: TableManifest,
}

impl ExportedTables {
    /// Reads the manifest of the export folder `dir`.
    pub fn open(dir: &str) -> Result<Self> {
        let url = sparktrain_storage::join_url(dir, TABLES);
        let manifest: TableManifest = serde_json::from_slice(&sparktrain_storage::read(&url)?)
            .map_err(|e| TrainError::format(url.clone(), e))?;
        manifest.files.check().map_err(|why| TrainError::format(url, why))?;
        Ok(ExportedTables { dir: dir.trim_end_matches('/').to_string(), manifest })
    }

    /// The manifest.
    pub fn manifest(&self) -> &TableManifest {
        &self.manifest
    }

    /// The file that holds row `id` (of every table), and the row's index in it.
    pub fn locate(&self, id: RowId) -> Result<(&str, usize)> {
        let files = &self.manifest.files;
        let rows = files.tables.first().map_or(0, |t| t.shape[0]);
        let local = id as usize / files.workers;
        let found = files.owners[owner(id, files.workers)]
            .iter()
            .find(|f| (f.first..f.first + f.rows).contains(&local));
        match found {
            Some(f) if (id as usize) < rows => Ok((f.file.as_str(), local - f.first)),
            _ => Err(TrainError::InvalidArgument(format!("row {id} is not in the tables of {} rows", rows))),
        }
    }

    /// Row `id` of the table `table`, read from the one file that holds it.
    pub fn row(&self, table: &str, id: RowId) -> Result<Vec<f32>> {
        let width =
            self.manifest.files.tables.iter().find(|t| t.name == table).map(|t| t.shape[1]).ok_or_else(
                || TrainError::InvalidArgument(format!("the export has no sharded table '{table}'")),
            )?;
        let (file, row) = self.locate(id)?;
        let url = sparktrain_storage::join_url(&self.dir, file);
        let bytes = sparktrain_storage::read(&url)?;
        let tensors = SafeTensors::deserialize(&bytes).map_err(|e| TrainError::format(url.clone(), e))?;
        let view =
            tensors.tensor(table).map_err(|e| TrainError::format(url.clone(), format!("{table}: {e}")))?;
        let data = view
            .data()
            .get(row * width * 4..(row + 1) * width * 4)
            .ok_or_else(|| TrainError::format(url.clone(), format!("{table} holds no row {row}")))?;
        Ok(data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// Every table of `tables` put together whole.
    pub fn whole(&self, tables: &[TableRequest<'_>]) -> Result<Vec<OwnedRows>> {
        for t in tables {
            let saved = self.manifest.files.tables.iter().find(|s| s.name == t.name);
            if saved.is_none_or(|s| s.shape != t.shape) {
                return Err(TrainError::StateMismatch(format!(
                    "{}/{TABLES}: no table '{}' of shape {:?}",
                    self.dir, t.name, t.shape
                )));
            }
        }
        let mut out: Vec<OwnedRows> = tables
            .iter()
            .map(|t| OwnedRows { values: vec![0.0; t.shape.iter().product()], buffers: Vec::new(), step: 0 })
            .collect();
        let wanted = vec![true; tables.len()];
        checkpoint::rows_from_owners(&self.dir, &self.manifest.files, tables, &wanted, 0, 1, &mut out)?;
        Ok(out)
    }
}

fn softmax(logits: &Tensor) -> Result<Tensor> {
    let shifted = logits.broadcast_sub(&logits.max_keepdim(D::Minus1)?)?.exp()?;
    Ok(shifted.broadcast_div(&shifted.sum_keepdim(D::Minus1)?)?)
}
