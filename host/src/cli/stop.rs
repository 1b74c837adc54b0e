//! `trellis stop ID`: stops an embedded run that another `trellis
//! materialize` process is running. sled lets one process open the
//! metastore, so a running materialize announces itself in a file next to
//! the metastore, and `stop` sends it SIGINT, which stops a run the way
//! Ctrl-C does: running transformations are canceled and keep their
//! previous data, the rest is skipped. With a server, `stop` asks it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;

use super::Status;
use super::catalog::{ProjectArgs, load, run_detail};
use super::remote::{self, Server};
use crate::api::wire;
use crate::catalog::Catalog;
use crate::metastore::Metastore;
use crate::model::{StopEffect, Termination};

#[derive(Debug, Args)]
pub(super) struct StopArgs {
    #[command(flatten)]
    project: ProjectArgs,
    /// The run's id, as `trellis materialize` and `trellis runs` show it
    /// [default: the run in progress]
    id: Option<String>,
}

/// How long `stop` waits for the run to end once asked.
const WAIT: Duration = Duration::from_secs(60);

/// What a running materialize writes about itself.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ActiveRun {
    run: String,
    pid: u32,
    /// When the process started (Linux: clock ticks after boot), so that a
    /// reused pid is never taken for the run's process.
    started: Option<u64>,
}

/// The file next to the metastore that names the run in progress.
fn active_run_file(catalog: &Catalog) -> PathBuf {
    let mut path = catalog.settings.metastore.clone().into_os_string();
    path.push(".active-run");
    PathBuf::from(path)
}

/// Announces runs of this process in the project's active-run file until
/// the returned guard is dropped.
pub(super) fn announce(catalog: &Catalog) -> (impl FnMut(&str) + Send + 'static, ActiveRunGuard) {
    let file = active_run_file(catalog);
    let guard = ActiveRunGuard(file.clone());
    let announce = move |run: &str| {
        let pid = std::process::id();
        let record = ActiveRun { run: run.to_string(), pid, started: process_start(pid) };
        let temporary = file.with_extension("active-run.tmp");
        let written = serde_json::to_vec(&record)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&temporary, bytes))
            .and_then(|()| std::fs::rename(&temporary, &file));
        if let Err(e) = written {
            tracing::warn!("`trellis stop {run}` will not find this run: cannot write {}: {e}", file.display());
        }
    };
    (announce, guard)
}

/// Removes the active-run file when the run is over.
pub(super) struct ActiveRunGuard(PathBuf);

impl Drop for ActiveRunGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(super) fn stop(args: &StopArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let active = read_active(&active_run_file(&catalog)).filter(alive);
    let Some(id) = args.id.clone().or(active.as_ref().map(|a| a.run.clone())) else {
        bail!("no run is in progress in {}; name one (see `trellis runs`)", args.project.project.display());
    };
    let id = &id;
    if let Some(active) = active.filter(|active| active.run == *id) {
        // SAFETY: kill(2) with a pid checked above to be the run's process.
        if unsafe { libc::kill(active.pid as libc::pid_t, libc::SIGINT) } != 0 {
            bail!("cannot signal process {} running run {id}: {}", active.pid, std::io::Error::last_os_error());
        }
        println!("asked run {id} to stop (process {})", active.pid);
        let asked = Instant::now();
        while alive(&active) {
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

fn read_active(file: &Path) -> Option<ActiveRun> {
    serde_json::from_slice(&std::fs::read(file).ok()?).ok()
}

/// Whether the announcing process still runs (a zombie does not).
fn alive(active: &ActiveRun) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", active.pid)) {
        Ok(stat) => {
            let (state, started) = stat_fields(&stat);
            state != Some('Z') && (active.started.is_none() || started == active.started)
        }
        // Without /proc, the pid alone.
        // SAFETY: signal 0 only checks that the process exists.
        Err(_) => !Path::new("/proc/self").exists() && unsafe { libc::kill(active.pid as libc::pid_t, 0) } == 0,
    }
}

/// A process's start time from /proc, in clock ticks after boot.
fn process_start(pid: u32) -> Option<u64> {
    stat_fields(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?).1
}

/// The state (field 3) and start time (field 22) of a /proc/PID/stat line;
/// the command name (field 2) may hold spaces and parentheses, so fields
/// are counted after its last `)`.
fn stat_fields(stat: &str) -> (Option<char>, Option<u64>) {
    let Some((_, rest)) = stat.rsplit_once(')') else { return (None, None) };
    let mut fields = rest.split_whitespace();
    let state = fields.next().and_then(|s| s.chars().next());
    let started = fields.nth(18).and_then(|s| s.parse().ok());
    (state, started)
}
