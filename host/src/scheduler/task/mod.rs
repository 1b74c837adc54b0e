//! The executor: what runs views' transformations outside the loop (the
//! plugins, the Spark driver, the permits, the staging area, the retry
//! backoff) and what its tasks report back. Invariant: it knows no view
//! state. A call comes described whole (a [`CallContext`], read from the
//! views by the scheduler), a task reports back by a [`TaskReport`], and
//! nothing here reads the views or the metastore: the loop applies what it
//! hears, after its commit.

mod job;
mod plugin;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tracing::Instrument;

pub(super) use job::JobControl;
pub(super) use plugin::{Printed, attempt_log};

use super::Error;
use super::publish::{Receipt, Staging};
use super::transition::FailureClass;
use super::txlog;
use crate::catalog::{Catalog, ViewTypeId};
use crate::clock::Clock;
use crate::engines::spark::{Source, Spark};
use crate::lattice::ViewId;
use crate::model::Counters;
use crate::plugins::Plugins;
use crate::runtime::{self, JobField, JobInput, JobRequest, OutputLimit, Plugin, TransformInput, TransformRequest};
use crate::storage::{LocalInput, Storage};

/// What a task reports back to the run that started it.
#[derive(Debug)]
pub enum TaskReport {
    /// A transformation got its permits and is running.
    Started {
        view: ViewId,
    },
    Done {
        view: ViewId,
        data: bool,
        timestamp: i64,
        /// What the transformation returned with its data.
        counters: Option<Counters>,
        /// An incremental view's commit, published with its data.
        txlog: Option<Box<txlog::Marker>>,
    },
    Failed {
        view: ViewId,
        /// Whether, and how, trying again may help.
        class: FailureClass,
        message: String,
    },
    RetryDue {
        view: ViewId,
    },
    /// What a transformation logged and printed, sent before its end.
    Logged {
        view: ViewId,
        log: Box<crate::metastore::AttemptLog>,
    },
    /// How far an engine's job has come, as its driver says.
    Progress {
        view: ViewId,
        text: String,
    },
    /// An engine's job asked to stop is gone, with its staging directory:
    /// its task's last report after a stop.
    Reaped {
        view: ViewId,
    },
}

/// A running task: how to abort it, and whether it got past the permits
/// (a transformation that never started is skipped, not canceled).
pub(super) struct Task {
    handle: JoinHandle<()>,
    started: Arc<AtomicBool>,
    /// An engine's job, which a stop asks to stop rather than aborts.
    job: Option<JobControl>,
    /// A transformation's attempt (not a retry's wait): one that never got
    /// its permits before a stop is no attempt.
    attempt: bool,
}

/// What a stop did to the tasks in flight (see [`stop_all`]).
pub(super) struct Stopped {
    /// Engine jobs that published before the stop came: left to report it.
    pub finishing: HashSet<ViewId>,
    /// Every other task, stopped: whether it had got its permits, and
    /// whether it was an attempt (not a retry's wait).
    pub stopped: Vec<(ViewId, bool, bool)>,
}

/// Stops every task in `tasks`: engine jobs are asked to stop (and go to
/// `draining`, the run waiting for their last report), the rest are
/// aborted (into `aborted`: each removes its staging directory as it goes).
/// An engine job that already published stays in `tasks`, to report it.
pub(super) fn stop_all(
    tasks: &mut HashMap<ViewId, Task>,
    draining: &mut HashSet<ViewId>,
    aborted: &mut Vec<JoinHandle<()>>,
) -> Stopped {
    let mut finishing = HashSet::new();
    for (view, task) in tasks.iter_mut() {
        if let Some(job) = &mut task.job {
            if !job.stop() {
                finishing.insert(*view);
            }
            draining.insert(*view);
        }
    }
    // Which tasks had started is read before any is aborted: an aborted
    // task gives its permits back, and one waiting for them could start.
    let stopped = tasks
        .iter()
        .filter(|(view, _)| !finishing.contains(view))
        .map(|(view, task)| (*view, task.started.load(Ordering::SeqCst), task.attempt))
        .collect();
    // Engine jobs end by themselves, and report it; the rest is aborted.
    for (view, task) in std::mem::take(tasks) {
        if task.job.is_some() && finishing.contains(&view) {
            tasks.insert(view, task);
        } else if task.job.is_none() {
            task.handle.abort();
            aborted.push(task.handle);
        }
    }
    Stopped { finishing, stopped }
}

/// What a transformation call needs from the views, for a plugin's
/// transform and an engine's job alike: built by the scheduler from what
/// it holds, so that the executor reads nothing of the views.
pub(super) struct CallContext {
    pub view: ViewId,
    /// Its URL path: what the request and the plugin's log lines name.
    pub url: Arc<str>,
    /// The plugin its type declares.
    pub plugin: String,
    pub parameters: Vec<(String, String)>,
    pub nominal_time: Option<i64>,
    /// The run's actual time (its action's): `${actualTime()}`, not when
    /// this call happens to start.
    pub actual: DateTime<Utc>,
    /// Its configuration, rendered with the paths of the world it runs in,
    /// or why it cannot be.
    pub config: Result<Vec<(String, String)>, String>,
    /// Where its data is published, and its done flag there.
    pub data_path: PathBuf,
    pub done_flag: String,
    pub output_limit: OutputLimit,
    /// What its output carries of the attempt (see `publish`); the attempt
    /// its log names is the one its receipt names.
    pub receipt: Receipt,
}

/// What a plugin's transform and an engine's job each take beside the
/// common part of a call.
pub(super) enum Shape {
    /// A plugin's transform: its inputs (at guest paths), and an
    /// incremental view's manifest check.
    Transform { inputs: Vec<TransformInput>, incremental: Option<txlog::Spec> },
    /// An engine's job: its inputs described, a table per declared name,
    /// the type's own format and fields, its resources.
    Job(JobShape),
}

/// What an engine's job takes beside the common part of its call.
pub(super) struct JobShape {
    pub inputs: Vec<JobInput>,
    /// A table per declared name, with the paths of its views that have data.
    pub sources: Vec<Source>,
    /// The type's own format and fields.
    pub format: String,
    pub fields: Vec<JobField>,
    pub resources: Resources,
}

/// A type's resources, by name, with their contents as loaded.
pub(super) type Resources = Vec<(String, Vec<u8>)>;

/// What transformations need: the plugins and each type's version checksum.
/// A scheduler opened without them can instantiate and invalidate only.
struct Transformations {
    plugins: Arc<Plugins>,
    versions: HashMap<ViewTypeId, String>,
    /// The driver of engine-backed types' jobs, with the project's settings.
    spark: Arc<Spark>,
}

/// A transformation limit and its semaphore, for showing permits in use.
#[derive(Clone)]
pub struct Permits {
    /// A plugin's name, or `*` for the global limit.
    pub plugin: String,
    pub limit: usize,
    pub semaphore: Arc<Semaphore>,
}

impl Permits {
    fn new(plugin: &str, limit: usize) -> Permits {
        Permits { plugin: plugin.to_string(), limit, semaphore: Arc::new(Semaphore::new(limit)) }
    }

    pub fn in_use(&self) -> usize {
        self.limit.saturating_sub(self.semaphore.available_permits())
    }
}

/// Runs transformations: the plugins, the engines, the permits that bound
/// them, the staging area their output goes to, and the wait before a retry.
pub(super) struct Executor {
    transformations: Option<Transformations>,
    staging: Arc<Staging>,
    global: Permits,
    per_plugin: HashMap<String, Permits>,
    retry_backoff: Duration,
}

impl Executor {
    /// The executor of `catalog`'s project, without plugins yet: its
    /// staging area cleaned of what an earlier process left.
    pub(super) fn open(catalog: &Catalog) -> Result<Executor, Error> {
        let mut executor = Executor {
            transformations: None,
            staging: Arc::new(clean_staging(catalog)?),
            global: Permits::new("*", catalog.settings.concurrency),
            per_plugin: HashMap::new(),
            retry_backoff: Duration::from_millis(100),
        };
        executor.set_permits(catalog);
        Ok(executor)
    }

    /// Takes the plugins and version checksums, which materializing and
    /// planning need, with the project's Spark settings.
    pub(super) fn set_plugins(
        &mut self,
        catalog: &Catalog,
        plugins: Arc<Plugins>,
        versions: HashMap<ViewTypeId, String>,
    ) {
        let spark = Spark::new(
            catalog.settings.spark.clone(),
            crate::python::default_tools_dir(),
            plugins.memory_budget().clone(),
        );
        self.transformations = Some(Transformations { plugins, versions, spark: Arc::new(spark) });
    }

    /// Takes a reloaded project's staging area (when its storage moved)
    /// and permits, between runs: no task holds either.
    pub(super) fn reload(&mut self, catalog: &Catalog, storage_moved: bool) -> Result<(), Error> {
        if storage_moved {
            self.staging = Arc::new(clean_staging(catalog)?);
        }
        // Permits whose limit is unchanged are kept: the API shows them.
        if self.global.limit != catalog.settings.concurrency {
            self.global = Permits::new("*", catalog.settings.concurrency);
        }
        self.set_permits(catalog);
        Ok(())
    }

    /// Each plugin's permits, keeping those whose limit is unchanged.
    fn set_permits(&mut self, catalog: &Catalog) {
        let mut old_permits = std::mem::take(&mut self.per_plugin);
        self.per_plugin = catalog
            .plugins
            .iter()
            .map(|(name, decl)| {
                let limit = decl.concurrency.unwrap_or(catalog.settings.concurrency);
                let permits = old_permits.remove(name).filter(|old| old.limit == limit);
                (name.clone(), permits.unwrap_or_else(|| Permits::new(name, limit)))
            })
            .collect();
    }

    /// The view storage with its staging area: where tasks write and
    /// publish, and what the scheduler reads views' data through.
    pub(super) fn staging(&self) -> &Arc<Staging> {
        &self.staging
    }

    /// Whether it has plugins: materializing and planning need them.
    pub(super) fn check_plugins(&self) -> Result<(), Error> {
        self.transformations.as_ref().map(|_| ()).ok_or(Error::NoPlugins)
    }

    /// A type's current version checksum ("" without plugins).
    pub(super) fn version(&self, view_type: ViewTypeId) -> &str {
        self.transformations.as_ref().map_or("", |t| t.versions[&view_type].as_str())
    }

    /// The version checksums, when it has plugins.
    pub(super) fn versions(&self) -> Option<&HashMap<ViewTypeId, String>> {
        self.transformations.as_ref().map(|t| &t.versions)
    }

    /// Whether `plugin` exports `transform-incremental` (taken to, without
    /// plugins).
    pub(super) fn is_incremental(&self, plugin: &str) -> bool {
        self.transformations.as_ref().is_none_or(|t| t.plugins.get(plugin).is_ok_and(|p| p.is_incremental()))
    }

    /// The plugin `name`, or why a view declaring it cannot start.
    pub(super) fn plugin(&self, name: &str) -> Result<Plugin, String> {
        let transformations = self.transformations.as_ref().ok_or_else(|| Error::NoPlugins.to_string())?;
        transformations.plugins.get(name).cloned().map_err(|e| e.to_string())
    }

    /// Whether `plugin` is loaded and its jobs run on an engine.
    pub(super) fn runs_on_engine(&self, plugin: &str) -> bool {
        self.transformations
            .as_ref()
            .and_then(|t| t.plugins.get(plugin).ok())
            .is_some_and(|plugin| plugin.world() == runtime::World::Engine)
    }

    /// Whether Spark can run here, or why not.
    pub(super) fn locate_spark(&self) -> Result<(), String> {
        let transformations = self.transformations.as_ref().ok_or_else(|| Error::NoPlugins.to_string())?;
        transformations.spark.locate().map(|_| ())
    }

    /// The global transformation limit, then each plugin's.
    pub(super) fn permits(&self) -> Vec<Permits> {
        let mut plugins: Vec<Permits> = self.per_plugin.values().cloned().collect();
        plugins.sort_by(|a, b| a.plugin.cmp(&b.plugin));
        std::iter::once(self.global.clone()).chain(plugins).collect()
    }

    /// Transformations holding a global permit.
    pub(super) fn running(&self) -> usize {
        self.global.in_use()
    }

    /// Starts `call` with `plugin` as a task reporting to `results`.
    pub(super) fn start(
        &self,
        call: CallContext,
        shape: Shape,
        plugin: Plugin,
        results: mpsc::UnboundedSender<TaskReport>,
        clock: &Clock,
    ) -> Task {
        match (shape, &self.transformations) {
            (Shape::Job(shape), Some(transformations)) => {
                let spark = transformations.spark.clone();
                self.start_job(call, shape, plugin, spark, results, clock)
            }
            (Shape::Job(_), None) => failed_at_once(call.view, results, Error::NoPlugins.to_string()),
            (Shape::Transform { inputs, incremental }, _) => {
                self.start_transform(call, (inputs, incremental), plugin, results, clock)
            }
        }
    }

    /// A task that tells `view`'s run, after `backoff` (the executor's own
    /// without one), that its retry is due.
    pub(super) fn retry_after(
        &self,
        view: ViewId,
        backoff: Option<Duration>,
        results: mpsc::UnboundedSender<TaskReport>,
    ) -> Task {
        let backoff = backoff.unwrap_or(self.retry_backoff);
        let handle = tokio::spawn(async move {
            tokio::time::sleep(backoff).await;
            let _ = results.send(TaskReport::RetryDue { view });
        });
        Task { handle, started: Arc::new(AtomicBool::new(false)), job: None, attempt: false }
    }

    /// Starts a plugin's transform as a task: its permits, the call into a
    /// fresh staging directory, its data published, its log sent.
    fn start_transform(
        &self,
        call: CallContext,
        (inputs, incremental): (Vec<TransformInput>, Option<txlog::Spec>),
        plugin: Plugin,
        results: mpsc::UnboundedSender<TaskReport>,
        clock: &Clock,
    ) -> Task {
        let id = call.view;
        let config = match call.config {
            Ok(config) => config,
            Err(message) => return failed_at_once(id, results, message),
        };
        let request = TransformRequest {
            view: call.url.to_string(),
            parameters: call.parameters,
            nominal_time: call.nominal_time,
            actual_time: call.actual.timestamp_millis(),
            config,
            inputs,
            output_dir: PathBuf::new(),
            output_limit: call.output_limit,
        };
        let published =
            plugin::Published { staging: self.staging.clone(), data_path: call.data_path, done_flag: call.done_flag };
        // The plugin's lines on the host's log name the view they are for.
        let span = tracing::info_span!(target: "trellis::plugin", "transform", view = %call.url);
        let global = self.global.semaphore.clone();
        let local = self.per_plugin[&call.plugin].semaphore.clone();
        let declared = call.plugin;
        let (receipt, clock) = (call.receipt, clock.clone());
        let started = Arc::new(AtomicBool::new(false));
        let task_started = started.clone();
        let handle = tokio::spawn(async move {
            let (Ok(_global), Ok(_local)) = (global.acquire_owned().await, local.acquire_owned().await) else { return };
            task_started.store(true, Ordering::SeqCst);
            let _ = results.send(TaskReport::Started { view: id });
            let call = plugin::PluginCall { plugin, incremental, published, receipt, declared, clock };
            let report = call.run(request, id, &results).instrument(span).await;
            let _ = results.send(report);
        });
        Task { handle, started, job: None, attempt: true }
    }
}

/// Inputs fetched at once for one call, each on a blocking thread.
const INPUTS_STAGED_AT_ONCE: usize = 4;

/// Each of `dirs` (views' data paths, in the storage) as a local
/// directory for a plugin or an engine to read, in order: the directory
/// itself for a local root, an object store's data fetched into its cache.
/// A failure is the host's (retried as its own I/O is), one line naming
/// the object and the cause.
async fn local_inputs(storage: Storage, dirs: Vec<PathBuf>) -> Result<Vec<LocalInput>, String> {
    use futures_util::StreamExt;
    let staging = dirs.into_iter().map(|dir| {
        let storage = storage.clone();
        tokio::task::spawn_blocking(move || {
            storage
                .local_input(&storage.key(&dir))
                .map_err(|e| format!("cannot stage the input {} locally: {e}", dir.display()))
        })
    });
    let staged: Vec<_> = futures_util::stream::iter(staging).buffered(INPUTS_STAGED_AT_ONCE).collect().await;
    staged
        .into_iter()
        .map(|joined| joined.map_err(|e| format!("staging an input stopped: {e}")).and_then(|staged| staged))
        .collect()
}

/// Ends a call's hold on its inputs: a cache's eviction may remove
/// directories, off the async workers.
fn release(inputs: Vec<LocalInput>) {
    if inputs.iter().any(LocalInput::is_staged) {
        tokio::task::spawn_blocking(move || drop(inputs));
    }
}

/// Why a publish failed, and whether it is worth retrying: the host's own
/// I/O is retried; a commit another writer won (two servers on one bucket
/// by mistake) is not, since a retry would transform the view again and
/// replace the winner's version. The winner's output, with its receipt,
/// is there for the next run to adopt.
pub(super) fn publish_failed(data_path: &std::path::Path, e: &std::io::Error) -> (FailureClass, String) {
    let class = if e.kind() == std::io::ErrorKind::AlreadyExists { FailureClass::Fatal } else { FailureClass::Host };
    (class, format!("cannot publish to {}: {e}", data_path.display()))
}

/// The staging area of `catalog`'s storage, cleaned.
fn clean_staging(catalog: &Catalog) -> Result<Staging, Error> {
    let storage = crate::storage::open(catalog).map_err(|e| Error::Io(e.to_string()))?;
    let staging = Staging::over(storage);
    staging.clean().map_err(|e| Error::Io(format!("cannot clean {}: {e}", catalog.settings.storage.display())))?;
    Ok(staging)
}

/// A task that sends `report` at once: a view whose call needs no plugin
/// (external data, whose done flag is its transformation), or cannot start.
pub(super) fn report_at_once(report: TaskReport, results: mpsc::UnboundedSender<TaskReport>) -> Task {
    let handle = tokio::spawn(async move {
        let _ = results.send(report);
    });
    Task { handle, started: Arc::new(AtomicBool::new(false)), job: None, attempt: true }
}

/// A task that reports a fatal failure at once: a view that cannot start.
pub(super) fn failed_at_once(view: ViewId, results: mpsc::UnboundedSender<TaskReport>, message: String) -> Task {
    report_at_once(TaskReport::Failed { view, class: FailureClass::Fatal, message }, results)
}

/// The class of a plugin's failure: whether, and how, trying again may help.
fn failure_class(failure: &runtime::Failure) -> FailureClass {
    if failure.is_retryable() {
        FailureClass::Retryable
    } else if failure.is_crash() {
        FailureClass::Crash
    } else {
        FailureClass::Fatal
    }
}

/// The job request of `call`, with what its job takes beside (its
/// sources stay in `shape`, for the driver).
fn job_request(call: &mut CallContext, shape: &mut JobShape) -> Result<JobRequest, String> {
    let JobShape { inputs, format, fields, resources, .. } = shape;
    let config = std::mem::replace(&mut call.config, Ok(Vec::new()))?;
    Ok(JobRequest {
        view: call.url.to_string(),
        parameters: call.parameters.clone(),
        nominal_time: call.nominal_time,
        actual_time: call.actual.timestamp_millis(),
        config,
        inputs: std::mem::take(inputs),
        format: std::mem::take(format),
        fields: std::mem::take(fields),
        resources: std::mem::take(resources),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project whose plugins `a` and `b` allow `a` and `b` transformations
    /// at once, under a global limit of 3.
    fn catalog(root: &std::path::Path, a: usize, b: usize) -> Catalog {
        let text = format!(
            "[defaults]\nconcurrency = 3\n\n[plugins]\n\
             a = {{ file = \"a.wasm\", concurrency = {a} }}\n\
             b = {{ file = \"b.wasm\", concurrency = {b} }}\n\n\
             [[view]]\nname = \"t.raw/Day\"\n"
        );
        crate::catalog::parse(&text, root).expect("the test project parses")
    }

    fn shown(executor: &Executor) -> Vec<(String, usize, usize)> {
        executor.permits().iter().map(|p| (p.plugin.clone(), p.limit, p.in_use())).collect()
    }

    #[tokio::test]
    async fn a_reload_keeps_the_permits_whose_limit_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let mut executor = Executor::open(&catalog(dir.path(), 1, 2)).unwrap();
        let held = executor.per_plugin["a"].semaphore.clone().try_acquire_owned().unwrap();
        executor.reload(&catalog(dir.path(), 1, 5), false).unwrap();
        // `a`'s permit held across the reload is still counted: the API
        // shows it in use; `b`'s new limit is a new semaphore.
        let expected = [("*", 3, 0), ("a", 1, 1), ("b", 5, 0)].map(|(p, l, u)| (p.to_string(), l, u));
        assert_eq!(shown(&executor), expected);
        drop(held);
        assert_eq!(shown(&executor)[1], ("a".to_string(), 1, 0));
    }

    #[tokio::test]
    async fn a_stop_tells_started_tasks_from_waiting_ones_and_aborts_them() {
        let dir = tempfile::tempdir().unwrap();
        let executor = Executor::open(&catalog(dir.path(), 1, 1)).unwrap();
        let (results, mut reports) = mpsc::unbounded_channel();
        let mut tasks = HashMap::new();
        // A retry's wait (no attempt), and an attempt that got its permits.
        tasks.insert(ViewId(0), executor.retry_after(ViewId(0), Some(Duration::from_secs(3600)), results.clone()));
        let started = failed_at_once(ViewId(1), results, "cannot start".into());
        started.started.store(true, Ordering::SeqCst);
        tasks.insert(ViewId(1), started);
        let (mut draining, mut aborted) = (HashSet::new(), Vec::new());
        let mut stopped = stop_all(&mut tasks, &mut draining, &mut aborted).stopped;
        stopped.sort_by_key(|(view, ..)| view.0);
        assert_eq!(stopped, [(ViewId(0), false, false), (ViewId(1), true, true)]);
        assert!(tasks.is_empty() && draining.is_empty());
        assert_eq!(aborted.len(), 2);
        // The retry's hour-long wait was aborted, not waited out.
        let mut canceled = 0;
        for task in aborted {
            canceled += usize::from(task.await.is_err_and(|e| e.is_cancelled()));
        }
        assert!(canceled >= 1);
        assert!(!std::iter::from_fn(|| reports.try_recv().ok()).any(|r| matches!(r, TaskReport::RetryDue { .. })));
    }
}
