//! The HTTP API: axum routes over the scheduler service, the metastore and
//! the listeners, for `trellis serve`.
//!
//! - `routes`: `ROUTES` and the router wiring each to its handler;
//! - `extract`: what handlers take from a request (with one-line 400s);
//! - `views`, `runs`, `events`, `status`: the handlers by concern, each
//!   with its OpenAPI description;
//! - `coordinators`: `/coordinators`, their actions and the operator's
//!   suspend, resume, kill and rerun;
//! - `reload`: `POST /reload`, the project loaded again;
//! - `openapi`: `/openapi.json`, derived from the handlers and `wire`;
//! - `wire`: the JSON both the server and the remote CLI speak;
//! - `ui`: the web UI at `/`, HTML fragments over the same reads;
//! - `guard`: the Host and Origin checks that keep web pages from driving
//!   or reading the server, and the security headers of every answer.
//!
//! Invariant: **the only module that imports axum.** It holds no scheduling
//! logic: writes go to the service as requests, reads come from the
//! service's shared table or the metastore, so a read never waits for a
//! run. Every failure is a status and a one-line JSON error; bad input is
//! a 4xx, never a 500.

mod coordinators;
mod events;
mod extract;
mod guard;
mod openapi;
mod reload;
mod routes;
mod runs;
mod serve;
mod status;
mod txlog;
mod ui;
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

pub use extract::REQUEST_PATTERN_LIMIT;
pub use guard::{CONTENT_SECURITY_POLICY, allowed_host};
pub use openapi::spec;
pub use routes::ROUTES;
pub use runs::detail as run_detail;
pub use serve::{ConnectionLimits, serve};

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
    /// The address it listens on (the port picked, for port 0): its IP
    /// and `localhost` are the names it answers to.
    pub bound: SocketAddr,
    /// Other names it answers to (`serve --allowed-host`), lower case.
    pub allowed_hosts: Vec<String>,
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
    /// Loads the project again for `POST /reload`; without it, 404. The
    /// fields above (catalog, plugins, their statuses, permits) stay those
    /// of the start: listeners are not reloaded.
    pub reloader: Option<crate::scheduler::Reloader>,
    /// The listeners' statuses as the UI's overview last read them.
    pub listener_snapshot: status::ListenerSnapshot,
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
    // The last layer added runs first: the Host is checked before anything
    // else is looked at, and the Origin before the token.
    routes::routes()
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(state.clone(), guard::check_origin))
        .layer(middleware::from_fn_with_state(state.clone(), guard::check_host))
        .layer(middleware::from_fn(limit_uri))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, timeout))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(tower_http::limit::RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(middleware::from_fn(limit_declared_body))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn(guard::security_headers))
        .with_state(state)
}

/// An error as the API answers it: a status and one line.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    /// An error of `status`; control characters in `message` (a newline in
    /// a value the client sent, say) are escaped, so that it stays one line.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        let message: String = message.into();
        let message = if message.chars().any(char::is_control) {
            message.chars().map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.to_string() }).collect()
        } else {
            message
        };
        ApiError { status, message }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() && self.status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::error!(status = %self.status, "{}", self.message);
        }
        let retry = matches!(self.status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE);
        let mut response = (self.status, axum::Json(wire::ErrorBody { error: self.message })).into_response();
        if retry {
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        response
    }
}

impl From<crate::scheduler::Error> for ApiError {
    fn from(error: crate::scheduler::Error) -> Self {
        use crate::lattice::Error as Lattice;
        use crate::scheduler::Error;
        let status = match &error {
            Error::Lattice(Lattice::UnknownViewType { .. }) => StatusCode::NOT_FOUND,
            // Not the request's fault: the server holds all it may.
            Error::Lattice(Lattice::Full { .. }) => {
                return ApiError::new(
                    StatusCode::CONFLICT,
                    format!("{error}; the server holds all the views it may (serve --max-views)"),
                );
            }
            Error::Pattern(_) | Error::Lattice(_) => StatusCode::BAD_REQUEST,
            Error::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Closing | Error::Gone | Error::EngineUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Error::UnknownCoordinator { .. } => StatusCode::NOT_FOUND,
            Error::Coordinator(_) => StatusCode::CONFLICT,
            Error::TxLog(_) => StatusCode::BAD_REQUEST,
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

/// Requests that address a pattern, which the server instantiates (and
/// keeps) to answer them.
const INSTANTIATING: &[&str] = &["/views/{*pattern}", "/plan/{*pattern}", "/txlog/{*pattern}"];

/// Mutating requests need the token when there is one, and so do reads
/// that instantiate views, since those grow what the server holds; off
/// loopback, every request does. The comparison takes the same time
/// wherever the tokens differ.
async fn authorize(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(token) = &state.settings.token else { return next.run(request).await };
    let mutating = request.method() != axum::http::Method::GET && request.method() != axum::http::Method::HEAD;
    let matched = request.extensions().get::<axum::extract::MatchedPath>().map(|matched| matched.as_str());
    if !mutating && matched.is_some_and(|matched| ui::PUBLIC.contains(&matched)) {
        return next.run(request).await;
    }
    let instantiating =
        matched.is_some_and(|matched| INSTANTIATING.contains(&matched) || ui::INSTANTIATING.contains(&matched));
    if !mutating && !instantiating && state.settings.loopback {
        return next.run(request).await;
    }
    if bearer_matches(request.headers(), token) {
        return next.run(request).await;
    }
    let message = if bearer(request.headers()).is_some() {
        "the bearer token is wrong"
    } else if instantiating && !mutating {
        "this request instantiates views, so it needs `Authorization: Bearer <token>` (the server's TRELLIS_TOKEN)"
    } else {
        "this request needs `Authorization: Bearer <token>` (the server's TRELLIS_TOKEN)"
    };
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

/// The token a request bears, if it bears one in a form we read.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
}

/// Whether a request bears `token`, compared in constant time.
fn bearer_matches(headers: &axum::http::HeaderMap, token: &str) -> bool {
    bearer(headers).is_some_and(|given| {
        use subtle::ConstantTimeEq;
        bool::from(given.as_bytes().ct_eq(token.as_bytes()))
    })
}

/// A body declared larger than any endpoint takes is refused before it is
/// read, with the API's error; one that grows past the limit unannounced
/// is cut off by `RequestBodyLimitLayer`.
async fn limit_declared_body(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if let Some(length) = declared.filter(|&length| length > BODY_LIMIT as u64) {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is {length} bytes, more than the limit of {BODY_LIMIT} (no endpoint takes a body)"
            ),
        )
        .into_response();
    }
    next.run(request).await
}

/// Every error is `{"error": "..."}`: answers that axum and tower-http
/// make by themselves (405, a body cut off at its limit, a timeout's 408)
/// get the API's JSON body in place of their own.
async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let matched = request.extensions().get::<axum::extract::MatchedPath>().map(|m| m.as_str().to_string());
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            // axum adds its Allow header after this layer: the methods come from ROUTES.
            let route = matched.map(|matched| matched.replace("{*", "{"));
            let mut allowed: Vec<String> = ROUTES
                .iter()
                .filter(|(_, path)| route.as_deref() == Some(*path))
                .map(|(method, _)| method.to_uppercase())
                .collect();
            if allowed.iter().any(|method| method == "GET") {
                allowed.push("HEAD".into());
            }
            format!("{method} is not allowed on {path}; it takes {} (see /openapi.json)", allowed.join(", "))
        }
        StatusCode::PAYLOAD_TOO_LARGE => {
            format!("the request body is larger than the limit of {BODY_LIMIT} bytes (no endpoint takes a body)")
        }
        StatusCode::REQUEST_TIMEOUT => "the request was not answered in time (serve --request-timeout)".to_string(),
        other => other.canonical_reason().unwrap_or("the request failed").to_string(),
    };
    let mut answer = ApiError::new(status, message).into_response();
    for name in [header::ALLOW, header::WWW_AUTHENTICATE, header::RETRY_AFTER] {
        if let Some(value) = response.headers().get(&name) {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    answer
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
