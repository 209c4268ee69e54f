//! Object-store requests that fail on purpose: a hook for tests, off unless a test turns it on.
//!
//! What a commit protocol does when a store request fails half-way cannot be shown against a
//! real store (moto's S3 server, Azurite), which does not fail on demand. A process in which
//! the environment variable [`ENV`] is set, or [`inject`] was called, wraps every object store
//! it builds in one that fails the requests the rules name and passes everything else to the
//! real store. Without rules no store is wrapped: production code pays one look at an empty
//! list when it builds a store, and nothing per request.
//!
//! Rules are separated by `;`, each `<request> <n> <pattern> [landed]`:
//!
//! - `request`: `copy` (matched on the key copied from) or `put` (a single-request upload,
//!   matched on its key);
//! - `n`: the matching request that fails, counted from 1 for each key prefix the pattern
//!   matched (see below), in each process apart;
//! - `pattern`: `/`-separated components, each with the wildcards of [`crate::glob`], matched
//!   against consecutive components of the key; the count is kept per matched prefix, so
//!   `copy 2 out/_temporary/*/_attempt_00000_0` fails the second copy out of the attempt-0
//!   folder of task 0 under `out`, of every job;
//! - `landed`: the request is made and its answer replaced by an error, as when the response
//!   is lost on the way back; without it the request fails before it is sent.
//!
//! Spark executors take the variable from `spark.executorEnv.SPARKTRAIN_TEST_OBJECT_FAULTS`,
//! which makes a task fail in its commit while the driver's requests go through.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use crate::error::{Result, StorageError};
use crate::pattern::ComponentPattern;

/// The environment variable that holds a process's rules, read when it builds its first store.
pub const ENV: &str = "SPARKTRAIN_TEST_OBJECT_FAULTS";

/// The requests a rule can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    Copy,
    Put,
}

/// One parsed rule.
#[derive(Debug)]
struct Rule {
    request: Request,
    nth: u64,
    components: Vec<ComponentPattern>,
    landed: bool,
    text: String,
}

impl Rule {
    fn parse(text: &str) -> Result<Rule> {
        let bad = |reason: &str| StorageError::Config {
            key: ENV.to_string(),
            reason: format!("{text:?}: {reason}"),
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        let (request, nth, pattern, landed) = match words.as_slice() {
            [request, nth, pattern] => (*request, *nth, *pattern, false),
            [request, nth, pattern, "landed"] => (*request, *nth, *pattern, true),
            _ => return Err(bad("expected `<copy|put> <n> <pattern> [landed]`")),
        };
        let request = match request {
            "copy" => Request::Copy,
            "put" => Request::Put,
            _ => return Err(bad("the request is `copy` or `put`")),
        };
        let nth = nth.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| bad("n counts from 1"))?;
        let components = pattern
            .split('/')
            .filter(|c| !c.is_empty())
            .map(|c| ComponentPattern::new(c, pattern))
            .collect::<Result<Vec<_>>>()?;
        if components.is_empty() {
            return Err(bad("the pattern is empty"));
        }
        Ok(Rule { request, nth, components, landed, text: text.trim().to_string() })
    }

    /// The prefix of `key` that the pattern matches, ending with its last component.
    fn matched_prefix(&self, key: &Path) -> Option<String> {
        let parts: Vec<&str> = key.as_ref().split('/').collect();
        let width = self.components.len();
        (0..parts.len().saturating_sub(width - 1)).find_map(|start| {
            let window = &parts[start..start + width];
            self.components
                .iter()
                .zip(window)
                .all(|(pattern, part)| pattern.matches(part))
                .then(|| parts[..start + width].join("/"))
        })
    }
}

/// A process's rules and how many matching requests each has seen, per matched prefix.
#[derive(Debug, Default)]
struct Faults {
    rules: Vec<Rule>,
    seen: HashMap<(usize, String), u64>,
}

/// `None` until the first store is built or [`inject`] is called.
static FAULTS: OnceLock<Mutex<Faults>> = OnceLock::new();

fn faults() -> Result<&'static Mutex<Faults>> {
    if let Some(faults) = FAULTS.get() {
        return Ok(faults);
    }
    let rules = match std::env::var(ENV) {
        Ok(text) => parse(&text)?,
        Err(_) => Vec::new(),
    };
    Ok(FAULTS.get_or_init(|| Mutex::new(Faults { rules, seen: HashMap::new() })))
}

fn parse(text: &str) -> Result<Vec<Rule>> {
    text.split(';').filter(|r| !r.trim().is_empty()).map(Rule::parse).collect()
}

/// Adds rules (the syntax of the module notes) to this process's, for tests. Stores built
/// before are dropped, so that the next request goes through a store that applies them.
pub fn inject(rules: &str) -> Result<()> {
    let parsed = parse(rules)?;
    faults()?.lock().unwrap_or_else(|p| p.into_inner()).rules.extend(parsed);
    crate::runtime::forget_object_stores();
    Ok(())
}

/// `store` as it is, or wrapped to apply this process's rules when it has any.
pub(crate) fn wrap(store: Arc<dyn ObjectStore>) -> Result<Arc<dyn ObjectStore>> {
    let faults = faults()?;
    if faults.lock().unwrap_or_else(|p| p.into_inner()).rules.is_empty() {
        return Ok(store);
    }
    Ok(Arc::new(FaultyStore { inner: store, faults }))
}

/// What a rule decided for one request.
enum Verdict {
    Pass,
    FailBefore(String),
    FailAfter(String),
}

fn verdict(faults: &Mutex<Faults>, request: Request, key: &Path) -> Verdict {
    let mut faults = faults.lock().unwrap_or_else(|p| p.into_inner());
    let Faults { rules, seen } = &mut *faults;
    for (index, rule) in rules.iter().enumerate() {
        if rule.request != request {
            continue;
        }
        let Some(prefix) = rule.matched_prefix(key) else { continue };
        let count = seen.entry((index, prefix)).or_insert(0);
        *count += 1;
        if *count == rule.nth {
            let why = format!("injected failure ({ENV}: {}) of {key}", rule.text);
            return if rule.landed { Verdict::FailAfter(why) } else { Verdict::FailBefore(why) };
        }
    }
    Verdict::Pass
}

fn injected(why: String) -> object_store::Error {
    object_store::Error::Generic { store: "fault injection", source: why.into() }
}

/// A store that fails the requests the rules name.
struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: &'static Mutex<Faults>,
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore").field("inner", &self.inner).finish()
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        match verdict(self.faults, Request::Put, location) {
            Verdict::Pass => self.inner.put_opts(location, payload, opts).await,
            Verdict::FailBefore(why) => Err(injected(why)),
            Verdict::FailAfter(why) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(injected(why))
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        match verdict(self.faults, Request::Copy, from) {
            Verdict::Pass => self.inner.copy_opts(from, to, options).await,
            Verdict::FailBefore(why) => Err(injected(why)),
            Verdict::FailAfter(why) => {
                self.inner.copy_opts(from, to, options).await?;
                Err(injected(why))
            }
        }
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> object_store::Result<()> {
        // Through this store's own copy, so that a rule on copies applies to renames too.
        let mode = match options.target_mode {
            object_store::RenameTargetMode::Overwrite => object_store::CopyMode::Overwrite,
            object_store::RenameTargetMode::Create => object_store::CopyMode::Create,
        };
        self.copy_opts(from, to, CopyOptions { mode, extensions: options.extensions }).await?;
        object_store::ObjectStoreExt::delete(self.inner.as_ref(), from).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_match_per_prefix() {
        let rules = parse("copy 2 out/_temporary/*/_attempt_00000_0; put 1 x/m landed").unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!((rules[0].request, rules[0].nth, rules[0].landed), (Request::Copy, 2, false));
        assert_eq!((rules[1].request, rules[1].landed), (Request::Put, true));
        let key = Path::from("b/out/_temporary/job/_attempt_00000_0/part-0");
        assert_eq!(rules[0].matched_prefix(&key).as_deref(), Some("b/out/_temporary/job/_attempt_00000_0"));
        assert_eq!(rules[0].matched_prefix(&Path::from("b/out/_temporary/job/_attempt_00000_1/p")), None);
        assert_eq!(rules[1].matched_prefix(&Path::from("x/m")).as_deref(), Some("x/m"));

        let faults = Mutex::new(Faults { rules, seen: HashMap::new() });
        let other_job = Path::from("b/out/_temporary/other/_attempt_00000_0/part-0");
        assert!(matches!(verdict(&faults, Request::Copy, &key), Verdict::Pass));
        assert!(matches!(verdict(&faults, Request::Put, &key), Verdict::Pass), "a put is not a copy");
        assert!(matches!(verdict(&faults, Request::Copy, &other_job), Verdict::Pass), "counted per prefix");
        assert!(matches!(verdict(&faults, Request::Copy, &key), Verdict::FailBefore(_)));
        assert!(matches!(verdict(&faults, Request::Copy, &key), Verdict::Pass), "only the n-th fails");
        assert!(matches!(verdict(&faults, Request::Put, &Path::from("x/m")), Verdict::FailAfter(_)));
    }

    #[test]
    fn bad_rules_name_the_variable() {
        for text in ["copy", "move 1 a", "copy 0 a", "put 1 a lost", "copy 1 /"] {
            match parse(text) {
                Err(StorageError::Config { key, .. }) => assert_eq!(key, ENV),
                other => panic!("{text:?}: unexpected {other:?}"),
            }
        }
    }
}
