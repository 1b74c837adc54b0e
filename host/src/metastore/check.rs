//! Integrity: a damaged metastore is refused when it is opened, in one line
//! that says what is damaged, rather than found later by whichever command
//! happens to read the damaged part (and then by every one after it).
//!
//! sled gives two kinds of damage. A page it cannot read (its checksum
//! fails, or it is not the page it should be, which sled asserts with a
//! panic) is found by reading every tree once. A damaged end of its log is
//! taken by sled's recovery for a write that a crash interrupted, and the
//! store quietly opens as it was before: commits that were reported durable
//! are gone. That is found by counting commits: each one adds to a counter
//! in the `meta` tree, and after it is durable the count is written to a
//! file beside sled's (`commits`, not synced: it may lag, never lead), so a
//! store holding fewer commits than that file says has lost some.

use std::cell::RefCell;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::format::{FORMAT_KEY, decode, decode_counter};
use super::{ActionRecord, CoordinatorRecord, Error, ListenerRecord, LoggedEvent, Metastore, RunRecord, ViewRecord};

/// The `meta` key of the commit counter.
pub(super) const COMMITS_KEY: &[u8] = b"commits";

/// The file beside sled's that holds the count of durable commits.
pub(super) const COMMITS_FILE: &str = "commits";

/// Decodes one record and says how many it held (a chunk holds many events).
type DecodeOne = dyn Fn(&[u8], &[u8]) -> Result<usize, Error>;

/// How many records each tree holds, as `trellis metastore check` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contents {
    pub schemas: usize,
    pub views: usize,
    pub runs: usize,
    pub flows: usize,
    /// Events, not the chunks they are stored in.
    pub events: usize,
    pub listeners: usize,
    pub coordinators: usize,
    pub actions: usize,
    /// Transaction log records: heads and entries.
    pub txlog: usize,
    /// Views with their last transformations' logs.
    pub logs: usize,
}

impl Metastore {
    /// Reads every entry of every tree (at open, of the event log only its
    /// first and last chunks). sled checks each page as it loads it, so a
    /// page it cannot read shows here. The log is most of a store (900,000
    /// events beside 100,000 views in the bench's) and only listeners,
    /// the event stream, retention and backups read it, from a cursor on,
    /// where a damaged page is reported as such (see
    /// [`Metastore::reading`]); `check` reads all of it.
    /// The trees are read on two threads, half of them each: reading is
    /// most of what opening costs.
    pub(super) fn read_through(&self, whole_log: bool) -> Result<(), Error> {
        let read = |name: &'static str, tree: &sled::Tree| -> Result<(), Error> {
            let damaged = |e: sled::Error| self.damaged(format!("its `{name}` tree"), e.to_string());
            self.reading(name, || {
                if name == "events" && !whole_log {
                    tree.first().map_err(damaged)?;
                    tree.last().map_err(damaged)?;
                    return Ok(());
                }
                for entry in tree.iter() {
                    entry.map_err(damaged)?;
                }
                Ok(())
            })
        };
        let trees = self.trees();
        // The views and flows trees are the largest but for the log; each
        // side takes one.
        let (first, second): (Vec<_>, Vec<_>) =
            trees.iter().partition(|(name, _)| *name != "flows" && *name != "events");
        std::thread::scope(|scope| {
            let other = scope.spawn(|| second.iter().try_for_each(|(name, tree)| read(name, tree)));
            let mine = first.iter().try_for_each(|(name, tree)| read(name, tree));
            let other = other.join().unwrap_or_else(|_| Err(Error::Storage("sled failed".into())));
            mine.and(other)
        })
    }

    /// What `trellis metastore check` does beyond the check at open: every
    /// record decoded as what it should be. Returns what the trees hold.
    pub fn check(&self) -> Result<Contents, Error> {
        self.read_through(true)?;
        self.reading("meta", || {
            for entry in self.meta.iter() {
                let (key, _) = entry?;
                if !is_meta_key(&key) {
                    let key = String::from_utf8_lossy(&key).into_owned();
                    return Err(Error::Corrupt { key, reason: "not a key of the `meta` tree".into() });
                }
            }
            Ok(())
        })?;
        let mut contents = Contents::default();
        let decode_all = |name: &str, tree: &sled::Tree, count: &mut usize, decode_one: &DecodeOne| {
            self.reading(name, || {
                for entry in tree.iter() {
                    let (key, value) = entry?;
                    *count += decode_one(&key, &value)?;
                }
                Ok(())
            })
        };
        fn one<T: DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<usize, Error> {
            decode::<T>(key, value).map(|_| 1)
        }
        decode_all("schemas", &self.schemas, &mut contents.schemas, &one::<String>)?;
        decode_all("views", &self.views, &mut contents.views, &one::<ViewRecord>)?;
        decode_all("runs", &self.runs, &mut contents.runs, &one::<RunRecord>)?;
        decode_all("flows", &self.flows, &mut contents.flows, &one::<super::FlowRecord>)?;
        decode_all("events", &self.events, &mut contents.events, &|key, value| {
            let chunk: Vec<LoggedEvent> = decode(key, value)?;
            let start = super::events::chunk_start(key)?;
            let gapless = chunk.iter().zip(start..).all(|(event, expected)| event.sequence == expected);
            if chunk.is_empty() || !gapless {
                return Err(Error::Corrupt {
                    key: format!("events/{start}"),
                    reason: "its events are not numbered from its key on".into(),
                });
            }
            Ok(chunk.len())
        })?;
        decode_all("listeners", &self.listeners, &mut contents.listeners, &one::<ListenerRecord>)?;
        decode_all("coordinators", &self.coordinators, &mut contents.coordinators, &one::<CoordinatorRecord>)?;
        decode_all("actions", &self.actions, &mut contents.actions, &one::<ActionRecord>)?;
        decode_all("txlog", &self.txlog, &mut contents.txlog, &|key, value| match super::txlog::split_key(key) {
            Some((_, true)) => one::<super::TxHead>(key, value),
            Some((_, false)) => one::<super::TxEntry>(key, value),
            None => Err(Error::Corrupt {
                key: String::from_utf8_lossy(key).into(),
                reason: "a key without its view".into(),
            }),
        })?;
        decode_all("logs", &self.logs, &mut contents.logs, &one::<super::ViewLog>)?;
        Ok(contents)
    }

    /// Every tree with its name, `meta` first.
    pub(super) fn trees(&self) -> [(&'static str, &sled::Tree); 11] {
        [
            ("meta", &self.meta),
            ("schemas", &self.schemas),
            ("views", &self.views),
            ("runs", &self.runs),
            ("flows", &self.flows),
            ("events", &self.events),
            ("listeners", &self.listeners),
            ("coordinators", &self.coordinators),
            ("actions", &self.actions),
            ("txlog", &self.txlog),
            ("logs", &self.logs),
        ]
    }

    pub(super) fn damaged(&self, what: String, reason: String) -> Error {
        Error::Damaged { path: self.path.clone(), what, reason }
    }

    /// The commits the store holds, by its own counter.
    pub(super) fn commits(&self) -> Result<u64, Error> {
        Ok(decode_counter(COMMITS_KEY, self.meta.get(COMMITS_KEY)?.as_deref())?.unwrap_or(0))
    }

    /// Refuses a store that holds fewer commits than were made durable in
    /// it, then records its own count as the new floor.
    pub(super) fn check_commits(&self) -> Result<(), Error> {
        let held = self.commits()?;
        let mut recorded = [0u8; 8];
        let written = match self.commits_file.read_at(&mut recorded, 0) {
            Ok(8) => Some(u64::from_be_bytes(recorded)),
            // Empty: a store opened first by a trellis without this file.
            Ok(_) => None,
            Err(e) => return Err(self.damaged(format!("its `{COMMITS_FILE}` file"), e.to_string())),
        };
        if let Some(written) = written.filter(|written| *written > held) {
            return Err(self.damaged(
                "the end of its log".into(),
                format!("{written} commits were made durable, it holds {held}; the last {} are lost", written - held),
            ));
        }
        self.note_commits(held);
        Ok(())
    }

    /// Writes the count of durable commits beside the store. Not synced:
    /// the file may lag behind the store after a crash, which the check
    /// allows, but never lead it.
    pub(super) fn note_commits(&self, count: u64) {
        if let Err(e) = self.commits_file.write_at(&count.to_be_bytes(), 0) {
            tracing::warn!(path = %self.path.display(), "cannot record the count of commits: {e}");
        }
    }
}

/// Opens the file that holds the count of durable commits, in `dir`.
pub(super) fn open_commits_file(dir: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(dir.join(COMMITS_FILE))
}

/// The meta keys a store may hold; anything else there is damage.
pub(super) fn is_meta_key(key: &[u8]) -> bool {
    key == FORMAT_KEY || key == COMMITS_KEY || key == super::events::SEQUENCE_KEY
}

thread_local! {
    /// Set while this thread runs sled code that may panic on a damaged
    /// file: the panic is caught and becomes an error, its message kept
    /// here instead of printed.
    static GUARDED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`, turning a panic inside it (sled asserts on some damaged
/// pages) into [`Error::Storage`] with the panic's message. The panic hook
/// stays quiet for it; panics elsewhere are reported as before.
pub(super) fn guarded<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    caught(f).unwrap_or_else(|message| Err(Error::Storage(format!("sled failed: {message}"))))
}

/// Runs `f`; a panic inside it is `Err` with the panic's message, on one
/// line, and the panic hook stays quiet for it.
fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let caught = GUARDED.with(|guarded| match guarded.borrow_mut().as_mut() {
                Some(message) => {
                    // The message alone: its location is a path on the
                    // machine that built sled, which tells an operator nothing.
                    *message = info.payload_as_str().unwrap_or("a panic without a message").replace('\n', " ");
                    true
                }
                None => false,
            });
            if !caught {
                previous(info);
            }
        }));
    });
    let outer = GUARDED.with(|guarded| guarded.borrow_mut().replace(String::new()));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let message = GUARDED.with(|guarded| std::mem::replace(&mut *guarded.borrow_mut(), outer));
    result.map_err(|_| message.unwrap_or_default())
}

impl Metastore {
    /// Runs `f`, a read of `tree` (or of the records of several, for a
    /// backup) by an open store; a panic of sled's inside it becomes
    /// [`Error::Damaged`], naming the tree. Open reads every page but those
    /// of the event log's middle, which listeners, event streams, retention
    /// and backups read later, often in a process that lives for days: a
    /// damaged page there must end that read with the error its callers
    /// report, not the thread that made it. Every read of an open store
    /// goes through here.
    pub(super) fn reading<T>(&self, tree: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        caught(f).unwrap_or_else(|message| {
            Err(self.damaged(format!("its `{tree}` tree"), format!("sled failed: {message}")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metastore::Commit;
    use crate::metastore::fixtures::{event, materialized};
    use crate::model::ViewState;

    fn filled(dir: &Path) {
        let store = Metastore::open(dir).unwrap();
        store.register_schema("s.d/Daily", "c1").unwrap();
        for day in 1..=3 {
            let view = format!("s.d/Daily/2015/05/0{day}");
            let commit = Commit {
                views: vec![(view.clone(), materialized(day))],
                events: vec![event(&view, ViewState::Waiting, ViewState::Materialized)],
                ..Commit::default()
            };
            store.commit(&commit).unwrap();
        }
        store.put_listener("audit", &ListenerRecord { cursor: 2, ..ListenerRecord::default() }).unwrap();
        store.flush().unwrap();
    }

    #[test]
    fn a_healthy_store_checks_with_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        filled(dir.path());
        let store = Metastore::open(dir.path()).unwrap();
        assert_eq!(
            store.check().unwrap(),
            Contents {
                schemas: 1,
                views: 3,
                runs: 0,
                flows: 0,
                events: 3,
                listeners: 1,
                coordinators: 0,
                actions: 0,
                txlog: 0,
                logs: 0
            }
        );
    }

    #[test]
    fn a_store_that_lost_commits_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        filled(dir.path());
        // As if sled had recovered an older state: the file says more
        // commits were made durable than the store holds.
        std::fs::write(dir.path().join(COMMITS_FILE), 5u64.to_be_bytes()).unwrap();
        let error = Metastore::open(dir.path()).err().unwrap().to_string();
        assert_eq!(
            error,
            format!(
                "the metastore in {} is damaged (the end of its log: 5 commits were made durable, it holds 3; the last 2 are lost); restore it from a backup (`trellis metastore restore FILE`) or move it away to start afresh",
                dir.path().display()
            )
        );
        // A file that lags (a crash before it was written) is no damage.
        std::fs::write(dir.path().join(COMMITS_FILE), 1u64.to_be_bytes()).unwrap();
        Metastore::open(dir.path()).unwrap();
    }

    #[test]
    fn a_record_that_does_not_decode_fails_the_check() {
        let dir = tempfile::tempdir().unwrap();
        filled(dir.path());
        let store = Metastore::open(dir.path()).unwrap();
        store.runs.insert("r9", b"{\"format\":2,\"record\":{\"id\":1}}".as_slice()).unwrap();
        let error = store.check().unwrap_err().to_string();
        assert!(error.starts_with("metastore record `r9` is unreadable: "), "{error}");
    }

    #[test]
    fn a_panic_inside_is_an_error_and_the_hook_stays_quiet() {
        let result: Result<(), Error> = guarded(|| panic!("expected pid 3 on pull of pointer"));
        let error = result.unwrap_err().to_string();
        assert_eq!(error, "metastore storage error: sled failed: expected pid 3 on pull of pointer");
        assert_eq!(guarded(|| Ok(1)).unwrap(), 1);
    }
}
