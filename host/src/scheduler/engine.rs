//! Transformations an engine computes (contract 1.2.0): the plugin
//! describes the job in its sandbox, the engine driver runs it into the
//! view's staging directory, and the result is published, retried or
//! failed as a plugin's is. A stop does not abort such a task: it asks the
//! job to stop, and the task reports once its processes are gone
//! (`TaskReport::Reaped`), so that a run never ends with a job still
//! running. A job that already published when the stop came is reported
//! as done, never as canceled.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::publish::{Receipt, Staging};
use super::run::TaskReport;
use super::state::Scheduler;
use super::transition::FailureClass;
use crate::catalog::Transformation;
use crate::engines::spark::{Source, Spark, Submission, Verdict};
use crate::lattice::ViewId;
use crate::model::{ViewState, counters_of};
use crate::runtime::{self, Application, JobField, JobInput, JobRequest, Plugin};

/// Between a running job and a stop: whichever takes the gate first
/// decides whether the view's data was published (and will be reported)
/// or the job was stopped (and nothing is published).
#[derive(Default)]
pub(super) struct JobGate {
    stopped: bool,
    published: bool,
}

/// What a run keeps of an engine task beside its abort handle.
pub(super) struct JobControl {
    pub gate: Arc<Mutex<JobGate>>,
    pub stop: Option<oneshot::Sender<()>>,
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

/// A field list as the contract and the runner take it.
fn fields_of(view_type: &crate::catalog::ViewType) -> Vec<JobField> {
    view_type.fields.iter().map(|f| JobField { name: f.name.clone(), kind: f.kind.clone() }).collect()
}

impl Scheduler {
    /// Refuses, in one line, a run whose views (or what they depend on)
    /// run on Spark where Spark or Java is missing, rather than failing
    /// each of those views with the same reason.
    pub(super) fn check_engines(&self, addressed: &[ViewId]) -> Result<(), super::Error> {
        let transformations = self.transformations()?;
        let mut needing: Vec<&str> = Vec::new();
        for id in self.views.lattice().closure(addressed) {
            let view_type = self.views.lattice().view_type(id);
            let engine = view_type
                .transformation
                .plugin()
                .and_then(|name| transformations.plugins.get(name).ok())
                .is_some_and(|plugin| plugin.world() == runtime::World::Engine);
            if engine && !needing.contains(&view_type.name.as_str()) {
                needing.push(&view_type.name);
            }
        }
        if needing.is_empty() {
            return Ok(());
        }
        match transformations.spark.locate() {
            Ok(_) => Ok(()),
            Err(reason) => Err(super::Error::EngineUnavailable(format!(
                "{} run{} on Spark, which is not available here: {reason}",
                needing.join(", "),
                if needing.len() == 1 { "s" } else { "" }
            ))),
        }
    }

    /// Starts the task of an engine-backed view: its permits (the global
    /// one where executors run here, the plugin's, the engine's with the
    /// driver's memory), the job described, the job run, its data published.
    pub(super) fn start_job(
        &mut self,
        id: ViewId,
        plugin: Plugin,
        spark: Arc<Spark>,
        results: mpsc::UnboundedSender<TaskReport>,
        (started, actual): (Arc<AtomicBool>, chrono::DateTime<chrono::Utc>),
        receipt: Receipt,
    ) -> (tokio::task::JoinHandle<()>, JobControl) {
        // The attempt is the one its receipt names.
        let attempt: (Arc<str>, u32) = (receipt.run.as_str().into(), receipt.attempt);
        let view_type = self.views.lattice().view_type(id);
        let Transformation::Plugin { plugin: plugin_name, resources, .. } = &view_type.transformation else {
            unreachable!("only a plugin's view starts a job")
        };
        let own_timestamp = self.views.record(id).timestamp;
        let with_data =
            self.inputs_with_data(id, |dependency| self.views.record(dependency).state == ViewState::Materialized);
        // Every declared name is a table of the job, with the paths of its
        // views that have data (none: an empty table of its fields).
        let mut sources: Vec<Source> = Vec::new();
        for declaration in &view_type.dependencies {
            if sources.iter().any(|s| s.name == declaration.name) {
                continue;
            }
            let target = &self.catalog.types()[declaration.target.0 as usize];
            sources.push(Source {
                name: declaration.name.clone(),
                format: target.format.clone(),
                fields: fields_of(target),
                paths: Vec::new(),
            });
        }
        let mut inputs = Vec::with_capacity(with_data.len());
        let mut paths: HashMap<ViewId, String> = HashMap::new();
        for (dependency, input) in &with_data {
            let record = &self.views.record(*dependency);
            let target = self.views.lattice().view_type(*dependency);
            if let Some(source) = sources.iter_mut().find(|s| s.name == input.source) {
                source.paths.push(input.dir.clone());
            }
            paths.insert(*dependency, input.dir.display().to_string());
            inputs.push(JobInput {
                name: input.source.clone(),
                view: input.input.clone(),
                format: target.format.clone(),
                fields: fields_of(target),
                timestamp: record.timestamp,
                changed: record.timestamp > own_timestamp,
            });
        }
        let data_path = self.views.lattice().data_path(id);
        // `actual`: the run's actual time (`${actualTime()}`), its action's.
        // `dataIn()` and `dataOut()` are where the engine reads and where the
        // data will be: the job has no sandbox of guest paths.
        let path_of = |d: ViewId| paths.get(&d).cloned().unwrap_or_default();
        let config = self.views.lattice().config(id, actual, &data_path.display().to_string(), &path_of);
        let request = config.map(|config| JobRequest {
            view: self.views.lattice().url_path(id),
            parameters: self.parameters(id),
            nominal_time: self.views.lattice().time(id).map(|t| t.timestamp_millis()),
            actual_time: actual.timestamp_millis(),
            config,
            inputs,
            format: view_type.format.clone(),
            fields: fields_of(view_type),
            resources: resources.iter().map(|r| (r.name.clone(), r.content.to_vec())).collect(),
        });
        let output_limit = self.output_limit(id);
        let context = JobContext {
            id,
            plugin,
            spark: spark.clone(),
            sources,
            data_path,
            done_flag: view_type.done_flag.clone(),
            staging: self.staging.clone(),
            output_limit,
            declared: plugin_name.clone(),
            attempt,
            receipt,
            clock: self.clock.clone(),
        };
        let gate = Arc::new(Mutex::new(JobGate::default()));
        let (stop, stopped) = oneshot::channel();
        let span = tracing::info_span!(target: "trellis::plugin", "job", view = %self.views.url(id));
        // Executors in the driver's process use this machine's CPUs, as a
        // plugin does: they hold a transformation permit. On a cluster,
        // only the engine's permits bound the jobs in flight.
        let global = spark.settings().is_local().then(|| self.global.semaphore.clone());
        let local = self.per_plugin[plugin_name].semaphore.clone();
        let task_gate = gate.clone();
        let task = tokio::spawn(
            async move {
                let mut stopped = stopped;
                // Whatever ends the task (a return, a panic, an abort), the
                // run hears of it: it waits for every job after a stop.
                let mut last = LastReport { results: results.clone(), view: id, sent: false };
                // The engine's permit first: jobs queued behind it hold no
                // transformation permit that plugins could use meanwhile.
                let admitted = async {
                    let engine = spark.admit().await;
                    let local = local.acquire_owned().await;
                    let global = match global {
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
                    Ok(request) => context.run(request, &results, &task_gate, &mut stopped).await,
                    Err(message) => TaskReport::Failed { view: id, class: FailureClass::Fatal, message },
                };
                last.send(final_report);
            }
            .instrument(span),
        );
        (task, JobControl { gate, stop: Some(stop) })
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
        let described = match self.plugin.job(&request).await {
            Ok(report) => report,
            // The host refused the call: the same every time.
            Err(e) => return failed(FailureClass::Fatal, e.to_string()),
        };
        let mut lines = described.log;
        let job = match described.result {
            Ok(job) => job,
            Err(failure) => {
                let class = if failure.is_retryable() {
                    FailureClass::Retryable
                } else if failure.is_crash() {
                    FailureClass::Crash
                } else {
                    FailureClass::Fatal
                };
                let message = format!("{} ({:?})", failure.message, failure.kind);
                self.log(results, lines, described.stdout, described.stderr, &format!("failed: {message}"));
                return failed(class, message);
            }
        };
        let application = match &job.application {
            Application::Python(name) => request.resources.iter().find(|(n, _)| n == name).cloned(),
            Application::Sql(_) => None,
        };
        // A stop that came while the job was described starts nothing.
        if gate.lock().unwrap_or_else(|p| p.into_inner()).stopped {
            return TaskReport::Reaped { view: id };
        }
        let staging = match self.staging.create() {
            Ok(dir) => dir,
            Err(e) => return failed(FailureClass::Host, format!("cannot create a staging directory: {e}")),
        };
        let submission = Submission {
            view: request.view.clone(),
            parameters: request.parameters.clone(),
            nominal_time: request.nominal_time,
            actual_time: request.actual_time,
            job,
            sources: self.sources.clone(),
            format: request.format.clone(),
            fields: request.fields.clone(),
            application,
            staging: staging.path().to_path_buf(),
            deadline: self.plugin.limits().deadline,
            output_limit: self.output_limit,
        };
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
        // Removed when dropped, unless published.
        let mut staging = Some(staging);
        let result = match report.verdict {
            Verdict::Data => {
                // Published only if no stop came first; once published, a
                // stop leaves it be and its report is applied.
                let mut gate = gate.lock().unwrap_or_else(|p| p.into_inner());
                if gate.stopped {
                    Err(None)
                } else {
                    self.receipt.counters = counters.clone();
                    self.receipt.timestamp = self.receipt.timestamp.max(self.clock.millis());
                    let dir = staging.take().expect("published once");
                    match self.staging.publish(dir, &self.data_path, &self.done_flag, &mut self.receipt) {
                        Ok(()) => {
                            gate.published = true;
                            Ok(true)
                        }
                        Err(e) => Err(Some((
                            FailureClass::Host,
                            format!("cannot publish to {}: {e}", self.data_path.display()),
                        ))),
                    }
                }
            }
            Verdict::NoData => Ok(false),
            Verdict::Stopped => Err(None),
            Verdict::Retryable(m) | Verdict::Timeout(m) => Err(Some((FailureClass::Retryable, m))),
            Verdict::Fatal(m) => Err(Some((FailureClass::Fatal, m))),
            Verdict::Crash(m) => Err(Some((FailureClass::Crash, m))),
            Verdict::Host(m) => Err(Some((FailureClass::Host, m))),
            Verdict::Network(m) => Err(Some((FailureClass::Network, m))),
        };
        drop(staging);
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
        let log = super::run::attempt_log(
            &self.declared,
            self.attempt.clone(),
            super::run::Printed { lines, stdout, stderr },
            outcome.to_string(),
            self.clock.millis(),
        );
        let _ = results.send(TaskReport::Logged { view: self.id, log: Box::new(log) });
    }
}
