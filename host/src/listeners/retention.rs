//! Log retention: trims the event log to what enabled listeners have not
//! received yet plus `[events] history`, never above `[events] max`, as it
//! grows and once at shutdown. Events it removes before a listener saw them
//! reach that listener as one gap event (see the supervisor).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::catalog::{Catalog, EventSettings};
use crate::metastore::Metastore;

use super::Error;
use super::status::{declared, record_of};

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
pub(super) struct Retention {
    settings: RetentionSettings,
    store: Arc<Metastore>,
}

impl Retention {
    pub(super) fn new(catalog: &Catalog, store: Arc<Metastore>) -> Self {
        Retention { settings: RetentionSettings::of(catalog), store }
    }

    pub(super) async fn run(self, mut shutdown: watch::Receiver<bool>) {
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
