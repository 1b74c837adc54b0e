//! The `describe` call, which every world offers, and what it returns: a
//! plugin's name, version and configuration keys, against which a
//! configuration is checked.

use wasmtime::Store;

use super::failure::{Phase, run};
use super::plugin::Pre;
use super::sandbox::Sandbox;
use super::{CallReport, Error, Plugin, bindings};

/// What `describe` says of a plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub description: String,
    pub config: Vec<ConfigKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigKey {
    pub name: String,
    pub required: bool,
    pub description: String,
}

impl PluginInfo {
    /// Checks `config` against the declared keys: every required key is
    /// present and no key is unknown. The message names the first offender
    /// and, for an unknown key, the keys that exist.
    pub fn check_config(&self, config: &[(String, String)]) -> Result<(), String> {
        for (key, _) in config {
            if !self.config.iter().any(|known| &known.name == key) {
                let known: Vec<&str> = self.config.iter().map(|k| k.name.as_str()).collect();
                return Err(format!(
                    "{} has no configuration key `{key}` (it knows: {})",
                    self.name,
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ));
            }
        }
        if let Some(missing) = self.config.iter().find(|k| k.required && !config.iter().any(|(key, _)| key == &k.name))
        {
            return Err(format!("{} needs configuration key `{}`: {}", self.name, missing.name, missing.description));
        }
        Ok(())
    }
}

impl From<bindings::PluginInfo> for PluginInfo {
    fn from(info: bindings::PluginInfo) -> Self {
        PluginInfo {
            name: info.name,
            version: info.version,
            description: info.description,
            config: info.config.into_iter().map(ConfigKey::from).collect(),
        }
    }
}

impl From<bindings::ConfigKey> for ConfigKey {
    fn from(key: bindings::ConfigKey) -> Self {
        ConfigKey { name: key.name, required: key.required, description: key.description }
    }
}

impl Plugin {
    /// Calls `describe`, under the world's limits, with no grants.
    pub async fn describe(&self) -> Result<CallReport<PluginInfo>, Error> {
        let mut store = self.store(&[], true).await?;
        let call = async |store: &mut Store<Sandbox>| {
            match &self.inner.pre {
                Pre::Transformation(pre, _) => {
                    let instance = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
                    instance.trellis_plugin_transform().call_describe(&mut *store).await
                }
                Pre::Engine(pre) => {
                    let instance = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
                    instance.trellis_plugin_engine_job().call_describe(&mut *store).await
                }
                Pre::Checksum(pre) => {
                    let instance = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
                    instance.trellis_plugin_version_checksum().call_describe(&mut *store).await
                }
                Pre::Listener(pre) => {
                    let instance = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
                    instance.trellis_plugin_events().call_describe(&mut *store).await
                }
            }
            .map_err(Phase::Call)
        };
        Ok(run(&mut store, self.limits, call, |info| Ok(PluginInfo::from(info))).await)
    }
}
