//! Atomic publish: a transformation writes a staging directory, and on
//! success the view's data path is replaced by it in one rename, done flag
//! and receipt included. Readers see the old data or the new, never a mix;
//! a failed or interrupted transformation leaves the old data untouched,
//! and its staging directory is removed when its task ends, however it ends.
//!
//! The receipt (`.trellis-publish.json`) says which attempt published the
//! output, what the commit that records it writes, and, as a digest of
//! every entry's name, size, mtime and inode, exactly what it published.
//! A crash between the rename and that commit leaves an output newer than
//! the view's record: [`recognise`] finds it when the view is next loaded
//! and the scheduler commits it as the run would have, instead of
//! transforming the view again. Output that changed since (a user's edit,
//! another attempt's publish) does not match its receipt and is never
//! adopted.
//!
//! What it does to files, it asks of the view storage (`storage`): this
//! module decides what a publish carries and when an output is adopted.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::metastore::{FlagIdentity, SeenFlag, ViewRecord};
use crate::model::Counters;
use crate::storage::{LocalDir, Sighting, Staged, Storage, ViewStore, Walk};

use super::transition::Settled;

pub use crate::storage::STAGING_DIR;

/// Staging and publishing a view's output, in the view storage.
pub struct Staging {
    storage: Storage,
}

/// A staging directory in use (see [`Staged`]).
pub type StagingDir = Staged;

/// The receipt's name inside a published output: hidden, so that no reader
/// of the data takes it for data (the SDK's inputs and the manifests of
/// incremental inputs skip `.` and `_` files, as Hadoop's readers do).
pub const RECEIPT: &str = ".trellis-publish.json";
const RECEIPT_FORMAT: u32 = 1;

/// What a published output says of the attempt that published it: enough
/// to write the view's record as that attempt's run would have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub format: u32,
    /// The view's URL path.
    pub view: String,
    pub run: String,
    pub attempt: u32,
    /// The view's timestamp, as its record gets it.
    pub timestamp: i64,
    /// The type's version checksum the attempt ran with, and its schema
    /// checksum (a record dropped for a new schema is not brought back).
    pub version: String,
    #[serde(default)]
    pub schema: String,
    /// How its dependencies had settled (its flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<Settled>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Counters>,
    /// What its `latest()` dependencies resolved to, for a view with any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<Vec<String>>,
    /// The digest of every entry of the output but the receipt.
    #[serde(default)]
    pub contents: String,
}

impl Receipt {
    /// A receipt for an attempt, to be completed when it publishes; its
    /// timestamp is at least `floor` (the run's, see `Scheduler::stamp_floor`).
    pub fn new(
        view: String,
        run: String,
        attempt: u32,
        version: String,
        settled: Option<Settled>,
        floor: i64,
    ) -> Receipt {
        Receipt {
            format: RECEIPT_FORMAT,
            view,
            run,
            attempt,
            timestamp: floor,
            version,
            schema: String::new(),
            settled,
            counters: None,
            latest: None,
            contents: String::new(),
        }
    }
}

/// An output published and not recorded: its receipt, and its done flag
/// as found (what the record keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrecorded {
    pub receipt: Receipt,
    pub flag: FlagIdentity,
}

/// Whether the output at `data_path` was published by an attempt that
/// `record` (the view's, as committed) does not reflect, and is exactly
/// what that attempt published. One `stat` of the flag for a view whose
/// record is current, none where `sighting` (a listing of its month with
/// others) tells already; the receipt is read, and the output walked,
/// only when the flag is not the one recorded.
pub fn recognise(
    storage: &dyn ViewStore,
    view: &str,
    record: &ViewRecord,
    data_path: &Path,
    flag_path: &Path,
    sighting: Sighting,
) -> Option<Unrecorded> {
    let recorded = match record.done_flag {
        Some(SeenFlag::Present { identity, .. }) => Some(identity),
        _ => None,
    };
    // Seen with others by a listing: nothing there, or the flag recorded
    // (a listing's identity equals a HEAD's only where both name no
    // version id), is all that needs telling; anything else is looked at.
    match sighting {
        Sighting::Listed(None) => return None,
        Sighting::Listed(Some(listed)) if recorded == Some(listed) => return None,
        _ => {}
    }
    let flag = storage.identity(&storage.key(flag_path))?;
    if recorded == Some(flag) {
        return None;
    }
    let data = storage.key(data_path);
    let bytes = storage.read(&data.join(RECEIPT)).ok()??;
    let receipt = match serde_json::from_slice::<Receipt>(&bytes) {
        Ok(receipt) if receipt.format == RECEIPT_FORMAT => receipt,
        _ => {
            tracing::warn!(path = %data_path.display(), "unreadable {RECEIPT}; the output is not adopted");
            return None;
        }
    };
    // Not this view's, or older than what the record says.
    if receipt.view != view || record.timestamp.is_some_and(|recorded| recorded >= receipt.timestamp) {
        return None;
    }
    match storage.list(&data, &CONTENTS).map(|listed| contents(&listed, storage.publish_keeps_identities(&data))) {
        Ok(digest) if digest == receipt.contents => Some(Unrecorded { receipt, flag }),
        Ok(_) => {
            tracing::warn!(
                path = %data_path.display(),
                "published by run {} and changed since; not adopted, the view is built again", receipt.run
            );
            None
        }
        Err(e) => {
            tracing::warn!(path = %data_path.display(), "cannot list a published output; not adopted: {e}");
            None
        }
    }
}

/// What a receipt's digest covers: every entry below the output,
/// recursively, links not followed, but the receipt itself.
const CONTENTS: Walk<'static> = Walk { follow_links: false, exact_names: false, keep: &|name| name != RECEIPT };

/// The digest of a listing of the output: every entry's name, kind, size,
/// mtime and inode, all of which a local publish keeps and any change to
/// an entry changes. An object store's upload keeps only each file's name
/// and size (directories are not objects): its digest covers those, and
/// the version's prefix, which no other publish writes, does the rest.
fn contents(listed: &[crate::storage::Listed], keeps_identities: bool) -> String {
    let mut found: Vec<_> = listed
        .iter()
        .filter(|entry| keeps_identities || !entry.is_dir)
        .map(|entry| {
            let (mtime, inode) =
                if keeps_identities { (entry.identity.mtime_nanos, entry.identity.inode) } else { (0, 0) };
            (&entry.name, entry.is_dir, entry.identity.size, mtime, inode)
        })
        .collect();
    found.sort();
    let mut hasher = blake3::Hasher::new();
    for (name, is_dir, size, mtime, inode) in &found {
        hasher.update(name.as_bytes());
        hasher.update(&[0, u8::from(*is_dir)]);
        hasher.update(&size.to_le_bytes());
        hasher.update(&mtime.to_le_bytes());
        hasher.update(&inode.to_le_bytes());
    }
    hasher.finalize().to_hex()[..32].to_string()
}

impl Staging {
    /// Staging in the local directory `storage`.
    pub fn new(storage: &Path) -> Self {
        Staging::over(std::sync::Arc::new(LocalDir::new(storage)))
    }

    /// Staging in `storage`, whichever store it is.
    pub fn over(storage: Storage) -> Self {
        Staging { storage }
    }

    /// The view storage it stages and publishes in.
    pub fn storage(&self) -> &dyn ViewStore {
        &*self.storage
    }

    /// The same, to hand to a task.
    pub fn shared(&self) -> Storage {
        self.storage.clone()
    }

    /// What identifies the done flag (or data directory) at `path` now.
    pub fn flag_identity(&self, path: &Path) -> Option<FlagIdentity> {
        self.storage.identity(&self.storage.key(path))
    }

    /// Whether `path` holds a view's data, readable as an input.
    pub fn holds_data(&self, path: &Path) -> bool {
        self.storage.holds_data(&self.storage.key(path))
    }

    /// Whether anything is at `path`, a flag or a view's data.
    pub fn exists(&self, path: &Path) -> bool {
        self.storage.exists(&self.storage.key(path))
    }

    /// Removes what an interrupted process left behind: the staging
    /// directories [`Staging::create`] makes, and nothing else.
    pub fn clean(&self) -> io::Result<()> {
        self.storage.clean_staging()
    }

    /// A new, empty staging directory.
    pub fn create(&self) -> io::Result<StagingDir> {
        self.storage.stage()
    }

    /// A new, empty staging directory for the data at `data_path` (in the
    /// root that holds it, where a project has several).
    pub fn create_for(&self, data_path: &Path) -> io::Result<StagingDir> {
        self.storage.stage_for(&self.storage.key(data_path))
    }

    /// Writes the done flag and `receipt` (its contents digest filled in)
    /// into `staging` and makes it the data at `data_path`, replacing what
    /// was there in one step. On an error the staging directory is removed.
    pub fn publish(
        &self,
        staging: StagingDir,
        data_path: &Path,
        done_flag: &str,
        receipt: &mut Receipt,
    ) -> io::Result<()> {
        if !done_flag.is_empty() {
            staging.touch(done_flag)?;
        }
        let key = self.storage.key(data_path);
        receipt.contents = contents(&staging.list(&CONTENTS)?, self.storage.publish_keeps_identities(&key));
        // Whatever the plugin left under this name is replaced: the receipt is the host's.
        staging.put(RECEIPT, &serde_json::to_vec(receipt).map_err(io::Error::other)?)?;
        self.storage.publish(staging, &key, done_flag)
    }

    pub fn discard(&self, staging: StagingDir) {
        drop(staging);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(timestamp: i64) -> Receipt {
        let settled = Settled { all_no_data: false, some_no_data: true, some_failed: false, some_errors: false };
        Receipt::new("v/2015/05/01".into(), "r1".into(), 1, "v1".into(), Some(settled), timestamp)
    }

    #[test]
    fn publish_replaces_the_data_and_writes_the_flag() {
        let storage = tempfile::tempdir().unwrap();
        let staging = Staging::new(storage.path());
        let data = storage.path().join("v/2015/05/01");
        for content in ["first", "second"] {
            let dir = staging.create().unwrap();
            let path = dir.path().to_path_buf();
            std::fs::write(path.join("part"), content).unwrap();
            staging.publish(dir, &data, "_SUCCESS", &mut receipt(10)).unwrap();
            assert_eq!(std::fs::read_to_string(data.join("part")).unwrap(), content);
            assert!(data.join("_SUCCESS").exists());
            assert!(!path.exists());
        }
        // A directory its task left (the process killed) goes at the next clean.
        let leftover = staging.create().unwrap().path().to_path_buf();
        assert!(!leftover.exists(), "dropped, a staging directory removes itself");
        let abandoned = staging.create().unwrap();
        let path = abandoned.path().to_path_buf();
        std::mem::forget(abandoned);
        staging.clean().unwrap();
        assert!(!path.exists());
        assert_eq!(std::fs::read_to_string(data.join("part")).unwrap(), "second");
        assert!(std::fs::read_dir(storage.path().join(STAGING_DIR)).unwrap().next().is_none());
    }

    /// An output published and not recorded is recognised, with its
    /// receipt; one recorded, changed since, or another view's is not.
    #[test]
    fn an_unrecorded_output_is_recognised_only_as_it_was_published() {
        let storage = tempfile::tempdir().unwrap();
        let staging = Staging::new(storage.path());
        let data = storage.path().join("v/2015/05/01");
        let flag = data.join("_SUCCESS");
        let dir = staging.create().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/part"), "rows").unwrap();
        let mut published = receipt(10);
        staging.publish(dir, &data, "_SUCCESS", &mut published).unwrap();
        let view = "v/2015/05/01";
        let before = ViewRecord { timestamp: Some(5), ..ViewRecord::default() };

        let found = recognise(staging.storage(), view, &before, &data, &flag, Sighting::Unknown).expect("recognised");
        assert_eq!(found.receipt, published);
        assert_eq!(Some(found.flag), staging.flag_identity(&flag));
        // Recorded: its flag is the one the record holds.
        let recorded = ViewRecord {
            timestamp: Some(10),
            done_flag: Some(SeenFlag::Present { identity: found.flag, seen: 10 }),
            ..ViewRecord::default()
        };
        assert_eq!(recognise(staging.storage(), view, &recorded, &data, &flag, Sighting::Unknown), None);
        // Another view's output, or older than the record.
        assert_eq!(recognise(staging.storage(), "w/2015/05/01", &before, &data, &flag, Sighting::Unknown), None);
        assert_eq!(
            recognise(
                staging.storage(),
                view,
                &ViewRecord { timestamp: Some(10), ..before.clone() },
                &data,
                &flag,
                Sighting::Unknown
            ),
            None
        );
        // Changed since: a file added, or one rewritten.
        std::fs::write(data.join("extra"), "mine").unwrap();
        assert_eq!(recognise(staging.storage(), view, &before, &data, &flag, Sighting::Unknown), None);
        std::fs::remove_file(data.join("extra")).unwrap();
        assert!(recognise(staging.storage(), view, &before, &data, &flag, Sighting::Unknown).is_some());
        std::fs::write(data.join("sub/part"), "ROWS").unwrap();
        assert_eq!(recognise(staging.storage(), view, &before, &data, &flag, Sighting::Unknown), None);
        // No flag: nothing published there.
        std::fs::remove_file(&flag).unwrap();
        assert_eq!(recognise(staging.storage(), view, &before, &data, &flag, Sighting::Unknown), None);
    }

    /// On an object store an upload keeps no mtime or inode: what was
    /// published is recognised by names and sizes in its version, and an
    /// object added to that version since is not adopted.
    #[test]
    fn an_unrecorded_output_on_an_object_store_is_recognised() {
        use object_store::ObjectStoreExt;
        let local = tempfile::tempdir().unwrap();
        let memory = std::sync::Arc::new(object_store::memory::InMemory::new());
        let store = crate::storage::ObjectDir::new(memory.clone(), "memory://test", "proj", local.path()).unwrap();
        let staging = Staging::over(std::sync::Arc::new(store));
        let data = Path::new("memory://test/proj/v/2015/05/01");
        let flag = data.join("_SUCCESS");
        let dir = staging.create().unwrap();
        std::fs::create_dir_all(dir.path().join("sub/empty")).unwrap();
        std::fs::write(dir.path().join("sub/part"), "rows").unwrap();
        let mut published = receipt(10);
        staging.publish(dir, data, "_SUCCESS", &mut published).unwrap();
        let (view, before) = ("v/2015/05/01", ViewRecord { timestamp: Some(5), ..ViewRecord::default() });
        let found = recognise(staging.storage(), view, &before, data, &flag, Sighting::Unknown).expect("recognised");
        assert_eq!(found.receipt, published);
        assert_eq!(Some(found.flag), staging.flag_identity(&flag));

        let version = staging.storage().as_object().unwrap().current_version(&staging.storage().key(data)).unwrap();
        let extra = object_store::path::Path::from(format!("proj/v/2015/05/01/_v/{}/extra", version.unwrap()));
        tokio::runtime::Runtime::new().unwrap().block_on(memory.put(&extra, "mine".into())).unwrap();
        assert_eq!(recognise(staging.storage(), view, &before, data, &flag, Sighting::Unknown), None);
    }

    #[test]
    fn cleaning_removes_only_the_staging_directories_trellis_made() {
        let storage = tempfile::tempdir().unwrap();
        let staging = Staging::new(storage.path());
        // What a killed process left: its guard never dropped.
        let abandoned = staging.create().unwrap();
        std::fs::write(abandoned.path().join("part"), "half written").unwrap();
        let leftover = abandoned.path().to_path_buf();
        std::mem::forget(abandoned);
        // What a user (or a view path of an older trellis) put there.
        let root = storage.path().join(STAGING_DIR);
        let foreign_dir = root.join("2015/05/01");
        std::fs::create_dir_all(&foreign_dir).unwrap();
        std::fs::write(foreign_dir.join("part"), "someone's data").unwrap();
        std::fs::write(root.join("notes.txt"), "mine").unwrap();
        std::fs::create_dir(root.join("view-not-ours")).unwrap();
        std::fs::write(root.join("view-abcdef"), "a file, not a staging directory").unwrap();
        staging.clean().unwrap();
        assert!(!leftover.exists());
        assert_eq!(std::fs::read_to_string(foreign_dir.join("part")).unwrap(), "someone's data");
        assert!(root.join("notes.txt").exists());
        assert!(root.join("view-not-ours").exists());
        assert!(root.join("view-abcdef").exists());
        staging.clean().unwrap();
        assert!(foreign_dir.join("part").exists(), "a second clean keeps them too");
    }
}
