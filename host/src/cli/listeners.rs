//! `trellis listeners`: each listener's status and lag, and `enable` for a
//! listener disabled after too many restarts.

use clap::{Args, Subcommand};

use super::Status;
use super::project::{ProjectArgs, load};
use super::remote::{self, Server};
use crate::api::wire;
use crate::listeners::{self, State};
use crate::metastore::Metastore;
use crate::model::wire_name;

#[derive(Debug, Args)]
pub(super) struct ListenersArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
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
            let statuses: Vec<listeners::Status> = listed.into_iter().map(status_of).collect();
            print_statuses(&statuses, args.project.json)
        }
    }
}

/// A listener's status as the library gives it, from the server's account.
fn status_of(listener: wire::Listener) -> listeners::Status {
    listeners::Status {
        name: listener.name,
        plugin: listener.plugin,
        state: State::new(listener.state, listener.reason),
        cursor: listener.cursor,
        behind: listener.behind,
        oldest_undelivered_ms: listener.oldest_undelivered_ms,
        restarts: listener.restarts,
        delivered: listener.delivered,
        last_error: listener.last_error,
    }
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
        let (state, reason) = (wire_name(&status.state.kind()), status.state.reason());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `--json` writes a state's reason only when it has one, and a
    /// server's account of a listener comes back as the status it was.
    #[test]
    fn a_status_is_written_and_read_back_as_it_was() {
        let listener = |state: &str, reason: Option<&str>| wire::Listener {
            name: "l".into(),
            plugin: None,
            state: crate::model::from_wire_name(state).unwrap(),
            reason: reason.map(String::from),
            cursor: 4,
            behind: 0,
            oldest_undelivered_ms: None,
            oldest_undelivered_at: None,
            restarts: 3,
            delivered: 2,
            last_error: None,
        };
        let enabled = status_of(listener("enabled", None));
        assert_eq!(enabled.state, State::Enabled);
        assert_eq!(
            serde_json::to_string(&enabled).unwrap(),
            r#"{"name":"l","plugin":null,"state":"enabled","cursor":4,"behind":0,"oldest_undelivered_ms":null,"restarts":3,"delivered":2,"last_error":null}"#
        );
        let disabled = status_of(listener("disabled", Some("too many restarts")));
        assert_eq!(disabled.state, State::Disabled("too many restarts".into()));
        let json = serde_json::to_value(&disabled).unwrap();
        assert_eq!((&json["state"], &json["reason"]), (&"disabled".into(), &"too many restarts".into()));
        assert_eq!(status_of(listener("unavailable", None)).state, State::Unavailable(String::new()));
    }
}
