//! `POST /reload`: the project file and its plugins loaded again and, once
//! no run executes, served in place of the old ones; a broken project is
//! refused with 422 and every problem, and the old one keeps serving.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::ApiError;
use super::extract::Shared;
use super::wire::{self, ErrorBody};

#[utoipa::path(post, path = "/reload",
    responses((status = 200, description = "The project was reloaded; what changed", body = wire::Reloaded),
              (status = 401, body = ErrorBody),
              (status = 404, description = "This server cannot reload (no project directory)", body = ErrorBody),
              (status = 422, description = "The project is broken and was not reloaded: every problem, with its line", body = ErrorBody),
              (status = 503, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn reload(State(state): Shared) -> Result<Json<wire::Reloaded>, ApiError> {
    let Some(reloader) = &state.reloader else {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "this server was not started from a project directory"));
    };
    let report = reloader.reload(&state.handle).await?;
    Ok(Json(wire::Reloaded {
        added: report.added,
        removed: report.removed,
        schema_changed: report.schema_changed,
        version_changed: report
            .version_changed
            .into_iter()
            .map(|(view_type, change)| wire::VersionChanged { view_type, change })
            .collect(),
        settings_changed: report.settings_changed,
        views: report.views,
    }))
}
