//! The metastore: what trellis knows about views across runs and restarts,
//! embedded in sled.
//!
//! It holds the schema checksum of each view type; per view its scheduling
//! state, version checksum, transformation timestamp, incomplete and error
//! flags and last error; runs and their flow statuses; an append-only
//! event log with gapless sequence numbers; each listener's cursor into
//! that log, restart count and status; coordinators and their actions; and
//! the transaction log of incremental views; and what each view's last
//! transformations logged.
//!
//! Invariants:
//! - It is the only module that knows sled; no sled type leaves it.
//! - Every record carries a format version; a record of another version is
//!   an error, never silently misread.
//! - A [`Commit`] is applied atomically across all trees, and
//!   [`Metastore::commit`] returns only once it is durable, so that callers
//!   can announce its effects afterwards.
//! - A store that cannot be read whole, or holds fewer commits than were
//!   made durable in it, is refused at open with [`Error::Damaged`]. A
//!   panic inside sled, at open or in any read after it (of the event
//!   log's middle, which open does not read, above all), becomes that
//!   error too (`check.rs`: `guarded`, `reading`). Writes touch only pages
//!   already read.
//! - Backups are JSON lines of the records, in a versioned format of
//!   trellis's own (`backup.rs`, docs/operations.md).
//! - It knows nothing of the catalog, the lattice or scheduling rules: keys
//!   are URL paths and type names, values are records.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! **the only module that imports sled.** Invariants:
//! no sled type leaves it; every record is stored in an envelope with its
//! format version, and another version is an error; a store that cannot
//! be read whole, or holds fewer commits than were made durable in it, is
//! refused at open; a panic of sled's on a page it cannot read, at open or
//! in any read after it (the log's middle, which open does not read,
//! included), is `Error::Damaged` naming the tree, never a dead thread or a
//! dropped connection (writes touch only pages already read: the log's end,
//! the other trees whole, the front of the log a trim has just read); it
//! knows nothing of the catalog, lattice or scheduling rules (keys are URL
//! paths and type names).
//! - `mod.rs`: `Error`, the `Metastore` (one sled database, a tree per
//!   kind of record) and `flush`; no other logic.
//! - `format.rs`: the envelope, the format version (read first, the record
//!   only delimited then, and parsed once as its type), the one reading of
//!   the `meta` tree's counters (commits, next sequence number: a malformed
//!   one is `Error::Corrupt`, in a commit too, never a count restarted).
//!   It imports no other file of the room: every file uses it.
//! - `open.rs`: `open`, which
//!   refuses a metastore of another format with a message, not a
//!   migration (format 2 is the chunked log; removing a format-1 store
//!   costs one full rematerialization). It waits up to a second for the
//!   file lock, which sled's background threads release a moment after
//!   the last handle in the process is dropped. It refuses a damaged
//!   store (`check.rs`) before anything reads it.
//! - `check.rs`: integrity. At open every tree is read through once, on
//!   two threads, the event log only at its ends (sled checks each page as
//!   it loads it; the log's middle, most of a store, only listeners, event
//!   streams, retention, `backup` and `check` read), and the commits the
//!   store holds are
//!   counted against the `commits` file beside sled's, written after each
//!   durable commit and never synced (it may lag, never lead): sled takes a
//!   damaged log end for an interrupted write and opens an older state,
//!   which this reveals. sled's panics on damaged pages are caught (with a
//!   panic hook quiet for them) and become the one-line `Error::Damaged`:
//!   at open by `guarded`, and in every read of an open store by
//!   `reading`, which each read method of the other files goes through
//!   (`events_from` above all, which listeners and `/events` call for
//!   days). `check` also decodes every record, for
//!   `trellis metastore check`.
//! - `backup.rs`: `backup` writes every record as JSON lines (a versioned
//!   header, one record per line tagged with its kind, a counting last
//!   line); `restore` reads them into a new directory beside the target and
//!   renames it into place when complete, refusing a target that holds a
//!   metastore, events out of order or repeated, and a next sequence number
//!   not above every event restored (without one, it follows the last
//!   event), so that new commits never reuse a restored number. `backup_to`
//!   writes a file beside its target, renamed in when complete, with a note
//!   in the store's directory naming it; open removes what a killed backup
//!   (the note's file) or restore (staging directories beside the store
//!   whose `db` no process locks) left. The format is trellis's own, documented in
//!   docs/operations.md, so that later versions read it.
//! - `views.rs`: view records (state, version checksum, timestamp,
//!   incomplete/errors flags, last error, an invalidation not yet
//!   acted on, kept apart from the state so that a stop, a crash or a
//!   failed transformation does not forget it, and the done flag as last
//!   recorded (for external data, and for a view marked materialized, so
//!   that one SET_ONLY marked without data is not taken for data gone):
//!   absent, or its mtime, size and inode and when it was seen; optional, so records from before it read as format
//!   2 still, and are compared by the flag's mtime as they were; `condition`
//!   is what is shown of it), for a view with `latest(n)` dependencies the
//!   URL paths of the instances they resolved to when it was last
//!   materialized (`latest`, what it read; optional too), the counters its
//!   transformation returned when it last materialized it (optional), and
//!   schema checksums per
//!   type; a schema change drops that type's view records (prefix `type/`,
//!   never a type whose name extends it) before recording the new checksum.
//! - `runs.rs`: runs (with their `Termination`, and whether it was a full
//!   refresh, and attempts per transformed view) and the flow of each view
//!   in a run (keyed run id, NUL, view, so one run's flows are a prefix): a
//!   `FlowRecord`, its status and optional details of that run (the error
//!   it failed with, the counters its transformation returned), so that a
//!   run's account stays its own; a bare status, as flows were stored
//!   before, reads as a record without details.
//! - `events.rs`: the event log, stored in chunks of up to 256 consecutive
//!   events per key, so that a run that logs every view it looks at writes
//!   few keys; gapless sequence numbers given inside a commit's transaction;
//!   reads from a sequence number; trimming keeps a chunk's tail exactly;
//!   `subscribe` announces the next sequence number after each durable
//!   commit, which is how listeners and the API's event stream follow the log.
//!   A view's event carries its flow's new status (`flow`: `FlowChange`,
//!   status and reason) when the event changed it, seed 003's flow progress
//!   log riding on the events that exist, so listeners see no new events.
//! - `coordinators.rs`: coordinator records (the last nominal time
//!   created, suspended) and actions (`ActionRecord`: nominal and actual
//!   time, state, views, missing inputs, run, previous runs, reason),
//!   keyed coordinator, NUL, nominal time big-endian with the sign bit
//!   flipped, so that one coordinator's actions are a prefix in nominal
//!   order; `actions(name, from, to)` reads a range, `open_actions` the
//!   ones not final. Both are written only inside a `Commit`, so that an
//!   action is SUBMITTED in the transaction that records its run
//!   (`RunRecord::action` links back). An action's change of state is an
//!   event of the log like a view's: `NewEvent::action` says which action
//!   and its states, `view` is its name and `previous`/`current` the
//!   nearest view states, so that listeners built before actions read it.
//! - `logs.rs`: per view URL path, what its last transformations logged
//!   and printed (`ViewLog`, attempts oldest first), written inside a
//!   `Commit` with the report that adds one; how many and how much is the
//!   scheduler's rule (`run.rs`: three attempts, 32 KiB of lines and 16
//!   KiB of each stream apiece, the rest counted).
//! - `listeners.rs`: listener records (cursor, restarts, disabled or
//!   unavailable reason, last error), durable with the next flush rather
//!   than their own, since a lost cursor only repeats events.
//! - `txlog.rs`: incremental views' transaction log (S2Graph's TxLog): per
//!   TxId (view, project, source, path) a `TxEntry` (commit id, commit
//!   type `manifest` or `plugin`, time, enabled, generation) and per view
//!   a `TxHead` (generation of the last commit, the generations resets
//!   voided, its data path), keyed view, NUL for the head and view, NUL,
//!   source, NUL, path for entries, so a view's log is a prefix. Written
//!   only inside a `Commit` (`TxWrite`); a schema change drops a type's log
//!   with its views. Events for its changes carry `NewEvent::txlog`.
//! - `commit.rs`: a `Commit` (views, events, runs, flows, coordinator
//!   records, actions, transaction log writes) is one
//!   transaction across trees, which also counts it; `commit` returns once
//!   flushed and only then notes the count and announces, so effects are
//!   announced only after they are durable.

mod backup;
mod check;
mod commit;
mod coordinators;
mod events;
mod format;
mod listeners;
mod logs;
mod open;
mod runs;
mod txlog;
mod views;

pub use backup::{BACKUP_FORMAT, BACKUP_VERSION, restore};
pub use check::Contents;
pub use commit::Commit;
pub use coordinators::{ActionRecord, CoordinatorRecord};
pub use events::{ActionChange, FlowChange, LoggedEvent, NewEvent, TxLogChange};
pub use format::FORMAT;
pub use listeners::ListenerRecord;
pub use logs::{AttemptLog, LoggedLine, ViewLog};
pub use runs::{FlowRecord, RunRecord};
pub use txlog::{CommitType, TxEntry, TxHead, TxWrite};
pub use views::{FlagIdentity, SchemaChange, SeenFlag, ViewRecord};

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open the metastore in {}: {reason}", path.display())]
    Open { path: PathBuf, reason: String },
    #[error("the metastore in {} was written in format {found}; this trellis reads format {FORMAT}", path.display())]
    Format { path: PathBuf, found: u32 },
    #[error("metastore record `{key}` is unreadable: {reason}")]
    Corrupt { key: String, reason: String },
    /// Found at open or by [`Metastore::check`]: what is damaged, and why.
    #[error(
        "the metastore in {} is damaged ({what}: {reason}); restore it from a backup (`trellis metastore restore FILE`) or move it away to start afresh",
        path.display()
    )]
    Damaged { path: PathBuf, what: String, reason: String },
    #[error("metastore backup: {0}")]
    Backup(String),
    #[error("metastore storage error: {0}")]
    Storage(String),
}

impl From<sled::Error> for Error {
    fn from(error: sled::Error) -> Self {
        Error::Storage(error.to_string())
    }
}

/// The trees of one sled database; each file of this module reads and
/// writes its own.
pub struct Metastore {
    /// Its directory, for messages.
    path: PathBuf,
    db: sled::Db,
    meta: sled::Tree,
    schemas: sled::Tree,
    views: sled::Tree,
    runs: sled::Tree,
    flows: sled::Tree,
    events: sled::Tree,
    listeners: sled::Tree,
    coordinators: sled::Tree,
    /// Actions, keyed by `coordinators::action_key`.
    actions: sled::Tree,
    /// Incremental views' transaction log, keyed as `txlog.rs` says.
    txlog: sled::Tree,
    /// Each view's last transformations' logs, by URL path.
    logs: sled::Tree,
    /// Holds the count of durable commits (see `check.rs`).
    commits_file: std::fs::File,
    /// The next sequence number, announced after each durable commit.
    appended: tokio::sync::watch::Sender<u64>,
}

impl Metastore {
    /// Makes everything written so far durable.
    pub fn flush(&self) -> Result<(), Error> {
        self.db.flush()?;
        Ok(())
    }
}

/// Records the tests of several files build on.
#[cfg(test)]
mod fixtures {
    use super::{NewEvent, ViewRecord};
    use crate::model::ViewState;

    pub(super) fn event(view: &str, previous: ViewState, current: ViewState) -> NewEvent {
        NewEvent {
            view: view.into(),
            previous,
            current,
            actions: vec!["transform".into()],
            time: 1,
            run_id: Some("r1".into()),
            error: None,
            action: None,
            txlog: None,
            errors: false,
            flow: None,
        }
    }

    pub(super) fn materialized(timestamp: i64) -> ViewRecord {
        ViewRecord {
            state: ViewState::Materialized,
            version_checksum: Some("v1".into()),
            timestamp: Some(timestamp),
            ..ViewRecord::default()
        }
    }
}
