//! Runs: materialize (a run accepted by the service), the runs recorded
//! and one run's detail, and stop.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::extract::{Path, Query, Shared, within_limit};
use super::wire::{self, ErrorBody};
use super::{ApiError, AppState};
use crate::metastore::{FlowRecord, RunRecord};
use crate::model::{FlowStatus, RunStatus, StopEffect};
use crate::scheduler::table::Table;
use crate::scheduler::{Mode, Stopping, check_full_refresh};

#[utoipa::path(post, path = "/materialize/{pattern}",
    params(("pattern" = String, Path, description = "A view pattern"), wire::MaterializeQuery),
    responses((status = 202, description = "The run is recorded; it runs now or after those ahead of it", body = wire::Accepted),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn materialize(
    State(state): Shared,
    Path(pattern): Path,
    Query(query): Query<wire::MaterializeQuery>,
) -> Result<(StatusCode, Json<wire::Accepted>), ApiError> {
    let mode = match query.mode.as_deref() {
        Some(text) => text.parse::<Mode>().map_err(ApiError::bad_request)?,
        None => Mode::Default,
    };
    let full_refresh = query.full_refresh.unwrap_or(false);
    if full_refresh {
        check_full_refresh(mode).map_err(ApiError::bad_request)?;
    }
    within_limit(&pattern)?;
    let events_from = state.store.next_sequence()?;
    let accepted = state.handle.materialize_with(pattern, mode, full_refresh).await?;
    let views = accepted.views.into_iter().map(|(view, state)| wire::AcceptedView { view, state }).collect();
    Ok((
        StatusCode::ACCEPTED,
        Json(wire::Accepted { run: accepted.run, queued_behind: accepted.queued_behind, events_from, views }),
    ))
}

/// Where a recorded run stands: its record says whether it finished, the
/// service's table whether it runs or waits. A run an earlier process
/// recorded and never finished was interrupted.
pub(super) fn status_of(record: &RunRecord, table: &Table, server_started: i64) -> RunStatus {
    if record.termination.is_some() {
        RunStatus::Finished
    } else if table.current_run.as_ref().is_some_and(|run| run.id == record.id) {
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
pub(super) fn run_of(record: RunRecord, table: &Table, server_started: i64) -> wire::Run {
    let status = status_of(&record, table, server_started);
    wire::Run::new(record, status)
}

#[utoipa::path(get, path = "/runs", responses((status = 200, body = [wire::Run])))]
pub(super) async fn runs(State(state): Shared) -> Result<Json<Vec<wire::Run>>, ApiError> {
    let records = state.store.runs()?;
    let table = state.table();
    Ok(Json(records.into_iter().map(|record| run_of(record, &table, state.started)).collect()))
}

#[utoipa::path(get, path = "/runs/{id}", params(("id" = String, Path, description = "A run's id")),
    responses((status = 200, body = wire::RunDetail), (status = 404, body = ErrorBody)))]
pub(super) async fn run(State(state): Shared, Path(id): Path) -> Result<Json<wire::RunDetail>, ApiError> {
    Ok(Json(run_detail(&state, &id)?))
}

pub(super) fn unknown_run(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no run `{id}` (GET /runs lists them)"))
}

/// A run with its flows, its failures' errors and its views' flags, as
/// recorded; while it executes, every flow as it stands now.
pub(super) fn run_detail(state: &AppState, id: &str) -> Result<wire::RunDetail, ApiError> {
    let record = state.store.run(id)?.ok_or_else(|| unknown_run(id))?;
    let (status, live) = {
        let table = state.table();
        let status = status_of(&record, &table, state.started);
        let live: Vec<(String, FlowStatus)> = match &table.current_run {
            Some(current) if current.id == record.id => table
                .current_run_flows
                .iter()
                .filter_map(|(&index, &status)| Some((table.views().get(index as usize)?.url.to_string(), status)))
                .collect(),
            _ => Vec::new(),
        };
        (status, live)
    };
    Ok(detail(&state.store, record, status, live)?)
}

/// A run's detail as the API gives it (and `trellis runs ID --json`):
/// its flows as recorded, with `live` (a run executing: each view's flow
/// as it stands now) laid over them, the failures with their errors, and
/// the views built with their flags.
pub fn detail(
    store: &crate::metastore::Metastore,
    record: RunRecord,
    status: RunStatus,
    live: Vec<(String, FlowStatus)>,
) -> Result<wire::RunDetail, crate::metastore::Error> {
    let idle = record.idle;
    let attempts = record.attempts.clone();
    let id = record.id.clone();
    let run = wire::Run::new(record, status);
    let mut detail = wire::RunDetail {
        run,
        flows: Vec::new(),
        idle,
        failures: Vec::new(),
        incomplete: Vec::new(),
        with_errors: Vec::new(),
    };
    let mut flows: std::collections::BTreeMap<String, FlowRecord> = store.flow_records(&id)?.into_iter().collect();
    for (view, status) in live {
        let flow = flows.entry(view).or_insert_with(|| status.into());
        flow.status = status;
    }
    for (view, flow) in flows {
        let FlowRecord { status, error, counters, reason } = flow;
        match status {
            FlowStatus::TerminatedWithError => {
                // The run's own error; flows recorded before they kept one
                // have only the view's last error to show.
                let error = match &error {
                    Some(error) => error.clone(),
                    None => store.view(&view)?.and_then(|record| record.last_error).unwrap_or_default(),
                };
                detail.failures.push(wire::FailedView { view: view.clone(), error });
            }
            FlowStatus::Successful => {
                if let Some(record) = store.view(&view)? {
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
        let attempts = attempts.get(&view).copied();
        detail.flows.push(wire::Flow { view, status, error, counters, attempts, reason });
    }
    Ok(detail)
}

#[utoipa::path(post, path = "/runs/{id}/stop", params(("id" = String, Path, description = "A run's id")),
    responses((status = 202, description = "Stopping, or removed from the queue", body = wire::StopOutcome),
              (status = 404, body = ErrorBody), (status = 409, description = "It has already finished", body = ErrorBody),
              (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn stop(
    State(state): Shared,
    Path(id): Path,
) -> Result<(StatusCode, Json<wire::StopOutcome>), ApiError> {
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
