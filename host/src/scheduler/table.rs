//! The read side of a long-lived scheduler: a table of every instantiated
//! view's live state, runs in flight and counters, which the loop updates
//! after each metastore commit and which readers (the HTTP API) consult
//! without waiting for the loop.
//!
//! Invariant: only the scheduler's loop writes it, and only what it has
//! committed (or, for in-flight states, what it has applied); the counts
//! per state, the index by URL and the dependents always match the rows
//! (states and dependencies change only through `set_state` and
//! `set_dependencies`). A reader holds the lock for one request's scan (a few ms
//! for a filtered scan of 100k rows), the loop for one batch of rows. It
//! knows nothing of HTTP.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use crate::model::{ViewCondition, ViewState};

/// One instantiated view as readers see it.
#[derive(Debug, Clone)]
pub struct ViewRow {
    pub url: Arc<str>,
    pub view_type: Arc<str>,
    pub state: ViewState,
    pub timestamp: Option<i64>,
    pub incomplete: bool,
    pub errors: bool,
    /// Invalidated and not acted on, while the state says otherwise.
    pub invalidation_pending: bool,
    pub last_error: Option<String>,
    /// Retrying for transient network trouble (`retrying (network)`): the
    /// last error.
    pub network_retry: Option<String>,
    /// What its transformation returned when it was last materialized.
    pub counters: Option<crate::model::Counters>,
    /// The version checksum it was last materialized with.
    pub version_checksum: Option<Arc<str>>,
    /// Indexes of its dependencies in [`Table::views`].
    pub dependencies: Box<[u32]>,
    pub data_path: std::path::PathBuf,
}

impl ViewRow {
    /// What is shown of it, by which the API selects it.
    pub fn condition(&self) -> ViewCondition {
        ViewCondition {
            state: self.state,
            incomplete: self.incomplete,
            errors: self.errors,
            invalidation_pending: self.invalidation_pending,
        }
    }
}

/// Transformations started and how they ended, since the process started.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub succeeded: u64,
    pub failed: u64,
    pub retried: u64,
    pub canceled: u64,
    pub runs_finished: u64,
    /// Safety rescans of waiting actions' inputs, and those that found one
    /// the watches had missed.
    pub rescans: u64,
    pub rescans_found: u64,
}

/// A view whose transformation is in flight.
#[derive(Debug, Clone)]
pub struct Running {
    pub view: Arc<str>,
    pub plugin: String,
    /// Milliseconds since the Unix epoch.
    pub since: i64,
    /// How far an engine's job has come, as its driver last said.
    pub progress: Option<String>,
}

/// What stays the same of the run executing while it runs: the overview
/// shows it from here, without reading the run's record, which grows with
/// every view the run transforms.
#[derive(Debug, Clone)]
pub struct CurrentRun {
    pub id: String,
    pub pattern: String,
    pub mode: crate::model::Mode,
    /// Milliseconds since the Unix epoch.
    pub started: i64,
}

#[derive(Debug, Default)]
pub struct Table {
    /// By lattice index: a view's index never changes.
    views: Vec<ViewRow>,
    /// The run the loop is executing.
    pub current_run: Option<CurrentRun>,
    /// Views of the current run not settled yet.
    pub current_run_pending: usize,
    /// The current run's flows as they stand (QUEUED, STARTING, RUNNING,
    /// then how each ended), by view index; views found up to date are
    /// left out, as a run's record leaves them.
    pub current_run_flows: BTreeMap<u32, crate::model::FlowStatus>,
    /// Runs accepted and waiting for the current one, in order.
    pub queued_runs: Vec<String>,
    /// Transformations running (holding their permits), by view.
    pub running: BTreeMap<u32, Running>,
    pub counters: Counters,
    /// The coordinators as the loop last saw them, between two of its steps.
    pub coordinators: Vec<super::coordinate::CoordinatorStatus>,
    /// Views per state, kept as rows change: an overview costs nothing.
    counts: [usize; ViewState::ALL.len()],
    /// Each view's index by its URL path, and what depends on it (the
    /// inverse of the rows' `dependencies`), kept as rows are added and
    /// rewired: a view's page finds both without a pass over every row.
    by_url: HashMap<Arc<str>, u32>,
    dependents: Vec<Vec<u32>>,
}

impl Table {
    /// Every instantiated view, by lattice index.
    pub fn views(&self) -> &[ViewRow] {
        &self.views
    }

    /// A row to update, other than its state (`set_state` keeps the
    /// counts) and its dependencies (`set_dependencies` keeps the inverse).
    pub fn row_mut(&mut self, index: usize) -> &mut ViewRow {
        &mut self.views[index]
    }

    /// The index of the view at `url`, if it is held.
    pub fn index_of(&self, url: &str) -> Option<u32> {
        self.by_url.get(url).copied()
    }

    /// The indexes of the views that depend on the view at `index`.
    pub fn dependents(&self, index: u32) -> &[u32] {
        self.dependents.get(index as usize).map_or(&[], Vec::as_slice)
    }

    /// Rewires a view (a `latest()` dependency moved on).
    pub fn set_dependencies(&mut self, index: usize, dependencies: Box<[u32]>) {
        let old = std::mem::replace(&mut self.views[index].dependencies, dependencies);
        for dependency in old.iter() {
            if let Some(theirs) = self.dependents.get_mut(*dependency as usize) {
                theirs.retain(|&d| d as usize != index);
            }
        }
        let new = self.views[index].dependencies.clone();
        self.add_dependents(index as u32, &new);
    }

    fn add_dependents(&mut self, index: u32, dependencies: &[u32]) {
        for &dependency in dependencies {
            if self.dependents.len() <= dependency as usize {
                self.dependents.resize_with(dependency as usize + 1, Vec::new);
            }
            let theirs = &mut self.dependents[dependency as usize];
            if !theirs.contains(&index) {
                theirs.push(index);
            }
        }
    }

    /// How many views are in each state, every state included.
    pub fn overview(&self) -> BTreeMap<ViewState, usize> {
        ViewState::ALL.into_iter().zip(self.counts).collect()
    }

    /// Adds a row for a new view (its state counted from now on).
    pub fn push(&mut self, row: ViewRow) {
        let index = self.views.len() as u32;
        self.counts[row.state as usize] += 1;
        self.by_url.insert(row.url.clone(), index);
        let dependencies = row.dependencies.clone();
        self.views.push(row);
        self.add_dependents(index, &dependencies);
    }

    /// Drops every view's row (a reload rebuilds the lattice: indexes start
    /// again from 0); runs and counters stay.
    pub fn clear_views(&mut self) {
        self.views.clear();
        self.counts = [0; ViewState::ALL.len()];
        self.by_url.clear();
        self.dependents.clear();
    }

    /// Changes a view's state, keeping the counts.
    pub fn set_state(&mut self, index: usize, state: ViewState) {
        let row = &mut self.views[index];
        self.counts[row.state as usize] -= 1;
        self.counts[state as usize] += 1;
        row.state = state;
    }
}

/// The table, shared between the loop (writer) and readers.
pub type SharedTable = Arc<RwLock<Table>>;
