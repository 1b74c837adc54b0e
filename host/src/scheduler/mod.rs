//! The scheduler: materializes views in dependency order and keeps them
//! current.
//!
//! - `transition`: the pure per-view state machine and change detection;
//! - `coordinators`: the coordinators' room (`action`, `policy`, `coordinate`),
//!   which uses the scheduler through its methods only;
//! - `record`: the pure translation of a transition's actions to the view's record;
//! - `views`: the book of views (lattice, slots, memo, table), adopted only once committed;
//! - `state`: the [`Scheduler`], a façade over the book and the effects; instantiate, invalidate;
//! - `plan`: what a run would do to each view, judged as the run judges it, as typed verdicts;
//! - `step`: the pure step of a run, one event on one view, which `run` folds its queue through;
//! - `run`: one [`Run`] and the steps that advance it; the embedded driver;
//! - `call`: a view's transformation described for the executor, from the book of views;
//! - `task`: the executor: plugins, engines, permits, staging, backoff; its tasks' reports;
//! - `service`: the long-lived [`Service`] and its [`Handle`], for the server;
//! - `reload`: a server's project loaded again and applied between runs;
//! - `memo`: freshness remembered between runs, external data watched;
//! - `publish`: staging directories and atomic publish;
//! - `table`: the live table of views and runs that readers consult without the loop.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! materializes views and keeps them current.
//! - `transition.rs`: the pure core: `transition(state, event) -> (state,
//!   actions)` for one view (Schedoscope's states, trellis's modes, retries,
//!   invalidation refused in flight, coalescing of requests for a view in
//!   flight, stop, a view skipped for a failed dependency under
//!   `on_dependency_failure = "skip"`), `retry_delay` (whether and when a
//!   failure of each `FailureClass` is tried again under a type's
//!   `RetryPolicy`: declared retryable failures and deadlines up to
//!   `retries`, crashes only with `retry_panics`, the host's own I/O
//!   and transient network trouble (`FailureClass::Network`) without limit,
//!   backoff capped at 5 minutes; `Failures::next_retry` keeps network
//!   failures apart, so they never use up `retries`, and `Retry::Network`
//!   makes the transition report `retrying (network)` with the error, kept
//!   in the slot and the table's `network_retry` while the view waits) and `freshness(facts)`, the change detection (no done
//!   flag, invalidated, never materialized, data gone, version changed,
//!   dependency newer, new external data: a flag whose mtime, size or inode
//!   differs from the one recorded; a version change keeps any new input
//!   besides with it, so that RESET_TRANSFORMATION_CHECKSUMS, which
//!   suppresses the version change only, still rebuilds new input). No I/O, no clock, no failure; both are
//!   golden tables (every (state, event) pair; every failure class).
//! - `record.rs`: the pure translation from one transition's actions to
//!   the view's record and its flow status in the run (which timestamp:
//!   the transformation's, or now, SET_ONLY included; for external
//!   data the done flag found, recorded with the time it was seen, which is
//!   the view's timestamp; incomplete/errors flags; the counters the
//!   transformation returned, kept with the record and the flow; idle or
//!   successful; the failure). A view recorded no-data while a dependency
//!   failed carries `errors` too: a failed input is not no data (seed 000).
//!   A view to be transformed is `STARTING`; the run makes it `RUNNING`
//!   when its task reports that it holds its permits.
//!   Like `transition`, no I/O, no clock, a golden table.
//! - `state.rs`: `Scheduler`, the one owner of all view state: a slot per
//!   lattice view (its record as committed and its URL), the plugins and
//!   each type's version checksum (computed once at open, from
//!   `plugins`), permits (a global and a per-plugin semaphore), the
//!   staging area, the memo and, once shared, the table. Outside runs it
//!   instantiates, invalidates (refused for views in flight, and for
//!   views the run in progress has settled, whose dependents may have
//!   taken them as they were) and plans (`plan`, in any mode with
//!   `plan_in_mode`: TRANSFORM_ONLY and SET_ONLY list the addressed views
//!   only, the RESET modes say what they record; `stale`, for `views`, the
//!   API and the UI, is the same plan of materialized views, keeping those
//!   it would rebuild with the reason, so that stale and `plan` never
//!   disagree; a failed view's plan says when it failed and why, from the
//!   record's `failed_at` and `last_error`). `judge` is the one judgement of
//!   a view whose dependencies have settled, which `plan` and a run's
//!   `settle` both call: it builds the freshness facts (dependencies as
//!   they stand, given by the caller: as the run left them, or as `plan`
//!   expects the run to leave them; the done flag's identity against the
//!   record's, watched first when a memo is kept) and applies
//!   `freshness`; a view whose `latest()` now resolves to other instances
//!   than the ones its record says it read is outdated (`latest() now
//!   resolves to ...`), though no timestamp says so (an older instance).
//!   `resolve_latest` resolves a view's `latest()` again, where a check
//!   first looks at its edges: `plan` for every view it walks (views in
//!   flight keep theirs), a run when it asks the view's dependencies; the
//!   evaluation time is the wall clock under `evaluation_time = "present"`,
//!   the run's actual time (when it began, or its action's recorded one)
//!   under `"actual"` (`latest_at`, a `LatestAt` per run, whose `actual` is
//!   also `${actualTime()}` for every transformation and engine job of the
//!   run; `resolve_latest_at`); a
//!   coordinator's action instantiates its views at its own actual time
//!   (`instantiate_at`, `action_inputs`), where under `"actual"` every
//!   `latest()` below it is resolved again recording the done flags found
//!   (`latest_found` on the action), and its run, and the action after a
//!   restart, resolve against exactly those flags (`pinned`). It grows the slots, table and memo for an instance new to the
//!   lattice, and rewires the memo's reverse edges. A run records what a
//!   view's `latest()` resolved to with the view when it marks it
//!   materialized. Each run records timestamps no lower than its floor,
//!   one above every timestamp recorded or loaded before it (`last_stamp`),
//!   so a view rebuilt is newer than every view built by earlier runs, even
//!   in the same millisecond. `open_records` opens it without
//!   plugins, enough to instantiate and invalidate. Loading a view's
//!   record (`take_in_new_views`), `adopt_published` takes in an output
//!   that an attempt published and its run, recorded and never ended (the
//!   process killed between the rename and the commit), did not record:
//!   the record `record::record` makes from the receipt, an event ending
//!   in `recover-published`, the run's SUCCESSFUL flow and, for an
//!   incremental view's first commit, its log, all committed at once; so
//!   a published view is never transformed again. A record dropped for a
//!   new schema, or missing from a restored metastore, is not brought back. Only stable states
//!   are stored, so a crash never leaves a view claiming to be in flight.
//! - `run.rs`: one run. A `Run` holds its transient state: the queue of
//!   `(view, transition::Event)`, flow statuses, failures, tasks in
//!   flight, what each view waits for, the stop asked, and the channel its
//!   tasks report on. The scheduler advances it: `begin`; `step` applies
//!   every queued event through `transition` and `record`, commits records
//!   and events in one metastore batch, and only then executes the
//!   actions (asking dependencies, starting transformations as tokio
//!   tasks under permits, counting each view's attempts, scheduling the
//!   retries `retry_delay` allows, notifying dependents; a dependency
//!   skipped for a failure is judged as failed); `on_report` takes every `TaskReport` that is
//!   ready, so they share a commit; `stop` takes effect once the queue is
//!   drained and the reports already sent are applied (their data is
//!   published, and their records must say so), then everything in flight
//!   is canceled; `finish` records the run's `Termination`, the flows
//!   not written yet and attempts per transformed view. Each settled flow but idle ones (most views of an
//!   unchanged run, which are only counted) is written with the commit that
//!   settles it, so `GET /runs/{id}` shows them during the run
//!   (the run's record exists from its start); `finish` writes only those
//!   not written as they are (those still queued when a stop skipped them),
//!   and the run's `flow_counts` (by status, idle included), with which
//!   `trellis runs` counts each run in its summary's words. A flow keeps a
//!   `reason` where its status does not say enough: `upstream failed: VIEW`
//!   (a view skipped, or built or left without data, while a dependency
//!   failed: `settle` names the failed inputs, and the view's event carries
//!   `errors`), `no done flag at PATH` (external data looked for and not
//!   found). A transformation that never got its permits before a stop is
//!   SKIPPED with its attempt taken back.
//!   `finish` adds
//!   `excluded` (seed 003's EXCLUDED): of the closure of the addressed
//!   views, those a run that selects only the addressed views
//!   (TRANSFORM_ONLY, SET_ONLY, a full refresh) never looked at; a run that
//!   asks dependencies excludes nothing, and views outside the closure are
//!   no part of any run. A full refresh (`RunRecord::full_refresh`, DEFAULT
//!   mode only, `check_full_refresh`) asks only selected dependencies
//!   (whatever the memo says), reads the others as they stand (never
//!   materialized counts as no data), makes `settle` turn a selected view's
//!   `UpToDate` into `Outdated(FullRefresh)` but for external data, whose
//!   flag is judged as always, and marks nothing clean in the memo.
//!   Every application of `transition` is logged as an event (view,
//!   previous and new state, actions, time, run, error), "asked and found
//!   up to date" included; an unchanged run writes no view record. The
//!   embedded `materialize` is a short driver over this API: step until
//!   the queue is empty, then wait for a report or the stop future.
//! - `service.rs`: the long-lived `Service` of `trellis serve`. It owns
//!   the scheduler, the queue of accepted runs and the run executing.
//!   Everything that can wake it is one closed enum, `Wakeup`: a request
//!   from a handle (or all handles gone), `Step` (the run has events
//!   queued), a task's `Report`, `Shutdown` (on a watch channel of its own,
//!   so that a full request queue cannot hold it up) and `GraceOver` (a
//!   shutdown's grace period ended), `Due` (the next due time over all
//!   coordinators, one timer, or a manual clock set), `Files` (the memo's
//!   inotify descriptor is readable, waited on through `AsyncFd` on a
//!   copy of it: the changes are drained and only waiting actions whose
//!   inputs lost their watch are looked at again), `Poll` (where there
//!   are no watches, every two seconds while actions wait) and `Rescan`
//!   (with watches, every `rescan_interval` while actions wait, a deadline
//!   kept across wakeups: every waiting input looked at, so a change the
//!   watches missed delays an action but never strands it; the table
//!   counts rescans and those that found something, for `/metrics`). Coordinators'
//!   submissions join the queue of runs like requests; when a run starts
//!   or ends, its action (if any) is told, and the coordinators tick. `next_event` holds the only
//!   `select!` (biased: requests first, so they are answered between two
//!   steps); `handle` applies a wakeup. Runs execute one at a time; a
//!   materialize request during a run gets its id at once and is queued,
//!   which is how overlapping requests never transform a view twice at
//!   once. A shutdown lets the current run go on for the grace period,
//!   then stops it, and ends queued runs unstarted. `Handle` is the typed,
//!   cheap-to-clone front (`instantiate`, `materialize`, `invalidate`,
//!   `plan`, `stop`, `reload`, `shutdown`); a reload request is kept until
//!   no run executes and applied at the top of the loop, before the next
//!   queued run starts (whose pattern is addressed again in the new
//!   lattice), and answered then; requests and their reply channels are
//!   private to the module. The request queue is bounded (`REQUEST_QUEUE`):
//!   past it a request is refused at once with `Error::Busy`, never queued
//!   without bound. Invariant: every request gets exactly one reply, after
//!   what it did is committed; it knows nothing of HTTP.
//! - `reload.rs`: a server's project loaded again. `load_project` loads
//!   `trellis.toml` and its plugins as `serve` does and computes every
//!   version checksum, outside the service, so a broken project is refused
//!   (`Error::Refused`, every diagnostic with its line) whatever a run is
//!   doing; `Reloader` (project directory and runtime) is what `SIGHUP`
//!   and `POST /reload` call. `Scheduler::reload`, called by the service
//!   only between runs, reports what changed (types added, removed, schema
//!   and version checksum changes naming the plugin or resource, settings)
//!   and replaces the project: schemas registered as at open (a change
//!   drops that type's records), permits (kept where the limit is the
//!   same), staging, plugins and versions; the lattice and the table's rows
//!   are rebuilt from scratch, re-instantiating every view held whose type
//!   is still declared, and the memo starts empty. A different metastore
//!   path is refused. Invariant: never applied during a run; a refused
//!   project leaves the scheduler untouched.
//! - `memo.rs`: what a long-lived scheduler (a server's, or the bench's
//!   "server" figures) remembers between runs: which views a DEFAULT run
//!   found up to date, with reverse edges to dirty everything above a
//!   change. The done flag of each materialized view is watched itself
//!   (`watch_published`, so that a deleted output is seen and what is
//!   published beside it is not; right after a view is published the
//!   queue is drained and the new flag watched, so a run's own publishing
//!   dirties nothing). External data is watched with inotify on each
//!   done flag's directory and every directory above it up to the storage root
//!   (or, while the root does not exist yet, the nearest directory above it
//!   that does, so a server started before its `data/` sees it appear; a
//!   watch follows a directory, not a path, so a rename anywhere on the way
//!   must be seen), added from the root down so that a directory created
//!   meanwhile is watched or seen appearing; the watches are added before the flag is read, and
//!   every run drains the kernel's queue before it looks at a view, so a
//!   change made before a request is seen by it. A run skips asking clean
//!   dependencies that it does not have in flight, so after one full check
//!   it visits the addressed views and the cone of what changed. The run
//!   loop keeps the rules in one place where events are applied: a view
//!   whose state or timestamp changes is dirtied with all above it (any
//!   mode); one a DEFAULT run judged (idle, materialized, no data) is
//!   marked clean; a canceled one never is; nor is a view with `latest(n)`
//!   dependencies (an instance it could move to may not be in the lattice,
//!   let alone watched), so every run asks it and resolves its `latest()`
//!   again, and `rewire` moves its reverse edges when they change.
//!   Invariants: a clean view's dependencies are clean; an external or materialized view is clean
//!   only while watched (with data, by its own directory); a lost watch or an overflowed
//!   queue makes views dirty, never clean. It knows edges, nothing of
//!   states or the metastore.
//! - `table.rs`: the read side of the service: every instantiated view's
//!   live state, flags (an invalidation pending included), data path and
//!   dependencies (an invalidation refreshes its rows at once), version
//!   checksums, an index by URL and the inverse of the dependencies (kept
//!   as rows are added and rewired), the run executing (its head) and
//!   those queued, transformations holding permits (a task reports
//!   `Started` once it has them), the run's flows as they stand
//!   (`current_run_flows`: QUEUED, STARTING, RUNNING, then how each ended;
//!   `GET /runs/{id}` lays them over the flows recorded) and counters. The loop updates it after
//!   each commit, under a `RwLock` held for one batch of rows; readers (the
//!   API) never wait for the loop to reach them. Only a shared scheduler
//!   keeps it, so the embedded CLI pays nothing for it. Why the UI reads
//!   it rather than the metastore: sled excludes every reader while a batch
//!   applies, and a run's large commits (100,000 views invalidated) take up
//!   to a second.
//! - `txlog.rs`: incremental views' commits. The manifest of an input (its
//!   data files: relative path, size, mtime, inode), `compare` (new,
//!   changed, removed), `prepare` (the manifest check: the previous
//!   output's marker against the inputs now, and whether the run reads
//!   everything: no marker, a reset, another schema or version, a full
//!   refresh; a golden table), `write_marker` and the metastore's records
//!   made from a marker (`write_of`, `reset_of`). **The commit is part of
//!   the output**: the marker `.trellis-txlog.json` (generation, version
//!   and schema checksums, per input its commit id and manifest) is written
//!   into the staging directory after the plugin succeeds and published
//!   with the data in one rename; the log's `TxWrite` follows with the
//!   view's record (deferred to the run's next commit). A kill before the
//!   publish changes nothing; between the publish and the commit the
//!   marker is a generation ahead, adopted at open (`reconcile_txlog` in
//!   `state.rs`, an event `txlog-reconcile`) and by the next run, which
//!   reads the previous output's own marker; so each input file is in the
//!   output exactly once. A reset records the generation up to which
//!   markers are void and never touches data. `run.rs` builds the `Spec`
//!   (`txlog_spec`, from `inputs_with_data`, the one list of a view's
//!   inputs that runs and `plan` share) for a type declared incremental
//!   whose plugin is, and records the commit a task reports;
//!   `state.rs` has the one rule of whether a view runs incrementally
//!   (`merges`: its type says so and its plugin can), lists logs (`txlog`), resets them (`reset_txlog`, which
//!   invalidates, so refused in flight), resets with every invalidation,
//!   and has `plan` say what an incremental run would read. Invariant: it
//!   writes only into a staging directory.
//! - `publish.rs`: staging directories under `<storage>/.trellis-staging`
//!   and atomic publish (`renameat2` exchange, done flag inside); a
//!   `StagingDir` removes itself when dropped unpublished (a task aborted
//!   by a stop), and what a killed process left is removed at open, and
//!   only that: directories named as `create` names them (`view-` and six
//!   random characters). Anything else found there is left alone with a
//!   warning. Every publish writes a `Receipt` (`.trellis-publish.json`,
//!   hidden like the txlog marker): view, run and attempt, the timestamp,
//!   version and schema checksums, settled flags, counters and `latest()`
//!   instances the run's commit records, and a digest of every entry of
//!   the output (name, kind, size, mtime, inode). `recognise` finds an
//!   output whose done flag is not the one the view's record holds and
//!   that is exactly as its receipt says. Invariant: it deletes only what
//!   trellis created.

mod call;
pub mod coordinators;
mod memo;
mod plan;
pub mod publish;
pub mod record;
pub mod reload;
pub mod run;
pub mod service;
mod state;
mod step;
pub mod table;
mod task;
pub mod transition;
pub mod txlog;
mod views;

// The paths the CLI and the API know the coordinators' modules by.
pub use coordinate::{Coordination, CoordinatorStatus, Submission};
pub use coordinators::{action, coordinate, policy};
pub use plan::{Increment, NoData, Outdated, Verdict, Why};
pub use reload::{Project, ReloadReport, Reloader, load_project};
pub use run::{Run, RunSummary, StopReason, check_full_refresh};
pub use service::{Accepted, CoordinatorAnswer, CoordinatorOperation, Handle, Service, Stopping};
pub use state::{Invalidation, Progress, Scheduler, TxLogView, TxReset};
pub use task::{Permits, TaskReport};
pub use transition::{Action, Event, Facts, Freshness, Mode, Reason, Settled, freshness, transition};

use crate::catalog::pattern;
use crate::{lattice, metastore, plugins};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Pattern(#[from] pattern::PatternError),
    #[error(transparent)]
    Lattice(#[from] lattice::Error),
    #[error(transparent)]
    Metastore(#[from] metastore::Error),
    #[error(transparent)]
    Plugins(#[from] plugins::Error),
    #[error(
        "this scheduler was opened without plugins: it can instantiate and invalidate views, not materialize or plan"
    )]
    NoPlugins,
    #[error("{0}")]
    Io(String),
    #[error("the server is shutting down and accepts no new runs")]
    Closing,
    #[error("the scheduler has {queued} requests waiting, its limit; try again in a moment")]
    Busy { queued: usize },
    #[error("the scheduler has shut down")]
    Gone,
    /// A reload refused: the project served stays as it was.
    #[error(
        "the project was not reloaded (the server keeps the one it has): {}",
        .0.join("; ")
    )]
    Refused(Vec<String>),
    /// A coordinator operation named a coordinator the project lacks.
    #[error("the project has no coordinator `{name}` ({known})")]
    UnknownCoordinator { name: String, known: String },
    /// A coordinator operation that cannot apply, and why.
    #[error("{0}")]
    Coordinator(String),
    /// A transaction log request that names what is not there.
    #[error("{0}")]
    TxLog(String),
    /// Views the request would transform run on an engine that is not
    /// available here (Spark or Java missing).
    #[error("{0}")]
    EngineUnavailable(String),
}
