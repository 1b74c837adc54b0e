//! One way to bring a project up and down, for every command that runs
//! views (`demo`, `materialize`, `bench`, `serve`): its plugins loaded once,
//! the metastore and the scheduler opened, the listeners started on the
//! event log; and at the end the listeners given time to catch up, then
//! shut down, on every path.
//!
//! Invariant: it wires, it decides nothing. It knows the modules it opens,
//! nothing of the CLI or HTTP; what goes wrong is an [`Error`] value.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! the one way every command that runs views (`demo`,
//! `materialize`, `bench`, `serve`) brings a project up and down: plugins
//! loaded, scheduler opened, listeners started; `close` drains the
//! listeners for up to the given time, shuts them down and returns where
//! each stands (events behind, restarts meanwhile), which `demo` and
//! `materialize` print (a server takes the listeners over instead).
//! Invariant: it wires and decides nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::catalog::Catalog;
use crate::listeners::{self, Lag, Listeners};
use crate::plugins::Plugins;
use crate::runtime::Runtime;
use crate::scheduler::{self, Scheduler};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("opening the scheduler")]
    Scheduler(#[from] scheduler::Error),
    #[error("starting the listeners")]
    Listeners(#[from] listeners::Error),
}

/// A project opened for scheduling: its plugins, scheduler and listeners.
pub struct Session {
    pub catalog: Arc<Catalog>,
    pub plugins: Arc<Plugins>,
    pub scheduler: Scheduler,
    listeners: Option<Listeners>,
}

impl Session {
    /// Loads the project's plugins, opens the scheduler and starts the
    /// listeners, which follow the event log from their cursors.
    pub async fn open(catalog: Arc<Catalog>, runtime: &Runtime) -> Result<Session, Error> {
        let plugins = Arc::new(Plugins::load(runtime, &catalog).await);
        let scheduler = Scheduler::open(catalog.clone(), plugins.clone()).await?;
        let listeners = Listeners::start(&catalog, &plugins, scheduler.metastore()).await?;
        Ok(Session { catalog, plugins, scheduler, listeners: Some(listeners) })
    }

    /// The listeners, until they are handed over or closed.
    pub fn listeners(&mut self) -> Option<&mut Listeners> {
        self.listeners.as_mut()
    }

    /// Hands the listeners to whoever keeps them from now on (a server,
    /// which restarts them): closing the session then leaves them alone.
    pub fn take_listeners(&mut self) -> Option<Listeners> {
        self.listeners.take()
    }

    /// Gives the listeners up to `drain` to receive every event logged so
    /// far, then shuts them down. Returns where each listener stands: how
    /// far behind (it receives the rest from its cursor next time) and how
    /// often it was restarted meanwhile.
    pub async fn close(mut self, drain: Duration) -> Result<Vec<Lag>, Error> {
        let Some(mut listeners) = self.listeners.take() else { return Ok(Vec::new()) };
        let drained = if drain.is_zero() { Ok(Vec::new()) } else { listeners.drain(drain).await };
        let lags = listeners.close(&self.catalog).await;
        drained?;
        Ok(lags?)
    }
}
