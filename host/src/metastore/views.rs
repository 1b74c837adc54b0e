//! View records, keyed by URL path, and the schema checksum of each view
//! type, whose change drops that type's records.

use serde::{Deserialize, Serialize};

use super::format::{decode, encode};
use super::{Error, Metastore};
use crate::model::ViewState;

/// What the metastore remembers of one view; the default is a view it has
/// never seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewRecord {
    pub state: ViewState,
    /// Of the transformation logic it was last materialized with.
    pub version_checksum: Option<String>,
    /// When it was last materialized, in milliseconds since the Unix epoch;
    /// for external data, when trellis first saw its done flag as it is
    /// (records written before `done_flag` existed: the flag's mtime).
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
    /// For external data: the done flag as trellis last recorded it, so
    /// that a flag delivered again with an old mtime (`cp -p`, `rsync -t`)
    /// is still seen to change. Absent in records written before it
    /// existed, which are compared by the flag's mtime against the
    /// timestamp instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_flag: Option<SeenFlag>,
    /// What its transformation returned when it was last materialized by
    /// one (none when it was marked, or is external data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<crate::model::Counters>,
    /// For a view with `latest(n)` dependencies: the URL paths of the
    /// instances they resolved to when it was last materialized, what it
    /// read (seed 002). `None` for other views, and in records written
    /// before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<Vec<String>>,
    /// When its transformation last failed for good (with `last_error`),
    /// in milliseconds since the Unix epoch; absent in records from before
    /// it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<i64>,
}

impl ViewRecord {
    /// What is shown of the view: its state, flags, and an invalidation
    /// it keeps apart from a state that says otherwise.
    pub fn condition(&self) -> crate::model::ViewCondition {
        crate::model::ViewCondition {
            state: self.state,
            incomplete: self.incomplete,
            errors: self.errors,
            invalidation_pending: self.invalidated && self.state != ViewState::Invalidated,
        }
    }
}

/// A done flag as trellis saw it when it recorded an external view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeenFlag {
    /// There was none: the view had no data.
    Absent,
    /// There was one: which file it was, and when trellis saw it so.
    Present {
        identity: FlagIdentity,
        /// Milliseconds since the Unix epoch; the view's timestamp.
        seen: i64,
    },
}

/// What tells one done flag from another: a flag written again, replaced
/// or copied over differs in at least one of them, whatever its mtime says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagIdentity {
    /// Modification time in nanoseconds since the Unix epoch.
    pub mtime_nanos: i64,
    pub size: u64,
    pub inode: u64,
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

impl Metastore {
    /// The recorded schema checksum of a view type.
    pub fn schema_checksum(&self, view_type: &str) -> Result<Option<String>, Error> {
        self.reading("schemas", || {
            self.schemas.get(view_type)?.map(|bytes| decode(view_type.as_bytes(), &bytes)).transpose()
        })
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
                let (batch, dropped) = self.reading("views", || {
                    let mut batch = sled::Batch::default();
                    let mut dropped = 0;
                    for entry in self.views.scan_prefix(prefix.as_bytes()) {
                        let (key, _) = entry?;
                        batch.remove(key);
                        dropped += 1;
                    }
                    Ok((batch, dropped))
                })?;
                self.views.apply_batch(batch)?;
                // The transaction log describes data of the old schema.
                let stale = self.reading("txlog", || {
                    let mut batch = sled::Batch::default();
                    for entry in self.txlog.scan_prefix(prefix.as_bytes()) {
                        batch.remove(entry?.0);
                    }
                    Ok(batch)
                })?;
                self.txlog.apply_batch(stale)?;
                SchemaChange::Changed { dropped }
            }
            None => SchemaChange::New,
        };
        self.schemas.insert(view_type, encode(&checksum.to_string()))?;
        self.db.flush()?;
        Ok(change)
    }

    pub fn view(&self, url_path: &str) -> Result<Option<ViewRecord>, Error> {
        self.reading("views", || self.views.get(url_path)?.map(|bytes| decode(url_path.as_bytes(), &bytes)).transpose())
    }

    /// Every view record whose URL path starts with `prefix`, in key order.
    pub fn views_with_prefix(&self, prefix: &str) -> impl Iterator<Item = Result<(String, ViewRecord), Error>> + '_ {
        let mut entries = self.views.scan_prefix(prefix.as_bytes());
        let mut broken = false;
        // Each step of sled's iterator reads pages: each is guarded, and a
        // step that panicked ends the iteration (sled's iterator is left
        // halfway through it).
        std::iter::from_fn(move || {
            if broken {
                return None;
            }
            let item = self
                .reading("views", || {
                    let Some(entry) = entries.next() else { return Ok(None) };
                    let (key, bytes) = entry?;
                    Ok(Some((String::from_utf8_lossy(&key).into_owned(), decode(&key, &bytes)?)))
                })
                .transpose();
            broken = matches!(item, Some(Err(Error::Damaged { .. })));
            item
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metastore::Commit;
    use crate::metastore::fixtures::materialized;

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
}
