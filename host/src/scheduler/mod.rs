//! The scheduler: materializes views in dependency order and keeps them
//! current.
//!
//! - `transition`: the pure per-view state machine and change detection;
//! - `action`: the pure state machine of a coordinator's action;
//! - `policy`: the pure rules of a coordinator (creation, throttle, concurrency, execution, timeouts);
//! - `coordinate`: coordinators driven: actions created, checked, submitted, recorded;
//! - `record`: the pure translation of a transition's actions to the view's record;
//! - `state`: the [`Scheduler`], owner of all view state; instantiate, invalidate;
//! - `plan`: what a run would do to each view, judged as the run judges it;
//! - `run`: one [`Run`] and the steps that advance it; the embedded driver;
//! - `engine`: engine-backed views: the job described, run by its driver, published;
//! - `service`: the long-lived [`Service`] and its [`Handle`], for the server;
//! - `reload`: a server's project loaded again and applied between runs;
//! - `memo`: freshness remembered between runs, external data watched;
//! - `publish`: staging directories and atomic publish;
//! - `table`: the live table of views and runs that readers consult without the loop.

pub mod action;
pub mod coordinate;
mod engine;
mod memo;
mod plan;
pub mod policy;
pub mod publish;
pub mod record;
pub mod reload;
pub mod run;
pub mod service;
mod state;
pub mod table;
pub mod transition;
pub mod txlog;

pub use coordinate::{Coordination, CoordinatorStatus, Submission};
pub use plan::{Increment, NoData, Outdated, Verdict, Why};
pub use reload::{Project, ReloadReport, Reloader, load_project};
pub use run::{Run, RunSummary, StopReason, TaskReport, check_full_refresh};
pub use service::{Accepted, CoordinatorAnswer, CoordinatorOperation, Handle, Service, Stopping};
pub use state::{Invalidation, Permits, Progress, Scheduler, TxLogView, TxReset};
pub use transition::{Action, Event, Facts, Freshness, Mode, Reason, Settled, freshness, transition};

use crate::catalog::pattern;
use crate::{lattice, metastore, plugins};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Pattern(#[from] pattern::PatternError),
    #[error(transparent)]
    Lattice(#[from] lattice::Error),
    #[error(transparent)]
    Metastore(#[from] metastore::Error),
    #[error(transparent)]
    Plugins(#[from] plugins::Error),
    #[error(
        "this scheduler was opened without plugins: it can instantiate and invalidate views, not materialize or plan"
    )]
    NoPlugins,
    #[error("{0}")]
    Io(String),
    #[error("the server is shutting down and accepts no new runs")]
    Closing,
    #[error("the scheduler has {queued} requests waiting, its limit; try again in a moment")]
    Busy { queued: usize },
    #[error("the scheduler has shut down")]
    Gone,
    /// A reload refused: the project served stays as it was.
    #[error(
        "the project was not reloaded (the server keeps the one it has): {}",
        .0.join("; ")
    )]
    Refused(Vec<String>),
    /// A coordinator operation named a coordinator the project lacks.
    #[error("the project has no coordinator `{name}` ({known})")]
    UnknownCoordinator { name: String, known: String },
    /// A coordinator operation that cannot apply, and why.
    #[error("{0}")]
    Coordinator(String),
    /// A transaction log request that names what is not there.
    #[error("{0}")]
    TxLog(String),
    /// Views the request would transform run on an engine that is not
    /// available here (Spark or Java missing).
    #[error("{0}")]
    EngineUnavailable(String),
}
