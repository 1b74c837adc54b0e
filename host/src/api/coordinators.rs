//! `/coordinators`: the coordinators' standing and actions, and the
//! operator's suspend, resume, kill and rerun, each a request to the
//! service (which answers as of now).

use axum::Json;
use axum::extract::State;

use super::ApiError;
use super::extract::{Path, Query, Shared};
use super::wire::{self, ErrorBody};
use crate::clock::{parse_time, parse_time_until};
use crate::model::ActionState;
use crate::scheduler::service::{CoordinatorAnswer, CoordinatorOperation};

#[utoipa::path(get, path = "/coordinators", responses((status = 200, body = [wire::Coordinator])))]
pub(super) async fn list(State(state): Shared) -> Result<Json<Vec<wire::Coordinator>>, ApiError> {
    match state.handle.coordinators(CoordinatorOperation::Statuses).await? {
        CoordinatorAnswer::Statuses(statuses) => Ok(Json(statuses.iter().map(wire::Coordinator::from).collect())),
        CoordinatorAnswer::Actions(_) => Err(unexpected()),
    }
}

#[utoipa::path(get, path = "/coordinators/{name}/actions",
    params(("name" = String, Path, description = "A coordinator's name"), wire::ActionsQuery),
    responses((status = 200, body = [wire::Action]), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn actions(
    State(state): Shared,
    Path(name): Path,
    Query(query): Query<wire::ActionsQuery>,
) -> Result<Json<Vec<wire::Action>>, ApiError> {
    let state_wanted = match query.state.as_deref() {
        None => None,
        Some(text) => Some(text.parse::<ActionState>().map_err(|e| ApiError::bad_request(format!("state: {e}")))?),
    };
    actions_of(&state, CoordinatorOperation::Actions { name, state: state_wanted }).await
}

#[utoipa::path(post, path = "/coordinators/{name}/suspend", params(("name" = String, Path, description = "A coordinator's name")),
    responses((status = 200, body = wire::Coordinator), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn suspend(State(state): Shared, Path(name): Path) -> Result<Json<wire::Coordinator>, ApiError> {
    status_of(&state, CoordinatorOperation::Suspend { name }).await
}

#[utoipa::path(post, path = "/coordinators/{name}/resume", params(("name" = String, Path, description = "A coordinator's name")),
    responses((status = 200, body = wire::Coordinator), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn resume(State(state): Shared, Path(name): Path) -> Result<Json<wire::Coordinator>, ApiError> {
    status_of(&state, CoordinatorOperation::Resume { name }).await
}

/// Kills the open actions with nominal times in the range (all open ones
/// without one); returns those killed.
#[utoipa::path(post, path = "/coordinators/{name}/kill",
    params(("name" = String, Path, description = "A coordinator's name"), wire::RangeQuery),
    responses((status = 200, body = [wire::Action]), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn kill(
    State(state): Shared,
    Path(name): Path,
    Query(range): Query<wire::RangeQuery>,
) -> Result<Json<Vec<wire::Action>>, ApiError> {
    let (from, to) = times(&range)?;
    actions_of(&state, CoordinatorOperation::Kill { name, from, to }).await
}

/// Runs the final actions with nominal times in the range again, under new
/// runs that rebuild their views; returns them.
#[utoipa::path(post, path = "/coordinators/{name}/rerun",
    params(("name" = String, Path, description = "A coordinator's name"), wire::RangeQuery),
    responses((status = 200, body = [wire::Action]), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn rerun(
    State(state): Shared,
    Path(name): Path,
    Query(range): Query<wire::RangeQuery>,
) -> Result<Json<Vec<wire::Action>>, ApiError> {
    let (from, to) = times(&range)?;
    if from.is_none() || to.is_none() {
        return Err(ApiError::bad_request("rerun needs both `from` and `to`: the nominal times to run again"));
    }
    actions_of(&state, CoordinatorOperation::Rerun { name, from, to }).await
}

type Range = (Option<chrono::DateTime<chrono::Utc>>, Option<chrono::DateTime<chrono::Utc>>);

fn times(range: &wire::RangeQuery) -> Result<Range, ApiError> {
    let parse = |key: &str, text: &Option<String>| {
        text.as_deref().map(parse_time).transpose().map_err(|e| ApiError::bad_request(format!("{key}: {e}")))
    };
    let parse_until = |key: &str, text: &Option<String>| {
        text.as_deref().map(parse_time_until).transpose().map_err(|e| ApiError::bad_request(format!("{key}: {e}")))
    };
    let (from, to) = (parse("from", &range.from)?, parse_until("to", &range.to)?);
    if let (Some(from), Some(to)) = (from, to)
        && from > to
    {
        return Err(ApiError::bad_request(format!("from {from} is after to {to}")));
    }
    Ok((from, to))
}

async fn actions_of(
    state: &std::sync::Arc<super::AppState>,
    operation: CoordinatorOperation,
) -> Result<Json<Vec<wire::Action>>, ApiError> {
    match state.handle.coordinators(operation).await? {
        CoordinatorAnswer::Actions(actions) => Ok(Json(actions.iter().map(wire::Action::from).collect())),
        CoordinatorAnswer::Statuses(_) => Err(unexpected()),
    }
}

/// The one coordinator `operation` (a suspend, a resume) answers with.
async fn status_of(
    state: &std::sync::Arc<super::AppState>,
    operation: CoordinatorOperation,
) -> Result<Json<wire::Coordinator>, ApiError> {
    match state.handle.coordinators(operation).await? {
        CoordinatorAnswer::Statuses(statuses) => {
            statuses.first().map(|s| Json(wire::Coordinator::from(s))).ok_or_else(unexpected)
        }
        CoordinatorAnswer::Actions(_) => Err(unexpected()),
    }
}

/// The service answered another question than the one asked: a bug.
fn unexpected() -> ApiError {
    ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "the service answered another question")
}
