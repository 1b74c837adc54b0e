//! The server's state, built in one place ([`AppState::new`]) for
//! `trellis serve` and for the tests that drive the router in process:
//! the scheduler's service, what `GET /plugins` shows, the permits, the
//! listeners and the switch that ends event streams.
//!
//! Invariant: whatever the handlers read of the project is derived here,
//! once, from the catalog and plugins the server started with; nothing
//! the CLI computes is handed in.

use std::sync::Arc;

use super::{AppState, Settings, wire};
use crate::catalog::Catalog;
use crate::listeners::Listeners;
use crate::plugins::Plugins;
use crate::scheduler::{Reloader, Scheduler, Service};

/// What a server is built from: a project opened for scheduling (its
/// scheduler not yet running), and how it is served.
pub struct Parts {
    pub catalog: Arc<Catalog>,
    pub plugins: Arc<Plugins>,
    /// Its clock and capacity set: the service runs on it as it is.
    pub scheduler: Scheduler,
    /// The project's listeners, which the server restarts; `None` for none.
    pub listeners: Option<Listeners>,
    pub settings: Settings,
    /// For `POST /reload` and SIGHUP; `None` answers 404.
    pub reloader: Option<Reloader>,
}

/// A server's state, the scheduler's service that the state's handle
/// talks to (for the caller to run), and the switch that, sent `true`,
/// ends the event streams.
pub struct Built {
    pub state: Arc<AppState>,
    pub service: Service,
    pub shutdown: tokio::sync::watch::Sender<bool>,
}

impl AppState {
    /// The state of a server over `parts`: the scheduler becomes a service
    /// (returned, to be run), the plugins' statuses are read once.
    #[allow(
        clippy::new_ret_no_self,
        reason = "the state comes with the service its handle talks to, which the caller runs"
    )]
    pub fn new(parts: Parts) -> Built {
        let Parts { catalog, plugins, scheduler, listeners, settings, reloader } = parts;
        let permits = scheduler.permits();
        let store = scheduler.metastore();
        let storage = scheduler.storage();
        let plugin_statuses = plugin_statuses(&catalog, &plugins);
        let (service, handle) = Service::new(scheduler);
        let (shutdown_sender, shutdown) = tokio::sync::watch::channel(false);
        let state = Arc::new(AppState {
            handle,
            store,
            storage,
            catalog,
            listeners: tokio::sync::Mutex::new(listeners),
            plugins,
            plugin_statuses,
            permits,
            settings,
            shutdown,
            started: chrono::Utc::now().timestamp_millis(),
            reloader,
            listener_snapshot: Default::default(),
        });
        Built { state, service, shutdown: shutdown_sender }
    }
}

/// Each declared plugin, as loaded, for `GET /plugins`: a plugin that
/// cannot be loaded shows why; a loaded one, the problems of the view
/// types' use of it (each problem names its plugin).
fn plugin_statuses(catalog: &Catalog, plugins: &Plugins) -> Vec<wire::PluginStatus> {
    let mut statuses: Vec<wire::PluginStatus> = catalog
        .plugins
        .iter()
        .map(|(name, decl)| {
            let mut status = wire::PluginStatus {
                name: name.clone(),
                file: decl.file.display().to_string(),
                world: None,
                content_hash: None,
                problems: Vec::new(),
            };
            match plugins.get(name) {
                Ok(plugin) => {
                    status.world = Some(crate::model::wire_name(&plugin.world()));
                    status.content_hash = Some(plugin.content_hash());
                    status.problems = plugins
                        .problems
                        .iter()
                        .filter(|problem| problem.plugin.as_deref() == Some(name.as_str()))
                        .map(|problem| problem.message.clone())
                        .collect();
                }
                Err(problem) => status.problems.push(problem),
            }
            status
        })
        .collect();
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    statuses
}
