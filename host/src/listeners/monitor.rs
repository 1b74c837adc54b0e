//! The built-in monitor: the listener without a plugin, which reports
//! state changes through tracing.

use crate::runtime::ListenerEvent;

/// Logs one event: state changes through tracing, as Schedoscope's
/// ViewSchedulingMonitor logs them.
pub(super) fn trace(event: &ListenerEvent) {
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
