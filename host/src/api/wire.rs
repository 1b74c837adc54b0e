//! The JSON the HTTP API speaks: request parameters and response bodies,
//! shared by the server and the remote CLI so that the two cannot drift,
//! and described in `/openapi.json` from these very types.
//!
//! Invariant: plain serde data, no axum and no I/O; a field added here is
//! optional or defaulted, so that an older client still reads a newer
//! server's answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Every error: one line saying what was wrong and where.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ViewsQuery {
    /// Only views in this state (receive, invalidated, no-data, waiting,
    /// transforming, materialized, retrying, failed).
    pub status: Option<String>,
    /// Only views whose URL path matches this regular expression.
    pub filter: Option<String>,
    /// Only views with this issue: `errors` (a dependency failed) or
    /// `incomplete` (a dependency had no data).
    pub issue: Option<String>,
    /// Also list each view's dependencies.
    pub dependencies: Option<bool>,
    /// With a pattern: the views it addresses and, transitively, all they
    /// depend on (as `trellis views --deps`).
    pub closure: Option<bool>,
    /// Only count the views per state.
    pub overview: Option<bool>,
    /// Views per page, 1 to 10000 (default 1000).
    pub limit: Option<usize>,
    /// Where to go on: the `next` of the previous page.
    pub cursor: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct View {
    pub view: String,
    #[serde(rename = "type")]
    pub view_type: String,
    pub state: String,
    /// Milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    pub incomplete: bool,
    pub errors: bool,
    pub last_error: Option<String>,
    pub data_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ViewsPage {
    pub views: Vec<View>,
    /// The cursor of the next page; absent on the last one.
    pub next: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Overview {
    /// Views per state, states without views left out.
    pub overview: BTreeMap<String, usize>,
    pub total: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MaterializeQuery {
    /// DEFAULT, RESET_TRANSFORMATION_CHECKSUMS,
    /// RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS, TRANSFORM_ONLY or SET_ONLY.
    pub mode: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ViewState {
    pub view: String,
    pub state: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Accepted {
    pub run: String,
    /// Runs ahead of it; 0 when it started at once.
    pub queued_behind: usize,
    /// The sequence number of the next event: `GET /events` from there
    /// follows this run.
    pub events_from: u64,
    pub views: Vec<ViewState>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InvalidateQuery {
    /// Also invalidate what the views depend on.
    pub dependencies: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Refusal {
    pub view: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Invalidated {
    pub invalidated: Vec<String>,
    pub refused: Vec<Refusal>,
    /// Set when some views were refused (the status is then 409).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Run {
    pub id: String,
    pub pattern: String,
    pub mode: String,
    pub started: i64,
    pub finished: Option<i64>,
    /// `queued`, `running` or `finished`; `interrupted` for a run whose
    /// process ended during it.
    pub status: String,
    #[schema(value_type = Option<String>)]
    pub termination: Option<crate::model::Termination>,
    /// Views found up to date (counted, not listed among the flows).
    #[serde(default)]
    pub idle: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Flow {
    pub view: String,
    pub status: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Failure {
    pub view: String,
    pub error: String,
}

/// A run with its views' flow statuses (views found up to date are
/// counted in `idle`, not listed).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunDetail {
    pub run: Run,
    pub flows: Vec<Flow>,
    pub idle: usize,
    pub failures: Vec<Failure>,
    pub incomplete: Vec<String>,
    pub with_errors: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StopOutcome {
    /// `stopping`, `dequeued`.
    pub outcome: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlanLine {
    pub view: String,
    pub plan: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunningTransformation {
    pub view: String,
    pub plugin: String,
    /// Milliseconds since the Unix epoch.
    pub since: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Permits {
    /// A plugin's name, or `*` for the global limit.
    pub plugin: String,
    pub in_use: usize,
    pub limit: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Transformations {
    pub running: Vec<RunningTransformation>,
    pub permits: Vec<Permits>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Listener {
    pub name: String,
    pub plugin: Option<String>,
    /// `enabled`, `disabled` or `unavailable`.
    pub state: String,
    pub reason: Option<String>,
    pub cursor: u64,
    pub behind: u64,
    pub oldest_undelivered_ms: Option<i64>,
    pub restarts: u32,
    pub delivered: u64,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Enabled {
    pub name: String,
    /// Whether it was disabled (and is now enabled and restarted).
    pub was_disabled: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PluginStatus {
    pub name: String,
    pub file: String,
    pub world: Option<String>,
    pub content_hash: Option<String>,
    /// Why it cannot be used as the project uses it, if so.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// The first sequence number to send (`Last-Event-ID` + 1 wins).
    pub from: Option<u64>,
    /// Only this run's events; the stream then ends with an `end` event
    /// once the run has finished.
    pub run: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub current_run: Option<String>,
    pub views: usize,
}
