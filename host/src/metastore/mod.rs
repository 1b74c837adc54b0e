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
