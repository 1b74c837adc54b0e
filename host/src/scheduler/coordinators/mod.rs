//! The coordinators' room: Oozie-style coordinators that create actions
//! on a schedule (or as data arrives), wait for their inputs and submit
//! their runs to the scheduler.
//!
//! - `action`: the pure state machine of one action;
//! - `policy`: the pure rules of a coordinator (creation, throttle,
//!   concurrency, execution, timeouts);
//! - `coordinate`: coordinators driven: actions created, checked,
//!   submitted, recorded.
//!
//! Invariant: the coordinators use the scheduler (its views, its metastore,
//! its clock) only through [`Scheduler`](super::Scheduler)'s methods, never
//! its fields; the time they go by is the scheduler's one clock.
//!
//! # The room in detail
//!
//! - `action.rs`: the pure state machine of one coordinator action:
//!   `transition(state, event) -> (state, effects)` over Oozie's action
//!   states (WAITING, READY, SUBMITTED, RUNNING, SUCCEEDED, FAILED,
//!   TIMEDOUT, SKIPPED, KILLED) and the events a driver sees (inputs
//!   checked, timed out, skipped, submitted, run started, run ended, a
//!   shutdown's interruption, kill, rerun, re-delivery); effects say what
//!   follows a commit (dequeue or stop the run, look at inputs again,
//!   retire the run to the previous ones). A golden table of every pair.
//! - `policy.rs`: the pure rules of one coordinator, with golden tables:
//!   `creations` (the nominal times due after the last one created, all of
//!   them after downtime, or only the newest `N` under `catchup`, while
//!   fewer than `throttle` would wait; the next creation time) and `decide` (time-outs from the actual time, skips of
//!   `LAST_ONLY` (a WAITING or READY action once the next nominal time
//!   has come) and `NONE`, the READY actions to submit under
//!   `concurrency` in `execution`'s order, the next timeout). No clock, no I/O.
//! - `coordinate.rs`: coordinators driven. A `Coordination` holds each
//!   declared coordinator's record, its open actions (with their views and
//!   inputs in the lattice) and counts per state, and goes by a `Clock`.
//!   `tick` ticks only the coordinators that changed or are due (a run
//!   ending costs one coordinator's tick), creates what is due (a catch-up
//!   is one commit per pass), applies `policy` and `action::transition`,
//!   and submits: the run is recorded with the action's SUBMITTED in one
//!   commit (`Scheduler::new_run_with`), deferred to the run's first
//!   commit, which precedes any of its transformations; RUNNING and the
//!   action's end are deferred too (`Scheduler::defer`, written with the
//!   next commit or by `commit_deferred` before the service waits), since
//!   after a crash both come back from the run's own record. An action
//!   whose `latest(n)` found nothing (`unfound`, from `action_inputs`)
//!   waits as for a missing input, and is resolved again (unpinned) at
//!   every check until it finds one. `check_inputs` looks at waiting actions'
//!   inputs (all, or those whose watch saw a change) and, for `trigger =
//!   "data"`, at the last `lookback` finished actions' inputs: a done flag
//!   that is another file than the one recorded runs that action again.
//!   `run_started`/`run_ended` map a run's `Termination` to the action
//!   (completed: SUCCEEDED; with failures: FAILED; stopped by hand: KILLED;
//!   stopped or dequeued by a shutdown: READY again, under a new run).
//!   Each coordinator's `Lag` (nominal times due without an action, the
//!   oldest of them; measured at open and at each tick, counted up to
//!   100,000) is in its status (`coordinators`, the API, `/metrics`), and
//!   `warnings` names those with more than 1,000 due as they open. A rerun
//!   re-creates the action: a new actual time (its timeout and `latest()`
//!   count from it), a full refresh only for one whose run ended
//!   (SUCCEEDED, FAILED); one that never ran runs as it would have.
//!   `open` loads the open actions: a SUBMITTED or RUNNING one whose run
//!   ended takes its outcome, one whose run never ended is resumed under
//!   that run's id (`resumed`), never submitted anew. An operator's
//!   `CoordinatorOperation` (statuses, actions, suspend, resume, kill,
//!   rerun, a full refresh) is carried out by one `operate`, for the
//!   embedded CLI and the service alike; it answers a `CoordinatorAnswer`
//!   and the killed actions' runs, which the service dequeues or stops and
//!   the CLI ends. Invariants: an
//!   action exists in the metastore from the commit that creates it; it
//!   never has two runs at once; it reads the time only from its clock and
//!   the file system only for done flags.

pub mod action;
pub mod coordinate;
pub mod policy;
