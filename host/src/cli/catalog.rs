//! `trellis validate`, `trellis views` and `trellis deps`: load a project,
//! instantiate views and explain their dependencies, without transforming.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;

use super::Status;
use super::remote::{self, Server};
use crate::api::wire;
use crate::catalog::{self, Catalog, Transformation};
use crate::lattice::{Lattice, Resolution, ViewId, on_disk};
use crate::metastore::{FlowRecord, Metastore, RunRecord};
use crate::model::{Counters, FlowStatus, RunStatus, ViewCondition, ViewState};

#[derive(Debug, Args)]
pub(super) struct ProjectArgs {
    /// The project directory, holding trellis.toml
    // Global, so that a subcommand (`listeners enable NAME -p DIR`) takes them too.
    #[arg(long, short = 'p', default_value = ".", value_name = "DIR", global = true)]
    pub(super) project: PathBuf,
    /// Print JSON instead of text
    #[arg(long, global = true)]
    pub(super) json: bool,
}

#[derive(Debug, Args)]
pub(super) struct ViewsArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// A view pattern, e.g. shop.datamart/DailySales/SHOP10/rymd(20150501-20150507)
    /// [default: every view the metastore records, or that a server has instantiated]
    #[arg(long, short = 'v', value_name = "PATTERN")]
    views: Option<String>,
    /// Also list the views they depend on, transitively
    #[arg(long, short = 'd')]
    deps: bool,
    /// Only views in this scheduling state (receive, invalidated, no-data, materialized, failed);
    /// invalidated also lists views with an invalidation pending
    #[arg(long, short = 's', value_name = "STATE", value_parser = str::parse::<ViewState>)]
    status: Option<ViewState>,
    /// Only views whose URL path matches this regular expression
    #[arg(long, short = 'f', value_name = "REGEX", value_parser = crate::model::view_filter)]
    filter: Option<regex::Regex>,
    /// Only count the views per state
    #[arg(long, short = 'o')]
    overview: bool,
}

#[derive(Debug, Args)]
pub(super) struct DepsArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    #[command(flatten)]
    view: ViewArg,
    /// The evaluation time for latest(), e.g. 2015-05-03T12:00Z (as every --now takes it)
    /// [default: $TRELLIS_NOW, else the clock]
    #[arg(long, value_name = "TIME", value_parser = crate::clock::parse_time)]
    now: Option<DateTime<Utc>>,
    /// Print the pattern's views and everything they depend on as a Graphviz DOT graph
    /// (an edge from each dependency to its dependent)
    #[arg(long, conflicts_with = "json")]
    dot: bool,
    /// List the views that depend on VIEW, transitively, with how many steps away:
    /// of the views the metastore records, and what they depend on
    #[arg(long, conflicts_with = "dot")]
    downstream: bool,
}

/// One view, named as `deps` and `logs` always took it (after the
/// command) or with `-v`, as the other commands take their views.
#[derive(Debug, Args)]
pub(super) struct ViewArg {
    /// The view's URL path, e.g. shop.datamart/MonthlySales/SHOP10/2015/05 (`deps --dot`: a view pattern)
    #[arg(value_name = "VIEW", required_unless_present = "view_flag")]
    positional: Option<String>,
    /// The same, given as other commands take their views
    #[arg(id = "view_flag", long = "views", short = 'v', value_name = "VIEW", conflicts_with = "positional")]
    flag: Option<String>,
}

impl ViewArg {
    pub(super) fn get(&self) -> &str {
        self.positional.as_deref().or(self.flag.as_deref()).unwrap_or_default()
    }
}

/// Loads the project; on problems, prints each on its own line (file and
/// line first) and fails with their count.
pub(super) fn load(project: &Path) -> anyhow::Result<Arc<Catalog>> {
    match catalog::load(project) {
        Ok(catalog) => Ok(Arc::new(catalog)),
        Err(catalog::LoadError::Invalid(diagnostics)) => {
            for diagnostic in &diagnostics {
                eprintln!("{}", path_of(project, diagnostic));
            }
            let file = project.join(catalog::PROJECT_FILE);
            bail!("{} problem{} in {}", diagnostics.len(), plural(diagnostics.len()), file.display());
        }
        Err(other) => Err(other.into()),
    }
}

/// Loads a project that a command is to run (`materialize`, `serve`),
/// refusing one that declares no view type: an empty or comment-only file is
/// valid, but running it would quietly do nothing.
pub(super) fn load_to_run(project: &Path, command: &str) -> anyhow::Result<Arc<Catalog>> {
    let catalog = load(project)?;
    if catalog.types().is_empty() {
        bail!("{}; there is nothing to {command}", no_view_types(project));
    }
    Ok(catalog)
}

fn no_view_types(project: &Path) -> String {
    format!("{} declares no view type (no [[view]] table)", project.join(catalog::PROJECT_FILE).display())
}

pub(super) async fn validate(args: &ProjectArgs, runtime: &crate::runtime::Runtime) -> anyhow::Result<Status> {
    let catalog = load(&args.project)?;
    // The file is valid; then how its views use their plugins, as far as
    // they are there (a project is often validated before its plugins are built).
    for (name, decl) in &catalog.plugins {
        if !decl.file.exists() {
            // A project may be written before its plugins are built: a
            // warning here, which says what `materialize` will do.
            eprintln!(
                "warning: plugin {name}: {} does not exist yet, so its use is not checked; materialize refuses to run until it does",
                decl.file.display()
            );
        }
    }
    let plugins = crate::plugins::Plugins::load(runtime, &catalog).await;
    for warning in &plugins.warnings {
        eprintln!("warning: {}", path_of(&args.project, warning));
    }
    let on_spark = plugins.engine_types(&catalog);
    if !on_spark.is_empty()
        && let Err(reason) =
            crate::engines::spark::locate(&catalog.settings.spark, crate::python::default_tools_dir().as_deref())
    {
        let names: Vec<&str> = on_spark.iter().map(|t| t.name.as_str()).collect();
        eprintln!(
            "warning: {} run{} on Spark, which is not available here: {reason}; materialize refuses {} until it is",
            names.join(", "),
            if names.len() == 1 { "s" } else { "" },
            if names.len() == 1 { "its views" } else { "their views" }
        );
    }
    let problems = plugins.problems;
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("{}", path_of(&args.project, problem));
        }
        let file = args.project.join(catalog::PROJECT_FILE);
        bail!("{} problem{} in {}", problems.len(), plural(problems.len()), file.display());
    }
    let types = catalog.types();
    if types.is_empty() {
        eprintln!("warning: {}; materialize and serve will refuse it", no_view_types(&args.project));
    }
    let now = crate::clock::Clock::from_environment().map_err(anyhow::Error::msg)?.now();
    for warning in many_due(&catalog, now) {
        eprintln!("{warning}");
    }
    if args.json {
        let value = serde_json::json!({
            "project": catalog.settings.name,
            "storage": catalog.settings.storage,
            "plugins": catalog.plugins.keys().collect::<Vec<_>>(),
            "view_types": types.iter().map(|t| serde_json::json!({
                "name": t.name,
                "parameters": t.parameters.iter().map(|p| &p.name).collect::<Vec<_>>(),
                "time": t.time.as_ref().map(|d| d.frequency().to_string()),
                "transformation": transformation_name(&t.transformation),
                "resources": resources_of(&t.transformation).iter().map(|r| serde_json::json!({ "name": r.name, "blake3": r.hash })).collect::<Vec<_>>(),
                "dependencies": t.dependencies.iter().map(|d| catalog.get(d.target).name.as_str()).collect::<Vec<_>>(),
                "schema_checksum": t.schema_checksum,
            })).collect::<Vec<_>>(),
            "listeners": catalog.listeners.iter().map(|l| serde_json::json!({ "name": l.name, "plugin": l.plugin })).collect::<Vec<_>>(),
            "coordinators": catalog.coordinators.iter().map(|c| serde_json::json!({
                "name": c.name,
                "views": c.views,
                "frequency": c.frequency_text(),
                "timezone": c.timezone.name(),
                "next": next_nominal_times(c, now).iter().map(|t| t.to_rfc3339()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "monitor": catalog.settings.events.monitor,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(Status::Success);
    }
    // One line per view type: buffered, since stdout flushes every line.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(
        out,
        "project {}: {} view type{}, {} plugin{}",
        catalog.settings.name,
        types.len(),
        plural(types.len()),
        catalog.plugins.len(),
        plural(catalog.plugins.len())
    )?;
    for view_type in types {
        let params: Vec<&str> = view_type.parameters.iter().map(|p| p.name.as_str()).collect();
        let time = view_type.time.as_ref().map(|d| format!(" every {}", d.frequency())).unwrap_or_default();
        let deps: Vec<&str> = view_type.dependencies.iter().map(|d| catalog.get(d.target).name.as_str()).collect();
        let deps = if deps.is_empty() { String::new() } else { format!(" <- {}", deps.join(", ")) };
        writeln!(
            out,
            "  {}({}){time} [{}{}]{deps}",
            view_type.name,
            params.join(", "),
            transformation_name(&view_type.transformation),
            if view_type.incremental { ", incremental" } else { "" }
        )?;
        for resource in resources_of(&view_type.transformation) {
            writeln!(
                out,
                "    resource {} (blake3 {}, {} bytes)",
                resource.name,
                resource.hash,
                resource.content.len()
            )?;
        }
    }
    for listener in &catalog.listeners {
        writeln!(out, "  listener {} [{}]", listener.name, listener.plugin)?;
    }
    for coordinator in &catalog.coordinators {
        let next: Vec<String> = next_nominal_times(coordinator, now).iter().map(|t| t.to_rfc3339()).collect();
        let next = if next.is_empty() { "none (ended)".to_string() } else { next.join(", ") };
        writeln!(
            out,
            "  coordinator {} every {} ({}): {}; next {next}",
            coordinator.name,
            coordinator.frequency_text(),
            coordinator.timezone.name(),
            coordinator.views
        )?;
    }
    out.flush()?;
    Ok(Status::Success)
}

/// The first three nominal times at or after `now`, in the coordinator's
/// timezone.
/// A warning per coordinator with more than `MANY_DUE` actions due now:
/// from the last one the metastore records (none yet: from its start). A
/// metastore a server holds is not read: the server warned as it started.
fn many_due(catalog: &Catalog, now: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    use crate::catalog::coordinator::MANY_DUE;
    if catalog.coordinators.is_empty() {
        return Vec::new();
    }
    let records: std::collections::HashMap<String, crate::metastore::CoordinatorRecord> =
        if catalog.settings.metastore.exists() {
            match Metastore::open(&catalog.settings.metastore).and_then(|store| store.coordinator_records()) {
                Ok(records) => records.into_iter().collect(),
                Err(_) => return Vec::new(),
            }
        } else {
            Default::default()
        };
    catalog
        .coordinators
        .iter()
        .filter_map(|coordinator| {
            let last = records.get(&coordinator.name).and_then(|r| r.last_nominal);
            let last = last.and_then(chrono::DateTime::from_timestamp_millis);
            let lag = coordinator.lag(last, now, MANY_DUE);
            lag.more.then(|| crate::scheduler::coordinate::many_due_warning(coordinator, &lag))
        })
        .collect()
}

fn next_nominal_times(
    coordinator: &catalog::coordinator::Coordinator,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<chrono::DateTime<chrono_tz::Tz>> {
    let just_before = now - chrono::TimeDelta::nanoseconds(1);
    coordinator.nominal_times_after(Some(just_before)).take(3).map(|t| t.with_timezone(&coordinator.timezone)).collect()
}

fn path_of(project: &Path, diagnostic: &catalog::Diagnostic) -> String {
    let file = project.join(diagnostic.file.as_deref().unwrap_or(catalog::PROJECT_FILE));
    match diagnostic.line {
        Some(line) => format!("{}:{line}: {}", file.display(), diagnostic.message),
        None => format!("{}: {}", file.display(), diagnostic.message),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The files a type's transformation reads its logic from.
fn resources_of(transformation: &Transformation) -> &[catalog::Resource] {
    match transformation {
        Transformation::External => &[],
        Transformation::Plugin { resources, .. } => resources,
    }
}

fn transformation_name(transformation: &Transformation) -> &str {
    match transformation {
        Transformation::External => "noop",
        Transformation::Plugin { plugin, .. } => plugin,
    }
}

pub(super) async fn views(args: &ViewsArgs, runtime: &crate::runtime::Runtime) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let mut lattice = Lattice::new(catalog.clone());
    let storage = crate::storage::LocalDir::new(&catalog.settings.storage);
    let resolution = Resolution { evaluation_time: Utc::now(), exists: &on_disk(&storage) };
    // States come from the metastore when there is one; listing views must
    // not create it.
    let store =
        if catalog.settings.metastore.exists() { Some(Metastore::open(&catalog.settings.metastore)?) } else { None };
    // Without a pattern, the records are read here once, and kept for the rows.
    let mut recorded = std::collections::HashMap::new();
    let addressed = match &args.views {
        Some(views) => lattice.instantiate(&catalog::pattern::parse(views)?, &resolution)?,
        None => recorded_views(store.as_ref(), &mut lattice, &resolution, &mut recorded)?,
    };
    let listed: Vec<ViewId> = if args.deps { lattice.closure(&addressed) } else { dedup(addressed) };
    let mut rows = Vec::new();
    for id in listed {
        let url = lattice.url_path(id);
        // Filtered here too, so that a narrow filter reads few records.
        if args.filter.as_ref().is_some_and(|regex| !regex.is_match(&url)) {
            continue;
        }
        let record = match (recorded.remove(&url), &store) {
            (Some(record), _) => record,
            (None, Some(store)) => store.view(&url)?.unwrap_or_default(),
            (None, None) => crate::metastore::ViewRecord::default(),
        };
        rows.push(ViewRow {
            view: url,
            condition: record.condition(),
            data_path: lattice.data_path(id).display().to_string(),
            counters: record.counters,
            last_error: record.last_error,
            // Only a server's views retry while they are listed.
            network_error: None,
            stale: None,
        });
    }
    let mut listing = select(args, rows);
    if let Listing::Views(rows) = &mut listing
        && rows.iter().any(|row| row.condition.state == ViewState::Materialized)
    {
        // The metastore is the scheduler's to open now.
        drop(store);
        judge_stale(&catalog, runtime, rows).await;
    }
    print_views(&listing, args)
}

/// Marks the materialized rows that `plan` would rematerialize, with its
/// reason: the scheduler's own judgement. When it cannot be made (a plugin
/// that does not load), stderr says so rather than showing them current.
async fn judge_stale(catalog: &Arc<Catalog>, runtime: &crate::runtime::Runtime, rows: &mut [ViewRow]) {
    let judged = async {
        let plugins = Arc::new(crate::plugins::Plugins::load(runtime, catalog).await);
        let mut scheduler = crate::scheduler::Scheduler::open(catalog.clone(), plugins).await?;
        let mut indexes = std::collections::HashMap::new();
        for row in rows.iter().filter(|row| row.condition.state == ViewState::Materialized) {
            if let [id] = scheduler.instantiate(&row.view)?[..] {
                indexes.insert(id.0, row.view.clone());
            }
        }
        let stale = scheduler.stale(&indexes.keys().copied().collect::<Vec<_>>())?;
        Ok::<_, crate::scheduler::Error>(
            stale
                .into_iter()
                .filter_map(|(id, outdated)| Some((indexes.remove(&id)?, outdated.to_string())))
                .collect::<std::collections::HashMap<_, _>>(),
        )
    };
    match judged.await {
        Ok(mut stale) => {
            for row in rows {
                row.stale = stale.remove(&row.view);
            }
        }
        Err(e) => eprintln!("whether the materialized views are stale was not judged: {e}"),
    }
}

/// Without a pattern, the views the metastore records, instantiated in
/// the project as it is now, their records kept in `records` by URL path;
/// a recorded view whose type the project no longer declares (or declares
/// otherwise) is counted on stderr.
fn recorded_views(
    store: Option<&Metastore>,
    lattice: &mut Lattice,
    resolution: &Resolution<'_>,
    records: &mut std::collections::HashMap<String, crate::metastore::ViewRecord>,
) -> anyhow::Result<Vec<ViewId>> {
    let Some(store) = store else { return Ok(Vec::new()) };
    let mut ids = Vec::new();
    let mut strays = 0;
    for entry in store.views_with_prefix("") {
        let (url, record) = entry?;
        let instantiated = catalog::pattern::parse(&url)
            .ok()
            .and_then(|pattern| lattice.instantiate(&pattern, resolution).ok())
            .and_then(|views| views.first().copied());
        match instantiated {
            // Keyed as the lattice writes the URL path, which is how the rows look it up.
            Some(id) => {
                ids.push(id);
                records.insert(lattice.url_path(id).to_string(), record);
            }
            None => strays += 1,
        }
    }
    if strays > 0 {
        let strays = crate::model::plural(strays, "view", "views");
        eprintln!("note: {strays} in the metastore are not in the project as it is now, and not listed");
    }
    Ok(ids)
}

/// `trellis views` with a server: the server selects, counts and, with
/// `--deps`, gathers the closure, in the order embedded mode lists it.
pub(super) async fn views_remote(args: &ViewsArgs, server: &Server) -> anyhow::Result<Status> {
    let query = wire::ViewsQuery {
        status: args.status,
        filter: args.filter.as_ref().map(|regex| regex.as_str().to_string()),
        closure: args.deps.then_some(true),
        ..wire::ViewsQuery::default()
    };
    if args.overview {
        let overview: wire::Overview = server
            .get(&remote::views_path(args.views.as_deref()), &wire::ViewsQuery { overview: Some(true), ..query })
            .await?;
        let mut counts = Vec::new();
        for (state, n) in overview.overview {
            counts.push((state.parse::<ViewState>().map_err(anyhow::Error::msg)?, n));
        }
        counts.sort();
        return print_views(&Listing::Overview { counts, total: overview.total }, args);
    }
    let rows = server
        .views(args.views.as_deref(), query)
        .await?
        .into_iter()
        .map(|view| ViewRow {
            condition: ViewCondition {
                state: view.state,
                incomplete: view.incomplete,
                errors: view.errors,
                invalidation_pending: view.invalidation_pending,
            },
            view: view.view,
            data_path: view.data_path,
            counters: view.counters,
            last_error: view.last_error,
            network_error: view.network_error,
            stale: view.stale_reason,
        })
        .collect();
    print_views(&Listing::Views(rows), args)
}

/// One line of `trellis views`.
struct ViewRow {
    view: String,
    /// Its state and flags, as the metastore or the server says.
    condition: ViewCondition,
    data_path: String,
    /// What its transformation returned when it last materialized it.
    counters: Option<Counters>,
    /// Why its last transformation failed.
    last_error: Option<String>,
    /// Retrying for network trouble: the last error.
    network_error: Option<String>,
    /// Materialized, and the next run rebuilds it: why, as `plan` says.
    stale: Option<String>,
}

/// What `trellis views` prints: views, or their counts per state.
enum Listing {
    Views(Vec<ViewRow>),
    /// Counts in `ViewState::ALL` order, states without views left out.
    Overview {
        counts: Vec<(ViewState, usize)>,
        total: usize,
    },
}

/// The rows `-f` and `-s` keep, counted with `--overview`.
fn select(args: &ViewsArgs, mut rows: Vec<ViewRow>) -> Listing {
    rows.retain(|row| {
        args.filter.as_ref().is_none_or(|regex| regex.is_match(&row.view))
            && args.status.is_none_or(|wanted| row.condition.is_in(wanted))
    });
    if !args.overview {
        return Listing::Views(rows);
    }
    let mut counts: Vec<(ViewState, usize)> =
        ViewState::ALL.iter().map(|s| (*s, rows.iter().filter(|row| row.condition.state == *s).count())).collect();
    counts.retain(|(_, n)| *n > 0);
    Listing::Overview { counts, total: rows.len() }
}

fn print_views(listing: &Listing, args: &ViewsArgs) -> anyhow::Result<Status> {
    let json = args.project.json;
    match listing {
        Listing::Overview { counts, total } => {
            if json {
                let map: serde_json::Map<String, serde_json::Value> =
                    counts.iter().map(|(s, n)| (s.as_str().to_string(), serde_json::Value::from(*n))).collect();
                println!("{}", serde_json::to_string_pretty(&map)?);
            } else {
                for (state, n) in counts {
                    println!("{:<13} {n}", state.as_str());
                }
                println!("{:<13} {total}", "total");
            }
        }
        Listing::Views(rows) if json => {
            let views: Vec<_> = rows
                .iter()
                .map(|row| {
                    let c = &row.condition;
                    let mut value = serde_json::json!({
                        "view": row.view,
                        "state": c.state,
                        "incomplete": c.incomplete,
                        "errors": c.errors,
                        "invalidation_pending": c.invalidation_pending,
                        "stale": row.stale.is_some(),
                        "data_path": row.data_path,
                    });
                    if let Some(reason) = &row.stale {
                        value["stale_reason"] = serde_json::json!(reason);
                    }
                    if let Some(counters) = &row.counters {
                        value["counters"] = serde_json::json!(counters);
                    }
                    if let Some(error) = &row.last_error {
                        value["last_error"] = serde_json::json!(error);
                    }
                    if let Some(error) = &row.network_error {
                        value["network_error"] = serde_json::json!(error);
                    }
                    value
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&views)?);
        }
        Listing::Views(rows) => {
            for row in rows {
                let c = &row.condition;
                // A failed view says why, on its own line's end, as one line.
                let one_line = |error: &str| error.split_whitespace().collect::<Vec<_>>().join(" ");
                let error = match (&row.last_error, &row.network_error, c.state) {
                    (Some(error), _, ViewState::Failed) => format!("  error: {}", one_line(error)),
                    (_, Some(error), ViewState::Retrying) => format!("  error: {}", one_line(error)),
                    _ => String::new(),
                };
                // Network trouble is retried without limit, and says so.
                let state = match (&row.network_error, c.state) {
                    (Some(_), ViewState::Retrying) => "retrying (network)".to_string(),
                    (_, state) => state.to_string(),
                };
                // Materialized, but not current: the next run rebuilds it.
                let stale = row.stale.as_ref().map(|reason| format!("  stale: {reason}")).unwrap_or_default();
                println!(
                    "{}  {}{}  {}{}{error}{stale}",
                    row.view,
                    state,
                    c.flags_text(),
                    row.data_path,
                    counters_text(row.counters.as_ref())
                );
            }
        }
    }
    Ok(Status::Success)
}

/// `trellis runs [ID]`: the runs recorded in the metastore, or one run's
/// flow statuses (views that were only found up to date are counted, not
/// listed).
pub(super) fn runs(args: &RunsArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    if !catalog.settings.metastore.exists() {
        println!("no runs yet");
        return Ok(Status::Success);
    }
    let store = Metastore::open(&catalog.settings.metastore)?;
    match &args.id {
        None => {
            let runs: Vec<(RunRecord, usize)> = store
                .runs()?
                .into_iter()
                .map(|run| {
                    let transformed = run.attempts.len();
                    (run, transformed)
                })
                .collect();
            print_runs(&runs, args.project.json)
        }
        Some(id) => {
            let run = store.run(id)?.ok_or_else(|| anyhow::anyhow!("no run `{id}` (see `trellis runs`)"))?;
            if args.project.json {
                // The metastore opened here: no process is running it, so
                // a run without its end was interrupted.
                let status = if run.termination.is_some() { RunStatus::Finished } else { RunStatus::Interrupted };
                return print_detail(crate::api::run_detail(&store, run, status, Vec::new())?, args);
            }
            print_run(&run, &store.flow_records(id)?, args)
        }
    }
}

/// `trellis runs [ID]` with a server.
pub(super) async fn runs_remote(args: &RunsArgs, server: &Server) -> anyhow::Result<Status> {
    match &args.id {
        None => {
            let listed: Vec<wire::Run> = server.get("runs", remote::NO_QUERY).await?;
            let runs: Vec<(RunRecord, usize)> = listed
                .into_iter()
                .map(|run| {
                    let transformed = run.transformed;
                    (run_record(run), transformed)
                })
                .collect();
            print_runs(&runs, args.project.json)
        }
        Some(id) => {
            let detail = run_detail(server, id).await?;
            if args.project.json {
                return print_detail(detail, args);
            }
            let mut run = run_record(detail.run);
            run.attempts = detail.flows.iter().filter_map(|f| Some((f.view.clone(), f.attempts?))).collect();
            print_run(&run, &flow_records_of(detail.flows), args)
        }
    }
}

pub(super) async fn run_detail(server: &Server, id: &str) -> anyhow::Result<wire::RunDetail> {
    server.get(&remote::path("runs", id), remote::NO_QUERY).await
}

/// A run as the metastore records it, from the server's account of it.
fn run_record(run: wire::Run) -> RunRecord {
    RunRecord {
        id: run.id,
        pattern: run.pattern,
        mode: run.mode,
        started: run.started,
        finished: run.finished,
        termination: run.termination,
        idle: run.idle,
        full_refresh: run.full_refresh,
        attempts: Default::default(),
        action: run.action,
        no_data: run.no_data,
        flow_counts: run.flow_counts,
    }
}

/// A run's flows as the printing functions take them.
pub(super) fn flows_of(flows: Vec<wire::Flow>) -> Vec<(String, FlowStatus)> {
    flows.into_iter().map(|flow| (flow.view, flow.status)).collect()
}

/// A run's flows with what it recorded of each, from the server's account.
fn flow_records_of(flows: Vec<wire::Flow>) -> Vec<(String, FlowRecord)> {
    flows
        .into_iter()
        .map(|flow| {
            let record =
                FlowRecord { status: flow.status, error: flow.error, counters: flow.counters, reason: flow.reason };
            (flow.view, record)
        })
        .collect()
}

/// Counters as `  [name=value ...]` after a line, or nothing.
fn counters_text(counters: Option<&Counters>) -> String {
    match counters {
        Some(counters) if !counters.is_empty() => {
            let pairs: Vec<String> = counters.iter().map(|(name, value)| format!("{name}={value}")).collect();
            format!("  [{}]", pairs.join(" "))
        }
        _ => String::new(),
    }
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default()
}

/// How a run ended, or that it has not (yet).
fn termination_text(run: &RunRecord) -> String {
    run.termination.as_ref().map_or_else(|| "running or interrupted".to_string(), ToString::to_string)
}

/// A run as JSON: its record, with how it ended typed and its times as
/// the API gives them.
fn run_json(run: &RunRecord) -> anyhow::Result<serde_json::Value> {
    let mut value = serde_json::to_value(run)?;
    // The metastore keeps the variant; JSON shows the prose, as the API does.
    value["termination"] = serde_json::to_value(&run.termination)?;
    if let Some(termination) = &run.termination {
        value["ended"] = serde_json::to_value(wire::Ended::from(termination))?;
    }
    value["started_at"] = wire::millis_text(run.started).into();
    value["finished_at"] = run.finished.map(wire::millis_text).into();
    value["duration_ms"] = run.duration_ms().into();
    Ok(value)
}

/// How long a run took, or `-` while it has not ended.
fn run_duration(run: &RunRecord) -> String {
    run.duration_ms().map_or_else(|| "-".to_string(), crate::model::duration)
}

/// Runs, each with how many views it transformed (a server lists that
/// count rather than each view's attempts).
fn print_runs(runs: &[(RunRecord, usize)], json: bool) -> anyhow::Result<Status> {
    if json {
        // Attempts are the run's detail (`runs ID`), as the server lists runs.
        let runs = runs
            .iter()
            .map(|(run, transformed)| {
                let mut value = run_json(&RunRecord { attempts: Default::default(), ..run.clone() })?;
                value["transformed"] = (*transformed).into();
                Ok(value)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else {
        for (run, transformed) in runs {
            let termination = termination_text(run);
            let counts = listed_counts(run, *transformed);
            println!(
                "{}  {}  {:>10}  {:<8} {}  {termination} ({counts})",
                run.id,
                time(run.started),
                run_duration(run),
                run.mode,
                run.pattern
            );
        }
    }
    Ok(Status::Success)
}

fn print_run(run: &RunRecord, flows: &[(String, FlowRecord)], args: &RunsArgs) -> anyhow::Result<Status> {
    let listed = flows.iter().filter(|(_, flow)| args.status.is_none_or(|wanted| flow.status == wanted));
    println!("run {} ({}, {}): {}", run.id, run.mode, run.pattern, termination_text(run));
    let finished = run.finished.map_or_else(|| "not finished".to_string(), |ms| format!("finished {}", time(ms)));
    println!("  started {}, {finished}, took {}", time(run.started), run_duration(run));
    println!("  {}", super::schedule::flow_counts(flows.iter().map(|(_, flow)| flow.status), run.idle, run.no_data));
    // What happened to each view in this run, as the run recorded it.
    for (view, flow) in listed {
        // Attempts are worth a word only when there was more than one.
        let attempts = match run.attempts.get(view) {
            Some(&attempts) if attempts > 1 => format!("  ({attempts} attempts)"),
            _ => String::new(),
        };
        let counters = counters_text(flow.counters.as_ref());
        println!("  {:<22} {view}{attempts}{counters}", crate::model::wire_name(&flow.status));
        if let Some(error) = &flow.error {
            println!("    error: {error}");
        }
        if let Some(reason) = &flow.reason {
            println!("    {reason}");
        }
    }
    Ok(Status::Success)
}

/// A run's detail as JSON, as the API gives it (`GET /runs/{id}`), its
/// flows those of `--status` if given.
fn print_detail(mut detail: wire::RunDetail, args: &RunsArgs) -> anyhow::Result<Status> {
    detail.flows.retain(|flow| args.status.is_none_or(|wanted| flow.status == wanted));
    println!("{}", serde_json::to_string_pretty(&detail)?);
    Ok(Status::Success)
}

/// A listed run's counts, in the words of its own summary (`3 views: 3
/// successful`); a record from before those were kept has its count of
/// views transformed and found up to date.
fn listed_counts(run: &RunRecord, transformed: usize) -> String {
    if run.flow_counts.is_empty() {
        return format!("{transformed} transformed, {} up to date", run.idle);
    }
    let flows = run.flow_counts.iter().filter_map(|(status, &n)| {
        let status: FlowStatus = crate::model::from_wire_name(status)?;
        (status != FlowStatus::Idle).then(|| std::iter::repeat_n(status, n))
    });
    super::schedule::flow_counts(flows.flatten(), run.idle, run.no_data)
}

#[derive(Debug, Args)]
pub(super) struct RunsArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
    /// A run's id, to show its views' flow statuses
    id: Option<String>,
    /// With a run's id: only its views with this flow status (SUCCESSFUL, TERMINATED_WITH_ERROR,
    /// SKIPPED, CANCELED, EXCLUDED, RUNNING, STARTING, QUEUED)
    #[arg(long, short = 's', value_name = "STATUS", value_parser = flow_status, requires = "id")]
    status: Option<FlowStatus>,
}

fn flow_status(text: &str) -> Result<FlowStatus, String> {
    crate::model::from_wire_name(&text.to_uppercase()).ok_or_else(|| {
        format!(
            "`{text}` is not a flow status (SUCCESSFUL, TERMINATED_WITH_ERROR, SKIPPED, CANCELED, EXCLUDED, RUNNING, STARTING, QUEUED)"
        )
    })
}

fn dedup(mut ids: Vec<ViewId>) -> Vec<ViewId> {
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(*id));
    ids
}

/// `views` and their edges as a Graphviz DOT graph, each edge from a
/// dependency to its dependent (data flows along it), nodes in the given
/// order, edges in dependency order.
fn dot(lattice: &Lattice, views: &[ViewId]) -> String {
    let quoted = |id: ViewId| format!("\"{}\"", lattice.url_path(id).replace('\\', "\\\\").replace('"', "\\\""));
    let mut out = String::from("digraph trellis {\n  rankdir=LR;\n  node [shape=box];\n");
    for &id in views {
        out.push_str(&format!("  {};\n", quoted(id)));
    }
    for &id in views {
        let mut dependencies = lattice.dependencies(id).to_vec();
        dependencies.dedup();
        for dependency in dependencies {
            out.push_str(&format!("  {} -> {};\n", quoted(dependency), quoted(id)));
        }
    }
    out.push_str("}\n");
    out
}

pub(super) fn deps(args: &DepsArgs) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let now: DateTime<Utc> = match args.now {
        Some(now) => now,
        None => crate::clock::Clock::from_environment().map_err(anyhow::Error::msg)?.now(),
    };
    let mut lattice = Lattice::new(catalog.clone());
    let storage = crate::storage::LocalDir::new(&catalog.settings.storage);
    let resolution = Resolution { evaluation_time: now, exists: &on_disk(&storage) };
    if args.dot {
        let pattern = catalog::pattern::parse(args.view.get())?;
        let addressed = lattice.instantiate(&pattern, &resolution)?;
        print!("{}", dot(&lattice, &lattice.closure(&addressed)));
        return Ok(Status::Success);
    }
    let id = lattice.view(args.view.get(), &resolution)?;
    if args.downstream {
        return downstream(args, &catalog, &mut lattice, &resolution, id);
    }
    let view_type = lattice.view_type(id);
    let groups = lattice.dependencies_by_declaration(id);
    let by_name: Vec<(&str, Vec<ViewId>)> =
        view_type.dependencies.iter().map(|d| d.name.as_str()).zip(groups).collect();
    let missing = lattice.unsatisfied(id);
    let data_out = lattice.data_path(id).display().to_string();
    let path_of = |d: ViewId| lattice.data_path(d).display().to_string();
    let config =
        lattice.config(id, now, &data_out, &path_of).map_err(|e| anyhow::anyhow!("{}: {e}", args.view.get()))?;
    // What its `latest()` read when last materialized, from its record
    // when there is a metastore (it is not created for this). Only an
    // addition: a metastore held by a server, or unreadable, leaves it out
    // rather than failing `deps`, which needs no metastore.
    let read = match lattice.has_latest(id) && catalog.settings.metastore.exists() {
        true => Metastore::open(&catalog.settings.metastore)
            .ok()
            .and_then(|store| store.view(&lattice.url_path(id)).ok().flatten())
            .and_then(|record| record.latest),
        false => None,
    };
    if args.project.json {
        let value = serde_json::json!({
            "view": lattice.url_path(id),
            "data_path": lattice.data_path(id),
            "dependencies": by_name.iter().map(|(name, ids)| serde_json::json!({
                "name": name,
                "views": ids.iter().map(|&d| serde_json::json!({ "view": lattice.url_path(d), "data_path": lattice.data_path(d) })).collect::<Vec<_>>(),
                "data_in": data_in(&lattice, ids),
                "missing": missing.contains(name),
            })).collect::<Vec<_>>(),
            "config": config.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str()))).collect::<serde_json::Map<_, _>>(),
            "latest_read": read,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(Status::Success);
    }
    println!("{}  {}", lattice.url_path(id), lattice.data_path(id).display());
    for (name, ids) in by_name {
        println!("  {name}: {} view{}", ids.len(), plural(ids.len()));
        if missing.contains(&name) {
            println!("    missing: latest() found no instance with data");
        }
        for &dependency in &ids {
            println!("    {}  {}", lattice.url_path(dependency), lattice.data_path(dependency).display());
        }
        println!("    dataIn('{name}') = {}", data_in(&lattice, &ids));
    }
    if let Some(read) = &read {
        let read = if read.is_empty() { "no instance".to_string() } else { read.join(", ") };
        println!("  latest() read when last materialized: {read}");
    }
    if !config.is_empty() {
        println!("  config (actual time {}):", now.format("%Y-%m-%dT%H:%MZ"));
        for (key, value) in config {
            println!("    {key} = {value}");
        }
    }
    Ok(Status::Success)
}

/// `deps --downstream VIEW`. A dependency's expression maps a dependent to
/// its inputs, not back, so the views that may depend on VIEW are taken
/// from what the metastore records (every view materialized, failed or
/// found without data once) of the types that reach VIEW's type; each is
/// instantiated with its closure, and the edges read backwards from VIEW.
fn downstream(
    args: &DepsArgs,
    catalog: &Catalog,
    lattice: &mut Lattice,
    resolution: &Resolution<'_>,
    id: ViewId,
) -> anyhow::Result<Status> {
    // The types with a path of dependencies to VIEW's type.
    let target = lattice.view_type(id).name.clone();
    let mut reaching: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut grown = true;
    while grown {
        grown = false;
        for view_type in catalog.types() {
            if reaching.contains(&view_type.name) {
                continue;
            }
            let depends = view_type.dependencies.iter().any(|dependency| {
                let name = &catalog.get(dependency.target).name;
                *name == target || reaching.contains(name)
            });
            if depends {
                reaching.insert(view_type.name.clone());
                grown = true;
            }
        }
    }
    let mut known = 0usize;
    if !reaching.is_empty() && catalog.settings.metastore.exists() {
        let store = Metastore::open(&catalog.settings.metastore).context("deps --downstream reads the metastore")?;
        for record in store.views_with_prefix("") {
            let (url, _) = record?;
            let of_reaching = reaching.iter().any(|name| {
                url.strip_prefix(name.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            });
            // A record the project no longer describes is not downstream of anything.
            if of_reaching && lattice.view(&url, resolution).is_ok() {
                known += 1;
            }
        }
    }
    let mut dependents: std::collections::HashMap<ViewId, Vec<ViewId>> = std::collections::HashMap::new();
    for view in lattice.ids() {
        for &dependency in lattice.dependencies(view) {
            dependents.entry(dependency).or_default().push(view);
        }
    }
    let mut distance: std::collections::HashMap<ViewId, usize> = std::collections::HashMap::from([(id, 0)]);
    let mut order = Vec::new();
    let mut frontier = vec![id];
    let mut steps = 0;
    while !frontier.is_empty() {
        steps += 1;
        let mut next = Vec::new();
        for view in frontier {
            for &dependent in dependents.get(&view).map(Vec::as_slice).unwrap_or_default() {
                if let std::collections::hash_map::Entry::Vacant(slot) = distance.entry(dependent) {
                    slot.insert(steps);
                    order.push((steps, lattice.url_path(dependent)));
                    next.push(dependent);
                }
            }
        }
        frontier = next;
    }
    order.sort();
    let url = lattice.url_path(id);
    if args.project.json {
        let value = serde_json::json!({
            "view": url,
            "downstream": order.iter().map(|(steps, view)| serde_json::json!({ "view": view, "distance": steps })).collect::<Vec<_>>(),
            "recorded_candidates": known,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(Status::Success);
    }
    let types = if reaching.is_empty() {
        "no view type depends on its type".to_string()
    } else {
        format!("of {known} recorded view{} of the types that depend on its type", plural(known))
    };
    println!("{url}: {} view{} downstream ({types})", order.len(), plural(order.len()));
    for (steps, view) in &order {
        println!("  {steps}  {view}");
    }
    Ok(Status::Success)
}

/// Oozie's dataIn: the data paths, joined with commas.
fn data_in(lattice: &Lattice, ids: &[ViewId]) -> String {
    ids.iter().map(|&id| lattice.data_path(id).display().to_string()).collect::<Vec<_>>().join(",")
}
