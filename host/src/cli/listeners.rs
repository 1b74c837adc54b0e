//! `trellis listeners`: each listener's status and lag, and `enable` for a
//! listener disabled after too many restarts.

use clap::{Args, Subcommand};

use super::Status;
use super::catalog::{ProjectArgs, load};
use super::remote::{self, Server};
use crate::api::wire;
use crate::listeners::{self, State};
use crate::metastore::Metastore;

#[derive(Debug, Args)]
pub(super) struct ListenersArgs {
    #[command(flatten)]
    project: ProjectArgs,
    #[command(subcommand)]
    action: Option<Action>,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Re-enable a disabled listener, with a fresh restart budget
    Enable {
        /// The listener's name in trellis.toml
        name: String,
    },
}

pub(super) fn run(args: &ListenersArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let store = Metastore::open(&catalog.settings.metastore)?;
    match &args.action {
        Some(Action::Enable { name }) => {
            print_enabled(name, listeners::enable(&catalog, &store, name)?, "on the next run")
        }
        None => print_statuses(&listeners::status(&catalog, &store)?, args.project.json),
    }
}

/// `trellis listeners` with a server, which restarts a re-enabled listener at once.
pub(super) async fn run_remote(args: &ListenersArgs, server: &Server) -> anyhow::Result<Status> {
    match &args.action {
        Some(Action::Enable { name }) => {
            let path = format!("{}/enable", remote::path("listeners", name));
            let enabled: wire::Enabled = server.post(&path, remote::NO_QUERY).await?;
            print_enabled(name, enabled.was_disabled, "now")
        }
        None => {
            let listed: Vec<wire::Listener> = server.get("listeners", remote::NO_QUERY).await?;
            let statuses = listed.into_iter().map(status_of).collect::<anyhow::Result<Vec<_>>>()?;
            print_statuses(&statuses, args.project.json)
        }
    }
}

/// A listener's status as the library gives it, from the server's account.
fn status_of(listener: wire::Listener) -> anyhow::Result<listeners::Status> {
    let Some(state) = State::from_parts(&listener.state, listener.reason) else {
        anyhow::bail!("the server sent an unknown listener state `{}`", listener.state);
    };
    Ok(listeners::Status {
        name: listener.name,
        plugin: listener.plugin,
        state,
        cursor: listener.cursor,
        behind: listener.behind,
        oldest_undelivered_ms: listener.oldest_undelivered_ms,
        restarts: listener.restarts,
        delivered: listener.delivered,
        last_error: listener.last_error,
    })
}

/// `resumes` says when: a server restarts its listeners at once, an
/// embedded one starts them with the next run.
fn print_enabled(name: &str, was_disabled: bool, resumes: &str) -> anyhow::Result<Status> {
    if was_disabled {
        println!("listener {name} enabled; it continues from its cursor {resumes}");
    } else {
        println!("listener {name} was not disabled");
    }
    Ok(Status::Success)
}

fn print_statuses(statuses: &[listeners::Status], json: bool) -> anyhow::Result<Status> {
    if json {
        println!("{}", serde_json::to_string_pretty(statuses)?);
        return Ok(Status::Success);
    }
    if statuses.is_empty() {
        println!("no listeners (the monitor is off and trellis.toml declares none)");
    }
    for status in statuses {
        let (state, reason) = status.state.parts();
        let plugin = status.plugin.as_deref().unwrap_or("(built in)");
        let age = status
            .oldest_undelivered_ms
            .map(|ms| {
                format!(
                    ", oldest {} old",
                    humantime::format_duration(std::time::Duration::from_secs(ms.max(0) as u64 / 1000))
                )
            })
            .unwrap_or_default();
        println!(
            "{:<16} {plugin:<16} {state:<11} behind {}{age}, {} delivered, {} restart{}",
            status.name,
            status.behind,
            status.delivered,
            status.restarts,
            if status.restarts == 1 { "" } else { "s" }
        );
        if let Some(reason) = reason {
            println!("    {state}: {reason}");
        }
        if let Some(error) = &status.last_error {
            println!("    last error: {error}");
        }
    }
    Ok(Status::Success)
}
