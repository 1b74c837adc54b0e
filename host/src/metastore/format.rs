//! The format version: every record is stored in an envelope that carries
//! it, and the database records the one it was written in, which `open`
//! checks. Another version is an error, never silently misread.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::check::{guarded, open_commits_file};
use super::{Error, Metastore};

/// The version of every record this build writes and reads.
pub const FORMAT: u32 = 2;

pub(super) const FORMAT_KEY: &[u8] = b"format";

/// The envelope every record is stored in.
#[derive(Serialize, Deserialize)]
struct Stored<T> {
    format: u32,
    record: T,
}

pub(super) fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(&Stored { format: FORMAT, record }).expect("records serialize")
}

pub(super) fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T, Error> {
    let key = String::from_utf8_lossy(key).into_owned();
    let corrupt = |reason: String| Error::Corrupt { key: key.clone(), reason };
    // The format first: a record of another version is reported as such,
    // not as whatever field it happens to lack. The record is only
    // delimited then (not built as a `Value`), and parsed once, as `T`.
    let stored: Stored<&serde_json::value::RawValue> =
        serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if stored.format != FORMAT {
        return Err(corrupt(format!("format {}, expected {FORMAT}", stored.format)));
    }
    serde_json::from_str(stored.record.get()).map_err(|e| corrupt(e.to_string()))
}

/// A counter of the `meta` tree (commits made, the next sequence number):
/// eight bytes, big-endian; `None` when the key is absent. Anything else is
/// damage and reported as such, never read as a fresh count: a count
/// restarted would give sequence numbers again, or let lost commits pass
/// the check at open.
pub(super) fn decode_counter(key: &[u8], bytes: Option<&[u8]>) -> Result<Option<u64>, Error> {
    bytes
        .map(|bytes| {
            <[u8; 8]>::try_from(bytes).map(u64::from_be_bytes).map_err(|_| Error::Corrupt {
                key: String::from_utf8_lossy(key).into_owned(),
                reason: format!("a counter is 8 bytes, this one {}", bytes.len()),
            })
        })
        .transpose()
}

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
            for leftover in super::backup::remove_leftovers(dir) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_another_format_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Metastore::open(dir.path()).unwrap();
            store.views.insert("v", br#"{"format":99,"record":{}}"#.as_slice()).unwrap();
            store.views.insert("w", b"not json".as_slice()).unwrap();
            store.meta.insert(FORMAT_KEY, &7u32.to_be_bytes()).unwrap();
            store.db.flush().unwrap();
        }
        let error = Metastore::open(dir.path()).err().unwrap();
        assert_eq!(
            error.to_string(),
            format!(
                "the metastore in {} was written in format 7; this trellis reads format {FORMAT}",
                dir.path().display()
            )
        );
        {
            let db = sled::open(dir.path()).unwrap();
            db.open_tree("meta").unwrap().insert(FORMAT_KEY, &FORMAT.to_be_bytes()).unwrap();
            db.flush().unwrap();
        }
        let store = Metastore::open(dir.path()).unwrap();
        assert_eq!(
            store.view("v").unwrap_err().to_string(),
            format!("metastore record `v` is unreadable: format 99, expected {FORMAT}")
        );
        assert!(store.view("w").unwrap_err().to_string().starts_with("metastore record `w` is unreadable: "));
    }
}
