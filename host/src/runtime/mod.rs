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
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! **the only module that imports wasmtime.**
//! - `mod.rs`: the host-side `Error` and the re-exports that are the
//!   module's API; no logic.
//! - `engine.rs`: `Runtime`: one `Engine` with an epoch ticker every 10 ms
//!   while a guest call is in progress (`Ticking`, held by every call; idle,
//!   the ticker sleeps, so an idle server costs almost no CPU) and the
//!   pooling allocator, falling back to on-demand allocation; one
//!   `Linker` with WASI p2 and the `host` interface; a semaphore of 128
//!   store slots so a full pool makes calls wait rather than fail; loading
//!   a plugin (compiled through the cache). A `Runtime` handle carries the
//!   memory budget its plugins reserve from; `with_memory_budget` gives a
//!   project a budget of its own on the same engine.
//! - `plugin.rs`: `Plugin`: an `InstancePre` per component, its `World`
//!   found from its exports (looked up at 1.2.0, which wasmtime matches by
//!   semver with a 1.0.0 or 1.1.0 plugin's exports; `World::Engine` is an
//!   engine transformation, which `transforms()` like a transformation; a transformation that also
//!   exports `transform-incremental` keeps that entry point too,
//!   `is_incremental`), limits per plugin, and a fresh store per call,
//!   created once its memory cap is reserved from the budget and then a
//!   store slot is free (so calls waiting for memory hold no slot).
//! - `budget.rs`: `MemoryBudget`: a fair semaphore counted in MiB from
//!   which every store reserves its memory cap for its life, so that
//!   concurrent calls wait instead of exceeding it together (listener
//!   instances, which keep their store, hold theirs while they live, which
//!   `plugins.rs` accounts for); a cap
//!   above the whole budget is an error, not an endless wait; `usage`
//!   (budget, reserved, peak, waiting) for `GET /transformations`; the
//!   default, half of physical memory (or of the cgroup limit), at least
//!   1 GiB.
//! - `cpu.rs`: `CpuMeter`: every poll of a call's future timed with the
//!   polling thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`); the guest runs
//!   inside those polls, so waiting for a CPU or in a host call does not
//!   count. The epoch callback, which runs inside a poll, sees the poll in
//!   progress too.
//! - `job.rs`: the engine-transformation call: a `JobRequest` (inputs
//!   named with their formats and fields, never located; the type's
//!   resources) to an `EngineJob`, in a store with no grants and at most
//!   30 s; `check_job` holds the result to the contract (a named engine, a
//!   query that is not empty, an application that is one of the type's
//!   resources, properties once each, at most 1 MiB and 10,000 files),
//!   else `MalformedResult`. The plugin's deadline is the whole job's,
//!   which the engine driver enforces.
//! - `describe.rs`, `transform.rs`, `checksum.rs`, `listener.rs`: the calls
//!   of each world with their host-side request and result types
//!   (`transform.rs`: one call serves `transform` and
//!   `transform_incremental`, whose `Increment` adds per input what changed
//!   and the previous output granted read-only at `/previous`; offsets a
//!   plugin commits must name its inputs, once each, and be short);
//!   `listener.rs` also holds `ListenerInstance`, which keeps its store
//!   across events until its first failure.
//! - `failure.rs`: `Failure`/`FailureKind` and `CallReport` (with the
//!   call's CPU time); `run` arms the store's deadline, meters the call's
//!   CPU time, abandons it from outside at `Limits::wall_limit` (a grace
//!   period past a wall-clock deadline, 200 times a CPU-time one) and
//!   classifies what went wrong: limiter refusal, trap, panic report, exit,
//!   instantiation, malformed result, or the host stopping it (an output
//!   over its cap).
//! - `output.rs`: what a transformation may leave behind: at most 64
//!   counters with names up to 128 bytes, and an output of plain files and
//!   directories only, within its `OutputLimit` of bytes (apparent size)
//!   and entries. `watch_output` measures the output while the call runs,
//!   on a blocking thread, each measurement spaced by 20 times the last
//!   one's duration (so it costs at most about 5% of a thread) but at most
//!   a second, and the call is stopped once over the cap; the overshoot is
//!   what the guest writes between two measurements (up to about a second
//!   and one walk). `check_output` is the exact check once the
//!   call returned. Walks are iterative and stop at the cap.
//! - `cache.rs`: components compiled once, cached by blake3 of their bytes in
//!   memory and on disk, keyed also by the engine's compatibility hash; files
//!   written by rename, read into memory (not mapped), and trusted only in a
//!   directory private to the user. The directory is bounded
//!   (`RuntimeOptions::cache_limit`, 1 GiB unless `TRELLIS_CACHE_MIB` says):
//!   past it, the files least recently used (by modification time, which a
//!   load from disk refreshes) are removed, never the one just written.
//! - `stamp.rs`: the build stamp, a custom section (`trellis-build`) that
//!   `plugins build` appends to a component built from sources: `sources`
//!   (the plugin's files and the SDK version: its logic) and `build`
//!   (everything the build read: whether to build again). Only the
//!   outermost component's own section counts. `Plugin::logic_hash` is the
//!   stamped sources where there is a stamp, else the bytes' hash: what a
//!   view's default version checksum covers.
//! - `sandbox.rs`: the store state of one call: WASI restricted to the call's
//!   grants (guest paths `/inputs/<n>`, `/output`, `/previous`, `/state`; grants where one
//!   directory contains another are refused), a deadline of wall-clock or
//!   CPU time enforced by epoch interruption, the store's reservation from
//!   the memory budget, per-call budgets for what a guest can push at the
//!   host (4 MiB per host call, 256 handles besides its grants' directories, 256 KiB of log), and the
//!   `host` interface.
//! - `http.rs`: `HttpGrant`, wasmtime-wasi-http's hooks for one store:
//!   `wasi:http/outgoing-handler` is linked for every plugin, and a request
//!   goes out (through `default_send_request`, rustls for TLS) only to a
//!   host the store was granted (`AllowedHost`, from a listener's
//!   `allow_http`); every other is refused before it is sent. Only
//!   listeners are ever granted hosts.
//! - `limits.rs`: deadlines, what they count (`Clock::Wall` for
//!   transformations and checksums, `Clock::Cpu` for listeners) and memory
//!   caps per world, and the limiter that sums all memories and all table
//!   elements and caps instance counts.
//! - `capture.rs`: stdout/stderr kept up to 64 KiB each, the rest counted;
//!   what the guest logged through the host is kept too (`LogLine`, within
//!   its log budget), and a `CallReport` carries all three.
//! - `bindings.rs`: the one `bindgen!` per world.
//!
//! Invariants: no wasmtime type leaves the module; a plugin's misbehaviour is
//! a `Failure` value in a `CallReport`, never an `Error` or a panic; a store
//! never outlives its call, except a listener instance, which dies at its
//! first failure; a plugin reaches no host it was not granted; grants never overlap, and an output may only hold files and
//! directories, within its cap; the memory caps of the live stores of one
//! budget never add up to more than it. It knows nothing of views, the
//! lattice or the metastore.

mod bindings;
mod budget;
mod cache;
mod capture;
mod checksum;
mod cpu;
mod describe;
mod engine;
mod failure;
mod http;
mod job;
mod limits;
mod listener;
mod output;
mod plugin;
mod sandbox;
pub mod stamp;
mod transform;

pub(crate) use budget::Reservation;
pub use budget::{BudgetUsage, MemoryBudget, default_memory_budget};
pub use cache::Provenance;
pub use capture::Captured;
pub use checksum::ChecksumRequest;
pub use describe::{ConfigKey, PluginInfo};
pub use engine::{POOL_SLOTS, Runtime, RuntimeOptions};
pub use failure::{CallReport, Failure, FailureKind};
pub use job::{Application, EngineJob, JobField, JobInput, JobRequest};
pub use limits::{CPU_WALL_CEILING, Clock, Limits};
pub use listener::{ListenerEvent, ListenerInstance};
pub use output::{OutputLimit, check_output};
pub use plugin::{Plugin, World};
pub use sandbox::{GUEST_OUTPUT, GUEST_PREVIOUS, GUEST_STATE, LogLine, guest_input};
pub use transform::{Increment, IncrementalOutcome, InputDelta, TransformInput, TransformOutcome, TransformRequest};

/// The scheduling states listeners see.
pub use crate::model::ViewState;

use std::path::PathBuf;

/// Host-side problems; a plugin failing is not one of them (see [`Failure`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{} does not exist", path.display())]
    Missing { path: PathBuf },
    /// The reason is part of the message (not a `source()`, which an
    /// error chain would say a second time).
    #[error("cannot read plugin {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("{name} is not a trellis plugin: {reason}")]
    NotAPlugin { name: String, reason: String },
    #[error("{name} is {} plugin, not {} plugin", actual.with_article(), expected.with_article())]
    WrongWorld { name: String, expected: World, actual: World },
    #[error("cannot grant {} to the plugin: {reason}", path.display())]
    Grant { path: PathBuf, reason: String },
    #[error("cannot start the WebAssembly engine: {0}")]
    Engine(String),
    #[error("{name}'s memory cap of {} MiB exceeds the memory budget of {} MiB", memory >> 20, budget >> 20)]
    OverBudget { name: String, memory: usize, budget: usize },
}
