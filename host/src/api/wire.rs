//! The JSON the HTTP API speaks: request parameters and response bodies,
//! shared by the server and the remote CLI so that the two cannot drift,
//! and described in `/openapi.json` from these very types.
//!
//! Invariant: plain serde data, no axum and no I/O; a field added here is
//! optional or defaulted, so that an older client still reads a newer
//! server's answers. A state, status or outcome is its `model` enum,
//! written as its serde name, never a string that code would compare.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::model::{
    ActionState, Counters, EndKind, FlowStatus, Issue, ListenerStateKind, RunStatus, StopEffect, StoppedBy,
    Termination, ViewState,
};

/// Every error: one line saying what was wrong and where.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ViewsQuery {
    /// Only views in this state (receive, invalidated, no-data, waiting,
    /// transforming, materialized, retrying, failed); `invalidated` also
    /// selects views with an invalidation pending.
    #[param(value_type = Option<String>,
        pattern = "^(receive|invalidated|no-data|waiting|transforming|materialized|retrying|failed)$")]
    pub status: Option<ViewState>,
    /// Only views whose URL path matches this regular expression.
    pub filter: Option<String>,
    /// Only views with this issue: `errors` (it failed, or a dependency failed) or
    /// `incomplete` (a dependency had no data).
    #[param(value_type = Option<String>, pattern = "^(errors|incomplete)$")]
    pub issue: Option<Issue>,
    /// Also list each view's dependencies.
    pub dependencies: Option<bool>,
    /// Also list, of the views the server holds, those that depend on each view.
    pub dependents: Option<bool>,
    /// With a pattern: the views it addresses and, transitively, all they
    /// depend on (as `trellis views --deps`).
    pub closure: Option<bool>,
    /// Only count the views per state.
    pub overview: Option<bool>,
    /// Views per page, 1 to 10000 (default 1000).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<usize>,
    /// Where to go on: the `next` of the previous page.
    pub cursor: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct View {
    pub view: String,
    #[serde(rename = "type")]
    pub view_type: String,
    #[schema(value_type = String)]
    pub state: ViewState,
    /// When it was last materialized, in milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// `timestamp` as RFC 3339, in UTC.
    #[serde(default)]
    pub materialized_at: Option<String>,
    pub incomplete: bool,
    pub errors: bool,
    /// Invalidated and not acted on yet (a run was stopped or killed first,
    /// or the transformation failed), while `state` says otherwise: the
    /// next run transforms it, and `status=invalidated` selects it.
    #[serde(default)]
    pub invalidation_pending: bool,
    /// Materialized, and `plan` says the next run rematerializes it (new
    /// upstream data, changed logic, data gone): its data is not current.
    #[serde(default)]
    pub stale: bool,
    /// Why it is stale, as `plan` says it; absent when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_reason: Option<String>,
    pub last_error: Option<String>,
    /// While `state` is `retrying` for transient network trouble (shown as
    /// `retrying (network)`, tried again without limit): its last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_error: Option<String>,
    /// What its transformation returned when it last materialized it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, u64>>)]
    pub counters: Option<Counters>,
    pub data_path: String,
    /// On an object root: the prefix of its current version, what an
    /// outside reader reads (`s3://bucket/prefix/<view>/_v/<id>/`); absent
    /// where it has none, or its data is read where it lies (a local root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Vec<String>>,
    /// With `dependents=true`: the views held that depend on it directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependents: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ViewsPage {
    pub views: Vec<View>,
    /// The cursor of the next page; absent on the last one.
    pub next: Option<usize>,
}

/// What `GET /views` answers: a page of views, or with `overview=true`
/// their counts per state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ViewsAnswer {
    Page(ViewsPage),
    Overview(Overview),
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
    #[param(
        pattern = "^(DEFAULT|RESET_TRANSFORMATION_CHECKSUMS|RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS|TRANSFORM_ONLY|SET_ONLY)$"
    )]
    pub mode: Option<String>,
    /// Rebuild the pattern's views whatever their state; what they depend
    /// on is read as it stands and reported EXCLUDED. DEFAULT mode only.
    pub full_refresh: Option<bool>,
}

// A view a run addresses, with its state when the run was accepted. (A
// doc comment would change the schema's description in /openapi.json.)
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = ViewState)]
pub struct AcceptedView {
    pub view: String,
    #[schema(value_type = String)]
    pub state: ViewState,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Accepted {
    pub run: String,
    /// Runs ahead of it; 0 when it started at once.
    pub queued_behind: usize,
    /// The sequence number of the next event: `GET /events` from there
    /// follows this run.
    pub events_from: u64,
    pub views: Vec<AcceptedView>,
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

/// `GET /views/{view}/log`: what the view's last transformations (up to
/// three) logged and printed, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct ViewLog {
    pub view: String,
    pub attempts: Vec<Attempt>,
}

/// One transformation of a view.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct Attempt {
    pub run: String,
    /// Its number in the run, from 1.
    pub attempt: u32,
    /// When it ended, RFC 3339, UTC.
    pub time: String,
    pub plugin: String,
    /// `succeeded`, `no data`, or `failed: <the failure>`.
    pub outcome: String,
    /// `[level, message]` for each line it logged through the host.
    pub lines: Vec<(String, String)>,
    pub stdout: String,
    pub stderr: String,
    /// Bytes left out to keep the log bounded.
    pub truncated_bytes: u64,
}

impl ViewLog {
    pub fn of(view: String, log: crate::metastore::ViewLog) -> ViewLog {
        let attempts = log
            .attempts
            .into_iter()
            .map(|attempt| Attempt {
                run: attempt.run,
                attempt: attempt.attempt,
                time: millis_text(attempt.time),
                plugin: attempt.plugin,
                outcome: attempt.outcome,
                lines: attempt.lines.into_iter().map(|line| (line.level, line.message)).collect(),
                stdout: attempt.stdout,
                stderr: attempt.stderr,
                truncated_bytes: attempt.truncated_bytes,
            })
            .collect();
        ViewLog { view, attempts }
    }
}

/// `GET /txlog/{pattern}`: one incremental view's transaction log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct TxLogView {
    pub view: String,
    /// False when its plugin does not export `transform-incremental`: the
    /// view is rebuilt whole each time and keeps no log.
    pub incremental: bool,
    /// The generation of its last commit; 0 before the first.
    pub generation: u64,
    /// Markers up to this generation were voided by a reset.
    pub reset_through: u64,
    /// Resets of one source: source to generation.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reset_sources: BTreeMap<String, u64>,
    pub entries: Vec<TxLogEntry>,
}

/// One TxId (view, project, source, path) and its TxLog entry.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct TxLogEntry {
    pub project: String,
    pub source: String,
    /// The input's data path, relative to the storage root.
    pub path: String,
    /// The input view.
    pub input: String,
    pub commit_id: String,
    /// `manifest` (the host's hash of the input's files) or `plugin` (an
    /// offset the plugin returned).
    pub commit_type: String,
    /// RFC 3339, UTC.
    pub time: String,
    pub enabled: bool,
}

impl From<crate::scheduler::TxLogView> for TxLogView {
    fn from(view: crate::scheduler::TxLogView) -> Self {
        let head = view.head.unwrap_or_default();
        TxLogView {
            view: view.view,
            incremental: view.incremental,
            generation: head.generation,
            reset_through: head.reset_through,
            reset_sources: head.reset_sources,
            entries: view
                .entries
                .into_iter()
                .map(|entry| TxLogEntry {
                    project: entry.project,
                    source: entry.source,
                    path: entry.path,
                    input: entry.input,
                    commit_id: entry.commit_id,
                    commit_type: crate::model::wire_name(&entry.commit_type),
                    time: millis_text(entry.time),
                    enabled: entry.enabled,
                })
                .collect(),
        }
    }
}

/// `POST /reset-txlog/{pattern}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
pub struct ResetTxLogQuery {
    /// Reset only this source (a dependency's name).
    pub source: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TxLogReset {
    pub reset: Vec<String>,
    pub refused: Vec<Refusal>,
    /// Set when some views were refused (the status is then 409).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Run {
    pub id: String,
    pub pattern: String,
    #[schema(value_type = String)]
    pub mode: crate::model::Mode,
    /// Milliseconds since the Unix epoch.
    pub started: i64,
    /// Milliseconds since the Unix epoch.
    pub finished: Option<i64>,
    /// `started` as RFC 3339, in UTC.
    #[serde(default)]
    pub started_at: String,
    /// `finished` as RFC 3339, in UTC.
    #[serde(default)]
    pub finished_at: Option<String>,
    /// From its start to its end, in milliseconds, once it has ended.
    #[serde(default)]
    pub duration_ms: Option<i64>,
    /// How many views it transformed (each with one or more attempts).
    #[serde(default)]
    pub transformed: usize,
    /// Of its SUCCESSFUL views, how many it found without data (an
    /// external view without its done flag, a transformation that found
    /// nothing).
    #[serde(default)]
    pub no_data: usize,
    /// `queued`, `running` or `finished`; `interrupted` for a run whose
    /// process ended during it.
    #[schema(value_type = String)]
    pub status: RunStatus,
    #[schema(value_type = Option<String>)]
    pub termination: Option<Termination>,
    /// Views found up to date (counted, not listed among the flows).
    #[serde(default)]
    pub idle: usize,
    /// A full refresh: the pattern's views rebuilt whatever their state
    /// (absent for any other run).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full_refresh: bool,
    /// How it ended, typed (the same as `termination`); absent while it
    /// has not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Ended>,
    /// The coordinator action it runs: `[coordinator, nominal time in ms]`
    /// (absent for a run asked for by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = nominal_action)]
    pub action: Option<(String, i64)>,
    /// The action's nominal time as RFC 3339, in UTC (absent with `action`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_time: Option<String>,
    /// Once it has finished: how many views ended in each flow status
    /// (`SUCCESSFUL`, `TERMINATED_WITH_ERROR`, ...; idle ones are `IDLE`),
    /// as its summary counted them. Absent for runs recorded before it was kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, usize>)]
    pub flow_counts: BTreeMap<String, usize>,
}

impl Run {
    /// The API's account of a recorded run, as it stands.
    pub fn new(record: crate::metastore::RunRecord, status: RunStatus) -> Run {
        Run {
            status,
            started_at: millis_text(record.started),
            finished_at: record.finished.map(millis_text),
            duration_ms: record.duration_ms(),
            transformed: record.attempts.len(),
            no_data: record.no_data,
            nominal_time: record.action.as_ref().map(|(_, nominal)| millis_text(*nominal)),
            id: record.id,
            pattern: record.pattern,
            mode: record.mode,
            started: record.started,
            finished: record.finished,
            ended: record.termination.as_ref().map(Ended::from),
            termination: record.termination,
            idle: record.idle,
            full_refresh: record.full_refresh,
            action: record.action,
            flow_counts: record.flow_counts,
        }
    }
}

/// `Run.action`'s schema: `[coordinator, nominal time in ms]`, a pair.
fn nominal_action() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ArrayItems, ObjectBuilder, SchemaType, Type};
    ArrayBuilder::new()
        .description(Some("`[coordinator, nominal time in milliseconds since the Unix epoch]`"))
        .prefix_items([
            ObjectBuilder::new().schema_type(SchemaType::new(Type::String)).build(),
            ObjectBuilder::new().schema_type(SchemaType::new(Type::Integer)).build(),
        ])
        .items(ArrayItems::False)
        .min_items(Some(2))
        .max_items(Some(2))
        .build()
}

/// How a run ended: its kind and the details that kind has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Ended {
    /// `completed`, `completed_with_failures`, `stopped` (while it
    /// executed), `dequeued` (before it started), `interrupted` (its process
    /// ended during it) or `failed`.
    #[schema(value_type = String)]
    pub kind: EndKind,
    /// With `completed_with_failures`: how many views failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_views: Option<usize>,
    /// With `stopped` and `dequeued`: `request` (a stop request or Ctrl-C)
    /// or `shutdown` (the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub stopped_by: Option<StoppedBy>,
    /// With `failed`: why it could not go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<&Termination> for Ended {
    fn from(termination: &Termination) -> Ended {
        Ended {
            kind: termination.kind(),
            failed_views: termination.failed_views(),
            stopped_by: termination.stopped_by(),
            reason: termination.reason().map(str::to_string),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Flow {
    pub view: String,
    #[schema(value_type = String)]
    pub status: FlowStatus,
    /// The error it failed with in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What its transformation returned in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, u64>>)]
    pub counters: Option<Counters>,
    /// How many times its transformation was called in the run, retries
    /// included; absent for a view not transformed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Why it ended so when its status alone does not say: a view skipped,
    /// or built or left without data, while a dependency failed names it
    /// (`upstream failed: VIEW`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

// A view that failed in a run, with its error (not `Failure`: the runtime
// and the listeners' supervision have one each). The schema keeps its name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[schema(as = Failure)]
pub struct FailedView {
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
    pub failures: Vec<FailedView>,
    pub incomplete: Vec<String>,
    pub with_errors: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StopOutcome {
    /// `stopping`, `dequeued`.
    #[schema(value_type = String)]
    pub outcome: StopEffect,
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
    /// When it started, in milliseconds since the Unix epoch.
    pub since: i64,
    /// `since` as RFC 3339, in UTC.
    #[serde(default)]
    pub started_at: String,
    /// How far an engine's job has come (Spark: its application, jobs,
    /// stages and tasks), as its event log last said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
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
    pub memory: MemoryBudget,
}

/// The memory budget of plugin calls: each live store reserves its memory
/// cap from it, and calls wait while it is taken.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MemoryBudget {
    pub budget_bytes: u64,
    /// Reserved by the plugin stores alive now (transformations, checksums
    /// and listener instances).
    pub reserved_bytes: u64,
    /// The most reserved at once since the server started.
    pub peak_reserved_bytes: u64,
    /// Calls waiting for their reservation.
    pub waiting: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Listener {
    pub name: String,
    pub plugin: Option<String>,
    /// `enabled`, `disabled` or `unavailable`.
    #[schema(value_type = String)]
    pub state: ListenerStateKind,
    pub reason: Option<String>,
    pub cursor: u64,
    pub behind: u64,
    /// When its oldest event not yet delivered was logged, in
    /// milliseconds since the Unix epoch.
    pub oldest_undelivered_ms: Option<i64>,
    /// `oldest_undelivered_ms` as RFC 3339, in UTC.
    #[serde(default)]
    pub oldest_undelivered_at: Option<String>,
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
    /// The first sequence number to send (`Last-Event-ID` + 1 wins), at
    /// most the next event's: past it is a 400.
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

/// The kinds of Server-Sent Event `GET /events` sends (its `event:` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamEvent {
    /// An event of the log, its sequence number as the id.
    View,
    /// Events retention removed: a `Gap`.
    Gap,
    /// The run followed has finished: an `End`.
    End,
    /// The stream failed, and why (plain text).
    Error,
}

/// A `gap` event: the sequence numbers retention removed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Gap {
    pub from: u64,
    pub to: u64,
}

/// An `end` event: the run followed has finished, this way.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct End {
    pub run: String,
    pub termination: Termination,
}

/// What `POST /reload` changed, by view type name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Reloaded {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Types whose schema checksum changed: their views' records were dropped.
    pub schema_changed: Vec<String>,
    /// Types whose version checksum changed, with what changed; their views
    /// are `version changed` for `plan` and the next materialize.
    pub version_changed: Vec<VersionChanged>,
    /// Settings keys (`defaults.concurrency`, `plugins.NAME`, ...) that changed.
    pub settings_changed: Vec<String>,
    /// Views the server holds after the reload.
    pub views: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionChanged {
    pub view_type: String,
    /// The plugin or resource, as `plan` names it.
    pub change: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(value: &impl Serialize) -> String {
        serde_json::to_string(value).unwrap()
    }

    /// The typed fields are written as the strings they were before they
    /// were typed: the JSON is the API's contract, not the Rust.
    #[test]
    fn typed_fields_keep_their_json() {
        let run = Run {
            id: "r".into(),
            pattern: "p".into(),
            mode: crate::model::Mode::Default,
            started: 1,
            finished: None,
            status: RunStatus::Interrupted,
            termination: Some(Termination::Dequeued),
            idle: 0,
            full_refresh: false,
            ended: Some((&Termination::Dequeued).into()),
            action: None,
            started_at: "1970-01-01T00:00:00Z".into(),
            finished_at: None,
            duration_ms: None,
            transformed: 0,
            no_data: 0,
            nominal_time: None,
            flow_counts: Default::default(),
        };
        assert_eq!(
            json(&run),
            r#"{"id":"r","pattern":"p","mode":"DEFAULT","started":1,"finished":null,"started_at":"1970-01-01T00:00:00Z","finished_at":null,"duration_ms":null,"transformed":0,"no_data":0,"status":"interrupted","termination":"stopped by request before it started","idle":0,"ended":{"kind":"dequeued","stopped_by":"request"}}"#
        );
        let failed = Ended::from(&Termination::Failed("disk full".into()));
        assert_eq!(json(&failed), r#"{"kind":"failed","reason":"disk full"}"#);
        let failures = Ended::from(&Termination::CompletedWithFailures(2));
        assert_eq!(json(&failures), r#"{"kind":"completed_with_failures","failed_views":2}"#);
        let flow = Flow {
            view: "v".into(),
            status: FlowStatus::TerminatedWithError,
            error: None,
            counters: None,
            attempts: None,
            reason: None,
        };
        assert_eq!(json(&flow), r#"{"view":"v","status":"TERMINATED_WITH_ERROR"}"#);
        let failed = FailedView { view: "v".into(), error: "e".into() };
        assert_eq!(json(&failed), r#"{"view":"v","error":"e"}"#);
        assert_eq!(json(&StopOutcome { outcome: StopEffect::Dequeued }), r#"{"outcome":"dequeued"}"#);
        assert_eq!(
            json(&AcceptedView { view: "v".into(), state: ViewState::NoData }),
            r#"{"view":"v","state":"no-data"}"#
        );
        let listener = Listener {
            name: "l".into(),
            plugin: None,
            state: ListenerStateKind::Enabled,
            reason: None,
            cursor: 1,
            behind: 0,
            oldest_undelivered_ms: None,
            oldest_undelivered_at: None,
            restarts: 0,
            delivered: 0,
            last_error: None,
        };
        assert_eq!(
            json(&listener),
            r#"{"name":"l","plugin":null,"state":"enabled","reason":null,"cursor":1,"behind":0,"oldest_undelivered_ms":null,"oldest_undelivered_at":null,"restarts":0,"delivered":0,"last_error":null}"#
        );
        assert_eq!(json(&Gap { from: 3, to: 9 }), r#"{"from":3,"to":9}"#);
        let end = End { run: "r".into(), termination: Termination::CompletedWithFailures(2) };
        assert_eq!(json(&end), r#"{"run":"r","termination":"completed with 2 failed views"}"#);
        let kinds = [StreamEvent::View, StreamEvent::Gap, StreamEvent::End, StreamEvent::Error];
        assert_eq!(kinds.map(|kind| crate::model::wire_name(&kind)), ["view", "gap", "end", "error"]);
    }
}

/// A coordinator as `GET /coordinators` lists it. Times are RFC 3339, UTC.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Coordinator {
    pub name: String,
    pub suspended: bool,
    /// The nominal time of the last action created.
    pub last_nominal: Option<String>,
    /// The nominal time of the next action to create; null once `end` is reached.
    pub next_nominal: Option<String>,
    /// Its actions per state (WAITING, READY, ...); states without actions are absent.
    #[schema(value_type = BTreeMap<String, usize>)]
    pub counts: BTreeMap<ActionState, usize>,
    /// Nominal times due that have no action yet, as of its last tick
    /// (catch-up held back by `throttle`); counted up to 100,000.
    #[serde(default)]
    pub behind: usize,
    /// The oldest of them; null when it is not behind.
    #[serde(default)]
    pub behind_since: Option<String>,
    /// How long it is behind, in seconds: from `behind_since` to its last tick.
    #[serde(default)]
    pub behind_seconds: i64,
}

/// One action of a coordinator. Times are RFC 3339, UTC.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Action {
    pub coordinator: String,
    /// `coordinator@nominal`, as the CLI and events name it.
    pub name: String,
    pub nominal: String,
    /// When it was created.
    pub actual: String,
    /// WAITING, READY, SUBMITTED, RUNNING, SUCCEEDED, FAILED, TIMEDOUT, SKIPPED or KILLED.
    #[schema(value_type = String)]
    pub state: ActionState,
    /// The view pattern it materializes.
    pub views: String,
    /// The external views it waits for, while WAITING, and each
    /// `latest(n)` that found no instance (`latest(n) of TYPE`).
    pub missing: Vec<String>,
    /// Its run, once submitted (the last one after a rerun).
    pub run: Option<String>,
    pub previous_runs: Vec<String>,
    /// Why it is SKIPPED, FAILED, TIMEDOUT or KILLED.
    pub reason: Option<String>,
    /// Under `evaluation_time = "actual"`: the done flags (relative to the
    /// storage root) its `latest()` found at its creation, the only ones
    /// its run reads; null under `present`.
    #[serde(default)]
    pub latest_found: Option<Vec<String>>,
}

/// `GET /coordinators/{name}/actions`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ActionsQuery {
    /// Only the actions in this state.
    #[param(pattern = "^(WAITING|READY|SUBMITTED|RUNNING|SUCCEEDED|FAILED|TIMEDOUT|SKIPPED|KILLED)$")]
    pub state: Option<String>,
}

/// The nominal times an operation covers, both included (RFC 3339, or a
/// date: from its start, to its end).
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RangeQuery {
    #[param(
        pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2}))?$"
    )]
    pub from: Option<String>,
    #[param(
        pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2}))?$"
    )]
    pub to: Option<String>,
}

impl From<&crate::scheduler::CoordinatorStatus> for Coordinator {
    fn from(status: &crate::scheduler::CoordinatorStatus) -> Coordinator {
        Coordinator {
            name: status.name.clone(),
            suspended: status.suspended,
            last_nominal: status.last_nominal.map(utc_text),
            next_nominal: status.next_nominal.map(utc_text),
            counts: status.counts.clone(),
            behind: status.lag.actions,
            behind_since: status.lag.since.map(utc_text),
            behind_seconds: status.lag_seconds,
        }
    }
}

impl From<&crate::metastore::ActionRecord> for Action {
    fn from(record: &crate::metastore::ActionRecord) -> Action {
        let time = millis_text;
        Action {
            coordinator: record.coordinator.clone(),
            name: crate::scheduler::coordinate::action_name(&record.coordinator, record.nominal),
            nominal: time(record.nominal),
            actual: time(record.actual),
            state: record.state,
            views: record.views.clone(),
            missing: record.missing.clone(),
            run: record.run.clone(),
            previous_runs: record.previous_runs.clone(),
            reason: record.reason.clone(),
            latest_found: record.latest_found.clone(),
        }
    }
}

/// Milliseconds since the Unix epoch as the API writes times.
pub fn millis_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(|| ms.to_string(), utc_text)
}

/// A time as the API writes it: RFC 3339 in UTC, to the second.
pub fn utc_text(time: chrono::DateTime<chrono::Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
