//! Batches made ready for the step ahead of it, on a thread of their own.
//!
//! Before a step can run, its batch must be on the model's device and its ids placed: the
//! distinct ids found (a hundred thousand ids at batch 4096; `distinct.rs`), each id's index
//! among them, and on a GPU the plan that sums the embeddings' gradients per distinct id.
//! None of that depends on the weights, so [`Prefetch`] does it for the next batch while the
//! current one trains: on a GPU the training thread then only queues kernels and waits for
//! their results, and on a CPU the work moves to a core the step's threads leave idle at
//! times. For a trainer alone with its tables on the device, it also makes the ids' places
//! there, where the step reads and updates their rows (`device_tables::RowPlaces`).
//!
//! candle's CUDA device queues work on the calling thread's own default stream
//! (`CU_STREAM_PER_THREAD`), so this thread's copies are not ordered with the training
//! thread's kernels: a copy from pageable memory returns once its bytes are staged, before
//! they reach the device. This thread therefore waits for its own stream before handing a
//! batch over, so the step never reads a batch still on its way; the training thread does not
//! wait, and the copies of a few megabytes take a fraction of the step they overlap.

use std::sync::mpsc::SyncSender;

use candle_core::Device;

use crate::background::Background;
use crate::batch::{Batch, Gather, LookupPlan};
use crate::error::Result;
use crate::features::Encoded;
use crate::model::Model;
use crate::step::DataParallel;

/// A batch ready for [`crate::DataParallel::step_prepared`]: its tensors on the device and
/// the plan of its ids.
pub struct Prepared {
    batch: Batch,
    plan: Option<LookupPlan>,
}

impl Prepared {
    /// `encoded` on `device`, its ids placed for a training step.
    pub fn new(encoded: &Encoded, device: &Device) -> Result<Prepared> {
        Self::with_layout(encoded, device, Gather::for_device(device))
    }

    /// [`Prepared::new`] with the rows laid out as `gather` says, whatever the device: on the
    /// CPU, `Gather::PerPosition` does the host's share of a GPU's preparation.
    pub fn with_layout(encoded: &Encoded, device: &Device, gather: Gather) -> Result<Prepared> {
        Self::made(encoded, device, gather, false)
    }

    /// `encoded` prepared for `dp`'s step, as [`Prefetch::for_step`] prepares its batches.
    pub fn for_step<M: Model>(encoded: &Encoded, dp: &DataParallel<M>) -> Result<Prepared> {
        let (device, place_rows) = dp.preparation();
        Self::made(encoded, &device, Gather::for_device(&device), place_rows)
    }

    /// `encoded` laid out as `gather` says on `device`, its ids placed for a training step
    /// and, if `place_rows`, their rows' places made on the device for tables there.
    fn made(encoded: &Encoded, device: &Device, gather: Gather, place_rows: bool) -> Result<Prepared> {
        let batch = Batch::from_encoded_on(encoded, device)?;
        let mut plan = LookupPlan::of_as(&batch, gather)?;
        if let Some(plan) = &mut plan {
            plan.plan_gradients()?;
            if place_rows {
                plan.place_rows()?;
            }
        }
        // This thread's stream: see the module's header.
        device.synchronize()?;
        Ok(Prepared { batch, plan })
    }

    /// The batch itself.
    pub fn batch(&self) -> &Batch {
        &self.batch
    }

    /// The batch and the plan of its ids (None when it has none).
    pub(crate) fn into_parts(self) -> (Batch, Option<LookupPlan>) {
        (self.batch, self.plan)
    }
}

/// Batches of an input, prepared on a thread of their own, [`Prefetch::DEPTH`] ahead of the
/// one being trained on, in the input's order. An input's error ends it, in its place.
pub struct Prefetch(Background<Prepared>);

impl Prefetch {
    /// Batches prepared and waiting, besides the one being prepared: one is enough to hide
    /// the preparation behind a step, which takes longer.
    pub const DEPTH: usize = 1;

    /// Starts preparing `batches` for `device`. Dropping the result stops the thread once it
    /// has finished the batch at hand.
    pub fn start<I>(batches: I, device: Device) -> Result<Prefetch>
    where
        I: Iterator<Item = Result<Encoded>> + Send + 'static,
    {
        Self::placing(batches, device, false)
    }

    /// Starts preparing `batches` for `dp`'s step: on its device, and where its tables are on
    /// the device and it trains alone, with the ids' places in them.
    pub fn for_step<I, M>(batches: I, dp: &DataParallel<M>) -> Result<Prefetch>
    where
        I: Iterator<Item = Result<Encoded>> + Send + 'static,
        M: Model,
    {
        let (device, place_rows) = dp.preparation();
        Self::placing(batches, device, place_rows)
    }

    /// [`Prefetch::start`], the rows' places also made on the device if `place_rows`.
    fn placing<I>(batches: I, device: Device, place_rows: bool) -> Result<Prefetch>
    where
        I: Iterator<Item = Result<Encoded>> + Send + 'static,
    {
        let gather = Gather::for_device(&device);
        let work = move |sender: SyncSender<Result<Prepared>>| {
            for encoded in batches {
                let prepared = encoded.and_then(|e| Prepared::made(&e, &device, gather, place_rows));
                let failed = prepared.is_err();
                if sender.send(prepared).is_err() || failed {
                    return;
                }
            }
        };
        Background::spawn("prefetch", Self::DEPTH, work).map(Prefetch)
    }
}

impl Iterator for Prefetch {
    type Item = Result<Prepared>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
}
