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

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::metastore::{FlagIdentity, SeenFlag, ViewRecord};
use crate::model::Counters;

use super::transition::Settled;

/// Staging directories live under the storage root (one filesystem, so
/// renames are atomic), in a directory no view path can use: view paths
/// never start with a `.` component.
pub const STAGING_DIR: &str = ".trellis-staging";

/// A staging directory's name: this prefix, then this many random
/// alphanumeric characters. Only names of this shape are ever removed.
const STAGING_PREFIX: &str = "view-";
const STAGING_RANDOM: usize = 6;

fn is_staging_name(name: &str) -> bool {
    name.strip_prefix(STAGING_PREFIX)
        .is_some_and(|random| random.len() == STAGING_RANDOM && random.chars().all(|c| c.is_ascii_alphanumeric()))
}

pub struct Staging {
    root: PathBuf,
}

/// A staging directory in use. Dropped without being published or
/// discarded (its task aborted by a stop), it removes itself, so that a
/// clean stop leaves nothing behind.
#[derive(Debug)]
pub struct StagingDir {
    path: PathBuf,
    /// Published or discarded: nothing left to remove.
    gone: bool,
}

impl StagingDir {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        if !self.gone {
            remove_quietly(&self.path);
        }
    }
}

fn remove_quietly(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::warn!(staging = %path.display(), "cannot remove a staging directory: {e}");
        }
        _ => {}
    }
}

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
/// record is current; the receipt is read, and the output walked, only
/// when the flag is not the one recorded.
pub fn recognise(view: &str, record: &ViewRecord, data_path: &Path, flag_path: &Path) -> Option<Unrecorded> {
    let flag = super::views::flag_identity(flag_path)?;
    if let Some(SeenFlag::Present { identity, .. }) = record.done_flag
        && identity == flag
    {
        return None;
    }
    let bytes = std::fs::read(data_path.join(RECEIPT)).ok()?;
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
    match contents(data_path) {
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

/// The digest of every entry below `dir` (recursively, links not
/// followed) but the receipt: its name, kind, size, mtime and inode, all
/// of which a rename of `dir` keeps and any change to an entry changes.
fn contents(dir: &Path) -> io::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((next, prefix)) = pending.pop() {
        for entry in std::fs::read_dir(&next)? {
            let entry = entry?;
            let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if name == RECEIPT {
                continue;
            }
            let metadata = entry.metadata()?;
            let mtime = metadata.mtime().saturating_mul(1_000_000_000).saturating_add(metadata.mtime_nsec());
            found.push((name.clone(), metadata.is_dir(), metadata.len(), mtime, metadata.ino()));
            if metadata.is_dir() {
                pending.push((entry.path(), format!("{name}/")));
            }
        }
    }
    found.sort();
    let mut hasher = blake3::Hasher::new();
    for (name, is_dir, size, mtime, inode) in &found {
        hasher.update(name.as_bytes());
        hasher.update(&[0, u8::from(*is_dir)]);
        hasher.update(&size.to_le_bytes());
        hasher.update(&mtime.to_le_bytes());
        hasher.update(&inode.to_le_bytes());
    }
    Ok(hasher.finalize().to_hex()[..32].to_string())
}

impl Staging {
    pub fn new(storage: &Path) -> Self {
        Staging { root: storage.join(STAGING_DIR) }
    }

    /// Removes what an interrupted process left behind: the staging
    /// directories [`Staging::create`] makes, and nothing else. Anything
    /// else found there was not put there by trellis (view paths cannot
    /// start with a `.` component, but a user can still write there), so it
    /// is left alone, with a warning, rather than deleted.
    pub fn clean(&self) -> io::Result<()> {
        let entries = match std::fs::read_dir(&self.root) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                tracing::warn!(path = %self.root.display(), "not a directory; left alone");
                return Ok(());
            }
            entries => entries?,
        };
        let mut foreign = Vec::new();
        for entry in entries {
            let entry = entry?;
            let is_ours = entry.file_type()?.is_dir() && is_staging_name(&entry.file_name().to_string_lossy());
            if is_ours {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                foreign.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        if !foreign.is_empty() {
            foreign.sort();
            tracing::warn!(
                "{} holds {} that trellis did not create, left alone: {}",
                self.root.display(),
                if foreign.len() == 1 { "an entry" } else { "entries" },
                foreign.join(", ")
            );
        }
        Ok(())
    }

    /// A new, empty staging directory, named as [`is_staging_name`] expects.
    pub fn create(&self) -> io::Result<StagingDir> {
        std::fs::create_dir_all(&self.root)?;
        let path =
            tempfile::Builder::new().prefix(STAGING_PREFIX).rand_bytes(STAGING_RANDOM).tempdir_in(&self.root)?.keep();
        Ok(StagingDir { path, gone: false })
    }

    /// Writes the done flag and `receipt` (its contents digest filled in)
    /// into `staging` and makes it the data at `data_path`, replacing what
    /// was there in one step. On an error the staging directory is removed.
    pub fn publish(
        &self,
        mut staging: StagingDir,
        data_path: &Path,
        done_flag: &str,
        receipt: &mut Receipt,
    ) -> io::Result<()> {
        let dir = staging.path.clone();
        if !done_flag.is_empty() {
            std::fs::write(dir.join(done_flag), b"")?;
        }
        // Whatever the plugin left under this name is replaced: the receipt is the host's.
        let path = dir.join(RECEIPT);
        if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&path)?;
        }
        receipt.contents = contents(&dir)?;
        std::fs::write(&path, serde_json::to_vec(receipt).map_err(io::Error::other)?)?;
        if let Some(parent) = data_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if data_path.exists() {
            exchange(&dir, data_path)?;
            // The staging directory now holds the old data, which its drop removes.
            Ok(())
        } else {
            std::fs::rename(&dir, data_path)?;
            staging.gone = true;
            Ok(())
        }
    }

    pub fn discard(&self, staging: StagingDir) {
        drop(staging);
    }
}

/// Swaps two directories atomically (Linux `renameat2(RENAME_EXCHANGE)`).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let a = CString::new(a.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let b = CString::new(b.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: two valid NUL-terminated paths, relative to the current directory.
    let status =
        unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
    if status == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
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

        let found = recognise(view, &before, &data, &flag).expect("recognised");
        assert_eq!(found.receipt, published);
        assert_eq!(Some(found.flag), crate::scheduler::views::flag_identity(&flag));
        // Recorded: its flag is the one the record holds.
        let recorded = ViewRecord {
            timestamp: Some(10),
            done_flag: Some(SeenFlag::Present { identity: found.flag, seen: 10 }),
            ..ViewRecord::default()
        };
        assert_eq!(recognise(view, &recorded, &data, &flag), None);
        // Another view's output, or older than the record.
        assert_eq!(recognise("w/2015/05/01", &before, &data, &flag), None);
        assert_eq!(recognise(view, &ViewRecord { timestamp: Some(10), ..before.clone() }, &data, &flag), None);
        // Changed since: a file added, or one rewritten.
        std::fs::write(data.join("extra"), "mine").unwrap();
        assert_eq!(recognise(view, &before, &data, &flag), None);
        std::fs::remove_file(data.join("extra")).unwrap();
        assert!(recognise(view, &before, &data, &flag).is_some());
        std::fs::write(data.join("sub/part"), "ROWS").unwrap();
        assert_eq!(recognise(view, &before, &data, &flag), None);
        // No flag: nothing published there.
        std::fs::remove_file(&flag).unwrap();
        assert_eq!(recognise(view, &before, &data, &flag), None);
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
