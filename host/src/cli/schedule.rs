//! `trellis materialize`, `trellis invalidate`, `trellis plan` and
//! `trellis transformations`: the scheduler, embedded or on a server.

use anyhow::Context;
use clap::Args;
use reqwest::{Method, StatusCode};

use super::Status;
use super::catalog::{self, ProjectArgs, load, load_to_run};
use super::remote::{self, Server};
use crate::api::wire;
use crate::listeners::{Lag, State};
use crate::model::{FlowStatus, Termination, ViewState, wire_name};
use crate::plugins::Plugins;
use crate::runtime::Runtime;
use crate::scheduler::{Invalidation, Mode, RunSummary, Scheduler, check_full_refresh};
use crate::session::Session;

#[derive(Debug, Args)]
pub(super) struct MaterializeArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// The views to materialize, as a view pattern (docs/view-patterns.md)
    #[arg(long, short = 'v', value_name = "PATTERN")]
    views: String,
    /// DEFAULT, RESET_TRANSFORMATION_CHECKSUMS, RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS, TRANSFORM_ONLY or SET_ONLY
    #[arg(long, default_value = "DEFAULT", value_parser = str::parse::<Mode>)]
    mode: Mode,
    /// Rebuild the views of the pattern whatever their state; what they depend on is read as it
    /// stands and reported EXCLUDED (DEFAULT mode only)
    #[arg(long)]
    full_refresh: bool,
    /// With --server, follow the run to its end and print its summary (else it is only started);
    /// an embedded materialize always does
    #[arg(long)]
    wait: bool,
    /// List every view the run visited with its flow status, and show plugins' log lines
    /// (by default only the views with trouble and the counts are printed)
    #[arg(long)]
    pub(super) verbose: bool,
}

#[derive(Debug, Args)]
pub(super) struct InvalidateArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// The views to invalidate, as a view pattern (docs/view-patterns.md)
    #[arg(long, short = 'v', value_name = "PATTERN")]
    views: String,
    /// Also invalidate what they depend on
    #[arg(long, short = 'd')]
    deps: bool,
}

#[derive(Debug, Args)]
pub(super) struct PlanArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// The views to plan, as a view pattern (docs/view-patterns.md)
    #[arg(long, short = 'v', value_name = "PATTERN")]
    views: String,
    /// What a materialize in this mode would do: DEFAULT, RESET_TRANSFORMATION_CHECKSUMS,
    /// RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS, TRANSFORM_ONLY or SET_ONLY
    #[arg(long, default_value = "DEFAULT", value_parser = str::parse::<Mode>)]
    mode: Mode,
}

#[derive(Debug, Args)]
pub(super) struct TransformationsArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
}

/// A run's progress bar on a terminal; nothing when stderr is a file or pipe.
fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {prefix} [{elapsed_precise}] {bar:40} {pos}/{len} views {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// A full refresh with another mode than DEFAULT is bad input, refused
/// before anything is opened or sent.
fn check_mode(args: &MaterializeArgs) -> anyhow::Result<()> {
    if args.full_refresh {
        check_full_refresh(args.mode).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

pub(super) async fn materialize(args: &MaterializeArgs, runtime: &Runtime) -> anyhow::Result<Status> {
    check_mode(args)?;
    let catalog = load_to_run(&args.project.project, "materialize")?;
    let mut session = Session::open(catalog.clone(), runtime).await?;
    let bar = progress_bar();
    let listener_lag = session.listeners().map(|listeners| listeners.lag_probe());
    let scheduler = &mut session.scheduler;
    let reporter = bar.clone();
    scheduler.on_progress(move |progress| {
        reporter.set_length(progress.known as u64);
        reporter.set_position(progress.settled as u64);
        let lag = match listener_lag.as_ref().map_or(0, |lag| lag()) {
            0 => String::new(),
            behind => format!(", listeners {} behind", crate::model::plural(behind as usize, "event", "events")),
        };
        let waiting = match progress.waiting {
            0 => String::new(),
            n => format!(", {n} waiting"),
        };
        reporter.set_message(format!("({} running{waiting}{lag})", progress.running));
    });
    // Ctrl-C (or `trellis stop ID`, which sends SIGINT) stops the run
    // cleanly: running transformations are canceled and keep their
    // previous data, the rest is skipped.
    // The handler is installed now, not when the run first waits for it,
    // so that a signal at any moment of the run stops it cleanly.
    #[cfg(unix)]
    let stop = {
        let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("installing the Ctrl-C handler")?;
        async move {
            interrupt.recv().await;
        }
    };
    #[cfg(not(unix))]
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    // `trellis stop ID` from another process finds the run through this.
    let (mut announce, _active_run) = super::stop::announce(&catalog);
    let run_bar = bar.clone();
    scheduler.on_run_started(move |run| {
        announce(run);
        // The id `trellis stop` takes, where the user is looking.
        run_bar.set_prefix(format!("run {run}"));
    });
    let summary = scheduler.materialize_until(&args.views, args.mode, args.full_refresh, stop).await;
    bar.finish_and_clear();
    let summary = match summary {
        Ok(summary) => summary,
        Err(e) => {
            session.close(std::time::Duration::ZERO).await?;
            return Err(e.into());
        }
    };
    print_summary(&summary, args.project.json, args.verbose)?;
    // Then listeners get a moment to catch up; what they miss now they
    // receive from their cursor next time. A stopped run does not wait.
    let drain =
        if summary.termination.is_stopped() { std::time::Duration::ZERO } else { catalog.settings.events.drain };
    let lags = session.close(drain).await?;
    for line in lag_lines(&lags) {
        eprintln!("{line}");
    }
    Ok(outcome(&summary))
}

/// Where each listener stands at the end of a command, one line each: a
/// listener plugin always, the built-in monitor only when it is behind.
/// "caught up" is said only of one that received every event logged.
pub(super) fn lag_lines(lags: &[Lag]) -> Vec<String> {
    lags.iter()
        .filter(|lag| lag.plugin.is_some() || lag.behind > 0 || lag.restarts > 0)
        .map(|lag| {
            let state = match &lag.state {
                State::Enabled => String::new(),
                other => format!("{} ({}), ", wire_name(&other.kind()), other.reason().unwrap_or_default()),
            };
            let behind = match (lag.behind, &lag.state) {
                (0, _) => "caught up".to_string(),
                (1, State::Enabled) => "1 event behind, which it receives from its cursor next time".to_string(),
                (n, State::Enabled) => format!("{n} events behind, which it receives from its cursor next time"),
                (1, _) => "1 event behind".to_string(),
                (n, _) => format!("{n} events behind"),
            };
            let restarts = match lag.restarts {
                0 => String::new(),
                1 => "; restarted once meanwhile, dropping or replaying an event".to_string(),
                n => format!("; restarted {n} times meanwhile, each dropping or replaying an event"),
            };
            format!("listener {}: {state}{behind}{restarts}", lag.name)
        })
        .collect()
}

/// A run that failed a view or was stopped exits with 1.
fn outcome(summary: &RunSummary) -> Status {
    if summary.failures.is_empty() && !summary.termination.is_stopped() { Status::Success } else { Status::Failed }
}

/// `trellis materialize` with a server: the run is accepted, and with
/// `--wait` followed through the server's event stream to its end, then
/// summarized from its record as an embedded run is.
pub(super) async fn materialize_remote(args: &MaterializeArgs, server: &Server) -> anyhow::Result<Status> {
    check_mode(args)?;
    let query =
        wire::MaterializeQuery { mode: Some(wire_name(&args.mode)), full_refresh: args.full_refresh.then_some(true) };
    let accepted: wire::Accepted = server.post(&remote::path("materialize", &args.views), &query).await?;
    if !args.wait {
        if args.project.json {
            println!("{}", serde_json::to_string_pretty(&accepted)?);
        } else {
            let queued = match accepted.queued_behind {
                0 => String::new(),
                n => format!(" (queued behind {n} run{})", if n == 1 { "" } else { "s" }),
            };
            let run = &accepted.run;
            println!("run {run} accepted{queued}");
            // Where to look next, with the server named as it was here.
            let server = server.base();
            println!(
                "see how it stands with `trellis --server {server} runs {run}`; add --wait to follow a run to its end"
            );
        }
        return Ok(Status::Success);
    }
    let bar = progress_bar();
    bar.set_prefix(format!("run {}", accepted.run));
    let mut progress = RemoteProgress::default();
    let reporter = bar.clone();
    let followed = server
        .follow_run(&accepted.run, Some(accepted.events_from), |event| {
            progress.apply(event.view, event.current);
            reporter.set_length(progress.states.len() as u64);
            reporter.set_position(progress.settled as u64);
            reporter.set_message(format!("({} running)", progress.running));
        })
        .await;
    bar.finish_and_clear();
    followed?;
    let summary = summary_of(catalog::run_detail(server, &accepted.run).await?);
    print_summary(&summary, args.project.json, args.verbose)?;
    Ok(outcome(&summary))
}

/// A remote run's progress from its events: each view's latest state, and
/// counts kept as they change (a run may log millions of events).
#[derive(Default)]
struct RemoteProgress {
    states: std::collections::HashMap<String, ViewState>,
    /// Views in a state where the run is done with them, as the embedded
    /// scheduler counts them.
    settled: usize,
    running: usize,
}

impl RemoteProgress {
    fn apply(&mut self, view: String, current: ViewState) {
        let settled =
            |state: ViewState| matches!(state, ViewState::Materialized | ViewState::NoData | ViewState::Failed);
        let running = |state: ViewState| state == ViewState::Transforming;
        if let Some(previous) = self.states.insert(view, current) {
            self.settled -= usize::from(settled(previous));
            self.running -= usize::from(running(previous));
        }
        self.settled += usize::from(settled(current));
        self.running += usize::from(running(current));
    }
}

/// The summary an embedded run returns, from the server's record of a run.
fn summary_of(detail: wire::RunDetail) -> RunSummary {
    let reasons = detail.flows.iter().filter_map(|flow| Some((flow.view.clone(), flow.reason.clone()?))).collect();
    RunSummary {
        reasons,
        id: detail.run.id,
        flows: catalog::flows_of(detail.flows),
        idle: detail.idle,
        failures: detail.failures.into_iter().map(|failed| (failed.view, failed.error)).collect(),
        incomplete: detail.incomplete,
        with_errors: detail.with_errors,
        no_data: detail.run.no_data,
        // Followed to its end: a run with no termination recorded was interrupted.
        termination: detail.run.termination.unwrap_or(Termination::Interrupted),
    }
}

/// A run's summary. In text, the views with trouble (failed, canceled,
/// incomplete, with errors) and the counts per flow status; `--verbose` lists every
/// view visited first: a year of a small shop is thousands of lines that
/// bury what needs attention. JSON always has every flow.
fn print_summary(summary: &RunSummary, json: bool, verbose: bool) -> anyhow::Result<()> {
    if json {
        let value = serde_json::json!({
            "run": summary.id,
            "termination": summary.termination,
            "flows": summary.flows.iter().map(|(view, status)| serde_json::json!({ "view": view, "status": status })).collect::<Vec<_>>(),
            "idle": summary.idle,
            "incomplete": summary.incomplete,
            "with_errors": summary.with_errors,
            "failures": summary.failures.iter().map(|(view, error)| serde_json::json!({ "view": view, "error": error })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        // Failed views get their own lines below, with why; canceled ones
        // are the rest of what was transformed with trouble.
        let shown = |status: &FlowStatus| verbose || *status == FlowStatus::Canceled;
        for (view, status) in summary.flows.iter().filter(|(_, status)| shown(status)) {
            println!("{:<22} {view}", wire_name(status));
        }
        for view in &summary.incomplete {
            println!("incomplete (a view below it has no data): {view}");
        }
        let reason = |view: &str| summary.reasons.iter().find(|(v, _)| v == view).map(|(_, reason)| reason.as_str());
        for view in &summary.with_errors {
            println!("with errors ({}): {view}", reason(view).unwrap_or("a dependency failed"));
        }
        for (view, _) in summary.flows.iter().filter(|(_, status)| *status == FlowStatus::Skipped) {
            if let Some(reason) = reason(view) {
                println!("skipped ({reason}): {view}");
            }
        }
        // External data looked for and not found: the first few, each with
        // the file that was missing (a mistyped parameter value ends here).
        let missing: Vec<&(String, String)> =
            summary.reasons.iter().filter(|(_, reason)| reason.starts_with("no done flag")).collect();
        for (view, reason) in missing.iter().take(MISSING_SHOWN) {
            println!("no data ({reason}): {view}");
        }
        if missing.len() > MISSING_SHOWN {
            println!("no data: {} more without their done flag", missing.len() - MISSING_SHOWN);
        }
        for (view, error) in &summary.failures {
            eprintln!("failed: {view}: {error}");
        }
        println!("{}", counts_line(summary));
        if summary.termination.is_stopped() {
            println!("run {} {}", summary.id, summary.termination);
        }
    }
    Ok(())
}

/// How many views found without their done flag a run's summary names.
const MISSING_SHOWN: usize = 5;

/// `8 views: 6 successful, 2 idle`: a run's views counted by flow status,
/// in the words every command and the API use for them.
pub(super) fn counts_line(summary: &RunSummary) -> String {
    flow_counts(summary.flows.iter().map(|(_, status)| *status), summary.idle, summary.no_data)
}

/// The counts line of a run's flows, its views found up to date and how
/// many of the SUCCESSFUL ones it found without data (which a reader would
/// not otherwise tell from those it materialized).
pub(super) fn flow_counts(flows: impl Iterator<Item = FlowStatus>, idle: usize, no_data: usize) -> String {
    let mut counts = std::collections::BTreeMap::<FlowStatus, usize>::new();
    for status in flows {
        *counts.entry(status).or_default() += 1;
    }
    counts.insert(FlowStatus::Idle, idle);
    let views: usize = counts.values().sum();
    let counts: Vec<String> = [
        FlowStatus::Successful,
        FlowStatus::Idle,
        FlowStatus::TerminatedWithError,
        FlowStatus::Skipped,
        FlowStatus::Canceled,
        FlowStatus::Excluded,
        FlowStatus::Running,
        FlowStatus::Starting,
        FlowStatus::Queued,
    ]
    .into_iter()
    .filter_map(|status| {
        let n = *counts.get(&status).filter(|n| **n > 0)?;
        let without_data = match (status, no_data) {
            (FlowStatus::Successful, 1..) => format!(" ({no_data} without data)"),
            _ => String::new(),
        };
        Some(format!("{n} {}{without_data}", wire_name(&status).to_lowercase()))
    })
    .collect();
    format!("{}: {}", crate::model::plural(views, "view", "views"), counts.join(", "))
}

pub(super) async fn invalidate(args: &InvalidateArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    // Invalidating needs no plugins: only records change.
    let mut scheduler = Scheduler::open_records(catalog).context("opening the scheduler")?;
    let Invalidation { invalidated, refused } = scheduler.invalidate(&args.views, args.deps, |_| false)?;
    Ok(print_invalidation(&invalidated, &refused))
}

pub(super) async fn invalidate_remote(args: &InvalidateArgs, server: &Server) -> anyhow::Result<Status> {
    let query = wire::InvalidateQuery { dependencies: Some(args.deps) };
    let reply = server.exchange(Method::POST, &remote::path("invalidate", &args.views), &query).await?;
    // A 409 says that some views were in flight, with what was done.
    let done: wire::Invalidated = match reply.status {
        StatusCode::CONFLICT => reply.decode().map_err(|_| reply.error())?,
        _ => reply.json()?,
    };
    let refused: Vec<(String, String)> =
        done.refused.into_iter().map(|refusal| (refusal.view, refusal.reason)).collect();
    Ok(print_invalidation(&done.invalidated, &refused))
}

fn print_invalidation(invalidated: &[String], refused: &[(String, String)]) -> Status {
    print_done("invalidated", invalidated, refused)
}

/// What was done to each view (`invalidated v`), then the views refused
/// (in flight), which exits with 1.
pub(super) fn print_done(done: &str, views: &[String], refused: &[(String, String)]) -> Status {
    for view in views {
        println!("{done} {view}");
    }
    for (view, reason) in refused {
        eprintln!("refused {view}: {reason}");
    }
    if refused.is_empty() { Status::Success } else { Status::Failed }
}

pub(super) async fn plan(args: &PlanArgs, runtime: &Runtime) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let plugins = std::sync::Arc::new(Plugins::load(runtime, &catalog).await);
    let mut scheduler = Scheduler::open(catalog.clone(), plugins).await.context("opening the scheduler")?;
    let plan = scheduler.plan_in_mode(&args.views, args.mode)?;
    let lines: Vec<(String, String)> = plan.into_iter().map(|(view, verdict)| (view, verdict.to_string())).collect();
    print_plan(&lines, args.project.json)
}

pub(super) async fn plan_remote(args: &PlanArgs, server: &Server) -> anyhow::Result<Status> {
    // A server plans DEFAULT runs only: its answer would be another mode's.
    if args.mode != Mode::Default {
        anyhow::bail!(
            "plan --mode {} is answered without a server only (a server plans DEFAULT runs); leave out --server",
            wire_name(&args.mode)
        );
    }
    let plan: Vec<wire::PlanLine> = server.get(&remote::path("plan", &args.views), remote::NO_QUERY).await?;
    let lines: Vec<(String, String)> = plan.into_iter().map(|line| (line.view, line.plan)).collect();
    print_plan(&lines, args.project.json)
}

fn print_plan(lines: &[(String, String)], json: bool) -> anyhow::Result<Status> {
    if json {
        let value: Vec<_> =
            lines.iter().map(|(view, line)| serde_json::json!({ "view": view, "plan": line })).collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for (view, line) in lines {
            println!("{view}: {line}");
        }
    }
    Ok(Status::Success)
}

/// `trellis transformations`: what a server is transforming now, the
/// permits in use and the memory reserved from its budget. Only a server
/// has anything to show: an embedded materialize shows its progress itself.
pub(super) async fn transformations(args: &TransformationsArgs, server: Option<&Server>) -> anyhow::Result<Status> {
    let Some(server) = server else {
        anyhow::bail!(
            "`trellis transformations` shows what a server runs: name one with --server URL or TRELLIS_SERVER"
        );
    };
    let now: wire::Transformations = server.get("transformations", remote::NO_QUERY).await?;
    if args.project.json {
        println!("{}", serde_json::to_string_pretty(&now)?);
        return Ok(Status::Success);
    }
    if now.running.is_empty() {
        println!("no transformations running");
    }
    let now_ms = chrono::Utc::now().timestamp_millis();
    for running in &now.running {
        let seconds = (now_ms - running.since).max(0) as u64 / 1000;
        let elapsed = humantime::format_duration(std::time::Duration::from_secs(seconds));
        match &running.progress {
            Some(progress) => println!("{}  {}  running for {elapsed}: {progress}", running.view, running.plugin),
            None => println!("{}  {}  running for {elapsed}", running.view, running.plugin),
        }
    }
    let permits: Vec<String> = now
        .permits
        .iter()
        .map(|p| match p.plugin.as_str() {
            "*" => format!("{} of {} overall", p.in_use, p.limit),
            plugin => format!("{plugin} {} of {}", p.in_use, p.limit),
        })
        .collect();
    let memory = &now.memory;
    let waiting = match memory.waiting {
        0 => String::new(),
        n => format!(", {n} call{} waiting for memory", if n == 1 { "" } else { "s" }),
    };
    println!(
        "memory reserved: {} of a budget of {} MiB (peak {} MiB){waiting}",
        memory.reserved_bytes >> 20,
        memory.budget_bytes >> 20,
        memory.peak_reserved_bytes >> 20
    );
    if !permits.is_empty() {
        println!("permits in use: {}", permits.join(", "));
    }
    Ok(Status::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lag(name: &str, plugin: bool, state: State, behind: u64, restarts: u32) -> Lag {
        Lag { name: name.into(), plugin: plugin.then(|| "p".to_string()), state, behind, restarts }
    }

    #[test]
    fn lag_lines_say_caught_up_only_of_a_listener_with_nothing_left() {
        let lags = [
            lag("monitor", false, State::Enabled, 0, 0),
            lag("stats", true, State::Enabled, 0, 0),
            lag("slow", true, State::Enabled, 554, 1),
            lag("one", true, State::Enabled, 1, 2),
            lag("off", true, State::Disabled("failed again after 3 restarts (max_retries = 3)".into()), 12, 3),
            lag("gone", true, State::Unavailable("start failed: refusing to start (Fatal)".into()), 30, 0),
        ];
        expect_test::expect![[r#"
            listener stats: caught up
            listener slow: 554 events behind, which it receives from its cursor next time; restarted once meanwhile, dropping or replaying an event
            listener one: 1 event behind, which it receives from its cursor next time; restarted 2 times meanwhile, each dropping or replaying an event
            listener off: disabled (failed again after 3 restarts (max_retries = 3)), 12 events behind; restarted 3 times meanwhile, each dropping or replaying an event
            listener gone: unavailable (start failed: refusing to start (Fatal)), 30 events behind
        "#]]
        .assert_eq(&(lag_lines(&lags).join("\n") + "\n"));
    }
}
