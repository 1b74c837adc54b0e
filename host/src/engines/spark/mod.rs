//! The Spark driver: runs the job an engine-backed transformation
//! described with `spark-submit`, trellis's own Python program as the
//! application (`trellis_spark_runner.py`, which reads the inputs, runs the
//! query or the user's PySpark application and says how it went in
//! `result.json`), and leaves the job's data in the view's staging
//! directory for the scheduler to publish as every view's is.
//!
//! One job's files all live in a scratch directory inside its staging
//! directory (`.trellis-spark/`): the job description, the runner, the
//! application, Spark's event log and, in local mode, Spark's own scratch
//! space (`spark.local.dir`). So the staging directory's removal, after a
//! failure or by the next start after a crash, removes everything a job
//! left, and Spark is only ever pointed at that directory to write.

mod eventlog;
mod install;
mod outcome;
mod output;
mod scratch;
mod submit;

pub use eventlog::Progress;
pub use install::{Installation, PYSPARK, install, installed_dir, locate};
pub use outcome::Verdict;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use crate::catalog::{SPARK_RESERVED_CONF, SparkSettings};
use crate::runtime::{self, Captured, EngineJob, JobField, LogLine, MemoryBudget, OutputLimit};
use outcome::Exit;
use submit::{Bounded, Group, Scratch};

/// The runner and the module a user's application imports, written into
/// each job's scratch directory.
const RUNNER: &str = include_str!("trellis_spark_runner.py");
const MODULE: &str = include_str!("trellis_spark.py");

/// The scratch directory's name inside a staging directory.
pub const SCRATCH_DIR: &str = ".trellis-spark";

/// How often the event log is read while a job runs.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// How long the streams may stay open after spark-submit ended (a process
/// that left the group could hold them).
const STREAMS_GRACE: Duration = Duration::from_secs(5);

/// The Spark driver of one project: its settings, where Spark is, and the
/// permits and memory its jobs take. Cheap to share.
pub struct Spark {
    settings: SparkSettings,
    tools: Option<PathBuf>,
    permits: Arc<Semaphore>,
    budget: MemoryBudget,
    /// Where Spark was found. Only a success is kept: a run refused for a
    /// missing Spark looks again, so `trellis engines install spark` beside
    /// a running server needs no reload.
    located: OnceLock<Installation>,
}

/// One dependency name of the view type, with the data paths of its views
/// that have data (none: the runner gives the job an empty table).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Source {
    pub name: String,
    pub format: String,
    pub fields: Vec<JobField>,
    pub paths: Vec<PathBuf>,
}

/// Everything a job needs, from the scheduler.
#[derive(Debug, Clone)]
pub struct Submission {
    pub view: String,
    pub parameters: Vec<(String, String)>,
    pub nominal_time: Option<i64>,
    pub actual_time: i64,
    pub job: EngineJob,
    pub sources: Vec<Source>,
    /// The view type's storage format and fields.
    pub format: String,
    pub fields: Vec<JobField>,
    /// A Python application's name and contents, as loaded with the project.
    pub application: Option<(String, Vec<u8>)>,
    /// The view's empty staging directory.
    pub staging: PathBuf,
    pub deadline: Duration,
    pub output_limit: OutputLimit,
}

/// How a job went, and what it printed.
#[derive(Debug)]
pub struct JobReport {
    pub verdict: Verdict,
    /// Rows read and written, bytes written, from the event log.
    pub counters: Vec<(String, u64)>,
    pub lines: Vec<LogLine>,
    pub stdout: Captured,
    pub stderr: Captured,
    pub elapsed: Duration,
}

/// A job's right to run: an engine permit and, for a driver on this
/// machine, its memory from the project's budget. Held until dropped.
pub struct Admission {
    _permit: OwnedSemaphorePermit,
    _memory: Option<runtime::Reservation>,
}

impl Spark {
    /// The driver for `settings`; `tools` is where `trellis engines install
    /// spark` puts PySpark, `budget` the project's memory budget.
    pub fn new(settings: SparkSettings, tools: Option<PathBuf>, budget: MemoryBudget) -> Spark {
        let permits = Arc::new(Semaphore::new(settings.concurrency));
        Spark { settings, tools, permits, budget, located: OnceLock::new() }
    }

    pub fn settings(&self) -> &SparkSettings {
        &self.settings
    }

    /// Where Spark and Java are, found once; or the one line that says
    /// what is missing, looked for again at the next call.
    pub fn locate(&self) -> Result<&Installation, String> {
        if let Some(found) = self.located.get() {
            return Ok(found);
        }
        let found = locate(&self.settings, self.tools.as_deref())?;
        // Two callers may both look; the first to finish is kept.
        Ok(self.located.get_or_init(|| found))
    }

    /// Waits for an engine permit and, when the driver runs here, for its
    /// memory (`memory_mib`) from the budget, which the WebAssembly calls
    /// reserve from too. A driver bigger than the whole budget is refused.
    pub async fn admit(&self) -> Result<Admission, String> {
        let permit =
            self.permits.clone().acquire_owned().await.map_err(|_| "the Spark driver was closed".to_string())?;
        let memory = if self.settings.driver_is_local() {
            let bytes = self.settings.memory_mib.saturating_mul(1 << 20);
            let reserved =
                self.budget.reserve("the Spark driver", bytes).await.map_err(|e| {
                    format!("{e}; lower engines.spark.memory_mib or raise [defaults] memory_budget_mib")
                })?;
            Some(reserved)
        } else {
            None
        };
        Ok(Admission { _permit: permit, _memory: memory })
    }

    /// Jobs waiting for a permit or running, and the permits in all.
    pub fn in_use(&self) -> usize {
        self.settings.concurrency - self.permits.available_permits()
    }

    /// Runs one job to its end, its deadline or `stop`, whichever comes
    /// first; `progress` is told what the event log says as it changes.
    /// On data, the staging directory holds the data and nothing else; on
    /// anything else, the caller discards it (the scratch directory, and
    /// whatever the job wrote, with it).
    pub async fn run(
        &self,
        submission: Submission,
        progress: &(dyn Fn(String) + Send + Sync),
        stop: impl std::future::Future<Output = ()>,
    ) -> JobReport {
        let started = Instant::now();
        let log = Log::default();
        let mut streams = (Arc::new(Mutex::new(Bounded::default())), Arc::new(Mutex::new(Bounded::default())));
        let mut counters = Vec::new();
        let verdict = self.submit(&submission, &log, &mut streams, &mut counters, progress, stop).await;
        if let Verdict::Retryable(message)
        | Verdict::Fatal(message)
        | Verdict::Crash(message)
        | Verdict::Host(message)
        | Verdict::Network(message)
        | Verdict::Timeout(message) = &verdict
        {
            log.push("error", message.clone());
        }
        let captured = |stream: &Arc<Mutex<Bounded>>| stream.lock().unwrap_or_else(|p| p.into_inner()).captured();
        JobReport {
            verdict,
            counters,
            lines: log.take(),
            stdout: captured(&streams.0),
            stderr: captured(&streams.1),
            elapsed: started.elapsed(),
        }
    }

    async fn submit(
        &self,
        submission: &Submission,
        log: &Log,
        streams: &mut (Arc<Mutex<Bounded>>, Arc<Mutex<Bounded>>),
        counters: &mut Vec<(String, u64)>,
        progress: &(dyn Fn(String) + Send + Sync),
        stop: impl std::future::Future<Output = ()>,
    ) -> Verdict {
        let installation = match self.check_job(submission) {
            Ok(installation) => installation,
            Err(refused) => return refused,
        };
        let scratch = Scratch { dir: submission.staging.join(SCRATCH_DIR) };
        if let Err(e) = scratch::prepare(&scratch, submission) {
            return Verdict::Host(format!("cannot prepare the job in {}: {e}", scratch.dir.display()));
        }
        let pod = format!("trellis-{}", random_suffix());
        let application = submission.application.as_ref().map(|(name, _)| name.as_str());
        let job = submit::JobLine { conf: &submission.job.conf, view: &submission.view, application, pod: &pod };
        let command = submit::command_line(&self.settings, installation, &scratch, &job, &|key| std::env::var_os(key));
        log.push(
            "info",
            format!(
                "spark-submit to {} (Spark at {}, found by {}; Java {})",
                self.settings.master,
                installation.spark_home.display(),
                installation.found_by,
                installation.java_version
            ),
        );
        let mut child = match submit::spawn(&command, &scratch.dir) {
            Ok(child) => child,
            Err(e) => return Verdict::Fatal(format!("cannot start {}: {e}", command.program.display())),
        };
        let Some(pid) = child.id() else { return Verdict::Host("spark-submit ended before it started".into()) };
        let mut group = Group::new(pid as i32);
        let readers = read_streams(&mut child, log, streams);
        let mut tail = eventlog::Tail::new(&scratch.events());
        let mut seen = Progress::default();
        let deadline = tokio::time::Instant::now() + submission.deadline;
        let mut ticker = tokio::time::interval(PROGRESS_EVERY);
        let mut stop = std::pin::pin!(stop);
        let exit = loop {
            tokio::select! {
                status = child.wait() => {
                    // The Python driver, if it outlived the JVM.
                    group.signal(libc::SIGKILL);
                    group.forget();
                    break status.map_or(Exit::Signal(libc::SIGKILL), submit::exit_of);
                }
                () = tokio::time::sleep_until(deadline) => {
                    log.push("warn", format!("the deadline of {} passed: stopping the job", humantime::format_duration(submission.deadline)));
                    self.kill_on_cluster(installation, streams, &job, &command, log).await;
                    submit::terminate(&mut child, &mut group, self.settings.grace).await;
                    break Exit::DeadlinePassed;
                }
                () = &mut stop => {
                    log.push("warn", "the run was stopped: stopping the job".to_string());
                    self.kill_on_cluster(installation, streams, &job, &command, log).await;
                    submit::terminate(&mut child, &mut group, self.settings.grace).await;
                    break Exit::Stopped;
                }
                _ = ticker.tick() => {
                    if tail.poll(&mut seen) {
                        progress(seen.summary());
                    }
                }
            }
        };
        for mut reader in readers.into_iter().flatten() {
            if tokio::time::timeout(STREAMS_GRACE, &mut reader).await.is_err() {
                reader.abort();
            }
        }
        // The whole log, however far behind its reading was: the counters.
        tail.finish(&mut seen);
        conclude(submission, &scratch, exit, &seen, streams, counters)
    }

    /// The installation to submit `submission` with, or why it cannot be:
    /// no Spark, a job for another engine, or a property trellis sets.
    fn check_job(&self, submission: &Submission) -> Result<&Installation, Verdict> {
        let installation = self.locate().map_err(Verdict::Fatal)?;
        if submission.job.engine != "spark" {
            return Err(Verdict::Fatal(format!(
                "the job is for engine `{}`; trellis has a driver for `spark`",
                submission.job.engine
            )));
        }
        if let Some((key, _)) = submission.job.conf.iter().find(|(key, _)| {
            SPARK_RESERVED_CONF.iter().any(|reserved| reserved.eq_ignore_ascii_case(key)) || !key.starts_with("spark.")
        }) {
            return Err(Verdict::Fatal(format!(
                "the job sets `{key}`, which is not a Spark property a job may set (trellis sets {})",
                SPARK_RESERVED_CONF.join(", ")
            )));
        }
        Ok(installation)
    }

    /// In cluster mode, kills the application on the cluster, which
    /// stopping spark-submit does not do.
    async fn kill_on_cluster(
        &self,
        installation: &Installation,
        streams: &(Arc<Mutex<Bounded>>, Arc<Mutex<Bounded>>),
        job: &submit::JobLine<'_>,
        submitted: &submit::CommandLine,
        log: &Log,
    ) {
        let printed = streams.1.lock().unwrap_or_else(|p| p.into_inner()).captured().text;
        let Some((program, args)) = submit::cluster_kill(&self.settings, installation, &printed, job) else { return };
        log.push("info", format!("killing the application on the cluster: {} {}", program.display(), args.join(" ")));
        let killed = tokio::process::Command::new(&program)
            .args(&args)
            .env_clear()
            .envs(submitted.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .status();
        match tokio::time::timeout(self.settings.grace, killed).await {
            Ok(Ok(status)) if status.success() => {}
            Ok(Ok(status)) => log.push("warn", format!("{} exited with {status}", program.display())),
            Ok(Err(e)) => log.push("warn", format!("cannot run {}: {e}", program.display())),
            Err(_) => log.push("warn", format!("{} did not finish in time", program.display())),
        }
    }
}

/// The data of a job that succeeded, made the staging directory's only
/// content: moved out of the scratch directory under trellis's names, the
/// scratch removed, and checked against the output cap.
fn publishable(scratch: &Scratch, staging: &Path, limit: OutputLimit) -> Verdict {
    let output = scratch.output();
    if !scratch::wrote_output(scratch) {
        return Verdict::Fatal("the job reported data but wrote nothing".into());
    }
    if let Err(e) = output::collect(&output, staging) {
        return Verdict::Host(format!("cannot move the job's data into {}: {e}", staging.display()));
    }
    if let Err(e) = scratch::remove(scratch) {
        return Verdict::Host(format!("cannot remove {}: {e}", scratch.dir.display()));
    }
    match runtime::check_output(staging, limit) {
        Ok(()) => Verdict::Data,
        Err(failure) => Verdict::Fatal(failure.message),
    }
}

/// Eight lower-case letters and digits: a Kubernetes name may have nothing else.
fn random_suffix() -> String {
    let hash = blake3::hash(format!("{:?}{}", Instant::now(), std::process::id()).as_bytes());
    hash.to_hex().chars().take(8).collect()
}

/// The driver's own lines for the view's log, beside the runner's; also
/// on trellis's log, under the view's span (`materialize --verbose`).
#[derive(Clone, Default)]
struct Log {
    lines: Arc<Mutex<Vec<LogLine>>>,
}

/// The most lines one job keeps: the view's log keeps a bounded part anyway.
const MAX_LINES: usize = 1000;

impl Log {
    fn push(&self, level: &'static str, message: String) {
        match level {
            "error" | "warn" => tracing::warn!(target: "trellis::plugin", "{message}"),
            _ => tracing::info!(target: "trellis::plugin", "{message}"),
        }
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() < MAX_LINES {
            lines.push(LogLine { level, message });
        }
    }

    fn take(&self) -> Vec<LogLine> {
        std::mem::take(&mut *self.lines.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Readers of spark-submit's output, each line captured and logged.
fn read_streams(
    child: &mut tokio::process::Child,
    log: &Log,
    streams: &(Arc<Mutex<Bounded>>, Arc<Mutex<Bounded>>),
) -> [Option<tokio::task::JoinHandle<()>>; 2] {
    fn reader(
        stream: Option<impl tokio::io::AsyncRead + Unpin + Send + 'static>,
        into: &Arc<Mutex<Bounded>>,
        log: &Log,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let log = log.clone();
        let into = into.clone();
        stream.map(|out| {
            tokio::spawn(submit::capture(out, into, move |line| log.push("info", line.to_string())).in_current_span())
        })
    }
    [reader(child.stdout.take(), &streams.0, log), reader(child.stderr.take(), &streams.1, log)]
}

/// How a job that ended `exit` went: its counters from the event log
/// (`seen`), the runner's result and the last line it wrote; its output
/// checked, when it has data.
fn conclude(
    submission: &Submission,
    scratch: &Scratch,
    exit: Exit,
    seen: &Progress,
    streams: &(Arc<Mutex<Bounded>>, Arc<Mutex<Bounded>>),
    counters: &mut Vec<(String, u64)>,
) -> Verdict {
    if seen.application.is_some() {
        counters.extend([
            ("rows_in".to_string(), seen.records_read),
            ("rows_out".to_string(), seen.records_written),
            ("bytes_out".to_string(), seen.bytes_written),
        ]);
    }
    let result = scratch::result(scratch);
    let last_line = streams.1.lock().unwrap_or_else(|p| p.into_inner()).last_line();
    let verdict = match outcome::verdict(exit, result.as_ref(), &last_line, seen.application.is_some()) {
        Verdict::Retryable(_) if exit == Exit::DeadlinePassed => Verdict::Timeout(format!(
            "the deadline of {} passed; the job was stopped",
            humantime::format_duration(submission.deadline)
        )),
        other => other,
    };
    match verdict {
        Verdict::Data => publishable(scratch, &submission.staging, submission.output_limit),
        Verdict::NoData => Verdict::NoData,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn executable(path: &Path, script: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, script).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A server that refused a run for a missing Spark sees it once it is
    /// installed, without a reload; once found, it is not looked for again.
    #[test]
    fn a_missing_spark_is_looked_for_again_and_a_found_one_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("spark");
        let jdk = dir.path().join("jdk");
        executable(&jdk.join("bin/java"), "#!/bin/sh\necho 'openjdk version \"17.0.15\" 2025-04-15' >&2\n");
        let settings = SparkSettings {
            spark_home: Some(home.clone()),
            env: vec![("JAVA_HOME".into(), jdk.display().to_string())],
            ..SparkSettings::default()
        };
        let spark = Spark::new(settings, None, MemoryBudget::new(1 << 30));

        let missing = spark.locate().unwrap_err();
        assert_eq!(missing, format!("engines.spark.spark_home {} has no bin/spark-submit", home.display()));

        executable(&home.join("bin/spark-submit"), "#!/bin/sh\n");
        let found = spark.locate().unwrap().clone();
        assert_eq!((found.spark_home.as_path(), found.found_by), (home.as_path(), "engines.spark.spark_home"));
        assert_eq!(found.java_version, "17.0.15");

        std::fs::remove_dir_all(&home).unwrap();
        assert_eq!(spark.locate().unwrap(), &found, "a found Spark is kept until the project is loaded again");
    }
}
