//! One run: a [`Run`] holds its transient state (the queue of events, flow
//! statuses, failures, tasks in flight, what each view is waiting for, the
//! stop asked), and the scheduler advances it: `begin`, then `step` (fold
//! every queued event through the pure `step::apply`, commit records and
//! events in one metastore batch, and only then adopt the records into the
//! book of views and execute the actions), `on_report`
//! for what tasks report back, `stop`, and `finish`. Transformations run as
//! tokio tasks under permits and report through the run's channel.
//!
//! The embedded `materialize` is a short driver over this API; the service
//! is the other.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::Error;
use super::call::Attempt;
use super::publish::Receipt;
use super::record::previous_stable;
use super::state::{Progress, Scheduler};
use super::step::{self, FlowSoFar, ViewNow};
use super::table::CurrentRun;
use super::table::Running;
use super::task::{self, Stopped, Task, TaskReport};
use super::transition::{Action, Event, FailureClass, Failures, Freshness, Mode, Reason, Retry, Settled};
use super::txlog;
use super::views::{MemoChange, Standing};
use crate::catalog::Transformation;
use crate::lattice::ViewId;
use crate::metastore::{Commit, FlowRecord, RunRecord};
use crate::model::{Counters, FlowStatus, Termination, ViewState};
use crate::runtime;

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
    /// Of its SUCCESSFUL views, how many it found without data.
    pub no_data: usize,
    /// Why a flow ended as it did, where its status does not say (a view
    /// skipped or built while a dependency failed), by URL path.
    pub reasons: Vec<(String, String)>,
    pub termination: Termination,
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

/// A full refresh runs in DEFAULT mode only: the other modes say how to
/// treat views that are outdated, and a full refresh treats every selected
/// view as outdated. The one-line refusal otherwise.
pub fn check_full_refresh(mode: Mode) -> Result<(), String> {
    match mode {
        Mode::Default => Ok(()),
        other => Err(format!(
            "a full refresh runs in DEFAULT mode only, not {}: it rebuilds the selected views whatever their state",
            crate::model::wire_name(&other)
        )),
    }
}

/// Why a run is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A stop request, or Ctrl-C.
    Requested,
    /// The server shut down and the grace period passed.
    Shutdown,
}

/// What a run keeps per view.
#[derive(Debug, Clone, Default)]
struct RunView {
    /// The view as the events of the batch being folded left it, until it
    /// is adopted after the batch's commit.
    stepped: Option<ViewNow>,
    /// Dependencies not settled yet.
    pending: usize,
    /// Views waiting for this one to settle.
    waiting: Vec<ViewId>,
    settled_in_run: bool,
    settled: Option<Settled>,
    /// Transformations started in this run (a retry is one more).
    attempts: u32,
    /// The delay before the retry the last failure allowed.
    retry_in: Option<std::time::Duration>,
    /// Its failures in this run, network trouble apart (not counted
    /// against `retries`).
    failures: Failures,
    /// Skipped for a failed dependency: its dependents take it as failed.
    skipped: bool,
    /// The timestamp a finished transformation reported (external data: when its flag was checked).
    produced_at: Option<i64>,
    /// The view was no-data when the run started.
    no_data_before_run: bool,
    /// What a finished transformation returned, until its report is applied.
    returned: Option<Counters>,
    /// What this run has told of the view's flow (the run's own account,
    /// whatever the view's record says later). Its `status` is the one
    /// `Run::flows` had at the last step; `Run::flows` is the one to read.
    flow: FlowSoFar,
    /// The dependencies that had failed (or were skipped for a failure)
    /// when it settled, by URL path: what its flow names.
    failed_inputs: Vec<String>,
    /// The dependencies that carried errors of their own when it settled
    /// (the flag travels up), by URL path, when none had failed.
    errors_inputs: Vec<String>,
}

/// One run's transient state, from `begin` to `finish`.
pub struct Run {
    record: RunRecord,
    id: Arc<str>,
    mode: Mode,
    queue: VecDeque<(ViewId, Event)>,
    flows: HashMap<ViewId, FlowStatus>,
    failures: Vec<(String, String)>,
    tasks: HashMap<ViewId, Task>,
    /// By view index; views instantiated during the run are added on use.
    views: Vec<RunView>,
    reports: mpsc::UnboundedSender<TaskReport>,
    incoming: mpsc::UnboundedReceiver<TaskReport>,
    /// A stop was asked, and why; it takes effect once the queue is drained.
    stop: Option<StopReason>,
    /// Everything in flight was canceled.
    stopped: bool,
    /// Engine jobs whose last report has not come yet after a stop: the
    /// run ends once they are gone, so that no job outlives it.
    draining: HashSet<ViewId>,
    /// Tasks a stop aborted, which the embedded driver waits for: each
    /// removes its staging directory as it goes.
    aborted: Vec<tokio::task::JoinHandle<()>>,
    /// The views the run was asked for.
    addressed: Vec<ViewId>,
    /// A full refresh: the addressed views are its selection, rebuilt
    /// whatever their state; what they depend on outside it is read as it
    /// stands and reported EXCLUDED.
    full_refresh: Option<HashSet<ViewId>>,
    /// How it resolves `latest()`: at its actual time (when it began, or
    /// its action's creation, against the flags found then) or at each check.
    latest_at: super::state::LatestAt,
}

impl Run {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Events are queued: the next `step` has work.
    pub fn has_work(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Nothing is queued and nothing is in flight (or it was all canceled):
    /// the run can `finish`.
    pub fn is_over(&self) -> bool {
        self.queue.is_empty() && (self.tasks.is_empty() || self.stopped) && self.draining.is_empty()
    }

    /// A stop was asked.
    pub fn is_stopping(&self) -> bool {
        self.stop.is_some()
    }

    /// The view settled in this run: dependents may have taken it as it was.
    pub fn has_settled(&self, id: ViewId) -> bool {
        self.views.get(id.0 as usize).is_some_and(|view| view.settled_in_run)
    }

    /// The next report of a task of this run. Never completes while no task
    /// is in flight, since the run holds a sender itself.
    pub async fn next_report(&mut self) -> Option<TaskReport> {
        self.incoming.recv().await
    }

    fn view(&mut self, id: ViewId) -> &mut RunView {
        let index = id.0 as usize;
        if index >= self.views.len() {
            self.views.resize_with(index + 1, RunView::default);
        }
        &mut self.views[index]
    }
}

/// A view's memo changes and actions, as one step left them.
type Stepped = (ViewId, Vec<MemoChange>, Vec<Action>);

/// A queue of events folded through the step, not committed yet.
#[derive(Default)]
struct Batch {
    commit: Commit,
    /// The views its events touched, in order, each once: each as the
    /// last of its events left it is in its `RunView::stepped`, to adopt
    /// once committed (indexed by view, not hashed: a batch of an
    /// unchanged run touches every view it asks).
    touched: Vec<ViewId>,
    /// The newest timestamp recorded.
    stamp: i64,
    applied: Vec<Stepped>,
}

impl Scheduler {
    /// Materializes the views of `pattern` and, unless the mode says
    /// otherwise, their dependencies first.
    pub async fn materialize(&mut self, pattern_text: &str, mode: Mode) -> Result<RunSummary, Error> {
        self.materialize_until(pattern_text, mode, false, std::future::pending()).await
    }

    /// Like [`Scheduler::materialize`], but stops when `stop` completes:
    /// running transformations are canceled (their views keep their
    /// previous data), views not started are skipped.
    /// With `full_refresh`, the views of `pattern` are rebuilt whatever
    /// their state (see [`Scheduler::begin`]).
    pub async fn materialize_until(
        &mut self,
        pattern_text: &str,
        mode: Mode,
        full_refresh: bool,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<RunSummary, Error> {
        self.check_plugins()?;
        let addressed = self.instantiate(pattern_text)?;
        if matches!(mode, Mode::Default | Mode::TransformOnly) {
            self.check_engines(&addressed)?;
        }
        let record = self.new_run(pattern_text, mode, full_refresh)?;
        let run = self.begin(record, mode, &addressed);
        self.drive(run, stop).await
    }

    /// Drives a begun run to its end (or, once `stop` completes, stops it)
    /// and finishes it: the embedded driver.
    pub async fn drive(
        &mut self,
        mut run: Run,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<RunSummary, Error> {
        let mut stop = std::pin::pin!(stop);
        let steps = async {
            loop {
                self.step(&mut run)?;
                if run.has_work() {
                    continue;
                }
                if run.is_over() {
                    return Ok(());
                }
                tokio::select! {
                    Some(report) = run.next_report() => self.on_report(&mut run, report),
                    () = &mut stop, if !run.is_stopping() => self.stop(&mut run, StopReason::Requested),
                }
            }
        };
        let steps = steps.await;
        // An aborted task is gone once its future is dropped, with its
        // staging directory: waited for, so that a stopped process leaves
        // none behind (each takes at most a tick of the epoch to go).
        for task in std::mem::take(&mut run.aborted) {
            let _ = task.await;
        }
        self.finish(run, steps)
    }

    /// Starts a recorded run: `addressed` are asked to materialize. A full
    /// refresh (the record says) selects exactly them: each is transformed
    /// even if up to date (external data has its flag checked), after those
    /// of its dependencies that are selected too; the others are read as
    /// they stand, as TRANSFORM_ONLY reads them.
    pub fn begin(&mut self, record: RunRecord, mode: Mode, addressed: &[ViewId]) -> Run {
        let full_refresh = record.full_refresh.then(|| addressed.iter().copied().collect());
        let latest_at = self.latest_at(&record);
        let id: Arc<str> = record.id.as_str().into();
        if let Some(announce) = &mut self.run_started {
            announce(&id);
        }
        let current = CurrentRun {
            id: id.to_string(),
            pattern: record.pattern.clone(),
            mode: record.mode,
            started: record.started,
        };
        self.with_table(|table| {
            table.current_run = Some(current);
            table.current_run_flows.clear();
        });
        self.views.begin_run(self.clock.millis());
        let closure = self.views.lattice().closure(addressed);
        self.views.sight_flags(closure);
        let views = self
            .views
            .slots()
            .map(|(_, slot)| RunView {
                no_data_before_run: slot.record.state == ViewState::NoData,
                ..RunView::default()
            })
            .collect();
        let queue = addressed
            .iter()
            .map(|&id| {
                (id, Event::Materialize { mode, materialize_once: self.views.lattice().view_type(id).materialize_once })
            })
            .collect();
        let (reports, incoming) = mpsc::unbounded_channel();
        Run {
            record,
            id,
            mode,
            queue,
            flows: HashMap::new(),
            failures: Vec::new(),
            tasks: HashMap::new(),
            views,
            reports,
            incoming,
            stop: None,
            stopped: false,
            draining: HashSet::new(),
            aborted: Vec::new(),
            addressed: addressed.to_vec(),
            full_refresh,
            latest_at,
        }
    }

    /// Asks the run to stop. It takes effect once the queue is drained, so
    /// that every view the walk reached is in flight, and canceled, by then.
    pub fn stop(&mut self, run: &mut Run, reason: StopReason) {
        run.stop.get_or_insert(reason);
    }

    /// One step: applies every queued event, commits what they changed,
    /// then executes their actions. Once the queue is drained, a stop asked
    /// takes effect, after the reports already sent are applied: their data
    /// is published, and their records must say so.
    pub fn step(&mut self, run: &mut Run) -> Result<(), Error> {
        if run.has_work() {
            self.apply_queue(run)?;
        }
        if !run.has_work() && run.stop.is_some() && !run.stopped && run.incoming.is_empty() {
            run.stopped = true;
            self.cancel(run);
        }
        Ok(())
    }

    /// Takes a task's report, and every other one ready, so that one
    /// commit (and one flush) serves them all.
    pub fn on_report(&mut self, run: &mut Run, first: TaskReport) {
        let mut ready = vec![first];
        while let Ok(report) = run.incoming.try_recv() {
            ready.push(report);
        }
        for report in ready {
            self.take_report(run, report);
        }
    }

    fn take_report(&mut self, run: &mut Run, report: TaskReport) {
        match report {
            TaskReport::Done { view, data, timestamp, counters, txlog } => {
                run.tasks.remove(&view);
                run.draining.remove(&view);
                if let Some(marker) = txlog {
                    self.record_txlog_commit(view, &marker, &run.id);
                }
                self.with_table(|table| {
                    if table.running.remove(&view.0).is_some() {
                        table.counters.succeeded += 1;
                    }
                });
                run.view(view).produced_at = Some(timestamp);
                run.view(view).returned = counters;
                run.queue.push_back((view, Event::Transformed { data }));
            }
            TaskReport::Failed { view, class, message } => self.take_failure(run, view, class, message),
            TaskReport::RetryDue { view } => {
                run.tasks.remove(&view);
                run.queue.push_back((view, Event::RetryDue));
            }
            TaskReport::Logged { view, log } => self.record_log(view, *log),
            TaskReport::Progress { view, text } => self.with_table(|table| {
                if let Some(running) = table.running.get_mut(&view.0) {
                    running.progress = Some(text);
                }
            }),
            TaskReport::Reaped { view } => {
                run.tasks.remove(&view);
                run.draining.remove(&view);
                self.with_table(|table| {
                    table.running.remove(&view.0);
                });
            }
            // A job that got its permits as the run stopped is not running.
            TaskReport::Started { view } if run.stopped || !run.tasks.contains_key(&view) => {}
            TaskReport::Started { view } => self.take_start(run, view),
        }
    }

    /// A transformation failed: tried again, as its type's retry policy
    /// allows for the failure's class, or given up.
    fn take_failure(&mut self, run: &mut Run, view: ViewId, class: FailureClass, message: String) {
        run.tasks.remove(&view);
        run.draining.remove(&view);
        let policy = self.views.lattice().view_type(view).retry;
        let state = run.view(view);
        let attempts = state.attempts.max(1);
        state.retry_in = state.failures.next_retry(class, &policy);
        let retry = state.retry_in.is_some();
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
            format!("{message}; gave up after {attempts} attempt{}", if attempts == 1 { "" } else { "s" })
        };
        let retry = match (retry, class) {
            (false, _) => Retry::No,
            (true, FailureClass::Network) => Retry::Network,
            (true, _) => Retry::Counted,
        };
        run.queue.push_back((view, Event::TransformFailed { retry, error: message }));
    }

    /// A transformation got its permits: its flow is running, and the
    /// table shows it.
    fn take_start(&mut self, run: &mut Run, view: ViewId) {
        if let Some(flow) = run.flows.get_mut(&view)
            && *flow == FlowStatus::Starting
        {
            *flow = FlowStatus::Running;
            self.with_table(|table| {
                table.current_run_flows.insert(view.0, FlowStatus::Running);
            });
        }
        // Only plugins take permits, so only they report starting.
        if let Transformation::Plugin { plugin, .. } = &self.views.lattice().view_type(view).transformation {
            let running = Running {
                view: self.views.url(view).clone(),
                plugin: plugin.clone(),
                since: self.clock.millis(),
                progress: None,
            };
            self.with_table(|table| {
                table.running.insert(view.0, running);
            });
        }
    }

    /// Applies every queued event, collecting writes and actions; commits
    /// them durably; and only then adopts the records and acts. A failed
    /// commit leaves the book of views as it was: memory never runs ahead
    /// of the store.
    fn apply_queue(&mut self, run: &mut Run) -> Result<(), Error> {
        let batch = self.fold_queue(run);
        let stepped: Vec<(ViewId, ViewNow)> =
            batch.touched.iter().filter_map(|&id| run.view(id).stepped.take().map(|view| (id, view))).collect();
        if !batch.commit.views.is_empty() || !batch.commit.events.is_empty() {
            self.commit(batch.commit)?;
        }
        for (id, view) in stepped {
            self.views.adopt(id, view.record, view.stored_state, view.network_retry);
        }
        self.views.note_stamp(batch.stamp);
        for (id, changes, _) in &batch.applied {
            for &change in changes {
                self.views.change_memo(*id, change);
            }
        }
        self.refresh_table(batch.applied.iter().map(|(id, _, _)| *id));
        self.show_flows(run, &batch.applied);
        for (id, _, actions) in batch.applied {
            for action in actions {
                self.execute_action(run, id, action);
            }
        }
        self.report_progress(run);
        Ok(())
    }

    /// Folds the run's queue of events through the pure step: the views as
    /// the events leave them, one commit of everything they write, and the
    /// memo's changes and the actions of each, in order. The run's own
    /// account (its flows, failures, what settled) goes on at once: a run
    /// whose commit fails ends there.
    fn fold_queue(&self, run: &mut Run) -> Batch {
        let mut batch = Batch::default();
        let now = self.clock.millis();
        while let Some((id, event)) = run.queue.pop_front() {
            let view = match run.view(id).stepped.take() {
                Some(view) => view,
                None => {
                    batch.touched.push(id);
                    let slot = self.views.slot(id);
                    let record = slot.record.clone();
                    ViewNow { record, stored_state: slot.stored_state, network_retry: slot.network_retry.clone() }
                }
            };
            let applied = self.step_one(run, id, view, &event, now);
            let status = applied.flow.status;
            let theirs = run.view(id);
            theirs.flow = applied.flow;
            // Settled as soon as applied: a view asking for it later in
            // this batch's actions takes it as it is, not asking again.
            theirs.settled_in_run |= applied.actions.contains(&Action::NotifyDependents);
            theirs.skipped |= applied.actions.contains(&Action::ReportSkipped);
            if let Some(status) = status {
                run.flows.insert(id, status);
            }
            let url = self.views.url(id);
            if let Some(failure) = applied.failure {
                run.failures.push((url.to_string(), failure));
            }
            if let Some(flow) = applied.flow_record {
                batch.commit.flows.push((run.id.to_string(), url.to_string(), flow));
            }
            if let Some(stored) = applied.stored {
                batch.commit.views.push((url.to_string(), stored));
            }
            batch.commit.events.push(applied.event);
            if applied.stamp {
                batch.stamp = batch.stamp.max(applied.view.record.timestamp.unwrap_or(i64::MIN));
            }
            run.view(id).stepped = Some(applied.view);
            batch.applied.push((id, applied.memo, applied.actions));
        }
        batch
    }

    /// One event applied to one view, with what the run and the book know.
    fn step_one(&self, run: &mut Run, id: ViewId, view: ViewNow, event: &Event, now: i64) -> step::Applied {
        let flow_status = run.flows.get(&id).copied();
        let theirs = run.view(id);
        let (produced_at, returned) = (theirs.produced_at.take(), theirs.returned.take());
        let theirs = &run.views[id.0 as usize];
        let flow = FlowSoFar { status: flow_status, ..theirs.flow.clone() };
        let lattice = self.views.lattice();
        let ctx = step::Ctx {
            url: self.views.url(id),
            run: &run.id,
            mode: run.mode,
            full_refresh: run.full_refresh.is_some(),
            external: matches!(lattice.view_type(id).transformation, Transformation::External),
            version: self.version(id),
            now,
            stamp_floor: self.views.stamp_floor(),
            settled: theirs.settled,
            no_data_before_run: theirs.no_data_before_run,
            produced_at,
            returned: returned.as_ref(),
            failed_inputs: &theirs.failed_inputs,
            errors_inputs: &theirs.errors_inputs,
            done_flag: &|| lattice.done_flag_path(id),
            flag: &|| self.views.flag_identity(id),
            latest: &|| self.views.latest_read(id),
        };
        step::apply(view, &flow, event, &ctx)
    }

    /// Every flow as it stands now, for the run's detail while it runs
    /// (seed 003's pipeline state); the idle are counted, not listed.
    fn show_flows(&self, run: &Run, applied: &[Stepped]) {
        if !self.views.has_table() {
            return;
        }
        let live: Vec<(u32, FlowStatus)> =
            applied.iter().filter_map(|(id, _, _)| run.flows.get(id).map(|status| (id.0, *status))).collect();
        self.with_table(|table| {
            for (index, status) in live {
                if status == FlowStatus::Idle {
                    table.current_run_flows.remove(&index);
                } else {
                    table.current_run_flows.insert(index, status);
                }
            }
        });
    }

    /// How far the run has come, for the progress callback and the table.
    fn report_progress(&mut self, run: &Run) {
        if self.progress.is_none() && !self.views.has_table() {
            return;
        }
        let settled = run
            .flows
            .values()
            .filter(|s| !matches!(s, FlowStatus::Queued | FlowStatus::Starting | FlowStatus::Running))
            .count();
        // Running is what holds a permit, as `trellis transformations`
        // counts it; the other tasks wait for one (or for a retry).
        let running = self.executor.running().min(run.tasks.len());
        let waiting = run.tasks.len() - running;
        let progress = Progress { settled, known: run.flows.len(), running, waiting };
        self.with_table(|table| table.current_run_pending = progress.known - progress.settled);
        if let Some(report) = &mut self.progress {
            report(progress);
        }
    }

    /// Ends the run: records how it ended and the flows not written as they
    /// are now (those a stop skipped or canceled). `steps` is
    /// how driving it went; a run that ended on an error (the metastore's)
    /// is not current any more and, if the metastore still takes it, its
    /// record says why.
    pub fn finish(&mut self, mut run: Run, steps: Result<(), Error>) -> Result<RunSummary, Error> {
        self.views.forget_sightings();
        if let Err(e) = steps {
            self.with_table(|table| table.current_run = None);
            let _ = self.finish_unstarted(run.record, Termination::Failed(e.to_string()));
            return Err(e);
        }
        for view in self.excluded(&run) {
            run.flows.insert(view, FlowStatus::Excluded);
        }
        let Run { record, id, mut flows, mut failures, stop, stopped, mut views, .. } = run;
        if stopped {
            for status in flows.values_mut() {
                if matches!(*status, FlowStatus::Queued | FlowStatus::Starting) {
                    *status = FlowStatus::Skipped;
                }
            }
        }
        let termination = match stop.filter(|_| stopped) {
            Some(StopReason::Requested) => Termination::Stopped,
            Some(StopReason::Shutdown) => Termination::StoppedByShutdown,
            None => Termination::completed(failures.len()),
        };
        let mut finished = record;
        finished.finished = Some(self.clock.millis());
        finished.termination = Some(termination.clone());
        // Idle views are most of an unchanged run: they are counted, not
        // listed, named or written one by one.
        let idle = flows.values().filter(|s| **s == FlowStatus::Idle).count();
        finished.idle = idle;
        self.count_attempts(&mut finished, &flows, &views);
        let (incomplete, with_errors) = self.flagged(&mut finished, &flows);
        let records = self.flow_records(flows, &mut views);
        let flows: Vec<(String, FlowStatus)> =
            records.iter().map(|(view, flow, _)| (view.clone(), flow.status)).collect();
        let reasons: Vec<(String, String)> =
            records.iter().filter_map(|(view, flow, _)| Some((view.clone(), flow.reason.clone()?))).collect();
        let no_data = finished.no_data;
        // Counted as the run's summary counts them.
        for (_, status) in &flows {
            *finished.flow_counts.entry(crate::model::wire_name(status)).or_default() += 1;
        }
        if idle > 0 {
            finished.flow_counts.insert(crate::model::wire_name(&FlowStatus::Idle), idle);
        }
        let commit = Commit {
            runs: vec![finished],
            flows: records
                .into_iter()
                .filter(|(_, _, written)| !written)
                .map(|(view, flow, _)| (id.to_string(), view, flow))
                .collect(),
            ..Commit::default()
        };
        self.commit(commit)?;
        self.with_table(|table| {
            table.current_run = None;
            table.current_run_pending = 0;
            table.current_run_flows.clear();
            table.counters.runs_finished += 1;
        });
        failures.sort();
        Ok(RunSummary {
            id: id.to_string(),
            flows,
            idle,
            failures,
            incomplete,
            with_errors,
            no_data,
            reasons,
            termination,
        })
    }

    /// How often each transformation plugin was called for its view.
    fn count_attempts(&self, finished: &mut RunRecord, flows: &HashMap<ViewId, FlowStatus>, views: &[RunView]) {
        for (view, _) in flows.iter().filter(|(_, s)| **s != FlowStatus::Idle) {
            let attempts = views.get(view.0 as usize).map_or(0, |v| v.attempts);
            let plugin = matches!(self.views.lattice().view_type(*view).transformation, Transformation::Plugin { .. });
            if attempts > 0 && plugin {
                finished.attempts.insert(self.views.url(*view).to_string(), attempts);
            }
        }
    }

    /// The successful views found without data (counted in `finished`),
    /// and those built incomplete or with errors, sorted: what each was
    /// flagged with is in its slot, as committed.
    fn flagged(&self, finished: &mut RunRecord, flows: &HashMap<ViewId, FlowStatus>) -> (Vec<String>, Vec<String>) {
        let (mut incomplete, mut with_errors) = (Vec::new(), Vec::new());
        for (view, status) in flows {
            let slot = self.views.slot(*view);
            if *status == FlowStatus::Successful {
                finished.no_data += usize::from(slot.record.state == ViewState::NoData);
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
        (incomplete, with_errors)
    }

    /// The run's flows but the idle ones, by URL path, each with whether it
    /// was written as it is now already (then it is not written again).
    fn flow_records(
        &self,
        flows: HashMap<ViewId, FlowStatus>,
        views: &mut [RunView],
    ) -> Vec<(String, FlowRecord, bool)> {
        let mut records: Vec<(String, FlowRecord, bool)> = flows
            .into_iter()
            .filter(|(_, s)| *s != FlowStatus::Idle)
            .map(|(view, status)| {
                let theirs = views.get_mut(view.0 as usize).map(std::mem::take).unwrap_or_default();
                let flow = theirs.flow;
                let written = flow.written == Some(status);
                // Skipped without a failed dependency to name: the stop.
                let reason = match flow.reason {
                    None if status == FlowStatus::Skipped => Some(STOPPED_BEFORE_START.to_string()),
                    reason => reason,
                };
                let record = FlowRecord { status, error: flow.error, counters: flow.counters, reason };
                (self.views.url(view).to_string(), record, written)
            })
            .collect();
        records.sort_by(|a, b| a.0.cmp(&b.0));
        records
    }

    /// The views a run reports EXCLUDED (seed 003: in the graph, not
    /// selected): of everything the addressed views depend on, transitively,
    /// those the run did not select and never looked at. A run that asks
    /// dependencies (DEFAULT, the RESET modes) selects all of them, so it
    /// excludes none; TRANSFORM_ONLY, SET_ONLY and a full refresh select
    /// the addressed views only. Views elsewhere in the lattice are no part
    /// of the run and are not listed.
    fn excluded(&self, run: &Run) -> Vec<ViewId> {
        let selects_dependencies = matches!(
            run.mode,
            Mode::Default | Mode::ResetTransformationChecksums | Mode::ResetTransformationChecksumsAndTimestamps
        ) && run.full_refresh.is_none();
        if selects_dependencies {
            return Vec::new();
        }
        let addressed: HashSet<ViewId> = run.addressed.iter().copied().collect();
        self.views
            .lattice()
            .closure(&run.addressed)
            .into_iter()
            .filter(|view| !addressed.contains(view) && !run.flows.contains_key(view))
            .collect()
    }

    /// Asks the view's dependencies (those a full refresh selected, and
    /// none the memo knows to be up to date), or settles it when none is
    /// left to wait for.
    fn ask_dependencies(&mut self, run: &mut Run, id: ViewId) {
        let mode = run.mode;
        // Asked now: `latest()` is resolved as of this check.
        if self.views.lattice().has_latest(id) {
            self.resolve_latest_at(id, &run.latest_at);
        }
        let mut dependencies = self.views.lattice().dependencies(id).to_vec();
        dependencies.sort();
        dependencies.dedup();
        let mut pending = 0;
        for dependency in dependencies {
            // A full refresh asks only what it selected (whatever
            // the memo says) and reads the rest as it stands.
            if let Some(selected) = &run.full_refresh
                && !selected.contains(&dependency)
            {
                continue;
            }
            // A view the memo knows to be up to date is taken as it
            // is, without asking it or what it depends on; unless
            // this run has it in flight, when it is waited for.
            let in_flight = matches!(
                self.views.record(dependency).state,
                ViewState::Waiting | ViewState::Transforming | ViewState::Retrying
            );
            let known_fresh =
                mode == Mode::Default && run.full_refresh.is_none() && !in_flight && self.views.is_clean(dependency);
            let theirs = run.view(dependency);
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
                let once = self.views.lattice().view_type(dependency).materialize_once;
                run.queue.push_back((dependency, Event::Materialize { mode, materialize_once: once }));
            }
        }
        run.view(id).pending = pending;
        if pending == 0 {
            let event = self.settle(run, id);
            run.queue.push_back((id, event));
        }
    }

    fn execute_action(&mut self, run: &mut Run, id: ViewId, action: Action) {
        let mode = run.mode;
        match action {
            Action::AskDependencies => self.ask_dependencies(run, id),
            Action::NotifyDependents => {
                let view = run.view(id);
                view.settled_in_run = true;
                for waiting in std::mem::take(&mut view.waiting) {
                    let theirs = run.view(waiting);
                    theirs.pending = theirs.pending.saturating_sub(1);
                    if theirs.pending == 0 {
                        let event = self.settle(run, waiting);
                        run.queue.push_back((waiting, event));
                    }
                }
            }
            // Once a stop is asked nothing new starts: the view is skipped
            // when the stop takes effect. Otherwise a run whose transformations
            // keep reporting could start new ones until it ended.
            Action::Transform if run.stop.is_some() => {
                run.flows.insert(id, FlowStatus::Skipped);
                run.view(id).flow.reason = Some(STOPPED_BEFORE_START.to_string());
            }
            Action::Transform => {
                // TRANSFORM_ONLY asks no dependencies: `latest()` is resolved here.
                if mode == Mode::TransformOnly {
                    self.resolve_latest_at(id, &run.latest_at);
                }
                run.view(id).attempts += 1;
                let full_refresh = run.full_refresh.as_ref().is_some_and(|selected| selected.contains(&id));
                let attempt = Attempt { receipt: self.receipt(run, id), actual: run.latest_at.actual, full_refresh };
                let task = self.start_transformation(id, attempt, run.reports.clone());
                run.tasks.insert(id, task);
            }
            Action::ScheduleRetry => {
                let backoff = run.view(id).retry_in.take();
                run.tasks.insert(id, self.executor.retry_after(id, backoff, run.reports.clone()));
            }
            _ => {}
        }
    }

    /// Stops everything in flight: tasks are aborted (a transformation's
    /// staging directory goes with its task, which the embedded driver
    /// waits for; its view keeps its previous data), engine jobs are asked to stop (the run
    /// waits for them to be gone), and each view in flight goes back to the
    /// state it had before the run. An engine job that published its data
    /// before the stop came is left to report it.
    fn cancel(&mut self, run: &mut Run) {
        let Stopped { finishing, stopped } = task::stop_all(&mut run.tasks, &mut run.draining, &mut run.aborted);
        let canceled: Vec<u32> = stopped.iter().map(|(view, ..)| view.0).collect();
        self.with_table(|table| {
            for view in canceled {
                if table.running.remove(&view).is_some() {
                    table.counters.canceled += 1;
                }
            }
        });
        for (view, started, attempt) in stopped {
            run.flows.insert(view, if started { FlowStatus::Canceled } else { FlowStatus::Skipped });
            if !started {
                run.view(view).flow.reason = Some(STOPPED_BEFORE_START.to_string());
            }
            // A transformation that never got its permits was not attempted.
            if attempt && !started {
                let theirs = run.view(view);
                theirs.attempts = theirs.attempts.saturating_sub(1);
            }
        }
        for (id, slot) in self.views.slots() {
            if finishing.contains(&id) {
                continue;
            }
            if matches!(slot.record.state, ViewState::Waiting | ViewState::Transforming | ViewState::Retrying) {
                let previous = previous_stable(slot.record.state, &slot.record);
                run.queue.push_back((id, Event::Canceled { previous }));
            }
        }
    }

    /// The event for a view whose dependencies have all settled: how they
    /// ended up, and whether the view is outdated and why (judged as
    /// `plan` judges it).
    fn settle(&mut self, run: &mut Run, id: ViewId) -> Event {
        let mode = run.mode;
        // A full refresh reads what it did not select as it stands: one
        // never materialized (nor failed) has no data, as when it was checked.
        // A dependency skipped for a failure is, to its dependents, failed:
        // they continue with errors, or are skipped in turn.
        let selected = run.full_refresh.as_ref();
        let views = &run.views;
        let judgement = self.judge(id, |dependency, slot| {
            let skipped = views.get(dependency.0 as usize).is_some_and(|view| view.skipped);
            let state = match selected {
                _ if skipped => ViewState::Failed,
                Some(selected)
                    if !selected.contains(&dependency)
                        && !matches!(slot.record.state, ViewState::Materialized | ViewState::Failed) =>
                {
                    ViewState::NoData
                }
                _ => slot.record.state,
            };
            Standing { state, timestamp: slot.record.timestamp }
        });
        run.view(id).settled = Some(judgement.settled);
        // The failed inputs by name, as the judgement took them, for the flow.
        let failed_inputs: Vec<String> = if judgement.settled.some_failed {
            let mut dependencies = self.views.lattice().dependencies(id).to_vec();
            dependencies.sort();
            dependencies.dedup();
            dependencies
                .into_iter()
                .filter(|d| {
                    run.views.get(d.0 as usize).is_some_and(|view| view.skipped)
                        || self.views.record(*d).state == ViewState::Failed
                })
                .map(|d| self.views.url(d).to_string())
                .collect()
        } else {
            Vec::new()
        };
        let errors_inputs: Vec<String> = if judgement.settled.some_errors && failed_inputs.is_empty() {
            let mut dependencies = self.views.lattice().dependencies(id).to_vec();
            dependencies.sort();
            dependencies.dedup();
            dependencies
                .into_iter()
                .filter(|d| self.views.record(*d).errors)
                .map(|d| self.views.url(d).to_string())
                .collect()
        } else {
            Vec::new()
        };
        run.view(id).failed_inputs = failed_inputs;
        run.view(id).errors_inputs = errors_inputs;
        let external = matches!(self.views.lattice().view_type(id).transformation, Transformation::External);
        // A full refresh rebuilds what it selected, up to date or not; the
        // flag of external data is checked as always, since it cannot be rebuilt.
        let freshness = match judgement.freshness {
            Freshness::UpToDate if run.full_refresh.is_some() && !external => Freshness::Outdated(Reason::FullRefresh),
            other => other,
        };
        let slot = &self.views.slot(id);
        Event::DependenciesSettled {
            mode,
            settled: judgement.settled,
            freshness,
            on_failure: self.views.lattice().view_type(id).on_dependency_failure,
            previous: previous_stable(slot.record.state, &slot.record),
        }
    }

    /// The receipt of the attempt about to start: what this run's commit
    /// of its data would record, which its published output carries in
    /// case the process ends before that commit (see `publish`).
    fn receipt(&self, run: &mut Run, id: ViewId) -> Receipt {
        let url = self.views.url(id).to_string();
        let settled = run.view(id).settled;
        let attempt = run.view(id).attempts;
        let mut receipt = Receipt::new(
            url,
            run.id.to_string(),
            attempt,
            self.version(id).to_string(),
            settled,
            self.views.stamp_floor(),
        );
        receipt.schema = self.views.lattice().view_type(id).schema_checksum.clone();
        receipt.latest = self.latest_read(id);
        receipt
    }

    /// Records an incremental view's commit, published with its data, in
    /// the log: with the next commit, the one that records the view's
    /// state (the marker, already published, is what counts; see `txlog`).
    fn record_txlog_commit(&mut self, id: ViewId, marker: &txlog::Marker, run: &Arc<str>) {
        let url = self.views.url(id).clone();
        let (head, existing) = match (self.store.tx_head(&url), self.store.tx_entries(&url)) {
            (Ok(head), Ok(existing)) => (head, existing),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(view = %url, "cannot read the transaction log; it is reconciled at the next open: {e}");
                return;
            }
        };
        let write = txlog::write_of(marker, head, &existing, &self.views.lattice().data_path(id));
        let state = self.views.record(id).state;
        let event = txlog::event(&url, state, txlog::commit_change(marker, "commit"), Some(run), self.clock.millis());
        self.defer(Commit { txlog: vec![write], events: vec![event], ..Commit::default() });
    }

    /// Keeps a transformation's log with the view's last ones (the next
    /// commit writes it, with the view's record).
    fn record_log(&mut self, id: ViewId, attempt: crate::metastore::AttemptLog) {
        let url = self.views.url(id).to_string();
        let mut log = match self.store.view_log(&url) {
            Ok(log) => log,
            Err(e) => {
                tracing::warn!(view = %url, "cannot read the view's log; it starts over: {e}");
                Default::default()
            }
        };
        log.attempts.push(attempt);
        let over = log.attempts.len().saturating_sub(KEPT_ATTEMPTS);
        log.attempts.drain(..over);
        self.defer(Commit { logs: vec![(url, log)], ..Commit::default() });
    }

    /// The dependencies with data, in declaration order: a transformation's
    /// inputs, materialized as `materialized` says (as they stand, or as a
    /// plan expects a run to leave them). SET_ONLY can mark a view
    /// materialized that has no data.
    pub(super) fn inputs_with_data(
        &self,
        id: ViewId,
        materialized: impl Fn(ViewId) -> bool,
    ) -> Vec<(ViewId, txlog::InputSpec)> {
        let view_type = self.views.lattice().view_type(id);
        let mut inputs = Vec::new();
        for (declaration, group) in
            view_type.dependencies.iter().zip(self.views.lattice().dependencies_by_declaration(id))
        {
            for dependency in group {
                let dir = self.views.lattice().data_path(dependency);
                if !materialized(dependency) || !self.executor.staging().holds_data(&dir) {
                    continue;
                }
                let path = dir.strip_prefix(&self.catalog.settings.storage).unwrap_or(&dir).to_string_lossy().into();
                inputs.push((
                    dependency,
                    txlog::InputSpec {
                        source: declaration.name.clone(),
                        input: self.views.lattice().url_path(dependency),
                        path,
                        dir,
                        incremental: declaration.incremental,
                    },
                ));
            }
        }
        inputs
    }

    /// A view's parameters by name, in its type's order, as a request gives them.
    pub(super) fn parameters(&self, id: ViewId) -> Vec<(String, String)> {
        let names = self.views.lattice().view_type(id).parameters.iter().map(|p| p.name.clone());
        names.zip(self.views.lattice().params(id).iter().map(|v| v.to_string())).collect()
    }

    /// What one transformation of the view may write: its type's output
    /// cap over `[defaults]`'.
    pub(super) fn output_limit(&self, id: ViewId) -> runtime::OutputLimit {
        let own = match &self.views.lattice().view_type(id).transformation {
            Transformation::Plugin { output, .. } => *output,
            Transformation::External => Default::default(),
        };
        let cap = self.catalog.settings.output.with(own);
        runtime::OutputLimit { bytes: cap.bytes, entries: cap.entries }
    }

    /// What an incremental view's manifest check needs from the loop.
    pub(super) fn txlog_spec(&self, id: ViewId, inputs: Vec<txlog::InputSpec>, full_refresh: bool) -> txlog::Spec {
        let url = self.views.url(id).to_string();
        let head = match self.store.tx_head(&url) {
            Ok(head) => head.unwrap_or_default(),
            Err(e) => {
                // Read again at the next open; the marker is what counts.
                tracing::warn!(view = %url, "cannot read the transaction log's head: {e}");
                Default::default()
            }
        };
        txlog::Spec {
            view: url,
            project: self.catalog.settings.name.clone(),
            data_path: self.views.lattice().data_path(id),
            head,
            version: self.version(id).lines().next().unwrap_or_default().to_string(),
            schema: self.views.lattice().view_type(id).schema_checksum.clone(),
            full_refresh,
            inputs,
        }
    }
}

/// How many of a view's last transformations keep their logs.
const KEPT_ATTEMPTS: usize = 3;

/// Why a flow is SKIPPED when no failed dependency is: the run was
/// stopped before its transformation started.
const STOPPED_BEFORE_START: &str = "the run was stopped before it started";

#[cfg(test)]
mod tests;
