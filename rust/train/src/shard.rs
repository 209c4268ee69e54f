//! Row-wise sharded embedding tables: each table and its optimizer state split across the
//! trainers by a fixed function of the id, so that any worker knows the owner of any row.
//!
//! - The owner of id `i` among `n` trainers is `i % n`, which holds it as its local row
//!   `i / n`. Ids are already a hash of the raw value ([`crate::features`]), so every
//!   column's ids spread evenly over the owners, whichever columns a table serves; each
//!   owner's rows are one dense run, found by a division rather than a map.
//! - [`TableShard`] is all the step asks of an owner: rows for ids, an update of ids with
//!   their finished gradients, and its rows to save or load. [`FixedShard`] holds the rows of
//!   a fixed id space; a table that grows with the raw ids it meets (admission, eviction)
//!   can implement the same trait without the step changing.
//! - [`ShardTables`] and [`TableOptions`] say when tables are sharded, against a per-trainer
//!   memory budget ([`default_table_budget`] when none is given), which the engine enforces
//!   before training starts ([`TableOptions::plan`]).

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};
use crate::optim::{Optimizer, Rule, Segment};
use crate::params::{Entry, TableInit};
use crate::rows::{gather_rows_into, scatter_rows};

/// An embedding row's id: the feature spec's hashed id.
pub type RowId = u32;

/// The trainer (of `workers`) that owns row `id`.
pub fn owner(id: RowId, workers: usize) -> usize {
    id as usize % workers
}

/// The rows of one embedding table that this trainer owns, with their optimizer state.
///
/// Lookups take `&self` because evaluation and scoring read rows too: a table that grows with
/// the ids it meets answers an id it does not hold with the row it would start from, and
/// admits ids (or evicts others) when their gradients arrive in [`TableShard::apply`].
pub trait TableShard: Send {
    /// Values per row.
    fn width(&self) -> usize;

    /// How many rows it holds.
    fn held(&self) -> usize;

    /// The ids of the rows it holds, ascending: the order of [`TableShard::rows`].
    fn ids(&self) -> Vec<RowId>;

    /// Writes the rows of `ids` (each owned here) into `out`, row after row.
    fn lookup(&self, ids: &[RowId], out: &mut [f32]) -> Result<()>;

    /// The optimizer of its rows: its step count and the schedule's factor follow the
    /// table's optimizer group.
    fn optimizer_mut(&mut self) -> &mut Optimizer;

    /// Applies one update to the rows of `ids` (ascending, owned here) with `grads`, their
    /// finished gradients row after row.
    fn apply(&mut self, ids: &[RowId], grads: &[f32]) -> Result<()>;

    /// Its rows and optimizer state in the order of [`TableShard::ids`], without copying.
    fn rows(&self) -> RowsView<'_>;

    /// Writes saved rows for `ids` (owned here, any order) into the shard: their values and,
    /// when given, the optimizer's buffers by name (None leaves the state as it is).
    fn load(&mut self, ids: &[RowId], values: &[f32], buffers: Option<&[(String, Vec<f32>)]>) -> Result<()>;
}

/// A shard's rows, row after row, and its optimizer's state buffers laid out the same way.
pub struct RowsView<'a> {
    /// The rows' values.
    pub values: &'a [f32],
    /// The optimizer's buffers, by name.
    pub buffers: Vec<(&'static str, &'a [f32])>,
    /// The optimizer's step count.
    pub step: u64,
}

/// The rows `rank, rank + n, rank + 2n, ...` of a table of `rows` ids: trainer `rank`'s share
/// under [`owner`], held as one dense run with the optimizer's state.
pub struct FixedShard {
    rank: usize,
    workers: usize,
    width: usize,
    values: Vec<f32>,
    optimizer: Optimizer,
}

/// How many of `rows` ids trainer `rank` of `workers` owns.
pub fn owned_rows(rows: usize, rank: usize, workers: usize) -> usize {
    rows.saturating_sub(rank).div_ceil(workers)
}

impl FixedShard {
    /// Trainer `rank`'s share of a `rows × width` table starting as `init` says, trained by
    /// `rule` on up to `threads` threads.
    pub fn new(
        rows: usize,
        width: usize,
        rank: usize,
        workers: usize,
        init: &TableInit,
        rule: Rule,
        threads: usize,
    ) -> Result<Self> {
        let held = owned_rows(rows, rank, workers);
        let mut values = vec![0.0; held * width];
        for (k, row) in values.chunks_exact_mut(width.max(1)).enumerate() {
            init.row(rank + k * workers, width, row)?;
        }
        let optimizer = Optimizer::new(rule, held * width, threads);
        Ok(FixedShard { rank, workers, width, values, optimizer })
    }

    /// Trainer `rank`'s share of a `rows × width` table holding `values` (its rows, in id
    /// order), trained by `rule` on up to `threads` threads.
    pub fn with_rows(
        rows: usize,
        width: usize,
        rank: usize,
        workers: usize,
        values: Vec<f32>,
        rule: Rule,
        threads: usize,
    ) -> Result<Self> {
        let held = owned_rows(rows, rank, workers);
        if values.len() != held * width {
            return Err(TrainError::InvalidArgument(format!(
                "{} values for trainer {rank}'s {held} rows of {width} values",
                values.len()
            )));
        }
        let optimizer = Optimizer::new(rule, held * width, threads);
        Ok(FixedShard { rank, workers, width, values, optimizer })
    }

    /// Where `id`'s row starts in the values, or an error when another trainer owns it.
    fn start(&self, id: RowId) -> Result<usize> {
        let local = id as usize / self.workers;
        if owner(id, self.workers) != self.rank || (local + 1) * self.width > self.values.len() {
            return Err(TrainError::InvalidArgument(format!(
                "embedding row {id} is not among the rows trainer {} of {} holds",
                self.rank, self.workers
            )));
        }
        Ok(local * self.width)
    }

    fn starts(&self, ids: &[RowId]) -> Result<Vec<usize>> {
        ids.iter().map(|&id| self.start(id)).collect()
    }
}

impl TableShard for FixedShard {
    fn width(&self) -> usize {
        self.width
    }

    fn held(&self) -> usize {
        self.values.len().checked_div(self.width).unwrap_or(0)
    }

    fn ids(&self) -> Vec<RowId> {
        (0..self.held()).map(|k| (self.rank + k * self.workers) as RowId).collect()
    }

    fn lookup(&self, ids: &[RowId], out: &mut [f32]) -> Result<()> {
        let starts = self.starts(ids)?;
        if out.len() != starts.len() * self.width {
            return Err(TrainError::InvalidArgument(format!(
                "room for {} values, for {} rows of {}",
                out.len(),
                starts.len(),
                self.width
            )));
        }
        gather_rows_into(&self.values, &starts, self.width, out);
        Ok(())
    }

    fn optimizer_mut(&mut self) -> &mut Optimizer {
        &mut self.optimizer
    }

    fn apply(&mut self, ids: &[RowId], grads: &[f32]) -> Result<()> {
        if ids.len() == self.held() && grads.len() == self.values.len() {
            // Every row, in order (a dense update): one pass, no gathering.
            let all = Segment { param: 0, grad: 0, len: self.values.len() };
            return self.optimizer.update(&mut self.values, grads, &[all]);
        }
        let starts = self.starts(ids)?;
        self.optimizer.update_rows(&mut self.values, grads, &starts, self.width)
    }

    fn rows(&self) -> RowsView<'_> {
        RowsView { values: &self.values, buffers: self.optimizer.buffers(), step: self.optimizer.steps() }
    }

    fn load(&mut self, ids: &[RowId], values: &[f32], buffers: Option<&[(String, Vec<f32>)]>) -> Result<()> {
        let n = ids.len() * self.width;
        let names: Vec<&str> = self.optimizer.buffers().iter().map(|(name, _)| *name).collect();
        let given: Vec<&str> = buffers.unwrap_or_default().iter().map(|(name, _)| name.as_str()).collect();
        let fits = buffers.is_none_or(|b| names == given && b.iter().all(|(_, b)| b.len() == n));
        if values.len() != n || !fits {
            return Err(TrainError::StateMismatch(format!(
                "{} saved rows of {} values with buffers {given:?} for a table whose optimizer keeps {names:?}",
                ids.len(),
                self.width
            )));
        }
        let starts = self.starts(ids)?;
        scatter_rows(&mut self.values, values, &starts, self.width);
        for (buffer, (_, saved)) in self.optimizer.state_mut().iter_mut().zip(buffers.unwrap_or_default()) {
            scatter_rows(buffer, saved, &starts, self.width);
        }
        Ok(())
    }
}

/// Whether embedding tables are sharded across the trainers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardTables {
    /// Sharded when the tables and their optimizer state exceed the table budget.
    #[default]
    Auto,
    /// Always sharded (with one trainer, its shard is the whole table).
    On,
    /// Never: every trainer holds every table, which must fit the budget.
    Off,
}

impl ShardTables {
    /// The setting's name, as users write it.
    pub fn name(self) -> &'static str {
        match self {
            ShardTables::Auto => "auto",
            ShardTables::On => "on",
            ShardTables::Off => "off",
        }
    }
}

impl FromStr for ShardTables {
    type Err = TrainError;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(ShardTables::Auto),
            "on" | "true" => Ok(ShardTables::On),
            "off" | "false" => Ok(ShardTables::Off),
            _ => Err(TrainError::InvalidArgument(format!("shard_tables='{s}': use 'auto', 'on' or 'off'"))),
        }
    }
}

/// Where embedding tables live, and how much memory they may take on one trainer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableOptions {
    /// Whether to shard them.
    #[serde(default)]
    pub shard: ShardTables,
    /// The most bytes one trainer's tables (with their optimizer state) may take; None:
    /// [`default_table_budget`].
    #[serde(default)]
    pub budget_bytes: Option<u64>,
    /// Whether tables that are not sharded live on the model's device with their optimizer
    /// state, gathered and updated there; None: on a GPU when they take at most half its
    /// memory, never on the CPU (where updating rows in place in main memory is faster).
    #[serde(default)]
    pub on_device: Option<bool>,
}

/// Where the tables live, as [`TableOptions::plan`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Whether the tables are sharded.
    pub sharded: bool,
    /// The bytes of one trainer's tables, optimizer state included.
    pub bytes: u64,
    /// The budget they were held to.
    pub budget: u64,
}

impl TableOptions {
    /// Decides where `tables` live for `workers` trainers, each table's rows trained by the
    /// rule `rule_of` gives it (`dense_grads`: a whole-table gradient buffer too, as updates
    /// of every row need). Refuses, before anything is allocated, tables that do not fit the
    /// budget where they would live, naming the size, the budget and the setting to change.
    pub fn plan(
        &self,
        tables: &[Entry],
        rule_of: impl Fn(&Entry) -> Rule,
        dense_grads: bool,
        workers: usize,
    ) -> Result<Placement> {
        if let Some(0) = self.budget_bytes {
            return Err(TrainError::InvalidArgument("table_budget_bytes=0 must be at least 1".into()));
        }
        let budget = self.budget_bytes.unwrap_or_else(default_table_budget);
        let bytes = |share: &dyn Fn(usize) -> usize| -> u64 {
            tables
                .iter()
                .map(|e| {
                    let copies = 1 + rule_of(e).buffer_names().len() + usize::from(dense_grads);
                    (share(e.shape[0]) * e.row_width() * copies * 4) as u64
                })
                .sum()
        };
        let whole = bytes(&|rows| rows);
        // The largest share: trainer 0's (ids do not split evenly across every count).
        let share = bytes(&|rows| owned_rows(rows, 0, workers));
        let over =
            |sharded: bool, needed: u64| TrainError::TablesOverBudget { needed, budget, workers, sharded };
        match self.shard {
            _ if tables.is_empty() => Ok(Placement { sharded: false, bytes: 0, budget }),
            ShardTables::Off if whole > budget => Err(over(false, whole)),
            ShardTables::Off => Ok(Placement { sharded: false, bytes: whole, budget }),
            ShardTables::Auto if whole <= budget => Ok(Placement { sharded: false, bytes: whole, budget }),
            ShardTables::Auto | ShardTables::On if share > budget => Err(over(true, share)),
            ShardTables::Auto | ShardTables::On => Ok(Placement { sharded: true, bytes: share, budget }),
        }
    }
}

/// Half the memory this process may use (the least of the machine's memory, its cgroup's
/// limit and its address-space limit): the rest is for the input pipeline, the model's
/// other parts and the interpreter. 1 GiB when none can be read.
pub fn default_table_budget() -> u64 {
    let limits = [machine_memory(), cgroup_memory(), address_space_limit()];
    limits.into_iter().flatten().min().map_or(1 << 30, |bytes| bytes / 2)
}

fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn cgroup_memory() -> Option<u64> {
    ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        // "max" (no limit) does not parse; nor does anything else unexpected.
        .filter_map(|text| text.trim().parse::<u64>().ok())
        .min()
}

fn address_space_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max address space"))?;
    // "Max address space  <soft>  <hard>  bytes"; "unlimited" does not parse.
    line.split_whitespace().nth(3)?.parse().ok()
}

/// `bytes` for people: "1.50 GiB (1610612736 bytes)".
pub(crate) fn human(bytes: u64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} bytes") } else { format!("{value:.2} {} ({bytes} bytes)", units[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(name: &str, rows: usize, dim: usize) -> Entry {
        Entry { name: name.into(), shape: vec![rows, dim], offset: 0, table: true }
    }

    #[test]
    fn every_id_has_one_owner_and_shares_cover_the_table() {
        for workers in 1..6 {
            let held: usize = (0..workers).map(|r| owned_rows(103, r, workers)).sum();
            assert_eq!(held, 103);
            for id in 0..103u32 {
                let r = owner(id, workers);
                let shard = FixedShard::new(
                    103,
                    2,
                    r,
                    workers,
                    &TableInit::Uniform { scale: 1.0, seed: 3 },
                    Rule::sgd(1.0),
                    1,
                )
                .unwrap();
                assert!(shard.ids().contains(&id));
                let mut row = [0.0; 2];
                shard.lookup(&[id], &mut row).unwrap();
                let mut want = [0.0; 2];
                TableInit::Uniform { scale: 1.0, seed: 3 }.row(id as usize, 2, &mut want).unwrap();
                assert_eq!(row, want);
                let other = (r + 1) % workers;
                if other != r {
                    let err = FixedShard::new(
                        103,
                        2,
                        other,
                        workers,
                        &TableInit::Values(vec![0.0; 206]),
                        Rule::sgd(1.0),
                        1,
                    )
                    .unwrap()
                    .lookup(&[id], &mut row)
                    .unwrap_err();
                    assert!(err.to_string().contains(&format!("row {id} is not among")), "{err}");
                }
            }
        }
    }

    #[test]
    fn the_plan_shards_what_does_not_fit_and_refuses_what_never_fits() {
        // 1000 rows × 8 floats with Adam (m, v): 96 000 bytes; a quarter of it on 4 trainers.
        let tables = [table("deep/embeddings", 1000, 8)];
        let plan = |shard, budget| {
            TableOptions { shard, budget_bytes: Some(budget), on_device: None }.plan(
                &tables,
                |_| Rule::adam(0.1),
                false,
                4,
            )
        };
        assert_eq!(
            plan(ShardTables::Auto, 100_000).unwrap(),
            Placement { sharded: false, bytes: 96_000, budget: 100_000 }
        );
        assert_eq!(
            plan(ShardTables::Auto, 50_000).unwrap(),
            Placement { sharded: true, bytes: 24_000, budget: 50_000 }
        );
        assert!(plan(ShardTables::On, 100_000).unwrap().sharded);
        let err = plan(ShardTables::Off, 50_000).unwrap_err().to_string();
        assert!(err.contains("93.75 KiB (96000 bytes)") && err.contains("48.83 KiB (50000 bytes)"), "{err}");
        assert!(err.contains("table_budget_bytes") && err.contains("shard_tables"), "{err}");
        let err = plan(ShardTables::Auto, 20_000).unwrap_err().to_string();
        assert!(err.contains("23.44 KiB (24000 bytes)") && err.contains("4 trainers"), "{err}");
        assert!(default_table_budget() > 0);
    }

    #[test]
    fn the_default_budget_is_at_most_half_of_an_address_space_limit() {
        use std::os::unix::process::CommandExt;
        const LIMIT: u64 = 3 << 30;
        let name = "shard::tests::the_default_budget_is_at_most_half_of_an_address_space_limit";
        if std::env::var_os("SPARKTRAIN_BUDGET_UNDER_LIMIT").is_some() {
            assert_eq!(address_space_limit(), Some(LIMIT));
            let budget = default_table_budget();
            assert!(budget > 0 && budget <= LIMIT / 2, "{budget}");
            return;
        }
        // This test, again, in a process of its own whose address space is limited.
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args(["--exact", name, "--test-threads=1"]).env("SPARKTRAIN_BUDGET_UNDER_LIMIT", "1");
        // SAFETY: between fork and exec the closure only calls setrlimit, which is
        // async-signal-safe and changes nothing but the child's limit.
        unsafe {
            child.pre_exec(|| {
                let limit = libc::rlimit { rlim_cur: LIMIT as libc::rlim_t, rlim_max: LIMIT as libc::rlim_t };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let output = child.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success() && stdout.contains("1 passed"), "{stdout}");
    }
}
