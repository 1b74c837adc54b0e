//! Backup and restore: the records themselves as JSON lines, a format of
//! trellis's own that a later trellis can read (docs/operations.md
//! describes it), never sled's files.
//!
//! The first line is a header naming the format and its version; every
//! other line is one record, tagged with its `kind`; the last line counts
//! them, so a cut-off backup is refused rather than half restored. A
//! restore writes a new directory beside the target and renames it into
//! place only once everything is in and durable: it never half-writes, and
//! it refuses a target that already holds a metastore.

use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::coordinators::action_key;
use super::events::{EVENTS_PER_CHUNK, SEQUENCE_KEY, StoredEvent};
use super::format::{decode, encode};
use super::runs::flow_key;
use super::txlog::{entry_key, head_key, split_key};
use super::{
    ActionRecord, CoordinatorRecord, Error, FlowRecord, ListenerRecord, LoggedEvent, Metastore, RunRecord, TxEntry,
    TxHead, ViewLog, ViewRecord,
};

/// A record (key and bytes) as the backup's lines.
type LinesOf<'a> = dyn Fn(&[u8], &[u8]) -> Result<Vec<Line>, Error> + 'a;

/// The name in every backup's header.
pub const BACKUP_FORMAT: &str = "trellis-metastore-backup";

/// The version of the backup format this build writes; it reads this one.
pub const BACKUP_VERSION: u32 = 1;

/// One line of a backup.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    Header {
        format: String,
        version: u32,
        /// The metastore format the records come from (see `format.rs`).
        record_format: u32,
        written_by: String,
        /// Milliseconds since the Unix epoch.
        created: i64,
    },
    Schema {
        view_type: String,
        checksum: String,
    },
    View {
        view: String,
        record: ViewRecord,
    },
    Run {
        record: RunRecord,
    },
    /// A flow's status and details, flattened: a line without details is
    /// as it was before flows had them.
    Flow {
        run: String,
        view: String,
        #[serde(flatten)]
        record: FlowRecord,
    },
    Event {
        event: LoggedEvent,
    },
    Listener {
        name: String,
        record: ListenerRecord,
    },
    Coordinator {
        name: String,
        record: CoordinatorRecord,
    },
    Action {
        record: ActionRecord,
    },
    TxHead {
        view: String,
        head: TxHead,
    },
    TxEntry {
        view: String,
        entry: TxEntry,
    },
    Log {
        view: String,
        record: ViewLog,
    },
    /// The sequence number the next event gets: the log may have been
    /// trimmed to nothing, so it does not follow from the events.
    NextSequence {
        next: u64,
    },
    End {
        records: u64,
    },
}

fn backup_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Backup(format!("{what}: {e}"))
}

impl Metastore {
    /// Writes every record to `out` and returns how many there were. It
    /// reads the whole log, whose middle open did not: a page sled cannot
    /// read is [`Error::Damaged`], and no backup.
    pub fn backup(&self, out: &mut impl Write) -> Result<u64, Error> {
        let mut records = 0u64;
        let mut line = |line: &Line| -> Result<(), Error> {
            serde_json::to_writer(&mut *out, line).map_err(|e| backup_error("writing the backup", e))?;
            out.write_all(b"\n").map_err(|e| backup_error("writing the backup", e))
        };
        line(&Line::Header {
            format: BACKUP_FORMAT.into(),
            version: BACKUP_VERSION,
            record_format: super::FORMAT,
            written_by: format!("trellis {}", env!("CARGO_PKG_VERSION")),
            created: chrono::Utc::now().timestamp_millis(),
        })?;
        // Each tree's entries in key order, each as its lines (one per
        // record; a chunk of the log holds many events).
        let mut dump = |name: &'static str, tree: &sled::Tree, lines_of: &LinesOf<'_>| {
            self.reading(name, || {
                for entry in tree.iter() {
                    let (key, bytes) = entry?;
                    for each in lines_of(&key, &bytes)? {
                        line(&each)?;
                        records += 1;
                    }
                }
                Ok(())
            })
        };
        let text = |key: &[u8]| String::from_utf8_lossy(key).into_owned();
        dump("schemas", &self.schemas, &|key, bytes| {
            Ok(vec![Line::Schema { checksum: decode(key, bytes)?, view_type: text(key) }])
        })?;
        dump("views", &self.views, &|key, bytes| {
            Ok(vec![Line::View { view: text(key), record: decode(key, bytes)? }])
        })?;
        dump("runs", &self.runs, &|key, bytes| Ok(vec![Line::Run { record: decode(key, bytes)? }]))?;
        dump("flows", &self.flows, &|key, bytes| {
            let Some(split) = key.iter().position(|b| *b == 0) else {
                return Err(Error::Corrupt { key: text(key), reason: "a flow key without its run".into() });
            };
            let (run, view) = (text(&key[..split]), text(&key[split + 1..]));
            Ok(vec![Line::Flow { run, view, record: decode(key, bytes)? }])
        })?;
        dump("events", &self.events, &|key, bytes| {
            let chunk: Vec<LoggedEvent> = decode(key, bytes)?;
            Ok(chunk.into_iter().map(|event| Line::Event { event }).collect())
        })?;
        dump("listeners", &self.listeners, &|key, bytes| {
            Ok(vec![Line::Listener { name: text(key), record: decode(key, bytes)? }])
        })?;
        dump("coordinators", &self.coordinators, &|key, bytes| {
            Ok(vec![Line::Coordinator { name: text(key), record: decode(key, bytes)? }])
        })?;
        dump("actions", &self.actions, &|key, bytes| Ok(vec![Line::Action { record: decode(key, bytes)? }]))?;
        dump("txlog", &self.txlog, &|key, bytes| match split_key(key) {
            Some((view, true)) => Ok(vec![Line::TxHead { view, head: decode(key, bytes)? }]),
            Some((view, false)) => Ok(vec![Line::TxEntry { view, entry: decode(key, bytes)? }]),
            None => Err(Error::Corrupt { key: text(key), reason: "a transaction log key without its view".into() }),
        })?;
        dump("logs", &self.logs, &|key, bytes| Ok(vec![Line::Log { view: text(key), record: decode(key, bytes)? }]))?;
        line(&Line::NextSequence { next: self.next_sequence()? })?;
        line(&Line::End { records })?;
        out.flush().map_err(|e| backup_error("writing the backup", e))?;
        Ok(records)
    }
}

/// The file in the metastore's directory that names the backup being
/// written, while one is: a backup killed midway leaves it, and the next
/// open removes the partial file it names (see [`remove_leftovers`]).
const BACKUP_NOTE: &str = "backup-in-progress";

/// The start of a partial backup's name, beside the file it becomes.
const PARTIAL_PREFIX: &str = ".trellis-backup-";

/// The start of a restore's staging directory's name, beside its target.
const STAGING_PREFIX: &str = ".metastore-restore-";

impl Metastore {
    /// Writes a backup to `file`: beside it first, renamed into place once
    /// it is complete and durable, so that a failed backup never replaces
    /// a good one. Returns how many records it holds. While it is written,
    /// a note in the metastore's directory names the partial file, so that
    /// if this process dies the next open removes it: only one process
    /// holds the store, so a partial file named there is no one's.
    pub fn backup_to(&self, file: &Path) -> Result<u64, Error> {
        let writing = |e: std::io::Error| backup_error(&format!("writing {}", file.display()), e);
        let parent = match file.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let partial = tempfile::Builder::new()
            .prefix(PARTIAL_PREFIX)
            .tempfile_in(parent)
            .map_err(|e| backup_error(&format!("creating a file in {}", parent.display()), e))?;
        let note = self.path.join(BACKUP_NOTE);
        let named = std::path::absolute(partial.path()).map_err(writing)?;
        std::fs::write(&note, std::os::unix::ffi::OsStrExt::as_bytes(named.as_os_str())).map_err(writing)?;
        let written = self.write_partial(partial, file);
        // Whatever happened, the partial file is gone (renamed, or removed
        // with its handle): the note has nothing left to name.
        let _ = std::fs::remove_file(&note);
        written
    }
}

impl Metastore {
    /// The backup into `partial`, made durable, then renamed to `file`.
    fn write_partial(&self, mut partial: tempfile::NamedTempFile, file: &Path) -> Result<u64, Error> {
        let writing = |e: std::io::Error| backup_error(&format!("writing {}", file.display()), e);
        let records = {
            let mut out = std::io::BufWriter::new(partial.as_file_mut());
            let records = self.backup(&mut out)?;
            out.flush().map_err(writing)?;
            records
        };
        partial.as_file().sync_all().map_err(writing)?;
        partial.persist(file).map_err(|e| writing(e.error))?;
        Ok(records)
    }
}

/// Removes what a backup or restore killed midway left (called by open,
/// with `dir` the store just opened): the partial backup its note names,
/// and restore staging directories beside `dir` that no store holds
/// (sled locks its `db` file while a store is open; a directory without
/// one was never opened). Returns what was removed, for the log.
pub(super) fn remove_leftovers(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut removed = Vec::new();
    let note = dir.join(BACKUP_NOTE);
    if let Ok(named) = std::fs::read(&note) {
        let partial =
            std::path::PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(named));
        let is_partial = partial.file_name().is_some_and(|name| name.to_string_lossy().starts_with(PARTIAL_PREFIX));
        if is_partial && std::fs::remove_file(&partial).is_ok() {
            removed.push(partial);
        }
        let _ = std::fs::remove_file(&note);
    }
    let parent = match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(parent) else { return removed };
    for entry in entries.flatten() {
        let path = entry.path();
        let staging = entry.file_name().to_string_lossy().starts_with(STAGING_PREFIX)
            && entry.file_type().is_ok_and(|kind| kind.is_dir())
            && path.file_name() != dir.file_name();
        if !staging {
            continue;
        }
        let held = match std::fs::File::open(path.join("db")) {
            Ok(db) => db.try_lock().is_err(),
            Err(_) => false,
        };
        if !held && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// Restores a backup into `target`, which must not hold a metastore yet
/// (absent, or an empty directory). Returns how many records it restored.
/// Nothing appears at `target` unless all of them did.
pub fn restore(input: impl BufRead, target: &Path) -> Result<u64, Error> {
    let refuse = |reason: String| Error::Backup(reason);
    if let Ok(mut entries) = std::fs::read_dir(target)
        && entries.next().is_some()
    {
        return Err(refuse(format!(
            "{} already holds a metastore; move it away first (restore never overwrites one)",
            target.display()
        )));
    }
    let parent = match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent).map_err(|e| backup_error(&format!("creating {}", parent.display()), e))?;
    // Beside the target, so that the final rename stays on one filesystem.
    let staging = tempfile::Builder::new()
        .prefix(STAGING_PREFIX)
        .tempdir_in(parent)
        .map_err(|e| backup_error(&format!("creating a directory in {}", parent.display()), e))?;
    let records = {
        let store = Metastore::open(staging.path())?;
        let records = fill(&store, input)?;
        store.flush()?;
        records
    };
    // The store is closed; sled's threads may hold its lock a moment
    // longer, which does not keep the directory from being renamed.
    if target.exists() {
        std::fs::remove_dir(target).map_err(|e| backup_error(&format!("replacing {}", target.display()), e))?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, target).map_err(|e| {
        backup_error(&format!("moving the restored metastore from {} to {}", staged.display(), target.display()), e)
    })?;
    Ok(records)
}

/// Reads the backup's lines into an empty store.
fn fill(store: &Metastore, input: impl BufRead) -> Result<u64, Error> {
    let mut lines = input.lines().enumerate();
    check_header(lines.next())?;
    let mut records = 0u64;
    let mut batches = Batches::default();
    let mut events = InOrder::default();
    let mut end = None;
    let mut next_sequence: Option<(usize, u64)> = None;
    for (number, line) in lines {
        let line = line.map_err(|e| backup_error("reading the backup", e))?;
        if end.is_some() {
            return Err(at(number, "a line after the end".into()));
        }
        let parsed: Line = serde_json::from_str(&line).map_err(|e| at(number, e.to_string()))?;
        match parsed {
            Line::Header { .. } => return Err(at(number, "a second header".into())),
            Line::Schema { view_type, checksum } => batches.schemas.insert(view_type.as_bytes(), encode(&checksum)),
            Line::View { view, record } => batches.views.insert(view.as_bytes(), encode(&record)),
            Line::Run { record } => batches.runs.insert(record.id.as_bytes(), encode(&record)),
            Line::Flow { run, view, record } => batches.flows.insert(flow_key(&run, &view), encode(&record)),
            Line::Event { event } => events.add(event, &mut batches).map_err(|reason| at(number, reason))?,
            Line::Listener { name, record } => batches.listeners.insert(name.as_bytes(), encode(&record)),
            Line::Coordinator { name, record } => batches.coordinators.insert(name.as_bytes(), encode(&record)),
            Line::Action { record } => {
                batches.actions.insert(action_key(&record.coordinator, record.nominal), encode(&record))
            }
            Line::TxHead { view, head } => batches.txlog.insert(head_key(&view), encode(&head)),
            Line::TxEntry { view, entry } => {
                batches.txlog.insert(entry_key(&view, &entry.source, &entry.path), encode(&entry))
            }
            Line::Log { view, record } => batches.logs.insert(view.as_bytes(), encode(&record)),
            Line::NextSequence { next } => {
                if next_sequence.is_some() {
                    return Err(at(number, "a second next_sequence".into()));
                }
                next_sequence = Some((number, next));
                continue;
            }
            Line::End { records } => {
                end = Some((number, records));
                continue;
            }
        }
        records += 1;
    }
    match end {
        None => return Err(Error::Backup("the backup ends without its last line: it was cut off".into())),
        Some((number, counted)) if counted != records => {
            return Err(at(number, format!("the backup counts {counted} records, it holds {records}")));
        }
        Some(_) => {}
    }
    batches.next_sequence = next_sequence_after(next_sequence, events.last)?;
    batches.events_chunk(events.pending);
    batches.apply(store)?;
    Ok(records)
}

/// A problem on line `number` (from 0) of the backup.
fn at(number: usize, reason: String) -> Error {
    Error::Backup(format!("line {}: {reason}", number + 1))
}

/// The first line is a header of this backup format, version and record format.
fn check_header(first: Option<(usize, std::io::Result<String>)>) -> Result<(), Error> {
    let Some((number, line)) = first else {
        return Err(Error::Backup("the backup is empty".into()));
    };
    let line = line.map_err(|e| backup_error("reading the backup", e))?;
    match serde_json::from_str::<Line>(&line) {
        Ok(Line::Header { format, version, record_format, .. }) => {
            if format != BACKUP_FORMAT {
                return Err(at(number, format!("`{format}` is not a {BACKUP_FORMAT}")));
            }
            if version != BACKUP_VERSION || record_format != super::FORMAT {
                return Err(at(
                    number,
                    format!(
                        "a backup of version {version} (records of format {record_format}); this trellis reads version {BACKUP_VERSION} (format {})",
                        super::FORMAT
                    ),
                ));
            }
            Ok(())
        }
        _ => Err(at(number, format!("not a {BACKUP_FORMAT} header"))),
    }
}

/// The events read so far: the last one's number, and those not yet in a
/// chunk.
#[derive(Default)]
struct InOrder {
    last: Option<u64>,
    pending: Vec<LoggedEvent>,
}

impl InOrder {
    /// Each event once, in order: chunks are keyed by their first event, so
    /// one out of order would overwrite or overlap another chunk.
    fn add(&mut self, event: LoggedEvent, batches: &mut Batches) -> Result<(), String> {
        if let Some(last) = self.last.filter(|last| event.sequence <= *last) {
            let reason = if event.sequence == last {
                format!("event {last} a second time")
            } else {
                format!("event {} comes after event {last}", event.sequence)
            };
            return Err(format!("{reason}: events must be in order, each once"));
        }
        self.last = Some(event.sequence);
        if self.pending.last().is_some_and(|last| event.sequence != last.sequence + 1) {
            batches.events_chunk(std::mem::take(&mut self.pending));
        }
        self.pending.push(event);
        if self.pending.len() == EVENTS_PER_CHUNK {
            batches.events_chunk(std::mem::take(&mut self.pending));
        }
        Ok(())
    }
}

/// The next event must get a number no restored event has, or new commits
/// would overwrite restored chunks. The line is optional (a backup may be
/// written by hand or by another tool): then it follows from the events.
fn next_sequence_after(next_sequence: Option<(usize, u64)>, last_event: Option<u64>) -> Result<Option<u64>, Error> {
    Ok(match (next_sequence, last_event) {
        (Some((number, next)), Some(last)) if next <= last => {
            return Err(at(number, format!("next_sequence {next} is not above the last event restored ({last})")));
        }
        (Some((number, 0)), None) => return Err(at(number, "next_sequence 0: sequence numbers start at 1".into())),
        (Some((_, next)), _) => Some(next),
        (None, None) => None,
        (None, Some(last)) => Some(
            last.checked_add(1)
                .ok_or_else(|| Error::Backup(format!("event {last} leaves no sequence number for the next")))?,
        ),
    })
}

/// What a restore writes, per tree.
#[derive(Default)]
struct Batches {
    schemas: sled::Batch,
    views: sled::Batch,
    runs: sled::Batch,
    flows: sled::Batch,
    events: sled::Batch,
    listeners: sled::Batch,
    coordinators: sled::Batch,
    actions: sled::Batch,
    txlog: sled::Batch,
    logs: sled::Batch,
    next_sequence: Option<u64>,
}

impl Batches {
    /// Consecutive events, stored as the log stores them: one chunk.
    fn events_chunk(&mut self, chunk: Vec<LoggedEvent>) {
        let Some(first) = chunk.first() else { return };
        let stored: Vec<StoredEvent<'_>> =
            chunk.iter().map(|e| StoredEvent { sequence: e.sequence, event: &e.event }).collect();
        self.events.insert(&first.sequence.to_be_bytes(), encode(&stored));
    }

    fn apply(self, store: &Metastore) -> Result<(), Error> {
        store.schemas.apply_batch(self.schemas)?;
        store.views.apply_batch(self.views)?;
        store.runs.apply_batch(self.runs)?;
        store.flows.apply_batch(self.flows)?;
        store.events.apply_batch(self.events)?;
        store.listeners.apply_batch(self.listeners)?;
        store.coordinators.apply_batch(self.coordinators)?;
        store.actions.apply_batch(self.actions)?;
        store.txlog.apply_batch(self.txlog)?;
        store.logs.apply_batch(self.logs)?;
        if let Some(next) = self.next_sequence {
            store.meta.insert(SEQUENCE_KEY, &next.to_be_bytes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metastore::Commit;
    use crate::metastore::fixtures::{event, materialized};
    use crate::model::{FlowStatus, ViewState};

    /// A restore that is under way (its staging store open) keeps its
    /// directory when a store beside it opens; one that no process holds
    /// (killed midway) is removed.
    #[test]
    fn open_removes_only_the_staging_directories_no_store_holds() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join(".metastore-restore-live");
        let dead = dir.path().join(".metastore-restore-dead");
        // What a killed restore leaves: sled's files, their lock gone with the process.
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("db"), b"half a store").unwrap();
        let _restoring = Metastore::open(&live).unwrap();
        let target = dir.path().join("metastore");
        drop(Metastore::open(&target).unwrap());
        assert!(live.join("db").exists(), "the live restore's store is left alone");
        assert!(!dead.exists(), "the dead restore's directory is removed");
    }

    fn filled(dir: &Path) -> Metastore {
        let store = Metastore::open(dir).unwrap();
        store.register_schema("s.d/Daily", "c1").unwrap();
        let many: Vec<_> = (0..300).map(|i| event(&format!("v{i}"), ViewState::Receive, ViewState::Waiting)).collect();
        let run = RunRecord {
            id: "r1".into(),
            pattern: "s.d/Daily/2015/05/01".into(),
            mode: crate::model::Mode::Default,
            started: 1,
            finished: Some(2),
            termination: None,
            idle: 3,
            full_refresh: false,
            attempts: [("s.d/Daily/2015/05/01".to_string(), 2)].into(),
            action: None,
            no_data: 1,
            flow_counts: Default::default(),
        };
        store
            .commit(&Commit {
                views: vec![("s.d/Daily/2015/05/01".into(), materialized(7))],
                events: many,
                runs: vec![run],
                flows: vec![("r1".into(), "s.d/Daily/2015/05/01".into(), FlowStatus::Successful.into())],
                ..Commit::default()
            })
            .unwrap();
        store.truncate_events(10).unwrap();
        store.put_listener("audit", &ListenerRecord { cursor: 12, delivered: 3, ..ListenerRecord::default() }).unwrap();
        let action = ActionRecord {
            coordinator: "daily".into(),
            nominal: 1_430_460_000_000,
            actual: 1_430_460_000_000,
            state: crate::model::ActionState::Waiting,
            views: "s.d/Daily/2015/05/01".into(),
            missing: vec!["s.d/Raw/2015/05/01".into()],
            run: None,
            previous_runs: Vec::new(),
            reason: None,
            updated: 1_430_460_000_000,
            full_refresh: false,
            latest_found: None,
        };
        let coordinator = CoordinatorRecord { last_nominal: Some(action.nominal), suspended: true };
        store
            .commit(&Commit {
                coordinators: vec![("daily".into(), coordinator)],
                actions: vec![action],
                txlog: vec![crate::metastore::TxWrite {
                    view: "s.d/Monthly/2015/05".into(),
                    head: TxHead { generation: 2, output: "/data/s/d/Monthly/2015/05".into(), ..TxHead::default() },
                    entries: vec![TxEntry {
                        project: "s".into(),
                        source: "daily".into(),
                        path: "s/d/Daily/2015/05/01".into(),
                        input: "s.d/Daily/2015/05/01".into(),
                        commit_id: "abc".into(),
                        commit_type: crate::metastore::CommitType::Manifest,
                        time: 1,
                        enabled: true,
                        generation: 2,
                    }],
                    removed: Vec::new(),
                }],
                ..Commit::default()
            })
            .unwrap();
        store
    }

    fn backup_of(store: &Metastore) -> Vec<u8> {
        let mut out = Vec::new();
        store.backup(&mut out).unwrap();
        out
    }

    #[test]
    fn a_restored_backup_holds_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let original = filled(&dir.path().join("original"));
        let backup = backup_of(&original);
        let text = String::from_utf8(backup.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"kind":"header","format":"trellis-metastore-backup","version":1,"record_format":2,"#)
        );
        assert!(text.ends_with("{\"kind\":\"next_sequence\",\"next\":301}\n{\"kind\":\"end\",\"records\":300}\n"));
        let target = dir.path().join("restored");
        assert_eq!(restore(backup.as_slice(), &target).unwrap(), 300);
        let restored = Metastore::open(&target).unwrap();
        assert_eq!(restored.check().unwrap(), original.check().unwrap());
        let again = String::from_utf8(backup_of(&restored)).unwrap();
        assert!(again.lines().skip(1).eq(text.lines().skip(1)), "the same records, line by line, after the header");
        assert_eq!(restored.schema_checksum("s.d/Daily").unwrap().as_deref(), Some("c1"));
        assert_eq!(restored.events_from(0, 1000).unwrap(), original.events_from(0, 1000).unwrap());
        assert_eq!(restored.first_sequence().unwrap(), 10);
        assert_eq!(restored.next_sequence().unwrap(), 301);
        assert_eq!(restored.flows("r1").unwrap(), original.flows("r1").unwrap());
        assert_eq!(restored.listener("audit").unwrap(), original.listener("audit").unwrap());
        assert_eq!(restored.coordinator_records().unwrap(), original.coordinator_records().unwrap());
        assert_eq!(restored.actions("daily", None, None).unwrap(), original.actions("daily", None, None).unwrap());
        let monthly = "s.d/Monthly/2015/05";
        assert_eq!(restored.tx_head(monthly).unwrap(), original.tx_head(monthly).unwrap());
        assert_eq!(restored.tx_entries(monthly).unwrap(), original.tx_entries(monthly).unwrap());
        assert_eq!(restored.tx_entries(monthly).unwrap().len(), 1);
    }

    #[test]
    fn a_restore_refuses_a_metastore_in_place_and_a_cut_backup_leaving_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let original = filled(&dir.path().join("original"));
        let backup = backup_of(&original);
        let error = restore(backup.as_slice(), &dir.path().join("original")).unwrap_err().to_string();
        assert!(
            error.ends_with("already holds a metastore; move it away first (restore never overwrites one)"),
            "{error}"
        );
        let cut = &backup[..backup.len() - 30];
        let target = dir.path().join("restored");
        let error = restore(cut, &target).unwrap_err().to_string();
        assert!(error.starts_with("metastore backup: "), "{error}");
        assert!(!target.exists(), "nothing half restored");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, ["original"], "and no staging directory left behind");
        let other = String::from_utf8(backup).unwrap().replacen("\"version\":1", "\"version\":9", 1);
        let error = restore(other.as_bytes(), &target).unwrap_err().to_string();
        assert!(error.contains("a backup of version 9"), "{error}");
    }

    /// The backup's lines after `edit`, its last line counting them again,
    /// as a backup written that way would.
    fn edited(backup: &[u8], edit: impl FnOnce(&mut Vec<String>)) -> String {
        let mut lines: Vec<String> = String::from_utf8(backup.to_vec()).unwrap().lines().map(String::from).collect();
        edit(&mut lines);
        let records = lines
            .iter()
            .filter(|l| {
                !l.contains(r#""kind":"header""#)
                    && !l.contains(r#""kind":"end""#)
                    && !l.contains(r#""kind":"next_sequence""#)
            })
            .count();
        let last = lines.len() - 1;
        lines[last] = format!(r#"{{"kind":"end","records":{records}}}"#);
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    fn line_of(lines: &[String], sequence: u64) -> usize {
        lines.iter().position(|l| l.contains(&format!(r#""kind":"event","event":{{"sequence":{sequence},"#))).unwrap()
    }

    #[test]
    fn without_its_next_sequence_a_restore_numbers_on_from_the_last_event() {
        let dir = tempfile::tempdir().unwrap();
        let backup = backup_of(&filled(&dir.path().join("original")));
        let without = edited(&backup, |lines| lines.retain(|l| !l.contains(r#""kind":"next_sequence""#)));
        assert!(!without.contains("next_sequence"));
        let target = dir.path().join("restored");
        assert_eq!(restore(without.as_bytes(), &target).unwrap(), 300);
        let restored = Metastore::open(&target).unwrap();
        assert_eq!(restored.next_sequence().unwrap(), 301);
        let before = restored.events_from(0, 1000).unwrap();
        let new = Commit { events: vec![event("w", ViewState::Waiting, ViewState::Failed)], ..Commit::default() };
        assert_eq!(restored.commit(&new).unwrap(), [301], "a number no restored event has");
        let after = restored.events_from(0, 1000).unwrap();
        assert_eq!(after[..after.len() - 1], before[..], "no restored event overwritten");
        assert_eq!(after.len(), 292);
    }

    #[test]
    fn a_restore_refuses_a_next_sequence_not_above_the_events_naming_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let backup = backup_of(&filled(&dir.path().join("original")));
        let target = dir.path().join("restored");
        for next in [300, 12, 0] {
            let text = edited(&backup, |lines| {
                let at = lines.iter().position(|l| l.contains(r#""kind":"next_sequence""#)).unwrap();
                lines[at] = format!(r#"{{"kind":"next_sequence","next":{next}}}"#);
            });
            let error = restore(text.as_bytes(), &target).unwrap_err().to_string();
            assert_eq!(
                error,
                format!("metastore backup: line 302: next_sequence {next} is not above the last event restored (300)")
            );
            assert!(!target.exists(), "nothing restored");
        }
        // With no event at all, a next of 0 would number one 0.
        let empty = edited(&backup, |lines| {
            lines.retain(|l| !l.contains(r#""kind":"event""#));
            let at = lines.iter().position(|l| l.contains(r#""kind":"next_sequence""#)).unwrap();
            lines[at] = r#"{"kind":"next_sequence","next":0}"#.into();
        });
        let error = restore(empty.as_bytes(), &target).unwrap_err().to_string();
        assert_eq!(error, "metastore backup: line 11: next_sequence 0: sequence numbers start at 1");
        let two = edited(&backup, |lines| {
            let at = lines.iter().position(|l| l.contains(r#""kind":"next_sequence""#)).unwrap();
            lines.insert(at, lines[at].clone());
        });
        let error = restore(two.as_bytes(), &target).unwrap_err().to_string();
        assert_eq!(error, "metastore backup: line 303: a second next_sequence");
    }

    #[test]
    fn a_restore_refuses_events_out_of_order_or_overlapping_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let backup = backup_of(&filled(&dir.path().join("original")));
        let target = dir.path().join("restored");
        // Event 100 moved after event 200.
        let moved = edited(&backup, |lines| {
            let line = lines.remove(line_of(lines, 100));
            lines.insert(line_of(lines, 200) + 1, line);
        });
        let error = restore(moved.as_bytes(), &target).unwrap_err().to_string();
        assert_eq!(
            error,
            "metastore backup: line 196: event 100 comes after event 200: events must be in order, each once"
        );
        // Events 50 to 60 again after the last one, as from overlapping chunks.
        let overlapping = edited(&backup, |lines| {
            let again: Vec<String> = lines[line_of(lines, 50)..=line_of(lines, 60)].to_vec();
            let after = line_of(lines, 300) + 1;
            lines.splice(after..after, again);
        });
        let error = restore(overlapping.as_bytes(), &target).unwrap_err().to_string();
        assert_eq!(
            error,
            "metastore backup: line 297: event 50 comes after event 300: events must be in order, each once"
        );
        // The same event twice in a row.
        let twice = edited(&backup, |lines| {
            let at = line_of(lines, 20);
            lines.insert(at, lines[at].clone());
        });
        let error = restore(twice.as_bytes(), &target).unwrap_err().to_string();
        assert_eq!(error, "metastore backup: line 17: event 20 a second time: events must be in order, each once");
        assert!(!target.exists(), "nothing restored");
    }
}
