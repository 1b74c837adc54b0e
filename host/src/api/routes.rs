//! `ROUTES` and the router that serves them: each path to its handler in
//! `views`, `runs`, `events`, `status`, `coordinators` or `txlog`.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};

use super::{ApiError, AppState, coordinators, events, reload, runs, status, txlog, views};

/// Every route: method and path as `/openapi.json` writes it. The router
/// below must serve each; a test checks both.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/health"),
    ("get", "/views"),
    ("get", "/views/{pattern}"),
    ("get", "/views/{view}/log"),
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
    ("post", "/reload"),
    ("get", "/coordinators"),
    ("get", "/coordinators/{name}/actions"),
    ("post", "/coordinators/{name}/suspend"),
    ("post", "/coordinators/{name}/resume"),
    ("post", "/coordinators/{name}/kill"),
    ("post", "/coordinators/{name}/rerun"),
    ("get", "/txlog"),
    ("get", "/txlog/{pattern}"),
    ("post", "/reset-txlog/{pattern}"),
];

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(status::health))
        .route("/views", get(views::list_views))
        .route("/views/{*pattern}", get(views::pattern_views))
        .route("/materialize/{*pattern}", post(runs::materialize))
        .route("/invalidate/{*pattern}", post(views::invalidate))
        .route("/runs", get(runs::runs))
        .route("/runs/{id}", get(runs::run))
        .route("/runs/{id}/stop", post(runs::stop))
        .route("/plan/{*pattern}", get(views::plan))
        .route("/transformations", get(status::transformations))
        .route("/listeners", get(status::list_listeners))
        .route("/listeners/{name}/enable", post(status::enable_listener))
        .route("/plugins", get(status::plugins))
        .route("/events", get(events::events))
        .route("/metrics", get(status::metrics))
        .route("/openapi.json", get(status::openapi))
        .route("/reload", post(reload::reload))
        .route("/coordinators", get(coordinators::list))
        .route("/coordinators/{name}/actions", get(coordinators::actions))
        .route("/coordinators/{name}/suspend", post(coordinators::suspend))
        .route("/coordinators/{name}/resume", post(coordinators::resume))
        .route("/coordinators/{name}/kill", post(coordinators::kill))
        .route("/coordinators/{name}/rerun", post(coordinators::rerun))
        .route("/txlog", get(txlog::all))
        .route("/txlog/{*pattern}", get(txlog::pattern))
        .route("/reset-txlog/{*pattern}", post(txlog::reset))
        .merge(super::ui::routes())
        .fallback(not_found)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no route for {} (see /openapi.json)", uri.path()))
}
