//! `trellis metastore check|backup FILE|restore FILE`: the operator's tools
//! for the metastore (docs/operations.md). A server holds the metastore
//! while it runs, so these run with it stopped.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use super::Status;
use super::catalog::{ProjectArgs, load};
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
        /// The backup to write; replaced only once it is complete
        file: PathBuf,
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
        Action::Backup { file } => {
            if !path.exists() {
                bail!("no metastore in {}; nothing to back up", path.display());
            }
            let store = Metastore::open(path)?;
            let records = write_backup(&store, file)?;
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

/// Writes the backup beside `file` and renames it into place once it is
/// complete and durable, so that a failed backup never replaces a good one.
fn write_backup(store: &Metastore, file: &Path) -> anyhow::Result<u64> {
    let parent = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut partial = tempfile::Builder::new()
        .prefix(".trellis-backup-")
        .tempfile_in(parent)
        .with_context(|| format!("creating a file in {}", parent.display()))?;
    let records = {
        let mut out = std::io::BufWriter::new(partial.as_file_mut());
        let records = store.backup(&mut out)?;
        out.flush().with_context(|| format!("writing {}", file.display()))?;
        records
    };
    partial.as_file().sync_all().with_context(|| format!("writing {}", file.display()))?;
    partial.persist(file).with_context(|| format!("writing {}", file.display()))?;
    Ok(records)
}
