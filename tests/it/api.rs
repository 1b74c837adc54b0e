//! The API's router in process, driven with `tower::ServiceExt::oneshot`
//! over a real scheduler service (real metastore, plugins and
//! directories): the error contract (status codes, and every error a
//! one-line JSON `{"error": ...}`), acceptance of a run, the conflict
//! of invalidating a view in flight, and the refusal of what a web page
//! could send (another origin, another Host).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;
use tower::ServiceExt;
use trellis::api::{AppState, Built, Parts, Settings};
use trellis::catalog::Catalog;
use trellis::lattice::Capacity;
use trellis::metastore::Metastore;
use trellis::model::ViewState;
use trellis::scheduler::Reloader;

use crate::inprocess::{Project, SUMMARY, finished, logged, open};
use crate::support::runtime;

const TOKEN: &str = "s3cret";
/// The address the in-process server says it listens on: the Host it answers to.
const BOUND: &str = "127.0.0.1:20698";
const HELD: &str = "t.gate/Held/2015/01/01";

/// The router of `trellis serve` over a service on `project`, as
/// `cli/serve.rs` assembles it, without listeners.
struct App {
    router: axum::Router,
    store: Arc<Metastore>,
    /// Kept open: event streams end when it says so.
    _shutdown: tokio::sync::watch::Sender<bool>,
}

impl App {
    async fn new(project: &Project, token: Option<&str>) -> App {
        App::with_capacity(project, token, Capacity::default()).await
    }

    /// With a limit on the views the server holds, as `serve --max-views` sets it.
    async fn with_capacity(project: &Project, token: Option<&str>, capacity: Capacity) -> App {
        App::with_settings(project, token, capacity, true).await
    }

    /// Listening on loopback or not.
    async fn with_settings(project: &Project, token: Option<&str>, capacity: Capacity, loopback: bool) -> App {
        let settings = Settings {
            token: token.map(str::to_string),
            request_timeout: Duration::from_secs(60),
            loopback,
            bound: BOUND.parse().unwrap(),
            allowed_hosts: Vec::new(),
        };
        App::with(project, capacity, settings).await
    }

    async fn with(project: &Project, capacity: Capacity, settings: Settings) -> App {
        let catalog = project.catalog("v1");
        App::serving(catalog.clone(), catalog, capacity, settings, None).await
    }

    /// The state over `catalog` and its plugins, with a scheduler on
    /// `scheduled` (the same catalog, but for a test of what a scheduler
    /// would refuse), and a reloader, which `POST /reload` uses, or none
    /// (then 404).
    async fn serving(
        catalog: Arc<Catalog>,
        scheduled: Arc<Catalog>,
        capacity: Capacity,
        settings: Settings,
        reloader: Option<Reloader>,
    ) -> App {
        let plugins = Arc::new(trellis::plugins::Plugins::load(runtime(), &catalog).await);
        let mut scheduler = open(&scheduled).await;
        scheduler.set_capacity(capacity);
        let parts = Parts { catalog, plugins, scheduler, listeners: None, settings, reloader };
        let Built { state, service, shutdown } = AppState::new(parts);
        let store = state.store.clone();
        tokio::spawn(service.run());
        App { router: trellis::api::router(state), store, _shutdown: shutdown }
    }

    /// Sends one request; returns its status, headers and body.
    async fn send(&self, request: Request<Body>) -> (StatusCode, header::HeaderMap, Vec<u8>) {
        let response = self.router.clone().oneshot(request).await.expect("the router answers");
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.expect("the body is read");
        (parts.status, parts.headers, body.to_vec())
    }

    async fn call(&self, method: Method, uri: &str, token: Option<&str>) -> (StatusCode, Value) {
        let (status, _, body) = self.send(request(method, uri, token, Body::empty())).await;
        let json = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!("{uri} answered {status} with {:?}, not JSON: {e}", String::from_utf8_lossy(&body))
        });
        (status, json)
    }

    /// A request that must fail with `status` and a JSON body that is
    /// `{"error": "..."}` with one line; returns the headers and the error.
    async fn error(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        status: StatusCode,
    ) -> (header::HeaderMap, String) {
        let (got, headers, body) = self.send(request(method.clone(), uri, token, Body::empty())).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(got, status, "{method} {uri}: {text}");
        let content_type = headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes());
        assert_eq!(content_type, Some(&b"application/json"[..]), "{method} {uri}");
        let body: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{method} {uri}: {text:?}: {e}"));
        assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{method} {uri}: {body}");
        (headers, one_line_error(&body))
    }
}

fn request(method: Method, uri: &str, token: Option<&str>, body: Body) -> Request<Body> {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    request.body(body).expect("the request is well formed")
}

/// The body's `error`, checked to be one non-empty line.
fn one_line_error(body: &Value) -> String {
    let error = body["error"].as_str().unwrap_or_else(|| panic!("no error string in {body}"));
    assert!(!error.is_empty() && !error.contains('\n'), "not one line: {error:?}");
    error.to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_have_their_status_and_one_line_of_json() {
    let project = Project::new(&[1]);
    let app = App::new(&project, Some(TOKEN)).await;

    let (status, health) = app.call(Method::GET, "/health", None).await;
    assert_eq!((status, &health["status"]), (StatusCode::OK, &Value::from("ok")), "{health}");

    let cases: &[(Method, &str, Option<&str>, StatusCode, &str)] = &[
        // An unknown view type, read or written, and the closest name offered.
        (Method::GET, "/views/t.mart/Dialy/2015/01/01", Some(TOKEN), StatusCode::NOT_FOUND, "Daily"),
        (Method::GET, "/plan/t.no/Such", Some(TOKEN), StatusCode::NOT_FOUND, "t.no/Such"),
        (Method::POST, "/materialize/t.no/Such", Some(TOKEN), StatusCode::NOT_FOUND, "t.no/Such"),
        // Patterns that do not parse or do not fit their view type.
        (
            Method::GET,
            "/views/t.mart/Daily/rymd(2015",
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
            "invalid view pattern at column 18",
        ),
        (Method::GET, "/plan/t.mart/Daily/2015/01", Some(TOKEN), StatusCode::BAD_REQUEST, "takes 3 values"),
        (Method::POST, "/invalidate/Daily", Some(TOKEN), StatusCode::BAD_REQUEST, "invalid view pattern"),
        // Bad query values.
        (Method::GET, "/views?limit=0", None, StatusCode::BAD_REQUEST, "limit"),
        (Method::GET, "/views?status=asleep", None, StatusCode::BAD_REQUEST, "asleep"),
        // A newline in a value is escaped in the error: it stays one line.
        (Method::GET, "/views?status=a%0Ab", None, StatusCode::BAD_REQUEST, "a\\nb"),
        (Method::POST, "/materialize/t.mart/Daily/2015/01/01?mode=LAZY", Some(TOKEN), StatusCode::BAD_REQUEST, "LAZY"),
        // What is not there.
        (Method::GET, "/nowhere", None, StatusCode::NOT_FOUND, "/nowhere"),
        (Method::GET, "/runs/no-such-run", None, StatusCode::NOT_FOUND, "no-such-run"),
        (Method::POST, "/runs/no-such-run/stop", Some(TOKEN), StatusCode::NOT_FOUND, "no-such-run"),
        // Mutating requests need the token, and so do reads that
        // instantiate views; other reads on loopback do not.
        (Method::GET, "/views/t.mart/Daily/2015/01/01", None, StatusCode::UNAUTHORIZED, "instantiates views"),
        (Method::GET, "/plan/t.mart/Daily/2015/01/01", None, StatusCode::UNAUTHORIZED, "instantiates views"),
        (Method::GET, "/views/t.mart/Daily/2015/01/01", Some("wrong"), StatusCode::UNAUTHORIZED, "wrong"),
        (Method::POST, "/materialize/t.mart/Daily/2015/01/01", None, StatusCode::UNAUTHORIZED, "Bearer"),
        (Method::POST, "/materialize/t.mart/Daily/2015/01/01", Some("wrong"), StatusCode::UNAUTHORIZED, "wrong"),
        (Method::POST, "/invalidate/t.mart/Daily/2015/01/01", None, StatusCode::UNAUTHORIZED, "Bearer"),
        (Method::POST, "/runs/no-such-run/stop", None, StatusCode::UNAUTHORIZED, "Bearer"),
        (Method::POST, "/listeners/audit/enable", None, StatusCode::UNAUTHORIZED, "Bearer"),
    ];
    for (method, uri, token, status, mentions) in cases {
        let (headers, error) = app.error(method.clone(), uri, *token, *status).await;
        assert!(error.contains(mentions), "{method} {uri}: {error}");
        if *status == StatusCode::UNAUTHORIZED {
            assert_eq!(headers.get(header::WWW_AUTHENTICATE).map(|v| v.as_bytes()), Some(&b"Bearer"[..]));
        }
    }
    // Nothing unauthorized was done, and nothing was instantiated.
    assert!(app.store.runs().unwrap().is_empty());
    let (status, listed) = app.call(Method::GET, "/views", None).await;
    assert_eq!((status, &listed["views"]), (StatusCode::OK, &serde_json::json!([])), "{listed}");
    let (status, _) = app.call(Method::GET, "/views/t.mart/Daily/2015/01/01", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, listed) = app.call(Method::GET, "/views", None).await;
    assert_eq!(status, StatusCode::OK, "a read of what the server holds needs no token on loopback");
    assert_eq!(listed["views"].as_array().map(Vec::len), Some(2), "{listed}");

    // A URI over the limit.
    let long = format!("/views/t.mart/Daily/{}", "x".repeat(trellis::api::URI_LIMIT));
    let (_, error) = app.error(Method::GET, &long, None, StatusCode::URI_TOO_LONG).await;
    assert!(error.contains("limit"), "{error}");

    // A route asked with the wrong method: the methods it takes, in the
    // header and in the error.
    for (method, uri, allowed) in [
        (Method::GET, "/materialize/t.mart/Daily/2015/01/01", "POST"),
        (Method::POST, "/health", "GET,HEAD"),
        (Method::DELETE, "/views", "GET,HEAD"),
    ] {
        let (headers, error) = app.error(method.clone(), uri, Some(TOKEN), StatusCode::METHOD_NOT_ALLOWED).await;
        assert_eq!(headers.get(header::ALLOW).map(|v| v.to_str().unwrap()), Some(allowed), "{method} {uri}");
        assert!(
            error.contains(&format!("{method} is not allowed on")) && error.contains(&allowed.replace(",", ", ")),
            "{error}"
        );
    }

    // A body over the limit, refused before it is read, declared or not.
    let big = vec![b'x'; trellis::api::BODY_LIMIT + 1];
    for declared in [true, false] {
        let body = Body::from_stream(futures_util::stream::iter([Ok::<_, std::io::Error>(big.clone())]));
        let mut oversized = request(Method::POST, "/materialize/t.mart/Daily/2015/01/01", Some(TOKEN), body);
        if declared {
            oversized.headers_mut().insert(header::CONTENT_LENGTH, big.len().into());
        }
        let (got, headers, body) = app.send(oversized).await;
        let text = String::from_utf8_lossy(&body);
        if declared {
            assert_eq!(got, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
            assert_eq!(headers.get(header::CONTENT_TYPE).map(|v| v.as_bytes()), Some(&b"application/json"[..]));
            let error = one_line_error(&serde_json::from_slice(&body).unwrap());
            assert!(error.contains("no endpoint takes a body"), "{error}");
        } else {
            // No endpoint reads a body: an undeclared one is never read.
            assert_ne!(got, StatusCode::INTERNAL_SERVER_ERROR, "{text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_holds_no_more_views_than_its_capacity_dependencies_counted() {
    let project = Project::new(&[1, 2, 3]);
    let capacity = Capacity { per_call: 5, total: 8 };
    let app = App::with_capacity(&project, None, capacity).await;

    // One view named, six more come with it: more than one request may add.
    let (_, error) = app.error(Method::GET, &format!("/views/{SUMMARY}"), None, StatusCode::BAD_REQUEST).await;
    assert!(error.contains("dependencies") && error.contains("5"), "{error}");
    let (_, error) = app.error(Method::GET, &format!("/plan/{SUMMARY}"), None, StatusCode::BAD_REQUEST).await;
    assert!(error.contains("dependencies"), "{error}");
    let (status, listed) = app.call(Method::GET, "/views?overview=true", None).await;
    assert_eq!((status, &listed["total"]), (StatusCode::OK, &Value::from(0)), "nothing was kept: {listed}");

    // Two days with their inputs, then two more: the server is full.
    let (status, _) = app.call(Method::GET, "/views/t.mart/Daily/rymd(20150101-20150102)", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = app.call(Method::GET, "/views/t.mart/Daily/rymd(20150102-20150103)", None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, error) =
        app.error(Method::POST, "/materialize/t.mart/Daily/rymd(20150104-20150105)", None, StatusCode::CONFLICT).await;
    assert!(error.contains("--max-views") && error.contains("it holds 6"), "{error}");
    let (_, error) = app.error(Method::GET, "/views/t.bad/Above/2015/01/04", None, StatusCode::CONFLICT).await;
    assert!(error.contains("limit of 8 views"), "{error}");
    // What it holds can still be read and materialized.
    let (status, listed) = app.call(Method::GET, "/views/t.mart/Daily/rymd(20150101-20150103)", None).await;
    assert_eq!((status, listed["views"].as_array().map(Vec::len)), (StatusCode::OK, Some(3)), "{listed}");
    let (status, accepted) = app.call(Method::POST, "/materialize/t.mart/Daily/rymd(20150101-20150103)", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    finished(&app.store, accepted["run"].as_str().unwrap()).await;
    assert_eq!(app.store.runs().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_accepted_and_invalidating_a_view_in_flight_conflicts() {
    let project = Project::new(&[1]);
    let app = App::new(&project, Some(TOKEN)).await;

    let (status, accepted) = app.call(Method::POST, &format!("/materialize/{HELD}"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let run = accepted["run"].as_str().expect("a run id").to_string();
    assert!(!run.is_empty());
    assert_eq!(accepted["queued_behind"], 0);
    assert_eq!(accepted["views"], serde_json::json!([{ "view": HELD, "state": "receive" }]));
    logged(&app.store, HELD, ViewState::Transforming).await;

    // In flight: left alone, with the reason as one line.
    let (status, refused) = app.call(Method::POST, &format!("/invalidate/{HELD}"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    let error = one_line_error(&refused);
    assert!(error.contains(HELD), "{error}");
    assert_eq!(refused["invalidated"], serde_json::json!([]));
    assert_eq!(refused["refused"][0]["view"], HELD);
    let (status, detail) = app.call(Method::GET, &format!("/runs/{run}"), None).await;
    assert_eq!((status, &detail["run"]["status"]), (StatusCode::OK, &Value::from("running")), "{detail}");

    project.open_gate(1);
    finished(&app.store, &run).await;
    let (status, detail) = app.call(Method::GET, &format!("/runs/{run}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["run"]["termination"], "completed", "{detail}");
    // Its flow says how often its transformation was called.
    let flow = detail["flows"].as_array().unwrap().iter().find(|f| f["view"] == HELD).cloned();
    assert_eq!(flow.as_ref().map(|f| f["status"].clone()), Some(Value::from("SUCCESSFUL")), "{detail}");
    assert_eq!(flow.map(|f| f["attempts"].clone()), Some(Value::from(1)), "{detail}");

    // Settled, it can be invalidated; a finished run cannot be stopped.
    let (status, done) = app.call(Method::POST, &format!("/invalidate/{HELD}"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["invalidated"], serde_json::json!([HELD]));
    let (_, error) = app.error(Method::POST, &format!("/runs/{run}/stop"), Some(TOKEN), StatusCode::CONFLICT).await;
    assert!(error.contains("already finished"), "{error}");
}

/// `?full_refresh=true` rebuilds an up-to-date view, reports what it reads
/// as it stands EXCLUDED, and says so in its record; with another mode than
/// DEFAULT it is a one-line 400.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_refresh_rebuilds_and_excludes_and_other_modes_are_refused() {
    let project = Project::new(&[1]);
    let app = App::new(&project, Some(TOKEN)).await;
    let daily = "t.mart/Daily/2015/01/01";
    let (_, error) = app
        .error(
            Method::POST,
            &format!("/materialize/{daily}?full_refresh=true&mode=TRANSFORM_ONLY"),
            Some(TOKEN),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(error.contains("DEFAULT mode only"), "{error}");

    let (status, first) = app.call(Method::POST, &format!("/materialize/{daily}"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    finished(&app.store, first["run"].as_str().unwrap()).await;
    let (status, refresh) =
        app.call(Method::POST, &format!("/materialize/{daily}?full_refresh=true"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{refresh}");
    let run = refresh["run"].as_str().unwrap().to_string();
    finished(&app.store, &run).await;
    let (_, detail) = app.call(Method::GET, &format!("/runs/{run}"), None).await;
    assert_eq!(detail["run"]["full_refresh"], true, "{detail}");
    let flows: Vec<_> = detail["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|flow| serde_json::json!({ "view": flow["view"], "status": flow["status"] }))
        .collect();
    assert_eq!(
        serde_json::Value::from(flows),
        serde_json::json!([
            { "view": daily, "status": "SUCCESSFUL" },
            { "view": "t.raw/In/2015/01/01", "status": "EXCLUDED" },
        ]),
        "{detail}"
    );
}

/// `dependents=true`: of the views the server holds, those that depend on
/// each view listed; the pattern's own closure holds none above it.
#[tokio::test(flavor = "multi_thread")]
async fn a_view_lists_the_views_held_that_depend_on_it() {
    let project = Project::new(&[1]);
    let app = App::new(&project, None).await;
    let raw = "t.raw/In/2015/01/01";
    let (status, alone) = app.call(Method::GET, &format!("/views/{raw}?dependents=true"), None).await;
    assert_eq!(status, StatusCode::OK, "{alone}");
    assert_eq!(alone["views"][0]["dependents"], serde_json::json!([]), "{alone}");
    // The summary's closure brings Daily (and through it In) into the server.
    let (status, _) = app.call(Method::GET, &format!("/views/{SUMMARY}?closure=true"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, held) = app.call(Method::GET, "/views/t.mart/Daily/2015/01/01?dependents=true", None).await;
    assert_eq!(held["views"][0]["dependents"], serde_json::json!([SUMMARY]), "{held}");
    let (_, raw_view) = app.call(Method::GET, &format!("/views/{raw}?dependents=true&dependencies=true"), None).await;
    assert_eq!(raw_view["views"][0]["dependents"], serde_json::json!(["t.mart/Daily/2015/01/01"]), "{raw_view}");
    assert_eq!(raw_view["views"][0]["dependencies"], serde_json::json!([]), "{raw_view}");
    // Without the parameter, neither is listed.
    let (_, plain) = app.call(Method::GET, &format!("/views/{raw}"), None).await;
    assert!(plain["views"][0].get("dependents").is_none(), "{plain}");
}

/// `/views/{view}/log`: a failed view's last three transformations, each
/// with how it failed, oldest first.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_view_s_log_keeps_its_last_three_attempts() {
    let project = Project::new(&[1]);
    let app = App::new(&project, Some(TOKEN)).await;
    let broken = "t.bad/Broken/2015/01/01";
    let (status, empty) = app.call(Method::GET, &format!("/views/{broken}/log"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{empty}");
    assert_eq!(empty, serde_json::json!({ "view": broken, "attempts": [] }));
    let mut runs = Vec::new();
    for _ in 0..4 {
        let (status, accepted) = app.call(Method::POST, &format!("/materialize/{broken}"), Some(TOKEN)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
        let run = accepted["run"].as_str().unwrap().to_string();
        finished(&app.store, &run).await;
        runs.push(run);
    }
    // A failed view has errors: the issue filter finds it, with its reason.
    let (status, with_errors) = app.call(Method::GET, "/views?issue=errors", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{with_errors}");
    let listed: Vec<&str> =
        with_errors["views"].as_array().unwrap().iter().map(|v| v["view"].as_str().unwrap()).collect();
    assert_eq!(listed, [broken], "{with_errors}");
    assert!(with_errors["views"][0]["last_error"].as_str().unwrap().contains("deliberate panic"), "{with_errors}");
    let (status, log) = app.call(Method::GET, &format!("/views/{broken}/log"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{log}");
    let attempts = log["attempts"].as_array().unwrap();
    let logged_runs: Vec<&str> = attempts.iter().map(|a| a["run"].as_str().unwrap()).collect();
    assert_eq!(logged_runs, runs[1..].iter().map(String::as_str).collect::<Vec<_>>(), "{log}");
    for attempt in attempts {
        assert_eq!(attempt["plugin"], "panic", "{attempt}");
        let outcome = attempt["outcome"].as_str().unwrap();
        assert!(
            outcome.starts_with("failed: ")
                && outcome.contains("deliberate panic while materializing t.bad/Broken/2015/01/01"),
            "{outcome}"
        );
    }
    // A pattern ending in `log` that is not one view is a views request.
    let (status, _) = app.call(Method::GET, "/views/t.bad/Broken/2015/01/e(01,02)/log", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// A view built while its only dependency failed carries `errors` in its
/// view, its run's detail (its flow naming the failed input) and its events;
/// and the view's data, rebuilt upstream since, is stale until rebuilt.
#[tokio::test(flavor = "multi_thread")]
async fn downstream_of_a_failure_says_so_and_outdated_data_is_stale() {
    let project = Project::new(&[1]);
    let app = App::new(&project, Some(TOKEN)).await;
    let (above, broken) = ("t.bad/Above/2015/01/01", "t.bad/Broken/2015/01/01");
    let (status, accepted) = app.call(Method::POST, &format!("/materialize/{above}"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let run = accepted["run"].as_str().unwrap().to_string();
    finished(&app.store, &run).await;
    let (_, detail) = app.call(Method::GET, &format!("/runs/{run}"), Some(TOKEN)).await;
    let flow = detail["flows"].as_array().unwrap().iter().find(|f| f["view"] == above).cloned().unwrap();
    assert_eq!(flow["status"], "SUCCESSFUL", "{detail}");
    assert_eq!(flow["reason"], Value::from(format!("upstream failed: {broken}")), "{detail}");
    assert_eq!(detail["with_errors"], serde_json::json!([above]), "{detail}");
    let (_, listed) = app.call(Method::GET, &format!("/views/{above}"), Some(TOKEN)).await;
    assert_eq!(listed["views"][0]["errors"], true, "{listed}");
    let settled = crate::inprocess::events(&app.store)
        .into_iter()
        .rfind(|e| &*e.event.view == above && e.event.current == ViewState::Materialized)
        .expect("its event is logged");
    assert!(settled.event.errors, "{settled:?}");

    // Daily is materialized, then its input delivered again: stale, with
    // `plan`'s reason, until a run rebuilds it.
    let daily = "t.mart/Daily/2015/01/01";
    let (_, accepted) = app.call(Method::POST, &format!("/materialize/{daily}"), Some(TOKEN)).await;
    finished(&app.store, accepted["run"].as_str().unwrap()).await;
    let (_, current) = app.call(Method::GET, &format!("/views/{daily}"), Some(TOKEN)).await;
    assert_eq!(
        (&current["views"][0]["state"], &current["views"][0]["stale"]),
        (&Value::from("materialized"), &Value::from(false)),
        "{current}"
    );
    let recorded = app.store.view(daily).unwrap().unwrap().timestamp.unwrap();
    project.redeliver(1, recorded);
    let (_, stale) = app.call(Method::GET, &format!("/views/{daily}"), Some(TOKEN)).await;
    assert_eq!(stale["views"][0]["stale"], true, "{stale}");
    assert_eq!(stale["views"][0]["stale_reason"], "dependency t.raw/In/2015/01/01 will be rematerialized", "{stale}");
}

/// While a run executes, its detail lists every flow as it stands (seed
/// 003's pipeline state): the two transformations holding the project's
/// two permits RUNNING, the third waiting for one STARTING. Stopped, the
/// one that never started is SKIPPED with no attempt counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_in_flight_shows_each_flow_live_and_a_view_never_started_has_no_attempt() {
    let project = Project::new(&[1, 2, 3]);
    let app = App::new(&project, Some(TOKEN)).await;
    let (status, accepted) =
        app.call(Method::POST, "/materialize/t.gate/Held/rymd(20150101-20150103)", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let run = accepted["run"].as_str().unwrap().to_string();
    let held = |detail: &Value, status: &str| -> Vec<String> {
        let flows = detail["flows"].as_array().cloned().unwrap_or_default();
        flows
            .iter()
            .filter(|f| f["view"].as_str().unwrap().starts_with("t.gate/Held/") && f["status"] == status)
            .map(|f| f["view"].as_str().unwrap().to_string())
            .collect()
    };
    // Permits are taken by the tasks as they get them: waited for, as
    // the detail shows it, without a guess at how long that takes.
    let live = async {
        loop {
            let (_, detail) = app.call(Method::GET, &format!("/runs/{run}"), Some(TOKEN)).await;
            if held(&detail, "RUNNING").len() == 2 && held(&detail, "STARTING").len() == 1 {
                return detail;
            }
            tokio::task::yield_now().await;
        }
    };
    let detail = tokio::time::timeout(Duration::from_secs(120), live).await.expect("the run shows its live flows");
    assert_eq!(detail["run"]["status"], "running", "{detail}");
    let inputs: Vec<&Value> = detail["flows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["view"].as_str().unwrap().starts_with("t.raw/In/"))
        .collect();
    assert!(inputs.len() == 3 && inputs.iter().all(|f| f["status"] == "SUCCESSFUL"), "{detail}");
    let waiting = held(&detail, "STARTING").remove(0);

    let (status, _) = app.call(Method::POST, &format!("/runs/{run}/stop"), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    finished(&app.store, &run).await;
    let (_, detail) = app.call(Method::GET, &format!("/runs/{run}"), Some(TOKEN)).await;
    let flow = detail["flows"].as_array().unwrap().iter().find(|f| f["view"] == waiting.as_str()).cloned().unwrap();
    assert_eq!(flow["status"], "SKIPPED", "{detail}");
    assert!(flow.get("attempts").is_none(), "a transformation that never started was not attempted: {detail}");
    assert_eq!(held(&detail, "CANCELED").len(), 2, "{detail}");
    assert_eq!(detail["run"]["status"], "finished", "{detail}");
}

/// The web UI: its shell and assets hold no data and are served without a
/// token wherever the server listens; its fragments are reads like the
/// API's, so off loopback they need the token; a fragment escapes what it
/// shows, and its bad input gets the API's one-line errors.
#[tokio::test(flavor = "multi_thread")]
async fn the_ui_s_shell_is_open_and_its_fragments_are_authorized_reads() {
    let project = Project::new(&[1, 2]);
    let app = App::with_settings(&project, Some(TOKEN), Capacity::default(), false).await;
    for (path, kind) in [("/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/style.css", "text/css")] {
        let (status, headers, body) = app.send(request(Method::GET, path, None, Body::empty())).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind), "{path}: {headers:?}");
        assert!(!body.is_empty());
    }
    let (_, error) = app.error(Method::GET, "/ui/overview", None, StatusCode::UNAUTHORIZED).await;
    assert_eq!(error, "this request needs `Authorization: Bearer <token>` (the server's TRELLIS_TOKEN)");
    let (status, headers, body) = app.send(request(Method::GET, "/ui/overview", Some(TOKEN), Body::empty())).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("text/html"));
    assert_eq!(headers[header::CACHE_CONTROL], "no-store");
    assert!(String::from_utf8_lossy(&body).contains("0 views held."), "{}", String::from_utf8_lossy(&body));

    // What a user typed is shown escaped.
    let hostile = "/ui/views?pattern=t.mart/Daily/2015/01/e(01,02)&filter=%3Cscript%3Ealert(1)%3C/script%3E";
    let (status, _, body) = app.send(request(Method::GET, hostile, Some(TOKEN), Body::empty())).await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("<script>") && body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{body}");

    for (uri, status, expected) in [
        (
            "/ui/view/t.mart/Daily/2015/01/e(01,02)",
            StatusCode::NOT_FOUND,
            "t.mart/Daily/2015/01/e(01,02) is not one view but a pattern of 2; its views are listed at #/views",
        ),
        ("/ui/view/t.mart/Nope/2015/01/01", StatusCode::NOT_FOUND, ""),
        ("/ui/runs/nope", StatusCode::NOT_FOUND, "no run `nope` (GET /runs lists them)"),
        ("/ui/views?filter=(", StatusCode::BAD_REQUEST, ""),
        ("/ui/views?status=sleeping", StatusCode::BAD_REQUEST, ""),
    ] {
        let (_, error) = app.error(Method::GET, uri, Some(TOKEN), status).await;
        assert!(expected.is_empty() || error == expected, "{uri}: {error}");
    }

    // A view's page: its state, its dependency, and its graph's boxes
    // linking to their pages.
    let (status, _, body) =
        app.send(request(Method::GET, "/ui/view/t.mart/Daily/2015/01/01", Some(TOKEN), Body::empty())).await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains(r##"href="#/view/t.raw/In/2015/01/01""##), "{body}");
    assert!(body.contains("<svg class=\"graph\""), "{body}");
    // Its log is a part of its own, loaded by the page, and as guarded.
    assert!(body.contains(r#"data-load="/ui/view-log/t.mart/Daily/2015/01/01""#), "{body}");
    app.error(Method::GET, "/ui/view-log/t.mart/Daily/2015/01/01", None, StatusCode::UNAUTHORIZED).await;
    let (status, _, log) =
        app.send(request(Method::GET, "/ui/view-log/t.mart/Daily/2015/01/01", Some(TOKEN), Body::empty())).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&log).contains("No transformation has run for it yet."));
}

/// A request's headers, as (name, value).
type Headers<'a> = &'a [(&'a str, &'a str)];

/// A request with these headers.
fn with_headers(method: Method, uri: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::empty()).expect("the request is well formed")
}

/// On loopback without a token, what any web page in the user's browser
/// could send is refused with a one-line 403: a form POST from another
/// origin (or an opaque one, or one only `Sec-Fetch-Site` names) to act,
/// and any request naming a host the server is not (DNS rebinding: the
/// page could read the answers); the UI's own requests, curl's and the
/// CLI's are served. Every answer carries the headers that keep the UI
/// from being framed or fed script.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_web_page_could_send_is_refused_with_a_json_error() {
    let project = Project::new(&[1]);
    let settings = Settings {
        token: None,
        request_timeout: Duration::from_secs(60),
        loopback: true,
        bound: BOUND.parse().unwrap(),
        allowed_hosts: vec!["trellis.internal".into()],
    };
    let app = App::with(&project, Capacity::default(), settings).await;
    let daily = "/materialize/t.mart/Daily/2015/01/01";
    let own = [("host", BOUND), ("origin", "http://127.0.0.1:20698")];
    let evil_origin = [("host", BOUND), ("origin", "http://evil.example")];
    let rebound = [("host", "evil.example:20698")];
    let refusals: &[(Method, &str, Headers, &str)] = &[
        (Method::POST, daily, &evil_origin, "another origin (`Origin: http://evil.example`)"),
        (Method::POST, "/reload", &evil_origin, "another origin"),
        (Method::POST, "/coordinators/daily/suspend", &evil_origin, "another origin"),
        (Method::POST, "/coordinators/daily/resume", &evil_origin, "another origin"),
        (Method::POST, "/invalidate/t.mart/Daily/2015/01/01", &evil_origin, "another origin"),
        // Another port of the same host is another origin.
        (Method::POST, daily, &[("host", BOUND), ("origin", "http://127.0.0.1:8080")], "another origin"),
        (Method::POST, daily, &[("host", BOUND), ("origin", "null")], "`Origin: null`"),
        (Method::POST, daily, &[("host", BOUND), ("sec-fetch-site", "cross-site")], "`Sec-Fetch-Site: cross-site`"),
        (Method::POST, daily, &[("host", BOUND), ("sec-fetch-site", "same-site")], "`Sec-Fetch-Site: same-site`"),
        // A read that instantiates views grows what the server holds.
        (Method::GET, "/views/t.mart/Daily/2015/01/01", &evil_origin, "another origin"),
        // A rebinding page's requests, reads included.
        (Method::GET, "/views", &rebound, "does not answer to the name `evil.example`"),
        (Method::GET, "/ui/overview", &rebound, "`--allowed-host evil.example`"),
        (Method::POST, "/invalidate/t.mart/Daily/2015/01/01", &rebound, "evil.example"),
        (
            Method::POST,
            daily,
            &[("host", "evil.example:20698"), ("origin", "http://evil.example:20698")],
            "evil.example",
        ),
        (Method::GET, "http://evil.example:20698/views", &[], "evil.example"),
        (Method::GET, "/views", &[("host", "a b")], "is not a host name"),
    ];
    for (method, uri, headers, mentions) in refusals {
        let (status, response_headers, body) = app.send(with_headers(method.clone(), uri, headers)).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {uri} {headers:?}: {text}");
        assert_eq!(response_headers[header::CONTENT_TYPE], "application/json", "{method} {uri}");
        let error = one_line_error(&serde_json::from_slice(&body).unwrap());
        assert!(error.starts_with("refused: ") && error.contains(mentions), "{method} {uri} {headers:?}: {error}");
    }
    assert!(app.store.runs().unwrap().is_empty(), "nothing refused was run");
    let (status, listed) = app.call(Method::GET, "/views", None).await;
    assert_eq!((status, &listed["views"]), (StatusCode::OK, &serde_json::json!([])), "nothing was instantiated");

    // What is served: the UI's own requests, a top-level navigation, reads
    // from anywhere (a page cannot read them without the Host), and clients
    // that send neither Origin nor Host (curl, the CLI, HTTP/1.0).
    let served: &[(Method, &str, Headers, StatusCode)] = &[
        (Method::POST, daily, &own, StatusCode::ACCEPTED),
        (
            Method::POST,
            daily,
            &[("host", "localhost:20698"), ("origin", "http://localhost:20698")],
            StatusCode::ACCEPTED,
        ),
        (Method::POST, daily, &[("host", BOUND), ("sec-fetch-site", "same-origin")], StatusCode::ACCEPTED),
        (
            Method::POST,
            daily,
            &[("host", "trellis.internal"), ("origin", "https://trellis.internal")],
            StatusCode::ACCEPTED,
        ),
        (Method::POST, daily, &[], StatusCode::ACCEPTED),
        (Method::GET, "/views", &[("host", "LOCALHOST.:20698")], StatusCode::OK),
        (Method::GET, "/views", &evil_origin, StatusCode::OK),
        (Method::GET, "/", &[("host", BOUND), ("sec-fetch-site", "cross-site")], StatusCode::OK),
        (Method::GET, "/views/t.mart/Daily/2015/01/01", &[("host", BOUND), ("sec-fetch-site", "none")], StatusCode::OK),
    ];
    for (method, uri, headers, expected) in served {
        let (status, _, body) = app.send(with_headers(method.clone(), uri, headers)).await;
        assert_eq!(status, *expected, "{method} {uri} {headers:?}: {}", String::from_utf8_lossy(&body));
        if let Ok(accepted) = serde_json::from_slice::<Value>(&body)
            && let Some(run) = accepted["run"].as_str()
        {
            finished(&app.store, run).await;
        }
    }

    // The page and every answer: no framing, no sniffing, no script but the
    // server's own, no referrer.
    for uri in ["/", "/views", "/nowhere"] {
        let (_, headers, _) = app.send(with_headers(Method::GET, uri, &[])).await;
        let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"), "{uri}: {csp}");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{uri}");
        assert_eq!(headers[header::REFERRER_POLICY], "no-referrer", "{uri}");
    }
}

/// A server's own failure answers 500 with a generic line that points to
/// its log, never the detail, which names the server's paths: here a
/// reload onto a storage root that cannot be read (a symbolic link to
/// itself).
#[tokio::test(flavor = "multi_thread")]
async fn a_500_names_its_log_entry_and_no_path() {
    let project = Project::new(&[1]);
    std::os::unix::fs::symlink("moved", project.root().join("moved")).unwrap();
    let moved_project = "[project]\nname = \"inprocess\"\nstorage = \"moved\"\n\n[[view]]\nname = \"t.raw/In\"\n\
                         time = { frequency = \"1d\", initial = \"2015-01-01\" }\n";
    std::fs::write(project.root().join("trellis.toml"), moved_project).unwrap();
    let settings = without_token();
    let reloader = Reloader { dir: project.root().to_path_buf(), runtime: runtime().clone() };
    let app =
        App::serving(project.catalog("v1"), project.catalog("v1"), Capacity::default(), settings, Some(reloader)).await;
    let (_, error) = app.error(Method::POST, "/reload", None, StatusCode::INTERNAL_SERVER_ERROR).await;
    assert!(error.starts_with("internal error; see the server's log, id "), "{error}");
    let root = project.root().display().to_string();
    assert!(!error.contains(&root) && !error.contains("/tmp"), "{error}");
}

/// `GET /plugins` lists each problem of the view types' use of a plugin
/// under the plugin its diagnostic names, and under no other: here a
/// transformation plugin given as a view type's checksum, whose message
/// names the view type and the plugin without quoting either. (A server
/// does not start on such a project, its scheduler refuses it: the
/// scheduler here runs on the project without the misuse.)
#[tokio::test(flavor = "multi_thread")]
async fn a_plugins_problems_are_listed_under_that_plugin() {
    let project = Project::new(&[1]);
    let checked = "[[view]]\nname = \"t.mart/Checked\"\ntime = { frequency = \"1d\", initial = \"2015-01-01\" }\n\
                   transformation = { plugin = \"trivial\", checksum = \"panic\" }\n";
    let settings = without_token();
    let app =
        App::serving(project.catalog_with("v1", checked), project.catalog("v1"), Capacity::default(), settings, None)
            .await;
    let (status, plugins) = app.call(Method::GET, "/plugins", None).await;
    assert_eq!(status, StatusCode::OK, "{plugins}");
    let problems: Vec<(&str, Vec<&str>)> = plugins
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["problems"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(
        problems,
        [
            ("panic", vec!["view type t.mart/Checked: panic is a transformation plugin, not a checksum plugin"]),
            ("trivial", vec![])
        ],
        "{plugins}"
    );
}

/// A server's settings on loopback without a token.
fn without_token() -> Settings {
    Settings {
        token: None,
        request_timeout: Duration::from_secs(60),
        loopback: true,
        bound: BOUND.parse().unwrap(),
        allowed_hosts: Vec::new(),
    }
}
