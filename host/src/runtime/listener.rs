//! The listener world: an instance started with its configuration (and its
//! state directory) that keeps its store across events until its first
//! failure, and the events it is given.

use std::path::Path;
use std::time::Duration;

use wasmtime::Store;

use super::bindings::listener::Listener as ListenerBindings;
use super::failure::{Phase, run};
use super::plugin::Pre;
use super::sandbox::{GUEST_STATE, Grant, Sandbox};
use super::{CallReport, Captured, Error, Failure, FailureKind, Plugin, ViewState, World, bindings};
use crate::model::AllowedHost;

/// A scheduling event as listeners receive it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "event")]
pub enum ListenerEvent {
    Transition {
        sequence: u64,
        view: String,
        previous: ViewState,
        current: ViewState,
        actions: Vec<String>,
        time: i64,
        run_id: Option<String>,
        error: Option<String>,
    },
    Gap {
        first_sequence: u64,
        last_sequence: u64,
    },
}

impl Plugin {
    /// Starts a listener instance with its configuration and, if given, its
    /// own state directory granted read-write at `/state`; it may send HTTP
    /// requests to `allow_http`'s hosts and to no other.
    pub async fn start_listener(
        &self,
        config: &[(String, String)],
        state_dir: Option<&Path>,
        allow_http: &[AllowedHost],
    ) -> Result<(ListenerInstance, CallReport<()>), Error> {
        let Pre::Listener(pre) = &self.inner.pre else {
            return Err(self.wrong_world(World::Listener));
        };
        let grants: Vec<Grant> = state_dir
            .map(|dir| Grant { host: dir.to_path_buf(), guest: GUEST_STATE.into(), writable: true })
            .into_iter()
            .collect();
        let mut store = self.store(&grants, false).await?;
        store.data_mut().allow_http(allow_http);
        let call = async |store: &mut Store<Sandbox>| {
            let instance = pre.instantiate_async(&mut *store).await.map_err(Phase::Instantiate)?;
            let started = instance
                .trellis_plugin_events()
                .call_start(&mut *store, &config.to_vec())
                .await
                .map_err(Phase::Call)?;
            Ok((instance, started))
        };
        let mut bindings = None;
        let report = run(&mut store, self.limits, call, |(instance, started)| {
            bindings = Some(instance);
            started.map_err(listener_failure)
        })
        .await;
        let instance =
            ListenerInstance { plugin: self.clone(), bindings: bindings.filter(|_| report.result.is_ok()), store };
        Ok((instance, report))
    }
}

fn listener_failure(error: bindings::listener::exports::trellis::plugin::events::ListenerError) -> Failure {
    use bindings::listener::exports::trellis::plugin::events::ListenerError;
    match error {
        ListenerError::Retryable(message) => Failure::new(FailureKind::Retryable, message),
        ListenerError::Fatal(message) => Failure::new(FailureKind::Fatal, message),
    }
}

/// A started listener. It keeps its store across events; after any failure
/// the instance is dead and every later call fails at once: start a new one.
pub struct ListenerInstance {
    plugin: Plugin,
    bindings: Option<ListenerBindings>,
    store: Store<Sandbox>,
}

impl ListenerInstance {
    /// Whether the instance can still take events.
    pub fn is_alive(&self) -> bool {
        self.bindings.is_some()
    }

    pub async fn on_event(&mut self, event: &ListenerEvent) -> CallReport<()> {
        use bindings::listener::exports::trellis::plugin::events as wit;
        let limits = self.plugin.limits;
        let Some(bindings) = self.bindings.take() else {
            return CallReport {
                result: Err(Failure::new(FailureKind::Unsupported, "the listener instance failed earlier; restart it")),
                elapsed: Duration::ZERO,
                cpu: Duration::ZERO,
                peak_memory: self.store.data().limiter.peak(),
                stdout: Captured::default(),
                stderr: Captured::default(),
                log: Vec::new(),
            };
        };
        let event = match event {
            ListenerEvent::Transition { sequence, view, previous, current, actions, time, run_id, error } => {
                wit::Event::Transition(wit::Transition {
                    sequence: *sequence,
                    view: view.clone(),
                    previous: (*previous).into(),
                    current: (*current).into(),
                    actions: actions.clone(),
                    time: *time,
                    run_id: run_id.clone(),
                    error: error.clone(),
                })
            }
            ListenerEvent::Gap { first_sequence, last_sequence } => {
                wit::Event::Gap(wit::Gap { first_sequence: *first_sequence, last_sequence: *last_sequence })
            }
        };
        let call = async |store: &mut Store<Sandbox>| {
            bindings.trellis_plugin_events().call_on_event(store, &event).await.map_err(Phase::Call)
        };
        let report = run(&mut self.store, limits, call, |returned| returned.map_err(listener_failure)).await;
        if report.result.is_ok() {
            self.bindings = Some(bindings);
        }
        report
    }
}

impl From<ViewState> for bindings::listener::exports::trellis::plugin::events::ViewState {
    fn from(state: ViewState) -> Self {
        use bindings::listener::exports::trellis::plugin::events::ViewState as Wit;
        match state {
            ViewState::Receive => Wit::Receive,
            ViewState::Invalidated => Wit::Invalidated,
            ViewState::NoData => Wit::NoData,
            ViewState::Waiting => Wit::Waiting,
            ViewState::Transforming => Wit::Transforming,
            ViewState::Materialized => Wit::Materialized,
            ViewState::Retrying => Wit::Retrying,
            ViewState::Failed => Wit::Failed,
        }
    }
}
