//! The plugins a project declares, loaded once per process: each file is
//! loaded with the limits the project gives it and the project's memory
//! budget, each transformation is described once, and every view type is
//! checked against what it uses.
//! The scheduler, the listeners, `validate` and `GET /plugins` all read the
//! same [`Plugins`].
//!
//! Invariants: it knows the catalog and the runtime, nothing of views,
//! scheduling state or the metastore. A plugin that cannot be loaded is a
//! value here (a reason), never an error: whoever needs it says so. No call
//! waits for the memory budget forever: the listeners that may start hold
//! their caps for good, and every transformation and checksum plugin left
//! available fits in what they leave (see [`Plugins::fit_the_budget`]).
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! the plugins a project declares, loaded once per
//! process with the limits the project gives each and one memory budget of
//! the project's (`[defaults] memory_budget_mib`). Listener instances hold
//! their caps while they run, so `fit_the_budget` counts the `[[listener]]`s'
//! caps as reserved for good (in file order; one that does not fit beside
//! those before it is not started, a warning `validate` prints), and a
//! transformation or checksum plugin whose cap exceeds what they leave is
//! unavailable, with a reason naming it, the listeners and the setting;
//! a type declared incremental whose plugin does not export
//! `transform-incremental` is a warning (it is rebuilt whole each time);
//! each transformation a
//! view type uses is described once, and every view type is checked
//! against what it uses (world, configuration keys). `ready_for` is what a
//! scheduler needs before it opens; `versions` computes each type's
//! version checksum (its `version`, else its checksum plugin's answer over
//! the configuration and the resources' contents, else the plugin's content
//! hash, name, configuration and the resources' names and hashes), then a
//! line per resource with its hash: `same_version` compares the first line
//! only, and `version_change` names the resources that differ for `plan`'s
//! `version changed (resource sql/daily.sql)`. The scheduler,
//! the listeners, `validate` and `GET /plugins` all read the same
//! `Plugins`. Invariant: it knows the catalog and the runtime, nothing of
//! views, scheduling or the metastore; a plugin that cannot be loaded is a
//! reason held here, never an error until someone needs it; the listeners'
//! caps plus any one available plugin's cap fit in the budget, so no call
//! waits for it forever.

use std::collections::{BTreeSet, HashMap};

use crate::catalog::{Catalog, Diagnostic, ListenerDecl, PluginDecl, Transformation, ViewType, ViewTypeId};
use crate::runtime::{self, ChecksumRequest, MemoryBudget, Plugin, PluginInfo, Runtime, World};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plugin a view type uses cannot be loaded.
    #[error("{0}")]
    Unavailable(String),
    /// View types use their plugins wrongly (the first problem, and how many more).
    #[error("{0}")]
    Misused(String),
    #[error("checksum plugin {name} failed for {view_type}: {message}")]
    Checksum { name: String, view_type: String, message: String },
}

/// Every declared plugin, loaded if it can be.
pub struct Plugins {
    loaded: HashMap<String, Plugin>,
    /// Declared plugins that could not be loaded, with the reason.
    unavailable: HashMap<String, String>,
    /// Plugin files that do not exist yet (a project is often validated
    /// before its plugins are built): not a problem of their use.
    missing: BTreeSet<String>,
    /// One line each, naming the view type and its line: a file that
    /// cannot be loaded, a plugin of another world, a configuration its
    /// `describe` rejects.
    pub problems: Vec<Diagnostic>,
    /// One line each, naming the listener and its line: a listener that
    /// will not be started (scheduling goes on without it).
    pub warnings: Vec<Diagnostic>,
    /// `[[listener]]`s, by name, whose memory cap does not fit in the budget
    /// beside the listeners before them, with the reason.
    refused_listeners: HashMap<String, String>,
    /// The budget every loaded plugin's stores reserve their memory cap from.
    budget: MemoryBudget,
}

impl Plugins {
    /// Loads every declared plugin (each once, `describe` once per
    /// transformation a view type uses) and checks each view type against
    /// them. Listeners are loaded but not checked: one that cannot start is
    /// skipped when listeners start. Every plugin reserves from one memory
    /// budget of the project's own (`[defaults] memory_budget_mib`, else
    /// the runtime's default); listener instances, which keep their store,
    /// hold their reservation for as long as they live, so a plugin that
    /// does not fit beside them is unavailable ([`Plugins::fit_the_budget`]).
    pub async fn load(runtime: &Runtime, catalog: &Catalog) -> Plugins {
        let runtime = match catalog.settings.memory_budget_mib {
            Some(mib) => runtime.with_memory_budget(mib.saturating_mul(1 << 20)),
            None => runtime.with_memory_budget(runtime::default_memory_budget()),
        };
        let runtime = &runtime;
        let mut plugins = Plugins {
            loaded: HashMap::new(),
            unavailable: HashMap::new(),
            missing: BTreeSet::new(),
            problems: Vec::new(),
            warnings: Vec::new(),
            refused_listeners: HashMap::new(),
            budget: runtime.memory_budget().clone(),
        };
        for (name, decl) in &catalog.plugins {
            if !decl.file.exists() {
                plugins.missing.insert(name.clone());
            }
            match load_plugin(runtime, catalog, decl).await {
                Ok(plugin) => {
                    plugins.loaded.insert(name.clone(), plugin);
                }
                Err(reason) => {
                    plugins.unavailable.insert(name.clone(), reason);
                }
            }
        }
        plugins.fit_the_budget(catalog);
        let used = used_plugins(catalog);
        let mut described: HashMap<&str, Result<PluginInfo, String>> = HashMap::new();
        for name in catalog.plugins.keys() {
            let Some(plugin) = plugins.loaded.get(name) else { continue };
            if used.contains(name.as_str()) && plugin.world().transforms() {
                let info = match plugin.describe().await {
                    Ok(report) => report.result.map_err(|failure| format!("{name}'s describe failed: {failure}")),
                    Err(e) => Err(e.to_string()),
                };
                described.insert(name, info);
            }
        }
        plugins.problems = plugins.check(catalog, &described);
        plugins.warn_not_incremental(catalog);
        plugins
    }

    /// Makes sure that no call waits for the memory budget forever. A
    /// listener instance holds its cap for as long as it runs, which is
    /// as long as the process does, so the listeners' caps are counted as
    /// reserved for good: in file order, each `[[listener]]` holds its
    /// plugin's cap if that fits beside the ones before it, and one that
    /// does not fit is not started (a warning). Then every transformation
    /// and checksum plugin whose cap exceeds what the listeners leave is
    /// unavailable, with a reason naming it, the listeners and the
    /// setting. What is left waits for the budget only while calls that
    /// end hold it. Listeners disabled in the metastore are counted too:
    /// they can be re-enabled while a server runs.
    fn fit_the_budget(&mut self, catalog: &Catalog) {
        let budget = self.budget.bytes();
        // (listener, bytes it holds), in file order.
        let mut held: Vec<(&str, usize)> = Vec::new();
        for decl in &catalog.listeners {
            let Some(plugin) = self.loaded.get(&decl.plugin).filter(|p| p.world() == World::Listener) else {
                continue;
            };
            let cap = MemoryBudget::reservation_of(plugin.limits().memory);
            let holding: usize = held.iter().map(|(_, bytes)| bytes).sum();
            if holding + cap <= budget {
                held.push((&decl.name, cap));
                continue;
            }
            let reason = format!(
                "plugin {}'s memory cap of {} MiB exceeds {}; it is not started; \
                 lower the plugin's memory_mib or raise the budget",
                decl.plugin,
                cap >> 20,
                what_is_left(budget, &held)
            );
            self.warnings.push(Diagnostic {
                file: None,
                line: Some(decl.line),
                message: format!("listener {}: {reason}", decl.name),
                plugin: Some(decl.plugin.clone()),
            });
            self.refused_listeners.insert(decl.name.clone(), reason);
        }
        let holding: usize = held.iter().map(|(_, bytes)| bytes).sum();
        let misfits: Vec<(String, usize)> = self
            .loaded
            .iter()
            .filter(|(_, plugin)| plugin.world() != World::Listener)
            .map(|(name, plugin)| (name.clone(), MemoryBudget::reservation_of(plugin.limits().memory)))
            .filter(|(_, cap)| holding + cap > budget)
            .collect();
        for (name, cap) in misfits {
            let advice = if held.is_empty() { "" } else { " or a listener's," };
            let reason = format!(
                "plugin {name}: its memory cap of {} MiB exceeds {}; lower its memory_mib{advice} or raise the budget",
                cap >> 20,
                what_is_left(budget, &held)
            );
            self.loaded.remove(&name);
            self.unavailable.insert(name, reason);
        }
    }

    /// An incremental type whose plugin cannot run incrementally still
    /// works, rebuilt whole each time: worth a warning, not an error.
    fn warn_not_incremental(&mut self, catalog: &Catalog) {
        for view_type in catalog.types().iter().filter(|view_type| view_type.incremental) {
            let Transformation::Plugin { plugin, .. } = &view_type.transformation else { continue };
            if let Some(loaded) = self.loaded.get(plugin.as_str())
                && loaded.world() == World::Transformation
                && !loaded.is_incremental()
            {
                self.warnings.push(Diagnostic {
                    file: view_type.file.clone(),
                    line: Some(view_type.line),
                    message: format!(
                        "view type {}: `incremental = true`, but {plugin} does not export transform-incremental \
                         (contract 1.1.0); it is rebuilt whole each time",
                        view_type.name
                    ),
                    plugin: Some(plugin.clone()),
                });
            }
        }
    }

    /// What is wrong with how each view type uses its plugins.
    fn check(&self, catalog: &Catalog, described: &HashMap<&str, Result<PluginInfo, String>>) -> Vec<Diagnostic> {
        let mut problems = Vec::new();
        for view_type in catalog.types() {
            let Transformation::Plugin { plugin, config, checksum, .. } = &view_type.transformation else { continue };
            let problem = |name: &str, message: String| Diagnostic {
                file: view_type.file.clone(),
                line: Some(view_type.transformation_line),
                message: format!("view type {}: {message}", view_type.name),
                plugin: Some(name.to_string()),
            };
            let uses = std::iter::once((plugin, World::Transformation))
                .chain(checksum.iter().map(|name| (name, World::Checksum)));
            for (name, world) in uses {
                if self.missing.contains(name) {
                    continue;
                }
                let plugin = match self.get(name) {
                    Ok(plugin) => plugin,
                    Err(reason) => {
                        problems.push(problem(name, reason));
                        continue;
                    }
                };
                let fits = plugin.world() == world || (world == World::Transformation && plugin.world().transforms());
                if !fits {
                    problems.push(problem(
                        name,
                        format!(
                            "{name} is {} plugin, not {} plugin",
                            plugin.world().with_article(),
                            world.with_article()
                        ),
                    ));
                    continue;
                }
                if world != World::Transformation {
                    continue;
                }
                let keys: Vec<(String, String)> =
                    config.iter().map(|(k, v)| (k.clone(), v.source().to_string())).collect();
                match described.get(name.as_str()) {
                    Some(Ok(info)) => {
                        if let Err(message) = info.check_config(&keys) {
                            problems.push(problem(name, message));
                        }
                    }
                    Some(Err(message)) => problems.push(problem(name, message.clone())),
                    None => {}
                }
            }
        }
        problems
    }

    /// The view types whose transformation plugin describes jobs for an
    /// engine (contract 1.2.0), as far as their plugins are loaded.
    pub fn engine_types<'a>(&self, catalog: &'a Catalog) -> Vec<&'a ViewType> {
        catalog
            .types()
            .iter()
            .filter(|t| {
                t.transformation.plugin().and_then(|p| self.loaded.get(p)).is_some_and(|p| p.world() == World::Engine)
            })
            .collect()
    }

    /// The memory budget of the project's plugin calls.
    pub fn memory_budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// A declared plugin, or why it cannot be had.
    pub fn get(&self, name: &str) -> Result<&Plugin, String> {
        if let Some(plugin) = self.loaded.get(name) {
            return Ok(plugin);
        }
        Err(self.unavailable.get(name).cloned().unwrap_or_else(|| format!("plugin `{name}` is not declared")))
    }

    /// The plugin of a `[[listener]]`, or why it cannot be started.
    pub fn listener(&self, decl: &ListenerDecl) -> Result<&Plugin, String> {
        if let Some(reason) = self.refused_listeners.get(&decl.name) {
            return Err(reason.clone());
        }
        self.get(&decl.plugin)
    }

    /// Every plugin the view types use is loaded and used as it should be:
    /// what a scheduler needs before it opens. A view type whose plugin does
    /// not fit stops the run before it starts, rather than failing each of
    /// its views.
    pub fn ready_for(&self, catalog: &Catalog) -> Result<(), Error> {
        if let Some(first) = self.problems.first() {
            let more = match self.problems.len() {
                1 => String::new(),
                n => format!(" (and {} more; `trellis validate` lists them)", n - 1),
            };
            return Err(Error::Misused(format!("{first}{more}")));
        }
        for name in used_plugins(catalog) {
            self.get(name).map_err(Error::Unavailable)?;
        }
        Ok(())
    }

    /// Each view type's version checksum, computed once.
    pub async fn versions(&self, catalog: &Catalog) -> Result<HashMap<ViewTypeId, String>, Error> {
        let mut versions = HashMap::new();
        for view_type in catalog.types() {
            versions.insert(view_type.id, self.version_checksum(view_type).await?);
        }
        Ok(versions)
    }

    /// A type's version checksum: its `version` alone if set; else what its
    /// checksum plugin returns (given the resources' contents); else the
    /// plugin's content hash, name and configuration, and the resources'
    /// names and content hashes. External data has a fixed version. Where
    /// the type has resources, a line per resource follows (see
    /// [`same_version`]).
    async fn version_checksum(&self, view_type: &ViewType) -> Result<String, Error> {
        let hash = |parts: &[&str]| {
            let mut hasher = blake3::Hasher::new();
            for part in parts {
                hasher.update(&(part.len() as u64).to_le_bytes());
                hasher.update(part.as_bytes());
            }
            hasher.finalize().to_hex()[..16].to_string()
        };
        if let Some(version) = &view_type.version {
            return Ok(hash(&["version", version]));
        }
        let Transformation::Plugin { plugin, config, checksum, resources, .. } = &view_type.transformation else {
            return Ok("external".into());
        };
        let mut canonical: Vec<(String, String)> =
            config.iter().map(|(k, v)| (k.clone(), v.source().to_string())).collect();
        canonical.sort();
        let logic = if let Some(checksum_plugin) = checksum {
            let failed = |message: String| Error::Checksum {
                name: checksum_plugin.clone(),
                view_type: view_type.name.clone(),
                message,
            };
            let request = ChecksumRequest {
                transformation: plugin.clone(),
                config: canonical,
                resources: resources.iter().map(|r| (r.name.clone(), r.content.to_vec())).collect(),
            };
            let report = self.get(checksum_plugin).map_err(failed)?.checksum(&request).await;
            let value = report.map_err(|e| failed(e.to_string()))?.result.map_err(|f| failed(f.message))?;
            hash(&["checksum", &value])
        } else {
            let content = self.get(plugin).map_err(Error::Unavailable)?.logic_hash();
            let config_text = serde_json::to_string(&canonical).unwrap_or_default();
            let mut parts = vec!["plugin", &content, plugin, &config_text];
            // Without resources, the parts are what they were before
            // resources existed, so that no view is rebuilt by an upgrade.
            for resource in resources {
                parts.extend(["resource", &resource.name, &resource.hash]);
            }
            hash(&parts)
        };
        let mut version = logic;
        for resource in resources {
            version.push_str(&format!("\n{}\t{}", resource.name, resource.hash));
        }
        Ok(version)
    }
}

/// Whether two recorded version checksums are the same logic. A version
/// checksum's first line decides; the lines after it (`name<TAB>hash`, one
/// per resource, names being free of control characters) say what each
/// resource held, so that a change can name the file. They do not decide
/// by themselves: under the default checksum the first line covers the
/// resources' hashes already, and under a checksum plugin only its answer
/// counts (an edit of a query's comment is no change to `sql-checksum`).
pub fn same_version(recorded: &str, current: &str) -> bool {
    logic_of(recorded) == logic_of(current)
}

fn logic_of(version: &str) -> &str {
    version.split_once('\n').map_or(version, |(logic, _)| logic)
}

/// What changed between two version checksums that are not the same, for
/// `plan` and the event log: the resources that differ (`(resource
/// sql/daily.sql)`, `(resource a.sql added)`, `(resource b.sql removed)`)
/// or, where none does, the plugin, its configuration or the type's
/// `version`, as the two hashes (`abc… -> def…`).
pub fn version_change(recorded: &str, current: &str) -> String {
    let resources = |version: &str| -> Vec<(String, String)> {
        version
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once('\t'))
            .map(|(name, hash)| (name.to_string(), hash.to_string()))
            .collect()
    };
    let (old, new) = (resources(recorded), resources(current));
    let find = |list: &[(String, String)], name: &str| list.iter().find(|(n, _)| n == name).map(|(_, h)| h.clone());
    let mut changes = Vec::new();
    for (name, hash) in &new {
        match find(&old, name) {
            Some(before) if &before == hash => {}
            Some(_) => changes.push(format!("resource {name}")),
            None => changes.push(format!("resource {name} added")),
        }
    }
    for (name, _) in &old {
        if find(&new, name).is_none() {
            changes.push(format!("resource {name} removed"));
        }
    }
    if changes.is_empty() {
        format!("{} -> {}", logic_of(recorded), logic_of(current))
    } else {
        format!("({})", changes.join(", "))
    }
}

/// The plugins the view types use: transformations and checksums.
fn used_plugins(catalog: &Catalog) -> BTreeSet<&str> {
    catalog
        .types()
        .iter()
        .filter_map(|t| match &t.transformation {
            Transformation::Plugin { plugin, checksum, .. } => Some([Some(plugin.as_str()), checksum.as_deref()]),
            Transformation::External => None,
        })
        .flatten()
        .flatten()
        .collect()
}

/// Loads a declared plugin with the limits the project gives it; the error
/// names the plugin and its file.
async fn load_plugin(runtime: &Runtime, catalog: &Catalog, decl: &PluginDecl) -> Result<Plugin, String> {
    let plugin = runtime.load_file(&decl.file).await.map_err(|error| match error {
        // These name the file already.
        runtime::Error::Missing { .. } | runtime::Error::Read { .. } | runtime::Error::NotAPlugin { .. } => {
            format!("plugin {}: {error}", decl.name)
        }
        other => format!("plugin {} ({}): {other}", decl.name, decl.file.display()),
    })?;
    let mut limits = plugin.limits();
    // `[defaults]` speaks of transformations; checksums and listeners keep
    // their world's tighter limits unless their own entry says otherwise.
    // An engine transformation's deadline is its whole job's; its memory
    // cap only that of the call describing the job, not the defaults'.
    let transformation = plugin.world() == runtime::World::Transformation;
    let deadline_default = catalog.settings.deadline.filter(|_| plugin.world().transforms());
    if let Some(deadline) = decl.deadline.or(deadline_default) {
        limits.deadline = deadline;
    }
    if let Some(mib) = decl.memory_mib.or(catalog.settings.memory_mib.filter(|_| transformation)) {
        limits.memory = mib.saturating_mul(1 << 20);
    }
    Ok(plugin.with_limits(limits))
}

/// What the memory budget of `budget` bytes leaves beside the listeners
/// that hold part of it, for a reason: "the memory budget of 512 MiB
/// ([defaults] memory_budget_mib)", or "the 448 MiB that ... leaves beside
/// listener stats (64 MiB), which holds its cap while it runs".
fn what_is_left(budget: usize, held: &[(&str, usize)]) -> String {
    let setting = format!("the memory budget of {} MiB ([defaults] memory_budget_mib)", budget >> 20);
    if held.is_empty() {
        return setting;
    }
    let holding: usize = held.iter().map(|(_, bytes)| bytes).sum();
    let listeners: Vec<String> = held.iter().map(|(name, bytes)| format!("{name} ({} MiB)", bytes >> 20)).collect();
    let (listener, holds) = if held.len() == 1 {
        ("listener", "holds its cap while it runs")
    } else {
        ("listeners", "hold their caps while they run")
    };
    format!(
        "the {} MiB that {setting} leaves beside {listener} {}, which {holds}",
        (budget - holding) >> 20,
        listeners.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::{same_version, version_change};

    #[test]
    fn a_version_change_names_the_resources_that_differ() {
        let old = "aaaaaaaaaaaaaaaa\nsql/a.sql\t1111111111111111\nsql/b.sql\t2222222222222222";
        let edited = "bbbbbbbbbbbbbbbb\nsql/a.sql\t3333333333333333\nsql/c.sql\t4444444444444444";
        assert!(!same_version(old, edited));
        assert_eq!(
            version_change(old, edited),
            "(resource sql/a.sql, resource sql/c.sql added, resource sql/b.sql removed)"
        );
        // Before resources, or with the same ones: the logic's hashes.
        assert_eq!(version_change("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"), "aaaaaaaaaaaaaaaa -> bbbbbbbbbbbbbbbb");
        assert_eq!(
            version_change(old, "cccccccccccccccc\nsql/a.sql\t1111111111111111\nsql/b.sql\t2222222222222222"),
            "aaaaaaaaaaaaaaaa -> cccccccccccccccc"
        );
        assert_eq!(
            version_change("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb\nq.sql\t1111111111111111"),
            "(resource q.sql added)"
        );
        // The first line decides: a checksum plugin that ignores an edit
        // (a comment) keeps the version.
        assert!(same_version(old, "aaaaaaaaaaaaaaaa\nsql/a.sql\t9999999999999999"));
        assert!(same_version("external", "external"));
    }
}
