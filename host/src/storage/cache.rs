//! The local cache of object-store data that plugins and engines read as
//! directories: one directory of read-only files per (view key, identity of its
//! data), shared by every call, view and run of the project, bounded in
//! size and evicted least recently used.
//!
//! An entry's identity is what tells one version of the data from
//! another: for a view trellis published, the version its pointer names
//! (a version's objects are written once, under a prefix of their own, so
//! the pointer's version is the whole of it); for data without a pointer
//! (delivered by others), a digest of its listing's names, ETags and sizes.
//!
//! Invariants: an entry's directory exists under its name only once all of
//! it is there: it is fetched into a hidden temporary directory, its files
//! made read-only, then renamed into place, so a crash
//! mid-fetch leaves only a hidden directory, which [`Cache::clean`]
//! removes and nothing takes for an entry. A second call wanting an entry
//! being fetched waits for that fetch rather than fetching it again. An
//! entry a running call holds a [`Lease`] on is never evicted: the cache
//! goes over its bound when the calls running need more than it, and
//! comes back under it as their leases end. Entries of another version of
//! the same key are evicted first (nothing reads a replaced version
//! again), then the least recently used; when an entry was last used is
//! its directory's modification time, so the order survives a restart.
//!
//! The cache belongs to the process that holds the project's metastore
//! (the scheduler's): only it fetches, evicts and cleans.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::SystemTime;

/// What an entry's directory name is made of: 16 hex digits of the key's
/// hash, `-`, 32 of its identity's. Hidden names (`.fetch-*`, `.evict-*`)
/// are work in progress, never entries.
const KEY_DIGITS: usize = 16;
const IDENTITY_DIGITS: usize = 32;

/// What fills an entry on a miss.
pub trait Fetch {
    /// The bytes the entry will hold (asked once it is known to be missing).
    fn size(&mut self) -> io::Result<u64>;
    /// Writes the entry's files into `dir`, an empty directory.
    fn fetch_into(&mut self, dir: &Path) -> io::Result<()>;
}

/// The cache in a local directory (created at first use).
#[derive(Debug, Clone)]
pub struct Cache {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    capacity: u64,
    state: Mutex<State>,
    /// Signalled when a fetch ends, for the calls waiting on it.
    fetched: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Whether the directory's entries have been read (at first use).
    loaded: bool,
    entries: HashMap<String, Entry>,
    /// Bytes of the entries there and of those being fetched.
    used: u64,
    /// A logical clock of uses: the least recently used has the lowest.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    size: u64,
    last_used: u64,
    leases: usize,
    /// Whole and in place; otherwise being fetched.
    ready: bool,
}

/// A running call's hold on an entry: the entry is not evicted while it
/// lives. Its directory is [`Lease::path`].
#[derive(Debug)]
pub struct Lease {
    shared: Arc<Shared>,
    name: String,
    path: PathBuf,
}

impl Lease {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let victims = {
            let mut state = self.shared.lock();
            let tick = state.tick();
            if let Some(entry) = state.entries.get_mut(&self.name) {
                entry.leases -= 1;
                entry.last_used = tick;
            }
            self.shared.evict(&mut state)
        };
        self.shared.remove(victims);
    }
}

impl Cache {
    /// The cache in `dir`, holding at most `capacity` bytes of entries no
    /// call holds.
    pub fn new(dir: &Path, capacity: u64) -> Cache {
        let shared =
            Shared { dir: dir.to_path_buf(), capacity, state: Mutex::new(State::default()), fetched: Condvar::new() };
        Cache { shared: Arc::new(shared) }
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Bytes held by the entries there and being fetched.
    pub fn used(&self) -> u64 {
        let mut state = self.shared.lock();
        self.shared.load(&mut state);
        state.used
    }

    /// A lease on the entry of `key` with `identity`: there already
    /// (waiting for a fetch of it in progress), or fetched by `fetch` now.
    /// A failed fetch leaves nothing, and the next call tries again.
    pub fn get(&self, key: &str, identity: &[u8], fetch: &mut dyn Fetch) -> io::Result<Lease> {
        let shared = &self.shared;
        let name = entry_name(key, identity);
        let lease = |name: &str| Lease { shared: shared.clone(), name: name.to_string(), path: shared.dir.join(name) };
        let mut state = shared.lock();
        shared.load(&mut state);
        loop {
            let tick = state.tick();
            match state.entries.get_mut(&name) {
                Some(entry) if entry.ready => {
                    entry.leases += 1;
                    entry.last_used = tick;
                    drop(state);
                    let lease = lease(&name);
                    // Its use on disk, for the order after a restart: best effort.
                    let _ = std::fs::File::open(&lease.path).and_then(|dir| dir.set_modified(SystemTime::now()));
                    return Ok(lease);
                }
                Some(_) => state = shared.fetched.wait(state).unwrap_or_else(|p| p.into_inner()),
                None => break,
            }
        }
        // Ours to fetch: the placeholder makes any other call wait for it.
        let tick = state.tick();
        state.entries.insert(name.clone(), Entry { size: 0, last_used: tick, leases: 1, ready: false });
        drop(state);
        let fetched = self.fill(key, &name, fetch);
        let mut state = shared.lock();
        let victims = match fetched {
            Ok(()) => {
                if let Some(entry) = state.entries.get_mut(&name) {
                    entry.ready = true;
                }
                // Another version of the same key is not read again: first to go.
                let prefix = &name[..KEY_DIGITS];
                for (other, entry) in state.entries.iter_mut() {
                    if other != &name && other.starts_with(prefix) && entry.ready {
                        entry.last_used = 0;
                    }
                }
                shared.evict(&mut state)
            }
            Err(_) => {
                if let Some(entry) = state.entries.remove(&name) {
                    state.used -= entry.size;
                }
                Vec::new()
            }
        };
        shared.fetched.notify_all();
        drop(state);
        shared.remove(victims);
        fetched.map(|()| lease(&name))
    }

    /// Reserves the entry's size (evicting what it must), fetches it into
    /// a hidden directory, makes its files read-only and renames it into place.
    fn fill(&self, key: &str, name: &str, fetch: &mut dyn Fetch) -> io::Result<()> {
        let shared = &self.shared;
        let size = fetch.size()?;
        let victims = {
            let mut state = shared.lock();
            if let Some(entry) = state.entries.get_mut(name) {
                entry.size = size;
            }
            state.used += size;
            shared.evict(&mut state)
        };
        shared.remove(victims);
        std::fs::create_dir_all(&shared.dir)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot create the cache {}: {e}", shared.dir.display())))?;
        let temporary = tempfile::Builder::new()
            .prefix(".fetch-")
            .tempdir_in(&shared.dir)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot fetch into {}: {e}", shared.dir.display())))?
            .keep();
        let place = || {
            seal(&temporary)?;
            std::fs::File::open(&temporary)?.sync_all()?;
            std::fs::rename(&temporary, shared.dir.join(name))
        };
        let filled = fetch.fetch_into(&temporary).and_then(|()| {
            place().map_err(|e| {
                io::Error::new(e.kind(), format!("cannot place {key} in the cache {}: {e}", shared.dir.display()))
            })
        });
        if filled.is_err() {
            remove_tree(&temporary);
        }
        filled
    }

    /// Removes what an interrupted process left: hidden directories of
    /// fetches and evictions that did not finish. Entries stay.
    pub fn clean(&self) -> io::Result<()> {
        let entries = match std::fs::read_dir(&self.shared.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".fetch-") || name.starts_with(".evict-") {
                remove_tree(&entry.path());
            }
        }
        Ok(())
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the entries a previous process left, once: their sizes, and
    /// their order of use by their directories' modification times.
    fn load(&self, state: &mut State) {
        if state.loaded {
            return;
        }
        state.loaded = true;
        let Ok(read) = std::fs::read_dir(&self.dir) else { return };
        let mut found = Vec::new();
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_entry_name(&name) {
                continue;
            }
            let modified = entry.metadata().and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((modified, name, tree_size(&entry.path())));
        }
        found.sort();
        for (_, name, size) in found {
            let tick = state.tick();
            state.used += size;
            state.entries.insert(name, Entry { size, last_used: tick, leases: 0, ready: true });
        }
        // A smaller bound than the last process's: down to it now.
        let victims = self.evict(state);
        self.remove(victims);
    }

    /// Takes out of `state` the entries to evict, least recently used
    /// first, until the cache is within its bound or every entry left is
    /// leased or being fetched; returns their names, for [`Shared::remove`].
    fn evict(&self, state: &mut State) -> Vec<String> {
        if state.used <= self.capacity {
            return Vec::new();
        }
        let mut candidates: Vec<(u64, String)> = state
            .entries
            .iter()
            .filter(|(_, entry)| entry.ready && entry.leases == 0)
            .map(|(name, entry)| (entry.last_used, name.clone()))
            .collect();
        candidates.sort();
        let mut victims = Vec::new();
        for (_, name) in candidates {
            if state.used <= self.capacity {
                break;
            }
            if let Some(entry) = state.entries.remove(&name) {
                state.used -= entry.size;
                victims.push(name);
            }
        }
        victims
    }

    /// Removes evicted entries' directories: each renamed to a hidden name
    /// first (one step, so its name is free at once and a crash leaves it
    /// to [`Cache::clean`]), then removed.
    fn remove(&self, victims: Vec<String>) {
        for name in victims {
            let path = self.dir.join(&name);
            let hidden = self.dir.join(format!(".evict-{name}"));
            match std::fs::rename(&path, &hidden) {
                Ok(()) => remove_tree(&hidden),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("cannot evict {} from the cache: {e}", path.display()),
            }
        }
    }
}

impl State {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

/// The directory name of `key`'s entry with `identity`.
fn entry_name(key: &str, identity: &[u8]) -> String {
    let key_hash = blake3::hash(key.as_bytes()).to_hex();
    let identity_hash = blake3::hash(identity).to_hex();
    format!("{}-{}", &key_hash[..KEY_DIGITS], &identity_hash[..IDENTITY_DIGITS])
}

fn is_entry_name(name: &str) -> bool {
    name.split_once('-').is_some_and(|(key, identity)| {
        key.len() == KEY_DIGITS
            && identity.len() == IDENTITY_DIGITS
            && key.bytes().chain(identity.bytes()).all(|b| b.is_ascii_hexdigit())
    })
}

/// Makes every file under `dir` read-only. Directories stay writable by
/// their owner, so that anything (a test's temporary directory, an
/// eviction) removes a tree as any other.
fn seal(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            seal(&entry.path())?;
        } else if kind.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o444))?;
        }
    }
    Ok(())
}

/// Removes a tree (a read-only file goes with its directory's permission).
fn remove_tree(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::warn!("cannot remove {} from the cache: {e}", dir.display());
        }
        _ => {}
    }
}

/// The bytes of the files under `dir`.
fn tree_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut size = 0;
    for entry in entries.flatten() {
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => size += tree_size(&entry.path()),
            Ok(kind) if kind.is_file() => size += entry.metadata().map_or(0, |m| m.len()),
            _ => {}
        }
    }
    size
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Writes `files` (name, content), counting its fetches; fails while
    /// `failing` says so.
    struct Files<'a> {
        files: &'a [(&'a str, &'a str)],
        fetches: &'a AtomicUsize,
        failing: bool,
    }

    impl Fetch for Files<'_> {
        fn size(&mut self) -> io::Result<u64> {
            Ok(self.files.iter().map(|(_, content)| content.len() as u64).sum())
        }

        fn fetch_into(&mut self, dir: &Path) -> io::Result<()> {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            for (name, content) in self.files {
                let path = dir.join(name);
                std::fs::create_dir_all(path.parent().unwrap())?;
                std::fs::write(path, content)?;
            }
            if self.failing { Err(io::Error::other("the store went away")) } else { Ok(()) }
        }
    }

    fn get(cache: &Cache, key: &str, version: &str, files: &[(&str, &str)], fetches: &AtomicUsize) -> Lease {
        cache.get(key, version.as_bytes(), &mut Files { files, fetches, failing: false }).unwrap()
    }

    /// What the cache directory holds, hidden names included, sorted.
    fn on_disk(cache: &Cache) -> Vec<String> {
        let mut names: Vec<String> = match std::fs::read_dir(cache.dir()) {
            Ok(entries) => entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
    }

    #[test]
    fn an_entry_is_fetched_once_read_only_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(&dir.path().join("cache"), 1 << 20);
        let fetches = AtomicUsize::new(0);
        let files = [("part-0.csv", "a,b\n"), ("sub/part-1.csv", "c\n")];
        let first = get(&cache, "t/v/2015", "v1", &files, &fetches);
        assert_eq!(std::fs::read_to_string(first.path().join("sub/part-1.csv")).unwrap(), "c\n");
        let again = get(&cache, "t/v/2015", "v1", &files, &fetches);
        assert_eq!((again.path(), fetches.load(Ordering::SeqCst)), (first.path(), 1));
        // Read-only files (by their modes: a test run as root could write
        // them anyway).
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&first.path().join("part-0.csv")), 0o444);
        assert_eq!(mode(&first.path().join("sub/part-1.csv")), 0o444);
        assert_eq!(cache.used(), 6);
        // Another key, or another version of the key, is another entry.
        get(&cache, "t/v/2016", "v1", &files, &fetches);
        get(&cache, "t/v/2015", "v2", &files, &fetches);
        assert_eq!(fetches.load(Ordering::SeqCst), 3);
        assert_eq!(on_disk(&cache).len(), 3);
    }

    #[test]
    fn the_least_recently_used_entry_no_call_holds_is_evicted_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), 10);
        let fetches = AtomicUsize::new(0);
        let four = [("f", "1234")];
        let a = get(&cache, "a", "1", &four, &fetches).path().to_path_buf();
        let b = get(&cache, "b", "1", &four, &fetches).path().to_path_buf();
        // `a` used again: `b` is now the least recently used.
        drop(get(&cache, "a", "1", &four, &fetches));
        let c = get(&cache, "c", "1", &four, &fetches);
        assert!(a.exists() && !b.exists() && c.path().exists());
        assert_eq!(cache.used(), 8);
        // `b` again is fetched again.
        drop(get(&cache, "b", "1", &four, &fetches));
        assert_eq!(fetches.load(Ordering::SeqCst), 4);
        assert!(!a.exists(), "then `a` was the least recently used");
        assert_eq!(on_disk(&cache).len(), 2, "{:?}", on_disk(&cache));
    }

    #[test]
    fn a_leased_entry_is_never_evicted_and_the_bound_comes_back_when_leases_end() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), 10);
        let fetches = AtomicUsize::new(0);
        let six = [("f", "123456")];
        let held = get(&cache, "a", "1", &six, &fetches);
        let also = get(&cache, "b", "1", &six, &fetches);
        // Both held: over the bound, both kept.
        assert_eq!(cache.used(), 12);
        assert!(held.path().exists() && also.path().exists());
        // An entry larger than the whole cache is still served while held.
        let large = get(&cache, "c", "1", &[("f", "0123456789abc")], &fetches);
        assert_eq!(std::fs::read_to_string(large.path().join("f")).unwrap(), "0123456789abc");
        let (b, c) = (also.path().to_path_buf(), large.path().to_path_buf());
        drop(also);
        assert!(!b.exists(), "released and over the bound: evicted");
        drop(large);
        assert!(!c.exists());
        assert!(held.path().exists());
        assert_eq!(cache.used(), 6);
    }

    #[test]
    fn a_new_version_of_a_key_goes_before_older_entries_of_other_keys() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), 12);
        let fetches = AtomicUsize::new(0);
        let four = [("f", "1234")];
        let other = get(&cache, "other", "1", &four, &fetches).path().to_path_buf();
        let old = get(&cache, "v", "1", &four, &fetches).path().to_path_buf();
        drop(get(&cache, "v", "2", &four, &fetches));
        drop(get(&cache, "third", "1", &four, &fetches));
        assert!(other.exists(), "least recently used, but not superseded");
        assert!(!old.exists(), "superseded by version 2");
    }

    #[test]
    fn concurrent_calls_for_one_entry_fetch_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), 1 << 20);
        let fetches = AtomicUsize::new(0);
        let barrier = std::sync::Barrier::new(8);
        let paths: Vec<PathBuf> = std::thread::scope(|scope| {
            let calls: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        let lease = get(&cache, "v", "1", &[("f", "rows")], &fetches);
                        assert_eq!(std::fs::read_to_string(lease.path().join("f")).unwrap(), "rows");
                        lease.path().to_path_buf()
                    })
                })
                .collect();
            calls.into_iter().map(|call| call.join().unwrap()).collect()
        });
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert!(paths.windows(2).all(|pair| pair[0] == pair[1]));
    }

    #[test]
    fn a_failed_or_interrupted_fetch_leaves_nothing_taken_for_an_entry() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), 1 << 20);
        let fetches = AtomicUsize::new(0);
        let files = [("f", "rows"), ("sub/g", "more")];
        let failed = cache.get("v", b"1", &mut Files { files: &files, fetches: &fetches, failing: true }).unwrap_err();
        assert_eq!(failed.to_string(), "the store went away");
        assert_eq!(on_disk(&cache), Vec::<String>::new());
        assert_eq!(cache.used(), 0);
        // A crash mid-fetch (and mid-eviction) leaves hidden directories:
        // a new process neither counts nor serves them, and cleaning removes them.
        std::fs::create_dir_all(dir.path().join(".fetch-abc123/sub")).unwrap();
        std::fs::write(dir.path().join(".fetch-abc123/sub/g"), "half").unwrap();
        seal(&dir.path().join(".fetch-abc123")).unwrap();
        std::fs::create_dir_all(dir.path().join(format!(".evict-{}", entry_name("w", b"1")))).unwrap();
        let restarted = Cache::new(dir.path(), 1 << 20);
        assert_eq!(restarted.used(), 0);
        restarted.clean().unwrap();
        assert_eq!(on_disk(&restarted), Vec::<String>::new());
        let lease = get(&restarted, "v", "1", &files, &fetches);
        assert_eq!(std::fs::read_to_string(lease.path().join("sub/g")).unwrap(), "more");
    }

    #[test]
    fn a_restarted_process_finds_the_entries_and_their_order_of_use() {
        let dir = tempfile::tempdir().unwrap();
        let fetches = AtomicUsize::new(0);
        let four = [("f", "1234")];
        let (a, b) = {
            let cache = Cache::new(dir.path(), 100);
            let a = get(&cache, "a", "1", &four, &fetches).path().to_path_buf();
            let b = get(&cache, "b", "1", &four, &fetches).path().to_path_buf();
            // `a` last used an hour after `b`.
            let later = SystemTime::now() + std::time::Duration::from_secs(3600);
            std::fs::File::open(&a).unwrap().set_modified(later).unwrap();
            (a, b)
        };
        // Restarted with a smaller bound: the least recently used goes.
        let cache = Cache::new(dir.path(), 4);
        assert_eq!(cache.used(), 4);
        assert!(a.exists() && !b.exists());
        drop(get(&cache, "a", "1", &four, &fetches));
        assert_eq!(fetches.load(Ordering::SeqCst), 2, "found, not fetched again");
    }
}
