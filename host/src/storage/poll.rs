//! Learning what changed in an object store by asking it: the watches of
//! an object root, which has no queue of changes to read.
//!
//! A flag awaited (an external view's) is seen once when it is watched,
//! and again by each [`Polled::poll`]: one HEAD per flag, or one listing
//! of the prefix that flags share (the directory above their views' data,
//! `raw/SHOP10/2015/05/` for the days of a month), whichever took fewer
//! requests the last time. A flag whose object differs from what was seen
//! (arrived, gone, rewritten) is reported by the next
//! [`Polled::changed`], as inotify's watches report theirs.
//!
//! A published flag (a view trellis materialized) is not polled: the
//! store is trellis's own, written through its pointers by one writer (a
//! second one is refused at its commit), so an unchanged view costs no
//! request at all. Deleting a published view's data behind trellis's back
//! is not seen by a server until a run looks at the view again (a
//! `trellis materialize`, a reload, a restart).
//!
//! Invariant: between polls, nothing is asked of the store; a poll that
//! fails for a flag reports it changed (the next run looks), never unchanged.

use std::collections::{HashMap, HashSet};

use super::object::Seen;
use super::{Key, Storage};
use crate::metastore::FlagIdentity;

/// Who watches, by the caller's own number (as `watch::Watching`).
type Watching = u32;

/// The watches on an object root.
pub struct Polled {
    store: Storage,
    /// Each awaited flag, and what was seen of it (`None`: nothing there).
    awaited: HashMap<Watching, (Key, Option<Seen>)>,
    published: HashSet<Watching>,
    /// Found changed by a poll, not reported yet.
    changed: HashSet<Watching>,
    /// The pages the last listing of each shared prefix took.
    pages: HashMap<Key, usize>,
}

/// What one poll asked: requests by kind, for the log and the benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    pub heads: usize,
    pub lists: usize,
    /// Listing pages (each one request).
    pub pages: usize,
    pub changed: usize,
}

impl Polled {
    pub fn new(store: Storage) -> Polled {
        Polled {
            store,
            awaited: HashMap::new(),
            published: HashSet::new(),
            changed: HashSet::new(),
            pages: HashMap::new(),
        }
    }

    /// Whether `who` is watched: its flag itself, always (see `Watches::watching`).
    pub fn watching(&self, who: Watching) -> Option<bool> {
        (self.awaited.contains_key(&who) || self.published.contains(&who)).then_some(true)
    }

    /// Sees the flag at `flag` now (one HEAD) and watches it from there,
    /// and says what it saw (`None` when it did not look: watched already,
    /// or the HEAD failed), so that the caller need not look again. A
    /// flag that cannot be seen is not watched (its view is checked on
    /// every run), nor is a key outside the root.
    pub fn await_flag(&mut self, who: Watching, flag: &Key) -> Option<Option<FlagIdentity>> {
        if self.watching(who).is_some() || !flag.is_under_root() {
            return None;
        }
        let object = self.store.as_object()?;
        let (mut heads, _) = object.seen(std::slice::from_ref(flag), &[]);
        match heads.pop()? {
            Ok(seen) => {
                let identity = seen.as_ref().map(Seen::identity);
                self.awaited.insert(who, (flag.clone(), seen));
                Some(identity)
            }
            Err(e) => {
                tracing::debug!("not watching {}: {e}; its view is checked on every run", flag.as_path().display());
                None
            }
        }
    }

    /// Starts watching those of `flags` that one listing of a prefix they
    /// share sees absent, with nothing there as what was seen, and says
    /// which it watches: the rest are left to [`Polled::await_flag`] (a
    /// HEAD, whose version id a listing cannot name). Many flags awaited
    /// at once (a server's first run, 100,000 waiting days) then cost a
    /// listing per month, not a HEAD each. A flag that arrives after the
    /// listing is seen by the next poll, as after a HEAD.
    pub fn await_absent(&mut self, flags: &[(Watching, Key)]) -> Vec<bool> {
        let mut watched = vec![false; flags.len()];
        let Some(object) = self.store.as_object() else { return watched };
        let asked: Vec<usize> = (0..flags.len())
            .filter(|&at| self.watching(flags[at].0).is_none() && flags[at].1.is_under_root())
            .collect();
        let keys: Vec<Key> = asked.iter().map(|&at| flags[at].1.clone()).collect();
        for (at, sighting) in asked.into_iter().zip(object.sight(&keys)) {
            if sighting == super::Sighting::Listed(None) {
                let (who, flag) = &flags[at];
                self.awaited.insert(*who, (flag.clone(), None));
                watched[at] = true;
            }
        }
        watched
    }

    /// Watches a published flag: trellis's own, not polled (see the module's docs).
    pub fn watch_published(&mut self, who: Watching) {
        if self.watching(who).is_none() {
            self.published.insert(who);
        }
    }

    /// Who a poll found changed since the last call, each no longer watched.
    pub fn changed(&mut self) -> HashSet<Watching> {
        let changed = std::mem::take(&mut self.changed);
        for who in &changed {
            self.awaited.remove(who);
            self.published.remove(who);
        }
        changed
    }

    /// Looks at every awaited flag: HEADs, or one listing per prefix that
    /// several share where the last listing of it took fewer pages than
    /// it has flags. What differs is reported by the next `changed`.
    pub fn poll(&mut self) -> Asked {
        let Some(object) = self.store.as_object() else { return Asked::default() };
        let mut by_prefix: HashMap<Key, Vec<Watching>> = HashMap::new();
        let mut alone = Vec::new();
        for (&who, (flag, _)) in &self.awaited {
            match flag.shared_prefix() {
                Some(prefix) => by_prefix.entry(prefix).or_default().push(who),
                None => alone.push(who),
            }
        }
        let mut lists = Vec::new();
        for (prefix, flags) in by_prefix {
            if flags.len() > *self.pages.get(&prefix).unwrap_or(&1) {
                lists.push((prefix, flags));
            } else {
                alone.extend(flags);
            }
        }
        let heads: Vec<Key> = alone.iter().map(|who| self.awaited[who].0.clone()).collect();
        let prefixes: Vec<Key> = lists.iter().map(|(prefix, _)| prefix.clone()).collect();
        let (headed, listed) = object.seen(&heads, &prefixes);
        let mut asked = Asked { heads: heads.len(), lists: prefixes.len(), ..Asked::default() };
        for (who, now) in alone.into_iter().zip(headed) {
            self.compare(who, now);
        }
        for ((prefix, flags), listing) in lists.into_iter().zip(listed) {
            match listing {
                Ok((objects, pages)) => {
                    asked.pages += pages;
                    self.pages.insert(prefix, pages);
                    let found: HashMap<&Key, &Seen> = objects.iter().map(|(key, seen)| (key, seen)).collect();
                    for who in flags {
                        let now = found.get(&self.awaited[&who].0).map(|seen| (*seen).clone());
                        self.compare(who, Ok(now));
                    }
                }
                Err(e) => {
                    asked.pages += 1;
                    for who in flags {
                        self.compare(who, Err(std::io::Error::new(e.kind(), e.to_string())));
                    }
                }
            }
        }
        asked.changed = self.changed.len();
        asked
    }

    fn compare(&mut self, who: Watching, now: std::io::Result<Option<Seen>>) {
        let Some((flag, before)) = self.awaited.get(&who) else { return };
        let same = match (&now, before) {
            (Ok(Some(now)), Some(before)) => now.same(before),
            (Ok(None), None) => true,
            (Ok(_), _) => false,
            (Err(e), _) => {
                tracing::debug!("cannot poll {}: {e}; its view is looked at again", flag.as_path().display());
                false
            }
        };
        if !same {
            self.changed.insert(who);
        }
    }
}
