//! What `trellis listeners` shows and changes: each listener's state and
//! status, read from its record in the metastore, and re-enabling a
//! disabled one. Also the project's list of listeners and the record a new
//! one starts with, which the supervisors and the retention share.

use crate::catalog::{Catalog, ListenerDecl, MONITOR};
use crate::metastore::{self, ListenerRecord, Metastore};

use super::Error;

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
pub(super) fn declared(catalog: &Catalog) -> Vec<(String, Option<&ListenerDecl>)> {
    let monitor = catalog.settings.events.monitor.then(|| (MONITOR.to_string(), None));
    monitor.into_iter().chain(catalog.listeners.iter().map(|decl| (decl.name.clone(), Some(decl)))).collect()
}

/// A listener's record, or the one a new listener starts with: it receives
/// the whole log that is still kept.
pub(super) fn record_of(store: &Metastore, name: &str) -> Result<ListenerRecord, Error> {
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
        let oldest = store.first_event_time(record.cursor)?.map(|time| now - time);
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
