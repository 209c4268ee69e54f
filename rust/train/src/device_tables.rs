//! Embedding tables kept on the model's device with their optimizer state, for models that
//! compute on a GPU.
//!
//! On the host path a step gathers the batch's rows from host memory, copies them to the
//! device, and after the backward pass updates the touched rows on the host and copies the
//! parameters back: on a GPU that host work and traffic take longer than the whole step
//! does in PyTorch. Here the rows are gathered on the device (`index_select`), and the step's
//! row gradients (summed over the workers on the host, where the ring is) go back to update
//! only those rows there, so the tables never cross to the host while training. A trainer
//! alone keeps the row gradients on the device as well (`update_rows_on_device`).
//! Checkpoints, snapshots and exports copy the tables out when asked.
//!
//! Each update rule runs in passes that write a table's rows and their state where they lie
//! (`rule_passes.rs`), so a step's update costs what its rows do, however large the table.

use candle_core::{Device, Tensor};

use crate::error::{Result, TrainError};
use crate::groups::OptimizerConfig;
use crate::optim::Rule;
use crate::params::Entry;
use crate::rule_passes::{Span, update_in_place};
use crate::sharded::{group_of, rule_of};

/// One table on the device.
struct DeviceTable {
    /// Its entry in the layout of all parameters.
    entry: Entry,
    /// The optimizer group that trains it (`Optimizers`' names).
    group: &'static str,
    rule: Rule,
    /// `[rows, width]`.
    values: Tensor,
    /// The rule's state buffers ([`Rule::buffer_names`]), each `[rows, width]`.
    state: Vec<Tensor>,
}

/// Every embedding table of a model, on its device, in entry order.
pub(crate) struct DeviceTables {
    tables: Vec<DeviceTable>,
    device: Device,
    /// The places of the last rows updated from the host, for the next table of a step,
    /// which mostly updates the same ones.
    last: Option<RowPlaces>,
}

/// The rows an update reads and writes, on the tables' device. The tables of a step update
/// the same rows (they share the id space), so one is made per step: for a trainer alone, on
/// the prefetch thread with the batch (`prefetch.rs`), which takes its copy to the device off
/// the training thread.
pub(crate) struct RowPlaces {
    /// The rows, ascending.
    ids: Vec<u32>,
    /// `[ids]`: the rows, on the device.
    at: Tensor,
}

impl RowPlaces {
    /// The places of rows `ids` (ascending, distinct) on `device`.
    pub(crate) fn new(ids: &[u32], device: &Device) -> Result<RowPlaces> {
        let at = Tensor::from_slice(ids, ids.len(), device)?;
        Ok(RowPlaces { ids: ids.to_vec(), at })
    }

    /// `[ids]`: the rows, on the device, to gather them.
    pub(crate) fn at(&self) -> &Tensor {
        &self.at
    }
}

impl DeviceTables {
    /// The tables `entries` (in the layout of all parameters), starting from `values` (each
    /// table's, row after row), trained as `config` says, on `device`.
    pub(crate) fn new(
        entries: &[Entry],
        values: Vec<Vec<f32>>,
        config: &OptimizerConfig,
        device: &Device,
    ) -> Result<Self> {
        let tables = entries
            .iter()
            .zip(values)
            .map(|(entry, values)| {
                let shape = (entry.shape[0], entry.row_width());
                let rule = rule_of(config, entry);
                let state = (0..rule.buffer_names().len())
                    .map(|i| Tensor::full(rule.initial_value(i), shape, device))
                    .collect::<candle_core::Result<_>>()?;
                Ok(DeviceTable {
                    entry: entry.clone(),
                    group: group_of(config, entry),
                    rule,
                    values: Tensor::from_vec(values, shape, device)?,
                    state,
                })
            })
            .collect::<Result<_>>()?;
        Ok(DeviceTables { tables, device: device.clone(), last: None })
    }

    /// The group that trains table `t`.
    pub(crate) fn group(&self, t: usize) -> &'static str {
        self.tables[t].group
    }

    /// The ids as a tensor on the tables' device, to gather or update their rows.
    pub(crate) fn ids(&self, ids: &[u32]) -> Result<Tensor> {
        Ok(Tensor::from_slice(ids, ids.len(), &self.device)?)
    }

    /// `[ids, width]`: table `t`'s rows of `ids` (from [`Self::ids`]), on the device.
    pub(crate) fn gather(&self, t: usize, ids: &Tensor) -> Result<Tensor> {
        Ok(self.tables[t].values.index_select(ids, 0)?)
    }

    /// Table `t`'s rows of `ids`, copied to the host (for penalties on them).
    pub(crate) fn rows(&self, t: usize, ids: &[u32]) -> Result<Vec<f32>> {
        Ok(self.gather(t, &self.ids(ids)?)?.flatten_all()?.to_vec1()?)
    }

    /// Every table's values, copied to the host.
    pub(crate) fn values(&self) -> Result<Vec<Vec<f32>>> {
        (0..self.tables.len()).map(|t| self.values_of(t)).collect()
    }

    /// Table `t`'s values, copied to the host.
    pub(crate) fn values_of(&self, t: usize) -> Result<Vec<f32>> {
        Ok(self.tables[t].values.flatten_all()?.to_vec1()?)
    }

    /// Replaces every table's values (as [`Self::values`] gives them); the state stays.
    pub(crate) fn put_values(&mut self, values: Vec<Vec<f32>>) -> Result<()> {
        if values.len() != self.tables.len() {
            return Err(TrainError::StateMismatch(format!(
                "{} tables given for {}",
                values.len(),
                self.tables.len()
            )));
        }
        for (table, values) in self.tables.iter_mut().zip(values) {
            table.values = upload(&table.entry, "values", values, &self.device)?;
        }
        Ok(())
    }

    /// Table `t`'s state buffers, copied to the host, in [`Rule::buffer_names`] order.
    pub(crate) fn state(&self, t: usize) -> Result<Vec<Vec<f32>>> {
        self.tables[t].state.iter().map(|s| Ok(s.flatten_all()?.to_vec1()?)).collect()
    }

    /// Replaces table `t`'s state buffers (as [`Self::state`] gives them).
    pub(crate) fn put_state(&mut self, t: usize, buffers: Vec<Vec<f32>>) -> Result<()> {
        let table = &mut self.tables[t];
        if buffers.len() != table.state.len() {
            return Err(TrainError::StateMismatch(format!(
                "{} optimizer buffers given for table '{}', its rule keeps {}",
                buffers.len(),
                table.entry.name,
                table.state.len()
            )));
        }
        for (i, buffer) in buffers.into_iter().enumerate() {
            let name = table.rule.buffer_names()[i];
            table.state[i] = upload(&table.entry, name, buffer, &self.device)?;
        }
        Ok(())
    }

    /// Updates table `t`'s rows `ids` (ascending, distinct) with `grads` (their gradients,
    /// row after row) by its rule with its step size times `scale`, as update `step` of its
    /// group; every other row and its state stay as they are.
    pub(crate) fn update_rows(
        &mut self,
        t: usize,
        ids: &[u32],
        grads: &[f32],
        scale: f32,
        step: u64,
    ) -> Result<()> {
        let table = &self.tables[t];
        let (rows, width) = (table.entry.shape[0], table.entry.row_width());
        if grads.len() != ids.len() * width || ids.iter().any(|&id| id as usize >= rows) {
            return Err(TrainError::InvalidArgument(format!(
                "{} gradients for {} rows of '{}' ({rows} rows of {width})",
                grads.len(),
                ids.len(),
                table.entry.name
            )));
        }
        if ids.is_empty() {
            return Ok(());
        }
        let g = Tensor::from_slice(grads, (ids.len(), width), &self.device)?;
        // With a ring each table's rows may differ; mostly they are the last table's.
        let places = match self.last.take() {
            Some(last) if last.ids == ids => last,
            _ => RowPlaces::new(ids, &self.device)?,
        };
        let written = self.update_at(t, &places, &g, false, scale, step);
        self.last = Some(places);
        written
    }

    /// The places of rows `ids` (ascending, distinct) in these tables.
    pub(crate) fn places(&self, ids: &[u32]) -> Result<RowPlaces> {
        RowPlaces::new(ids, &self.device)
    }

    /// [`Self::update_rows`] of the rows `places` holds, with the gradients already on the
    /// device (`[ids, width]`), as a trainer alone keeps them. A row whose gradient is all
    /// zeros stays as it is, rule state included, as the host's update skips such rows
    /// (`rows::live_rows`): a lazy rule touches only the rows a step moved.
    pub(crate) fn update_rows_on_device(
        &mut self,
        t: usize,
        places: &RowPlaces,
        grads: &Tensor,
        scale: f32,
        step: u64,
    ) -> Result<()> {
        let ids = &places.ids;
        let (rows, width) = (self.tables[t].entry.shape[0], self.tables[t].entry.row_width());
        if grads.dims() != [ids.len(), width] || ids.last().is_some_and(|&id| id as usize >= rows) {
            return Err(TrainError::InvalidArgument(format!(
                "gradients of shape {:?} for {} rows of '{}' ({rows} rows of {width})",
                grads.dims(),
                ids.len(),
                self.tables[t].entry.name
            )));
        }
        if ids.is_empty() {
            return Ok(());
        }
        self.update_at(t, places, grads, true, scale, step)
    }

    /// Runs table `t`'s rule on the rows `places` holds with gradients `g`, where they lie;
    /// with `lazy`, a row whose gradient is all zeros keeps its values and state.
    fn update_at(
        &mut self,
        t: usize,
        places: &RowPlaces,
        g: &Tensor,
        lazy: bool,
        scale: f32,
        step: u64,
    ) -> Result<()> {
        let table = &self.tables[t];
        let span = Span::Rows { ids: &places.at, lazy };
        // The tables and their state are this struct's alone (a lookup gathers copies of their
        // rows), so writing them in place changes nothing a computation still reads.
        update_in_place(table.rule.scaled(scale), step, &table.values, g, &table.state, span)?;
        Ok(())
    }

    /// Updates every row of table `t` with `grads` (the whole table's gradient), as
    /// [`Self::update_rows`] does its rows.
    pub(crate) fn update_all(&mut self, t: usize, grads: &[f32], scale: f32, step: u64) -> Result<()> {
        let table = &self.tables[t];
        let g = upload(&table.entry, "gradient", grads, &self.device)?;
        update_in_place(table.rule.scaled(scale), step, &table.values, &g, &table.state, Span::Flat)?;
        Ok(())
    }
}

/// `values` as a `[rows, width]` tensor of `entry`'s shape on `device`, or an error naming
/// the table and what the values were.
fn upload(entry: &Entry, what: &str, values: impl AsRef<[f32]>, device: &Device) -> Result<Tensor> {
    let values = values.as_ref();
    if values.len() != entry.len() {
        return Err(TrainError::StateMismatch(format!(
            "{} {what} given for table '{}' of {} values",
            values.len(),
            entry.name,
            entry.len()
        )));
    }
    Ok(Tensor::from_slice(values, (entry.shape[0], entry.row_width()), device)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::live_rows;

    /// A table of 6 rows of 2 under lazy Adam, whose state moves even for a zero gradient.
    fn tables() -> DeviceTables {
        let entry = Entry { name: "deep/embeddings".into(), shape: vec![6, 2], offset: 0, table: true };
        let values = (0..12).map(|v| v as f32 * 0.1 - 0.5).collect();
        DeviceTables::new(&[entry], vec![values], &OptimizerConfig::new(Rule::adam(0.1)), &Device::Cpu)
            .unwrap()
    }

    #[test]
    fn rows_of_zero_gradient_stay_as_the_host_leaves_them() {
        let ids = [0u32, 2, 3, 5];
        let first = [0.5f32, -1.0, 0.3, 0.7, 0.25, 0.0, -2.0, 3.0];
        // Then row 2's gradient is zero (-0.0 counts as zero, as on the host): Adam's state
        // would move it on.
        let then = [0.5f32, -1.0, 0.0, -0.0, 0.25, 0.0, -2.0, 3.0];
        let (mut host, mut device) = (tables(), tables());
        for (step, grads) in [(1, first), (2, then), (3, then)] {
            let (live, rows) = live_rows(&ids, &grads, 2);
            host.update_rows(0, &live, &rows, 1.0, step).unwrap();
            let g = Tensor::from_slice(&grads, (4, 2), &Device::Cpu).unwrap();
            let places = device.places(&ids).unwrap();
            device.update_rows_on_device(0, &places, &g, 1.0, step).unwrap();
        }
        assert_eq!(device.values().unwrap(), host.values().unwrap());
        assert_eq!(device.state(0).unwrap(), host.state(0).unwrap());
    }

    #[test]
    fn gradients_of_another_shape_are_refused_naming_the_table() {
        let g = Tensor::zeros((3, 2), candle_core::DType::F32, &Device::Cpu).unwrap();
        let places = tables().places(&[0, 1]).unwrap();
        let error = tables().update_rows_on_device(0, &places, &g, 1.0, 1).unwrap_err();
        assert!(error.to_string().contains("'deep/embeddings'"), "{error}");
        let g = Tensor::zeros((1, 2), candle_core::DType::F32, &Device::Cpu).unwrap();
        let places = tables().places(&[6]).unwrap();
        let error = tables().update_rows_on_device(0, &places, &g, 1.0, 1).unwrap_err();
        assert!(error.to_string().contains("6 rows of 2"), "{error}");
    }

    #[test]
    fn an_update_moves_its_rows_alone_and_rows_gathered_before_keep_their_values() {
        // The write-back is in place: the step's gathered rows (the lookup the backward pass
        // read) must be copies, untouched by it.
        let ids = [1u32, 4];
        let grads = Tensor::from_slice(&[0.5f32, -1.0, 0.25, 2.0], (2, 2), &Device::Cpu).unwrap();
        let mut tables = tables();
        let untouched = tables.values().unwrap();
        let places = tables.places(&ids).unwrap();
        let gathered = tables.gather(0, places.at()).unwrap();
        let before = gathered.to_vec2::<f32>().unwrap();
        tables.update_rows_on_device(0, &places, &grads, 1.0, 1).unwrap();
        assert_eq!(gathered.to_vec2::<f32>().unwrap(), before);
        let values = tables.values().unwrap();
        let moved: Vec<usize> =
            (0..6).filter(|&r| values[0][2 * r..2 * r + 2] != untouched[0][2 * r..2 * r + 2]).collect();
        assert_eq!(moved, [1, 4]);
        let state = tables.state(0).unwrap();
        let moved: Vec<usize> = (0..6).filter(|&r| state[0][2 * r..2 * r + 2] != [0.0, 0.0]).collect();
        assert_eq!(moved, [1, 4]);
    }
}
