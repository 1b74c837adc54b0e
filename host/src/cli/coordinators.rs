//! `trellis coordinators`, `actions`, `suspend`, `resume`, `kill` and
//! `rerun`: the operator's view of the coordinators and its hands on them,
//! on the metastore here or, with `--server`, through a running server.
//! Both forms print the same lines from the API's wire types.

use std::sync::Arc;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;

use super::project::{ProjectArgs, load};
use super::remote::{self, Server};
use super::{Status, announce};
use crate::api::wire;
use crate::clock::{Clock, parse_time, parse_time_until};
use crate::model::{ActionState, Termination};
use crate::scheduler::action::ActionEffect;
use crate::scheduler::{Coordination, CoordinatorAnswer, Scheduler};

#[derive(Debug, Args)]
pub(super) struct CoordinatorsArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
}

#[derive(Debug, Args)]
pub(super) struct ActionsArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// The coordinator's name in trellis.toml
    name: String,
    /// Only the actions in this state (WAITING, READY, SUBMITTED, RUNNING, SUCCEEDED, FAILED, TIMEDOUT, SKIPPED, KILLED)
    #[arg(long, short = 's', value_name = "STATE", value_parser = |s: &str| s.parse::<ActionState>())]
    state: Option<ActionState>,
}

#[derive(Debug, Args)]
pub(super) struct NameArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// The coordinator's name in trellis.toml
    name: String,
}

#[derive(Debug, Args)]
pub(super) struct KillArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// The coordinator's name in trellis.toml
    name: String,
    /// The first nominal time to kill (as --now takes it: RFC 3339, ISO 8601 or a date) [default: the oldest open action]
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    from: Option<DateTime<Utc>>,
    /// The last nominal time to kill, included (a date: all of that day) [default: the newest open action]
    #[arg(long, value_name = "TIME", value_parser = parse_time_until)]
    to: Option<DateTime<Utc>>,
}

#[derive(Debug, Args)]
pub(super) struct RerunArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// The coordinator's name in trellis.toml
    name: String,
    /// The first nominal time to run again (as --now takes it: RFC 3339, ISO 8601 or a date)
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    from: DateTime<Utc>,
    /// The last nominal time to run again, included (a date: all of that day)
    #[arg(long, value_name = "TIME", value_parser = parse_time_until)]
    to: DateTime<Utc>,
}

/// What is asked, in either form: what the service is asked.
use crate::scheduler::CoordinatorOperation as Ask;

// Each command's operation, with its project.
pub(super) fn ask_statuses(args: &CoordinatorsArgs) -> (Ask, &ProjectArgs) {
    (Ask::Statuses, &args.project)
}

pub(super) fn ask_actions(args: &ActionsArgs) -> (Ask, &ProjectArgs) {
    (Ask::Actions { name: args.name.clone(), state: args.state }, &args.project)
}

pub(super) fn ask_suspend(args: &NameArgs) -> (Ask, &ProjectArgs) {
    (Ask::Suspend { name: args.name.clone() }, &args.project)
}

pub(super) fn ask_resume(args: &NameArgs) -> (Ask, &ProjectArgs) {
    (Ask::Resume { name: args.name.clone() }, &args.project)
}

pub(super) fn ask_kill(args: &KillArgs) -> (Ask, &ProjectArgs) {
    (Ask::Kill { name: args.name.clone(), from: args.from, to: args.to }, &args.project)
}

pub(super) fn ask_rerun(args: &RerunArgs) -> (Ask, &ProjectArgs) {
    (Ask::Rerun { name: args.name.clone(), from: Some(args.from), to: Some(args.to) }, &args.project)
}

/// What either form answers.
enum Answer {
    Coordinators(Vec<wire::Coordinator>),
    Actions(Vec<wire::Action>),
    /// A suspended or resumed coordinator, as it stands after.
    Coordinator(wire::Coordinator),
}

/// Through `server` when there is one, else here.
pub(super) async fn dispatch((ask, project): (Ask, &ProjectArgs), server: Option<Server>) -> anyhow::Result<Status> {
    let asked = ask.clone();
    remote::dispatch(server, async move |server| there(asked, project, server).await, async || here(ask, project)).await
}

/// On the metastore here: nothing runs (`trellis coordinate` or `serve`
/// carry out what a resume or rerun makes due).
fn here(ask: Ask, project: &ProjectArgs) -> anyhow::Result<Status> {
    let catalog = load(&project.project)?;
    if let Some(server) = announce::server(&catalog) {
        bail!("{}", announce::held_by_server(&project.project, &server, command_name(&ask)));
    }
    let mut scheduler = Scheduler::open_records(Arc::clone(&catalog))?;
    let clock = Clock::from_environment().map_err(anyhow::Error::msg)?;
    let mut coordination = Coordination::open(&mut scheduler, clock)?;
    let (answer, runs) = coordination.operate(&mut scheduler, ask.clone())?;
    // No process runs a killed action's run (it would hold the metastore):
    // it ends here, unstarted or cut off by the process that ended during it.
    for (run, effect) in runs {
        let Some(record) = scheduler.metastore().run(&run)? else { continue };
        if record.termination.is_none() {
            let termination = match effect {
                ActionEffect::Dequeue => Termination::Dequeued,
                _ => Termination::Interrupted,
            };
            scheduler.finish_unstarted(record, termination)?;
        }
    }
    let answer = match (&ask, answer) {
        (Ask::Suspend { .. } | Ask::Resume { .. }, CoordinatorAnswer::Statuses(statuses)) => {
            Answer::Coordinator(statuses.first().map(wire::Coordinator::from).context("the coordinator is gone")?)
        }
        (_, CoordinatorAnswer::Statuses(statuses)) => {
            Answer::Coordinators(statuses.iter().map(wire::Coordinator::from).collect())
        }
        (_, CoordinatorAnswer::Actions(actions)) => Answer::Actions(actions.iter().map(wire::Action::from).collect()),
    };
    print(&ask, &answer, project.json, false)
}

/// Through a running server, which carries out at once what becomes due.
async fn there(ask: Ask, project: &ProjectArgs, server: &Server) -> anyhow::Result<Status> {
    let at = |name: &str, what: &str| format!("{}/{what}", remote::path("coordinators", name));
    let range = |from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>| {
        let mut query = Vec::new();
        if let Some(from) = from {
            query.push(("from", wire::utc_text(from)));
        }
        if let Some(to) = to {
            query.push(("to", to.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)));
        }
        query
    };
    let answer = match &ask {
        Ask::Statuses => Answer::Coordinators(server.get("coordinators", remote::NO_QUERY).await?),
        Ask::Actions { name, state } => {
            let query: Vec<(&str, String)> = state.iter().map(|s| ("state", s.to_string())).collect();
            Answer::Actions(server.get(&at(name, "actions"), &query).await?)
        }
        Ask::Suspend { name } => Answer::Coordinator(server.post(&at(name, "suspend"), remote::NO_QUERY).await?),
        Ask::Resume { name } => Answer::Coordinator(server.post(&at(name, "resume"), remote::NO_QUERY).await?),
        Ask::Kill { name, from, to } => Answer::Actions(server.post(&at(name, "kill"), &range(*from, *to)).await?),
        Ask::Rerun { name, from, to } => Answer::Actions(server.post(&at(name, "rerun"), &range(*from, *to)).await?),
    };
    print(&ask, &answer, project.json, true)
}

fn command_name(ask: &Ask) -> &'static str {
    match ask {
        Ask::Statuses => "coordinators",
        Ask::Actions { .. } => "actions",
        Ask::Suspend { .. } => "suspend",
        Ask::Resume { .. } => "resume",
        Ask::Kill { .. } => "kill",
        Ask::Rerun { .. } => "rerun",
    }
}

fn print(ask: &Ask, answer: &Answer, json: bool, served: bool) -> anyhow::Result<Status> {
    if json {
        let text = match answer {
            Answer::Coordinators(list) => serde_json::to_string_pretty(list)?,
            Answer::Actions(list) => serde_json::to_string_pretty(list)?,
            Answer::Coordinator(one) => serde_json::to_string_pretty(one)?,
        };
        println!("{text}");
        return Ok(Status::Success);
    }
    let later = if served { "" } else { " (`trellis coordinate` or `serve` runs them)" };
    match (ask, answer) {
        (_, Answer::Coordinators(list)) => {
            if list.is_empty() {
                println!("no coordinators (trellis.toml declares no [[coordinator]])");
            }
            for coordinator in list {
                println!("{}", coordinator_line(coordinator));
            }
        }
        (Ask::Suspend { name }, Answer::Coordinator(_)) => {
            println!("coordinator {name} suspended: it creates and submits no action until resumed")
        }
        (_, Answer::Coordinator(coordinator)) => {
            println!("coordinator {} resumed: what it missed is created and run{later}", coordinator.name);
            println!("{}", coordinator_line(coordinator));
        }
        (Ask::Kill { name, .. }, Answer::Actions(killed)) => {
            if killed.is_empty() {
                println!("no open action of {name} in that range: nothing killed");
            }
            for action in killed {
                println!("killed {}", action.name);
            }
        }
        (Ask::Rerun { name, .. }, Answer::Actions(again)) => {
            if again.is_empty() {
                println!("no ended action of {name} in that range: nothing to run again");
            }
            for action in again {
                println!("{} runs again: {}{later}", action.name, action.state);
            }
        }
        (_, Answer::Actions(actions)) => {
            if actions.is_empty() {
                println!("no actions");
            }
            for action in actions {
                println!("{}", action_line(action));
            }
        }
    }
    Ok(Status::Success)
}

/// A coordinator's standing on one line: counts per state and its next time.
pub(super) fn coordinator_line(coordinator: &wire::Coordinator) -> String {
    // In the order of an action's life (the states' order), not of their names.
    let counts: Vec<String> = coordinator.counts.iter().map(|(state, n)| format!("{n} {state}")).collect();
    let counts = if counts.is_empty() { "no actions".to_string() } else { counts.join(", ") };
    let next = match &coordinator.next_nominal {
        Some(next) => format!("next {next}"),
        None => "no more actions (its end is reached)".to_string(),
    };
    let suspended = if coordinator.suspended { " (suspended)" } else { "" };
    let behind = match (&coordinator.behind_since, coordinator.behind) {
        (Some(since), n) if n > 0 => {
            let plural = if n == 1 { "" } else { "s" };
            let time =
                humantime::format_duration(std::time::Duration::from_secs(coordinator.behind_seconds.max(0) as u64));
            format!("; behind by {n} action{plural} ({time}, since {since})")
        }
        _ => String::new(),
    };
    format!("coordinator {}{suspended}: {counts}; {next}{behind}", coordinator.name)
}

/// An action on one line: its state, what it waits for or why it ended,
/// and its run.
pub(super) fn action_line(action: &wire::Action) -> String {
    let detail = match (action.state, action.missing.is_empty(), &action.reason) {
        (ActionState::Waiting, false, _) => format!(" for {}", action.missing.join(", ")),
        (_, _, Some(reason)) => format!(": {reason}"),
        _ => String::new(),
    };
    let run = action.run.as_ref().map(|run| format!(" [run {run}]")).unwrap_or_default();
    format!("{} {}{detail}{run}", action.name, action.state)
}
