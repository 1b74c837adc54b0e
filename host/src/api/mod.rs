//! The HTTP API: axum routes over the scheduler service, the metastore and
//! the listeners, for `trellis serve`.
//!
//! - `routes`: `ROUTES` and the router wiring each to its handler;
//! - `extract`: what handlers take from a request (with one-line 400s);
//! - `views`, `runs`, `events`, `status`: the handlers by concern, each
//!   with its OpenAPI description;
//! - `openapi`: `/openapi.json`, derived from the handlers and `wire`;
//! - `wire`: the JSON both the server and the remote CLI speak.
//!
//! Invariant: **the only module that imports axum.** It holds no scheduling
//! logic: writes go to the service as requests, reads come from the
//! service's shared table or the metastore, so a read never waits for a
//! run. Every failure is a status and a one-line JSON error; bad input is
//! a 4xx, never a 500.

mod events;
mod extract;
mod openapi;
mod routes;
mod runs;
mod status;
mod views;
pub mod wire;

use std::net::SocketAddr;
use std::sync::{Arc, RwLockReadGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::catalog::Catalog;
use crate::listeners::Listeners;
use crate::metastore::Metastore;
use crate::scheduler::service::Handle;
use crate::scheduler::table::{SharedTable, Table};

pub use openapi::spec;
pub use routes::ROUTES;

/// Requests larger than this are refused with 413: no endpoint takes a body.
pub const BODY_LIMIT: usize = 64 * 1024;
/// URIs longer than this are refused with 414.
pub const URI_LIMIT: usize = 8 * 1024;

/// How the server is run.
pub struct Settings {
    /// Required of mutating requests (and of every request off loopback).
    pub token: Option<String>,
    /// Every request but the event stream is answered within this, or gets 408.
    pub request_timeout: Duration,
    pub loopback: bool,
}

/// What the handlers share.
pub struct AppState {
    pub handle: Handle,
    pub store: Arc<Metastore>,
    pub catalog: Arc<Catalog>,
    /// Restarted when a listener is re-enabled.
    pub listeners: tokio::sync::Mutex<Option<Listeners>>,
    /// The project's plugins, loaded once; listeners restart from them.
    pub plugins: Arc<crate::plugins::Plugins>,
    /// What `GET /plugins` shows of them.
    pub plugin_statuses: Vec<wire::PluginStatus>,
    /// Global and per-plugin transformation permits.
    pub permits: Vec<crate::scheduler::Permits>,
    pub settings: Settings,
    /// Becomes true when the server shuts down: event streams end.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// When the server started, in milliseconds since the Unix epoch: a run
    /// recorded earlier and never finished was interrupted.
    pub started: i64,
}

impl AppState {
    /// The service's table, read without waiting for the loop.
    fn table(&self) -> RwLockReadGuard<'_, Table> {
        read(&self.handle.table)
    }
}

/// A table's rows as the loop last wrote them; a panic that poisoned the
/// lock does not take every later request with it.
fn read(table: &SharedTable) -> RwLockReadGuard<'_, Table> {
    table.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Refuses to start where anyone could reach a server without a token.
pub fn check_bind(bind: &SocketAddr, token: Option<&str>) -> Result<(), String> {
    if !bind.ip().is_loopback() && token.is_none() {
        return Err(format!(
            "refusing to listen on {bind} without a token: set TRELLIS_TOKEN or --token-file, or bind to 127.0.0.1"
        ));
    }
    Ok(())
}

/// The router with every route and layer.
pub fn router(state: Arc<AppState>) -> Router {
    let timeout = state.settings.request_timeout;
    routes::routes()
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn(limit_uri))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, timeout))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(BODY_LIMIT))
        .with_state(state)
}

/// An error as the API answers it: a status and one line.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into() }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = %self.status, "{}", self.message);
        }
        (self.status, axum::Json(wire::ErrorBody { error: self.message })).into_response()
    }
}

impl From<crate::scheduler::Error> for ApiError {
    fn from(error: crate::scheduler::Error) -> Self {
        use crate::lattice::Error as Lattice;
        use crate::scheduler::Error;
        let status = match &error {
            Error::Lattice(Lattice::UnknownViewType { .. }) => StatusCode::NOT_FOUND,
            Error::Pattern(_) | Error::Lattice(_) => StatusCode::BAD_REQUEST,
            Error::Closing | Error::Gone => StatusCode::SERVICE_UNAVAILABLE,
            Error::Metastore(_) | Error::Plugins(_) | Error::NoPlugins | Error::Io(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        ApiError::new(status, error.to_string())
    }
}

impl From<crate::metastore::Error> for ApiError {
    fn from(error: crate::metastore::Error) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
    }
}

/// Mutating requests need the token when there is one; off loopback, every
/// request does. The comparison takes the same time wherever the tokens differ.
async fn authorize(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(token) = &state.settings.token else { return next.run(request).await };
    let mutating = request.method() != axum::http::Method::GET && request.method() != axum::http::Method::HEAD;
    if !mutating && state.settings.loopback {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    let matches = given.is_some_and(|given| {
        use subtle::ConstantTimeEq;
        bool::from(given.as_bytes().ct_eq(token.as_bytes()))
    });
    if matches {
        return next.run(request).await;
    }
    let message = if given.is_some() {
        "the bearer token is wrong"
    } else {
        "this request needs `Authorization: Bearer <token>` (the server's TRELLIS_TOKEN)"
    };
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

async fn limit_uri(request: Request, next: Next) -> Response {
    let length = request.uri().to_string().len();
    if length > URI_LIMIT {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            format!("the URI is {length} bytes long, more than the limit of {URI_LIMIT}"),
        )
        .into_response();
    }
    next.run(request).await
}
