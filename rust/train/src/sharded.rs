//! The step's side of sharded embedding tables ([`crate::shard`]): three all-to-alls per
//! step between each worker and the owners of its batch's rows.
//!
//! 1. Ids: each worker sends its batch's distinct ids to their owners (one flag byte first:
//!    whether it has a batch, so that an evaluation knows when every worker is done).
//! 2. Rows: each owner answers with every table's rows of the ids it was sent.
//! 3. Gradients: after the backward pass, each worker sends the rows' gradients (scaled by its
//!    example count, as the variables' are) back in the same order, so no ids travel again;
//!    each owner adds them up per id in rank order, starting from zero, as the replicated
//!    exchange does, so every run gives the same bits and the sums equal the replicated ones.
//!
//! The owner then finishes its rows' gradients (the mean, the tables' penalty, every row's
//! with updates of every row) and reports their squared norm, which one scalar all-reduce
//! adds to the variables' for clipping; it applies the update with the rule of the table's
//! optimizer group, whose step count and schedule its optimizer follows.

use std::borrow::Cow;

use crate::checkpoint::{self, OwnedTable, SavedTable, TableRequest};
use crate::error::{Result, TrainError};
use crate::groups::{GroupState, OptimizerConfig, WIDE_PREFIX};
use crate::optim::Rule;
use crate::params::{Entry, Parameters, TableInit};
use crate::regularize::Penalty;
use crate::rows::live_rows;
use crate::shard::{FixedShard, RowId, TableShard, owned_rows, owner};
use crate::step::{SharedRing, lock, sum_of_squares};

/// One sharded table: its entry in the full layout, its penalty, its optimizer group, and
/// this worker's rows.
pub(crate) struct Table {
    pub(crate) entry: Entry,
    pub(crate) penalty: Penalty,
    pub(crate) group: &'static str,
    pub(crate) shard: Box<dyn TableShard>,
}

/// Gradient rows of this worker's own rows: ids ascending, per table `ids × width` values.
#[derive(Default)]
pub(crate) struct OwnedGrads {
    pub(crate) ids: Vec<RowId>,
    pub(crate) rows: Vec<Vec<f32>>,
}

/// This worker's shares of every table.
pub(crate) struct ShardedTables {
    rank: usize,
    workers: usize,
    pub(crate) tables: Vec<Table>,
}

/// What one exchange of ids and rows did, for the gradients that follow.
#[derive(Default)]
pub(crate) struct Fetched {
    /// Whether any worker had a batch.
    pub(crate) anyone: bool,
    /// Every table's rows of this worker's distinct ids, row after row.
    pub(crate) rows: Vec<Vec<f32>>,
    /// The ids each worker asked this one for, ascending, by worker.
    requests: Vec<Vec<RowId>>,
    /// By owner: where the ids this worker asked it for sit among its distinct ids.
    asked: Vec<Vec<usize>>,
}

/// The rule that trains a table: the wide part's when it has one.
pub(crate) fn rule_of(config: &OptimizerConfig, entry: &Entry) -> Rule {
    match config.wide {
        Some(wide) if entry.name.starts_with(WIDE_PREFIX) => wide,
        _ => config.rule,
    }
}

/// The optimizer group that trains a table: as `Optimizers` splits the parameters.
pub(crate) fn group_of(config: &OptimizerConfig, entry: &Entry) -> &'static str {
    match config.wide {
        None => "all",
        Some(_) if entry.name.starts_with(WIDE_PREFIX) => "wide",
        Some(_) => "deep",
    }
}

/// `bytes` as float32 values, copied only when they are not aligned for them.
fn floats(bytes: &[u8]) -> Cow<'_, [f32]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(values) => Cow::Borrowed(values),
        Err(_) => {
            Cow::Owned(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
        }
    }
}

/// One all-to-all with the other workers (alone: this worker's own item comes back).
fn all_to_all(ring: Option<&SharedRing>, items: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
    match ring {
        Some(ring) => Ok(lock(ring).all_to_all(&items)?),
        None => Ok(items),
    }
}

impl ShardedTables {
    /// This worker's shares of the tables `entries` of `params`, each trained by its group's
    /// rule. Every worker makes its rows as the chief's model starts them: from the chief's
    /// seeds, or for given values from the rows the chief sends each owner.
    pub(crate) fn new(
        params: &Parameters,
        entries: Vec<Entry>,
        config: &OptimizerConfig,
        ring: Option<&SharedRing>,
    ) -> Result<Self> {
        let (rank, workers) = ring.map_or((0, 1), |r| {
            let ring = lock(r);
            (ring.rank(), ring.size())
        });
        if let Some(other) = entries.iter().find(|e| e.shape[0] != entries[0].shape[0]) {
            return Err(TrainError::InvalidArgument(format!(
                "sharded tables share one id space: '{}' has {} rows, '{}' {}",
                entries[0].name, entries[0].shape[0], other.name, other.shape[0]
            )));
        }
        let inits: Vec<TableInit> = entries
            .iter()
            .map(|e| {
                params.table_init(&e.name).cloned().ok_or_else(|| {
                    TrainError::InvalidArgument(format!("'{}' is not an embedding table", e.name))
                })
            })
            .collect::<Result<_>>()?;
        let starts = chiefs_inits(ring, rank, workers, &entries, inits)?;
        let tables = entries
            .into_iter()
            .zip(starts)
            .map(|(entry, start)| {
                let (rows, width) = (entry.shape[0], entry.row_width());
                let rule = rule_of(config, &entry);
                let shard = match start {
                    Start::Init(init) => {
                        FixedShard::new(rows, width, rank, workers, &init, rule, config.threads)?
                    }
                    Start::Rows(values) => {
                        FixedShard::with_rows(rows, width, rank, workers, values, rule, config.threads)?
                    }
                };
                let penalty = config.regularization.of(&entry);
                let group = group_of(config, &entry);
                Ok(Table { entry, penalty, group, shard: Box::new(shard) as Box<dyn TableShard> })
            })
            .collect::<Result<_>>()?;
        Ok(ShardedTables { rank, workers, tables })
    }

    /// This worker's rank and the number of workers.
    pub(crate) fn place(&self) -> (usize, usize) {
        (self.rank, self.workers)
    }

    /// Every table's rows held here, to save.
    pub(crate) fn owned_tables(&self) -> Vec<OwnedTable<'_>> {
        self.tables
            .iter()
            .map(|t| OwnedTable { name: &t.entry.name, shape: &t.entry.shape, rows: t.shard.rows() })
            .collect()
    }

    /// Every table as a checkpoint's manifest lists it.
    pub(crate) fn saved_tables(&self) -> Vec<SavedTable> {
        self.tables
            .iter()
            .map(|t| SavedTable {
                name: t.entry.name.clone(),
                shape: t.entry.shape.clone(),
                buffers: t.shard.rows().buffers.iter().map(|(name, _)| name.to_string()).collect(),
            })
            .collect()
    }

    /// The variables' optimizer groups, each also naming the tables it trains (their state is
    /// in the owners' files), in the name order of all parameters.
    pub(crate) fn group_states(&self, mut groups: Vec<GroupState>) -> Vec<GroupState> {
        for group in &mut groups {
            let tables = self.tables.iter().filter(|t| t.group == group.group);
            group.tensors.extend(tables.map(|t| t.entry.name.clone()));
            group.tensors.sort();
        }
        groups
    }

    /// Reads this worker's rows of every table, with their optimizer state, from the
    /// checkpoint in `folder`.
    pub(crate) fn load(&mut self, folder: &str) -> Result<()> {
        let buffers: Vec<Vec<&'static str>> = self
            .tables
            .iter()
            .map(|t| t.shard.rows().buffers.iter().map(|(name, _)| *name).collect())
            .collect();
        let requests: Vec<TableRequest<'_>> = self
            .tables
            .iter()
            .zip(&buffers)
            .map(|(t, buffers)| TableRequest { name: &t.entry.name, shape: &t.entry.shape, buffers })
            .collect();
        let restored = checkpoint::restore_rows(folder, &requests, self.rank, self.workers)?;
        for (table, rows) in self.tables.iter_mut().zip(restored) {
            let ids = table.shard.ids();
            table.shard.load(&ids, &rows.values, Some(&rows.buffers))?;
            table.shard.optimizer_mut().set_steps(rows.step);
        }
        Ok(())
    }

    /// Every table's rows held here (values only), to put back with [`Self::put_values`].
    pub(crate) fn values(&self) -> Vec<Vec<f32>> {
        self.tables.iter().map(|t| t.shard.rows().values.to_vec()).collect()
    }

    /// Puts back rows taken by [`Self::values`], leaving the optimizers' state as it is.
    pub(crate) fn put_values(&mut self, values: Vec<Vec<f32>>) -> Result<()> {
        for (table, values) in self.tables.iter_mut().zip(values) {
            let ids = table.shard.ids();
            table.shard.load(&ids, &values, None)?;
        }
        Ok(())
    }

    fn widths(&self) -> Vec<usize> {
        self.tables.iter().map(|t| t.shard.width()).collect()
    }

    /// Sends `unique` (this worker's distinct ids, ascending) to their owners and answers the
    /// other workers' asks with rows; `active`: whether this worker has a batch. Every worker
    /// calls it together.
    pub(crate) fn fetch(&self, ring: Option<&SharedRing>, active: bool, unique: &[RowId]) -> Result<Fetched> {
        let n = self.workers;
        if let Some(table) = self.tables.first() {
            crate::batch::check_ids(unique, &table.entry)?;
        }
        let mut asked = vec![Vec::new(); n];
        for (pos, &id) in unique.iter().enumerate() {
            asked[owner(id, n)].push(pos);
        }
        let asks: Vec<Vec<u8>> = asked
            .iter()
            .map(|positions| {
                let mut message = Vec::with_capacity(1 + 4 * positions.len());
                message.push(u8::from(active));
                positions.iter().for_each(|&p| message.extend_from_slice(&unique[p].to_le_bytes()));
                message
            })
            .collect();
        let received = all_to_all(ring, asks)?;
        let mut anyone = false;
        let mut requests = Vec::with_capacity(n);
        for (worker, message) in received.iter().enumerate() {
            let (flag, ids) = self.parse_ask(worker, message)?;
            anyone |= flag;
            requests.push(ids);
        }
        let widths = self.widths();
        let answers = requests
            .iter()
            .map(|ids| {
                let mut message = Vec::with_capacity(4 * ids.len() * widths.iter().sum::<usize>());
                for table in &self.tables {
                    let mut rows = vec![0.0f32; ids.len() * table.shard.width()];
                    table.shard.lookup(ids, &mut rows)?;
                    message.extend_from_slice(bytemuck::cast_slice(&rows));
                }
                Ok(message)
            })
            .collect::<Result<Vec<_>>>()?;
        let received = all_to_all(ring, answers)?;
        let mut rows: Vec<Vec<f32>> = widths.iter().map(|w| vec![0.0; unique.len() * w]).collect();
        for (owner, message) in received.iter().enumerate() {
            let positions = &asked[owner];
            let values = self.expect_rows(owner, "rows", message, positions.len())?;
            let mut at = 0;
            for (t, &w) in widths.iter().enumerate() {
                for (i, &pos) in positions.iter().enumerate() {
                    rows[t][pos * w..(pos + 1) * w].copy_from_slice(&values[at + i * w..at + (i + 1) * w]);
                }
                at += positions.len() * w;
            }
        }
        Ok(Fetched { anyone, rows, requests, asked })
    }

    /// A worker's ask: whether it has a batch, and the ids it wants from this owner, which
    /// must be ascending, distinct, in the id space and owned here.
    fn parse_ask(&self, worker: usize, message: &[u8]) -> Result<(bool, Vec<RowId>)> {
        let bad = |why: String| {
            TrainError::InvalidArgument(format!("worker {worker} sent a malformed request for rows: {why}"))
        };
        let (&flag, ids) = message.split_first().ok_or_else(|| bad("it is empty".into()))?;
        if flag > 1 || ids.len() % 4 != 0 {
            return Err(bad(format!("{} bytes", message.len())));
        }
        let ids: Vec<RowId> =
            ids.chunks_exact(4).map(|b| RowId::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let rows = self.tables.first().map_or(0, |t| t.entry.shape[0]);
        if let Some(bad_id) =
            ids.iter().find(|&&id| id as usize >= rows || owner(id, self.workers) != self.rank)
        {
            return Err(bad(format!("id {bad_id} is not one of trainer {}'s rows", self.rank)));
        }
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad("its ids are not ascending and distinct".into()));
        }
        Ok((flag == 1, ids))
    }

    /// `message` as `count` rows of every table, or an error naming `from`.
    fn expect_rows<'m>(
        &self,
        from: usize,
        what: &str,
        message: &'m [u8],
        count: usize,
    ) -> Result<Cow<'m, [f32]>> {
        let want = 4 * count * self.widths().iter().sum::<usize>();
        if message.len() != want {
            return Err(TrainError::InvalidArgument(format!(
                "worker {from} sent {} bytes of embedding {what} for {count} ids, not {want}",
                message.len()
            )));
        }
        Ok(floats(message))
    }

    /// Sends `local` (every table's gradient rows of the ids `fetched` asked for, in their
    /// order) to their owners; returns this worker's rows' gradients summed over every worker,
    /// in rank order. Every worker calls it together.
    pub(crate) fn push_grads(
        &self,
        ring: Option<&SharedRing>,
        fetched: &Fetched,
        local: &[Vec<f32>],
    ) -> Result<OwnedGrads> {
        let widths = self.widths();
        let items: Vec<Vec<u8>> = fetched
            .asked
            .iter()
            .map(|positions| {
                let mut message = Vec::with_capacity(4 * positions.len() * widths.iter().sum::<usize>());
                for (rows, &w) in local.iter().zip(&widths) {
                    for &pos in positions {
                        message.extend_from_slice(bytemuck::cast_slice(&rows[pos * w..(pos + 1) * w]));
                    }
                }
                message
            })
            .collect();
        let received = all_to_all(ring, items)?;
        let mut ids: Vec<RowId> = fetched.requests.iter().flatten().copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut sums: Vec<Vec<f32>> = widths.iter().map(|w| vec![0.0; ids.len() * w]).collect();
        for (worker, message) in received.iter().enumerate() {
            let theirs = &fetched.requests[worker];
            let values = self.expect_rows(worker, "gradients", message, theirs.len())?;
            let positions: Vec<usize> =
                theirs.iter().map(|id| ids.binary_search(id).expect("every asked id is summed")).collect();
            let mut at = 0;
            for (t, &w) in widths.iter().enumerate() {
                for (k, &pos) in positions.iter().enumerate() {
                    let row = &values[at + k * w..at + (k + 1) * w];
                    for (sum, v) in sums[t][pos * w..(pos + 1) * w].iter_mut().zip(row) {
                        *sum += *v;
                    }
                }
                at += theirs.len() * w;
            }
        }
        Ok(OwnedGrads { ids, rows: sums })
    }

    /// Makes the summed gradients the step's: every held row's (zeros where untouched) when
    /// every row is updated, the mean over `total` examples, plus the penalties' gradients.
    /// Returns the sum of their squares, this worker's part of the global norm.
    pub(crate) fn finish(
        &self,
        grads: &mut OwnedGrads,
        total: f32,
        every_row: bool,
        penalties: bool,
    ) -> Result<f64> {
        if every_row {
            let all = self.tables.first().map(|t| t.shard.ids()).unwrap_or_default();
            let mut dense: Vec<Vec<f32>> = self.widths().iter().map(|w| vec![0.0; all.len() * w]).collect();
            for (t, rows) in grads.rows.iter().enumerate() {
                let w = self.tables[t].shard.width();
                for (k, id) in grads.ids.iter().enumerate() {
                    let pos = all.binary_search(id).expect("a touched row is held");
                    dense[t][pos * w..(pos + 1) * w].copy_from_slice(&rows[k * w..(k + 1) * w]);
                }
            }
            *grads = OwnedGrads { ids: all, rows: dense };
        }
        grads.rows.iter_mut().flatten().for_each(|g| *g /= total);
        if penalties {
            for (table, rows) in self.tables.iter().zip(&mut grads.rows) {
                if table.penalty.is_zero() {
                    continue;
                }
                let w = table.shard.width();
                let mut weights = vec![0.0; grads.ids.len() * w];
                table.shard.lookup(&grads.ids, &mut weights)?;
                for (weights, row) in weights.chunks_exact(w).zip(rows.chunks_exact_mut(w)) {
                    table.penalty.add_gradient(weights, row);
                }
            }
        }
        Ok(grads.rows.iter().map(|rows| sum_of_squares(rows)).sum())
    }

    /// Applies one update to this worker's rows with `grads`, at the schedule's `scale`. With
    /// `skip_zero_rows` (updates of touched rows only), a row whose gradient is zero in a
    /// table is left alone in it, as the replicated update leaves it.
    pub(crate) fn apply(&mut self, grads: &OwnedGrads, scale: f32, skip_zero_rows: bool) -> Result<()> {
        for (table, rows) in self.tables.iter_mut().zip(&grads.rows) {
            let optimizer = table.shard.optimizer_mut();
            optimizer.set_scale(scale);
            optimizer.advance();
            if !skip_zero_rows {
                table.shard.apply(&grads.ids, rows)?;
                continue;
            }
            let (ids, values) = live_rows(&grads.ids, rows, table.shard.width());
            table.shard.apply(&ids, &values)?;
        }
        Ok(())
    }

    /// Every table whole, on every worker: each owner's rows gathered from all of them. For
    /// tests and models that fit one worker; every worker calls it together.
    pub(crate) fn gather(&self, ring: Option<&SharedRing>) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(self.tables.len());
        for table in &self.tables {
            let mine = bytemuck::cast_slice(table.shard.rows().values).to_vec();
            let all = match ring {
                Some(ring) => lock(ring).all_gather(&mine)?,
                None => vec![mine],
            };
            let (rows, w) = (table.entry.shape[0], table.shard.width());
            let mut whole = vec![0.0f32; rows * w];
            for (r, bytes) in all.iter().enumerate() {
                let values = floats(bytes);
                if values.len() != owned_rows(rows, r, self.workers) * w {
                    return Err(TrainError::InvalidArgument(format!(
                        "worker {r} holds {} values of '{}', not its share",
                        values.len(),
                        table.entry.name
                    )));
                }
                for (k, row) in values.chunks_exact(w).enumerate() {
                    let id = r + k * self.workers;
                    whole[id * w..(id + 1) * w].copy_from_slice(row);
                }
            }
            out.push(whole);
        }
        Ok(out)
    }
}

/// How a worker's share of a table starts.
enum Start {
    /// Made from the chief's seed.
    Init(TableInit),
    /// The chief's given values of this worker's rows.
    Rows(Vec<f32>),
}

/// How the chief's model starts each table, for every worker: seeds travel as they are; given
/// values travel as each owner's rows, from the chief to their owner.
fn chiefs_inits(
    ring: Option<&SharedRing>,
    rank: usize,
    workers: usize,
    entries: &[Entry],
    mine: Vec<TableInit>,
) -> Result<Vec<Start>> {
    let Some(ring) = ring else { return Ok(mine.into_iter().map(Start::Init).collect()) };
    let mut ring = lock(ring);
    // (scale, seed) per table, or None for given values.
    let seeds: Vec<Option<(f32, u64)>> = mine
        .iter()
        .map(|init| match init {
            TableInit::Uniform { scale, seed } => Some((*scale, *seed)),
            TableInit::Values(_) => None,
        })
        .collect();
    let mut bytes = serde_json::to_vec(&seeds).expect("seeds serialize");
    let mut len = (bytes.len() as u64).to_le_bytes();
    ring.broadcast(&mut len, 0)?;
    bytes.resize(u64::from_le_bytes(len) as usize, 0);
    ring.broadcast(&mut bytes, 0)?;
    let bad = |e: String| TrainError::format("the chief's table seeds", e);
    let seeds: Vec<Option<(f32, u64)>> = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if seeds.len() != entries.len() {
        return Err(bad(format!("{} tables, this model has {}", seeds.len(), entries.len())));
    }
    let mut out = Vec::with_capacity(entries.len());
    for ((entry, seed), own) in entries.iter().zip(seeds).zip(mine) {
        if let Some((scale, seed)) = seed {
            out.push(Start::Init(TableInit::Uniform { scale, seed }));
            continue;
        }
        let (rows, w) = (entry.shape[0], entry.row_width());
        let items: Vec<Vec<u8>> = (0..workers)
            .map(|r| match (&own, rank) {
                (TableInit::Values(values), 0) if values.len() == rows * w => {
                    (0..owned_rows(rows, r, workers))
                        .flat_map(|k| {
                            bytemuck::cast_slice::<f32, u8>(&values[(r + k * workers) * w..][..w]).to_vec()
                        })
                        .collect()
                }
                _ => Vec::new(),
            })
            .collect();
        let received = ring.all_to_all(&items)?;
        out.push(Start::Rows(floats(&received[0]).into_owned()));
    }
    Ok(out)
}
