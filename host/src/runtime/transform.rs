//! The transformation world's call: the request as the host sees it (host
//! directories), its translation to guest paths under the call's grants,
//! the output watched while it runs, and the outcome once the output has
//! been checked; the incremental call (contract 1.1.0) goes the same way
//! with what changed per input and the previous output.

use std::path::PathBuf;

use wasmtime::Store;

use super::failure::{Phase, run};
use super::output::{OutputLimit, check_counters, check_output, watch_output};
use super::plugin::Pre;
use super::sandbox::{GUEST_OUTPUT, GUEST_PREVIOUS, Grant, Sandbox, check_no_overlap, guest_input};
use super::{CallReport, Error, Failure, FailureKind, Plugin, World, bindings};
use bindings::incremental::exports::trellis::plugin::transform_incremental as incremental;
use bindings::transformation::exports::trellis::plugin::transform as wit;

/// What a transformation produced.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum TransformOutcome {
    Data { counters: Vec<(String, u64)> },
    NoData,
}

/// One input of a transformation call, on the host side.
#[derive(Debug, Clone)]
pub struct TransformInput {
    pub name: String,
    pub view: String,
    /// Host directory; granted read-only.
    pub dir: PathBuf,
    /// Milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    pub changed: bool,
}

/// A transformation call, on the host side: directories are host paths and
/// the runtime decides where the guest sees them.
#[derive(Debug, Clone)]
pub struct TransformRequest {
    pub view: String,
    pub parameters: Vec<(String, String)>,
    pub nominal_time: Option<i64>,
    pub actual_time: i64,
    pub config: Vec<(String, String)>,
    pub inputs: Vec<TransformInput>,
    /// Host directory, granted read-write: the staging output.
    pub output_dir: PathBuf,
    /// What the call may leave in `output_dir`.
    pub output_limit: OutputLimit,
}

/// What an incremental call adds to a [`TransformRequest`] (contract
/// 1.1.0): per input what changed since the last commit, and the view's
/// previous output.
#[derive(Debug, Clone, Default)]
pub struct Increment {
    /// One per input of the request, in its order.
    pub deltas: Vec<InputDelta>,
    /// Host directory of the previously published output, granted
    /// read-only; none on a full run.
    pub previous_output: Option<PathBuf>,
    pub full_reason: Option<String>,
    pub removed_inputs: Vec<String>,
}

/// What changed in one input, relative paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputDelta {
    pub incremental: bool,
    pub last_commit: Option<String>,
    pub new_files: Vec<String>,
    pub changed_files: Vec<String>,
    pub removed_files: Vec<String>,
}

/// What an incremental call returned: its outcome and the plugin's own
/// offsets, by input view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalOutcome {
    pub outcome: TransformOutcome,
    pub commits: Vec<(String, String)>,
}

impl Plugin {
    /// Runs a transformation: inputs granted read-only at `/inputs/<n>`,
    /// the output directory read-write at `/output`, nothing else. The
    /// output is measured while the call runs, which is stopped once it is
    /// over its limit, and checked exactly when the call returns.
    pub async fn transform(&self, request: &TransformRequest) -> Result<CallReport<TransformOutcome>, Error> {
        let report = self.call_transform(request, None).await?;
        Ok(report.map(|done| done.outcome))
    }

    /// Runs a transformation through `transform-incremental`, as
    /// [`Plugin::transform`] does, with the previous output granted
    /// read-only at `/previous`. A plugin that does not export it is
    /// refused with [`Error::WrongWorld`]; see [`Plugin::is_incremental`].
    pub async fn transform_incremental(
        &self,
        request: &TransformRequest,
        increment: &Increment,
    ) -> Result<CallReport<IncrementalOutcome>, Error> {
        self.call_transform(request, Some(increment)).await
    }

    async fn call_transform(
        &self,
        request: &TransformRequest,
        increment: Option<&Increment>,
    ) -> Result<CallReport<IncrementalOutcome>, Error> {
        let (pre, incremental_pre) = match (&self.inner.pre, increment) {
            (Pre::Transformation(pre, _), None) => (pre, None),
            (Pre::Transformation(pre, Some(incremental_pre)), Some(_)) => (pre, Some(incremental_pre)),
            _ => return Err(self.wrong_world(World::Transformation)),
        };
        let grants = grants(request, increment);
        check_no_overlap(&grants)?;
        let wit_request = guest_request(request);
        let incremental_request = increment.map(|increment| incremental_request(&wit_request, increment));

        let mut store = self.store(&grants, false).await?;
        let call = async |store: &mut Store<Sandbox>| {
            let calling = async {
                match (incremental_pre, &incremental_request) {
                    (Some(incremental_pre), Some(incremental_request)) => {
                        let instance =
                            incremental_pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
                        let returned = instance
                            .trellis_plugin_transform_incremental()
                            .call_run(&mut *store, incremental_request)
                            .await
                            .map_err(Phase::Call)?;
                        Ok(from_incremental(returned))
                    }
                    _ => {
                        let instance = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
                        let returned = instance
                            .trellis_plugin_transform()
                            .call_run(&mut *store, &wit_request)
                            .await
                            .map_err(Phase::Call)?;
                        Ok(returned.map(|outcome| (outcome, Vec::new())))
                    }
                }
            };
            tokio::select! {
                returned = calling => returned,
                over = watch_output(request.output_dir.clone(), request.output_limit) => Err(Phase::Stopped(over)),
            }
        };
        let report = run(&mut store, self.limits, call, |returned| judge(returned, request));
        Ok(report.await)
    }
}

/// What the guest's returned value means once the output has been checked.
fn judge(
    returned: Result<(wit::Outcome, Vec<(String, String)>), wit::Failure>,
    request: &TransformRequest,
) -> Result<IncrementalOutcome, Failure> {
    match returned {
        Ok((wit::Outcome::Data(counters), commits)) => {
            check_counters(&counters)?;
            check_commits(&commits, request)?;
            check_output(&request.output_dir, request.output_limit)?;
            Ok(IncrementalOutcome { outcome: TransformOutcome::Data { counters }, commits })
        }
        Ok((wit::Outcome::NoData, commits)) => {
            check_commits(&commits, request)?;
            Ok(IncrementalOutcome { outcome: TransformOutcome::NoData, commits })
        }
        Err(wit::Failure::Retryable(message)) => Err(Failure::new(FailureKind::Retryable, message)),
        Err(wit::Failure::Fatal(message)) => Err(Failure::new(FailureKind::Fatal, message)),
    }
}

/// The call's directories: each input read-only, the output read-write,
/// and on an incremental run the previous output read-only.
fn grants(request: &TransformRequest, increment: Option<&Increment>) -> Vec<Grant> {
    let mut grants: Vec<Grant> = request
        .inputs
        .iter()
        .enumerate()
        .map(|(index, input)| Grant { host: input.dir.clone(), guest: guest_input(index), writable: false })
        .collect();
    grants.push(Grant { host: request.output_dir.clone(), guest: GUEST_OUTPUT.into(), writable: true });
    if let Some(previous) = increment.and_then(|i| i.previous_output.as_ref()) {
        grants.push(Grant { host: previous.clone(), guest: GUEST_PREVIOUS.into(), writable: false });
    }
    grants
}

/// The request as the guest sees it: host directories become guest paths.
fn guest_request(request: &TransformRequest) -> wit::Request {
    wit::Request {
        view: request.view.clone(),
        parameters: request.parameters.clone(),
        nominal_time: request.nominal_time,
        actual_time: request.actual_time,
        config: request.config.clone(),
        inputs: request
            .inputs
            .iter()
            .enumerate()
            .map(|(index, input)| wit::Input {
                name: input.name.clone(),
                view: input.view.clone(),
                path: guest_input(index),
                timestamp: input.timestamp,
                changed: input.changed,
            })
            .collect(),
        output: GUEST_OUTPUT.into(),
    }
}

/// The guest's request with what an incremental call adds: per input what
/// changed, and where the previous output is.
fn incremental_request(wit_request: &wit::Request, increment: &Increment) -> incremental::Request {
    incremental::Request {
        view: wit_request.view.clone(),
        parameters: wit_request.parameters.clone(),
        nominal_time: wit_request.nominal_time,
        actual_time: wit_request.actual_time,
        config: wit_request.config.clone(),
        inputs: wit_request
            .inputs
            .iter()
            .enumerate()
            .map(|(index, input)| (input, increment.deltas.get(index).cloned().unwrap_or_default()))
            .map(|(input, delta)| incremental::Input {
                name: input.name.clone(),
                view: input.view.clone(),
                path: input.path.clone(),
                timestamp: input.timestamp,
                changed: input.changed,
                incremental: delta.incremental,
                last_commit: delta.last_commit,
                new_files: delta.new_files,
                changed_files: delta.changed_files,
                removed_files: delta.removed_files,
            })
            .collect(),
        output: wit_request.output.clone(),
        previous_output: increment.previous_output.as_ref().map(|_| GUEST_PREVIOUS.to_string()),
        full_reason: increment.full_reason.clone(),
        removed_inputs: increment.removed_inputs.clone(),
    }
}

/// An incremental call's result in the plain call's terms, with its commits.
fn from_incremental(
    returned: Result<incremental::Success, incremental::Failure>,
) -> Result<(wit::Outcome, Vec<(String, String)>), wit::Failure> {
    returned
        .map(|done| {
            let outcome = match done.outcome {
                incremental::Outcome::Data(counters) => wit::Outcome::Data(counters),
                incremental::Outcome::NoData => wit::Outcome::NoData,
            };
            (outcome, done.commits)
        })
        .map_err(|failure| match failure {
            incremental::Failure::Retryable(message) => wit::Failure::Retryable(message),
            incremental::Failure::Fatal(message) => wit::Failure::Fatal(message),
        })
}

/// The longest offset a plugin may commit for one input.
const MAX_COMMIT_ID: usize = 1024;

/// A plugin's offsets name inputs of the request, once each, and are short.
fn check_commits(commits: &[(String, String)], request: &TransformRequest) -> Result<(), Failure> {
    let malformed = |message: String| Err(Failure::new(FailureKind::MalformedResult, message));
    let mut seen = std::collections::HashSet::new();
    for (view, commit) in commits {
        if !request.inputs.iter().any(|input| &input.view == view) {
            return malformed(format!("it returned an offset for `{view}`, which is not one of its inputs"));
        }
        if !seen.insert(view) {
            return malformed(format!("it returned two offsets for `{view}`"));
        }
        if commit.is_empty() || commit.len() > MAX_COMMIT_ID {
            return malformed(format!("its offset for `{view}` is empty or longer than {MAX_COMMIT_ID} bytes"));
        }
    }
    Ok(())
}
