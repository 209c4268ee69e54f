//! Hadoop-style output folders written by many task attempts: the commit protocol.
//!
//! A job writes into `<root>` like Hadoop's `FileOutputCommitter` (algorithm 1):
//!
//! ```text
//! <root>/_temporary/<job>/_attempt_<task>_<attempt>/...   one folder per task attempt
//! <root>/_temporary/<job>/task_<task>/...                 the committed attempt of a task (file systems)
//! <root>/_temporary/<job>/task_<task>.manifest            the committed attempt of a task (object stores)
//! <root>/part-...                                         published by the job commit
//! <root>/_SUCCESS                                         written last
//! ```
//!
//! A task attempt writes only inside its own attempt folder. Committing the task makes that
//! attempt the task's in one step that only one attempt can take, so of two attempts of one
//! task (a retry racing a zombie, or speculation) exactly one wins and the other's output is
//! dropped:
//!
//! - on a file system (local, HDFS) the attempt's folder is renamed to the task's folder
//!   without replacing it, which is atomic there;
//! - an object store has no rename (a "rename" copies object by object, so an attempt that
//!   dies half-way leaves half a folder), so the commit instead uploads the task's manifest,
//!   which names the attempt and lists its files with their sizes, on condition that no
//!   manifest exists yet (S3's `If-None-Match`, GCS and Azure preconditions). The attempt's
//!   files stay where they are. This is how Hadoop's manifest committer works on ABFS and GCS.
//!
//! The job commit, run once by the driver after every task succeeded, publishes each task's
//! committed files into `<root>` (keeping sub-folders such as `col=value/`): on a file system it
//! moves the files of the task folders; on an object store it reads each task's manifest, checks
//! that every file it lists is in the attempt's folder with its size, and only then copies
//! exactly those files, whatever else the attempt folders hold. It then writes `_SUCCESS` and
//! removes the staging folder. Everything under `_temporary` is hidden from readers, so a failed
//! job leaves no visible file.
//!
//! A commit whose answer is lost may still have happened; on an object store the manifest
//! then names the attempt, and [`OutputJob::commit_task`] (called again) and
//! [`OutputJob::abort_task`] both see that: the first says the attempt committed, the second
//! keeps its files for the job commit. The job commit itself is not atomic on an object store
//! (it copies file by file): a driver that dies in it leaves some files without `_SUCCESS`.

use std::collections::HashMap;

use crate::error::{Result, StorageError};
use crate::location::{Location, join_url};
use crate::{FileStatus, delete, exists, list, mkdirs, object, read, rename, write};

/// The staging folder under an output root, shared by all jobs writing there.
pub const STAGING_DIR: &str = "_temporary";

/// The marker a successful job writes last.
pub const SUCCESS_MARKER: &str = "_SUCCESS";

/// The marker every task attempt's folder holds; never published.
const TASK_MARKER: &str = ".task";

/// The first line of a manifest, with its format's version.
const MANIFEST_HEADER: &str = "sparktrain-task-manifest 1";

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

    /// The folder holding a task's committed output, on a file system.
    pub fn task_url(&self, task: u32) -> String {
        join_url(&self.staging_url(), &format!("task_{task:05}"))
    }

    /// The manifest of a task's committed attempt, on an object store.
    pub fn manifest_url(&self, task: u32) -> String {
        join_url(&self.staging_url(), &format!("task_{task:05}.manifest"))
    }

    /// Whether the root is on an object store, where commits go through manifests.
    fn by_manifest(&self) -> Result<bool> {
        Ok(matches!(Location::parse(&self.root)?, Location::Object { .. }))
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

    /// Makes the attempt's output the task's. Returns `false`, after deleting this attempt's
    /// folder, when another attempt of the task committed first. On an object store, `true`
    /// also when this attempt had committed already (a commit whose answer was lost, called
    /// again); on a file system the attempt's folder is gone then, which is `NotFound`.
    pub fn commit_task(&self, task: u32, attempt: u32) -> Result<bool> {
        if self.by_manifest()? {
            return self.commit_task_by_manifest(task, attempt);
        }
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

    fn commit_task_by_manifest(&self, task: u32, attempt: u32) -> Result<bool> {
        let attempt_url = self.attempt_url(task, attempt);
        // An attempt never set up, or aborted, has no marker: committing it would publish an
        // empty task in place of the rows it lost.
        if !exists(&join_url(&attempt_url, TASK_MARKER))? {
            return Err(StorageError::NotFound { url: attempt_url });
        }
        let mut files = Vec::new();
        collect_files(&attempt_url, "", &mut files)?;
        let manifest = Manifest {
            attempt,
            files: files.into_iter().map(|(status, relative)| (relative, status.size)).collect(),
        };
        let url = self.manifest_url(task);
        match write(&url, &manifest.encode(), false) {
            Ok(_) => Ok(true),
            Err(StorageError::AlreadyExists { .. }) => {
                if self.read_manifest(task)?.attempt == attempt {
                    return Ok(true); // this attempt's own commit, which had landed
                }
                delete(&attempt_url, true)?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Drops whatever the attempt wrote, unless its commit went through: on an object store a
    /// commit can land although its caller saw an error, and the job commit will publish it.
    pub fn abort_task(&self, task: u32, attempt: u32) -> Result<()> {
        if self.by_manifest()? {
            match self.read_manifest(task) {
                Ok(manifest) if manifest.attempt == attempt => return Ok(()),
                Ok(_) | Err(StorageError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        delete(&self.attempt_url(task, attempt), true).map(drop)
    }

    /// The manifest a task's commit left, `NotFound` when none did.
    fn read_manifest(&self, task: u32) -> Result<Manifest> {
        let url = self.manifest_url(task);
        Manifest::decode(&url, &read(&url)?)
    }

    /// Publishes the output of `tasks` (every task of the job) into the root and writes
    /// `_SUCCESS`. With `overwrite`, the root's other entries (but not other jobs' staging
    /// folders) are deleted first: only now, so a job that fails keeps the old data.
    ///
    /// A task without committed output is an error naming it, and nothing is published; so is,
    /// on an object store, a file that a task's manifest lists and its attempt's folder lacks.
    pub fn commit_job(&self, tasks: &[u32], overwrite: bool) -> Result<JobCommit> {
        let mut tasks = tasks.to_vec();
        tasks.sort_unstable();
        tasks.dedup();
        let by_manifest = self.by_manifest()?;
        let mut moves = Vec::new();
        for &task in &tasks {
            if by_manifest {
                moves.extend(self.committed_files(task)?);
                continue;
            }
            let task_url = self.task_url(task);
            if !exists(&task_url)? {
                return Err(StorageError::NotFound { url: task_url });
            }
            let mut files = Vec::new();
            collect_files(&task_url, "", &mut files)?;
            moves.extend(files.into_iter().map(|(status, relative)| (status.url, relative)));
        }
        // The same name from two tasks would be published once, over the other.
        moves.sort_by(|a, b| a.1.cmp(&b.1));
        if let Some(pair) = moves.windows(2).find(|pair| pair[0].1 == pair[1].1) {
            return Err(StorageError::AlreadyExists { url: join_url(&self.root, &pair[1].1) });
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
        let files: Vec<String> = moves.iter().map(|(_, relative)| join_url(&self.root, relative)).collect();
        if by_manifest {
            // The sources go with the staging folder, in one listing and a batch of deletes.
            let pairs = moves
                .iter()
                .zip(&files)
                .map(|((from, _), to)| Ok((Location::parse(from)?, Location::parse(to)?)))
                .collect::<Result<Vec<_>>>()?;
            object::copy_new(&pairs)?;
        } else {
            let mut made_dirs = std::collections::BTreeSet::new();
            for ((from, relative), to) in moves.iter().zip(&files) {
                if let Some((dir, _)) = relative.rsplit_once('/')
                    && made_dirs.insert(dir.to_string())
                {
                    mkdirs(&join_url(&self.root, dir))?;
                }
                rename(from, to, false)?;
            }
        }
        write(&join_url(&self.root, SUCCESS_MARKER), b"", true)?;
        self.cleanup()?;
        Ok(JobCommit { files, replaced })
    }

    /// `(url, path relative to the root)` of each file a task's manifest lists, after checking
    /// that each is in the committed attempt's folder with the size the manifest gives.
    fn committed_files(&self, task: u32) -> Result<Vec<(String, String)>> {
        let manifest = self.read_manifest(task)?;
        let attempt_url = self.attempt_url(task, manifest.attempt);
        let mut present = Vec::new();
        collect_files(&attempt_url, "", &mut present)?;
        let sizes: HashMap<&str, u64> =
            present.iter().map(|(s, relative)| (relative.as_str(), s.size)).collect();
        let mut out = Vec::with_capacity(manifest.files.len());
        for (relative, size) in &manifest.files {
            let url = join_url(&attempt_url, relative);
            let reason = match sizes.get(relative.as_str()) {
                Some(found) if found == size => {
                    out.push((url, relative.clone()));
                    continue;
                }
                Some(found) => format!("{found} bytes where the task's manifest says {size}"),
                None => "missing, though the task's manifest lists it".to_string(),
            };
            return Err(StorageError::Commit { url, reason });
        }
        Ok(out)
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

/// Appends `(status, path relative to the folder)` for every file under `dir`, but the marker.
fn collect_files(dir: &str, prefix: &str, out: &mut Vec<(FileStatus, String)>) -> Result<()> {
    for entry in list(dir)? {
        if entry.name() == TASK_MARKER {
            continue;
        }
        let relative =
            if prefix.is_empty() { entry.name().to_string() } else { format!("{prefix}/{}", entry.name()) };
        if entry.is_dir {
            collect_files(&entry.url, &relative, out)?;
        } else {
            out.push((entry, relative));
        }
    }
    Ok(())
}

/// A committed task attempt and its files, as the task commit records it on an object store.
///
/// Text, one entry a line: the header, `attempt <n>`, then `file <size> <path>` for each file,
/// the path relative to the attempt's folder, with `%`, CR and LF percent-escaped.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Manifest {
    attempt: u32,
    files: Vec<(String, u64)>,
}

impl Manifest {
    fn encode(&self) -> Vec<u8> {
        let mut text = format!("{MANIFEST_HEADER}\nattempt {}\n", self.attempt);
        for (relative, size) in &self.files {
            let escaped = relative.replace('%', "%25").replace('\n', "%0A").replace('\r', "%0D");
            text.push_str(&format!("file {size} {escaped}\n"));
        }
        text.into_bytes()
    }

    fn decode(url: &str, bytes: &[u8]) -> Result<Manifest> {
        let bad = |reason: &str| StorageError::Commit { url: url.to_string(), reason: reason.to_string() };
        let text = std::str::from_utf8(bytes).map_err(|_| bad("the manifest is not UTF-8 text"))?;
        let mut lines = text.lines();
        if lines.next() != Some(MANIFEST_HEADER) {
            return Err(bad("not a task manifest of this version"));
        }
        let attempt = lines
            .next()
            .and_then(|line| line.strip_prefix("attempt "))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| bad("the manifest names no attempt"))?;
        let mut files = Vec::new();
        for line in lines {
            let (size, escaped) = line
                .strip_prefix("file ")
                .and_then(|rest| rest.split_once(' '))
                .ok_or_else(|| bad("a line of the manifest is not `file <size> <path>`"))?;
            let size = size.parse().map_err(|_| bad("a file's size in the manifest is not a number"))?;
            files.push((
                unescape(escaped).ok_or_else(|| bad("a path in the manifest is badly escaped"))?,
                size,
            ));
        }
        Ok(Manifest { attempt, files })
    }
}

/// Reverses the manifest's escaping; `None` for a `%` not followed by two hex digits.
fn unescape(escaped: &str) -> Option<String> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
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
    fn two_tasks_with_one_file_name_publish_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = join_url(dir.path().to_str().unwrap(), "out");
        let job = OutputJob::new(&root, "j").unwrap();
        for task in [0, 1] {
            let a = job.setup_task(task, 0).unwrap();
            write(&join_url(&a, "part-0"), format!("{task}").as_bytes(), false).unwrap();
            assert!(job.commit_task(task, 0).unwrap());
        }
        let err = job.commit_job(&[0, 1], false).unwrap_err();
        assert!(matches!(&err, StorageError::AlreadyExists { url } if url.ends_with("out/part-0")), "{err}");
        assert!(expand_inputs(&root).unwrap().is_empty());
    }

    #[test]
    fn manifests_round_trip_any_name_and_refuse_damage() {
        let manifest = Manifest {
            attempt: 65_537,
            files: vec![
                ("part-00000".to_string(), 0),
                ("c=a b%20/x\ny\r\n".to_string(), 12),
                ("k=\u{e9}/part-1".to_string(), u64::MAX),
            ],
        };
        let bytes = manifest.encode();
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 5, "one entry a line");
        assert_eq!(Manifest::decode("m", &bytes).unwrap(), manifest);
        assert_eq!(Manifest::decode("m", b"sparktrain-task-manifest 1\nattempt 0\n").unwrap().files, []);
        for damaged in [
            &b""[..],
            b"sparktrain-task-manifest 2\nattempt 0\n",
            b"sparktrain-task-manifest 1\n",
            b"sparktrain-task-manifest 1\nattempt x\n",
            b"sparktrain-task-manifest 1\nattempt 0\nfile 1\n",
            b"sparktrain-task-manifest 1\nattempt 0\nfile -1 a\n",
            b"sparktrain-task-manifest 1\nattempt 0\nfile 1 a%2\n",
            b"sparktrain-task-manifest 1\nattempt 0\nfile 1 a%ff\n",
            b"\xff",
        ] {
            match Manifest::decode("m", damaged) {
                Err(StorageError::Commit { url, .. }) => assert_eq!(url, "m"),
                other => panic!("{:?}: unexpected {other:?}", String::from_utf8_lossy(damaged)),
            }
        }
    }

    #[test]
    fn job_ids_are_plain_names() {
        assert!(OutputJob::new("/x", "../up").is_err());
        assert!(OutputJob::new("/x", "").is_err());
        assert_eq!(OutputJob::new("/x/", "a-1_b").unwrap().task_url(3), "/x/_temporary/a-1_b/task_00003");
    }
}
