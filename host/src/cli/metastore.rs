//! `trellis metastore check|backup FILE|restore FILE`: the operator's tools
//! for the metastore (docs/operations.md). A server holds the metastore
//! while it runs, so these run with it stopped.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use super::Status;
use super::project::{ProjectArgs, load};
use crate::metastore::{self, Metastore};

#[derive(Debug, Args)]
pub(super) struct MetastoreArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Read every record and say whether the metastore is healthy
    Check,
    /// Write every record to FILE (JSON lines), which `restore` reads back
    Backup {
        /// The backup to write; an existing one is refused unless --force
        file: PathBuf,
        /// Replace FILE if it exists (only once the new backup is complete)
        #[arg(long)]
        force: bool,
    },
    /// Recreate the metastore from a backup; refused while one exists
    Restore {
        /// A backup written by `trellis metastore backup`
        file: PathBuf,
    },
}

pub(super) fn run(args: &MetastoreArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let path = &catalog.settings.metastore;
    match &args.action {
        Action::Check => {
            if !path.exists() {
                println!("no metastore in {} yet; nothing to check", path.display());
                return Ok(Status::Success);
            }
            let contents = Metastore::open(path)?.check()?;
            println!(
                "metastore in {}: healthy; {} view types, {} views, {} runs, {} flows, {} events, {} listeners, {} coordinators, {} actions, {} transaction log records, {} views' logs",
                path.display(),
                contents.schemas,
                contents.views,
                contents.runs,
                contents.flows,
                contents.events,
                contents.listeners,
                contents.coordinators,
                contents.actions,
                contents.txlog,
                contents.logs
            );
        }
        Action::Backup { file, force } => {
            if !path.exists() {
                bail!("no metastore in {}; nothing to back up", path.display());
            }
            if !force && std::fs::symlink_metadata(file).is_ok() {
                bail!(
                    "{} exists; name a new file, or pass --force to replace it (once the new backup is complete)",
                    file.display()
                );
            }
            let store = Metastore::open(path)?;
            let records = store.backup_to(file)?;
            println!("backed up {records} records from {} to {}", path.display(), file.display());
        }
        Action::Restore { file } => {
            let input = std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
            let records = metastore::restore(std::io::BufReader::new(input), path)
                .with_context(|| format!("restoring {}", file.display()))?;
            println!("restored {records} records from {} into {}", file.display(), path.display());
        }
    }
    Ok(Status::Success)
}
