//! `trellis deps`: the views one view depends on (or, `--downstream`,
//! those that depend on it), their data paths and `dataIn()`, or a
//! pattern's views as a Graphviz graph.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::Args;

use super::Status;
use super::project::{ProjectArgs, ViewArg, load, plural};
use crate::catalog::{self, Catalog};
use crate::lattice::{Lattice, Resolution, ViewId, on_disk};
use crate::metastore::Metastore;

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
    let storage = crate::storage::open(&catalog)?;
    let resolution = Resolution { evaluation_time: now, exists: &on_disk(&*storage) };
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
    let read = latest_read(&catalog, &lattice, id);
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

/// What the view's `latest()` read when last materialized, from its record
/// when there is a metastore (it is not created for this). Only an
/// addition: a metastore held by a server, or unreadable, leaves it out
/// rather than failing `deps`, which needs no metastore.
fn latest_read(catalog: &Catalog, lattice: &Lattice, id: ViewId) -> Option<Vec<String>> {
    match lattice.has_latest(id) && catalog.settings.metastore.exists() {
        true => Metastore::open(&catalog.settings.metastore)
            .ok()
            .and_then(|store| store.view(&lattice.url_path(id)).ok().flatten())
            .and_then(|record| record.latest),
        false => None,
    }
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
    let reaching = reaching_types(catalog, &lattice.view_type(id).name);
    let known = match !reaching.is_empty() && catalog.settings.metastore.exists() {
        true => instantiate_recorded(catalog, lattice, resolution, &reaching)?,
        false => 0,
    };
    let order = by_distance(lattice, id);
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

/// The types with a path of dependencies to the type named `target`.
fn reaching_types(catalog: &Catalog, target: &str) -> HashSet<String> {
    let mut reaching = HashSet::new();
    let mut grown = true;
    while grown {
        grown = false;
        for view_type in catalog.types() {
            if reaching.contains(&view_type.name) {
                continue;
            }
            let depends = view_type.dependencies.iter().any(|dependency| {
                let name = &catalog.get(dependency.target).name;
                name == target || reaching.contains(name)
            });
            if depends {
                reaching.insert(view_type.name.clone());
                grown = true;
            }
        }
    }
    reaching
}

/// Instantiates, with their closures, the views the metastore records of
/// the `reaching` types; returns how many there were.
fn instantiate_recorded(
    catalog: &Catalog,
    lattice: &mut Lattice,
    resolution: &Resolution<'_>,
    reaching: &HashSet<String>,
) -> anyhow::Result<usize> {
    let store = Metastore::open(&catalog.settings.metastore).context("deps --downstream reads the metastore")?;
    let mut known = 0;
    for record in store.views_with_prefix("") {
        let (url, _) = record?;
        let of_reaching = reaching
            .iter()
            .any(|name| url.strip_prefix(name.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')));
        // A record the project no longer describes is not downstream of anything.
        if of_reaching && lattice.view(&url, resolution).is_ok() {
            known += 1;
        }
    }
    Ok(known)
}

/// The views of the lattice downstream of `id`, each with its distance
/// (the fewest edges from `id`), nearest first.
fn by_distance(lattice: &Lattice, id: ViewId) -> Vec<(usize, String)> {
    let mut dependents: HashMap<ViewId, Vec<ViewId>> = HashMap::new();
    for view in lattice.ids() {
        for &dependency in lattice.dependencies(view) {
            dependents.entry(dependency).or_default().push(view);
        }
    }
    let mut distance: HashMap<ViewId, usize> = HashMap::from([(id, 0)]);
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
    order
}

/// Oozie's dataIn: the data paths, joined with commas.
fn data_in(lattice: &Lattice, ids: &[ViewId]) -> String {
    ids.iter().map(|&id| lattice.data_path(id).display().to_string()).collect::<Vec<_>>().join(",")
}
