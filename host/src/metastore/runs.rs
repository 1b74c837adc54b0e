//! Runs and the flow status of each view a run looked at, keyed so that one
//! run's flows are a prefix.

use serde::{Deserialize, Serialize};

use super::format::decode;
use super::{Error, Metastore};
use crate::model::FlowStatus;

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
    /// How many times each view's transformation was called in the run
    /// (retries included), by URL path; views not transformed are absent.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub attempts: std::collections::BTreeMap<String, u32>,
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
