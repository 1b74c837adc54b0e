//! `trellis runs [ID]`: the runs recorded, or one run's flows, from the
//! metastore here or from a server; and the lines a run's counts print as.

use clap::Args;

use super::Status;
use super::project::{ProjectArgs, load};
use super::remote::{self, Server};
use crate::api::wire;
use crate::metastore::{FlowRecord, Metastore, RunRecord};
use crate::model::{Counters, FlowStatus, RunStatus, wire_name};

#[derive(Debug, Args)]
pub(super) struct RunsArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// A run's id, to show its views' flow statuses
    id: Option<String>,
    /// With a run's id: only its views with this flow status (SUCCESSFUL, TERMINATED_WITH_ERROR,
    /// SKIPPED, CANCELED, EXCLUDED, RUNNING, STARTING, QUEUED)
    #[arg(long, short = 's', value_name = "STATUS", value_parser = flow_status, requires = "id")]
    status: Option<FlowStatus>,
}

fn flow_status(text: &str) -> Result<FlowStatus, String> {
    crate::model::from_wire_name(&text.to_uppercase()).ok_or_else(|| {
        format!(
            "`{text}` is not a flow status (SUCCESSFUL, TERMINATED_WITH_ERROR, SKIPPED, CANCELED, EXCLUDED, RUNNING, STARTING, QUEUED)"
        )
    })
}

/// `trellis runs [ID]`: the runs recorded in the metastore, or one run's
/// flow statuses (views that were only found up to date are counted, not
/// listed).
pub(super) fn runs(args: &RunsArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    if !catalog.settings.metastore.exists() {
        println!("no runs yet");
        return Ok(Status::Success);
    }
    let store = Metastore::open(&catalog.settings.metastore)?;
    match &args.id {
        None => {
            let runs: Vec<(RunRecord, usize)> = store
                .runs()?
                .into_iter()
                .map(|run| {
                    let transformed = run.attempts.len();
                    (run, transformed)
                })
                .collect();
            print_runs(&runs, args.project.json)
        }
        Some(id) => {
            let run = store.run(id)?.ok_or_else(|| anyhow::anyhow!("no run `{id}` (see `trellis runs`)"))?;
            if args.project.json {
                // The metastore opened here: no process is running it, so
                // a run without its end was interrupted.
                let status = if run.termination.is_some() { RunStatus::Finished } else { RunStatus::Interrupted };
                return print_detail(crate::api::run_detail(&store, run, status, Vec::new())?, args);
            }
            print_run(&run, &store.flow_records(id)?, args)
        }
    }
}

/// `trellis runs [ID]` with a server.
pub(super) async fn runs_remote(args: &RunsArgs, server: &Server) -> anyhow::Result<Status> {
    match &args.id {
        None => {
            let listed: Vec<wire::Run> = server.get("runs", remote::NO_QUERY).await?;
            let runs: Vec<(RunRecord, usize)> = listed
                .into_iter()
                .map(|run| {
                    let transformed = run.transformed;
                    (run_record(run), transformed)
                })
                .collect();
            print_runs(&runs, args.project.json)
        }
        Some(id) => {
            let detail = run_detail(server, id).await?;
            if args.project.json {
                return print_detail(detail, args);
            }
            let mut run = run_record(detail.run);
            run.attempts = detail.flows.iter().filter_map(|f| Some((f.view.clone(), f.attempts?))).collect();
            print_run(&run, &flow_records_of(detail.flows), args)
        }
    }
}

pub(super) async fn run_detail(server: &Server, id: &str) -> anyhow::Result<wire::RunDetail> {
    server.get(&remote::path("runs", id), remote::NO_QUERY).await
}

/// A run as the metastore records it, from the server's account of it.
fn run_record(run: wire::Run) -> RunRecord {
    RunRecord {
        id: run.id,
        pattern: run.pattern,
        mode: run.mode,
        started: run.started,
        finished: run.finished,
        termination: run.termination,
        idle: run.idle,
        full_refresh: run.full_refresh,
        attempts: Default::default(),
        action: run.action,
        no_data: run.no_data,
        flow_counts: run.flow_counts,
    }
}

/// A run's flows as the printing functions take them.
pub(super) fn flows_of(flows: Vec<wire::Flow>) -> Vec<(String, FlowStatus)> {
    flows.into_iter().map(|flow| (flow.view, flow.status)).collect()
}

/// A run's flows with what it recorded of each, from the server's account.
fn flow_records_of(flows: Vec<wire::Flow>) -> Vec<(String, FlowRecord)> {
    flows
        .into_iter()
        .map(|flow| {
            let record =
                FlowRecord { status: flow.status, error: flow.error, counters: flow.counters, reason: flow.reason };
            (flow.view, record)
        })
        .collect()
}

/// Counters as `  [name=value ...]` after a line, or nothing.
pub(super) fn counters_text(counters: Option<&Counters>) -> String {
    match counters {
        Some(counters) if !counters.is_empty() => {
            let pairs: Vec<String> = counters.iter().map(|(name, value)| format!("{name}={value}")).collect();
            format!("  [{}]", pairs.join(" "))
        }
        _ => String::new(),
    }
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default()
}

/// How a run ended, or that it has not (yet).
fn termination_text(run: &RunRecord) -> String {
    run.termination.as_ref().map_or_else(|| "running or interrupted".to_string(), ToString::to_string)
}

/// A run as JSON: its record, with how it ended typed and its times as
/// the API gives them.
fn run_json(run: &RunRecord) -> anyhow::Result<serde_json::Value> {
    let mut value = serde_json::to_value(run)?;
    // The metastore keeps the variant; JSON shows the prose, as the API does.
    value["termination"] = serde_json::to_value(&run.termination)?;
    if let Some(termination) = &run.termination {
        value["ended"] = serde_json::to_value(wire::Ended::from(termination))?;
    }
    value["started_at"] = wire::millis_text(run.started).into();
    value["finished_at"] = run.finished.map(wire::millis_text).into();
    value["duration_ms"] = run.duration_ms().into();
    Ok(value)
}

/// How long a run took, or `-` while it has not ended.
fn run_duration(run: &RunRecord) -> String {
    run.duration_ms().map_or_else(|| "-".to_string(), crate::model::duration)
}

/// Runs, each with how many views it transformed (a server lists that
/// count rather than each view's attempts).
fn print_runs(runs: &[(RunRecord, usize)], json: bool) -> anyhow::Result<Status> {
    if json {
        // Attempts are the run's detail (`runs ID`), as the server lists runs.
        let runs = runs
            .iter()
            .map(|(run, transformed)| {
                let mut value = run_json(&RunRecord { attempts: Default::default(), ..run.clone() })?;
                value["transformed"] = (*transformed).into();
                Ok(value)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else {
        for (run, transformed) in runs {
            let termination = termination_text(run);
            let counts = listed_counts(run, *transformed);
            println!(
                "{}  {}  {:>10}  {:<8} {}  {termination} ({counts})",
                run.id,
                time(run.started),
                run_duration(run),
                run.mode,
                run.pattern
            );
        }
    }
    Ok(Status::Success)
}

fn print_run(run: &RunRecord, flows: &[(String, FlowRecord)], args: &RunsArgs) -> anyhow::Result<Status> {
    let listed = flows.iter().filter(|(_, flow)| args.status.is_none_or(|wanted| flow.status == wanted));
    println!("run {} ({}, {}): {}", run.id, run.mode, run.pattern, termination_text(run));
    let finished = run.finished.map_or_else(|| "not finished".to_string(), |ms| format!("finished {}", time(ms)));
    println!("  started {}, {finished}, took {}", time(run.started), run_duration(run));
    println!("  {}", flow_counts(flows.iter().map(|(_, flow)| flow.status), run.idle, run.no_data));
    // What happened to each view in this run, as the run recorded it.
    for (view, flow) in listed {
        // Attempts are worth a word only when there was more than one.
        let attempts = match run.attempts.get(view) {
            Some(&attempts) if attempts > 1 => format!("  ({attempts} attempts)"),
            _ => String::new(),
        };
        let counters = counters_text(flow.counters.as_ref());
        println!("  {:<22} {view}{attempts}{counters}", crate::model::wire_name(&flow.status));
        if let Some(error) = &flow.error {
            println!("    error: {error}");
        }
        if let Some(reason) = &flow.reason {
            println!("    {reason}");
        }
    }
    Ok(Status::Success)
}

/// A run's detail as JSON, as the API gives it (`GET /runs/{id}`), its
/// flows those of `--status` if given.
fn print_detail(mut detail: wire::RunDetail, args: &RunsArgs) -> anyhow::Result<Status> {
    detail.flows.retain(|flow| args.status.is_none_or(|wanted| flow.status == wanted));
    println!("{}", serde_json::to_string_pretty(&detail)?);
    Ok(Status::Success)
}

/// A listed run's counts, in the words of its own summary (`3 views: 3
/// successful`); a record from before those were kept has its count of
/// views transformed and found up to date.
fn listed_counts(run: &RunRecord, transformed: usize) -> String {
    if run.flow_counts.is_empty() {
        return format!("{transformed} transformed, {} up to date", run.idle);
    }
    let flows = run.flow_counts.iter().filter_map(|(status, &n)| {
        let status: FlowStatus = crate::model::from_wire_name(status)?;
        (status != FlowStatus::Idle).then(|| std::iter::repeat_n(status, n))
    });
    flow_counts(flows.flatten(), run.idle, run.no_data)
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
