//! The command line: what the user typed, parsed by clap, then executed.
//!
//! Invariant: this is the edge. It is the only place that uses anyhow, and
//! it turns every error into one line and an exit code; it holds no logic
//! that a library module or the server would need too.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! clap commands (`plugins inspect|run|checksum|new|build`, `demo`,
//! `validate`, `views`, `deps`, `materialize`, `plan`, `invalidate`,
//! `runs`, `stop`, `reload`, `listeners [enable NAME]`, `coordinate [--now]`
//! (`coordinate.rs`: the coordinators driven here until nothing is due or
//! ready), `coordinators`, `actions`, `suspend`, `resume`, `kill`, `rerun`
//! (`coordinators.rs`: the service's `CoordinatorOperation`, carried out
//! embedded by `Coordination::operate` on `open_records`, recording but
//! running nothing, or through `/coordinators`; both print from the wire
//! types), `metastore check|backup|restore`
//! (`metastore.rs`; a backup is written beside its file and renamed into
//! place), `engines [install spark]` (`engines.rs`: where Spark and Java are
//! found and which types run on Spark; PySpark installed into the tools
//! directory), `logs VIEW` (`logs.rs`; embedded, read from the metastore
//! without a scheduler), `txlog [PATTERN]` and `txlog reset PATTERN [--source NAME]`
//! (`txlog.rs`; embedded, a reset opens without plugins), `transformations`, `serve`,
//! `shell`, `bench [--listeners | --coordinators N | --incremental]`).
//! A file per command (`validate.rs`, `views.rs`, `deps.rs`, `runs.rs`,
//! `schedule.rs` for the scheduler's, ...); `project.rs` holds what they
//! all take (`-p`, `--json`, one view) and loads the project.
//! `demo`, `materialize`, `bench` and `serve` open the project through one
//! `Session` (`materialize` and `serve` load the project through
//! `project::load_to_run`, which refuses one without view types, while
//! `validate` only warns, and says in one line when view types run on
//! Spark that is not available); `materialize` and `demo` give the listeners `[events] drain`
//! to catch up at the end, then say how far behind each one is and how
//! often it was restarted (the demo says the stats listener followed only
//! if it missed nothing). `announce.rs`: sled admits one process, so a
//! process says what it does with the project in a file next to the
//! metastore, with its pid and start time (a reused pid is never taken for
//! it): a running `materialize` names its run in `<metastore>.active-run`,
//! and `stop` sends that process SIGINT, which stops the run as Ctrl-C
//! does; `serve` writes its address in `<metastore>.server`, so that
//! a second `serve` names the server and how to reach it. Every command
//! with a remote form, given no `--server`, reads that file first (finding
//! the metastore through `catalog::metastore_path`, which reads the
//! project file without validating it) and asks
//! the server that holds the project (saying so on stderr); `coordinate`
//! and `metastore`, which have none, refuse in one line naming it.
//! `scaffold.rs` (`plugins new`) writes a plugin crate from
//! `host/templates/plugin/` with its own copy of `plugin-sdk/` and `wit/`,
//! embedded at build time (a unit test checks the list is whole), so that
//! the crate needs no checkout beside it.
//! `invalidate` opens the scheduler without plugins
//! (`open_records`): only records change. `deps` resolves `latest()` as
//! of `--now` (with `--dot`, a pattern's closure as a Graphviz graph, an
//! edge from each dependency to its dependent) and adds, from the view's record when the metastore can be
//! opened, what its `latest()` read when last materialized. `serve` fits its connection cap
//! under the open-file limit (raised to the hard one), gives its scheduler
//! the `--max-views` capacity, opens a session, makes
//! its scheduler a `Service`, takes over the listeners, starts the API,
//! reloads the project on SIGHUP (as `POST /reload`, logging what changed or
//! why it was refused), and on SIGINT or SIGTERM shuts them down in that order; unlike the other commands it keeps SIGPIPE ignored, since a client
//! hanging up must not kill it. The API runs on a runtime with two threads
//! of its own, so that CPU-bound transformations and the loop's longer steps
//! never make a request wait. With `--server URL` (or `TRELLIS_SERVER`),
//! `views`, `materialize [--wait]`, `invalidate`, `runs`, `stop`, `plan`,
//! `listeners`, `transformations`, `txlog`, `logs` and the coordinator commands talk to a server (`remote.rs`: the
//! client, bearer token, one-line errors, the event-stream follower with
//! `Last-Event-ID` reconnection, which reads the stream as `api::wire`
//! types and returns the run's `Termination`) and print what embedded mode prints: each
//! command has one printing function that both paths feed. `reload.rs`:
//! `trellis reload`, `POST /reload` to the server named by `--server` or,
//! with `-p`, to the one announced in `<metastore>.server`; prints what
//! changed, or the refusal and exits 2. `shell.rs`:
//! `trellis shell`, rustyline with history, each line parsed by the same
//! clap `Cli`; it says on stderr where its lines go, completes commands,
//! subcommands, flags and (after `-v`) the project's view types from clap's
//! own description of the CLI, and prints a usage error as one line.
//! `materialize` prints the views with trouble and the counts by flow
//! status (`runs::flow_counts`, shared by `runs ID` and the demo);
//! `--verbose` every view and the plugins' log lines (the logging filter
//! is chosen per command in `Cli::init_logging`, colour only on a
//! terminal without `NO_COLOR`). `views` without `-v` lists the
//! metastore's views (a server's instantiated ones); `deps` and `logs`
//! take their view positionally or with `-v` (`project::ViewArg`). A test
//! walks the clap tree: every argument has help.
//! Invariant: the edge. The only anyhow user; maps every error to one line on
//! stderr and an exit code (0 success, 1 plugin failure, 2 usage or bad input);
//! holds no logic a library module would need.

mod announce;
mod bench;
mod coordinate;
mod coordinators;
mod demo;
mod deps;
mod engines;
mod gc;
mod listeners;
mod logs;
mod metastore;
mod plugins;
mod project;
mod reload;
mod remote;
mod runs;
mod scaffold;
mod schedule;
mod serve;
mod shell;
mod stop;
mod txlog;
mod validate;
mod views;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::runtime::{Runtime, RuntimeOptions};
use remote::dispatch;

#[derive(Debug, Parser)]
#[command(name = "trellis", version, about = "A goal-oriented data scheduler with WebAssembly plugins")]
pub struct Cli {
    #[command(flatten)]
    globals: Globals,

    #[command(subcommand)]
    command: Command,
}

/// The options every command takes. The shell hands its own to each line
/// that does not set them.
#[derive(Debug, Clone, Default, clap::Args)]
struct Globals {
    /// Where compiled plugins are cached between runs, up to $TRELLIS_CACHE_MIB MiB (1024 by default)
    /// [default: $TRELLIS_CACHE_DIR, else $XDG_CACHE_HOME/trellis, else ~/.cache/trellis]
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Send the command to this `trellis serve`, e.g. http://127.0.0.1:20698 (then -p is ignored);
    /// commands without a remote form (validate, deps, demo, plugins, bench, metastore, coordinate, serve)
    /// refuse it
    #[arg(long, global = true, value_name = "URL", env = "TRELLIS_SERVER")]
    server: Option<String>,
    /// A file holding the bearer token: the client's with --server, the server's with `serve`
    /// [default: $TRELLIS_TOKEN]
    #[arg(long, global = true, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

impl Globals {
    /// The server to talk to, if one is named.
    fn server(&self) -> anyhow::Result<Option<remote::Server>> {
        match self.server.as_deref().map(str::trim).filter(|url| !url.is_empty()) {
            Some(url) => Ok(Some(remote::Server::new(url, token(self.token_file.as_deref())?)?)),
            None => Ok(None),
        }
    }

    /// Options given to the shell apply to each of its lines that does not give its own.
    fn inherit(&mut self, shell: &Globals) {
        self.cache_dir = self.cache_dir.take().or_else(|| shell.cache_dir.clone());
        self.server = self.server.take().or_else(|| shell.server.clone());
        self.token_file = self.token_file.take().or_else(|| shell.token_file.clone());
    }
}

/// The bearer token, from `--token-file` or else `$TRELLIS_TOKEN`: one
/// rule for the server and its clients. Surrounding whitespace is not part
/// of it (a newline at the end of a file, a space pasted along), and one
/// that is empty once trimmed is refused, never taken as a token anyone
/// could guess.
fn token(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    let (token, source) = match file {
        Some(file) => (
            std::fs::read_to_string(file).with_context(|| format!("reading the token file {}", file.display()))?,
            format!("the token file {}", file.display()),
        ),
        None => match std::env::var("TRELLIS_TOKEN") {
            Ok(token) => (token, "TRELLIS_TOKEN".to_string()),
            Err(std::env::VarError::NotPresent) => return Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!("TRELLIS_TOKEN is not valid UTF-8"),
        },
    };
    let token = token.trim();
    if token.is_empty() {
        anyhow::bail!("{source} holds no token (it is empty or only whitespace)");
    }
    Ok(Some(token.to_string()))
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect, run and checksum plugins: the plugin author's tools
    #[command(subcommand)]
    Plugins(plugins::PluginsCommand),
    /// Write sample data and the sample plugins to a directory and run them
    Demo(demo::DemoArgs),
    /// Load the project and print a summary, or every problem found
    Validate(project::ProjectArgs),
    /// List the views a pattern addresses, with their data paths
    Views(views::ViewsArgs),
    /// Show the views one view depends on, their data paths and dataIn()
    Deps(deps::DepsArgs),
    /// Show what a view's last transformations logged and printed
    Logs(logs::LogsArgs),
    /// Materialize views and their dependencies, transforming what is outdated
    Materialize(schedule::MaterializeArgs),
    /// Run the project's coordinators here until nothing more is due or ready (catch-up included)
    Coordinate(coordinate::CoordinateArgs),
    /// Each coordinator's state, next nominal time and actions per state
    Coordinators(coordinators::CoordinatorsArgs),
    /// A coordinator's actions, with what each waits for and its run
    Actions(coordinators::ActionsArgs),
    /// Suspend a coordinator: it creates and submits no action until resumed
    Suspend(coordinators::NameArgs),
    /// Resume a suspended coordinator; it catches up on what it missed
    Resume(coordinators::NameArgs),
    /// Kill a coordinator's open actions (those from --from to --to, or all)
    Kill(coordinators::KillArgs),
    /// Run a coordinator's ended actions from --from to --to again, rebuilding their views
    Rerun(coordinators::RerunArgs),
    /// Mark views to be rematerialized on the next materialize
    Invalidate(schedule::InvalidateArgs),
    /// Say for every view whether it would be transformed now, and why
    Plan(schedule::PlanArgs),
    /// Show incremental views' transaction logs (`txlog reset PATTERN` clears them)
    Txlog(txlog::TxLogArgs),
    /// Measure the scheduler on a generated shop lattice
    Bench(bench::BenchArgs),
    /// List runs, or show one run's flow statuses
    Runs(runs::RunsArgs),
    /// Stop a run that another `trellis materialize` is running
    Stop(stop::StopArgs),
    /// Show the listeners, their status and lag; `enable NAME` re-enables one
    Listeners(listeners::ListenersArgs),
    /// Check the metastore, back it up to a file, or restore it from one
    Metastore(metastore::MetastoreArgs),
    /// Remove from an object root the versions replaced longer ago than the grace period, and crashed publishes' orphans
    Gc(gc::GcArgs),
    /// Run the scheduler, the listeners and the HTTP API until SIGINT or SIGTERM
    Serve(serve::ServeArgs),
    /// Have a running server load trellis.toml and its plugins again, and say what changed
    Reload(reload::ReloadArgs),
    /// Show the transformations a server is running and its permits (needs --server)
    Transformations(schedule::TransformationsArgs),
    /// Show where the project's engine (Spark) and Java are found; `install spark` installs PySpark
    Engines(engines::EnginesArgs),
    /// An interactive shell: each line is a trellis command (without `trellis`); exit, quit or Ctrl-D end it
    Shell,
}

/// How a command ended, beyond errors (which exit with 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Success,
    /// A plugin (or, later, a view) failed.
    Failed,
}

impl From<Status> for ExitCode {
    fn from(status: Status) -> ExitCode {
        match status {
            Status::Success => ExitCode::SUCCESS,
            Status::Failed => ExitCode::from(1),
        }
    }
}

/// The commands that have no remote form: `--server` after them is
/// refused rather than listed in their help and ignored.
const LOCAL_ONLY: [&str; 10] =
    ["validate", "deps", "demo", "plugins", "bench", "metastore", "coordinate", "serve", "engines", "gc"];

/// Refuses `--server` typed before a command that has no remote form
/// (`trellis --server URL validate`), as the command's own hidden option
/// refuses it after the command; one from `$TRELLIS_SERVER` is not typed
/// for this command, and such a command runs here as it says.
fn refuse_server_before_local(matches: &clap::ArgMatches) -> Result<(), clap::Error> {
    let Some(name) = matches.subcommand_name().filter(|name| LOCAL_ONLY.contains(name)) else { return Ok(()) };
    if matches.value_source("server") != Some(clap::parser::ValueSource::CommandLine) {
        return Ok(());
    }
    Err(clap::Error::raw(
        clap::error::ErrorKind::ArgumentConflict,
        format!("`trellis {name}` has no remote form: it runs here, so --server does not apply\n"),
    ))
}

impl Cli {
    /// The command line's description: the derived one, with `--server`
    /// taken from the commands that have no remote form (a hidden option
    /// of their own, which says why it does not apply, shadows the global one).
    pub fn command() -> clap::Command {
        let mut command = <Cli as clap::CommandFactory>::command();
        for name in LOCAL_ONLY {
            command = command.mut_subcommand(name, |sub| {
                sub.arg(clap::Arg::new("server").long("server").value_name("URL").hide(true).value_parser(
                    move |_: &str| -> Result<String, String> {
                        Err(format!("`trellis {name}` has no remote form: it runs here, so --server does not apply"))
                    },
                ))
            });
        }
        command
    }

    /// The command line, parsed (exiting with clap's message when it is not one).
    pub fn from_command_line() -> Cli {
        let matches = Cli::command().get_matches();
        refuse_server_before_local(&matches).unwrap_or_else(|e| e.exit());
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    pub async fn run(self) -> anyhow::Result<Status> {
        let globals = self.globals;
        let cache_dir = globals.cache_dir.clone().or_else(default_cache_dir);
        // Only the commands that run plugins start the engine.
        let runtime = || {
            let mut options = RuntimeOptions { cache_dir: cache_dir.clone(), ..RuntimeOptions::default() };
            if let Some(mib) = std::env::var_os("TRELLIS_CACHE_MIB") {
                let mib = mib.to_str().and_then(|mib| mib.parse::<u64>().ok()).with_context(|| {
                    format!("TRELLIS_CACHE_MIB={} is not a whole number of MiB", mib.to_string_lossy())
                })?;
                options.cache_limit = mib.saturating_mul(1 << 20);
            }
            Runtime::new(options).context("starting the plugin runtime")
        };
        // A project held by a `trellis serve` (sled admits one process)
        // is reached through that server, or, by a command that has no
        // remote form, refused in one line that says where it is.
        let held = match (&globals.server, self.command.project()) {
            (None, Some(project)) => held_by(project),
            _ => None,
        };
        if let (Some((dir, held)), Some(command)) = (&held, self.command.local_only()) {
            anyhow::bail!("{}", announce::held_by_server(dir, held, command));
        }
        // A command with a remote form gathers its data here or from the
        // server, then prints it with the one function both forms share.
        let server = || -> anyhow::Result<Option<remote::Server>> {
            if let Some(server) = globals.server()? {
                return Ok(Some(server));
            }
            let Some((dir, held)) = &held else { return Ok(None) };
            let url = &held.what.url;
            eprintln!("note: `trellis serve` at {url} holds the project in {}; asking it", dir.display());
            Ok(Some(remote::Server::new(url, token(globals.token_file.as_deref())?)?))
        };
        let token = || token(globals.token_file.as_deref());
        match self.command {
            // Writing a crate needs no engine.
            Command::Plugins(plugins::PluginsCommand::New(args)) => scaffold::new(&args),
            Command::Plugins(plugins::PluginsCommand::Build(args)) => plugins::build(&args),
            Command::Plugins(command) => command.run(&runtime()?).await,
            Command::Demo(args) => args.run(&runtime()?).await,
            Command::Validate(args) => validate::validate(&args, &runtime()?).await,
            Command::Views(args) => {
                dispatch(
                    server()?,
                    async |server| views::views_remote(&args, server).await,
                    async || views::views(&args, &runtime()?).await,
                )
                .await
            }
            Command::Deps(args) => deps::deps(&args),
            Command::Logs(args) => logs::run(&args, server()?).await,
            Command::Materialize(args) => {
                dispatch(
                    server()?,
                    async |server| schedule::materialize_remote(&args, server).await,
                    async || schedule::materialize(&args, &runtime()?).await,
                )
                .await
            }
            Command::Coordinate(args) => coordinate::coordinate(&args, &runtime()?).await,
            Command::Coordinators(args) => coordinators::dispatch(coordinators::ask_statuses(&args), server()?).await,
            Command::Actions(args) => coordinators::dispatch(coordinators::ask_actions(&args), server()?).await,
            Command::Suspend(args) => coordinators::dispatch(coordinators::ask_suspend(&args), server()?).await,
            Command::Resume(args) => coordinators::dispatch(coordinators::ask_resume(&args), server()?).await,
            Command::Kill(args) => coordinators::dispatch(coordinators::ask_kill(&args), server()?).await,
            Command::Rerun(args) => coordinators::dispatch(coordinators::ask_rerun(&args), server()?).await,
            Command::Invalidate(args) => {
                dispatch(
                    server()?,
                    async |server| schedule::invalidate_remote(&args, server).await,
                    async || schedule::invalidate(&args).await,
                )
                .await
            }
            Command::Plan(args) => {
                dispatch(
                    server()?,
                    async |server| schedule::plan_remote(&args, server).await,
                    async || schedule::plan(&args, &runtime()?).await,
                )
                .await
            }
            Command::Txlog(args) => txlog::run(&args, runtime, server()?).await,
            Command::Bench(args) => bench::bench(&args, &runtime()?).await,
            Command::Runs(args) => {
                dispatch(server()?, async |server| runs::runs_remote(&args, server).await, async || runs::runs(&args))
                    .await
            }
            Command::Stop(args) => {
                dispatch(server()?, async |server| stop::stop_remote(&args, server).await, async || stop::stop(&args))
                    .await
            }
            Command::Listeners(args) => {
                dispatch(
                    server()?,
                    async |server| listeners::run_remote(&args, server).await,
                    async || listeners::run(&args),
                )
                .await
            }
            Command::Metastore(args) => metastore::run(&args),
            Command::Gc(args) => gc::gc(&args),
            Command::Serve(args) => serve::serve(&args, token()?, &runtime()?).await,
            Command::Reload(args) => {
                dispatch(
                    server()?,
                    async |server| reload::reload_remote(server).await,
                    async || reload::reload(&args, token()?).await,
                )
                .await
            }
            Command::Transformations(args) => {
                dispatch(
                    server()?,
                    async |server| schedule::transformations(&args, server).await,
                    async || schedule::no_transformations_here(),
                )
                .await
            }
            Command::Engines(args) => engines::run(&args, runtime).await,
            Command::Shell => shell::run(&globals).await,
        }
    }
}

/// The server that announced it holds the project in `project`, if it
/// still runs. Only the metastore's path is read from the project file
/// here: the command loads and validates the project itself.
fn held_by(project: &Path) -> Option<(PathBuf, announce::Announced<announce::ServerAddress>)> {
    let metastore = crate::catalog::metastore_path(project)?;
    announce::server_of(&metastore).map(|server| (project.to_path_buf(), server))
}

impl Command {
    /// The project directory of a command that works on one through its
    /// metastore. `serve` and `reload` find their server themselves.
    fn project(&self) -> Option<&Path> {
        let project = match self {
            Command::Views(args) => &args.project,
            Command::Logs(args) => &args.project,
            Command::Materialize(args) => &args.project,
            Command::Coordinate(args) => &args.project,
            Command::Coordinators(args) => &args.project,
            Command::Actions(args) => &args.project,
            Command::Suspend(args) | Command::Resume(args) => &args.project,
            Command::Kill(args) => &args.project,
            Command::Rerun(args) => &args.project,
            Command::Invalidate(args) => &args.project,
            Command::Plan(args) => &args.project,
            Command::Txlog(args) => &args.project,
            Command::Runs(args) => &args.project,
            Command::Stop(args) => &args.project,
            Command::Listeners(args) => &args.project,
            Command::Metastore(args) => &args.project,
            _ => return None,
        };
        Some(&project.project)
    }

    /// The name of a command that opens the metastore and has no remote form.
    fn local_only(&self) -> Option<&'static str> {
        match self {
            Command::Coordinate(_) => Some("coordinate"),
            Command::Metastore(_) => Some("metastore"),
            _ => None,
        }
    }
}

fn default_cache_dir() -> Option<PathBuf> {
    crate::python::env_path("TRELLIS_CACHE_DIR").or_else(crate::python::user_cache_dir)
}

impl Cli {
    /// Whether this is `trellis serve`, a process that writes to sockets.
    pub fn serves(&self) -> bool {
        matches!(self.command, Command::Serve(_))
    }

    /// Logs go to stderr. `TRELLIS_LOG` takes a tracing filter. By default
    /// trellis's own are shown at warn, and plugins' messages at info only
    /// where a plugin's author or a curious user looks at them: `plugins`
    /// commands and `materialize --verbose` (every view keeps its plugin's
    /// lines in its log, for `trellis logs`). A server logs at info, but
    /// for the monitor's line per state change, which `TRELLIS_LOG=info`
    /// turns on; `serve --log-format json` writes JSON lines. Colour only
    /// on a terminal, and never with `NO_COLOR` set (no-color.org).
    pub fn init_logging(&self) {
        let (json, default) = match &self.command {
            // object_store says each retry at info: a failure is the
            // store's error line, once.
            Command::Serve(args) => (args.log_format == "json", "info,trellis::monitor=warn,object_store=warn"),
            Command::Plugins(_) => (false, "warn,trellis::plugin=info"),
            Command::Materialize(args) if args.verbose => (false, "warn,trellis::plugin=info"),
            _ => (false, "warn"),
        };
        // sled's own log lines (through the `log` crate) say in its words
        // what the metastore's one-line errors already say: they are off
        // unless TRELLIS_LOG names sled.
        let filter = match std::env::var("TRELLIS_LOG") {
            Ok(filter) if filter.contains("sled") => filter,
            Ok(filter) => format!("{filter},sled=off"),
            Err(_) => format!("{default},sled=off"),
        };
        let filter = tracing_subscriber::EnvFilter::try_new(&filter)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},sled=off")));
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
        if json {
            builder.json().init();
        } else {
            builder.with_target(false).with_ansi(colour_on_stderr()).init();
        }
    }
}

/// Whether what goes to stderr may carry colour codes.
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    std::io::stderr().is_terminal() && !no_color
}

/// Parses `KEY=VALUE` (configuration) arguments.
fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_string(), value.to_string())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// Parses `NAME=PATH` arguments.
fn named_path(text: &str) -> Result<(String, PathBuf), String> {
    key_value(text).map(|(name, path)| (name, PathBuf::from(path)))
}

#[cfg(test)]
mod tests {

    /// Every flag and argument of every command says what it is for.
    #[test]
    fn every_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if ["help", "version"].contains(&id) || arg.is_hide_set() {
                    continue;
                }
                if arg.get_help().is_none_or(|help| help.to_string().trim().is_empty()) {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "trellis", &mut missing);
        // A command without a remote form refuses --server, saying why.
        let refused = super::Cli::command().try_get_matches_from(["trellis", "validate", "--server", "http://x"]);
        let error = refused.unwrap_err().to_string();
        assert!(error.contains("`trellis validate` has no remote form"), "{error}");
        let accepted = super::Cli::command().try_get_matches_from(["trellis", "views", "--server", "http://x"]);
        assert!(accepted.is_ok(), "{accepted:?}");
        assert!(missing.is_empty(), "arguments without help:\n{}", missing.join("\n"));
    }
}
