//! The scheduler as a long-lived service, for `trellis serve`. A [`Service`]
//! owns the [`Scheduler`], the queue of runs accepted and the run
//! executing; everything that can wake it is a [`Wakeup`], awaited in one
//! place (`next_event`) and applied in one place (`handle`). Requests are
//! answered between two steps of a run, so a stop, an invalidation or a new
//! request is answered at once. Runs execute one after another; a
//! materialize request made during a run is given its id at once and
//! queued behind it, which is how overlapping requests never transform a
//! view twice at the same time.
//!
//! Invariant: every request gets exactly one reply, and the service replies
//! only after what the request did is committed. It knows nothing of HTTP:
//! its errors are the scheduler's, its answers plain data.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::Error;
use super::coordinate::Coordination;
pub use super::coordinate::{CoordinatorAnswer, CoordinatorOperation};
use super::reload::{Project, ReloadReport};
use super::run::{Run, RunSummary, StopReason};
use super::state::{Invalidation, Scheduler, TxLogView, TxReset};
use super::table::SharedTable;
use super::task::TaskReport;
use super::transition::Mode;
use crate::lattice::ViewId;
use crate::metastore::RunRecord;
use crate::model::{Termination, ViewState};

type Reply<T> = oneshot::Sender<Result<T, Error>>;

/// What the service can be asked, through a [`Handle`].
enum Request {
    Instantiate {
        pattern: String,
        closure: bool,
        reply: Reply<Vec<u32>>,
    },
    Materialize {
        pattern: String,
        mode: Mode,
        full_refresh: bool,
        reply: Reply<Accepted>,
    },
    Invalidate {
        pattern: String,
        dependencies: bool,
        reply: Reply<Invalidation>,
    },
    Plan {
        pattern: String,
        reply: Reply<Vec<(String, super::Verdict)>>,
    },
    Stale {
        indexes: Vec<u32>,
        reply: Reply<std::collections::HashMap<u32, super::Outdated>>,
    },
    TxLog {
        pattern: Option<String>,
        reply: Reply<Vec<TxLogView>>,
    },
    ResetTxLog {
        pattern: String,
        source: Option<String>,
        reply: Reply<TxReset>,
    },
    Stop {
        run: String,
        reply: Reply<Stopping>,
    },
    /// A coordinator operation (`trellis coordinators`, `actions`,
    /// `suspend`, `resume`, `kill`, `rerun`).
    Coordinators {
        operation: CoordinatorOperation,
        reply: Reply<CoordinatorAnswer>,
    },
    /// A project loaded and checked, to replace the one served between runs.
    Reload {
        project: Box<Project>,
        reply: Reply<ReloadReport>,
    },
}

impl Request {
    /// Whether whoever asked no longer waits for the answer.
    fn is_abandoned(&self) -> bool {
        match self {
            Request::Instantiate { reply, .. } => reply.is_closed(),
            Request::Materialize { reply, .. } => reply.is_closed(),
            Request::Invalidate { reply, .. } => reply.is_closed(),
            Request::Plan { reply, .. } => reply.is_closed(),
            Request::Stale { reply, .. } => reply.is_closed(),
            Request::TxLog { reply, .. } => reply.is_closed(),
            Request::ResetTxLog { reply, .. } => reply.is_closed(),
            Request::Stop { reply, .. } => reply.is_closed(),
            Request::Coordinators { reply, .. } => reply.is_closed(),
            // Asked for is asked for: a client that stopped waiting (a
            // request timeout while a run goes on) still gets its reload.
            Request::Reload { .. } => false,
        }
    }
}

/// How many requests may wait for the service at once. Past it a request
/// is refused at once ([`Error::Busy`]) rather than queued without bound.
pub const REQUEST_QUEUE: usize = 256;

/// Everything that can wake the service.
enum Wakeup {
    /// A coordinator is due by the clock: a nominal time, a timeout.
    Due,
    /// The watches on external data have changes queued: waiting actions'
    /// inputs may have arrived (or finished ones' been delivered again).
    Files,
    /// No watches here: waiting actions' inputs are looked at again; or
    /// an object store's watches are due to be polled (then what they
    /// found changed is looked at).
    Poll,
    /// The safety rescan is due (`rescan_interval`): every waiting input is
    /// looked at, in case the watches missed a change.
    Rescan,
    /// A request from a handle; `None` once every handle is dropped.
    Request(Option<Request>),
    /// The run executing has events queued: it takes its next step.
    Step,
    /// A task of the run executing reported back.
    Report(TaskReport),
    /// A shutdown was asked: finish the current run within the grace
    /// period (then stop it), end the queued ones unstarted, and end. It
    /// comes on a channel of its own, so that a full request queue cannot
    /// hold it up.
    Shutdown(Duration),
    /// A shutdown's grace period is over.
    GraceOver,
}

/// A materialize request, accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub run: String,
    /// Runs ahead of it; 0 when it starts at once.
    pub queued_behind: usize,
    /// The addressed views and their states now.
    pub views: Vec<(String, ViewState)>,
}

/// What a stop request found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopping {
    /// The run is executing: it is being stopped.
    Stopping,
    /// It was queued: it will never start.
    Dequeued,
    /// It had already finished, so.
    Finished(Termination),
    /// No run has that id.
    Unknown,
}

/// A run accepted but not started.
struct QueuedRun {
    record: RunRecord,
    mode: Mode,
    addressed: Vec<ViewId>,
}

/// The sending side, for the API. Cheap to clone.
#[derive(Clone)]
pub struct Handle {
    requests: mpsc::Sender<Request>,
    shutdown: std::sync::Arc<watch::Sender<Option<Duration>>>,
    pub table: SharedTable,
}

impl Handle {
    /// Sends a request built around a fresh reply channel and waits for the
    /// answer; refuses it at once when [`REQUEST_QUEUE`] requests wait already.
    async fn ask<T>(&self, request: impl FnOnce(Reply<T>) -> Request) -> Result<T, Error> {
        let (reply, answer) = oneshot::channel();
        self.requests.try_send(request(reply)).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => Error::Busy { queued: REQUEST_QUEUE },
            mpsc::error::TrySendError::Closed(_) => Error::Gone,
        })?;
        answer.await.map_err(|_| Error::Gone)?
    }

    /// Instantiates a pattern's views (so that the table shows them) and
    /// returns their indexes in the table; with `closure`, also those of
    /// everything they depend on, transitively.
    pub async fn instantiate(&self, pattern: String, closure: bool) -> Result<Vec<u32>, Error> {
        self.ask(|reply| Request::Instantiate { pattern, closure, reply }).await
    }

    /// Records a run of `pattern`, which starts once those ahead of it end.
    pub async fn materialize(&self, pattern: String, mode: Mode) -> Result<Accepted, Error> {
        self.materialize_with(pattern, mode, false).await
    }

    /// Like [`Handle::materialize`]; with `full_refresh`, the pattern's
    /// views are rebuilt whatever their state (see `Scheduler::begin`).
    pub async fn materialize_with(&self, pattern: String, mode: Mode, full_refresh: bool) -> Result<Accepted, Error> {
        self.ask(|reply| Request::Materialize { pattern, mode, full_refresh, reply }).await
    }

    pub async fn invalidate(&self, pattern: String, dependencies: bool) -> Result<Invalidation, Error> {
        self.ask(|reply| Request::Invalidate { pattern, dependencies, reply }).await
    }

    pub async fn plan(&self, pattern: String) -> Result<Vec<(String, super::Verdict)>, Error> {
        self.ask(|reply| Request::Plan { pattern, reply }).await
    }

    /// Of the views held at `indexes`, the materialized ones `plan` would
    /// rematerialize, with why (see [`Scheduler::stale`]).
    pub async fn stale(&self, indexes: Vec<u32>) -> Result<std::collections::HashMap<u32, super::Outdated>, Error> {
        self.ask(|reply| Request::Stale { indexes, reply }).await
    }

    /// The transaction logs of the incremental views of `pattern`, or of
    /// every view that has one.
    pub async fn txlog(&self, pattern: Option<String>) -> Result<Vec<TxLogView>, Error> {
        self.ask(|reply| Request::TxLog { pattern, reply }).await
    }

    /// Resets transaction logs (see [`Scheduler::reset_txlog`]).
    pub async fn reset_txlog(&self, pattern: String, source: Option<String>) -> Result<TxReset, Error> {
        self.ask(|reply| Request::ResetTxLog { pattern, source, reply }).await
    }

    pub async fn stop(&self, run: String) -> Result<Stopping, Error> {
        self.ask(|reply| Request::Stop { run, reply }).await
    }

    /// Asks the coordinators (see [`CoordinatorOperation`]).
    pub async fn coordinators(&self, operation: CoordinatorOperation) -> Result<CoordinatorAnswer, Error> {
        self.ask(|reply| Request::Coordinators { operation, reply }).await
    }

    /// Replaces the project served by `project` (see `reload`): at once
    /// when no run executes, else once the run executing ends, before the
    /// next queued one starts. Answers what changed.
    pub async fn reload(&self, project: Project) -> Result<ReloadReport, Error> {
        let project = Box::new(project);
        self.ask(|reply| Request::Reload { project, reply }).await
    }

    /// Finishes the current run within `grace` (then stops it), ends the
    /// queued ones unstarted, and ends the service.
    pub fn shutdown(&self, grace: Duration) {
        self.shutdown.send_replace(Some(grace));
    }
}

/// One task owns this: the scheduler, the runs queued and the one executing.
pub struct Service {
    scheduler: Scheduler,
    requests: mpsc::Receiver<Request>,
    shutdown: watch::Receiver<Option<Duration>>,
    /// Some handle is still alive.
    requests_open: bool,
    queued: VecDeque<QueuedRun>,
    run: Option<Run>,
    /// A shutdown was asked: no new runs; the current one is stopped at the deadline.
    closing: Option<tokio::time::Instant>,
    /// Reloads asked for, applied in order once no run executes.
    reloads: Vec<(Box<Project>, Reply<ReloadReport>)>,
    /// A manual clock's changes (a test moved it): a tick is due.
    clock_moves: Option<watch::Receiver<chrono::DateTime<chrono::Utc>>>,
    /// The project's coordinators, once `run` has opened them.
    coordination: Option<Coordination>,
    /// The scheduler's watches on external data, to wake on.
    watches: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
    /// When the next safety rescan is due, while actions wait for inputs.
    next_rescan: Option<tokio::time::Instant>,
    /// When an object store's watches are polled next.
    next_poll: Option<tokio::time::Instant>,
}

/// How often waiting actions' inputs are looked at where nothing watches them.
const POLL_WITHOUT_WATCHES: Duration = Duration::from_secs(2);

impl Service {
    /// Makes a service of the scheduler: it shares its table and remembers
    /// freshness between runs. Returns the service, to run on a task of
    /// its own, and its handle.
    pub fn new(scheduler: Scheduler) -> (Service, Handle) {
        let clock = scheduler.clock().clone();
        Service::with_clock(scheduler, clock)
    }

    /// Like [`Service::new`], going by `clock`: the coordinators, and every
    /// time the scheduler records.
    pub fn with_clock(mut scheduler: Scheduler, clock: crate::clock::Clock) -> (Service, Handle) {
        scheduler.set_clock(clock.clone());
        let (sender, requests) = mpsc::channel(REQUEST_QUEUE);
        let (shutdown_sender, shutdown) = watch::channel(None);
        let table = scheduler.share_table();
        scheduler.remember_freshness();
        let service = Service {
            scheduler,
            requests,
            shutdown,
            requests_open: true,
            queued: VecDeque::new(),
            run: None,
            closing: None,
            reloads: Vec::new(),
            clock_moves: clock.follow(),
            coordination: None,
            watches: None,
            next_rescan: None,
            next_poll: None,
        };
        (service, Handle { requests: sender, shutdown: std::sync::Arc::new(shutdown_sender), table })
    }

    /// Serves until a shutdown request (or until every handle is dropped),
    /// once the current run has ended; then flushes the metastore.
    pub async fn run(mut self) -> Result<(), Error> {
        self.open_coordinators()?;
        loop {
            if self.run.is_none() {
                self.apply_reloads();
            }
            if self.run.is_none() && !self.start_next()? {
                break;
            }
            if let Some(run) = &mut self.run {
                let steps = self.scheduler.step(run);
                if (steps.is_err() || run.is_over())
                    && let Some(run) = self.run.take()
                {
                    let id = run.id().to_string();
                    let summary = self.scheduler.finish(run, steps);
                    let termination = match &summary {
                        Ok(summary) => summary.termination.clone(),
                        Err(e) => Termination::Failed(e.to_string()),
                    };
                    log_summary(summary);
                    if let Some(coordination) = &mut self.coordination {
                        coordination.run_ended(&mut self.scheduler, &id, termination)?;
                    }
                    self.tick()?;
                    continue;
                }
            }
            // Nothing deferred waits with the loop: what the metastore
            // says stays at most one step behind.
            self.scheduler.commit_deferred()?;
            let event = self.next_event().await;
            self.handle(event)?;
        }
        self.scheduler.commit_deferred()?;
        self.scheduler.metastore().flush()?;
        Ok(())
    }

    /// Starts the next queued run, ending it unstarted while closing.
    /// Returns false when there is nothing more to do, ever.
    fn start_next(&mut self) -> Result<bool, Error> {
        while let Some(next) = self.queued.pop_front() {
            self.publish_queue();
            if self.closing.is_some() {
                let id = next.record.id.clone();
                self.scheduler.finish_unstarted(next.record, Termination::DequeuedByShutdown)?;
                if let Some(coordination) = &mut self.coordination {
                    coordination.run_ended(&mut self.scheduler, &id, Termination::DequeuedByShutdown)?;
                }
                continue;
            }
            let id = next.record.id.clone();
            self.run = Some(self.scheduler.begin(next.record, next.mode, &next.addressed));
            if let Some(coordination) = &mut self.coordination {
                coordination.run_started(&mut self.scheduler, &id)?;
            }
            return Ok(true);
        }
        Ok(self.closing.is_none() && self.requests_open)
    }

    /// The only place the service waits. Requests come first, so they are
    /// answered between two steps even while the run has work queued; a run
    /// with work queued does not wait for its tasks.
    async fn next_event(&mut self) -> Wakeup {
        self.publish_coordinators();
        let busy = self.run.as_ref().is_some_and(Run::has_work);
        let grace = self.closing.filter(|_| self.run.as_ref().is_some_and(|run| !run.is_stopping()));
        let closing = self.closing.is_some();
        let coordination = self.coordination.as_ref().filter(|_| !closing);
        let due = coordination.and_then(Coordination::next_due).and_then(|due| self.scheduler.clock().until(due));
        let due = due.map(|wait| tokio::time::Instant::now() + wait);
        let waits_for_inputs = coordination.is_some_and(Coordination::watches_inputs);
        // An object store's watches are polled at its interval, kept between
        // wakeups as the rescan's is; without watches, waiting inputs are
        // looked at every few seconds.
        let poll = match self.scheduler.watch_poll_interval().filter(|_| !closing) {
            Some(interval) => {
                let next = tokio::time::Instant::now() + interval;
                Some(*self.next_poll.get_or_insert(next))
            }
            None => {
                (waits_for_inputs && self.watches.is_none()).then(|| tokio::time::Instant::now() + POLL_WITHOUT_WATCHES)
            }
        };
        let watches = self.watches.as_ref().filter(|_| waits_for_inputs);
        // A deadline kept between wakeups (else every wakeup would put it
        // off), set when actions start waiting and cleared when none do.
        let interval =
            coordination.filter(|_| waits_for_inputs && self.watches.is_some()).and_then(Coordination::rescan_interval);
        self.next_rescan = match (interval, self.next_rescan) {
            (None, _) => None,
            (Some(interval), Some(next)) => Some(next.min(tokio::time::Instant::now() + interval)),
            (Some(interval), None) => Some(tokio::time::Instant::now() + interval),
        };
        let rescan = self.next_rescan;
        tokio::select! {
            biased;
            Ok(()) = self.shutdown.changed(), if !closing => match *self.shutdown.borrow_and_update() {
                Some(grace) => Wakeup::Shutdown(grace),
                None => Wakeup::Step,
            },
            request = self.requests.recv(), if self.requests_open => Wakeup::Request(request),
            () = std::future::ready(()), if busy => Wakeup::Step,
            Some(report) = next_report(&mut self.run), if !busy => Wakeup::Report(report),
            () = sleep_until_some(grace) => Wakeup::GraceOver,
            () = sleep_until_some(due) => Wakeup::Due,
            () = readable(watches) => Wakeup::Files,
            () = sleep_until_some(poll) => Wakeup::Poll,
            () = sleep_until_some(rescan) => Wakeup::Rescan,
            () = clock_moved(&mut self.clock_moves) => Wakeup::Due,
        }
    }

    /// Applies one wakeup. Only the metastore's errors end the service.
    fn handle(&mut self, event: Wakeup) -> Result<(), Error> {
        match event {
            Wakeup::Request(Some(request)) => self.serve(request),
            // Nobody can ask any more: finish what was accepted.
            Wakeup::Request(None) => self.requests_open = false,
            Wakeup::Step => {}
            Wakeup::Shutdown(grace) => {
                self.closing.get_or_insert(tokio::time::Instant::now() + grace);
            }
            Wakeup::Report(report) => {
                if let Some(run) = &mut self.run {
                    self.scheduler.on_report(run, report);
                }
            }
            Wakeup::Due => self.tick()?,
            Wakeup::Files => {
                self.scheduler.drain_watches();
                self.check_inputs(false)?;
            }
            Wakeup::Poll if self.next_poll.take().is_some() => {
                self.scheduler.poll_watches();
                self.check_inputs(false)?;
            }
            Wakeup::Poll => self.check_inputs(true)?,
            Wakeup::Rescan => {
                self.next_rescan = None;
                self.rescan()?;
            }
            Wakeup::GraceOver => {
                if let Some(run) = &mut self.run {
                    self.scheduler.stop(run, StopReason::Shutdown);
                }
            }
        }
        Ok(())
    }

    /// Serves one request. What goes wrong goes to the request's reply. A
    /// request whose asker has gone (a client that hung up, a request that
    /// timed out while it waited) is dropped unserved: nobody would learn
    /// what it did, and an instantiation can take seconds.
    fn serve(&mut self, request: Request) {
        if request.is_abandoned() {
            return;
        }
        match request {
            Request::Instantiate { pattern, closure, reply } => {
                let result = self.scheduler.instantiate(&pattern).map(|ids| {
                    let ids = if closure { self.scheduler.lattice().closure(&ids) } else { ids };
                    ids.into_iter().map(|id| id.0).collect()
                });
                let _ = reply.send(result);
            }
            Request::Materialize { pattern, mode, full_refresh, reply } => {
                let _ = reply.send(self.accept(&pattern, mode, full_refresh));
            }
            Request::Invalidate { pattern, dependencies, reply } => {
                let run = self.run.as_ref();
                let settled_by_run = |id| run.is_some_and(|run| run.has_settled(id));
                let _ = reply.send(self.scheduler.invalidate(&pattern, dependencies, settled_by_run));
            }
            Request::Plan { pattern, reply } => {
                let _ = reply.send(self.scheduler.plan(&pattern));
            }
            Request::Stale { indexes, reply } => {
                let _ = reply.send(self.scheduler.stale(&indexes));
            }
            Request::TxLog { pattern, reply } => {
                let _ = reply.send(self.scheduler.txlog(pattern.as_deref()));
            }
            Request::ResetTxLog { pattern, source, reply } => {
                let run = self.run.as_ref();
                let settled_by_run = |id| run.is_some_and(|run| run.has_settled(id));
                let _ = reply.send(self.scheduler.reset_txlog(&pattern, source.as_deref(), settled_by_run));
            }
            Request::Stop { run, reply } => {
                let _ = reply.send(self.stop(&run));
            }
            Request::Coordinators { operation, reply } => {
                let _ = reply.send(self.coordinate(operation));
            }
            Request::Reload { project, reply } => {
                if self.closing.is_some() {
                    let _ = reply.send(Err(Error::Closing));
                } else {
                    // Applied by the loop once no run executes: never in
                    // the middle of a run's step, nor between two of them.
                    self.reloads.push((project, reply));
                }
            }
        }
    }

    /// Applies the reloads asked for (no run executes). The queued runs'
    /// views are addressed again in the new lattice; one whose pattern no
    /// longer addresses anything there ends unstarted.
    fn apply_reloads(&mut self) {
        for (project, reply) in std::mem::take(&mut self.reloads) {
            let result = self.scheduler.reload(*project);
            match &result {
                Ok(report) => tracing::info!(
                    added = ?report.added,
                    removed = ?report.removed,
                    schema_changed = ?report.schema_changed,
                    version_changed = ?report.version_changed,
                    settings_changed = ?report.settings_changed,
                    "project reloaded"
                ),
                Err(e) => tracing::error!("{e}"),
            }
            if result.is_ok() {
                for mut queued in std::mem::take(&mut self.queued) {
                    match self.scheduler.instantiate(&queued.record.pattern) {
                        Ok(addressed) => {
                            queued.addressed = addressed;
                            self.queued.push_back(queued);
                        }
                        Err(e) => {
                            tracing::warn!(run = %queued.record.id, "dequeued by the reload: {e}");
                            if let Err(e) = self.scheduler.finish_unstarted(queued.record, Termination::Dequeued) {
                                tracing::error!("{e}");
                            }
                        }
                    }
                }
                self.publish_queue();
            }
            let _ = reply.send(result);
        }
    }

    fn accept(&mut self, pattern: &str, mode: Mode, full_refresh: bool) -> Result<Accepted, Error> {
        if self.closing.is_some() {
            return Err(Error::Closing);
        }
        self.scheduler.check_plugins()?;
        let addressed = self.scheduler.instantiate(pattern)?;
        if matches!(mode, Mode::Default | Mode::TransformOnly) {
            self.scheduler.check_engines(&addressed)?;
        }
        let record = self.scheduler.new_run(pattern, mode, full_refresh)?;
        let views =
            addressed.iter().map(|&id| (self.scheduler.lattice().url_path(id), self.scheduler.state_of(id))).collect();
        let queued_behind = self.queued.len() + usize::from(self.run.is_some());
        let run = record.id.clone();
        self.queued.push_back(QueuedRun { record, mode, addressed });
        self.publish_queue();
        Ok(Accepted { run, queued_behind, views })
    }

    fn stop(&mut self, id: &str) -> Result<Stopping, Error> {
        if let Some(run) = self.run.as_mut().filter(|run| run.id() == id) {
            self.scheduler.stop(run, StopReason::Requested);
            return Ok(Stopping::Stopping);
        }
        if let Some(position) = self.queued.iter().position(|queued| queued.record.id == id) {
            let queued = self.queued.remove(position).expect("the position was just found");
            self.publish_queue();
            self.scheduler.finish_unstarted(queued.record, Termination::Dequeued)?;
            if let Some(coordination) = &mut self.coordination {
                coordination.run_ended(&mut self.scheduler, id, Termination::Dequeued)?;
            }
            return Ok(Stopping::Dequeued);
        }
        Ok(match self.scheduler.metastore().run(id)? {
            Some(RunRecord { termination: Some(termination), .. }) => Stopping::Finished(termination),
            // Recorded but neither executing nor queued: a process that
            // died during it. It is over.
            Some(_) => Stopping::Finished(Termination::Interrupted),
            None => Stopping::Unknown,
        })
    }

    /// Opens the project's coordinators: the runs of actions a previous
    /// process left SUBMITTED or RUNNING are queued again under their ids,
    /// and every coordinator catches up to now.
    fn open_coordinators(&mut self) -> Result<(), Error> {
        let clock = self.scheduler.clock().clone();
        let mut coordination = Coordination::open(&mut self.scheduler, clock)?;
        for warning in coordination.warnings() {
            tracing::warn!("{}", warning.trim_start_matches("warning: "));
        }
        for submission in coordination.resumed(&mut self.scheduler)? {
            self.queue_submission(submission);
        }
        self.coordination = Some(coordination);
        self.watches = self.scheduler.watches().and_then(|fd| {
            // SAFETY: an `OwnedFd` is an open descriptor that it alone
            // closes, and returns the same one for as long as it lives:
            // what `register` asks of its argument.
            match unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
                Ok(watches) => Some(watches),
                Err(e) => {
                    tracing::warn!("cannot wait on the watches ({e}); waiting actions' inputs are polled");
                    None
                }
            }
        });
        self.tick()
    }

    /// Lets the coordinators act on the time now; what they submit is queued.
    fn tick(&mut self) -> Result<(), Error> {
        if self.closing.is_some() {
            return Ok(());
        }
        let Some(coordination) = &mut self.coordination else { return Ok(()) };
        for submission in coordination.tick(&mut self.scheduler)? {
            self.queue_submission(submission);
        }
        Ok(())
    }

    fn check_inputs(&mut self, all: bool) -> Result<(), Error> {
        if self.closing.is_some() {
            return Ok(());
        }
        let Some(coordination) = &mut self.coordination else { return Ok(()) };
        for submission in coordination.check_inputs(&mut self.scheduler, all)? {
            self.queue_submission(submission);
        }
        Ok(())
    }

    /// The safety rescan: what the watches saw is applied first, so that
    /// only what they missed counts as found.
    fn rescan(&mut self) -> Result<(), Error> {
        if self.closing.is_some() {
            return Ok(());
        }
        self.scheduler.drain_watches();
        self.check_inputs(false)?;
        let Some(coordination) = &mut self.coordination else { return Ok(()) };
        let (submissions, found) = coordination.rescan(&mut self.scheduler)?;
        if found {
            tracing::warn!("the safety rescan found an input the watches missed; it was looked at now");
        }
        self.scheduler.with_table(|table| {
            table.counters.rescans += 1;
            table.counters.rescans_found += u64::from(found);
        });
        for submission in submissions {
            self.queue_submission(submission);
        }
        Ok(())
    }

    fn queue_submission(&mut self, submission: super::Submission) {
        self.queued.push_back(QueuedRun {
            record: submission.record,
            mode: submission.mode,
            addressed: submission.addressed,
        });
        self.publish_queue();
    }

    fn coordinate(&mut self, operation: CoordinatorOperation) -> Result<CoordinatorAnswer, Error> {
        // Every answer is as of now: what is due (a manual clock just set,
        // a timer about to fire) is done first, and the actions' records
        // say what the coordinators know.
        self.tick()?;
        self.scheduler.commit_deferred()?;
        let Some(coordination) = &mut self.coordination else {
            return Err(Error::Coordinator("the coordinators are not open yet".into()));
        };
        let (answer, runs) = coordination.operate(&mut self.scheduler, operation)?;
        for (run, _dequeue_or_stop) in runs {
            self.stop(&run)?;
        }
        // Resumed, or actions to run again: they may go now.
        self.tick()?;
        Ok(answer)
    }

    /// The coordinators as they stand, into the table when they changed, so
    /// that readers (the web UI's overview) need not wait for the loop.
    fn publish_coordinators(&mut self) {
        let Some(coordination) = &self.coordination else { return };
        let statuses = coordination.statuses();
        self.scheduler.with_table(|table| {
            if table.coordinators != statuses {
                table.coordinators = statuses;
            }
        });
    }

    fn publish_queue(&self) {
        let queued: Vec<String> = self.queued.iter().map(|queued| queued.record.id.clone()).collect();
        self.scheduler.with_table(|table| table.queued_runs = queued);
    }
}

/// Completes when the watches have changes queued (clearing the readiness:
/// the caller drains them all), or never without watches.
async fn readable(watches: Option<&tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>) {
    match watches {
        Some(watches) => match watches.readable().await {
            Ok(mut guard) => guard.clear_ready(),
            Err(e) => {
                tracing::warn!("waiting on the watches failed ({e}); inputs are looked at on each tick");
                std::future::pending::<()>().await
            }
        },
        None => std::future::pending().await,
    }
}

/// Completes when a manual clock is set, or never.
async fn clock_moved(moves: &mut Option<watch::Receiver<chrono::DateTime<chrono::Utc>>>) {
    if let Some(receiver) = moves
        && receiver.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// The next report of the run executing, or never.
async fn next_report(run: &mut Option<Run>) -> Option<TaskReport> {
    match run {
        Some(run) => run.next_report().await,
        None => std::future::pending().await,
    }
}

/// Completes at `deadline`, or never.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn log_summary(summary: Result<RunSummary, Error>) {
    match summary {
        Ok(summary) => tracing::info!(
            run = %summary.id,
            termination = %summary.termination,
            views = summary.views(),
            failed = summary.failures.len(),
            "run finished"
        ),
        Err(e) => tracing::error!("run failed: {e}"),
    }
}
