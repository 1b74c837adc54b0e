//! The web UI that `trellis serve` answers at `/`: a page shell and its
//! script and style, compiled into the binary, and the HTML fragments the
//! script fetches for each page (`/ui/...`), with the bearer token when
//! the server has one.
//!
//! - `pages`: the fragments' markup (maud), from the API's `wire` types;
//! - `graph`: a view's neighbourhood, laid out and drawn as SVG;
//! - `assets/`: `index.html`, `app.js` (routing, the live `/events`
//!   stream, actions, the token prompt) and `style.css`.
//!
//! Invariant: the UI reads what the JSON API reads, through the same
//! functions (`views::listing`, `runs::run_detail`, `status::*`), and acts
//! only through the API's own endpoints, from the page script, so it can
//! show or do nothing the API does not. The shell and assets hold no data
//! and are served without a token; every fragment is authorized as the
//! API's reads are.

mod graph;
mod pages;

use std::collections::BTreeMap;
use std::path::Path as FsPath;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::extract::{Path, Query, Shared};
use super::views::{Listing, listing, view_of};
use super::{ApiError, AppState, runs, status, wire};
use crate::model::FlowStatus;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// Paths served without a token wherever the server listens: the shell
/// and its assets, which hold no data.
pub(super) const PUBLIC: &[&str] = &["/", "/ui/app.js", "/ui/style.css"];

/// Fragments that address views by pattern, which the server instantiates
/// to answer: authorized as the API's instantiating reads are.
pub(super) const INSTANTIATING: &[&str] = &["/ui/views", "/ui/view/{*view}", "/ui/view-log/{*view}"];

pub(super) fn routes() -> axum::Router<std::sync::Arc<AppState>> {
    use axum::routing::get;
    axum::Router::new()
        .route("/", get(index))
        .route("/ui/app.js", get(script))
        .route("/ui/style.css", get(style))
        .route("/ui/overview", get(overview))
        .route("/ui/views", get(views))
        .route("/ui/view/{*view}", get(view))
        .route("/ui/view-log/{*view}", get(view_log))
        .route("/ui/runs", get(runs_page))
        .route("/ui/runs/{id}", get(run_page))
        .route("/ui/events", get(events))
}

/// Assets change with the binary: a client may keep them a while, but
/// asks again after an upgrade within minutes.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "max-age=300")], body).into_response()
}

async fn index() -> Response {
    ([(header::CACHE_CONTROL, "no-cache")], Html(INDEX)).into_response()
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// A fragment: never cached, since it is the live state.
fn fragment(markup: maud::Markup) -> Response {
    ([(header::CACHE_CONTROL, "no-store")], Html(markup.into_string())).into_response()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn overview(State(state): Shared) -> Result<Response, ApiError> {
    let transformations = status::transformations_of(&state);
    let listeners = status::listener_snapshot(&state).await?;
    // From the table, not asked of the service: the overview must not wait
    // behind a run's step.
    let (coordinators, counts, total, current_run, pending, queued_ids) = {
        let table = state.table();
        (
            table.coordinators.clone(),
            table.overview(),
            table.views().len(),
            table.current_run.clone(),
            table.current_run_pending,
            table.queued_runs.clone(),
        )
    };
    let record = |id: &str| -> Result<Option<wire::Run>, ApiError> {
        Ok(state.store.run(id)?.map(|record| runs::run_of(record, &state.table(), state.started)))
    };
    let current = current_run.map(|run| pages::CurrentRun { run, pending });
    let mut queued = Vec::new();
    for id in &queued_ids {
        queued.extend(record(id)?);
    }
    let page = pages::Overview { counts, total, current, queued, transformations, listeners, coordinators, now: now() };
    Ok(fragment(pages::overview(&page)))
}

async fn views(State(state): Shared, Query(selection): Query<pages::ViewsSelection>) -> Result<Response, ApiError> {
    let query = wire::ViewsQuery {
        status: selection.status,
        filter: selection.filter.clone().filter(|f| !f.is_empty()),
        issue: selection.issue,
        limit: Some(pages::VIEWS_PER_PAGE),
        cursor: selection.cursor,
        ..Default::default()
    };
    let pattern = selection.pattern.clone().filter(|p| !p.trim().is_empty());
    // The UI's query never asks for counts, so the answer is a page.
    let Listing::Page(page) = listing(&state, pattern, query).await? else {
        return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the views were counted, not listed"));
    };
    Ok(fragment(pages::views(&selection, &page)))
}

/// The one view at `url`: found in the table if it is held, without
/// waiting for the service (which answers between two steps of a run),
/// else instantiated.
async fn one_view(state: &AppState, url: &str) -> Result<u32, ApiError> {
    super::extract::within_limit(url)?;
    let held = state.table().index_of(url);
    let ids = match held {
        Some(id) => vec![id],
        None => state.handle.instantiate(url.to_string(), false).await?,
    };
    match ids[..] {
        [id] => Ok(id),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{url} is not one view but a pattern of {}; its views are listed at #/views", ids.len()),
        )),
    }
}

/// A view's page. Everything on it comes from the table and the file
/// system but its log, which the page loads on its own (`view_log`): a
/// metastore read waits while a large commit applies, and the page must not.
async fn view(State(state): Shared, Path(url): Path) -> Result<Response, ApiError> {
    let id = one_view(&state, &url).await?;
    let (view, dependencies, neighbourhood, version_checksum) = {
        let table = state.table();
        let views = table.views();
        let Some(row) = views.get(id as usize) else {
            return Err(ApiError::new(StatusCode::NOT_FOUND, format!("{url} is not held")));
        };
        let dependencies = row
            .dependencies
            .iter()
            .filter_map(|&d| views.get(d as usize))
            .map(|d| (d.url.to_string(), d.state, d.timestamp))
            .collect::<Vec<_>>();
        let version_checksum = row.version_checksum.as_deref().map(str::to_string);
        (view_of(&table, id as usize, false, false), dependencies, graph::neighbourhood(&table, id), version_checksum)
    };
    let mut view = view;
    if view.state == crate::model::ViewState::Materialized {
        view.stale_reason = state.handle.stale(vec![id]).await?.remove(&id).map(|outdated| outdated.to_string());
        view.stale = view.stale_reason.is_some();
    }
    let (files, more_files) = published_files(&*state.storage, FsPath::new(&view.data_path));
    let page = pages::ViewPage {
        version_checksum,
        dependencies,
        files,
        more_files,
        graph: graph::svg(&neighbourhood, pages::view_link),
        hidden_upstream: neighbourhood.hidden_upstream,
        hidden_downstream: neighbourhood.hidden_downstream,
        view,
    };
    Ok(fragment(pages::view(&page)))
}

/// The log section of a view's page.
async fn view_log(State(state): Shared, Path(url): Path) -> Result<Response, ApiError> {
    let id = one_view(&state, &url).await?;
    let log = super::views::view_log(&state, id)?.0;
    Ok(fragment(pages::view_log(&log)))
}

/// Files listed on a view's page at most.
const FILES_SHOWN: usize = 50;

/// The files under a view's data directory (relative paths and sizes,
/// sorted, the first `FILES_SHOWN`), and how many more there are, as the
/// view storage lists them (none when it cannot).
fn published_files(storage: &dyn crate::storage::ViewStore, data: &FsPath) -> (Vec<(String, u64)>, usize) {
    use crate::storage::Walk;
    let walk = Walk { follow_links: false, exact_names: false, keep: &|_| true };
    let listed = storage.list(&storage.key(data), &walk).unwrap_or_default();
    let mut files: Vec<(String, u64)> =
        listed.into_iter().filter(|entry| !entry.is_dir).map(|entry| (entry.name, entry.identity.size)).collect();
    files.sort();
    let more = files.len().saturating_sub(FILES_SHOWN);
    files.truncate(FILES_SHOWN);
    (files, more)
}

/// Runs listed on the runs page: the latest.
const RUNS_SHOWN: usize = 50;

async fn runs_page(State(state): Shared) -> Result<Response, ApiError> {
    let mut records = state.store.runs()?;
    records.sort_by(|a, b| b.started.cmp(&a.started).then_with(|| b.id.cmp(&a.id)));
    let more = records.len().saturating_sub(RUNS_SHOWN);
    records.truncate(RUNS_SHOWN);
    let mut summaries = Vec::new();
    for record in records {
        let mut counts: BTreeMap<FlowStatus, usize> = BTreeMap::new();
        for (_, flow) in state.store.flow_records(&record.id)? {
            *counts.entry(flow.status).or_default() += 1;
        }
        let run = runs::run_of(record, &state.table(), state.started);
        summaries.push(pages::RunSummary { run, counts });
    }
    Ok(fragment(pages::runs(&summaries, more, now())))
}

#[derive(serde::Deserialize)]
struct RunQuery {
    status: Option<FlowStatus>,
}

async fn run_page(State(state): Shared, Path(id): Path, Query(query): Query<RunQuery>) -> Result<Response, ApiError> {
    let detail = runs::run_detail(&state, &id)?;
    Ok(fragment(pages::run(&detail, query.status, now())))
}

/// Events shown when the events page opens; later ones arrive live.
const EVENTS_SHOWN: u64 = 100;

async fn events(State(state): Shared) -> Result<Response, ApiError> {
    let next = state.store.next_sequence()?;
    let from = next.saturating_sub(EVENTS_SHOWN).max(state.store.first_sequence()?);
    let events = state.store.events_from(from, EVENTS_SHOWN as usize)?;
    let mut response = fragment(pages::events(&events));
    // Where the page's stream goes on from, so that none is shown twice or missed.
    if let Ok(value) = header::HeaderValue::from_str(&next.to_string()) {
        response.headers_mut().insert("x-trellis-next-sequence", value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    /// Every state has a colour in the style sheet.
    #[test]
    fn every_state_has_a_colour() {
        for state in crate::model::ViewState::ALL {
            assert!(super::STYLE.contains(&format!(".state-{} ", state.as_str())), "{state:?} has no colour");
        }
    }

    /// A view's page lists its published files as the storage lists them:
    /// relative names through its directories, sorted, sizes, the first
    /// `FILES_SHOWN` and how many more; a view with no data has none.
    #[test]
    fn published_files_are_listed_relative_to_the_views_data() {
        let root = tempfile::tempdir().unwrap();
        let storage = crate::storage::LocalDir::new(root.path());
        let data = root.path().join("shop/2015/01/01");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::write(data.join("_SUCCESS"), "").unwrap();
        std::fs::write(data.join("sub/part-00000.csv"), "v\n1\n").unwrap();
        let (files, more) = super::published_files(&storage, &data);
        assert_eq!(files, [("_SUCCESS".to_string(), 0), ("sub/part-00000.csv".to_string(), 4)]);
        assert_eq!(more, 0);
        for n in 0..super::FILES_SHOWN {
            std::fs::write(data.join(format!("x{n:03}")), "").unwrap();
        }
        let (files, more) = super::published_files(&storage, &data);
        assert_eq!((files.len(), more), (super::FILES_SHOWN, 2));
        assert_eq!(files[0].0, "_SUCCESS");
        assert_eq!(super::published_files(&storage, &root.path().join("absent")), (Vec::new(), 0));
    }
}
