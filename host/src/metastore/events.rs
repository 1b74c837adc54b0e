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
        Ok(decode_counter(SEQUENCE_KEY, self.meta.get(SEQUENCE_KEY)?.as_deref())?.unwrap_or(1))
    }

    /// Up to `limit` events with a sequence number of at least `from`.
    pub fn events_from(&self, from: u64, limit: usize) -> Result<Vec<LoggedEvent>, Error> {
        // Start with the chunk that holds `from`, if any.
        let start = match self.events.range(..=from.to_be_bytes()).next_back() {
            Some(entry) => entry?.0,
            None => sled::IVec::from(&from.to_be_bytes()),
        };
        let mut found = Vec::new();
        for entry in self.events.range(start..) {
            let (key, bytes) = entry?;
            let chunk: Vec<LoggedEvent> = decode(&key, &bytes)?;
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
        self.events.apply_batch(batch)?;
        self.db.flush()?;
        Ok(removed)
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
}
