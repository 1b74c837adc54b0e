//! `trellis materialize`, `trellis invalidate` and `trellis plan`: the
//! scheduler, embedded, without a server.

use anyhow::Context;
use clap::Args;

use super::Status;
use super::catalog::{ProjectArgs, load};
use crate::listeners::Listeners;
use crate::model::{FlowStatus, wire_name};
use crate::runtime::Runtime;
use crate::scheduler::{Mode, Scheduler};

#[derive(Debug, Args)]
pub(super) struct MaterializeArgs {
    #[command(flatten)]
    project: ProjectArgs,
    /// The views to materialize, as a view pattern
    #[arg(long, short = 'v', value_name = "PATTERN")]
    views: String,
    /// DEFAULT, RESET_TRANSFORMATION_CHECKSUMS, RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS, TRANSFORM_ONLY or SET_ONLY
    #[arg(long, default_value = "DEFAULT", value_parser = str::parse::<Mode>)]
    mode: Mode,
}

#[derive(Debug, Args)]
pub(super) struct InvalidateArgs {
    #[command(flatten)]
    project: ProjectArgs,
    #[arg(long, short = 'v', value_name = "PATTERN")]
    views: String,
    /// Also invalidate what they depend on
    #[arg(long, short = 'd')]
    deps: bool,
}

#[derive(Debug, Args)]
pub(super) struct PlanArgs {
    #[command(flatten)]
    project: ProjectArgs,
    #[arg(long, short = 'v', value_name = "PATTERN")]
    views: String,
}

pub(super) async fn materialize(args: &MaterializeArgs, runtime: &Runtime) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let mut scheduler = Scheduler::open(&catalog, runtime).await.context("opening the scheduler")?;
    // A progress bar on a terminal; nothing when stderr is a file or pipe.
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {prefix} [{elapsed_precise}] {bar:40} {pos}/{len} views {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut listeners = Listeners::start(&catalog, runtime, scheduler.metastore()).await?;
    let listener_lag = listeners.lag_probe();
    let reporter = bar.clone();
    scheduler.on_progress(move |progress| {
        reporter.set_length(progress.known as u64);
        reporter.set_position(progress.settled as u64);
        let lag = match listener_lag() {
            0 => String::new(),
            behind => format!(", listeners {behind} events behind"),
        };
        reporter.set_message(format!("({} running{lag})", progress.running));
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
    let summary = scheduler.materialize_until(&args.views, args.mode, stop).await;
    bar.finish_and_clear();
    let summary = match summary {
        Ok(summary) => summary,
        Err(e) => {
            listeners.shutdown().await;
            return Err(e.into());
        }
    };
    print_summary(&summary, args.project.json)?;
    // Then listeners get a moment to catch up; what they miss now they
    // receive from their cursor next time. A stopped run does not wait.
    if !summary.stopped {
        let behind = listeners.drain(catalog.settings.events.drain).await?;
        if !behind.is_empty() {
            eprintln!("listeners still behind, to continue next time: {}", behind.join(", "));
        }
    }
    listeners.shutdown().await;
    Ok(if summary.failures.is_empty() && !summary.stopped { Status::Success } else { Status::Failed })
}

fn print_summary(summary: &crate::scheduler::RunSummary, json: bool) -> anyhow::Result<()> {
    if json {
        let value = serde_json::json!({
            "run": summary.id,
            "termination": summary.termination,
            "flows": summary.flows.iter().map(|(view, status)| serde_json::json!({ "view": view, "status": status })).collect::<Vec<_>>(),
            "idle": summary.idle,
            "failures": summary.failures.iter().map(|(view, error)| serde_json::json!({ "view": view, "error": error })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for (view, status) in &summary.flows {
            println!("{:<22} {view}", wire_name(status));
        }
        for view in &summary.incomplete {
            println!("incomplete (a dependency has no data): {view}");
        }
        for view in &summary.with_errors {
            println!("with errors (a dependency failed): {view}");
        }
        for (view, error) in &summary.failures {
            eprintln!("failed: {view}: {error}");
        }
        let counts: Vec<String> = [
            FlowStatus::Successful,
            FlowStatus::Idle,
            FlowStatus::TerminatedWithError,
            FlowStatus::Skipped,
            FlowStatus::Canceled,
        ]
        .into_iter()
        .map(|status| (status, summary.count(status)))
        .filter(|(_, n)| *n > 0)
        .map(|(status, n)| format!("{n} {}", wire_name(&status).to_lowercase()))
        .collect();
        let n = summary.views();
        println!("{n} view{}: {}", if n == 1 { "" } else { "s" }, counts.join(", "));
        if summary.stopped {
            println!("run {} {}", summary.id, summary.termination);
        }
    }
    Ok(())
}

pub(super) async fn invalidate(args: &InvalidateArgs, runtime: &Runtime) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let mut scheduler = Scheduler::open(&catalog, runtime).await.context("opening the scheduler")?;
    let crate::scheduler::run::Invalidation { invalidated: done, refused } =
        scheduler.invalidate(&args.views, args.deps)?;
    for id in &done {
        println!("invalidated {}", scheduler.lattice().url_path(*id));
    }
    for (id, reason) in &refused {
        eprintln!("refused {}: {reason}", scheduler.lattice().url_path(*id));
    }
    Ok(if refused.is_empty() { Status::Success } else { Status::Failed })
}

pub(super) async fn plan(args: &PlanArgs, runtime: &Runtime) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let mut scheduler = Scheduler::open(&catalog, runtime).await.context("opening the scheduler")?;
    let plan = scheduler.plan(&args.views)?;
    if args.project.json {
        let value: Vec<_> = plan
            .iter()
            .map(|(id, line)| serde_json::json!({ "view": scheduler.lattice().url_path(*id), "plan": line }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for (id, line) in &plan {
            println!("{}: {line}", scheduler.lattice().url_path(*id));
        }
    }
    Ok(Status::Success)
}
