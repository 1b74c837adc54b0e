//! The event log: events with gapless sequence numbers, appended inside a
//! [`Commit`](super::Commit)'s transaction, stored in chunks, read from a
//! sequence number on, followed through `subscribe` and trimmed from the
//! front.

use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, ConflictableTransactionResult, TransactionalTree};

use super::format::{decode, decode_counter, encode};
use super::{Error, Metastore};
use crate::model::ViewState;

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
    /// Set when the event is a coordinator action's change of state rather
    /// than a view's: `view` is then the action's name
    /// (`coordinator@nominal`), and `previous`/`current` the view states
    /// nearest to the action's (see `ActionChange`), so that a listener
    /// built before actions existed reads it as a transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionChange>,
    /// Set when the event records a change of an incremental view's
    /// transaction log (a commit, a reset, a reconciliation at open):
    /// `previous` and `current` are then the view's state, unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txlog: Option<TxLogChange>,
    /// The view is left, by this event, built or without data while some
    /// of its dependencies had failed (as its record's `errors` says).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub errors: bool,
    /// Set when the event changed the view's flow status in its run (seed
    /// 003's flow progress log): the status it changed to. It rides on the
    /// view's own event, so that listeners, whose 1.x `transition` has no
    /// field for it, see the same sequence of events as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowChange>,
}

/// What an event says of a flow's change of status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowChange {
    /// The flow status as the run reports it (`QUEUED`, `STARTING`,
    /// `SUCCESSFUL`, `IDLE`, `SKIPPED`, `TERMINATED_WITH_ERROR`).
    pub status: crate::model::FlowStatus,
    /// Why the flow is as it is, where its status does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What an event says of a transaction log's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxLogChange {
    /// `commit`, `reset` or `reconcile`.
    pub kind: String,
    /// The view's commit generation after it.
    pub generation: u64,
    /// The inputs committed (for a reset: the entries disabled).
    pub inputs: usize,
    /// Files new or changed since the last commit (commits only).
    #[serde(default)]
    pub new_files: usize,
    /// Why the commit read everything, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<String>,
}

/// A coordinator action's change of state, as the event log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionChange {
    pub coordinator: String,
    /// Milliseconds since the Unix epoch.
    pub nominal: i64,
    pub previous: Option<crate::model::ActionState>,
    pub current: crate::model::ActionState,
}

/// An event of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedEvent {
    pub sequence: u64,
    #[serde(flatten)]
    pub event: NewEvent,
}

pub(super) const SEQUENCE_KEY: &[u8] = b"next-sequence";

/// Events are stored in chunks of consecutive events, keyed by the first
/// one's sequence number: one key per chunk rather than per event keeps an
/// unchanged run of a large lattice, which logs every view it looks at,
/// cheap to write.
pub(super) const EVENTS_PER_CHUNK: usize = 256;

/// An event as written, borrowed from the commit; read back as [`LoggedEvent`].
#[derive(Serialize)]
pub(super) struct StoredEvent<'a> {
    pub(super) sequence: u64,
    #[serde(flatten)]
    pub(super) event: &'a NewEvent,
}

pub(super) fn chunk_start(key: &[u8]) -> Result<u64, Error> {
    <[u8; 8]>::try_from(key)
        .map(u64::from_be_bytes)
        .map_err(|_| Error::Corrupt { key: "events".into(), reason: "a key is not 8 bytes".into() })
}

/// Appends `new` to the log inside a transaction over the `meta` and
/// `events` trees; returns the sequence numbers it gave them, in order.
pub(super) fn append(
    meta: &TransactionalTree,
    events: &TransactionalTree,
    new: &[NewEvent],
) -> ConflictableTransactionResult<Vec<u64>, Error> {
    let mut next = decode_counter(SEQUENCE_KEY, meta.get(SEQUENCE_KEY)?.as_deref())
        .map_err(ConflictableTransactionError::Abort)?
        .unwrap_or(1);
    let first = next;
    for chunk in new.chunks(EVENTS_PER_CHUNK) {
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
}

impl Metastore {
    /// Follows the metastore: the value is the log's next sequence number,
    /// and every durable commit is announced, with events or without (a
    /// run's end is a record, not an event).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.appended.subscribe()
    }

    /// The sequence number the next event will get.
    pub fn next_sequence(&self) -> Result<u64, Error> {
        self.reading("meta", || Ok(decode_counter(SEQUENCE_KEY, self.meta.get(SEQUENCE_KEY)?.as_deref())?.unwrap_or(1)))
    }

    /// Up to `limit` events with a sequence number of at least `from`. Open
    /// did not read the log's middle: a page there that sled cannot read
    /// is [`Error::Damaged`] here, never a panic in the listener or the
    /// event stream that asked.
    pub fn events_from(&self, from: u64, limit: usize) -> Result<Vec<LoggedEvent>, Error> {
        self.reading("events", || self.read_events_from(from, limit))
    }

    /// The key of the chunk that holds `from`, if any, else `from`'s: where
    /// reading from `from` on starts.
    fn chunk_holding(&self, from: u64) -> Result<sled::IVec, Error> {
        match self.events.range(..=from.to_be_bytes()).next_back() {
            Some(entry) => Ok(entry?.0),
            None => Ok(sled::IVec::from(&from.to_be_bytes())),
        }
    }

    fn read_events_from(&self, from: u64, limit: usize) -> Result<Vec<LoggedEvent>, Error> {
        let mut found = Vec::new();
        for entry in self.events.range(self.chunk_holding(from)?..) {
            let (key, bytes) = entry?;
            let chunk: Vec<LoggedEvent> = decode(&key, &bytes)?;
            found.extend(chunk.into_iter().filter(|event| event.sequence >= from).take(limit - found.len()));
            if found.len() >= limit {
                break;
            }
        }
        Ok(found)
    }

    /// When the first event kept from `from` on happened (milliseconds
    /// since the Unix epoch): what a listener's status shows of its lag,
    /// read without building the events of the chunk it is in.
    pub fn first_event_time(&self, from: u64) -> Result<Option<i64>, Error> {
        /// An event with all but its sequence number and time skipped.
        #[derive(Deserialize)]
        struct Stamp {
            sequence: u64,
            time: i64,
        }
        self.reading("events", || {
            for entry in self.events.range(self.chunk_holding(from)?..) {
                let (key, bytes) = entry?;
                let chunk: Vec<Stamp> = decode(&key, &bytes)?;
                if let Some(stamp) = chunk.into_iter().find(|stamp| stamp.sequence >= from) {
                    return Ok(Some(stamp.time));
                }
            }
            Ok(None)
        })
    }

    /// The sequence number of the oldest event kept, or the next one when
    /// the log is empty.
    pub fn first_sequence(&self) -> Result<u64, Error> {
        match self.reading("events", || Ok(self.events.first()?))? {
            Some((key, _)) => chunk_start(&key),
            None => self.next_sequence(),
        }
    }

    /// Removes events before `before`, returning how many went. Chunks
    /// before it go whole; the one it falls in keeps its tail.
    pub fn truncate_events(&self, before: u64) -> Result<usize, Error> {
        let before = before.min(self.next_sequence()?);
        // What goes is read first, through the pages it removes from, so
        // that applying the batch touches only pages read whole.
        let (batch, removed) = self.reading("events", || self.trimmed(before))?;
        self.events.apply_batch(batch)?;
        self.db.flush()?;
        Ok(removed)
    }

    /// The batch that removes events before `before`, and how many it removes.
    fn trimmed(&self, before: u64) -> Result<(sled::Batch, usize), Error> {
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
            let chunk: Vec<LoggedEvent> = decode(&key, &bytes)?;
            let (gone, kept): (Vec<LoggedEvent>, Vec<LoggedEvent>) =
                chunk.into_iter().partition(|e| e.sequence < before);
            removed += gone.len();
            if let Some(first_kept) = kept.first() {
                let stored: Vec<StoredEvent<'_>> =
                    kept.iter().map(|e| StoredEvent { sequence: e.sequence, event: &e.event }).collect();
                batch.insert(&first_kept.sequence.to_be_bytes(), encode(&stored));
            }
        }
        Ok((batch, removed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metastore::Commit;
    use crate::metastore::fixtures::event;

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

    /// sled's log as it lays it out (0.34): segments of 512 KiB, each a
    /// 20-byte header and then messages, each a header (crc32, kind, then
    /// length, segment number and page id as sled's varints) and its body.
    /// Only this test reads it: to damage one page the way a misdirected
    /// write would, with a whole valid message of another page.
    mod sled_log {
        pub(super) const SEGMENT: usize = 512 * 1024;

        fn varint(bytes: &[u8]) -> (u64, usize) {
            match bytes[0] {
                small @ 0..=240 => (u64::from(small), 1),
                two @ 241..=248 => ((u64::from(two) - 241) * 256 + u64::from(bytes[1]) + 240, 2),
                249 => (2288 + 256 * u64::from(bytes[1]) + u64::from(bytes[2]), 3),
                wide => {
                    let len = usize::from(wide - 247);
                    let mut le = [0u8; 8];
                    le[..len].copy_from_slice(&bytes[1..=len]);
                    (u64::from_le_bytes(le), 1 + len)
                }
            }
        }

        /// A message: where it starts, its whole length, kind and page.
        #[derive(Debug, Clone, Copy)]
        pub(super) struct Message {
            pub(super) at: usize,
            pub(super) len: usize,
            pub(super) kind: u8,
            pub(super) page: u64,
        }

        /// The messages of the segment that holds `offset`, up to its cap.
        pub(super) fn segment_of(file: &[u8], offset: usize) -> Vec<Message> {
            let start = offset / SEGMENT * SEGMENT;
            let end = (start + SEGMENT).min(file.len());
            let mut messages = Vec::new();
            let mut at = start + 20;
            // Kind 0 is sled's canary for an unwritten end, 2 its cap.
            while at + 32 <= end && !matches!(file[at + 4], 0 | 2) {
                let mut header = at + 5;
                let (body, n) = varint(&file[header..]);
                header += n;
                header += varint(&file[header..]).1;
                let (page, n) = varint(&file[header..]);
                header += n;
                let len = header - at + body as usize;
                messages.push(Message { at, len, kind: file[at + 4], page });
                at += len;
            }
            messages
        }
    }

    #[test]
    fn a_damaged_page_in_the_middle_of_the_log_is_an_error_where_it_is_read_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Metastore::open(dir.path()).unwrap();
            for commit in 0..60 {
                let events = (0..100)
                    .map(|i| event(&format!("s.d/Daily/{commit}/{i}"), ViewState::Receive, ViewState::Waiting))
                    .collect();
                store.commit(&Commit { events, ..Commit::default() }).unwrap();
            }
        }
        // Open reads the log's ends only: the damage below, in its middle,
        // is done to a store open as a long-lived server's is.
        let store = Metastore::open(dir.path()).unwrap();
        let db = dir.path().join("db");
        let file = std::fs::read(&db).unwrap();
        let marker = br#"{"sequence":3001,"#;
        let found = file.windows(marker.len()).rposition(|w| w == marker).expect("event 3001 is in the file");
        let messages = sled_log::segment_of(&file, found);
        let page = *messages.iter().find(|m| m.at <= found && found < m.at + m.len).expect("its message");
        // Another page's message (a node or a link, inline), whole and
        // valid, written over this page's.
        let other = *messages
            .iter()
            .find(|m| m.page != page.page && m.len <= page.len && matches!(m.kind, 8 | 10))
            .expect("another page's message in the segment");
        std::os::unix::fs::FileExt::write_all_at(
            &std::fs::OpenOptions::new().write(true).open(&db).unwrap(),
            &file[other.at..other.at + other.len],
            page.at as u64,
        )
        .unwrap();

        let damaged = format!("the metastore in {} is damaged (its `events` tree: sled failed: ", dir.path().display());
        for (what, error) in [
            ("events_from", store.events_from(2900, 200).map(|_| ()).unwrap_err()),
            ("truncate_events", store.truncate_events(3500).map(|_| ()).unwrap_err()),
            ("backup", store.backup(&mut Vec::new()).map(|_| ()).unwrap_err()),
            ("check", store.check().map(|_| ()).unwrap_err()),
        ] {
            let error = error.to_string();
            assert!(error.starts_with(&damaged), "{what}: {error}");
            assert!(error.contains("on pull of pointer"), "{what}: sled's own assertion: {error}");
            assert!(!error.contains('\n'), "{what}: one line: {error}");
        }
        // The ends of the log, and everything else, still read.
        assert_eq!(store.first_sequence().unwrap(), 1);
        assert_eq!(store.events_from(5990, 100).unwrap().len(), 11);
        assert_eq!(store.next_sequence().unwrap(), 6001);
    }
}
