//! `trellis gc`: removes from an object root the versions no reader needs
//! any more (those replaced for longer than the grace period) and the
//! orphans of crashed or losing publishes (older than it), and says what it
//! removed and kept. A local root has nothing to collect: a publish there
//! replaces its version in one rename.

use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::Status;
use super::project::{ProjectArgs, load, plural};
use crate::storage::object::{Collected, Tally};

#[derive(Debug, Args)]
pub(super) struct GcArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// How long a replaced version is kept for outside readers still listing
    /// it, and an upload's orphan for its publish to finish [default: `[project.s3] grace`, else 1h]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    grace: Option<Duration>,
    /// Say what would be removed, and remove nothing
    #[arg(long)]
    dry_run: bool,
    /// Also print a line per view that has versions
    #[arg(long)]
    verbose: bool,
}

pub(super) fn gc(args: &GcArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let settings = &catalog.settings;
    let storage = crate::storage::open(&catalog)?;
    let grace = args.grace.unwrap_or_else(|| settings.s3.grace());
    // Each root by itself: the project's, then the view types' own.
    let stores = match storage.as_roots() {
        Some(roots) => roots.stores().to_vec(),
        None => vec![storage.clone()],
    };
    let mut failed = 0;
    let mut json = Vec::new();
    for store in stores {
        let root = store.root().display().to_string();
        let Some(collected) = store.collect(grace, args.dry_run).with_context(|| format!("collecting {root}"))? else {
            let nothing = format!(
                "{root}: a local directory, where a publish replaces its version in one rename: nothing to collect"
            );
            if args.project.json {
                json.push(serde_json::json!({ "root": root, "collected": false, "note": nothing }));
            } else {
                println!("{nothing}");
            }
            continue;
        };
        failed += collected.views.iter().filter(|view| view.error.is_some()).count();
        if args.project.json {
            let mut value = serde_json::to_value(&collected)?;
            let (removed, kept) = collected.totals();
            value["collected"] = true.into();
            value["dry_run"] = args.dry_run.into();
            value["grace_seconds"] = grace.as_secs().into();
            value["removed"] = serde_json::to_value(removed)?;
            value["kept"] = serde_json::to_value(kept)?;
            json.push(value);
        } else {
            print_collected(&collected, args, grace);
        }
        for view in &collected.views {
            if let Some(error) = &view.error {
                eprintln!("warning: {}/{}: {error}", collected.root, view.key);
            }
        }
    }
    if args.project.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    }
    Ok(if failed == 0 { Status::Success } else { Status::Failed })
}

fn print_collected(collected: &Collected, args: &GcArgs, grace: Duration) {
    let removed_word = if args.dry_run { "would remove" } else { "removed" };
    if args.verbose {
        for view in &collected.views {
            let current =
                view.current.as_deref().map_or_else(|| "no current version".to_string(), |v| format!("current {v}"));
            println!("  {}: {removed_word} {}; kept {} ({current})", view.key, tally(view.removed), tally(view.kept));
        }
    }
    let (removed, kept) = collected.totals();
    let views = collected.views.len();
    println!(
        "{}: {removed_word} {}; kept {} (current, or within the grace of {}), in {views} view{}",
        collected.root,
        tally(removed),
        tally(kept),
        humantime::format_duration(grace),
        plural(views)
    );
}

/// `3 versions (12 objects, 4.0 KiB)`.
fn tally(tally: Tally) -> String {
    format!(
        "{} version{} ({} object{}, {})",
        tally.versions,
        plural(tally.versions),
        tally.objects,
        plural(tally.objects),
        bytes(tally.bytes)
    )
}

fn bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
