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
        create_dir_all_at(fd, parent)
    }
}

/// `create_dir_all` relative to `fd`: the whole path tried first (one
/// call when its parent exists, as it nearly always does), then what is
/// missing above it, from the top down.
fn create_dir_all_at(fd: BorrowedFd<'_>, dir: &Path) -> io::Result<()> {
    match rustix::fs::mkdirat(fd, dir, Mode::from_raw_mode(0o777)) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => {
            let stat = rustix::fs::statx(fd, dir, AtFlags::empty(), StatxFlags::TYPE)?;
            if FileType::from_raw_mode(stat.stx_mode.into()).is_dir() {
                Ok(())
            } else {
                Err(io::Error::new(io::ErrorKind::NotADirectory, format!("{} is not a directory", dir.display())))
            }
        }
        Err(rustix::io::Errno::NOENT) => {
            match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(parent) => create_dir_all_at(fd, parent)?,
                None => return Err(io::Error::from(rustix::io::Errno::NOENT)),
            }
            match rustix::fs::mkdirat(fd, dir, Mode::from_raw_mode(0o777)) {
                // Made meanwhile by another publish: as good.
                Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
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

    fn holds_data(&self, key: &Key) -> bool {
        let (fd, path) = self.at(key);
        stat(fd, &path, true).is_ok_and(|(is_dir, _)| is_dir)
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
        let make = || tempfile::Builder::new().prefix(STAGING_PREFIX).rand_bytes(STAGING_RANDOM).tempdir_in(&root);
        // The staging root is made the first time it is missing, not
        // looked for on every stage.
        let made = match make() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&root)?;
                make()?
            }
            made => made?,
        };
        Ok(Staged { path: made.keep(), gone: false })
    }

    /// Tried in the order that costs a cold run least: the version moved in
    /// where there was none (one call when its parent exists, as it nearly
    /// always does: the parents are made only when the kernel says they
    /// are missing), else exchanged with the old version.
    /// The done flag is in the staged directory: the rename publishes it.
    fn publish(&self, mut staged: Staged, key: &Key, _done_flag: &str) -> io::Result<()> {
        // The staged directory is under the root: named relative to it
        // when the data is too.
        let staged_key = self.key(&staged.path);
        let rename = |flags| {
            let (fd, path) = self.at(key);
            let (from_fd, from) = self.at(&staged_key);
            rustix::fs::renameat_with(from_fd, from.as_ref(), fd, path.as_ref(), flags)
        };
        let moved_in = match rename(RenameFlags::NOREPLACE) {
            Err(rustix::io::Errno::NOENT) => {
                self.create_parents(key)?;
                rename(RenameFlags::NOREPLACE)
            }
            moved => moved,
        };
        match moved_in {
            Ok(()) => {
                staged.gone = true;
                Ok(())
            }
            // The staging directory now holds the old data, which its drop removes.
            Err(rustix::io::Errno::EXIST | rustix::io::Errno::NOTEMPTY) => Ok(rename(RenameFlags::EXCHANGE)?),
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

    /// The directory itself: nothing is copied.
    fn local_input(&self, key: &Key) -> io::Result<super::LocalInput> {
        Ok(super::LocalInput::in_place(self.root.join(key.as_path())))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, LocalDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalDir::new(dir.path());
        (dir, store)
    }

    fn key(store: &LocalDir, relative: &str) -> Key {
        store.key(&store.root().join(relative))
    }

    fn staged_with(store: &LocalDir, content: &str) -> Staged {
        let staged = store.stage().unwrap();
        std::fs::create_dir(staged.path().join("sub")).unwrap();
        std::fs::write(staged.path().join("sub/part"), content).unwrap();
        staged.put("_SUCCESS", b"").unwrap();
        staged
    }

    /// A publish is the staged directory itself becoming the data (one
    /// rename, whose inode the data path then has), old data replaced
    /// whole: nothing of the first version is left in the second.
    #[test]
    fn publish_replaces_the_data_in_one_step() {
        let (_dir, store) = store();
        let data = key(&store, "v/2015/05/01");
        let mut old_staging = None;
        for (content, extra) in [("first", Some("only-in-first")), ("second", None)] {
            let staged = staged_with(&store, content);
            if let Some(extra) = extra {
                std::fs::write(staged.path().join(extra), "x").unwrap();
            }
            let staged_inode = store.identity(&store.key(staged.path())).unwrap().inode;
            let path = staged.path().to_path_buf();
            store.publish(staged, &data, "_SUCCESS").unwrap();
            assert_eq!(store.identity(&data).unwrap().inode, staged_inode, "renamed, not copied");
            let file = data.join("sub/part");
            assert_eq!(store.read(&file).unwrap().as_deref(), Some(content.as_bytes()));
            assert!(!path.exists(), "the staging directory (holding the old data) is gone");
            old_staging = Some(path);
        }
        assert_eq!(store.read(&data.join("only-in-first")).unwrap(), None);
        assert!(!old_staging.unwrap().exists());
        let entries: Vec<_> = std::fs::read_dir(store.root().join(STAGING_DIR)).unwrap().collect();
        assert!(entries.is_empty(), "{entries:?}");
    }

    /// A staging directory dropped unpublished removes itself; one a killed
    /// process left goes at the next clean, and nothing trellis did not make.
    #[test]
    fn staging_is_cleaned_up_and_only_staging_is() {
        let (_dir, store) = store();
        let dropped = store.stage().unwrap().path().to_path_buf();
        assert!(!dropped.exists());
        let abandoned = staged_with(&store, "half");
        let left = abandoned.path().to_path_buf();
        std::mem::forget(abandoned);
        let root = store.root().join(STAGING_DIR);
        std::fs::write(root.join("view-abcdef"), "a file, not a staging directory").unwrap();
        std::fs::create_dir(root.join("view-toolong")).unwrap();
        store.clean_staging().unwrap();
        assert!(!left.exists());
        assert!(root.join("view-abcdef").exists());
        assert!(root.join("view-toolong").exists());
        // No staging area at all: nothing to clean.
        let (_empty, fresh) = self::store();
        fresh.clean_staging().unwrap();
    }

    /// A done flag delivered again (written anew and moved into place, as
    /// producers do) has another identity even with the same size; a flag
    /// untouched keeps its identity; links are followed; absent is none.
    #[test]
    fn flag_identity_changes_on_redelivery() {
        let (dir, store) = store();
        let flag = key(&store, "raw/2015/05/01/_SUCCESS");
        assert_eq!(store.identity(&flag), None);
        assert!(!store.exists(&flag));
        let path = dir.path().join("raw/2015/05/01/_SUCCESS");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "").unwrap();
        let first = store.identity(&flag).unwrap();
        assert_eq!(store.identity(&flag), Some(first), "unchanged, the same");
        let delivery = dir.path().join("incoming");
        std::fs::write(&delivery, "").unwrap();
        std::fs::rename(&delivery, &path).unwrap();
        let second = store.identity(&flag).unwrap();
        assert_ne!(first, second);
        assert_eq!(first.size, second.size);
        let link = key(&store, "raw/2015/05/02");
        std::os::unix::fs::symlink(path.parent().unwrap(), dir.path().join("raw/2015/05/02")).unwrap();
        assert_eq!(store.identity(&link.join("_SUCCESS")), Some(second));
        // A path outside the root names its file as well.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("_SUCCESS"), "").unwrap();
        assert!(store.exists(&store.key(&outside.path().join("_SUCCESS"))));
    }

    /// A root that does not exist yet is found once it does (the first
    /// publish creates it), and keys resolve relative to it then.
    #[test]
    fn a_root_made_after_the_store_is_found() {
        let parent = tempfile::tempdir().unwrap();
        let store = LocalDir::new(&parent.path().join("data"));
        let data = key(&store, "v/1");
        assert!(!store.exists(&data));
        store.publish(staged_with(&store, "rows"), &data, "_SUCCESS").unwrap();
        assert!(store.exists(&data.join("_SUCCESS")));
        assert_eq!(store.read(&data.join("sub/part")).unwrap().as_deref(), Some(&b"rows"[..]));
    }

    /// A published version holds data; its flag, a missing key and a
    /// link to a file do not; a link to a version does (inputs are read
    /// through links, as the SDK's readers follow them).
    #[test]
    fn only_a_directory_holds_data() {
        let (dir, store) = store();
        let data = key(&store, "v/1");
        assert!(!store.holds_data(&data));
        store.publish(staged_with(&store, "rows"), &data, "_SUCCESS").unwrap();
        assert!(store.holds_data(&data));
        assert!(!store.holds_data(&data.join("_SUCCESS")));
        std::os::unix::fs::symlink(dir.path().join("v/1"), dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("v/1/_SUCCESS"), dir.path().join("flag")).unwrap();
        assert!(store.holds_data(&key(&store, "linked")));
        assert!(!store.holds_data(&key(&store, "flag")));
    }

    /// Listings name entries relative to the key listed, with `/`; follow
    /// links or not as asked; do not enter what they do not keep; and
    /// refuse a name that is not UTF-8 only when names must be exact.
    #[test]
    fn listing_walks_relative_names_as_asked() {
        let (dir, store) = store();
        let root = dir.path().join("in");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(root.join("_skipped")).unwrap();
        for name in ["a", "sub/b", "sub/deeper/c", "_skipped/d"] {
            std::fs::write(root.join(name), name).unwrap();
        }
        std::os::unix::fs::symlink(root.join("sub"), root.join("linked")).unwrap();
        let names = |walk: &Walk| {
            let mut listed: Vec<_> = store
                .list(&key(&store, "in"), walk)
                .unwrap()
                .into_iter()
                .map(|e| format!("{}{}", e.name, if e.is_dir { "/" } else { "" }))
                .collect();
            listed.sort();
            listed
        };
        let keep = |name: &str| !name.rsplit('/').next().unwrap().starts_with('_');
        let followed = Walk { follow_links: true, exact_names: true, keep: &keep };
        assert_eq!(
            names(&followed),
            [
                "a",
                "linked/",
                "linked/b",
                "linked/deeper/",
                "linked/deeper/c",
                "sub/",
                "sub/b",
                "sub/deeper/",
                "sub/deeper/c"
            ]
        );
        let not_followed = Walk { follow_links: false, exact_names: true, keep: &|_| true };
        assert_eq!(
            names(&not_followed),
            ["_skipped/", "_skipped/d", "a", "linked", "sub/", "sub/b", "sub/deeper/", "sub/deeper/c"]
        );
        let mut sizes: Vec<u64> = store
            .list(&key(&store, "in/sub"), &followed)
            .unwrap()
            .iter()
            .filter(|e| !e.is_dir)
            .map(|e| e.identity.size)
            .collect();
        sizes.sort();
        assert_eq!(sizes, [5, 12], "the files' own sizes: `sub/b`, `sub/deeper/c`");
        // Not there: the error says so, as reading a directory would.
        let missing = store.list(&key(&store, "absent"), &followed).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::write(root.join(OsStr::from_bytes(b"bad\xff")), "").unwrap();
        assert!(store.list(&key(&store, "in"), &followed).unwrap_err().to_string().contains("not UTF-8"));
        let lossy = Walk { follow_links: false, exact_names: false, keep: &|_| true };
        assert!(names(&lossy).contains(&"bad\u{fffd}".to_string()));
    }
}
