//! `trellis plugins inspect|run|checksum`: try a plugin on local data
//! without a project; `trellis plugins build`: build a Python plugin.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};

use super::{Status, key_value, named_path};
use crate::runtime::{
    CallReport, ChecksumRequest, Limits, OutputLimit, Plugin, Runtime, TransformInput, TransformOutcome,
    TransformRequest, World,
};

#[derive(Debug, Subcommand)]
pub(super) enum PluginsCommand {
    /// Show a plugin's world, name, version, content hash, exports and configuration keys
    Inspect {
        /// The plugin's .wasm file
        file: PathBuf,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
    /// Run a transformation plugin on local directories and print its outcome
    Run(RunArgs),
    /// Compute a version checksum with a checksum plugin
    Checksum(ChecksumArgs),
    /// Write a new plugin crate (with its SDK, a test and, for a transformation, an example project)
    New(super::scaffold::NewArgs),
    /// Build a Python plugin's directory into a component (installs componentize-py on first use)
    Build(BuildArgs),
}

#[derive(Debug, Args)]
pub(super) struct BuildArgs {
    /// The plugin's directory: a pyproject.toml with [tool.trellis] kind, and its module
    dir: PathBuf,
    /// Where to write the component [default: DIR/build/NAME.wasm]
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// `trellis plugins build DIR`: needs no engine, only componentize-py,
/// which it installs on first use with a word on stderr.
pub(super) fn build(args: &BuildArgs) -> anyhow::Result<Status> {
    let tools = crate::python::default_tools_dir()
        .context("cannot tell where to install componentize-py: set TRELLIS_TOOLS_DIR or HOME")?;
    let started = std::time::Instant::now();
    let built = crate::python::build(&args.dir, args.out.as_deref(), &tools, &mut |note| eprintln!("{note}"))?;
    let name = &built.manifest.name;
    let kind = built.manifest.kind.world();
    if built.rebuilt {
        let seconds = started.elapsed().as_secs_f64();
        println!("built the {kind} plugin {name} in {seconds:.1} s: {}", built.output.display());
    } else {
        println!("{name} is up to date (its sources are unchanged): {}", built.output.display());
    }
    Ok(Status::Success)
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// The transformation plugin's .wasm file
    file: PathBuf,
    /// An input directory, granted read-only; repeat for several inputs
    #[arg(long = "input", value_name = "NAME=DIR", value_parser = named_path)]
    inputs: Vec<(String, PathBuf)>,
    /// The output directory, granted read-write; created if missing, refused if not empty
    #[arg(long, value_name = "DIR")]
    output: PathBuf,
    /// Let the plugin write into an --output directory that is not empty
    #[arg(long)]
    force: bool,
    /// A configuration entry; repeat for several
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
    config: Vec<(String, String)>,
    /// The view URL path the plugin is told it materializes
    #[arg(long, default_value = "local/Run")]
    view: String,
    #[command(flatten)]
    limits: LimitArgs,
    /// Most MiB the call may write to its output (apparent size) [default: 10240]
    #[arg(long, value_name = "MIB")]
    output_mib: Option<u64>,
    /// Most files and directories the call may leave in its output [default: 100000]
    #[arg(long, value_name = "N")]
    output_entries: Option<u64>,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

impl RunArgs {
    /// The output cap: the project file's defaults, or the flags.
    fn output_limit(&self) -> anyhow::Result<OutputLimit> {
        let default = crate::catalog::OutputCap::default();
        let bytes = match self.output_mib {
            Some(0) => bail!("--output-mib must be at least 1"),
            Some(mib) => mib.checked_mul(1 << 20).context("--output-mib is too large")?,
            None => default.bytes,
        };
        let entries = match self.output_entries {
            Some(0) => bail!("--output-entries must be at least 1"),
            Some(entries) => entries,
            None => default.entries,
        };
        Ok(OutputLimit { bytes, entries })
    }
}

#[derive(Debug, Args)]
pub(super) struct ChecksumArgs {
    /// The checksum plugin's .wasm file
    file: PathBuf,
    /// A configuration entry; repeat for several
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
    config: Vec<(String, String)>,
    /// A named resource read from a file, e.g. query.sql=queries/daily.sql
    #[arg(long = "resource", value_name = "NAME=FILE", value_parser = named_path)]
    resources: Vec<(String, PathBuf)>,
    /// The transformation type the checksum is for
    #[arg(long, default_value = "")]
    transformation: String,
    #[command(flatten)]
    limits: LimitArgs,
}

#[derive(Debug, Args)]
struct LimitArgs {
    /// Deadline per call, in seconds [default: the world's]
    #[arg(long, value_name = "SECONDS")]
    deadline: Option<f64>,
    /// Memory cap per call, in MiB [default: the world's]
    #[arg(long, value_name = "MIB")]
    memory: Option<usize>,
}

impl LimitArgs {
    fn apply(&self, plugin: Plugin) -> anyhow::Result<Plugin> {
        let mut limits: Limits = plugin.limits();
        if let Some(seconds) = self.deadline {
            limits.deadline = Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--deadline {seconds} is not a positive number of seconds"))?;
        }
        if let Some(mib) = self.memory {
            if mib == 0 {
                bail!("--memory must be at least 1 MiB");
            }
            limits.memory = mib.checked_mul(1 << 20).context("--memory is too large")?;
        }
        Ok(plugin.with_limits(limits))
    }
}

impl PluginsCommand {
    pub(super) async fn run(self, runtime: &Runtime) -> anyhow::Result<Status> {
        match self {
            PluginsCommand::Inspect { file, json } => inspect(runtime, &file, json).await,
            PluginsCommand::Run(args) => run(runtime, args).await,
            PluginsCommand::Checksum(args) => checksum(runtime, args).await,
            PluginsCommand::New(args) => super::scaffold::new(&args),
            PluginsCommand::Build(args) => build(&args),
        }
    }
}

async fn load(runtime: &Runtime, file: &Path, world: Option<World>) -> anyhow::Result<Plugin> {
    let plugin = runtime.load_file(file).await?;
    if let Some(world) = world.filter(|&w| w != plugin.world()) {
        bail!("{} is {} plugin, not {} plugin", file.display(), plugin.world().with_article(), world.with_article());
    }
    Ok(plugin)
}

async fn inspect(runtime: &Runtime, file: &Path, json: bool) -> anyhow::Result<Status> {
    let plugin = load(runtime, file, None).await?;
    let report = plugin.describe().await?;
    let info = match report.result {
        Ok(info) => info,
        Err(failure) => {
            eprintln!("{}: describe failed ({:?}): {failure}", file.display(), failure.kind);
            return Ok(Status::Failed);
        }
    };
    if json {
        let value = serde_json::json!({
            "file": file,
            "world": plugin.world(),
            "name": info.name,
            "version": info.version,
            "description": info.description,
            "content_hash": plugin.content_hash(),
            "built_from": plugin.stamp(),
            "exports": plugin.exports(),
            "incremental": plugin.is_incremental(),
            "config": info.config,
            "limits": { "deadline_ms": plugin.limits().deadline.as_millis(), "memory_bytes": plugin.limits().memory },
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(Status::Success);
    }
    println!("file:         {}", file.display());
    println!("world:        {}", plugin.world());
    println!("name:         {}", info.name);
    println!("version:      {}", info.version);
    if !info.description.is_empty() {
        println!("description:  {}", info.description);
    }
    println!("content hash: {}", plugin.content_hash());
    if let Some(stamp) = plugin.stamp() {
        println!(
            "built from:   {} sources {} (SDK {})",
            stamp.language,
            stamp.sources.get(..16).unwrap_or(&stamp.sources),
            stamp.sdk
        );
    }
    println!("exports:      {}", plugin.exports().join(", "));
    let limits = plugin.limits();
    println!("limits:       {:?} deadline, {} MiB memory", limits.deadline, limits.memory >> 20);
    if info.config.is_empty() {
        println!("config:       none");
    } else {
        println!("config:");
        for key in &info.config {
            let required = if key.required { "required" } else { "optional" };
            println!("  {:<12} {required:<9} {}", key.name, key.description);
        }
    }
    Ok(Status::Success)
}

async fn run(runtime: &Runtime, args: RunArgs) -> anyhow::Result<Status> {
    let plugin = args.limits.apply(load(runtime, &args.file, Some(World::Transformation)).await?)?;
    let output_limit = args.output_limit()?;
    // Bad input is caught before the plugin runs: unknown directories and
    // configuration keys the plugin does not declare.
    let mut inputs = Vec::new();
    for (name, dir) in &args.inputs {
        if !dir.is_dir() {
            bail!("input `{name}`: {} is not a directory", dir.display());
        }
        let timestamp = std::fs::metadata(dir).and_then(|m| m.modified()).ok().map(unix_millis);
        inputs.push(TransformInput {
            name: name.clone(),
            view: format!("local/{name}"),
            dir: dir.clone(),
            timestamp,
            changed: true,
        });
    }
    let described = plugin.describe().await?;
    let info = match described.result {
        Ok(info) => info,
        Err(failure) => return Ok(print_failure(&args.file, "describe", &failure, args.json)),
    };
    if let Err(message) = info.check_config(&args.config) {
        bail!("{message}");
    }
    // A plugin given a directory that holds something would write among
    // (and over) it: only a new or empty one, unless asked.
    if !args.force
        && let Ok(mut entries) = std::fs::read_dir(&args.output)
        && entries.next().is_some()
    {
        bail!(
            "--output {} is not empty; name a new or empty directory, or pass --force to write into it",
            args.output.display()
        );
    }
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("cannot create the output directory {}", args.output.display()))?;

    let request = TransformRequest {
        view: args.view.clone(),
        parameters: Vec::new(),
        nominal_time: None,
        actual_time: unix_millis(SystemTime::now()),
        config: args.config.clone(),
        inputs,
        output_dir: args.output.clone(),
        output_limit,
    };
    let report = plugin.transform(&request).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report_json(&report))?);
        return Ok(if report.result.is_ok() { Status::Success } else { Status::Failed });
    }
    match &report.result {
        Ok(TransformOutcome::Data { counters }) => {
            let counters: Vec<String> = counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("data: {} ({})", counters.join(" "), usage(&report));
            Ok(Status::Success)
        }
        Ok(TransformOutcome::NoData) => {
            println!("no-data ({})", usage(&report));
            Ok(Status::Success)
        }
        Err(failure) => Ok(print_failure(&args.file, "run", failure, false)),
    }
}

async fn checksum(runtime: &Runtime, args: ChecksumArgs) -> anyhow::Result<Status> {
    let plugin = args.limits.apply(load(runtime, &args.file, Some(World::Checksum)).await?)?;
    let mut resources = Vec::new();
    for (name, path) in &args.resources {
        let content =
            std::fs::read(path).with_context(|| format!("resource `{name}`: cannot read {}", path.display()))?;
        resources.push((name.clone(), content));
    }
    let request = ChecksumRequest { transformation: args.transformation, config: args.config, resources };
    let report = plugin.checksum(&request).await?;
    match report.result {
        Ok(checksum) => {
            println!("{checksum}");
            Ok(Status::Success)
        }
        Err(failure) => Ok(print_failure(&args.file, "checksum", &failure, false)),
    }
}

fn print_failure(file: &Path, call: &str, failure: &crate::runtime::Failure, json: bool) -> Status {
    if json {
        println!("{}", serde_json::json!({ "failure": failure }));
    } else {
        let kind = crate::model::wire_name(&failure.kind);
        eprintln!("{}: {call} failed ({kind}): {failure}", file.display());
    }
    Status::Failed
}

fn usage<T>(report: &CallReport<T>) -> String {
    format!(
        "{:.1} ms, peak memory {:.1} MiB",
        report.elapsed.as_secs_f64() * 1e3,
        report.peak_memory as f64 / (1 << 20) as f64
    )
}

fn report_json(report: &CallReport<TransformOutcome>) -> serde_json::Value {
    serde_json::json!({
        "result": match &report.result {
            Ok(outcome) => serde_json::to_value(outcome).unwrap_or_default(),
            Err(failure) => serde_json::json!({ "failure": failure }),
        },
        "elapsed_ms": report.elapsed.as_secs_f64() * 1e3,
        "peak_memory_bytes": report.peak_memory,
        "stdout_truncated_bytes": report.stdout.truncated_bytes,
        "stderr_truncated_bytes": report.stderr.truncated_bytes,
    })
}

fn unix_millis(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
