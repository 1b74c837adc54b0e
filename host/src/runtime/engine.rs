//! The one engine of the process: its configuration (the pooling allocator,
//! falling back to on-demand allocation), the epoch ticker, the linker, the
//! compile cache, the store slots and the memory budget; and loading
//! plugins with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::budget::{MemoryBudget, default_memory_budget};
use super::sandbox::Sandbox;
use super::{Error, Plugin, bindings, cache, limits};

/// How often the engine's epoch advances while a guest runs: the
/// granularity of deadlines and of a running guest's yields to the async
/// executor.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How long the ticker sleeps at most while no guest runs, before it looks
/// whether its engine is gone.
const IDLE_TICKER_CHECK: Duration = Duration::from_secs(1);

/// Guest calls in progress, over every engine of the process. The epoch
/// ticks only while there is one: a ticker that woke every 10 ms for
/// nothing would cost an idle server more than the rest of it.
static CALLS: Calls = Calls { active: std::sync::Mutex::new(0), changed: std::sync::Condvar::new() };

struct Calls {
    active: std::sync::Mutex<usize>,
    changed: std::sync::Condvar,
}

impl Calls {
    fn active(&self) -> std::sync::MutexGuard<'_, usize> {
        // A count stays right whatever panicked while holding it.
        self.active.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Returns once a call is in progress, or after `timeout`.
    fn wait_for_one(&self, timeout: Duration) {
        let active = self.active();
        let _ = self.changed.wait_timeout_while(active, timeout, |active| *active == 0);
    }
}

/// Held while a guest may run (an instantiation, a call): the epoch ticks.
pub(super) struct Ticking(());

impl Ticking {
    pub(super) fn start() -> Ticking {
        *CALLS.active() += 1;
        CALLS.changed.notify_all();
        Ticking(())
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        *CALLS.active() -= 1;
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
    /// Bytes that the memory caps of all live stores may add up to;
    /// `None` is [`default_memory_budget`].
    pub memory_budget: Option<usize>,
    /// Most bytes the compile cache's directory may hold; the least
    /// recently used components are removed past it.
    pub cache_limit: u64,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions { cache_dir: None, pooling: true, memory_budget: None, cache_limit: cache::DEFAULT_CACHE_LIMIT }
    }
}

/// The one engine of the process, with its linker, compile cache and epoch
/// ticker, and a memory budget that the plugins loaded through this handle
/// reserve their stores' caps from. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
    budget: MemoryBudget,
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
        // Outgoing HTTP is linked for every plugin, and refused for every
        // host but those a listener's store is granted (runtime/http.rs).
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(|e| Error::Engine(e.to_string()))?;
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
                    CALLS.wait_for_one(IDLE_TICKER_CHECK);
                }
            })
            .map_err(|e| Error::Engine(format!("cannot start the epoch ticker: {e}")))?;

        let cache = cache::CompileCache::new(&engine, options.cache_dir.as_deref(), options.cache_limit);
        let stores = Arc::new(tokio::sync::Semaphore::new(POOL_SLOTS as usize));
        let budget = MemoryBudget::new(options.memory_budget.unwrap_or_else(default_memory_budget));
        Ok(Runtime { inner: Arc::new(RuntimeInner { engine, linker, cache, stores }), budget })
    }

    /// This engine, with a memory budget of `bytes` of its own for the
    /// plugins loaded through the handle returned (a project's budget).
    pub fn with_memory_budget(&self, bytes: usize) -> Runtime {
        Runtime { inner: self.inner.clone(), budget: MemoryBudget::new(bytes) }
    }

    /// The budget that plugins loaded through this handle reserve from.
    pub fn memory_budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Loads the plugin in `path`, named after its file stem.
    pub async fn load_file(&self, path: &Path) -> Result<Plugin, Error> {
        // A Python plugin's directory, named where its component should be.
        if path.join("pyproject.toml").is_file() {
            let reason = format!(
                "it is a Python plugin's directory, not a component: build it with \
                 `trellis plugins build {0}` and name the .wasm that writes ({0}/build/NAME.wasm)",
                path.display()
            );
            return Err(Error::NotAPlugin { name: path.display().to_string(), reason });
        }
        let bytes = tokio::fs::read(path).await.map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => Error::Missing { path: path.to_path_buf() },
            _ => Error::Read { path: path.to_path_buf(), reason: error.to_string() },
        })?;
        // wasmtime takes WebAssembly text too; a file that is neither a
        // binary nor named `.wat` is something else (a script, a crate's
        // manifest), and a text parser's complaint about it helps nobody.
        let text = path.extension().is_some_and(|extension| extension == "wat");
        if !text && !bytes.starts_with(WASM_MAGIC) {
            let reason = "it is not a WebAssembly file (it lacks the `\\0asm` header); name the .wasm a plugin's \
                          build wrote (target/wasm32-wasip2/release/NAME.wasm)";
            return Err(Error::NotAPlugin { name: path.display().to_string(), reason: reason.to_string() });
        }
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
        if is_core_module(&bytes) {
            let reason = "it is a core WebAssembly module, not a component: build it for wasm32-wasip2 \
                          (`cargo build --target wasm32-wasip2`), which writes a component";
            return Err(Error::NotAPlugin { name: name.to_string(), reason: reason.to_string() });
        }
        let content_hash = blake3::hash(&bytes);
        let stamp = super::stamp::read(&bytes);
        let runtime = self.clone();
        let compiled = tokio::task::spawn_blocking(move || {
            runtime.inner.cache.get_or_compile(&runtime.inner.engine, content_hash, &bytes)
        })
        .await
        .map_err(|e| Error::Engine(format!("compilation task failed: {e}")))?;
        let (component, provenance) =
            compiled.map_err(|e| Error::NotAPlugin { name: name.to_string(), reason: format!("{e:#}") })?;
        let inner = &self.inner;
        Plugin::new(
            name,
            content_hash,
            stamp,
            provenance,
            &component,
            &inner.linker,
            &inner.engine,
            &inner.stores,
            &self.budget,
        )
    }
}

/// How every binary WebAssembly file begins.
const WASM_MAGIC: &[u8] = b"\0asm";

/// A binary core module (version 1, layer 0), which a component (layer 1)
/// is not: what a build for another target than wasm32-wasip2 writes.
fn is_core_module(bytes: &[u8]) -> bool {
    bytes.starts_with(WASM_MAGIC) && bytes.get(4..8) == Some(&[1, 0, 0, 0])
}
