//! The checksum world's call: a version checksum computed in a sandbox with
//! a fixed clock, fixed random numbers and no grants.

use wasmtime::Store;

use super::bindings::checksum::Checksum as ChecksumBindings;
use super::failure::{Phase, run};
use super::plugin::Pre;
use super::sandbox::Sandbox;
use super::{CallReport, Error, Failure, FailureKind, Plugin, World, bindings};

/// Input of a checksum call.
#[derive(Debug, Clone, Default)]
pub struct ChecksumRequest {
    pub transformation: String,
    pub config: Vec<(String, String)>,
    pub resources: Vec<(String, Vec<u8>)>,
}

impl Plugin {
    /// Computes a version checksum, with a fixed clock, fixed random numbers
    /// and no grants, so that it can only depend on its input.
    pub async fn checksum(&self, request: &ChecksumRequest) -> Result<CallReport<String>, Error> {
        use bindings::checksum::exports::trellis::plugin::version_checksum as wit;
        let Pre::Checksum(pre) = &self.inner.pre else {
            return Err(self.wrong_world(World::Checksum));
        };
        let input = wit::ChecksumInput {
            transformation: request.transformation.clone(),
            config: request.config.clone(),
            resources: request
                .resources
                .iter()
                .map(|(name, content)| wit::NamedResource { name: name.clone(), content: content.clone() })
                .collect(),
        };
        let mut store = self.store(&[], true).await?;
        let call = async |store: &mut Store<Sandbox>| {
            let instance: ChecksumBindings = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
            instance.trellis_plugin_version_checksum().call_checksum(&mut *store, &input).await.map_err(Phase::Call)
        };
        let report = run(&mut store, self.limits, call, |returned| {
            returned.map_err(|message| Failure::new(FailureKind::Fatal, message))
        });
        Ok(report.await)
    }
}
