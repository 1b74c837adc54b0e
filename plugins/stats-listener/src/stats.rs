//! The statistics themselves, apart from the file that holds them, so that
//! the counting can be tested on the host.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use trellis_plugin_sdk::{Event, ViewState};

/// Everything `stats.json` holds.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Events counted: transitions and gap events.
    pub events: u64,
    /// Transitions per state they ended in (`current`).
    pub states: BTreeMap<String, u64>,
    /// Events missed, summed over gap events.
    pub gaps: u64,
    /// Durations of the transformations that finished.
    pub transformations: Durations,
    /// Finished transformations per state the view left `transforming` for.
    pub by_outcome: BTreeMap<String, u64>,
    /// Views transforming now, with the time (ms since the epoch) they started.
    pub pending: BTreeMap<String, i64>,
    /// The highest sequence counted. After a restart trellis replays the
    /// latest event of every view; those at or below it are already counted.
    pub last_sequence: Option<u64>,
}

/// Transformation durations in milliseconds; `max_ms` and `min_ms` are null
/// until one finishes.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durations {
    pub count: u64,
    pub total_ms: u64,
    pub max_ms: Option<u64>,
    pub min_ms: Option<u64>,
}

impl Stats {
    /// Counts one event, unless it was counted before.
    pub fn apply(&mut self, event: &Event) {
        let last = match event {
            Event::Transition(t) => t.sequence,
            Event::Gap(gap) => gap.last_sequence,
        };
        if self.last_sequence.is_some_and(|seen| last <= seen) {
            return;
        }
        self.last_sequence = Some(last);
        self.events += 1;
        match event {
            Event::Transition(t) => {
                *self.states.entry(t.current.as_str().to_string()).or_default() += 1;
                if t.current == ViewState::Transforming {
                    self.pending.insert(t.view.clone(), t.time);
                } else if let Some(started) = self.pending.remove(&t.view) {
                    // A clock stepped back must not make a negative duration.
                    self.transformations.record(u64::try_from(t.time.saturating_sub(started)).unwrap_or(0));
                    *self.by_outcome.entry(t.current.as_str().to_string()).or_default() += 1;
                }
            }
            Event::Gap(gap) => self.gaps += gap.last_sequence.saturating_sub(gap.first_sequence) + 1,
        }
    }
}

impl Durations {
    fn record(&mut self, ms: u64) {
        self.count += 1;
        self.total_ms += ms;
        self.max_ms = Some(self.max_ms.map_or(ms, |max| max.max(ms)));
        self.min_ms = Some(self.min_ms.map_or(ms, |min| min.min(ms)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trellis_plugin_sdk::{Gap, Transition};

    fn transition(sequence: u64, view: &str, current: ViewState, time: i64) -> Event {
        Event::Transition(Transition {
            sequence,
            view: view.to_string(),
            previous: ViewState::Waiting,
            current,
            actions: Vec::new(),
            time,
            run_id: None,
            error: None,
        })
    }

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(name, n)| (name.to_string(), *n)).collect()
    }

    #[test]
    fn counts_states_and_gaps() {
        let mut stats = Stats::default();
        stats.apply(&transition(1, "a", ViewState::Waiting, 0));
        stats.apply(&transition(2, "b", ViewState::Waiting, 0));
        stats.apply(&Event::Gap(Gap { first_sequence: 3, last_sequence: 5 }));
        stats.apply(&transition(6, "a", ViewState::NoData, 0));
        assert_eq!(stats.events, 4);
        assert_eq!(stats.states, counts(&[("waiting", 2), ("no-data", 1)]));
        assert_eq!(stats.gaps, 3);
        assert_eq!(stats.last_sequence, Some(6));
    }

    #[test]
    fn measures_transformations_per_view() {
        let mut stats = Stats::default();
        stats.apply(&transition(1, "a", ViewState::Transforming, 1_000));
        stats.apply(&transition(2, "b", ViewState::Transforming, 1_500));
        assert_eq!(stats.pending, [("a".to_string(), 1_000), ("b".to_string(), 1_500)].into());
        stats.apply(&transition(3, "a", ViewState::Materialized, 1_250));
        stats.apply(&transition(4, "b", ViewState::Failed, 3_500));
        stats.apply(&transition(5, "a", ViewState::Transforming, 4_000));
        stats.apply(&transition(6, "a", ViewState::Retrying, 4_100));
        assert_eq!(
            stats.transformations,
            Durations { count: 3, total_ms: 2_350, max_ms: Some(2_000), min_ms: Some(100) }
        );
        assert_eq!(stats.by_outcome, counts(&[("materialized", 1), ("failed", 1), ("retrying", 1)]));
        assert!(stats.pending.is_empty());
    }

    #[test]
    fn an_end_without_a_start_is_not_a_transformation() {
        let mut stats = Stats::default();
        stats.apply(&transition(1, "a", ViewState::Materialized, 1_000));
        stats.apply(&transition(2, "a", ViewState::Transforming, 2_000));
        stats.apply(&transition(3, "b", ViewState::Materialized, 3_000));
        assert_eq!(stats.transformations, Durations::default());
        assert_eq!(stats.pending, [("a".to_string(), 2_000)].into());
    }

    #[test]
    fn a_clock_stepping_back_counts_as_zero() {
        let mut stats = Stats::default();
        stats.apply(&transition(1, "a", ViewState::Transforming, 1_000));
        stats.apply(&transition(2, "a", ViewState::Materialized, 900));
        assert_eq!(stats.transformations, Durations { count: 1, total_ms: 0, max_ms: Some(0), min_ms: Some(0) });
    }

    #[test]
    fn replayed_events_are_not_counted_twice() {
        let mut stats = Stats::default();
        stats.apply(&transition(1, "a", ViewState::Transforming, 1_000));
        stats.apply(&transition(2, "a", ViewState::Materialized, 2_000));
        stats.apply(&Event::Gap(Gap { first_sequence: 3, last_sequence: 4 }));
        let before = stats.clone();
        stats.apply(&transition(2, "a", ViewState::Materialized, 2_000));
        stats.apply(&Event::Gap(Gap { first_sequence: 3, last_sequence: 4 }));
        assert_eq!(stats, before);
    }

    #[test]
    fn a_fresh_instance_continues_from_the_saved_json() {
        let mut stats = Stats::default();
        stats.apply(&transition(1, "a", ViewState::Transforming, 1_000));
        let mut reloaded: Stats = serde_json::from_str(&serde_json::to_string(&stats).unwrap()).unwrap();
        assert_eq!(reloaded, stats);
        reloaded.apply(&transition(2, "a", ViewState::Materialized, 1_700));
        assert_eq!(reloaded.transformations.total_ms, 700);
    }
}
