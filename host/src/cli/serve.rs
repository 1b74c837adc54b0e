//! `trellis serve`: the scheduler, the listeners and the HTTP API in one
//! long-lived process, shut down gracefully on SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::Status;
use super::catalog::{ProjectArgs, load_to_run};
use crate::api::{self, AppState, Settings, wire};
use crate::plugins::Plugins;
use crate::runtime::Runtime;
use crate::scheduler::Service;
use crate::session::Session;

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    #[command(flatten)]
    project: ProjectArgs,
    /// Where to listen; port 0 picks a free port (the address is printed)
    #[arg(long, default_value = "127.0.0.1:20698", value_name = "ADDR")]
    bind: SocketAddr,
    /// `text` or `json` log lines on stderr
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub(super) log_format: String,
    /// How long running transformations may go on after SIGINT or SIGTERM
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Requests not answered within this get 408 (event streams excepted)
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
}

/// `token` is the one clients must send (the global `--token-file`, else `$TRELLIS_TOKEN`).
pub(super) async fn serve(args: &ServeArgs, token: Option<String>, runtime: &Runtime) -> anyhow::Result<Status> {
    api::check_bind(&args.bind, token.as_deref()).map_err(anyhow::Error::msg)?;
    let catalog = load_to_run(&args.project.project, "serve")?;
    // Bound before anything starts: a port in use fails the command with
    // nothing to shut down.
    let listener = std::net::TcpListener::bind(args.bind).with_context(|| format!("binding {}", args.bind))?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    let mut session = Session::open(catalog.clone(), runtime).await?;
    let listeners = session.take_listeners();
    let Session { scheduler, plugins, .. } = session;
    let permits = scheduler.permits();
    let store = scheduler.metastore();
    let plugin_statuses = plugin_statuses(&catalog, &plugins);
    let (service, handle) = Service::new(scheduler);
    let service = tokio::spawn(service.run());
    let (shutdown_sender, shutdown) = tokio::sync::watch::channel(false);
    let state = Arc::new(AppState {
        handle: handle.clone(),
        store,
        catalog: catalog.clone(),
        listeners: tokio::sync::Mutex::new(listeners),
        plugins,
        plugin_statuses,
        permits,
        settings: Settings {
            token: token.clone(),
            request_timeout: args.request_timeout,
            loopback: args.bind.ip().is_loopback(),
        },
        shutdown,
        started: chrono::Utc::now().timestamp_millis(),
    });
    if token.is_none() {
        tracing::warn!("no token: anyone who can reach {address} can materialize, invalidate and stop runs");
    }
    // On stdout, for whoever started the server on port 0.
    println!("listening on http://{address}");
    tracing::info!(%address, project = %catalog.settings.name, "serving");
    let grace = args.grace;
    let signal = async move {
        wait_for_signal().await;
        tracing::info!(?grace, "shutting down: running transformations get the grace period");
        handle.shutdown(grace);
        let _ = shutdown_sender.send(true);
    };
    // The API has threads of its own: transformations keep this runtime's
    // workers busy, and a run's long steps (a commit of 100k records) hold
    // one; neither must make a request wait.
    let router = api::router(state.clone());
    let api = std::thread::Builder::new().name("trellis-api".into()).spawn(move || -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("trellis-api")
            .enable_all()
            .build()
            .context("starting the API's runtime")?;
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            axum::serve(listener, router).with_graceful_shutdown(signal).await.context("serving HTTP")
        })
    })?;
    tokio::task::spawn_blocking(move || api.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the API thread panicked"))??;
    service.await.context("the scheduler task")?.context("the scheduler")?;
    if let Some(listeners) = state.listeners.lock().await.take() {
        listeners.shutdown().await;
    }
    state.store.flush()?;
    tracing::info!("stopped");
    Ok(Status::Success)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut interrupt), Ok(mut terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

/// Each declared plugin, as loaded, for `GET /plugins`.
fn plugin_statuses(catalog: &crate::catalog::Catalog, plugins: &Plugins) -> Vec<wire::PluginStatus> {
    let mut statuses = Vec::new();
    for (name, decl) in &catalog.plugins {
        let mut status = wire::PluginStatus {
            name: name.clone(),
            file: decl.file.display().to_string(),
            world: None,
            content_hash: None,
            problems: plugins
                .problems
                .iter()
                .filter(|problem| problem.message.contains(&format!("`{name}`")))
                .map(|problem| problem.message.clone())
                .collect(),
        };
        match plugins.get(name) {
            Ok(plugin) => {
                status.world = Some(plugin.world().to_string());
                status.content_hash = Some(plugin.content_hash());
            }
            Err(problem) => status.problems.push(problem),
        }
        statuses.push(status);
    }
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    statuses
}
