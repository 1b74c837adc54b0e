//! Learning what changed in the view storage since it was last asked.
//! [`Watches`] is the interface: the caller names what it watches by its
//! own number (the scheduler's view id) and a key (a done flag awaited, or
//! a published version's flag), and asks which of them changed since it
//! last asked, or whether everything must be taken as changed. It knows
//! nothing of what a change means: the scheduler's memo decides that.
//!
//! Locally it is inotify: the directories from the storage root down to an
//! awaited flag, and a published flag itself, whose changes the kernel
//! queues the moment they happen. An object store has no such queue: its
//! watches are polled ([`super::poll`]), and what a poll found differs is
//! reported as the kernel's changes are.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchMask};

use super::Key;
use crate::metastore::FlagIdentity;

/// Who watches: the caller's own number for what it watches (a view).
pub type Watching = u32;

/// What changed since the last call to [`Watches::changed`].
#[derive(Debug, PartialEq, Eq)]
pub enum Changed {
    /// These, each no longer watched (watch it again before reading it).
    These(HashSet<Watching>),
    /// Changes were lost: nothing watched can be vouched for, and nothing
    /// is watched any more.
    Everything,
}

/// The watches on a project's storage roots: the kernel's over every local
/// root, and polls of each object store.
pub struct Watches {
    notified: Option<Notified>,
    polled: Vec<super::poll::Polled>,
    /// Each root (the project's first) and who watches it, for routing a
    /// key as `storage::roots` does.
    routes: Vec<(PathBuf, Route)>,
}

/// Which watches a root's keys go to.
#[derive(Debug, Clone, Copy)]
enum Route {
    Local,
    Polled(usize),
}

impl Watches {
    /// The watches on `storage`'s roots, or why there cannot be any (a
    /// local root and no inotify here).
    pub fn of(storage: &super::Storage) -> std::io::Result<Watches> {
        let stores: Vec<super::Storage> = match storage.as_roots() {
            Some(roots) => roots.stores().to_vec(),
            None => vec![storage.clone()],
        };
        let mut watches = Watches { notified: None, polled: Vec::new(), routes: Vec::new() };
        for store in stores {
            let route = match store.as_object() {
                Some(_) => {
                    watches.polled.push(super::poll::Polled::new(store.clone()));
                    Route::Polled(watches.polled.len() - 1)
                }
                None => {
                    if watches.notified.is_none() {
                        watches.notified = Some(Notified::new()?);
                    }
                    Route::Local
                }
            };
            watches.routes.push((store.root().to_path_buf(), route));
        }
        Ok(watches)
    }

    /// The root holding `key`, who watches it, and the key in it.
    fn route(&self, key: &Key) -> (PathBuf, Route, Key) {
        let ((root, route), key) = super::roots::route(&self.routes, key, |(root, _)| root.as_path());
        (root.clone(), *route, key)
    }

    /// Whether `who` is watched, and if so whether its flag's own
    /// directory is (else only what is above it: the flag's directory
    /// did not exist yet).
    pub fn watching(&self, who: Watching) -> Option<bool> {
        self.notified
            .as_ref()
            .and_then(|watches| watches.watching(who))
            .or_else(|| self.polled.iter().find_map(|watches| watches.watching(who)))
    }

    /// Watches for a done flag at `flag` to arrive, change or go, before
    /// it is read (see [`Notified::await_flag`], [`super::poll::Polled::await_flag`]):
    /// on an object store, what the watch's first look saw of it, which
    /// the caller need not ask again (a HEAD saves a HEAD).
    pub fn await_flag(&mut self, who: Watching, flag: &Key) -> Option<Option<FlagIdentity>> {
        match self.route(flag) {
            (root, Route::Local, key) => {
                if let Some(watches) = &mut self.notified {
                    watches.await_flag(who, &root, &key);
                }
                None
            }
            (_, Route::Polled(index), key) => self.polled[index].await_flag(who, &key),
        }
    }

    /// Starts watching those of `flags` on an object store that a listing
    /// of their shared prefix sees absent (see
    /// [`super::poll::Polled::await_absent`]), and says which; a local
    /// root's are left to [`Watches::await_flag`], whose watch costs no request.
    pub fn await_absent(&mut self, flags: &[(Watching, Key)]) -> Vec<bool> {
        let mut watched = vec![false; flags.len()];
        // Each polled store's share of `flags`: where each is in `flags`, and
        // the flag in the store's own key.
        let mut places: Vec<Vec<usize>> = vec![Vec::new(); self.polled.len()];
        let mut shares: Vec<Vec<(Watching, Key)>> = vec![Vec::new(); self.polled.len()];
        for (at, (who, flag)) in flags.iter().enumerate() {
            if let (_, Route::Polled(index), key) = self.route(flag) {
                places[index].push(at);
                shares[index].push((*who, key));
            }
        }
        for ((polled, places), share) in self.polled.iter_mut().zip(places).zip(shares) {
            for (at, started) in places.into_iter().zip(polled.await_absent(&share)) {
                watched[at] = started;
            }
        }
        watched
    }

    /// Watches a published done flag itself.
    pub fn watch_published(&mut self, who: Watching, flag: &Key) {
        match self.route(flag) {
            (root, Route::Local, key) => {
                if let Some(watches) = &mut self.notified {
                    watches.watch_published(who, &root, &key);
                }
            }
            (_, Route::Polled(index), _) => self.polled[index].watch_published(who),
        }
    }

    /// A descriptor to wait on for the kernel's changes; none where every
    /// root is polled.
    pub fn descriptor(&self) -> Option<OwnedFd> {
        self.notified.as_ref().and_then(Notified::descriptor)
    }

    /// Who changed since the last call.
    pub fn changed(&mut self) -> Changed {
        let mut changed = match &mut self.notified {
            Some(watches) => match watches.changed() {
                Changed::These(changed) => changed,
                Changed::Everything => return Changed::Everything,
            },
            None => HashSet::new(),
        };
        for watches in &mut self.polled {
            changed.extend(watches.changed());
        }
        Changed::These(changed)
    }

    /// Whether some root's changes are learnt only by [`Watches::poll`].
    pub fn is_polled(&self) -> bool {
        !self.polled.is_empty()
    }

    /// Asks each object store what changed (the kernel's changes come by
    /// themselves).
    pub fn poll(&mut self) -> super::poll::Asked {
        let mut asked = super::poll::Asked::default();
        for watches in &mut self.polled {
            let more = watches.poll();
            asked.heads += more.heads;
            asked.lists += more.lists;
            asked.pages += more.pages;
            asked.changed += more.changed;
        }
        asked
    }
}

/// The kernel's watches on local storage roots (each call names the root
/// its key is relative to: directories are watched up to it).
pub struct Notified {
    watcher: Watcher,
    /// Watched directories (and objects) by watch id, with who watches
    /// what is in them or below them.
    watched: HashMap<WatchId, (PathBuf, HashSet<Watching>)>,
    by_dir: HashMap<PathBuf, WatchId>,
    /// Who is watched, and whether its flag's own directory is among the
    /// watched ones (else only directories above it, which exist).
    watch_of: HashMap<Watching, bool>,
}

impl Notified {
    /// Watches, or why there cannot be any (no inotify here).
    pub fn new() -> std::io::Result<Notified> {
        Ok(Notified {
            watcher: Watcher::new()?,
            watched: HashMap::new(),
            by_dir: HashMap::new(),
            watch_of: HashMap::new(),
        })
    }

    /// Whether `who` is watched, and if so whether its flag's own
    /// directory is (else only what is above it: the flag's directory
    /// did not exist yet).
    pub fn watching(&self, who: Watching) -> Option<bool> {
        self.watch_of.get(&who).copied()
    }

    /// Watches for a done flag at `flag` to arrive, change or go, before
    /// it is read: its directory and every directory above it up to the
    /// storage root, so that a directory renamed, replaced or re-linked
    /// anywhere on the way is seen too (inotify watches follow
    /// directories, not paths). They are added from the root down, each
    /// before its child is looked for, so a directory created at any
    /// moment is either watched or seen appearing. A storage root that
    /// does not exist yet is seen appearing by the nearest directory above
    /// it that does (a server started before its `data/`); the flag is
    /// watched again, deeper, once it appears. A flag that is a directory
    /// (an empty `done_flag`: the data directory itself) is watched as one.
    /// A key outside the root is not watched.
    pub fn await_flag(&mut self, who: Watching, root: &Path, flag: &Key) {
        if self.watch_of.contains_key(&who) || !flag.is_under_root() {
            return;
        }
        let flag = root.join(flag.as_path());
        let Some(parent) = flag.parent() else { return };
        // Root first: the storage root (or the nearest directory above it
        // that exists), each directory below it, the flag.
        let top = root.ancestors().find(|dir| dir.is_dir()).unwrap_or(root).to_path_buf();
        let chain: Vec<&Path> = flag.ancestors().take_while(|dir| dir.starts_with(&top)).collect();
        let mut watched_parent = false;
        let mut watched_any = false;
        for dir in chain.into_iter().rev() {
            // A directory watched already is not looked at again: had it gone,
            // its watch's event, taken in before the next look, reports
            // everyone registered with it, this one included.
            let wd = match self.by_dir.get(dir).copied().filter(|wd| self.watched.contains_key(wd)) {
                Some(wd) => wd,
                None if dir.is_dir() => match self.add_watch(dir) {
                    Some(wd) => wd,
                    None => return,
                },
                // Not there (or the flag, a file): the watch above sees it appear.
                None => break,
            };
            self.watched.get_mut(&wd).expect("watched holds every id by_dir gives").1.insert(who);
            watched_any = true;
            watched_parent |= dir == parent;
        }
        // With data, the flag's own directory must be watched; a flag that
        // is a directory and appeared after the loop passed it is seen
        // appearing by its parent's watch.
        if watched_any {
            self.watch_of.insert(who, watched_parent);
        }
    }

    /// Watches a published done flag itself (the data directory, when the
    /// flag is empty): its deletion (with its directory's), replacement or
    /// change is reported, while what is published beside it is not. A
    /// flag that is not there is not watched.
    pub fn watch_published(&mut self, who: Watching, root: &Path, flag: &Key) {
        if self.watch_of.contains_key(&who) {
            return;
        }
        let flag = root.join(flag.as_path());
        let added = self.watcher.watch_object(&flag);
        if let Some(wd) = self.register(&flag, added, "its view is checked on every run")
            && let Some((_, watching)) = self.watched.get_mut(&wd)
        {
            watching.insert(who);
            self.watch_of.insert(who, true);
        }
    }

    /// A copy of the watches' descriptor, to wait on (it is readable when
    /// changes are queued; [`Notified::changed`] takes them in).
    pub fn descriptor(&self) -> Option<OwnedFd> {
        self.watcher.descriptor()
    }

    /// Who changed since the last call: everything the kernel has queued.
    pub fn changed(&mut self) -> Changed {
        let mut changed = HashSet::new();
        loop {
            let touched = match self.watcher.changes() {
                Changes::None => return Changed::These(changed),
                Changes::Touched(touched) => touched,
                Changes::Lost => {
                    self.watched.clear();
                    self.by_dir.clear();
                    self.watch_of.clear();
                    // The kernel's watches stay; their events now map to
                    // nothing until a directory is watched again (inotify
                    // returns the same id then).
                    return Changed::Everything;
                }
            };
            for (wd, gone) in touched {
                // Reported, and watched again (perhaps closer to their own
                // directory) when next looked at.
                let watching = match self.watched.get_mut(&wd) {
                    Some((_, watching)) => std::mem::take(watching),
                    None => continue,
                };
                for who in watching {
                    self.watch_of.remove(&who);
                    changed.insert(who);
                }
                if gone && let Some((dir, _)) = self.watched.remove(&wd) {
                    // (A path watched anew since has another id: keep it.)
                    if self.by_dir.get(&dir) == Some(&wd) {
                        self.by_dir.remove(&dir);
                    }
                }
            }
        }
    }

    fn add_watch(&mut self, dir: &Path) -> Option<WatchId> {
        let added = self.watcher.watch_dir(dir);
        let wd = self.register(dir, added, "views below it are checked on every run")?;
        self.by_dir.insert(dir.to_path_buf(), wd);
        Some(wd)
    }

    /// Registers the watch added on `path`; a watch that could not be
    /// added is logged with `otherwise`, what follows from it.
    fn register(&mut self, path: &Path, added: std::io::Result<WatchId>, otherwise: &str) -> Option<WatchId> {
        match added {
            Ok(wd) => {
                self.watched.entry(wd).or_insert_with(|| (path.to_path_buf(), HashSet::new()));
                Some(wd)
            }
            Err(e) => {
                tracing::debug!("not watching {}: {e}; {otherwise}", path.display());
                None
            }
        }
    }
}

/// What a watch is known by: the kernel's watch id (the same again when a
/// path is watched anew while its watch stands).
type WatchId = i32;

/// What the kernel had queued since the last call.
#[derive(Debug, PartialEq, Eq)]
enum Changes {
    /// Nothing more is queued.
    None,
    /// Changes under these watches; `true` for one that is gone (its
    /// directory or object deleted, moved or unwatchable).
    Touched(Vec<(WatchId, bool)>),
    /// Changes were lost (the queue overflowed, or could not be read):
    /// nothing watched can be vouched for.
    Lost,
}

struct Watcher {
    inotify: Inotify,
    buffer: Vec<u8>,
}

impl Watcher {
    /// A watcher, or why there cannot be one (no inotify here).
    fn new() -> std::io::Result<Watcher> {
        Ok(Watcher { inotify: Inotify::init()?, buffer: vec![0; 64 * 1024] })
    }

    /// Watches a directory for anything created, changed, moved or
    /// deleted in it, and for its own deletion or move.
    fn watch_dir(&mut self, dir: &Path) -> std::io::Result<WatchId> {
        let mask = WatchMask::ATTRIB
            | WatchMask::CLOSE_WRITE
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::DELETE_SELF
            | WatchMask::MODIFY
            | WatchMask::MOVE_SELF
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO;
        self.add(dir, mask)
    }

    /// Watches one object (a published done flag, or a data directory)
    /// for its deletion, replacement or change, not for what is beside it.
    /// Added to, never replacing, a mask a directory may have already.
    fn watch_object(&mut self, path: &Path) -> std::io::Result<WatchId> {
        let mask =
            WatchMask::ATTRIB | WatchMask::DELETE_SELF | WatchMask::MOVE_SELF | WatchMask::MODIFY | WatchMask::MASK_ADD;
        self.add(path, mask)
    }

    fn add(&mut self, path: &Path, mask: WatchMask) -> std::io::Result<WatchId> {
        Ok(self.inotify.watches().add(path, mask)?.get_watch_descriptor_id())
    }

    /// A copy of the watches' descriptor, to wait on (it is readable when
    /// changes are queued; [`Watcher::changes`] reads them).
    fn descriptor(&self) -> Option<OwnedFd> {
        self.inotify.as_fd().try_clone_to_owned().ok()
    }

    /// The next batch of changes the kernel has queued, without waiting.
    fn changes(&mut self) -> Changes {
        match self.inotify.read_events(&mut self.buffer) {
            Ok(events) => {
                let mut touched = Vec::new();
                for event in events {
                    if event.mask.contains(EventMask::Q_OVERFLOW) {
                        return Changes::Lost;
                    }
                    let gone =
                        event.mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED);
                    touched.push((event.wd.get_watch_descriptor_id(), gone));
                }
                Changes::Touched(touched)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Changes::None,
            Err(e) => {
                tracing::warn!("reading inotify events failed ({e}); every view is checked again");
                Changes::Lost
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flag created in a watched directory, and a watched object
    /// deleted, are reported under their watches; nothing queued is none.
    #[test]
    fn changes_are_reported_under_their_watches() {
        let dir = tempfile::tempdir().unwrap();
        let mut watcher = Watcher::new().unwrap();
        assert_eq!(watcher.changes(), Changes::None);
        let tree = watcher.watch_dir(dir.path()).unwrap();
        std::fs::write(dir.path().join("_SUCCESS"), "").unwrap();
        let Changes::Touched(touched) = watcher.changes() else { panic!("a change is queued") };
        assert!(touched.contains(&(tree, false)), "{touched:?}");
        while watcher.changes() != Changes::None {}
        let flag = watcher.watch_object(&dir.path().join("_SUCCESS")).unwrap();
        std::fs::remove_file(dir.path().join("_SUCCESS")).unwrap();
        let mut seen = Vec::new();
        while let Changes::Touched(touched) = watcher.changes() {
            seen.extend(touched);
        }
        assert!(seen.contains(&(flag, true)), "{seen:?}");
    }

    fn key(relative: &str) -> Key {
        Key::of(Path::new("/root"), &Path::new("/root").join(relative))
    }

    /// Watches speak in keys and say who changed since they were last
    /// asked: a flag awaited in a directory that does not exist yet is
    /// reported when its directory appears (then watched again, deeper, and
    /// reported when the flag arrives); a published flag is reported when
    /// it goes; someone reported is no longer watched; a key outside the
    /// root is not watched at all.
    #[test]
    fn watches_report_who_changed_since_last_asked() {
        let root = tempfile::tempdir().unwrap();
        let mut watches = Notified::new().unwrap();
        let awaited = key("shop/2015/_SUCCESS");
        watches.await_flag(1, root.path(), &awaited);
        assert_eq!(watches.watching(1), Some(false), "only the root is there to watch");
        assert_eq!(watches.changed(), Changed::These(HashSet::new()));
        std::fs::create_dir_all(root.path().join("shop/2015")).unwrap();
        assert_eq!(watches.changed(), Changed::These(HashSet::from([1])));
        assert_eq!(watches.watching(1), None);
        watches.await_flag(1, root.path(), &awaited);
        assert_eq!(watches.watching(1), Some(true), "its own directory is watched now");
        std::fs::write(root.path().join("shop/2015/_SUCCESS"), "").unwrap();
        assert_eq!(watches.changed(), Changed::These(HashSet::from([1])));

        watches.watch_published(2, root.path(), &awaited);
        assert_eq!(watches.watching(2), Some(true));
        std::fs::write(root.path().join("shop/2015/beside"), "").unwrap();
        assert_eq!(
            watches.changed(),
            Changed::These(HashSet::new()),
            "what is beside a published flag is not its change"
        );
        std::fs::remove_file(root.path().join("shop/2015/_SUCCESS")).unwrap();
        assert_eq!(watches.changed(), Changed::These(HashSet::from([2])));

        watches.await_flag(3, root.path(), &Key::of(root.path(), Path::new("/elsewhere/_SUCCESS")));
        assert_eq!(watches.watching(3), None);
    }
}
