//! `trellis validate`: the project loaded, its plugins checked against
//! how its view types use them, and a summary of what it declares.

use std::io::Write;

use anyhow::bail;

use super::Status;
use super::project::{ProjectArgs, load, no_view_types, path_of, plural};
use crate::catalog::{self, Catalog, Transformation};
use crate::metastore::Metastore;

pub(super) async fn validate(args: &ProjectArgs, runtime: &crate::runtime::Runtime) -> anyhow::Result<Status> {
    let catalog = load(&args.project)?;
    check_roots(&catalog)?;
    check_plugins(args, &catalog, runtime).await?;
    if catalog.types().is_empty() {
        eprintln!("warning: {}; materialize and serve will refuse it", no_view_types(&args.project));
    }
    let now = crate::clock::Clock::from_environment().map_err(anyhow::Error::msg)?.now();
    for warning in many_due(&catalog, now) {
        eprintln!("{warning}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary_json(&catalog, now))?);
    } else {
        print_summary(&catalog, now)?;
    }
    Ok(Status::Success)
}

/// Each storage root reachable and writable (an object root: a probe
/// object created and deleted; a local root: nothing to prove), or the
/// first that is not, in one line naming the root and the cause.
/// `validate` and `serve` (before it listens) ask.
pub(super) fn check_roots(catalog: &Catalog) -> anyhow::Result<()> {
    let storage = crate::storage::open(catalog)?;
    let stores = match storage.as_roots() {
        Some(roots) => roots.stores().to_vec(),
        None => vec![storage.clone()],
    };
    for store in stores {
        if let Err(cause) = store.probe() {
            bail!("storage {}: {cause}", store.root().display());
        }
    }
    Ok(())
}

/// The file is valid; then how its views use their plugins, as far as
/// they are there (a project is often validated before its plugins are
/// built): warnings on stderr, and the problems, each on its line, fail it.
async fn check_plugins(args: &ProjectArgs, catalog: &Catalog, runtime: &crate::runtime::Runtime) -> anyhow::Result<()> {
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
    let plugins = crate::plugins::Plugins::load(runtime, catalog).await;
    for warning in &plugins.warnings {
        eprintln!("warning: {}", path_of(&args.project, warning));
    }
    let on_spark = plugins.engine_types(catalog);
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
    Ok(())
}

/// `validate --json`: what the project declares.
fn summary_json(catalog: &Catalog, now: chrono::DateTime<chrono::Utc>) -> serde_json::Value {
    let types = catalog.types();
    serde_json::json!({
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
    })
}

/// `validate`'s summary: a line for the project, one per view type (and
/// its resources), listener and coordinator.
fn print_summary(catalog: &Catalog, now: chrono::DateTime<chrono::Utc>) -> anyhow::Result<()> {
    let types = catalog.types();
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
    Ok(())
}

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

/// The first three nominal times at or after `now`, in the coordinator's
/// timezone.
fn next_nominal_times(
    coordinator: &catalog::coordinator::Coordinator,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<chrono::DateTime<chrono_tz::Tz>> {
    let just_before = now - chrono::TimeDelta::nanoseconds(1);
    coordinator.nominal_times_after(Some(just_before)).take(3).map(|t| t.with_timezone(&coordinator.timezone)).collect()
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
