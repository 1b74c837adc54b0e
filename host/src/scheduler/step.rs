//! The pure step of a run: one event applied to one view, through
//! `transition` and `record`, to what follows from it: the view's new
//! state and record (and what the metastore must hold of it), the flow the
//! run writes, what the memo learns, the event for the log, and the
//! actions to execute. `run::apply_queue` folds a queue of events through
//! it, commits everything once, and only then adopts the records and acts.
//!
//! Invariant: no I/O, no metastore, no clock. What the step needs comes in
//! [`Ctx`]; the done flag and the `latest()` instances are read through
//! the context's readers, called only when the actions record them.

use std::path::PathBuf;
use std::sync::Arc;

use super::record;
use super::transition::{Action, Event, Mode, Settled, transition};
use super::views::MemoChange;
use crate::metastore::{FlagIdentity, FlowChange, FlowRecord, NewEvent, SeenFlag, ViewRecord};
use crate::model::{Counters, FlowStatus, ViewState};

/// A view as a step finds it, and leaves it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct ViewNow {
    pub record: ViewRecord,
    /// The state the metastore holds for it.
    pub stored_state: ViewState,
    /// Retrying for network trouble: the last error.
    pub network_retry: Option<String>,
}

/// What this run has told of the view's flow so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct FlowSoFar {
    pub status: Option<FlowStatus>,
    /// The status last written to the metastore for this run.
    pub written: Option<FlowStatus>,
    /// The status last told to the event log.
    pub evented: Option<FlowStatus>,
    pub error: Option<String>,
    pub counters: Option<Counters>,
    /// Why the flow ended so, when its status does not say.
    pub reason: Option<String>,
}

/// What a step needs from outside: the run, the view's type, the time,
/// and the readers of what is on disk and in the lattice.
pub(super) struct Ctx<'a> {
    pub url: &'a Arc<str>,
    pub run: &'a Arc<str>,
    pub mode: Mode,
    pub full_refresh: bool,
    /// External data (its flag is recorded with it).
    pub external: bool,
    /// The type's current version checksum.
    pub version: &'a str,
    /// The clock's time, for the event.
    pub now: i64,
    /// The least timestamp the run records (see `Views::stamp_floor`).
    pub stamp_floor: i64,
    /// How its dependencies settled in this run.
    pub settled: Option<Settled>,
    pub no_data_before_run: bool,
    /// When a finished transformation produced its data, and what it returned.
    pub produced_at: Option<i64>,
    pub returned: Option<&'a Counters>,
    /// Its dependencies that failed, and that carry errors, when it settled.
    pub failed_inputs: &'a [String],
    pub errors_inputs: &'a [String],
    /// The view's done flag: where it is, and which file it is now.
    pub done_flag: &'a dyn Fn() -> PathBuf,
    pub flag: &'a dyn Fn() -> Option<FlagIdentity>,
    /// The instances its `latest()` resolves to now (`None` without `latest()`).
    pub latest: &'a dyn Fn() -> Option<Vec<String>>,
}

/// What one event did to one view.
#[derive(Debug, Clone)]
pub(super) struct Applied {
    /// The view as it is after the event (its new state in its record),
    /// to adopt once committed.
    pub view: ViewNow,
    /// The record the commit writes, when the metastore's must change.
    pub stored: Option<ViewRecord>,
    pub flow: FlowSoFar,
    /// The flow record the commit writes (it settled the flow).
    pub flow_record: Option<FlowRecord>,
    /// What the memo learns, in order, once committed.
    pub memo: Vec<MemoChange>,
    pub event: NewEvent,
    /// The error the view failed with, for the run's failures.
    pub failure: Option<String>,
    /// The record changed with a timestamp: the newest recorded may be it.
    pub stamp: bool,
    pub actions: Vec<Action>,
}

/// Applies `event` to the view as `view` (taken) and `flow` have it.
pub(super) fn apply(view: ViewNow, flow: &FlowSoFar, event: &Event, ctx: &Ctx<'_>) -> Applied {
    let previous = view.record.state;
    let ViewNow { record: mut before, stored_state, network_retry } = view;
    // A record from before the flag was kept says so by its state alone.
    if matches!(event, Event::Materialize { .. }) && previous == ViewState::Invalidated {
        before.invalidated = true;
    }
    let (state, actions) = transition(previous, event);
    let error = match event {
        Event::TransformFailed { error, .. } => Some(error.clone()),
        _ => None,
    };
    let timestamp_before = before.timestamp;
    let records = actions
        .iter()
        .any(|a| matches!(a, Action::RecordMaterialized | Action::RecordWithoutTransforming | Action::RecordNoData));
    // External data is recorded with its flag as it is now; its timestamp
    // is now, when trellis saw it, never the flag's mtime. A view marked
    // materialized keeps the flag it has (none, under SET_ONLY without
    // data), so that data gone later is seen.
    let marked = actions.iter().any(|a| matches!(a, Action::RecordMaterialized | Action::RecordWithoutTransforming));
    let flag_found = ((records && ctx.external) || marked).then(|| (ctx.flag)());
    // A view rebuilt is newer than all recorded by earlier runs, even
    // within their millisecond.
    let facts = record::Facts {
        mode: ctx.mode,
        version: ctx.version,
        produced_at: ctx.produced_at.map(|t| t.max(ctx.stamp_floor)),
        now: ctx.now.max(ctx.stamp_floor),
        settled: ctx.settled,
        no_data_before_run: ctx.no_data_before_run,
        flag_found,
        counters: ctx.returned,
    };
    before.state = state;
    let recorded = record::record(before, &actions, &facts);
    let mut flow = flow.clone();
    let upstream = flow_of(&mut flow, &recorded, &actions, ctx);
    let mut after = ViewNow { record: recorded.record, stored_state, network_retry: None };
    // What its `latest()` dependencies resolved to is what it read.
    if let Some(read) = marked.then(|| (ctx.latest)()).flatten() {
        after.record.latest = Some(read);
    }
    // Network trouble is shown while the view waits to try again.
    if state == ViewState::Retrying {
        after.network_retry = network_retry;
    }
    if let Some(Action::ReportNetworkRetry { error }) =
        actions.iter().find(|a| matches!(a, Action::ReportNetworkRetry { .. }))
    {
        after.network_retry = Some(error.clone());
    }
    let flow_record = flow_to_write(&mut flow);
    // Only stable states are kept across processes; and only what changed
    // is written, so an unchanged lattice costs no writes.
    let stable = record::previous_stable(state, &after.record);
    let memo = memo_changes(&after, timestamp_before, stable, state, &actions, marked, ctx);
    let stored = (recorded.changed || stable != stored_state).then(|| {
        after.stored_state = stable;
        ViewRecord { state: stable, ..after.record.clone() }
    });
    // Every application of the state machine is an event, "asked and
    // found up to date" included: listeners see all of it.
    let mut event = super::state::new_event(ctx.url, previous, state, &actions, Some(ctx.run), error, ctx.now);
    event.errors = upstream;
    if let Some(status) = flow.status
        && flow.evented != Some(status)
    {
        flow.evented = Some(status);
        event.flow = Some(FlowChange { status, reason: flow.reason.clone() });
    }
    let stamp = recorded.changed && after.record.timestamp.is_some();
    Applied { view: after, stored, flow, flow_record, memo, event, failure: recorded.failure, stamp, actions }
}

/// The flow after the record's verdict: its status, counters, error, and
/// why it ended so. Returns whether the view took errors from upstream
/// (a dependency failed, or carried errors of its own).
fn flow_of(flow: &mut FlowSoFar, recorded: &record::Recorded, actions: &[Action], ctx: &Ctx<'_>) -> bool {
    match recorded.flow {
        Some(FlowStatus::Queued) => {
            flow.status.get_or_insert(FlowStatus::Queued);
        }
        Some(status) => flow.status = Some(status),
        None => {}
    }
    if recorded.counters.is_some() {
        flow.counters = recorded.counters.clone();
    }
    // Skipped, or built or left without data, while a dependency failed:
    // the flow names it (seed 000: a failed input is not no data).
    let settles = actions.contains(&Action::NotifyDependents);
    let upstream_failed = settles
        && matches!(recorded.flow, Some(FlowStatus::Successful | FlowStatus::Skipped))
        && !ctx.failed_inputs.is_empty();
    if upstream_failed {
        flow.reason = Some(format!("upstream failed: {}", ctx.failed_inputs.join(", ")));
    }
    // Built over a view with errors: the flag travelled up.
    let upstream_errors =
        settles && recorded.flow == Some(FlowStatus::Successful) && !upstream_failed && !ctx.errors_inputs.is_empty();
    if upstream_errors {
        flow.reason = Some(format!("upstream has errors: {}", ctx.errors_inputs.join(", ")));
    }
    // External data found without its flag says which file was looked
    // for: a mistyped parameter value ends here.
    if ctx.external && actions.contains(&Action::RecordNoData) && recorded.flow == Some(FlowStatus::Successful) {
        flow.reason = Some(format!("no done flag at {}", (ctx.done_flag)().display()));
    }
    if let Some(failure) = &recorded.failure {
        flow.error = Some(failure.clone());
    }
    upstream_failed || upstream_errors
}

/// The flow record to write with this commit, if the flow settled here.
/// A flow is written with the commit that settles it, so that the run's
/// record shows it while the run goes on. Queued and idle ones are not:
/// those are most views of an unchanged run, which `finish` only counts;
/// nor starting or running ones, which may still end idle (external data
/// still without its flag).
fn flow_to_write(flow: &mut FlowSoFar) -> Option<FlowRecord> {
    let status = flow.status?;
    if matches!(status, FlowStatus::Queued | FlowStatus::Starting | FlowStatus::Running | FlowStatus::Idle)
        || flow.written == Some(status)
    {
        return None;
    }
    flow.written = Some(status);
    Some(FlowRecord { status, error: flow.error.clone(), counters: flow.counters.clone(), reason: flow.reason.clone() })
}

/// What the memo learns of the step, in order.
fn memo_changes(
    after: &ViewNow,
    timestamp_before: Option<i64>,
    stable: ViewState,
    state: ViewState,
    actions: &[Action],
    marked: bool,
    ctx: &Ctx<'_>,
) -> Vec<MemoChange> {
    let mut changes = Vec::new();
    // What dependents see of a view is its state and timestamp: when those
    // change, it and all above it must be looked at again...
    if after.record.timestamp != timestamp_before || stable != after.stored_state {
        changes.push(MemoChange::Dirty);
    }
    // Published just now: what the kernel queued of that (the old flag
    // removed) is taken in first, then the new flag is watched, so this
    // run's own publishing dirties nothing later.
    if marked && !ctx.external && matches!(after.record.done_flag, Some(SeenFlag::Present { .. })) {
        changes.push(MemoChange::WatchPublished);
    }
    // ...unless a DEFAULT run judged it just now, with all it depends on
    // settled, and found it materialized or without data. (A full refresh
    // reads unselected dependencies as they stand, outdated or not: what
    // it builds is not known clean.)
    let judged =
        actions.iter().any(|a| matches!(a, Action::ReportIdle | Action::RecordMaterialized | Action::RecordNoData));
    if ctx.mode == Mode::Default
        && !ctx.full_refresh
        && judged
        && matches!(state, ViewState::Materialized | ViewState::NoData)
    {
        // External data and published data are clean only while watched.
        let materialized = state == ViewState::Materialized;
        changes.push(MemoChange::Settled { on_disk: (ctx.external || materialized).then_some(materialized) });
    }
    changes
}

#[cfg(test)]
mod tests;
