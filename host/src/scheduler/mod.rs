//! The scheduler: materializes views in dependency order and keeps them
//! current.
//!
//! - `transition`: the pure per-view state machine and change detection;
//! - `run`: the loop that owns view state, commits to the metastore and
//!   then executes actions, with transformations as tasks under permits;
//! - `memo`: freshness remembered between runs, external data watched;
//! - `publish`: staging directories and atomic publish;
//! - `service`: the loop as a long-lived service taking requests, for the server;
//! - `table`: the live table of views and runs that readers consult without the loop.

mod memo;
pub mod publish;
pub mod run;
pub mod service;
pub mod table;
pub mod transition;

pub use run::{PluginCheck, Progress, RunSummary, Scheduler, check_plugins, load_plugin};

pub use transition::{Action, Event, Facts, Freshness, Mode, Reason, Settled, freshness, transition};
