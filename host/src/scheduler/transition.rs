//! The scheduling state machine of one view, as a pure function:
//! `transition(state, event) -> (state, actions)`. Schedoscope's states
//! (seed 000) and trellis's materialization modes.
//!
//! Invariants: no I/O, no clock, no failure. Everything the decision needs
//! arrives in the event (the mode, how the dependencies settled, whether the
//! view is outdated and why); everything it wants done leaves as actions,
//! which the scheduler's loop executes after committing the new state. An
//! event that makes no sense in a state changes nothing and says so.

use std::fmt;
use std::time::Duration;

use crate::catalog::{OnDependencyFailure, RetryPolicy};
use crate::model::ViewState;

pub use crate::model::Mode;

/// Why a view must be transformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    NeverMaterialized,
    SchemaChanged,
    VersionChanged {
        old: String,
        new: String,
        /// New input besides (a newer dependency, re-delivered external
        /// data, `latest()` moved): the change RESET_TRANSFORMATION_CHECKSUMS
        /// must not hide, since only the version change is its to suppress.
        input: Option<Box<Reason>>,
    },
    DependencyNewer {
        dependency: String,
    },
    Invalidated,
    NewExternalData,
    /// Its published data (its done flag) is gone.
    DataGone,
    /// Selected by a full refresh, which rebuilds whatever the view's state.
    FullRefresh,
    /// `latest()` resolves to other instances than those it read (seed
    /// 002): URL paths, comma-separated; judged by the scheduler, which
    /// resolves `latest()`, not by `freshness`.
    LatestMoved {
        read: String,
        now: String,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NeverMaterialized => f.write_str("never materialized"),
            Reason::SchemaChanged => f.write_str("schema changed"),
            Reason::VersionChanged { old, new, input } => {
                write!(f, "version changed {}", crate::plugins::version_change(old, new))?;
                match input {
                    Some(input) => write!(f, ", and {input}"),
                    None => Ok(()),
                }
            }
            Reason::DependencyNewer { dependency } => write!(f, "dependency {dependency} is newer"),
            Reason::Invalidated => f.write_str("invalidated"),
            Reason::NewExternalData => f.write_str("new external data"),
            Reason::DataGone => f.write_str("data gone"),
            Reason::FullRefresh => f.write_str("full refresh"),
            Reason::LatestMoved { read, now } => {
                let now = if now.is_empty() { "no instance" } else { now };
                let read = if read.is_empty() { "none" } else { read };
                write!(f, "latest() now resolves to {now} (it read {read})")
            }
        }
    }
}

/// Whether a view whose dependencies have settled needs transforming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    UpToDate,
    Outdated(Reason),
    /// External data without its done flag: no data, whatever was recorded.
    NoDoneFlag,
}

/// An external view's done flag now, against the one recorded with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagCheck {
    Absent,
    /// The same file as recorded (same mtime, size and inode).
    Unchanged,
    /// Another file, or one where there was none: new data, even when
    /// its mtime is older than anything recorded.
    Changed,
}

/// What is known about a view when its dependencies have settled, for
/// deciding whether it is outdated.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts<'a> {
    /// The view is in the invalidated state.
    pub invalidated: bool,
    /// Its type's schema checksum changed when the scheduler opened, so
    /// its metadata was dropped.
    pub schema_changed: bool,
    /// Recorded in the metastore: the version checksum and timestamp of its
    /// last materialization (none if never, or dropped by a schema change).
    pub recorded_version: Option<&'a str>,
    pub recorded_timestamp: Option<i64>,
    /// The version checksum of its transformation now.
    pub current_version: &'a str,
    /// The dependency with the newest timestamp, and that timestamp.
    pub newest_dependency: Option<(&'a str, i64)>,
    /// For external data: its done flag now against the one recorded.
    /// `None` for views with a transformation.
    pub external_flag: Option<FlagCheck>,
    /// A view with a transformation, recorded as materialized, whose
    /// published data (its done flag, or its directory) is gone.
    pub data_gone: bool,
}

/// Schedoscope's change detection, in order: no done flag (no data),
/// invalidation, never materialized, data gone, changed logic, newer
/// input, new external data.
pub fn freshness(facts: &Facts<'_>) -> Freshness {
    if facts.external_flag == Some(FlagCheck::Absent) {
        return Freshness::NoDoneFlag;
    }
    if facts.invalidated {
        return Freshness::Outdated(Reason::Invalidated);
    }
    let Some(timestamp) = facts.recorded_timestamp else {
        let reason = if facts.schema_changed { Reason::SchemaChanged } else { Reason::NeverMaterialized };
        return Freshness::Outdated(reason);
    };
    if facts.data_gone {
        return Freshness::Outdated(Reason::DataGone);
    }
    match facts.recorded_version {
        Some(old) if !crate::plugins::same_version(old, facts.current_version) => {
            return Freshness::Outdated(Reason::VersionChanged {
                old: old.to_string(),
                new: facts.current_version.to_string(),
                input: new_input(facts, timestamp).map(Box::new),
            });
        }
        None => return Freshness::Outdated(Reason::NeverMaterialized),
        Some(_) => {}
    }
    new_input(facts, timestamp).map_or(Freshness::UpToDate, Freshness::Outdated)
}

/// Whether the view's input changed since it was materialized at
/// `timestamp`: a newer dependency, or re-delivered external data.
fn new_input(facts: &Facts<'_>, timestamp: i64) -> Option<Reason> {
    if let Some((dependency, newest)) = facts.newest_dependency
        && newest > timestamp
    {
        return Some(Reason::DependencyNewer { dependency: dependency.to_string() });
    }
    // Re-delivered data counts as new, whatever mtime the flag came with.
    (facts.external_flag == Some(FlagCheck::Changed)).then_some(Reason::NewExternalData)
}

/// How a view's dependencies ended up, once none is in flight (kept in a
/// published output's receipt, for the record a recovery writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Settled {
    /// The view has dependencies and every one of them is no-data.
    pub all_no_data: bool,
    /// Some dependency is no-data (the view will be incomplete).
    pub some_no_data: bool,
    /// Some dependency failed (the view will carry errors).
    pub some_failed: bool,
    /// Some dependency carries errors itself (built, or left without data,
    /// while one below it failed): the view carries them too, as
    /// Schedoscope's flags travel up the lattice. No failure to skip for.
    #[serde(default)]
    pub some_errors: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A materialize request reached the view, from a run or a dependent.
    Materialize {
        mode: Mode,
        materialize_once: bool,
    },
    /// Every dependency is materialized, no-data or failed.
    DependenciesSettled {
        mode: Mode,
        settled: Settled,
        freshness: Freshness,
        /// The view type's `on_dependency_failure`.
        on_failure: OnDependencyFailure,
        /// The stable state the view had before the run, which a skipped
        /// view returns to.
        previous: ViewState,
    },
    /// The transformation (or, for external data, the done-flag check)
    /// finished; `data` is false for no-data.
    Transformed {
        data: bool,
    },
    /// The transformation failed; `retry` says whether another attempt is
    /// allowed (retryable and attempts left, or network trouble) and on
    /// which account.
    TransformFailed {
        retry: Retry,
        error: String,
    },
    /// A retry's backoff elapsed.
    RetryDue,
    Invalidate,
    /// The run was stopped while the view was in flight; it returns to the
    /// state it had before the run.
    Canceled {
        previous: ViewState,
    },
}

/// Whether a failed transformation is tried again, and on what account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Given up: the view fails.
    No,
    /// Tried again, and counted against the type's `retries`.
    Counted,
    /// Tried again for transient network trouble, without a count (seed
    /// 000): the view shows `retrying (network)` with the error.
    Network,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send materialize requests to the dependencies.
    AskDependencies,
    /// Run the transformation (for external data: check the done flag).
    Transform,
    ScheduleRetry,
    /// The retry is for network trouble: show it, with its error, while
    /// the view waits (`retrying (network)`).
    ReportNetworkRetry {
        error: String,
    },
    /// Record the view as materialized now, with its current version
    /// checksum, flagged incomplete or with errors as its dependencies
    /// settled (the loop keeps those with the view).
    RecordMaterialized,
    /// Record the current version checksum and a timestamp without
    /// transforming (the RESET modes and SET_ONLY).
    RecordWithoutTransforming,
    /// Record the current version checksum only, keeping the timestamp.
    RecordVersion,
    RecordNoData,
    RecordFailed {
        error: String,
    },
    RecordInvalidated,
    /// The view was up to date: nothing was done (flow status IDLE).
    ReportIdle,
    /// A dependency failed and the type says skip: nothing was done, the
    /// record is kept (flow status SKIPPED), and its dependents take it
    /// as failed.
    ReportSkipped,
    /// Tell waiting dependents (and the run) that this view settled.
    NotifyDependents,
    /// A request joined the one already in flight.
    JoinInFlight,
    /// The event was refused, and why (e.g. invalidating a view in flight).
    Refuse {
        reason: String,
    },
    /// The event does not apply in this state; it changed nothing.
    Ignore,
}

impl Action {
    /// The action's name as listeners see it.
    pub fn name(&self) -> &'static str {
        match self {
            Action::AskDependencies => "ask-dependencies",
            Action::Transform => "transform",
            Action::ScheduleRetry => "schedule-retry",
            Action::ReportNetworkRetry { .. } => "report-network-retry",
            Action::RecordMaterialized => "record-materialized",
            Action::RecordWithoutTransforming => "record-without-transforming",
            Action::RecordVersion => "record-version",
            Action::RecordNoData => "record-no-data",
            Action::RecordFailed { .. } => "record-failed",
            Action::RecordInvalidated => "record-invalidated",
            Action::ReportIdle => "report-idle",
            Action::ReportSkipped => "report-skipped",
            Action::NotifyDependents => "notify-dependents",
            Action::JoinInFlight => "join-in-flight",
            Action::Refuse { .. } => "refuse",
            Action::Ignore => "ignore",
        }
    }
}

/// The single transition function.
pub fn transition(state: ViewState, event: &Event) -> (ViewState, Vec<Action>) {
    use Action::*;
    use ViewState::*;
    let in_flight = matches!(state, Waiting | Transforming | Retrying);
    match event {
        Event::Materialize { .. } if in_flight => (state, vec![JoinInFlight]),
        Event::Materialize { mode: Mode::SetOnly, .. } => {
            (Materialized, vec![RecordWithoutTransforming, NotifyDependents])
        }
        Event::Materialize { materialize_once: true, .. } if state == Materialized => {
            (Materialized, vec![ReportIdle, NotifyDependents])
        }
        Event::Materialize { mode: Mode::TransformOnly, .. } => (Transforming, vec![Transform]),
        Event::Materialize { .. } => (Waiting, vec![AskDependencies]),

        Event::DependenciesSettled { .. } if state != Waiting => (state, vec![Ignore]),
        Event::DependenciesSettled { settled, .. } if settled.all_no_data => {
            (NoData, vec![RecordNoData, NotifyDependents])
        }
        // SDP's SKIPPED: not transformed, whatever it would have been,
        // since a failed input is no input to judge by.
        Event::DependenciesSettled { settled, on_failure: OnDependencyFailure::Skip, previous, .. }
            if settled.some_failed =>
        {
            (*previous, vec![ReportSkipped, NotifyDependents])
        }
        // The dry run transforms nothing, so it checks the flag here; the
        // other modes check it as external data's transformation.
        Event::DependenciesSettled {
            mode: Mode::ResetTransformationChecksumsAndTimestamps,
            freshness: Freshness::NoDoneFlag,
            ..
        } => (NoData, vec![RecordNoData, NotifyDependents]),
        Event::DependenciesSettled { freshness: Freshness::UpToDate, .. } => {
            (Materialized, vec![ReportIdle, NotifyDependents])
        }
        Event::DependenciesSettled { mode: Mode::ResetTransformationChecksumsAndTimestamps, .. } => {
            (Materialized, vec![RecordWithoutTransforming, NotifyDependents])
        }
        // Only a change of version is this mode's to suppress: new input
        // besides is rebuilt (seed 000).
        Event::DependenciesSettled {
            mode: Mode::ResetTransformationChecksums,
            freshness: Freshness::Outdated(Reason::VersionChanged { input: None, .. }),
            ..
        } => (Materialized, vec![RecordVersion, NotifyDependents]),
        Event::DependenciesSettled { .. } => (Transforming, vec![Transform]),

        Event::Transformed { .. } if state != Transforming => (state, vec![Ignore]),
        Event::Transformed { data: true } => (Materialized, vec![RecordMaterialized, NotifyDependents]),
        Event::Transformed { data: false } => (NoData, vec![RecordNoData, NotifyDependents]),

        Event::TransformFailed { .. } if state != Transforming => (state, vec![Ignore]),
        Event::TransformFailed { retry: Retry::Counted, .. } => (Retrying, vec![ScheduleRetry]),
        Event::TransformFailed { retry: Retry::Network, error } => {
            (Retrying, vec![ScheduleRetry, ReportNetworkRetry { error: error.clone() }])
        }
        Event::TransformFailed { retry: Retry::No, error } => {
            (Failed, vec![RecordFailed { error: error.clone() }, NotifyDependents])
        }

        Event::RetryDue if state == Retrying => (Transforming, vec![Transform]),
        Event::RetryDue => (state, vec![Ignore]),

        Event::Invalidate if in_flight => {
            (state, vec![Refuse { reason: format!("the view is {state}; invalidate it when it is not in flight") }])
        }
        Event::Invalidate => (Invalidated, vec![RecordInvalidated]),

        Event::Canceled { previous } if in_flight => (*previous, vec![NotifyDependents]),
        Event::Canceled { .. } => (state, vec![Ignore]),
    }
}

/// What a failed transformation's failure was, for deciding whether to
/// try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Declared retryable by the plugin, or its deadline passed: retried
    /// up to the type's `retries`.
    Retryable,
    /// A panic, trap, exit or stack overflow: fatal unless the type sets
    /// `retry_panics`, then retried like `Retryable`.
    Crash,
    /// Anything else the plugin did (a fatal or malformed result, the memory
    /// or output cap, a configuration it cannot take): never retried.
    Fatal,
    /// The host's own transient trouble (staging I/O, publishing): not the
    /// view's fault, retried without limit.
    Host,
    /// Transient network trouble (a refused connection, a socket timeout;
    /// `engines::network` says which): retried without limit and without
    /// counting against `retries` (seed 000), shown as `retrying (network)`.
    Network,
}

/// A view's failed attempts in one run, by whether they count against its
/// `retries`: network trouble does not, so a job that lost the network
/// twice still has all its retries for its own failures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Failures {
    pub counted: u32,
    pub network: u32,
}

impl Failures {
    /// Takes one more failure of `class` into account and says whether,
    /// and after how long, to try again: the backoff doubles with the
    /// failures of its own account (network trouble's or the others').
    pub fn next_retry(&mut self, class: FailureClass, policy: &RetryPolicy) -> Option<Duration> {
        let attempts = if class == FailureClass::Network {
            self.network += 1;
            self.network
        } else {
            self.counted += 1;
            self.counted
        };
        retry_delay(class, attempts, policy)
    }
}

/// No retry waits longer than this, however many came before.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How long to wait before trying again after `attempts` attempts (at least
/// one) that ended in a failure of `class`, or `None` to give up: the
/// policy's backoff, doubled for each attempt after the first, capped at
/// [`MAX_BACKOFF`].
pub fn retry_delay(class: FailureClass, attempts: u32, policy: &RetryPolicy) -> Option<Duration> {
    let allowed = match class {
        FailureClass::Host | FailureClass::Network => true,
        FailureClass::Retryable => attempts <= policy.retries,
        FailureClass::Crash => policy.retry_panics && attempts <= policy.retries,
        FailureClass::Fatal => false,
    };
    let doublings = attempts.saturating_sub(1).min(20);
    allowed.then(|| policy.backoff.saturating_mul(1 << doublings).min(MAX_BACKOFF))
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    /// One event of each kind and variation that changes the outcome.
    fn events() -> Vec<(&'static str, Event)> {
        let settled =
            |all_no_data| Settled { all_no_data, some_no_data: all_no_data, some_failed: false, some_errors: false };
        let failed = Settled { all_no_data: false, some_no_data: false, some_failed: true, some_errors: false };
        let outdated = Freshness::Outdated(Reason::NeverMaterialized);
        let version = Freshness::Outdated(Reason::VersionChanged { old: "a".into(), new: "b".into(), input: None });
        let version_and_input = Freshness::Outdated(Reason::VersionChanged {
            old: "a".into(),
            new: "b".into(),
            input: Some(Box::new(Reason::NewExternalData)),
        });
        vec![
            ("materialize", Event::Materialize { mode: Mode::Default, materialize_once: false }),
            ("materialize once", Event::Materialize { mode: Mode::Default, materialize_once: true }),
            ("materialize TRANSFORM_ONLY", Event::Materialize { mode: Mode::TransformOnly, materialize_once: false }),
            ("materialize SET_ONLY", Event::Materialize { mode: Mode::SetOnly, materialize_once: false }),
            (
                "settled, all no-data",
                Event::DependenciesSettled {
                    mode: Mode::Default,
                    settled: settled(true),
                    freshness: outdated.clone(),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Receive,
                },
            ),
            (
                "settled, dependency failed",
                Event::DependenciesSettled {
                    mode: Mode::Default,
                    settled: failed,
                    freshness: outdated.clone(),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                },
            ),
            (
                "settled, dependency failed, skip",
                Event::DependenciesSettled {
                    mode: Mode::Default,
                    settled: failed,
                    freshness: outdated.clone(),
                    on_failure: OnDependencyFailure::Skip,
                    previous: ViewState::Materialized,
                },
            ),
            (
                "settled, dependency failed, skip, up to date",
                Event::DependenciesSettled {
                    mode: Mode::Default,
                    settled: failed,
                    freshness: Freshness::UpToDate,
                    on_failure: OnDependencyFailure::Skip,
                    previous: ViewState::Receive,
                },
            ),
            (
                "settled, no failure, skip",
                Event::DependenciesSettled {
                    mode: Mode::Default,
                    settled: settled(false),
                    freshness: outdated.clone(),
                    on_failure: OnDependencyFailure::Skip,
                    previous: ViewState::Materialized,
                },
            ),
            (
                "settled, up to date",
                Event::DependenciesSettled {
                    mode: Mode::Default,
                    settled: settled(false),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                    freshness: Freshness::UpToDate,
                },
            ),
            (
                "settled, outdated",
                Event::DependenciesSettled {
                    mode: Mode::Default,
                    settled: settled(false),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                    freshness: outdated.clone(),
                },
            ),
            (
                "settled, outdated, RESET_..._AND_TIMESTAMPS",
                Event::DependenciesSettled {
                    mode: Mode::ResetTransformationChecksumsAndTimestamps,
                    settled: settled(false),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                    freshness: outdated.clone(),
                },
            ),
            (
                "settled, version changed, RESET_TRANSFORMATION_CHECKSUMS",
                Event::DependenciesSettled {
                    mode: Mode::ResetTransformationChecksums,
                    settled: settled(false),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                    freshness: version,
                },
            ),
            (
                "settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS",
                Event::DependenciesSettled {
                    mode: Mode::ResetTransformationChecksums,
                    settled: settled(false),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                    freshness: version_and_input,
                },
            ),
            (
                "settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS",
                Event::DependenciesSettled {
                    mode: Mode::ResetTransformationChecksums,
                    settled: settled(false),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                    freshness: outdated,
                },
            ),
            (
                "settled, no done flag",
                Event::DependenciesSettled {
                    mode: Mode::Default,
                    settled: settled(false),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                    freshness: Freshness::NoDoneFlag,
                },
            ),
            (
                "settled, no done flag, RESET_..._AND_TIMESTAMPS",
                Event::DependenciesSettled {
                    mode: Mode::ResetTransformationChecksumsAndTimestamps,
                    settled: settled(false),
                    on_failure: OnDependencyFailure::Continue,
                    previous: ViewState::Materialized,
                    freshness: Freshness::NoDoneFlag,
                },
            ),
            ("transformed, data", Event::Transformed { data: true }),
            ("transformed, no data", Event::Transformed { data: false }),
            ("failed, retry", Event::TransformFailed { retry: Retry::Counted, error: "trap".into() }),
            ("failed, network", Event::TransformFailed { retry: Retry::Network, error: "refused".into() }),
            ("failed, no retry", Event::TransformFailed { retry: Retry::No, error: "fatal".into() }),
            ("retry due", Event::RetryDue),
            ("invalidate", Event::Invalidate),
            ("canceled", Event::Canceled { previous: ViewState::Materialized }),
        ]
    }

    fn short(action: &Action) -> String {
        match action {
            Action::RecordFailed { error } => format!("RecordFailed({error})"),
            Action::ReportNetworkRetry { error } => format!("ReportNetworkRetry({error})"),
            Action::Refuse { .. } => "Refuse".into(),
            other => format!("{other:?}"),
        }
    }

    /// Every (state, event) pair, one line each: the golden table.
    #[test]
    fn every_state_and_event() {
        let mut table = String::new();
        for state in ViewState::ALL {
            for (name, event) in events() {
                let (next, actions) = transition(state, &event);
                let actions: Vec<String> = actions.iter().map(short).collect();
                table.push_str(&format!(
                    "{:<13} {:<58} -> {:<13} {}\n",
                    state.as_str(),
                    name,
                    next.as_str(),
                    actions.join(", ")
                ));
            }
        }
        expect![[r#"
            receive       materialize                                                -> waiting       AskDependencies
            receive       materialize once                                           -> waiting       AskDependencies
            receive       materialize TRANSFORM_ONLY                                 -> transforming  Transform
            receive       materialize SET_ONLY                                       -> materialized  RecordWithoutTransforming, NotifyDependents
            receive       settled, all no-data                                       -> receive       Ignore
            receive       settled, dependency failed                                 -> receive       Ignore
            receive       settled, dependency failed, skip                           -> receive       Ignore
            receive       settled, dependency failed, skip, up to date               -> receive       Ignore
            receive       settled, no failure, skip                                  -> receive       Ignore
            receive       settled, up to date                                        -> receive       Ignore
            receive       settled, outdated                                          -> receive       Ignore
            receive       settled, outdated, RESET_..._AND_TIMESTAMPS                -> receive       Ignore
            receive       settled, version changed, RESET_TRANSFORMATION_CHECKSUMS   -> receive       Ignore
            receive       settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS -> receive       Ignore
            receive       settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS -> receive       Ignore
            receive       settled, no done flag                                      -> receive       Ignore
            receive       settled, no done flag, RESET_..._AND_TIMESTAMPS            -> receive       Ignore
            receive       transformed, data                                          -> receive       Ignore
            receive       transformed, no data                                       -> receive       Ignore
            receive       failed, retry                                              -> receive       Ignore
            receive       failed, network                                            -> receive       Ignore
            receive       failed, no retry                                           -> receive       Ignore
            receive       retry due                                                  -> receive       Ignore
            receive       invalidate                                                 -> invalidated   RecordInvalidated
            receive       canceled                                                   -> receive       Ignore
            invalidated   materialize                                                -> waiting       AskDependencies
            invalidated   materialize once                                           -> waiting       AskDependencies
            invalidated   materialize TRANSFORM_ONLY                                 -> transforming  Transform
            invalidated   materialize SET_ONLY                                       -> materialized  RecordWithoutTransforming, NotifyDependents
            invalidated   settled, all no-data                                       -> invalidated   Ignore
            invalidated   settled, dependency failed                                 -> invalidated   Ignore
            invalidated   settled, dependency failed, skip                           -> invalidated   Ignore
            invalidated   settled, dependency failed, skip, up to date               -> invalidated   Ignore
            invalidated   settled, no failure, skip                                  -> invalidated   Ignore
            invalidated   settled, up to date                                        -> invalidated   Ignore
            invalidated   settled, outdated                                          -> invalidated   Ignore
            invalidated   settled, outdated, RESET_..._AND_TIMESTAMPS                -> invalidated   Ignore
            invalidated   settled, version changed, RESET_TRANSFORMATION_CHECKSUMS   -> invalidated   Ignore
            invalidated   settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS -> invalidated   Ignore
            invalidated   settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS -> invalidated   Ignore
            invalidated   settled, no done flag                                      -> invalidated   Ignore
            invalidated   settled, no done flag, RESET_..._AND_TIMESTAMPS            -> invalidated   Ignore
            invalidated   transformed, data                                          -> invalidated   Ignore
            invalidated   transformed, no data                                       -> invalidated   Ignore
            invalidated   failed, retry                                              -> invalidated   Ignore
            invalidated   failed, network                                            -> invalidated   Ignore
            invalidated   failed, no retry                                           -> invalidated   Ignore
            invalidated   retry due                                                  -> invalidated   Ignore
            invalidated   invalidate                                                 -> invalidated   RecordInvalidated
            invalidated   canceled                                                   -> invalidated   Ignore
            no-data       materialize                                                -> waiting       AskDependencies
            no-data       materialize once                                           -> waiting       AskDependencies
            no-data       materialize TRANSFORM_ONLY                                 -> transforming  Transform
            no-data       materialize SET_ONLY                                       -> materialized  RecordWithoutTransforming, NotifyDependents
            no-data       settled, all no-data                                       -> no-data       Ignore
            no-data       settled, dependency failed                                 -> no-data       Ignore
            no-data       settled, dependency failed, skip                           -> no-data       Ignore
            no-data       settled, dependency failed, skip, up to date               -> no-data       Ignore
            no-data       settled, no failure, skip                                  -> no-data       Ignore
            no-data       settled, up to date                                        -> no-data       Ignore
            no-data       settled, outdated                                          -> no-data       Ignore
            no-data       settled, outdated, RESET_..._AND_TIMESTAMPS                -> no-data       Ignore
            no-data       settled, version changed, RESET_TRANSFORMATION_CHECKSUMS   -> no-data       Ignore
            no-data       settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS -> no-data       Ignore
            no-data       settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS -> no-data       Ignore
            no-data       settled, no done flag                                      -> no-data       Ignore
            no-data       settled, no done flag, RESET_..._AND_TIMESTAMPS            -> no-data       Ignore
            no-data       transformed, data                                          -> no-data       Ignore
            no-data       transformed, no data                                       -> no-data       Ignore
            no-data       failed, retry                                              -> no-data       Ignore
            no-data       failed, network                                            -> no-data       Ignore
            no-data       failed, no retry                                           -> no-data       Ignore
            no-data       retry due                                                  -> no-data       Ignore
            no-data       invalidate                                                 -> invalidated   RecordInvalidated
            no-data       canceled                                                   -> no-data       Ignore
            waiting       materialize                                                -> waiting       JoinInFlight
            waiting       materialize once                                           -> waiting       JoinInFlight
            waiting       materialize TRANSFORM_ONLY                                 -> waiting       JoinInFlight
            waiting       materialize SET_ONLY                                       -> waiting       JoinInFlight
            waiting       settled, all no-data                                       -> no-data       RecordNoData, NotifyDependents
            waiting       settled, dependency failed                                 -> transforming  Transform
            waiting       settled, dependency failed, skip                           -> materialized  ReportSkipped, NotifyDependents
            waiting       settled, dependency failed, skip, up to date               -> receive       ReportSkipped, NotifyDependents
            waiting       settled, no failure, skip                                  -> transforming  Transform
            waiting       settled, up to date                                        -> materialized  ReportIdle, NotifyDependents
            waiting       settled, outdated                                          -> transforming  Transform
            waiting       settled, outdated, RESET_..._AND_TIMESTAMPS                -> materialized  RecordWithoutTransforming, NotifyDependents
            waiting       settled, version changed, RESET_TRANSFORMATION_CHECKSUMS   -> materialized  RecordVersion, NotifyDependents
            waiting       settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS -> transforming  Transform
            waiting       settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS -> transforming  Transform
            waiting       settled, no done flag                                      -> transforming  Transform
            waiting       settled, no done flag, RESET_..._AND_TIMESTAMPS            -> no-data       RecordNoData, NotifyDependents
            waiting       transformed, data                                          -> waiting       Ignore
            waiting       transformed, no data                                       -> waiting       Ignore
            waiting       failed, retry                                              -> waiting       Ignore
            waiting       failed, network                                            -> waiting       Ignore
            waiting       failed, no retry                                           -> waiting       Ignore
            waiting       retry due                                                  -> waiting       Ignore
            waiting       invalidate                                                 -> waiting       Refuse
            waiting       canceled                                                   -> materialized  NotifyDependents
            transforming  materialize                                                -> transforming  JoinInFlight
            transforming  materialize once                                           -> transforming  JoinInFlight
            transforming  materialize TRANSFORM_ONLY                                 -> transforming  JoinInFlight
            transforming  materialize SET_ONLY                                       -> transforming  JoinInFlight
            transforming  settled, all no-data                                       -> transforming  Ignore
            transforming  settled, dependency failed                                 -> transforming  Ignore
            transforming  settled, dependency failed, skip                           -> transforming  Ignore
            transforming  settled, dependency failed, skip, up to date               -> transforming  Ignore
            transforming  settled, no failure, skip                                  -> transforming  Ignore
            transforming  settled, up to date                                        -> transforming  Ignore
            transforming  settled, outdated                                          -> transforming  Ignore
            transforming  settled, outdated, RESET_..._AND_TIMESTAMPS                -> transforming  Ignore
            transforming  settled, version changed, RESET_TRANSFORMATION_CHECKSUMS   -> transforming  Ignore
            transforming  settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS -> transforming  Ignore
            transforming  settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS -> transforming  Ignore
            transforming  settled, no done flag                                      -> transforming  Ignore
            transforming  settled, no done flag, RESET_..._AND_TIMESTAMPS            -> transforming  Ignore
            transforming  transformed, data                                          -> materialized  RecordMaterialized, NotifyDependents
            transforming  transformed, no data                                       -> no-data       RecordNoData, NotifyDependents
            transforming  failed, retry                                              -> retrying      ScheduleRetry
            transforming  failed, network                                            -> retrying      ScheduleRetry, ReportNetworkRetry(refused)
            transforming  failed, no retry                                           -> failed        RecordFailed(fatal), NotifyDependents
            transforming  retry due                                                  -> transforming  Ignore
            transforming  invalidate                                                 -> transforming  Refuse
            transforming  canceled                                                   -> materialized  NotifyDependents
            materialized  materialize                                                -> waiting       AskDependencies
            materialized  materialize once                                           -> materialized  ReportIdle, NotifyDependents
            materialized  materialize TRANSFORM_ONLY                                 -> transforming  Transform
            materialized  materialize SET_ONLY                                       -> materialized  RecordWithoutTransforming, NotifyDependents
            materialized  settled, all no-data                                       -> materialized  Ignore
            materialized  settled, dependency failed                                 -> materialized  Ignore
            materialized  settled, dependency failed, skip                           -> materialized  Ignore
            materialized  settled, dependency failed, skip, up to date               -> materialized  Ignore
            materialized  settled, no failure, skip                                  -> materialized  Ignore
            materialized  settled, up to date                                        -> materialized  Ignore
            materialized  settled, outdated                                          -> materialized  Ignore
            materialized  settled, outdated, RESET_..._AND_TIMESTAMPS                -> materialized  Ignore
            materialized  settled, version changed, RESET_TRANSFORMATION_CHECKSUMS   -> materialized  Ignore
            materialized  settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS -> materialized  Ignore
            materialized  settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS -> materialized  Ignore
            materialized  settled, no done flag                                      -> materialized  Ignore
            materialized  settled, no done flag, RESET_..._AND_TIMESTAMPS            -> materialized  Ignore
            materialized  transformed, data                                          -> materialized  Ignore
            materialized  transformed, no data                                       -> materialized  Ignore
            materialized  failed, retry                                              -> materialized  Ignore
            materialized  failed, network                                            -> materialized  Ignore
            materialized  failed, no retry                                           -> materialized  Ignore
            materialized  retry due                                                  -> materialized  Ignore
            materialized  invalidate                                                 -> invalidated   RecordInvalidated
            materialized  canceled                                                   -> materialized  Ignore
            retrying      materialize                                                -> retrying      JoinInFlight
            retrying      materialize once                                           -> retrying      JoinInFlight
            retrying      materialize TRANSFORM_ONLY                                 -> retrying      JoinInFlight
            retrying      materialize SET_ONLY                                       -> retrying      JoinInFlight
            retrying      settled, all no-data                                       -> retrying      Ignore
            retrying      settled, dependency failed                                 -> retrying      Ignore
            retrying      settled, dependency failed, skip                           -> retrying      Ignore
            retrying      settled, dependency failed, skip, up to date               -> retrying      Ignore
            retrying      settled, no failure, skip                                  -> retrying      Ignore
            retrying      settled, up to date                                        -> retrying      Ignore
            retrying      settled, outdated                                          -> retrying      Ignore
            retrying      settled, outdated, RESET_..._AND_TIMESTAMPS                -> retrying      Ignore
            retrying      settled, version changed, RESET_TRANSFORMATION_CHECKSUMS   -> retrying      Ignore
            retrying      settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS -> retrying      Ignore
            retrying      settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS -> retrying      Ignore
            retrying      settled, no done flag                                      -> retrying      Ignore
            retrying      settled, no done flag, RESET_..._AND_TIMESTAMPS            -> retrying      Ignore
            retrying      transformed, data                                          -> retrying      Ignore
            retrying      transformed, no data                                       -> retrying      Ignore
            retrying      failed, retry                                              -> retrying      Ignore
            retrying      failed, network                                            -> retrying      Ignore
            retrying      failed, no retry                                           -> retrying      Ignore
            retrying      retry due                                                  -> transforming  Transform
            retrying      invalidate                                                 -> retrying      Refuse
            retrying      canceled                                                   -> materialized  NotifyDependents
            failed        materialize                                                -> waiting       AskDependencies
            failed        materialize once                                           -> waiting       AskDependencies
            failed        materialize TRANSFORM_ONLY                                 -> transforming  Transform
            failed        materialize SET_ONLY                                       -> materialized  RecordWithoutTransforming, NotifyDependents
            failed        settled, all no-data                                       -> failed        Ignore
            failed        settled, dependency failed                                 -> failed        Ignore
            failed        settled, dependency failed, skip                           -> failed        Ignore
            failed        settled, dependency failed, skip, up to date               -> failed        Ignore
            failed        settled, no failure, skip                                  -> failed        Ignore
            failed        settled, up to date                                        -> failed        Ignore
            failed        settled, outdated                                          -> failed        Ignore
            failed        settled, outdated, RESET_..._AND_TIMESTAMPS                -> failed        Ignore
            failed        settled, version changed, RESET_TRANSFORMATION_CHECKSUMS   -> failed        Ignore
            failed        settled, version changed, new input, RESET_TRANSFORMATION_CHECKSUMS -> failed        Ignore
            failed        settled, never materialized, RESET_TRANSFORMATION_CHECKSUMS -> failed        Ignore
            failed        settled, no done flag                                      -> failed        Ignore
            failed        settled, no done flag, RESET_..._AND_TIMESTAMPS            -> failed        Ignore
            failed        transformed, data                                          -> failed        Ignore
            failed        transformed, no data                                       -> failed        Ignore
            failed        failed, retry                                              -> failed        Ignore
            failed        failed, network                                            -> failed        Ignore
            failed        failed, no retry                                           -> failed        Ignore
            failed        retry due                                                  -> failed        Ignore
            failed        invalidate                                                 -> invalidated   RecordInvalidated
            failed        canceled                                                   -> failed        Ignore
        "#]].assert_eq(&table);
    }

    #[test]
    fn change_detection_follows_schedoscope() {
        let base = Facts {
            recorded_version: Some("v1"),
            recorded_timestamp: Some(100),
            current_version: "v1",
            newest_dependency: Some(("s.d/Raw/1", 90)),
            ..Facts::default()
        };
        let external = Facts { external_flag: Some(FlagCheck::Unchanged), newest_dependency: None, ..base };
        let cases: Vec<(&str, Facts<'_>)> = vec![
            ("up to date", base),
            ("invalidated", Facts { invalidated: true, ..base }),
            ("never materialized", Facts { recorded_timestamp: None, recorded_version: None, ..base }),
            ("schema dropped its metadata", Facts { recorded_timestamp: None, schema_changed: true, ..base }),
            ("version changed", Facts { current_version: "v2", ..base }),
            (
                "version changed, dependency newer",
                Facts { current_version: "v2", newest_dependency: Some(("s.d/Raw/1", 101)), ..base },
            ),
            (
                "external, version changed, flag rewritten",
                Facts { current_version: "v2", external_flag: Some(FlagCheck::Changed), ..external },
            ),
            ("dependency newer", Facts { newest_dependency: Some(("s.d/Raw/1", 101)), ..base }),
            ("dependency as old", Facts { newest_dependency: Some(("s.d/Raw/1", 100)), ..base }),
            ("external, same flag", external),
            ("external, flag rewritten", Facts { external_flag: Some(FlagCheck::Changed), ..external }),
            ("external, flag gone", Facts { external_flag: Some(FlagCheck::Absent), ..external }),
            (
                "external, flag gone, invalidated",
                Facts { external_flag: Some(FlagCheck::Absent), invalidated: true, ..external },
            ),
            ("data gone", Facts { data_gone: true, ..base }),
            ("data gone, version changed", Facts { data_gone: true, current_version: "v2", ..base }),
            ("data gone, never materialized", Facts { data_gone: true, recorded_timestamp: None, ..base }),
        ];
        let table: String = cases
            .iter()
            .map(|(name, facts)| match freshness(facts) {
                Freshness::UpToDate => format!("{name}: up to date\n"),
                Freshness::NoDoneFlag => format!("{name}: no done flag\n"),
                Freshness::Outdated(reason) => format!("{name}: {reason}\n"),
            })
            .collect();
        expect![[r#"
            up to date: up to date
            invalidated: invalidated
            never materialized: never materialized
            schema dropped its metadata: schema changed
            version changed: version changed v1 -> v2
            version changed, dependency newer: version changed v1 -> v2, and dependency s.d/Raw/1 is newer
            external, version changed, flag rewritten: version changed v1 -> v2, and new external data
            dependency newer: dependency s.d/Raw/1 is newer
            dependency as old: up to date
            external, same flag: up to date
            external, flag rewritten: new external data
            external, flag gone: no done flag
            external, flag gone, invalidated: no done flag
            data gone: data gone
            data gone, version changed: data gone
            data gone, never materialized: never materialized
        "#]]
        .assert_eq(&table);
    }

    /// Every failure class against attempts, with retries = 2 and a 10 s
    /// backoff, panics retried or not.
    #[test]
    fn retries_by_failure_class() {
        let mut table = String::new();
        for retry_panics in [false, true] {
            let policy = RetryPolicy { retries: 2, backoff: Duration::from_secs(10), retry_panics };
            for class in [
                FailureClass::Retryable,
                FailureClass::Crash,
                FailureClass::Fatal,
                FailureClass::Host,
                FailureClass::Network,
            ] {
                let delays: Vec<String> = [1, 2, 3, 6, 40]
                    .iter()
                    .map(|&attempts| match retry_delay(class, attempts, &policy) {
                        Some(delay) => format!("{attempts}:{}s", delay.as_secs()),
                        None => format!("{attempts}:give up"),
                    })
                    .collect();
                table.push_str(&format!(
                    "retry_panics={retry_panics:<5} {:<9} {}\n",
                    format!("{class:?}"),
                    delays.join(" ")
                ));
            }
        }
        expect![[r#"
            retry_panics=false Retryable 1:10s 2:20s 3:give up 6:give up 40:give up
            retry_panics=false Crash     1:give up 2:give up 3:give up 6:give up 40:give up
            retry_panics=false Fatal     1:give up 2:give up 3:give up 6:give up 40:give up
            retry_panics=false Host      1:10s 2:20s 3:40s 6:300s 40:300s
            retry_panics=false Network   1:10s 2:20s 3:40s 6:300s 40:300s
            retry_panics=true  Retryable 1:10s 2:20s 3:give up 6:give up 40:give up
            retry_panics=true  Crash     1:10s 2:20s 3:give up 6:give up 40:give up
            retry_panics=true  Fatal     1:give up 2:give up 3:give up 6:give up 40:give up
            retry_panics=true  Host      1:10s 2:20s 3:40s 6:300s 40:300s
            retry_panics=true  Network   1:10s 2:20s 3:40s 6:300s 40:300s
        "#]]
        .assert_eq(&table);
    }

    /// Failures in a run one after the other, with retries = 1: network
    /// trouble never uses up the retries, nor is it given up on.
    #[test]
    fn network_trouble_does_not_count_against_retries() {
        use FailureClass::{Network, Retryable};
        let policy = RetryPolicy { retries: 1, backoff: Duration::from_secs(10), retry_panics: false };
        let mut table = String::new();
        for sequence in [
            vec![Retryable, Retryable],
            vec![Network, Network, Network, Retryable, Retryable],
            vec![Network, Retryable, Network, Network, Retryable],
            vec![Network; 8],
        ] {
            let mut failures = Failures::default();
            let steps: Vec<String> = sequence
                .iter()
                .map(|&class| match failures.next_retry(class, &policy) {
                    Some(delay) => format!("{class:?}:{}s", delay.as_secs()),
                    None => format!("{class:?}:give up"),
                })
                .collect();
            table.push_str(&steps.join(" "));
            table.push('\n');
        }
        expect![[r#"
            Retryable:10s Retryable:give up
            Network:10s Network:20s Network:40s Retryable:10s Retryable:give up
            Network:10s Retryable:10s Network:20s Network:40s Retryable:give up
            Network:10s Network:20s Network:40s Network:80s Network:160s Network:300s Network:300s Network:300s
        "#]]
        .assert_eq(&table);
    }

    #[test]
    fn invalidating_a_view_in_flight_says_why() {
        let (state, actions) = transition(ViewState::Transforming, &Event::Invalidate);
        assert_eq!(state, ViewState::Transforming);
        assert_eq!(
            actions,
            [Action::Refuse { reason: "the view is transforming; invalidate it when it is not in flight".into() }]
        );
    }
}
