//! The scheduler: materializes views in dependency order and keeps them
//! current.
//!
//! - `transition`: the pure per-view state machine and change detection;
//! - `run`: the loop that owns view state, commits to the metastore and
//!   then executes actions, with transformations as tasks under permits;
//! - `publish`: staging directories and atomic publish.

pub mod publish;
pub mod run;
pub mod transition;

pub use run::{Progress, RunSummary, Scheduler, check_plugins, load_plugin};

pub use transition::{Action, Event, Facts, Freshness, Mode, Reason, Settled, freshness, transition};
