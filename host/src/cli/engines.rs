//! `trellis engines`: where the project's engine (Spark) and Java are found,
//! and which view types run on it; `trellis engines install spark`
//! installs PySpark from the package registry into trellis's tools
//! directory, where the driver finds it.

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};

use super::Status;
use super::catalog::ProjectArgs;
use crate::catalog::{self, SparkSettings};
use crate::engines::spark;

#[derive(Debug, Args)]
pub(super) struct EnginesArgs {
    #[command(subcommand)]
    command: Option<EnginesCommand>,
    #[command(flatten)]
    project: ProjectArgs,
}

#[derive(Debug, Subcommand)]
enum EnginesCommand {
    /// Install an engine into trellis's tools directory ($TRELLIS_TOOLS_DIR, default ~/.cache/trellis/tools)
    Install {
        /// The engine: spark (PySpark from the package registry, about 500 MB, for local mode and as a cluster's client)
        engine: Engine,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Engine {
    Spark,
}

pub(super) async fn run(
    args: &EnginesArgs,
    runtime: impl FnOnce() -> anyhow::Result<crate::runtime::Runtime>,
) -> anyhow::Result<Status> {
    let tools = crate::python::default_tools_dir();
    if let Some(EnginesCommand::Install { engine: Engine::Spark }) = &args.command {
        let Some(tools) = tools else { bail!("no tools directory: set TRELLIS_TOOLS_DIR, XDG_CACHE_HOME or HOME") };
        let dir = spark::install(&tools, &mut |note| eprintln!("note: {note}")).map_err(anyhow::Error::msg)?;
        println!("PySpark {} is in {}", spark::PYSPARK, dir.display());
        return Ok(Status::Success);
    }
    // Without a project, the defaults: what a project without
    // `[engines.spark]` gets.
    let has_project = args.project.project.join(catalog::PROJECT_FILE).is_file();
    let project = if has_project { Some(super::catalog::load(&args.project.project)?) } else { None };
    let settings = project.as_ref().map_or_else(SparkSettings::default, |c| c.settings.spark.clone());
    let on_spark: Vec<String> = match &project {
        Some(catalog) => {
            let plugins = crate::plugins::Plugins::load(&runtime()?, catalog).await;
            plugins.engine_types(catalog).iter().map(|t| t.name.clone()).collect()
        }
        None => Vec::new(),
    };
    let found = spark::locate(&settings, tools.as_deref());
    if args.project.json {
        let value = serde_json::json!({
            "spark": {
                "master": settings.master.to_string(),
                "deploy_mode": if settings.driver_is_local() { "client" } else { "cluster" },
                "concurrency": settings.concurrency,
                "memory_mib": settings.memory_mib,
                "spark_submit": found.as_ref().ok().map(|f| &f.spark_submit),
                "found_by": found.as_ref().ok().map(|f| f.found_by),
                "java": found.as_ref().ok().map(|f| &f.java),
                "java_version": found.as_ref().ok().map(|f| &f.java_version),
                "unavailable": found.as_ref().err(),
                "view_types": on_spark,
            }
        });
        println!("{}", serde_json::to_string_pretty(&value).context("writing JSON")?);
    } else {
        println!(
            "spark: master {}, {} mode, {} job{} at a time, driver memory {} MiB",
            settings.master,
            if settings.driver_is_local() { "client" } else { "cluster" },
            settings.concurrency,
            if settings.concurrency == 1 { "" } else { "s" },
            settings.memory_mib
        );
        match &found {
            Ok(found) => {
                println!("  spark-submit: {} (found by {})", found.spark_submit.display(), found.found_by);
                println!("  java:         {} ({})", found.java.display(), found.java_version);
            }
            Err(reason) => println!("  not available: {reason}"),
        }
        if has_project {
            let types = if on_spark.is_empty() { "none".to_string() } else { on_spark.join(", ") };
            println!("  view types:   {types}");
        }
    }
    // Unavailable where the project needs it: worth an exit code.
    Ok(if found.is_err() && !on_spark.is_empty() { Status::Failed } else { Status::Success })
}
