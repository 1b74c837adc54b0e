//! The [`Scheduler`]: a façade over the book of views (`views`: lattice,
//! slots, memo, table), the metastore, the plugins' version checksums, the
//! permits and the staging area. Outside runs it instantiates, invalidates
//! and plans (in `plan`); runs are in `run`. Invariant: it changes the book only
//! through its methods, and adopts a record only after committing it.
use std::collections::HashSet;
use std::sync::Arc;

use super::Error;
use super::memo::Memo;
use super::table::{SharedTable, Table};
use super::task::{Executor, Permits};
use super::transition::{Action, Event, FlagCheck, transition};
use super::views::{Judgement, MemoChange, Slot, Standing, Views, flag_check};
use crate::catalog::{Catalog, Transformation, pattern};
use crate::lattice::{self, Lattice, Resolution, ViewId};
use crate::metastore::{Commit, Metastore, RunRecord, SchemaChange, ViewRecord};
use crate::model::{Termination, ViewState};
use crate::plugins::Plugins;
use crate::storage::{Key, Sighting};

/// The action an event of a recovered publish ends with (see
/// `Scheduler::adopt_published`).
pub const RECOVERED: &str = "recover-published";

/// What an invalidate request did, by URL path.
#[derive(Debug, Clone, Default)]
pub struct Invalidation {
    pub invalidated: Vec<String>,
    /// Views in flight, which cannot be invalidated now, with the reason.
    pub refused: Vec<(String, String)>,
}

/// An incremental view's transaction log, for `trellis txlog`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxLogView {
    pub view: String,
    /// Whether its plugin runs it incrementally (else it is rebuilt whole
    /// and keeps no log).
    pub incremental: bool,
    pub head: Option<crate::metastore::TxHead>,
    pub entries: Vec<crate::metastore::TxEntry>,
}

/// What a reset of transaction logs did, by URL path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxReset {
    pub reset: Vec<String>,
    /// Views in flight, which cannot be reset now, with the reason.
    pub refused: Vec<(String, String)>,
}

pub struct Scheduler {
    pub(super) catalog: Arc<Catalog>,
    /// The book of views: lattice, slots, memo, table.
    pub(super) views: Views,
    pub(super) store: Arc<Metastore>,
    /// What runs transformations: plugins, engines, permits, staging,
    /// the wait before a retry.
    pub(super) executor: Executor,
    pub(super) progress: Option<Box<dyn FnMut(Progress) + Send>>,
    pub(super) run_started: Option<Box<Announce>>,
    /// Writes that need not be durable on their own (an action RUNNING, an
    /// action's end after its run's, both recovered from the run's record
    /// after a crash): they go with the next commit, or with
    /// [`Scheduler::commit_deferred`] before the scheduler waits, saving a
    /// flush each.
    pub(super) deferred: Commit,
    /// The start time (the id) of the last run this scheduler recorded.
    pub(super) last_run_started: i64,
    /// Where every time it records comes from (runs, events, timestamps;
    /// its coordinators' actions too): `TRELLIS_NOW` when set, else the
    /// system clock, or the clock a service or `coordinate` gives it.
    pub(super) clock: crate::clock::Clock,
}

/// How far a run has come: views settled, of views known to the run so far
/// (the number grows as dependencies are discovered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub settled: usize,
    pub known: usize,
    /// Transformations holding a permit.
    pub running: usize,
    /// Transformations waiting for a permit, memory or a retry.
    pub waiting: usize,
}

/// Told each run's id as the run starts.
type Announce = dyn FnMut(&str) + Send;

/// An action's views, its inputs (external views), the done flags its
/// `latest()` found, and its `latest(n)` that found no instance, each as
/// `latest(n) of TYPE` (see [`Scheduler::action_inputs`]).
pub(super) type ActionInputs = (Vec<ViewId>, Vec<ViewId>, Vec<String>, Vec<String>);

/// How a run resolves `latest()` (see [`Scheduler::latest_at`]).
#[derive(Debug, Clone)]
pub(super) struct LatestAt {
    pub evaluation_time: crate::catalog::EvaluationTime,
    /// The run's actual time: when it began, or its action's. `latest()`
    /// counts from it under `actual`, and `${actualTime()}` is it.
    pub actual: chrono::DateTime<chrono::Utc>,
    /// An action's run under `actual`: the done flags its `latest()` found
    /// when the action was created, the only ones it may find now.
    pub pinned: Option<Arc<HashSet<std::path::PathBuf>>>,
}

impl Scheduler {
    /// Opens the metastore, registers schema checksums (dropping the
    /// metadata of types whose schema changed), makes sure every plugin the
    /// view types use is loaded and fits, and computes each type's version
    /// checksum.
    pub async fn open(catalog: Arc<Catalog>, plugins: Arc<Plugins>) -> Result<Scheduler, Error> {
        plugins.ready_for(&catalog)?;
        let versions = plugins.versions(&catalog).await?;
        let mut scheduler = Scheduler::open_records(catalog.clone())?;
        scheduler.executor.set_plugins(&catalog, plugins, versions);
        Ok(scheduler)
    }

    /// Opens the metastore and registers schema checksums, without plugins:
    /// enough to instantiate views and invalidate them, not to materialize
    /// or plan.
    pub fn open_records(catalog: Arc<Catalog>) -> Result<Scheduler, Error> {
        // The commands that take the time check `TRELLIS_NOW` and refuse an
        // unreadable one; here it is only read.
        let clock = crate::clock::Clock::from_environment().unwrap_or(crate::clock::Clock::System);
        let store = Arc::new(Metastore::open(&catalog.settings.metastore)?);
        let mut schema_changed = HashSet::new();
        for view_type in catalog.types() {
            if let SchemaChange::Changed { dropped } =
                store.register_schema(&view_type.name, &view_type.schema_checksum)?
            {
                tracing::info!(view_type = %view_type.name, dropped, "schema changed; its views will be rebuilt");
                schema_changed.insert(view_type.id);
            }
        }
        let executor = Executor::open(&catalog)?;
        reconcile_txlog(executor.staging().storage(), &store, clock.millis())?;
        Ok(Scheduler {
            views: Views::new(catalog.clone(), schema_changed, executor.staging().shared()),
            store,
            executor,
            catalog,
            progress: None,
            run_started: None,
            deferred: Commit::default(),
            last_run_started: 0,
            clock,
        })
    }

    /// Records every time by `clock` from now on (a service's, or the time
    /// `coordinate --now` acts at), so that runs, events and actions agree.
    pub fn set_clock(&mut self, clock: crate::clock::Clock) {
        self.clock = clock;
    }

    /// The clock it records times by.
    pub fn clock(&self) -> &crate::clock::Clock {
        &self.clock
    }

    /// Whether it has the plugins and version checksums, which
    /// materializing and planning need.
    pub(super) fn check_plugins(&self) -> Result<(), Error> {
        self.executor.check_plugins()
    }

    /// A type's current version checksum.
    pub(super) fn version(&self, id: ViewId) -> &str {
        self.executor.version(self.views.lattice().view_type(id).id)
    }

    /// Calls `report` after every step of a run, e.g. for a progress bar.
    pub fn on_progress(&mut self, report: impl FnMut(Progress) + Send + 'static) {
        self.progress = Some(Box::new(report));
    }

    /// Calls `announce` with each run's id once the run is recorded, e.g.
    /// so that another process can find and stop it.
    pub fn on_run_started(&mut self, announce: impl FnMut(&str) + Send + 'static) {
        self.run_started = Some(Box::new(announce));
    }

    /// A view's URL path.
    pub(super) fn url(&self, id: ViewId) -> Arc<str> {
        self.views.url(id).clone()
    }

    /// The project's coordinators, as declared.
    pub(super) fn coordinators(&self) -> &[crate::catalog::coordinator::Coordinator] {
        &self.catalog.coordinators
    }

    /// The global transformation limit, then each plugin's.
    pub fn permits(&self) -> Vec<Permits> {
        self.executor.permits()
    }

    /// Commits `commit` durably, after the writes deferred so far.
    pub(super) fn commit(&mut self, commit: Commit) -> Result<Vec<u64>, Error> {
        // Most commits have nothing deferred before them: no copy then.
        if self.deferred.is_empty() {
            return Ok(self.store.commit(&commit)?);
        }
        let mut all = std::mem::take(&mut self.deferred);
        all.extend(commit);
        Ok(self.store.commit(&all)?)
    }

    /// Keeps `commit` for the next commit (see [`Scheduler::deferred`]).
    pub(super) fn defer(&mut self, commit: Commit) {
        self.deferred.extend(commit);
    }

    /// Commits what was deferred, if anything: before the scheduler waits,
    /// and before the metastore is read for what it says now.
    pub fn commit_deferred(&mut self) -> Result<(), Error> {
        if !self.deferred.is_empty() {
            let deferred = std::mem::take(&mut self.deferred);
            self.store.commit(&deferred)?;
        }
        Ok(())
    }

    /// The metastore, shared with the listeners that follow its event log.
    pub fn metastore(&self) -> Arc<Metastore> {
        self.store.clone()
    }

    /// The view storage it reads and publishes in, shared with the API's
    /// pages that list a view's files.
    pub fn storage(&self) -> crate::storage::Storage {
        self.executor.staging().shared()
    }

    pub fn lattice(&self) -> &Lattice {
        self.views.lattice()
    }

    /// Limits how many views the scheduler holds, and how many one request
    /// may add with their dependencies (a server's reads instantiate too).
    pub fn set_capacity(&mut self, capacity: lattice::Capacity) {
        self.views.set_capacity(capacity);
    }

    /// Records a new run, not started yet, with an id that sorts by start
    /// time and never repeats, even for runs started in the same millisecond.
    pub fn new_run(&mut self, pattern_text: &str, mode: super::Mode, full_refresh: bool) -> Result<RunRecord, Error> {
        self.new_run_with(pattern_text, mode, full_refresh, None, |_| Commit::default())
    }

    /// Records a new run as [`Scheduler::new_run`] does, started by a
    /// coordinator's `action` when there is one, in one commit with what
    /// `with` makes of the run's id (the action's SUBMITTED, naming its
    /// run, so that no crash separates the two; deferred, see below).
    pub(super) fn new_run_with(
        &mut self,
        pattern_text: &str,
        mode: super::Mode,
        full_refresh: bool,
        action: Option<(String, i64)>,
        with: impl FnOnce(&str) -> Commit,
    ) -> Result<RunRecord, Error> {
        // Ids sort by start time and never repeat: after the last this
        // scheduler gave (runs can start faster than one a millisecond, and
        // walking the store from the clock each time would cost a lookup per
        // id given since; so no deferred run can have it either), and not
        // one the store holds.
        let now = self.clock.millis();
        let mut started = now.max(self.last_run_started + 1);
        while self.store.run(&format!("{started:x}"))?.is_some() {
            started += 1;
        }
        self.last_run_started = started;
        let run = RunRecord {
            id: format!("{started:x}"),
            pattern: pattern_text.to_string(),
            mode,
            started: now,
            finished: None,
            termination: None,
            idle: 0,
            full_refresh,
            attempts: Default::default(),
            action,
            no_data: 0,
            flow_counts: Default::default(),
        };
        let mut commit = with(&run.id);
        commit.runs.push(run.clone());
        // An action's run is recorded with the run's first commit, which
        // comes before any of its transformations starts (or before the
        // scheduler waits): lost in a crash, it had not started, and the
        // action is READY again. A run asked for by hand is durable at once.
        if run.action.is_some() {
            self.defer(commit);
        } else {
            self.commit(commit)?;
        }
        Ok(run)
    }

    /// Ends a run that never started (or could not go on).
    pub fn finish_unstarted(&mut self, mut run: RunRecord, termination: Termination) -> Result<(), Error> {
        run.finished = Some(self.clock.millis());
        run.termination = Some(termination);
        self.commit(Commit { runs: vec![run], ..Commit::default() })?;
        self.with_table(|table| table.counters.runs_finished += 1);
        Ok(())
    }

    /// Instantiates `pattern` and loads the records of new views.
    pub fn instantiate(&mut self, pattern_text: &str) -> Result<Vec<ViewId>, Error> {
        self.instantiate_at(pattern_text, self.clock.now())
    }

    /// Instantiates `pattern` with `latest()` resolved at `evaluation`.
    pub(super) fn instantiate_at(
        &mut self,
        pattern_text: &str,
        evaluation: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<ViewId>, Error> {
        let pattern = pattern::parse(pattern_text)?;
        let storage = self.executor.staging().shared();
        let on_disk = lattice::on_disk(&*storage);
        let resolution = Resolution { evaluation_time: evaluation, exists: &on_disk };
        let addressed = self.views.instantiate(&pattern, &resolution)?;
        self.take_in_new_views()?;
        Ok(addressed)
    }

    /// Loads the records of the views added to the lattice since the last
    /// call (by instantiating, or by a `latest()` resolved to an instance
    /// new to it), and gives them rows in the table and the memo.
    fn take_in_new_views(&mut self) -> Result<(), Error> {
        // Only views new to the lattice need their records: the others were
        // loaded by an earlier call.
        let new = self.views.new_views();
        if new.is_empty() {
            return Ok(());
        }
        let known = new.start;
        // A record that cannot be read is the error, after every new view
        // has its slot, row and memo entry, so that no view is half taken in.
        let mut failed = None;
        let mut recovered = Commit::default();
        let sighted = self.sight_published(new.clone());
        for index in new {
            let url: Arc<str> = self.views.lattice().url_path(ViewId(index as u32)).into();
            let mut record = match self.store.view(&url) {
                Ok(record) => record.unwrap_or_default(),
                Err(e) => {
                    failed.get_or_insert(e);
                    ViewRecord::default()
                }
            };
            // In-flight states do not survive the process that had them.
            record.state = super::record::previous_stable(record.state, &record);
            let sighting = sighted.get(index - known).copied().unwrap_or(Sighting::Unknown);
            let record = self.adopt_published(ViewId(index as u32), &url, record, sighting, &mut recovered);
            self.views.take_in(url, record);
        }
        self.views.taken_in(known);
        if !recovered.is_empty() {
            // Lost in a crash, it is found again at the next load.
            self.commit(recovered)?;
        }
        failed.map_or(Ok(()), |e| Err(e.into()))
    }

    /// Where the store looks at many flags for fewer requests than one
    /// each (an object store: a listing per month), the flags of the new
    /// views `range` that a plugin publishes, for [`Scheduler::adopt_published`]
    /// to look for an unrecorded publish with: a process's first load of a
    /// lattice then costs a listing per prefix, not a HEAD per view. Empty
    /// (all unknown) on a local root, whose stat is cheaper than anything.
    fn sight_published(&self, range: std::ops::Range<usize>) -> Vec<Sighting> {
        let storage = self.executor.staging().storage();
        if storage.as_object().is_none() && storage.as_roots().is_none() {
            return Vec::new();
        }
        let lattice = self.views.lattice();
        let published = |id: ViewId| matches!(lattice.view_type(id).transformation, Transformation::Plugin { .. });
        let ids: Vec<ViewId> = range.map(|index| ViewId(index as u32)).collect();
        let keys: Vec<Key> =
            ids.iter().filter(|&&id| published(id)).map(|&id| storage.key(&lattice.done_flag_path(id))).collect();
        let mut sighted = storage.sight(&keys).into_iter();
        ids.into_iter()
            .map(|id| if published(id) { sighted.next().unwrap_or(Sighting::Unknown) } else { Sighting::Unknown })
            .collect()
    }

    /// A view's record, with an output that an attempt published and its
    /// run never recorded (the process ended between the rename and the
    /// commit) taken in: the record, event and flow that commit would have
    /// written go into `commit`, so that the view is not built again.
    /// Only output exactly as that attempt published it counts (see
    /// `publish::recognise`), of a run recorded and never ended, under the
    /// type's schema as it is; anything else leaves the record as it is.
    /// `sighting` is its flag as a listing of its month saw it, if one did.
    /// An adopted view's done flag is written again where the process
    /// ended before it (an object store writes it after the commit).
    fn adopt_published(
        &self,
        id: ViewId,
        url: &Arc<str>,
        record: ViewRecord,
        sighting: Sighting,
        commit: &mut Commit,
    ) -> ViewRecord {
        if !matches!(self.views.lattice().view_type(id).transformation, Transformation::Plugin { .. }) {
            return record;
        }
        let data_path = self.views.lattice().data_path(id);
        let Some(found) = super::publish::recognise(
            self.executor.staging().storage(),
            url,
            &record,
            &data_path,
            &self.views.lattice().done_flag_path(id),
            sighting,
        ) else {
            return record;
        };
        let receipt = found.receipt;
        // Only a run that never ended lost a commit: a record missing for
        // another reason (dropped for a new schema, a metastore restored
        // from before the run, or started anew) is not brought back.
        let interrupted = match self.store.run(&receipt.run) {
            Ok(run) => run.is_some_and(|run| run.termination.is_none()),
            Err(e) => {
                tracing::warn!(view = %url, "cannot read run {}; its output is not adopted: {e}", receipt.run);
                false
            }
        };
        if !interrupted || receipt.schema != self.views.lattice().view_type(id).schema_checksum {
            return record;
        }
        // Killed between the commit and the flag: outside readers wait for it.
        let storage = self.executor.staging().storage();
        let done_flag = &self.views.lattice().view_type(id).done_flag;
        match storage.restore_flag(&storage.key(&data_path), done_flag) {
            Ok(true) => tracing::info!(view = %url, "its done flag {done_flag} written again, for outside readers"),
            Ok(false) => {}
            Err(e) => tracing::warn!(view = %url, "cannot write its done flag again for outside readers: {e}"),
        }
        let facts = super::record::Facts {
            mode: super::Mode::Default,
            version: &receipt.version,
            produced_at: Some(receipt.timestamp),
            now: receipt.timestamp,
            settled: receipt.settled,
            no_data_before_run: false,
            flag_found: Some(Some(found.flag)),
            counters: receipt.counters.as_ref(),
        };
        let actions = [Action::RecordMaterialized, Action::NotifyDependents];
        let materialized = ViewRecord { state: ViewState::Materialized, ..record };
        let recorded = super::record::record(materialized, &actions, &facts);
        let mut adopted = recorded.record;
        if receipt.latest.is_some() {
            adopted.latest = receipt.latest.clone();
        }
        tracing::info!(
            view = %url, run = %receipt.run, attempt = receipt.attempt,
            "published before its process ended: recorded as it is, not built again"
        );
        let run: Arc<str> = receipt.run.as_str().into();
        // As the run's commit would have written it, from the state it left
        // the view in; the last action says it was recovered.
        let now = self.clock.millis();
        let mut event =
            new_event(url, ViewState::Transforming, ViewState::Materialized, &actions, Some(&run), None, now);
        event.actions.push(RECOVERED.into());
        commit.events.push(event);
        commit.views.push((url.to_string(), adopted.clone()));
        let flow = crate::metastore::FlowRecord {
            status: crate::model::FlowStatus::Successful,
            error: None,
            counters: recorded.counters,
            reason: None,
        };
        commit.flows.push((receipt.run, url.to_string(), flow));
        // An incremental view's first commit has no log's head yet for the
        // open's reconciliation to find: its log is written from its marker here.
        if let Some(marker) = super::txlog::read_marker(self.executor.staging().storage(), &data_path)
            && marker.view == **url
        {
            match (self.store.tx_head(url), self.store.tx_entries(url)) {
                (Ok(head), Ok(existing)) if head.as_ref().is_none_or(|head| marker.generation > head.generation) => {
                    let change = super::txlog::commit_change(&marker, "reconcile");
                    commit.events.push(super::txlog::event(url, ViewState::Materialized, change, Some(&run), now));
                    commit.txlog.push(super::txlog::write_of(&marker, head, &existing, &data_path));
                }
                (Ok(_), Ok(_)) => {}
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(view = %url, "cannot read the transaction log; the next run reconciles it: {e}");
                }
            }
        }
        adopted
    }

    /// Resolves a view's `latest(n)` dependencies again, at `evaluation`
    /// (seed 002: under `present` the wall clock of each check, under
    /// `actual` the run's actual time), against the done flags on disk now.
    /// Only views that declare `latest(n)` pay for it. An edge that moved
    /// is a change the memo and the table are told of: the view is dirty,
    /// and the memo's reverse edges follow the new instance. A resolution
    /// that cannot be made (the lattice is full) keeps the old edges, with
    /// a warning. Returns whether the edges changed.
    pub(super) fn resolve_latest(&mut self, id: ViewId, evaluation: chrono::DateTime<chrono::Utc>) -> bool {
        let storage = self.executor.staging().shared();
        let on_disk = lattice::on_disk(&*storage);
        self.resolve_latest_with(id, evaluation, &on_disk)
    }

    /// [`Scheduler::resolve_latest`], with `exists` saying which instances
    /// have data (the flags on disk, or those an action found at its creation).
    fn resolve_latest_with(
        &mut self,
        id: ViewId,
        evaluation: chrono::DateTime<chrono::Utc>,
        exists: &dyn Fn(&Lattice, &lattice::ResolvedView) -> bool,
    ) -> bool {
        if !self.views.lattice().has_latest(id) {
            return false;
        }
        let resolution = Resolution { evaluation_time: evaluation, exists };
        let previous = match self.views.reresolve_latest(id, &resolution) {
            Ok(Some(previous)) => previous,
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!(view = %self.views.url(id), "latest() not resolved again: {e}");
                return false;
            }
        };
        if let Err(e) = self.take_in_new_views() {
            // The edges moved already: the instance is taken as never seen.
            tracing::warn!(view = %self.views.url(id), "reading the record of latest()'s instance: {e}");
        }
        self.views.rewired(id, &previous);
        true
    }

    /// How a run of `record` resolves `latest()`: under `present`, at each
    /// check by the clock; under `actual`, at the run's actual time, which
    /// for a coordinator's action is the action's (its creation, or its
    /// rerun), against the flags it found then (seed 002: an action created
    /// on 01-10 never reads an instance that arrived on 01-11). The
    /// coordinator's own `evaluation_time` rules its actions' runs.
    /// Its actual time (`${actualTime()}`) is the action's recorded one,
    /// or for a run of no action when it began by the clock.
    pub(super) fn latest_at(&self, record: &RunRecord) -> LatestAt {
        let started = chrono::DateTime::from_timestamp_millis(record.started).unwrap_or_else(|| self.clock.now());
        let project = self.catalog.settings.evaluation_time;
        let Some((coordinator, nominal)) = &record.action else {
            return LatestAt { evaluation_time: project, actual: started, pinned: None };
        };
        let declared = self.catalog.coordinators.iter().find(|c| &c.name == coordinator);
        let evaluation_time = declared.map_or(project, |c| c.evaluation_time);
        match self.store.action(coordinator, *nominal).ok().flatten() {
            Some(action) => LatestAt {
                evaluation_time,
                actual: chrono::DateTime::from_timestamp_millis(action.actual).unwrap_or(started),
                pinned: match evaluation_time {
                    crate::catalog::EvaluationTime::Present => None,
                    crate::catalog::EvaluationTime::Actual => {
                        action.latest_found.map(|flags| Arc::new(self.storage_paths(&flags)))
                    }
                },
            },
            None => LatestAt { evaluation_time, actual: started, pinned: None },
        }
    }

    /// Flags recorded relative to the storage root, as paths.
    pub(super) fn storage_paths(&self, flags: &[String]) -> HashSet<std::path::PathBuf> {
        flags.iter().map(|flag| self.catalog.settings.storage.join(flag)).collect()
    }

    /// Resolves a view's `latest()` again as the run's `at` says.
    pub(super) fn resolve_latest_at(&mut self, id: ViewId, at: &LatestAt) -> bool {
        match (at.evaluation_time, &at.pinned) {
            (crate::catalog::EvaluationTime::Present, _) => {
                let now = self.clock.now();
                self.resolve_latest(id, now)
            }
            (crate::catalog::EvaluationTime::Actual, None) => self.resolve_latest(id, at.actual),
            (crate::catalog::EvaluationTime::Actual, Some(pinned)) => {
                let pinned = pinned.clone();
                let exists = move |l: &Lattice, v: &lattice::ResolvedView<'_>| pinned.contains(&l.done_flag_path_of(v));
                self.resolve_latest_with(id, at.actual, &exists)
            }
        }
    }

    /// Resolves `latest()` again for the views and all they depend on,
    /// following the edges as they come out, as a run starting now would
    /// find them: what `plan` looks at. Views in flight keep theirs (the
    /// run has asked them). Nothing to do for a project without `latest()`.
    pub(super) fn resolve_latest_below(&mut self, addressed: &[ViewId]) {
        if !self.views.lattice().any_latest() {
            return;
        }
        let now = self.clock.now();
        let mut seen = vec![false; self.views.lattice().len()];
        let mut stack = addressed.to_vec();
        while let Some(id) = stack.pop() {
            if seen.len() < self.views.lattice().len() {
                seen.resize(self.views.lattice().len(), false);
            }
            if std::mem::replace(&mut seen[id.0 as usize], true) {
                continue;
            }
            let in_flight =
                matches!(self.state_of(id), ViewState::Waiting | ViewState::Transforming | ViewState::Retrying);
            if !in_flight {
                self.resolve_latest(id, now);
            }
            stack.extend(self.views.lattice().dependencies(id).iter().copied());
        }
    }

    /// The URL paths of the instances a view's `latest(n)` declarations
    /// resolve to now (see [`Views::latest_read`]).
    pub(super) fn latest_read(&self, id: ViewId) -> Option<Vec<String>> {
        self.views.latest_read(id)
    }

    /// Remembers which views are up to date between runs and watches
    /// external data, so that a run visits only what may have changed: for
    /// a scheduler that lives across requests (a server, a benchmark).
    /// Where inotify is unavailable, every run checks every view, as before.
    pub fn remember_freshness(&mut self) {
        match Memo::new(&self.executor.staging().shared()) {
            Ok(memo) => self.views.remember(memo),
            Err(e) => tracing::warn!("cannot watch external data ({e}); every run checks every view"),
        }
    }

    /// A coordinator action's views and inputs: instantiates `pattern` with
    /// `latest()` resolved at `evaluation`, and returns the views it
    /// addresses, the external views among everything they depend on and
    /// the done flags `latest()` found (relative to the storage root), and
    /// the `latest(n)` below it that found no instance: seed 002's action
    /// waits for those as for a missing input. With `pinned`, `latest()`
    /// finds only those flags (what it found when the action was created),
    /// else those on disk now.
    pub(super) fn action_inputs(
        &mut self,
        pattern_text: &str,
        evaluation: chrono::DateTime<chrono::Utc>,
        pinned: Option<&[String]>,
    ) -> Result<ActionInputs, Error> {
        let addressed = self.instantiate_at(pattern_text, evaluation)?;
        let found = std::cell::RefCell::new(std::collections::BTreeSet::new());
        let mut unfound = std::collections::BTreeSet::new();
        if self.views.lattice().any_latest() {
            let pinned = pinned.map(|flags| self.storage_paths(flags));
            let storage = self.catalog.settings.storage.clone();
            let staging = self.executor.staging().shared();
            let presence = staging.presence();
            let exists = |l: &Lattice, v: &lattice::ResolvedView<'_>| {
                let flag = l.done_flag_path_of(v);
                let there = match &pinned {
                    Some(pinned) => pinned.contains(&flag),
                    None => presence.exists(&staging.key(&flag)),
                };
                if there && let Ok(relative) = flag.strip_prefix(&storage) {
                    found.borrow_mut().insert(relative.to_string_lossy().into_owned());
                }
                there
            };
            // Every `latest()` below the action, resolved again (views new
            // to the lattice were resolved against the disk as it is), the
            // edges followed as they come out. A view another run has in
            // flight keeps its edges, and what they found is recorded.
            let mut seen = HashSet::new();
            let mut stack = addressed.clone();
            while let Some(id) = stack.pop() {
                if !seen.insert(id) {
                    continue;
                }
                if self.views.lattice().has_latest(id) {
                    let in_flight =
                        matches!(self.state_of(id), ViewState::Waiting | ViewState::Transforming | ViewState::Retrying);
                    if in_flight {
                        for dependency in self.views.lattice().latest_dependencies(id) {
                            if let Ok(relative) = self.views.lattice().done_flag_path(dependency).strip_prefix(&storage)
                            {
                                found.borrow_mut().insert(relative.to_string_lossy().into_owned());
                            }
                        }
                    } else {
                        self.resolve_latest_with(id, evaluation, &exists);
                    }
                }
                stack.extend(self.views.lattice().dependencies(id).iter().copied());
            }
            for id in seen {
                let declarations = &self.views.lattice().view_type(id).dependencies;
                for name in self.views.lattice().unsatisfied(id) {
                    let Some(declaration) = declarations.iter().find(|d| d.name == name) else { continue };
                    if let crate::catalog::TimeSelection::Latest(n) = declaration.time {
                        unfound.insert(format!("latest({n}) of {}", self.catalog.get(declaration.target).name));
                    }
                }
            }
        }
        let inputs = self
            .views
            .lattice()
            .closure(&addressed)
            .into_iter()
            .filter(|&id| matches!(self.views.lattice().view_type(id).transformation, Transformation::External))
            .collect();
        Ok((addressed, inputs, found.into_inner().into_iter().collect(), unfound.into_iter().collect()))
    }

    /// Whether an external view's done flag is there now. It is watched
    /// first (when the scheduler watches at all), so that a flag appearing
    /// after this look wakes whoever waits on the watches.
    pub(super) fn input_present(&mut self, id: ViewId) -> bool {
        let flag = self.views.lattice().done_flag_path(id);
        self.views.watch(id, &flag);
        self.executor.staging().exists(&flag)
    }

    /// Whether an external view's done flag is not the one its record
    /// holds (it was delivered again since the last run read it). Watched
    /// first, as in [`Scheduler::input_present`].
    pub(super) fn input_redelivered(&mut self, id: ViewId) -> bool {
        let flag = self.views.lattice().done_flag_path(id);
        self.views.watch(id, &flag);
        let record = self.views.record(id);
        record.done_flag.is_some() && flag_check(record, self.views.flag_identity(id)) == FlagCheck::Changed
    }

    /// Whether a change to an external view's flag since it was last looked
    /// at would have been seen by the watches: false without watches, or
    /// once a change has been drained (see `Memo::drain`).
    pub(super) fn input_watched(&self, id: ViewId) -> bool {
        self.views.is_watched(id)
    }

    /// The watches' descriptor, for waiting on it (a copy), when the
    /// scheduler watches.
    pub(super) fn watches(&self) -> Option<std::os::fd::OwnedFd> {
        self.views.watches()
    }

    /// Applies the changes the watches have queued.
    pub(super) fn drain_watches(&mut self) {
        self.views.drain_watches();
    }

    /// How often the watches must be polled (an object store's), if they are.
    pub(super) fn watch_poll_interval(&self) -> Option<std::time::Duration> {
        self.views.watches_polled().then(|| self.catalog.settings.s3.poll_interval())
    }

    /// Polls the watches (an object store's) and applies what changed: a
    /// server's poll, at its interval (also the benchmarks').
    pub fn poll_watches(&mut self) {
        let asked = self.views.poll_watches();
        tracing::debug!(
            "polled the object store's awaited flags: {} HEAD, {} LIST ({} pages), {} changed",
            asked.heads,
            asked.lists,
            asked.pages,
            asked.changed
        );
    }

    /// Shares a live table of the views, runs and transformations for
    /// readers that must not wait for the loop.
    pub fn share_table(&mut self) -> SharedTable {
        self.views.share_table()
    }

    /// Copies the views' slots into the shared table (see [`Views::refresh_table`]).
    pub(super) fn refresh_table(&self, ids: impl IntoIterator<Item = ViewId>) {
        self.views.refresh_table(ids);
    }

    pub(super) fn with_table(&self, change: impl FnOnce(&mut Table)) {
        self.views.with_table(change);
    }

    /// A view's state now.
    pub(super) fn state_of(&self, id: ViewId) -> ViewState {
        self.views.state_of(id)
    }

    /// Invalidates the views of `pattern` (and with `dependencies`, what
    /// they depend on). Returns the views refused because they are in
    /// flight, with the reason. `settled_by_run` says which views the run
    /// in progress, if any, has settled.
    pub fn invalidate(
        &mut self,
        pattern_text: &str,
        dependencies: bool,
        settled_by_run: impl Fn(ViewId) -> bool,
    ) -> Result<Invalidation, Error> {
        let addressed = self.instantiate(pattern_text)?;
        let targets = if dependencies { self.views.lattice().closure(&addressed) } else { addressed };
        self.invalidate_views(targets, None, settled_by_run)
    }

    /// Invalidates `targets`; an incremental view's log is reset with it,
    /// whole or only `source`'s entries.
    fn invalidate_views(
        &mut self,
        targets: Vec<ViewId>,
        source: Option<&str>,
        settled_by_run: impl Fn(ViewId) -> bool,
    ) -> Result<Invalidation, Error> {
        let mut commit = Commit::default();
        let (mut done, mut refused, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        let now = self.clock.millis();
        for id in targets {
            let slot = self.views.slot(id);
            // Dependents in this run may have taken it as it is already;
            // invalidating it under them would build them without it.
            if settled_by_run(id) {
                let reason = "it was settled by the run in progress; invalidate it once that run ends";
                refused.push((slot.url.to_string(), reason.into()));
                continue;
            }
            let (state, actions) = transition(slot.record.state, &Event::Invalidate);
            // Refused or not, an application of the state machine is an event.
            commit.events.push(new_event(&slot.url, slot.record.state, state, &actions, None, None, now));
            if let Some(Action::Refuse { reason }) = actions.first() {
                refused.push((slot.url.to_string(), reason.clone()));
                continue;
            }
            let record = ViewRecord { state, invalidated: true, ..slot.record.clone() };
            let url = slot.url.to_string();
            commit.views.push((url.clone(), record.clone()));
            // Invalidated is rebuilt from nothing: its log starts over.
            if self.views.lattice().view_type(id).incremental {
                let (write, event) = self.txlog_reset(id, source)?;
                commit.txlog.push(write);
                commit.events.push(event);
            }
            done.push(url);
            changed.push((id, record));
        }
        self.commit(commit)?;
        // Adopted once committed; readers of a server's table see it at once.
        for (id, record) in &changed {
            let network_retry = self.views.slot(*id).network_retry.clone();
            self.views.adopt(*id, record.clone(), record.state, network_retry);
            self.views.change_memo(*id, MemoChange::Dirty);
        }
        self.refresh_table(changed.into_iter().map(|(id, _)| id));
        Ok(Invalidation { invalidated: done, refused })
    }

    /// Whether a view of a type declared incremental runs incrementally:
    /// whether its plugin exports `transform-incremental` (taken to, when
    /// the scheduler was opened without plugins). `None` for a view whose
    /// type is not declared incremental.
    pub(super) fn merges(&self, id: ViewId) -> Option<bool> {
        let view_type = self.views.lattice().view_type(id);
        if !view_type.incremental {
            return None;
        }
        let plugin = view_type.transformation.plugin()?;
        Some(self.executor.is_incremental(plugin))
    }

    /// The transaction logs of the incremental views `pattern` addresses,
    /// or without one, of every view the metastore has a log for.
    pub fn txlog(&mut self, pattern_text: Option<&str>) -> Result<Vec<TxLogView>, Error> {
        // What a run has deferred is part of what the log says now.
        self.commit_deferred()?;
        let addressed = match pattern_text {
            Some(pattern) => self.instantiate(pattern)?,
            None => {
                let mut ids = Vec::new();
                for (view, _) in self.store.tx_heads()? {
                    // A view of a type no longer declared has a log no one reads.
                    if let Ok(found) = self.instantiate(&view) {
                        ids.extend(found);
                    }
                }
                ids
            }
        };
        let mut views = Vec::new();
        for id in addressed {
            let Some(merges) = self.merges(id) else { continue };
            let url = self.views.url(id).to_string();
            views.push(TxLogView {
                incremental: merges,
                head: self.store.tx_head(&url)?,
                entries: self.store.tx_entries(&url)?,
                view: url,
            });
        }
        Ok(views)
    }

    /// Resets the transaction logs of the incremental views of `pattern`,
    /// whole or only `source`'s entries, and invalidates them, so that
    /// their next runs read everything (or that source) again. Views in
    /// flight, or settled by the run in progress, are refused, as
    /// invalidation refuses them.
    pub fn reset_txlog(
        &mut self,
        pattern_text: &str,
        source: Option<&str>,
        settled_by_run: impl Fn(ViewId) -> bool,
    ) -> Result<TxReset, Error> {
        self.commit_deferred()?;
        let addressed = self.instantiate(pattern_text)?;
        let incremental: Vec<ViewId> =
            addressed.into_iter().filter(|&id| self.views.lattice().view_type(id).incremental).collect();
        if incremental.is_empty() {
            return Err(Error::TxLog(format!("`{pattern_text}` addresses no view of an incremental type")));
        }
        if let Some(source) = source {
            for &id in &incremental {
                let view_type = self.views.lattice().view_type(id);
                let names: Vec<&str> =
                    view_type.dependencies.iter().filter(|d| d.incremental).map(|d| d.name.as_str()).collect();
                if !names.contains(&source) {
                    return Err(Error::TxLog(format!(
                        "{} reads no source `{source}` incrementally (its incremental sources: {})",
                        view_type.name,
                        if names.is_empty() { "none".to_string() } else { names.join(", ") }
                    )));
                }
            }
        }
        let done = self.invalidate_views(incremental, source, settled_by_run)?;
        Ok(TxReset { reset: done.invalidated, refused: done.refused })
    }

    /// A reset of one view's log, and its event.
    fn txlog_reset(
        &self,
        id: ViewId,
        source: Option<&str>,
    ) -> Result<(crate::metastore::TxWrite, crate::metastore::NewEvent), Error> {
        let slot = &self.views.slot(id);
        let write = super::txlog::reset_of(
            self.executor.staging().storage(),
            &slot.url,
            self.store.tx_head(&slot.url)?,
            self.store.tx_entries(&slot.url)?,
            &self.views.lattice().data_path(id),
            source,
        );
        let change = crate::metastore::TxLogChange {
            kind: "reset".into(),
            generation: write.head.generation,
            inputs: write.entries.len(),
            new_files: 0,
            full: source.map(|source| format!("source {source}")),
        };
        Ok((write, super::txlog::event(&slot.url, slot.record.state, change, None, self.clock.millis())))
    }

    /// The one judgement of a view whose dependencies have settled, shared
    /// by `plan` and runs (see [`Views::judge`]), by the type's version now.
    pub(super) fn judge(&mut self, id: ViewId, standing: impl Fn(ViewId, &Slot) -> Standing) -> Judgement {
        let version = self.executor.version(self.views.lattice().view_type(id).id);
        self.views.judge(id, version, standing)
    }

    /// The views and all they depend on, each after its dependencies.
    pub(super) fn dependencies_first(&self, addressed: &[ViewId]) -> Vec<ViewId> {
        self.views.dependencies_first(addressed)
    }
}

/// Adopts what a crash left between an incremental view's publish and the
/// log's commit: a marker newer than the log's head is the truth (it was
/// published with the data it describes), so the log is written from it.
fn reconcile_txlog(storage: &dyn crate::storage::ViewStore, store: &Metastore, now: i64) -> Result<(), Error> {
    let mut commit = Commit::default();
    for (view, head) in store.tx_heads()? {
        let output = std::path::PathBuf::from(&head.output);
        let Some(marker) = super::txlog::read_marker(storage, &output) else { continue };
        if marker.view != view || marker.generation <= head.generation {
            continue;
        }
        tracing::info!(view, generation = marker.generation, "transaction log reconciled with the published output");
        let existing = store.tx_entries(&view)?;
        let state = store.view(&view)?.map_or(ViewState::Receive, |record| record.state);
        let change = super::txlog::commit_change(&marker, "reconcile");
        commit.events.push(super::txlog::event(&Arc::from(view.as_str()), state, change, None, now));
        commit.txlog.push(super::txlog::write_of(&marker, Some(head), &existing, &output));
    }
    if !commit.is_empty() {
        store.commit(&commit)?;
    }
    Ok(())
}

pub(super) fn new_event(
    view: &Arc<str>,
    previous: ViewState,
    current: ViewState,
    actions: &[Action],
    run_id: Option<&Arc<str>>,
    error: Option<String>,
    time: i64,
) -> crate::metastore::NewEvent {
    crate::metastore::NewEvent {
        view: view.clone(),
        previous,
        current,
        actions: actions.iter().map(|action| action.name().into()).collect(),
        time,
        run_id: run_id.cloned(),
        error,
        action: None,
        txlog: None,
        errors: false,
        flow: None,
    }
}
