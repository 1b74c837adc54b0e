//! An object store (S3 and S3-compatible stores, or any `object_store`
//! implementation) as a [`ViewStore`]: publishing without a rename, by a
//! version written under a prefix of its own and committed with one
//! conditional write of a pointer.
//!
//! A view's data key `K` holds, in the bucket:
//!
//! - `K/_v/<version>/...`: each published version's files, under a prefix
//!   no other publish uses (`<version>` is the commit's millisecond and 64
//!   random bits);
//! - `K/_CURRENT`: the pointer, a small JSON object naming the current
//!   version. It is written by one conditional PUT: `If-None-Match: *` for
//!   the first version, `If-Match` the ETag read before the upload for the
//!   next. Its body names the version, so it differs on every commit: a
//!   single-part ETag is the MD5 of the body, and two commits of identical
//!   bytes would otherwise both pass `If-Match` (ABA);
//! - `K/<flag>` (the type's done flag, `_SUCCESS`): written after the
//!   commit for outside readers, its body the version's id. An empty flag
//!   rewritten keeps its ETag, and Last-Modified has one-second resolution:
//!   the id makes every flag written a new object.
//!
//! - `K/_v/<other version>/...`: versions replaced, kept for the grace
//!   period (the pointer remembers when it replaced each), and uploads
//!   never committed (a crash, a lost race), kept until older than the
//!   grace; each commit's sweep of its view and `trellis gc` remove what
//!   `removable` says.
//!
//! Every request gives up on a dead endpoint in seconds (see
//! [`ObjectDir::s3_from`]), and [`ObjectDir::probe`] proves a root
//! reachable and writable in one conditional create and one delete.
//!
//! Invariant: trellis reads a view through its pointer only, so a reader
//! sees a whole version or the one before, never a mix; of two writers
//! publishing one key from the same pointer, exactly one commits, and the
//! other gets an `AlreadyExists` error and leaves nothing of its version.
//! A conditional write answered 409 (as AWS may under contention) or
//! refused is settled by reading the pointer again: it names our version
//! (we won) or another's (we lost). A key without a pointer (external data
//! delivered by others) is read and listed as it is.
//!
//! The trait is synchronous and called from tokio workers and blocking
//! threads alike: every request runs on the store's own small runtime and
//! is waited for on a channel (`Runtime::block_on` inside a runtime panics).

use std::collections::HashSet;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::{Component, Path as LocalPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, RetryConfig,
    UpdateVersion, WriteMultipart,
};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use super::cache::{Cache, Fetch};
use super::counted::LIST_PAGE;
use super::{Key, Listed, LocalDir, LocalInput, Sighting, Staged, ViewStore, Walk};
use crate::metastore::FlagIdentity;

/// The pointer's name inside a view's data key.
pub const POINTER: &str = "_CURRENT";
/// The directory of versions inside a view's data key.
pub const VERSIONS: &str = "_v";
const POINTER_FORMAT: u32 = 1;

/// Files above this size are uploaded in parts of this size.
const MULTIPART_CHUNK: usize = 8 * 1024 * 1024;
/// Files uploaded at once by a publish, and parts of one file in flight.
const UPLOADS_IN_FLIGHT: usize = 8;
const PARTS_IN_FLIGHT: usize = 4;

/// Where a project's views live on S3 or an S3-compatible store.
/// Credentials are never here: they come from the standard AWS chain
/// (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, web
/// identity, the container's or the instance's credentials).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Config {
    pub bucket: String,
    /// The key prefix every view's key is under (`proj/marts`), or empty.
    pub prefix: String,
    /// An S3-compatible store's endpoint (`http://127.0.0.1:9000`); AWS's
    /// own when unset (or `AWS_ENDPOINT`).
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Requests name the bucket in the path (`endpoint/bucket/key`), as
    /// most S3-compatible stores want, rather than in the host name.
    pub path_style: bool,
    /// Plain `http://` endpoints are allowed (a store on loopback).
    pub allow_http: bool,
}

impl S3Config {
    /// `s3://bucket/prefix`, as the user wrote the root.
    pub fn url(&self) -> String {
        let prefix = self.prefix.trim_matches('/');
        if prefix.is_empty() { format!("s3://{}", self.bucket) } else { format!("s3://{}/{prefix}", self.bucket) }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{root}: {reason}")]
    Open { root: String, reason: String },
}

/// The view storage in an object store, with a local directory for staging.
pub struct ObjectDir {
    store: Arc<dyn ObjectStore>,
    /// What has been sent to `store` (every request goes through a count).
    requests: super::counted::RequestCounter,
    /// The root as configured (`s3://bucket/prefix`): what keys are relative to.
    root: PathBuf,
    /// The bucket as messages name it (`s3://bucket`).
    bucket: String,
    /// Where in the bucket the root is.
    prefix: Path,
    /// Where `stage` makes its local directories (a plugin writes into a
    /// real local directory), cleaned as a local root's staging is.
    local: LocalDir,
    /// Where plugins' and engines' inputs are fetched to ([`ViewStore::local_input`]).
    cache: Cache,
    /// The store's own runtime, shut down without waiting when dropped
    /// (a drop may happen inside another runtime, where waiting panics).
    runtime: Option<tokio::runtime::Runtime>,
    /// How long a replaced version is kept for outside readers ([`ObjectDir::with_grace`]).
    grace: Duration,
}

impl std::fmt::Debug for ObjectDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectDir").field("root", &self.root).field("store", &self.store.to_string()).finish()
    }
}

impl Drop for ObjectDir {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// What a pointer says: the version that is current, and the versions
/// it replaced within the grace period, each with when (so that a sweep
/// keeps a version its readers may still list for the grace after it was
/// replaced, not after its successor in id order began uploading, which a
/// crashed upload's orphan can put long before). Absent in a pointer of
/// before; readers of before ignore it.
#[derive(Debug, Serialize, Deserialize)]
struct PointerBody {
    format: u32,
    version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    replaced: Vec<Replaced>,
}

/// A version a commit replaced, and when (milliseconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Replaced {
    version: String,
    at: u64,
}

/// The most replaced versions a pointer remembers (a view published every
/// few seconds would otherwise grow it without bound): an older one is
/// judged by its successor's id instead.
const REMEMBERED: usize = 64;

/// A pointer as read: the version it names, and what a conditional write
/// over it must match.
#[derive(Debug, Clone)]
struct Current {
    version: String,
    e_tag: Option<String>,
    object_version: Option<String>,
    replaced: Vec<Replaced>,
}

/// A version uploaded and not committed yet ([`ObjectDir::upload`]).
#[derive(Debug)]
pub struct Pending {
    data: Path,
    version: String,
    /// The pointer the upload started from: the commit must replace exactly it.
    base: Option<Current>,
    uploaded: Vec<Path>,
}

impl Pending {
    /// The version's id, the name of its prefix under `<key>/_v/`.
    pub fn version(&self) -> &str {
        &self.version
    }
}

impl ObjectDir {
    /// The view storage in the S3 bucket `config` names, with the AWS
    /// credential chain read from this process's environment (`AWS_*`).
    pub fn s3(config: &S3Config, local: &LocalPath) -> Result<ObjectDir, Error> {
        ObjectDir::s3_from(config, local, std::env::vars())
    }

    /// The same, with the credential chain (and any other `AWS_*`
    /// setting) read from `environment` instead, as a child process
    /// given it would: `config`'s own options win over it.
    pub fn s3_from(
        config: &S3Config,
        local: &LocalPath,
        environment: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ObjectDir, Error> {
        let root = config.url();
        if config.bucket.is_empty() {
            return Err(Error::Open { root, reason: "no bucket named".into() });
        }
        crate::tls::install_crypto_provider();
        // Every request (the start's probe, a publish's uploads, a listing)
        // gives up on a dead endpoint in seconds, not in object_store's
        // default budget (10 retries within 3 minutes, backoff up to 15 s):
        // a connection is given 3 s (AWS's own advice is 3.1 s), a failed
        // request (connection refused or reset, a 5xx, a timeout of a safe
        // request) is retried at most 4 times with backoff from 100 ms up
        // to 2 s, and no retry starts 10 s after the first attempt. A
        // refused connection so fails in about 2 s, a black-holed one in
        // about 15 s; a request that has started still has its 30 s
        // (object_store's default) to answer.
        let client = ClientOptions::new().with_connect_timeout(Duration::from_secs(3));
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 4,
            retry_timeout: Duration::from_secs(10),
        };
        // Before the environment's settings, which may refine the client's.
        let mut builder = AmazonS3Builder::new().with_client_options(client).with_retry(retry);
        for (name, value) in super::profile::with_profile(environment) {
            if name.starts_with("AWS_")
                && let Ok(key) = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>()
            {
                builder = builder.with_config(key, value);
            }
        }
        builder = builder
            .with_bucket_name(&config.bucket)
            .with_virtual_hosted_style_request(!config.path_style)
            .with_allow_http(config.allow_http)
            .with_conditional_put(S3ConditionalPut::ETagMatch);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &config.region {
            builder = builder.with_region(region);
        }
        let store = builder.build().map_err(|e| Error::Open { root: root.clone(), reason: one_line(&e) })?;
        ObjectDir::new(Arc::new(store), &format!("s3://{}", config.bucket), &config.prefix, local)
    }

    /// The view storage in `store`, whose objects messages name as under
    /// `bucket` (`s3://name`, `memory://test`), its root `prefix` there.
    pub fn new(store: Arc<dyn ObjectStore>, bucket: &str, prefix: &str, local: &LocalPath) -> Result<ObjectDir, Error> {
        let prefix = prefix.trim_matches('/');
        let root = if prefix.is_empty() { bucket.to_string() } else { format!("{bucket}/{prefix}") };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("trellis-object-store")
            .enable_all()
            .build()
            .map_err(|e| Error::Open { root: root.clone(), reason: format!("cannot start its runtime: {e}") })?;
        let counted = super::counted::Counted::new(store);
        let requests = counted.counter();
        Ok(ObjectDir {
            store: Arc::new(counted),
            requests,
            root: PathBuf::from(root),
            bucket: bucket.trim_end_matches('/').to_string(),
            prefix: Path::from_iter(prefix.split('/').filter(|part| !part.is_empty())),
            local: LocalDir::new(local),
            cache: Cache::new(&local.join(".trellis-cache"), crate::catalog::S3Options::default().cache_bytes()),
            runtime: Some(runtime),
            grace: crate::catalog::storage::DEFAULT_GRACE,
        })
    }

    /// The requests sent to the store so far.
    pub fn requests(&self) -> super::counted::Requests {
        self.requests.sent()
    }

    /// Runs `work` on the store's runtime and waits for it on this thread.
    fn run<T: Send + 'static>(&self, work: impl Future<Output = io::Result<T>> + Send + 'static) -> io::Result<T> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let runtime = self.runtime.as_ref().expect("only a drop takes the runtime");
        runtime.spawn(async move {
            let _ = sender.send(work.await);
        });
        receiver.recv().map_err(|_| io::Error::other(format!("{}: the object store's runtime stopped", self.bucket)))?
    }

    /// Where `key` is in the bucket; a key outside the root has no place.
    fn location(&self, key: &Key) -> io::Result<Path> {
        let mut location = self.prefix.clone();
        for component in key.as_path().components() {
            match component {
                Component::CurDir => {}
                Component::Normal(part) => {
                    let part = part.to_str().ok_or_else(|| {
                        invalid(format!("{}: {} is not UTF-8", self.root.display(), key.as_path().display()))
                    })?;
                    location = location.join(part);
                }
                _ => {
                    return Err(invalid(format!(
                        "{} is outside the object store's root {}",
                        key.as_path().display(),
                        self.root.display()
                    )));
                }
            }
        }
        Ok(location)
    }

    fn context(&self) -> Context {
        Context { store: self.store.clone(), bucket: self.bucket.clone() }
    }

    /// The version the pointer at `key` names, if it has one.
    pub fn current_version(&self, key: &Key) -> io::Result<Option<String>> {
        let data = self.location(key)?;
        let context = self.context();
        Ok(self.run(async move { context.pointer(&data).await })?.map(|current| current.version))
    }

    /// The first half of a publish: reads the pointer at `key`, then
    /// uploads every file of `staged` under a new version's prefix. The
    /// local directory is removed once uploaded (or on an error, with what
    /// was uploaded of it).
    pub fn upload(&self, staged: Staged, key: &Key) -> io::Result<Pending> {
        let data = self.location(key)?;
        let files = staged_files(staged.path())?;
        let context = self.context();
        let pending = self.run(async move {
            let base = context.pointer(&data).await?;
            let version = new_version();
            let prefix = data.clone().join(VERSIONS).join(version.as_str());
            let uploaded = context.upload_all(&prefix, files).await?;
            Ok(Pending { data, version, base, uploaded })
        });
        drop(staged);
        pending
    }

    /// The second half: makes `pending` current with one conditional
    /// write of the pointer, then writes `done_flag` (unless empty) and
    /// removes the view's versions that are removable now (see
    /// `removable`: the one it replaced stays for the grace period).
    /// Another writer's commit since the upload began is an
    /// `AlreadyExists` error, and nothing of this version is left.
    pub fn commit(&self, pending: Pending, done_flag: &str) -> io::Result<()> {
        let context = self.context();
        let flag = if done_flag.is_empty() { None } else { Some(pending.data.clone().join(done_flag)) };
        let (data, grace) = (pending.data.clone(), self.grace);
        self.run(async move {
            context.commit(pending, flag, grace).await?;
            // Committed: what the sweep cannot do is for `trellis gc`.
            if let Err(e) = context.sweep_view(&data, now_millis(), grace, false).await {
                tracing::warn!("{e}; `trellis gc` will collect what is left");
            }
            Ok(())
        })
    }
}

/// What the async half needs of the store, owned, for its tasks.
#[derive(Clone)]
struct Context {
    store: Arc<dyn ObjectStore>,
    bucket: String,
}

impl Context {
    /// A one-line error naming what was done to which object, and why it failed.
    fn failed(&self, what: &str, location: &Path, e: &object_store::Error) -> io::Error {
        let kind = match e {
            object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
            object_store::Error::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
            object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
                io::ErrorKind::PermissionDenied
            }
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, format!("cannot {what} {}/{location}: {}", self.bucket, one_line(e)))
    }

    /// The pointer at `data`, if there is one.
    async fn pointer(&self, data: &Path) -> io::Result<Option<Current>> {
        let location = data.clone().join(POINTER);
        let got = match self.store.get(&location).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.failed("read", &location, &e)),
        };
        let (e_tag, object_version) = (got.meta.e_tag.clone(), got.meta.version.clone());
        let bytes = got.bytes().await.map_err(|e| self.failed("read", &location, &e))?;
        match serde_json::from_slice::<PointerBody>(&bytes) {
            Ok(body) if body.format == POINTER_FORMAT && is_version(&body.version) => {
                let replaced = body.replaced.into_iter().filter(|old| is_version(&old.version)).collect();
                Ok(Some(Current { version: body.version, e_tag, object_version, replaced }))
            }
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}/{location} is not a trellis version pointer", self.bucket),
            )),
        }
    }

    /// Uploads `files` under `prefix`, a few at once; on an error, removes
    /// what was uploaded.
    async fn upload_all(&self, prefix: &Path, files: Vec<StagedFile>) -> io::Result<Vec<Path>> {
        let uploads = files.into_iter().map(|file| {
            let location = file.name.split('/').fold(prefix.clone(), |location, part| location.join(part));
            let context = self.clone();
            async move { context.upload_one(&file, &location).await.map(|()| location) }
        });
        let results: Vec<io::Result<Path>> =
            futures_util::stream::iter(uploads).buffer_unordered(UPLOADS_IN_FLIGHT).collect().await;
        let mut uploaded = Vec::with_capacity(results.len());
        let mut first_error = None;
        for result in results {
            match result {
                Ok(location) => uploaded.push(location),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        match first_error {
            None => Ok(uploaded),
            Some(e) => {
                self.delete_quietly(uploaded).await;
                Err(e)
            }
        }
    }

    async fn upload_one(&self, file: &StagedFile, location: &Path) -> io::Result<()> {
        let read_failed = |e: io::Error| io::Error::new(e.kind(), format!("cannot read {}: {e}", file.path.display()));
        if file.size <= MULTIPART_CHUNK as u64 {
            let bytes = tokio::fs::read(&file.path).await.map_err(read_failed)?;
            self.store.put(location, bytes.into()).await.map_err(|e| self.failed("write", location, &e))?;
            return Ok(());
        }
        let upload = self.store.put_multipart(location).await.map_err(|e| self.failed("write", location, &e))?;
        let mut parts = WriteMultipart::new_with_chunk_size(upload, MULTIPART_CHUNK);
        let mut source = tokio::fs::File::open(&file.path).await.map_err(read_failed)?;
        let mut chunk = vec![0; MULTIPART_CHUNK];
        loop {
            let read = match source.read(&mut chunk).await {
                Ok(0) => break,
                Ok(read) => read,
                Err(e) => {
                    let _ = parts.abort().await;
                    return Err(read_failed(e));
                }
            };
            if let Err(e) = parts.wait_for_capacity(PARTS_IN_FLIGHT).await {
                let _ = parts.abort().await;
                return Err(self.failed("write", location, &e));
            }
            parts.write(&chunk[..read]);
        }
        parts.finish().await.map_err(|e| self.failed("write", location, &e))?;
        Ok(())
    }

    async fn commit(&self, pending: Pending, flag: Option<Path>, grace: Duration) -> io::Result<()> {
        let pointer = pending.data.clone().join(POINTER);
        let now = now_millis();
        let grace_millis = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        let replaced = match &pending.base {
            None => Vec::new(),
            Some(base) => {
                let mut replaced: Vec<Replaced> = base
                    .replaced
                    .iter()
                    .filter(|old| now.saturating_sub(old.at) <= grace_millis && old.version != pending.version)
                    .cloned()
                    .collect();
                replaced.push(Replaced { version: base.version.clone(), at: now });
                let excess = replaced.len().saturating_sub(REMEMBERED);
                replaced.drain(..excess);
                replaced
            }
        };
        let body = PointerBody { format: POINTER_FORMAT, version: pending.version.clone(), replaced };
        let body = serde_json::to_vec(&body).map_err(io::Error::other)?;
        let mode = match &pending.base {
            None => PutMode::Create,
            Some(base) => {
                PutMode::Update(UpdateVersion { e_tag: base.e_tag.clone(), version: base.object_version.clone() })
            }
        };
        let options = PutOptions { mode, ..PutOptions::default() };
        if let Err(e) = self.store.put_opts(&pointer, body.into(), options).await {
            // Refused, answered 409, or lost on the way: only the pointer
            // says whether this commit is the one that happened.
            let now = self.pointer(&pending.data).await;
            match now {
                Ok(Some(now)) if now.version == pending.version => {}
                Ok(now) => {
                    self.delete_quietly(pending.uploaded).await;
                    let contended = matches!(
                        e,
                        object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }
                    );
                    let base = pending.base.as_ref().map(|base| &base.version);
                    return Err(match now {
                        Some(now) if contended && Some(&now.version) != base => io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            format!(
                                "{}/{}: another writer committed this view first (version {}); version {} is withdrawn",
                                self.bucket, pending.data, now.version, pending.version
                            ),
                        ),
                        _ => self.failed("commit", &pointer, &e),
                    });
                }
                // Not known whether it committed: the version is left for `trellis gc`.
                Err(_) => return Err(self.failed("commit", &pointer, &e)),
            }
        }
        if let Some(flag) = flag {
            // The version's id as the flag's body: every flag written is a
            // new object to an outside reader, and names what it should read.
            let id = Bytes::from(pending.version.clone());
            self.store.put(&flag, id.into()).await.map_err(|e| {
                let e = self.failed("write the done flag", &flag, &e);
                io::Error::new(e.kind(), format!("version {} is committed, but {e}", pending.version))
            })?;
        }
        Ok(())
    }

    /// Deletes `locations`, warning about what could not be deleted (gc
    /// removes it later).
    async fn delete_quietly(&self, locations: Vec<Path>) {
        if locations.is_empty() {
            return;
        }
        let stream = futures_util::stream::iter(locations.into_iter().map(Ok)).boxed();
        let mut results = self.store.delete_stream(stream);
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => tracing::warn!("cannot delete from {}: {}; `trellis gc` will", self.bucket, one_line(&e)),
            }
        }
    }

    async fn head(&self, location: &Path) -> io::Result<Option<ObjectMeta>> {
        match self.store.head(location).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed("read", location, &e)),
        }
    }

    /// Where `data`'s files are read: its current version's prefix, or
    /// `data` itself when it has no pointer.
    async fn readable(&self, data: &Path) -> io::Result<(Path, bool)> {
        Ok(match self.pointer(data).await? {
            Some(current) => (data.clone().join(VERSIONS).join(current.version.as_str()), true),
            None => (data.clone(), false),
        })
    }

    async fn get(&self, location: &Path) -> io::Result<Option<Vec<u8>>> {
        let got = match self.store.get(location).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.failed("read", location, &e)),
        };
        Ok(Some(got.bytes().await.map_err(|e| self.failed("read", location, &e))?.to_vec()))
    }
}

/// What a poll saw of a done flag: every header that may tell a rewrite
/// from the object before it. A listing has no version id, a HEAD has it
/// where the bucket keeps versions: [`Seen::same`] compares what both have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub e_tag: Option<String>,
    pub last_modified: i64,
    pub size: u64,
    pub version: Option<String>,
}

impl Seen {
    /// An object as a HEAD or a listing tells it. Last-Modified is kept in
    /// whole seconds, as a HEAD's header has it: a listing's may name
    /// milliseconds (MinIO's does), and the same object must be seen the
    /// same whichever way it was looked at.
    fn of(meta: &ObjectMeta) -> Seen {
        Seen {
            e_tag: meta.e_tag.clone(),
            last_modified: meta.last_modified.timestamp().saturating_mul(1_000_000_000),
            size: meta.size,
            version: meta.version.clone(),
        }
    }

    /// Its identity in the metastore's format: its Last-Modified as the
    /// mtime, its size, and in place of an inode a 64-bit fingerprint of its
    /// ETag and version id (the version id changes on every write where the
    /// bucket keeps versions, even when the ETag does not).
    pub fn identity(&self) -> FlagIdentity {
        let mut hasher = blake3::Hasher::new();
        hasher.update(self.e_tag.as_deref().unwrap_or_default().as_bytes());
        hasher.update(&[0]);
        hasher.update(self.version.as_deref().unwrap_or_default().as_bytes());
        let fingerprint = hasher.finalize();
        let mut inode = [0; 8];
        inode.copy_from_slice(&fingerprint.as_bytes()[..8]);
        FlagIdentity { mtime_nanos: self.last_modified, size: self.size, inode: u64::from_le_bytes(inode) }
    }

    /// Whether two sightings may be of the same object: the same ETag,
    /// Last-Modified and size, and the same version id where both have one.
    pub fn same(&self, other: &Seen) -> bool {
        self.e_tag == other.e_tag
            && self.last_modified == other.last_modified
            && self.size == other.size
            && (self.version.is_none() || other.version.is_none() || self.version == other.version)
    }
}

/// Requests a poll has in flight at once.
const POLLS_IN_FLIGHT: usize = 16;

/// What polling the store for done flags needs (see `storage::poll`).
impl ObjectDir {
    /// The objects at `heads` as HEADs see them (each `None` where there is
    /// nothing), and every object below each of `lists` as a listing sees
    /// it, by its key relative to the root, with the pages that listing
    /// took: all requests a few at once.
    pub fn seen(&self, heads: &[Key], lists: &[Key]) -> (Vec<io::Result<Option<Seen>>>, Vec<io::Result<Listing>>) {
        let locate = |keys: &[Key]| keys.iter().map(|key| self.location(key)).collect::<Vec<_>>();
        let (head_at, list_at) = (locate(heads), locate(lists));
        let context = self.context();
        let root = self.prefix.clone();
        let polled = self.run(async move {
            let heads = futures_util::stream::iter(head_at.into_iter().map(|location| {
                let context = context.clone();
                async move { context.head(&location?).await.map(|meta| meta.as_ref().map(Seen::of)) }
            }))
            .buffered(POLLS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
            let unbounded = list_at.into_iter().map(|location| (location, usize::MAX)).collect();
            let lists = context.listings(unbounded, &root).await.into_iter();
            let lists =
                lists.map(|listed| listed.map(|listed| listed.expect("a listing without a bound is never given up")));
            Ok((heads, lists.collect()))
        });
        polled.unwrap_or_else(|e| {
            let failed = || io::Error::new(e.kind(), e.to_string());
            (heads.iter().map(|_| Err(failed())).collect(), lists.iter().map(|_| Err(failed())).collect())
        })
    }
}

/// Looking at many flags at once, for a run's or a plan's judgements.
impl ObjectDir {
    /// See [`ViewStore::sight`]. Keys that share a prefix with at least
    /// one other are seen by one listing of it, a few listings at once. A
    /// listing that would take as many pages as the HEADs it replaces is
    /// given up (one more page at most), as is one that fails: its keys
    /// are `Unknown`, each looked at alone later. A key is seen as
    /// [`ViewStore::identity`] looks for it: the object itself, else the
    /// pointer of the view whose data it is, else the pointer of the view
    /// it is the flag of; all three lie below its shared prefix.
    pub fn sight(&self, keys: &[Key]) -> Vec<Sighting> {
        let mut sightings = vec![Sighting::Unknown; keys.len()];
        let mut by_prefix: std::collections::HashMap<Key, Vec<usize>> = std::collections::HashMap::new();
        for (index, key) in keys.iter().enumerate() {
            if let Some(prefix) = key.shared_prefix().filter(|_| key.is_under_root()) {
                by_prefix.entry(prefix).or_default().push(index);
            }
        }
        let shared: Vec<(Key, Vec<usize>)> = by_prefix.into_iter().filter(|(_, at)| at.len() >= 2).collect();
        if shared.is_empty() {
            return sightings;
        }
        // Cheaper than a HEAD each only below as many pages as keys.
        let lists: Vec<(io::Result<Path>, usize)> =
            shared.iter().map(|(prefix, at)| (self.location(prefix), at.len().saturating_sub(1).max(1))).collect();
        let context = self.context();
        let root = self.prefix.clone();
        let listed = self.run(async move { Ok(context.listings(lists, &root).await) });
        let Ok(listed) = listed else { return sightings };
        for ((prefix, at), listing) in shared.into_iter().zip(listed) {
            let objects = match listing {
                Ok(Some((objects, _))) => objects,
                Ok(None) => continue,
                Err(e) => {
                    tracing::debug!(
                        "cannot list {}: {e}; its views are looked at one by one",
                        prefix.as_path().display()
                    );
                    continue;
                }
            };
            let found: std::collections::HashMap<&Key, &Seen> = objects.iter().map(|(key, seen)| (key, seen)).collect();
            for index in at {
                let key = &keys[index];
                let seen = found
                    .get(key)
                    .or_else(|| found.get(&key.join(POINTER)))
                    .or_else(|| key.parent().and_then(|data| found.get(&data.join(POINTER))));
                sightings[index] = Sighting::Listed(seen.map(|seen| seen.identity()));
            }
        }
        sightings
    }
}

/// The pages a walk's listing of one shared prefix may take before its
/// keys are asked one by one instead: a prefix this full holds big
/// deliveries, and a walk seldom asks more than a month of it.
const PRESENCE_PAGES: usize = 4;

/// [`ViewStore::presence`] on an object store: each shared prefix listed
/// once, at the first key asked below it (`None`: given up, or it failed;
/// its keys are asked alone).
struct Listings<'a> {
    dir: &'a ObjectDir,
    listed: std::sync::Mutex<std::collections::HashMap<Key, Option<std::collections::HashSet<Key>>>>,
}

impl ObjectDir {
    /// Every key below `prefix`, by one listing of at most `pages` pages;
    /// `None` past them, or when it fails.
    fn keys_below(&self, prefix: &Key, pages: usize) -> Option<std::collections::HashSet<Key>> {
        let location = self.location(prefix);
        let context = self.context();
        let root = self.prefix.clone();
        let listed = self.run(async move { Ok(context.listings(vec![(location, pages)], &root).await) });
        match listed.map(|mut each| each.pop()) {
            Ok(Some(Ok(Some((objects, _))))) => Some(objects.into_iter().map(|(key, _)| key).collect()),
            Ok(Some(Ok(None))) => None,
            Ok(Some(Err(e))) | Err(e) => {
                tracing::debug!("cannot list {}: {e}; its keys are looked at one by one", prefix.as_path().display());
                None
            }
            Ok(None) => None,
        }
    }
}

impl super::Presence for Listings<'_> {
    /// As [`ViewStore::identity`] looks: the object, else the pointer of
    /// the view whose data it is, else that of the view it is the flag of.
    fn exists(&self, key: &Key) -> bool {
        let Some(prefix) = key.shared_prefix().filter(|_| key.is_under_root()) else {
            return self.dir.exists(key);
        };
        let mut listed = self.listed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let below = listed.entry(prefix).or_insert_with_key(|prefix| self.dir.keys_below(prefix, PRESENCE_PAGES));
        match below {
            Some(keys) => {
                keys.contains(key)
                    || keys.contains(&key.join(POINTER))
                    || key.parent().is_some_and(|data| keys.contains(&data.join(POINTER)))
            }
            None => {
                drop(listed);
                self.dir.exists(key)
            }
        }
    }
}

/// Writing an object as a producer of external data would (no pointer,
/// no version): what the benchmarks deliver their raw data with.
impl ObjectDir {
    pub fn put(&self, key: &Key, bytes: Vec<u8>) -> io::Result<()> {
        let location = self.location(key)?;
        let context = self.context();
        self.run(async move {
            context.store.put(&location, bytes.into()).await.map_err(|e| context.failed("write", &location, &e))?;
            Ok(())
        })
    }
}

/// Every object below a prefix, by its key relative to the root, and the
/// pages its listing took.
pub type Listing = (Vec<(Key, Seen)>, usize);

impl Context {
    /// Each of `at` listed (see `listing_within`, each with its bound of
    /// pages), a few at once, in the order given.
    async fn listings(&self, at: Vec<(io::Result<Path>, usize)>, root: &Path) -> Vec<io::Result<Option<Listing>>> {
        futures_util::stream::iter(
            at.into_iter().map(|(location, pages)| async move { self.listing_within(&location?, root, pages).await }),
        )
        .buffered(POLLS_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await
    }

    /// The listing, given up (`None`) once it has taken more than `pages`
    /// pages: no further page is asked for.
    async fn listing_within(&self, location: &Path, root: &Path, pages: usize) -> io::Result<Option<Listing>> {
        let most = pages.saturating_mul(LIST_PAGE);
        let mut listed = self.store.list(Some(location));
        let mut objects: Vec<ObjectMeta> = Vec::new();
        while let Some(meta) = listed.try_next().await.map_err(|e| self.failed("list", location, &e))? {
            if objects.len() == most {
                return Ok(None);
            }
            objects.push(meta);
        }
        let pages = objects.len().div_ceil(LIST_PAGE).max(1);
        let mut seen = Vec::with_capacity(objects.len());
        for meta in &objects {
            let Some(parts) = meta.location.prefix_match(root) else { continue };
            let mut relative = PathBuf::new();
            for part in parts {
                relative.push(percent_encoding::percent_decode_str(part.as_ref()).decode_utf8_lossy().as_ref());
            }
            seen.push((Key::of(LocalPath::new(""), &relative), Seen::of(meta)));
        }
        Ok(Some((seen, pages)))
    }
}

impl ViewStore for ObjectDir {
    fn root(&self) -> &LocalPath {
        &self.root
    }

    fn probe(&self) -> Result<(), String> {
        ObjectDir::probe(self)
    }

    fn current_prefixes(&self, keys: &[Key]) -> Vec<Option<String>> {
        ObjectDir::current_prefixes(self, keys)
    }

    fn collect(&self, grace: Duration, dry_run: bool) -> io::Result<Option<Collected>> {
        self.collect_at(SystemTime::now(), grace, dry_run).map(Some)
    }

    fn as_object(&self) -> Option<&ObjectDir> {
        Some(self)
    }

    fn sight(&self, keys: &[Key]) -> Vec<Sighting> {
        ObjectDir::sight(self, keys)
    }

    /// The flag written as the commit writes it (its body the current
    /// version's id), only where it is missing and the view has a pointer.
    fn restore_flag(&self, key: &Key, done_flag: &str) -> io::Result<bool> {
        if done_flag.is_empty() {
            return Ok(false);
        }
        let data = self.location(key)?;
        let flag = data.clone().join(done_flag);
        let context = self.context();
        self.run(async move {
            if context.head(&flag).await?.is_some() {
                return Ok(false);
            }
            let Some(current) = context.pointer(&data).await? else { return Ok(false) };
            let id = Bytes::from(current.version);
            context.store.put(&flag, id.into()).await.map_err(|e| context.failed("write the done flag", &flag, &e))?;
            Ok(true)
        })
    }

    fn presence(&self) -> Box<dyn super::Presence + '_> {
        Box::new(Listings { dir: self, listed: Default::default() })
    }

    /// The object at `key` (a done flag), else the pointer of the view
    /// whose data `key` is (a view without a flag), else the pointer of
    /// the view `key` is the flag of (its version committed, and the
    /// process killed before the flag was written: the view is there, and
    /// its pointer is what identifies it). One HEAD when the flag is
    /// there, three when nothing is.
    fn identity(&self, key: &Key) -> Option<FlagIdentity> {
        let location = self.location(key).ok()?;
        let context = self.context();
        let found = self.run(async move {
            if let Some(meta) = context.head(&location).await? {
                return Ok(Some(meta));
            }
            if let Some(meta) = context.head(&location.clone().join(POINTER)).await? {
                return Ok(Some(meta));
            }
            match location.parent() {
                Some(data) if !data.is_root() => context.head(&data.join(POINTER)).await,
                _ => Ok(None),
            }
        });
        match found {
            Ok(meta) => meta.map(|meta| identity_of(&meta)),
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        }
    }

    fn holds_data(&self, key: &Key) -> bool {
        let Ok(data) = self.location(key) else { return false };
        let context = self.context();
        let found = self.run(async move {
            if context.head(&data.clone().join(POINTER)).await?.is_some() {
                return Ok(true);
            }
            match context.store.list(Some(&data)).next().await {
                None => Ok(false),
                Some(Ok(_)) => Ok(true),
                Some(Err(e)) => Err(context.failed("list", &data, &e)),
            }
        });
        found.unwrap_or_else(|e| {
            tracing::warn!("{e}");
            false
        })
    }

    /// A file at the top of a view's data (`<key>/<name>`: a receipt, a
    /// txlog marker) is read in its current version; where the view has no
    /// pointer, the object is read where it is.
    fn read(&self, key: &Key) -> io::Result<Option<Vec<u8>>> {
        let location = self.location(key)?;
        let context = self.context();
        self.run(async move {
            let target = match (location.parent(), location.filename()) {
                (Some(data), Some(name)) if !data.is_root() => match context.pointer(&data).await? {
                    // The name is a part already encoded: parsed, not encoded again.
                    Some(current) => Path::parse(format!("{data}/{VERSIONS}/{}/{name}", current.version))
                        .map_err(|e| invalid(format!("{}/{location}: {e}", context.bucket)))?,
                    None => location,
                },
                _ => location,
            };
            context.get(&target).await
        })
    }

    /// The current version's files (names relative to it), or, where there
    /// is no pointer, the objects under `key` but the versions and the
    /// pointer of a view published there. Directories are not objects:
    /// each one a file's name passes through is listed once, with no
    /// identity of its own.
    fn list(&self, key: &Key, walk: &Walk) -> io::Result<Vec<Listed>> {
        let data = self.location(key)?;
        let context = self.context();
        let (base, objects, published) = self.run(async move {
            let (base, published) = context.readable(&data).await?;
            let objects: Vec<ObjectMeta> =
                context.store.list(Some(&base)).try_collect().await.map_err(|e| context.failed("list", &base, &e))?;
            Ok((base, objects, published))
        })?;
        if objects.is_empty() && !published {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{}/{base}: no objects there", self.bucket)));
        }
        let mut found = Vec::new();
        let mut directories = HashSet::new();
        'objects: for meta in &objects {
            let Some(parts) = meta.location.prefix_match(&base) else { continue };
            let mut names = Vec::new();
            for part in parts {
                let decoded = percent_encoding::percent_decode_str(part.as_ref());
                names.push(match decoded.clone().decode_utf8() {
                    Ok(name) => name.into_owned(),
                    Err(_) if walk.exact_names => {
                        return Err(io::Error::other(format!(
                            "{}/{} has a name that is not UTF-8",
                            self.bucket, meta.location
                        )));
                    }
                    Err(_) => decoded.decode_utf8_lossy().into_owned(),
                });
            }
            if !published && (names.first().is_some_and(|first| first == VERSIONS) || names == [POINTER]) {
                continue;
            }
            let mut name = String::new();
            for (depth, part) in names.iter().enumerate() {
                if depth > 0 {
                    name.push('/');
                }
                name.push_str(part);
                if !(walk.keep)(&name) {
                    continue 'objects;
                }
                if depth + 1 < names.len() && directories.insert(name.clone()) {
                    let identity = FlagIdentity { mtime_nanos: 0, size: 0, inode: 0 };
                    found.push(Listed { name: name.clone(), is_dir: true, identity });
                }
            }
            found.push(Listed { name, is_dir: false, identity: identity_of(meta) });
        }
        Ok(found)
    }

    fn stage(&self) -> io::Result<Staged> {
        self.local.stage()
    }

    /// [`ObjectDir::upload`], then [`ObjectDir::commit`].
    fn publish(&self, staged: Staged, key: &Key, done_flag: &str) -> io::Result<()> {
        let pending = self.upload(staged, key)?;
        self.commit(pending, done_flag)
    }

    /// The local staging directory, as a local root's is cleaned, and what
    /// a crash left of the cache's fetches. What a crashed publish left in
    /// the bucket is for the next commit of its view and `trellis gc`,
    /// after the grace period.
    fn clean_staging(&self) -> io::Result<()> {
        self.local.clean_staging()?;
        self.cache.clean()
    }

    /// [`ObjectDir::cached_input`].
    fn local_input(&self, key: &Key) -> io::Result<LocalInput> {
        self.cached_input(key)
    }
}

/// An object's identity in the metastore's format (see [`Seen::identity`]).
fn identity_of(meta: &ObjectMeta) -> FlagIdentity {
    Seen::of(meta).identity()
}

/// A file of a staged version: its name relative to the version (`/`
/// between components), where it is, and its size.
#[derive(Debug)]
struct StagedFile {
    name: String,
    path: PathBuf,
    size: u64,
}

/// Every file below `dir`. A link is refused rather than followed (what
/// it points to is not the plugin's to publish), and so is a name that is
/// not UTF-8 (an object's key is); an empty directory is not kept (an
/// object store has none).
fn staged_files(dir: &LocalPath) -> io::Result<Vec<StagedFile>> {
    let mut files = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, prefix)) = pending.pop() {
        for entry in std::fs::read_dir(&path)? {
            let entry = entry?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                return Err(invalid(format!("{} has a name that is not UTF-8", entry.path().display())));
            };
            let name = format!("{prefix}{file_name}");
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push((entry.path(), format!("{name}/")));
            } else if kind.is_file() {
                files.push(StagedFile { name, path: entry.path(), size: entry.metadata()?.len() });
            } else {
                return Err(invalid(format!(
                    "{} is not a file or a directory: an object store holds only files",
                    entry.path().display()
                )));
            }
        }
    }
    Ok(files)
}

/// A version id: the millisecond, then 64 random bits (unique per publish
/// without coordination), so that versions also sort by time.
fn new_version() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_millis());
    // RandomState's keys are random per process; the counter and the
    // clock make every call's hash another.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_nanos()));
    hasher.write_u32(std::process::id());
    format!("{millis:013}-{:016x}", hasher.finish())
}

/// Whether `version` has the shape [`new_version`] gives: a pointer naming
/// anything else (a path, `..`) is not followed.
fn is_version(version: &str) -> bool {
    version.split_once('-').is_some_and(|(millis, random)| {
        !millis.is_empty()
            && millis.bytes().all(|b| b.is_ascii_digit())
            && random.len() == 16
            && random.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// An error's message on one line (a store's may span several).
fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a collection of old versions found: per view, what it removed
/// (or, on a dry run, would remove) and what it kept, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Collected {
    /// The root walked (`s3://bucket/prefix`).
    pub root: String,
    /// The views that have versions, by key under the root, in key order.
    pub views: Vec<ViewCollected>,
}

/// One view's versions, as a collection left them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ViewCollected {
    /// The view's data key under the root (`shop/2015/05/01`).
    pub key: String,
    /// The version its pointer names, if it has one.
    pub current: Option<String>,
    /// Removed (or removable, on a dry run).
    pub removed: Tally,
    /// Kept: the current version and those within the grace period.
    pub kept: Tally,
    /// Why some of it was not collected (an unreadable pointer: nothing
    /// is removed; a failed delete: it is tried again next time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Versions, their objects and the bytes they hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub versions: usize,
    pub objects: usize,
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, objects: &[ObjectMeta]) {
        self.versions += 1;
        self.objects += objects.len();
        self.bytes += objects.iter().map(|meta| meta.size).sum::<u64>();
    }

    pub fn plus(self, other: Tally) -> Tally {
        Tally {
            versions: self.versions + other.versions,
            objects: self.objects + other.objects,
            bytes: self.bytes + other.bytes,
        }
    }
}

impl Collected {
    /// What every view's collection adds up to: removed, then kept.
    pub fn totals(&self) -> (Tally, Tally) {
        self.views.iter().fold((Tally::default(), Tally::default()), |(removed, kept), view| {
            (removed.plus(view.removed), kept.plus(view.kept))
        })
    }
}

/// Which of a view's versions (`versions`, in id order) are removable
/// `now` (milliseconds since the epoch). Never the current one. One older
/// than the current that the pointer remembers replacing (`replaced`, with
/// when): removable once replaced longer ago than the grace, so that an
/// outside reader who read the old flag has the grace to finish reading.
/// One older that it does not remember (replaced before the pointer's
/// memory, or never current): superseded since its successor in id order
/// was made at the latest (ids start with their millisecond, taken as a
/// publish begins, at or before its commit), and removable once that
/// successor is older than the grace. One newer than the current (or any, where no
/// pointer names one), a crashed or losing publish, or one still
/// uploading: removable once it is itself older than the grace, so that
/// an upload in progress is never cut (a publish taking longer than the
/// grace would be).
pub(crate) fn removable(
    versions: &[&str],
    current: Option<&str>,
    replaced: &[(&str, u64)],
    now: u64,
    grace: Duration,
) -> Vec<bool> {
    let grace = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
    let past_grace = |since: u64| now.saturating_sub(since) > grace;
    versions
        .iter()
        .enumerate()
        .map(|(i, &version)| match current {
            Some(current) if version == current => false,
            Some(current) if version < current => match replaced.iter().find(|(old, _)| *old == version) {
                Some(&(_, at)) => past_grace(at),
                None => versions.get(i + 1).is_some_and(|next| past_grace(version_millis(next))),
            },
            _ => past_grace(version_millis(version)),
        })
        .collect()
}

/// The millisecond a version id starts with (0 for one that does not parse).
fn version_millis(version: &str) -> u64 {
    version.split_once('-').and_then(|(millis, _)| millis.parse().ok()).unwrap_or(0)
}

fn now_millis() -> u64 {
    millis_at(SystemTime::now())
}

fn millis_at(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// Where a listed object is a version's file: the view's data key and the
/// version's id, from the first `_v/<version id>/` in its key below `root`.
fn version_of(root: &Path, location: &Path) -> Option<(Path, String)> {
    let relative = location.prefix_match(root)?;
    let parts: Vec<String> = relative.map(|part| part.as_ref().to_string()).collect();
    let at = (0..parts.len().saturating_sub(2)).find(|&i| parts[i] == VERSIONS && is_version(&parts[i + 1]))?;
    // Each part is already encoded: joined and parsed, not encoded again.
    let data = root.parts().map(|part| part.as_ref().to_string()).chain(parts[..at].iter().cloned());
    let data = Path::parse(data.collect::<Vec<_>>().join("/")).ok()?;
    Some((data, parts[at + 1].clone()))
}

/// A message's cause for a probe that failed, in one line a user can act on.
fn probe_cause(e: &object_store::Error) -> String {
    let text = one_line(e);
    // The request's URL is in the message: its scheme and authority name the endpoint.
    let endpoint = ["http://", "https://"]
        .iter()
        .find_map(|scheme| {
            let at = text.find(scheme)?;
            let rest = &text[at + scheme.len()..];
            Some(format!("{scheme}{}", &rest[..rest.find(['/', ' ']).unwrap_or(rest.len())]))
        })
        .unwrap_or_else(|| "the endpoint".to_string());
    // S3's own error code, where the answer carried one (`<Code>AccessDenied</Code>`).
    let code = text.split_once("<Code>").and_then(|(_, rest)| rest.split_once("</Code>")).map(|(code, _)| code);
    let said = code.map(|code| format!(" ({code})")).unwrap_or_default();
    match e {
        // S3 answers a write into a missing bucket 404 NoSuchBucket; a 404
        // without that code is something else answering at the endpoint.
        object_store::Error::NotFound { .. } if code == Some("NoSuchBucket") => format!("no such bucket{said}"),
        object_store::Error::NotFound { .. } => {
            format!(
                "{endpoint} answered 404 Not Found{said}, not as S3 does for a missing bucket: is it an S3 endpoint? ({text})"
            )
        }
        object_store::Error::PermissionDenied { .. } => {
            format!("access denied{said}: the credentials may not write there, or are not valid")
        }
        object_store::Error::Unauthenticated { .. } => {
            format!(
                "not authenticated{said}: no valid credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, web identity)"
            )
        }
        object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. } => {
            format!("the store does not take conditional writes (If-None-Match), which a publish needs: {text}")
        }
        _ => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
            while let Some(error) = source {
                if let Some(http) = error.downcast_ref::<object_store::client::HttpError>() {
                    use object_store::client::HttpErrorKind;
                    match http.kind() {
                        HttpErrorKind::Connect => return format!("endpoint unreachable: cannot connect to {endpoint}"),
                        HttpErrorKind::Timeout => {
                            return format!("endpoint unreachable: {endpoint} did not answer in time");
                        }
                        _ => {}
                    }
                }
                source = error.source();
            }
            if text.to_ascii_lowercase().contains("credential") { format!("no credentials: {text}") } else { text }
        }
    }
}

impl ObjectDir {
    /// Keeps replaced versions (and orphans) this long for outside
    /// readers, instead of [`DEFAULT_GRACE`](crate::catalog::storage::DEFAULT_GRACE).
    pub fn with_grace(mut self, grace: Duration) -> ObjectDir {
        self.grace = grace;
        self
    }

    /// Proves the root reachable and writable: a probe object
    /// (`<prefix>/_trellis/probe-<random>`) created with `If-None-Match: *`
    /// (which the commit needs the store to honour) and deleted. The error
    /// is one line: no such bucket, access denied, no credentials, the
    /// endpoint unreachable, or what the store said.
    pub fn probe(&self) -> Result<(), String> {
        let location = self.prefix.clone().join("_trellis").join(format!("probe-{}", new_version()));
        let context = self.context();
        let probed = self.run(async move {
            let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
            let body = Bytes::from_static(b"trellis checks that it may write here; this object is deleted at once");
            if let Err(e) = context.store.put_opts(&location, body.into(), options).await {
                return Ok(Err(probe_cause(&e)));
            }
            match context.store.delete(&location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(Ok(())),
                Err(e) => {
                    Ok(Err(format!("wrote {}/{location} but cannot delete it: {}", context.bucket, probe_cause(&e))))
                }
            }
        });
        probed.map_err(|e| e.to_string())?
    }

    /// Where an outside reader reads the current version of `key`:
    /// `s3://bucket/prefix/<key>/_v/<version>/`; `None` where no pointer
    /// names one. One GET of the pointer.
    pub fn current_prefix(&self, key: &Key) -> io::Result<Option<String>> {
        let data = self.location(key)?;
        let bucket = self.bucket.clone();
        Ok(self.current_version(key)?.map(|version| format!("{bucket}/{data}/{VERSIONS}/{version}/")))
    }

    /// [`ObjectDir::current_prefix`] of each of `keys`, a few pointers read
    /// at once; an unreadable one is `None`, with a warning.
    pub fn current_prefixes(&self, keys: &[Key]) -> Vec<Option<String>> {
        let located: Vec<Option<Path>> = keys.iter().map(|key| self.location(key).ok()).collect();
        let context = self.context();
        let read = self.run(async move {
            let reads = located.into_iter().map(|data| {
                let context = context.clone();
                async move {
                    let data = data?;
                    match context.pointer(&data).await {
                        Ok(current) => {
                            current.map(|current| format!("{}/{data}/{VERSIONS}/{}/", context.bucket, current.version))
                        }
                        Err(e) => {
                            tracing::warn!("{e}");
                            None
                        }
                    }
                }
            });
            Ok(futures_util::stream::iter(reads).buffered(UPLOADS_IN_FLIGHT).collect::<Vec<_>>().await)
        });
        read.unwrap_or_else(|e| {
            tracing::warn!("{e}");
            vec![None; keys.len()]
        })
    }

    /// `trellis gc`: walks the whole root (one listing) and removes every
    /// version removable at `now` (see `removable`), or on a `dry_run`
    /// only says which. A view whose pointer cannot be read loses nothing.
    pub fn collect_at(&self, now: SystemTime, grace: Duration, dry_run: bool) -> io::Result<Collected> {
        let context = self.context();
        let root = self.prefix.clone();
        let now = millis_at(now);
        let views = self.run(async move {
            let objects: Vec<ObjectMeta> = context
                .store
                .list(if root.is_root() { None } else { Some(&root) })
                .try_collect()
                .await
                .map_err(|e| context.failed("list", &root, &e))?;
            let mut by_view: std::collections::BTreeMap<String, (Path, Versions)> = Default::default();
            for meta in objects {
                if let Some((data, version)) = version_of(&root, &meta.location) {
                    let entry = by_view.entry(data.to_string()).or_insert_with(|| (data, Versions::new()));
                    entry.1.entry(version).or_default().push(meta);
                }
            }
            let mut views = Vec::with_capacity(by_view.len());
            for (_, (data, versions)) in by_view {
                let mut swept = context.sweep(&data, versions, now, grace, dry_run).await;
                swept.key = data.prefix_match(&root).map_or_else(
                    || data.to_string(),
                    |parts| parts.map(|part| part.as_ref().to_string()).collect::<Vec<_>>().join("/"),
                );
                views.push(swept);
            }
            Ok(views)
        })?;
        Ok(Collected { root: self.root.display().to_string(), views })
    }
}

/// A view's versions by id (in id order), each with its objects.
type Versions = std::collections::BTreeMap<String, Vec<ObjectMeta>>;

impl Context {
    /// After a commit: one LIST of `data/_v/`, then the removable versions removed.
    async fn sweep_view(&self, data: &Path, now: u64, grace: Duration, dry_run: bool) -> io::Result<ViewCollected> {
        let versions_dir = data.clone().join(VERSIONS);
        let objects: Vec<ObjectMeta> = self
            .store
            .list(Some(&versions_dir))
            .try_collect()
            .await
            .map_err(|e| self.failed("list", &versions_dir, &e))?;
        let mut versions = Versions::new();
        for meta in objects {
            if let Some((_, version)) = version_of(data, &meta.location) {
                versions.entry(version).or_default().push(meta);
            }
        }
        let swept = self.sweep(data, versions, now, grace, dry_run).await;
        match swept.error {
            Some(error) => Err(io::Error::other(error)),
            None => Ok(swept),
        }
    }

    /// Removes `data`'s removable `versions`, as listed. The pointer is
    /// read after the listing: a version committed meanwhile is current
    /// when it is judged, never taken for an orphan.
    async fn sweep(&self, data: &Path, versions: Versions, now: u64, grace: Duration, dry_run: bool) -> ViewCollected {
        let mut swept = ViewCollected { key: data.to_string(), ..ViewCollected::default() };
        let (current, replaced) = match self.pointer(data).await {
            Ok(Some(current)) => (Some(current.version), current.replaced),
            Ok(None) => (None, Vec::new()),
            Err(e) => {
                swept.error = Some(format!("{e}; none of its versions is removed"));
                for objects in versions.values() {
                    swept.kept.add(objects);
                }
                return swept;
            }
        };
        let ids: Vec<&str> = versions.keys().map(String::as_str).collect();
        let replaced: Vec<(&str, u64)> = replaced.iter().map(|old| (old.version.as_str(), old.at)).collect();
        let verdicts = removable(&ids, current.as_deref(), &replaced, now, grace);
        let mut doomed = Vec::new();
        for ((_, objects), remove) in versions.iter().zip(verdicts) {
            if remove {
                swept.removed.add(objects);
                doomed.extend(objects.iter().map(|meta| meta.location.clone()));
            } else {
                swept.kept.add(objects);
            }
        }
        swept.current = current;
        if !dry_run && !doomed.is_empty() {
            let stream = futures_util::stream::iter(doomed.into_iter().map(Ok)).boxed();
            let mut results = self.store.delete_stream(stream);
            while let Some(result) = results.next().await {
                match result {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => {
                        swept.error.get_or_insert_with(|| {
                            format!(
                                "cannot delete an old version's objects from {}/{data}: {}",
                                self.bucket,
                                one_line(&e)
                            )
                        });
                    }
                }
            }
        }
        swept
    }
}

/// Files fetched at once into the cache, for one input.
const DOWNLOADS_IN_FLIGHT: usize = 8;

impl ObjectDir {
    /// The same store, its inputs fetched into `cache` (the project's,
    /// beside its metastore) rather than beside its staging.
    pub fn with_cache(mut self, cache: Cache) -> ObjectDir {
        self.cache = cache;
        self
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The current data at `key` as a local read-only directory: its
    /// cache entry, fetched first when it is not there. A view trellis
    /// published is known by the version its pointer names (one GET when
    /// cached: a version is never written again); data without a pointer,
    /// by its listing's names, ETags and sizes (one LIST), each object
    /// fetched only if its ETag is still the one listed.
    fn cached_input(&self, key: &Key) -> io::Result<LocalInput> {
        let data = self.location(key)?;
        let context = self.context();
        let (data, current) = self.run(async move {
            let current = context.pointer(&data).await?;
            Ok((data, current))
        })?;
        let name = format!("{}/{data}", self.bucket);
        let lease = match current {
            Some(current) => {
                let base = data.clone().join(VERSIONS).join(current.version.as_str());
                let identity = format!("version {}", current.version);
                let mut fetch = Remote { dir: self, base, published: true, files: None };
                self.cache.get(&name, identity.as_bytes(), &mut fetch)?
            }
            None => {
                let mut fetch = Remote { dir: self, base: data, published: false, files: None };
                let files = fetch.files()?;
                if files.is_empty() {
                    return Err(io::Error::new(io::ErrorKind::NotFound, format!("{name}: no objects there")));
                }
                let mut identity = Vec::new();
                for file in files.iter() {
                    for part in [file.name.as_str(), file.e_tag.as_deref().unwrap_or_default()] {
                        identity.extend_from_slice(part.as_bytes());
                        identity.push(0);
                    }
                    identity.extend_from_slice(&file.size.to_le_bytes());
                }
                self.cache.get(&name, &identity, &mut fetch)?
            }
        };
        Ok(LocalInput::cached(lease))
    }
}

/// The objects of one input, as the cache fetches them.
struct Remote<'a> {
    dir: &'a ObjectDir,
    /// Where its files are: a version's prefix, or the data's own key.
    base: Path,
    /// Whether `base` is a version (else the pointer and versions of a
    /// view published there are not its files).
    published: bool,
    /// Listed, once.
    files: Option<Vec<RemoteFile>>,
}

/// An object to fetch: where it is, its name below the input (`/`
/// between components, each a plain file name), what it was listed with.
#[derive(Debug, Clone)]
struct RemoteFile {
    location: Path,
    name: String,
    size: u64,
    e_tag: Option<String>,
}

impl Remote<'_> {
    /// The input's objects, sorted by name (listed the first time).
    fn files(&mut self) -> io::Result<&[RemoteFile]> {
        if self.files.is_none() {
            let (context, base) = (self.dir.context(), self.base.clone());
            let objects = self.dir.run(async move {
                context
                    .store
                    .list(Some(&base))
                    .try_collect::<Vec<ObjectMeta>>()
                    .await
                    .map_err(|e| context.failed("list", &base, &e))
            })?;
            let mut files = Vec::with_capacity(objects.len());
            for meta in objects {
                let Some(parts) = meta.location.prefix_match(&self.base) else { continue };
                let mut names = Vec::new();
                for part in parts {
                    let name = percent_encoding::percent_decode_str(part.as_ref()).decode_utf8().ok();
                    match name.filter(|name| !matches!(name.as_ref(), "" | "." | "..") && !name.contains(['/', '\0'])) {
                        Some(name) => names.push(name.into_owned()),
                        None => {
                            return Err(invalid(format!(
                                "{}/{} has a name that cannot be a local file's",
                                self.dir.bucket, meta.location
                            )));
                        }
                    }
                }
                if !self.published && (names.first().is_some_and(|first| first == VERSIONS) || names == [POINTER]) {
                    continue;
                }
                if names.is_empty() {
                    continue;
                }
                files.push(RemoteFile {
                    location: meta.location,
                    name: names.join("/"),
                    size: meta.size,
                    e_tag: meta.e_tag,
                });
            }
            files.sort_by(|a, b| a.name.cmp(&b.name));
            self.files = Some(files);
        }
        Ok(self.files.as_deref().unwrap_or_default())
    }
}

impl Fetch for Remote<'_> {
    fn size(&mut self) -> io::Result<u64> {
        Ok(self.files()?.iter().map(|file| file.size).sum())
    }

    fn fetch_into(&mut self, dir: &LocalPath) -> io::Result<()> {
        let files = self.files()?.to_vec();
        let (context, dir) = (self.dir.context(), dir.to_path_buf());
        self.dir.run(async move { context.download_all(files, &dir).await })
    }
}

impl Context {
    /// Writes `files` under `dir`, a few at once.
    async fn download_all(&self, files: Vec<RemoteFile>, dir: &LocalPath) -> io::Result<()> {
        for file in &files {
            if let Some(parent) = dir.join(&file.name).parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
        }
        let downloads = files.into_iter().map(|file| {
            let (context, path) = (self.clone(), dir.join(&file.name));
            async move { context.download_one(&file, &path).await }
        });
        let mut results = futures_util::stream::iter(downloads).buffer_unordered(DOWNLOADS_IN_FLIGHT);
        while let Some(result) = results.next().await {
            result?;
        }
        Ok(())
    }

    /// One object into `path` (a new file), streamed, its ETag the one it
    /// was listed with; its bytes on disk before the entry is renamed into place.
    async fn download_one(&self, file: &RemoteFile, path: &LocalPath) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let location = &file.location;
        let options = object_store::GetOptions { if_match: file.e_tag.clone(), ..Default::default() };
        let got = self.store.get_opts(location, options).await.map_err(|e| self.failed("read", location, &e))?;
        let write_failed = |e: io::Error| io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()));
        let mut out = tokio::fs::File::create_new(path).await.map_err(write_failed)?;
        let mut stream = got.into_stream();
        let mut written = 0;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.failed("read", location, &e))?;
            out.write_all(&chunk).await.map_err(write_failed)?;
            written += chunk.len() as u64;
        }
        if written != file.size {
            return Err(io::Error::other(format!(
                "cannot read {}/{location}: {} bytes listed, {written} read (it changed meanwhile)",
                self.bucket, file.size
            )));
        }
        out.sync_all().await.map_err(write_failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn store() -> (tempfile::TempDir, Arc<InMemory>, ObjectDir) {
        let local = tempfile::tempdir().unwrap();
        let memory = Arc::new(InMemory::new());
        let dir = ObjectDir::new(memory.clone(), "memory://test", "proj", local.path()).unwrap();
        (local, memory, dir)
    }

    fn key(dir: &ObjectDir, relative: &str) -> Key {
        dir.key(&dir.root().join(relative))
    }

    fn staged(dir: &ObjectDir, files: &[(&str, &str)]) -> Staged {
        let staged = dir.stage().unwrap();
        for (name, content) in files {
            let path = staged.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        staged
    }

    /// Keys are the root's prefix plus the key's components, each encoded
    /// as one part; a key outside the root is refused, not guessed at.
    #[test]
    fn keys_are_placed_under_the_prefix() {
        let (_local, _memory, dir) = store();
        assert_eq!(dir.location(&key(&dir, "v/2015/05/01")).unwrap().as_ref(), "proj/v/2015/05/01");
        assert_eq!(dir.root(), LocalPath::new("memory://test/proj"));
        let outside = dir.key(LocalPath::new("/elsewhere/v"));
        let refused = dir.location(&outside).unwrap_err();
        assert_eq!(refused.to_string(), "/elsewhere/v is outside the object store's root memory://test/proj");
    }

    /// Names with characters an object key must not carry raw come back
    /// from a listing as they were written.
    #[test]
    fn odd_names_survive_a_publish() {
        let (_local, _memory, dir) = store();
        let data = key(&dir, "v/1");
        dir.publish(staged(&dir, &[("a b%c#d", "1"), ("sub/x?y", "2")]), &data, "").unwrap();
        let walk = Walk { follow_links: true, exact_names: true, keep: &|_| true };
        let mut names: Vec<_> = dir.list(&data, &walk).unwrap().into_iter().map(|e| e.name).collect();
        names.sort();
        assert_eq!(names, ["a b%c#d", "sub", "sub/x?y"]);
        assert_eq!(dir.read(&data.join("a b%c#d")).unwrap().as_deref(), Some(&b"1"[..]));
    }

    /// A link in the staged version is refused, not followed, and nothing is committed.
    #[test]
    fn a_link_is_not_uploaded() {
        let (_local, _memory, dir) = store();
        let data = key(&dir, "v/1");
        let staged = staged(&dir, &[("part", "rows")]);
        std::os::unix::fs::symlink("/etc/passwd", staged.path().join("secret")).unwrap();
        let refused = dir.publish(staged, &data, "_SUCCESS").unwrap_err();
        assert!(refused.to_string().contains("secret is not a file or a directory"), "{refused}");
        assert_eq!(dir.current_version(&data).unwrap(), None);
        assert!(!dir.holds_data(&data));
    }

    /// A pointer whose body names no version is an error saying so, never
    /// a path followed.
    #[test]
    fn a_foreign_pointer_is_not_followed() {
        let (_local, memory, dir) = store();
        let data = key(&dir, "v/1");
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let pointer = Path::from("proj/v/1/_CURRENT");
        runtime.block_on(memory.put(&pointer, r#"{"format":1,"version":"../../x"}"#.into())).unwrap();
        let error = dir.read(&data.join("part")).unwrap_err();
        assert_eq!(error.to_string(), "memory://test/proj/v/1/_CURRENT is not a trellis version pointer");
    }

    /// The trait's calls work from inside a tokio runtime (as from the
    /// scheduler's workers), and dropping the store there does not panic.
    #[test]
    fn callable_and_droppable_inside_a_runtime() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let (_local, _memory, dir) = store();
            let data = key(&dir, "v/1");
            dir.publish(staged(&dir, &[("part", "rows")]), &data, "_SUCCESS").unwrap();
            assert!(dir.exists(&data.join("_SUCCESS")));
            drop(dir);
        });
    }

    /// The grace rule on ids alone: `a` < `b` < `c` made at 1, 2 and 3 h,
    /// judged at 4 h with a grace of 1 h 30 min.
    #[test]
    fn versions_are_removable_once_replaced_or_made_longer_ago_than_the_grace() {
        let hour = 3_600_000;
        let [a, b, c] = [1, 2, 3].map(|h| format!("{:013}-{:016x}", h * hour, h));
        let ids = [a.as_str(), b.as_str(), c.as_str()];
        let (now, grace) = (4 * hour, Duration::from_secs(90 * 60));
        let judge = |current, replaced: &[(&str, u64)]| removable(&ids, current, replaced, now, grace);
        // `c` current: `a`'s successor `b` is 2 h old (past the grace), `b`'s `c` only 1 h.
        assert_eq!(judge(Some(&c), &[]), [true, false, false]);
        // The pointer remembers replacing `a` at 3 h 30: within the grace, whatever the ids say.
        assert_eq!(judge(Some(&c), &[(&a, 3 * hour + hour / 2)]), [false, false, false]);
        // `a` current: `b` and `c` are newer and never committed (orphans, or
        // uploads in progress): `b` is older than the grace, `c` is not.
        assert_eq!(judge(Some(&a), &[]), [false, true, false]);
        // No pointer: each by its own age.
        assert_eq!(judge(None, &[]), [true, true, false]);
        // The current is never removable.
        assert_eq!(removable(&ids, Some(&b), &[], u64::MAX, Duration::ZERO), [true, false, true]);
    }

    /// A view's input is fetched into the cache once per version, and a
    /// version still leased stays while the next is fetched beside it;
    /// data without a pointer is known by its listing.
    #[test]
    fn inputs_are_fetched_into_the_cache_once_per_version() {
        let (_local, memory, dir) = store();
        let text = |path: PathBuf| std::fs::read_to_string(path).unwrap();
        let data = key(&dir, "v/1");
        dir.publish(staged(&dir, &[("part", "1"), ("sub/x", "2")]), &data, "").unwrap();
        let first = dir.local_input(&data).unwrap();
        assert!(first.is_staged() && first.path().starts_with(dir.cache().dir()));
        assert_eq!(text(first.path().join("sub/x")), "2");
        assert_eq!(dir.local_input(&data).unwrap().path(), first.path(), "fetched once");
        dir.publish(staged(&dir, &[("part", "3")]), &data, "").unwrap();
        let next = dir.local_input(&data).unwrap();
        assert_ne!(next.path(), first.path());
        assert_eq!(text(next.path().join("part")), "3");
        assert!(!next.path().join("sub").exists());
        assert_eq!(text(first.path().join("sub/x")), "2", "the old version, leased, is kept");

        let runtime = tokio::runtime::Runtime::new().unwrap();
        let external = key(&dir, "ext");
        let deliver = |body: &'static str| {
            runtime.block_on(memory.put(&Path::from("proj/ext/a"), body.into())).unwrap();
        };
        deliver("x");
        assert_eq!(text(dir.local_input(&external).unwrap().path().join("a")), "x");
        deliver("yy");
        assert_eq!(text(dir.local_input(&external).unwrap().path().join("a")), "yy", "a new listing, a new entry");
        let missing = dir.local_input(&key(&dir, "none")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        assert_eq!(missing.to_string(), "memory://test/proj/none: no objects there");
    }

    /// A version committed whose flag was never written (the process
    /// killed between the two) is there: its pointer identifies it.
    #[test]
    fn a_committed_version_without_its_flag_is_identified_by_its_pointer() {
        let (_local, memory, dir) = store();
        let data = key(&dir, "v/1");
        dir.publish(staged(&dir, &[("part", "rows")]), &data, "_SUCCESS").unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let pointer = runtime.block_on(memory.head(&Path::from("proj/v/1/_CURRENT"))).unwrap();
        runtime.block_on(memory.delete(&Path::from("proj/v/1/_SUCCESS"))).unwrap();
        assert_eq!(dir.identity(&data.join("_SUCCESS")), Some(identity_of(&pointer)));
        assert_eq!(dir.identity(&key(&dir, "v/2/_SUCCESS")), None, "nothing there");
    }

    #[test]
    fn versions_have_one_shape_and_differ() {
        let (a, b) = (new_version(), new_version());
        assert_ne!(a, b);
        assert!(is_version(&a) && is_version(&b), "{a} {b}");
        assert!(!is_version("../x") && !is_version("1-abc") && !is_version("-0123456789abcdef"));
    }
}
