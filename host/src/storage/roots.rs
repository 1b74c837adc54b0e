//! Several storage roots behind one store: the project's, and the roots
//! view types declare of their own (`storage = "..."` on a `[[view]]`), so
//! that raw deliveries can sit in one bucket and marts in another.
//!
//! Keys stay what they are everywhere: relative to the project's root, and
//! a path the lattice rendered outside it (under a type's own root) kept
//! whole ([`Key::of`]). [`Roots`] routes each key to the store whose root
//! holds it, the longest root first, and asks that store in its own key.
//!
//! Invariant: every key reaches exactly one store, the project's when no
//! other root holds it; a version is staged in the store it is published
//! to (a local publish is one rename, which cannot cross file systems).

use std::io;
use std::path::Path;

use super::{Key, Listed, ObjectDir, Presence, Sighting, Staged, Storage, ViewStore, Walk};
use crate::metastore::FlagIdentity;

/// The project's store first, then each other root's.
#[derive(Debug)]
pub struct Roots {
    stores: Vec<Storage>,
}

impl Roots {
    /// `main`, the project's, and `others`, the view types' own roots.
    pub fn new(main: Storage, others: Vec<Storage>) -> Roots {
        let mut stores = vec![main];
        stores.extend(others);
        Roots { stores }
    }

    /// Every store, the project's first.
    pub fn stores(&self) -> &[Storage] {
        &self.stores
    }

    /// The store that holds `key`, and the key in it.
    pub fn route(&self, key: &Key) -> (&Storage, Key) {
        route(&self.stores, key, |store| store.root())
    }

    /// [`Roots::route`], the store named by its place in `stores`.
    fn route_to_index(&self, key: &Key) -> (usize, Key) {
        let (store, key) = self.route(key);
        (self.stores.iter().position(|each| std::sync::Arc::ptr_eq(each, store)).unwrap_or(0), key)
    }

    /// Asks each store about its share of `keys` in one call, in its own
    /// keys, and gives the answers back in the order of `keys`: a store
    /// that looks at many keys together still does across roots.
    fn each_store<T>(&self, keys: &[Key], ask: impl Fn(&Storage, &[Key]) -> Vec<T>) -> Vec<T> {
        let mut shares: Vec<(Vec<usize>, Vec<Key>)> = self.stores.iter().map(|_| Default::default()).collect();
        for (index, key) in keys.iter().enumerate() {
            let (at, key) = self.route_to_index(key);
            shares[at].0.push(index);
            shares[at].1.push(key);
        }
        let mut answers: Vec<Option<T>> = keys.iter().map(|_| None).collect();
        for (store, (indexes, share)) in self.stores.iter().zip(shares) {
            if share.is_empty() {
                continue;
            }
            for (index, answer) in indexes.into_iter().zip(ask(store, &share)) {
                answers[index] = Some(answer);
            }
        }
        answers.into_iter().map(|answer| answer.expect("each store answers each of its keys")).collect()
    }
}

/// The one of `items` whose root (`root_of`) holds `key`, the longest
/// first; the first item's (the project's) when none does, the key as it is.
pub(super) fn route<'a, T>(items: &'a [T], key: &Key, root_of: impl Fn(&T) -> &Path) -> (&'a T, Key) {
    // The other roots first: an object root's path (`s3://bucket/p`) has
    // no root component, so a key under it looks relative too.
    let holder = items[1..]
        .iter()
        .filter(|item| key.as_path().starts_with(root_of(item)))
        .max_by_key(|item| root_of(item).components().count());
    match holder {
        Some(item) => (item, Key::of(root_of(item), key.as_path())),
        None => (&items[0], key.clone()),
    }
}

impl ViewStore for Roots {
    fn root(&self) -> &Path {
        self.stores[0].root()
    }

    fn identity(&self, key: &Key) -> Option<FlagIdentity> {
        let (store, key) = self.route(key);
        store.identity(&key)
    }

    fn exists(&self, key: &Key) -> bool {
        let (store, key) = self.route(key);
        store.exists(&key)
    }

    fn holds_data(&self, key: &Key) -> bool {
        let (store, key) = self.route(key);
        store.holds_data(&key)
    }

    fn read(&self, key: &Key) -> io::Result<Option<Vec<u8>>> {
        let (store, key) = self.route(key);
        store.read(&key)
    }

    fn list(&self, key: &Key, walk: &Walk) -> io::Result<Vec<Listed>> {
        let (store, key) = self.route(key);
        store.list(&key, walk)
    }

    fn stage(&self) -> io::Result<Staged> {
        self.stores[0].stage()
    }

    fn stage_for(&self, key: &Key) -> io::Result<Staged> {
        let (store, key) = self.route(key);
        store.stage_for(&key)
    }

    fn publish(&self, staged: Staged, key: &Key, done_flag: &str) -> io::Result<()> {
        let (store, key) = self.route(key);
        store.publish(staged, &key, done_flag)
    }

    fn clean_staging(&self) -> io::Result<()> {
        self.stores.iter().try_for_each(|store| store.clean_staging())
    }

    fn publish_keeps_identities(&self, key: &Key) -> bool {
        let (store, key) = self.route(key);
        store.publish_keeps_identities(&key)
    }

    fn as_object(&self) -> Option<&ObjectDir> {
        None
    }

    fn as_roots(&self) -> Option<&Roots> {
        Some(self)
    }

    fn local_input(&self, key: &Key) -> io::Result<super::LocalInput> {
        let (store, key) = self.route(key);
        store.local_input(&key)
    }

    /// Every root, the first that fails named.
    fn probe(&self) -> Result<(), String> {
        self.stores.iter().try_for_each(|store| store.probe().map_err(|e| format!("{}: {e}", store.root().display())))
    }

    /// Each key asked of the store that holds it.
    fn current_prefixes(&self, keys: &[Key]) -> Vec<Option<String>> {
        self.each_store(keys, |store, keys| store.current_prefixes(keys))
    }

    fn sight(&self, keys: &[Key]) -> Vec<Sighting> {
        self.each_store(keys, |store, keys| store.sight(keys))
    }

    fn restore_flag(&self, key: &Key, done_flag: &str) -> io::Result<bool> {
        let (store, key) = self.route(key);
        store.restore_flag(&key, done_flag)
    }

    fn presence(&self) -> Box<dyn Presence + '_> {
        Box::new(EachRoot { roots: self, each: self.stores.iter().map(|store| store.presence()).collect() })
    }
}

/// Each root's own presence, a key asked of the root that holds it.
struct EachRoot<'a> {
    roots: &'a Roots,
    each: Vec<Box<dyn Presence + 'a>>,
}

impl Presence for EachRoot<'_> {
    fn exists(&self, key: &Key) -> bool {
        let (at, key) = self.roots.route_to_index(key);
        self.each[at].exists(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key under a type's own root reaches that root's store, in its own
    /// key; one under the project's, the project's; a version for a type's
    /// root is staged in it (one file system, one rename) and published there.
    #[test]
    fn keys_reach_the_root_that_holds_them() {
        let (project, raw) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let main: Storage = std::sync::Arc::new(super::super::LocalDir::new(project.path()));
        let other: Storage = std::sync::Arc::new(super::super::LocalDir::new(raw.path()));
        let roots = Roots::new(main, vec![other]);
        let under_raw = roots.key(&raw.path().join("shop/2015/05/01"));
        let (store, key) = roots.route(&under_raw);
        assert_eq!((store.root(), key.as_path()), (raw.path(), Path::new("shop/2015/05/01")));
        let under_project = roots.key(&project.path().join("mart/2015"));
        let (store, key) = roots.route(&under_project);
        assert_eq!((store.root(), key.as_path()), (project.path(), Path::new("mart/2015")));

        let staged = roots.stage_for(&under_raw).unwrap();
        assert!(staged.path().starts_with(raw.path()), "{}", staged.path().display());
        std::fs::write(staged.path().join("part"), "rows").unwrap();
        roots.publish(staged, &under_raw, "").unwrap();
        assert_eq!(std::fs::read_to_string(raw.path().join("shop/2015/05/01/part")).unwrap(), "rows");
        assert!(roots.holds_data(&under_raw));
        assert!(!roots.holds_data(&under_project));
    }
}
