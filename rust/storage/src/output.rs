//! Hadoop-style output folders written by many task attempts: the commit protocol.
//!
//! A job writes into `<root>` like Hadoop's `FileOutputCommitter` (algorithm 1):
//!
//! ```text
//! <root>/_temporary/<job>/_attempt_<task>_<attempt>/...   one folder per task attempt
//! <root>/_temporary/<job>/task_<task>/...                 the committed attempt of a task
//! <root>/part-...                                         published by the job commit
//! <root>/_SUCCESS                                         written last
//! ```
//!
//! A task attempt writes only inside its own attempt folder. Committing the task renames that
//! folder to the task's folder without replacing it, which is atomic on HDFS and locally, so of
//! two attempts of one task (a retry racing a zombie, or speculation) exactly one wins and the
//! other's output is dropped. The job commit, run once by the driver after every task
//! succeeded, moves the committed tasks' files into `<root>` (keeping sub-folders such as
//! `col=value/`), writes `_SUCCESS` and removes the staging folder. Everything under
//! `_temporary` is hidden from readers, so a failed job leaves no visible file.
//!
//! On an object store, renames are copies (see the `object` module): the task commit checks
//! that the task's folder is free before copying, so two attempts committing at the same
//! moment (speculation) can both publish, and the job commit is not atomic. Hadoop's own
//! `FileOutputCommitter` has the same limits on S3.

use crate::error::{Result, StorageError};
use crate::location::join_url;
use crate::{delete, exists, list, mkdirs, rename, write};

/// The staging folder under an output root, shared by all jobs writing there.
pub const STAGING_DIR: &str = "_temporary";

/// The marker a successful job writes last.
pub const SUCCESS_MARKER: &str = "_SUCCESS";

/// The marker every task attempt's folder holds; never published.
const TASK_MARKER: &str = ".task";

/// One job writing into one output folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputJob {
    root: String,
    job_id: String,
}

/// What a job commit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobCommit {
    /// The published files, as URLs under the root.
    pub files: Vec<String>,
    /// Entries of the root deleted first because the job overwrites.
    pub replaced: usize,
}

impl OutputJob {
    /// A job writing into `root`. `job_id` names its staging folder and must be a plain name
    /// (letters, digits, `-`, `_`), unique among the jobs writing into `root`.
    pub fn new(root: &str, job_id: &str) -> Result<Self> {
        let plain =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !plain(job_id) {
            return Err(StorageError::InvalidUrl {
                url: root.to_string(),
                reason: format!("job id {job_id:?} must be letters, digits, '-' and '_'"),
            });
        }
        Ok(OutputJob { root: root.trim_end_matches('/').to_string(), job_id: job_id.to_string() })
    }

    /// The output folder.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// This job's staging folder, `<root>/_temporary/<job>`.
    pub fn staging_url(&self) -> String {
        join_url(&join_url(&self.root, STAGING_DIR), &self.job_id)
    }

    /// The folder one task attempt writes into.
    pub fn attempt_url(&self, task: u32, attempt: u32) -> String {
        join_url(&self.staging_url(), &format!("_attempt_{task:05}_{attempt}"))
    }

    /// The folder holding a task's committed output.
    pub fn task_url(&self, task: u32) -> String {
        join_url(&self.staging_url(), &format!("task_{task:05}"))
    }

    /// Creates the attempt's folder with a hidden marker in it, so that the job commit can
    /// tell a task with no rows from a task that never committed: an object store has no
    /// empty folders, and the marker makes the attempt's prefix exist there too. Returns the
    /// folder's URL.
    pub fn setup_task(&self, task: u32, attempt: u32) -> Result<String> {
        let url = self.attempt_url(task, attempt);
        mkdirs(&url)?;
        write(&join_url(&url, TASK_MARKER), b"", true)?;
        Ok(url)
    }

    /// Publishes the attempt's folder as the task's output. Returns `false`, after deleting
    /// this attempt's folder, when another attempt of the task committed first.
    pub fn commit_task(&self, task: u32, attempt: u32) -> Result<bool> {
        let attempt_url = self.attempt_url(task, attempt);
        match rename(&attempt_url, &self.task_url(task), false) {
            Ok(()) => Ok(true),
            Err(StorageError::AlreadyExists { .. }) => {
                delete(&attempt_url, true)?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Drops whatever the attempt wrote.
    pub fn abort_task(&self, task: u32, attempt: u32) -> Result<()> {
        delete(&self.attempt_url(task, attempt), true).map(drop)
    }

    /// Publishes the output of `tasks` (every task of the job) into the root and writes
    /// `_SUCCESS`. With `overwrite`, the root's other entries (but not other jobs' staging
    /// folders) are deleted first: only now, so a job that fails keeps the old data.
    ///
    /// A task without committed output is an error naming it, and nothing is published.
    pub fn commit_job(&self, tasks: &[u32], overwrite: bool) -> Result<JobCommit> {
        let mut tasks = tasks.to_vec();
        tasks.sort_unstable();
        tasks.dedup();
        let mut moves = Vec::new();
        for &task in &tasks {
            let task_url = self.task_url(task);
            if !exists(&task_url)? {
                return Err(StorageError::NotFound { url: task_url });
            }
            collect_files(&task_url, "", &mut moves)?;
        }
        let mut replaced = 0;
        if overwrite {
            for entry in list(&self.root)? {
                if entry.name() != STAGING_DIR {
                    delete(&entry.url, true)?;
                    replaced += 1;
                }
            }
        }
        let mut files = Vec::with_capacity(moves.len());
        let mut made_dirs = std::collections::BTreeSet::new();
        for (from, relative) in moves {
            if let Some((dir, _)) = relative.rsplit_once('/')
                && made_dirs.insert(dir.to_string())
            {
                mkdirs(&join_url(&self.root, dir))?;
            }
            let to = join_url(&self.root, &relative);
            rename(&from, &to, false)?;
            files.push(to);
        }
        write(&join_url(&self.root, SUCCESS_MARKER), b"", true)?;
        self.cleanup()?;
        Ok(JobCommit { files, replaced })
    }

    /// Deletes the job's staging folder, and everything any attempt left there.
    pub fn abort_job(&self) -> Result<()> {
        self.cleanup()
    }

    fn cleanup(&self) -> Result<()> {
        delete(&self.staging_url(), true)?;
        // Other jobs may still stage here; the shared folder goes only when empty.
        let shared = join_url(&self.root, STAGING_DIR);
        match delete(&shared, false) {
            Ok(_) => Ok(()),
            Err(_) if exists(&shared).unwrap_or(true) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Appends `(url, path relative to the task folder)` for every file under `dir`.
fn collect_files(dir: &str, prefix: &str, out: &mut Vec<(String, String)>) -> Result<()> {
    for entry in list(dir)? {
        if entry.name() == TASK_MARKER {
            continue;
        }
        let relative =
            if prefix.is_empty() { entry.name().to_string() } else { format!("{prefix}/{}", entry.name()) };
        if entry.is_dir {
            collect_files(&entry.url, &relative, out)?;
        } else {
            out.push((entry.url, relative));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expand_inputs;

    fn names(root: &str) -> Vec<String> {
        let mut v: Vec<String> =
            expand_inputs(root).unwrap().into_iter().map(|f| f.url[root.len() + 1..].to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn committed_attempts_are_published_and_losers_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let root = join_url(dir.path().to_str().unwrap(), "out");
        let job = OutputJob::new(&root, "job1").unwrap();

        // Task 0: attempt 0 dies half-way, attempt 1 commits.
        let a0 = job.setup_task(0, 0).unwrap();
        write(&join_url(&a0, "part-00000"), b"partial", false).unwrap();
        let a1 = job.setup_task(0, 1).unwrap();
        write(&join_url(&a1, "part-00000"), b"whole", false).unwrap();
        assert!(job.commit_task(0, 1).unwrap());
        // Task 1: two speculative attempts both finish; the second loses.
        for attempt in [0, 1] {
            let a = job.setup_task(1, attempt).unwrap();
            write(&join_url(&a, "k=v/part-00001"), format!("from {attempt}").as_bytes(), false).unwrap();
        }
        assert!(job.commit_task(1, 0).unwrap());
        assert!(!job.commit_task(1, 1).unwrap());
        assert!(!exists(&job.attempt_url(1, 1)).unwrap());
        // Task 2 had no rows.
        job.setup_task(2, 0).unwrap();
        assert!(job.commit_task(2, 0).unwrap());

        // Nothing is visible before the job commits.
        assert!(expand_inputs(&root).unwrap().is_empty());
        let done = job.commit_job(&[0, 1, 2], false).unwrap();
        assert_eq!(done.files.len(), 2);
        assert_eq!(names(&root), ["k=v/part-00001", "part-00000"]);
        assert_eq!(crate::read(&join_url(&root, "part-00000")).unwrap(), b"whole");
        assert_eq!(crate::read(&join_url(&root, "k=v/part-00001")).unwrap(), b"from 0");
        assert!(exists(&join_url(&root, SUCCESS_MARKER)).unwrap());
        assert!(!exists(&join_url(&root, STAGING_DIR)).unwrap());
    }

    #[test]
    fn a_missing_task_fails_the_commit_and_publishes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = join_url(dir.path().to_str().unwrap(), "out");
        let job = OutputJob::new(&root, "j").unwrap();
        let a = job.setup_task(0, 0).unwrap();
        write(&join_url(&a, "part-00000"), b"x", false).unwrap();
        job.commit_task(0, 0).unwrap();
        let err = job.commit_job(&[0, 1], false).unwrap_err();
        assert!(matches!(&err, StorageError::NotFound { url } if url.ends_with("task_00001")), "{err}");
        job.abort_job().unwrap();
        assert!(expand_inputs(&root).unwrap().is_empty());
        assert!(!exists(&join_url(&root, SUCCESS_MARKER)).unwrap());
        assert!(!exists(&join_url(&root, STAGING_DIR)).unwrap());
    }

    #[test]
    fn overwrite_replaces_old_files_only_at_commit_and_spares_other_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let root = join_url(dir.path().to_str().unwrap(), "out");
        write(&join_url(&root, "old/part-0"), b"old", false).unwrap();
        let other = OutputJob::new(&root, "other").unwrap();
        other.setup_task(0, 0).unwrap();

        let job = OutputJob::new(&root, "new").unwrap();
        let a = job.setup_task(0, 0).unwrap();
        write(&join_url(&a, "part-00000"), b"new", false).unwrap();
        job.commit_task(0, 0).unwrap();
        assert_eq!(names(&root), ["old/part-0"]);
        let done = job.commit_job(&[0], true).unwrap();
        assert_eq!(done.replaced, 1);
        assert_eq!(names(&root), ["part-00000"]);
        // The other job's staging survives, and with it the shared folder.
        assert!(exists(&other.attempt_url(0, 0)).unwrap());
    }

    #[test]
    fn job_ids_are_plain_names() {
        assert!(OutputJob::new("/x", "../up").is_err());
        assert!(OutputJob::new("/x", "").is_err());
        assert_eq!(OutputJob::new("/x/", "a-1_b").unwrap().task_url(3), "/x/_temporary/a-1_b/task_00003");
    }
}
