//! A plugin's transform run as a task: into a fresh staging directory,
//! published on data, its log bounded and sent before its end.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{TaskReport, failure_class};
use crate::clock::Clock;
use crate::lattice::ViewId;
use crate::model::{Counters, counters_of};
use crate::runtime::{self, Plugin, TransformOutcome, TransformRequest};
use crate::scheduler::publish::{Receipt, Staging, StagingDir};
use crate::scheduler::transition::FailureClass;
use crate::scheduler::txlog;

/// Where a call's data is published: the staging area it is written in
/// first, the view's data directory, and its done flag there.
pub(super) struct Published {
    pub staging: Arc<Staging>,
    pub data_path: PathBuf,
    pub done_flag: String,
}

/// One transform call, as its task carries it from the loop.
pub(super) struct PluginCall {
    pub plugin: Plugin,
    pub incremental: Option<txlog::Spec>,
    pub published: Published,
    /// What its output carries of the attempt (see `publish`).
    pub receipt: Receipt,
    /// The plugin's name as the project declares it, for its log.
    pub declared: String,
    /// The scheduler's, for the times the call records.
    pub clock: Clock,
}

impl PluginCall {
    /// Runs the call, sends its log: the task's last report.
    pub(super) async fn run(
        mut self,
        request: TransformRequest,
        id: ViewId,
        results: &mpsc::UnboundedSender<TaskReport>,
    ) -> TaskReport {
        let mut printed = None;
        let result = self.transform(request, &mut printed).await;
        if let Some(printed) = printed {
            let outcome = match &result {
                Ok((true, ..)) => "succeeded".to_string(),
                Ok((false, ..)) => "no data".to_string(),
                Err((_, message)) => format!("failed: {message}"),
            };
            let attempt = (self.receipt.run.as_str().into(), self.receipt.attempt);
            let log = attempt_log(&self.declared, attempt, printed, outcome, self.clock.millis());
            let _ = results.send(TaskReport::Logged { view: id, log: Box::new(log) });
        }
        // The timestamp its receipt carries, if it published: the record's.
        let timestamp = match &result {
            Ok((true, ..)) => self.receipt.timestamp,
            _ => self.clock.millis(),
        };
        match result {
            Ok((data, counters, txlog)) => {
                TaskReport::Done { view: id, data, timestamp, counters, txlog: txlog.map(Box::new) }
            }
            Err((class, message)) => TaskReport::Failed { view: id, class, message },
        }
    }
}

/// What one attempt keeps of its log lines, stdout and stderr, each.
const LOG_LINES_BYTES: usize = 32 << 10;
const PRINTED_BYTES: usize = 16 << 10;

/// What a call logged and printed.
pub(in crate::scheduler) struct Printed {
    pub lines: Vec<runtime::LogLine>,
    pub stdout: runtime::Captured,
    pub stderr: runtime::Captured,
}

/// One attempt's log, bounded: the first lines up to their budget, the
/// beginnings of stdout and stderr, the rest counted; `outcome` says how
/// it ended ("succeeded", "no data", "failed: ...").
pub(in crate::scheduler) fn attempt_log(
    plugin: &str,
    (run, attempt): (Arc<str>, u32),
    printed: Printed,
    outcome: String,
    time: i64,
) -> crate::metastore::AttemptLog {
    let mut truncated = printed.stdout.truncated_bytes + printed.stderr.truncated_bytes;
    let mut budget = LOG_LINES_BYTES;
    let mut lines = Vec::new();
    for line in printed.lines {
        if line.message.len() > budget {
            truncated += line.message.len() as u64;
            budget = 0;
            continue;
        }
        budget -= line.message.len();
        lines.push(crate::metastore::LoggedLine { level: line.level.to_string(), message: line.message });
    }
    let mut cut = |mut text: String| {
        if text.len() > PRINTED_BYTES {
            let mut end = PRINTED_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            truncated += (text.len() - end) as u64;
            text.truncate(end);
        }
        text
    };
    let (stdout, stderr) = (cut(printed.stdout.text), cut(printed.stderr.text));
    crate::metastore::AttemptLog {
        run: run.to_string(),
        attempt,
        time,
        plugin: plugin.to_string(),
        outcome,
        lines,
        stdout,
        stderr,
        truncated_bytes: truncated,
    }
}

/// What a transformation left: whether it has data, its counters, and an
/// incremental view's commit.
type Produced = (bool, Option<Counters>, Option<txlog::Marker>);

impl PluginCall {
    /// Runs one transformation into a fresh staging directory and publishes
    /// it on data; any failure leaves the previous data untouched. An
    /// incremental view's call gets what changed since its last commit, and
    /// its marker is published with its data (see `txlog`).
    async fn transform(
        &mut self,
        mut request: TransformRequest,
        printed: &mut Option<Printed>,
    ) -> Result<Produced, (FailureClass, String)> {
        // The commit's time: when its transformation began, by the scheduler's
        // clock, as every time trellis records (not the request's actual time,
        // which for a coordinator's action is when the action was created).
        let committed_at = self.clock.millis();
        let staging = self.published.staging.clone();
        // Staging and publishing are the host's own I/O: trouble there is not
        // the view's fault, and is retried until it passes. However the call
        // ends (an abort included), the directory goes unless published.
        let dir = staging
            .create_for(&self.published.data_path)
            .map_err(|e| (FailureClass::Host, format!("cannot create a staging directory: {e}")))?;
        request.output_dir = dir.path().to_path_buf();
        let mut prepared = match self.incremental.take() {
            Some(spec) => match prepare(&staging, spec).await {
                Ok(prepared) => Some(prepared),
                Err(message) => {
                    staging.discard(dir);
                    return Err((FailureClass::Host, message));
                }
            },
            None => None,
        };
        // Inputs read as local directories: an object store's fetched into
        // its cache, held there until the call returns.
        let mut dirs: Vec<PathBuf> = request.inputs.iter().map(|input| input.dir.clone()).collect();
        let previous = prepared.as_mut().and_then(|(_, prepared)| prepared.increment.previous_output.as_mut());
        dirs.extend(previous.as_deref().cloned());
        let local = match super::local_inputs(staging.shared(), dirs).await {
            Ok(local) => local,
            Err(message) => {
                staging.discard(dir);
                return Err((FailureClass::Host, message));
            }
        };
        for (input, local) in request.inputs.iter_mut().zip(&local) {
            input.dir = local.path().to_path_buf();
        }
        if let (Some(previous), Some(local)) = (previous, local.get(request.inputs.len())) {
            *previous = local.path().to_path_buf();
        }
        let called = match &prepared {
            Some((_, prepared)) => self.plugin.transform_incremental(&request, &prepared.increment).await,
            None => self
                .plugin
                .transform(&request)
                .await
                .map(|report| report.map(|outcome| runtime::IncrementalOutcome { outcome, commits: Vec::new() })),
        };
        super::release(local);
        let mut report = match called {
            Ok(report) => report,
            Err(e) => {
                staging.discard(dir);
                // The host refused the call (its memory cap over the whole
                // budget, a grant it cannot make): the same every time.
                return Err((FailureClass::Fatal, e.to_string()));
            }
        };
        *printed = Some(Printed {
            lines: std::mem::take(&mut report.log),
            stdout: std::mem::take(&mut report.stdout),
            stderr: std::mem::take(&mut report.stderr),
        });
        match report.result {
            Ok(runtime::IncrementalOutcome { outcome: TransformOutcome::Data { counters }, commits }) => {
                self.publish(dir, prepared, &commits, &counters, committed_at)
            }
            Ok(runtime::IncrementalOutcome { outcome: TransformOutcome::NoData, .. }) => {
                staging.discard(dir);
                Ok((false, None, None))
            }
            Err(failure) => {
                staging.discard(dir);
                Err((failure_class(&failure), format!("{} ({:?})", failure.message, failure.kind)))
            }
        }
    }

    /// Publishes the call's output in `dir`, with an incremental view's
    /// commit written into the output it describes.
    fn publish(
        &mut self,
        dir: StagingDir,
        prepared: Option<(txlog::Spec, txlog::Prepared)>,
        commits: &[(String, String)],
        counters: &[(String, u64)],
        committed_at: i64,
    ) -> Result<Produced, (FailureClass, String)> {
        let Published { staging, data_path, done_flag } = &self.published;
        let marker = match prepared {
            Some((spec, prepared)) => match txlog::write_marker(&spec, prepared, commits, &dir, committed_at) {
                Ok(marker) => Some(marker),
                Err(e) => {
                    staging.discard(dir);
                    return Err((FailureClass::Host, format!("cannot write {}: {e}", txlog::MARKER)));
                }
            },
            None => None,
        };
        // No counters returned is none to keep, not an empty set.
        let counters = (!counters.is_empty()).then(|| counters_of(counters));
        self.receipt.counters = counters.clone();
        self.receipt.timestamp = self.receipt.timestamp.max(self.clock.millis());
        match staging.publish(dir, data_path, done_flag, &mut self.receipt) {
            Ok(()) => Ok((true, counters, marker)),
            Err(e) => Err(super::publish_failed(data_path, &e)),
        }
    }
}

/// An incremental view's manifest check, off the loop's thread.
async fn prepare(staging: &Staging, spec: txlog::Spec) -> Result<(txlog::Spec, txlog::Prepared), String> {
    let storage = staging.shared();
    tokio::task::spawn_blocking(move || txlog::prepare(&*storage, &spec).map(|prepared| (spec, prepared)))
        .await
        .map_err(|e| format!("the manifest check stopped: {e}"))
        .and_then(|checked| checked.map_err(|e| format!("cannot list an input for the manifest check: {e}")))
}
