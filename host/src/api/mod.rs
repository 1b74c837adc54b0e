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
//! - `state`: [`AppState::new`], the server's state built in one place;
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
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! **the only module that imports axum.** The HTTP API of
//! `trellis serve`.
//! - `mod.rs`: the router's layers (bearer token for mutating requests,
//!   for reads that instantiate views (`/views/{pattern}`, `/plan`), and
//!   for every request off loopback, compared in constant time; 64 KiB body
//!   limit, a declared one refused before it is read; 8 KiB URI limit; a
//!   timeout per request; and, outermost, `json_errors`, which gives the
//!   answers axum and tower-http make by themselves (405, 408, 413) the
//!   API's JSON body), `AppState` (the
//!   service's `Handle`, the shared catalog and plugins, and `table()`, the
//!   service's table read without waiting for the loop), `ApiError` (a
//!   status and a one-line JSON error; scheduler errors map to 400 for bad
//!   patterns and requests too large, 404 for unknown view types, 409 for a
//!   full lattice, 429 for a busy scheduler, 503 while closing), and the
//!   start-up refusal to listen off loopback without a token.
//! - `state.rs`: `AppState::new`, the one place a server's state is built
//!   (by `trellis serve` and the in-process tests): the scheduler made a
//!   `Service`, the plugins' statuses for `GET /plugins` (each problem
//!   found by the plugin its `Diagnostic` names).
//! - `serve.rs`: the accept loop, on hyper directly because `axum::serve`
//!   has neither a header deadline nor a connection limit. HTTP/1.1 with a
//!   header-read deadline; at most `max_connections` connections, where a
//!   new one closes an idle one (no request in flight) to make room, one
//!   that never sent a whole request first; the eviction takes the
//!   connection with a compare-and-swap on its count of requests in
//!   flight, so a request that has started is never cut off. While all are
//!   busy, a reserve on which only `/health` and requests with the token
//!   are served; out of descriptors, an idle connection is closed rather
//!   than the accept retried in a loop. A request counts as in flight until
//!   its response body is sent or dropped, so an event stream is busy. The
//!   socket is wrapped so that hyper's own bodiless answers to requests it
//!   cannot parse (400, 414, 431) get the JSON body too, and so that a write
//!   the client takes nothing of for `write_timeout` fails. At shutdown,
//!   idle connections close at once and the rest get the grace period.
//!   `serve_on_own_threads` runs it on a runtime of two threads of its
//!   own, so that the scheduler's work never makes a request wait.
//!   Invariant: a client holds a connection only while it sends a request
//!   or takes its response; a stalled one only while nobody else needs it.
//! - `routes.rs`: `ROUTES` and the router wiring each to its handler; no
//!   handler logic.
//! - `extract.rs`: `Query` and `Path` whose rejections are one-line 400s,
//!   and the limit on how many views one request's pattern may address.
//! - `views.rs`: views listed (all, or those a pattern addresses; selected
//!   by state and issue through `ViewCondition`'s rules, and by regex; paged, or counted per state), invalidated
//!   (409 with what was done when some are in flight) and planned.
//! - `runs.rs`: materialize (through the `Handle`; `full_refresh=true`
//!   refused with another mode than DEFAULT), the runs recorded, one
//!   run's detail, stop; `status_of`, where a run stands.
//! - `events.rs`: `/events` follows the log from `Last-Event-ID` (or
//!   `from`) through `Metastore::subscribe`, with gap events for what
//!   retention removed, and with `run=ID` ends once that run's record says
//!   it finished (or that it was interrupted).
//! - `reload.rs`: `POST /reload` through the `AppState`'s `Reloader`: 200
//!   with what changed, 422 for a refused project (404 without a
//!   reloader, as in the in-process tests). The `AppState`'s catalog,
//!   plugins and permits stay those of the start (listeners are not
//!   reloaded).
//! - `status.rs`: health, running transformations, permits and the memory
//!   budget, listeners
//!   (and re-enabling one; `ListenerSnapshot`, the overview's statuses,
//!   read off the request path at most every 500 ms), plugins, Prometheus metrics (actions per state
//!   per coordinator asked of the service, all states written, zeros
//!   included), `/openapi.json`.
//! - `views.rs` also serves `GET /views/{view}/log` (a pattern ending in
//!   `/log` that names one view) from the metastore, and `dependents=true`
//!   (the table's dependents, among the views held).
//! - `ui/`: the web UI at `/` (docs/ui.md). The shell (`assets/index.html`),
//!   its script (`assets/app.js`, about 15 KiB, no framework and no build
//!   step) and style sheet are compiled into the binary and served without
//!   a token, since they hold no data. The script routes the page's hash
//!   (`#/views?...`) to a fragment (`/ui/views?...`) rendered on the server
//!   by `pages.rs`: only its known page names, each parameter decoded and
//!   encoded again (no `.`/`..` segment), and it takes HTML only from a
//!   `/ui/` answer of type `text/html`, so no link reaches the JSON API
//!   through it; the rest of the DOM it builds from text. It sends every request with the bearer token when the
//!   tab holds one: it asks for it on a 401, keeps it in `sessionStorage`,
//!   never in a cookie (so no request is ever authorized by the browser
//!   alone, and there is nothing for cross-site requests to ride on). Live
//!   updates read `/events` with `fetch` (an `EventSource` cannot send the
//!   header): a state changes in place wherever the page shows that view,
//!   and pages that summarise are drawn again at most once a second. The
//!   script keeps the last state the stream gave each view and shows it
//!   over every fragment it draws: a fragment rendered before an event can
//!   arrive after it (or be read off a table that has not caught up with
//!   the commit the stream read), and must not undo it; a retention gap
//!   clears them and draws the page again.
//!   Actions are the API's own `POST`s. `mod.rs` holds the handlers, each
//!   built from the same reads as the JSON API (`views::listing`,
//!   `views::view_of`, `runs::run_detail`, `status::transformations_of`,
//!   `status::listener_status`), so a page can show nothing the API does
//!   not; a view's log is a part of its page that the script loads on its
//!   own (`data-load`, `/ui/view-log/...`), so that the page never waits
//!   for the metastore; the fragments are authorized as the API's reads are (those that
//!   instantiate, as instantiating reads). `pages.rs` renders with **maud**:
//!   markup checked when it compiles, every interpolated value escaped, and
//!   no template files to find at run time (askama would also do; maud's
//!   Rust-in-Rust keeps the pages next to the types they draw, with no
//!   second syntax). `graph.rs` takes a view's neighbourhood from the
//!   table's rows (two levels each way, 20 views a side, the rest counted)
//!   and lays it out with **rust-sugiyama** (layering, crossing reduction
//!   and Brandes–Köpf placement: the part worth not writing), drawing its
//!   layers as columns from upstream to downstream in SVG, each box a link
//!   to its view. Invariant: `pages` and `graph` know neither HTTP nor the
//!   service; nothing is rendered from a value unescaped.
//! - `txlog.rs`: `GET /txlog[/{pattern}]` and `POST /reset-txlog/{pattern}`
//!   through the service's `Handle` (409 for views in flight).
//! - `coordinators.rs`: `/coordinators`, a coordinator's actions, suspend,
//!   resume, kill and rerun, each a `CoordinatorOperation` to the service
//!   (which ticks first, so answers are as of now); ranges' `to` as a date
//!   covers its day.
//! - `openapi.rs`: the description, derived by utoipa from the handlers'
//!   `#[utoipa::path]` and the wire types (query values' patterns and
//!   ranges, `GET /views`'s two shapes, `Run.action` as a pair), checked
//!   against a real server by schemathesis in `tests/it/schemathesis.rs`.
//! - `guard.rs`: what a web page cannot make the server do: a `Host` that
//!   is not the bound address, `localhost` or `--allowed-host` is refused
//!   (DNS rebinding), and so is a mutation or instantiating read whose
//!   `Origin` is another origin (`null` too) or, without one, whose
//!   `Sec-Fetch-Site` names another site; every answer carries the CSP
//!   (`default-src 'self'`, `frame-ancestors 'none'`), `nosniff`,
//!   `X-Frame-Options` and `Referrer-Policy`. Refusals are 403s with the
//!   API's JSON error.
//! - `wire.rs`: the JSON types, shared by the server and the remote CLI
//!   (the event stream's kinds and its `gap`/`end` payloads included); no
//!   axum. States, statuses and outcomes are `model` enums written as their
//!   serde names, so the JSON stays the strings it always was while no code
//!   compares text.
//!
//! Invariants: it holds no scheduling logic; bad input is a 4xx with one
//! line, never a 500; a read never waits for a run.

mod coordinators;
mod events;
mod extract;
mod guard;
mod openapi;
mod reload;
mod routes;
mod runs;
mod serve;
mod state;
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
pub use serve::{ConnectionLimits, serve, serve_on_own_threads};
pub use state::{Built, Parts};

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
    /// The view storage of the project the server started with: the
    /// scheduler's own store.
    pub storage: crate::storage::Storage,
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

/// Numbers the internal errors a server answers, so that the line a client
/// gets finds the one logged.
static INTERNAL_ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl IntoResponse for ApiError {
    /// A server's own failure (a 5xx other than 503, which says to try
    /// again) is logged with its detail, and the client gets a generic
    /// line with the log entry's number: the detail names paths and
    /// internals that are the operator's, not every client's.
    fn into_response(self) -> Response {
        let error = if self.status.is_server_error() && self.status != StatusCode::SERVICE_UNAVAILABLE {
            let id = INTERNAL_ERRORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            tracing::error!(status = %self.status, id, "{}", self.message);
            format!("internal error; see the server's log, id {id}")
        } else {
            self.message
        };
        let retry = matches!(self.status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE);
        let mut response = (self.status, axum::Json(wire::ErrorBody { error })).into_response();
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
