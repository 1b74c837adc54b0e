//! Where view data lives: one interface for publishing a version
//! atomically, staging it, identifying a done flag, reading the small
//! files trellis itself writes (receipts, txlog markers) and listing a
//! view's files for digests and manifests.
//!
//! Invariant: no other module opens, stats, renames or watches a view's
//! files; they ask a [`ViewStore`] in view-relative [`Key`]s.
//!
//! The interface is shaped for an object store as much as for a local
//! directory: it speaks of keys, listings, identities and one publish of
//! a staged version, never of renames. The local directory
//! ([`local::LocalDir`]) publishes with one `renameat2` and resolves every
//! key relative to its root's descriptor, opened once. What a plugin
//! writes into is always a real local directory ([`Staged`]): wasmtime
//! preopens need one, and an object store uploads it at publish.
//!
//! The object store ([`object::ObjectDir`], S3 and S3-compatible stores
//! through the `object_store` crate) cannot rename, so a publish of the
//! view at `K` uploads the staged files under a prefix no other publish
//! uses, `K/_v/<version>/`, then commits them with ONE conditional PUT of
//! the pointer `K/_CURRENT` (`If-None-Match: *` for the first version,
//! `If-Match` the ETag read before the upload after that), whose JSON
//! body names the version (unique per commit, so that two commits of the
//! same bytes never share an ETag), then writes the done flag `K/<flag>`,
//! its body the version's id. The version it replaced is kept for the
//! grace period (`[project.s3] grace`), then removed by a later commit of
//! the view or by `trellis gc`, as are crashed publishes' uploads (see
//! `object::removable`). Of two
//! writers racing on one view, one commits and the other gets
//! `AlreadyExists` and removes its upload. trellis reads a view through
//! its pointer only; data without a pointer (delivered by others) is read
//! where it lies. An outside reader (Spark, Trino, Athena) waits for the
//! done flag and reads the prefix its body names, `K/_v/<body>/`; the
//! flag is rewritten only after the commit, and the version it names is
//! kept for the grace period after a later publish replaces it. A
//! project whose `storage` is `s3://...` is on it ([`open`]); `validate`
//! and `serve` [`ViewStore::probe`] each root at start.
//!
//! A plugin or an engine reads its inputs as local directories:
//! [`ViewStore::local_input`] gives one holding a view's current data,
//! the directory itself for a local root; for an object store, a
//! read-only copy in the project's [`cache`] (beside the metastore),
//! fetched once per version and leased while the call runs.
//!
//! Beside the store: [`watch`] tells what changed since it was last asked
//! (inotify here; an object store's watcher would list the watched
//! prefixes and compare), and [`grant`] holds what the runtime and the
//! engines need of the local directories granted to them (an output's
//! usage against its cap, where a grant really is, an engine's files
//! moved into staging), which an object store would materialize.

pub mod cache;
pub mod counted;
pub mod grant;
pub mod local;
pub mod object;
pub mod poll;
pub mod profile;
pub mod roots;
pub mod watch;

use std::io;
use std::path::{Path, PathBuf};

use crate::metastore::FlagIdentity;

pub use local::LocalDir;
pub use object::{Collected, ObjectDir, S3Config};

/// A view's storage, shared by the scheduler, its tasks and engines.
pub type Storage = std::sync::Arc<dyn ViewStore>;

/// The store of the project's storage roots, as its catalog declares them:
/// the project's root, and each root a view type declares of its own
/// ([`roots::Roots`] routes between them). A local root is the local
/// directory; an object store stages its versions in a local directory
/// beside the metastore (a plugin writes into a real directory), one per
/// root. The one place a root becomes a store, so that every command and
/// the scheduler read the same data the same way.
pub fn open(catalog: &crate::catalog::Catalog) -> Result<Storage, object::Error> {
    let settings = &catalog.settings;
    // One cache of inputs for every object root: one bound, one LRU order.
    let cache = cache::Cache::new(&settings.metastore.with_file_name("cache"), settings.s3.cache_bytes());
    let main = open_root(&settings.storage_url, settings, &cache)?;
    let mut others: Vec<Storage> = Vec::new();
    for view_type in catalog.types() {
        let Some(url) = &view_type.storage else { continue };
        let root = url.root();
        if root == settings.storage || others.iter().any(|store| store.root() == root) {
            continue;
        }
        others.push(open_root(url, settings, &cache)?);
    }
    if others.is_empty() {
        return Ok(main);
    }
    Ok(std::sync::Arc::new(roots::Roots::new(main, others)))
}

/// The store of one root.
fn open_root(
    url: &crate::catalog::StorageUrl,
    settings: &crate::catalog::Settings,
    cache: &cache::Cache,
) -> Result<Storage, object::Error> {
    use crate::catalog::StorageUrl;
    match url {
        StorageUrl::Local(path) => Ok(std::sync::Arc::new(LocalDir::new(path))),
        StorageUrl::S3(location) => {
            let options = &settings.s3;
            let config = S3Config {
                bucket: location.bucket.clone(),
                prefix: location.prefix.clone(),
                endpoint: options.endpoint.clone(),
                region: options.region.clone(),
                // AWS's own endpoint takes virtual hosts; an S3-compatible
                // store's (MinIO, Ceph, a test server) mostly paths.
                path_style: options.path_style.unwrap_or(options.endpoint.is_some()),
                allow_http: options.allows_http(),
            };
            // Each object root stages in a directory of its own, so that
            // one's cleaning never removes another's version in progress.
            let staging = match url.root() == settings.storage {
                true => settings.metastore.with_file_name("staging"),
                false => {
                    let digest = blake3::hash(location.to_string().as_bytes()).to_hex();
                    settings.metastore.with_file_name("staging").join(&digest[..16])
                }
            };
            Ok(std::sync::Arc::new(
                ObjectDir::s3(&config, &staging)?.with_cache(cache.clone()).with_grace(options.grace()),
            ))
        }
    }
}

/// Staging directories live under the storage root (one filesystem, so a
/// local publish is one rename), in a directory no view path can use:
/// view paths never start with a `.` component.
pub const STAGING_DIR: &str = ".trellis-staging";

/// A name relative to the storage root (`shop/2015/05/01/_SUCCESS`), as
/// the lattice renders a view's path. A path the lattice rendered outside
/// the root (an absolute view path) is kept whole and names the same file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(PathBuf);

impl Key {
    /// The key of `path`, a path the lattice rendered under `root`.
    pub fn of(root: &Path, path: &Path) -> Key {
        match path.strip_prefix(root) {
            Ok(relative) if relative.as_os_str().is_empty() => Key(PathBuf::from(".")),
            Ok(relative) => Key(relative.to_path_buf()),
            Err(_) => Key(path.to_path_buf()),
        }
    }

    /// The key of `name` inside this one (a flag inside a view's data).
    pub fn join(&self, name: &str) -> Key {
        Key(self.0.join(name))
    }

    /// Whether the key names something under the root (not a view path
    /// rendered outside it).
    pub fn is_under_root(&self) -> bool {
        self.0.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
    }

    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// The key this one is inside (a flag's data), if it is not the root.
    pub fn parent(&self) -> Option<Key> {
        let parent = self.0.parent()?;
        (!parent.as_os_str().is_empty() && parent != Path::new(".")).then(|| Key(parent.to_path_buf()))
    }

    /// The prefix a flag shares with its siblings' flags: the directory
    /// above its view's data (`raw/SHOP10/2015/05` for
    /// `raw/SHOP10/2015/05/01/_SUCCESS`), if that is below the root (the
    /// whole root is never listed for a flag). One listing of it sees
    /// every day's flag and pointer of the month.
    pub fn shared_prefix(&self) -> Option<Key> {
        self.parent()?.parent()
    }
}

/// Whether anything is at a key, asked during one walk ([`ViewStore::presence`]).
pub trait Presence {
    fn exists(&self, key: &Key) -> bool;
}

/// A store's presence where nothing is cheaper than asking each key.
struct AskEach<'a, S: ?Sized>(&'a S);

impl<S: ViewStore + ?Sized> Presence for AskEach<'_, S> {
    fn exists(&self, key: &Key) -> bool {
        self.0.exists(key)
    }
}

/// A done flag as one look at many saw it ([`ViewStore::sight`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sighting {
    /// Not looked at: [`ViewStore::identity`] tells.
    Unknown,
    /// As a listing saw it. `None`: nothing is there. An identity equals
    /// the one [`ViewStore::identity`] tells where the bucket keeps no
    /// versions; a listing names no version id, so where it keeps them,
    /// one that differs may still be the same object.
    Listed(Option<FlagIdentity>),
}

/// One entry of a listing: its name relative to the listed key (`/`
/// between components), and what tells it from another version of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub is_dir: bool,
    pub identity: FlagIdentity,
}

/// How to list a key's entries, recursively.
pub struct Walk<'a> {
    /// Whether links are followed (as the SDK's readers do) or listed as
    /// themselves.
    pub follow_links: bool,
    /// Whether a name that is not UTF-8 is an error (a manifest must name
    /// files exactly) or is listed lossily (a digest only tells versions apart).
    pub exact_names: bool,
    /// Which entries are listed, given their relative name; a directory
    /// not kept is not entered.
    pub keep: &'a dyn Fn(&str) -> bool,
}

/// What a view's data is kept in.
pub trait ViewStore: Send + Sync + std::fmt::Debug {
    /// The root every key is relative to, as the user configured it.
    fn root(&self) -> &Path;

    /// The key of a path the lattice rendered.
    fn key(&self, path: &Path) -> Key {
        Key::of(self.root(), path)
    }

    /// What identifies the object at `key` now (a done flag, or a data
    /// directory when a view has no flag), links followed; `None` when
    /// there is nothing there or it cannot be read.
    fn identity(&self, key: &Key) -> Option<FlagIdentity>;

    /// What [`ViewStore::identity`] would tell of each of `keys`, where
    /// looking at them together costs fewer requests: one listing of a
    /// prefix several share (the days of a month, [`Key::shared_prefix`])
    /// in place of a HEAD each. `Unknown` for the rest, and for every key
    /// of a local root, whose stat is cheaper than anything.
    fn sight(&self, keys: &[Key]) -> Vec<Sighting> {
        vec![Sighting::Unknown; keys.len()]
    }

    /// Whether anything is at `key`.
    fn exists(&self, key: &Key) -> bool {
        self.identity(key).is_some()
    }

    /// For a walk that asks [`ViewStore::exists`] of many keys one at a
    /// time, not knowing the next ahead (`latest()`, from the newest
    /// instance back): an object store lists each shared prefix once, at
    /// the first key asked below it, where each key would cost up to three
    /// HEADs. Lives for one walk: what it listed does not change under it.
    fn presence(&self) -> Box<dyn Presence + '_> {
        Box::new(AskEach(self))
    }

    /// Whether `key` holds a version's data that can be read as inputs: a
    /// directory here (links followed); a prefix holding objects in an
    /// object store.
    fn holds_data(&self, key: &Key) -> bool;

    /// A small file's contents (a receipt, a marker); `None` when absent.
    fn read(&self, key: &Key) -> io::Result<Option<Vec<u8>>>;

    /// Every entry below `key` that `walk` keeps, in no particular order.
    fn list(&self, key: &Key, walk: &Walk) -> io::Result<Vec<Listed>>;

    /// A new, empty local directory to write a version into.
    fn stage(&self) -> io::Result<Staged>;

    /// The same, for a version to be published at `key` (a store of
    /// several roots stages it in the root that holds `key`).
    fn stage_for(&self, _key: &Key) -> io::Result<Staged> {
        self.stage()
    }

    /// Makes `staged` the data at `key`, replacing what was there in one
    /// step: readers see the old version or the new, never a mix.
    /// `done_flag` is the type's flag (`""` when it has none), already in
    /// `staged`: a store whose readers cannot see a commit as one step
    /// writes it again after the commit, for them.
    fn publish(&self, staged: Staged, key: &Key, done_flag: &str) -> io::Result<()>;

    /// Writes the done flag of the view at `key` again, where the store
    /// writes it after the commit for outside readers and a process ended
    /// between the two (the version committed, the flag never written).
    /// Whether it wrote one; a local root's flag is inside the version.
    fn restore_flag(&self, key: &Key, done_flag: &str) -> io::Result<bool> {
        let _ = (key, done_flag);
        Ok(false)
    }

    /// Removes the staging an interrupted process left behind, and
    /// nothing it did not make.
    fn clean_staging(&self) -> io::Result<()>;

    /// Proves the root reachable and writable, or says in one line why it
    /// is not (`validate` and `serve` ask at start). A local root proves
    /// nothing ahead: its directories are made as publishes need them.
    fn probe(&self) -> Result<(), String> {
        Ok(())
    }

    /// For each of `keys`, the prefix an outside reader reads its current
    /// version under, where the store publishes versions under prefixes
    /// of their own (`s3://bucket/prefix/<view>/_v/<id>/`); `None` where
    /// the data is read where it lies (a local root).
    fn current_prefixes(&self, keys: &[Key]) -> Vec<Option<String>> {
        vec![None; keys.len()]
    }

    /// `trellis gc`: removes the old versions and crashed publishes'
    /// orphans that have been removable for longer than `grace` (or on a
    /// `dry_run` says which); `None` where a publish leaves nothing behind
    /// to collect (a local root replaces a version in one rename).
    fn collect(&self, grace: std::time::Duration, dry_run: bool) -> io::Result<Option<object::Collected>> {
        let _ = (grace, dry_run);
        Ok(None)
    }

    /// A local, read-only directory holding the current data at `key`,
    /// for a plugin or an engine to read as its input; it stays as it is
    /// while the [`LocalInput`] lives (hold it until the call ends). Called
    /// on a blocking thread: it may fetch the data first.
    fn local_input(&self, key: &Key) -> io::Result<LocalInput>;

    /// Whether a publish keeps each staged file's mtime and inode (a
    /// rename does), so that a listing of what was published tells the
    /// same identities as the staged version's; else only names and sizes
    /// survive it (an upload).
    fn publish_keeps_identities(&self, _key: &Key) -> bool {
        self.as_object().is_none()
    }

    /// The object store this is, when it is one: its changes are learnt
    /// by polling it (`poll`), where a local directory's are the kernel's
    /// to tell (`watch`).
    fn as_object(&self) -> Option<&ObjectDir> {
        None
    }

    /// The roots this store routes between, when it is several.
    fn as_roots(&self) -> Option<&roots::Roots> {
        None
    }
}

/// A view's data as a local directory, for the length of a call.
#[derive(Debug)]
pub struct LocalInput {
    path: PathBuf,
    /// The cache's entry it is, kept from eviction; none for a local root.
    lease: Option<cache::Lease>,
}

impl LocalInput {
    /// The directory where it lies.
    pub fn in_place(path: PathBuf) -> LocalInput {
        LocalInput { path, lease: None }
    }

    /// A cache entry, leased.
    pub fn cached(lease: cache::Lease) -> LocalInput {
        LocalInput { path: lease.path().to_path_buf(), lease: Some(lease) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it is a copy staged from the store (not the data in place).
    pub fn is_staged(&self) -> bool {
        self.lease.is_some()
    }
}

/// A staging directory in use: a local directory a transformation writes
/// into. Dropped without being published (its task aborted by a stop, or
/// failed), it removes itself, so that a clean stop leaves nothing behind.
#[derive(Debug)]
pub struct Staged {
    path: PathBuf,
    /// Published: nothing left to remove.
    gone: bool,
}

impl Staged {
    /// The directory, as granted to a plugin or an engine.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the host's own file `name` at the top of the staged version,
    /// replacing whatever the plugin left under that name.
    pub fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let path = self.path.join(name);
        match std::fs::write(&path, bytes) {
            Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
                std::fs::remove_dir_all(&path)?;
                std::fs::write(path, bytes)
            }
            written => written,
        }
    }

    /// Writes an empty file `name` (a done flag) into the staged version.
    pub fn touch(&self, name: &str) -> io::Result<()> {
        std::fs::write(self.path.join(name), b"")
    }

    /// Every entry of the staged version that `walk` keeps.
    pub fn list(&self, walk: &Walk) -> io::Result<Vec<Listed>> {
        local::walk(rustix::fs::CWD, &self.path, walk)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.gone {
            local::remove_quietly(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(storage: &str) -> (tempfile::TempDir, crate::catalog::Settings) {
        let dir = tempfile::tempdir().unwrap();
        let s3 = if storage.starts_with("s3://") { "\n[project.s3]\nendpoint = \"http://127.0.0.1:9\"\n" } else { "" };
        let text = format!("[project]\nname = \"p\"\nstorage = \"{storage}\"\n{s3}\n[[view]]\nname = \"a.raw/Day\"\n");
        let catalog = crate::catalog::parse(&text, dir.path()).expect("the test project parses");
        (dir, catalog.settings.clone())
    }

    /// The catalog renders an S3 root's data paths under the root's URL as
    /// a path; the store opened for it must strip exactly that, or every
    /// key would name the wrong object.
    #[test]
    fn each_root_opens_a_store_whose_keys_are_the_lattices_paths_under_it() {
        for storage in ["data", "s3://views/proj", "s3://views"] {
            let (_dir, settings) = settings(storage);
            let cache = cache::Cache::new(&settings.metastore.with_file_name("cache"), settings.s3.cache_bytes());
            let store = open_root(&settings.storage_url, &settings, &cache).unwrap();
            assert_eq!(store.root(), settings.storage, "{storage}");
            let data = settings.storage.join("a/raw/2015/05/01");
            assert_eq!(store.key(&data).as_path(), Path::new("a/raw/2015/05/01"), "{storage}");
            assert!(store.key(&data).is_under_root(), "{storage}");
        }
    }
}
