//! Listener supervision on top of the event log. Every listener (the
//! built-in monitor and each `[[listener]]` plugin) reads the metastore's
//! event log from its own persisted cursor, on a thread of its own at the
//! lowest CPU priority, so that a slow, stuck or failing listener only falls
//! behind.
//!
//! Invariants:
//! - A cursor is stored only once every event before it was delivered or
//!   dropped by a failure: delivery is at-least-once across host restarts,
//!   in log order, and therefore in order per view. (A cursor written but
//!   not yet flushed when the host dies only repeats events.)
//! - Failures follow seed 000 (see [`supervise`]): a fatal error, a trap or
//!   a missed deadline restarts the listener and drops the event; a
//!   retryable error restarts it and replays the latest event of every view
//!   first, the failed one included; restarts beyond `max_retries` disable
//!   it, with the reason stored.
//! - The log keeps every event an enabled listener has not received, up to
//!   the cap; events the cap removed reach that listener as one gap event.
//! - It knows the metastore and the runtime's listener calls, and nothing of
//!   scheduling: events are facts to deliver, not decisions.

pub mod supervise;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::catalog::{Catalog, EventSettings, ListenerDecl, MONITOR};
use crate::metastore::{self, Event, ListenerRecord, Metastore};
use crate::plugins::Plugins;
use crate::runtime::{FailureKind, ListenerEvent, ListenerInstance, Plugin};
use supervise::{Decision, Failure};

/// Events read from the log at once.
const PAGE: usize = 256;

/// How often a listener busy with a page stores its cursor.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Metastore(#[from] metastore::Error),
    #[error("no listener named `{name}` in trellis.toml ({known})")]
    Unknown { name: String, known: String },
    #[error("cannot start the listener thread: {0}")]
    Thread(String),
}

/// Whether a listener takes events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Enabled,
    /// Restarted more often than `max_retries` allows; `listeners enable` undoes it.
    Disabled(String),
    /// The last attempt to start it failed; the next start tries again.
    Unavailable(String),
}

impl State {
    /// Its name, whose serde spelling is the one for the CLI's text and
    /// the API's JSON.
    pub fn kind(&self) -> crate::model::ListenerStateKind {
        use crate::model::ListenerStateKind as Kind;
        match self {
            State::Enabled => Kind::Enabled,
            State::Disabled(_) => Kind::Disabled,
            State::Unavailable(_) => Kind::Unavailable,
        }
    }

    /// Why it is disabled or unavailable.
    pub fn reason(&self) -> Option<&str> {
        match self {
            State::Enabled => None,
            State::Disabled(reason) | State::Unavailable(reason) => Some(reason),
        }
    }

    /// The state named `kind`, with `reason` (empty if missing) when it takes one.
    pub fn new(kind: crate::model::ListenerStateKind, reason: Option<String>) -> State {
        use crate::model::ListenerStateKind as Kind;
        let reason = || reason.unwrap_or_default();
        match kind {
            Kind::Enabled => State::Enabled,
            Kind::Disabled => State::Disabled(reason()),
            Kind::Unavailable => State::Unavailable(reason()),
        }
    }
}

/// `state` (its kind's name) and, when there is one, `reason`: so a
/// status that flattens it reads `"state": "disabled", "reason": "..."`.
impl serde::Serialize for State {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut fields = serializer.serialize_struct("State", 2)?;
        fields.serialize_field("state", &self.kind())?;
        match self.reason() {
            Some(reason) => fields.serialize_field("reason", reason)?,
            None => fields.skip_field("reason")?,
        }
        fields.end()
    }
}

/// What `trellis listeners` shows of one listener.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    pub name: String,
    /// `None` for the built-in monitor.
    pub plugin: Option<String>,
    #[serde(flatten)]
    pub state: State,
    pub cursor: u64,
    /// Events in the log it has not received yet.
    pub behind: u64,
    /// How old the oldest of those is, in milliseconds.
    pub oldest_undelivered_ms: Option<i64>,
    pub restarts: u32,
    pub delivered: u64,
    pub last_error: Option<String>,
}

/// The listeners a project has: the monitor unless turned off, then the
/// declared ones in file order.
fn declared(catalog: &Catalog) -> Vec<(String, Option<&ListenerDecl>)> {
    let monitor = catalog.settings.events.monitor.then(|| (MONITOR.to_string(), None));
    monitor.into_iter().chain(catalog.listeners.iter().map(|decl| (decl.name.clone(), Some(decl)))).collect()
}

/// A listener's record, or the one a new listener starts with: it receives
/// the whole log that is still kept.
fn record_of(store: &Metastore, name: &str) -> Result<ListenerRecord, Error> {
    let fresh = || -> Result<ListenerRecord, Error> {
        Ok(ListenerRecord { cursor: store.first_sequence()?, ..ListenerRecord::default() })
    };
    match store.listener(name) {
        Ok(Some(record)) => Ok(record),
        Ok(None) => fresh(),
        // An unreadable record costs repeated events, not the listener.
        Err(metastore::Error::Corrupt { reason, .. }) => {
            tracing::warn!(
                listener = name,
                "its record is unreadable ({reason}); it starts again from the oldest event kept"
            );
            fresh()
        }
        Err(e) => Err(e.into()),
    }
}

/// The status of every listener of the project.
pub fn status(catalog: &Catalog, store: &Metastore) -> Result<Vec<Status>, Error> {
    let next = store.next_sequence()?;
    let now = chrono::Utc::now().timestamp_millis();
    let mut statuses = Vec::new();
    for (name, decl) in declared(catalog) {
        let record = record_of(store, &name)?;
        let oldest = store.events_from(record.cursor, 1)?.first().map(|event| now - event.event.time);
        let state = match (&record.disabled, &record.unavailable) {
            (Some(reason), _) => State::Disabled(reason.clone()),
            (None, Some(reason)) => State::Unavailable(reason.clone()),
            (None, None) => State::Enabled,
        };
        statuses.push(Status {
            name,
            plugin: decl.map(|d| d.plugin.clone()),
            state,
            cursor: record.cursor,
            behind: next.saturating_sub(record.cursor),
            oldest_undelivered_ms: oldest,
            restarts: record.restarts,
            delivered: record.delivered,
            last_error: record.last_error,
        });
    }
    Ok(statuses)
}

/// Re-enables a disabled listener with a fresh restart budget. Returns
/// whether it was disabled.
pub fn enable(catalog: &Catalog, store: &Metastore, name: &str) -> Result<bool, Error> {
    if !declared(catalog).iter().any(|(known, _)| known == name) {
        let known: Vec<String> = declared(catalog).into_iter().map(|(known, _)| known).collect();
        let known = if known.is_empty() { "it declares none".to_string() } else { known.join(", ") };
        return Err(Error::Unknown { name: name.to_string(), known });
    }
    let mut record = record_of(store, name)?;
    if record.disabled.take().is_none() {
        return Ok(false);
    }
    record.restarts = 0;
    store.put_listener(name, &record)?;
    store.flush()?;
    Ok(true)
}

/// How far one listener has come, for [`Listeners::drain`].
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    cursor: u64,
    /// It takes no more events in this process (disabled, unavailable or shut down).
    stopped: bool,
}

/// The running listeners of one process.
pub struct Listeners {
    shutdown: watch::Sender<bool>,
    progress: Vec<(String, watch::Receiver<Progress>)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    store: Arc<Metastore>,
}

impl Listeners {
    /// Starts every listener of the project, each on a thread of its own. A
    /// listener that cannot be loaded or started is logged, marked
    /// unavailable and skipped; scheduling goes on regardless.
    pub async fn start(catalog: &Catalog, plugins: &Plugins, store: Arc<Metastore>) -> Result<Listeners, Error> {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut supervisors = Vec::new();
        let mut progress = Vec::new();
        for (name, decl) in declared(catalog) {
            let target = match decl {
                None => Target::Monitor,
                Some(decl) => {
                    let plugin = plugins.get(&decl.plugin).cloned();
                    let state_dir = state_dir(catalog, &decl.name);
                    Target::Plugin { plugin, config: decl.config.clone(), state_dir }
                }
            };
            let record = record_of(&store, &name)?;
            let (sender, receiver) = watch::channel(Progress { cursor: record.cursor, stopped: false });
            progress.push((name.clone(), receiver));
            supervisors.push(Supervisor {
                name,
                target,
                store: store.clone(),
                record,
                max_retries: decl.and_then(|d| d.max_retries),
                backoff: decl.map_or(Duration::ZERO, |d| d.backoff),
                failures_in_row: 0,
                last_checkpoint: std::time::Instant::now(),
                progress: sender,
                shutdown: shutdown_rx.clone(),
            });
        }
        // A thread each: a listener busy computing never eats into another
        // one's deadlines.
        let mut threads = Vec::new();
        for supervisor in supervisors {
            threads.push(spawn_thread(&format!("listener {}", supervisor.name), supervisor.run())?);
        }
        let retention = Retention { settings: RetentionSettings::of(catalog), store: store.clone() };
        threads.push(spawn_thread("listener log retention", retention.run(shutdown_rx))?);
        Ok(Listeners { shutdown, progress, threads, store })
    }

    /// Waits until every running listener has received every event logged
    /// so far, or `timeout` passed. Returns the listeners still behind.
    pub async fn drain(&mut self, timeout: Duration) -> Result<Vec<String>, Error> {
        let target = self.store.next_sequence()?;
        let wait = async {
            for (_, progress) in &mut self.progress {
                let _ = progress.wait_for(|p| p.stopped || p.cursor >= target).await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        Ok(self
            .progress
            .iter()
            .filter(|(_, progress)| {
                let p = *progress.borrow();
                !p.stopped && p.cursor < target
            })
            .map(|(name, _)| name.clone())
            .collect())
    }

    /// A probe for how far the slowest running listener is behind the log,
    /// in events, cheap enough to call on every step of a run (the
    /// metastore cannot be opened by another process meanwhile, so this is
    /// how a run shows listener lag).
    pub fn lag_probe(&self) -> impl Fn() -> u64 + Send + 'static {
        let progress: Vec<watch::Receiver<Progress>> = self.progress.iter().map(|(_, p)| p.clone()).collect();
        let appended = self.store.subscribe();
        move || {
            let next = *appended.borrow();
            progress
                .iter()
                .map(|p| *p.borrow())
                .filter(|p| !p.stopped)
                .map(|p| next.saturating_sub(p.cursor))
                .max()
                .unwrap_or(0)
        }
    }

    /// Stops the listeners after the event each is delivering, stores their
    /// cursors, and trims the log.
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

/// Runs `task` on a thread of its own, with a runtime of its own, at the
/// lowest CPU priority.
fn spawn_thread(
    name: &str,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, Error> {
    let thread_name = name.to_string();
    std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(move || {
            lower_priority();
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(task),
                Err(e) => tracing::error!("{thread_name} cannot run: {e}"),
            }
        })
        .map_err(|e| Error::Thread(e.to_string()))
}

/// Listeners run at the lowest CPU priority (nice 19, per thread on
/// Linux): on a busy machine they get little CPU and fall behind instead of
/// slowing scheduling, yet they still get some, so that a listener's
/// wall-clock deadline is not missed merely because transformations are
/// busy (SCHED_IDLE would starve them outright). Elsewhere, or if refused,
/// they run as usual.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority on this thread's id changes only its nice value.
    unsafe {
        let thread = libc::gettid() as libc::id_t;
        if libc::setpriority(libc::PRIO_PROCESS, thread, 19) != 0 {
            tracing::debug!("listeners keep the normal CPU priority: {}", std::io::Error::last_os_error());
        }
    }
}

/// Where a listener's own state directory is: next to the metastore.
pub fn state_dir(catalog: &Catalog, name: &str) -> PathBuf {
    catalog.settings.metastore.with_file_name("listeners").join(name)
}

/// What the log must keep: every event an enabled listener has not
/// received, and `history` more; never more than `max`.
struct RetentionSettings {
    names: Vec<String>,
    history: u64,
    max: u64,
}

impl RetentionSettings {
    fn of(catalog: &Catalog) -> Self {
        let EventSettings { history, max, .. } = catalog.settings.events;
        RetentionSettings { names: declared(catalog).into_iter().map(|(name, _)| name).collect(), history, max }
    }

    fn trim(&self, store: &Metastore) -> Result<usize, Error> {
        let next = store.next_sequence()?;
        let mut keep_from = next.saturating_sub(self.history);
        for name in &self.names {
            let record = record_of(store, name)?;
            if record.disabled.is_none() {
                keep_from = keep_from.min(record.cursor);
            }
        }
        keep_from = keep_from.max(next.saturating_sub(self.max));
        if keep_from <= store.first_sequence()? {
            return Ok(0);
        }
        Ok(store.truncate_events(keep_from)?)
    }
}

/// Trims the log as it grows, at most once a second, and once at shutdown.
struct Retention {
    settings: RetentionSettings,
    store: Arc<Metastore>,
}

impl Retention {
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut appended = self.store.subscribe();
        loop {
            tokio::select! {
                changed = appended.changed() => if changed.is_err() { break },
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
            self.trim();
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
        }
        self.trim();
    }

    fn trim(&self) {
        match self.settings.trim(&self.store) {
            Ok(0) => {}
            Ok(removed) => tracing::debug!(removed, "event log trimmed"),
            Err(e) => tracing::warn!("cannot trim the event log: {e}"),
        }
    }
}

/// What a listener delivers to.
enum Target {
    Monitor,
    Plugin { plugin: Result<Plugin, String>, config: Vec<(String, String)>, state_dir: PathBuf },
}

enum Instance {
    Monitor,
    Plugin(Box<ListenerInstance>),
}

impl Instance {
    async fn deliver(&mut self, event: &ListenerEvent) -> Result<(), Failure> {
        match self {
            Instance::Monitor => {
                monitor(event);
                Ok(())
            }
            // Only a failure the listener declared retryable is replayed; a
            // trap or a missed deadline drops the event (seed 000), unlike a
            // transformation, for which both are worth another attempt.
            Instance::Plugin(instance) => instance.on_event(event).await.result.map_err(|failure| Failure {
                retryable: failure.kind == FailureKind::Retryable,
                message: one_line(&format!("{} ({:?})", failure.message, failure.kind)),
            }),
        }
    }
}

/// The built-in monitor: state changes through tracing, as Schedoscope's
/// ViewSchedulingMonitor logs them.
fn monitor(event: &ListenerEvent) {
    match event {
        ListenerEvent::Transition { view, previous, current, error, run_id, .. } => {
            if let Some(error) = error {
                tracing::warn!(target: "trellis::monitor", view, run = run_id.as_deref(), "{} -> {}: {error}", previous.as_str(), current.as_str());
            } else if previous != current {
                tracing::info!(target: "trellis::monitor", view, run = run_id.as_deref(), "{} -> {}", previous.as_str(), current.as_str());
            }
        }
        ListenerEvent::Gap { first_sequence, last_sequence } => {
            tracing::warn!(target: "trellis::monitor", "events {first_sequence} to {last_sequence} were removed from the log before the monitor saw them");
        }
    }
}

/// A message from a plugin as one line, for status output and logs.
fn one_line(message: &str) -> String {
    message.split(['\n', '\r']).map(str::trim).filter(|part| !part.is_empty()).collect::<Vec<_>>().join(" / ")
}

fn listener_event(event: &Event) -> ListenerEvent {
    let e = &event.event;
    ListenerEvent::Transition {
        sequence: event.sequence,
        view: e.view.to_string(),
        previous: e.previous,
        current: e.current,
        actions: e.actions.iter().map(|action| action.to_string()).collect(),
        time: e.time,
        run_id: e.run_id.as_deref().map(String::from),
        error: e.error.clone(),
    }
}

/// One listener's task.
struct Supervisor {
    name: String,
    target: Target,
    store: Arc<Metastore>,
    record: ListenerRecord,
    max_retries: Option<u32>,
    backoff: Duration,
    failures_in_row: u32,
    last_checkpoint: std::time::Instant,
    progress: watch::Sender<Progress>,
    shutdown: watch::Receiver<bool>,
}

impl Supervisor {
    async fn run(mut self) {
        if let Err(e) = self.supervise().await {
            tracing::error!(listener = %self.name, "listener stopped: {e}");
            self.record.unavailable = Some(one_line(&format!("stopped: {e}")));
        }
        if let Err(e) = self.store.put_listener(&self.name, &self.record).and_then(|()| self.store.flush()) {
            tracing::error!(listener = %self.name, "cannot store the listener's cursor: {e}");
        }
        self.progress.send_modify(|p| p.stopped = true);
    }

    async fn supervise(&mut self) -> Result<(), Error> {
        if let Some(reason) = &self.record.disabled {
            tracing::warn!(listener = %self.name, "listener is disabled ({reason}); `trellis listeners enable {}` re-enables it", self.name);
            return Ok(());
        }
        let mut instance = match self.start_instance().await {
            Ok(instance) => instance,
            Err(reason) => {
                tracing::warn!(listener = %self.name, "listener skipped: {reason}");
                self.record.unavailable = Some(reason);
                return Ok(());
            }
        };
        self.record.unavailable = None;
        let mut appended = self.store.subscribe();
        loop {
            if *self.shutdown.borrow() {
                return Ok(());
            }
            let events = self.store.events_from(self.record.cursor, PAGE)?;
            let Some(first) = events.first() else {
                self.checkpoint()?;
                let mut shutdown = self.shutdown.clone();
                tokio::select! {
                    changed = appended.changed() => if changed.is_err() { return Ok(()) },
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                }
                continue;
            };
            // The log's cap removed events this listener had not received:
            // it is told which, then goes on.
            if first.sequence > self.record.cursor {
                let gap = ListenerEvent::Gap { first_sequence: self.record.cursor, last_sequence: first.sequence - 1 };
                self.record.cursor = first.sequence;
                match instance.deliver(&gap).await {
                    Ok(()) => self.record.delivered += 1,
                    // A gap has nothing to replay: whatever the failure, it is dropped.
                    Err(failure) => {
                        let failure = Failure { retryable: false, ..failure };
                        if !self.recover(&mut instance, failure, None).await? {
                            return Ok(());
                        }
                    }
                }
            }
            for event in &events {
                match instance.deliver(&listener_event(event)).await {
                    Ok(()) => {
                        self.record.delivered += 1;
                        self.record.cursor = event.sequence + 1;
                        self.failures_in_row = 0;
                        // A slow listener stores its cursor as it goes, so
                        // that a crash repeats little.
                        if self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
                            self.checkpoint()?;
                        }
                    }
                    Err(failure) => {
                        // Fatal: the event is dropped. Retryable: the cursor
                        // stays on it until the replay, which sends it again,
                        // went through; a crash before then delivers it anew.
                        let retryable = failure.retryable;
                        if !retryable {
                            self.record.cursor = event.sequence + 1;
                        }
                        if !self.recover(&mut instance, failure, retryable.then_some(event.sequence)).await? {
                            return Ok(());
                        }
                        self.record.cursor = event.sequence + 1;
                        break;
                    }
                }
            }
            self.checkpoint()?;
        }
    }

    /// Stores the cursor and tells [`Listeners::drain`].
    fn checkpoint(&mut self) -> Result<(), Error> {
        self.store.put_listener(&self.name, &self.record)?;
        self.last_checkpoint = std::time::Instant::now();
        let cursor = self.record.cursor;
        self.progress.send_modify(|p| p.cursor = cursor);
        Ok(())
    }

    async fn start_instance(&self) -> Result<Instance, String> {
        let Target::Plugin { plugin, config, state_dir } = &self.target else {
            return Ok(Instance::Monitor);
        };
        let plugin = plugin.as_ref().map_err(Clone::clone)?;
        std::fs::create_dir_all(state_dir)
            .map_err(|e| format!("cannot create its state directory {}: {e}", state_dir.display()))?;
        let (instance, report) =
            plugin.start_listener(config, Some(state_dir)).await.map_err(|e| one_line(&e.to_string()))?;
        report.result.map_err(|f| one_line(&format!("start failed: {} ({:?})", f.message, f.kind)))?;
        Ok(Instance::Plugin(Box::new(instance)))
    }

    /// After `failure`: restarts the listener (replaying the latest event of
    /// every view up to `replay_upto` when the failure was retryable) until
    /// it runs again. Returns false when it was disabled or shut down.
    async fn recover(
        &mut self,
        instance: &mut Instance,
        mut failure: Failure,
        replay_upto: Option<u64>,
    ) -> Result<bool, Error> {
        let replay = match replay_upto {
            Some(upto) => self.latest_per_view(upto)?,
            None => Vec::new(),
        };
        let mut position = 0;
        loop {
            self.failures_in_row += 1;
            let decision = supervise::decide(&self.record, self.max_retries, self.backoff, self.failures_in_row);
            self.record.last_error = Some(failure.message.clone());
            match decision {
                Decision::Disable { reason } => {
                    tracing::error!(listener = %self.name, "listener disabled: {reason}");
                    self.record.disabled = Some(reason);
                    self.checkpoint()?;
                    return Ok(false);
                }
                Decision::Restart { delay } => {
                    self.record.restarts += 1;
                    tracing::warn!(listener = %self.name, restarts = self.record.restarts, "listener failed, restarting: {}", failure.message);
                    self.checkpoint()?;
                    let mut shutdown = self.shutdown.clone();
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = shutdown.wait_for(|stop| *stop) => return Ok(false),
                    }
                }
            }
            *instance = match self.start_instance().await {
                Ok(started) => started,
                Err(reason) => {
                    failure = Failure { retryable: false, message: reason };
                    continue;
                }
            };
            if failure.retryable {
                position = 0;
            }
            let mut failed = None;
            while let Some(event) = replay.get(position) {
                match instance.deliver(event).await {
                    Ok(()) => {
                        self.record.delivered += 1;
                        self.failures_in_row = 0;
                        position += 1;
                    }
                    Err(next_failure) => {
                        // Fatal drops this replayed event; retryable replays all again.
                        position += 1;
                        failed = Some(next_failure);
                        break;
                    }
                }
            }
            match failed {
                None => return Ok(true),
                Some(next_failure) => failure = next_failure,
            }
        }
    }

    /// The latest event of every view, up to and including `upto`, in log
    /// order: what a listener is sent again after a retryable failure. Only
    /// views with an event still in the log can be replayed; the log keeps
    /// `[events] history` events beyond what every listener has received.
    fn latest_per_view(&self, upto: u64) -> Result<Vec<ListenerEvent>, Error> {
        let mut latest: HashMap<Arc<str>, Event> = HashMap::new();
        let mut from = self.store.first_sequence()?;
        'scan: loop {
            let events = self.store.events_from(from, PAGE)?;
            let Some(last) = events.last() else { break };
            from = last.sequence + 1;
            for event in events {
                if event.sequence > upto {
                    break 'scan;
                }
                latest.insert(event.event.view.clone(), event);
            }
        }
        let mut events: Vec<Event> = latest.into_values().collect();
        events.sort_by_key(|event| event.sequence);
        Ok(events.iter().map(listener_event).collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plugin_messages_become_one_line() {
        assert_eq!(super::one_line("cannot open /state/x:\n  denied\r\n"), "cannot open /state/x: / denied");
        assert_eq!(super::one_line("fine"), "fine");
    }
}
