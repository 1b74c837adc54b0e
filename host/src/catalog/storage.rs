//! Storage roots: what `storage = "..."` (in `[project]`, or on a
//! `[[view]]`) names, typed: a local directory (a plain path, relative to
//! the project, or a `file:///` URL) or an S3 location (`s3://bucket/prefix`),
//! and `[project.s3]`'s options for S3-compatible stores.
//!
//! Invariant: a value is either understood exactly or refused with what
//! trellis serves; nothing that looks like a URL is ever read as a local
//! directory (before this, `s3://views/proj` was a directory named `s3:`
//! and every view of the project was silently without data). A root is
//! also rendered as a path ([`StorageUrl::root`]), which the lattice
//! renders data paths under and `storage::Key::of` strips again; for an S3
//! root that path (`s3://bucket/prefix`) names no local file and is never
//! opened as one.

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// Where views' data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUrl {
    /// A local directory: absolute, its `.` and `..` resolved by name.
    Local(PathBuf),
    S3(S3Location),
}

/// A bucket and a key prefix in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    /// A valid S3 bucket name.
    pub bucket: String,
    /// Keys under it, `/` between components; no leading or trailing `/`,
    /// no empty, `.` or `..` component; empty for the whole bucket.
    /// Percent-escapes of the URL are decoded.
    pub prefix: String,
}

/// `[project.s3]`: how to reach an S3-compatible store. Credentials are
/// never among them: they come from the standard AWS chain.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct S3Options {
    /// An `http://` or `https://` URL (MinIO, Ceph, R2, a local test
    /// server); `None`: AWS's own endpoint for the region.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Path-style requests (`endpoint/bucket/key`) rather than virtual
    /// hosts (`bucket.endpoint/key`).
    pub path_style: Option<bool>,
    /// Whether plain HTTP may be used (see [`S3Options::allows_http`]).
    pub allow_http: Option<bool>,
    /// How often a server asks the store whether awaited flags arrived
    /// (see [`S3Options::poll_interval`]).
    pub poll_interval: Option<std::time::Duration>,
    /// The bound of the local cache plugins' and engines' inputs are
    /// fetched into, in MiB (see [`S3Options::cache_bytes`]).
    pub cache_mib: Option<u64>,
    /// How long a replaced version (and a crashed publish's orphan) is
    /// kept for outside readers still listing it (see [`S3Options::grace`]).
    pub grace: Option<Duration>,
}

/// A server's poll of awaited flags on an object store, unless
/// `[project.s3] poll_interval` says otherwise: each poll costs a request
/// per flag (or per prefix that flags share), so not every second.
pub const DEFAULT_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// The input cache's bound when `cache_mib` is not set: as large as a
/// transformation's default output cap, so that one such input fits.
pub const DEFAULT_CACHE_MIB: u64 = 10 * 1024;
/// How long a replaced version is kept when `[project.s3] grace` is not set:
/// long enough for an outside reader's query that listed it to finish.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60 * 60);

impl S3Options {
    /// Whether plain HTTP is allowed: as declared, else exactly when the
    /// endpoint is an `http://` URL (`allow_http = false` with one is
    /// refused at load).
    pub fn allows_http(&self) -> bool {
        self.allow_http.unwrap_or_else(|| self.endpoint.as_deref().is_some_and(is_http))
    }

    /// How often a server polls awaited flags: as declared, else
    /// [`DEFAULT_POLL_INTERVAL`].
    pub fn poll_interval(&self) -> std::time::Duration {
        self.poll_interval.unwrap_or(DEFAULT_POLL_INTERVAL)
    }

    /// The input cache's bound in bytes: `cache_mib`, else [`DEFAULT_CACHE_MIB`].
    pub fn cache_bytes(&self) -> u64 {
        self.cache_mib.unwrap_or(DEFAULT_CACHE_MIB).saturating_mul(1 << 20)
    }

    /// How long a version stays removable-but-kept: as declared, else
    /// [`DEFAULT_GRACE`].
    pub fn grace(&self) -> Duration {
        self.grace.unwrap_or(DEFAULT_GRACE)
    }
}

/// Whether an endpoint is plain HTTP.
pub(crate) fn is_http(endpoint: &str) -> bool {
    endpoint.get(..7).is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
}

impl StorageUrl {
    /// What `storage = "text"` names; a plain path is relative to `project`
    /// (the project directory, absolute).
    pub fn parse(text: &str, project: &Path) -> Result<StorageUrl, StorageUrlError> {
        let Some((scheme, rest)) = scheme(text) else {
            return Ok(StorageUrl::Local(lexical(&project.join(text))));
        };
        let Some(rest) = rest.strip_prefix("//") else {
            return Err(StorageUrlError::NotAUrl { scheme: scheme.to_string(), text: text.to_string() });
        };
        if scheme.eq_ignore_ascii_case("s3") {
            s3(rest).map(StorageUrl::S3)
        } else if scheme.eq_ignore_ascii_case("file") {
            file(rest).map(StorageUrl::Local)
        } else {
            Err(StorageUrlError::Unsupported { scheme: scheme.to_string() })
        }
    }

    /// The root as a path, which data paths are rendered under: the
    /// directory itself, or `s3://bucket/prefix` (no trailing `/`), which
    /// names no local file.
    pub fn root(&self) -> PathBuf {
        match self {
            StorageUrl::Local(path) => path.clone(),
            StorageUrl::S3(location) => PathBuf::from(location.to_string()),
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, StorageUrl::Local(_))
    }
}

impl fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageUrl::Local(path) => write!(f, "{}", path.display()),
            StorageUrl::S3(location) => write!(f, "{location}"),
        }
    }
}

impl fmt::Display for S3Location {
    /// `s3://bucket/prefix`, or `s3://bucket` for the whole bucket.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.prefix.as_str() {
            "" => write!(f, "s3://{}", self.bucket),
            prefix => write!(f, "s3://{}/{prefix}", self.bucket),
        }
    }
}

/// Why a `storage` value is refused: what follows `KEY "value": ` on its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageUrlError {
    #[error(
        "trellis keeps views in a local directory (a path or file:///...) or on S3 (s3://bucket/prefix); {scheme}:// is not supported"
    )]
    Unsupported { scheme: String },
    #[error(
        "`{scheme}:` reads as a URL scheme, but `//` does not follow it; write s3://bucket/prefix or file:///abs/path, or `./{text}` for a local directory of that name"
    )]
    NotAUrl { scheme: String, text: String },
    #[error(
        "a file: URL names an absolute path, file:///abs/path (three slashes); write a path relative to the project plainly"
    )]
    FileNotAbsolute,
    #[error("an s3:// URL names a bucket: s3://bucket/prefix")]
    NoBucket,
    #[error("`{bucket}` is not an S3 bucket name: {why}")]
    Bucket { bucket: String, why: &'static str },
    #[error(
        "the key prefix has an empty, `.` or `..` component; S3 keys are plain names (s3://bucket/a/b, at most one trailing `/`)"
    )]
    Prefix,
    #[error("a storage URL takes no `?query` or `#fragment`")]
    QueryOrFragment,
    #[error("`%` starts an escape of two hex digits (`%20`) whose bytes are UTF-8 text")]
    Escape,
    #[error("it may not contain control characters")]
    Control,
}

/// `(scheme, rest)` when `text` starts with a URL scheme and `:` (RFC 3986:
/// a letter, then letters, digits, `+`, `-`, `.`); two characters at least,
/// so that a drive letter is not one.
fn scheme(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once(':')?;
    let mut chars = scheme.chars();
    let valid = scheme.len() >= 2
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some((scheme, rest))
}

/// What follows `s3://`.
fn s3(rest: &str) -> Result<S3Location, StorageUrlError> {
    if rest.contains(['?', '#']) {
        return Err(StorageUrlError::QueryOrFragment);
    }
    let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(StorageUrlError::NoBucket);
    }
    check_bucket(bucket).map_err(|why| StorageUrlError::Bucket { bucket: bucket.to_string(), why })?;
    let path = decode(path.strip_suffix('/').unwrap_or(path))?;
    if path.chars().any(char::is_control) {
        return Err(StorageUrlError::Control);
    }
    if !path.is_empty() && path.split('/').any(|component| matches!(component, "" | "." | "..")) {
        return Err(StorageUrlError::Prefix);
    }
    Ok(S3Location { bucket: bucket.to_string(), prefix: path })
}

/// S3's rules for a bucket name (general purpose buckets), as far as an
/// S3-compatible store shares them: the reason it breaks one.
fn check_bucket(bucket: &str) -> Result<(), &'static str> {
    if !(3..=63).contains(&bucket.len()) {
        return Err("a bucket name has 3 to 63 characters");
    }
    if !bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-') {
        return Err("a bucket name has only lowercase letters, digits, `.` and `-`");
    }
    let letter_or_digit = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    if !letter_or_digit(bucket.as_bytes().first()) || !letter_or_digit(bucket.as_bytes().last()) {
        return Err("a bucket name starts and ends with a letter or digit");
    }
    if bucket.contains("..") {
        return Err("a bucket name has no two `.` in a row");
    }
    if bucket.parse::<std::net::Ipv4Addr>().is_ok() {
        return Err("a bucket name is not an IP address");
    }
    Ok(())
}

/// What follows `file://`: an empty host and an absolute path.
fn file(rest: &str) -> Result<PathBuf, StorageUrlError> {
    if rest.contains(['?', '#']) {
        return Err(StorageUrlError::QueryOrFragment);
    }
    if !rest.starts_with('/') {
        return Err(StorageUrlError::FileNotAbsolute);
    }
    let path = decode(rest)?;
    if path.chars().any(char::is_control) {
        return Err(StorageUrlError::Control);
    }
    Ok(lexical(Path::new(&path)))
}

/// A URL path's percent-escapes decoded.
fn decode(text: &str) -> Result<String, StorageUrlError> {
    if !text.contains('%') {
        return Ok(text.to_string());
    }
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or(StorageUrlError::Escape)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(StorageUrlError::Escape);
            }
            decoded.push(u8::from_str_radix(hex, 16).map_err(|_| StorageUrlError::Escape)?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).map_err(|_| StorageUrlError::Escape)
}

/// `path` with its `.` and `..` resolved by name alone (no link is
/// followed), so that `metastore = "."` or `storage = ".."` is seen to be
/// the project directory or one that holds it.
pub(crate) fn lexical(path: &Path) -> PathBuf {
    let mut resolved = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !resolved.pop() {
                    resolved.push(component);
                }
            }
            other => resolved.push(other),
        }
    }
    resolved
}

/// The keys `[project.s3]` takes.
pub(crate) const S3_KEYS: [&str; 7] =
    ["endpoint", "region", "path_style", "allow_http", "poll_interval", "cache_mib", "grace"];

/// Whether a key of `[project.s3]` would hold a credential, which never
/// goes in the project file.
pub(crate) fn is_credential(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["secret", "key_id", "access_key", "token", "password", "credential"].iter().any(|word| key.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<StorageUrl, String> {
        StorageUrl::parse(text, Path::new("/p/proj")).map_err(|e| e.to_string())
    }

    fn s3(bucket: &str, prefix: &str) -> StorageUrl {
        StorageUrl::S3(S3Location { bucket: bucket.into(), prefix: prefix.into() })
    }

    fn local(path: &str) -> StorageUrl {
        StorageUrl::Local(PathBuf::from(path))
    }

    #[test]
    fn the_forms_trellis_serves_are_understood_exactly() {
        let accepted = [
            ("data", local("/p/proj/data")),
            ("", local("/p/proj")),
            ("../shared/views", local("/p/shared/views")),
            ("/srv/views", local("/srv/views")),
            ("./s3:/x", local("/p/proj/s3:/x")),
            ("data/a:b", local("/p/proj/data/a:b")),
            ("C:/views", local("/p/proj/C:/views")),
            ("file:///srv/views", local("/srv/views")),
            ("FILE:///srv/views/", local("/srv/views")),
            ("file:///srv/my%20views/../x", local("/srv/x")),
            ("s3://views", s3("views", "")),
            ("s3://views/", s3("views", "")),
            ("s3://views/proj", s3("views", "proj")),
            ("s3://views/proj/more/", s3("views", "proj/more")),
            ("S3://my.bucket-2/a%20b/c", s3("my.bucket-2", "a b/c")),
            ("s3://abc/a%2Fb", s3("abc", "a/b")),
            ("s3://0ab", s3("0ab", "")),
            (&format!("s3://{}", "a".repeat(63)), s3(&"a".repeat(63), "")),
        ];
        for (text, expected) in accepted {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn roots_render_as_paths_that_data_paths_go_under() {
        let root = s3("views", "proj").root();
        assert_eq!(root, PathBuf::from("s3://views/proj"));
        assert_eq!(root.join("shop/2015").to_str(), Some("s3://views/proj/shop/2015"));
        assert_eq!(root.join("shop/2015").strip_prefix(&root).unwrap(), Path::new("shop/2015"));
        assert_eq!(s3("views", "").root(), PathBuf::from("s3://views"));
        assert_eq!(local("/srv/views").root(), PathBuf::from("/srv/views"));
        assert_eq!(s3("views", "a b").to_string(), "s3://views/a b");
    }

    #[test]
    fn what_trellis_cannot_serve_is_refused_saying_what_it_serves() {
        let unsupported = |scheme: &str| {
            format!(
                "trellis keeps views in a local directory (a path or file:///...) or on S3 (s3://bucket/prefix); {scheme}:// is not supported"
            )
        };
        for (text, scheme) in [
            ("gs://b/p", "gs"),
            ("az://container/p", "az"),
            ("abfs://c@account.dfs.core.windows.net/p", "abfs"),
            ("hdfs://namenode:8020/views", "hdfs"),
            ("http://example.com/views", "http"),
            ("https://example.com/views", "https"),
            ("s3a://views/proj", "s3a"),
            ("s3n://views/proj", "s3n"),
            ("memory://", "memory"),
        ] {
            assert_eq!(parse(text), Err(unsupported(scheme)), "{text}");
        }
        let bucket = |name: &str, why: &str| Err(format!("`{name}` is not an S3 bucket name: a bucket name {why}"));
        let refused = [
            ("s3://", Err("an s3:// URL names a bucket: s3://bucket/prefix".to_string())),
            ("s3:///proj", Err("an s3:// URL names a bucket: s3://bucket/prefix".to_string())),
            ("s3://ab", bucket("ab", "has 3 to 63 characters")),
            (&format!("s3://{}", "a".repeat(64)), bucket(&"a".repeat(64), "has 3 to 63 characters")),
            ("s3://My_Bucket/p", bucket("My_Bucket", "has only lowercase letters, digits, `.` and `-`")),
            ("s3://user@views/p", bucket("user@views", "has only lowercase letters, digits, `.` and `-`")),
            ("s3://views:9000/p", bucket("views:9000", "has only lowercase letters, digits, `.` and `-`")),
            ("s3://-views", bucket("-views", "starts and ends with a letter or digit")),
            ("s3://views.", bucket("views.", "starts and ends with a letter or digit")),
            ("s3://a..b", bucket("a..b", "has no two `.` in a row")),
            ("s3://192.168.1.1", bucket("192.168.1.1", "is not an IP address")),
            ("s3://views//proj", Err(StorageUrlError::Prefix.to_string())),
            ("s3://views/a/./b", Err(StorageUrlError::Prefix.to_string())),
            ("s3://views/a/..", Err(StorageUrlError::Prefix.to_string())),
            ("s3://views/a/%2E%2E/b", Err(StorageUrlError::Prefix.to_string())),
            ("s3://views/proj//", Err(StorageUrlError::Prefix.to_string())),
            ("s3://views/a%0Ab", Err(StorageUrlError::Control.to_string())),
            ("s3://views/a%zz", Err(StorageUrlError::Escape.to_string())),
            ("s3://views/a%ff", Err(StorageUrlError::Escape.to_string())),
            ("s3://views/p?versionId=1", Err(StorageUrlError::QueryOrFragment.to_string())),
            ("s3://views/p#top", Err(StorageUrlError::QueryOrFragment.to_string())),
            ("file://relative/dir", Err(StorageUrlError::FileNotAbsolute.to_string())),
            ("file://localhost/srv", Err(StorageUrlError::FileNotAbsolute.to_string())),
            ("file://", Err(StorageUrlError::FileNotAbsolute.to_string())),
            ("file:///srv?x", Err(StorageUrlError::QueryOrFragment.to_string())),
        ];
        for (text, expected) in refused {
            assert_eq!(parse(text), expected, "{text}");
        }
        assert_eq!(
            parse("s3:/views/proj"),
            Err("`s3:` reads as a URL scheme, but `//` does not follow it; write s3://bucket/prefix or \
                 file:///abs/path, or `./s3:/views/proj` for a local directory of that name"
                .to_string())
        );
        assert!(parse("file:/srv").is_err());
        assert!(parse("backup:2024").is_err());
    }

    #[test]
    fn plain_http_is_allowed_as_declared_else_by_the_endpoint() {
        let options = |endpoint: Option<&str>, allow_http| S3Options {
            endpoint: endpoint.map(str::to_string),
            allow_http,
            ..S3Options::default()
        };
        assert!(options(Some("http://127.0.0.1:9000"), None).allows_http());
        assert!(options(Some("HTTP://minio:9000"), None).allows_http());
        assert!(!options(Some("https://minio"), None).allows_http());
        assert!(!options(None, None).allows_http());
        assert!(options(Some("https://minio"), Some(true)).allows_http());
    }

    /// The project's problems as `trellis validate` prints them (file and
    /// line first), or the catalog.
    fn load(text: &str, root: &Path) -> Result<crate::catalog::Catalog, Vec<String>> {
        crate::catalog::parse(text, root).map_err(|e| match e {
            crate::catalog::LoadError::Invalid(diagnostics) => diagnostics.iter().map(ToString::to_string).collect(),
            other => vec![other.to_string()],
        })
    }

    const VIEW: &str = "[[view]]\nname = \"t.raw/In\"\n";

    #[test]
    fn a_refused_project_storage_is_one_line_at_its_key() {
        let text = format!("[project]\nname = \"p\"\nstorage = \"gs://b/p\"\n\n{VIEW}");
        assert_eq!(
            load(&text, Path::new("/p")).unwrap_err(),
            ["trellis.toml:3: project.storage \"gs://b/p\": trellis keeps views in a local directory (a path or \
              file:///...) or on S3 (s3://bucket/prefix); gs:// is not supported"]
        );
        let text = format!("[project]\nstorage = \"s3://Views/p\"\n\n{VIEW}");
        assert_eq!(
            load(&text, Path::new("/p")).unwrap_err(),
            ["trellis.toml:2: project.storage \"s3://Views/p\": `Views` is not an S3 bucket name: a bucket name has \
              only lowercase letters, digits, `.` and `-`"]
        );
    }

    #[test]
    fn an_s3_project_parses_with_its_options_and_renders_its_root_as_a_path() {
        let text = format!(
            "[project]\nname = \"p\"\nstorage = \"s3://views/proj/\"\n\n[project.s3]\nendpoint = \"http://127.0.0.1:9000\"\n\
             region = \"eu-west-1\"\npath_style = true\n\n{VIEW}"
        );
        let catalog = load(&text, Path::new("/p")).unwrap();
        let settings = &catalog.settings;
        assert_eq!(settings.storage_url, s3("views", "proj"));
        assert_eq!(settings.storage, PathBuf::from("s3://views/proj"));
        assert_eq!(settings.storage_line, Some(3));
        assert_eq!(
            settings.s3,
            S3Options {
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: Some("eu-west-1".into()),
                path_style: Some(true),
                allow_http: None,
                poll_interval: None,
                cache_mib: None,
                grace: None,
            }
        );
        assert!(settings.s3.allows_http());
        assert_eq!(settings.s3.cache_bytes(), DEFAULT_CACHE_MIB << 20);
        assert_eq!(settings.s3.grace(), DEFAULT_GRACE);
        // A local project is what it was, and served.
        let local = load(VIEW, Path::new("/p")).unwrap();
        assert_eq!(local.settings.storage, PathBuf::from("/p/data"));
        assert_eq!(local.settings.storage_url, StorageUrl::Local("/p/data".into()));
        assert_eq!((local.settings.storage_line, &local.settings.s3), (None, &S3Options::default()));
        let file = load(&format!("[project]\nstorage = \"file:///srv/views\"\n{VIEW}"), Path::new("/p")).unwrap();
        assert_eq!(file.settings.storage, PathBuf::from("/srv/views"));
    }

    #[test]
    fn s3_options_refuse_credentials_unknown_keys_and_plain_http_when_it_is_not_allowed() {
        let with = |options: &str| {
            load(&format!("[project]\nstorage = \"s3://views\"\n\n[project.s3]\n{options}\n{VIEW}"), Path::new("/p"))
        };
        let chain = "credentials never go in trellis.toml; trellis takes them from the standard AWS chain \
                     (environment, profile, web identity)";
        let secret = "wJalrXUtnFEMI/K7MDENG";
        let refused = with(&format!(
            "access_key_id = \"AKIA\"\nsecret_access_key = \"{secret}\"\nsession_token = \"t\"\naws_secret = \"s\"\nmy_key_id = 1\n"
        ))
        .unwrap_err();
        assert_eq!(
            refused,
            [
                format!("trellis.toml:5: project.s3.access_key_id: {chain}"),
                format!("trellis.toml:8: project.s3.aws_secret: {chain}"),
                format!("trellis.toml:9: project.s3.my_key_id: {chain}"),
                format!("trellis.toml:6: project.s3.secret_access_key: {chain}"),
                format!("trellis.toml:7: project.s3.session_token: {chain}"),
            ]
        );
        assert!(refused.iter().all(|line| !line.contains(secret)), "a secret is never echoed");
        assert_eq!(
            with("regoin = \"us-east-1\"\n").unwrap_err(),
            [
                "trellis.toml:5: project.s3: unknown field `regoin`, expected one of `endpoint`, `region`, `path_style`, \
              `allow_http`, `poll_interval`, `cache_mib`, `grace`; did you mean `region`?"
            ]
        );
        assert_eq!(
            with("poll_interval = \"5s\"\n").map(|catalog| catalog.settings.s3.poll_interval()),
            Ok(std::time::Duration::from_secs(5))
        );
        assert_eq!(
            with("poll_interval = \"10ms\"\n").unwrap_err(),
            ["trellis.toml:5: project.s3.poll_interval \"10ms\" is under 100ms"]
        );
        assert_eq!(
            with("poll_interval = 5\n").unwrap_err(),
            ["trellis.toml:5: project.s3.poll_interval must be a string, not integer"]
        );
        assert_eq!(
            with("endpoint = \"http://minio:9000\"\nallow_http = false\n").unwrap_err(),
            [
                "trellis.toml:6: project.s3.allow_http is false, but endpoint \"http://minio:9000\" is plain HTTP; use an \
              https:// endpoint, or allow_http = true"
            ]
        );
        assert_eq!(
            with("endpoint = \"minio:9000\"\npath_style = \"yes\"\nregion = \"\"\n").unwrap_err(),
            [
                "trellis.toml:5: project.s3.endpoint \"minio:9000\": must be an http:// or https:// URL",
                "trellis.toml:6: project.s3.path_style must be true or false, not string",
                "trellis.toml:7: project.s3.region \"\" must be a region's name, like `us-east-1`",
            ]
        );
        // The input cache's bound: a positive whole number of MiB.
        let bound = "must be a number of MiB from 1 to 1099511627776";
        for (value, refused) in [
            ("0", format!("{bound}, not 0")),
            ("-3", format!("{bound}, not -3")),
            ("1099511627777", format!("{bound}, not 1099511627777")),
            ("\"1G\"", "must be a whole number of MiB, not string".to_string()),
            ("1.5", "must be a whole number of MiB, not float".to_string()),
        ] {
            let expected = [format!("trellis.toml:5: project.s3.cache_mib {refused}")];
            assert_eq!(with(&format!("cache_mib = {value}\n")).unwrap_err(), expected, "{value}");
        }
        assert_eq!(with("cache_mib = 512\n").unwrap().settings.s3.cache_bytes(), 512 << 20);
        let with_user = with("endpoint = \"https://me:pw@minio\"\n").unwrap_err();
        assert_eq!(with_user.len(), 1);
        assert!(
            with_user[0]
                .starts_with("trellis.toml:5: project.s3.endpoint \"https://me:pw@minio\": may not hold credentials")
        );
        assert_eq!(
            with("grace = \"soon\"\n").unwrap_err(),
            ["trellis.toml:5: project.s3.grace \"soon\": not a duration (like `1h` or `30min`): expected number at 0"]
        );
        assert_eq!(
            with("grace = 60\n").unwrap_err(),
            ["trellis.toml:5: project.s3.grace must be a string, not integer"]
        );
        let accepted =
            with("endpoint = \"https://minio.example:9000\"\nallow_http = false\ngrace = \"90min\"\n").unwrap();
        assert!(!accepted.settings.s3.allows_http());
        assert_eq!(accepted.settings.s3.grace(), Duration::from_secs(90 * 60));
        // Options for a store no root is on would do nothing: refused; a
        // view type's S3 root is one they serve.
        let local = format!("[project]\nname = \"p\"\n\n[project.s3]\nregion = \"us-east-1\"\n\n{VIEW}");
        assert_eq!(
            load(&local, Path::new("/p")).unwrap_err(),
            [
                "trellis.toml:4: project.s3: every storage root is a local directory, so these options would do nothing; \
              remove [project.s3], or set storage to an s3:// URL"
            ]
        );
        let on_type = local.replace(VIEW, &format!("{VIEW}storage = \"s3://raw-deliveries/in\"\n"));
        let catalog = load(&on_type, Path::new("/p")).unwrap();
        assert_eq!(catalog.settings.s3.region.as_deref(), Some("us-east-1"));
    }

    #[test]
    fn a_view_types_own_root_is_parsed_checked_and_refused_until_served() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("orders.csv"), "").unwrap();
        let typed = |storage: &str| {
            format!(
                "[project]\nstorage = \"data\"\n\n[[view]]\nname = \"t.raw/In\"\nstorage = \"{storage}\"\n\n\
                 [[view]]\nname = \"t.mart/Out\"\n"
            )
        };
        let at = |storage: &str, why: &str| vec![format!("trellis.toml:6: t.raw/In: storage \"{storage}\"{why}")];
        let refused = |storage: &str| load(&typed(storage), root).unwrap_err();
        assert_eq!(
            refused("hdfs://nn/raw"),
            at(
                "hdfs://nn/raw",
                ": trellis keeps views in a local directory (a path or file:///...) or on S3 (s3://bucket/prefix); \
                 hdfs:// is not supported"
            )
        );
        assert_eq!(refused("file://raw"), at("file://raw", &format!(": {}", StorageUrlError::FileNotAbsolute)));
        assert_eq!(
            refused("orders.csv"),
            at("orders.csv", " is a file; a storage root is a directory (created when missing)")
        );
        let own = " must be a directory of its own, holding neither the project nor the metastore";
        assert_eq!(refused("."), at(".", own));
        assert_eq!(refused(".trellis"), at(".trellis", own));
        assert_eq!(
            refused("data/.trellis-staging/raw"),
            at(
                "data/.trellis-staging/raw",
                " is under `.trellis-staging` in project.storage: names starting with `.` at the top of a storage root \
                 are reserved for trellis"
            )
        );
        let outside = tempfile::tempdir().unwrap();
        let above = outside.path().join("views");
        let project = above.join("proj");
        std::fs::create_dir_all(&project).unwrap();
        let text = format!(
            "[project]\nstorage = \"{}\"\n\n[[view]]\nname = \"t.raw/In\"\nstorage = \"{}\"\n",
            above.join("data").display(),
            above.display()
        );
        let holds = load(&text, &outside.path().join("elsewhere")).unwrap_err();
        assert_eq!(
            holds,
            [format!(
                "trellis.toml:6: t.raw/In: storage \"{}\" holds project.storage; give the type a root beside it, or \
                 leave storage out for the project's",
                above.display()
            )]
        );

        // Accepted, and rendered as the project's root is.
        let catalog = load(&typed("s3://raw-deliveries/shop"), root).unwrap();
        let view_type = catalog.find("t.raw/In").unwrap();
        assert_eq!(view_type.storage, Some(s3("raw-deliveries", "shop")));
        assert_eq!(catalog.storage_root(view_type), Path::new("s3://raw-deliveries/shop"));
        assert_eq!(view_type.storage_line, Some(6));
        let other = catalog.find("t.mart/Out").unwrap();
        assert_eq!((&other.storage, catalog.storage_root(other)), (&None, root.join("data").as_path()));
        let beside = load(&typed("raw"), root).unwrap();
        assert_eq!(beside.storage_root(beside.find("t.raw/In").unwrap()), root.join("raw").as_path());
    }

    #[test]
    fn paths_are_compared_under_their_roots() {
        let text = "[project]\nstorage = \"data\"\n\n[[view]]\nname = \"t.raw/In\"\npath = \"raw/sub\"\n\n\
                    [[view]]\nname = \"t.raw/Nested\"\nstorage = \"data/raw\"\npath = \"sub/x\"\n\n\
                    [[view]]\nname = \"t.mart/Apart\"\nstorage = \"s3://marts\"\npath = \"raw/sub\"\n";
        assert_eq!(
            load(text, Path::new("/p")).unwrap_err(),
            ["trellis.toml:8: t.raw/In and t.raw/Nested could share data: paths `/p/data/raw/sub` and \
              `/p/data/raw/sub/x` overlap; give each its own directory"]
        );
        // The same path under two roots is two directories.
        let apart = "[[view]]\nname = \"t.raw/In\"\npath = \"raw\"\n\n[[view]]\nname = \"t.mart/Out\"\n\
                     storage = \"s3://marts\"\npath = \"raw\"\n";
        assert!(load(apart, Path::new("/p")).is_ok());
    }
}
