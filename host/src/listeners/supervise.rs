//! The supervision rule, pure: what happens to a listener after a failure.
//! Kept apart from the task that delivers events so that a golden table can
//! pin it down.

use std::time::Duration;

use crate::metastore::ListenerRecord;

/// The longest a listener waits before a restart.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The shortest: a listener that can never start does not spin.
pub const MIN_BACKOFF: Duration = Duration::from_millis(1);

/// A failed delivery or start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerFailure {
    /// Restart and replay the latest event of every view (else drop the event).
    pub retryable: bool,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start a fresh instance after `delay`.
    Restart { delay: Duration },
    /// Out of restarts: stop delivering until re-enabled.
    Disable { reason: String },
}

/// After a failure of a listener that has restarted `record.restarts` times
/// since it was enabled, the `failures_in_row`-th failure without a
/// delivered event in between: restart it, later each time it keeps
/// failing, unless `max_retries` (`None`: unlimited) are used up.
pub fn decide(record: &ListenerRecord, max_retries: Option<u32>, backoff: Duration, failures_in_row: u32) -> Decision {
    if let Some(max) = max_retries
        && record.restarts >= max
    {
        let reason = match record.restarts {
            0 => format!("failed, and max_retries = {max} allows no restart"),
            1 => format!("failed again after 1 restart (max_retries = {max})"),
            n => format!("failed again after {n} restarts (max_retries = {max})"),
        };
        return Decision::Disable { reason };
    }
    let doublings = failures_in_row.saturating_sub(1).min(16);
    let delay = backoff.max(MIN_BACKOFF).saturating_mul(1 << doublings).min(MAX_BACKOFF);
    Decision::Restart { delay }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        let mut table = String::new();
        for (restarts, max_retries, failures_in_row) in [
            (0, None, 1),
            (5, None, 3),
            (1000, None, 40),
            (0, Some(0), 1),
            (0, Some(3), 1),
            (2, Some(3), 3),
            (3, Some(3), 4),
            (1, Some(1), 2),
        ] {
            let record = ListenerRecord { restarts, ..ListenerRecord::default() };
            let decision = decide(&record, max_retries, Duration::from_millis(100), failures_in_row);
            table.push_str(&format!(
                "restarts {restarts:>4}, max {max_retries:?}, in a row {failures_in_row:>2}: {decision:?}\n"
            ));
        }
        expect_test::expect![[r#"
            restarts    0, max None, in a row  1: Restart { delay: 100ms }
            restarts    5, max None, in a row  3: Restart { delay: 400ms }
            restarts 1000, max None, in a row 40: Restart { delay: 60s }
            restarts    0, max Some(0), in a row  1: Disable { reason: "failed, and max_retries = 0 allows no restart" }
            restarts    0, max Some(3), in a row  1: Restart { delay: 100ms }
            restarts    2, max Some(3), in a row  3: Restart { delay: 400ms }
            restarts    3, max Some(3), in a row  4: Disable { reason: "failed again after 3 restarts (max_retries = 3)" }
            restarts    1, max Some(1), in a row  2: Disable { reason: "failed again after 1 restart (max_retries = 1)" }
        "#]].assert_eq(&table);
        // A zero backoff still waits, and doubles.
        let fresh = ListenerRecord::default();
        assert_eq!(decide(&fresh, None, Duration::ZERO, 3), Decision::Restart { delay: Duration::from_millis(4) });
    }
}
