//! The local directory as a [`ViewStore`]: every key is resolved relative
//! to the root's descriptor, opened once (the kernel walks only the key's
//! own components, not the root's again), listings open each directory
//! once and `statx` its entries relative to it, and a publish is one
//! `renameat2`, exchanging the staged directory with the old version when
//! there is one. All through `rustix`, no hand-written `libc`.
//!
//! The root is opened the first time it exists: a storage root created
//! after trellis started is found then. Replacing the root directory
//! itself while trellis runs is not followed (its keys still resolve in
//! the directory first opened); a reload with another root opens that.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, StatxFlags};

use super::{Key, Listed, STAGING_DIR, Staged, ViewStore, Walk};
use crate::metastore::FlagIdentity;

/// A staging directory's name: this prefix, then this many random
/// alphanumeric characters. Only names of this shape are ever removed.
const STAGING_PREFIX: &str = "view-";
const STAGING_RANDOM: usize = 6;

fn is_staging_name(name: &str) -> bool {
    name.strip_prefix(STAGING_PREFIX)
        .is_some_and(|random| random.len() == STAGING_RANDOM && random.chars().all(|c| c.is_ascii_alphanumeric()))
}

#[derive(Debug)]
pub struct LocalDir {
    root: PathBuf,
    /// The root, opened `O_PATH` once it exists.
    dir: OnceLock<OwnedFd>,
}

impl LocalDir {
    pub fn new(root: &Path) -> LocalDir {
        LocalDir { root: root.to_path_buf(), dir: OnceLock::new() }
    }

    /// The root's descriptor, opened now if it was not yet and it exists.
    fn root_fd(&self) -> Option<BorrowedFd<'_>> {
        if let Some(fd) = self.dir.get() {
            return Some(fd.as_fd());
        }
        let opened = rustix::fs::open(&self.root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty());
        match opened {
            Ok(fd) => Some(self.dir.get_or_init(|| fd).as_fd()),
            Err(_) => None,
        }
    }

    /// Where `key` is found: relative to the root's descriptor, or, for a
    /// key outside the root or a root that does not exist yet, by its path.
    fn at<'k>(&self, key: &'k Key) -> (BorrowedFd<'_>, std::borrow::Cow<'k, Path>) {
        if key.as_path().is_absolute() {
            return (rustix::fs::CWD, key.as_path().into());
        }
        match self.root_fd() {
            Some(fd) => (fd, key.as_path().into()),
            None => (rustix::fs::CWD, self.root.join(key.as_path()).into()),
        }
    }

    fn staging_root(&self) -> PathBuf {
        self.root.join(STAGING_DIR)
    }

    /// Creates the directories above `key`, as `create_dir_all` would.
    fn create_parents(&self, key: &Key) -> io::Result<()> {
        let Some(parent) = key.as_path().parent().filter(|p| !p.as_os_str().is_empty()) else {
            return Ok(());
        };
        if key.as_path().is_absolute() || self.root_fd().is_none() {
            let (_, path) = self.at(key);
            return std::fs::create_dir_all(path.parent().unwrap_or(Path::new("/")));
        }
        let (fd, _) = self.at(key);
        let mut so_far = PathBuf::new();
        for component in parent.components() {
            so_far.push(component);
            match rustix::fs::mkdirat(fd, &so_far, Mode::from_raw_mode(0o777)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => {
                    let stat = rustix::fs::statx(fd, &so_far, AtFlags::empty(), StatxFlags::TYPE)?;
                    if !FileType::from_raw_mode(stat.stx_mode.into()).is_dir() {
                        return Err(io::Error::new(
                            io::ErrorKind::NotADirectory,
                            format!("{} is not a directory", so_far.display()),
                        ));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl ViewStore for LocalDir {
    fn root(&self) -> &Path {
        &self.root
    }

    fn identity(&self, key: &Key) -> Option<FlagIdentity> {
        let (fd, path) = self.at(key);
        stat(fd, &path, true).ok().map(|(_, identity)| identity)
    }

    fn read(&self, key: &Key) -> io::Result<Option<Vec<u8>>> {
        let (fd, path) = self.at(key);
        let file = match rustix::fs::openat(fd, path.as_ref(), OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
            Ok(file) => file,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut bytes = Vec::new();
        std::fs::File::from(file).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    fn list(&self, key: &Key, walk: &Walk) -> io::Result<Vec<Listed>> {
        let (fd, path) = self.at(key);
        self::walk(fd, &path, walk)
    }

    fn stage(&self) -> io::Result<Staged> {
        let root = self.staging_root();
        std::fs::create_dir_all(&root)?;
        let path = tempfile::Builder::new().prefix(STAGING_PREFIX).rand_bytes(STAGING_RANDOM).tempdir_in(&root)?.keep();
        Ok(Staged { path, gone: false })
    }

    fn publish(&self, mut staged: Staged, key: &Key) -> io::Result<()> {
        self.create_parents(key)?;
        let (fd, path) = self.at(key);
        // The staged directory is named by its full path: it is under the
        // root, which has been created by now, but need not be relative to it.
        let from = staged.path.clone();
        match rustix::fs::renameat_with(rustix::fs::CWD, &from, fd, path.as_ref(), RenameFlags::EXCHANGE) {
            // The staging directory now holds the old data, which its drop removes.
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::NOENT) => {
                rustix::fs::renameat_with(rustix::fs::CWD, &from, fd, path.as_ref(), RenameFlags::NOREPLACE)?;
                staged.gone = true;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the staging directories [`ViewStore::stage`] makes, and
    /// nothing else. Anything else found there was not put there by
    /// trellis (view paths cannot start with a `.` component, but a user
    /// can still write there), so it is left alone, with a warning.
    fn clean_staging(&self) -> io::Result<()> {
        let root = self.staging_root();
        let entries = match std::fs::read_dir(&root) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                tracing::warn!(path = %root.display(), "not a directory; left alone");
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
                root.display(),
                if foreign.len() == 1 { "an entry" } else { "entries" },
                foreign.join(", ")
            );
        }
        Ok(())
    }
}

pub(super) fn remove_quietly(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::warn!(staging = %path.display(), "cannot remove a staging directory: {e}");
        }
        _ => {}
    }
}

/// What identifies the entry at `path` relative to `fd`, and whether it is
/// a directory.
fn stat(fd: BorrowedFd<'_>, path: &Path, follow: bool) -> io::Result<(bool, FlagIdentity)> {
    let flags = if follow { AtFlags::empty() } else { AtFlags::SYMLINK_NOFOLLOW };
    let stat =
        rustix::fs::statx(fd, path, flags, StatxFlags::TYPE | StatxFlags::SIZE | StatxFlags::MTIME | StatxFlags::INO)?;
    let mtime = stat.stx_mtime;
    let identity = FlagIdentity {
        mtime_nanos: mtime.tv_sec.saturating_mul(1_000_000_000).saturating_add(i64::from(mtime.tv_nsec)),
        size: stat.stx_size,
        inode: stat.stx_ino,
    };
    Ok((FileType::from_raw_mode(stat.stx_mode.into()).is_dir(), identity))
}

/// Lists the directory at `path` relative to `fd` as `walk` says: each
/// directory opened once, its entries looked at relative to it.
pub(super) fn walk(fd: BorrowedFd<'_>, path: &Path, walk: &Walk) -> io::Result<Vec<Listed>> {
    let dir = rustix::fs::openat(fd, path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let mut found = Vec::new();
    walk_into(dir, "", walk, &mut found)?;
    Ok(found)
}

fn walk_into(dir: OwnedFd, prefix: &str, walk: &Walk, found: &mut Vec<Listed>) -> io::Result<()> {
    // The directory read through one descriptor, its entries looked up
    // through a duplicate of it (no path walked again).
    let entries = rustix::fs::Dir::new(rustix::io::dup(&dir)?)?;
    let parent = dir;
    for entry in entries {
        let entry = entry?;
        let bytes = entry.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let os_name = OsStr::from_bytes(bytes);
        let name = match os_name.to_str() {
            Some(name) => format!("{prefix}{name}"),
            None if walk.exact_names => {
                return Err(io::Error::other(format!("{prefix}{} has a name that is not UTF-8", os_name.display())));
            }
            None => format!("{prefix}{}", os_name.to_string_lossy()),
        };
        if !(walk.keep)(&name) {
            continue;
        }
        let (is_dir, identity) = stat(parent.as_fd(), Path::new(os_name), walk.follow_links)?;
        if is_dir {
            let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            if !walk.follow_links {
                flags |= OFlags::NOFOLLOW;
            }
            let child = rustix::fs::openat(parent.as_fd(), os_name, flags, Mode::empty())?;
            found.push(Listed { name: name.clone(), is_dir, identity });
            walk_into(child, &format!("{name}/"), walk, found)?;
        } else {
            found.push(Listed { name, is_dir, identity });
        }
    }
    Ok(())
}
