//! Parsing of the strings callers pass (bare paths and URLs) into a [`Location`].
//!
//! Hadoop semantics are followed where they matter to Spark users: a path string is *not*
//! percent-decoded (Hadoop's `new Path("a%20b")` names a file literally called `a%20b`), a URL
//! with a port names one NameNode, and a URL without one (or without any authority) is left for
//! `hdfs-native` to resolve from the Hadoop configuration (`HADOOP_CONF_DIR`). Object-store URLs
//! (`s3://bucket/key`, `s3a://`, `gs://`, `abfs[s]://container@account.dfs.core.windows.net/key`)
//! name a bucket and a key prefix.

use crate::error::{Result, StorageError};

/// Where a path or URL points, split into the parts the backends need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// The local file system.
    Local {
        /// The path as given, without trailing slashes. May be relative. The empty string
        /// stands for the current directory; it only appears as the starting point of a
        /// relative glob, so that its matches print as `name` rather than `./name`.
        path: String,
        /// Whether the caller wrote a `file:` URL, so that derived URLs keep that form.
        file_url: bool,
    },
    /// HDFS (or viewfs) through `hdfs-native`.
    Hdfs {
        /// Lower-case scheme: `hdfs` or `viewfs`.
        scheme: String,
        /// `host:port`, a name service, a viewfs cluster name, or empty for `fs.defaultFS`.
        authority: String,
        /// Absolute path, single slashes, no trailing slash (except the root `/`).
        path: String,
    },
    /// An object store (S3, GCS, Azure) through `object_store`.
    Object {
        /// Lower-case scheme: `s3`, `s3a`, `gs`, `abfs` or `abfss`.
        scheme: String,
        /// The bucket (`container@account.dfs.core.windows.net` for Azure).
        bucket: String,
        /// Absolute key prefix, single slashes, no trailing slash (the bucket's root is `/`).
        path: String,
    },
}

/// The URL schemes served by an object store, and the store each one is.
pub(crate) const OBJECT_SCHEMES: [&str; 5] = ["s3", "s3a", "gs", "abfs", "abfss"];

/// Splits `scheme:` off a string if it starts with one (RFC 3986 syntax). Single-letter schemes
/// are not taken, so that a Windows-style `C:\…` would stay a path.
fn split_scheme(s: &str) -> Option<(&str, &str)> {
    let colon = s.find(':')?;
    let scheme = &s[..colon];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    if scheme.len() < 2
        || !first.is_ascii_alphabetic()
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return None;
    }
    Some((scheme, &s[colon + 1..]))
}

/// Collapses repeated slashes and removes a trailing one, keeping a leading `/` and the root.
fn clean_path(path: &str) -> String {
    let absolute = path.starts_with('/');
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let joined = parts.join("/");
    if absolute { format!("/{joined}") } else { joined }
}

impl Location {
    /// Parses a bare path or a `file:`, `hdfs:` or `viewfs:` URL.
    pub(crate) fn parse(input: &str) -> Result<Location> {
        let invalid =
            |reason: &str| StorageError::InvalidUrl { url: input.to_string(), reason: reason.to_string() };
        if input.is_empty() {
            return Err(invalid("empty path"));
        }
        if input.contains('\0') {
            return Err(invalid("contains a NUL character"));
        }
        let Some((scheme, rest)) = split_scheme(input) else {
            let path = clean_path(input);
            return Ok(Location::Local {
                // `clean_path` turns "./" into "." and "//" into "/"; an all-slash input is root.
                path: if path.is_empty() { ".".to_string() } else { path },
                file_url: false,
            });
        };
        let scheme = scheme.to_ascii_lowercase();
        // `scheme://authority/path` or the authority-less `scheme:/path` that Hadoop prints.
        let (authority, path) = if let Some(after) = rest.strip_prefix("//") {
            match after.find('/') {
                Some(slash) => (&after[..slash], &after[slash..]),
                None => (after, "/"),
            }
        } else if rest.starts_with('/') {
            ("", rest)
        } else {
            return Err(invalid("a URL path must be absolute (scheme:/path or scheme://host/path)"));
        };
        // `@` is Azure's container@account; every other scheme refuses it (no user info).
        let object = OBJECT_SCHEMES.contains(&scheme.as_str());
        if authority.contains(['?', '#', ' ']) || (authority.contains('@') && !object) {
            return Err(invalid("unsupported characters in the URL authority"));
        }
        match scheme.as_str() {
            "file" => {
                if !(authority.is_empty() || authority.eq_ignore_ascii_case("localhost")) {
                    return Err(invalid("a file: URL must name no host, or localhost"));
                }
                Ok(Location::Local { path: clean_path(path), file_url: true })
            }
            "hdfs" | "viewfs" => {
                if let Some((host, port)) = authority.rsplit_once(':')
                    && !authority.ends_with(']')
                    && (host.is_empty() || port.is_empty() || port.parse::<u16>().is_err())
                {
                    return Err(invalid("the port must be a number from 0 to 65535"));
                }
                if scheme == "viewfs" && authority.is_empty() {
                    // hdfs-native only takes the authority-less form through fs.defaultFS; say so
                    // rather than fail later with a less clear message.
                    return Err(invalid("a viewfs URL must name its mount table: viewfs://cluster/path"));
                }
                Ok(Location::Hdfs { scheme, authority: authority.to_string(), path: clean_path(path) })
            }
            s if OBJECT_SCHEMES.contains(&s) => {
                let azure = s.starts_with("abfs");
                if authority.is_empty() {
                    return Err(invalid("an object-store URL must name its bucket: scheme://bucket/key"));
                }
                if azure != authority.contains('@') || authority.contains(['?', '#', ' ', ':']) {
                    return Err(invalid(if azure {
                        "an abfs URL names container@account.dfs.core.windows.net"
                    } else {
                        "unsupported characters in the bucket name"
                    }));
                }
                Ok(Location::Object { scheme, bucket: authority.to_string(), path: clean_path(path) })
            }
            _ => Err(StorageError::Unsupported { scheme: scheme.to_string() }),
        }
    }

    /// The URL (or bare path) to show the caller, in the caller's own form.
    pub(crate) fn url(&self) -> String {
        match self {
            Location::Local { path, file_url: false } => {
                if path.is_empty() {
                    ".".to_string()
                } else {
                    path.clone()
                }
            }
            Location::Local { path, file_url: true } => format!("file://{path}"),
            Location::Hdfs { scheme, authority, path } => format!("{scheme}://{authority}{path}"),
            Location::Object { scheme, bucket, path } => format!("{scheme}://{bucket}{path}"),
        }
    }

    /// The path part (local path, or the path inside HDFS).
    pub(crate) fn path(&self) -> &str {
        match self {
            Location::Local { path, .. } | Location::Hdfs { path, .. } | Location::Object { path, .. } => {
                path
            }
        }
    }

    /// The same file system, another path. `path` must already be clean.
    pub(crate) fn with_path(&self, path: String) -> Location {
        match self {
            Location::Local { file_url, .. } => Location::Local { path, file_url: *file_url },
            Location::Hdfs { scheme, authority, .. } => {
                Location::Hdfs { scheme: scheme.clone(), authority: authority.clone(), path }
            }
            Location::Object { scheme, bucket, .. } => {
                Location::Object { scheme: scheme.clone(), bucket: bucket.clone(), path }
            }
        }
    }

    /// The child called `name` (one path component, no slash).
    pub(crate) fn join(&self, name: &str) -> Location {
        let base = self.path();
        let path = if base.is_empty() {
            name.to_string()
        } else if base.ends_with('/') {
            format!("{base}{name}")
        } else {
            format!("{base}/{name}")
        };
        self.with_path(path)
    }

    /// The last path component, if there is one (the root and `.` have none).
    pub(crate) fn file_name(&self) -> Option<&str> {
        let path = self.path();
        let name = path.rsplit('/').next().unwrap_or(path);
        if name.is_empty() || name == "." || name == ".." { None } else { Some(name) }
    }

    /// The folder holding this entry; `None` for the root. A relative local path with one
    /// component has the current directory (empty path) as parent.
    pub(crate) fn parent(&self) -> Option<Location> {
        let path = self.path();
        match path.rfind('/') {
            Some(0) if path.len() > 1 => Some(self.with_path("/".to_string())),
            Some(0) => None,
            Some(i) => Some(self.with_path(path[..i].to_string())),
            None if self.file_name().is_some() => Some(self.with_path(String::new())),
            None => None,
        }
    }

    /// True when both are on the same file system (same scheme and authority).
    pub(crate) fn same_fs(&self, other: &Location) -> bool {
        match (self, other) {
            (Location::Local { .. }, Location::Local { .. }) => true,
            (
                Location::Hdfs { scheme: s1, authority: a1, .. },
                Location::Hdfs { scheme: s2, authority: a2, .. },
            ) => s1 == s2 && a1.eq_ignore_ascii_case(a2),
            (
                Location::Object { scheme: s1, bucket: b1, .. },
                Location::Object { scheme: s2, bucket: b2, .. },
            ) => s1 == s2 && b1 == b2,
            _ => false,
        }
    }
}

/// Joins a child name onto a folder URL or path, in the folder's own form
/// (`hdfs://nn:9000/data` + `part-0` gives `hdfs://nn:9000/data/part-0`).
///
/// `name` may hold several components (`a/b`); leading and trailing slashes on either side are
/// handled, so callers need not care whether the folder was written with a trailing slash.
pub fn join_url(base: &str, name: &str) -> String {
    let name = name.trim_matches('/');
    if name.is_empty() {
        return base.to_string();
    }
    if base.is_empty() {
        // The current directory.
        return name.to_string();
    }
    let trimmed = base.trim_end_matches('/');
    if trimmed.is_empty() {
        // The local root.
        format!("/{name}")
    } else if trimmed.ends_with(':') {
        // A root URL with an empty authority (`file:///`, `hdfs:///`) lost all its slashes.
        format!("{trimmed}///{name}")
    } else {
        format!("{trimmed}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(path: &str, file_url: bool) -> Location {
        Location::Local { path: path.to_string(), file_url }
    }

    fn hdfs(scheme: &str, authority: &str, path: &str) -> Location {
        Location::Hdfs {
            scheme: scheme.to_string(),
            authority: authority.to_string(),
            path: path.to_string(),
        }
    }

    #[test]
    fn bare_paths_are_local() {
        assert_eq!(Location::parse("/tmp/x").unwrap(), local("/tmp/x", false));
        assert_eq!(Location::parse("/tmp//x/").unwrap(), local("/tmp/x", false));
        assert_eq!(Location::parse("data/x").unwrap(), local("data/x", false));
        assert_eq!(Location::parse("/").unwrap(), local("/", false));
        assert_eq!(Location::parse("./").unwrap(), local(".", false));
        // A one-letter "scheme" is a drive letter or a file name, not a URL.
        assert_eq!(Location::parse("c:/x").unwrap(), local("c:/x", false));
    }

    #[test]
    fn file_urls() {
        assert_eq!(Location::parse("file:///tmp/x").unwrap(), local("/tmp/x", true));
        assert_eq!(Location::parse("file:/tmp/x").unwrap(), local("/tmp/x", true));
        assert_eq!(Location::parse("FILE://localhost/tmp/x").unwrap(), local("/tmp/x", true));
        assert_eq!(Location::parse("file://").unwrap(), local("/", true));
        assert_eq!(Location::parse("file:///tmp/x/").unwrap().url(), "file:///tmp/x");
        assert!(matches!(Location::parse("file://otherhost/x"), Err(StorageError::InvalidUrl { .. })));
        assert!(matches!(Location::parse("file:relative"), Err(StorageError::InvalidUrl { .. })));
    }

    #[test]
    fn hdfs_urls() {
        assert_eq!(
            Location::parse("hdfs://nn:9000/data//train/").unwrap(),
            hdfs("hdfs", "nn:9000", "/data/train")
        );
        assert_eq!(Location::parse("hdfs://nn:9000").unwrap(), hdfs("hdfs", "nn:9000", "/"));
        assert_eq!(Location::parse("hdfs://ns1/x").unwrap(), hdfs("hdfs", "ns1", "/x"));
        assert_eq!(Location::parse("hdfs:/x").unwrap(), hdfs("hdfs", "", "/x"));
        assert_eq!(Location::parse("hdfs:///x").unwrap(), hdfs("hdfs", "", "/x"));
        assert_eq!(Location::parse("viewfs://cluster/a").unwrap(), hdfs("viewfs", "cluster", "/a"));
        assert_eq!(Location::parse("hdfs://[::1]:9000/a").unwrap(), hdfs("hdfs", "[::1]:9000", "/a"));
        assert_eq!(Location::parse("hdfs://nn:9000/a%20b").unwrap().url(), "hdfs://nn:9000/a%20b");
        for bad in [
            "hdfs://nn:port/x",
            "hdfs://nn:/x",
            "hdfs://nn:99999/x",
            "hdfs:relative",
            "hdfs://user@nn/x",
            "viewfs:///x",
            "",
            "a\0b",
        ] {
            assert!(
                matches!(Location::parse(bad), Err(StorageError::InvalidUrl { .. })),
                "{bad:?} should be invalid"
            );
        }
    }

    fn object(scheme: &str, bucket: &str, path: &str) -> Location {
        Location::Object { scheme: scheme.to_string(), bucket: bucket.to_string(), path: path.to_string() }
    }

    #[test]
    fn object_store_urls() {
        assert_eq!(Location::parse("s3://bucket/a//b/").unwrap(), object("s3", "bucket", "/a/b"));
        assert_eq!(Location::parse("S3A://bucket").unwrap(), object("s3a", "bucket", "/"));
        assert_eq!(Location::parse("gs://b/x").unwrap().url(), "gs://b/x");
        let azure = "abfss://data@acct.dfs.core.windows.net/t/x";
        assert_eq!(
            Location::parse(azure).unwrap(),
            object("abfss", "data@acct.dfs.core.windows.net", "/t/x")
        );
        assert_eq!(Location::parse(azure).unwrap().url(), azure);
        for bad in ["s3:///key", "s3:/key", "s3://user@bucket/x", "s3://b:9000/x", "abfs://container/x"] {
            assert!(
                matches!(Location::parse(bad), Err(StorageError::InvalidUrl { .. })),
                "{bad:?} should be invalid"
            );
        }
        let a = Location::parse("s3://b/x").unwrap();
        assert!(a.same_fs(&Location::parse("s3://b/y").unwrap()));
        assert!(!a.same_fs(&Location::parse("s3://c/x").unwrap()));
        assert!(!a.same_fs(&Location::parse("s3a://b/x").unwrap()));
    }

    #[test]
    fn other_schemes_are_unsupported() {
        match Location::parse("ftp://host/key") {
            Err(StorageError::Unsupported { scheme }) => assert_eq!(scheme, "ftp"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn join_parent_and_name() {
        let l = Location::parse("hdfs://nn:9000/data").unwrap();
        assert_eq!(l.join("part-0").url(), "hdfs://nn:9000/data/part-0");
        assert_eq!(l.file_name(), Some("data"));
        assert_eq!(l.parent().unwrap().url(), "hdfs://nn:9000/");
        assert_eq!(l.parent().unwrap().parent(), None);
        let root = Location::parse("hdfs://nn:9000/").unwrap();
        assert_eq!(root.join("x").url(), "hdfs://nn:9000/x");
        assert_eq!(root.file_name(), None);

        let rel = Location::parse("x.txt").unwrap();
        assert_eq!(rel.parent().unwrap().path(), "");
        assert_eq!(rel.parent().unwrap().join("y").url(), "y");
        let f = Location::parse("file:///a/b").unwrap();
        assert_eq!(f.parent().unwrap().url(), "file:///a");
        assert!(f.same_fs(&Location::parse("/c").unwrap()));
        assert!(!f.same_fs(&l));
        assert!(l.same_fs(&Location::parse("hdfs://NN:9000/z").unwrap()));
        assert!(!l.same_fs(&Location::parse("hdfs://nn:9001/z").unwrap()));
    }

    #[test]
    fn join_url_forms() {
        assert_eq!(join_url("hdfs://nn:9000/data", "part-0"), "hdfs://nn:9000/data/part-0");
        assert_eq!(join_url("hdfs://nn:9000/data/", "part-0"), "hdfs://nn:9000/data/part-0");
        assert_eq!(join_url("hdfs://nn:9000", "x"), "hdfs://nn:9000/x");
        assert_eq!(join_url("hdfs://nn:9000/", "/x/"), "hdfs://nn:9000/x");
        assert_eq!(join_url("file:///", "x"), "file:///x");
        assert_eq!(join_url("/", "x"), "/x");
        assert_eq!(join_url("", "x"), "x");
        assert_eq!(join_url("d", "a/b"), "d/a/b");
        assert_eq!(join_url("d", ""), "d");
    }
}
