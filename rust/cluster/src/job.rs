//! The driver's view of a running job: registrations, heartbeats, named barriers, the events
//! the driver prints or acts on, the work queue that hands input files to the trainers one at
//! a time (dynamic sharding), and the abort switch that releases every waiter.
//!
//! The gRPC service ([`crate::rendezvous`]) only translates calls into methods of [`Job`]; all
//! waiting happens here, on one `watch` channel whose version is bumped by every change, so a
//! waiter re-checks its condition (spec complete, barrier full, job aborted) after each.
//!
//! The events wait in a queue until the driver takes them. Trainer output and metrics in it
//! are bounded ([`MAX_QUEUED_OUTPUT_BYTES`]): a driver that takes them slowly (a notebook's
//! console) with chatty trainers would otherwise grow without limit. What does not fit is
//! counted, and a line per task and stream says how much was dropped when the driver next
//! takes the queue; the executors' logs keep every line. Events the driver acts on
//! (registrations, exits, lost tasks) are never dropped.
//!
//! The work queue ([`Job::set_work`], [`Job::next_work`]) hands out the same list of items in
//! every epoch, each epoch with its own cursor: a trainer asks for the next item whenever it
//! needs one, so fast trainers read more, and an epoch ends when its queue is empty. Items come
//! largest first (longest processing time first, so an epoch ends on small items); items of
//! equal size come in an order that a hash of the epoch and the URL fixes, so it changes from
//! one epoch to the next but not from one run to the next.
//!
//! The queue survives a restart ([`WorkQueue::restarted`]): every epoch remembers which task
//! took which items, in order, and after a restart each task is first handed again exactly the
//! items it took before, in the same order. A resumed trainer then reads the same rows in the
//! same batches as before the failure and skips the batches its checkpoint already covers, so
//! no file is trained on twice and the interrupted epoch goes on where the checkpoint left it.
//! Items of a task that does not come back (fewer trainers after a restart) go back to the
//! front of their epoch's queue.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::error::{ClusterError, Result};
use crate::spec::{ClusterSpec, Registration};

/// Which output stream a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The trainer's stdout.
    Stdout,
    /// The trainer's stderr.
    Stderr,
}

/// The most bytes of trainer output and metrics the event queue holds (text plus
/// [`EVENT_OVERHEAD_BYTES`] per event); what does not fit is dropped and counted.
pub const MAX_QUEUED_OUTPUT_BYTES: usize = 16 << 20;

/// What a queued event of output costs besides its text: the event itself and its strings'
/// headers.
pub const EVENT_OVERHEAD_BYTES: usize = 64;

/// Completed barriers remembered. A task waiting at a completed barrier cannot be at any other
/// (every barrier needs every task), so no later barrier completes before it has seen its own:
/// a few are plenty, and a job that meets at a barrier every step keeps constant memory.
const COMPLETED_KEPT: usize = 16;

/// Something the driver should print or act on, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A task registered; or a later attempt of a registered task tried to, which was refused
    /// (see [`Job::register`]): a second one for an index means Spark retried that task.
    Registered {
        /// The task.
        task_index: u32,
        /// Where it runs.
        host: String,
        /// Its Spark executor.
        executor_id: String,
    },
    /// Every task registered; user code starts now.
    Ready,
    /// A line the trainer wrote.
    Log {
        /// The task.
        task_index: u32,
        /// Which stream.
        stream: Stream,
        /// The line, without its newline.
        text: String,
    },
    /// Metrics from `ctx.report`.
    Metrics {
        /// The task.
        task_index: u32,
        /// The training step, when given.
        step: Option<i64>,
        /// Name and value, sorted by name.
        metrics: Vec<(String, f64)>,
    },
    /// The trainer process ended.
    Exited {
        /// The task.
        task_index: u32,
        /// Its exit code, or `-N` for signal N.
        exit_code: i32,
        /// The last lines of its stderr.
        stderr_tail: String,
    },
    /// A registered task stopped heart-beating before its trainer exited.
    Lost {
        /// The task.
        task_index: u32,
        /// How long it has been silent.
        silent_for: Duration,
    },
}

struct Inner {
    spec: ClusterSpec,
    /// Each task's latest heartbeat, or the moment every task had registered; None until then.
    last_heartbeat: Vec<Option<Instant>>,
    /// Exited or lost: no longer expected to heart-beat.
    done: Vec<bool>,
    /// Barriers some but not all tasks have reached, and who has.
    barriers: HashMap<String, BTreeSet<u32>>,
    /// The latest barriers every task reached (at most [`COMPLETED_KEPT`]): a waiter that
    /// wakes after its barrier completed finds it here.
    completed: VecDeque<String>,
    aborted: Option<String>,
    ready_announced: bool,
    /// None until [`Job::set_work`] or [`Job::resume_work`].
    work: Option<WorkQueue>,
    /// How many work items each task took, over all epochs.
    work_taken: Vec<u64>,
    /// Each registered task's token, which its later calls must carry.
    tokens: Vec<Option<String>>,
    /// Whether a later attempt of the task was reported (once: the driver needs one, and
    /// repeated claims must not grow the queue).
    retry_reported: Vec<bool>,
}

/// The events the driver has not taken yet, and what did not fit.
#[derive(Default)]
struct Events {
    queue: VecDeque<Event>,
    /// Bytes of output (log lines and metrics) in `queue`, by [`output_size`].
    output_bytes: usize,
    /// Lines dropped since the driver last took the queue, by task and stream.
    dropped_lines: std::collections::BTreeMap<(u32, bool), u64>,
    /// Metric reports dropped since the driver last took the queue, by task.
    dropped_reports: std::collections::BTreeMap<u32, u64>,
    /// Lines and reports dropped over the job's life.
    dropped_total: u64,
}

impl Events {
    /// Queues an event of output (a log line or metrics), or counts it as dropped when the
    /// queue holds [`MAX_QUEUED_OUTPUT_BYTES`] of output already.
    fn push_output(&mut self, event: Event) {
        let size = output_size(&event);
        if self.output_bytes + size <= MAX_QUEUED_OUTPUT_BYTES {
            self.output_bytes += size;
            self.queue.push_back(event);
            return;
        }
        self.dropped_total += 1;
        match event {
            Event::Log { task_index, stream, .. } => {
                *self.dropped_lines.entry((task_index, stream == Stream::Stderr)).or_default() += 1;
            }
            Event::Metrics { task_index, .. } => *self.dropped_reports.entry(task_index).or_default() += 1,
            _ => {}
        }
    }

    /// Everything queued, then a line per task and stream for what was dropped since the last
    /// call; the queue starts empty again.
    fn take(&mut self) -> Vec<Event> {
        let mut taken: Vec<Event> = self.queue.drain(..).collect();
        self.output_bytes = 0;
        for ((task_index, stderr), count) in std::mem::take(&mut self.dropped_lines) {
            let (stream, name) = if stderr { (Stream::Stderr, "stderr") } else { (Stream::Stdout, "stdout") };
            let text = format!(
                "sparktrain: {count} lines of {name} were dropped on the driver because it did not take \
                 them fast enough; the executor's {name} log has every line"
            );
            taken.push(Event::Log { task_index, stream, text });
        }
        for (task_index, count) in std::mem::take(&mut self.dropped_reports) {
            let text = format!(
                "sparktrain: {count} metric reports were dropped on the driver because it did not take \
                 them fast enough"
            );
            taken.push(Event::Log { task_index, stream: Stream::Stderr, text });
        }
        taken
    }
}

/// What an event of output costs in the queue: its text and [`EVENT_OVERHEAD_BYTES`].
fn output_size(event: &Event) -> usize {
    EVENT_OVERHEAD_BYTES
        + match event {
            Event::Log { text, .. } => text.len(),
            Event::Metrics { metrics, .. } => metrics.iter().map(|(name, _)| name.len() + 32).sum(),
            _ => 0,
        }
}

/// The items every epoch hands out, how far each epoch has got, and who took what.
pub struct WorkQueue {
    /// File URL and size in bytes, as given.
    items: Vec<(String, u64)>,
    epochs: HashMap<u64, EpochWork>,
}

/// One epoch's progress through the work queue.
#[derive(Default)]
struct EpochWork {
    /// Indexes into the items in hand-out order, and how many were handed out.
    order: Vec<usize>,
    next: usize,
    /// (task, item index) in the order this generation handed them out.
    handed: Vec<(u32, usize)>,
    /// Per task, the items to hand again before any new one (after a restart).
    replay: HashMap<u32, VecDeque<usize>>,
}

impl WorkQueue {
    /// A queue that hands out `items` (file URL, size in bytes) in every epoch.
    pub fn new(items: Vec<(String, u64)>) -> Self {
        WorkQueue { items, epochs: HashMap::new() }
    }

    /// The next item of `epoch` for `task`, or None once all of them were handed out.
    fn take(&mut self, epoch: u64, task: u32) -> Option<String> {
        let items = &self.items;
        let work = self
            .epochs
            .entry(epoch)
            .or_insert_with(|| EpochWork { order: epoch_order(items, epoch), ..EpochWork::default() });
        let index = match work.replay.get_mut(&task).and_then(VecDeque::pop_front) {
            Some(index) => index,
            None => {
                let index = *work.order.get(work.next)?;
                work.next += 1;
                index
            }
        };
        work.handed.push((task, index));
        Some(self.items[index].0.clone())
    }

    /// A checkpoint made during `epoch` was committed: a restart resumes there or later (the
    /// checkpoint index never moves back), so what earlier epochs handed out is forgotten. The
    /// memory held is then that of the epochs since the last checkpoint, not of the whole job.
    pub fn checkpointed(&mut self, epoch: u64) {
        self.epochs.retain(|e, _| *e >= epoch);
    }

    /// The epochs whose hand-outs are remembered, ascending.
    pub fn epochs_kept(&self) -> Vec<u64> {
        let mut kept: Vec<u64> = self.epochs.keys().copied().collect();
        kept.sort_unstable();
        kept
    }

    /// The queue for the next generation, whose tasks `0..num_workers` take work: every epoch
    /// hands each task the items it took in this generation again, first and in the same order
    /// (then those it had still to be handed again from an earlier restart); the items of
    /// tasks from `num_workers` on go back to the front of the epoch's queue.
    pub fn restarted(mut self, num_workers: u32) -> Self {
        for work in self.epochs.values_mut() {
            let mut replay: HashMap<u32, VecDeque<usize>> = HashMap::new();
            for (task, index) in work.handed.drain(..) {
                replay.entry(task).or_default().push_back(index);
            }
            for (task, rest) in work.replay.drain() {
                replay.entry(task).or_default().extend(rest);
            }
            let mut orphaned: Vec<usize> = Vec::new();
            let mut tasks: Vec<u32> = replay.keys().copied().filter(|t| *t >= num_workers).collect();
            tasks.sort_unstable();
            for task in tasks {
                orphaned.extend(replay.remove(&task).unwrap_or_default());
            }
            if !orphaned.is_empty() {
                let rest = work.order.split_off(work.next);
                work.order = orphaned.into_iter().chain(rest).collect();
                work.next = 0;
            }
            work.replay = replay;
        }
        self
    }
}

/// The order in which `epoch` hands out `items` (as indexes): largest first; equal sizes by a
/// hash of the epoch and the URL, then by URL and position so the order is total.
fn epoch_order(items: &[(String, u64)], epoch: u64) -> Vec<usize> {
    let mut keyed: Vec<(u64, u64, usize)> =
        items.iter().enumerate().map(|(i, (url, size))| (*size, tie_hash(epoch, url), i)).collect();
    keyed.sort_unstable_by(|a, b| {
        b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then_with(|| items[a.2].0.cmp(&items[b.2].0)).then(a.2.cmp(&b.2))
    });
    keyed.into_iter().map(|(_, _, i)| i).collect()
}

/// The splitmix64 finalizer: every input bit affects every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hash of `url` seeded by `epoch` (FNV-1a, then mixed), the same on every platform and in
/// every run.
fn tie_hash(epoch: u64, url: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ mix(epoch.wrapping_add(0x9e37_79b9_7f4a_7c15));
    for byte in url.bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// The shared state of one job on the driver.
pub struct Job {
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
    events: Mutex<Events>,
    new_events: Notify,
    deadline: Instant,
    heartbeat_timeout: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks is a single assignment or push, so a panic elsewhere
    // cannot leave them half-written: carry on with the data.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Job {
    /// A job whose tasks must all register within `registration_timeout` from now, and whose
    /// tasks count as lost after `heartbeat_timeout` without a heartbeat, from the moment all
    /// have registered.
    pub fn new(spec: ClusterSpec, registration_timeout: Duration, heartbeat_timeout: Duration) -> Self {
        let n = spec.num_tasks() as usize;
        Job {
            inner: Mutex::new(Inner {
                spec,
                last_heartbeat: vec![None; n],
                done: vec![false; n],
                barriers: HashMap::new(),
                completed: VecDeque::new(),
                aborted: None,
                ready_announced: false,
                work: None,
                work_taken: vec![0; n],
                tokens: vec![None; n],
                retry_reported: vec![false; n],
            }),
            version: watch::channel(0).0,
            events: Mutex::default(),
            new_events: Notify::new(),
            deadline: Instant::now() + registration_timeout,
            heartbeat_timeout,
        }
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Queues an event the driver acts on: never dropped (there are a few per task).
    fn push(&self, event: Event) {
        lock(&self.events).queue.push_back(event);
        self.new_events.notify_one();
    }

    /// How many tasks the job has.
    pub fn num_tasks(&self) -> u32 {
        lock(&self.inner).spec.num_tasks()
    }

    /// A copy of the spec as it stands.
    pub fn spec(&self) -> ClusterSpec {
        lock(&self.inner).spec.clone()
    }

    /// Why the job was aborted, if it was.
    pub fn aborted(&self) -> Option<String> {
        lock(&self.inner).aborted.clone()
    }

    /// Fails every pending and future wait with `reason`, and tells every task to stop its
    /// trainer at its next heartbeat. The first reason is kept.
    pub fn abort(&self, reason: &str) {
        let mut inner = lock(&self.inner);
        if inner.aborted.is_none() {
            inner.aborted = Some(reason.to_string());
        }
        drop(inner);
        self.bump();
    }

    /// Waits, re-checking `check` after every change, until it gives a value, the job is
    /// aborted, or `deadline` passes (then `on_timeout` makes the error).
    async fn wait_until<T>(
        &self,
        deadline: Option<Instant>,
        mut check: impl FnMut(&Inner) -> Option<T>,
        on_timeout: impl FnOnce(&Inner) -> ClusterError,
    ) -> Result<T> {
        let mut version = self.version.subscribe();
        loop {
            {
                let inner = lock(&self.inner);
                if let Some(reason) = &inner.aborted {
                    return Err(ClusterError::Aborted(reason.clone()));
                }
                if let Some(value) = check(&inner) {
                    return Ok(value);
                }
            }
            let changed = version.changed();
            let outcome = match deadline {
                Some(at) => tokio::time::timeout_at(at, changed).await,
                None => Ok(changed.await),
            };
            match outcome {
                Ok(Ok(())) => {}
                // The sender lives as long as `self`: unreachable, but not worth a panic.
                Ok(Err(_)) => return Err(ClusterError::Aborted("the rendezvous was dropped".into())),
                Err(_) => {
                    let inner = lock(&self.inner);
                    return match check(&inner) {
                        Some(value) => Ok(value),
                        None => Err(on_timeout(&inner)),
                    };
                }
            }
        }
    }

    /// Records a registration and waits until every task has registered; returns the spec and
    /// the token this registration got.
    ///
    /// A task index registers once: a second registration is refused and the task keeps its
    /// token. When the second one claims a later attempt (Spark retried the task, or someone
    /// claims it did), the driver is still told, once, with a [`Event::Registered`] for the
    /// index, so that its restart logic can end the generation; only a new generation takes
    /// the new attempt.
    pub async fn register(&self, registration: Registration) -> Result<(ClusterSpec, String)> {
        let event = Event::Registered {
            task_index: registration.task_index,
            host: registration.host.clone(),
            executor_id: registration.executor_id.clone(),
        };
        let task = registration.task_index as usize;
        let token = crate::secret::task_token()?;
        let announce_ready = {
            let mut inner = lock(&self.inner);
            match inner.spec.register(registration) {
                Ok(()) => {}
                Err(e @ ClusterError::DuplicateRegistration { attempt, registered, .. })
                    if attempt > registered =>
                {
                    let first = !std::mem::replace(&mut inner.retry_reported[task], true);
                    drop(inner);
                    if first {
                        self.push(event);
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
            inner.tokens[task] = Some(token.clone());
            inner.done[task] = false;
            let newly_complete = inner.spec.is_complete() && !inner.ready_announced;
            inner.ready_announced |= newly_complete;
            if newly_complete {
                // Liveness is counted from here: a task cannot heart-beat before it has its
                // spec (its token comes with it), and registrations may spread over longer
                // than the heartbeat time-out (executors starting seconds apart), which the
                // registration time-out bounds instead.
                let now = Instant::now();
                inner.last_heartbeat.iter_mut().for_each(|seen| *seen = Some(now));
            }
            newly_complete
        };
        self.push(event);
        if announce_ready {
            self.push(Event::Ready);
        }
        self.bump();
        Ok((self.wait_ready().await?, token))
    }

    /// The token task `task_index` got when it registered, if it has.
    pub fn token(&self, task_index: u32) -> Option<String> {
        lock(&self.inner).tokens.get(task_index as usize).cloned().flatten()
    }

    /// Refuses a call for a task that does not carry the token the task's registration
    /// returned, and any call for a task that has not registered: a task makes none before
    /// it registers, so such a call can only be someone claiming its index. Indexes out of
    /// range pass, for the handler to name.
    pub fn check_token(&self, task_index: u32, presented: Option<&str>) -> Result<()> {
        let inner = lock(&self.inner);
        match inner.tokens.get(task_index as usize) {
            Some(Some(token)) if presented.is_some_and(|p| crate::secret::same(p, token)) => Ok(()),
            Some(_) => Err(ClusterError::NotTheTask { task_index }),
            None => Ok(()),
        }
    }

    /// Waits until every task has registered, or fails at the registration deadline naming
    /// the missing tasks.
    pub async fn wait_ready(&self) -> Result<ClusterSpec> {
        self.wait_until(
            Some(self.deadline),
            |inner| inner.spec.is_complete().then(|| inner.spec.clone()),
            |inner| inner.spec.timeout_error(),
        )
        .await
    }

    /// Records a heartbeat and the trainer output it carries; returns the abort reason when
    /// the task should stop its trainer.
    pub fn heartbeat(&self, task_index: u32, lines: Vec<(Stream, String)>) -> Result<Option<String>> {
        let mut inner = lock(&self.inner);
        let n = inner.spec.num_tasks();
        let slot =
            inner.last_heartbeat.get_mut(task_index as usize).ok_or_else(|| out_of_range(task_index, n))?;
        *slot = Some(Instant::now());
        let aborted = inner.aborted.clone();
        drop(inner);
        if !lines.is_empty() {
            let mut events = lock(&self.events);
            for (stream, text) in lines {
                events.push_output(Event::Log { task_index, stream, text });
            }
            drop(events);
            self.new_events.notify_one();
        }
        Ok(aborted)
    }

    /// Waits until every task has called the barrier `name`. `timeout` of `None` waits as
    /// long as the job runs; otherwise the error names the tasks that never arrived.
    pub async fn barrier(&self, task_index: u32, name: &str, timeout: Option<Duration>) -> Result<()> {
        {
            let mut inner = lock(&self.inner);
            let n = inner.spec.num_tasks();
            if task_index >= n {
                return Err(out_of_range(task_index, n));
            }
            if !inner.completed.iter().any(|c| c == name) {
                let arrived = inner.barriers.entry(name.to_string()).or_default();
                arrived.insert(task_index);
                if arrived.len() == n as usize {
                    inner.barriers.remove(name);
                    if inner.completed.len() == COMPLETED_KEPT {
                        inner.completed.pop_front();
                    }
                    inner.completed.push_back(name.to_string());
                }
            }
        }
        self.bump();
        // A wait too long to add to the clock (a caller's u64::MAX) is no deadline at all.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        self.wait_until(
            deadline,
            |inner| inner.completed.iter().any(|c| c == name).then_some(()),
            |inner| {
                let arrived = inner.barriers.get(name).cloned().unwrap_or_default();
                let missing = (0..inner.spec.num_tasks()).filter(|t| !arrived.contains(t)).collect();
                ClusterError::BarrierTimeout {
                    name: name.to_string(),
                    missing,
                    total: inner.spec.num_tasks(),
                }
            },
        )
        .await
    }

    /// Records metrics from a trainer.
    pub fn report(&self, task_index: u32, step: Option<i64>, mut metrics: Vec<(String, f64)>) -> Result<()> {
        let n = self.num_tasks();
        if task_index >= n {
            return Err(out_of_range(task_index, n));
        }
        metrics.sort_by(|a, b| a.0.cmp(&b.0));
        lock(&self.events).push_output(Event::Metrics { task_index, step, metrics });
        self.new_events.notify_one();
        Ok(())
    }

    /// Records that a task's trainer ended.
    pub fn exited(&self, task_index: u32, exit_code: i32, stderr_tail: String) -> Result<()> {
        {
            let mut inner = lock(&self.inner);
            let n = inner.spec.num_tasks();
            let done = inner.done.get_mut(task_index as usize).ok_or_else(|| out_of_range(task_index, n))?;
            *done = true;
        }
        self.push(Event::Exited { task_index, exit_code, stderr_tail });
        Ok(())
    }

    /// Sets the items (file URL, size in bytes) that every epoch hands out through
    /// [`Job::next_work`]. Call it once, before the tasks start. Calling it again replaces the
    /// list and restarts every epoch's queue from its first item (items already handed out in
    /// an epoch may be handed out again); [`Job::work_taken`] keeps its counts. An item listed
    /// twice is handed out twice per epoch.
    pub fn set_work(&self, items: Vec<(String, u64)>) {
        lock(&self.inner).work = Some(WorkQueue::new(items));
    }

    /// Takes the work queue out of this job, to carry it over to the next generation
    /// ([`WorkQueue::restarted`], [`Job::resume_work`]).
    pub fn take_work(&self) -> Option<WorkQueue> {
        lock(&self.inner).work.take()
    }

    /// Serves `queue` as this job's work queue.
    pub fn resume_work(&self, queue: WorkQueue) {
        lock(&self.inner).work = Some(queue);
    }

    /// The next item of `epoch` not handed out yet, for task `task_index`; None once every
    /// item of that epoch was taken. Epochs are independent: a task may start on epoch `e + 1`
    /// while others finish `e`. Fails when the job was aborted, when the task index is out of
    /// range, and when no work was set ([`Job::set_work`]).
    pub fn next_work(&self, task_index: u32, epoch: u64) -> Result<Option<String>> {
        let mut guard = lock(&self.inner);
        let inner = &mut *guard;
        let n = inner.spec.num_tasks();
        if task_index >= n {
            return Err(out_of_range(task_index, n));
        }
        if let Some(reason) = &inner.aborted {
            return Err(ClusterError::Aborted(reason.clone()));
        }
        let queue = inner
            .work
            .as_mut()
            .ok_or_else(|| ClusterError::InvalidArgument("no work queue was set for this job".into()))?;
        let item = queue.take(epoch, task_index);
        if item.is_some() {
            inner.work_taken[task_index as usize] += 1;
        }
        Ok(item)
    }

    /// How many output lines and metric reports were dropped because the driver did not take
    /// the events fast enough, over the job's life.
    pub fn output_dropped(&self) -> u64 {
        lock(&self.events).dropped_total
    }

    /// A checkpoint made during `epoch` was committed ([`WorkQueue::checkpointed`]); nothing
    /// to do without a work queue.
    pub fn work_checkpointed(&self, epoch: u64) {
        if let Some(queue) = lock(&self.inner).work.as_mut() {
            queue.checkpointed(epoch);
        }
    }

    /// The epochs whose hand-outs the work queue remembers ([`WorkQueue::epochs_kept`]).
    pub fn work_epochs_kept(&self) -> Vec<u64> {
        lock(&self.inner).work.as_ref().map(WorkQueue::epochs_kept).unwrap_or_default()
    }

    /// How many work items each task took, by task index, over all epochs.
    pub fn work_taken(&self) -> Vec<u64> {
        lock(&self.inner).work_taken.clone()
    }

    /// Marks the still running tasks whose last heartbeat is older than the heartbeat
    /// time-out as lost, and reports each once. Nothing is lost before every task has
    /// registered: until then the registration time-out governs.
    fn detect_lost(&self) {
        let now = Instant::now();
        let mut lost = Vec::new();
        {
            let mut inner = lock(&self.inner);
            if !inner.ready_announced {
                return;
            }
            for task in 0..inner.done.len() {
                if inner.done[task] {
                    continue;
                }
                if let Some(seen) = inner.last_heartbeat[task]
                    && now.duration_since(seen) > self.heartbeat_timeout
                {
                    inner.done[task] = true;
                    lost.push(Event::Lost { task_index: task as u32, silent_for: now.duration_since(seen) });
                }
            }
        }
        for event in lost {
            self.push(event);
        }
    }

    /// The events since the last call, waiting up to `timeout` for the first one. Output that
    /// did not fit in the queue meanwhile is counted in a line per task and stream at the end.
    pub async fn events(&self, timeout: Duration) -> Vec<Event> {
        self.detect_lost();
        let drain = || lock(&self.events).take();
        let ready = drain();
        if !ready.is_empty() {
            return ready;
        }
        let _ = tokio::time::timeout(timeout, self.new_events.notified()).await;
        self.detect_lost();
        drain()
    }
}

fn out_of_range(task_index: u32, total: u32) -> ClusterError {
    ClusterError::InvalidArgument(format!(
        "task index {task_index} is out of range: the job has {total} tasks"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(task_index: u32) -> Registration {
        Registration {
            task_index,
            attempt: 0,
            host: "127.0.0.1".into(),
            pid: 1,
            executor_id: task_index.to_string(),
            data_port: 1,
            tf_port: 2,
            gpus: vec![],
        }
    }

    fn job(n: u32, heartbeat_timeout: Duration) -> std::sync::Arc<Job> {
        std::sync::Arc::new(Job::new(
            ClusterSpec::new(n, 0).unwrap(),
            Duration::from_secs(5),
            heartbeat_timeout,
        ))
    }

    #[tokio::test]
    async fn barrier_releases_when_all_arrive_and_names_the_missing_on_time_out() {
        let job = job(3, Duration::from_secs(60));
        let early = {
            let job = job.clone();
            tokio::spawn(async move { job.barrier(0, "a", Some(Duration::from_secs(5))).await })
        };
        job.barrier(1, "a", Some(Duration::from_millis(10))).await.unwrap_err();
        job.barrier(2, "a", None).await.unwrap();
        early.await.unwrap().unwrap();

        let err = job.barrier(1, "b", Some(Duration::from_millis(20))).await.unwrap_err();
        assert_eq!(err.to_string(), "barrier 'b': 2 of 3 tasks never arrived: [0, 2]");
    }

    #[tokio::test]
    async fn a_barrier_per_step_keeps_the_memory_of_a_few() {
        let job = job(2, Duration::from_secs(60));
        for step in 0..1000 {
            let name = format!("step#{step}");
            let first = {
                let (job, name) = (job.clone(), name.clone());
                tokio::spawn(async move { job.barrier(0, &name, Some(Duration::from_secs(5))).await })
            };
            job.barrier(1, &name, Some(Duration::from_secs(5))).await.unwrap();
            first.await.unwrap().unwrap();
        }
        let inner = lock(&job.inner);
        assert!(inner.barriers.is_empty());
        assert_eq!(inner.completed.len(), COMPLETED_KEPT);
    }

    #[tokio::test]
    async fn abort_releases_every_waiter_with_the_reason() {
        let job = job(2, Duration::from_secs(60));
        let waiter = {
            let job = job.clone();
            tokio::spawn(async move { job.barrier(0, "exit", None).await })
        };
        let registering = {
            let job = job.clone();
            tokio::spawn(async move { job.register(registration(1)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        job.abort("task 1 (worker:0) exited with code 3");
        for outcome in [waiter.await.unwrap().map(|_| ()), registering.await.unwrap().map(|_| ())] {
            assert_eq!(
                outcome.unwrap_err().to_string(),
                "the job was aborted: task 1 (worker:0) exited with code 3"
            );
        }
        assert_eq!(
            job.heartbeat(0, vec![]).unwrap().as_deref(),
            Some("task 1 (worker:0) exited with code 3")
        );
    }

    #[tokio::test]
    async fn silent_tasks_are_reported_lost_once_and_exited_ones_never() {
        let job = job(2, Duration::from_millis(30));
        let (a, b) = (job.clone(), job.clone());
        let r0 = tokio::spawn(async move { a.register(registration(0)).await });
        let r1 = tokio::spawn(async move { b.register(registration(1)).await });
        r0.await.unwrap().unwrap();
        r1.await.unwrap().unwrap();
        job.exited(1, 0, String::new()).unwrap();
        job.heartbeat(0, vec![(Stream::Stderr, "hello".into())]).unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let events = job.events(Duration::ZERO).await;
        let lost: Vec<u32> = events
            .iter()
            .filter_map(|e| if let Event::Lost { task_index, .. } = e { Some(*task_index) } else { None })
            .collect();
        assert_eq!(lost, [0]);
        assert!(events.contains(&Event::Ready));
        assert!(events.contains(&Event::Log { task_index: 0, stream: Stream::Stderr, text: "hello".into() }));
        assert!(job.events(Duration::from_millis(50)).await.is_empty());
    }

    fn drain(job: &Job, task_index: u32, epoch: u64) -> Vec<String> {
        std::iter::from_fn(|| job.next_work(task_index, epoch).unwrap()).collect()
    }

    fn files(sizes: &[u64]) -> Vec<(String, u64)> {
        sizes.iter().enumerate().map(|(i, size)| (format!("hdfs://nn/data/part-{i:05}"), *size)).collect()
    }

    #[test]
    fn work_comes_largest_first_and_equal_sizes_shuffle_by_epoch() {
        let job = job(2, Duration::from_secs(60));
        job.set_work(vec![
            ("small".into(), 1),
            ("big".into(), 300),
            ("medium".into(), 20),
            ("huge".into(), 4000),
            ("medium-too".into(), 20),
        ]);
        let order = drain(&job, 0, 0);
        assert_eq!(&order[..2], ["huge", "big"]);
        let mut middle = order[2..4].to_vec();
        middle.sort();
        assert_eq!(middle, ["medium", "medium-too"]);
        assert_eq!(order[4], "small");

        // Equal sizes: a fixed order per epoch (the same in another job), not the same in
        // every epoch.
        let equal = files(&[64; 12]);
        job.set_work(equal.clone());
        let other = self::job(1, Duration::from_secs(60));
        other.set_work(equal.clone());
        let mut orders = BTreeSet::new();
        for epoch in 0..6 {
            let order = drain(&job, 1, epoch);
            assert_eq!(order, drain(&other, 0, epoch), "epoch {epoch}");
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, equal.iter().map(|(url, _)| url.clone()).collect::<Vec<_>>());
            orders.insert(order);
        }
        assert!(orders.len() > 1, "every epoch handed out the equal-size files in one order");
        // Sizes still win over the hash, whatever the order of the list.
        let mut mixed = files(&[5, 5, 5, 9, 9, 1, 5, 9]);
        mixed.reverse();
        let size_of: HashMap<String, u64> = mixed.iter().cloned().collect();
        job.set_work(mixed);
        for epoch in 0..4 {
            let sizes: Vec<u64> = drain(&job, 0, epoch).iter().map(|url| size_of[url]).collect();
            assert_eq!(sizes, [9, 9, 9, 5, 5, 5, 5, 1], "epoch {epoch}");
        }
    }

    #[test]
    fn each_epoch_hands_out_every_item_once_on_its_own_cursor() {
        let job = job(3, Duration::from_secs(60));
        job.set_work(files(&[10, 20, 30, 40]));
        let first = job.next_work(0, 0).unwrap().unwrap();
        let second = job.next_work(1, 0).unwrap().unwrap();
        assert_eq!(
            [first.as_str(), second.as_str()],
            ["hdfs://nn/data/part-00003", "hdfs://nn/data/part-00002"]
        );
        // A fast task starts the next epoch while epoch 0 is half done.
        assert_eq!(drain(&job, 2, 1).len(), 4);
        assert_eq!(drain(&job, 0, 0), ["hdfs://nn/data/part-00001", "hdfs://nn/data/part-00000"]);
        // Exhausted epochs stay exhausted; later ones are untouched.
        for epoch in [0, 1] {
            for task in 0..3 {
                assert_eq!(job.next_work(task, epoch).unwrap(), None);
            }
        }
        assert_eq!(drain(&job, 1, 7).len(), 4);
        assert_eq!(job.work_taken(), [3, 5, 4]);

        // An empty list is a queue that is always empty.
        job.set_work(vec![]);
        assert_eq!(job.next_work(0, 0).unwrap(), None);
        assert_eq!(job.work_taken(), [3, 5, 4]);
    }

    #[test]
    fn work_is_refused_without_a_queue_out_of_range_and_after_an_abort() {
        let job = job(2, Duration::from_secs(60));
        let err = job.next_work(0, 0).unwrap_err();
        assert!(
            matches!(&err, ClusterError::InvalidArgument(m) if m == "no work queue was set for this job")
        );
        job.set_work(files(&[1, 2]));
        let err = job.next_work(2, 0).unwrap_err();
        assert_eq!(err.to_string(), "task index 2 is out of range: the job has 2 tasks");
        job.abort("task 1 (worker:0) exited with code 3");
        let err = job.next_work(0, 0).unwrap_err();
        assert!(matches!(&err, ClusterError::Aborted(r) if r == "task 1 (worker:0) exited with code 3"));
        assert_eq!(job.work_taken(), [0, 0]);
    }

    #[test]
    fn concurrent_takers_get_every_item_of_each_epoch_exactly_once() {
        const TASKS: u32 = 4;
        const ITEMS: u64 = 2000;
        const EPOCHS: u64 = 3;
        let job = job(TASKS, Duration::from_secs(60));
        // Many equal sizes, so the ties matter too.
        job.set_work((0..ITEMS).map(|i| (format!("file-{i}"), i % 7)).collect());
        let takers: Vec<_> = (0..TASKS)
            .map(|task| {
                let job = job.clone();
                std::thread::spawn(move || {
                    // Interleave the epochs so that they overlap.
                    let mut taken = vec![Vec::new(); EPOCHS as usize];
                    let mut open: Vec<u64> = (0..EPOCHS).collect();
                    while !open.is_empty() {
                        open.retain(|&epoch| match job.next_work(task, epoch).unwrap() {
                            Some(item) => {
                                taken[epoch as usize].push(item);
                                true
                            }
                            None => false,
                        });
                    }
                    taken
                })
            })
            .collect();
        let mut per_epoch = vec![Vec::new(); EPOCHS as usize];
        for taker in takers {
            for (epoch, items) in taker.join().unwrap().into_iter().enumerate() {
                per_epoch[epoch].extend(items);
            }
        }
        let mut expected: Vec<String> = (0..ITEMS).map(|i| format!("file-{i}")).collect();
        expected.sort();
        for (epoch, mut items) in per_epoch.into_iter().enumerate() {
            items.sort();
            assert_eq!(items, expected, "epoch {epoch}");
        }
        assert_eq!(job.work_taken().iter().sum::<u64>(), ITEMS * EPOCHS);
    }

    #[test]
    fn after_a_restart_each_task_is_handed_again_what_it_took_in_the_same_order() {
        let mut queue = WorkQueue::new(files(&[60, 50, 40, 30, 20, 10]));
        let take = |q: &mut WorkQueue, task: u32| q.take(0, task).map(|url| url[url.len() - 1..].to_string());
        // Generation 0: tasks 0 and 1 race for epoch 0; task 1 also starts epoch 1.
        let before: Vec<_> = [0, 1, 1, 0].iter().map(|&t| take(&mut queue, t).unwrap()).collect();
        assert_eq!(before, ["0", "1", "2", "3"]);
        assert!(queue.take(1, 1).unwrap().ends_with("part-00000"));

        let mut queue = queue.restarted(2);
        // Each task gets its own items back first, in order, whoever asks first.
        assert_eq!(take(&mut queue, 1).as_deref(), Some("1"));
        assert_eq!(take(&mut queue, 0).as_deref(), Some("0"));
        assert_eq!(take(&mut queue, 0).as_deref(), Some("3"));
        assert_eq!(take(&mut queue, 0).as_deref(), Some("4"), "then new items, from where the epoch was");
        assert_eq!(take(&mut queue, 1).as_deref(), Some("2"));
        assert_eq!(take(&mut queue, 1).as_deref(), Some("5"));
        assert_eq!(take(&mut queue, 1), None);
        assert!(queue.take(1, 1).unwrap().ends_with("part-00000"), "every epoch is replayed");

        // A second restart before the replay is done keeps what is still owed.
        let mut queue = WorkQueue::new(files(&[3, 2, 1])).restarted(1);
        assert_eq!(take(&mut queue, 0).as_deref(), Some("0"));
        let mut queue = queue.restarted(1);
        assert_eq!(take(&mut queue, 0).as_deref(), Some("0"));
        assert_eq!(take(&mut queue, 0).as_deref(), Some("1"));
    }

    #[test]
    fn only_the_epochs_since_the_last_checkpoint_are_remembered_and_they_still_replay() {
        let mut queue = WorkQueue::new(files(&[30, 20, 10]));
        for epoch in 0..100 {
            while queue.take(epoch, (epoch % 2) as u32).is_some() {}
        }
        // Without a checkpoint every epoch's hand-outs are kept: a restart may resume anywhere.
        assert_eq!(queue.epochs_kept().len(), 100);
        assert!(queue.take(100, 0).unwrap().ends_with("part-00000"));
        queue.checkpointed(99);
        assert_eq!(queue.epochs_kept(), [99, 100]);
        // A restart resumes at epoch 99 or later: those replay as before, to the same task.
        let mut queue = queue.restarted(2);
        assert!(queue.take(99, 1).unwrap().ends_with("part-00000"));
        assert!(queue.take(100, 0).unwrap().ends_with("part-00000"));
        assert!(queue.take(100, 0).unwrap().ends_with("part-00001"), "then a new item");
        // An epoch forgotten is handed out afresh, should anyone ask (nobody resumes there).
        assert!(queue.take(3, 0).unwrap().ends_with("part-00000"));
    }

    #[test]
    fn the_items_of_a_task_that_does_not_come_back_go_to_the_front_of_the_queue() {
        let mut queue = WorkQueue::new(files(&[60, 50, 40, 30, 20, 10]));
        let mut take = |task: u32| queue.take(0, task).unwrap();
        let taken = [take(0), take(1), take(2), take(2)];
        assert!(taken[3].ends_with("part-00003"));
        let mut queue = queue.restarted(2);
        // Task 2 is gone: its items 2 and 3 come next for anyone, before the untouched 4 and 5.
        let mut rest = Vec::new();
        while let Some(url) = queue.take(0, 1) {
            rest.push(url[url.len() - 1..].to_string());
        }
        assert_eq!(rest, ["1", "2", "3", "4", "5"]);
        assert!(queue.take(0, 0).unwrap().ends_with("part-00000"));
        assert_eq!(queue.take(0, 0), None);
    }
}
