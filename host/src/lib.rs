//! trellis: a goal-oriented data scheduler whose transformations, version
//! checksums and listeners are sandboxed WebAssembly components.
//!
//! See ARCHITECTURE.md for the map of modules and their invariants.

pub mod api;
pub mod bundled;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod engines;
pub mod lattice;
pub mod listeners;
pub mod metastore;
pub mod model;
pub mod plugins;
pub mod python;
pub mod runtime;
pub mod scheduler;
pub mod session;
pub mod storage;
pub mod tls;
