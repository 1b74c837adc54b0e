//! A [`Commit`]: everything one step of the scheduler writes (views,
//! events, runs, flows), applied in one transaction across trees, flushed,
//! and only then announced to subscribers.

use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};

use super::check::COMMITS_KEY;
use super::coordinators::action_key;
use super::events::append;
use super::format::{decode_counter, encode};
use super::runs::flow_key;
use super::{
    ActionRecord, CoordinatorRecord, Error, FlowRecord, Metastore, NewEvent, RunRecord, TxWrite, ViewLog, ViewRecord,
};

/// Everything one step of the scheduler writes, applied atomically.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    pub views: Vec<(String, ViewRecord)>,
    pub events: Vec<NewEvent>,
    pub runs: Vec<RunRecord>,
    /// (run id, view URL path, flow).
    pub flows: Vec<(String, String, FlowRecord)>,
    /// (coordinator name, record).
    pub coordinators: Vec<(String, CoordinatorRecord)>,
    pub actions: Vec<ActionRecord>,
    /// Incremental views' transaction log, written with the views'
    /// records that their transformations settled.
    pub txlog: Vec<TxWrite>,
    /// (view URL path, its last attempts' logs).
    pub logs: Vec<(String, ViewLog)>,
}

impl Commit {
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
            && self.events.is_empty()
            && self.runs.is_empty()
            && self.flows.is_empty()
            && self.coordinators.is_empty()
            && self.actions.is_empty()
            && self.txlog.is_empty()
            && self.logs.is_empty()
    }

    /// Appends `later`'s writes after this one's: applied as one commit,
    /// a record written by both ends as `later` writes it.
    pub fn extend(&mut self, later: Commit) {
        self.views.extend(later.views);
        self.events.extend(later.events);
        self.runs.extend(later.runs);
        self.flows.extend(later.flows);
        self.coordinators.extend(later.coordinators);
        self.actions.extend(later.actions);
        self.txlog.extend(later.txlog);
        self.logs.extend(later.logs);
    }
}

impl Metastore {
    /// Applies `commit` atomically and durably; returns the sequence numbers
    /// given to its events, in order.
    pub fn commit(&self, commit: &Commit) -> Result<Vec<u64>, Error> {
        let trees = (
            &self.meta,
            &self.views,
            &self.runs,
            &self.flows,
            &self.events,
            &self.coordinators,
            &self.actions,
            &self.txlog,
            &self.logs,
        );
        let result = trees.transaction(|(meta, views, runs, flows, events, coordinators, actions, txlog, logs)| {
            super::txlog::write(txlog, &commit.txlog)?;
            for (view, log) in &commit.logs {
                logs.insert(view.as_bytes(), encode(log))?;
            }
            for (name, record) in &commit.coordinators {
                coordinators.insert(name.as_bytes(), encode(record))?;
            }
            for action in &commit.actions {
                actions.insert(action_key(&action.coordinator, action.nominal), encode(action))?;
            }
            for (url_path, record) in &commit.views {
                views.insert(url_path.as_bytes(), encode(record))?;
            }
            for run in &commit.runs {
                runs.insert(run.id.as_bytes(), encode(run))?;
            }
            for (run, view, status) in &commit.flows {
                flows.insert(flow_key(run, view), encode(status))?;
            }
            // A malformed counter aborts the commit: counting on from zero
            // would hide lost commits from the check at open.
            let held = decode_counter(COMMITS_KEY, meta.get(COMMITS_KEY)?.as_deref())
                .map_err(ConflictableTransactionError::Abort)?;
            let count = held.unwrap_or(0) + 1;
            meta.insert(COMMITS_KEY, &count.to_be_bytes())?;
            Ok((append(meta, events, &commit.events)?, count))
        });
        let (sequences, count) = match result {
            Ok(done) => done,
            Err(TransactionError::Abort(e)) => return Err(e),
            Err(TransactionError::Storage(e)) => return Err(e.into()),
        };
        self.db.flush()?;
        self.note_commits(count);
        match sequences.last() {
            Some(last) => {
                self.appended.send_replace(last + 1);
            }
            None => self.appended.send_modify(|_| {}),
        }
        Ok(sequences)
    }
}

/// A damaged commit counter, as a torn write leaves it: every commit after
/// it aborts and writes nothing, for tests of what a failed commit leaves
/// behind in the layers above.
#[cfg(test)]
impl Metastore {
    pub(crate) fn damage_commit_counter(&self) {
        self.meta.insert(COMMITS_KEY, b"\x07".as_slice()).expect("writing the damaged counter");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metastore::ListenerRecord;
    use crate::metastore::fixtures::{event, materialized};
    use crate::model::{FlowStatus, ViewState};

    #[test]
    fn commits_survive_a_reopen_with_gapless_sequences() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Metastore::open(dir.path()).unwrap();
            let commit = Commit {
                views: vec![("s.d/Daily/A/2015/05/01".into(), materialized(10))],
                events: vec![
                    event("s.d/Daily/A/2015/05/01", ViewState::Waiting, ViewState::Transforming),
                    event("s.d/Daily/A/2015/05/01", ViewState::Transforming, ViewState::Materialized),
                ],
                runs: vec![RunRecord {
                    id: "r1".into(),
                    pattern: "s.d/Daily/A/2015/05/01".into(),
                    mode: crate::model::Mode::Default,
                    started: 1,
                    finished: None,
                    termination: None,
                    idle: 0,
                    full_refresh: false,
                    attempts: Default::default(),
                    action: None,
                    no_data: 0,
                    flow_counts: Default::default(),
                }],
                flows: vec![("r1".into(), "s.d/Daily/A/2015/05/01".into(), FlowStatus::Successful.into())],
                ..Commit::default()
            };
            assert_eq!(store.commit(&commit).unwrap(), [1, 2]);
        }
        let store = Metastore::open(dir.path()).unwrap();
        assert_eq!(store.view("s.d/Daily/A/2015/05/01").unwrap(), Some(materialized(10)));
        assert_eq!(store.view("s.d/Daily/A/2015/05/02").unwrap(), None);
        assert_eq!(store.next_sequence().unwrap(), 3);
        let more = Commit { events: vec![event("v", ViewState::Receive, ViewState::Waiting)], ..Commit::default() };
        assert_eq!(store.commit(&more).unwrap(), [3]);
        let events = store.events_from(2, 10).unwrap();
        assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(events[0].event.current, ViewState::Materialized);
        assert_eq!(store.run("r1").unwrap().unwrap().mode, crate::model::Mode::Default);
        assert_eq!(store.flows("r1").unwrap(), [("s.d/Daily/A/2015/05/01".to_string(), FlowStatus::Successful)]);
        assert_eq!(store.truncate_events(3).unwrap(), 2);
        assert_eq!(store.events_from(0, 10).unwrap().len(), 1);
        assert_eq!(store.first_sequence().unwrap(), 3);
        let record = ListenerRecord { cursor: 3, restarts: 2, ..ListenerRecord::default() };
        store.put_listener("audit", &record).unwrap();
        assert_eq!(store.listener("audit").unwrap(), Some(record));
        assert_eq!(store.listener("other").unwrap(), None);
    }

    #[test]
    fn a_malformed_counter_aborts_the_commit_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Metastore::open(dir.path()).unwrap();
        let view = "s.d/Daily/A/2015/05/01";
        let commit = Commit {
            views: vec![(view.into(), materialized(10))],
            events: vec![event(view, ViewState::Waiting, ViewState::Materialized)],
            ..Commit::default()
        };
        for key in [COMMITS_KEY, crate::metastore::events::SEQUENCE_KEY] {
            let name = String::from_utf8_lossy(key);
            let kept = store.meta.get(key).unwrap();
            store.meta.insert(key, b"\x00\x01\x02".as_slice()).unwrap();
            let expected = format!("metastore record `{name}` is unreadable: a counter is 8 bytes, this one 3");
            assert_eq!(store.commit(&commit).unwrap_err().to_string(), expected);
            assert_eq!(store.view(view).unwrap(), None, "{name}: nothing of the commit written");
            assert_eq!(store.events_from(0, 10).unwrap(), [], "{name}");
            assert_eq!(
                store.meta.get(key).unwrap().as_deref(),
                Some(b"\x00\x01\x02".as_slice()),
                "{name}: kept as found"
            );
            match kept {
                Some(kept) => store.meta.insert(key, kept).unwrap(),
                None => store.meta.remove(key).unwrap(),
            };
        }
        // Read outside a commit, the counters are as damaged, not a fresh count.
        store.meta.insert(crate::metastore::events::SEQUENCE_KEY, b"\x07".as_slice()).unwrap();
        assert_eq!(
            store.next_sequence().unwrap_err().to_string(),
            "metastore record `next-sequence` is unreadable: a counter is 8 bytes, this one 1"
        );
        store.meta.insert(COMMITS_KEY, b"\x07".as_slice()).unwrap();
        assert_eq!(
            store.commits().unwrap_err().to_string(),
            "metastore record `commits` is unreadable: a counter is 8 bytes, this one 1"
        );
    }
}
