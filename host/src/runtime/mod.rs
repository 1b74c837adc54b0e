//! The plugin runtime: loads WebAssembly components and calls them in a
//! sandbox with a deadline, a memory cap and only the directories a call is
//! granted.
//!
//! Invariants:
//! - This is the only module that knows wasmtime. Nothing it returns is a
//!   wasmtime type; callers see [`Plugin`], requests and [`CallReport`]s.
//! - A plugin's misbehaviour (trap, timeout, memory exhaustion, panic,
//!   malformed result, declared failure) is a [`Failure`] value inside a
//!   report, never an [`Error`] and never a host panic. [`Error`] is for the
//!   host's own problems: unreadable files, non-plugins, bad grants.
//! - Every call gets a fresh store from a pre-instantiated component, so a
//!   poisoned store never outlives its call. Listener instances are the one
//!   exception: they live across events until their first failure.
//! - It knows nothing of views, the lattice or the metastore: a request
//!   carries directories and strings, already resolved.

mod bindings;
mod cache;
mod capture;
mod limits;
mod sandbox;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};

use bindings::checksum::{Checksum as ChecksumBindings, ChecksumPre};
use bindings::listener::{Listener as ListenerBindings, ListenerPre};
use bindings::transformation::TransformationPre;
use sandbox::{Grant, Sandbox};

pub use cache::Provenance;
pub use capture::Captured;
pub use limits::Limits;

/// The scheduling states listeners see.
pub use crate::model::ViewState;

/// How often the engine's epoch advances: the granularity of deadlines and
/// of a running guest's yields to the async executor.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Extra time past the deadline before a call is abandoned from outside,
/// for guests blocked in a host call, where epochs cannot interrupt them.
const GRACE: Duration = Duration::from_millis(500);

/// The guest path of a transformation's output directory.
pub const GUEST_OUTPUT: &str = "/output";
/// The guest path of a listener's own state directory.
pub const GUEST_STATE: &str = "/state";

/// The guest path of a transformation's input number `index`.
pub fn guest_input(index: usize) -> String {
    format!("/inputs/{index}")
}

/// Host-side problems; a plugin failing is not one of them (see [`Failure`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read plugin {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{name} is not a trellis plugin: {reason}")]
    NotAPlugin { name: String, reason: String },
    #[error("{name} is a {actual} plugin, not a {expected} plugin")]
    WrongWorld { name: String, expected: World, actual: World },
    #[error("cannot grant {} to the plugin: {reason}", path.display())]
    Grant { path: PathBuf, reason: String },
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(String),
}

/// The kind of plugin, after the world it was built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    Transformation,
    Checksum,
    Listener,
}

impl World {
    const ALL: [World; 3] = [World::Transformation, World::Checksum, World::Listener];

    /// The interface a plugin of this world exports.
    fn export(self) -> &'static str {
        match self {
            World::Transformation => "trellis:plugin/transform@1.0.0",
            World::Checksum => "trellis:plugin/version-checksum@1.0.0",
            World::Listener => "trellis:plugin/events@1.0.0",
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            World::Transformation => "transformation",
            World::Checksum => "checksum",
            World::Listener => "listener",
        })
    }
}

/// Settings of the runtime as a whole.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Where compiled components are cached across processes; `None` keeps
    /// them in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Use wasmtime's pooling allocator (falls back to on-demand allocation
    /// where it cannot reserve its address space; `TRELLIS_NO_POOLING`
    /// turns it off).
    pub pooling: bool,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions { cache_dir: None, pooling: true }
    }
}

/// The one engine of the process, with its linker, compile cache and epoch
/// ticker. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

struct RuntimeInner {
    engine: Engine,
    linker: Linker<Sandbox>,
    cache: cache::CompileCache,
    /// One permit per live store, so that calls wait for a pool slot
    /// instead of failing to instantiate when the pool is full.
    stores: Arc<tokio::sync::Semaphore>,
}

/// How many stores may be alive at once: concurrent calls plus running
/// listener instances. The pooling allocator reserves this many slots.
pub const POOL_SLOTS: u32 = 128;

fn engine_config(pooling: bool) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    // Checksums must be reproducible across machines.
    config.cranelift_nan_canonicalization(true);
    config.relaxed_simd_deterministic(true);
    // Plugins are wasm32; 64-bit memories would only widen the attack surface.
    config.wasm_memory64(false);
    if pooling {
        // A fresh store per call is the isolation model; the pool makes it
        // cheap by reusing memory slots and fiber stacks instead of mapping
        // and unmapping them for every call.
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(POOL_SLOTS)
            .total_stacks(POOL_SLOTS)
            .total_core_instances(POOL_SLOTS * 16)
            .total_memories(POOL_SLOTS * 4)
            .total_tables(POOL_SLOTS * 8)
            .max_memory_size(limits::MAX_MEMORY);
        // No linear_memory_keep_resident: memset-ing a kept megabyte on every
        // reuse costs more than faulting in the few pages a call touches.
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        // Stops the ticker thread, which holds only a weak engine reference.
        self.engine.increment_epoch();
    }
}

impl Runtime {
    pub fn new(options: RuntimeOptions) -> Result<Runtime, Error> {
        let pooling = options.pooling && std::env::var_os("TRELLIS_NO_POOLING").is_none();
        let engine = match pooling.then(|| Engine::new(&engine_config(true))) {
            Some(Ok(engine)) => engine,
            // The pool reserves address space up front; where that fails
            // (small address spaces, strict overcommit), allocate on demand.
            Some(Err(e)) => {
                tracing::warn!("pooling allocator unavailable, allocating on demand: {e}");
                Engine::new(&engine_config(false)).map_err(|e| Error::Engine(e.to_string()))?
            }
            None => Engine::new(&engine_config(false)).map_err(|e| Error::Engine(e.to_string()))?,
        };

        let mut linker = Linker::new(&engine);
        // All of WASI is linked, because a Rust guest's std imports much of
        // it; what WASI may touch is decided per store by its WasiCtx.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| Error::Engine(e.to_string()))?;
        bindings::host::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |sandbox| sandbox)
            .map_err(|e| Error::Engine(e.to_string()))?;

        let weak = engine.weak();
        std::thread::Builder::new()
            .name("trellis-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(|e| Error::Engine(format!("cannot start the epoch ticker: {e}")))?;

        let cache = cache::CompileCache::new(&engine, options.cache_dir.as_deref());
        let stores = Arc::new(tokio::sync::Semaphore::new(POOL_SLOTS as usize));
        Ok(Runtime { inner: Arc::new(RuntimeInner { engine, linker, cache, stores }) })
    }

    /// Loads the plugin in `path`, named after its file stem.
    pub async fn load_file(&self, path: &Path) -> Result<Plugin, Error> {
        let bytes = tokio::fs::read(path).await.map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        self.load(&name, bytes).await.map_err(|error| match error {
            // Name the file, which the user typed, rather than the plugin.
            Error::NotAPlugin { reason, .. } => Error::NotAPlugin { name: path.display().to_string(), reason },
            other => other,
        })
    }

    /// Loads a plugin from its bytes: compiles it (or finds it in the
    /// cache), finds its world and pre-instantiates it, which checks every
    /// import and export once so that calls cannot fail on linking.
    pub async fn load(&self, name: &str, bytes: Vec<u8>) -> Result<Plugin, Error> {
        let content_hash = blake3::hash(&bytes);
        let runtime = self.clone();
        let compiled = tokio::task::spawn_blocking(move || {
            runtime.inner.cache.get_or_compile(&runtime.inner.engine, content_hash, &bytes)
        })
        .await
        .map_err(|e| Error::Engine(format!("compilation task failed: {e}")))?;
        let not_a_plugin = |reason: String| Error::NotAPlugin { name: name.to_string(), reason };
        let (component, provenance) = compiled.map_err(|e| not_a_plugin(format!("{e:#}")))?;

        let worlds: Vec<World> =
            World::ALL.into_iter().filter(|world| component.get_export_index(None, world.export()).is_some()).collect();
        let world = match worlds.as_slice() {
            [world] => *world,
            [] => return Err(not_a_plugin(format!("it exports none of {}", exports_of_worlds()))),
            _ => return Err(not_a_plugin("it exports more than one plugin interface".to_string())),
        };
        let pre = self.inner.linker.instantiate_pre(&component).map_err(|e| not_a_plugin(format!("{e:#}")))?;
        let pre = match world {
            World::Transformation => TransformationPre::new(pre).map(Pre::Transformation),
            World::Checksum => ChecksumPre::new(pre).map(Pre::Checksum),
            World::Listener => ListenerPre::new(pre).map(Pre::Listener),
        }
        .map_err(|e| not_a_plugin(format!("{e:#}")))?;

        let engine = &self.inner.engine;
        let exports = component.component_type().exports(engine).map(|(name, _)| name.to_string()).collect();
        Ok(Plugin {
            inner: Arc::new(PluginInner {
                name: name.into(),
                content_hash,
                world,
                exports,
                provenance,
                pre,
                engine: engine.clone(),
                stores: self.inner.stores.clone(),
            }),
            limits: Limits::default_for(world),
        })
    }
}

fn exports_of_worlds() -> String {
    World::ALL.iter().map(|w| w.export()).collect::<Vec<_>>().join(", ")
}

enum Pre {
    Transformation(TransformationPre<Sandbox>),
    Checksum(ChecksumPre<Sandbox>),
    Listener(ListenerPre<Sandbox>),
}

/// A loaded, pre-instantiated plugin. Cheap to clone; calls may run
/// concurrently, each in its own store.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<PluginInner>,
    limits: Limits,
}

struct PluginInner {
    name: Arc<str>,
    content_hash: blake3::Hash,
    world: World,
    exports: Vec<String>,
    provenance: Provenance,
    pre: Pre,
    engine: Engine,
    stores: Arc<tokio::sync::Semaphore>,
}

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

/// Why a call did not produce a result. A value, not an error: the
/// scheduler decides what to do with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The plugin returned a retryable failure.
    Retryable,
    /// The plugin returned a fatal failure.
    Fatal,
    /// The deadline passed.
    Timeout,
    /// The memory cap was hit.
    MemoryExhausted,
    /// The plugin panicked.
    Panic,
    /// The plugin's stack overflowed.
    StackOverflow,
    /// Any other trap, including aborts and exits.
    Trap,
    /// The plugin returned a value the contract does not allow.
    MalformedResult,
    /// The component could not be instantiated.
    Instantiation,
    /// The plugin was asked for something its world does not offer.
    Unsupported,
}

impl Failure {
    fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure { kind, message: message.into() }
    }

    /// Whether trying again may help: traps and timeouts may be transient,
    /// declared retryable failures are; fatal and malformed results are not.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self.kind,
            FailureKind::Fatal | FailureKind::MalformedResult | FailureKind::Instantiation | FailureKind::Unsupported
        )
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Everything known about one call.
#[derive(Debug, Clone)]
pub struct CallReport<T> {
    pub result: Result<T, Failure>,
    pub elapsed: Duration,
    /// Peak linear memory in bytes, summed over memories.
    pub peak_memory: usize,
    pub stdout: Captured,
    pub stderr: Captured,
}

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
}

/// Input of a checksum call.
#[derive(Debug, Clone, Default)]
pub struct ChecksumRequest {
    pub transformation: String,
    pub config: Vec<(String, String)>,
    pub resources: Vec<(String, Vec<u8>)>,
}

/// A scheduling event as listeners receive it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum ListenerEvent {
    Transition {
        sequence: u64,
        view: String,
        previous: ViewState,
        current: ViewState,
        actions: Vec<String>,
        time: i64,
        run_id: Option<String>,
        error: Option<String>,
    },
    Gap {
        first_sequence: u64,
        last_sequence: u64,
    },
}

/// Which phase of a call failed, for classification.
enum Phase {
    Instantiate(wasmtime::Error),
    Call(wasmtime::Error),
}

impl Plugin {
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn world(&self) -> World {
        self.inner.world
    }

    /// blake3 of the component's bytes.
    pub fn content_hash(&self) -> String {
        self.inner.content_hash.to_hex().to_string()
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

    /// A fresh store, once a store slot is free.
    async fn store(&self, grants: &[Grant], deterministic: bool) -> Result<Store<Sandbox>, Error> {
        let slot =
            self.inner.stores.clone().acquire_owned().await.map_err(|_| Error::Engine("runtime shut down".into()))?;
        Sandbox::store(&self.inner.engine, self.inner.name.clone(), grants, self.limits, deterministic, slot)
    }

    fn wrong_world(&self, expected: World) -> Error {
        Error::WrongWorld { name: self.name().to_string(), expected, actual: self.world() }
    }

    /// Calls `describe`, under the world's limits, with no grants.
    pub async fn describe(&self) -> Result<CallReport<PluginInfo>, Error> {
        let mut store = self.store(&[], true).await?;
        let started = Instant::now();
        let store_ref = &mut store;
        let call = async {
            match &self.inner.pre {
                Pre::Transformation(pre) => {
                    let instance = pre.instantiate_async(&mut *store_ref).await.map_err(Phase::Instantiate)?;
                    instance.trellis_plugin_transform().call_describe(&mut *store_ref).await
                }
                Pre::Checksum(pre) => {
                    let instance = pre.instantiate_async(&mut *store_ref).await.map_err(Phase::Instantiate)?;
                    instance.trellis_plugin_version_checksum().call_describe(&mut *store_ref).await
                }
                Pre::Listener(pre) => {
                    let instance = pre.instantiate_async(&mut *store_ref).await.map_err(Phase::Instantiate)?;
                    instance.trellis_plugin_events().call_describe(&mut *store_ref).await
                }
            }
            .map_err(Phase::Call)
        };
        let result = tokio::time::timeout(self.limits.deadline + GRACE, call).await;
        Ok(report(&store, started, self.limits, result, |info| Ok(PluginInfo::from(info))))
    }

    /// Runs a transformation: inputs granted read-only at `/inputs/<n>`,
    /// the output directory read-write at `/output`, nothing else.
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
        let started = Instant::now();
        let call = async {
            let instance = pre.instantiate_async(&mut store).await.map_err(Phase::Instantiate)?;
            instance.trellis_plugin_transform().call_run(&mut store, &wit_request).await.map_err(Phase::Call)
        };
        let result = tokio::time::timeout(self.limits.deadline + GRACE, call).await;
        Ok(report(&store, started, self.limits, result, |returned| match returned {
            Ok(wit::Outcome::Data(counters)) => {
                check_counters(&counters)?;
                check_plain_files(&request.output_dir)?;
                Ok(TransformOutcome::Data { counters })
            }
            Ok(wit::Outcome::NoData) => Ok(TransformOutcome::NoData),
            Err(wit::Failure::Retryable(message)) => Err(Failure::new(FailureKind::Retryable, message)),
            Err(wit::Failure::Fatal(message)) => Err(Failure::new(FailureKind::Fatal, message)),
        }))
    }

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
        let started = Instant::now();
        let call = async {
            let instance: ChecksumBindings = pre.instantiate_async(&mut store).await.map_err(Phase::Instantiate)?;
            instance.trellis_plugin_version_checksum().call_checksum(&mut store, &input).await.map_err(Phase::Call)
        };
        let result = tokio::time::timeout(self.limits.deadline + GRACE, call).await;
        Ok(report(&store, started, self.limits, result, |returned| {
            returned.map_err(|message| Failure::new(FailureKind::Fatal, message))
        }))
    }

    /// Starts a listener instance with its configuration and, if given, its
    /// own state directory granted read-write at `/state`.
    pub async fn start_listener(
        &self,
        config: &[(String, String)],
        state_dir: Option<&Path>,
    ) -> Result<(ListenerInstance, CallReport<()>), Error> {
        let Pre::Listener(pre) = &self.inner.pre else {
            return Err(self.wrong_world(World::Listener));
        };
        let grants: Vec<Grant> = state_dir
            .map(|dir| Grant { host: dir.to_path_buf(), guest: GUEST_STATE.into(), writable: true })
            .into_iter()
            .collect();
        let mut store = self.store(&grants, false).await?;
        let started = Instant::now();
        let call = async {
            let instance = pre.instantiate_async(&mut store).await.map_err(Phase::Instantiate)?;
            let started =
                instance.trellis_plugin_events().call_start(&mut store, &config.to_vec()).await.map_err(Phase::Call)?;
            Ok((instance, started))
        };
        let result = tokio::time::timeout(self.limits.deadline + GRACE, call).await;
        let mut bindings = None;
        let report = report(&store, started, self.limits, result, |(instance, started)| {
            bindings = Some(instance);
            started.map_err(listener_failure)
        });
        let instance =
            ListenerInstance { plugin: self.clone(), bindings: bindings.filter(|_| report.result.is_ok()), store };
        Ok((instance, report))
    }
}

/// Refuses grants where one directory contains another: an input inside
/// the output would become writable, an output inside an input would let a
/// call change its own inputs.
fn check_no_overlap(grants: &[Grant]) -> Result<(), Error> {
    let resolved: Vec<PathBuf> = grants
        .iter()
        .map(|grant| {
            std::fs::canonicalize(&grant.host)
                .map_err(|e| Error::Grant { path: grant.host.clone(), reason: e.to_string() })
        })
        .collect::<Result<_, _>>()?;
    for (i, a) in resolved.iter().enumerate() {
        for (j, b) in resolved.iter().enumerate() {
            let writable = grants[i].writable || grants[j].writable;
            if i != j && writable && b.starts_with(a) {
                return Err(Error::Grant {
                    path: grants[j].host.clone(),
                    reason: format!("it lies inside {}, and one of them is writable", grants[i].host.display()),
                });
            }
        }
    }
    Ok(())
}

/// Most counters a transformation may report, and the longest name.
const COUNTER_LIMIT: usize = 64;
const COUNTER_NAME_LIMIT: usize = 128;

fn check_counters(counters: &[(String, u64)]) -> Result<(), Failure> {
    if counters.len() > COUNTER_LIMIT {
        return Err(Failure::new(
            FailureKind::MalformedResult,
            format!("malformed result: {} counters, at most {COUNTER_LIMIT} are allowed", counters.len()),
        ));
    }
    if let Some((name, _)) = counters.iter().find(|(name, _)| name.len() > COUNTER_NAME_LIMIT) {
        return Err(Failure::new(
            FailureKind::MalformedResult,
            format!("malformed result: a counter name of {} bytes, at most {COUNTER_NAME_LIMIT}", name.len()),
        ));
    }
    Ok(())
}

/// The output may hold only directories and regular files: a symlink left
/// by the guest would point readers of the published data anywhere.
fn check_plain_files(dir: &Path) -> Result<(), Failure> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Failure::new(FailureKind::Retryable, format!("cannot read the output {}: {e}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(|e| Failure::new(FailureKind::Retryable, format!("cannot read the output: {e}")))?;
        let kind = entry.file_type().map_err(|e| Failure::new(FailureKind::Retryable, e.to_string()))?;
        if kind.is_dir() {
            check_plain_files(&entry.path())?;
        } else if !kind.is_file() {
            return Err(Failure::new(
                FailureKind::MalformedResult,
                format!("the output holds {}, which is not a regular file or directory", entry.path().display()),
            ));
        }
    }
    Ok(())
}

fn listener_failure(error: bindings::listener::exports::trellis::plugin::events::ListenerError) -> Failure {
    use bindings::listener::exports::trellis::plugin::events::ListenerError;
    match error {
        ListenerError::Retryable(message) => Failure::new(FailureKind::Retryable, message),
        ListenerError::Fatal(message) => Failure::new(FailureKind::Fatal, message),
    }
}

/// A started listener. It keeps its store across events; after any failure
/// the instance is dead and every later call fails at once: start a new one.
pub struct ListenerInstance {
    plugin: Plugin,
    bindings: Option<ListenerBindings>,
    store: Store<Sandbox>,
}

impl ListenerInstance {
    /// Whether the instance can still take events.
    pub fn is_alive(&self) -> bool {
        self.bindings.is_some()
    }

    pub async fn on_event(&mut self, event: &ListenerEvent) -> CallReport<()> {
        use bindings::listener::exports::trellis::plugin::events as wit;
        let limits = self.plugin.limits;
        let started = Instant::now();
        let Some(bindings) = self.bindings.take() else {
            return CallReport {
                result: Err(Failure::new(FailureKind::Unsupported, "the listener instance failed earlier; restart it")),
                elapsed: Duration::ZERO,
                peak_memory: self.store.data().limiter.peak(),
                stdout: Captured::default(),
                stderr: Captured::default(),
            };
        };
        let event = match event {
            ListenerEvent::Transition { sequence, view, previous, current, actions, time, run_id, error } => {
                wit::Event::Transition(wit::Transition {
                    sequence: *sequence,
                    view: view.clone(),
                    previous: (*previous).into(),
                    current: (*current).into(),
                    actions: actions.clone(),
                    time: *time,
                    run_id: run_id.clone(),
                    error: error.clone(),
                })
            }
            ListenerEvent::Gap { first_sequence, last_sequence } => {
                wit::Event::Gap(wit::Gap { first_sequence: *first_sequence, last_sequence: *last_sequence })
            }
        };
        self.store.data_mut().deadline = started + limits.deadline;
        let store = &mut self.store;
        let call =
            async { bindings.trellis_plugin_events().call_on_event(&mut *store, &event).await.map_err(Phase::Call) };
        let result = tokio::time::timeout(limits.deadline + GRACE, call).await;
        let report = report(&self.store, started, limits, result, |returned| returned.map_err(listener_failure));
        if report.result.is_ok() {
            self.bindings = Some(bindings);
        }
        report
    }
}

impl From<ViewState> for bindings::listener::exports::trellis::plugin::events::ViewState {
    fn from(state: ViewState) -> Self {
        use bindings::listener::exports::trellis::plugin::events::ViewState as Wit;
        match state {
            ViewState::Receive => Wit::Receive,
            ViewState::Invalidated => Wit::Invalidated,
            ViewState::NoData => Wit::NoData,
            ViewState::Waiting => Wit::Waiting,
            ViewState::Transforming => Wit::Transforming,
            ViewState::Materialized => Wit::Materialized,
            ViewState::Retrying => Wit::Retrying,
            ViewState::Failed => Wit::Failed,
        }
    }
}

/// Turns the raw result of a call into a report: classifies failures,
/// collects captured output and logs it.
fn report<R, T>(
    store: &Store<Sandbox>,
    started: Instant,
    limits: Limits,
    result: Result<Result<R, Phase>, tokio::time::error::Elapsed>,
    convert: impl FnOnce(R) -> Result<T, Failure>,
) -> CallReport<T> {
    let sandbox = store.data();
    let result = match result {
        Ok(Ok(returned)) => convert(returned),
        Ok(Err(phase)) => Err(classify(sandbox, limits, phase)),
        Err(_elapsed) => Err(timeout(limits)),
    }
    .map_err(|failure| Failure { message: sandbox::bounded(failure.message), ..failure });
    let (stdout, stderr) = sandbox.take_output();
    let plugin = sandbox.plugin();
    if sandbox.dropped_log_messages > 0 {
        tracing::warn!(target: "trellis::plugin", plugin, dropped = sandbox.dropped_log_messages, "log budget exhausted; messages dropped");
    }
    for (stream, captured) in [("stdout", &stdout), ("stderr", &stderr)] {
        if !captured.text.is_empty() {
            tracing::info!(target: "trellis::plugin", plugin, stream, truncated_bytes = captured.truncated_bytes, "{}", captured.text.trim_end());
        }
    }
    CallReport { result, elapsed: started.elapsed(), peak_memory: sandbox.limiter.peak(), stdout, stderr }
}

fn timeout(limits: Limits) -> Failure {
    Failure::new(FailureKind::Timeout, format!("deadline of {:?} exceeded", limits.deadline))
}

fn classify(sandbox: &Sandbox, limits: Limits, phase: Phase) -> Failure {
    let panic = sandbox.panic.as_deref().map(|message| format!("panicked: {message}"));
    // The limiter's refusal explains whatever trap followed it: a Rust guest
    // aborts when an allocation fails, or panics if it used try_reserve.
    if let Some(asked) = sandbox.limiter.refused {
        let mut message =
            format!("memory cap of {} MiB exceeded (asked for {} MiB)", limits.memory >> 20, asked.div_ceil(1 << 20));
        if let Some(panic) = panic {
            message = format!("{message}; then {panic}");
        }
        return Failure::new(FailureKind::MemoryExhausted, message);
    }
    let (error, instantiating) = match phase {
        Phase::Instantiate(error) => (error, true),
        Phase::Call(error) => (error, false),
    };
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return match trap {
            Trap::Interrupt => timeout(limits),
            Trap::StackOverflow => Failure::new(FailureKind::StackOverflow, "stack overflow"),
            _ if panic.is_some() => Failure::new(FailureKind::Panic, panic.unwrap_or_default()),
            Trap::UnreachableCodeReached => Failure::new(FailureKind::Trap, "aborted (wasm `unreachable`)"),
            Trap::MemoryOutOfBounds => Failure::new(
                FailureKind::Trap,
                // Rust and C guests keep a shadow stack in linear memory;
                // overflowing it shows up as this trap, so say so.
                "trapped: out of bounds memory access (a guest whose shadow stack overflows also ends here)",
            ),
            other => Failure::new(FailureKind::Trap, format!("trapped: {other}")),
        };
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return Failure::new(FailureKind::Trap, format!("exited with status {}", exit.0));
    }
    if instantiating {
        return Failure::new(FailureKind::Instantiation, format!("cannot instantiate: {error:#}"));
    }
    // The call returned, but what crossed the boundary was refused: its
    // result could not be lifted (bad UTF-8, bad discriminant, out-of-bounds
    // pointer), or a host call's arguments were over their limits.
    Failure::new(FailureKind::MalformedResult, format!("malformed result: {error:#}"))
}
