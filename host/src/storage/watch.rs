//! Learning what changed in the local directory since it was last asked:
//! inotify watches on directories (a tree of flags' directories) and on
//! single published objects, and the changes the kernel has queued for
//! them. The scheduler's memo decides what a change means for its views;
//! this knows only watches and changes. An object store has no such
//! queue: its watcher would list the watched prefixes and report what
//! differs from the previous listing.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use inotify::{EventMask, Inotify, WatchMask};

/// What a watch is known by: the kernel's watch id (the same again when a
/// path is watched anew while its watch stands).
pub type WatchId = i32;

/// What the kernel had queued since the last call.
#[derive(Debug, PartialEq, Eq)]
pub enum Changes {
    /// Nothing more is queued.
    None,
    /// Changes under these watches; `true` for one that is gone (its
    /// directory or object deleted, moved or unwatchable).
    Touched(Vec<(WatchId, bool)>),
    /// Changes were lost (the queue overflowed, or could not be read):
    /// nothing watched can be vouched for.
    Lost,
}

pub struct Watcher {
    inotify: Inotify,
    buffer: Vec<u8>,
}

impl Watcher {
    /// A watcher, or why there cannot be one (no inotify here).
    pub fn new() -> std::io::Result<Watcher> {
        Ok(Watcher { inotify: Inotify::init()?, buffer: vec![0; 64 * 1024] })
    }

    /// Whether `path` is a directory now (links followed).
    pub fn is_dir(path: &Path) -> bool {
        path.is_dir()
    }

    /// Watches a directory for anything created, changed, moved or
    /// deleted in it, and for its own deletion or move.
    pub fn watch_dir(&mut self, dir: &Path) -> std::io::Result<WatchId> {
        let mask = WatchMask::ATTRIB
            | WatchMask::CLOSE_WRITE
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::DELETE_SELF
            | WatchMask::MODIFY
            | WatchMask::MOVE_SELF
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO;
        self.add(dir, mask)
    }

    /// Watches one object (a published done flag, or a data directory)
    /// for its deletion, replacement or change, not for what is beside it.
    /// Added to, never replacing, a mask a directory may have already.
    pub fn watch_object(&mut self, path: &Path) -> std::io::Result<WatchId> {
        let mask =
            WatchMask::ATTRIB | WatchMask::DELETE_SELF | WatchMask::MOVE_SELF | WatchMask::MODIFY | WatchMask::MASK_ADD;
        self.add(path, mask)
    }

    fn add(&mut self, path: &Path, mask: WatchMask) -> std::io::Result<WatchId> {
        Ok(self.inotify.watches().add(path, mask)?.get_watch_descriptor_id())
    }

    /// A copy of the watches' descriptor, to wait on (it is readable when
    /// changes are queued; [`Watcher::changes`] reads them).
    pub fn descriptor(&self) -> Option<OwnedFd> {
        self.inotify.as_fd().try_clone_to_owned().ok()
    }

    /// The next batch of changes the kernel has queued, without waiting.
    pub fn changes(&mut self) -> Changes {
        match self.inotify.read_events(&mut self.buffer) {
            Ok(events) => {
                let mut touched = Vec::new();
                for event in events {
                    if event.mask.contains(EventMask::Q_OVERFLOW) {
                        return Changes::Lost;
                    }
                    let gone =
                        event.mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED);
                    touched.push((event.wd.get_watch_descriptor_id(), gone));
                }
                Changes::Touched(touched)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Changes::None,
            Err(e) => {
                tracing::warn!("reading inotify events failed ({e}); every view is checked again");
                Changes::Lost
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flag created in a watched directory, and a watched object
    /// deleted, are reported under their watches; nothing queued is none.
    #[test]
    fn changes_are_reported_under_their_watches() {
        let dir = tempfile::tempdir().unwrap();
        let mut watcher = Watcher::new().unwrap();
        assert_eq!(watcher.changes(), Changes::None);
        let tree = watcher.watch_dir(dir.path()).unwrap();
        std::fs::write(dir.path().join("_SUCCESS"), "").unwrap();
        let Changes::Touched(touched) = watcher.changes() else { panic!("a change is queued") };
        assert!(touched.contains(&(tree, false)), "{touched:?}");
        while watcher.changes() != Changes::None {}
        let flag = watcher.watch_object(&dir.path().join("_SUCCESS")).unwrap();
        std::fs::remove_file(dir.path().join("_SUCCESS")).unwrap();
        let mut seen = Vec::new();
        while let Changes::Touched(touched) = watcher.changes() {
            seen.extend(touched);
        }
        assert!(seen.contains(&(flag, true)), "{seen:?}");
    }
}
