//! The storage interface against a real HDFS (Hadoop's MiniDFSCluster, see `common`).

mod common;

use std::io::{Read, Write};

use common::{data, test_dir};
use sparktrain_storage::{self as storage, FileStatus, StorageError};

fn names(statuses: &[FileStatus]) -> Vec<&str> {
    statuses.iter().map(|s| s.name()).collect()
}

#[test]
fn write_list_glob_read_back() {
    let dir = test_dir("roundtrip");
    // Part 0 crosses several 4 MiB write chunks and 1 MiB read chunks, and ends mid-chunk.
    let sizes = [9 * 1024 * 1024 + 12_345, 1, 0];
    let mut expected = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let url = format!("{dir}/part-{i:05}");
        let bytes = data(len, i as u32);
        let mut w = storage::create(&url, false).unwrap();
        // Uneven pieces, as a record writer produces.
        for piece in bytes.chunks(777_777) {
            w.write_all(piece).unwrap();
        }
        assert_eq!(w.commit().unwrap(), len as u64);
        expected.push((url, bytes));
    }
    storage::write(&format!("{dir}/_SUCCESS"), b"", false).unwrap();

    let listed = storage::list(&dir).unwrap();
    assert_eq!(names(&listed), ["_SUCCESS", "part-00000", "part-00001", "part-00002"]);
    assert!(listed.iter().all(|s| s.url.starts_with(&*dir) && !s.is_dir));
    assert_eq!(listed[1].size, sizes[0] as u64);
    assert!(listed[1].modified_ms > 1_600_000_000_000);

    let globbed = storage::glob(&format!("{dir}/part-*")).unwrap();
    assert_eq!(names(&globbed), ["part-00000", "part-00001", "part-00002"]);
    assert_eq!(globbed[0].url, expected[0].0);
    let globbed = storage::glob(&format!("{dir}/part-0000[12]")).unwrap();
    assert_eq!(names(&globbed), ["part-00001", "part-00002"]);
    // A wildcard in a folder component, and the folder itself without wildcards.
    let parent = dir.rsplit_once('/').unwrap().0;
    let leaf = dir.rsplit('/').next().unwrap();
    let deep = storage::glob(&format!("{parent}/roundtrip-*/part-00001")).unwrap();
    assert_eq!(deep.len(), 1);
    assert_eq!(deep[0].url, expected[1].0);
    let itself = storage::glob(&dir).unwrap();
    assert_eq!(itself.len(), 1);
    assert!(itself[0].is_dir);
    assert_eq!(itself[0].name(), leaf);

    let inputs = storage::expand_inputs(&dir).unwrap();
    assert_eq!(names(&inputs), ["part-00000", "part-00001", "part-00002"]);

    for (url, bytes) in &expected {
        assert!(storage::exists(url).unwrap());
        assert_eq!(storage::size(url).unwrap(), bytes.len() as u64);
        let mut back = Vec::new();
        storage::open(url).unwrap().read_to_end(&mut back).unwrap();
        assert!(back == *bytes, "{url}: content differs");
    }
    // Small reads, as a record reader does (12-byte headers).
    let mut reader = storage::open(&expected[0].0).unwrap();
    let mut head = [0u8; 12];
    reader.read_exact(&mut head).unwrap();
    assert_eq!(head, expected[0].1[..12]);
    // Dropping a reader midway is fine.
    drop(reader);
    assert!(!storage::exists(&format!("{dir}/part-00009")).unwrap());
}

#[test]
fn final_name_appears_only_at_commit() {
    let dir = test_dir("atomic");
    let url = format!("{dir}/model.bin");
    let bytes = data(5 * 1024 * 1024 + 3, 7);
    let mut w = storage::create(&url, false).unwrap();
    w.write_all(&bytes).unwrap();
    w.flush().unwrap();
    assert!(!storage::exists(&url).unwrap());
    // Only the hidden temporary file is there, and globs and inputs do not see it.
    let listed = storage::list(&dir).unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].name().starts_with(".model.bin."), "{listed:?}");
    assert!(storage::glob(&format!("{dir}/*")).unwrap().is_empty());
    assert!(storage::expand_inputs(&dir).unwrap().is_empty());
    assert_eq!(w.commit().unwrap(), bytes.len() as u64);
    let listed = storage::list(&dir).unwrap();
    assert_eq!(names(&listed), ["model.bin"]);
    assert!(storage::read(&url).unwrap() == bytes);
}

#[test]
fn dropped_writer_leaves_nothing() {
    let dir = test_dir("dropped");
    let url = format!("{dir}/part-00000");
    let mut w = storage::create(&url, false).unwrap();
    w.write_all(&data(6 * 1024 * 1024, 3)).unwrap();
    drop(w);
    assert!(!storage::exists(&url).unwrap());
    assert!(storage::list(&dir).unwrap().is_empty(), "temporary file left behind");
    // An empty writer too.
    drop(storage::create(&url, false).unwrap());
    assert!(storage::list(&dir).unwrap().is_empty());
}

#[test]
fn no_overwrite_refuses_an_existing_file() {
    let dir = test_dir("no-overwrite");
    let url = format!("{dir}/x");
    storage::write(&url, b"first", false).unwrap();
    match storage::create(&url, false) {
        Err(StorageError::AlreadyExists { url: u }) => assert_eq!(u, url),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    // A name taken between create and commit: the rename refuses, nothing is left behind.
    let late = format!("{dir}/late");
    let mut w = storage::create(&late, false).unwrap();
    w.write_all(b"loser").unwrap();
    storage::write(&late, b"winner", false).unwrap();
    match w.commit() {
        Err(StorageError::AlreadyExists { url: u }) => assert_eq!(u, late),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(storage::read(&late).unwrap(), b"winner");
    // With overwrite, replaced.
    storage::write(&url, b"second", true).unwrap();
    assert_eq!(storage::read(&url).unwrap(), b"second");
    assert_eq!(names(&storage::list(&dir).unwrap()), ["late", "x"]);
}

#[test]
fn mkdirs_rename_delete() {
    let dir = test_dir("ops");
    storage::mkdirs(&format!("{dir}/a/b/c")).unwrap();
    storage::mkdirs(&format!("{dir}/a/b/c")).unwrap();
    assert!(storage::status(&format!("{dir}/a/b/c")).unwrap().is_dir);
    storage::write(&format!("{dir}/a/b/c/f"), b"f", false).unwrap();
    storage::write(&format!("{dir}/a/g"), b"g", false).unwrap();
    assert!(storage::mkdirs(&format!("{dir}/a/g/h")).is_err(), "a file in the way must fail");
    assert!(matches!(storage::mkdirs(&format!("{dir}/a/g")), Err(StorageError::AlreadyExists { .. })));

    // rename: without overwrite the destination must be free, with it a file is replaced.
    let (f, g) = (format!("{dir}/a/b/c/f"), format!("{dir}/a/g"));
    assert!(matches!(
        storage::rename(&f, &g, false),
        Err(StorageError::AlreadyExists { url }) if url == g
    ));
    storage::rename(&f, &g, true).unwrap();
    assert_eq!(storage::read(&g).unwrap(), b"f");
    assert!(!storage::exists(&f).unwrap());
    assert!(matches!(storage::rename(&f, &format!("{dir}/a/z"), false), Err(StorageError::NotFound { .. })));
    storage::rename(&format!("{dir}/a/b"), &format!("{dir}/moved"), false).unwrap();
    assert!(storage::status(&format!("{dir}/moved/c")).unwrap().is_dir);

    // delete: non-recursive on a non-empty folder fails; recursive removes the tree.
    storage::write(&format!("{dir}/moved/c/x"), b"x", false).unwrap();
    assert!(storage::delete(&format!("{dir}/moved"), false).is_err());
    assert!(storage::exists(&format!("{dir}/moved/c/x")).unwrap());
    assert!(storage::delete(&format!("{dir}/moved"), true).unwrap());
    assert!(!storage::exists(&format!("{dir}/moved")).unwrap());
    assert!(!storage::delete(&format!("{dir}/moved"), true).unwrap());
    assert!(storage::delete(&g, false).unwrap());
    assert_eq!(names(&storage::list(&format!("{dir}/a")).unwrap()), Vec::<&str>::new());
}

#[test]
fn errors_name_the_url() {
    let dir = test_dir("errors");
    let missing = format!("{dir}/missing");
    match storage::open(&missing) {
        Err(StorageError::NotFound { url }) => assert_eq!(url, missing),
        Err(other) => panic!("expected NotFound, got {other:?}"),
        Ok(_) => panic!("opened a missing file"),
    }
    assert!(storage::status(&missing).unwrap_err().is_not_found());
    assert!(storage::list(&missing).unwrap_err().is_not_found());
    assert!(storage::glob(&format!("{missing}/*")).unwrap().is_empty());
    assert!(storage::expand_inputs(&missing).unwrap_err().is_not_found());
    // Opening a folder is an error, not a panic, and not "not found".
    match storage::open(&dir) {
        Err(StorageError::NotFound { .. }) => panic!("a folder is not missing"),
        Err(_) => {}
        Ok(_) => panic!("opened a folder"),
    }
    // A file lists as itself, as in Hadoop.
    storage::write(&format!("{dir}/f"), b"1", false).unwrap();
    assert_eq!(names(&storage::list(&format!("{dir}/f")).unwrap()), ["f"]);
    // Nothing exists below a file; globbing through it finds nothing.
    assert!(!storage::exists(&format!("{dir}/f/g")).unwrap());
    assert!(storage::glob(&format!("{dir}/f/*")).unwrap().is_empty());
    assert!(storage::glob(&format!("{dir}/f/g")).unwrap().is_empty());
    // Writing below a file fails cleanly.
    assert!(storage::create(&format!("{dir}/f/g"), false).is_err());
}

#[test]
fn expand_inputs_skips_hidden_and_descends() {
    let dir = test_dir("inputs");
    for f in ["t/part-00000", "t/_SUCCESS", "t/_temporary/0/part-9", "t/.part-00000.crc", "t/dt=1/part-00000"]
    {
        storage::write(&format!("{dir}/{f}"), b"1", false).unwrap();
    }
    let urls: Vec<String> =
        storage::expand_inputs(&format!("{dir}/t")).unwrap().into_iter().map(|s| s.url).collect();
    assert_eq!(urls, [format!("{dir}/t/dt=1/part-00000"), format!("{dir}/t/part-00000")]);
    let urls = storage::expand_inputs(&format!("{dir}/{{t,u}}/part-*")).unwrap();
    assert_eq!(names(&urls), ["part-00000"]);
}

/// Rough throughput against the local MiniDFS (context only, not a benchmark):
/// `cargo test --release -p sparktrain-storage --test hdfs throughput -- --ignored --nocapture`
#[test]
#[ignore]
fn throughput() {
    let dir = test_dir("throughput");
    let url = format!("{dir}/big");
    let chunk = data(1 << 20, 1);
    let total_mib = 256;
    let t = std::time::Instant::now();
    let mut w = storage::create(&url, false).unwrap();
    for _ in 0..total_mib {
        w.write_all(&chunk).unwrap();
    }
    w.commit().unwrap();
    let write_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let mut r = storage::open(&url).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0usize;
    loop {
        let k = r.read(&mut buf).unwrap();
        if k == 0 {
            break;
        }
        n += k;
    }
    let read_s = t.elapsed().as_secs_f64();
    assert_eq!(n, total_mib << 20);
    eprintln!(
        "{total_mib} MiB: write {:.0} MiB/s, read {:.0} MiB/s",
        total_mib as f64 / write_s,
        total_mib as f64 / read_s
    );
}

#[test]
fn output_job_commit_protocol() {
    let root = test_dir("output-job");
    let job = storage::OutputJob::new(&root, "job-1").unwrap();
    // Two attempts of task 0 race; the first to commit wins and the other's folder goes.
    for attempt in [0, 1] {
        let a = job.setup_task(0, attempt).unwrap();
        storage::write(&format!("{a}/c=1/part-00000"), format!("{attempt}").as_bytes(), false).unwrap();
    }
    assert!(job.commit_task(0, 1).unwrap());
    assert!(!job.commit_task(0, 0).unwrap());
    assert!(!storage::exists(&job.attempt_url(0, 0)).unwrap());
    job.setup_task(1, 0).unwrap();
    storage::write(&format!("{}/part-00001", job.attempt_url(1, 0)), b"x", false).unwrap();
    job.commit_task(1, 0).unwrap();
    assert!(storage::expand_inputs(&root).unwrap().is_empty(), "nothing visible before the job commit");

    let done = job.commit_job(&[0, 1], false).unwrap();
    assert_eq!(done.files, [format!("{root}/c=1/part-00000"), format!("{root}/part-00001")]);
    assert_eq!(storage::read(&done.files[0]).unwrap(), b"1");
    assert!(storage::exists(&format!("{root}/_SUCCESS")).unwrap());
    assert!(!storage::exists(&format!("{root}/_temporary")).unwrap());
}
