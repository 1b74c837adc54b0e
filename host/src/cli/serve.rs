//! `trellis serve`: the scheduler, the listeners and the HTTP API in one
//! long-lived process, shut down gracefully on SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::project::{ProjectArgs, load_to_run};
use super::{Status, announce};
use crate::api::{self, AppState, Built, ConnectionLimits, Parts, Settings};
use crate::lattice::Capacity;
use crate::runtime::Runtime;
use crate::scheduler::Reloader;
use crate::session::Session;

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    #[command(flatten)]
    pub(super) project: ProjectArgs,
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
    #[arg(long, default_value = "30s", value_parser = positive_duration)]
    request_timeout: Duration,
    /// The most views the server holds, dependencies included; requests that would
    /// instantiate more get 409
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    max_views: usize,
    /// Connections served at once; past it the oldest idle one is closed, and
    /// while all are busy a small reserve serves only /health and the token holder
    #[arg(long, default_value_t = 512, value_name = "N")]
    max_connections: usize,
    /// A connection that does not send a request's headers within this is closed
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    header_timeout: Duration,
    /// Another name the server answers to (in requests' Host), besides the
    /// address it listens on and localhost: its name behind a proxy or in
    /// DNS; repeatable. Requests naming any other host are refused (403), so
    /// that a web page cannot rebind its own name to the server
    #[arg(long = "allowed-host", value_name = "NAME", value_parser = api::allowed_host)]
    allowed_hosts: Vec<String>,
}

/// A duration above zero: a request timeout of zero would answer every
/// request 408.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("must be more than zero (every request would time out)".into()),
        parsed => parsed.map_err(|e| e.to_string()),
    }
}

/// `token` is the one clients must send (the global `--token-file`, else `$TRELLIS_TOKEN`).
pub(super) async fn serve(args: &ServeArgs, token: Option<String>, runtime: &Runtime) -> anyhow::Result<Status> {
    api::check_bind(&args.bind, token.as_deref()).map_err(anyhow::Error::msg)?;
    let catalog = load_to_run(&args.project.project, "serve")?;
    if let Some(server) = announce::server(&catalog) {
        anyhow::bail!("{}", announce::held_by_server(&args.project.project, &server, "serve"));
    }
    // A root that cannot be reached or written fails the start in one
    // line, before the server says it listens.
    super::validate::check_roots(&catalog)?;
    // Bound before anything starts: a port in use fails the command with
    // nothing to shut down.
    let listener = std::net::TcpListener::bind(args.bind).with_context(|| format!("binding {}", args.bind))?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    let limits = connection_limits(args)?;
    let mut session = Session::open(catalog.clone(), runtime).await?;
    let listeners = session.take_listeners();
    let Session { mut scheduler, plugins, .. } = session;
    scheduler.set_capacity(Capacity { per_call: api::REQUEST_PATTERN_LIMIT, total: args.max_views });
    scheduler.set_clock(crate::clock::Clock::from_environment().map_err(anyhow::Error::msg)?);
    let reloader = Reloader { dir: args.project.project.clone(), runtime: runtime.clone() };
    let settings = Settings {
        token: token.clone(),
        request_timeout: args.request_timeout,
        loopback: args.bind.ip().is_loopback(),
        bound: address,
        allowed_hosts: args.allowed_hosts.clone(),
    };
    let parts =
        Parts { catalog: catalog.clone(), plugins, scheduler, listeners, settings, reloader: Some(reloader.clone()) };
    let Built { state, service, shutdown: shutdown_sender } = AppState::new(parts);
    let handle = state.handle.clone();
    let service = tokio::spawn(service.run());
    let hangups = tokio::spawn(reload_on_hangup(reloader, handle.clone()));
    if token.is_none() {
        tracing::warn!("no token: anyone who can reach {address} can materialize, invalidate and stop runs");
    }
    // Local commands that cannot open the metastore say who has it.
    let server_file = announce::path(&catalog, announce::SERVER_SUFFIX);
    if let Err(e) = announce::write(&server_file, announce::ServerAddress { url: format!("http://{address}") }) {
        tracing::warn!(
            "cannot write {}: {e}; local commands will not know this server holds the project",
            server_file.display()
        );
    }
    let _server_file = announce::Guard(server_file);
    // Handled from before it says it listens: a SIGTERM right after that
    // line is a clean shutdown, not the default action's kill.
    let shutdown = shutdown_signal();
    // On stdout, for whoever started the server on port 0.
    println!("listening on http://{address}");
    tracing::info!(%address, project = %catalog.settings.name, "serving");
    let grace = args.grace;
    let signal = async move {
        shutdown.await;
        tracing::info!(?grace, "shutting down: running transformations get the grace period");
        handle.shutdown(grace);
        let _ = shutdown_sender.send(true);
    };
    let api = api::serve_on_own_threads(listener, state.clone(), limits, signal).context("starting the API")?;
    tokio::task::spawn_blocking(move || api.join())
        .await?
        .map_err(|_| anyhow::anyhow!("the API thread panicked"))?
        .context("the API")?;
    hangups.abort();
    service.await.context("the scheduler task")?.context("the scheduler")?;
    if let Some(listeners) = state.listeners.lock().await.take() {
        listeners.shutdown().await;
    }
    state.store.flush()?;
    tracing::info!("stopped");
    Ok(Status::Success)
}

/// Connections the server may keep: what was asked, within the open files
/// this process may have.
fn connection_limits(args: &ServeArgs) -> anyhow::Result<ConnectionLimits> {
    if args.max_connections == 0 {
        anyhow::bail!("--max-connections must be at least 1");
    }
    if args.header_timeout.is_zero() {
        anyhow::bail!("--header-timeout must be longer than 0s: no client could send a request");
    }
    if args.max_views == 0 {
        anyhow::bail!("--max-views must be at least 1");
    }
    // Event streams end at the shutdown; a response still going after the
    // run's grace period is cut off.
    ConnectionLimits::within_open_files(args.max_connections, args.header_timeout, args.grace)
        .map_err(anyhow::Error::msg)
}

/// Reloads the project on every SIGHUP, as `POST /reload` does, logging
/// what changed or, for a broken project, every problem (the old project
/// keeps serving).
async fn reload_on_hangup(reloader: Reloader, handle: crate::scheduler::Handle) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(hangup) => hangup,
        Err(e) => {
            tracing::warn!("cannot handle SIGHUP ({e}); reload with POST /reload");
            return;
        }
    };
    while hangup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading {}", reloader.dir.display());
        // The service logs what the reload changed; a refusal is logged here.
        if let Err(e) = reloader.reload(&handle).await {
            tracing::error!("SIGHUP: {e}");
        }
    }
}

/// SIGINT or SIGTERM, handled from the moment this is called (not from
/// when the future is first polled).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
        async move {
            match signals {
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
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
