//! The scheduler: materializes views in dependency order and keeps them
//! current.
//!
//! So far only its core exists: the pure per-view state machine in
//! `transition`. The event loop that owns view state, executes actions
//! after the metastore commit and runs transformations as tasks under
//! permits is the next step (issue 4).

pub mod transition;

pub use transition::{Action, Event, Facts, Freshness, Mode, Reason, Settled, freshness, transition};
