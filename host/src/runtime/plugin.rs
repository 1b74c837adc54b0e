//! A loaded plugin: the world it was built for, found from its exports, its
//! pre-instantiated component, and the limits its calls run under. The
//! calls themselves are in the files of each world.

use std::sync::Arc;

use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};

use super::bindings::checksum::ChecksumPre;
use super::bindings::engine::EngineTransformationPre;
use super::bindings::incremental::IncrementalTransformationPre;
use super::bindings::listener::ListenerPre;
use super::bindings::transformation::TransformationPre;
use super::budget::MemoryBudget;
use super::sandbox::{Grant, Sandbox};
use super::stamp::Stamp;
use super::{Error, Limits, Provenance};

/// The kind of plugin, after the world it was built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    Transformation,
    /// A transformation whose views an engine computes from the job the
    /// plugin describes (contract 1.2.0).
    Engine,
    Checksum,
    Listener,
}

impl World {
    const ALL: [World; 4] = [World::Transformation, World::Engine, World::Checksum, World::Listener];

    /// The interface a plugin of this world exports. wasmtime matches
    /// names by semver, so a plugin built against 1.0.0 is found too.
    fn export(self) -> &'static str {
        match self {
            World::Transformation => "trellis:plugin/transform@1.2.0",
            World::Engine => "trellis:plugin/engine-job@1.2.0",
            World::Checksum => "trellis:plugin/version-checksum@1.2.0",
            World::Listener => "trellis:plugin/events@1.2.0",
        }
    }

    /// Whether a plugin of this world can be a view type's
    /// `transformation`: it computes views, or describes how an engine does.
    pub fn transforms(self) -> bool {
        matches!(self, World::Transformation | World::Engine)
    }

    /// The world's name with its article, for messages: "a checksum", "an
    /// engine transformation".
    pub fn with_article(self) -> String {
        match self {
            World::Engine => format!("an {self}"),
            _ => format!("a {self}"),
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            World::Transformation => "transformation",
            World::Engine => "engine transformation",
            World::Checksum => "checksum",
            World::Listener => "listener",
        })
    }
}

fn exports_of_worlds() -> String {
    World::ALL.iter().map(|w| w.export()).collect::<Vec<_>>().join(", ")
}

/// What a transformation plugin that can run incrementally exports as well.
const INCREMENTAL_EXPORT: &str = "trellis:plugin/transform-incremental@1.2.0";

pub(super) enum Pre {
    /// With the incremental entry point, when the plugin exports it.
    Transformation(TransformationPre<Sandbox>, Option<IncrementalTransformationPre<Sandbox>>),
    Engine(EngineTransformationPre<Sandbox>),
    Checksum(ChecksumPre<Sandbox>),
    Listener(ListenerPre<Sandbox>),
}

/// A loaded, pre-instantiated plugin. Cheap to clone; calls may run
/// concurrently, each in its own store.
#[derive(Clone)]
pub struct Plugin {
    pub(super) inner: Arc<PluginInner>,
    pub(super) limits: Limits,
}

pub(super) struct PluginInner {
    name: Arc<str>,
    content_hash: blake3::Hash,
    stamp: Option<Stamp>,
    world: World,
    exports: Vec<String>,
    provenance: Provenance,
    pub(super) pre: Pre,
    engine: Engine,
    stores: Arc<tokio::sync::Semaphore>,
    budget: MemoryBudget,
}

impl Plugin {
    /// Finds the world of a compiled component and pre-instantiates it,
    /// which checks every import and export once so that calls cannot fail
    /// on linking.
    #[allow(clippy::too_many_arguments, reason = "the runtime's parts a plugin keeps, each passed once")]
    pub(super) fn new(
        name: &str,
        content_hash: blake3::Hash,
        stamp: Option<Stamp>,
        provenance: Provenance,
        component: &Component,
        linker: &Linker<Sandbox>,
        engine: &Engine,
        stores: &Arc<tokio::sync::Semaphore>,
        budget: &MemoryBudget,
    ) -> Result<Plugin, Error> {
        let not_a_plugin = |reason: String| Error::NotAPlugin { name: name.to_string(), reason };
        let worlds: Vec<World> =
            World::ALL.into_iter().filter(|world| component.get_export_index(None, world.export()).is_some()).collect();
        let world = match worlds.as_slice() {
            [world] => *world,
            [] => return Err(not_a_plugin(format!("it exports none of {}", exports_of_worlds()))),
            _ => return Err(not_a_plugin("it exports more than one plugin interface".to_string())),
        };
        let pre = linker.instantiate_pre(component).map_err(|e| not_a_plugin(format!("{e:#}")))?;
        let pre = match world {
            World::Transformation => {
                let incremental = match component.get_export_index(None, INCREMENTAL_EXPORT) {
                    Some(_) => Some(
                        IncrementalTransformationPre::new(pre.clone()).map_err(|e| not_a_plugin(format!("{e:#}")))?,
                    ),
                    None => None,
                };
                TransformationPre::new(pre).map(|pre| Pre::Transformation(pre, incremental))
            }
            World::Engine => EngineTransformationPre::new(pre).map(Pre::Engine),
            World::Checksum => ChecksumPre::new(pre).map(Pre::Checksum),
            World::Listener => ListenerPre::new(pre).map(Pre::Listener),
        }
        .map_err(|e| not_a_plugin(format!("{e:#}")))?;

        let exports = component.component_type().exports(engine).map(|(name, _)| name.to_string()).collect();
        Ok(Plugin {
            inner: Arc::new(PluginInner {
                name: name.into(),
                content_hash,
                stamp,
                world,
                exports,
                provenance,
                pre,
                engine: engine.clone(),
                stores: stores.clone(),
                budget: budget.clone(),
            }),
            limits: Limits::default_for(world),
        })
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn world(&self) -> World {
        self.inner.world
    }

    /// Whether it exports `transform-incremental` (contract 1.1.0).
    pub fn is_incremental(&self) -> bool {
        matches!(self.inner.pre, Pre::Transformation(_, Some(_)))
    }

    /// blake3 of the component's bytes.
    pub fn content_hash(&self) -> String {
        self.inner.content_hash.to_hex().to_string()
    }

    /// What a view's default version checksum covers of this plugin: the
    /// sources it was built from, where its build stamped them (a Python
    /// build's bytes differ every time), else its bytes.
    pub fn logic_hash(&self) -> String {
        match &self.inner.stamp {
            Some(stamp) => format!("{}-sources:{}", stamp.language, stamp.sources),
            None => self.content_hash(),
        }
    }

    /// The build stamp, for a component built from sources by `trellis plugins build`.
    pub fn stamp(&self) -> Option<&Stamp> {
        self.inner.stamp.as_ref()
    }

    /// The component's export names.
    pub fn exports(&self) -> &[String] {
        &self.inner.exports
    }

    pub fn provenance(&self) -> Provenance {
        self.inner.provenance
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// This plugin with other limits, e.g. from the project configuration.
    /// Deadlines are clamped to a week and memory to 4 GiB.
    pub fn with_limits(&self, limits: Limits) -> Plugin {
        Plugin { inner: self.inner.clone(), limits: limits.clamped() }
    }

    /// The memory budget this plugin's stores reserve their cap from.
    pub fn memory_budget(&self) -> &MemoryBudget {
        &self.inner.budget
    }

    /// A fresh store, once its memory cap is reserved from the budget and
    /// a store slot is free. The reservation comes first, so that calls
    /// waiting for memory hold no slot.
    pub(super) async fn store(&self, grants: &[Grant], deterministic: bool) -> Result<Store<Sandbox>, Error> {
        let limits = self.limits.clamped();
        let memory = self.inner.budget.reserve(self.name(), limits.memory).await?;
        let slot =
            self.inner.stores.clone().acquire_owned().await.map_err(|_| Error::Engine("runtime shut down".into()))?;
        Sandbox::store(&self.inner.engine, self.inner.name.clone(), grants, self.limits, deterministic, slot, memory)
    }

    pub(super) fn wrong_world(&self, expected: World) -> Error {
        Error::WrongWorld { name: self.name().to_string(), expected, actual: self.world() }
    }
}
