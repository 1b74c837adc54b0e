//! `trellis reload`: has a running `trellis serve` load its project again
//! (`POST /reload`) and prints what changed. With `-p DIR`, the server is
//! the one that announced itself for that project (as `stop -p` finds it);
//! with `--server URL`, that one. A broken project is refused by the
//! server, which keeps serving the old one: its problems are printed and
//! the command fails.

use anyhow::bail;
use clap::Args;

use super::project::{ProjectArgs, load};
use super::remote::{self, Server};
use super::{Status, announce};
use crate::api::wire;

#[derive(Debug, Args)]
pub(super) struct ReloadArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
}

/// `trellis reload -p DIR`: the project's own server, found by its
/// announcement. The project is loaded here first, so a broken one fails
/// with its problems before anything is asked.
pub(super) async fn reload(args: &ReloadArgs, token: Option<String>) -> anyhow::Result<Status> {
    let dir = &args.project.project;
    let catalog = load(dir)?;
    let Some(server) = announce::server(&catalog) else {
        bail!("no `trellis serve` holds the project in {}; there is nothing to reload", dir.display());
    };
    reload_remote(&Server::new(&server.what.url, token)?).await
}

/// `trellis reload --server URL`.
pub(super) async fn reload_remote(server: &Server) -> anyhow::Result<Status> {
    let reloaded: wire::Reloaded = server.post("reload", remote::NO_QUERY).await?;
    print!("{}", describe(server.base(), &reloaded));
    Ok(Status::Success)
}

/// What a reload changed, a line per change.
fn describe(base: &str, reloaded: &wire::Reloaded) -> String {
    let mut text = format!("reloaded the project of {base} ({} views held)\n", reloaded.views);
    let mut any = false;
    let mut line = |what: &str, name: &str| {
        any = true;
        text.push_str(&format!("  {what}: {name}\n"));
    };
    for name in &reloaded.added {
        line("added", name);
    }
    for name in &reloaded.removed {
        line("removed", name);
    }
    for name in &reloaded.schema_changed {
        line("schema changed", name);
    }
    for change in &reloaded.version_changed {
        line("version changed", &format!("{} ({})", change.view_type, change.change));
    }
    for key in &reloaded.settings_changed {
        line("setting changed", key);
    }
    if !any {
        text.push_str("  nothing changed\n");
    }
    text
}
