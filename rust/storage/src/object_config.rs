//! Settings of the object-store backends, and building a store for a bucket from them.
//!
//! Spark users configure S3, GCS and Azure with Hadoop's keys (`fs.s3a.endpoint`,
//! `fs.azure.account.key.<account>.dfs.core.windows.net`, …), in `core-site.xml` or as
//! `spark.hadoop.*` confs; scripts and notebooks more often with each cloud SDK's environment
//! variables (`AWS_ACCESS_KEY_ID`, `GOOGLE_APPLICATION_CREDENTIALS`, `AZURE_STORAGE_ACCOUNT_KEY`,
//! …). Both work here, in this order of precedence:
//!
//! 1. keys set in this process with [`configure`] (the Python layer forwards a Spark session's
//!    `spark.hadoop.fs.*` confs to its executors this way);
//! 2. keys in `core-site.xml` under `HADOOP_CONF_DIR` (or `HADOOP_HOME/etc/hadoop`);
//! 3. the environment, as `object_store`'s `from_env` builders read it.
//!
//! For S3, `fs.s3a.bucket.<bucket>.<option>` overrides `fs.s3a.<option>` for that bucket, as in
//! Hadoop's S3A connector.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::{BackoffConfig, ClientConfigKey, RetryConfig};

use crate::error::{Result, StorageError};

/// The prefixes of the Hadoop keys the object stores read.
const KEY_PREFIXES: [&str; 3] = ["fs.s3a.", "fs.gs.", "fs.azure."];

/// Keys set with [`configure`] in this process.
static OVERRIDES: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// Whether `key` is one the object stores read (`fs.s3a.*`, `fs.gs.*`, `fs.azure.*`).
pub fn is_object_store_key(key: &str) -> bool {
    KEY_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// Sets Hadoop-style object-store keys for this process, over `core-site.xml` and the
/// environment. A key outside `fs.s3a.*`, `fs.gs.*` and `fs.azure.*` is
/// [`StorageError::Config`]. When a value changes, stores built before are dropped, so the next
/// call uses the keys.
pub fn configure<I, K, V>(options: I) -> Result<()>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    let options: Vec<(String, String)> = options.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
    if let Some((key, _)) = options.iter().find(|(k, _)| !is_object_store_key(k)) {
        return Err(StorageError::Config {
            key: key.clone(),
            reason: "not an object-store key (fs.s3a.*, fs.gs.* or fs.azure.*)".to_string(),
        });
    }
    let changed = {
        let mut overrides = OVERRIDES.lock().unwrap_or_else(|p| p.into_inner());
        let mut changed = false;
        for (key, value) in options {
            changed |= overrides.get(&key) != Some(&value);
            overrides.insert(key, value);
        }
        changed
    };
    // Setting what is set already (every task applies its job's keys) keeps the stores, and
    // their connection pools.
    if changed {
        crate::runtime::forget_object_stores();
    }
    Ok(())
}

/// The keys set with [`configure`] in this process.
pub fn configured() -> BTreeMap<String, String> {
    OVERRIDES.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The object-store keys in effect: `core-site.xml` overlaid by [`configure`]'s.
fn settings() -> Result<BTreeMap<String, String>> {
    let mut keys = core_site()?;
    keys.extend(configured());
    Ok(keys)
}

/// The object-store keys of `core-site.xml` in the Hadoop configuration folder, if there is one.
fn core_site() -> Result<BTreeMap<String, String>> {
    let dir = std::env::var("HADOOP_CONF_DIR")
        .ok()
        .or_else(|| std::env::var("HADOOP_HOME").ok().map(|h| format!("{h}/etc/hadoop")));
    let Some(dir) = dir else { return Ok(BTreeMap::new()) };
    let path = format!("{dir}/core-site.xml");
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_properties(&text)
            .map(|all| all.into_iter().filter(|(k, _)| is_object_store_key(k)).collect())
            .map_err(|reason| StorageError::Config { key: path, reason }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(source) => Err(StorageError::Io { url: path, source }),
    }
}

/// The `<property><name>…</name><value>…</value></property>` pairs of a Hadoop XML file.
fn parse_properties(xml: &str) -> std::result::Result<BTreeMap<String, String>, String> {
    use quick_xml::events::Event;
    let bad = |e: &dyn std::fmt::Display| format!("not valid XML: {e}");
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = BTreeMap::new();
    let (mut name, mut value) = (None::<String>, None::<String>);
    // The element whose text is being gathered (text and entity references come in pieces).
    let mut field: Option<(Vec<u8>, String)> = None;
    let mut depth = 0usize;
    loop {
        match reader.read_event().map_err(|e| bad(&e))? {
            Event::Start(tag) => {
                depth += 1;
                field = Some((tag.name().as_ref().to_vec(), String::new()));
            }
            Event::Text(text) => {
                if let Some((_, buf)) = field.as_mut() {
                    buf.push_str(&text.decode().map_err(|e| bad(&e))?);
                }
            }
            Event::GeneralRef(reference) => {
                if let Some((_, buf)) = field.as_mut() {
                    match reference.resolve_char_ref().map_err(|e| bad(&e))? {
                        Some(c) => buf.push(c),
                        None => {
                            let entity = reference.decode().map_err(|e| bad(&e))?;
                            let resolved = quick_xml::escape::resolve_predefined_entity(&entity)
                                .ok_or_else(|| format!("not valid XML: unknown entity &{entity};"))?;
                            buf.push_str(resolved);
                        }
                    }
                }
            }
            Event::End(tag) => {
                depth = depth.saturating_sub(1);
                if let Some((element, text)) = field.take() {
                    match element.as_slice() {
                        b"name" => name = Some(text.trim().to_string()),
                        b"value" => value = Some(text.trim().to_string()),
                        _ => {}
                    }
                }
                if tag.name().as_ref() == b"property"
                    && let (Some(n), Some(v)) = (name.take(), value.take())
                {
                    out.insert(n, v);
                }
            }
            Event::Eof if depth > 0 => return Err("not valid XML: it ends inside an element".to_string()),
            Event::Eof => return Ok(out),
            _ => {}
        }
    }
}

/// A bucket's view of the settings: `fs.s3a.bucket.<bucket>.<option>` over `fs.s3a.<option>`.
struct Keys<'a> {
    all: &'a BTreeMap<String, String>,
    bucket: &'a str,
}

impl Keys<'_> {
    fn s3a(&self, option: &str) -> Option<&str> {
        self.all
            .get(&format!("fs.s3a.bucket.{}.{option}", self.bucket))
            .or_else(|| self.all.get(&format!("fs.s3a.{option}")))
            .map(String::as_str)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.all.get(key).map(String::as_str)
    }

    fn flag(&self, key: &str, value: Option<&str>) -> Result<Option<bool>> {
        match value.map(str::trim) {
            None => Ok(None),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(v) => Err(StorageError::Config {
                key: key.to_string(),
                reason: format!("{v:?} is not true or false"),
            }),
        }
    }
}

/// Retries of what a cloud store's transient errors need, within a minute.
fn retry() -> RetryConfig {
    RetryConfig { backoff: BackoffConfig::default(), max_retries: 4, retry_timeout: Duration::from_secs(60) }
}

/// Time-outs of every request, so that no call waits for ever on a silent server: a minute
/// for a request, ten seconds to connect. Set as keys, which merge with the environment's
/// client settings where a whole `ClientOptions` would replace them.
const TIMEOUTS: [(ClientConfigKey, &str); 2] =
    [(ClientConfigKey::Timeout, "60s"), (ClientConfigKey::ConnectTimeout, "10s")];

/// Builds the store for `scheme://bucket`.
pub(crate) fn build_store(scheme: &str, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    // reqwest's TLS takes the process's crypto provider; ring is the one this build has. An
    // error only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let all = settings()?;
    let keys = Keys { all: &all, bucket };
    let url = format!("{scheme}://{bucket}");
    let failed = |source: object_store::Error| StorageError::ObjectStore {
        url: url.clone(),
        source: Box::new(source),
    };
    let store: Arc<dyn ObjectStore> = match scheme {
        "s3" | "s3a" => {
            Arc::new(s3_builder(&keys)?.with_bucket_name(bucket).with_retry(retry()).build().map_err(failed)?)
        }
        "gs" => {
            let mut b = GoogleCloudStorageBuilder::from_env().with_bucket_name(bucket);
            for (key, value) in TIMEOUTS {
                b = b.with_config(GoogleConfigKey::Client(key), value);
            }
            if let Some(path) = keys.get("fs.gs.auth.service.account.json.keyfile") {
                b = b.with_service_account_path(path);
            }
            Arc::new(b.with_retry(retry()).build().map_err(failed)?)
        }
        "abfs" | "abfss" => {
            // container@account.dfs.core.windows.net: the builder reads both from the URL.
            let mut b = MicrosoftAzureBuilder::from_env().with_url(format!("{url}/"));
            for (key, value) in TIMEOUTS {
                b = b.with_config(AzureConfigKey::Client(key), value);
            }
            let host = bucket.split_once('@').map(|(_, host)| host).unwrap_or(bucket);
            if let Some(key) = keys.get(&format!("fs.azure.account.key.{host}")) {
                b = b.with_access_key(key);
            }
            if let Some(token) = keys.get(&format!("fs.azure.sas.fixed.token.{host}")) {
                b = b.with_config(AzureConfigKey::SasKey, token);
            }
            Arc::new(b.with_retry(retry()).build().map_err(failed)?)
        }
        other => return Err(StorageError::Unsupported { scheme: other.to_string() }),
    };
    Ok(store)
}

/// The S3 builder: the environment (`AWS_*`), then the S3A keys over it.
fn s3_builder(keys: &Keys<'_>) -> Result<AmazonS3Builder> {
    let mut b = AmazonS3Builder::from_env();
    for (key, value) in TIMEOUTS {
        b = b.with_config(AmazonS3ConfigKey::Client(key), value);
    }
    let plain = [
        ("access.key", AmazonS3ConfigKey::AccessKeyId),
        ("secret.key", AmazonS3ConfigKey::SecretAccessKey),
        ("session.token", AmazonS3ConfigKey::Token),
        ("endpoint.region", AmazonS3ConfigKey::Region),
    ];
    for (option, key) in plain {
        if let Some(v) = keys.s3a(option) {
            b = b.with_config(key, v);
        }
    }
    let ssl = keys.flag("fs.s3a.connection.ssl.enabled", keys.s3a("connection.ssl.enabled"))?;
    if let Some(endpoint) = keys.s3a("endpoint").map(str::trim).filter(|e| !e.is_empty()) {
        // S3A takes a bare host; the HTTP client needs a scheme, https unless SSL is off.
        let endpoint = if endpoint.contains("://") {
            endpoint.to_string()
        } else {
            format!("{}://{endpoint}", if ssl == Some(false) { "http" } else { "https" })
        };
        b = b.with_allow_http(endpoint.starts_with("http://")).with_endpoint(endpoint);
    }
    if let Some(path_style) = keys.flag("fs.s3a.path.style.access", keys.s3a("path.style.access"))? {
        b = b.with_config(AmazonS3ConfigKey::VirtualHostedStyleRequest, (!path_style).to_string());
    }
    if keys.s3a("aws.credentials.provider").is_some_and(|p| p.contains("Anonymous")) {
        b = b.with_skip_signature(true);
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hadoop_xml_properties() {
        let xml = r#"<?xml version="1.0"?>
            <configuration>
              <property><name>fs.s3a.endpoint</name><value> http://127.0.0.1:9000 </value></property>
              <property><name>fs.defaultFS</name><value>hdfs://nn:9000</value><final>true</final></property>
              <property><name>fs.s3a.secret.key</name><value>a&amp;b</value></property>
            </configuration>"#;
        let keys = parse_properties(xml).unwrap();
        assert_eq!(keys["fs.s3a.endpoint"], "http://127.0.0.1:9000");
        assert_eq!(keys["fs.defaultFS"], "hdfs://nn:9000");
        assert_eq!(keys["fs.s3a.secret.key"], "a&b");
        assert!(parse_properties("<configuration><property>").is_err());
    }

    #[test]
    fn bucket_keys_override_global_ones() {
        let all: BTreeMap<String, String> = [
            ("fs.s3a.endpoint", "http://a:1"),
            ("fs.s3a.bucket.logs.endpoint", "http://b:2"),
            ("fs.s3a.path.style.access", "yes"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(Keys { all: &all, bucket: "logs" }.s3a("endpoint"), Some("http://b:2"));
        assert_eq!(Keys { all: &all, bucket: "other" }.s3a("endpoint"), Some("http://a:1"));
        // A value that is not a boolean names its key.
        match s3_builder(&Keys { all: &all, bucket: "x" }) {
            Err(StorageError::Config { key, .. }) => assert_eq!(key, "fs.s3a.path.style.access"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn only_object_store_keys_are_taken() {
        match configure([("spark.executor.memory", "1g")]) {
            Err(StorageError::Config { key, .. }) => assert_eq!(key, "spark.executor.memory"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(!configured().contains_key("spark.executor.memory"));
    }
}
