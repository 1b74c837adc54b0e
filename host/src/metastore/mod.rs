//! The metastore: what trellis knows about views across runs and restarts,
//! embedded in sled.
//!
//! It holds the schema checksum of each view type; per view its scheduling
//! state, version checksum, transformation timestamp, incomplete and error
//! flags and last error; runs and their flow statuses; an append-only
//! event log with gapless sequence numbers; and each listener's cursor into
//! that log, restart count and status.
//!
//! Invariants:
//! - It is the only module that knows sled; no sled type leaves it.
//! - Every record carries a format version; a record of another version is
//!   an error, never silently misread.
//! - A [`Commit`] is applied atomically across all trees, and
//!   [`Metastore::commit`] returns only once it is durable, so that callers
//!   can announce its effects afterwards.
//! - It knows nothing of the catalog, the lattice or scheduling rules: keys
//!   are URL paths and type names, values are records.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};

use crate::model::{FlowStatus, ViewState};

/// The version of every record this build writes and reads.
pub const FORMAT: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open the metastore in {}: {reason}", path.display())]
    Open { path: PathBuf, reason: String },
    #[error("the metastore in {} was written in format {found}; this trellis reads format {FORMAT}", path.display())]
    Format { path: PathBuf, found: u32 },
    #[error("metastore record `{key}` is unreadable: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("metastore storage error: {0}")]
    Storage(String),
}

impl From<sled::Error> for Error {
    fn from(error: sled::Error) -> Self {
        Error::Storage(error.to_string())
    }
}

/// What the metastore remembers of one view; the default is a view it has
/// never seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewRecord {
    pub state: ViewState,
    /// Of the transformation logic it was last materialized with.
    pub version_checksum: Option<String>,
    /// When it was last materialized, in milliseconds since the Unix epoch;
    /// for external data, the done flag's modification time.
    pub timestamp: Option<i64>,
    /// Materialized while some dependencies had no data.
    pub incomplete: bool,
    /// Materialized while some dependencies had failed.
    pub errors: bool,
    pub last_error: Option<String>,
    /// Invalidated and not rematerialized since. Kept apart from the state,
    /// which shows the view in flight meanwhile, so that a stop, a crash or
    /// a failed transformation does not forget it.
    #[serde(default)]
    pub invalidated: bool,
}

/// An event to append; the metastore gives it its sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewEvent {
    /// Shared with the scheduler's view slot: an event costs no copy of it.
    pub view: std::sync::Arc<str>,
    pub previous: ViewState,
    pub current: ViewState,
    /// Borrowed when written (action names are static), owned when read.
    pub actions: Vec<std::borrow::Cow<'static, str>>,
    /// Milliseconds since the Unix epoch.
    pub time: i64,
    pub run_id: Option<std::sync::Arc<str>>,
    pub error: Option<String>,
}

/// An event of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub sequence: u64,
    #[serde(flatten)]
    pub event: NewEvent,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub pattern: String,
    pub mode: String,
    pub started: i64,
    pub finished: Option<i64>,
    pub termination: Option<crate::model::Termination>,
    /// Views found up to date: counted, not listed among the flows.
    #[serde(default)]
    pub idle: usize,
}

/// Everything one step of the scheduler writes, applied atomically.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    pub views: Vec<(String, ViewRecord)>,
    pub events: Vec<NewEvent>,
    pub runs: Vec<RunRecord>,
    /// (run id, view URL path, status).
    pub flows: Vec<(String, String, FlowStatus)>,
}

/// What the metastore remembers of one listener.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerRecord {
    /// The sequence number of the next event to deliver.
    pub cursor: u64,
    /// Restarts since the listener was last enabled.
    pub restarts: u32,
    /// Why the listener was disabled; `None` while it is enabled.
    pub disabled: Option<String>,
    /// Why the last attempt to start it failed, while that is so.
    pub unavailable: Option<String>,
    pub last_error: Option<String>,
    /// Events it has received, replays included.
    pub delivered: u64,
}

/// What registering a schema checksum found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaChange {
    /// First time this view type is seen.
    New,
    Unchanged,
    /// The checksum changed; the metadata of this many views was dropped.
    Changed {
        dropped: usize,
    },
}

pub struct Metastore {
    db: sled::Db,
    meta: sled::Tree,
    schemas: sled::Tree,
    views: sled::Tree,
    runs: sled::Tree,
    flows: sled::Tree,
    events: sled::Tree,
    listeners: sled::Tree,
    /// The next sequence number, announced after each durable commit.
    appended: tokio::sync::watch::Sender<u64>,
}

const FORMAT_KEY: &[u8] = b"format";
const SEQUENCE_KEY: &[u8] = b"next-sequence";

/// The envelope every record is stored in.
#[derive(Serialize, Deserialize)]
struct Stored<T> {
    format: u32,
    record: T,
}

fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(&Stored { format: FORMAT, record }).expect("records serialize")
}

fn decode<T: DeserializeOwned>(key: &[u8], bytes: &[u8]) -> Result<T, Error> {
    let key = String::from_utf8_lossy(key).into_owned();
    let corrupt = |reason: String| Error::Corrupt { key: key.clone(), reason };
    // The format first: a record of another version is reported as such,
    // not as whatever field it happens to lack.
    let stored: Stored<serde_json::Value> = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if stored.format != FORMAT {
        return Err(corrupt(format!("format {}, expected {FORMAT}", stored.format)));
    }
    serde_json::from_value(stored.record).map_err(|e| corrupt(e.to_string()))
}

/// Events are stored in chunks of consecutive events, keyed by the first
/// one's sequence number: one key per chunk rather than per event keeps an
/// unchanged run of a large lattice, which logs every view it looks at,
/// cheap to write.
const EVENTS_PER_CHUNK: usize = 256;

/// An event as written, borrowed from the commit; read back as [`Event`].
#[derive(Serialize)]
struct StoredEvent<'a> {
    sequence: u64,
    #[serde(flatten)]
    event: &'a NewEvent,
}

fn chunk_start(key: &[u8]) -> Result<u64, Error> {
    <[u8; 8]>::try_from(key)
        .map(u64::from_be_bytes)
        .map_err(|_| Error::Corrupt { key: "events".into(), reason: "a key is not 8 bytes".into() })
}

/// Flow keys: run id, NUL, view, so that one run's flows are a prefix.
fn flow_key(run: &str, view: &str) -> Vec<u8> {
    let mut key = run.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(view.as_bytes());
    key
}

impl Metastore {
    /// Opens (or creates) the metastore in `dir`.
    pub fn open(dir: &Path) -> Result<Metastore, Error> {
        let open_error = |e: &dyn std::fmt::Display| Error::Open { path: dir.to_path_buf(), reason: e.to_string() };
        std::fs::create_dir_all(dir).map_err(|e| open_error(&e))?;
        let db = sled::Config::new().path(dir).mode(sled::Mode::HighThroughput).open().map_err(|e| open_error(&e))?;
        let tree = |name: &str| db.open_tree(name).map_err(|e| open_error(&e));
        let store = Metastore {
            meta: tree("meta")?,
            schemas: tree("schemas")?,
            views: tree("views")?,
            runs: tree("runs")?,
            flows: tree("flows")?,
            events: tree("events")?,
            listeners: tree("listeners")?,
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
        store.appended.send_replace(store.next_sequence()?);
        Ok(store)
    }

    /// Follows the metastore: the value is the log's next sequence number,
    /// and every durable commit is announced, with events or without (a
    /// run's end is a record, not an event).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.appended.subscribe()
    }

    /// The recorded schema checksum of a view type.
    pub fn schema_checksum(&self, view_type: &str) -> Result<Option<String>, Error> {
        self.schemas.get(view_type)?.map(|bytes| decode(view_type.as_bytes(), &bytes)).transpose()
    }

    /// Records `checksum` for `view_type`. When it differs from the one
    /// recorded, the metadata of every view of that type is dropped first,
    /// so that they will be rebuilt; a crash in between drops again on the
    /// next start, which is harmless.
    pub fn register_schema(&self, view_type: &str, checksum: &str) -> Result<SchemaChange, Error> {
        let change = match self.schema_checksum(view_type)? {
            Some(recorded) if recorded == checksum => return Ok(SchemaChange::Unchanged),
            Some(_) => {
                let prefix = format!("{view_type}/");
                let mut batch = sled::Batch::default();
                let mut dropped = 0;
                for entry in self.views.scan_prefix(prefix.as_bytes()) {
                    let (key, _) = entry?;
                    batch.remove(key);
                    dropped += 1;
                }
                self.views.apply_batch(batch)?;
                SchemaChange::Changed { dropped }
            }
            None => SchemaChange::New,
        };
        self.schemas.insert(view_type, encode(&checksum.to_string()))?;
        self.db.flush()?;
        Ok(change)
    }

    pub fn view(&self, url_path: &str) -> Result<Option<ViewRecord>, Error> {
        self.views.get(url_path)?.map(|bytes| decode(url_path.as_bytes(), &bytes)).transpose()
    }

    /// Every view record whose URL path starts with `prefix`, in key order.
    pub fn views_with_prefix(&self, prefix: &str) -> impl Iterator<Item = Result<(String, ViewRecord), Error>> + '_ {
        self.views.scan_prefix(prefix.as_bytes()).map(|entry| {
            let (key, bytes) = entry?;
            Ok((String::from_utf8_lossy(&key).into_owned(), decode(&key, &bytes)?))
        })
    }

    /// Applies `commit` atomically and durably; returns the sequence numbers
    /// given to its events, in order.
    pub fn commit(&self, commit: &Commit) -> Result<Vec<u64>, Error> {
        let trees = (&self.meta, &self.views, &self.runs, &self.flows, &self.events);
        let result = trees.transaction(|(meta, views, runs, flows, events)| {
            for (url_path, record) in &commit.views {
                views.insert(url_path.as_bytes(), encode(record))?;
            }
            for run in &commit.runs {
                runs.insert(run.id.as_bytes(), encode(run))?;
            }
            for (run, view, status) in &commit.flows {
                flows.insert(flow_key(run, view), encode(status))?;
            }
            let mut next = match meta.get(SEQUENCE_KEY)? {
                Some(bytes) => <[u8; 8]>::try_from(bytes.as_ref()).map(u64::from_be_bytes).map_err(|_| {
                    ConflictableTransactionError::Abort(Error::Corrupt {
                        key: "next-sequence".into(),
                        reason: "not 8 bytes".into(),
                    })
                })?,
                None => 1,
            };
            let first = next;
            for chunk in commit.events.chunks(EVENTS_PER_CHUNK) {
                let stored: Vec<StoredEvent<'_>> = chunk
                    .iter()
                    .map(|event| {
                        next += 1;
                        StoredEvent { sequence: next - 1, event }
                    })
                    .collect();
                events.insert(&stored[0].sequence.to_be_bytes(), encode(&stored))?;
            }
            let sequences: Vec<u64> = (first..next).collect();
            meta.insert(SEQUENCE_KEY, &next.to_be_bytes())?;
            Ok(sequences)
        });
        let sequences = match result {
            Ok(sequences) => sequences,
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(e)) => return Err(e.into()),
        };
        self.db.flush()?;
        match sequences.last() {
            Some(last) => {
                self.appended.send_replace(last + 1);
            }
            None => self.appended.send_modify(|_| {}),
        }
        Ok(sequences)
    }

    /// The sequence number the next event will get.
    pub fn next_sequence(&self) -> Result<u64, Error> {
        Ok(self
            .meta
            .get(SEQUENCE_KEY)?
            .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_ref()).ok())
            .map_or(1, u64::from_be_bytes))
    }

    /// Up to `limit` events with a sequence number of at least `from`.
    pub fn events_from(&self, from: u64, limit: usize) -> Result<Vec<Event>, Error> {
        // Start with the chunk that holds `from`, if any.
        let start = match self.events.range(..=from.to_be_bytes()).next_back() {
            Some(entry) => entry?.0,
            None => sled::IVec::from(&from.to_be_bytes()),
        };
        let mut found = Vec::new();
        for entry in self.events.range(start..) {
            let (key, bytes) = entry?;
            let chunk: Vec<Event> = decode(&key, &bytes)?;
            found.extend(chunk.into_iter().filter(|event| event.sequence >= from).take(limit - found.len()));
            if found.len() >= limit {
                break;
            }
        }
        Ok(found)
    }

    /// The sequence number of the oldest event kept, or the next one when
    /// the log is empty.
    pub fn first_sequence(&self) -> Result<u64, Error> {
        match self.events.first()? {
            Some((key, _)) => chunk_start(&key),
            None => self.next_sequence(),
        }
    }

    pub fn listener(&self, name: &str) -> Result<Option<ListenerRecord>, Error> {
        self.listeners.get(name)?.map(|bytes| decode(name.as_bytes(), &bytes)).transpose()
    }

    /// Stores a listener's record. It becomes durable with the next flush
    /// (sled's own, every half second, or [`Metastore::flush`]): a cursor
    /// lost in a crash only repeats events, so listeners do not make the
    /// scheduler's commits wait for theirs.
    pub fn put_listener(&self, name: &str, record: &ListenerRecord) -> Result<(), Error> {
        self.listeners.insert(name, encode(record))?;
        Ok(())
    }

    /// Makes everything written so far durable.
    pub fn flush(&self) -> Result<(), Error> {
        self.db.flush()?;
        Ok(())
    }

    /// Removes events before `before`, returning how many went. Chunks
    /// before it go whole; the one it falls in keeps its tail.
    pub fn truncate_events(&self, before: u64) -> Result<usize, Error> {
        let before = before.min(self.next_sequence()?);
        let mut batch = sled::Batch::default();
        let mut removed = 0;
        let mut chunks = self.events.range(..before.to_be_bytes()).peekable();
        while let Some(entry) = chunks.next() {
            let (key, bytes) = entry?;
            let start = chunk_start(&key)?;
            batch.remove(key.clone());
            let is_last = chunks.peek().is_none();
            if !is_last {
                let next_start = match chunks.peek() {
                    Some(Ok((next, _))) => chunk_start(next)?,
                    _ => before,
                };
                removed += (next_start - start) as usize;
                continue;
            }
            // The last chunk before `before` may reach past it.
            let chunk: Vec<Event> = decode(&key, &bytes)?;
            let (gone, kept): (Vec<Event>, Vec<Event>) = chunk.into_iter().partition(|e| e.sequence < before);
            removed += gone.len();
            if let Some(first_kept) = kept.first() {
                let stored: Vec<StoredEvent<'_>> =
                    kept.iter().map(|e| StoredEvent { sequence: e.sequence, event: &e.event }).collect();
                batch.insert(&first_kept.sequence.to_be_bytes(), encode(&stored));
            }
        }
        self.events.apply_batch(batch)?;
        self.db.flush()?;
        Ok(removed)
    }

    pub fn run(&self, id: &str) -> Result<Option<RunRecord>, Error> {
        self.runs.get(id)?.map(|bytes| decode(id.as_bytes(), &bytes)).transpose()
    }

    /// Every run, in id order.
    pub fn runs(&self) -> Result<Vec<RunRecord>, Error> {
        self.runs
            .iter()
            .map(|entry| {
                let (key, bytes) = entry?;
                decode(&key, &bytes)
            })
            .collect()
    }

    /// The flow statuses of one run, by view URL path.
    pub fn flows(&self, run: &str) -> Result<Vec<(String, FlowStatus)>, Error> {
        let prefix = flow_key(run, "");
        self.flows
            .scan_prefix(&prefix)
            .map(|entry| {
                let (key, bytes) = entry?;
                let view = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                Ok((view, decode(&key, &bytes)?))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(view: &str, previous: ViewState, current: ViewState) -> NewEvent {
        NewEvent {
            view: view.into(),
            previous,
            current,
            actions: vec!["transform".into()],
            time: 1,
            run_id: Some("r1".into()),
            error: None,
        }
    }

    fn materialized(timestamp: i64) -> ViewRecord {
        ViewRecord {
            state: ViewState::Materialized,
            version_checksum: Some("v1".into()),
            timestamp: Some(timestamp),
            ..ViewRecord::default()
        }
    }

    #[test]
    fn commits_survive_a_reopen_with_gapless_sequences() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Metastore::open(dir.path()).unwrap();
            let commit = Commit {
                views: vec![("s.d/Daily/A/2015/05/01".into(), materialized(10))],
                events: vec![
                    event("s.d/Daily/A/2015/05/01", ViewState::Waiting, ViewState::Transforming),
                    event("s.d/Daily/A/2015/05/01", ViewState::Transforming, ViewState::Materialized),
                ],
                runs: vec![RunRecord {
                    id: "r1".into(),
                    pattern: "s.d/Daily/A/2015/05/01".into(),
                    mode: "DEFAULT".into(),
                    started: 1,
                    finished: None,
                    termination: None,
                    idle: 0,
                }],
                flows: vec![("r1".into(), "s.d/Daily/A/2015/05/01".into(), FlowStatus::Successful)],
            };
            assert_eq!(store.commit(&commit).unwrap(), [1, 2]);
        }
        let store = Metastore::open(dir.path()).unwrap();
        assert_eq!(store.view("s.d/Daily/A/2015/05/01").unwrap(), Some(materialized(10)));
        assert_eq!(store.view("s.d/Daily/A/2015/05/02").unwrap(), None);
        assert_eq!(store.next_sequence().unwrap(), 3);
        let more = Commit { events: vec![event("v", ViewState::Receive, ViewState::Waiting)], ..Commit::default() };
        assert_eq!(store.commit(&more).unwrap(), [3]);
        let events = store.events_from(2, 10).unwrap();
        assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(events[0].event.current, ViewState::Materialized);
        assert_eq!(store.run("r1").unwrap().unwrap().mode, "DEFAULT");
        assert_eq!(store.flows("r1").unwrap(), [("s.d/Daily/A/2015/05/01".to_string(), FlowStatus::Successful)]);
        assert_eq!(store.truncate_events(3).unwrap(), 2);
        assert_eq!(store.events_from(0, 10).unwrap().len(), 1);
        assert_eq!(store.first_sequence().unwrap(), 3);
        let record = ListenerRecord { cursor: 3, restarts: 2, ..ListenerRecord::default() };
        store.put_listener("audit", &record).unwrap();
        assert_eq!(store.listener("audit").unwrap(), Some(record));
        assert_eq!(store.listener("other").unwrap(), None);
    }

    #[test]
    fn the_event_log_reads_and_trims_across_chunk_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let store = Metastore::open(dir.path()).unwrap();
        let appended = store.subscribe();
        let many: Vec<NewEvent> =
            (0..600).map(|i| event(&format!("v{i}"), ViewState::Receive, ViewState::Waiting)).collect();
        assert_eq!(store.commit(&Commit { events: many, ..Commit::default() }).unwrap(), (1..=600).collect::<Vec<_>>());
        store
            .commit(&Commit { events: vec![event("w", ViewState::Waiting, ViewState::Failed)], ..Commit::default() })
            .unwrap();
        assert_eq!(*appended.borrow(), 602, "followers learn of durable events");
        let sequences =
            |from, limit| store.events_from(from, limit).unwrap().iter().map(|e| e.sequence).collect::<Vec<_>>();
        assert_eq!(sequences(255, 3), [255, 256, 257]);
        assert_eq!(sequences(599, 10), [599, 600, 601]);
        assert_eq!(sequences(602, 10), Vec::<u64>::new());
        assert_eq!(&*store.events_from(300, 1).unwrap()[0].event.view, "v299");
        // Trimming in the middle of a chunk keeps exactly its tail.
        assert_eq!(store.truncate_events(300).unwrap(), 299);
        assert_eq!(store.first_sequence().unwrap(), 300);
        assert_eq!(sequences(0, 2), [300, 301]);
        assert_eq!(store.events_from(0, usize::MAX).unwrap().len(), 302);
        assert_eq!(store.truncate_events(10_000).unwrap(), 302, "never past the end");
        assert_eq!(store.first_sequence().unwrap(), 602);
        assert_eq!(store.next_sequence().unwrap(), 602);
    }

    #[test]
    fn a_schema_change_drops_exactly_that_types_views() {
        let dir = tempfile::tempdir().unwrap();
        let store = Metastore::open(dir.path()).unwrap();
        assert_eq!(store.register_schema("s.d/Daily", "c1").unwrap(), SchemaChange::New);
        let views = ["s.d/Daily/A/2015/05/01", "s.d/Daily/B/2015/05/01", "s.d/DailyTotal/2015/05/01"];
        let commit =
            Commit { views: views.iter().map(|v| (v.to_string(), materialized(1))).collect(), ..Commit::default() };
        store.commit(&commit).unwrap();
        assert_eq!(store.register_schema("s.d/Daily", "c1").unwrap(), SchemaChange::Unchanged);
        assert_eq!(store.register_schema("s.d/Daily", "c2").unwrap(), SchemaChange::Changed { dropped: 2 });
        assert_eq!(store.view(views[0]).unwrap(), None);
        assert_eq!(store.view(views[2]).unwrap(), Some(materialized(1)), "a type whose name extends another's");
        assert_eq!(store.schema_checksum("s.d/Daily").unwrap().as_deref(), Some("c2"));
        let remaining: Vec<String> = store.views_with_prefix("s.d/").map(|r| r.unwrap().0).collect();
        assert_eq!(remaining, ["s.d/DailyTotal/2015/05/01"]);
    }

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
