//! Coordinators driven: a [`Coordination`] holds each declared
//! coordinator's record and open actions, creates the actions that are
//! due, checks their inputs, applies the pure `action` machine and
//! `policy`, and hands the service (or the embedded driver) the runs to
//! start. Every change of an action is committed (with its event) before
//! anything follows from it; an action is SUBMITTED in the commit that
//! records its run.
//!
//! Invariants: the metastore holds every action the moment it exists; a
//! SUBMITTED or RUNNING action's run is recorded, and after a crash that run
//! is resumed under its id, never started anew. It reads the time only from
//! its scheduler's [`Clock`] (the one it was opened with), and the views
//! only through the scheduler's methods.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};

use super::action::{ActionEffect, ActionEvent, transition};
use super::policy::{self, OpenAction};
use crate::catalog::EvaluationTime;
use crate::catalog::coordinator::{Catchup, Coordinator, LAG_COUNT_CAP, Lag, MANY_DUE, Trigger};
use crate::clock::Clock;
use crate::lattice::ViewId;
use crate::metastore::{ActionChange, ActionRecord, Commit, CoordinatorRecord, NewEvent, RunRecord};
use crate::model::{ActionState, Termination, ViewState};
use crate::scheduler::transition::Mode;
use crate::scheduler::{Error, Scheduler};

/// What `trellis coordinators` shows of one coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorStatus {
    pub name: String,
    pub suspended: bool,
    /// The nominal time of the last action created.
    pub last_nominal: Option<DateTime<Utc>>,
    /// The nominal time of the next action to create; `None` past `end`.
    pub next_nominal: Option<DateTime<Utc>>,
    /// Its actions, per state (states without actions are absent).
    pub counts: BTreeMap<ActionState, usize>,
    /// The nominal times due that have no action yet, as of its last tick.
    pub lag: Lag,
    /// How far behind it was then: from the oldest of them to the tick.
    pub lag_seconds: i64,
}

/// What [`Coordination::kill`] did: the actions killed, and their runs
/// to dequeue or stop (each id with which of the two).
#[derive(Debug, Clone)]
pub struct Killed {
    pub actions: Vec<ActionRecord>,
    pub runs: Vec<(String, ActionEffect)>,
}

/// What an operator can ask of the coordinators (the service's
/// [`Handle::coordinators`](super::Handle::coordinators), the CLI here).
#[derive(Debug, Clone)]
pub enum CoordinatorOperation {
    Statuses,
    Actions { name: String, state: Option<ActionState> },
    Suspend { name: String },
    Resume { name: String },
    Kill { name: String, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>> },
    Rerun { name: String, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>> },
}

/// The answer to a [`CoordinatorOperation`]: every coordinator for
/// `Statuses`, the one suspended or resumed for those, and the actions
/// listed, killed or put back to run for the others.
#[derive(Debug, Clone)]
pub enum CoordinatorAnswer {
    Statuses(Vec<CoordinatorStatus>),
    Actions(Vec<ActionRecord>),
}

/// A run an action submitted, for the caller to queue and start.
#[derive(Debug, Clone)]
pub struct Submission {
    pub record: RunRecord,
    pub mode: Mode,
    pub addressed: Vec<ViewId>,
}

/// The coordinators of one project, driven.
pub struct Coordination {
    coordinators: Vec<Coordinated>,
    /// The action of each run submitted and not ended: (coordinator index,
    /// nominal time).
    by_run: HashMap<String, (usize, i64)>,
    /// Runs to resume, found by `open`, until `resumed` takes them.
    to_resume: Vec<(usize, i64)>,
}

/// One coordinator, driven.
struct Coordinated {
    declaration: Coordinator,
    record: CoordinatorRecord,
    /// Its actions not in a final state, by nominal time.
    open: BTreeMap<i64, OpenSlot>,
    /// All its actions, per state.
    counts: BTreeMap<ActionState, usize>,
    /// Its last finished actions (up to its `lookback`, with `trigger =
    /// "data"` only), oldest first, with their inputs: a re-delivered input
    /// runs one again.
    recent: VecDeque<(i64, Vec<ViewId>)>,
    /// The next nominal time to create by the clock; `None` past `end` or
    /// while the throttle holds creation back.
    next_creation: Option<DateTime<Utc>>,
    /// The earliest timeout of its waiting actions.
    next_timeout: Option<DateTime<Utc>>,
    /// How far behind it is, and how long, as of its last tick.
    lag: (Lag, i64),
    /// One of its actions changed since it last ticked (or it was resumed):
    /// its policy may decide otherwise now. A coordinator neither changed
    /// nor due is not ticked, so that a run ending costs one coordinator's
    /// tick, not every coordinator's.
    changed: bool,
}

/// An open action with what the lattice says of it.
struct OpenSlot {
    record: ActionRecord,
    /// The views it materializes, and its inputs (the external views they
    /// depend on); empty when they could not be instantiated.
    addressed: Vec<ViewId>,
    inputs: Vec<ViewId>,
    /// Its `latest(n)` that found no instance (`latest(n) of TYPE`): it
    /// waits for them as for missing inputs, evaluating them again at every
    /// check (seed 002: Oozie "will go to sleep and start the evaluation
    /// again in the next cycle").
    unfound: Vec<String>,
}

/// An action's views, its inputs, and its `latest(n)` that found nothing.
type Resolved = (Vec<ViewId>, Vec<ViewId>, Vec<String>);

/// How many of an action's inputs are missing (each input without its done
/// flag, each `latest(n)` that found nothing), and how they read.
fn missing_of(scheduler: &mut Scheduler, inputs: &[ViewId], unfound: &[String]) -> (usize, Vec<String>) {
    let missing: Vec<ViewId> = inputs.iter().copied().filter(|&id| !scheduler.input_present(id)).collect();
    let mut texts: Vec<String> = missing.iter().map(|&id| scheduler.url(id).to_string()).collect();
    texts.extend(unfound.iter().cloned());
    (texts.len(), texts)
}

fn millis(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

fn time_of(millis: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(millis).single().unwrap_or_default()
}

/// What `validate` and the opening of coordinators say of a coordinator
/// that has more than [`MANY_DUE`] actions due at once.
pub fn many_due_warning(coordinator: &Coordinator, lag: &Lag) -> String {
    let count = if lag.more { format!("more than {}", lag.actions) } else { lag.actions.to_string() };
    let since = lag.since.map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default();
    let doing = match coordinator.catchup {
        Catchup::All => format!(
            "with catchup = \"all\" each gets an action, {} WAITING at a time (throttle); \
             set catchup = \"none\" (or a count) to create only the newest, or a later start",
            coordinator.throttle
        ),
        Catchup::Newest(1) => "catchup = \"none\" creates only the newest one".to_string(),
        Catchup::Newest(n) => format!("catchup = {n} creates only the newest {n}"),
    };
    format!("warning: coordinator `{}`: {count} actions are due (since {since}): {doing}", coordinator.name)
}

/// An action's name in the event log and in messages: `daily@2015-05-01T06:00:00Z`.
pub fn action_name(coordinator: &str, nominal: i64) -> String {
    format!("{coordinator}@{}", time_of(nominal).format("%Y-%m-%dT%H:%M:%SZ"))
}

/// The view state nearest an action state, for a listener that reads the
/// event as a view's transition.
fn nearest_view_state(state: Option<ActionState>) -> ViewState {
    match state {
        None => ViewState::Receive,
        Some(ActionState::Waiting | ActionState::Ready | ActionState::Submitted) => ViewState::Waiting,
        Some(ActionState::Running) => ViewState::Transforming,
        Some(ActionState::Succeeded) => ViewState::Materialized,
        Some(ActionState::Skipped) => ViewState::NoData,
        Some(ActionState::Failed | ActionState::Timedout | ActionState::Killed) => ViewState::Failed,
    }
}

fn event_of(record: &ActionRecord, previous: Option<ActionState>, now: i64) -> NewEvent {
    NewEvent {
        view: action_name(&record.coordinator, record.nominal).into(),
        previous: nearest_view_state(previous),
        current: nearest_view_state(Some(record.state)),
        actions: Vec::new(),
        time: now,
        run_id: record.run.as_deref().map(Arc::from),
        error: record.reason.clone(),
        action: Some(ActionChange {
            coordinator: record.coordinator.clone(),
            nominal: record.nominal,
            previous,
            current: record.state,
        }),
        txlog: None,
        errors: false,
        flow: None,
    }
}

impl Coordinated {
    fn count(&mut self, previous: Option<ActionState>, current: ActionState) {
        self.changed = true;
        if let Some(previous) = previous
            && let Some(count) = self.counts.get_mut(&previous)
        {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&previous);
            }
        }
        *self.counts.entry(current).or_default() += 1;
    }

    fn waiting(&self) -> usize {
        self.open.values().filter(|slot| slot.record.state == ActionState::Waiting).count()
    }

    fn open_actions(&self) -> Vec<OpenAction> {
        self.open
            .values()
            .map(|slot| OpenAction {
                nominal: slot.record.nominal,
                actual: slot.record.actual,
                state: slot.record.state,
            })
            .collect()
    }

    fn lookback(&self) -> usize {
        match self.declaration.trigger {
            Trigger::Data { lookback } => lookback,
            Trigger::Time => 0,
        }
    }

    /// Remembers a finished action for re-delivery, within the lookback.
    fn remember_finished(&mut self, nominal: i64, inputs: Vec<ViewId>) {
        let lookback = self.lookback();
        if lookback == 0 {
            return;
        }
        self.recent.retain(|(n, _)| *n != nominal);
        let at = self.recent.partition_point(|(n, _)| *n < nominal);
        self.recent.insert(at, (nominal, inputs));
        while self.recent.len() > lookback {
            self.recent.pop_front();
        }
    }
}

/// The events an action goes through, applied to its record: the state
/// and the effects, in order. Events that do not apply change nothing.
fn apply(record: &mut ActionRecord, events: &[ActionEvent]) -> Vec<ActionEffect> {
    let mut effects = Vec::new();
    for &event in events {
        let (next, mut more) = transition(record.state, event);
        record.state = next;
        effects.append(&mut more);
    }
    effects
}

impl Coordination {
    /// Loads the coordinators' records and open actions. SUBMITTED and
    /// RUNNING actions whose runs ended while the process was down take
    /// their runs' outcomes; those whose runs never ended are resumed (see
    /// [`Coordination::resumed`]).
    pub fn open(scheduler: &mut Scheduler, clock: Clock) -> Result<Coordination, Error> {
        // One clock: the runs and events of its actions are recorded by the
        // time the coordinators go by.
        scheduler.set_clock(clock);
        let store = scheduler.metastore();
        let mut records: HashMap<String, CoordinatorRecord> = store.coordinator_records()?.into_iter().collect();
        let mut coordination = Coordination { coordinators: Vec::new(), by_run: HashMap::new(), to_resume: Vec::new() };
        let declarations = scheduler.coordinators().to_vec();
        for declaration in declarations {
            let record = records.remove(&declaration.name).unwrap_or_default();
            let actions = store.actions(&declaration.name, None, None)?;
            let mut coordinated = Coordinated {
                declaration,
                record,
                open: BTreeMap::new(),
                counts: BTreeMap::new(),
                recent: VecDeque::new(),
                next_creation: None,
                next_timeout: None,
                lag: (Lag::default(), 0),
                changed: true,
            };
            let lookback = coordinated.lookback();
            let finished: Vec<&ActionRecord> =
                actions.iter().filter(|a| matches!(a.state, ActionState::Succeeded | ActionState::Failed)).collect();
            let recent: Vec<i64> = finished.iter().rev().take(lookback).map(|a| a.nominal).collect();
            for action in &actions {
                coordinated.count(None, action.state);
                if recent.contains(&action.nominal) {
                    let pinned = action.latest_found.as_deref();
                    let inputs = match scheduler.action_inputs(&action.views, time_of(action.actual), pinned) {
                        Ok((_, inputs, ..)) => inputs,
                        Err(_) => Vec::new(),
                    };
                    coordinated.remember_finished(action.nominal, inputs);
                }
            }
            let index = coordination.coordinators.len();
            coordination.coordinators.push(coordinated);
            for action in actions.into_iter().filter(|a| !a.state.is_final()) {
                coordination.take_open(scheduler, index, action)?;
            }
            let now = scheduler.clock().now();
            coordination.measure_lag(index, now);
        }
        Ok(coordination)
    }

    /// What to warn of as the coordinators open (`serve`, `coordinate`): a
    /// coordinator with more than [`MANY_DUE`] actions due at once.
    pub fn warnings(&self) -> Vec<String> {
        self.coordinators
            .iter()
            .filter(|c| c.lag.0.actions > MANY_DUE)
            .map(|c| many_due_warning(&c.declaration, &c.lag.0))
            .collect()
    }

    /// How far behind a coordinator is now (see [`Lag`]).
    fn measure_lag(&mut self, index: usize, now: DateTime<Utc>) {
        let coordinated = &mut self.coordinators[index];
        let last = coordinated.record.last_nominal.map(time_of);
        let lag = coordinated.declaration.lag(last, now, LAG_COUNT_CAP);
        let seconds = lag.since.map_or(0, |since| (now - since).num_seconds().max(0));
        coordinated.lag = (lag, seconds);
    }

    /// Takes in an open action found in the metastore: its views and inputs
    /// resolved, its run (if it has one) recovered.
    fn take_open(&mut self, scheduler: &mut Scheduler, index: usize, mut action: ActionRecord) -> Result<(), Error> {
        let (addressed, inputs, unfound) = self.resolve(scheduler, index, &mut action).unwrap_or_default();
        let nominal = action.nominal;
        let run = action.run.clone();
        let state = action.state;
        self.coordinators[index].open.insert(nominal, OpenSlot { record: action, addressed, inputs, unfound });
        if let (Some(run), ActionState::Submitted | ActionState::Running) = (run, state) {
            match scheduler.metastore().run(&run)? {
                Some(RunRecord { termination: Some(termination), .. }) => {
                    self.by_run.insert(run.clone(), (index, nominal));
                    self.run_ended(scheduler, &run, termination)?;
                }
                Some(_) => {
                    self.by_run.insert(run, (index, nominal));
                    self.to_resume.push((index, nominal));
                }
                // Cannot be (the run is recorded in the commit that made the
                // action SUBMITTED), but a damaged store could: run it anew.
                None => {
                    let slot = self.coordinators[index].open.get_mut(&nominal).expect("just inserted");
                    slot.record.state = ActionState::Ready;
                    slot.record.run = None;
                }
            }
        }
        Ok(())
    }

    /// An action's views and inputs in the lattice, with `latest()`
    /// resolved now (`evaluation_time = "present"`) or at its actual time
    /// (`"actual"`): against the flags it found when it was created, which
    /// an action resolved for the first time records in `latest_found`.
    /// A WAITING action some of whose `latest(n)` found nothing evaluates
    /// them again against the flags there are now (at the same actual
    /// time), and records what it finds: seed 002's next cycle.
    fn resolve(&self, scheduler: &mut Scheduler, index: usize, action: &mut ActionRecord) -> Result<Resolved, Error> {
        match self.coordinators[index].declaration.evaluation_time {
            EvaluationTime::Present => {
                let (addressed, inputs, _, unfound) =
                    scheduler.action_inputs(&action.views, scheduler.clock().now(), None)?;
                Ok((addressed, inputs, unfound))
            }
            EvaluationTime::Actual => {
                let actual = time_of(action.actual);
                let pinned = action.latest_found.as_deref();
                let again = pinned.is_some() && action.state == ActionState::Waiting;
                let (addressed, inputs, found, unfound) = scheduler.action_inputs(&action.views, actual, pinned)?;
                if again && !unfound.is_empty() {
                    let (addressed, inputs, found, unfound) = scheduler.action_inputs(&action.views, actual, None)?;
                    action.latest_found = Some(found);
                    return Ok((addressed, inputs, unfound));
                }
                action.latest_found.get_or_insert(found);
                Ok((addressed, inputs, unfound))
            }
        }
    }

    /// The runs of actions SUBMITTED or RUNNING when the process last
    /// ended, to start again under their ids; taken once, after `open`.
    pub fn resumed(&mut self, scheduler: &mut Scheduler) -> Result<Vec<Submission>, Error> {
        let mut submissions = Vec::new();
        for (index, nominal) in std::mem::take(&mut self.to_resume) {
            let coordinated = &self.coordinators[index];
            let Some(slot) = coordinated.open.get(&nominal) else { continue };
            let Some(run) = &slot.record.run else { continue };
            let Some(record) = scheduler.metastore().run(run)? else { continue };
            tracing::info!(action = %action_name(&slot.record.coordinator, nominal), run = %run, "resuming the run of an action");
            submissions.push(Submission {
                record,
                mode: coordinated.declaration.mode,
                addressed: slot.addressed.clone(),
            });
        }
        Ok(submissions)
    }

    /// Brings every coordinator up to now: creates the actions due,
    /// checks the inputs of those waiting, times out, skips, and submits
    /// what the policies allow. Returns the runs submitted, in order.
    pub fn tick(&mut self, scheduler: &mut Scheduler) -> Result<Vec<Submission>, Error> {
        let mut submissions = Vec::new();
        let now = scheduler.clock().now();
        for index in 0..self.coordinators.len() {
            let coordinated = &self.coordinators[index];
            let due = [coordinated.next_creation, coordinated.next_timeout].into_iter().flatten().any(|t| t <= now);
            if coordinated.record.suspended || !(coordinated.changed || due) {
                continue;
            }
            self.tick_one(scheduler, index, &mut submissions)?;
            self.coordinators[index].changed = false;
        }
        Ok(submissions)
    }

    /// Looks at the inputs of waiting actions again (and, with `trigger =
    /// "data"`, at those of recently finished ones), then ticks. With
    /// `all`, every input is looked at; otherwise only those whose watches
    /// saw a change (or that are not watched).
    pub fn check_inputs(&mut self, scheduler: &mut Scheduler, all: bool) -> Result<Vec<Submission>, Error> {
        Ok(self.check_inputs_finding(scheduler, all)?.0)
    }

    /// A safety rescan: every waiting action's inputs looked at, whatever
    /// the watches say. Returns the runs submitted, and whether it found
    /// anything (an action whose inputs arrived, or went, or were
    /// delivered again) that the watches had not already woken it for.
    pub fn rescan(&mut self, scheduler: &mut Scheduler) -> Result<(Vec<Submission>, bool), Error> {
        self.check_inputs_finding(scheduler, true)
    }

    /// The shortest `rescan_interval` of the coordinators whose actions wait
    /// for inputs (or, with `trigger = "data"`, may be re-delivered).
    pub fn rescan_interval(&self) -> Option<std::time::Duration> {
        self.coordinators
            .iter()
            .filter(|c| !c.recent.is_empty() || c.counts.contains_key(&ActionState::Waiting))
            .map(|c| c.declaration.rescan_interval)
            .min()
    }

    fn check_inputs_finding(&mut self, scheduler: &mut Scheduler, all: bool) -> Result<(Vec<Submission>, bool), Error> {
        let mut found = false;
        let now = millis(scheduler.clock().now());
        for index in 0..self.coordinators.len() {
            // A `latest(n)` that found nothing is evaluated again: no watch
            // stands for the instance it may find.
            let again: Vec<i64> = self.coordinators[index]
                .open
                .iter()
                .filter(|(_, slot)| slot.record.state == ActionState::Waiting && !slot.unfound.is_empty())
                .map(|(&nominal, _)| nominal)
                .collect();
            for nominal in again {
                let Some(mut record) = self.coordinators[index].open.get(&nominal).map(|slot| slot.record.clone())
                else {
                    continue;
                };
                let Ok((addressed, inputs, unfound)) = self.resolve(scheduler, index, &mut record) else { continue };
                if let Some(slot) = self.coordinators[index].open.get_mut(&nominal) {
                    *slot = OpenSlot { record, addressed, inputs, unfound };
                }
            }
            let mut changes = Vec::new();
            let coordinated = &mut self.coordinators[index];
            for slot in coordinated.open.values_mut() {
                if slot.record.state != ActionState::Waiting && slot.record.state != ActionState::Ready {
                    continue;
                }
                let stale =
                    all || !slot.unfound.is_empty() || slot.inputs.iter().any(|&id| !scheduler.input_watched(id));
                if !stale {
                    continue;
                }
                let (count, missing) = missing_of(scheduler, &slot.inputs, &slot.unfound);
                let previous = slot.record.state;
                apply(&mut slot.record, &[ActionEvent::InputsChecked { missing: count }]);
                if slot.record.state != previous || slot.record.missing != missing {
                    slot.record.missing = missing;
                    if slot.record.state != previous {
                        slot.record.updated = now;
                    }
                    changes.push((previous, slot.record.clone()));
                }
            }
            // Re-deliveries: a finished action among the last `lookback`
            // whose input's flag is another file than its run read.
            let mut redelivered = Vec::new();
            for (nominal, inputs) in &coordinated.recent {
                let stale = all || inputs.iter().any(|&id| !scheduler.input_watched(id));
                if stale && inputs.iter().any(|&id| scheduler.input_redelivered(id)) {
                    redelivered.push(*nominal);
                }
            }
            found |= changes.iter().any(|(previous, record)| *previous != record.state) || !redelivered.is_empty();
            let mut commit = Commit::default();
            for (previous, record) in changes {
                let coordinated = &mut self.coordinators[index];
                if previous != record.state {
                    coordinated.count(Some(previous), record.state);
                    commit.events.push(event_of(&record, Some(previous), now));
                }
                commit.actions.push(record);
            }
            for nominal in redelivered {
                let name = self.coordinators[index].declaration.name.clone();
                let Some(record) = scheduler.metastore().action(&name, nominal)? else { continue };
                if !record.state.is_final() {
                    continue;
                }
                tracing::info!(action = %action_name(&name, nominal), "an input was delivered again: the action runs again");
                self.reopen(scheduler, index, record, ActionEvent::Redelivered, now, &mut commit)?;
            }
            if !commit.actions.is_empty() {
                scheduler.commit(commit)?;
            }
        }
        Ok((self.tick(scheduler)?, found))
    }

    /// Puts a final action back among the open ones on `event` (a rerun, a
    /// re-delivery), its inputs checked again, into `commit`.
    fn reopen(
        &mut self,
        scheduler: &mut Scheduler,
        index: usize,
        mut record: ActionRecord,
        event: ActionEvent,
        now: i64,
        commit: &mut Commit,
    ) -> Result<bool, Error> {
        let previous = record.state;
        let effects = apply(&mut record, &[event]);
        if record.state == previous {
            return Ok(false);
        }
        if effects.contains(&ActionEffect::RetireRun)
            && let Some(run) = record.run.take()
        {
            record.previous_runs.push(run);
        }
        record.reason = None;
        record.updated = now;
        if event == ActionEvent::Rerun {
            // Oozie re-creates a rerun action: a new actual time, from
            // which its timeout counts and `latest()` is resolved again.
            // One whose run ended rebuilds its views, up to date or not;
            // one that never ran (TIMEDOUT, SKIPPED, KILLED) runs them as
            // it would have: its inputs checked, its external views read.
            record.actual = now;
            record.latest_found = None;
            record.full_refresh = matches!(previous, ActionState::Succeeded | ActionState::Failed);
        } else {
            record.full_refresh = false;
        }
        let (addressed, inputs, unfound) = match self.resolve(scheduler, index, &mut record) {
            Ok(resolved) => resolved,
            Err(e) => {
                record.state = ActionState::Failed;
                record.reason = Some(e.to_string());
                (Vec::new(), Vec::new(), Vec::new())
            }
        };
        let coordinated = &mut self.coordinators[index];
        coordinated.count(Some(previous), record.state);
        commit.events.push(event_of(&record, Some(previous), now));
        if effects.contains(&ActionEffect::CheckInputs) && !record.state.is_final() {
            let (missing, texts) = missing_of(scheduler, &inputs, &unfound);
            let before = record.state;
            apply(&mut record, &[ActionEvent::InputsChecked { missing }]);
            record.missing = texts;
            if record.state != before {
                coordinated.count(Some(before), record.state);
                commit.events.push(event_of(&record, Some(before), now));
            }
        }
        coordinated.recent.retain(|(n, _)| *n != record.nominal);
        commit.actions.push(record.clone());
        if !record.state.is_final() {
            coordinated.open.insert(record.nominal, OpenSlot { record, addressed, inputs, unfound });
        }
        Ok(true)
    }

    fn tick_one(
        &mut self,
        scheduler: &mut Scheduler,
        index: usize,
        submissions: &mut Vec<Submission>,
    ) -> Result<(), Error> {
        let now = scheduler.clock().now();
        let now_ms = millis(now);
        loop {
            let mut commit = Commit::default();
            let coordinated = &self.coordinators[index];
            let last = coordinated.record.last_nominal.map(time_of);
            let (created, next_creation) =
                policy::creations(&coordinated.declaration, last, coordinated.waiting(), now);
            self.coordinators[index].next_creation = next_creation;
            let made_any = !created.is_empty();
            for nominal in created {
                self.create(scheduler, index, nominal, now_ms, &mut commit);
            }
            if made_any {
                let coordinated = &self.coordinators[index];
                commit.coordinators.push((coordinated.declaration.name.clone(), coordinated.record.clone()));
            }
            let coordinated = &self.coordinators[index];
            let decisions = policy::decide(&coordinated.declaration, &coordinated.open_actions(), now);
            self.coordinators[index].next_timeout = decisions.next_due;
            for nominal in &decisions.time_out {
                let reason = "its inputs did not all arrive within the coordinator's timeout".to_string();
                self.change(index, *nominal, ActionEvent::TimedOut, Some(reason), now_ms, &mut commit);
            }
            for (nominal, reason) in &decisions.skip {
                self.change(index, *nominal, ActionEvent::Skip, Some(reason.clone()), now_ms, &mut commit);
            }
            let progressed = made_any || !decisions.time_out.is_empty() || !decisions.skip.is_empty();
            if !commit.actions.is_empty() || !commit.coordinators.is_empty() {
                scheduler.commit(commit)?;
            }
            for nominal in decisions.submit {
                if let Some(submission) = self.submit(scheduler, index, nominal, now_ms)? {
                    submissions.push(submission);
                }
            }
            if !progressed {
                self.measure_lag(index, now);
                return Ok(());
            }
        }
    }

    /// Creates the action at `nominal` into `commit`: WAITING, or READY at
    /// once when its inputs are all there.
    fn create(
        &mut self,
        scheduler: &mut Scheduler,
        index: usize,
        nominal: DateTime<Utc>,
        now: i64,
        commit: &mut Commit,
    ) {
        let coordinated = &self.coordinators[index];
        let mut record = ActionRecord {
            coordinator: coordinated.declaration.name.clone(),
            nominal: millis(nominal),
            actual: now,
            state: ActionState::Waiting,
            views: coordinated.declaration.views_at(nominal),
            missing: Vec::new(),
            run: None,
            previous_runs: Vec::new(),
            reason: None,
            updated: now,
            full_refresh: false,
            latest_found: None,
        };
        let resolved = self.resolve(scheduler, index, &mut record);
        let coordinated = &mut self.coordinators[index];
        coordinated.record.last_nominal = Some(record.nominal);
        coordinated.count(None, ActionState::Waiting);
        commit.events.push(event_of(&record, None, now));
        let (addressed, inputs, unfound) = match resolved {
            Ok(resolved) => resolved,
            Err(e) => {
                // Its views cannot be instantiated (the lattice is full, say):
                // it fails, saying why, rather than waiting for ever.
                record.state = ActionState::Failed;
                record.reason = Some(format!("its views could not be instantiated: {e}"));
                coordinated.count(Some(ActionState::Waiting), ActionState::Failed);
                commit.events.push(event_of(&record, Some(ActionState::Waiting), now));
                commit.actions.push(record);
                return;
            }
        };
        let (missing, texts) = missing_of(scheduler, &inputs, &unfound);
        record.missing = texts;
        apply(&mut record, &[ActionEvent::InputsChecked { missing }]);
        if record.state != ActionState::Waiting {
            coordinated.count(Some(ActionState::Waiting), record.state);
            commit.events.push(event_of(&record, Some(ActionState::Waiting), now));
        }
        commit.actions.push(record.clone());
        coordinated.open.insert(record.nominal, OpenSlot { record, addressed, inputs, unfound });
    }

    /// Applies `event` to an open action into `commit`, with `reason`; a
    /// final action leaves the open ones.
    fn change(
        &mut self,
        index: usize,
        nominal: i64,
        event: ActionEvent,
        reason: Option<String>,
        now: i64,
        commit: &mut Commit,
    ) -> Vec<ActionEffect> {
        let coordinated = &mut self.coordinators[index];
        let Some(slot) = coordinated.open.get_mut(&nominal) else { return Vec::new() };
        let previous = slot.record.state;
        let effects = apply(&mut slot.record, &[event]);
        if slot.record.state == previous {
            return effects;
        }
        slot.record.updated = now;
        if reason.is_some() {
            slot.record.reason = reason;
        }
        let record = slot.record.clone();
        coordinated.count(Some(previous), record.state);
        commit.events.push(event_of(&record, Some(previous), now));
        commit.actions.push(record.clone());
        if record.state.is_final() {
            let slot = coordinated.open.remove(&nominal).expect("found above");
            if matches!(record.state, ActionState::Succeeded | ActionState::Failed) {
                coordinated.remember_finished(nominal, slot.inputs);
            }
        }
        effects
    }

    /// Records the run of a READY action, SUBMITTED in the same commit.
    fn submit(
        &mut self,
        scheduler: &mut Scheduler,
        index: usize,
        nominal: i64,
        now: i64,
    ) -> Result<Option<Submission>, Error> {
        let coordinated = &self.coordinators[index];
        let Some(slot) = coordinated.open.get(&nominal) else { return Ok(None) };
        let mut record = slot.record.clone();
        let previous = record.state;
        apply(&mut record, &[ActionEvent::Submitted]);
        if record.state != ActionState::Submitted {
            return Ok(None);
        }
        let mode = coordinated.declaration.mode;
        let addressed = slot.addressed.clone();
        let pattern = record.views.clone();
        // The run's id is known only once recorded; the action's record in
        // the same commit names it (see `Scheduler::new_run_with`).
        let full_refresh = record.full_refresh;
        let link = Some((record.coordinator.clone(), nominal));
        let run = scheduler.new_run_with(&pattern, mode, full_refresh, link, |run_id| {
            record.run = Some(run_id.to_string());
            record.updated = now;
            let mut commit = Commit::default();
            commit.events.push(event_of(&record, Some(previous), now));
            commit.actions.push(record.clone());
            commit
        })?;
        let coordinated = &mut self.coordinators[index];
        coordinated.count(Some(previous), ActionState::Submitted);
        if let Some(slot) = coordinated.open.get_mut(&nominal) {
            slot.record = record;
        }
        self.by_run.insert(run.id.clone(), (index, nominal));
        Ok(Some(Submission { record: run, mode, addressed }))
    }

    /// When a tick is next due by the clock (a nominal time, a timeout).
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        self.coordinators
            .iter()
            .filter(|c| !c.record.suspended)
            .flat_map(|c| [c.next_creation, c.next_timeout])
            .flatten()
            .min()
    }

    /// Whether some action waits for inputs (or, with `trigger = "data"`,
    /// could be re-delivered): whether watches matter.
    pub fn watches_inputs(&self) -> bool {
        self.coordinators.iter().any(|c| !c.recent.is_empty() || c.counts.contains_key(&ActionState::Waiting))
    }

    /// A run started: its action, if it has one, is RUNNING.
    pub fn run_started(&mut self, scheduler: &mut Scheduler, run: &str) -> Result<(), Error> {
        let Some(&(index, nominal)) = self.by_run.get(run) else { return Ok(()) };
        let mut commit = Commit::default();
        self.change(index, nominal, ActionEvent::RunStarted, None, millis(scheduler.clock().now()), &mut commit);
        // Not durable on its own: after a crash, SUBMITTED or RUNNING, the
        // run is resumed alike.
        scheduler.defer(commit);
        Ok(())
    }

    /// A run ended: its action, if it has one, SUCCEEDED or FAILED (KILLED
    /// when the run was stopped by hand; back to READY, under a new run,
    /// when a shutdown stopped it).
    pub fn run_ended(&mut self, scheduler: &mut Scheduler, run: &str, termination: Termination) -> Result<(), Error> {
        let Some((index, nominal)) = self.by_run.remove(run) else { return Ok(()) };
        let now = millis(scheduler.clock().now());
        let (event, reason) = match &termination {
            Termination::Completed => (ActionEvent::RunEnded { succeeded: true }, None),
            Termination::Stopped | Termination::Dequeued => {
                (ActionEvent::Kill, Some(format!("its run {run} was stopped by hand")))
            }
            Termination::StoppedByShutdown | Termination::DequeuedByShutdown => {
                (ActionEvent::Interrupted, Some(format!("its run {run} was stopped by a shutdown: it runs again")))
            }
            other => (ActionEvent::RunEnded { succeeded: false }, Some(format!("its run {run}: {other}"))),
        };
        let mut commit = Commit::default();
        let effects = self.change(index, nominal, event, reason, now, &mut commit);
        if effects.contains(&ActionEffect::RetireRun)
            && let Some(record) = commit.actions.last_mut()
            && let Some(run) = record.run.take()
        {
            record.previous_runs.push(run);
            if let Some(slot) = self.coordinators[index].open.get_mut(&nominal) {
                slot.record = record.clone();
            }
        }
        // Not durable on its own: the run's end is, and after a crash the
        // action takes it from the run's record (see `take_open`).
        scheduler.defer(commit);
        Ok(())
    }

    /// Carries out an operator's `operation`: its answer, and the runs of
    /// killed actions, which the caller dequeues or stops (a service) or
    /// ends (where no process runs them).
    pub fn operate(
        &mut self,
        scheduler: &mut Scheduler,
        operation: CoordinatorOperation,
    ) -> Result<(CoordinatorAnswer, Vec<(String, ActionEffect)>), Error> {
        let one = |coordination: &Coordination, name: &str| {
            CoordinatorAnswer::Statuses(coordination.statuses().into_iter().filter(|s| s.name == name).collect())
        };
        Ok(match operation {
            CoordinatorOperation::Statuses => (CoordinatorAnswer::Statuses(self.statuses()), Vec::new()),
            CoordinatorOperation::Actions { name, state } => {
                (CoordinatorAnswer::Actions(self.actions(scheduler, &name, state)?), Vec::new())
            }
            CoordinatorOperation::Suspend { name } => {
                self.suspend(scheduler, &name)?;
                (one(self, &name), Vec::new())
            }
            CoordinatorOperation::Resume { name } => {
                self.resume(scheduler, &name)?;
                (one(self, &name), Vec::new())
            }
            CoordinatorOperation::Kill { name, from, to } => {
                let killed = self.kill(scheduler, &name, from, to)?;
                (CoordinatorAnswer::Actions(killed.actions), killed.runs)
            }
            CoordinatorOperation::Rerun { name, from, to } => {
                (CoordinatorAnswer::Actions(self.rerun(scheduler, &name, from, to)?), Vec::new())
            }
        })
    }

    /// Every coordinator, in declaration order.
    pub fn statuses(&self) -> Vec<CoordinatorStatus> {
        self.coordinators
            .iter()
            .map(|c| CoordinatorStatus {
                name: c.declaration.name.clone(),
                suspended: c.record.suspended,
                last_nominal: c.record.last_nominal.map(time_of),
                next_nominal: c.declaration.next_nominal(c.record.last_nominal.map(time_of)),
                counts: c.counts.clone(),
                lag: c.lag.0,
                lag_seconds: c.lag.1,
            })
            .collect()
    }

    fn index_of(&self, name: &str) -> Result<usize, Error> {
        self.coordinators.iter().position(|c| c.declaration.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.coordinators.iter().map(|c| c.declaration.name.as_str()).collect();
            Error::UnknownCoordinator {
                name: name.to_string(),
                known: if names.is_empty() {
                    "it declares none".to_string()
                } else {
                    format!("it has {}", names.join(", "))
                },
            }
        })
    }

    /// One coordinator's actions, in nominal order, those in `state` only
    /// when given. An unknown name is an error that lists the known ones.
    pub fn actions(
        &self,
        scheduler: &Scheduler,
        name: &str,
        state: Option<ActionState>,
    ) -> Result<Vec<ActionRecord>, Error> {
        self.index_of(name)?;
        let mut actions = scheduler.metastore().actions(name, None, None)?;
        actions.retain(|a| state.is_none_or(|s| a.state == s));
        Ok(actions)
    }

    /// Suspends a coordinator: it creates and submits nothing until
    /// resumed (runs already submitted go on). Durable.
    pub fn suspend(&mut self, scheduler: &mut Scheduler, name: &str) -> Result<(), Error> {
        self.set_suspended(scheduler, name, true)
    }

    pub fn resume(&mut self, scheduler: &mut Scheduler, name: &str) -> Result<(), Error> {
        self.set_suspended(scheduler, name, false)
    }

    fn set_suspended(&mut self, scheduler: &mut Scheduler, name: &str, suspended: bool) -> Result<(), Error> {
        let index = self.index_of(name)?;
        let coordinated = &mut self.coordinators[index];
        coordinated.record.suspended = suspended;
        coordinated.changed = true;
        let commit = Commit { coordinators: vec![(name.to_string(), coordinated.record.clone())], ..Commit::default() };
        scheduler.commit(commit)?;
        Ok(())
    }

    /// Kills a coordinator's actions with nominal times from `from` to `to`,
    /// both included (either open when `None`), that are not final. Returns those killed and
    /// the runs to dequeue or stop (their ids, with which of the two).
    pub fn kill(
        &mut self,
        scheduler: &mut Scheduler,
        name: &str,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
    ) -> Result<Killed, Error> {
        let index = self.index_of(name)?;
        let now = millis(scheduler.clock().now());
        let nominals: Vec<i64> = self.coordinators[index]
            .open
            .keys()
            .copied()
            .filter(|&n| from.is_none_or(|f| n >= millis(f)) && to.is_none_or(|t| n <= millis(t)))
            .collect();
        let mut commit = Commit::default();
        let mut runs = Vec::new();
        for nominal in nominals {
            let run = self.coordinators[index].open.get(&nominal).and_then(|slot| slot.record.run.clone());
            let effects =
                self.change(index, nominal, ActionEvent::Kill, Some("killed by an operator".into()), now, &mut commit);
            if let Some(&effect) = effects.iter().find(|e| matches!(e, ActionEffect::Dequeue | ActionEffect::StopRun))
                && let Some(run) = run
            {
                runs.push((run, effect));
            }
        }
        let actions = commit.actions.clone();
        if !actions.is_empty() {
            scheduler.commit(commit)?;
        }
        Ok(Killed { actions, runs })
    }

    /// Puts a coordinator's final actions with nominal times from `from` to
    /// `to` (both included) back to WAITING (READY when their inputs are there), to run again
    /// under new runs. Returns them.
    pub fn rerun(
        &mut self,
        scheduler: &mut Scheduler,
        name: &str,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
    ) -> Result<Vec<ActionRecord>, Error> {
        let index = self.index_of(name)?;
        let now = millis(scheduler.clock().now());
        let actions = scheduler.metastore().actions(name, from.map(millis), to.map(|t| millis(t) + 1))?;
        let mut commit = Commit::default();
        for record in actions.into_iter().filter(|a| a.state.is_final()) {
            self.reopen(scheduler, index, record, ActionEvent::Rerun, now, &mut commit)?;
        }
        // (Each action's last record is what it is now.)
        let mut last: BTreeMap<i64, ActionRecord> = BTreeMap::new();
        for record in &commit.actions {
            last.insert(record.nominal, record.clone());
        }
        if !commit.actions.is_empty() {
            scheduler.commit(commit)?;
        }
        Ok(last.into_values().collect())
    }
}
