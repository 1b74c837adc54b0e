//! Atomic publish: a transformation writes a staging directory, and on
//! success the view's data path is replaced by it in one rename, done flag
//! included. Readers see the old data or the new, never a mix; a failed or
//! interrupted transformation leaves the old data untouched.

use std::io;
use std::path::{Path, PathBuf};

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
    pub fn create(&self) -> io::Result<PathBuf> {
        std::fs::create_dir_all(&self.root)?;
        Ok(tempfile::Builder::new().prefix(STAGING_PREFIX).rand_bytes(STAGING_RANDOM).tempdir_in(&self.root)?.keep())
    }

    /// Writes the done flag into `staging` and makes it the data at
    /// `data_path`, replacing what was there in one step.
    pub fn publish(&self, staging: &Path, data_path: &Path, done_flag: &str) -> io::Result<()> {
        if !done_flag.is_empty() {
            std::fs::write(staging.join(done_flag), b"")?;
        }
        if let Some(parent) = data_path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if data_path.exists() {
            exchange(staging, data_path)?;
            // `staging` now holds the old data.
            std::fs::remove_dir_all(staging)
        } else {
            std::fs::rename(staging, data_path)
        }
    }

    pub fn discard(&self, staging: &Path) {
        if let Err(e) = std::fs::remove_dir_all(staging) {
            tracing::warn!(staging = %staging.display(), "cannot remove a staging directory: {e}");
        }
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

    #[test]
    fn publish_replaces_the_data_and_writes_the_flag() {
        let storage = tempfile::tempdir().unwrap();
        let staging = Staging::new(storage.path());
        let data = storage.path().join("v/2015/05/01");
        for content in ["first", "second"] {
            let dir = staging.create().unwrap();
            std::fs::write(dir.join("part"), content).unwrap();
            staging.publish(&dir, &data, "_SUCCESS").unwrap();
            assert_eq!(std::fs::read_to_string(data.join("part")).unwrap(), content);
            assert!(data.join("_SUCCESS").exists());
            assert!(!dir.exists());
        }
        let leftover = staging.create().unwrap();
        staging.clean().unwrap();
        assert!(!leftover.exists());
        assert_eq!(std::fs::read_to_string(data.join("part")).unwrap(), "second");
    }

    #[test]
    fn cleaning_removes_only_the_staging_directories_trellis_made() {
        let storage = tempfile::tempdir().unwrap();
        let staging = Staging::new(storage.path());
        let leftover = staging.create().unwrap();
        std::fs::write(leftover.join("part"), "half written").unwrap();
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
