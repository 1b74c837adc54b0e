//! The transformation world's call: the request as the host sees it (host
//! directories), its translation to guest paths under the call's grants,
//! the output watched while it runs, and the outcome once the output has
//! been checked.

use std::path::PathBuf;

use wasmtime::Store;

use super::failure::{Phase, run};
use super::output::{OutputLimit, check_counters, check_output, watch_output};
use super::plugin::Pre;
use super::sandbox::{GUEST_OUTPUT, Grant, Sandbox, check_no_overlap, guest_input};
use super::{CallReport, Error, Failure, FailureKind, Plugin, World, bindings};

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

impl Plugin {
    /// Runs a transformation: inputs granted read-only at `/inputs/<n>`,
    /// the output directory read-write at `/output`, nothing else. The
    /// output is measured while the call runs, which is stopped once it is
    /// over its limit, and checked exactly when the call returns.
    pub async fn transform(&self, request: &TransformRequest) -> Result<CallReport<TransformOutcome>, Error> {
        use bindings::transformation::exports::trellis::plugin::transform as wit;
        let Pre::Transformation(pre) = &self.inner.pre else {
            return Err(self.wrong_world(World::Transformation));
        };
        let mut grants: Vec<Grant> = request
            .inputs
            .iter()
            .enumerate()
            .map(|(index, input)| Grant { host: input.dir.clone(), guest: guest_input(index), writable: false })
            .collect();
        grants.push(Grant { host: request.output_dir.clone(), guest: GUEST_OUTPUT.into(), writable: true });
        check_no_overlap(&grants)?;
        let wit_request = wit::Request {
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
        };

        let mut store = self.store(&grants, false).await?;
        let call = async |store: &mut Store<Sandbox>| {
            let calling = async {
                let instance = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
                instance.trellis_plugin_transform().call_run(&mut *store, &wit_request).await.map_err(Phase::Call)
            };
            tokio::select! {
                returned = calling => returned,
                over = watch_output(request.output_dir.clone(), request.output_limit) => Err(Phase::Stopped(over)),
            }
        };
        let report = run(&mut store, self.limits, call, |returned| match returned {
            Ok(wit::Outcome::Data(counters)) => {
                check_counters(&counters)?;
                check_output(&request.output_dir, request.output_limit)?;
                Ok(TransformOutcome::Data { counters })
            }
            Ok(wit::Outcome::NoData) => Ok(TransformOutcome::NoData),
            Err(wit::Failure::Retryable(message)) => Err(Failure::new(FailureKind::Retryable, message)),
            Err(wit::Failure::Fatal(message)) => Err(Failure::new(FailureKind::Fatal, message)),
        });
        Ok(report.await)
    }
}
