//! Listener records: each listener's cursor into the event log, restarts
//! and status. They are written without a flush of their own.

use serde::{Deserialize, Serialize};

use super::format::{decode, encode};
use super::{Error, Metastore};

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

impl Metastore {
    pub fn listener(&self, name: &str) -> Result<Option<ListenerRecord>, Error> {
        self.reading("listeners", || self.listeners.get(name)?.map(|bytes| decode(name.as_bytes(), &bytes)).transpose())
    }

    /// Stores a listener's record. It becomes durable with the next flush
    /// (sled's own, every half second, or [`Metastore::flush`]): a cursor
    /// lost in a crash only repeats events, so listeners do not make the
    /// scheduler's commits wait for theirs.
    pub fn put_listener(&self, name: &str, record: &ListenerRecord) -> Result<(), Error> {
        self.listeners.insert(name, encode(record))?;
        Ok(())
    }
}
