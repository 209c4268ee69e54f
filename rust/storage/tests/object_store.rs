//! The storage interface against a real S3-compatible server (`moto_server`, see
//! `common::s3`): atomic uploads small and multipart, listings, globs, renames by copy, deletes,
//! and errors that name the URL.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::data;
use common::s3::{bucket, s3_dir};
use sparktrain_storage::{self as storage, FileStatus, StorageError};

fn names(statuses: &[FileStatus]) -> Vec<&str> {
    statuses.iter().map(|s| s.name()).collect()
}

#[test]
fn s3_write_list_glob_read_back() {
    let dir = s3_dir("roundtrip");
    // Part 0 goes up as a multipart upload (three 8 MiB parts and a short last one); the
    // others in one PUT each.
    let sizes = [25 * 1024 * 1024 + 12_345, 1, 0];
    let mut expected = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let url = format!("{dir}/part-{i:05}");
        let bytes = data(len, i as u32);
        let mut w = storage::create(&url, false).unwrap();
        for piece in bytes.chunks(777_777) {
            w.write_all(piece).unwrap();
        }
        w.flush().unwrap();
        // An upload is invisible until it completes.
        assert!(!storage::exists(&url).unwrap());
        assert_eq!(w.commit().unwrap(), len as u64);
        expected.push((url, bytes));
    }
    storage::write(&format!("{dir}/_SUCCESS"), b"", false).unwrap();

    let listed = storage::list(&dir).unwrap();
    assert_eq!(names(&listed), ["_SUCCESS", "part-00000", "part-00001", "part-00002"]);
    assert_eq!(listed[1].size, sizes[0] as u64);
    assert!(listed[1].modified_ms > 1_600_000_000_000);
    assert_eq!(names(&storage::glob(&format!("{dir}/part-0000[12]")).unwrap()), ["part-00001", "part-00002"]);
    let inputs = storage::expand_inputs(&dir).unwrap();
    assert_eq!(names(&inputs), ["part-00000", "part-00001", "part-00002"]);
    for (url, bytes) in &expected {
        let mut back = Vec::new();
        storage::open(url).unwrap().read_to_end(&mut back).unwrap();
        assert!(back == *bytes, "{url} read back differently");
    }
    // The folder is a prefix: it exists while it holds objects, and lists as a folder.
    let parent = dir.rsplit_once('/').unwrap().0;
    let st = storage::status(&dir).unwrap();
    assert!(st.is_dir);
    assert!(storage::list(parent).unwrap().iter().any(|s| s.url == *dir && s.is_dir));
}

#[test]
fn s3_dropped_writer_and_refused_overwrite_leave_nothing() {
    let dir = s3_dir("dropped");
    let url = format!("{dir}/big");
    let mut w = storage::create(&url, false).unwrap();
    w.write_all(&data(20 * 1024 * 1024, 3)).unwrap(); // two parts under way
    drop(w);
    assert!(!storage::exists(&url).unwrap());

    let x = format!("{dir}/x");
    storage::write(&x, b"first", false).unwrap();
    match storage::create(&x, false) {
        Err(StorageError::AlreadyExists { url: u }) => assert_eq!(u, x),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    // Taken between create and commit: refused at commit, small (conditional PUT) or large.
    for (name, len) in [("late-small", 10), ("late-large", 9 * 1024 * 1024)] {
        let late = format!("{dir}/{name}");
        let mut w = storage::create(&late, false).unwrap();
        w.write_all(&data(len, 1)).unwrap();
        storage::write(&late, b"winner", false).unwrap();
        match w.commit() {
            Err(StorageError::AlreadyExists { url: u }) => assert_eq!(u, late),
            other => panic!("expected AlreadyExists for {name}, got {other:?}"),
        }
        assert_eq!(storage::read(&late).unwrap(), b"winner");
    }
    storage::write(&x, b"second", true).unwrap();
    assert_eq!(storage::read(&x).unwrap(), b"second");
}

#[test]
fn s3_mkdirs_rename_delete() {
    let dir = s3_dir("ops");
    // No folders in a store: mkdirs creates nothing, and refuses a name an object holds.
    storage::mkdirs(&format!("{dir}/a/b")).unwrap();
    storage::write(&format!("{dir}/a/b/c/f"), b"f", false).unwrap();
    storage::write(&format!("{dir}/a/g"), b"g", false).unwrap();
    assert!(matches!(storage::mkdirs(&format!("{dir}/a/g")), Err(StorageError::AlreadyExists { .. })));
    assert!(storage::create(&format!("{dir}/a/g/h"), false).is_err(), "a file under a file must fail");

    let (f, g) = (format!("{dir}/a/b/c/f"), format!("{dir}/a/g"));
    assert!(matches!(storage::rename(&f, &g, false), Err(StorageError::AlreadyExists { url }) if url == g));
    storage::rename(&f, &g, true).unwrap();
    assert_eq!(storage::read(&g).unwrap(), b"f");
    assert!(!storage::exists(&f).unwrap());
    assert!(matches!(storage::rename(&f, &format!("{dir}/a/z"), false), Err(StorageError::NotFound { .. })));

    // A folder renames object by object.
    for name in ["1", "2", "deep/3"] {
        storage::write(&format!("{dir}/src/{name}"), name.as_bytes(), false).unwrap();
    }
    storage::rename(&format!("{dir}/src"), &format!("{dir}/dst"), false).unwrap();
    assert!(!storage::exists(&format!("{dir}/src")).unwrap());
    assert_eq!(storage::read(&format!("{dir}/dst/deep/3")).unwrap(), b"deep/3");
    assert_eq!(names(&storage::list(&format!("{dir}/dst")).unwrap()), ["1", "2", "deep"]);

    assert!(storage::delete(&format!("{dir}/dst"), false).is_err());
    assert!(storage::delete(&format!("{dir}/dst"), true).unwrap());
    assert!(!storage::exists(&format!("{dir}/dst")).unwrap());
    assert!(!storage::delete(&format!("{dir}/dst"), true).unwrap());
    assert!(storage::delete(&g, false).unwrap());
}

#[test]
fn s3_replace_dir_and_the_job_commit_work_by_copying() {
    let dir = s3_dir("commit");
    let dest = format!("{dir}/ckpt");
    storage::write(&format!("{dest}/old"), b"old", false).unwrap();
    let staging = storage::sibling_temp(&dest).unwrap();
    storage::write(&format!("{staging}/new"), b"new", false).unwrap();
    storage::replace_dir(&staging, &dest).unwrap();
    assert_eq!(names(&storage::list(&dest).unwrap()), ["new"]);
    assert!(!storage::exists(&staging).unwrap());

    // Spark's commit protocol: two attempts of a task race, the first to commit wins, nothing
    // shows before the job commit.
    let out = format!("{dir}/out");
    let job = storage::OutputJob::new(&out, "job-1").unwrap();
    for attempt in [0, 1] {
        let a = job.setup_task(0, attempt).unwrap();
        storage::write(&format!("{a}/c=1/part-00000"), format!("{attempt}").as_bytes(), false).unwrap();
    }
    assert!(job.commit_task(0, 1).unwrap());
    assert!(!job.commit_task(0, 0).unwrap());
    job.setup_task(1, 0).unwrap();
    storage::write(&format!("{}/part-00001", job.attempt_url(1, 0)), b"x", false).unwrap();
    job.commit_task(1, 0).unwrap();
    assert!(storage::expand_inputs(&out).unwrap().is_empty(), "nothing visible before the job commit");
    let done = job.commit_job(&[0, 1], false).unwrap();
    assert_eq!(done.files, [format!("{out}/c=1/part-00000"), format!("{out}/part-00001")]);
    assert_eq!(storage::read(&done.files[0]).unwrap(), b"1");
    assert!(storage::exists(&format!("{out}/_SUCCESS")).unwrap());
    assert!(!storage::exists(&format!("{out}/_temporary")).unwrap());
}

#[test]
fn s3_errors_name_the_url() {
    let dir = s3_dir("errors");
    let missing = format!("{dir}/missing");
    match storage::open(&missing) {
        Err(StorageError::NotFound { url }) => assert_eq!(url, missing),
        Err(other) => panic!("expected NotFound, got {other:?}"),
        Ok(_) => panic!("opened a missing object"),
    }
    assert!(storage::status(&missing).unwrap_err().is_not_found());
    assert!(storage::list(&missing).unwrap_err().is_not_found());
    assert!(storage::expand_inputs(&missing).unwrap_err().is_not_found());
    storage::write(&format!("{dir}/sub/f"), b"1", false).unwrap();
    match storage::open(&format!("{dir}/sub")) {
        Err(StorageError::InvalidUrl { reason, .. }) => assert!(reason.contains("folder"), "{reason}"),
        Err(other) => panic!("expected InvalidUrl, got {other:?}"),
        Ok(_) => panic!("opened a folder"),
    }
    // A bucket that does not exist is an error naming it, not an empty listing.
    let nowhere = format!("s3://{}-absent/x", bucket());
    let err = storage::write(&nowhere, b"1", false).unwrap_err();
    assert!(err.to_string().contains(&format!("{}-absent", bucket())), "{err}");
}

#[test]
fn s3_an_endpoint_that_does_not_answer_fails_within_the_retry_limit() {
    // A port nobody listens on: connection refused, retried a few times, then an error that
    // names the URL (with a minute as the ceiling set for every store).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    storage::configure([(
        "fs.s3a.bucket.unreachable.endpoint".to_string(),
        format!("http://127.0.0.1:{port}"),
    )])
    .unwrap();
    let started = Instant::now();
    let err = storage::exists("s3://unreachable/x").unwrap_err();
    assert!(err.to_string().contains("s3://unreachable/x"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(61), "took {:?}", started.elapsed());
}

/// Writes `body` as the one file of a task attempt, as a Spark task's writer does.
fn write_attempt(job: &storage::OutputJob, task: u32, attempt: u32, body: &[u8]) {
    let folder = job.setup_task(task, attempt).unwrap();
    storage::write(&format!("{folder}/part-{task:05}"), body, false).unwrap();
}

/// Commits an attempt as the Python writer's task does: on an error it aborts the attempt and
/// fails, and Spark runs the task again.
fn commit_or_abort(job: &storage::OutputJob, task: u32, attempt: u32) -> Option<bool> {
    match job.commit_task(task, attempt) {
        Ok(committed) => Some(committed),
        Err(_) => {
            job.abort_task(task, attempt).unwrap();
            None
        }
    }
}

#[test]
fn s3_a_task_retried_after_its_commit_failed_half_way_publishes_its_file_once() {
    // Attempt 0 of task 0 dies in its commit: the store fails the second copy out of its folder.
    let dir = s3_dir("retry-after-copy");
    storage::faults::inject("copy 2 retry-after-copy/out/_temporary/*/_attempt_00000_0").unwrap();
    let out = format!("{dir}/out");
    let job = storage::OutputJob::new(&out, "job-1").unwrap();
    write_attempt(&job, 0, 0, b"rows of task 0");
    commit_or_abort(&job, 0, 0);
    // Spark runs the task again (after the failure, or because the executor was lost after the
    // commit); the retry writes the same rows. The driver counts the task whatever the retry's
    // commit said, as Spark hands it the retry's result.
    write_attempt(&job, 0, 1, b"rows of task 0");
    commit_or_abort(&job, 0, 1);
    write_attempt(&job, 1, 0, b"rows of task 1");
    assert_eq!(commit_or_abort(&job, 1, 0), Some(true));

    let done = job.commit_job(&[0, 1], false).unwrap();
    assert_eq!(done.files, [format!("{out}/part-00000"), format!("{out}/part-00001")]);
    assert_eq!(storage::read(&done.files[0]).unwrap(), b"rows of task 0");
    assert_eq!(storage::read(&done.files[1]).unwrap(), b"rows of task 1");
    assert!(storage::exists(&format!("{out}/_SUCCESS")).unwrap());
    assert!(!storage::exists(&format!("{out}/_temporary")).unwrap());
}

#[test]
fn s3_two_attempts_committing_at_once_publish_one_of_them() {
    // A zombie attempt and its retry (or a speculative copy) reach the task commit together.
    let dir = s3_dir("commit-race");
    let out = format!("{dir}/out");
    let job = storage::OutputJob::new(&out, "job-1").unwrap();
    for attempt in [0, 1] {
        let folder = job.setup_task(0, attempt).unwrap();
        // Two files each, so that a copy-based commit takes a while.
        for name in ["a/part-00000", "part-00000"] {
            storage::write(&format!("{folder}/{name}"), format!("{attempt}").as_bytes(), false).unwrap();
        }
    }
    let start = std::sync::Barrier::new(2);
    let won: Vec<bool> = std::thread::scope(|s| {
        let racers: Vec<_> = [0, 1]
            .map(|attempt| {
                let (job, start) = (&job, &start);
                s.spawn(move || {
                    start.wait();
                    job.commit_task(0, attempt).unwrap()
                })
            })
            .into_iter()
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "exactly one attempt commits: {won:?}");
    let winner = if won[0] { "0" } else { "1" };
    let done = job.commit_job(&[0], false).unwrap();
    assert_eq!(done.files, [format!("{out}/a/part-00000"), format!("{out}/part-00000")]);
    for file in &done.files {
        assert_eq!(storage::read(file).unwrap(), winner.as_bytes(), "{file} mixes attempts");
    }
}

#[test]
fn s3_a_commit_whose_answer_was_lost_stands_and_its_retry_gives_way() {
    // Attempt 0's manifest lands, but the attempt sees an error, aborts and fails.
    let dir = s3_dir("lost-answer");
    storage::faults::inject("put 1 lost-answer/out/_temporary/*/task_00000.manifest landed").unwrap();
    let out = format!("{dir}/out");
    let job = storage::OutputJob::new(&out, "job-1").unwrap();
    write_attempt(&job, 0, 0, b"rows of attempt 0");
    assert_eq!(commit_or_abort(&job, 0, 0), None, "the injected failure reached the attempt");
    assert!(storage::exists(&job.attempt_url(0, 0)).unwrap(), "abort kept a committed attempt's files");
    assert!(job.commit_task(0, 0).unwrap(), "committing again says what happened");
    // The retry finds the task committed, drops its own output and says so.
    write_attempt(&job, 0, 1, b"rows of attempt 1");
    assert_eq!(commit_or_abort(&job, 0, 1), Some(false));
    assert!(!storage::exists(&job.attempt_url(0, 1)).unwrap());
    let done = job.commit_job(&[0], false).unwrap();
    assert_eq!(done.files, [format!("{out}/part-00000")]);
    assert_eq!(storage::read(&done.files[0]).unwrap(), b"rows of attempt 0");
}

#[test]
fn s3_the_job_commit_publishes_what_the_manifests_list_and_checks_it_first() {
    let dir = s3_dir("manifest-check");
    let out = format!("{dir}/out");
    let job = storage::OutputJob::new(&out, "job-1").unwrap();
    // An attempt that was aborted cannot commit: it would publish an empty task.
    job.setup_task(2, 0).unwrap();
    job.abort_task(2, 0).unwrap();
    assert!(job.commit_task(2, 0).unwrap_err().is_not_found());
    for task in [0, 1] {
        write_attempt(&job, task, 0, format!("task {task}").as_bytes());
        assert!(job.commit_task(task, 0).unwrap());
    }
    // A file that appears in a committed attempt's folder afterwards is not the task's.
    storage::write(&format!("{}/late", job.attempt_url(0, 0)), b"late", false).unwrap();
    // A listed file whose size changed: the job commit refuses before publishing anything.
    let changed = format!("{}/part-00001", job.attempt_url(1, 0));
    storage::write(&changed, b"task 1, longer", true).unwrap();
    match job.commit_job(&[0, 1], false) {
        Err(StorageError::Commit { url, reason }) => {
            assert_eq!(url, changed);
            assert!(reason.contains("14 bytes") && reason.contains("says 6"), "{reason}");
        }
        other => panic!("expected a commit error, got {other:?}"),
    }
    assert!(storage::expand_inputs(&out).unwrap().is_empty(), "nothing published");
    storage::write(&changed, b"task 1", true).unwrap();
    let done = job.commit_job(&[0, 1], false).unwrap();
    assert_eq!(done.files, [format!("{out}/part-00000"), format!("{out}/part-00001")]);
    assert_eq!(names(&storage::list(&out).unwrap()), ["_SUCCESS", "part-00000", "part-00001"]);
}

#[test]
fn s3_a_commit_refused_by_the_store_leaves_the_task_to_its_retry() {
    let dir = s3_dir("refused");
    storage::faults::inject("put 1 refused/out/_temporary/*/task_00000.manifest").unwrap();
    let out = format!("{dir}/out");
    let job = storage::OutputJob::new(&out, "job-1").unwrap();
    write_attempt(&job, 0, 0, b"rows of attempt 0");
    assert_eq!(commit_or_abort(&job, 0, 0), None, "the injected failure reached the attempt");
    assert!(!storage::exists(&job.attempt_url(0, 0)).unwrap(), "an attempt that did not commit is dropped");
    write_attempt(&job, 0, 1, b"rows of attempt 1");
    assert_eq!(commit_or_abort(&job, 0, 1), Some(true));
    let done = job.commit_job(&[0], false).unwrap();
    assert_eq!(storage::read(&done.files[0]).unwrap(), b"rows of attempt 1");
}
