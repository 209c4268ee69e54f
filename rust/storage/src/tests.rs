//! Unit tests of the public functions on the local file system (HDFS: `tests/hdfs.rs`).

use std::io::{Read, Write};

use super::*;

struct Dir {
    _guard: tempfile::TempDir,
    base: String,
}

fn tempdir() -> Dir {
    let guard = tempfile::tempdir().expect("temp dir");
    let base = guard.path().to_str().expect("utf-8 temp dir").to_string();
    Dir { _guard: guard, base }
}

impl Dir {
    fn at(&self, rel: &str) -> String {
        join_url(&self.base, rel)
    }
    fn file_url(&self, rel: &str) -> String {
        format!("file://{}", self.at(rel))
    }
    fn names(&self, statuses: &[FileStatus]) -> Vec<String> {
        statuses
            .iter()
            .map(|s| s.url.strip_prefix(&format!("{}/", self.base)).unwrap_or(&s.url).to_string())
            .collect()
    }
}

fn put(url: &str, data: &[u8]) {
    write(url, data, true).expect("write");
}

#[test]
fn write_read_size_exists() {
    let d = tempdir();
    let url = d.at("a/b/file.bin");
    assert!(!exists(&url).unwrap());
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut w = create(&url, false).unwrap();
    // Many small writes, as a record writer does.
    for chunk in data.chunks(1000) {
        w.write_all(chunk).unwrap();
    }
    assert_eq!(w.bytes_written(), data.len() as u64);
    assert_eq!(w.commit().unwrap(), data.len() as u64);
    assert!(exists(&url).unwrap());
    assert_eq!(size(&url).unwrap(), data.len() as u64);
    assert_eq!(read(&url).unwrap(), data);
    // The same file through a file:// URL.
    let mut back = Vec::new();
    open(&d.file_url("a/b/file.bin")).unwrap().read_to_end(&mut back).unwrap();
    assert_eq!(back, data);
    let st = status(&d.file_url("a/b")).unwrap();
    assert!(st.is_dir);
    assert_eq!(st.size, 0);
    assert_eq!(st.url, d.file_url("a/b"));
    assert!(st.modified_ms > 1_600_000_000_000);
}

#[test]
fn missing_things_are_not_found() {
    let d = tempdir();
    let missing = d.at("nope");
    assert!(matches!(open(&missing), Err(StorageError::NotFound { url }) if url == missing));
    assert!(status(&missing).unwrap_err().is_not_found());
    assert!(size(&missing).unwrap_err().is_not_found());
    assert!(list(&missing).unwrap_err().is_not_found());
    assert!(!delete(&missing, true).unwrap());
    // A path "below" a file does not exist either.
    put(&d.at("f"), b"x");
    assert!(!exists(&d.at("f/g")).unwrap());
    assert!(open(&d.at("")).is_err(), "opening a folder fails");
}

#[test]
fn create_without_overwrite_refuses_existing() {
    let d = tempdir();
    let url = d.at("x");
    put(&url, b"first");
    let err = create(&url, false).unwrap_err();
    assert!(matches!(&err, StorageError::AlreadyExists { url: u } if *u == url), "{err}");
    // With overwrite it is replaced.
    write(&url, b"second", true).unwrap();
    assert_eq!(read(&url).unwrap(), b"second");
    // A folder is never replaced by a file.
    mkdirs(&d.at("dir")).unwrap();
    assert!(create(&d.at("dir"), true).unwrap_err().is_already_exists());
}

#[test]
fn commit_refuses_a_name_taken_meanwhile() {
    let d = tempdir();
    let url = d.at("race");
    let mut w = create(&url, false).unwrap();
    w.write_all(b"loser").unwrap();
    put(&url, b"winner");
    assert!(w.commit().unwrap_err().is_already_exists());
    assert_eq!(read(&url).unwrap(), b"winner");
    assert_eq!(list(&d.base).unwrap().len(), 1, "temporary file removed");
}

#[test]
fn final_name_invisible_until_commit_and_drop_leaves_nothing() {
    let d = tempdir();
    let url = d.at("out/part-00000");
    let mut w = create(&url, false).unwrap();
    w.write_all(&[7u8; 10_000]).unwrap();
    w.flush().unwrap();
    assert!(!exists(&url).unwrap());
    // The temporary file is there, hidden.
    let all = list(&d.at("out")).unwrap();
    assert_eq!(all.len(), 1);
    assert!(all[0].name().starts_with(".part-00000."), "{:?}", all);
    assert!(all[0].name().ends_with(".tmp"));
    assert!(glob(&d.at("out/*")).unwrap().is_empty());
    assert!(expand_inputs(&d.at("out")).unwrap().is_empty());
    drop(w);
    assert!(list(&d.at("out")).unwrap().is_empty());
    assert!(!exists(&url).unwrap());

    let mut w = create(&url, false).unwrap();
    w.write_all(b"abc").unwrap();
    assert_eq!(w.commit().unwrap(), 3);
    assert_eq!(d.names(&list(&d.at("out")).unwrap()), ["out/part-00000"]);
}

#[test]
fn list_is_sorted_and_keeps_the_callers_form() {
    let d = tempdir();
    for name in ["b", "a", "_SUCCESS", ".hidden", "c"] {
        put(&d.at(&format!("t/{name}")), name.as_bytes());
    }
    mkdirs(&d.at("t/sub")).unwrap();
    let listed = list(&d.at("t")).unwrap();
    assert_eq!(d.names(&listed), ["t/.hidden", "t/_SUCCESS", "t/a", "t/b", "t/c", "t/sub"]);
    assert!(listed[5].is_dir);
    assert_eq!(listed[2].size, 1);
    let listed = list(&format!("{}/", d.file_url("t"))).unwrap();
    assert_eq!(listed[0].url, d.file_url("t/.hidden"));
    // A file lists as itself.
    assert_eq!(d.names(&list(&d.at("t/a")).unwrap()), ["t/a"]);
}

#[test]
fn glob_patterns() {
    let d = tempdir();
    for f in [
        "data/x/part-00000",
        "data/x/part-00001",
        "data/x/_SUCCESS",
        "data/y/part-00000",
        "data/y/other",
        "data/z.txt",
    ] {
        put(&d.at(f), b"1");
    }
    let g = |p: &str| d.names(&glob(&d.at(p)).unwrap());
    assert_eq!(g("data/x/part-*"), ["data/x/part-00000", "data/x/part-00001"]);
    assert_eq!(g("data/*/part-*"), ["data/x/part-00000", "data/x/part-00001", "data/y/part-00000"]);
    assert_eq!(g("data/?/part-0000[1-9]"), ["data/x/part-00001"]);
    assert_eq!(g("data/{x,y}/part-00000"), ["data/x/part-00000", "data/y/part-00000"]);
    assert_eq!(g("data/*"), ["data/x", "data/y", "data/z.txt"]);
    assert_eq!(g("data/x/*"), ["data/x/_SUCCESS", "data/x/part-00000", "data/x/part-00001"]);
    // Without wildcards: the named thing itself, a folder not expanded.
    assert_eq!(g("data/x"), ["data/x"]);
    assert_eq!(g("data/z.txt"), ["data/z.txt"]);
    assert!(g("data/none").is_empty());
    assert!(g("data/none/*").is_empty());
    // A wildcard through a file matches nothing below it.
    assert!(g("data/z.txt/*").is_empty());
    assert!(g("data/*/nothing-*").is_empty());
    // Broken patterns are errors, not panics.
    assert!(matches!(glob(&d.at("data/[x")), Err(StorageError::InvalidUrl { .. })));
    assert!(glob(&d.at("data/{x")).is_err());
    // file:// form is kept.
    let urls: Vec<String> = glob(&d.file_url("data/x/part-*")).unwrap().into_iter().map(|s| s.url).collect();
    assert_eq!(urls, [d.file_url("data/x/part-00000"), d.file_url("data/x/part-00001")]);
}

#[test]
fn relative_paths_stay_relative() {
    let d = tempdir();
    put(&d.at("rel/a.txt"), b"1");
    put(&d.at("rel/b.txt"), b"1");
    put(&d.at("rel/_SUCCESS"), b"");
    // Only this test uses relative paths, so changing the process's directory is safe here.
    let before = std::env::current_dir().unwrap();
    std::env::set_current_dir(&d.base).unwrap();
    let urls = |v: Result<Vec<FileStatus>>| v.map(|v| v.into_iter().map(|s| s.url).collect::<Vec<_>>());
    let globbed = urls(glob("rel/*.txt"));
    let expanded = urls(expand_inputs("rel"));
    let listed = urls(list("rel/"));
    let mut top = urls(glob("re?"));
    std::env::set_current_dir(before).unwrap();
    assert_eq!(globbed.unwrap(), ["rel/a.txt", "rel/b.txt"]);
    assert_eq!(expanded.unwrap(), ["rel/a.txt", "rel/b.txt"]);
    assert_eq!(listed.unwrap(), ["rel/_SUCCESS", "rel/a.txt", "rel/b.txt"]);
    assert_eq!(top.as_mut().unwrap(), &["rel"]);
}

#[test]
fn expand_inputs_like_hadoop() {
    let d = tempdir();
    for f in [
        "t/part-00000",
        "t/part-00001",
        "t/_SUCCESS",
        "t/.part-00002.crc",
        "t/_temporary/0/part-9",
        "t/dt=1/part-00000",
        "t/dt=2/part-00000",
        "u/part-00000",
        "u/_meta",
    ] {
        put(&d.at(f), b"1");
    }
    let e = |p: &str| d.names(&expand_inputs(&d.at(p)).unwrap());
    assert_eq!(e("t"), ["t/dt=1/part-00000", "t/dt=2/part-00000", "t/part-00000", "t/part-00001"]);
    assert_eq!(e("t/part-00001"), ["t/part-00001"]);
    // Asked for by name: returned even though hidden.
    assert_eq!(e("t/_SUCCESS"), ["t/_SUCCESS"]);
    assert_eq!(e("t/part-*"), ["t/part-00000", "t/part-00001"]);
    assert_eq!(e("t/*"), e("t"));
    assert_eq!(e("{t,u}/part-00000"), ["t/part-00000", "u/part-00000"]);
    assert_eq!(e("*/dt=*"), ["t/dt=1/part-00000", "t/dt=2/part-00000"]);
    assert!(e("t/nothing-*").is_empty());
    assert!(expand_inputs(&d.at("missing")).unwrap_err().is_not_found());
}

#[test]
fn mkdirs_rename_delete() {
    let d = tempdir();
    mkdirs(&d.at("m/n/o")).unwrap();
    mkdirs(&d.at("m/n/o")).unwrap(); // idempotent
    assert!(status(&d.at("m/n/o")).unwrap().is_dir);
    put(&d.at("m/f"), b"f");
    assert!(mkdirs(&d.at("m/f")).unwrap_err().is_already_exists());

    // Files: no-overwrite refuses, overwrite replaces.
    put(&d.at("m/g"), b"g");
    assert!(rename(&d.at("m/f"), &d.at("m/g"), false).unwrap_err().is_already_exists());
    assert_eq!(read(&d.at("m/f")).unwrap(), b"f");
    rename(&d.at("m/f"), &d.at("m/g"), true).unwrap();
    assert_eq!(read(&d.at("m/g")).unwrap(), b"f");
    assert!(!exists(&d.at("m/f")).unwrap());
    rename(&d.at("m/g"), &d.at("m/h"), false).unwrap();
    assert!(matches!(
        rename(&d.at("m/g"), &d.at("m/i"), false),
        Err(StorageError::NotFound { url }) if url == d.at("m/g")
    ));
    // Folders.
    rename(&d.at("m/n"), &d.at("m/n2"), false).unwrap();
    assert!(status(&d.at("m/n2/o")).unwrap().is_dir);
    mkdirs(&d.at("m/n3")).unwrap();
    assert!(rename(&d.at("m/n2"), &d.at("m/n3"), false).unwrap_err().is_already_exists());
    // Across file systems: refused.
    assert!(matches!(rename(&d.at("m/h"), "hdfs://nn:9000/x", false), Err(StorageError::InvalidUrl { .. })));

    // Delete: a non-empty folder needs recursive.
    assert!(delete(&d.at("m/n2"), false).is_err());
    assert!(delete(&d.at("m/n2"), true).unwrap());
    assert!(!exists(&d.at("m/n2")).unwrap());
    assert!(delete(&d.at("m/h"), false).unwrap());
    assert!(delete(&d.at("m/n3"), false).unwrap());
    assert!(!delete(&d.at("m/h"), false).unwrap());
}

#[test]
fn bad_urls_are_errors() {
    assert!(matches!(open("ftp://host/x"), Err(StorageError::Unsupported { .. })));
    assert!(matches!(list(""), Err(StorageError::InvalidUrl { .. })));
    assert!(matches!(create("hdfs://nn:x/y", false), Err(StorageError::InvalidUrl { .. })));
    assert!(matches!(create("/", false), Err(StorageError::InvalidUrl { .. })));
    assert!(matches!(exists("file://host/x"), Err(StorageError::InvalidUrl { .. })));
}

#[test]
fn reader_errors_name_the_url() {
    let d = tempdir();
    let err = match open(&d.at("absent")) {
        Err(e) => e,
        Ok(_) => panic!("opened a missing file"),
    };
    assert!(err.to_string().contains("absent"), "{err}");
}

#[test]
fn empty_file_round_trip() {
    let d = tempdir();
    let url = d.at("empty");
    assert_eq!(create(&url, false).unwrap().commit().unwrap(), 0);
    assert_eq!(size(&url).unwrap(), 0);
    assert!(read(&url).unwrap().is_empty());
}

#[test]
fn long_names_get_a_short_enough_temp_name() {
    let d = tempdir();
    let name = "n".repeat(250);
    let url = d.at(&name);
    write(&url, b"x", false).unwrap();
    assert_eq!(read(&url).unwrap(), b"x");
}

#[test]
fn blocking_inside_a_runtime_is_refused() {
    let d = tempdir();
    let url = d.at("x");
    put(&url, b"abc");
    let rt = runtime().unwrap();
    // Local operations do not need the runtime and work anywhere; HDFS calls would block.
    let result = rt.block_on(async { exists("hdfs://127.0.0.1:1/x") });
    assert!(matches!(result, Err(StorageError::InsideRuntime)), "{result:?}");
}

#[test]
fn handles_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<AtomicWriter>();
    assert_send::<Box<dyn Read + Send>>();
    assert_send::<StorageError>();
    fn assert_sync<T: Sync>() {}
    assert_sync::<StorageError>();
}

#[test]
fn a_staged_folder_replaces_another_as_a_whole() {
    let d = tempdir();
    let dest = d.at("export");
    for (round, files) in [(0, vec!["a", "b"]), (1, vec!["c"])] {
        let staging = sibling_temp(&dest).unwrap();
        let name = staging.rsplit('/').next().unwrap();
        assert!(is_temp_name(name) && name.starts_with(".export."), "{name}");
        mkdirs(&staging).unwrap();
        for f in &files {
            put(&join_url(&staging, f), format!("{round}").as_bytes());
        }
        replace_dir(&staging, &dest).unwrap();
        assert_eq!(
            d.names(&list(&dest).unwrap()),
            files.iter().map(|f| format!("export/{f}")).collect::<Vec<_>>()
        );
        // Nothing is left beside it: not the staging folder, not the replaced one.
        assert_eq!(d.names(&list(&d.base).unwrap()), ["export"]);
    }
}
