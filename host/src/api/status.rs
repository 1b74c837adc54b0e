//! What the server is doing and has: health, running transformations and
//! permits, listeners (and re-enabling one), plugins, the Prometheus
//! metrics, and the API's own description.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::extract::{Path, Shared};
use super::wire::{self, ErrorBody};
use super::{ApiError, AppState};
use crate::listeners::{self, Listeners};
use crate::model::ActionState;
use crate::scheduler::service::{CoordinatorAnswer, CoordinatorOperation};

#[utoipa::path(get, path = "/health", responses((status = 200, body = wire::Health)))]
pub(super) async fn health(State(state): Shared) -> Json<wire::Health> {
    let table = state.table();
    Json(wire::Health {
        status: "ok".into(),
        current_run: table.current_run.as_ref().map(|run| run.id.clone()),
        views: table.views().len(),
    })
}

#[utoipa::path(get, path = "/transformations", responses((status = 200, body = wire::Transformations)))]
pub(super) async fn transformations(State(state): Shared) -> Json<wire::Transformations> {
    Json(transformations_of(&state))
}

/// The transformations running, the permits and the memory budget.
pub(super) fn transformations_of(state: &AppState) -> wire::Transformations {
    let running = state
        .table()
        .running
        .values()
        .map(|r| wire::RunningTransformation {
            view: r.view.to_string(),
            plugin: r.plugin.clone(),
            since: r.since,
            started_at: wire::millis_text(r.since),
            progress: r.progress.clone(),
        })
        .collect();
    let permits = state
        .permits
        .iter()
        .map(|p| wire::Permits { plugin: p.plugin.clone(), in_use: p.in_use(), limit: p.limit })
        .collect();
    let usage = state.plugins.memory_budget().usage();
    let memory = wire::MemoryBudget {
        budget_bytes: usage.budget as u64,
        reserved_bytes: usage.reserved as u64,
        peak_reserved_bytes: usage.peak_reserved as u64,
        waiting: usage.waiting as u64,
    };
    wire::Transformations { running, permits, memory }
}

/// How old the overview's listener statuses may be before they are read
/// again.
const SNAPSHOT_AGE: std::time::Duration = std::time::Duration::from_millis(500);

/// The listeners' statuses for the UI's overview, read from the metastore
/// at most every [`SNAPSHOT_AGE`] and off the request's path: a metastore
/// read waits while a commit applies (sled excludes every reader for a
/// batch), and a large commit (100,000 views invalidated) takes a second.
/// `GET /listeners` reads them afresh.
#[derive(Default)]
pub struct ListenerSnapshot {
    taken: std::sync::Mutex<Option<(std::time::Instant, Arc<Vec<wire::Listener>>)>>,
    refreshing: std::sync::atomic::AtomicBool,
}

impl ListenerSnapshot {
    /// Read again on the next request, as after a listener is enabled.
    pub(super) fn forget(&self) {
        *self.taken.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The snapshot, read now if there is none; an old one is shown while a
/// blocking task reads the next.
pub(super) async fn listener_snapshot(state: &Arc<AppState>) -> Result<Arc<Vec<wire::Listener>>, ApiError> {
    use std::sync::atomic::Ordering;
    let snapshot = &state.listener_snapshot;
    let taken = snapshot.taken.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match taken {
        Some((at, statuses)) => {
            if at.elapsed() > SNAPSHOT_AGE && !snapshot.refreshing.swap(true, Ordering::AcqRel) {
                let state = state.clone();
                tokio::task::spawn_blocking(move || {
                    if let Ok(statuses) = listener_status(&state) {
                        let fresh = (std::time::Instant::now(), Arc::new(statuses));
                        *state.listener_snapshot.taken.lock().unwrap_or_else(|p| p.into_inner()) = Some(fresh);
                    }
                    state.listener_snapshot.refreshing.store(false, Ordering::Release);
                });
            }
            Ok(statuses)
        }
        None => {
            let statuses = Arc::new(listener_status(state)?);
            *snapshot.taken.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((std::time::Instant::now(), statuses.clone()));
            Ok(statuses)
        }
    }
}

pub(super) fn listener_status(state: &AppState) -> Result<Vec<wire::Listener>, ApiError> {
    let statuses = listeners::status(&state.catalog, &state.store).map_err(listener_error)?;
    Ok(statuses
        .into_iter()
        .map(|status| wire::Listener {
            state: status.state.kind(),
            reason: status.state.reason().map(str::to_string),
            name: status.name,
            plugin: status.plugin,
            cursor: status.cursor,
            behind: status.behind,
            oldest_undelivered_ms: status.oldest_undelivered_ms,
            oldest_undelivered_at: status.oldest_undelivered_ms.map(wire::millis_text),
            restarts: status.restarts,
            delivered: status.delivered,
            last_error: status.last_error,
        })
        .collect())
}

fn listener_error(error: listeners::Error) -> ApiError {
    let status = match error {
        listeners::Error::Unknown { .. } => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, error.to_string())
}

#[utoipa::path(get, path = "/listeners", responses((status = 200, body = [wire::Listener])))]
pub(super) async fn list_listeners(State(state): Shared) -> Result<Json<Vec<wire::Listener>>, ApiError> {
    Ok(Json(listener_status(&state)?))
}

#[utoipa::path(post, path = "/listeners/{name}/enable", params(("name" = String, Path, description = "A listener's name")),
    responses((status = 200, body = wire::Enabled), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn enable_listener(State(state): Shared, Path(name): Path) -> Result<Json<wire::Enabled>, ApiError> {
    let was_disabled = listeners::enable(&state.catalog, &state.store, &name).map_err(listener_error)?;
    state.listener_snapshot.forget();
    // Listeners read their records when they start: a restart of all of
    // them (each from its stored cursor) brings this one back. It runs as a
    // task of its own, so that a request timing out or a client hanging up
    // cannot leave the listeners stopped; and it also runs when an earlier
    // restart failed and left none running.
    let restart = {
        let state = state.clone();
        tokio::spawn(async move {
            let mut running = state.listeners.lock().await;
            if !was_disabled && running.is_some() {
                return Ok(());
            }
            if let Some(old) = running.take() {
                old.shutdown().await;
            }
            *running = Some(Listeners::start(&state.catalog, &state.plugins, state.store.clone()).await?);
            Ok::<(), listeners::Error>(())
        })
    };
    match restart.await {
        Ok(started) => started.map_err(listener_error)?,
        Err(e) => {
            return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("restarting the listeners: {e}")));
        }
    }
    Ok(Json(wire::Enabled { name, was_disabled }))
}

#[utoipa::path(get, path = "/plugins", responses((status = 200, body = [wire::PluginStatus])))]
pub(super) async fn plugins(State(state): Shared) -> Json<Vec<wire::PluginStatus>> {
    Json(state.plugin_statuses.clone())
}

#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub(super) async fn metrics(State(state): Shared) -> Result<Response, ApiError> {
    let listeners = listener_status(&state)?;
    let next_sequence = state.store.next_sequence()?;
    // Asked of the service (a request between its steps, never behind a
    // run); before the coordinators are open there are none to count.
    let coordinators = match state.handle.coordinators(CoordinatorOperation::Statuses).await {
        Ok(CoordinatorAnswer::Statuses(statuses)) => statuses,
        _ => Vec::new(),
    };
    let mut text = Exposition::default();
    {
        let table = state.table();
        run_metrics(&mut text, &table);
        text.metric(
            "events_next_sequence",
            "counter",
            "The sequence number the next event will get.",
            &[(String::new(), next_sequence)],
        );
        let lag: Vec<(String, u64)> =
            listeners.iter().map(|l| (format!("{{listener=\"{}\"}}", label(&l.name)), l.behind)).collect();
        text.metric("listener_behind_events", "gauge", "Events each listener has not received yet.", &lag);
        coordinator_metrics(&mut text, &coordinators, &table.counters);
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text.0).into_response())
}

/// Prometheus's text format, one metric (help, type, samples) at a time.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    fn metric(&mut self, name: &str, kind: &str, help: &str, samples: &[(String, u64)]) {
        use std::fmt::Write;
        let _ = writeln!(self.0, "# HELP trellis_{name} {help}\n# TYPE trellis_{name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(self.0, "trellis_{name}{labels} {value}");
        }
    }
}

/// What the runs and their transformations have done, and the views by state.
fn run_metrics(text: &mut Exposition, table: &crate::scheduler::table::Table) {
    let counters = &table.counters;
    let one = |value: u64| [(String::new(), value)];
    text.metric(
        "runs_finished_total",
        "counter",
        "Runs finished since the server started.",
        &one(counters.runs_finished),
    );
    text.metric("runs_queued", "gauge", "Runs accepted and waiting.", &one(table.queued_runs.len() as u64));
    text.metric(
        "run_views_pending",
        "gauge",
        "Views of the current run not settled yet.",
        &one(table.current_run_pending as u64),
    );
    text.metric(
        "transformations_total",
        "counter",
        "Transformations ended since the server started, by outcome.",
        &[
            ("{outcome=\"succeeded\"}".into(), counters.succeeded),
            ("{outcome=\"failed\"}".into(), counters.failed),
            ("{outcome=\"retried\"}".into(), counters.retried),
            ("{outcome=\"canceled\"}".into(), counters.canceled),
        ],
    );
    text.metric(
        "transformations_running",
        "gauge",
        "Transformations running (holding their permits).",
        &one(table.running.len() as u64),
    );
    let states: Vec<(String, u64)> =
        table.overview().into_iter().map(|(s, n)| (format!("{{state=\"{s}\"}}"), n as u64)).collect();
    text.metric("views", "gauge", "Instantiated views by state.", &states);
}

/// Each coordinator's actions, lag and the safety rescans.
fn coordinator_metrics(
    text: &mut Exposition,
    coordinators: &[crate::scheduler::CoordinatorStatus],
    counters: &crate::scheduler::table::Counters,
) {
    // Every state of every coordinator, zeros included: a series that
    // drops to nothing would read as missing data.
    let actions: Vec<(String, u64)> = coordinators
        .iter()
        .flat_map(|c| {
            let name = label(&c.name);
            ActionState::ALL.into_iter().map(move |s| {
                (format!("{{coordinator=\"{name}\",state=\"{s}\"}}"), c.counts.get(&s).copied().unwrap_or(0) as u64)
            })
        })
        .collect();
    text.metric("coordinator_actions", "gauge", "Actions of each coordinator by state.", &actions);
    let per_coordinator = |value: fn(&crate::scheduler::CoordinatorStatus) -> u64| -> Vec<(String, u64)> {
        coordinators.iter().map(|c| (format!("{{coordinator=\"{}\"}}", label(&c.name)), value(c))).collect()
    };
    text.metric(
        "coordinator_behind_actions",
        "gauge",
        "Nominal times due that have no action yet (catch-up held back by throttle).",
        &per_coordinator(|c| c.lag.actions as u64),
    );
    text.metric(
        "coordinator_behind_seconds",
        "gauge",
        "How long each coordinator is behind: from its oldest due time without an action.",
        &per_coordinator(|c| c.lag_seconds.max(0) as u64),
    );
    let one = |value: u64| [(String::new(), value)];
    text.metric(
        "coordinator_rescans_total",
        "counter",
        "Safety rescans of waiting actions' inputs (rescan_interval) since the server started.",
        &one(counters.rescans),
    );
    text.metric(
        "coordinator_rescans_found_total",
        "counter",
        "Safety rescans that found an input the watches had missed.",
        &one(counters.rescans_found),
    );
}

/// A name as a Prometheus label value: what would end or break it replaced.
fn label(name: &str) -> String {
    name.replace(['"', '\\', '\n'], "_")
}

#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "This description")))]
pub(super) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], super::spec()).into_response()
}
