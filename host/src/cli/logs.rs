//! `trellis logs VIEW`: what a view's last transformations logged and
//! printed, from the metastore or from a server.

use anyhow::Context;
use clap::Args;

use super::Status;
use super::project::{ProjectArgs, load};
use super::remote::{self, Server};
use crate::api::wire;
use crate::lattice::{Lattice, Resolution};
use crate::metastore::Metastore;

#[derive(Debug, Args)]
pub(super) struct LogsArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    #[command(flatten)]
    view: super::project::ViewArg,
}

pub(super) async fn run(args: &LogsArgs, server: Option<Server>) -> anyhow::Result<Status> {
    let log = remote::dispatch(
        server,
        async |server| server.get(&format!("{}/log", remote::path("views", args.view.get())), remote::NO_QUERY).await,
        async || here(args),
    )
    .await?;
    print_log(&log, args.project.json)
}

/// The view's log from the metastore here.
fn here(args: &LogsArgs) -> anyhow::Result<wire::ViewLog> {
    let catalog = load(&args.project.project)?;
    // The view's URL path as trellis writes it (values made canonical).
    let mut lattice = Lattice::new(catalog.clone());
    let storage = crate::storage::open(&catalog)?;
    let now = crate::clock::Clock::from_environment().map_err(anyhow::Error::msg)?.now();
    let resolution = Resolution { evaluation_time: now, exists: &crate::lattice::on_disk(&*storage) };
    let id = lattice.view(args.view.get(), &resolution)?;
    let url = lattice.url_path(id);
    let log = match catalog.settings.metastore.exists() {
        true => Metastore::open(&catalog.settings.metastore).context("opening the metastore")?.view_log(&url)?,
        false => Default::default(),
    };
    Ok(wire::ViewLog::of(url, log))
}

fn print_log(log: &wire::ViewLog, json: bool) -> anyhow::Result<Status> {
    if json {
        println!("{}", serde_json::to_string_pretty(log)?);
        return Ok(Status::Success);
    }
    if log.attempts.is_empty() {
        println!("{}: no transformation logged yet", log.view);
    }
    for attempt in &log.attempts {
        println!(
            "{} [run {}] attempt {} of {} at {}: {}",
            log.view, attempt.run, attempt.attempt, attempt.plugin, attempt.time, attempt.outcome
        );
        for (level, message) in &attempt.lines {
            println!("  {level:<5} {message}");
        }
        for (stream, text) in [("stdout", &attempt.stdout), ("stderr", &attempt.stderr)] {
            for line in text.lines() {
                println!("  {stream} {line}");
            }
        }
        if attempt.truncated_bytes > 0 {
            println!("  ({} bytes left out)", attempt.truncated_bytes);
        }
    }
    Ok(Status::Success)
}
