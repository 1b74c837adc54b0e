//! Freshness a long-lived scheduler remembers between runs, so that a run
//! visits what may have changed (the cone of a new input, of an
//! invalidation, of a rematerialized view) instead of the whole lattice.
//!
//! A view is *clean* when a DEFAULT run found it materialized or without
//! data and nothing it depends on has changed since. New external data, and
//! published data deleted, are learnt from watches (`storage::watch`) on the
//! directories of done flags (external views', and materialized views'); the
//! kernel queues a change the moment it happens, and every run
//! drains that queue before it looks at a view, so a change made before a
//! request is always seen by it.
//!
//! Invariants: a clean view's dependencies are all clean (so marking a view
//! dirty dirties every view above it, and dirtying can stop at a view that
//! is dirty already); an external or materialized view is clean only while
//! its flag's directory is watched, and the watch is added before its flag is read;
//! anything the memo cannot vouch for (a lost watch, an overflowed queue)
//! is dirty; a view with `latest(n)` dependencies is never clean (an
//! instance it could move to may not be in the lattice, let alone
//! watched), and when its edges move the reverse edges follow. It knows the
//! lattice's edges and nothing of states or the metastore.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::lattice::{Lattice, ViewId};
use crate::storage::watch::{Changes, WatchId, Watcher};

pub(super) struct Memo {
    clean: Vec<bool>,
    /// Reverse edges: who depends on each view.
    dependents: Vec<Vec<ViewId>>,
    watcher: Watcher,
    /// Where all data lives: directories are watched up to it.
    storage: PathBuf,
    /// Watched directories by watch id, with the external views whose
    /// flags are in them or below them.
    watched: HashMap<WatchId, (PathBuf, HashSet<ViewId>)>,
    by_dir: HashMap<PathBuf, WatchId>,
    /// Watched external views, and whether their own directory is among
    /// the watched ones (else only directories above it, which exist).
    watch_of: HashMap<ViewId, bool>,
}

impl Memo {
    /// A memo, or why there cannot be one (no inotify here): the scheduler
    /// then checks every view on every run, as the embedded one does.
    pub fn new(storage: &Path) -> std::io::Result<Memo> {
        Ok(Memo {
            clean: Vec::new(),
            dependents: Vec::new(),
            watcher: Watcher::new()?,
            storage: storage.to_path_buf(),
            watched: HashMap::new(),
            by_dir: HashMap::new(),
            watch_of: HashMap::new(),
        })
    }

    /// Takes in the views added to the lattice since the last call.
    pub fn grow(&mut self, lattice: &Lattice) {
        let known = self.clean.len();
        self.clean.resize(lattice.len(), false);
        self.dependents.resize_with(lattice.len(), Vec::new);
        for index in known..lattice.len() {
            let id = ViewId(index as u32);
            for &dependency in lattice.dependencies(id) {
                self.dependents[dependency.0 as usize].push(id);
            }
        }
    }

    pub fn is_clean(&self, id: ViewId) -> bool {
        self.clean.get(id.0 as usize).copied().unwrap_or(false)
    }

    /// Marks a view settled as up to date clean, if all it depends on is.
    /// A view whose data is on disk (`on_disk`: external data, or published
    /// data) must be watched: with data, its own directory; without (external
    /// data only), at least the nearest directory that exists above it.
    pub fn settled(&mut self, id: ViewId, lattice: &Lattice, on_disk: Option<bool>) {
        // Its `latest()` may move to an instance that is not in the lattice
        // yet, whose flag nobody watches: it is looked at on every run
        // (and so is everything above it), its edges resolved again.
        if lattice.has_latest(id) {
            return;
        }
        let dependencies_clean = lattice.dependencies(id).iter().all(|&d| self.is_clean(d));
        let watched = match (on_disk, self.watch_of.get(&id)) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(has_data), Some(&own)) => own || !has_data,
        };
        if dependencies_clean
            && watched
            && let Some(clean) = self.clean.get_mut(id.0 as usize)
        {
            *clean = true;
        }
    }

    /// Watches the directory of an external view's done flag, and every
    /// directory above it up to the storage root, before the flag is read:
    /// a directory renamed, replaced or re-linked anywhere on the way is
    /// seen too (inotify watches follow directories, not paths). They are
    /// added from the root down, each before its child is looked for, so a
    /// directory created at any moment is either watched or seen appearing.
    /// A storage root that does not exist yet is seen appearing by the
    /// nearest directory above it that does (a server started before its
    /// `data/`); the view is watched again, deeper, once it appears.
    /// A flag that is a directory (an empty `done_flag`: the data directory
    /// itself) is watched as one.
    pub fn watch(&mut self, id: ViewId, flag: &Path) {
        if self.watch_of.contains_key(&id) || !flag.starts_with(&self.storage) {
            return;
        }
        let Some(parent) = flag.parent() else { return };
        // Root first: the storage root (or the nearest directory above it
        // that exists), each directory below it, the flag.
        let top = self.storage.ancestors().find(|dir| Watcher::is_dir(dir)).unwrap_or(&self.storage).to_path_buf();
        let chain: Vec<&Path> = flag.ancestors().take_while(|dir| dir.starts_with(&top)).collect();
        let mut watched_parent = false;
        let mut watched_any = false;
        for dir in chain.into_iter().rev() {
            // A directory watched already is not looked at again: had it gone,
            // its watch's event, drained before the next run, dirties every
            // view registered with it, this one included.
            let wd = match self.by_dir.get(dir).copied().filter(|wd| self.watched.contains_key(wd)) {
                Some(wd) => wd,
                None if Watcher::is_dir(dir) => match self.add_watch(dir) {
                    Some(wd) => wd,
                    None => return,
                },
                // Not there (or the flag, a file): the watch above sees it appear.
                None => break,
            };
            self.watched.get_mut(&wd).expect("watched holds every id by_dir gives").1.insert(id);
            watched_any = true;
            watched_parent |= dir == parent;
        }
        // With data, the view's own directory must be watched; a flag that
        // is a directory and appeared after the loop passed it is seen
        // appearing by its parent's watch.
        if watched_any {
            self.watch_of.insert(id, watched_parent);
        }
    }

    /// Whether an external view is watched: no change to its flag has
    /// come in since it was last watched.
    pub fn is_watched(&self, id: ViewId) -> bool {
        self.watch_of.contains_key(&id)
    }

    /// A copy of the watches' descriptor, to wait on (it is readable when
    /// changes are queued; `drain` reads them).
    pub fn descriptor(&self) -> Option<std::os::fd::OwnedFd> {
        self.watcher.descriptor()
    }

    /// Watches a materialized view's published done flag itself (the
    /// directory, when the flag is empty): its deletion (with its
    /// directory's), replacement or change dirties the view, while what is
    /// published beside it does not. A flag that is not there is not
    /// watched, and the view stays dirty.
    pub fn watch_published(&mut self, id: ViewId, flag: &Path) {
        if self.watch_of.contains_key(&id) {
            return;
        }
        let added = self.watcher.watch_object(flag);
        if let Some(wd) = self.register(flag, added, "its view is checked on every run")
            && let Some((_, views)) = self.watched.get_mut(&wd)
        {
            views.insert(id);
            self.watch_of.insert(id, true);
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

    /// A view's edges moved (`latest()` resolved again): the reverse edges
    /// follow, and the view is dirty with all above it.
    pub fn rewire(&mut self, id: ViewId, previous: &[ViewId], now: &[ViewId]) {
        for dependency in previous {
            if let Some(dependents) = self.dependents.get_mut(dependency.0 as usize)
                && let Some(at) = dependents.iter().position(|&d| d == id)
            {
                dependents.swap_remove(at);
            }
        }
        for dependency in now {
            if let Some(dependents) = self.dependents.get_mut(dependency.0 as usize) {
                dependents.push(id);
            }
        }
        self.dirty(id);
    }

    /// Dirties a view and everything that depends on it.
    pub fn dirty(&mut self, id: ViewId) {
        if let Some(clean) = self.clean.get_mut(id.0 as usize) {
            *clean = false;
        }
        let mut stack = self.dependents.get(id.0 as usize).cloned().unwrap_or_default();
        while let Some(view) = stack.pop() {
            // A dirty view's dependents are dirty already.
            if self.is_clean(view) {
                self.clean[view.0 as usize] = false;
                stack.extend_from_slice(&self.dependents[view.0 as usize]);
            }
        }
    }

    /// Applies every change the kernel has queued: the views whose flag
    /// directories changed are dirtied with all above them.
    pub fn drain(&mut self) {
        loop {
            let touched = match self.watcher.changes() {
                Changes::None => return,
                Changes::Touched(touched) => touched,
                Changes::Lost => {
                    self.forget_everything();
                    return;
                }
            };
            for (wd, gone) in touched {
                // Its views are dirty, and watched again (perhaps closer to
                // their own directory) when next checked.
                let views = match self.watched.get_mut(&wd) {
                    Some((_, views)) => std::mem::take(views),
                    None => continue,
                };
                for view in views {
                    self.watch_of.remove(&view);
                    self.dirty(view);
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

    /// Everything is dirty and unwatched: the next run checks it all.
    fn forget_everything(&mut self) {
        self.clean.iter_mut().for_each(|clean| *clean = false);
        self.watched.clear();
        self.by_dir.clear();
        self.watch_of.clear();
        // The kernel's watches stay; their events now map to nothing until
        // a directory is watched again (inotify returns the same id then).
    }
}
