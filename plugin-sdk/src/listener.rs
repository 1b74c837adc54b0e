//! The `listener` world: a scheduling listener sees every scheduling event.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;

use crate::bindings::listener::exports::trellis::plugin::events;

pub use events::{Event, Gap, ListenerError, Transition, ViewState};

use crate::{Config, PluginInfo};

/// A scheduling listener. Unlike transformations, a listener instance lives
/// across events: the host calls [`Listener::start`] once per instance, then
/// [`Listener::on_event`] for each event, until a failure makes it start a
/// fresh instance.
pub trait Listener: Sized + 'static {
    fn describe() -> PluginInfo;

    /// Creates the listener from its configuration in `trellis.toml`.
    fn start(config: Config<'_>) -> Result<Self, ListenerError>;

    /// Handles one event. [`ListenerError::Fatal`] drops the event and
    /// restarts the listener; [`ListenerError::Retryable`] restarts it and
    /// replays the latest event of every view.
    fn on_event(&mut self, event: Event) -> Result<(), ListenerError>;
}

impl ListenerError {
    pub fn fatal(message: impl std::fmt::Display) -> Self {
        ListenerError::Fatal(message.to_string())
    }

    pub fn retryable(message: impl std::fmt::Display) -> Self {
        ListenerError::Retryable(message.to_string())
    }
}

impl ViewState {
    /// Every state, in the order of the contract.
    pub const ALL: [ViewState; 8] = [
        ViewState::Receive,
        ViewState::Invalidated,
        ViewState::NoData,
        ViewState::Waiting,
        ViewState::Transforming,
        ViewState::Materialized,
        ViewState::Retrying,
        ViewState::Failed,
    ];

    /// The state named `name` as trellis prints it (`as_str`), e.g. from
    /// a listener's configuration.
    pub fn from_name(name: &str) -> Option<ViewState> {
        ViewState::ALL.into_iter().find(|state| state.as_str() == name)
    }

    /// The state's name as trellis prints it, e.g. `no-data`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ViewState::Receive => "receive",
            ViewState::Invalidated => "invalidated",
            ViewState::NoData => "no-data",
            ViewState::Waiting => "waiting",
            ViewState::Transforming => "transforming",
            ViewState::Materialized => "materialized",
            ViewState::Retrying => "retrying",
            ViewState::Failed => "failed",
        }
    }
}

thread_local! {
    // A component instance is single-threaded; this holds the one listener
    // value between calls. Boxed as Any because statics cannot be generic.
    static STARTED: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

#[doc(hidden)]
pub struct ListenerExport<T>(PhantomData<T>);

impl<T: Listener> events::Guest for ListenerExport<T> {
    fn describe() -> PluginInfo {
        crate::set_panic_hook();
        T::describe()
    }

    fn start(config: Vec<(String, String)>) -> Result<(), ListenerError> {
        crate::set_panic_hook();
        let listener = T::start(Config::new(&config))?;
        STARTED.with(|slot| *slot.borrow_mut() = Some(Box::new(listener)));
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), ListenerError> {
        crate::set_panic_hook();
        STARTED.with(|slot| {
            let mut slot = slot.borrow_mut();
            let listener = slot
                .as_mut()
                .and_then(|started| started.downcast_mut::<T>())
                .ok_or_else(|| ListenerError::fatal("on-event called before start"))?;
            listener.on_event(event)
        })
    }
}
