//! Opening the metastore: the database (waiting a moment for its lock),
//! its trees and commits file, the format it was written in, and the check
//! that refuses a damaged one. Apart from format.rs so that the codec every
//! file uses depends on none of them (no import circle).

use std::path::Path;

use super::backup::remove_leftovers;
use super::check::{guarded, open_commits_file};
use super::format::{FORMAT, FORMAT_KEY};
use super::{Error, Metastore};

impl Metastore {
    /// Opens (or creates) the metastore in `dir`, and refuses it when it is
    /// damaged (see `check.rs`): every tree is read through once (of the
    /// event log its ends), and the commits it holds are counted against
    /// those made durable in it.
    pub fn open(dir: &Path) -> Result<Metastore, Error> {
        let open_error = |e: &dyn std::fmt::Display| Error::Open { path: dir.to_path_buf(), reason: e.to_string() };
        std::fs::create_dir_all(dir).map_err(|e| open_error(&e))?;
        let damaged = |e: Error| match e {
            Error::Storage(reason) => Error::Damaged { path: dir.to_path_buf(), what: "its file".into(), reason },
            other => other,
        };
        guarded(|| {
            let db = open_db(dir).map_err(|e| match e {
                sled::Error::Corruption { .. } => Error::Storage(e.to_string()),
                e => open_error(&e),
            })?;
            let tree = |name: &str| db.open_tree(name).map_err(Error::from);
            let store = Metastore {
                path: dir.to_path_buf(),
                meta: tree("meta")?,
                schemas: tree("schemas")?,
                views: tree("views")?,
                runs: tree("runs")?,
                flows: tree("flows")?,
                events: tree("events")?,
                listeners: tree("listeners")?,
                coordinators: tree("coordinators")?,
                actions: tree("actions")?,
                txlog: tree("txlog")?,
                logs: tree("logs")?,
                commits_file: open_commits_file(dir).map_err(|e| open_error(&e))?,
                appended: tokio::sync::watch::Sender::new(0),
                db,
            };
            match store.meta.get(FORMAT_KEY)? {
                None => {
                    store.meta.insert(FORMAT_KEY, &FORMAT.to_be_bytes())?;
                    store.db.flush()?;
                }
                Some(bytes) => {
                    let found = <[u8; 4]>::try_from(bytes.as_ref()).map(u32::from_be_bytes).unwrap_or(0);
                    if found != FORMAT {
                        return Err(Error::Format { path: dir.to_path_buf(), found });
                    }
                }
            }
            store.read_through(false)?;
            store.check_commits()?;
            store.appended.send_replace(store.next_sequence()?);
            for leftover in remove_leftovers(dir) {
                tracing::warn!("removed {}, left by a backup or restore that was killed", leftover.display());
            }
            Ok(store)
        })
        .map_err(damaged)
    }
}

/// How long an open waits for the database's file lock. sled's background
/// threads let go of it a moment after the last handle in this process is
/// dropped; a reopen in that moment waits rather than fails. A lock another
/// process holds is still refused, after this wait.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

fn open_db(dir: &Path) -> sled::Result<sled::Db> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match sled::Config::new().path(dir).mode(sled::Mode::HighThroughput).open() {
            // sled says so only in the message (its kind is `Other`).
            Err(sled::Error::Io(e))
                if e.to_string().starts_with("could not acquire lock") && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            opened => return opened,
        }
    }
}
