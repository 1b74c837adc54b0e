//! `/txlog` and `/reset-txlog`: incremental views' transaction logs, shown
//! and reset through the service.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::ApiError;
use super::extract::{Path, Query, Shared, within_limit};
use super::wire::{self, ErrorBody};

#[utoipa::path(get, path = "/txlog",
    responses((status = 200, description = "Every view with a transaction log", body = [wire::TxLogView]),
              (status = 401, body = ErrorBody)))]
pub(super) async fn all(State(state): Shared) -> Result<Json<Vec<wire::TxLogView>>, ApiError> {
    let views = state.handle.txlog(None).await?;
    Ok(Json(views.into_iter().map(wire::TxLogView::from).collect()))
}

#[utoipa::path(get, path = "/txlog/{pattern}", params(("pattern" = String, Path, description = "A view pattern")),
    responses((status = 200, description = "The incremental views of the pattern", body = [wire::TxLogView]),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn pattern(State(state): Shared, Path(pattern): Path) -> Result<Json<Vec<wire::TxLogView>>, ApiError> {
    within_limit(&pattern)?;
    let views = state.handle.txlog(Some(pattern)).await?;
    Ok(Json(views.into_iter().map(wire::TxLogView::from).collect()))
}

#[utoipa::path(post, path = "/reset-txlog/{pattern}",
    params(("pattern" = String, Path, description = "A view pattern"), wire::ResetTxLogQuery),
    responses((status = 200, body = wire::TxLogReset),
              (status = 409, description = "Some views are in flight and were left alone", body = wire::TxLogReset),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn reset(
    State(state): Shared,
    Path(pattern): Path,
    Query(query): Query<wire::ResetTxLogQuery>,
) -> Result<(StatusCode, Json<wire::TxLogReset>), ApiError> {
    within_limit(&pattern)?;
    let done = state.handle.reset_txlog(pattern, query.source).await?;
    let (status, refused, error) = super::views::refusals(done.refused);
    Ok((status, Json(wire::TxLogReset { reset: done.reset, refused, error })))
}
