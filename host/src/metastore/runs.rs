//! Runs and the flow status of each view a run looked at, keyed so that one
//! run's flows are a prefix.

use serde::{Deserialize, Serialize};

use super::format::decode;
use super::{Error, Metastore};
use crate::model::{Counters, FlowStatus};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub pattern: String,
    pub mode: crate::model::Mode,
    pub started: i64,
    pub finished: Option<i64>,
    /// Kept as the variant; prose in records from before.
    #[serde(with = "crate::model::termination_record")]
    pub termination: Option<crate::model::Termination>,
    /// Views found up to date: counted, not listed among the flows.
    #[serde(default)]
    pub idle: usize,
    /// A full refresh: the views of the pattern rebuilt whatever their
    /// state, what they depend on read as it stands (absent before it existed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full_refresh: bool,
    /// How many times each view's transformation was called in the run
    /// (retries included), by URL path; views not transformed are absent.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub attempts: std::collections::BTreeMap<String, u32>,
    /// The coordinator's action that started it: (coordinator, nominal
    /// time in milliseconds). Absent for runs asked for by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<(String, i64)>,
    /// Of its SUCCESSFUL views, how many it found without data (an
    /// external view without its done flag, a transformation that found
    /// nothing); absent before it was counted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub no_data: usize,
    /// How many of its views ended in each flow status (idle ones are
    /// `idle`), so that a list of runs counts them in the words the run's
    /// own summary used (by status as written, `SUCCESSFUL`); empty in
    /// records from before it was kept.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub flow_counts: std::collections::BTreeMap<String, usize>,
}

impl RunRecord {
    /// From its start to its end, in milliseconds, once it has ended.
    pub fn duration_ms(&self) -> Option<i64> {
        self.finished.map(|finished| finished - self.started)
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A view's flow in one run: its status and what the run learned of it
/// then, so that a run's account stays its own when the view's record
/// moves on. Every field but the status is optional, so that records
/// written before it (a bare status) still read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredFlow")]
pub struct FlowRecord {
    pub status: FlowStatus,
    /// The error it failed with in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What its transformation returned in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<Counters>,
    /// Why it ended as it did when its status alone does not say: a view
    /// skipped or built while a dependency failed names it (`upstream
    /// failed: VIEW`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<FlowStatus> for FlowRecord {
    fn from(status: FlowStatus) -> FlowRecord {
        FlowRecord { status, error: None, counters: None, reason: None }
    }
}

/// A flow as stored: a bare status (before flows had details), or a record.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredFlow {
    Bare(FlowStatus),
    Record {
        status: FlowStatus,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        counters: Option<Counters>,
        #[serde(default)]
        reason: Option<String>,
    },
}

impl From<StoredFlow> for FlowRecord {
    fn from(stored: StoredFlow) -> FlowRecord {
        match stored {
            StoredFlow::Bare(status) => status.into(),
            StoredFlow::Record { status, error, counters, reason } => FlowRecord { status, error, counters, reason },
        }
    }
}

/// Flow keys: run id, NUL, view, so that one run's flows are a prefix.
pub(super) fn flow_key(run: &str, view: &str) -> Vec<u8> {
    let mut key = run.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(view.as_bytes());
    key
}

impl Metastore {
    pub fn run(&self, id: &str) -> Result<Option<RunRecord>, Error> {
        self.reading("runs", || self.runs.get(id)?.map(|bytes| decode(id.as_bytes(), &bytes)).transpose())
    }

    /// Every run, in id order.
    pub fn runs(&self) -> Result<Vec<RunRecord>, Error> {
        self.reading("runs", || {
            self.runs
                .iter()
                .map(|entry| {
                    let (key, bytes) = entry?;
                    decode(&key, &bytes)
                })
                .collect()
        })
    }

    /// The flow statuses of one run, by view URL path.
    pub fn flows(&self, run: &str) -> Result<Vec<(String, FlowStatus)>, Error> {
        Ok(self.flow_records(run)?.into_iter().map(|(view, flow)| (view, flow.status)).collect())
    }

    /// The flows of one run with what it recorded of each, by view URL path.
    pub fn flow_records(&self, run: &str) -> Result<Vec<(String, FlowRecord)>, Error> {
        let prefix = flow_key(run, "");
        self.reading("flows", || {
            self.flows
                .scan_prefix(&prefix)
                .map(|entry| {
                    let (key, bytes) = entry?;
                    let view = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
                    Ok((view, decode(&key, &bytes)?))
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Mode, Termination};

    /// A run record keeps its end as the variant; one written before, with
    /// the end in prose (and the mode as text), still reads.
    #[test]
    fn a_run_recorded_in_prose_still_reads_and_a_new_one_keeps_the_variant() {
        let dir = tempfile::tempdir().unwrap();
        let store = Metastore::open(dir.path()).unwrap();
        let old = r#"{"format":2,"record":{"id":"r1","pattern":"s.d/Daily/A/2015/05/01","mode":"TRANSFORM_ONLY","started":1,"finished":5,"termination":"completed with 1 failed views","idle":0}}"#;
        store.runs.insert("r1", old.as_bytes()).unwrap();
        let read = store.run("r1").unwrap().unwrap();
        assert_eq!(read.mode, Mode::TransformOnly);
        assert_eq!(read.termination, Some(Termination::CompletedWithFailures(1)));
        let new = RunRecord { id: "r2".into(), termination: Some(Termination::Failed("disk full".into())), ..read };
        store.runs.insert("r2", super::super::format::encode(&new)).unwrap();
        let bytes = store.runs.get("r2").unwrap().unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(r#""termination":{"kind":"failed","reason":"disk full"}"#), "{text}");
        assert_eq!(store.run("r2").unwrap(), Some(new));
    }
}
