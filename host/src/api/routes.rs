//! The API's handlers, each described for `/openapi.json` by its
//! `#[utoipa::path]`. Reads come from the service's table and the
//! metastore; writes are requests to the service.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::de::DeserializeOwned;

use super::wire::{self, ErrorBody, StreamEvent};
use super::{ApiError, AppState};
use crate::listeners::{self, Listeners};
use crate::metastore::{Metastore, RunRecord};
use crate::model::{FlowStatus, Issue, RunStatus, StopEffect, Termination, ViewState, wire_name};
use crate::scheduler::Mode;
use crate::scheduler::Stopping;
use crate::scheduler::table::Table;

type Shared = State<Arc<AppState>>;

/// Every route: method and path as `/openapi.json` writes it. The router
/// below must serve each; a test checks both.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/health"),
    ("get", "/views"),
    ("get", "/views/{pattern}"),
    ("post", "/materialize/{pattern}"),
    ("post", "/invalidate/{pattern}"),
    ("get", "/runs"),
    ("get", "/runs/{id}"),
    ("post", "/runs/{id}/stop"),
    ("get", "/plan/{pattern}"),
    ("get", "/transformations"),
    ("get", "/listeners"),
    ("post", "/listeners/{name}/enable"),
    ("get", "/plugins"),
    ("get", "/events"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
];

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(health))
        .route("/views", get(list_views))
        .route("/views/{*pattern}", get(pattern_views))
        .route("/materialize/{*pattern}", post(materialize))
        .route("/invalidate/{*pattern}", post(invalidate))
        .route("/runs", get(runs))
        .route("/runs/{id}", get(run))
        .route("/runs/{id}/stop", post(stop))
        .route("/plan/{*pattern}", get(plan))
        .route("/transformations", get(transformations))
        .route("/listeners", get(list_listeners))
        .route("/listeners/{name}/enable", post(enable_listener))
        .route("/plugins", get(plugins))
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
}

/// Query parameters, with a bad one answered as a one-line 400.
pub(super) struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(ApiError::bad_request(format!("query: {}", rejection.body_text()))),
        }
    }
}

/// One path parameter, percent-decoded, with a bad one answered as a one-line 400.
pub(super) struct Path(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Path {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<String>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => Err(ApiError::bad_request(format!("path: {}", rejection.body_text()))),
        }
    }
}

/// How many views one request's pattern may address. Reads instantiate
/// too, and the lattice's own limit (ten million) is for the command line.
pub const REQUEST_PATTERN_LIMIT: usize = 1_000_000;

/// Refuses a pattern that addresses more views than one request may. A
/// pattern that does not parse is left to the scheduler, which says why.
fn within_limit(pattern: &str) -> Result<(), ApiError> {
    if let Ok(parsed) = crate::catalog::pattern::parse(pattern) {
        let count = parsed.count().saturating_mul(parsed.view_types.len());
        if count > REQUEST_PATTERN_LIMIT {
            return Err(ApiError::bad_request(format!(
                "the pattern addresses {count} views, more than the limit of {REQUEST_PATTERN_LIMIT} for one request"
            )));
        }
    }
    Ok(())
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no route for {} (see /openapi.json)", uri.path()))
}

#[utoipa::path(get, path = "/health", responses((status = 200, body = wire::Health)))]
async fn health(State(state): Shared) -> Json<wire::Health> {
    let table = read(&state);
    Json(wire::Health { status: "ok".into(), current_run: table.current_run.clone(), views: table.views().len() })
}

fn read(state: &AppState) -> std::sync::RwLockReadGuard<'_, Table> {
    state.handle.table.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[utoipa::path(get, path = "/views", params(wire::ViewsQuery),
    responses((status = 200, description = "A page of views, or with `overview` their counts per state", body = wire::ViewsPage),
              (status = 400, body = ErrorBody)))]
async fn list_views(State(state): Shared, Query(query): Query<wire::ViewsQuery>) -> Result<Response, ApiError> {
    views_of(&state, None, query).await
}

#[utoipa::path(get, path = "/views/{pattern}", params(("pattern" = String, Path, description = "A view pattern"), wire::ViewsQuery),
    responses((status = 200, body = wire::ViewsPage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn pattern_views(
    State(state): Shared,
    Path(pattern): Path,
    Query(query): Query<wire::ViewsQuery>,
) -> Result<Response, ApiError> {
    views_of(&state, Some(pattern), query).await
}

/// What a views request selects, checked before anything is done.
struct Selection {
    status: Option<ViewState>,
    filter: Option<regex::Regex>,
    issue: Option<Issue>,
}

impl Selection {
    fn of(query: &wire::ViewsQuery) -> Result<Selection, ApiError> {
        let filter =
            query.filter.as_deref().map(crate::model::view_filter).transpose().map_err(ApiError::bad_request)?;
        Ok(Selection { status: query.status, filter, issue: query.issue })
    }

    fn is_everything(&self) -> bool {
        self.status.is_none() && self.filter.is_none() && self.issue.is_none()
    }

    fn selects(&self, row: &crate::scheduler::table::ViewRow) -> bool {
        self.status.is_none_or(|status| status == row.state)
            && self.issue.is_none_or(|issue| match issue {
                Issue::Errors => row.errors,
                Issue::Incomplete => row.incomplete,
            })
            && self.filter.as_ref().is_none_or(|filter| filter.is_match(&row.url))
    }
}

const DEFAULT_PAGE: usize = 1000;
const MAX_PAGE: usize = 10_000;

async fn views_of(state: &AppState, pattern: Option<String>, query: wire::ViewsQuery) -> Result<Response, ApiError> {
    let selection = Selection::of(&query)?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit {limit} is not between 1 and {MAX_PAGE}")));
    }
    // A pattern is instantiated by the service (so its views are in the
    // table); without one, every instantiated view is listed.
    let addressed: Option<Vec<u32>> = match pattern {
        Some(pattern) => {
            within_limit(&pattern)?;
            let closure = query.closure == Some(true);
            let mut ids = state.handle.instantiate(pattern, closure).await?;
            let mut seen = HashSet::new();
            ids.retain(|id| seen.insert(*id));
            Some(ids)
        }
        None => None,
    };
    let table = read(state);
    let candidates: Box<dyn Iterator<Item = usize>> = match &addressed {
        Some(ids) => Box::new(ids.iter().map(|&id| id as usize)),
        None => Box::new(0..table.views().len()),
    };
    if query.overview == Some(true) {
        // Keyed by the states' names (not the states), so that the JSON
        // object lists them in the order of their names, as it always has.
        // Every view, unfiltered: the table keeps the counts.
        if addressed.is_none() && selection.is_everything() {
            let overview: BTreeMap<String, usize> = table
                .overview()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(s, n)| (s.as_str().to_string(), n))
                .collect();
            return Ok(Json(wire::Overview { overview, total: table.views().len() }).into_response());
        }
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut total = 0;
        for row in candidates.filter_map(|index| table.views().get(index)).filter(|row| selection.selects(row)) {
            *counts.entry(row.state.as_str().to_string()).or_default() += 1;
            total += 1;
        }
        return Ok(Json(wire::Overview { overview: counts, total }).into_response());
    }
    let start = query.cursor.unwrap_or(0);
    let mut views = Vec::new();
    let mut next = None;
    for (position, index) in candidates.enumerate().skip(start) {
        let Some(row) = table.views().get(index) else { continue };
        if !selection.selects(row) {
            continue;
        }
        if views.len() == limit {
            next = Some(position);
            break;
        }
        let dependencies = (query.dependencies == Some(true)).then(|| {
            row.dependencies.iter().filter_map(|&d| table.views().get(d as usize)).map(|d| d.url.to_string()).collect()
        });
        views.push(wire::View {
            view: row.url.to_string(),
            view_type: row.view_type.to_string(),
            state: row.state,
            timestamp: row.timestamp,
            incomplete: row.incomplete,
            errors: row.errors,
            last_error: row.last_error.clone(),
            data_path: row.data_path.display().to_string(),
            dependencies,
        });
    }
    Ok(Json(wire::ViewsPage { views, next }).into_response())
}

#[utoipa::path(post, path = "/materialize/{pattern}",
    params(("pattern" = String, Path, description = "A view pattern"), wire::MaterializeQuery),
    responses((status = 202, description = "The run is recorded; it runs now or after those ahead of it", body = wire::Accepted),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
async fn materialize(
    State(state): Shared,
    Path(pattern): Path,
    Query(query): Query<wire::MaterializeQuery>,
) -> Result<(StatusCode, Json<wire::Accepted>), ApiError> {
    let mode = match query.mode.as_deref() {
        Some(text) => text.parse::<Mode>().map_err(ApiError::bad_request)?,
        None => Mode::Default,
    };
    within_limit(&pattern)?;
    let events_from = state.store.next_sequence()?;
    let accepted = state.handle.materialize(pattern, mode).await?;
    let views = accepted.views.into_iter().map(|(view, state)| wire::AcceptedView { view, state }).collect();
    Ok((
        StatusCode::ACCEPTED,
        Json(wire::Accepted { run: accepted.run, queued_behind: accepted.queued_behind, events_from, views }),
    ))
}

#[utoipa::path(post, path = "/invalidate/{pattern}",
    params(("pattern" = String, Path, description = "A view pattern"), wire::InvalidateQuery),
    responses((status = 200, body = wire::Invalidated),
              (status = 409, description = "Some views are in flight and were left alone", body = wire::Invalidated),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
async fn invalidate(
    State(state): Shared,
    Path(pattern): Path,
    Query(query): Query<wire::InvalidateQuery>,
) -> Result<(StatusCode, Json<wire::Invalidated>), ApiError> {
    within_limit(&pattern)?;
    let dependencies = query.dependencies.unwrap_or(false);
    let done = state.handle.invalidate(pattern, dependencies).await?;
    let refused: Vec<wire::Refusal> =
        done.refused.into_iter().map(|(view, reason)| wire::Refusal { view, reason }).collect();
    let (status, error) = match refused.len() {
        0 => (StatusCode::OK, None),
        n => (
            StatusCode::CONFLICT,
            Some(format!(
                "{n} view{} left alone, {}: {}",
                if n == 1 { " was" } else { "s were" },
                refused[0].view,
                refused[0].reason
            )),
        ),
    };
    Ok((status, Json(wire::Invalidated { invalidated: done.invalidated, refused, error })))
}

/// Where a recorded run stands: its record says whether it finished, the
/// service's table whether it runs or waits. A run an earlier process
/// recorded and never finished was interrupted.
fn status_of(record: &RunRecord, table: &Table, server_started: i64) -> RunStatus {
    if record.termination.is_some() {
        RunStatus::Finished
    } else if table.current_run.as_deref() == Some(&record.id) {
        RunStatus::Running
    } else if table.queued_runs.contains(&record.id) || record.started >= server_started {
        // A run of this server that is in neither is between being
        // recorded and being queued, or between the queue and the start.
        RunStatus::Queued
    } else {
        RunStatus::Interrupted
    }
}

/// A run as the API shows it, with what the service says of its progress.
fn run_of(record: RunRecord, table: &Table, server_started: i64) -> wire::Run {
    wire::Run {
        status: status_of(&record, table, server_started),
        id: record.id,
        pattern: record.pattern,
        mode: record.mode,
        started: record.started,
        finished: record.finished,
        termination: record.termination,
        idle: record.idle,
    }
}

#[utoipa::path(get, path = "/runs", responses((status = 200, body = [wire::Run])))]
async fn runs(State(state): Shared) -> Result<Json<Vec<wire::Run>>, ApiError> {
    let records = state.store.runs()?;
    let table = read(&state);
    Ok(Json(records.into_iter().map(|record| run_of(record, &table, state.started)).collect()))
}

#[utoipa::path(get, path = "/runs/{id}", params(("id" = String, Path, description = "A run's id")),
    responses((status = 200, body = wire::RunDetail), (status = 404, body = ErrorBody)))]
async fn run(State(state): Shared, Path(id): Path) -> Result<Json<wire::RunDetail>, ApiError> {
    Ok(Json(run_detail(&state, &id)?))
}

fn unknown_run(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no run `{id}` (GET /runs lists them)"))
}

/// A run with its flows, its failures' errors and its views' flags, as recorded.
fn run_detail(state: &AppState, id: &str) -> Result<wire::RunDetail, ApiError> {
    let record = state.store.run(id)?.ok_or_else(|| unknown_run(id))?;
    let idle = record.idle;
    let run = run_of(record, &read(state), state.started);
    let mut detail = wire::RunDetail {
        run,
        flows: Vec::new(),
        idle,
        failures: Vec::new(),
        incomplete: Vec::new(),
        with_errors: Vec::new(),
    };
    for (view, status) in state.store.flows(id)? {
        match status {
            FlowStatus::TerminatedWithError => {
                let error = state.store.view(&view)?.and_then(|record| record.last_error).unwrap_or_default();
                detail.failures.push(wire::FailedView { view: view.clone(), error });
            }
            FlowStatus::Successful => {
                if let Some(record) = state.store.view(&view)? {
                    if record.incomplete {
                        detail.incomplete.push(view.clone());
                    }
                    if record.errors {
                        detail.with_errors.push(view.clone());
                    }
                }
            }
            _ => {}
        }
        detail.flows.push(wire::Flow { view, status });
    }
    Ok(detail)
}

#[utoipa::path(post, path = "/runs/{id}/stop", params(("id" = String, Path, description = "A run's id")),
    responses((status = 202, description = "Stopping, or removed from the queue", body = wire::StopOutcome),
              (status = 404, body = ErrorBody), (status = 409, description = "It has already finished", body = ErrorBody),
              (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
async fn stop(State(state): Shared, Path(id): Path) -> Result<(StatusCode, Json<wire::StopOutcome>), ApiError> {
    let outcome = match state.handle.stop(id.clone()).await? {
        Stopping::Stopping => StopEffect::Stopping,
        Stopping::Dequeued => StopEffect::Dequeued,
        Stopping::Finished(termination) => {
            return Err(ApiError::new(StatusCode::CONFLICT, format!("run {id} has already finished: {termination}")));
        }
        Stopping::Unknown => return Err(unknown_run(&id)),
    };
    Ok((StatusCode::ACCEPTED, Json(wire::StopOutcome { outcome })))
}

#[utoipa::path(get, path = "/plan/{pattern}", params(("pattern" = String, Path, description = "A view pattern")),
    responses((status = 200, body = [wire::PlanLine]), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn plan(State(state): Shared, Path(pattern): Path) -> Result<Json<Vec<wire::PlanLine>>, ApiError> {
    within_limit(&pattern)?;
    let plan = state.handle.plan(pattern).await?;
    Ok(Json(plan.into_iter().map(|(view, plan)| wire::PlanLine { view, plan }).collect()))
}

#[utoipa::path(get, path = "/transformations", responses((status = 200, body = wire::Transformations)))]
async fn transformations(State(state): Shared) -> Json<wire::Transformations> {
    let running = read(&state)
        .running
        .values()
        .map(|r| wire::RunningTransformation { view: r.view.to_string(), plugin: r.plugin.clone(), since: r.since })
        .collect();
    let permits = state
        .permits
        .iter()
        .map(|p| wire::Permits { plugin: p.plugin.clone(), in_use: p.in_use(), limit: p.limit })
        .collect();
    Json(wire::Transformations { running, permits })
}

fn listener_status(state: &AppState) -> Result<Vec<wire::Listener>, ApiError> {
    let statuses = listeners::status(state.catalog, &state.store).map_err(listener_error)?;
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
async fn list_listeners(State(state): Shared) -> Result<Json<Vec<wire::Listener>>, ApiError> {
    Ok(Json(listener_status(&state)?))
}

#[utoipa::path(post, path = "/listeners/{name}/enable", params(("name" = String, Path, description = "A listener's name")),
    responses((status = 200, body = wire::Enabled), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
async fn enable_listener(State(state): Shared, Path(name): Path) -> Result<Json<wire::Enabled>, ApiError> {
    let was_disabled = listeners::enable(state.catalog, &state.store, &name).map_err(listener_error)?;
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
            *running = Some(Listeners::start(state.catalog, &state.plugins, state.store.clone()).await?);
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
async fn plugins(State(state): Shared) -> Json<Vec<wire::PluginStatus>> {
    Json(state.plugin_statuses.clone())
}

#[utoipa::path(get, path = "/events", params(wire::EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this sequence number")),
    responses((status = 200, description = "Server-Sent Events: `view` (an event of the log, its sequence number as id), `gap` (events removed by retention), `end` (the run followed has finished)", content_type = "text/event-stream"),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn events(
    State(state): Shared,
    headers: HeaderMap,
    Query(query): Query<wire::EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let last =
        match headers.get("last-event-id") {
            None => None,
            Some(value) => {
                Some(value.to_str().ok().and_then(|text| text.trim().parse::<u64>().ok()).ok_or_else(|| {
                    ApiError::bad_request(format!("Last-Event-ID {value:?} is not a sequence number"))
                })?)
            }
        };
    let cursor = match (last, query.from) {
        (Some(last), _) => last.saturating_add(1),
        (None, Some(from)) => from,
        (None, None) => state.store.next_sequence()?,
    };
    if let Some(run) = &query.run
        && state.store.run(run)?.is_none()
    {
        return Err(unknown_run(run));
    }
    let follow = Follow {
        table: state.handle.table.clone(),
        server_started: state.started,
        store: state.store.clone(),
        appended: state.store.subscribe(),
        shutdown: state.shutdown.clone(),
        cursor,
        run: query.run,
        pending: VecDeque::new(),
        done: false,
    };
    Ok(Sse::new(futures_util::stream::unfold(follow, Follow::next)).keep_alive(KeepAlive::default()))
}

/// An SSE event of this kind with this data, after its id if it has one
/// (the fields are written in the order they are set).
fn event(id: Option<u64>, kind: StreamEvent, data: String) -> SseEvent {
    let event = match id {
        Some(id) => SseEvent::default().id(id.to_string()),
        None => SseEvent::default(),
    };
    event.event(wire_name(&kind)).data(data)
}

fn json(data: &impl serde::Serialize) -> String {
    serde_json::to_string(data).unwrap_or_default()
}

/// An event stream's position in the log.
struct Follow {
    table: crate::scheduler::table::SharedTable,
    server_started: i64,
    store: Arc<Metastore>,
    appended: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    cursor: u64,
    run: Option<String>,
    pending: VecDeque<SseEvent>,
    done: bool,
}

impl Follow {
    async fn next(mut self) -> Option<(Result<SseEvent, Infallible>, Follow)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            if self.done || *self.shutdown.borrow() {
                return None;
            }
            if let Err(e) = self.fill() {
                self.pending.push_back(event(None, StreamEvent::Error, e.to_string()));
                self.done = true;
                continue;
            }
            if !self.pending.is_empty() || self.done {
                continue;
            }
            // Caught up: wait for the next commit (every commit is announced,
            // a run's end, which is a record and no event, included).
            tokio::select! {
                changed = self.appended.changed() => if changed.is_err() { self.done = true },
                changed = self.shutdown.changed() => if changed.is_err() { self.done = true },
            }
        }
    }

    /// Queues what the log holds from the cursor on, a gap for what
    /// retention removed, and the end of a followed run that has finished.
    fn fill(&mut self) -> Result<(), crate::metastore::Error> {
        // Whether the run had finished is read before its events: every
        // event of a finished run was committed before its end.
        // A run an earlier process left unfinished never will finish: its
        // followers are told so rather than kept waiting.
        let finished = match &self.run {
            Some(run) => self.store.run(run)?.and_then(|record| {
                match status_of(
                    &record,
                    &self.table.read().unwrap_or_else(|poisoned| poisoned.into_inner()),
                    self.server_started,
                ) {
                    RunStatus::Interrupted => Some(Termination::Interrupted),
                    _ => record.termination,
                }
            }),
            None => None,
        };
        let first = self.store.first_sequence()?;
        if self.cursor < first {
            self.pending.push_back(event(
                None,
                StreamEvent::Gap,
                json(&wire::Gap { from: self.cursor, to: first - 1 }),
            ));
            self.cursor = first;
        }
        // Pages until something is queued or the log's end is reached:
        // pages of other runs' events are read through, not waited on.
        const PAGE: usize = 256;
        loop {
            let batch = self.store.events_from(self.cursor, PAGE)?;
            for logged in &batch {
                self.cursor = logged.sequence + 1;
                if self.run.as_deref().is_some_and(|run| logged.event.run_id.as_deref() != Some(run)) {
                    continue;
                }
                self.pending.push_back(event(Some(logged.sequence), StreamEvent::View, json(logged)));
            }
            if batch.len() < PAGE {
                if let (Some(run), Some(termination)) = (&self.run, &finished) {
                    let end = wire::End { run: run.clone(), termination: termination.clone() };
                    self.pending.push_back(event(None, StreamEvent::End, json(&end)));
                    self.done = true;
                }
                return Ok(());
            }
            if !self.pending.is_empty() {
                return Ok(());
            }
        }
    }
}

#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
async fn metrics(State(state): Shared) -> Result<Response, ApiError> {
    use std::fmt::Write;
    let listeners = listener_status(&state)?;
    let next_sequence = state.store.next_sequence()?;
    let mut text = String::new();
    {
        let table = read(&state);
        let counters = table.counters;
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
            let _ = writeln!(text, "# HELP trellis_{name} {help}\n# TYPE trellis_{name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(text, "trellis_{name}{labels} {value}");
            }
        };
        metric(
            "runs_finished_total",
            "counter",
            "Runs finished since the server started.",
            &[(String::new(), counters.runs_finished)],
        );
        metric(
            "runs_queued",
            "gauge",
            "Runs accepted and waiting.",
            &[(String::new(), table.queued_runs.len() as u64)],
        );
        metric(
            "run_views_pending",
            "gauge",
            "Views of the current run not settled yet.",
            &[(String::new(), table.current_run_pending as u64)],
        );
        metric(
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
        metric(
            "transformations_running",
            "gauge",
            "Transformations running (holding their permits).",
            &[(String::new(), table.running.len() as u64)],
        );
        let states: Vec<(String, u64)> =
            table.overview().into_iter().map(|(s, n)| (format!("{{state=\"{s}\"}}"), n as u64)).collect();
        metric("views", "gauge", "Instantiated views by state.", &states);
        metric(
            "events_next_sequence",
            "counter",
            "The sequence number the next event will get.",
            &[(String::new(), next_sequence)],
        );
        let lag: Vec<(String, u64)> = listeners
            .iter()
            .map(|l| (format!("{{listener=\"{}\"}}", l.name.replace(['"', '\\', '\n'], "_")), l.behind))
            .collect();
        metric("listener_behind_events", "gauge", "Events each listener has not received yet.", &lag);
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "This description")))]
async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], super::spec()).into_response()
}
