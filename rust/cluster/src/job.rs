//! The driver's view of a running job: registrations, heartbeats, named barriers, the events
//! the driver prints or acts on, and the abort switch that releases every waiter.
//!
//! The gRPC service ([`crate::rendezvous`]) only translates calls into methods of [`Job`]; all
//! waiting happens here, on one `watch` channel whose version is bumped by every change, so a
//! waiter re-checks its condition (spec complete, barrier full, job aborted) after each.

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

/// Something the driver should print or act on, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A task registered.
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
    last_heartbeat: Vec<Option<Instant>>,
    /// Exited or lost: no longer expected to heart-beat.
    done: Vec<bool>,
    barriers: HashMap<String, BTreeSet<u32>>,
    aborted: Option<String>,
    ready_announced: bool,
}

/// The shared state of one job on the driver.
pub struct Job {
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
    events: Mutex<VecDeque<Event>>,
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
    /// registered tasks count as lost after `heartbeat_timeout` without a heartbeat.
    pub fn new(spec: ClusterSpec, registration_timeout: Duration, heartbeat_timeout: Duration) -> Self {
        let n = spec.num_tasks() as usize;
        Job {
            inner: Mutex::new(Inner {
                spec,
                last_heartbeat: vec![None; n],
                done: vec![false; n],
                barriers: HashMap::new(),
                aborted: None,
                ready_announced: false,
            }),
            version: watch::channel(0).0,
            events: Mutex::new(VecDeque::new()),
            new_events: Notify::new(),
            deadline: Instant::now() + registration_timeout,
            heartbeat_timeout,
        }
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    fn push(&self, event: Event) {
        lock(&self.events).push_back(event);
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

    /// Records a registration and waits until every task has registered.
    pub async fn register(&self, registration: Registration) -> Result<ClusterSpec> {
        let event = Event::Registered {
            task_index: registration.task_index,
            host: registration.host.clone(),
            executor_id: registration.executor_id.clone(),
        };
        let task = registration.task_index as usize;
        let announce_ready = {
            let mut inner = lock(&self.inner);
            inner.spec.register(registration)?;
            inner.last_heartbeat[task] = Some(Instant::now());
            inner.done[task] = false;
            let newly_complete = inner.spec.is_complete() && !inner.ready_announced;
            inner.ready_announced |= newly_complete;
            newly_complete
        };
        self.push(event);
        if announce_ready {
            self.push(Event::Ready);
        }
        self.bump();
        self.wait_ready().await
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
            events.extend(lines.into_iter().map(|(stream, text)| Event::Log { task_index, stream, text }));
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
            inner.barriers.entry(name.to_string()).or_default().insert(task_index);
        }
        self.bump();
        let deadline = timeout.map(|t| Instant::now() + t);
        self.wait_until(
            deadline,
            |inner| {
                (inner.barriers.get(name).map_or(0, BTreeSet::len) == inner.spec.num_tasks() as usize)
                    .then_some(())
            },
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
        self.push(Event::Metrics { task_index, step, metrics });
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

    /// Marks the registered, still running tasks whose last heartbeat is older than the
    /// heartbeat time-out as lost, and reports each once.
    fn detect_lost(&self) {
        let now = Instant::now();
        let mut lost = Vec::new();
        {
            let mut inner = lock(&self.inner);
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

    /// The events since the last call, waiting up to `timeout` for the first one.
    pub async fn events(&self, timeout: Duration) -> Vec<Event> {
        self.detect_lost();
        let drain = || lock(&self.events).drain(..).collect::<Vec<_>>();
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
}
