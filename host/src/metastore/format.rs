//! The format version: every record is stored in an envelope that carries
//! it, and the database records the one it was written in, which `open`
//! (open.rs) checks. Another version is an error, never silently misread.
//! A leaf of the room: every file that reads or writes records uses it, and
//! it uses none of them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::Error;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metastore::Metastore;

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
