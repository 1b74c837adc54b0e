//! Freshness a long-lived scheduler remembers between runs, so that a run
//! visits what may have changed (the cone of a new input, of an
//! invalidation, of a rematerialized view) instead of the whole lattice.
//!
//! A view is *clean* when a DEFAULT run found it materialized or without
//! data and nothing it depends on has changed since. New external data, and
//! published data deleted, are learnt from the storage's watches
//! (`storage::watch`) on done flags (external views' awaited, materialized
//! views' published): they tell what changed since they were last asked,
//! and every run asks before it looks at a view, so a change made before a
//! request is always seen by it.
//!
//! Invariants: a clean view's dependencies are all clean (so marking a view
//! dirty dirties every view above it, and dirtying can stop at a view that
//! is dirty already); an external or materialized view is clean only while
//! its flag is watched, and the watch is added before its flag is read;
//! anything the memo cannot vouch for (a lost watch, an overflowed queue)
//! is dirty; a view with `latest(n)` dependencies is never clean (an
//! instance it could move to may not be in the lattice, let alone
//! watched), and when its edges move the reverse edges follow. It knows the
//! lattice's edges and nothing of states or the metastore.

use crate::lattice::{Lattice, ViewId};
use crate::storage::watch::{Changed, Watches};
use crate::storage::{Key, Storage};

pub(super) struct Memo {
    clean: Vec<bool>,
    /// Reverse edges: who depends on each view.
    dependents: Vec<Vec<ViewId>>,
    /// The storage's watches, each view watched under its id.
    watches: Watches,
}

impl Memo {
    /// A memo, or why there cannot be one (`storage` cannot be watched):
    /// the scheduler then checks every view on every run, as the embedded
    /// one does.
    pub fn new(storage: &Storage) -> std::io::Result<Memo> {
        Ok(Memo { clean: Vec::new(), dependents: Vec::new(), watches: Watches::of(storage)? })
    }

    /// Whether changes are learnt only by [`Memo::poll`] (an object store),
    /// and so whether anything is awaited that a poll would look at.
    pub fn is_polled(&self) -> bool {
        self.watches.is_polled()
    }

    /// Asks the storage what changed (an object store's flags awaited);
    /// the next [`Memo::drain`] applies it.
    pub fn poll(&mut self) -> crate::storage::poll::Asked {
        self.watches.poll()
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
        let watched = match (on_disk, self.watches.watching(id.0)) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(has_data), Some(own)) => own || !has_data,
        };
        if dependencies_clean
            && watched
            && let Some(clean) = self.clean.get_mut(id.0 as usize)
        {
            *clean = true;
        }
    }

    /// Watches an external view's done flag (see [`Watches::await_flag`]:
    /// every directory from the storage root down to it), before the flag
    /// is read; on an object store, says what its first look saw.
    pub fn watch(&mut self, id: ViewId, flag: &Key) -> Option<Option<crate::metastore::FlagIdentity>> {
        self.watches.await_flag(id.0, flag)
    }

    /// Starts the watches of the external views among `flags` whose flag
    /// a listing sees absent, and says which (see [`Watches::await_absent`]).
    pub fn watch_absent(&mut self, flags: &[(ViewId, Key)]) -> Vec<bool> {
        let flags: Vec<(u32, Key)> = flags.iter().map(|(id, key)| (id.0, key.clone())).collect();
        self.watches.await_absent(&flags)
    }

    /// Whether an external view is watched: no change to its flag has
    /// come in since it was last watched.
    pub fn is_watched(&self, id: ViewId) -> bool {
        self.watches.watching(id.0).is_some()
    }

    /// A copy of the watches' descriptor, to wait on (it is readable when
    /// changes are queued; `drain` takes them in).
    pub fn descriptor(&self) -> Option<std::os::fd::OwnedFd> {
        self.watches.descriptor()
    }

    /// Watches a materialized view's published done flag itself (the
    /// directory, when the flag is empty): its deletion (with its
    /// directory's), replacement or change dirties the view, while what is
    /// published beside it does not. A flag that is not there is not
    /// watched, and the view stays dirty.
    pub fn watch_published(&mut self, id: ViewId, flag: &Key) {
        self.watches.watch_published(id.0, flag);
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

    /// Applies every change the watches have seen since they were last
    /// asked: the views whose flags changed are dirtied with all above
    /// them; changes lost make everything dirty (the next run checks it all).
    pub fn drain(&mut self) {
        match self.watches.changed() {
            Changed::These(views) => {
                for view in views {
                    self.dirty(ViewId(view));
                }
            }
            Changed::Everything => self.clean.iter_mut().for_each(|clean| *clean = false),
        }
    }
}
