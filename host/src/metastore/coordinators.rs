//! Coordinators' records (the last nominal time each created, whether it is
//! suspended) and their actions, keyed coordinator name, NUL, nominal time
//! (big-endian milliseconds), so that one coordinator's actions are a
//! prefix in nominal order. Both are written inside a [`Commit`](super::Commit),
//! an action's SUBMITTED with the run it records.

use serde::{Deserialize, Serialize};

use crate::model::ActionState;

/// What the metastore remembers of one coordinator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorRecord {
    /// The nominal time of the last action created, in milliseconds since
    /// the Unix epoch; `None` before the first.
    pub last_nominal: Option<i64>,
    /// Suspended by an operator: no action is created or submitted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
}

/// One action of a coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    pub coordinator: String,
    /// Milliseconds since the Unix epoch.
    pub nominal: i64,
    /// When it was created (milliseconds): fixed then, what its timeout and
    /// `evaluation_time = "actual"` count from.
    pub actual: i64,
    pub state: ActionState,
    /// The view pattern it materializes, resolved at its nominal time.
    pub views: String,
    /// The external views (URL paths) it waits for, while WAITING, and
    /// each `latest(n)` that found no instance (`latest(n) of TYPE`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Its run, once SUBMITTED; the last one after a rerun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// The runs before the last, after reruns or re-deliveries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_runs: Vec<String>,
    /// Why it is SKIPPED, FAILED, TIMEDOUT or KILLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When its state last changed (milliseconds).
    pub updated: i64,
    /// Its next run rebuilds its views whatever their state (a rerun asked
    /// for by hand).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full_refresh: bool,
    /// Under `evaluation_time = "actual"`: the done flags (relative to the
    /// storage root) that its views' `latest()` found when it was created,
    /// so that its run reads the instances there were then, not those that
    /// arrived since. `None` under `present`, which resolves at each check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_found: Option<Vec<String>>,
}

/// Action keys: coordinator, NUL, nominal time as big-endian milliseconds
/// (offset so that times before 1970 sort before those after).
pub(super) fn action_key(coordinator: &str, nominal: i64) -> Vec<u8> {
    let mut key = coordinator.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(&((nominal as u64) ^ (1 << 63)).to_be_bytes());
    key
}

impl super::Metastore {
    /// Every coordinator's record, by name.
    pub fn coordinator_records(&self) -> Result<Vec<(String, CoordinatorRecord)>, super::Error> {
        self.reading("coordinators", || {
            self.coordinators
                .iter()
                .map(|entry| {
                    let (key, bytes) = entry?;
                    Ok((String::from_utf8_lossy(&key).into_owned(), super::format::decode(&key, &bytes)?))
                })
                .collect()
        })
    }

    pub fn action(&self, coordinator: &str, nominal: i64) -> Result<Option<ActionRecord>, super::Error> {
        let key = action_key(coordinator, nominal);
        self.reading("actions", || self.actions.get(&key)?.map(|bytes| super::format::decode(&key, &bytes)).transpose())
    }

    /// One coordinator's actions with nominal times in `from..to` (all when
    /// `None`), in nominal order.
    pub fn actions(
        &self,
        coordinator: &str,
        from: Option<i64>,
        to: Option<i64>,
    ) -> Result<Vec<ActionRecord>, super::Error> {
        let start = action_key(coordinator, from.unwrap_or(i64::MIN));
        let end = match to {
            Some(to) => action_key(coordinator, to),
            None => {
                let mut end = coordinator.as_bytes().to_vec();
                end.push(1);
                end
            }
        };
        self.reading("actions", || {
            self.actions
                .range(start..end)
                .map(|entry| {
                    let (key, bytes) = entry?;
                    super::format::decode(&key, &bytes)
                })
                .collect()
        })
    }

    /// Every action not in a final state, of every coordinator: what a
    /// service picks up when it opens.
    pub fn open_actions(&self) -> Result<Vec<ActionRecord>, super::Error> {
        self.reading("actions", || {
            let mut open = Vec::new();
            for entry in self.actions.iter() {
                let (key, bytes) = entry?;
                let action: ActionRecord = super::format::decode(&key, &bytes)?;
                if !action.state.is_final() {
                    open.push(action);
                }
            }
            Ok(open)
        })
    }
}
