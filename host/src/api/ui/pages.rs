//! The web UI's pages as HTML fragments, written with maud: each takes
//! what the JSON API answers (the `wire` types, the same functions make
//! both) and returns the markup the page script puts in `<main>`.
//!
//! Invariant: rendering only. It knows neither HTTP nor the service nor
//! the metastore; everything it shows is handed to it. Every value is
//! escaped by maud; the graph's SVG is the one string passed through as
//! it is, and `graph` escapes what goes into it.

use std::collections::BTreeMap;

use maud::{Markup, PreEscaped, html};
use percent_encoding::{AsciiSet, CONTROLS, NON_ALPHANUMERIC, utf8_percent_encode};

use super::super::wire;
use crate::metastore::LoggedEvent;
use crate::model::{FlowStatus, ViewState, wire_name};
use crate::model::{duration, plural};
use crate::scheduler::coordinate::CoordinatorStatus;

/// What a view's URL path keeps of itself in a link: `/` stays, so that
/// links read as the paths they are.
const IN_LINK: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'#').add(b'%').add(b'<').add(b'>').add(b'?').add(b'`');

/// A view page's link.
pub fn view_link(url: &str) -> String {
    format!("#/view/{}", utf8_percent_encode(url, IN_LINK))
}

fn run_link(id: &str) -> String {
    format!("#/runs/{}", utf8_percent_encode(id, IN_LINK))
}

/// Milliseconds since the Unix epoch, as UTC.
fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

fn state_badge(state: ViewState) -> Markup {
    html! { span class={"state state-" (state.as_str())} { (state.as_str()) } }
}

fn page_title(title: &str) -> Markup {
    html! { h1 tabindex="-1" { (title) } }
}

/// What the overview shows.
pub struct Overview {
    pub counts: BTreeMap<ViewState, usize>,
    pub total: usize,
    pub current: Option<CurrentRun>,
    pub queued: Vec<wire::Run>,
    pub transformations: wire::Transformations,
    pub listeners: std::sync::Arc<Vec<wire::Listener>>,
    pub coordinators: Vec<CoordinatorStatus>,
    pub now: i64,
}

pub struct CurrentRun {
    pub run: crate::scheduler::table::CurrentRun,
    /// Views of the run not settled yet.
    pub pending: usize,
}

pub fn overview(page: &Overview) -> Markup {
    html! {
        (page_title("Overview"))
        (overview_views(page))
        (overview_runs(page))
        (overview_transformations(page))
        (overview_listeners(page))
        (overview_coordinators(page))
    }
}

/// The counts of views by state, and a pattern to materialize.
fn overview_views(page: &Overview) -> Markup {
    html! {
        section aria-labelledby="views-heading" {
            h2 #views-heading { "Views" }
            p { (plural(page.total, "view", "views")) " held." }
            ul.counts #state-counts {
                @for state in ViewState::ALL {
                    @let n = page.counts.get(&state).copied().unwrap_or(0);
                    li data-state=(state.as_str()) {
                        a href={"#/views?status=" (state.as_str())} {
                            (state_badge(state)) " " span.count { (n) }
                        }
                    }
                }
            }
            form.action-form data-action="materialize" {
                label for="materialize-pattern" { "Materialize a pattern" }
                input #materialize-pattern name="pattern" type="text" required
                    placeholder="shop.datamart/DailySales/SHOP10/2015/05/01" autocomplete="off";
                button type="submit" { "Materialize" }
            }
        }
    }
}

/// The run executing now and the runs queued behind it.
fn overview_runs(page: &Overview) -> Markup {
    html! {
        section aria-labelledby="run-heading" {
            h2 #run-heading { "Runs" }
            @match &page.current {
                Some(current) => {
                    p #current-run {
                        "Running " a href=(run_link(&current.run.id)) { (current.run.id) }
                        " (" code { (current.run.pattern) } ", " (current.run.mode) "), for "
                        (duration(page.now - current.run.started)) ": "
                        (plural(current.pending, "view", "views")) " not settled yet, "
                        (page.transformations.running.len()) " transforming. "
                        button type="button" data-action="stop" data-run=(current.run.id) { "Stop" }
                    }
                }
                None => { p #current-run { "No run is executing." } }
            }
            @if !page.queued.is_empty() {
                p { (plural(page.queued.len(), "run", "runs")) " queued:" }
                ul { @for run in &page.queued { li { a href=(run_link(&run.id)) { (run.id) } " " code { (run.pattern) } } } }
            }
            p { a href="#/runs" { "Every run" } }
        }
    }
}

/// Permits and the transformations holding them.
fn overview_transformations(page: &Overview) -> Markup {
    html! {
        section aria-labelledby="permits-heading" {
            h2 #permits-heading { "Transformations" }
            table {
                thead { tr { th scope="col" { "Permits" } th scope="col" { "In use" } th scope="col" { "Limit" } } }
                tbody { @for permits in &page.transformations.permits {
                    tr { td { (if permits.plugin == "*" { "every plugin" } else { &permits.plugin }) } td { (permits.in_use) } td { (permits.limit) } }
                } }
            }
            @if !page.transformations.running.is_empty() {
                table #running {
                    caption { "Holding a permit" }
                    thead { tr { th scope="col" { "View" } th scope="col" { "Plugin" } th scope="col" { "For" } th scope="col" { "Progress" } } }
                    tbody { @for running in &page.transformations.running {
                        tr {
                            td { a href=(view_link(&running.view)) { (running.view) } }
                            td { (running.plugin) }
                            td { (duration(page.now - running.since)) }
                            td { (running.progress.as_deref().unwrap_or("")) }
                        }
                    } }
                }
            }
        }
    }
}

/// Each listener's state and lag, with a button to enable a disabled one.
fn overview_listeners(page: &Overview) -> Markup {
    html! {
        section aria-labelledby="listeners-heading" {
            h2 #listeners-heading { "Listeners" }
            @if page.listeners.is_empty() { p { "No listeners are configured." } } @else {
                table #listeners {
                    thead { tr { th scope="col" { "Listener" } th scope="col" { "State" } th scope="col" { "Behind" } th scope="col" { "Delivered" } th scope="col" { "Last error" } th { } } }
                    tbody { @for listener in page.listeners.iter() {
                        @let kind = wire_name(&listener.state);
                        tr {
                            td { (listener.name) }
                            td { (kind) @if let Some(reason) = &listener.reason { ": " (reason) } }
                            td { (plural(listener.behind as usize, "event", "events")) }
                            td { (listener.delivered) }
                            td { (listener.last_error.as_deref().unwrap_or("")) }
                            td { @if listener.state == crate::model::ListenerStateKind::Disabled {
                                button type="button" data-action="enable" data-listener=(listener.name) { "Enable " (listener.name) }
                            } }
                        }
                    } }
                }
            }
        }
    }
}

/// Each coordinator's next action and its actions by state.
fn overview_coordinators(page: &Overview) -> Markup {
    html! {
        @if !page.coordinators.is_empty() {
            section aria-labelledby="coordinators-heading" {
                h2 #coordinators-heading { "Coordinators" }
                table {
                    thead { tr { th scope="col" { "Coordinator" } th scope="col" { "Suspended" } th scope="col" { "Next action" } th scope="col" { "Actions" } } }
                    tbody { @for coordinator in &page.coordinators {
                        tr {
                            td { (coordinator.name) }
                            td { (if coordinator.suspended { "yes" } else { "no" }) }
                            td { (coordinator.next_nominal.map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string()).unwrap_or_else(|| "none".into())) }
                            td { @for (state, n) in &coordinator.counts { (wire_name(state)) " " (n) " " } }
                        }
                    } }
                }
            }
        }
    }
}

/// The views table's selection, as the page's form and its links carry it.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct ViewsSelection {
    pub pattern: Option<String>,
    pub status: Option<ViewState>,
    pub issue: Option<crate::model::Issue>,
    pub filter: Option<String>,
    pub cursor: Option<usize>,
}

impl ViewsSelection {
    /// This selection's table from `cursor` on.
    fn link(&self, cursor: Option<usize>) -> String {
        let mut pairs = Vec::new();
        for (name, value) in [
            ("pattern", self.pattern.clone()),
            ("status", self.status.map(|s| s.as_str().to_string())),
            ("issue", self.issue.map(|i| wire_name(&i))),
            ("filter", self.filter.clone()),
            ("cursor", cursor.map(|c| c.to_string())),
        ] {
            if let Some(value) = value.filter(|v| !v.is_empty()) {
                pairs.push(format!("{name}={}", utf8_percent_encode(&value, NON_ALPHANUMERIC)));
            }
        }
        format!("#/views?{}", pairs.join("&"))
    }
}

/// Views shown per page of the table.
pub const VIEWS_PER_PAGE: usize = 100;

pub fn views(selection: &ViewsSelection, page: &wire::ViewsPage) -> Markup {
    let start = selection.cursor.unwrap_or(0);
    html! {
        (page_title("Views"))
        form.filter-form #views-filter {
            label { "Pattern " input name="pattern" type="text" value=[selection.pattern.as_deref()] placeholder="shop.datamart/DailySales/SHOP10/2015/05/01" autocomplete="off"; }
            label { "State "
                select name="status" {
                    option value="" { "any" }
                    @for state in ViewState::ALL {
                        option value=(state.as_str()) selected[selection.status == Some(state)] { (state.as_str()) }
                    }
                }
            }
            label { "Issue "
                select name="issue" {
                    option value="" { "any" }
                    option value="errors" selected[selection.issue == Some(crate::model::Issue::Errors)] { "a dependency failed" }
                    option value="incomplete" selected[selection.issue == Some(crate::model::Issue::Incomplete)] { "a dependency had no data" }
                }
            }
            label { "Regex " input name="filter" type="text" value=[selection.filter.as_deref()] placeholder="SHOP10/2015/05" autocomplete="off"; }
            button type="submit" { "Show" }
        }
        @if let Some(pattern) = selection.pattern.as_deref().filter(|p| !p.is_empty()) {
            p.actions {
                button type="button" data-action="materialize" data-pattern=(pattern) { "Materialize " code { (pattern) } }
                " "
                button type="button" data-action="invalidate" data-pattern=(pattern) { "Invalidate " code { (pattern) } }
            }
        }
        @if page.views.is_empty() {
            p #views-empty { "No views are selected." }
        } @else {
            p { "Views " (start + 1) " to " (start + page.views.len()) "." }
            table #views-table {
                thead { tr { th scope="col" { "View" } th scope="col" { "Type" } th scope="col" { "State" } th scope="col" { "Materialized at" } th scope="col" { "Flags" } th scope="col" { "Last error" } } }
                tbody { @for view in &page.views {
                    tr data-view=(view.view) {
                        td { a href=(view_link(&view.view)) { (view.view) } }
                        td { (view.view_type) }
                        td.view-state { (state_badge(view.state)) }
                        td { (view.timestamp.map(time).unwrap_or_default()) }
                        td { (flags(view)) }
                        td.error { (view.last_error.as_deref().map(first_line).unwrap_or_default()) }
                    }
                } }
            }
        }
        nav.pager aria-label="Pages" {
            @if start > 0 { a href=(selection.link(Some(start.saturating_sub(VIEWS_PER_PAGE)).filter(|&c| c > 0))) { "Previous page" } " " }
            @if let Some(next) = page.next { a href=(selection.link(Some(next))) rel="next" { "Next page" } }
        }
    }
}

fn flags(view: &wire::View) -> String {
    let mut flags = Vec::new();
    if view.incomplete {
        flags.push("incomplete");
    }
    if view.errors {
        flags.push("with errors");
    }
    if view.invalidation_pending {
        flags.push("invalidation pending");
    }
    let stale = view.stale_reason.as_ref().map(|reason| format!("stale: {reason}"));
    let mut flags: Vec<&str> = flags;
    if let Some(stale) = &stale {
        flags.push(stale);
    }
    flags.join(", ")
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// What a view's page shows.
pub struct ViewPage {
    pub view: wire::View,
    pub version_checksum: Option<String>,
    /// What it depends on, with their states and when they were materialized.
    pub dependencies: Vec<(String, ViewState, Option<i64>)>,
    /// The files it published (relative paths and sizes), and how many
    /// more there are past those listed.
    pub files: Vec<(String, u64)>,
    pub more_files: usize,
    pub graph: String,
    pub hidden_upstream: usize,
    pub hidden_downstream: usize,
}

pub fn view(page: &ViewPage) -> Markup {
    let view = &page.view;
    html! {
        h1 tabindex="-1" data-view=(view.view) { (view.view) " " span.view-state { (state_badge(view.state)) } }
        p.actions {
            button type="button" data-action="materialize" data-pattern=(view.view) { "Materialize" }
            " "
            button type="button" data-action="invalidate" data-pattern=(view.view) { "Invalidate" }
        }
        @if let Some(error) = &view.last_error {
            section.error-box #last-error aria-labelledby="error-heading" {
                h2 #error-heading { "Last error" }
                pre { (error) }
            }
        }
        dl.facts {
            dt { "Type" } dd { (view.view_type) }
            dt { "Materialized at" } dd { (view.timestamp.map(time).unwrap_or_else(|| "never".into())) }
            dt { "Version checksum" } dd { code { (page.version_checksum.as_deref().unwrap_or("none yet")) } }
            dt { "Flags" } dd { (match flags(view) { f if f.is_empty() => "none".to_string(), f => f }) }
            dt { "Data" } dd { code { (view.data_path) } }
            @if let Some(counters) = &view.counters {
                dt { "Counters" } dd { (serde_json::to_string(counters).unwrap_or_default()) }
            }
        }
        section aria-labelledby="graph-heading" {
            h2 #graph-heading { "Neighbourhood" }
            p.hint { "Upstream on the left, downstream on the right; each box links to its view." }
            div.graph-box { (PreEscaped(&page.graph)) }
            @if page.hidden_upstream + page.hidden_downstream > 0 {
                p { "Not drawn: " (plural(page.hidden_upstream, "view", "views")) " upstream and "
                    (plural(page.hidden_downstream, "view", "views")) " downstream." }
            }
        }
        section aria-labelledby="inputs-heading" {
            h2 #inputs-heading { "Computed from" }
            @if page.dependencies.is_empty() { p { "Nothing: it has no dependencies." } } @else {
                table #dependencies {
                    thead { tr { th scope="col" { "Dependency" } th scope="col" { "State" } th scope="col" { "Materialized at" } } }
                    tbody { @for (url, state, timestamp) in &page.dependencies {
                        tr data-view=(url) { td { a href=(view_link(url)) { (url) } } td.view-state { (state_badge(*state)) } td { (timestamp.map(time).unwrap_or_default()) } }
                    } }
                }
            }
        }
        section aria-labelledby="files-heading" {
            h2 #files-heading { "Published files" }
            @if page.files.is_empty() { p { "None." } } @else {
                table #files {
                    thead { tr { th scope="col" { "File" } th scope="col" { "Bytes" } } }
                    tbody { @for (name, size) in &page.files { tr { td { code { (name) } } td { (size) } } } }
                }
                @if page.more_files > 0 { p { "And " (plural(page.more_files, "file", "files")) " more." } }
            }
        }
        section aria-labelledby="log-heading" #view-log {
            h2 #log-heading { "Last transformation's log" }
            div data-load={ "/ui/view-log/" (utf8_percent_encode(&view.view, IN_LINK)) } aria-live="polite" { p { "Loading the log…" } }
        }
    }
}

/// The log of a view's last transformation, for its page.
pub fn view_log(log: &wire::ViewLog) -> Markup {
    html! {
            @match log.attempts.last() {
                None => { p { "No transformation has run for it yet." } }
                Some(attempt) => {
                    p { "Run " a href=(run_link(&attempt.run)) { (attempt.run) } ", attempt " (attempt.attempt) ", "
                        (attempt.time) ", " (attempt.plugin) ": " strong { (attempt.outcome) } }
                    @if !attempt.lines.is_empty() {
                        pre.log { @for (level, line) in &attempt.lines { (level) " " (line) "\n" } }
                    }
                    @if !attempt.stdout.is_empty() { h3 { "stdout" } pre.log { (attempt.stdout) } }
                    @if !attempt.stderr.is_empty() { h3 { "stderr" } pre.log { (attempt.stderr) } }
                    @if attempt.truncated_bytes > 0 { p { (attempt.truncated_bytes) " bytes were cut off." } }
                }
            }
    }
}

/// A run with its flows counted per status.
pub struct RunSummary {
    pub run: wire::Run,
    pub counts: BTreeMap<FlowStatus, usize>,
}

fn counts(counts: &BTreeMap<FlowStatus, usize>, idle: usize) -> Markup {
    html! {
        @for (status, n) in counts { span.flow-count { (wire_name(status)) " " (n) } " " }
        @if idle > 0 { span.flow-count { "idle " (idle) } }
    }
}

fn run_duration(run: &wire::Run, now: i64) -> String {
    duration(run.finished.unwrap_or(now) - run.started)
}

pub fn runs(runs: &[RunSummary], more: usize, now: i64) -> Markup {
    html! {
        (page_title("Runs"))
        @if runs.is_empty() { p { "No runs are recorded." } } @else {
            table #runs-table {
                thead { tr { th scope="col" { "Run" } th scope="col" { "Pattern" } th scope="col" { "Mode" } th scope="col" { "Status" } th scope="col" { "Started" } th scope="col" { "Duration" } th scope="col" { "Flows" } } }
                tbody { @for summary in runs {
                    @let run = &summary.run;
                    tr {
                        td { a href=(run_link(&run.id)) { (run.id) } }
                        td { code { (run.pattern) } }
                        td { (run.mode) @if run.full_refresh { ", full refresh" } }
                        td { (wire_name(&run.status)) @if let Some(ended) = &run.termination { ": " (ended.to_string()) } }
                        td { (time(run.started)) }
                        td { (run_duration(run, now)) }
                        td { (counts(&summary.counts, run.idle)) }
                    }
                } }
            }
            @if more > 0 { p { "And " (plural(more, "older run", "older runs")) "." } }
        }
    }
}

/// Flows listed on a run's page at most.
pub const FLOWS_SHOWN: usize = 1000;

pub fn run(detail: &wire::RunDetail, status: Option<FlowStatus>, now: i64) -> Markup {
    let run = &detail.run;
    let mut tally: BTreeMap<FlowStatus, usize> = BTreeMap::new();
    for flow in &detail.flows {
        *tally.entry(flow.status).or_default() += 1;
    }
    let selected: Vec<&wire::Flow> = detail.flows.iter().filter(|f| status.is_none_or(|s| f.status == s)).collect();
    let live = run.finished.is_none();
    html! {
        h1 tabindex="-1" data-run=(run.id) data-live=(live) { "Run " (run.id) }
        dl.facts {
            dt { "Pattern" } dd { code { (run.pattern) } }
            dt { "Mode" } dd { (run.mode) @if run.full_refresh { ", full refresh" } }
            dt { "Status" } dd #run-status { (wire_name(&run.status)) @if let Some(ended) = &run.termination { ": " (ended.to_string()) } }
            dt { "Started" } dd { (time(run.started)) }
            dt { "Duration" } dd { (run_duration(run, now)) }
            dt { "Flows" } dd #run-counts { (counts(&tally, detail.idle)) }
        }
        @if live {
            p.actions { button type="button" data-action="stop" data-run=(run.id) { "Stop this run" } }
        }
        nav.filters aria-label="Flows by status" {
            a href=(run_link(&run.id)) aria-current=[status.is_none().then_some("true")] { "all" }
            @for flow_status in tally.keys() {
                " " a href={(run_link(&run.id)) "?status=" (wire_name(flow_status))} aria-current=[(status == Some(*flow_status)).then_some("true")] { (wire_name(flow_status)) }
            }
        }
        table #flows {
            thead { tr { th scope="col" { "View" } th scope="col" { "Status" } th scope="col" { "Attempts" } th scope="col" { "Error" } } }
            tbody { @for flow in selected.iter().take(FLOWS_SHOWN) {
                tr {
                    td { a href=(view_link(&flow.view)) { (flow.view) } }
                    td { (wire_name(&flow.status)) }
                    td { (flow.attempts.map(|a| a.to_string()).unwrap_or_default()) }
                    td.error { (flow.error.as_deref().or(flow.reason.as_deref()).map(first_line).unwrap_or_default()) }
                }
            } }
        }
        @if selected.len() > FLOWS_SHOWN { p { "And " (selected.len() - FLOWS_SHOWN) " flows more." } }
    }
}

pub fn events(events: &[LoggedEvent]) -> Markup {
    html! {
        (page_title("Events"))
        p.hint { "The event log's latest, newest first; new events appear as they are committed." }
        table #events-table {
            thead { tr { th scope="col" { "#" } th scope="col" { "Time" } th scope="col" { "View" } th scope="col" { "Change" } th scope="col" { "Run" } th scope="col" { "Error" } } }
            tbody { @for logged in events.iter().rev() { (event_row(logged)) } }
        }
    }
}

/// One event's row: the page script draws the same from the stream.
fn event_row(logged: &LoggedEvent) -> Markup {
    let event = &logged.event;
    html! {
        tr {
            td { (logged.sequence) }
            td { (time(event.time)) }
            td { a href=(view_link(&event.view)) { (event.view) } }
            td { (event.previous.as_str()) " → " (state_badge(event.current)) }
            td { @if let Some(run) = &event.run_id { a href=(run_link(run)) { (run) } } }
            td.error { (event.error.as_deref().map(first_line).unwrap_or_default()) }
        }
    }
}
