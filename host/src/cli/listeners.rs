//! `trellis listeners`: each listener's status and lag, and `enable` for a
//! listener disabled after too many restarts.

use clap::{Args, Subcommand};

use super::Status;
use super::catalog::{ProjectArgs, load};
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
            if listeners::enable(&catalog, &store, name)? {
                println!("listener {name} enabled; it continues from its cursor on the next run");
            } else {
                println!("listener {name} was not disabled");
            }
        }
        None => {
            let statuses = listeners::status(&catalog, &store)?;
            if args.project.json {
                println!("{}", serde_json::to_string_pretty(&statuses)?);
                return Ok(Status::Success);
            }
            if statuses.is_empty() {
                println!("no listeners (the monitor is off and trellis.toml declares none)");
            }
            for status in statuses {
                let (state, reason) = match &status.state {
                    State::Enabled => ("enabled", None),
                    State::Disabled(reason) => ("disabled", Some(reason)),
                    State::Unavailable(reason) => ("unavailable", Some(reason)),
                };
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
        }
    }
    Ok(Status::Success)
}
