//! `trellis views`: the views a pattern addresses (or those recorded),
//! with their states, flags and data paths, embedded or from a server.

use std::sync::Arc;

use clap::Args;

use super::Status;
use super::project::{ProjectArgs, dedup, load};
use super::remote::{self, Server};
use super::runs::counters_text;
use crate::api::wire;
use crate::catalog::{self, Catalog};
use crate::lattice::{Lattice, Resolution, ViewId, on_disk};
use crate::metastore::Metastore;
use crate::model::{Counters, ViewCondition, ViewState};

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

pub(super) async fn views(args: &ViewsArgs, runtime: &crate::runtime::Runtime) -> anyhow::Result<Status> {
    let catalog = load(&args.project.project)?;
    let mut lattice = Lattice::new(catalog.clone());
    let storage = crate::storage::open(&catalog)?;
    // `latest()` resolved as a run would now: by `TRELLIS_NOW` when set.
    let now = crate::clock::Clock::from_environment().map_err(anyhow::Error::msg)?.now();
    let resolution = Resolution { evaluation_time: now, exists: &on_disk(&*storage) };
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
