//! Reloading a server's project: `trellis.toml` and the plugins loaded
//! again (`load_project`, outside the service, so that a broken project is
//! refused at once, whatever the service is doing), then handed to the
//! service, which applies it between two runs (`Scheduler::reload`): never
//! in the middle of a run, so no view in flight is lost or half-written.
//!
//! The new project replaces the old one whole: catalog, plugins, version
//! checksums, permits, staging. The lattice is rebuilt from scratch for the
//! new catalog, re-instantiating every view the old one held whose type is
//! still declared; records stay in the metastore (a schema change drops its
//! type's records exactly as at open), and the memo starts empty, so the
//! next run checks every view once. Listeners are not restarted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Error;
use super::state::Scheduler;
use crate::catalog::{self, Catalog, Transformation, ViewTypeId};
use crate::metastore::SchemaChange;
use crate::plugins::{self, Plugins};
use crate::runtime::Runtime;

/// A project loaded whole and checked, ready to replace the one served.
pub struct Project {
    pub catalog: Arc<Catalog>,
    pub plugins: Arc<Plugins>,
    versions: HashMap<ViewTypeId, String>,
}

/// What a reload changed, by type name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadReport {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Types whose schema checksum changed: their views' records were dropped.
    pub schema_changed: Vec<String>,
    /// Types whose version checksum changed, each with what changed (the
    /// plugin, its configuration, a resource), as `plan` will say it.
    pub version_changed: Vec<(String, String)>,
    /// `[project]`/`[defaults]`/`[events]` settings and `[plugins]` entries changed.
    pub settings_changed: Vec<String>,
    /// Views the new lattice holds again (those of the old one still declared).
    pub views: usize,
}

impl ReloadReport {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.schema_changed.is_empty()
            && self.version_changed.is_empty()
            && self.settings_changed.is_empty()
    }
}

/// Loads `dir/trellis.toml` and its plugins as `serve` does at start, and
/// computes every version checksum: any problem refuses the project, with
/// every diagnostic (and its line).
pub async fn load_project(dir: &Path, runtime: &Runtime) -> Result<Project, Error> {
    let catalog = match catalog::load(dir) {
        Ok(catalog) => Arc::new(catalog),
        Err(catalog::LoadError::Invalid(diagnostics)) => {
            return Err(Error::Refused(diagnostics.iter().map(ToString::to_string).collect()));
        }
        Err(other) => return Err(Error::Refused(vec![other.to_string()])),
    };
    if catalog.types().is_empty() {
        return Err(Error::Refused(vec![format!(
            "{} declares no view type (no [[view]] table)",
            catalog::PROJECT_FILE
        )]));
    }
    let plugins = Arc::new(Plugins::load(runtime, &catalog).await);
    let refused = |e: plugins::Error| Error::Refused(vec![e.to_string()]);
    if !plugins.problems.is_empty() {
        return Err(Error::Refused(plugins.problems.iter().map(ToString::to_string).collect()));
    }
    plugins.ready_for(&catalog).map_err(refused)?;
    let versions = plugins.versions(&catalog).await.map_err(refused)?;
    Ok(Project { catalog, plugins, versions })
}

/// What `serve` keeps to reload its project on `SIGHUP` and `POST /reload`.
#[derive(Clone)]
pub struct Reloader {
    pub dir: PathBuf,
    pub runtime: Runtime,
}

impl Reloader {
    /// Loads the project again and has the service apply it (after the run
    /// executing, if any); returns what changed, or why it was refused.
    pub async fn reload(&self, handle: &super::Handle) -> Result<ReloadReport, Error> {
        let project = load_project(&self.dir, &self.runtime).await?;
        handle.reload(project).await
    }
}

impl Scheduler {
    /// Replaces the project, between runs (the service never calls it
    /// during one, so no task holds a permit or a staging directory).
    pub(super) fn reload(&mut self, project: Project) -> Result<ReloadReport, Error> {
        let Project { catalog, plugins, versions } = project;
        if catalog.settings.metastore != self.catalog.settings.metastore {
            return Err(Error::Refused(vec![format!(
                "[project] metastore changed ({} -> {}): a running server cannot move its metastore; restart it",
                self.catalog.settings.metastore.display(),
                catalog.settings.metastore.display()
            )]));
        }
        let mut report = self.changes(&catalog, &versions);
        // Exactly what opening the project does: a changed schema drops
        // its type's records. A type changed at open and not changed back
        // stays changed.
        let old_changed: HashSet<String> =
            self.views.schema_changed().iter().map(|id| self.catalog.types()[id.0 as usize].name.clone()).collect();
        let mut schema_changed = HashSet::new();
        for view_type in catalog.types() {
            match self.store.register_schema(&view_type.name, &view_type.schema_checksum)? {
                SchemaChange::Changed { dropped } => {
                    tracing::info!(view_type = %view_type.name, dropped, "schema changed; its views will be rebuilt");
                    schema_changed.insert(view_type.id);
                }
                _ if old_changed.contains(&view_type.name) => {
                    schema_changed.insert(view_type.id);
                }
                _ => {}
            }
        }
        // Another root, or another way to reach an object store: new stores.
        let storage_moved =
            catalog.storage_roots() != self.catalog.storage_roots() || catalog.settings.s3 != self.catalog.settings.s3;
        self.executor.reload(&catalog, storage_moved)?;
        // The views held, to hold again under the new catalog.
        let urls: Vec<Arc<str>> = self
            .views
            .slots()
            .filter(|(id, _)| catalog.find(&self.views.lattice().view_type(*id).name).is_some())
            .map(|(_, slot)| slot.url.clone())
            .collect();
        let watched = self.views.reset(catalog.clone(), schema_changed, self.executor.staging().shared());
        self.executor.set_plugins(&catalog, plugins, versions);
        self.catalog = catalog;
        for url in &urls {
            // A view whose type's parameters or dependencies changed may
            // no longer be addressable: it is simply not held any more.
            if let Err(e) = self.instantiate(url) {
                tracing::debug!(view = %url, "not held after the reload: {e}");
            }
        }
        if watched {
            self.remember_freshness();
        }
        report.views = self.views.lattice().len();
        Ok(report)
    }

    /// What the new catalog and versions change against the current ones.
    fn changes(&self, catalog: &Catalog, versions: &HashMap<ViewTypeId, String>) -> ReloadReport {
        let mut report = ReloadReport::default();
        let old_versions = self.executor.versions();
        for view_type in catalog.types() {
            let Some(old) = self.catalog.find(&view_type.name) else {
                report.added.push(view_type.name.clone());
                continue;
            };
            if old.schema_checksum != view_type.schema_checksum {
                report.schema_changed.push(view_type.name.clone());
            }
            let (Some(before), Some(now)) = (old_versions.and_then(|v| v.get(&old.id)), versions.get(&view_type.id))
            else {
                continue;
            };
            if before != now {
                let what = if plugins::same_version(before, now) {
                    plugins::version_change(before, now)
                } else {
                    match &view_type.transformation {
                        Transformation::Plugin { plugin, .. } => {
                            let change = plugins::version_change(before, now);
                            if change.starts_with("resource") {
                                format!("plugin {plugin}: {change}")
                            } else {
                                format!("plugin {plugin}: its logic (plugin file, configuration or checksum)")
                            }
                        }
                        _ => plugins::version_change(before, now),
                    }
                };
                report.version_changed.push((view_type.name.clone(), what));
            }
        }
        for view_type in self.catalog.types() {
            if catalog.find(&view_type.name).is_none() {
                report.removed.push(view_type.name.clone());
            }
        }
        report.settings_changed = settings_changed(&self.catalog, catalog);
        report
    }
}

/// The settings that differ, by the key a user wrote.
fn settings_changed(old: &Catalog, new: &Catalog) -> Vec<String> {
    use crate::catalog::SparkSettings;
    let (a, b) = (&old.settings, &new.settings);
    let differ = |x: &dyn std::fmt::Debug, y: &dyn std::fmt::Debug| format!("{x:?}") != format!("{y:?}");
    let mut changed: Vec<String> = [
        ("project.name", differ(&a.name, &b.name)),
        ("project.storage", differ(&a.storage, &b.storage)),
        ("project.s3", differ(&a.s3, &b.s3)),
        ("project.evaluation_time", differ(&a.evaluation_time, &b.evaluation_time)),
        ("defaults.retries", differ(&a.retries, &b.retries)),
        ("defaults.concurrency", differ(&a.concurrency, &b.concurrency)),
        ("defaults.deadline", differ(&a.deadline, &b.deadline)),
        ("defaults.memory_mib", differ(&a.memory_mib, &b.memory_mib)),
        ("defaults.memory_budget_mib", differ(&a.memory_budget_mib, &b.memory_budget_mib)),
        ("defaults.output", differ(&a.output, &b.output)),
        ("events", differ(&a.events, &b.events)),
        (
            "engines.spark",
            differ(&SparkSettings { line: None, ..a.spark.clone() }, &SparkSettings { line: None, ..b.spark.clone() }),
        ),
    ]
    .into_iter()
    .filter(|(_, changed)| *changed)
    .map(|(key, _)| key.to_string())
    .collect();
    let declared = |catalog: &Catalog| -> BTreeMap<String, String> {
        catalog.plugins.iter().map(|(name, decl)| (name.clone(), format!("{decl:?}"))).collect()
    };
    let (before, after) = (declared(old), declared(new));
    for name in before.keys().chain(after.keys()).collect::<std::collections::BTreeSet<_>>() {
        if before.get(name) != after.get(name) {
            changed.push(format!("plugins.{name}"));
        }
    }
    changed
}
