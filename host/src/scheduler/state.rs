//! The scheduler's view state: one [`Scheduler`] owns a slot per
//! instantiated view (its record as committed, and its URL), the plugins'
//! version checksums, the permits, the staging area and, when shared, the
//! live table readers consult. Outside runs it instantiates, invalidates
//! and plans; runs are in `run`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::Semaphore;

use super::Error;
use super::memo::Memo;
use super::publish::Staging;
use super::table::{SharedTable, Table, ViewRow};
use super::transition::{Action, Event, Facts, Freshness, freshness, transition};
use crate::catalog::{Catalog, Transformation, ViewTypeId, pattern};
use crate::lattice::{self, Lattice, Resolution, ViewId};
use crate::metastore::{Commit, Metastore, RunRecord, SchemaChange, ViewRecord};
use crate::model::{Termination, ViewState};
use crate::plugins::Plugins;

/// What the scheduler keeps per view between runs.
#[derive(Debug, Clone, Default)]
pub(super) struct Slot {
    pub record: ViewRecord,
    /// The state the metastore holds for it.
    pub stored_state: ViewState,
    /// Its URL path, rendered once: every event names it.
    pub url: Arc<str>,
}

/// What an invalidate request did, by URL path.
#[derive(Debug, Clone, Default)]
pub struct Invalidation {
    pub invalidated: Vec<String>,
    /// Views in flight, which cannot be invalidated now, with the reason.
    pub refused: Vec<(String, String)>,
}

/// What transformations need: the plugins and each type's version checksum.
/// A scheduler opened without them can instantiate and invalidate only.
pub(super) struct Transformations {
    pub plugins: Arc<Plugins>,
    pub versions: HashMap<ViewTypeId, String>,
}

pub struct Scheduler {
    pub(super) catalog: Arc<Catalog>,
    pub(super) lattice: Lattice,
    pub(super) store: Arc<Metastore>,
    pub(super) transformations: Option<Transformations>,
    /// Types whose schema checksum changed when this scheduler opened.
    pub(super) schema_changed: HashSet<ViewTypeId>,
    pub(super) slots: Vec<Slot>,
    pub(super) staging: Arc<Staging>,
    pub(super) global: Permits,
    pub(super) per_plugin: HashMap<String, Permits>,
    pub(super) retry_backoff: Duration,
    pub(super) progress: Option<Box<dyn FnMut(Progress) + Send>>,
    pub(super) run_started: Option<Box<Announce>>,
    /// The live view for readers, once shared (a service shares it).
    pub(super) table: Option<SharedTable>,
    /// What a long-lived scheduler remembers of freshness between runs.
    pub(super) memo: Option<Memo>,
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

/// How far a run has come: views settled, of views known to the run so far
/// (the number grows as dependencies are discovered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub settled: usize,
    pub known: usize,
    pub running: usize,
}

/// Told each run's id as the run starts.
type Announce = dyn FnMut(&str) + Send;

pub(super) fn now_millis() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

pub(super) fn mtime_millis(path: &std::path::Path) -> Option<i64> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    modified.duration_since(SystemTime::UNIX_EPOCH).ok().map(|d| d.as_millis() as i64)
}

impl Scheduler {
    /// Opens the metastore, registers schema checksums (dropping the
    /// metadata of types whose schema changed), makes sure every plugin the
    /// view types use is loaded and fits, and computes each type's version
    /// checksum.
    pub async fn open(catalog: Arc<Catalog>, plugins: Arc<Plugins>) -> Result<Scheduler, Error> {
        plugins.ready_for(&catalog)?;
        let versions = plugins.versions(&catalog).await?;
        let mut scheduler = Scheduler::open_records(catalog)?;
        scheduler.transformations = Some(Transformations { plugins, versions });
        Ok(scheduler)
    }

    /// Opens the metastore and registers schema checksums, without plugins:
    /// enough to instantiate views and invalidate them, not to materialize
    /// or plan.
    pub fn open_records(catalog: Arc<Catalog>) -> Result<Scheduler, Error> {
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
            lattice: Lattice::new(catalog.clone()),
            store,
            transformations: None,
            schema_changed,
            slots: Vec::new(),
            staging: Arc::new(staging),
            global: Permits::new("*", catalog.settings.concurrency),
            per_plugin,
            catalog,
            retry_backoff: Duration::from_millis(100),
            progress: None,
            run_started: None,
            table: None,
            memo: None,
        })
    }

    /// The plugins and version checksums, which materializing and planning need.
    pub(super) fn transformations(&self) -> Result<&Transformations, Error> {
        self.transformations.as_ref().ok_or(Error::NoPlugins)
    }

    /// A type's current version checksum.
    pub(super) fn version(&self, id: ViewId) -> &str {
        self.transformations.as_ref().map_or("", |t| t.versions[&self.lattice.view_type(id).id].as_str())
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

    pub fn lattice(&self) -> &Lattice {
        &self.lattice
    }

    /// Limits how many views the scheduler holds, and how many one request
    /// may add with their dependencies (a server's reads instantiate too).
    pub fn set_capacity(&mut self, capacity: lattice::Capacity) {
        self.lattice.set_capacity(capacity);
    }

    /// Records a new run, not started yet, with an id that sorts by start
    /// time and never repeats, even for runs started in the same millisecond.
    pub fn new_run(&mut self, pattern_text: &str, mode: super::Mode) -> Result<RunRecord, Error> {
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
    pub fn finish_unstarted(&mut self, mut run: RunRecord, termination: Termination) -> Result<(), Error> {
        run.finished = Some(now_millis());
        run.termination = Some(termination);
        self.store.commit(&Commit { runs: vec![run], ..Commit::default() })?;
        self.with_table(|table| table.counters.runs_finished += 1);
        Ok(())
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
            record.state = super::record::previous_stable(record.state, &record);
            let slot = &mut self.slots[index];
            slot.stored_state = record.state;
            slot.record = record;
            slot.url = url;
        }
        self.refresh_table((known..self.slots.len()).map(|index| ViewId(index as u32)));
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
        self.refresh_table(self.lattice.ids());
        table
    }

    /// Copies the views' slots into the shared table, adding rows for new
    /// views (which come in lattice order, as the table's rows do).
    pub(super) fn refresh_table(&self, ids: impl IntoIterator<Item = ViewId>) {
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

    pub(super) fn with_table(&self, change: impl FnOnce(&mut Table)) {
        if let Some(table) = &self.table {
            change(&mut table.write().unwrap_or_else(|poisoned| poisoned.into_inner()));
        }
    }

    /// A view's state now.
    pub(super) fn state_of(&self, id: ViewId) -> ViewState {
        self.slots[id.0 as usize].record.state
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
        let targets = if dependencies { self.lattice.closure(&addressed) } else { addressed };
        let mut commit = Commit::default();
        let (mut done, mut refused) = (Vec::new(), Vec::new());
        for id in targets {
            let slot = &mut self.slots[id.0 as usize];
            // Dependents in this run may have taken it as it is already;
            // invalidating it under them would build them without it.
            if settled_by_run(id) {
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
        self.transformations()?;
        let addressed = self.instantiate(pattern_text)?;
        let order = self.dependencies_first(&addressed);
        let versions = &self.transformations()?.versions;
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
            // A `latest(n)` that found no instance is a dependency without data.
            let missing = self.lattice.has_unsatisfied(id);
            let all_dependencies_no_data =
                (missing || !dependencies.is_empty()) && dependencies.iter().all(|d| no_data[d.0 as usize]);
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
                    current_version: &versions[&view_type.id],
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
                _ if view_no_data && missing => format!(
                    "no data (dependency {}: latest() found no instance with data)",
                    self.lattice.unsatisfied(id).join(", ")
                ),
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
    pub(super) fn dependencies_first(&self, addressed: &[ViewId]) -> Vec<ViewId> {
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
}

/// The event of one application of the state machine, now.
pub(super) fn new_event(
    view: &Arc<str>,
    previous: ViewState,
    current: ViewState,
    actions: &[Action],
    run_id: Option<&Arc<str>>,
    error: Option<String>,
) -> crate::metastore::NewEvent {
    crate::metastore::NewEvent {
        view: view.clone(),
        previous,
        current,
        actions: actions.iter().map(|action| action.name().into()).collect(),
        time: now_millis(),
        run_id: run_id.cloned(),
        error,
    }
}
