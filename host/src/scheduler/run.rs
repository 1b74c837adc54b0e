//! The scheduler's loop: one owner of all view state. A run applies events
//! to views through the pure `transition`, commits the resulting records
//! and events to the metastore in batches, and only then executes the
//! actions: asking dependencies, starting transformations as tasks under
//! permits, scheduling retries, notifying dependents. Tasks report back as
//! events through a channel.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{Semaphore, mpsc};

use super::memo::Memo;
use super::publish::Staging;
use super::service::{Control, QueuedRun, Request};
use super::table::{Running, SharedTable, Table, ViewRow};
use super::transition::{Action, Event, Facts, Freshness, Mode, Reason, Settled, freshness, transition};
use crate::catalog::{Catalog, Diagnostic, PluginDecl, Transformation, ViewTypeId, pattern};
use crate::lattice::{self, Lattice, Resolution, ViewId};
use crate::metastore::{self, Commit, Metastore, NewEvent, RunRecord, SchemaChange, ViewRecord};
use crate::model::{FlowStatus, ViewState};
use crate::runtime::{self, ChecksumRequest, Plugin, Runtime, TransformInput, TransformOutcome, TransformRequest};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Pattern(#[from] pattern::PatternError),
    #[error(transparent)]
    Lattice(#[from] lattice::Error),
    #[error(transparent)]
    Metastore(#[from] metastore::Error),
    #[error("plugin {name} ({}): {source}", file.display())]
    Plugin { name: String, file: PathBuf, source: runtime::Error },
    #[error("{0}")]
    Plugins(String),
    #[error("checksum plugin {name} failed for {view_type}: {message}")]
    Checksum { name: String, view_type: String, message: String },
    #[error("{0}")]
    Io(String),
    #[error("the server is shutting down and accepts no new runs")]
    Closing,
}

/// The outcome of one run, for the CLI's summary.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub id: String,
    /// The flow status of every view the run did something with, by URL
    /// path; views found up to date are only counted in `idle`.
    pub flows: Vec<(String, FlowStatus)>,
    pub idle: usize,
    pub failures: Vec<(String, String)>,
    /// Views materialized although some dependencies had no data.
    pub incomplete: Vec<String>,
    /// Views materialized although some dependencies failed.
    pub with_errors: Vec<String>,
    /// The run was stopped before it finished.
    pub stopped: bool,
    pub termination: String,
}

impl RunSummary {
    pub fn count(&self, status: FlowStatus) -> usize {
        if status == FlowStatus::Idle {
            return self.idle;
        }
        self.flows.iter().filter(|(_, s)| *s == status).count()
    }

    /// Views the run touched, idle ones included.
    pub fn views(&self) -> usize {
        self.flows.len() + self.idle
    }
}

/// A running task: how to abort it, and whether it got past the permits
/// (a transformation that never started is skipped, not canceled).
struct Task {
    abort: tokio::task::AbortHandle,
    started: Arc<std::sync::atomic::AtomicBool>,
}

/// What an invalidate request did, by URL path.
#[derive(Debug, Clone, Default)]
pub struct Invalidation {
    pub invalidated: Vec<String>,
    /// Views in flight, which cannot be invalidated now, with the reason.
    pub refused: Vec<(String, String)>,
}

/// What the loop keeps per view, beside its record.
#[derive(Debug, Clone, Default)]
struct Slot {
    record: ViewRecord,
    /// Dependencies not settled yet in this run.
    pending: usize,
    /// Views waiting for this one to settle.
    waiting: Vec<ViewId>,
    settled_in_run: bool,
    settled: Option<Settled>,
    attempts: u32,
    /// The timestamp a finished transformation reported (external data: the flag's time).
    produced_at: Option<i64>,
    /// The view was no-data when the run started.
    no_data_before_run: bool,
    /// The state the metastore holds for it.
    stored_state: ViewState,
    /// Its URL path, rendered once: every event names it.
    url: Arc<str>,
}

enum TaskResult {
    Done {
        view: ViewId,
        data: bool,
        timestamp: i64,
    },
    Failed {
        view: ViewId,
        retryable: bool,
        message: String,
    },
    RetryDue {
        view: ViewId,
    },
    /// A transformation got its permits and is running.
    Started {
        view: ViewId,
    },
}

pub struct Scheduler<'c> {
    catalog: &'c Catalog,
    lattice: Lattice<'c>,
    store: Arc<Metastore>,
    plugins: HashMap<String, Plugin>,
    versions: HashMap<ViewTypeId, String>,
    /// Types whose schema checksum changed when this scheduler opened.
    schema_changed: std::collections::HashSet<ViewTypeId>,
    slots: Vec<Slot>,
    staging: Arc<Staging>,
    global: Permits,
    per_plugin: HashMap<String, Permits>,
    retry_backoff: Duration,
    progress: Option<Box<dyn FnMut(Progress) + Send>>,
    run_started: Option<Box<Announce>>,
    /// The live view for readers, once shared (a service shares it).
    table: Option<SharedTable>,
    /// Runs accepted by the service, not started yet.
    pub(super) queued: VecDeque<QueuedRun>,
    /// What a long-lived scheduler remembers of freshness between runs.
    memo: Option<Memo>,
    /// A run is executing (requests are served between its steps).
    in_run: bool,
}

/// A transformation limit and its semaphore, for showing permits in use.
#[derive(Clone)]
pub struct Permits {
    /// A plugin's name, or `*` for the global limit.
    pub plugin: String,
    pub limit: usize,
    pub semaphore: Arc<Semaphore>,
}

impl Permits {
    fn new(plugin: &str, limit: usize) -> Permits {
        Permits { plugin: plugin.to_string(), limit, semaphore: Arc::new(Semaphore::new(limit)) }
    }

    pub fn in_use(&self) -> usize {
        self.limit.saturating_sub(self.semaphore.available_permits())
    }
}

/// Told each run's id as the run starts.
type Announce = dyn FnMut(&str) + Send;

/// How far a run has come: views settled, of views known to the run so far
/// (the number grows as dependencies are discovered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub settled: usize,
    pub known: usize,
    pub running: usize,
}

/// Completes at `deadline`, or never.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The next request, or never when there is no one to ask.
async fn next_request(requests: &mut Option<&mut mpsc::UnboundedReceiver<Request>>) -> Option<Request> {
    match requests {
        Some(requests) => requests.recv().await,
        None => std::future::pending().await,
    }
}

fn now_millis() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

fn mtime_millis(path: &std::path::Path) -> Option<i64> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    modified.duration_since(SystemTime::UNIX_EPOCH).ok().map(|d| d.as_millis() as i64)
}

impl<'c> Scheduler<'c> {
    /// Opens the metastore, registers schema checksums (dropping the
    /// metadata of types whose schema changed), loads the plugins and
    /// computes each type's version checksum.
    pub async fn open(catalog: &'c Catalog, runtime: &Runtime) -> Result<Scheduler<'c>, Error> {
        let store = Arc::new(Metastore::open(&catalog.settings.metastore)?);
        let mut schema_changed = std::collections::HashSet::new();
        for view_type in catalog.types() {
            if let SchemaChange::Changed { dropped } =
                store.register_schema(&view_type.name, &view_type.schema_checksum)?
            {
                tracing::info!(view_type = %view_type.name, dropped, "schema changed; its views will be rebuilt");
                schema_changed.insert(view_type.id);
            }
        }
        // Only the plugins views use: listeners load their own, and one that
        // cannot be loaded must not stop scheduling. A view type whose plugin
        // does not fit stops the run before it starts, rather than failing
        // each of its views.
        let PluginCheck { problems, loaded: mut plugins } = check_plugins(runtime, catalog).await;
        if let Some(first) = problems.first() {
            let more = match problems.len() {
                1 => String::new(),
                n => format!(" (and {} more; `trellis validate` lists them)", n - 1),
            };
            return Err(Error::Plugins(format!("{first}{more}")));
        }
        // What is not loaded is missing: loading it says so.
        for name in used_plugins(catalog) {
            if !plugins.contains_key(name) {
                let decl = &catalog.plugins[name];
                plugins.insert(name.to_string(), load_plugin(runtime, catalog, decl).await?);
            }
        }
        let mut versions = HashMap::new();
        for view_type in catalog.types() {
            let version = version_checksum(view_type, &plugins).await?;
            versions.insert(view_type.id, version);
        }
        let staging = Staging::new(&catalog.settings.storage);
        staging.clean().map_err(|e| Error::Io(format!("cannot clean {}: {e}", catalog.settings.storage.display())))?;
        let per_plugin = catalog
            .plugins
            .iter()
            .map(|(name, decl)| {
                (name.clone(), Permits::new(name, decl.concurrency.unwrap_or(catalog.settings.concurrency)))
            })
            .collect();
        Ok(Scheduler {
            catalog,
            lattice: Lattice::new(catalog),
            store,
            plugins,
            versions,
            schema_changed,
            slots: Vec::new(),
            staging: Arc::new(staging),
            global: Permits::new("*", catalog.settings.concurrency),
            per_plugin,
            retry_backoff: Duration::from_millis(100),
            progress: None,
            run_started: None,
            table: None,
            queued: VecDeque::new(),
            memo: None,
            in_run: false,
        })
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

    /// The global transformation limit, then each plugin's.
    pub fn permits(&self) -> Vec<Permits> {
        let mut plugins: Vec<Permits> = self.per_plugin.values().cloned().collect();
        plugins.sort_by(|a, b| a.plugin.cmp(&b.plugin));
        std::iter::once(self.global.clone()).chain(plugins).collect()
    }

    /// The metastore, shared with the listeners that follow its event log.
    pub fn metastore(&self) -> Arc<Metastore> {
        self.store.clone()
    }

    pub fn lattice(&self) -> &Lattice<'c> {
        &self.lattice
    }

    /// Instantiates `pattern` and loads the records of new views.
    pub fn instantiate(&mut self, pattern_text: &str) -> Result<Vec<ViewId>, Error> {
        let pattern = pattern::parse(pattern_text)?;
        let resolution = Resolution { evaluation_time: chrono::Utc::now(), exists: &lattice::on_disk };
        let addressed = self.lattice.instantiate(&pattern, &resolution)?;
        // Only views new to the lattice need their records: the others were
        // loaded by an earlier call.
        let known = self.slots.len();
        self.slots.resize_with(self.lattice.len(), Slot::default);
        for index in known..self.slots.len() {
            let url: Arc<str> = self.lattice.url_path(ViewId(index as u32)).into();
            let mut record = self.store.view(&url)?.unwrap_or_default();
            // In-flight states do not survive the process that had them.
            record.state = previous_stable(record.state, &record);
            let slot = &mut self.slots[index];
            slot.stored_state = record.state;
            slot.record = record;
            slot.url = url;
        }
        self.publish_views((known..self.slots.len()).map(|index| ViewId(index as u32)));
        if let Some(memo) = &mut self.memo {
            memo.grow(&self.lattice);
        }
        Ok(addressed)
    }

    /// Remembers which views are up to date between runs and watches
    /// external data, so that a run visits only what may have changed: for
    /// a scheduler that lives across requests (a server, a benchmark).
    /// Where inotify is unavailable, every run checks every view, as before.
    pub fn remember_freshness(&mut self) {
        match Memo::new(&self.catalog.settings.storage) {
            Ok(mut memo) => {
                memo.grow(&self.lattice);
                self.memo = Some(memo);
            }
            Err(e) => tracing::warn!("cannot watch external data ({e}); every run checks every view"),
        }
    }

    /// Shares a live table of the views, runs and transformations for
    /// readers that must not wait for the loop.
    pub fn share_table(&mut self) -> SharedTable {
        let table = self.table.get_or_insert_with(SharedTable::default).clone();
        self.publish_views(self.lattice.ids());
        table
    }

    /// Copies the views' slots into the shared table, adding rows for new
    /// views (which come in lattice order, as the table's rows do).
    fn publish_views(&self, ids: impl IntoIterator<Item = ViewId>) {
        let Some(table) = &self.table else { return };
        let mut table = table.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        for id in ids {
            let (index, slot) = (id.0 as usize, &self.slots[id.0 as usize]);
            let record = &slot.record;
            if index == table.views().len() {
                table.push(ViewRow {
                    url: slot.url.clone(),
                    view_type: self.lattice.view_type(id).name.as_str().into(),
                    state: record.state,
                    timestamp: record.timestamp,
                    incomplete: record.incomplete,
                    errors: record.errors,
                    last_error: record.last_error.clone(),
                    dependencies: self.lattice.dependencies(id).iter().map(|d| d.0).collect(),
                    data_path: self.lattice.data_path(id),
                });
                continue;
            }
            table.set_state(index, record.state);
            let row = table.row_mut(index);
            row.timestamp = record.timestamp;
            row.incomplete = record.incomplete;
            row.errors = record.errors;
            if row.last_error != record.last_error {
                row.last_error = record.last_error.clone();
            }
        }
    }

    fn with_table(&self, change: impl FnOnce(&mut Table)) {
        if let Some(table) = &self.table {
            change(&mut table.write().unwrap_or_else(|poisoned| poisoned.into_inner()));
        }
    }

    pub(super) fn publish_queue(&self) {
        let queued: Vec<String> = self.queued.iter().map(|queued| queued.record.id.clone()).collect();
        self.with_table(|table| table.queued_runs = queued);
    }

    /// A view's state now.
    pub(super) fn state_of(&self, id: ViewId) -> ViewState {
        self.slots[id.0 as usize].record.state
    }

    /// Invalidates the views of `pattern` (and with `dependencies`, what
    /// they depend on). Returns the views refused because they are in
    /// flight, with the reason.
    pub fn invalidate(&mut self, pattern_text: &str, dependencies: bool) -> Result<Invalidation, Error> {
        let addressed = self.instantiate(pattern_text)?;
        let targets = if dependencies { self.lattice.closure(&addressed) } else { addressed };
        let mut commit = Commit::default();
        let (mut done, mut refused) = (Vec::new(), Vec::new());
        for id in targets {
            let slot = &mut self.slots[id.0 as usize];
            // Dependents in this run may have taken it as it is already;
            // invalidating it under them would build them without it.
            if self.in_run && slot.settled_in_run {
                let reason = "it was settled by the run in progress; invalidate it once that run ends";
                refused.push((slot.url.to_string(), reason.into()));
                continue;
            }
            let (state, actions) = transition(slot.record.state, &Event::Invalidate);
            // Refused or not, an application of the state machine is an event.
            commit.events.push(new_event(&slot.url, slot.record.state, state, &actions, None, None));
            if let Some(Action::Refuse { reason }) = actions.first() {
                refused.push((slot.url.to_string(), reason.clone()));
                continue;
            }
            slot.record.state = state;
            slot.record.invalidated = true;
            slot.stored_state = state;
            commit.views.push((slot.url.to_string(), slot.record.clone()));
            if let Some(memo) = &mut self.memo {
                memo.dirty(id);
            }
            done.push(slot.url.to_string());
        }
        self.store.commit(&commit)?;
        Ok(Invalidation { invalidated: done, refused })
    }

    /// For every view of `pattern` and its dependencies, dependencies first:
    /// whether a DEFAULT run would transform it now, and why.
    pub fn plan(&mut self, pattern_text: &str) -> Result<Vec<(String, String)>, Error> {
        let addressed = self.instantiate(pattern_text)?;
        let order = self.dependencies_first(&addressed);
        let mut will_change = vec![false; self.lattice.len()];
        let mut no_data = vec![false; self.lattice.len()];
        let mut plan = Vec::with_capacity(order.len());
        for id in order {
            let view_type = self.lattice.view_type(id);
            let record = &self.slots[id.0 as usize].record;
            let dependencies = self.lattice.dependencies(id);
            let changing = dependencies.iter().find(|d| will_change[d.0 as usize]);
            let external = matches!(view_type.transformation, Transformation::External);
            let flag = external.then(|| mtime_millis(&self.lattice.done_flag_path(id)));
            let all_dependencies_no_data =
                !dependencies.is_empty() && dependencies.iter().all(|d| no_data[d.0 as usize]);
            let view_no_data = (external && flag == Some(None)) || all_dependencies_no_data;
            no_data[id.0 as usize] = view_no_data;
            let explanation = if view_no_data {
                None
            } else if let Some(&dependency) = changing {
                Some(format!("dependency {} will be rematerialized", self.lattice.url_path(dependency)))
            } else {
                let newest = dependencies
                    .iter()
                    .filter_map(|&d| self.slots[d.0 as usize].record.timestamp.map(|t| (self.lattice.url_path(d), t)))
                    .max_by_key(|(_, t)| *t);
                let facts = Facts {
                    invalidated: record.state == ViewState::Invalidated || record.invalidated,
                    schema_changed: self.schema_changed.contains(&view_type.id),
                    recorded_version: record.version_checksum.as_deref(),
                    recorded_timestamp: record.timestamp,
                    current_version: &self.versions[&view_type.id],
                    newest_dependency: newest.as_ref().map(|(d, t)| (d.as_str(), *t)),
                    external_flag: flag,
                };
                match freshness(&facts) {
                    Freshness::UpToDate => None,
                    Freshness::Outdated(reason) => Some(reason.to_string()),
                }
            };
            let once = view_type.materialize_once && record.state == ViewState::Materialized;
            let explanation = explanation.filter(|_| !once);
            let line = match &explanation {
                _ if once => "up to date (materialize_once)".to_string(),
                _ if external && view_no_data => "no data (no done flag)".to_string(),
                _ if view_no_data => "no data (no dependency has data)".to_string(),
                Some(reason) => format!("transform: {reason}"),
                None => "up to date".to_string(),
            };
            will_change[id.0 as usize] = explanation.is_some();
            plan.push((self.slots[id.0 as usize].url.to_string(), line));
        }
        Ok(plan)
    }

    /// The views and all they depend on, each after its dependencies.
    fn dependencies_first(&self, addressed: &[ViewId]) -> Vec<ViewId> {
        let mut state = vec![0u8; self.lattice.len()]; // 0 new, 1 open, 2 done
        let mut order = Vec::new();
        for &start in addressed {
            let mut stack = vec![(start, 0usize)];
            while let Some((id, next)) = stack.pop() {
                if next == 0 {
                    if state[id.0 as usize] != 0 {
                        continue;
                    }
                    state[id.0 as usize] = 1;
                }
                let dependencies = self.lattice.dependencies(id);
                if let Some(&dependency) = dependencies.get(next) {
                    stack.push((id, next + 1));
                    if state[dependency.0 as usize] == 0 {
                        stack.push((dependency, 0));
                    }
                } else {
                    state[id.0 as usize] = 2;
                    order.push(id);
                }
            }
        }
        order
    }

    /// Materializes the views of `pattern` and, unless the mode says
    /// otherwise, their dependencies first.
    pub async fn materialize(&mut self, pattern_text: &str, mode: Mode) -> Result<RunSummary, Error> {
        self.materialize_until(pattern_text, mode, std::future::pending()).await
    }

    /// Like [`Scheduler::materialize`], but stops when `stop` completes:
    /// running transformations are canceled (their views keep their
    /// previous data), views not started are skipped.
    pub async fn materialize_until(
        &mut self,
        pattern_text: &str,
        mode: Mode,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<RunSummary, Error> {
        let addressed = self.instantiate(pattern_text)?;
        let run = self.new_run(pattern_text, mode)?;
        self.execute_run(run, mode, addressed, stop, None, &mut Control::default()).await
    }

    /// Records a new run, not started yet, with an id that sorts by start
    /// time and never repeats, even for runs started in the same millisecond.
    pub(super) fn new_run(&mut self, pattern_text: &str, mode: Mode) -> Result<RunRecord, Error> {
        let mut started = now_millis();
        while self.store.run(&format!("{started:x}"))?.is_some() {
            started += 1;
        }
        let run = RunRecord {
            id: format!("{started:x}"),
            pattern: pattern_text.to_string(),
            mode: crate::model::wire_name(&mode),
            started: now_millis(),
            finished: None,
            termination: None,
            idle: 0,
        };
        self.store.commit(&Commit { runs: vec![run.clone()], ..Commit::default() })?;
        Ok(run)
    }

    /// Ends a run that never started (or could not go on).
    pub(super) fn finish_unstarted(&mut self, mut run: RunRecord, termination: &str) -> Result<(), Error> {
        run.finished = Some(now_millis());
        run.termination = Some(termination.to_string());
        self.store.commit(&Commit { runs: vec![run], ..Commit::default() })?;
        self.with_table(|table| table.counters.runs_finished += 1);
        Ok(())
    }

    /// Executes a recorded run. A service passes its `requests`: they are
    /// served between steps, and what they ask of this run (stop, a
    /// shutdown's deadline) lands in `control`.
    pub(super) async fn execute_run(
        &mut self,
        run: RunRecord,
        mode: Mode,
        addressed: Vec<ViewId>,
        stop: impl std::future::Future<Output = ()>,
        requests: Option<&mut mpsc::UnboundedReceiver<Request>>,
        control: &mut Control,
    ) -> Result<RunSummary, Error> {
        self.in_run = true;
        let record = run.clone();
        let summary = self.execute_run_steps(run, mode, addressed, stop, requests, control).await;
        self.in_run = false;
        if let Err(e) = &summary {
            // The run ended on an error (the metastore's): it is not current,
            // and, if the metastore still takes it, its record says why.
            self.with_table(|table| table.current_run = None);
            let _ = self.finish_unstarted(record, &format!("failed: {e}"));
        }
        summary
    }

    async fn execute_run_steps(
        &mut self,
        run: RunRecord,
        mode: Mode,
        addressed: Vec<ViewId>,
        stop: impl std::future::Future<Output = ()>,
        mut requests: Option<&mut mpsc::UnboundedReceiver<Request>>,
        control: &mut Control,
    ) -> Result<RunSummary, Error> {
        let mut stop = std::pin::pin!(stop);
        let mut stopped = false;
        let run_id = run.id.clone();
        let shared_run_id: Arc<str> = run_id.as_str().into();
        if let Some(announce) = &mut self.run_started {
            announce(&run_id);
        }
        self.with_table(|table| table.current_run = Some(run_id.clone()));
        *control = Control { stop: false, ..*control };
        // Every change made before this run was asked for is seen by it.
        if let Some(memo) = &mut self.memo {
            memo.drain();
        }
        for slot in &mut self.slots {
            let no_data_before_run = slot.record.state == ViewState::NoData;
            *slot = Slot {
                record: std::mem::take(&mut slot.record),
                url: std::mem::take(&mut slot.url),
                stored_state: slot.stored_state,
                no_data_before_run,
                ..Slot::default()
            };
        }

        let (results, mut incoming) = mpsc::unbounded_channel();
        let mut flows: HashMap<ViewId, FlowStatus> = HashMap::new();
        let mut failures = Vec::new();
        let mut queue: VecDeque<(ViewId, Event)> = VecDeque::new();
        for &id in &addressed {
            let once = self.lattice.view_type(id).materialize_once;
            queue.push_back((id, Event::Materialize { mode, materialize_once: once }));
        }
        let mut tasks: HashMap<ViewId, Task> = HashMap::new();
        let mut stop_reason = "stopped by request";
        loop {
            // Requests first: a stop or an invalidation is answered between
            // two steps, even while the run has work queued.
            if let Some(waiting) = requests.as_deref_mut() {
                while let Ok(request) = waiting.try_recv() {
                    self.serve(request, Some(&run_id), control);
                }
            }
            // Apply every queued event, collecting writes and actions...
            let mut commit = Commit::default();
            let mut deferred = Vec::new();
            while let Some((id, event)) = queue.pop_front() {
                let previous = self.slots[id.0 as usize].record.state;
                // A record from before the flag was kept says so by its state alone.
                if matches!(event, Event::Materialize { .. }) && previous == ViewState::Invalidated {
                    self.slots[id.0 as usize].record.invalidated = true;
                }
                let (state, actions) = transition(previous, &event);
                let error = match &event {
                    Event::TransformFailed { error, .. } => Some(error.clone()),
                    _ => None,
                };
                let slot = &mut self.slots[id.0 as usize];
                let was_no_data = slot.no_data_before_run;
                let timestamp_before = slot.record.timestamp;
                slot.record.state = state;
                let mut record_changed = false;
                for action in &actions {
                    match action {
                        Action::RecordMaterialized | Action::RecordWithoutTransforming => {
                            slot.record.invalidated = false;
                            let external =
                                matches!(self.lattice.view_type(id).transformation, Transformation::External);
                            // External data is as new as its done flag, however it was recorded.
                            let flag_time =
                                || if external { mtime_millis(&self.lattice.done_flag_path(id)) } else { None };
                            let timestamp = slot.produced_at.take().or_else(flag_time).unwrap_or_else(now_millis);
                            let settled = slot.settled.unwrap_or(Settled {
                                all_no_data: false,
                                some_no_data: false,
                                some_failed: false,
                            });
                            slot.record.version_checksum = Some(self.versions[&self.lattice.view_type(id).id].clone());
                            // SET_ONLY and the dry run keep an existing timestamp when the
                            // view was only marked, so dependents are not rematerialized.
                            let keep = matches!(action, Action::RecordWithoutTransforming)
                                && slot.record.timestamp.is_some()
                                && mode != Mode::ResetTransformationChecksumsAndTimestamps;
                            if !keep {
                                slot.record.timestamp = Some(timestamp);
                            }
                            slot.record.incomplete = settled.some_no_data;
                            slot.record.errors = settled.some_failed;
                            slot.record.last_error = None;
                            record_changed = true;
                            flows.insert(id, FlowStatus::Successful);
                        }
                        Action::RecordVersion => {
                            slot.record.version_checksum = Some(self.versions[&self.lattice.view_type(id).id].clone());
                            record_changed = true;
                            flows.insert(id, FlowStatus::Successful);
                        }
                        Action::RecordNoData => {
                            slot.record.invalidated = false;
                            record_changed = true;
                            // Still no data is nothing new.
                            let status =
                                if slot.record.timestamp.is_none() && slot.record.last_error.is_none() && was_no_data {
                                    FlowStatus::Idle
                                } else {
                                    FlowStatus::Successful
                                };
                            flows.insert(id, status);
                        }
                        Action::RecordFailed { error } => {
                            slot.record.last_error = Some(error.clone());
                            record_changed = true;
                            failures.push((self.lattice.url_path(id), error.clone()));
                            flows.insert(id, FlowStatus::TerminatedWithError);
                        }
                        Action::ReportIdle => {
                            flows.insert(id, FlowStatus::Idle);
                        }
                        Action::Transform => {
                            flows.insert(id, FlowStatus::Running);
                        }
                        _ => {
                            flows.entry(id).or_insert(FlowStatus::Queued);
                        }
                    }
                }
                // Only stable states are kept across processes; and only what
                // changed is written, so an unchanged lattice costs no writes.
                let stable = previous_stable(state, &slot.record);
                let store_record = record_changed || stable != slot.stored_state;
                if let Some(memo) = &mut self.memo {
                    // What dependents see of a view is its state and
                    // timestamp: when those change, it and all above it
                    // must be looked at again...
                    if slot.record.timestamp != timestamp_before || stable != slot.stored_state {
                        memo.dirty(id);
                    }
                    // ...unless a DEFAULT run judged it just now, with all it
                    // depends on settled, and found it materialized or without data.
                    let judged = actions
                        .iter()
                        .any(|a| matches!(a, Action::ReportIdle | Action::RecordMaterialized | Action::RecordNoData));
                    if mode == Mode::Default && judged && matches!(state, ViewState::Materialized | ViewState::NoData) {
                        let external = matches!(self.lattice.view_type(id).transformation, Transformation::External);
                        memo.settled(id, &self.lattice, external.then_some(state == ViewState::Materialized));
                    }
                }
                let slot = &mut self.slots[id.0 as usize];
                let url = slot.url.clone();
                if store_record {
                    let mut stored = slot.record.clone();
                    stored.state = stable;
                    slot.stored_state = stable;
                    commit.views.push((url.to_string(), stored));
                }
                // Every application of the state machine is an event, "asked
                // and found up to date" included: listeners see all of it.
                commit.events.push(new_event(&url, previous, state, &actions, Some(&shared_run_id), error));
                // Settled as soon as applied: a view asking for it later in
                // this batch's actions takes it as it is, not asking again.
                if actions.contains(&Action::NotifyDependents) {
                    slot.settled_in_run = true;
                }
                deferred.push((id, actions));
            }
            // ...commit them durably...
            if !commit.views.is_empty() || !commit.events.is_empty() {
                self.store.commit(&commit)?;
            }
            self.publish_views(deferred.iter().map(|(id, _)| *id));
            // ...and only then act.
            for (id, actions) in deferred {
                for action in actions {
                    self.execute_action(id, action, mode, &mut queue, &results, &mut tasks);
                }
            }
            if self.progress.is_some() || self.table.is_some() {
                let settled = flows.values().filter(|s| !matches!(s, FlowStatus::Queued | FlowStatus::Running)).count();
                let progress = Progress { settled, known: flows.len(), running: tasks.len() };
                self.with_table(|table| table.current_run_pending = progress.known - progress.settled);
                if let Some(report) = &mut self.progress {
                    report(progress);
                }
            }
            if !queue.is_empty() {
                continue;
            }
            // A stop takes effect once the queue is drained, so that every
            // view the walk reached is in flight, and canceled, by then.
            // Results already sent are applied first: their data is
            // published, and their records must say so.
            if control.stop && !stopped && incoming.is_empty() {
                stopped = true;
                self.cancel(&mut tasks, &mut queue, &mut flows);
                continue;
            }
            if tasks.is_empty() || stopped {
                break;
            }
            let deadline = control.deadline;
            let first = tokio::select! {
                result = incoming.recv() => result,
                () = &mut stop, if !control.stop => {
                    control.stop = true;
                    continue;
                }
                () = sleep_until_some(deadline), if !control.stop => {
                    stop_reason = "stopped: the server shut down before the run finished";
                    control.stop = true;
                    continue;
                }
                request = next_request(&mut requests) => {
                    match request {
                        Some(request) => self.serve(request, Some(&run_id), control),
                        // Nobody can ask any more: go on without requests.
                        None => requests = None,
                    }
                    continue;
                }
            };
            let Some(first) = first else { break };
            // Take every result that is ready, so that one commit (and one
            // flush) serves them all.
            let mut ready = vec![first];
            while let Ok(result) = incoming.try_recv() {
                ready.push(result);
            }
            for result in ready {
                match result {
                    TaskResult::Done { view, data, timestamp } => {
                        tasks.remove(&view);
                        self.with_table(|table| {
                            if table.running.remove(&view.0).is_some() {
                                table.counters.succeeded += 1;
                            }
                        });
                        self.slots[view.0 as usize].produced_at = Some(timestamp);
                        queue.push_back((view, Event::Transformed { data }));
                    }
                    TaskResult::Failed { view, retryable, message } => {
                        tasks.remove(&view);
                        let slot = &mut self.slots[view.0 as usize];
                        slot.attempts += 1;
                        let retry = retryable && slot.attempts <= self.catalog.settings.retries;
                        let attempts = slot.attempts;
                        self.with_table(|table| {
                            if table.running.remove(&view.0).is_some() {
                                if retry {
                                    table.counters.retried += 1;
                                } else {
                                    table.counters.failed += 1;
                                }
                            }
                        });
                        let message = if retry {
                            message
                        } else {
                            format!(
                                "{message}; gave up after {attempts} attempt{}",
                                if attempts == 1 { "" } else { "s" }
                            )
                        };
                        queue.push_back((view, Event::TransformFailed { retry, error: message }));
                    }
                    TaskResult::RetryDue { view } => {
                        tasks.remove(&view);
                        queue.push_back((view, Event::RetryDue));
                    }
                    TaskResult::Started { view } => {
                        // Only plugins take permits, so only they report starting.
                        if let Transformation::Plugin { plugin, .. } = &self.lattice.view_type(view).transformation {
                            let running = Running {
                                view: self.slots[view.0 as usize].url.clone(),
                                plugin: plugin.clone(),
                                since: now_millis(),
                            };
                            self.with_table(|table| {
                                table.running.insert(view.0, running);
                            });
                        }
                    }
                }
            }
        }
        if stopped {
            for status in flows.values_mut() {
                if *status == FlowStatus::Queued {
                    *status = FlowStatus::Skipped;
                }
            }
        }

        let mut finished = run;
        finished.finished = Some(now_millis());
        let termination: String = if stopped {
            stop_reason.into()
        } else if failures.is_empty() {
            "completed".into()
        } else {
            format!("completed with {} failed views", failures.len())
        };
        finished.termination = Some(termination.clone());
        // Idle views are most of an unchanged run: they are counted, not
        // listed, named or written one by one.
        let idle = flows.values().filter(|s| **s == FlowStatus::Idle).count();
        finished.idle = idle;
        // What a successful view was flagged with is in its slot, as committed.
        let (mut incomplete, mut with_errors) = (Vec::new(), Vec::new());
        for (id, status) in &flows {
            let slot = &self.slots[id.0 as usize];
            if *status == FlowStatus::Successful {
                if slot.record.incomplete {
                    incomplete.push(slot.url.to_string());
                }
                if slot.record.errors {
                    with_errors.push(slot.url.to_string());
                }
            }
        }
        incomplete.sort();
        with_errors.sort();
        let mut flows: Vec<(String, FlowStatus)> = flows
            .into_iter()
            .filter(|(_, s)| *s != FlowStatus::Idle)
            .map(|(id, s)| (self.slots[id.0 as usize].url.to_string(), s))
            .collect();
        flows.sort_by(|a, b| a.0.cmp(&b.0));
        let commit = Commit {
            runs: vec![finished],
            flows: flows.iter().map(|(view, status)| (run_id.clone(), view.clone(), *status)).collect(),
            ..Commit::default()
        };
        self.store.commit(&commit)?;
        self.with_table(|table| {
            table.current_run = None;
            table.current_run_pending = 0;
            table.counters.runs_finished += 1;
        });
        failures.sort();
        Ok(RunSummary { id: run_id, flows, idle, failures, incomplete, with_errors, stopped, termination })
    }

    fn execute_action(
        &mut self,
        id: ViewId,
        action: Action,
        mode: Mode,
        queue: &mut VecDeque<(ViewId, Event)>,
        results: &mpsc::UnboundedSender<TaskResult>,
        tasks: &mut HashMap<ViewId, Task>,
    ) {
        match action {
            Action::AskDependencies => {
                let mut dependencies = self.lattice.dependencies(id).to_vec();
                dependencies.sort();
                dependencies.dedup();
                let mut pending = 0;
                for dependency in dependencies {
                    // A view the memo knows to be up to date is taken as it
                    // is, without asking it or what it depends on; unless
                    // this run has it in flight, when it is waited for.
                    let in_flight = matches!(
                        self.slots[dependency.0 as usize].record.state,
                        ViewState::Waiting | ViewState::Transforming | ViewState::Retrying
                    );
                    let known_fresh = mode == Mode::Default
                        && !in_flight
                        && self.memo.as_ref().is_some_and(|m| m.is_clean(dependency));
                    let theirs = &mut self.slots[dependency.0 as usize];
                    if theirs.settled_in_run || known_fresh {
                        continue;
                    }
                    theirs.waiting.push(id);
                    pending += 1;
                    // One in flight will notify its dependents when it
                    // settles. Asking it again could reach it after it
                    // settled in this very batch and open it again, so that
                    // this view would find it in flight and pass it over.
                    if !in_flight {
                        let once = self.lattice.view_type(dependency).materialize_once;
                        queue.push_back((dependency, Event::Materialize { mode, materialize_once: once }));
                    }
                }
                self.slots[id.0 as usize].pending = pending;
                if pending == 0 {
                    queue.push_back((id, self.settle(id, mode)));
                }
            }
            Action::NotifyDependents => {
                let slot = &mut self.slots[id.0 as usize];
                slot.settled_in_run = true;
                for waiting in std::mem::take(&mut slot.waiting) {
                    let theirs = &mut self.slots[waiting.0 as usize];
                    theirs.pending = theirs.pending.saturating_sub(1);
                    if theirs.pending == 0 {
                        queue.push_back((waiting, self.settle(waiting, mode)));
                    }
                }
            }
            Action::Transform => {
                let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let task = self.start_transformation(id, results.clone(), started.clone());
                tasks.insert(id, Task { abort: task.abort_handle(), started });
            }
            Action::ScheduleRetry => {
                let attempts = self.slots[id.0 as usize].attempts;
                let backoff = self.retry_backoff * 2u32.saturating_pow(attempts.saturating_sub(1).min(10));
                let results = results.clone();
                let task = tokio::spawn(async move {
                    tokio::time::sleep(backoff).await;
                    let _ = results.send(TaskResult::RetryDue { view: id });
                });
                let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
                tasks.insert(id, Task { abort: task.abort_handle(), started });
            }
            _ => {}
        }
    }

    /// Stops everything in flight: tasks are aborted (a transformation's
    /// staging directory is left for the next start to remove; its view
    /// keeps its previous data), and each view in flight goes back to the
    /// state it had before the run.
    fn cancel(
        &mut self,
        tasks: &mut HashMap<ViewId, Task>,
        queue: &mut VecDeque<(ViewId, Event)>,
        flows: &mut HashMap<ViewId, FlowStatus>,
    ) {
        let canceled: Vec<u32> = tasks.keys().map(|view| view.0).collect();
        self.with_table(|table| {
            for view in canceled {
                if table.running.remove(&view).is_some() {
                    table.counters.canceled += 1;
                }
            }
        });
        // Which tasks had started is read before any is aborted: an aborted
        // task gives its permits back, and one waiting for them could start.
        let started: Vec<(ViewId, bool)> =
            tasks.iter().map(|(view, task)| (*view, task.started.load(std::sync::atomic::Ordering::SeqCst))).collect();
        for (view, started) in started {
            flows.insert(view, if started { FlowStatus::Canceled } else { FlowStatus::Skipped });
        }
        for (_, task) in tasks.drain() {
            task.abort.abort();
        }
        for (index, slot) in self.slots.iter().enumerate() {
            if matches!(slot.record.state, ViewState::Waiting | ViewState::Transforming | ViewState::Retrying) {
                let previous = previous_stable(slot.record.state, &slot.record);
                queue.push_back((ViewId(index as u32), Event::Canceled { previous }));
            }
        }
    }

    /// The event for a view whose dependencies have all settled: how they
    /// ended up, and whether the view is outdated and why.
    fn settle(&mut self, id: ViewId, mode: Mode) -> Event {
        let dependencies = self.lattice.dependencies(id);
        let states: Vec<ViewState> = dependencies.iter().map(|d| self.slots[d.0 as usize].record.state).collect();
        let settled = Settled {
            all_no_data: !states.is_empty() && states.iter().all(|s| *s == ViewState::NoData),
            some_no_data: states.contains(&ViewState::NoData),
            some_failed: states.contains(&ViewState::Failed),
        };
        let newest = dependencies
            .iter()
            .filter(|d| self.slots[d.0 as usize].record.state == ViewState::Materialized)
            .filter_map(|&d| self.slots[d.0 as usize].record.timestamp.map(|t| (d, t)))
            .max_by_key(|&(_, t)| t);
        let view_type = self.lattice.view_type(id);
        let external = matches!(view_type.transformation, Transformation::External);
        let external_flag = external.then(|| {
            let flag = self.lattice.done_flag_path(id);
            // Watched before it is read: a change after the read is queued.
            if let Some(memo) = &mut self.memo {
                memo.watch(id, &flag);
            }
            mtime_millis(&flag)
        });
        let slot = &self.slots[id.0 as usize];
        let facts = Facts {
            invalidated: slot.record.invalidated,
            schema_changed: self.schema_changed.contains(&view_type.id),
            recorded_version: slot.record.version_checksum.as_deref(),
            recorded_timestamp: slot.record.timestamp,
            current_version: &self.versions[&view_type.id],
            // Named below, only if it is the reason: most views are up to date.
            newest_dependency: newest.map(|(_, t)| ("", t)),
            external_flag,
        };
        let freshness = match freshness(&facts) {
            Freshness::Outdated(Reason::DependencyNewer { .. }) => {
                let dependency = newest.map(|(d, _)| self.lattice.url_path(d)).unwrap_or_default();
                Freshness::Outdated(Reason::DependencyNewer { dependency })
            }
            other => other,
        };
        self.slots[id.0 as usize].settled = Some(settled);
        Event::DependenciesSettled { mode, settled, freshness }
    }

    fn start_transformation(
        &mut self,
        id: ViewId,
        results: mpsc::UnboundedSender<TaskResult>,
        started: Arc<std::sync::atomic::AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let view_type = self.lattice.view_type(id);
        let done_flag = self.lattice.done_flag_path(id);
        let Transformation::Plugin { plugin: plugin_name, .. } = &view_type.transformation else {
            // External data: its done flag is its transformation.
            let result = match mtime_millis(&done_flag) {
                Some(timestamp) => TaskResult::Done { view: id, data: true, timestamp },
                None => TaskResult::Done { view: id, data: false, timestamp: now_millis() },
            };
            return tokio::spawn(async move {
                let _ = results.send(result);
            });
        };
        let plugin = self.plugins[plugin_name].clone();
        let own_timestamp = self.slots[id.0 as usize].record.timestamp;
        // Inputs: the dependencies that have data, in declaration order.
        let mut inputs = Vec::new();
        let mut guest_paths: HashMap<ViewId, String> = HashMap::new();
        for (declaration, group) in view_type.dependencies.iter().zip(self.lattice.dependencies_by_declaration(id)) {
            for dependency in group {
                let record = &self.slots[dependency.0 as usize].record;
                let dir = self.lattice.data_path(dependency);
                // SET_ONLY can mark a view materialized that has no data.
                if record.state != ViewState::Materialized || !dir.is_dir() {
                    continue;
                }
                guest_paths.insert(dependency, runtime::guest_input(inputs.len()));
                inputs.push(TransformInput {
                    name: declaration.name.clone(),
                    view: self.lattice.url_path(dependency),
                    dir,
                    timestamp: record.timestamp,
                    changed: record.timestamp > own_timestamp,
                });
            }
        }
        let path_of = |d: ViewId| guest_paths.get(&d).cloned().unwrap_or_default();
        let actual = chrono::Utc::now();
        let config = match self.lattice.config(id, actual, runtime::GUEST_OUTPUT, &path_of) {
            Ok(config) => config,
            Err(message) => {
                return tokio::spawn(async move {
                    let _ = results.send(TaskResult::Failed { view: id, retryable: false, message });
                });
            }
        };
        let request_base = TransformRequest {
            view: self.lattice.url_path(id),
            parameters: view_type
                .parameters
                .iter()
                .map(|p| p.name.clone())
                .zip(self.lattice.params(id).iter().map(|v| v.to_string()))
                .collect(),
            nominal_time: self.lattice.time(id).map(|t| t.timestamp_millis()),
            actual_time: actual.timestamp_millis(),
            config,
            inputs,
            output_dir: PathBuf::new(),
        };
        let data_path = self.lattice.data_path(id);
        let flag = view_type.done_flag.clone();
        let staging = self.staging.clone();
        let global = self.global.semaphore.clone();
        let local = self.per_plugin[plugin_name].semaphore.clone();
        tokio::spawn(async move {
            let (Ok(_global), Ok(_local)) = (global.acquire_owned().await, local.acquire_owned().await) else { return };
            started.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = results.send(TaskResult::Started { view: id });
            let result = run_plugin(&plugin, request_base, &staging, &data_path, &flag).await;
            let _ = results.send(match result {
                Ok(data) => TaskResult::Done { view: id, data, timestamp: now_millis() },
                Err((retryable, message)) => TaskResult::Failed { view: id, retryable, message },
            });
        })
    }
}

/// The plugins the view types use, loaded, and what is wrong with how they
/// use them.
pub struct PluginCheck {
    /// One line each, naming the view type and its line: a file that
    /// cannot be loaded, a plugin of another world, a configuration its
    /// `describe` rejects.
    pub problems: Vec<Diagnostic>,
    /// The plugins that loaded, by name. Plugin files that do not exist are
    /// neither here nor among the problems: loading them says so, once.
    pub loaded: HashMap<String, Plugin>,
}

/// Loads the plugins the view types use (each once, `describe` once per
/// transformation) and checks each view type against them. Listeners are
/// not checked: one that cannot start is skipped.
pub async fn check_plugins(runtime: &Runtime, catalog: &Catalog) -> PluginCheck {
    let mut found: HashMap<&str, Result<Found, String>> = HashMap::new();
    for name in used_plugins(catalog) {
        let Some(decl) = catalog.plugins.get(name) else { continue };
        if !decl.file.exists() {
            continue;
        }
        let result = match load_plugin(runtime, catalog, decl).await {
            Ok(plugin) if plugin.world() == runtime::World::Transformation => {
                let info = match plugin.describe().await {
                    Ok(report) => report.result.map_err(|failure| format!("{name}'s describe failed: {failure}")),
                    Err(e) => Err(e.to_string()),
                };
                Ok((plugin, Some(info)))
            }
            Ok(plugin) => Ok((plugin, None)),
            Err(e) => Err(e.to_string()),
        };
        found.insert(name, result);
    }
    let mut problems = Vec::new();
    for view_type in catalog.types() {
        let Transformation::Plugin { plugin, config, checksum } = &view_type.transformation else { continue };
        let problem = |message: String| Diagnostic {
            line: Some(view_type.line),
            message: format!("view type {}: {message}", view_type.name),
        };
        let uses = std::iter::once((plugin, runtime::World::Transformation))
            .chain(checksum.iter().map(|name| (name, runtime::World::Checksum)));
        for (name, world) in uses {
            let (plugin, info) = match found.get(name.as_str()) {
                None => continue,
                Some(Err(message)) => {
                    problems.push(problem(message.clone()));
                    continue;
                }
                Some(Ok(found)) => found,
            };
            if plugin.world() != world {
                problems.push(problem(format!("{name} is a {} plugin, not a {world} plugin", plugin.world())));
                continue;
            }
            let keys: Vec<(String, String)> = config.iter().map(|(k, v)| (k.clone(), v.source().to_string())).collect();
            match info {
                Some(Ok(info)) if world == runtime::World::Transformation => {
                    if let Err(message) = info.check_config(&keys) {
                        problems.push(problem(message));
                    }
                }
                Some(Err(message)) if world == runtime::World::Transformation => {
                    problems.push(problem(message.clone()))
                }
                _ => {}
            }
        }
    }
    let loaded = found.into_iter().filter_map(|(name, result)| Some((name.to_string(), result.ok()?.0))).collect();
    PluginCheck { problems, loaded }
}

/// A loaded plugin and, for a transformation, what its describe said.
type Found = (Plugin, Option<Result<runtime::PluginInfo, String>>);

/// The plugins the view types use: transformations and checksums.
fn used_plugins(catalog: &Catalog) -> std::collections::BTreeSet<&str> {
    catalog
        .types()
        .iter()
        .filter_map(|t| match &t.transformation {
            Transformation::Plugin { plugin, checksum, .. } => Some([Some(plugin.as_str()), checksum.as_deref()]),
            Transformation::External => None,
        })
        .flatten()
        .flatten()
        .collect()
}

/// Loads a declared plugin with the limits the project gives it.
pub async fn load_plugin(runtime: &Runtime, catalog: &Catalog, decl: &PluginDecl) -> Result<Plugin, Error> {
    let plugin = runtime.load_file(&decl.file).await.map_err(|source| Error::Plugin {
        name: decl.name.clone(),
        file: decl.file.clone(),
        source,
    })?;
    let mut limits = plugin.limits();
    // `[defaults]` speaks of transformations; checksums and listeners keep
    // their world's tighter limits unless their own entry says otherwise.
    let transformation = plugin.world() == runtime::World::Transformation;
    if let Some(deadline) = decl.deadline.or(catalog.settings.deadline.filter(|_| transformation)) {
        limits.deadline = deadline;
    }
    if let Some(mib) = decl.memory_mib.or(catalog.settings.memory_mib.filter(|_| transformation)) {
        limits.memory = mib << 20;
    }
    Ok(plugin.with_limits(limits))
}

/// Runs one transformation into a fresh staging directory and publishes it
/// on data; any failure leaves the previous data untouched.
async fn run_plugin(
    plugin: &Plugin,
    mut request: TransformRequest,
    staging: &Staging,
    data_path: &std::path::Path,
    done_flag: &str,
) -> Result<bool, (bool, String)> {
    let dir = staging.create().map_err(|e| (true, format!("cannot create a staging directory: {e}")))?;
    request.output_dir = dir.clone();
    let report = match plugin.transform(&request).await {
        Ok(report) => report,
        Err(e) => {
            staging.discard(&dir);
            return Err((false, e.to_string()));
        }
    };
    match report.result {
        Ok(TransformOutcome::Data { .. }) => match staging.publish(&dir, data_path, done_flag) {
            Ok(()) => Ok(true),
            Err(e) => {
                staging.discard(&dir);
                Err((true, format!("cannot publish to {}: {e}", data_path.display())))
            }
        },
        Ok(TransformOutcome::NoData) => {
            staging.discard(&dir);
            Ok(false)
        }
        Err(failure) => {
            staging.discard(&dir);
            Err((failure.is_retryable(), format!("{} ({:?})", failure.message, failure.kind)))
        }
    }
}

/// The event of one application of the state machine, now.
fn new_event(
    view: &Arc<str>,
    previous: ViewState,
    current: ViewState,
    actions: &[Action],
    run_id: Option<&Arc<str>>,
    error: Option<String>,
) -> NewEvent {
    NewEvent {
        view: view.clone(),
        previous,
        current,
        actions: actions.iter().map(|action| action.name().into()).collect(),
        time: now_millis(),
        run_id: run_id.cloned(),
        error,
    }
}

/// The stable state a view is stored as: in-flight states become what the
/// view had before (materialized if it ever was).
fn previous_stable(state: ViewState, record: &ViewRecord) -> ViewState {
    match state {
        ViewState::Waiting | ViewState::Transforming | ViewState::Retrying => {
            if record.timestamp.is_some() {
                ViewState::Materialized
            } else {
                ViewState::Receive
            }
        }
        stable => stable,
    }
}

/// A type's version checksum: its `version` alone if set; else what its
/// checksum plugin returns; else the plugin's content hash, name and
/// configuration. External data has a fixed version.
async fn version_checksum(
    view_type: &crate::catalog::ViewType,
    plugins: &HashMap<String, Plugin>,
) -> Result<String, Error> {
    let hash = |parts: &[&str]| {
        let mut hasher = blake3::Hasher::new();
        for part in parts {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hasher.finalize().to_hex()[..16].to_string()
    };
    if let Some(version) = &view_type.version {
        return Ok(hash(&["version", version]));
    }
    let Transformation::Plugin { plugin, config, checksum } = &view_type.transformation else {
        return Ok("external".into());
    };
    let mut canonical: Vec<(String, String)> =
        config.iter().map(|(k, v)| (k.clone(), v.source().to_string())).collect();
    canonical.sort();
    if let Some(checksum_plugin) = checksum {
        let request = ChecksumRequest { transformation: plugin.clone(), config: canonical, resources: Vec::new() };
        let report = plugins[checksum_plugin].checksum(&request).await.map_err(|e| Error::Checksum {
            name: checksum_plugin.clone(),
            view_type: view_type.name.clone(),
            message: e.to_string(),
        })?;
        let value = report.result.map_err(|f| Error::Checksum {
            name: checksum_plugin.clone(),
            view_type: view_type.name.clone(),
            message: f.message,
        })?;
        return Ok(hash(&["checksum", &value]));
    }
    let content = plugins[plugin].content_hash();
    let config_text = serde_json::to_string(&canonical).unwrap_or_default();
    Ok(hash(&["plugin", &content, plugin, &config_text]))
}
