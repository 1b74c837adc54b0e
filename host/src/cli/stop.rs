//! `trellis stop ID`: stops an embedded run that another `trellis
//! materialize` process is running. sled lets one process open the
//! metastore, so a running materialize announces itself in a file next to
//! the metastore, and `stop` sends it SIGINT, which stops a run the way
//! Ctrl-C does: running transformations are canceled and keep their
//! previous data, the rest is skipped. With a server, `stop` asks it.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

use super::project::{ProjectArgs, load};
use super::remote::{self, Server};
use super::runs::run_detail;
use super::{Status, announce};
use crate::api::wire;
use crate::catalog::Catalog;
use crate::metastore::Metastore;
use crate::model::{StopEffect, Termination};

#[derive(Debug, Args)]
pub(super) struct StopArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// The run's id, as `trellis materialize` and `trellis runs` show it
    /// [default: the run in progress]
    id: Option<String>,
}

/// How long `stop` waits for the run to end once asked.
const WAIT: Duration = Duration::from_secs(60);

/// What a running materialize announces about itself.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ActiveRun {
    run: String,
}

const ACTIVE_RUN_SUFFIX: &str = ".active-run";

/// Announces runs of this process in the project's active-run file until
/// the returned guard is dropped.
pub(super) fn announce(catalog: &Catalog) -> (impl FnMut(&str) + Send + 'static, announce::Guard) {
    let file = announce::path(catalog, ACTIVE_RUN_SUFFIX);
    let guard = announce::Guard(file.clone());
    let announce = move |run: &str| {
        if let Err(e) = announce::write(&file, ActiveRun { run: run.to_string() }) {
            tracing::warn!("`trellis stop {run}` will not find this run: cannot write {}: {e}", file.display());
        }
    };
    (announce, guard)
}

pub(super) fn stop(args: &StopArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let dir = &args.project.project;
    // A server's runs are the server's to stop.
    if let Some(server) = announce::server(&catalog) {
        bail!("{}", announce::held_by_server(dir, &server, "stop"));
    }
    let active = announce::read::<ActiveRun>(&announce::path(&catalog, ACTIVE_RUN_SUFFIX));
    let Some(id) = args.id.clone().or(active.as_ref().map(|a| a.what.run.clone())) else {
        bail!("no run is in progress in {}; name one (see `trellis runs`)", dir.display());
    };
    let id = &id;
    if let Some(active) = active.filter(|active| active.what.run == *id) {
        // SAFETY: kill(2) with a pid checked above to be the run's process.
        if unsafe { libc::kill(active.pid as libc::pid_t, libc::SIGINT) } != 0 {
            bail!("cannot signal process {} running run {id}: {}", active.pid, std::io::Error::last_os_error());
        }
        println!("asked run {id} to stop (process {})", active.pid);
        let asked = Instant::now();
        while active.is_alive() {
            if asked.elapsed() > WAIT {
                bail!("run {id} (process {}) has not stopped after {} s", active.pid, WAIT.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        return Ok(stopped(id));
    }
    // Not running in another process: the metastore says what became of it.
    let store = Metastore::open(&catalog.settings.metastore)?;
    match store.run(id)? {
        None => bail!("no run `{id}` (see `trellis runs`)"),
        Some(run) => Ok(not_running(id, run.termination)),
    }
}

/// `trellis stop` with a server: it stops a running run (and waits for
/// its end, following its events) or takes a queued one off its queue.
pub(super) async fn stop_remote(args: &StopArgs, server: &Server) -> anyhow::Result<Status> {
    let id = match &args.id {
        Some(id) => id.clone(),
        None => {
            let health: wire::Health = server.get("health", remote::NO_QUERY).await?;
            let Some(run) = health.current_run else {
                bail!("no run is in progress on {}; name one (see `trellis runs`)", server.base());
            };
            run
        }
    };
    let reply = server
        .exchange(reqwest::Method::POST, &format!("{}/stop", remote::path("runs", &id)), remote::NO_QUERY)
        .await?;
    if reply.status == reqwest::StatusCode::CONFLICT {
        // It has already finished: its record says how.
        return Ok(not_running(&id, run_detail(server, &id).await?.run.termination));
    }
    let outcome: wire::StopOutcome = reply.json()?;
    if outcome.outcome == StopEffect::Dequeued {
        println!("run {id} was queued; it will not start");
        return Ok(Status::Success);
    }
    println!("asked run {id} to stop ({})", server.base());
    match tokio::time::timeout(WAIT, server.follow_run(&id, None, |_| {})).await {
        Ok(ended) => ended?,
        Err(_) => bail!("run {id} has not stopped after {} s", WAIT.as_secs()),
    };
    Ok(stopped(&id))
}

fn stopped(id: &str) -> Status {
    println!("run {id} stopped");
    Status::Success
}

fn not_running(id: &str, termination: Option<Termination>) -> Status {
    let ended = termination.unwrap_or(Termination::Interrupted);
    println!("run {id} is not running: {ended}");
    Status::Success
}
