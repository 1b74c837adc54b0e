//! The views: listed (all instantiated, or those a pattern addresses,
//! selected and paged, or counted per state), invalidated, and planned.

use std::collections::{BTreeMap, HashSet};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::extract::{Path, Query, Shared, within_limit};
use super::wire::{self, ErrorBody};
use super::{ApiError, AppState};
use crate::model::{Issue, ViewState};
use crate::scheduler::table::{Table, ViewRow};

#[utoipa::path(get, path = "/views", params(wire::ViewsQuery),
    responses((status = 200, description = "A page of views, or with `overview` their counts per state", body = wire::ViewsAnswer),
              (status = 400, body = ErrorBody)))]
pub(super) async fn list_views(
    State(state): Shared,
    Query(query): Query<wire::ViewsQuery>,
) -> Result<Response, ApiError> {
    views_of(&state, None, query).await
}

#[utoipa::path(get, path = "/views/{pattern}", params(("pattern" = String, Path, description = "A view pattern"), wire::ViewsQuery),
    responses((status = 200, description = "A page of views, or with `overview` their counts per state", body = wire::ViewsAnswer),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, description = "The server holds all the views it may", body = ErrorBody),
              (status = 429, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn pattern_views(
    State(state): Shared,
    Path(pattern): Path,
    Query(query): Query<wire::ViewsQuery>,
) -> Result<Response, ApiError> {
    // `/views/{view}/log` shares the route: a pattern ending in `/log` that
    // names one view is that view's log.
    if let Some(view) = pattern.strip_suffix("/log") {
        within_limit(view)?;
        if let Ok(ids) = state.handle.instantiate(view.to_string(), false).await
            && let [id] = ids[..]
        {
            return view_log(&state, id).map(IntoResponse::into_response);
        }
    }
    views_of(&state, Some(pattern), query).await
}

#[utoipa::path(get, path = "/views/{view}/log", params(("view" = String, Path, description = "One view's URL path")),
    responses((status = 200, body = wire::ViewLog), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) fn view_log(state: &AppState, id: u32) -> Result<Json<wire::ViewLog>, ApiError> {
    let url = match state.table().views().get(id as usize) {
        Some(row) => row.url.to_string(),
        None => return Err(ApiError::new(StatusCode::NOT_FOUND, "the view is not held".to_string())),
    };
    let log = state.store.view_log(&url)?;
    Ok(Json(wire::ViewLog::of(url, log)))
}

/// What a views request selects, checked before anything is done.
struct Selection {
    status: Option<ViewState>,
    filter: Option<regex::Regex>,
    issue: Option<Issue>,
}

impl Selection {
    fn of(query: &wire::ViewsQuery) -> Result<Selection, ApiError> {
        let filter =
            query.filter.as_deref().map(crate::model::view_filter).transpose().map_err(ApiError::bad_request)?;
        Ok(Selection { status: query.status, filter, issue: query.issue })
    }

    fn is_everything(&self) -> bool {
        self.status.is_none() && self.filter.is_none() && self.issue.is_none()
    }

    fn selects(&self, row: &ViewRow) -> bool {
        let condition = row.condition();
        self.status.is_none_or(|status| condition.is_in(status))
            && self.issue.is_none_or(|issue| condition.has(issue))
            && self.filter.as_ref().is_none_or(|filter| filter.is_match(&row.url))
    }
}

const DEFAULT_PAGE: usize = 1000;
const MAX_PAGE: usize = 10_000;

async fn views_of(state: &AppState, pattern: Option<String>, query: wire::ViewsQuery) -> Result<Response, ApiError> {
    Ok(match listing(state, pattern, query).await? {
        Listing::Page(mut page) => {
            with_current_prefixes(state, &mut page.views).await;
            Json(page).into_response()
        }
        Listing::Overview(overview) => Json(overview).into_response(),
    })
}

/// The page's views with the prefix of their current version, where the
/// store publishes under prefixes (an object root: a pointer read per view,
/// on a blocking thread, since the store waits for its answers).
async fn with_current_prefixes(state: &AppState, views: &mut [wire::View]) {
    let storage = state.storage.clone();
    let keys: Vec<_> = views.iter().map(|view| storage.key(std::path::Path::new(&view.data_path))).collect();
    match tokio::task::spawn_blocking(move || storage.current_prefixes(&keys)).await {
        Ok(prefixes) => {
            for (view, prefix) in views.iter_mut().zip(prefixes) {
                view.current_prefix = prefix;
            }
        }
        Err(e) => tracing::warn!("the views' current versions were not read: {e}"),
    }
}

/// What a views request answers: a page, or the counts per state.
pub(super) enum Listing {
    Page(wire::ViewsPage),
    Overview(wire::Overview),
}

/// The views a request selects, as `GET /views` and the UI's table both show them.
pub(super) async fn listing(
    state: &AppState,
    pattern: Option<String>,
    query: wire::ViewsQuery,
) -> Result<Listing, ApiError> {
    let selection = Selection::of(&query)?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit {limit} is not between 1 and {MAX_PAGE}")));
    }
    let addressed = match pattern {
        Some(pattern) => Some(addressed(state, pattern, query.closure == Some(true)).await?),
        None => None,
    };
    let (views, next) = {
        let table = state.table();
        let candidates: Box<dyn Iterator<Item = usize>> = match &addressed {
            Some(ids) => Box::new(ids.iter().map(|&id| id as usize)),
            None => Box::new(0..table.views().len()),
        };
        if query.overview == Some(true) {
            return Ok(Listing::Overview(counts(&table, candidates, &selection, addressed.is_none())));
        }
        page(&table, candidates, &selection, &query, limit)
    };
    Ok(Listing::Page(wire::ViewsPage { views: with_stale(state, views).await?, next }))
}

/// The views a pattern addresses, each once, in the order instantiated. A
/// pattern is instantiated by the service, so that its views are in the table.
async fn addressed(state: &AppState, pattern: String, closure: bool) -> Result<Vec<u32>, ApiError> {
    within_limit(&pattern)?;
    let mut ids = state.handle.instantiate(pattern, closure).await?;
    let mut seen = HashSet::new();
    ids.retain(|id| seen.insert(*id));
    Ok(ids)
}

/// The selected views counted by state. Keyed by the states' names (not the
/// states), so that the JSON object lists them in the order of their names,
/// as it always has.
fn counts(
    table: &Table,
    candidates: impl Iterator<Item = usize>,
    selection: &Selection,
    every_view: bool,
) -> wire::Overview {
    // Every view, unfiltered: the table keeps the counts.
    if every_view && selection.is_everything() {
        let overview: BTreeMap<String, usize> =
            table.overview().into_iter().filter(|(_, n)| *n > 0).map(|(s, n)| (s.as_str().to_string(), n)).collect();
        return wire::Overview { overview, total: table.views().len() };
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0;
    for row in candidates.filter_map(|index| table.views().get(index)).filter(|row| selection.selects(row)) {
        *counts.entry(row.state.as_str().to_string()).or_default() += 1;
        total += 1;
    }
    wire::Overview { overview: counts, total }
}

/// One page of the selected views from the query's cursor, with the cursor
/// of the next page when there is one.
fn page(
    table: &Table,
    candidates: impl Iterator<Item = usize>,
    selection: &Selection,
    query: &wire::ViewsQuery,
    limit: usize,
) -> (Vec<(usize, wire::View)>, Option<usize>) {
    let start = query.cursor.unwrap_or(0);
    let mut views = Vec::new();
    for (position, index) in candidates.enumerate().skip(start) {
        let Some(row) = table.views().get(index) else { continue };
        if !selection.selects(row) {
            continue;
        }
        if views.len() == limit {
            return (views, Some(position));
        }
        views.push((index, view_of(table, index, query.dependencies == Some(true), query.dependents == Some(true))));
    }
    (views, None)
}

/// The views of a page with their staleness, which is `plan`'s judgement and
/// so the service's to make.
async fn with_stale(state: &AppState, views: Vec<(usize, wire::View)>) -> Result<Vec<wire::View>, ApiError> {
    let materialized: Vec<u32> = views
        .iter()
        .filter(|(_, view)| view.state == ViewState::Materialized)
        .map(|(index, _)| *index as u32)
        .collect();
    let stale = if materialized.is_empty() { Default::default() } else { state.handle.stale(materialized).await? };
    let views = views
        .into_iter()
        .map(|(index, mut view)| {
            view.stale_reason = stale.get(&(index as u32)).map(ToString::to_string);
            view.stale = view.stale_reason.is_some();
            view
        })
        .collect();
    Ok(views)
}

/// The view at `index` of the table's `views` as the API shows it, with its
/// dependencies and its dependents (among every view held, not only those
/// its pattern instantiates) when asked for.
pub(super) fn view_of(table: &Table, index: usize, dependencies: bool, dependents: bool) -> wire::View {
    let views = table.views();
    let row = &views[index];
    let urls = |ids: &[u32]| ids.iter().filter_map(|&d| views.get(d as usize)).map(|d| d.url.to_string()).collect();
    wire::View {
        view: row.url.to_string(),
        view_type: row.view_type.to_string(),
        state: row.state,
        timestamp: row.timestamp,
        materialized_at: row.timestamp.map(wire::millis_text),
        incomplete: row.incomplete,
        errors: row.errors,
        invalidation_pending: row.invalidation_pending,
        stale: false,
        stale_reason: None,
        last_error: row.last_error.clone(),
        network_error: row.network_retry.clone(),
        counters: row.counters.clone(),
        data_path: row.data_path.display().to_string(),
        current_prefix: None,
        dependencies: dependencies.then(|| urls(&row.dependencies)),
        dependents: dependents.then(|| urls(table.dependents(index as u32))),
    }
}

#[utoipa::path(post, path = "/invalidate/{pattern}",
    params(("pattern" = String, Path, description = "A view pattern"), wire::InvalidateQuery),
    responses((status = 200, body = wire::Invalidated),
              (status = 409, description = "Some views are in flight and were left alone", body = wire::Invalidated),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn invalidate(
    State(state): Shared,
    Path(pattern): Path,
    Query(query): Query<wire::InvalidateQuery>,
) -> Result<(StatusCode, Json<wire::Invalidated>), ApiError> {
    within_limit(&pattern)?;
    let dependencies = query.dependencies.unwrap_or(false);
    let done = state.handle.invalidate(pattern, dependencies).await?;
    let (status, refused, error) = refusals(done.refused);
    Ok((status, Json(wire::Invalidated { invalidated: done.invalidated, refused, error })))
}

/// Views an invalidation (or a transaction log's reset, which invalidates)
/// left alone: 409 when there are any, with the first named in one line.
pub(super) fn refusals(refused: Vec<(String, String)>) -> (StatusCode, Vec<wire::Refusal>, Option<String>) {
    let refused: Vec<wire::Refusal> =
        refused.into_iter().map(|(view, reason)| wire::Refusal { view, reason }).collect();
    let (status, error) = match refused.len() {
        0 => (StatusCode::OK, None),
        n => (
            StatusCode::CONFLICT,
            Some(format!(
                "{n} view{} left alone, {}: {}",
                if n == 1 { " was" } else { "s were" },
                refused[0].view,
                refused[0].reason
            )),
        ),
    };
    (status, refused, error)
}

#[utoipa::path(get, path = "/plan/{pattern}", params(("pattern" = String, Path, description = "A view pattern")),
    responses((status = 200, body = [wire::PlanLine]), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, description = "The server holds all the views it may", body = ErrorBody),
              (status = 429, body = ErrorBody)),
    security(("bearer" = [])))]
pub(super) async fn plan(State(state): Shared, Path(pattern): Path) -> Result<Json<Vec<wire::PlanLine>>, ApiError> {
    within_limit(&pattern)?;
    let plan = state.handle.plan(pattern).await?;
    Ok(Json(plan.into_iter().map(|(view, verdict)| wire::PlanLine { view, plan: verdict.to_string() }).collect()))
}
