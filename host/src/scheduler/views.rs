//! The book of views: the lattice of instantiated views, one slot per view
//! (its record as committed, its URL), the memo of freshness kept between
//! runs, and the live table readers consult without the loop. Invariant: a
//! slot holds what the metastore holds; a record is adopted into it only
//! once the commit that writes it has succeeded, and the table and the
//! memo follow the slots, never run ahead of them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::memo::Memo;
use super::table::{SharedTable, Table, ViewRow};
use super::transition::{Facts, FlagCheck, Freshness, Reason, Settled, freshness};
use crate::catalog::{Catalog, Transformation, ViewTypeId};
use crate::lattice::{self, Lattice, Resolution, ViewId};
use crate::metastore::{FlagIdentity, SeenFlag, ViewRecord};
use crate::model::ViewState;
use crate::storage::{Key, Sighting, Storage};

/// What the scheduler keeps per view between runs.
#[derive(Debug, Clone, Default)]
pub(super) struct Slot {
    pub record: ViewRecord,
    /// The state the metastore holds for it.
    pub stored_state: ViewState,
    /// Its URL path, rendered once: every event names it.
    pub url: Arc<str>,
    /// Retrying for network trouble: the last error (not recorded: the
    /// view's record keeps only failures for good).
    pub network_retry: Option<String>,
}

/// How a dependency stands when a view is judged: as the run left it
/// (`materialize`), or as a DEFAULT run is expected to leave it (`plan`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Standing {
    pub state: ViewState,
    pub timestamp: Option<i64>,
}

/// Whether a view whose dependencies have settled is outdated, and how
/// they settled: what `plan` explains and a run acts on.
#[derive(Debug, Clone)]
pub(super) struct Judgement {
    pub settled: Settled,
    pub freshness: Freshness,
}

/// An external view's flag as found now, against its record's. A record
/// from before flags were recorded holds the flag's mtime as its timestamp.
pub(super) fn flag_check(record: &ViewRecord, found: Option<FlagIdentity>) -> FlagCheck {
    match (found, record.done_flag) {
        (None, _) => FlagCheck::Absent,
        (Some(found), Some(SeenFlag::Present { identity, .. })) if identity == found => FlagCheck::Unchanged,
        (Some(found), None) if record.timestamp == Some(found.mtime_nanos.div_euclid(1_000_000)) => {
            FlagCheck::Unchanged
        }
        (Some(_), _) => FlagCheck::Changed,
    }
}

/// A change to the memo that a step decided, made once its commit succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MemoChange {
    /// It and all above it must be looked at again.
    Dirty,
    /// Published just now: what the kernel queued of that is taken in,
    /// then its new flag is watched.
    WatchPublished,
    /// Judged clean with all it depends on settled (`Memo::settled`).
    Settled { on_disk: Option<bool> },
}

/// The book of views (see the module's docs).
pub(super) struct Views {
    lattice: Lattice,
    slots: Vec<Slot>,
    /// What a long-lived scheduler remembers of freshness between runs.
    memo: Option<Memo>,
    /// Where the views' data is kept: what judges a flag or published data.
    storage: Storage,
    /// The live view for readers, once shared (a service shares it).
    table: Option<SharedTable>,
    /// Types whose schema checksum changed when this scheduler opened.
    schema_changed: HashSet<ViewTypeId>,
    /// The newest timestamp recorded or loaded.
    last_stamp: i64,
    /// The least timestamp the run in progress records: above every one
    /// recorded before it, so a view rebuilt is newer than all views built
    /// in earlier runs, even in the same millisecond.
    stamp_floor: i64,
    /// What one look at many flags saw of the views a run or a plan is
    /// about to judge ([`Views::sight_flags`]), each taken by its judgement.
    sighted: HashMap<ViewId, Sighting>,
}

impl Views {
    pub(super) fn new(catalog: Arc<Catalog>, schema_changed: HashSet<ViewTypeId>, storage: Storage) -> Views {
        Views {
            lattice: Lattice::new(catalog),
            slots: Vec::new(),
            memo: None,
            storage,
            table: None,
            schema_changed,
            last_stamp: 0,
            stamp_floor: 0,
            sighted: HashMap::new(),
        }
    }

    pub(super) fn lattice(&self) -> &Lattice {
        &self.lattice
    }

    pub(super) fn set_capacity(&mut self, capacity: lattice::Capacity) {
        self.lattice.set_capacity(capacity);
    }

    /// Starts the book over under `catalog` (a reload): no view is held, the
    /// table's rows go and the memo is dropped (returned whether it was kept).
    pub(super) fn reset(
        &mut self,
        catalog: Arc<Catalog>,
        schema_changed: HashSet<ViewTypeId>,
        storage: Storage,
    ) -> bool {
        self.storage = storage;
        let capacity = self.lattice.capacity();
        self.lattice = Lattice::new(catalog);
        self.lattice.set_capacity(capacity);
        self.slots.clear();
        self.schema_changed = schema_changed;
        self.with_table(Table::clear_views);
        self.memo.take().is_some()
    }

    /// What identifies a view's done flag now (its data directory when it
    /// has no flag), if there is one: one look in the storage.
    pub(super) fn flag_identity(&self, id: ViewId) -> Option<FlagIdentity> {
        self.storage.identity(&self.storage.key(&self.lattice.done_flag_path(id)))
    }

    /// Looks at the flags of those of `ids` whose judgement reads one (an
    /// external view's; a materialized view's, whether its data is still
    /// there) together, where the storage can do that for fewer requests
    /// than one each (an object store lists a month's days at once), so
    /// that an unchanged run costs a request per prefix, not per view.
    /// With a memo, only the materialized views it does not know clean
    /// (those its run will judge; a server's first run judges them all):
    /// its watches see each external flag when they start watching it,
    /// and a sighting older than that could hide a change.
    /// The sightings last until [`Views::forget_sightings`].
    pub(super) fn sight_flags(&mut self, ids: impl IntoIterator<Item = ViewId>) {
        if self.storage.as_object().is_none() && self.storage.as_roots().is_none() {
            return;
        }
        let ids: Vec<ViewId> = ids.into_iter().collect();
        self.start_absent_watches(&ids);
        let judged: Vec<ViewId> = ids
            .into_iter()
            .filter(|&id| {
                let record = &self.slots[id.0 as usize].record;
                let external = matches!(self.lattice.view_type(id).transformation, Transformation::External);
                let materialized = record.timestamp.is_some() && record.done_flag != Some(SeenFlag::Absent);
                match &self.memo {
                    None => external || materialized,
                    Some(memo) => !external && materialized && !memo.is_clean(id),
                }
            })
            .collect();
        let keys: Vec<Key> = judged.iter().map(|&id| self.storage.key(&self.lattice.done_flag_path(id))).collect();
        for (id, sighting) in judged.into_iter().zip(self.storage.sight(&keys)) {
            if sighting != Sighting::Unknown {
                self.sighted.insert(id, sighting);
            }
        }
    }

    /// With a memo on an object store, the watches of the external views
    /// among `ids` not watched yet start together: those whose flag a
    /// listing of its month sees absent (a server's first run, thousands
    /// of days awaited) are watched from that listing, and their
    /// judgement takes it; the others start with a HEAD each, as before.
    fn start_absent_watches(&mut self, ids: &[ViewId]) {
        let Some(memo) = &mut self.memo else { return };
        let awaited: Vec<(ViewId, Key)> = ids
            .iter()
            .filter(|&&id| {
                matches!(self.lattice.view_type(id).transformation, Transformation::External) && !memo.is_watched(id)
            })
            .map(|&id| (id, self.storage.key(&self.lattice.done_flag_path(id))))
            .collect();
        if awaited.len() < 2 {
            return;
        }
        for ((id, _), started) in awaited.iter().zip(memo.watch_absent(&awaited)) {
            if started {
                self.sighted.insert(*id, Sighting::Listed(None));
            }
        }
    }

    /// Drops what [`Views::sight_flags`] saw: the run or plan it was for is over.
    pub(super) fn forget_sightings(&mut self) {
        self.sighted.clear();
    }

    /// The view's flag for its judgement: as sighted with its run's
    /// others, where that tells (nothing there; the identity recorded, or
    /// any at all for whether data is there), else looked at alone.
    fn judged_flag(&mut self, id: ViewId, recorded: Option<&FlagIdentity>, exact: bool) -> Option<FlagIdentity> {
        match self.sighted.remove(&id) {
            Some(Sighting::Listed(None)) => None,
            Some(Sighting::Listed(Some(listed))) if !exact || recorded == Some(&listed) => Some(listed),
            _ => self.flag_identity(id),
        }
    }

    pub(super) fn schema_changed(&self) -> &HashSet<ViewTypeId> {
        &self.schema_changed
    }

    /// Adds the views `pattern` addresses (and their dependencies) to the
    /// lattice; their slots come with [`Views::take_in`].
    pub(super) fn instantiate(
        &mut self,
        pattern: &crate::catalog::pattern::Pattern,
        resolution: &Resolution<'_>,
    ) -> Result<Vec<ViewId>, lattice::Error> {
        self.lattice.instantiate(pattern, resolution)
    }

    /// Resolves a view's `latest()` again (see `Lattice::reresolve_latest`).
    pub(super) fn reresolve_latest(
        &mut self,
        id: ViewId,
        resolution: &Resolution<'_>,
    ) -> Result<Option<Vec<ViewId>>, lattice::Error> {
        self.lattice.reresolve_latest(id, resolution)
    }

    /// The edges of a view's `latest()` moved from `previous`: the memo's
    /// reverse edges and the table's row follow them.
    pub(super) fn rewired(&mut self, id: ViewId, previous: &[ViewId]) {
        if let Some(memo) = &mut self.memo {
            memo.rewire(id, previous, self.lattice.dependencies(id));
        }
        let dependencies: Box<[u32]> = self.lattice.dependencies(id).iter().map(|d| d.0).collect();
        self.with_table(|table| table.set_dependencies(id.0 as usize, dependencies));
    }

    /// Views the lattice holds with no slot yet, by index.
    pub(super) fn new_views(&self) -> std::ops::Range<usize> {
        self.slots.len()..self.lattice.len()
    }

    /// Gives the next view of the lattice its slot, with its record as the
    /// metastore holds it.
    pub(super) fn take_in(&mut self, url: Arc<str>, record: ViewRecord) {
        let id = ViewId(self.slots.len() as u32);
        // (An external view's record from before flags were recorded
        // holds the flag's mtime, perhaps in the future: not a stamp.)
        let legacy =
            record.done_flag.is_none() && matches!(self.lattice.view_type(id).transformation, Transformation::External);
        if let Some(timestamp) = record.timestamp.filter(|_| !legacy) {
            self.last_stamp = self.last_stamp.max(timestamp);
        }
        self.slots.push(Slot { stored_state: record.state, record, url, network_retry: None });
    }

    /// After slots were taken in from `known` on: their rows in the table
    /// and their entries in the memo.
    pub(super) fn taken_in(&mut self, known: usize) {
        self.refresh_table((known..self.slots.len()).map(|index| ViewId(index as u32)));
        if let Some(memo) = &mut self.memo {
            memo.grow(&self.lattice);
        }
    }

    /// Adopts a view's record as committed: `stored` is the state the
    /// metastore now holds for it. Only after the commit that wrote it.
    pub(super) fn adopt(&mut self, id: ViewId, record: ViewRecord, stored: ViewState, network_retry: Option<String>) {
        let slot = &mut self.slots[id.0 as usize];
        slot.record = record;
        slot.stored_state = stored;
        slot.network_retry = network_retry;
    }

    pub(super) fn slot(&self, id: ViewId) -> &Slot {
        &self.slots[id.0 as usize]
    }

    /// A view's slot, if the book holds the view.
    pub(super) fn get(&self, index: u32) -> Option<&Slot> {
        self.slots.get(index as usize)
    }

    pub(super) fn slots(&self) -> impl Iterator<Item = (ViewId, &Slot)> {
        self.slots.iter().enumerate().map(|(index, slot)| (ViewId(index as u32), slot))
    }

    pub(super) fn url(&self, id: ViewId) -> &Arc<str> {
        &self.slots[id.0 as usize].url
    }

    pub(super) fn record(&self, id: ViewId) -> &ViewRecord {
        &self.slots[id.0 as usize].record
    }

    /// A view's state now.
    pub(super) fn state_of(&self, id: ViewId) -> ViewState {
        self.slots[id.0 as usize].record.state
    }

    /// A run begins at `now`: the least timestamp it records.
    pub(super) fn begin_run(&mut self, now: i64) {
        self.stamp_floor = now.max(self.last_stamp + 1);
        // Every change made before this run was asked for is seen by it.
        self.drain_watches();
    }

    /// A timestamp recorded: the newest so far, if it is newer.
    pub(super) fn note_stamp(&mut self, timestamp: i64) {
        self.last_stamp = self.last_stamp.max(timestamp);
    }

    /// The least timestamp the run in progress records.
    pub(super) fn stamp_floor(&self) -> i64 {
        self.stamp_floor
    }

    /// The URL paths of the instances a view's `latest(n)` declarations
    /// resolve to now, to record with it and compare with what it read;
    /// `None` for a view without `latest(n)`.
    pub(super) fn latest_read(&self, id: ViewId) -> Option<Vec<String>> {
        self.lattice.has_latest(id).then(|| {
            self.lattice.latest_dependencies(id).into_iter().map(|d| self.slots[d.0 as usize].url.to_string()).collect()
        })
    }

    /// Remembers freshness between runs with `memo`.
    pub(super) fn remember(&mut self, mut memo: Memo) {
        memo.grow(&self.lattice);
        self.memo = Some(memo);
    }

    /// Whether the memo knows the view clean (false without a memo).
    pub(super) fn is_clean(&self, id: ViewId) -> bool {
        self.memo.as_ref().is_some_and(|m| m.is_clean(id))
    }

    /// The memo changes a committed step decided, in order.
    pub(super) fn change_memo(&mut self, id: ViewId, change: MemoChange) {
        let Some(memo) = &mut self.memo else { return };
        match change {
            MemoChange::Dirty => memo.dirty(id),
            MemoChange::WatchPublished => {
                memo.drain();
                memo.watch_published(id, &self.storage.key(&self.lattice.done_flag_path(id)));
            }
            MemoChange::Settled { on_disk } => memo.settled(id, &self.lattice, on_disk),
        }
    }

    /// Watches an external view's flag, when the scheduler watches.
    pub(super) fn watch(&mut self, id: ViewId, flag: &std::path::Path) {
        if let Some(memo) = &mut self.memo {
            memo.watch(id, &self.storage.key(flag));
        }
    }

    /// Whether a change to an external view's flag since it was last looked
    /// at would have been seen by the watches.
    pub(super) fn is_watched(&self, id: ViewId) -> bool {
        self.memo.as_ref().is_some_and(|memo| memo.is_watched(id))
    }

    /// The watches' descriptor, for waiting on it (a copy).
    pub(super) fn watches(&self) -> Option<std::os::fd::OwnedFd> {
        self.memo.as_ref().and_then(|memo| memo.descriptor())
    }

    /// Whether the watches are polled (an object store): the service then
    /// polls them at the storage's interval, with no descriptor to wait on.
    pub(super) fn watches_polled(&self) -> bool {
        self.memo.as_ref().is_some_and(Memo::is_polled)
    }

    /// Polls the watches (an object store's), then applies what changed.
    pub(super) fn poll_watches(&mut self) -> crate::storage::poll::Asked {
        let Some(memo) = &mut self.memo else { return crate::storage::poll::Asked::default() };
        let asked = memo.poll();
        memo.drain();
        asked
    }

    /// Applies the changes the watches have queued.
    pub(super) fn drain_watches(&mut self) {
        if let Some(memo) = &mut self.memo {
            memo.drain();
        }
    }

    /// Shares a live table of the views, runs and transformations.
    pub(super) fn share_table(&mut self) -> SharedTable {
        let table = self.table.get_or_insert_with(SharedTable::default).clone();
        self.refresh_table(self.lattice.ids());
        table
    }

    pub(super) fn has_table(&self) -> bool {
        self.table.is_some()
    }

    /// Copies the views' slots into the shared table, adding rows for new
    /// views (which come in lattice order, as the table's rows do).
    pub(super) fn refresh_table(&self, ids: impl IntoIterator<Item = ViewId>) {
        let Some(table) = &self.table else { return };
        let mut table = table.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        for id in ids {
            let (index, slot) = (id.0 as usize, &self.slots[id.0 as usize]);
            if index == table.views().len() {
                table.push(self.row(id));
                continue;
            }
            let record = &slot.record;
            table.set_state(index, record.state);
            let row = table.row_mut(index);
            row.timestamp = record.timestamp;
            row.incomplete = record.incomplete;
            row.errors = record.errors;
            row.invalidation_pending = record.condition().invalidation_pending;
            if row.last_error != record.last_error {
                row.last_error = record.last_error.clone();
            }
            if row.network_retry != slot.network_retry {
                row.network_retry = slot.network_retry.clone();
            }
            if row.counters != record.counters {
                row.counters = record.counters.clone();
            }
            if row.version_checksum.as_deref() != record.version_checksum.as_deref() {
                row.version_checksum = record.version_checksum.as_deref().map(Arc::from);
            }
        }
    }

    /// A new view's row in the table.
    fn row(&self, id: ViewId) -> ViewRow {
        let slot = &self.slots[id.0 as usize];
        let record = &slot.record;
        ViewRow {
            url: slot.url.clone(),
            view_type: self.lattice.view_type(id).name.as_str().into(),
            state: record.state,
            timestamp: record.timestamp,
            incomplete: record.incomplete,
            errors: record.errors,
            invalidation_pending: record.condition().invalidation_pending,
            last_error: record.last_error.clone(),
            network_retry: slot.network_retry.clone(),
            counters: record.counters.clone(),
            version_checksum: record.version_checksum.as_deref().map(Arc::from),
            dependencies: self.lattice.dependencies(id).iter().map(|d| d.0).collect(),
            data_path: self.lattice.data_path(id),
        }
    }

    pub(super) fn with_table(&self, change: impl FnOnce(&mut Table)) {
        if let Some(table) = &self.table {
            change(&mut table.write().unwrap_or_else(|poisoned| poisoned.into_inner()));
        }
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

    /// How a view's dependencies settled, as `standing` says each stands.
    fn settled(&self, id: ViewId, standing: impl Fn(ViewId, &Slot) -> Standing) -> (Settled, Option<(ViewId, i64)>) {
        let dependencies = self.lattice.dependencies(id);
        // A `latest(n)` that found no instance is a dependency without data.
        let missing = self.lattice.has_unsatisfied(id);
        let (mut all_no_data, mut some_no_data, mut some_failed, mut some_errors) =
            (missing || !dependencies.is_empty(), missing, false, false);
        let mut newest: Option<(ViewId, i64)> = None;
        for &dependency in dependencies {
            let Standing { state, timestamp } = standing(dependency, &self.slots[dependency.0 as usize]);
            all_no_data &= state == ViewState::NoData;
            some_no_data |= state == ViewState::NoData;
            some_failed |= state == ViewState::Failed;
            // Flags travel up the lattice (seed 000): a view over one built
            // without all its data is incomplete too, and one over a view
            // with errors has errors.
            let theirs = &self.slots[dependency.0 as usize].record;
            some_no_data |= state == ViewState::Materialized && theirs.incomplete;
            some_errors |= matches!(state, ViewState::Materialized | ViewState::NoData) && theirs.errors;
            if state == ViewState::Materialized
                && let Some(timestamp) = timestamp
                && newest.is_none_or(|(_, t)| timestamp >= t)
            {
                newest = Some((dependency, timestamp));
            }
        }
        (Settled { all_no_data, some_no_data, some_failed, some_errors }, newest)
    }

    /// The one judgement of a view whose dependencies have settled, shared
    /// by `plan` and runs: how the dependencies stand (`standing` says, for
    /// each, from its slot), and whether the view is outdated and why, its
    /// type's version being `version` now. It reads what only the disk
    /// knows: an external view's done flag, and whether a materialized
    /// view's published data is still there (each watched first, when a
    /// memo is kept, so a change after the read is queued): one stat per view.
    pub(super) fn judge(
        &mut self,
        id: ViewId,
        version: &str,
        standing: impl Fn(ViewId, &Slot) -> Standing,
    ) -> Judgement {
        let (settled, newest) = self.settled(id, standing);
        let view_type = self.lattice.view_type(id);
        let (external, type_id) = (matches!(view_type.transformation, Transformation::External), view_type.id);
        let external_flag = external.then(|| {
            let flag = self.lattice.done_flag_path(id);
            // A watch on an object store starts with a HEAD of the flag:
            // what it saw is the flag now.
            let watched = self.memo.as_mut().and_then(|memo| memo.watch(id, &self.storage.key(&flag)));
            if let Some(found) = watched {
                return flag_check(&self.slots[id.0 as usize].record, found);
            }
            let recorded = match &self.slots[id.0 as usize].record.done_flag {
                Some(SeenFlag::Present { identity, .. }) => Some(*identity),
                _ => None,
            };
            // A listing names no version id: an external flag seen so is
            // taken only where it is the one recorded, else HEADed.
            let found = self.judged_flag(id, recorded.as_ref(), true);
            flag_check(&self.slots[id.0 as usize].record, found)
        });
        // A view recorded as materialized has published its data, done
        // flag inside: one stat says whether it is still there.
        // (Not one SET_ONLY marked without data: it never had any.)
        let record = &self.slots[id.0 as usize].record;
        let data_gone = !external && record.timestamp.is_some() && record.done_flag != Some(SeenFlag::Absent) && {
            let flag = self.lattice.done_flag_path(id);
            if let Some(memo) = &mut self.memo {
                memo.watch_published(id, &self.storage.key(&flag));
            }
            self.judged_flag(id, None, false).is_none()
        };
        let slot = &self.slots[id.0 as usize];
        let facts = Facts {
            invalidated: slot.record.invalidated || slot.record.state == ViewState::Invalidated,
            schema_changed: self.schema_changed.contains(&type_id),
            recorded_version: slot.record.version_checksum.as_deref(),
            recorded_timestamp: slot.record.timestamp,
            current_version: version,
            // Named below, only if it is the reason: most views are up to date.
            newest_dependency: newest.map(|(_, t)| ("", t)),
            external_flag,
            data_gone,
        };
        Judgement { settled, freshness: self.freshness_named(id, &facts, newest) }
    }

    /// The freshness of `facts`, with the dependency that is newer named
    /// and a `latest()` that moved taken as a change of inputs.
    fn freshness_named(&self, id: ViewId, facts: &Facts<'_>, newest: Option<(ViewId, i64)>) -> Freshness {
        let slot = &self.slots[id.0 as usize];
        // `latest()` resolving to another instance than the one the view
        // read is a change of its inputs, even when the instance is older
        // than the view (latest(-1) moving up to data the view was built
        // after, or latest(0) moving back when a flag goes). A record from
        // before instances were recorded is not compared.
        // (Its state may be in flight: a run judges it so.)
        let latest_moved = slot.record.latest.as_ref().and_then(|read| {
            self.latest_read(id).filter(|now| now != read).map(|now| (read.join(", "), now.join(", ")))
        });
        let named = |reason: Reason| match reason {
            Reason::DependencyNewer { .. } => {
                let dependency = newest.map(|(d, _)| self.lattice.url_path(d)).unwrap_or_default();
                Reason::DependencyNewer { dependency }
            }
            other => other,
        };
        match (freshness(facts), latest_moved) {
            // New input besides a version change is kept with it, for the
            // mode that suppresses the version change only.
            (Freshness::Outdated(Reason::VersionChanged { old, new, input }), moved) => {
                let input =
                    input.map(|input| named(*input)).or(moved.map(|(read, now)| Reason::LatestMoved { read, now }));
                Freshness::Outdated(Reason::VersionChanged { old, new, input: input.map(Box::new) })
            }
            (Freshness::Outdated(reason @ Reason::DependencyNewer { .. }), _) => Freshness::Outdated(named(reason)),
            (Freshness::UpToDate, Some((read, now))) => Freshness::Outdated(Reason::LatestMoved { read, now }),
            (other, _) => other,
        }
    }
}
