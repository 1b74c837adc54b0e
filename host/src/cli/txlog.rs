//! `trellis txlog`: incremental views' transaction logs, shown and reset,
//! embedded or through a server.

use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};

use super::Status;
use super::project::{ProjectArgs, load};
use super::remote::{self, Server};
use crate::api::wire;
use crate::plugins::Plugins;
use crate::runtime::Runtime;
use crate::scheduler::Scheduler;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct TxLogArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    #[command(subcommand)]
    action: Option<TxLogAction>,
    /// A view pattern; without one, every view that has a log
    #[arg(value_name = "PATTERN")]
    pattern: Option<String>,
}

#[derive(Debug, Subcommand)]
enum TxLogAction {
    /// Clear the logs of a pattern's views (refused for views in flight):
    /// their next run reads everything, or with --source that source
    Reset {
        #[arg(value_name = "PATTERN")]
        /// A view pattern: the views whose logs are cleared
        pattern: String,
        /// Reset only this source (a dependency's name)
        #[arg(long, value_name = "NAME")]
        source: Option<String>,
    },
}

/// `runtime` starts the plugin engine; only an embedded listing needs it
/// (to say whether each view's plugin can merge).
pub(super) async fn run(
    args: &TxLogArgs,
    runtime: impl FnOnce() -> anyhow::Result<Runtime>,
    server: Option<Server>,
) -> anyhow::Result<Status> {
    match &args.action {
        None => {
            let views = remote::dispatch(
                server,
                async |server| match &args.pattern {
                    Some(pattern) => server.get(&remote::path("txlog", pattern), remote::NO_QUERY).await,
                    None => server.get("txlog", remote::NO_QUERY).await,
                },
                async || {
                    let catalog = load(&args.project.project)?;
                    let plugins = Arc::new(Plugins::load(&runtime()?, &catalog).await);
                    let mut scheduler = Scheduler::open(catalog, plugins).await.context("opening the scheduler")?;
                    let views = scheduler.txlog(args.pattern.as_deref())?;
                    Ok(views.into_iter().map(wire::TxLogView::from).collect::<Vec<_>>())
                },
            )
            .await?;
            print_logs(&views, args.project.json)
        }
        Some(TxLogAction::Reset { pattern, source }) => {
            let (reset, refused) = remote::dispatch(
                server,
                async |server| {
                    let query = wire::ResetTxLogQuery { source: source.clone() };
                    let reply = server.exchange(Method::POST, &remote::path("reset-txlog", pattern), &query).await?;
                    let done: wire::TxLogReset = match reply.status {
                        StatusCode::CONFLICT => reply.decode().map_err(|_| reply.error())?,
                        _ => reply.json()?,
                    };
                    Ok((done.reset, done.refused.into_iter().map(|refusal| (refusal.view, refusal.reason)).collect()))
                },
                async || {
                    let catalog = load(&args.project.project)?;
                    // A reset needs no plugins: only records change.
                    let mut scheduler = Scheduler::open_records(catalog).context("opening the scheduler")?;
                    let done = scheduler.reset_txlog(pattern, source.as_deref(), |_| false)?;
                    Ok((done.reset, done.refused))
                },
            )
            .await?;
            Ok(print_reset(&reset, &refused))
        }
    }
}

fn print_logs(views: &[wire::TxLogView], json: bool) -> anyhow::Result<Status> {
    if json {
        println!("{}", serde_json::to_string_pretty(views)?);
        return Ok(Status::Success);
    }
    if views.is_empty() {
        println!("no incremental views with a transaction log");
    }
    for view in views {
        let resets = match (view.reset_through, view.reset_sources.is_empty()) {
            (0, true) => String::new(),
            (0, false) => {
                format!(", sources reset: {}", view.reset_sources.keys().cloned().collect::<Vec<_>>().join(", "))
            }
            (through, _) => format!(", reset through generation {through}"),
        };
        let how = if view.incremental { "" } else { " (its plugin is not incremental: rebuilt whole each time)" };
        println!("{}: generation {}{resets}{how}", view.view, view.generation);
        for entry in &view.entries {
            println!(
                "  {} {}: {} {} at {}{}",
                entry.source,
                entry.path,
                entry.commit_type,
                entry.commit_id,
                entry.time,
                if entry.enabled { "" } else { " (reset)" }
            );
        }
    }
    Ok(Status::Success)
}

fn print_reset(reset: &[String], refused: &[(String, String)]) -> Status {
    super::schedule::print_done("reset the transaction log of", reset, refused)
}
