//! The local directories granted to plugins and engines: a view's staging
//! directory (its output), its inputs and previous version, read where
//! they are. What the runtime and the engines need of them goes through
//! here: where a grant really is (links resolved, so that overlapping
//! grants are seen), how much an output holds (its cap), and the moves of
//! an engine's files into the staging directory under trellis's names.
//!
//! An object-store backend would materialize these directories locally
//! (inputs downloaded, the output uploaded at publish); what a plugin sees
//! stays a real directory, as wasmtime's preopens need.

use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// Where a granted directory really is: its path with every link resolved.
/// The kernel says, for the directory opened once (`realpath` would read
/// every component of the path as a link, each walking the path again);
/// without `/proc`, `realpath` it is.
pub fn resolve(dir: &Path) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStringExt;
    let opened = rustix::fs::open(dir, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
    let link = format!("/proc/self/fd/{}", opened.as_raw_fd());
    match rustix::fs::readlinkat(rustix::fs::CWD, link.as_str(), Vec::new()) {
        Ok(target) if target.as_bytes().starts_with(b"/") && !target.as_bytes().ends_with(b" (deleted)") => {
            Ok(PathBuf::from(std::ffi::OsString::from_vec(target.into_bytes())))
        }
        _ => std::fs::canonicalize(dir),
    }
}

/// What a walk of an output found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes, by apparent size (a sparse file counts its full length).
    pub bytes: u64,
    /// Files and directories below the output directory.
    pub entries: u64,
}

/// Walks `dir` (without following links), counting bytes and entries; it
/// stops early once either is over `bytes` or `entries`. Returns the
/// first entry that is neither a regular file nor a directory, if any.
/// Iterative, so that a deep tree cannot exhaust the host's stack.
pub fn usage(dir: &Path, bytes: u64, entries: u64) -> io::Result<(Usage, Option<PathBuf>)> {
    let mut usage = Usage::default();
    let mut first_special = None;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next)? {
            let entry = entry?;
            let metadata = entry.metadata()?;
            usage.entries += 1;
            if metadata.is_dir() {
                pending.push(entry.path());
            } else {
                usage.bytes = usage.bytes.saturating_add(metadata.len());
                if !metadata.is_file() && first_special.is_none() {
                    first_special = Some(entry.path());
                }
            }
            if usage.bytes > bytes || usage.entries > entries {
                return Ok((usage, first_special));
            }
        }
    }
    Ok((usage, first_special))
}

/// An entry at the top of an engine's output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub is_file: bool,
}

/// The entries at the top of `dir`, sorted by name (names lossily UTF-8).
pub fn entries(dir: &Path) -> io::Result<Vec<Entry>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let is_file = entry.path().is_file();
        found.push(Entry { name: entry.file_name().to_string_lossy().into_owned(), is_file });
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// Moves `from/name` to `to/new_name` (both in one granted tree, so one rename).
pub fn move_into(from: &Path, name: &str, to: &Path, new_name: &str) -> io::Result<()> {
    std::fs::rename(from.join(name), to.join(new_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant reached through a link resolves where `realpath` says it is.
    #[test]
    fn a_grant_resolves_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real/dir");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("linked")).unwrap();
        let through = dir.path().join("linked/dir");
        assert_eq!(resolve(&through).unwrap(), std::fs::canonicalize(&real).unwrap());
        assert_eq!(resolve(&real).unwrap(), std::fs::canonicalize(&real).unwrap());
        assert!(resolve(&dir.path().join("absent")).is_err());
    }
}
