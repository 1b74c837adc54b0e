//! Transformations an engine computes (contract 1.2.0): the plugin
//! describes the job in its sandbox, the engine driver runs it into the
//! view's staging directory, and the result is published, retried or
//! failed as a plugin's is. A stop does not abort such a task: it asks the
//! job to stop, and the task reports once its processes are gone
//! (`TaskReport::Reaped`), so that a run never ends with a job still
//! running. A job that already published when the stop came is reported
//! as done, never as canceled.
//!
//! Its permits: the global one in local mode, where executors use this
//! machine's CPUs, the plugin's, and the engine's with the driver's memory,
//! the engine's taken first so that jobs queued behind it hold no
//! transformation permit. `Progress` reports update the table's `Running`.
//! `JobControl::stop` asks the job to stop unless it already published (a
//! `JobGate` both sides take); the run keeps it in `draining` and ends only
//! once its task reports `Reaped` (or `Done`, for one that published
//! first). A task always sends its last report (`LastReport` sends
//! `Reaped` when a panic or an abort ends it without one), and a dropped
//! `JobControl` stops its job, so a run that ends on an error leaves none
//! to publish after it. (`check_engines`, in `call`, refuses in one line a
//! run whose closure runs on Spark where Spark or Java is missing.)

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use tokio::sync::Semaphore;

use super::{CallContext, Executor, JobShape, Task, TaskReport, failure_class, job_request};
use crate::clock::Clock;
use crate::engines::spark::{Source, Spark, Submission, Verdict};
use crate::lattice::ViewId;
use crate::model::{Counters, counters_of};
use crate::runtime::{self, Application, JobRequest, Plugin};
use crate::scheduler::publish::{Receipt, Staging, StagingDir};
use crate::scheduler::transition::FailureClass;
use crate::storage::LocalInput;

/// Between a running job and a stop: whichever takes the gate first
/// decides whether the view's data was published (and will be reported)
/// or the job was stopped (and nothing is published).
#[derive(Default)]
struct JobGate {
    stopped: bool,
    published: bool,
}

/// What a run keeps of an engine task beside its abort handle.
pub(in crate::scheduler) struct JobControl {
    gate: Arc<Mutex<JobGate>>,
    stop: Option<oneshot::Sender<()>>,
}

impl JobControl {
    /// Asks the job to stop, unless it already published: whether it will
    /// stop (and report `Reaped`) rather than report its end.
    pub(super) fn stop(&mut self) -> bool {
        let mut gate = self.gate.lock().unwrap_or_else(|p| p.into_inner());
        if gate.published {
            return false;
        }
        gate.stopped = true;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        true
    }
}

impl Executor {
    /// Starts the task of an engine-backed view: its permits (the global
    /// one where executors run here, the plugin's, the engine's with the
    /// driver's memory), the job described, the job run, its data published.
    pub(super) fn start_job(
        &self,
        mut call: CallContext,
        mut shape: JobShape,
        plugin: Plugin,
        spark: Arc<Spark>,
        results: mpsc::UnboundedSender<TaskReport>,
        clock: &Clock,
    ) -> Task {
        let id = call.view;
        let request = job_request(&mut call, &mut shape);
        // The attempt is the one its receipt names.
        let attempt: (Arc<str>, u32) = (call.receipt.run.as_str().into(), call.receipt.attempt);
        let context = JobContext {
            id,
            plugin,
            spark: spark.clone(),
            sources: shape.sources,
            data_path: call.data_path,
            done_flag: call.done_flag,
            staging: self.staging.clone(),
            output_limit: call.output_limit,
            declared: call.plugin.clone(),
            attempt,
            receipt: call.receipt,
            clock: clock.clone(),
        };
        let gate = Arc::new(Mutex::new(JobGate::default()));
        let (stop, stopped) = oneshot::channel();
        let span = tracing::info_span!(target: "trellis::plugin", "job", view = %call.url);
        // Executors in the driver's process use this machine's CPUs, as a
        // plugin does: they hold a transformation permit. On a cluster,
        // only the engine's permits bound the jobs in flight.
        let permits = Admission {
            spark,
            global: context.spark.settings().is_local().then(|| self.global.semaphore.clone()),
            local: self.per_plugin[&call.plugin].semaphore.clone(),
        };
        let started = Arc::new(AtomicBool::new(false));
        let task = JobTask { context, request, results, started: started.clone(), gate: gate.clone(), stopped };
        let handle = tokio::spawn(task.run(permits).instrument(span));
        Task { handle, started, job: Some(JobControl { gate, stop: Some(stop) }), attempt: true }
    }
}

/// The permits a job waits for: the engine's, the plugin's, and the global
/// one where its executors run on this machine.
struct Admission {
    spark: Arc<Spark>,
    global: Option<Arc<Semaphore>>,
    local: Arc<Semaphore>,
}

/// A job's task: admitted, then run, its last report sent whatever ends it.
struct JobTask {
    context: JobContext,
    request: Result<JobRequest, String>,
    results: mpsc::UnboundedSender<TaskReport>,
    started: Arc<AtomicBool>,
    gate: Arc<Mutex<JobGate>>,
    stopped: oneshot::Receiver<()>,
}

impl JobTask {
    async fn run(self, permits: Admission) {
        let JobTask { context, request, results, started, gate, mut stopped } = self;
        let id = context.id;
        // Whatever ends the task (a return, a panic, an abort), the
        // run hears of it: it waits for every job after a stop.
        let mut last = LastReport { results: results.clone(), view: id, sent: false };
        // The engine's permit first: jobs queued behind it hold no
        // transformation permit that plugins could use meanwhile.
        let admitted = async {
            let engine = permits.spark.admit().await;
            let local = permits.local.acquire_owned().await;
            let global = match permits.global {
                Some(global) => Some(global.acquire_owned().await),
                None => None,
            };
            (global, local, engine)
        };
        let (global, local, engine) = tokio::select! {
            admitted = admitted => admitted,
            _ = &mut stopped => return last.send(TaskReport::Reaped { view: id }),
        };
        if matches!(global, Some(Err(_))) || local.is_err() {
            return last.send(TaskReport::Failed {
                view: id,
                class: FailureClass::Host,
                message: "the scheduler's permits were closed".into(),
            });
        }
        let _permits = (global, local);
        let _engine = match engine {
            Ok(admission) => admission,
            Err(message) => {
                return last.send(TaskReport::Failed { view: id, class: FailureClass::Fatal, message });
            }
        };
        started.store(true, Ordering::SeqCst);
        let _ = results.send(TaskReport::Started { view: id });
        let final_report = match request {
            Ok(request) => context.run(request, &results, &gate, &mut stopped).await,
            Err(message) => TaskReport::Failed { view: id, class: FailureClass::Fatal, message },
        };
        last.send(final_report);
    }
}

/// A job task's last report, sent once: by the task, or, when it ends
/// without one (a panic, an abort), as `Reaped` when it is dropped, so that
/// a run waiting for its jobs after a stop never waits for ever.
struct LastReport {
    results: mpsc::UnboundedSender<TaskReport>,
    view: ViewId,
    sent: bool,
}

impl LastReport {
    fn send(&mut self, report: TaskReport) {
        self.sent = true;
        let _ = self.results.send(report);
    }
}

impl Drop for LastReport {
    fn drop(&mut self) {
        if !self.sent {
            let _ = self.results.send(TaskReport::Reaped { view: self.view });
        }
    }
}

/// A run that ends without stopping its jobs (on the metastore's error)
/// still stops them, through the gate, so that none publishes after it.
impl Drop for JobControl {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a job's task carries from the loop.
struct JobContext {
    id: ViewId,
    plugin: Plugin,
    spark: Arc<Spark>,
    sources: Vec<Source>,
    data_path: PathBuf,
    done_flag: String,
    staging: Arc<Staging>,
    output_limit: runtime::OutputLimit,
    declared: String,
    attempt: (Arc<str>, u32),
    /// What its output carries of the attempt (see `publish`).
    receipt: Receipt,
    /// The scheduler's, for the times the job records.
    clock: crate::clock::Clock,
}

impl JobContext {
    /// Describes the job, runs it, publishes its data: the task's last report.
    async fn run(
        mut self,
        request: JobRequest,
        results: &mpsc::UnboundedSender<TaskReport>,
        gate: &Mutex<JobGate>,
        stopped: &mut oneshot::Receiver<()>,
    ) -> TaskReport {
        let id = self.id;
        let failed = |class, message| TaskReport::Failed { view: id, class, message };
        let (job, mut lines) = match self.describe(&request, results).await {
            Ok(described) => described,
            Err(report) => return report,
        };
        // A stop that came while the job was described starts nothing.
        if gate.lock().unwrap_or_else(|p| p.into_inner()).stopped {
            return TaskReport::Reaped { view: id };
        }
        // Without the s3a connector (not in PySpark's wheel), Spark reads an
        // object store's inputs staged into the local cache, held there
        // until the job ends; its output is uploaded at publish, as a plugin's.
        let dirs: Vec<PathBuf> = self.sources.iter().flat_map(|source| source.paths.iter().cloned()).collect();
        let local = match super::local_inputs(self.staging.shared(), dirs.clone()).await {
            Ok(local) => local,
            Err(message) => return failed(FailureClass::Host, message),
        };
        let staged_from = staged_roots(self.staging.storage(), &dirs, &local);
        if !staged_from.is_empty() {
            let message = format!("inputs staged from {} to a local cache: no s3a connector", staged_from.join(", "));
            lines.push(runtime::LogLine { level: "info", message });
        }
        let mut staged = local.iter();
        for path in self.sources.iter_mut().flat_map(|source| source.paths.iter_mut()) {
            if let Some(local) = staged.next() {
                *path = local.path().to_path_buf();
            }
        }
        let staging = match self.staging.create_for(&self.data_path) {
            Ok(dir) => dir,
            Err(e) => return failed(FailureClass::Host, format!("cannot create a staging directory: {e}")),
        };
        let submission = self.submission(&request, job, staging.path().to_path_buf());
        let progress = {
            let results = results.clone();
            move |text: String| {
                let _ = results.send(TaskReport::Progress { view: id, text });
            }
        };
        let stop = async {
            let _ = (&mut *stopped).await;
        };
        let report = self.spark.run(submission, &progress, stop).await;
        super::release(local);
        lines.extend(report.lines);
        let outcome = match &report.verdict {
            Verdict::Data => "succeeded".to_string(),
            Verdict::NoData => "no data".to_string(),
            Verdict::Stopped => "stopped".to_string(),
            Verdict::Retryable(m)
            | Verdict::Fatal(m)
            | Verdict::Crash(m)
            | Verdict::Timeout(m)
            | Verdict::Host(m)
            | Verdict::Network(m) => {
                format!("failed: {m}")
            }
        };
        self.log(results, lines, report.stdout, report.stderr, &outcome);
        let counters = (!report.counters.is_empty()).then(|| counters_of(&report.counters));
        let result = self.conclude(report.verdict, staging, &counters, gate);
        let stopped = gate.lock().unwrap_or_else(|p| p.into_inner()).stopped;
        // Published, its timestamp is the one its receipt carries.
        let timestamp = if matches!(result, Ok(true)) { self.receipt.timestamp } else { self.clock.millis() };
        match result {
            Ok(data) => TaskReport::Done { view: id, data, timestamp, counters, txlog: None },
            Err(_) if stopped => TaskReport::Reaped { view: id },
            Err(None) => TaskReport::Reaped { view: id },
            Err(Some((class, message))) => failed(class, message),
        }
    }

    /// The job its plugin describes, with what the plugin logged; or the
    /// task's last report when it describes none (its log sent).
    async fn describe(
        &self,
        request: &JobRequest,
        results: &mpsc::UnboundedSender<TaskReport>,
    ) -> Result<(runtime::EngineJob, Vec<runtime::LogLine>), TaskReport> {
        let id = self.id;
        let described = match self.plugin.job(request).await {
            Ok(report) => report,
            // The host refused the call: the same every time.
            Err(e) => return Err(TaskReport::Failed { view: id, class: FailureClass::Fatal, message: e.to_string() }),
        };
        let lines = described.log;
        match described.result {
            Ok(job) => Ok((job, lines)),
            Err(failure) => {
                let class = failure_class(&failure);
                let message = format!("{} ({:?})", failure.message, failure.kind);
                self.log(results, lines, described.stdout, described.stderr, &format!("failed: {message}"));
                Err(TaskReport::Failed { view: id, class, message })
            }
        }
    }

    /// What the engine driver is given to run `job` into `staging`.
    fn submission(&self, request: &JobRequest, job: runtime::EngineJob, staging: PathBuf) -> Submission {
        let application = match &job.application {
            Application::Python(name) => request.resources.iter().find(|(n, _)| n == name).cloned(),
            Application::Sql(_) => None,
        };
        Submission {
            view: request.view.clone(),
            parameters: request.parameters.clone(),
            nominal_time: request.nominal_time,
            actual_time: request.actual_time,
            job,
            sources: self.sources.clone(),
            format: request.format.clone(),
            fields: request.fields.clone(),
            application,
            staging,
            deadline: self.plugin.limits().deadline,
            output_limit: self.output_limit,
        }
    }

    /// What the driver's verdict comes to: whether the view has data (its
    /// staging directory published, unless a stop came first), or how it
    /// failed (`None`: it was stopped).
    fn conclude(
        &mut self,
        verdict: Verdict,
        staging: StagingDir,
        counters: &Option<Counters>,
        gate: &Mutex<JobGate>,
    ) -> Result<bool, Option<(FailureClass, String)>> {
        // Removed when dropped, unless published.
        match verdict {
            Verdict::Data => {
                // Published only if no stop came first; once published, a
                // stop leaves it be and its report is applied.
                let mut gate = gate.lock().unwrap_or_else(|p| p.into_inner());
                if gate.stopped {
                    return Err(None);
                }
                self.receipt.counters = counters.clone();
                self.receipt.timestamp = self.receipt.timestamp.max(self.clock.millis());
                match self.staging.publish(staging, &self.data_path, &self.done_flag, &mut self.receipt) {
                    Ok(()) => {
                        gate.published = true;
                        Ok(true)
                    }
                    Err(e) => Err(Some(super::publish_failed(&self.data_path, &e))),
                }
            }
            Verdict::NoData => Ok(false),
            Verdict::Stopped => Err(None),
            Verdict::Retryable(m) | Verdict::Timeout(m) => Err(Some((FailureClass::Retryable, m))),
            Verdict::Fatal(m) => Err(Some((FailureClass::Fatal, m))),
            Verdict::Crash(m) => Err(Some((FailureClass::Crash, m))),
            Verdict::Host(m) => Err(Some((FailureClass::Host, m))),
            Verdict::Network(m) => Err(Some((FailureClass::Network, m))),
        }
    }

    /// Sends the attempt's log: the plugin's lines, then the driver's and
    /// the runner's, and what spark-submit printed.
    fn log(
        &self,
        results: &mpsc::UnboundedSender<TaskReport>,
        lines: Vec<runtime::LogLine>,
        stdout: runtime::Captured,
        stderr: runtime::Captured,
        outcome: &str,
    ) {
        let log = super::attempt_log(
            &self.declared,
            self.attempt.clone(),
            super::Printed { lines, stdout, stderr },
            outcome.to_string(),
            self.clock.millis(),
        );
        let _ = results.send(TaskReport::Logged { view: self.id, log: Box::new(log) });
    }
}

/// The roots the staged ones of `local` (the local inputs of `dirs`) were
/// fetched from, each once, as the user wrote them.
fn staged_roots(storage: &dyn crate::storage::ViewStore, dirs: &[PathBuf], local: &[LocalInput]) -> Vec<String> {
    let mut roots: Vec<String> = Vec::new();
    for (dir, local) in dirs.iter().zip(local) {
        if !local.is_staged() {
            continue;
        }
        let root = match storage.as_roots() {
            Some(routed) => routed.route(&storage.key(dir)).0.root().display().to_string(),
            None => storage.root().display().to_string(),
        };
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    roots
}
