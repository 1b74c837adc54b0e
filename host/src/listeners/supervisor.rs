//! One listener's supervisor: the task that reads the event log from the
//! listener's cursor, delivers each event, stores the cursor as it goes,
//! tells of events the log's cap removed with a gap event, and after a
//! failure restarts the listener (replaying the latest event of every view
//! when the failure was retryable) or disables it, as [`supervise`] decides.
//! Asked to, it parks between two events, so that it can go on on another
//! thread ([`Parked`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::catalog::{Catalog, ListenerDecl};
use crate::metastore::{ListenerRecord, LoggedEvent, Metastore};
use crate::model::AllowedHost;
use crate::plugins::Plugins;
use crate::runtime::{FailureKind, ListenerEvent, ListenerInstance, Plugin};

use super::status::record_of;
use super::supervise::{self, Decision, ListenerFailure};
use super::{Error, monitor, state_dir};

/// Events read from the log at once.
const PAGE: usize = 256;

/// How often a listener busy with a page stores its cursor.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// How long a shutdown waits for the event (or the start) a listener is in
/// the middle of. Past it the call is abandoned, and the listener receives
/// the event again next time: its cursor stays on it. Without this, one
/// blocked in a host call would hold up the end of a command until its
/// wall-clock ceiling (200 times its deadline).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Where one listener's stored cursor stands, published by its supervisor
/// for [`Listeners::drain`](super::Listeners::drain) and the lag probe.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CursorState {
    pub(super) cursor: u64,
    /// It takes no more events in this process (disabled, unavailable or shut down).
    pub(super) stopped: bool,
}

/// What a listener delivers to.
enum Target {
    Monitor,
    Plugin {
        plugin: Result<Plugin, String>,
        config: Vec<(String, String)>,
        state_dir: PathBuf,
        allow_http: Vec<AllowedHost>,
    },
}

enum Instance {
    Monitor,
    Plugin(Box<ListenerInstance>),
    /// None: a failed instance was dropped and the next one has not
    /// started yet.
    Stopped,
}

impl Instance {
    async fn deliver(&mut self, event: &ListenerEvent) -> Result<(), ListenerFailure> {
        match self {
            Instance::Monitor => {
                monitor::trace(event);
                Ok(())
            }
            // Only a failure the listener declared retryable is replayed; a
            // trap or a missed deadline drops the event (seed 000), unlike a
            // transformation, for which both are worth another attempt.
            Instance::Plugin(instance) => instance.on_event(event).await.result.map_err(|failure| ListenerFailure {
                retryable: failure.kind == FailureKind::Retryable,
                message: one_line(&format!("{} ({:?})", failure.message, failure.kind)),
            }),
            Instance::Stopped => {
                Err(ListenerFailure { retryable: false, message: "the listener has no running instance".into() })
            }
        }
    }
}

/// Returns once `handoff` says to park; never without one, or once its
/// sender is gone.
async fn asked_to_park(handoff: Option<&mut watch::Receiver<bool>>) {
    if let Some(handoff) = handoff
        && handoff.wait_for(|park| *park).await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// A message from a plugin as one line, for status output and logs.
fn one_line(message: &str) -> String {
    message.split(['\n', '\r']).map(str::trim).filter(|part| !part.is_empty()).collect::<Vec<_>>().join(" / ")
}

fn listener_event(event: &LoggedEvent) -> ListenerEvent {
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
pub(super) struct Supervisor {
    name: String,
    target: Target,
    store: Arc<Metastore>,
    record: ListenerRecord,
    max_retries: Option<u32>,
    backoff: Duration,
    failures_in_row: u32,
    last_checkpoint: std::time::Instant,
    cursor_state: watch::Sender<CursorState>,
    shutdown: watch::Receiver<bool>,
    /// Becomes true when it should park; `None` once it has moved.
    handoff: Option<watch::Receiver<bool>>,
}

/// A supervisor parked between two events, with its running instance, to
/// go on where it stopped: on another thread, or on its own again.
pub(super) struct Parked {
    supervisor: Supervisor,
    instance: Instance,
}

impl Parked {
    /// Goes on from where it parked; it does not park again.
    pub(super) async fn resume(self) {
        let Parked { mut supervisor, instance } = self;
        supervisor.handoff = None;
        supervisor.run_from(Some(instance)).await;
    }
}

impl Supervisor {
    /// The supervisor of the listener `name` (`decl` is `None` for the
    /// built-in monitor), and where it publishes its cursor.
    pub(super) fn new(
        name: String,
        decl: Option<&ListenerDecl>,
        catalog: &Catalog,
        plugins: &Plugins,
        store: Arc<Metastore>,
        shutdown: watch::Receiver<bool>,
        handoff: watch::Receiver<bool>,
    ) -> Result<(Supervisor, watch::Receiver<CursorState>), Error> {
        let target = match decl {
            None => Target::Monitor,
            Some(decl) => {
                let plugin = plugins.listener(decl).cloned();
                let state_dir = state_dir(catalog, &decl.name);
                Target::Plugin { plugin, config: decl.config.clone(), state_dir, allow_http: decl.allow_http.clone() }
            }
        };
        let record = record_of(&store, &name)?;
        let (cursor_state, receiver) = watch::channel(CursorState { cursor: record.cursor, stopped: false });
        let supervisor = Supervisor {
            name,
            target,
            store,
            record,
            max_retries: decl.and_then(|d| d.max_retries),
            backoff: decl.map_or(Duration::ZERO, |d| d.backoff),
            failures_in_row: 0,
            last_checkpoint: std::time::Instant::now(),
            cursor_state,
            shutdown,
            handoff: Some(handoff),
        };
        Ok((supervisor, receiver))
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Its restarts so far, as its record says.
    pub(super) fn restarts(&self) -> u32 {
        self.record.restarts
    }

    /// Supervises the listener until it is shut down, disabled or
    /// unavailable; or until it is asked to park, which it does between
    /// two events, returning itself.
    pub(super) async fn run(self) -> Option<Parked> {
        self.run_from(None).await
    }

    async fn run_from(mut self, instance: Option<Instance>) -> Option<Parked> {
        match self.supervise(instance).await {
            Ok(Some(instance)) => return Some(Parked { supervisor: self, instance }),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(listener = %self.name, "listener stopped: {e}");
                self.record.unavailable = Some(one_line(&format!("stopped: {e}")));
            }
        }
        if let Err(e) = self.store.put_listener(&self.name, &self.record).and_then(|()| self.store.flush()) {
            tracing::error!(listener = %self.name, "cannot store the listener's cursor: {e}");
        }
        self.cursor_state.send_modify(|c| c.stopped = true);
        None
    }

    /// Whether it was asked to park.
    fn parking(&self) -> bool {
        self.handoff.as_ref().is_some_and(|handoff| *handoff.borrow())
    }

    /// Delivers events until shut down (`None`) or asked to park (its
    /// instance, with its cursor stored). `instance` is the one it parked
    /// with, if it did.
    async fn supervise(&mut self, instance: Option<Instance>) -> Result<Option<Instance>, Error> {
        let mut instance = match instance {
            Some(instance) => instance,
            None => match self.first_instance().await {
                Some(instance) => instance,
                None => return Ok(None),
            },
        };
        self.record.unavailable = None;
        let mut appended = self.store.subscribe();
        loop {
            if *self.shutdown.borrow() {
                return Ok(None);
            }
            if self.parking() {
                self.checkpoint()?;
                return Ok(Some(instance));
            }
            let events = self.store.events_from(self.record.cursor, PAGE)?;
            let Some(first) = events.first() else {
                self.checkpoint()?;
                let mut shutdown = self.shutdown.clone();
                let mut handoff = self.handoff.clone();
                tokio::select! {
                    changed = appended.changed() => if changed.is_err() { return Ok(None) },
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(None),
                    () = asked_to_park(handoff.as_mut()) => {}
                }
                continue;
            };
            // The log's cap removed events this listener had not received:
            // it is told which, then goes on.
            if first.sequence > self.record.cursor && !self.deliver_gap(&mut instance, first.sequence).await? {
                return Ok(None);
            }
            if !self.deliver_page(&mut instance, &events).await? {
                return Ok(None);
            }
            self.checkpoint()?;
        }
    }

    /// A new instance of the listener, unless it is disabled, cannot be
    /// started (recorded as unavailable), or the listeners shut down first.
    async fn first_instance(&mut self) -> Option<Instance> {
        if let Some(reason) = &self.record.disabled {
            tracing::warn!(listener = %self.name, "listener is disabled ({reason}); `trellis listeners enable {}` re-enables it", self.name);
            return None;
        }
        let started = self.unless_shut_down(self.start_instance()).await?;
        match started {
            Ok(instance) => Some(instance),
            Err(reason) => {
                tracing::warn!(listener = %self.name, "listener skipped: {reason}");
                self.record.unavailable = Some(reason);
                None
            }
        }
    }

    /// Tells the listener that the events from its cursor to `next - 1` are
    /// gone; whether it goes on (false: shut down or given up).
    async fn deliver_gap(&mut self, instance: &mut Instance, next: u64) -> Result<bool, Error> {
        let gap = ListenerEvent::Gap { first_sequence: self.record.cursor, last_sequence: next - 1 };
        let Some(delivered) = self.unless_shut_down(instance.deliver(&gap)).await else { return Ok(false) };
        self.record.cursor = next;
        match delivered {
            Ok(()) => self.record.delivered += 1,
            // A gap has nothing to replay: whatever the failure, it is dropped.
            Err(failure) => {
                let failure = ListenerFailure { retryable: false, ..failure };
                return self.recover(instance, failure, None).await;
            }
        }
        Ok(true)
    }

    /// Delivers a page of events in order, up to the first failure (then
    /// recovered from); whether it goes on (false: shut down or given up).
    async fn deliver_page(&mut self, instance: &mut Instance, events: &[LoggedEvent]) -> Result<bool, Error> {
        for event in events {
            // A shutdown or a handoff takes effect after the event
            // being delivered, not after the page.
            if *self.shutdown.borrow() || self.parking() {
                break;
            }
            let delivering = listener_event(event);
            let Some(delivered) = self.unless_shut_down(instance.deliver(&delivering)).await else {
                return Ok(false);
            };
            match delivered {
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
                    if !self.recover(instance, failure, retryable.then_some(event.sequence)).await? {
                        return Ok(false);
                    }
                    self.record.cursor = event.sequence + 1;
                    break;
                }
            }
        }
        Ok(true)
    }

    /// `work` (a delivery or a start), or `None` if the listeners were shut
    /// down and it had not ended [`SHUTDOWN_GRACE`] later: then the call is
    /// dropped, and with it the instance, which dies with the listener.
    async fn unless_shut_down<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        let mut shutdown = self.shutdown.clone();
        let abandon = async move {
            // Its sender gone is a shutdown too.
            let _ = shutdown.wait_for(|stop| *stop).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            biased;
            done = work => Some(done),
            () = abandon => None,
        }
    }

    /// Stores the cursor and tells [`Listeners::drain`](super::Listeners::drain).
    fn checkpoint(&mut self) -> Result<(), Error> {
        self.store.put_listener(&self.name, &self.record)?;
        self.last_checkpoint = std::time::Instant::now();
        let cursor = self.record.cursor;
        self.cursor_state.send_modify(|c| c.cursor = cursor);
        Ok(())
    }

    async fn start_instance(&self) -> Result<Instance, String> {
        let Target::Plugin { plugin, config, state_dir, allow_http } = &self.target else {
            return Ok(Instance::Monitor);
        };
        let plugin = plugin.as_ref().map_err(Clone::clone)?;
        std::fs::create_dir_all(state_dir)
            .map_err(|e| format!("cannot create its state directory {}: {e}", state_dir.display()))?;
        let (instance, report) =
            plugin.start_listener(config, Some(state_dir), allow_http).await.map_err(|e| one_line(&e.to_string()))?;
        report.result.map_err(|f| one_line(&format!("start failed: {} ({:?})", f.message, f.kind)))?;
        Ok(Instance::Plugin(Box::new(instance)))
    }

    /// After `failure`: restarts the listener (replaying the latest event of
    /// every view up to `replay_upto` when the failure was retryable) until
    /// it runs again. Returns false when it was disabled or shut down.
    async fn recover(
        &mut self,
        instance: &mut Instance,
        mut failure: ListenerFailure,
        replay_upto: Option<u64>,
    ) -> Result<bool, Error> {
        let replay = match replay_upto {
            Some(upto) => self.latest_per_view(upto)?,
            None => Vec::new(),
        };
        let mut position = 0;
        loop {
            // A failed instance still holds its store, and with it its
            // share of the memory budget: it goes before the next one
            // reserves its own, which would otherwise wait behind it.
            *instance = Instance::Stopped;
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
            let Some(started) = self.unless_shut_down(self.start_instance()).await else { return Ok(false) };
            *instance = match started {
                Ok(started) => started,
                Err(reason) => {
                    failure = ListenerFailure { retryable: false, message: reason };
                    continue;
                }
            };
            if failure.retryable {
                position = 0;
            }
            let mut failed = None;
            while let Some(event) = replay.get(position) {
                let Some(delivered) = self.unless_shut_down(instance.deliver(event)).await else { return Ok(false) };
                match delivered {
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
        let mut latest: HashMap<Arc<str>, LoggedEvent> = HashMap::new();
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
        let mut events: Vec<LoggedEvent> = latest.into_values().collect();
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
