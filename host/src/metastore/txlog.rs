//! The transaction log of incremental views (S2Graph's TxLog): per TxId
//! (view, project, source, path) the last committed commit id, its type,
//! time and whether it is enabled, and per view a head with the commit's
//! generation and the resets since. Keys: view URL path, NUL for the head;
//! view, NUL, source, NUL, path for an entry, so a view's log is a prefix
//! with its head first. Written only inside a [`Commit`](super::Commit).
//!
//! The log describes the view's published output, whose own marker is the
//! record of truth (see `scheduler::txlog`): these records let operators see
//! and reset the log, and say which markers a reset made void.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::format::{decode, encode};
use super::{Error, Metastore};

/// How a commit id was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommitType {
    /// The hash of the host's manifest of the input's files.
    Manifest,
    /// An offset the plugin returned for the input.
    Plugin,
}

/// The TxLog entry of one TxId: one input of an incremental view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxEntry {
    pub project: String,
    /// The dependency's name.
    pub source: String,
    /// The input's data path, relative to the storage root.
    pub path: String,
    /// The input view's URL path.
    pub input: String,
    pub commit_id: String,
    pub commit_type: CommitType,
    /// When it was committed, milliseconds since the Unix epoch.
    pub time: i64,
    /// False once reset: the next run reads this input from the start.
    pub enabled: bool,
    /// The view's commit that wrote it.
    pub generation: u64,
}

/// What the log keeps per incremental view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxHead {
    /// Generation of the last commit recorded (1 for the first).
    pub generation: u64,
    /// A reset of the whole view voids every marker up to this generation.
    #[serde(default)]
    pub reset_through: u64,
    /// A reset of one source voids that source's entries up to a generation.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reset_sources: BTreeMap<String, u64>,
    /// The view's data path, where its marker is (to reconcile at open).
    pub output: String,
}

/// One view's writes to the log: its head, the entries it keeps, and the
/// keys of entries it drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxWrite {
    pub view: String,
    pub head: TxHead,
    pub entries: Vec<TxEntry>,
    /// (source, path) of entries to remove.
    pub removed: Vec<(String, String)>,
}

pub(super) fn head_key(view: &str) -> Vec<u8> {
    let mut key = view.as_bytes().to_vec();
    key.push(0);
    key
}

pub(super) fn entry_key(view: &str, source: &str, path: &str) -> Vec<u8> {
    let mut key = head_key(view);
    key.extend_from_slice(source.as_bytes());
    key.push(0);
    key.extend_from_slice(path.as_bytes());
    key
}

/// A key of the tree split into its view and, for an entry, the rest.
pub(super) fn split_key(key: &[u8]) -> Option<(String, bool)> {
    let split = key.iter().position(|b| *b == 0)?;
    Some((String::from_utf8_lossy(&key[..split]).into_owned(), split + 1 == key.len()))
}

impl Metastore {
    pub fn tx_head(&self, view: &str) -> Result<Option<TxHead>, Error> {
        let key = head_key(view);
        self.reading("txlog", || self.txlog.get(&key)?.map(|bytes| decode(&key, &bytes)).transpose())
    }

    /// A view's entries, by source and path.
    pub fn tx_entries(&self, view: &str) -> Result<Vec<TxEntry>, Error> {
        let prefix = head_key(view);
        self.reading("txlog", || {
            let mut entries = Vec::new();
            for item in self.txlog.scan_prefix(&prefix) {
                let (key, bytes) = item?;
                if key.len() > prefix.len() {
                    entries.push(decode(&key, &bytes)?);
                }
            }
            Ok(entries)
        })
    }

    /// Every view with a head, and its head, in key order.
    pub fn tx_heads(&self) -> Result<Vec<(String, TxHead)>, Error> {
        self.reading("txlog", || {
            let mut heads = Vec::new();
            for item in self.txlog.iter() {
                let (key, bytes) = item?;
                if let Some((view, true)) = split_key(&key) {
                    heads.push((view, decode(&key, &bytes)?));
                }
            }
            Ok(heads)
        })
    }
}

pub(super) fn write(
    tree: &sled::transaction::TransactionalTree,
    writes: &[TxWrite],
) -> Result<(), sled::transaction::UnabortableTransactionError> {
    for write in writes {
        tree.insert(head_key(&write.view), encode(&write.head))?;
        for (source, path) in &write.removed {
            tree.remove(entry_key(&write.view, source, path))?;
        }
        for entry in &write.entries {
            tree.insert(entry_key(&write.view, &entry.source, &entry.path), encode(entry))?;
        }
    }
    Ok(())
}
