//! Listener supervision on top of the event log. Every listener (the
//! built-in monitor and each `[[listener]]` plugin) reads the metastore's
//! event log from its own persisted cursor, on a thread of its own at the
//! lowest CPU priority, so that a slow, stuck or failing listener only falls
//! behind; the drain at a command's end, when scheduling is done, moves
//! each to a thread at the caller's priority to catch up.
//!
//! Invariants:
//! - A cursor is stored only once every event before it was delivered or
//!   dropped by a failure: delivery is at-least-once across host restarts,
//!   in log order, and therefore in order per view. (A cursor written but
//!   not yet flushed when the host dies only repeats events.)
//! - Failures follow seed 000 (see [`supervise`]): a fatal error, a trap or
//!   a missed deadline (of the CPU time its call used) restarts the
//!   listener and drops the event; a
//!   retryable error restarts it and replays the latest event of every view
//!   first, the failed one included; restarts beyond `max_retries` disable
//!   it, with the reason stored.
//! - The log keeps every event an enabled listener has not received, up to
//!   the cap; events the cap removed reach that listener as one gap event.
//! - It knows the metastore and the runtime's listener calls, and nothing of
//!   scheduling: events are facts to deliver, not decisions.
//!
//! The parts: `status` (what `trellis listeners` shows and changes),
//! `supervisor` (one listener's task), `supervise` (the pure rule after a
//! failure), `monitor` (the built-in listener), `retention` (trimming the
//! log) and `thread` (the threads they run on).
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! listener supervision on the event log.
//! - `mod.rs`: `Listeners::start` runs the built-in monitor and every
//!   `[[listener]]` plugin (from the one `Plugins`), each under a
//!   supervisor on a thread of its own, plus the log retention; `drain`
//!   waits for listeners to catch up, `lag_probe` tells a run how far the
//!   slowest is behind, `shutdown` stops them after the event each is
//!   delivering (one still in progress a second later, blocked in a host
//!   call, is abandoned and delivered again next time), and `close` does so and returns each one's `Lag` (events
//!   behind, restarts while they ran) from the records they stored. `drain`
//!   first moves every listener to a thread at the caller's priority (see
//!   `thread.rs`), with its instance: no restart. Also `Error`, `state_dir` (a listener's own directory next
//!   to the metastore) and the re-exports of `status.rs`; the module doc
//!   states the invariants below.
//! - `status.rs`: `State` (enabled, or disabled/unavailable with a reason;
//!   `kind()` and `reason()`, written as `state` plus, when there is one,
//!   `reason`), `Status`, `status` and `enable` for `trellis listeners`;
//!   also the project's list of listeners (monitor first unless turned
//!   off, then file order) and the record a new one starts with (the whole
//!   log still kept).
//! - `supervisor.rs`: one listener's task. It reads pages of the log from
//!   its cursor, stores the cursor as it goes (at-least-once: a crash
//!   repeats events, never skips one; after a retryable failure the cursor
//!   stays on the failed event until the replay delivered it), restarts
//!   after failures (fatal, trap or missed deadline: drop the event;
//!   retryable: replay the latest event of every view first; the failed
//!   instance, with its share of the memory budget, is dropped before the
//!   next one reserves its own), and is
//!   disabled beyond `max_retries`. One that cannot be loaded or started is
//!   marked unavailable and skipped. A listener that finds the log starting
//!   after its cursor gets a gap event with the missing range. It publishes
//!   its `CursorState` for `drain` and the lag probe. Asked to, it parks
//!   between two events (`Parked`: itself with its running instance, cursor
//!   stored) and resumes where it stopped, on another thread.
//! - `supervise.rs`: the pure rule after a `ListenerFailure` (restart after
//!   a doubling backoff, or disable with the reason), a golden table.
//! - `retention.rs`: trims the log to what enabled listeners still need
//!   plus `history`, never above `max`.
//! - `monitor.rs`: the built-in monitor, state changes through tracing.
//! - `thread.rs`: a thread with a runtime of its own per listener and for
//!   the retention, at the lowest CPU priority (nice 19) while scheduling
//!   runs, so that a slow or failing listener only falls behind and takes
//!   little CPU from scheduling. Its deadline counts the CPU time it used
//!   (see `runtime`), so a busy machine that keeps it waiting does not fail
//!   it; nice 19 rather than SCHED_IDLE, which promises no CPU at all. Nice
//!   19 cannot be undone without privileges, so `drain`, at a command's end
//!   when scheduling is done, parks each listener and resumes it on a new
//!   thread at the caller's priority: beside two CPU-bound processes, a
//!   listener at nice 19 gets about 1.5% of a core, too little to catch up
//!   in the drain (BENCHMARKS.md, issue 12).
//!
//! Invariants: it knows the metastore, the plugins and the runtime's
//! listener calls, and nothing of scheduling; a listener never blocks the
//! scheduler (it never holds a lock the scheduler needs and never makes a
//! commit wait).

mod monitor;
mod retention;
mod status;
pub mod supervise;
mod supervisor;
mod thread;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{oneshot, watch};

use crate::catalog::Catalog;
use crate::metastore::{self, Metastore};
use crate::plugins::Plugins;
use retention::Retention;
pub use status::{State, Status, enable, status};
use supervisor::{CursorState, Parked, Supervisor};
use thread::{Priority, spawn_thread};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Metastore(#[from] metastore::Error),
    #[error("no listener named `{name}` in trellis.toml ({known})")]
    Unknown { name: String, known: String },
    #[error("cannot start the listener thread: {0}")]
    Thread(String),
}

/// The running listeners of one process.
pub struct Listeners {
    shutdown: watch::Sender<bool>,
    cursors: Vec<(String, watch::Receiver<CursorState>)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    store: Arc<Metastore>,
    /// Asks every listener to park between two events, for the drain.
    handoff: watch::Sender<bool>,
    /// Where each listener's supervisor arrives once parked, until the drain takes them.
    parked: Vec<(String, oneshot::Receiver<Parked>)>,
    /// Each listener's restarts as its record said when it started.
    restarts_at_start: HashMap<String, u32>,
}

/// Where one listener stands when a command ends: how far behind the log,
/// and how often it was restarted while the command ran (each restart
/// dropped or replayed an event).
#[derive(Debug, Clone)]
pub struct Lag {
    pub name: String,
    /// `None` for the built-in monitor.
    pub plugin: Option<String>,
    pub state: State,
    /// Events in the log it has not received.
    pub behind: u64,
    /// Restarts while these listeners ran.
    pub restarts: u32,
}

impl Listeners {
    /// Starts every listener of the project, each on a thread of its own. A
    /// listener that cannot be loaded or started is logged, marked
    /// unavailable and skipped; scheduling goes on regardless.
    pub async fn start(catalog: &Catalog, plugins: &Plugins, store: Arc<Metastore>) -> Result<Listeners, Error> {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (handoff, handoff_rx) = watch::channel(false);
        let mut supervisors = Vec::new();
        let mut cursors = Vec::new();
        let mut restarts_at_start = HashMap::new();
        for (name, decl) in status::declared(catalog) {
            let (supervisor, cursor) = Supervisor::new(
                name.clone(),
                decl,
                catalog,
                plugins,
                store.clone(),
                shutdown_rx.clone(),
                handoff_rx.clone(),
            )?;
            restarts_at_start.insert(name.clone(), supervisor.restarts());
            cursors.push((name, cursor));
            supervisors.push(supervisor);
        }
        // A thread each: a listener busy computing never eats into another
        // one's deadlines.
        let mut threads = Vec::new();
        let mut parked = Vec::new();
        for supervisor in supervisors {
            let name = supervisor.name().to_string();
            let (hand_over, taken_over) = oneshot::channel();
            let task = async move {
                if let Some(supervisor) = supervisor.run().await {
                    // Nobody took it over (the drain's time ran out first):
                    // it goes on here.
                    if let Err(supervisor) = hand_over.send(supervisor) {
                        supervisor.resume().await;
                    }
                }
            };
            threads.push(spawn_thread(&format!("listener {name}"), Priority::Lowest, task)?);
            parked.push((name, taken_over));
        }
        let retention = Retention::new(catalog, store.clone());
        threads.push(spawn_thread("listener log retention", Priority::Lowest, retention.run(shutdown_rx))?);
        Ok(Listeners { shutdown, cursors, threads, store, handoff, parked, restarts_at_start })
    }

    /// Waits until every running listener has received every event logged
    /// so far, or `timeout` passed. Returns the listeners still behind.
    ///
    /// It is for the end of a command, when scheduling is done: first each
    /// listener parks after the event it is delivering and goes on on a new
    /// thread at the caller's priority, no longer at nice 19 (which cannot
    /// be undone without privileges), so that CPU-bound processes beside it
    /// do not starve it through the drain.
    pub async fn drain(&mut self, timeout: Duration) -> Result<Vec<String>, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let target = self.store.next_sequence()?;
        let _ = self.handoff.send(true);
        let mut parked = std::mem::take(&mut self.parked);
        let threads = &mut self.threads;
        let move_over = |name: &str, supervisor: Parked, threads: &mut Vec<_>| {
            threads.push(spawn_thread(&format!("listener {name}"), Priority::Caller, supervisor.resume())?);
            Ok::<(), Error>(())
        };
        // Each as it parks: one in a restart's backoff holds up no other.
        let moving = async {
            let mut arriving: FuturesUnordered<_> =
                parked.iter_mut().map(|(name, taken_over)| async move { (name.clone(), taken_over.await) }).collect();
            while let Some((name, arrived)) = arriving.next().await {
                // A listener that stopped (disabled, unavailable) sends nothing.
                if let Ok(supervisor) = arrived {
                    move_over(&name, supervisor, threads)?;
                }
            }
            Ok::<(), Error>(())
        };
        if let Ok(moved) = tokio::time::timeout_at(deadline, moving).await {
            moved?;
        }
        // Out of time: the rest go on where they are, but one that parked
        // just now is taken over rather than lost (closing first makes a
        // later hand-over fail, so that its supervisor resumes in place).
        for (name, taken_over) in &mut parked {
            taken_over.close();
            if let Ok(supervisor) = taken_over.try_recv() {
                move_over(name, supervisor, &mut self.threads)?;
            }
        }
        let wait = async {
            for (_, cursor) in &mut self.cursors {
                let _ = cursor.wait_for(|c| c.stopped || c.cursor >= target).await;
            }
        };
        let _ = tokio::time::timeout_at(deadline, wait).await;
        Ok(self
            .cursors
            .iter()
            .filter(|(_, cursor)| {
                let c = *cursor.borrow();
                !c.stopped && c.cursor < target
            })
            .map(|(name, _)| name.clone())
            .collect())
    }

    /// A probe for how far the slowest running listener is behind the log,
    /// in events, cheap enough to call on every step of a run (the
    /// metastore cannot be opened by another process meanwhile, so this is
    /// how a run shows listener lag).
    pub fn lag_probe(&self) -> impl Fn() -> u64 + Send + 'static {
        let cursors: Vec<watch::Receiver<CursorState>> = self.cursors.iter().map(|(_, c)| c.clone()).collect();
        let appended = self.store.subscribe();
        move || {
            let next = *appended.borrow();
            cursors
                .iter()
                .map(|c| *c.borrow())
                .filter(|c| !c.stopped)
                .map(|c| next.saturating_sub(c.cursor))
                .max()
                .unwrap_or(0)
        }
    }

    /// Shuts the listeners down (see [`Listeners::shutdown`]) and tells
    /// where each stands, from the records they stored last.
    pub async fn close(self, catalog: &Catalog) -> Result<Vec<Lag>, Error> {
        let store = self.store.clone();
        let restarts_at_start = self.restarts_at_start.clone();
        self.shutdown().await;
        Ok(status(catalog, &store)?
            .into_iter()
            .map(|status| Lag {
                restarts: status.restarts.saturating_sub(restarts_at_start.get(&status.name).copied().unwrap_or(0)),
                name: status.name,
                plugin: status.plugin,
                state: status.state,
                behind: status.behind,
            })
            .collect())
    }

    /// Stops the listeners after the event each is delivering, stores their
    /// cursors, and trims the log. An event still in progress a second
    /// after the shutdown (a listener blocked in a host call) is abandoned:
    /// its cursor stays on it, and it is delivered again next time.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
    }
}

/// Where a listener's own state directory is: next to the metastore.
pub fn state_dir(catalog: &Catalog, name: &str) -> PathBuf {
    catalog.settings.metastore.with_file_name("listeners").join(name)
}
