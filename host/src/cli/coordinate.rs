//! `trellis coordinate`: the project's coordinators driven here, once, at
//! a time given or now: the actions due are created (all the missed ones
//! after a pause: catch-up), their inputs looked for, and those ready run
//! one after another until nothing more can go now. `trellis serve` does
//! the same for as long as it runs; this is for a local run, a cron job,
//! the demo and the scenarios (which set the time with `--now`).

use std::collections::VecDeque;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Args;

use super::Status;
use super::coordinators::{action_line, coordinator_line};
use super::project::{ProjectArgs, load_to_run};
use crate::api::wire;
use crate::clock::{Clock, parse_time};
use crate::metastore::ActionRecord;
use crate::model::{ActionState, Termination};
use crate::runtime::Runtime;
use crate::scheduler::coordinate::action_name;
use crate::scheduler::{Coordination, CoordinatorStatus, Scheduler, Submission};
use crate::session::Session;

#[derive(Debug, Args)]
pub(super) struct CoordinateArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// Act as if it were this time (RFC 3339 or ISO 8601, e.g. 2015-05-03T07:00:00Z or 2015-05-03T07:00Z, or a date)
    /// [default: $TRELLIS_NOW, else the clock]
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    now: Option<DateTime<Utc>>,
}

pub(super) async fn coordinate(args: &CoordinateArgs, runtime: &Runtime) -> anyhow::Result<Status> {
    let catalog = load_to_run(&args.project.project, "coordinate")?;
    if catalog.coordinators.is_empty() {
        anyhow::bail!(
            "{} declares no coordinator (no [[coordinator]] table); there is nothing to coordinate",
            args.project.project.join(crate::catalog::PROJECT_FILE).display()
        );
    }
    // A time given stands still: everything due by then is done, nothing after.
    let clock = match args.now {
        Some(now) => Clock::manual(now),
        None => Clock::from_environment().map_err(anyhow::Error::msg)?,
    };
    let mut session = Session::open(catalog.clone(), runtime).await?;
    let outcome = drive(&mut session.scheduler, clock).await;
    let lags = session.close(catalog.settings.events.drain).await?;
    for line in super::schedule::lag_lines(&lags) {
        eprintln!("{line}");
    }
    outcome
}

/// Runs the coordinators until nothing more is due or ready, printing a
/// line per run and then where each coordinator stands.
pub(super) async fn drive(scheduler: &mut Scheduler, clock: Clock) -> anyhow::Result<Status> {
    let mut coordination = Coordination::open(scheduler, clock)?;
    for warning in coordination.warnings() {
        eprintln!("{warning}");
    }
    let mut queue: VecDeque<Submission> = coordination.resumed(scheduler)?.into();
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("installing the Ctrl-C handler")?;
    let mut status = Status::Success;
    queue.extend(coordination.check_inputs(scheduler, true)?);
    while let Some(submission) = queue.pop_front() {
        let id = submission.record.id.clone();
        let action = submission.record.action.clone();
        coordination.run_started(scheduler, &id)?;
        let run = scheduler.begin(submission.record, submission.mode, &submission.addressed);
        let summary = scheduler
            .drive(run, async {
                interrupt.recv().await;
            })
            .await;
        let termination = match &summary {
            Ok(summary) => summary.termination.clone(),
            Err(e) => Termination::Failed(e.to_string()),
        };
        let name = action.map_or_else(|| id.clone(), |(coordinator, nominal)| action_name(&coordinator, nominal));
        match &summary {
            Ok(summary) => println!("{name}: {} ({} views)", summary.termination, summary.views()),
            Err(e) => println!("{name}: {e}"),
        }
        if termination != Termination::Completed {
            status = Status::Failed;
        }
        let stopped = termination.is_stopped();
        coordination.run_ended(scheduler, &id, termination)?;
        if stopped {
            break;
        }
        queue.extend(coordination.tick(scheduler)?);
    }
    scheduler.commit_deferred()?;
    for coordinator in coordination.statuses() {
        let actions = coordination.actions(scheduler, &coordinator.name, None)?;
        for line in standing(&coordinator, &actions) {
            println!("{line}");
        }
    }
    Ok(status)
}

/// Where a coordinator stands: its counts and next time, then each action
/// not SUCCEEDED with what it waits for or why it ended.
fn standing(coordinator: &CoordinatorStatus, actions: &[ActionRecord]) -> Vec<String> {
    let mut lines = vec![coordinator_line(&wire::Coordinator::from(coordinator))];
    for action in actions.iter().filter(|a| a.state != ActionState::Succeeded) {
        lines.push(format!("  {}", action_line(&wire::Action::from(action))));
    }
    lines
}
