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
