//! The one clock trellis records times by. The system clock in production; a clock
//! that starts at a set time (`TRELLIS_NOW`, `--now`) and runs on from
//! there for demos and end-to-end tests; and a manual clock, moved only by
//! its owner, for in-process tests. A scheduler reads every time it
//! records (run records, view events and timestamps, action times) from
//! its one `Clock`, and coordinators decide by the same one, so that every
//! rule (due times, timeouts, catch-up) is testable without sleeping and
//! what is recorded agrees with what was decided.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! the one clock: the system clock, one
//! that starts at a set time and runs on (`TRELLIS_NOW`), or a manual one
//! that only its owner moves and whose moves wake a service (`follow`).
//! `parse_time`, the one parser of every `--now`, `--from`/`--to` and
//! `TRELLIS_NOW`, reads RFC 3339, the project file's ISO 8601
//! (`catalog::time::parse_timestamp`, in UTC) or a date. A `Scheduler` holds one
//! (`TRELLIS_NOW` or the system clock at open; `set_clock`, which a
//! service and `Coordination::open` call with theirs) and records every
//! time by it: run records, view events and timestamps, attempt logs,
//! txlog markers, actions. Nothing in the scheduler reads the wall clock.

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};

/// A source of "now". Cheap to clone; clones of a manual clock share it.
#[derive(Debug, Clone)]
pub enum Clock {
    System,
    /// Starts at `at` when `since` was taken and advances with real time.
    From {
        at: DateTime<Utc>,
        since: Instant,
    },
    /// Moves only when set; whoever follows it is told (see `follow`).
    Manual(Arc<tokio::sync::watch::Sender<DateTime<Utc>>>),
}

/// The variable that sets a clock's start for a process.
pub const NOW_VARIABLE: &str = "TRELLIS_NOW";

impl Clock {
    /// A clock that reads `at` now and runs on from there.
    pub fn starting_at(at: DateTime<Utc>) -> Clock {
        Clock::From { at, since: Instant::now() }
    }

    pub fn manual(at: DateTime<Utc>) -> Clock {
        Clock::Manual(Arc::new(tokio::sync::watch::Sender::new(at)))
    }

    /// For a manual clock, a receiver that changes each time it is set: a
    /// service waits on it, as on a timer, so that a test moving the clock
    /// wakes it. `None` for the clocks that move by themselves.
    pub fn follow(&self) -> Option<tokio::sync::watch::Receiver<DateTime<Utc>>> {
        match self {
            Clock::Manual(now) => Some(now.subscribe()),
            _ => None,
        }
    }

    /// The system clock, or one starting at `TRELLIS_NOW` (RFC 3339) when it
    /// is set; an unreadable value is the error, naming the variable.
    pub fn from_environment() -> Result<Clock, String> {
        match std::env::var(NOW_VARIABLE) {
            Ok(text) => parse_time(&text).map(Clock::starting_at).map_err(|e| format!("{NOW_VARIABLE}: {e}")),
            Err(_) => Ok(Clock::System),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::From { at, since } => *at + since.elapsed(),
            Clock::Manual(now) => *now.borrow(),
        }
    }

    /// Now in milliseconds since the Unix epoch, as records keep times.
    pub fn millis(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// Sets a manual clock; the others are not set by hand and ignore it.
    pub fn set(&self, at: DateTime<Utc>) {
        if let Clock::Manual(now) = self {
            now.send_replace(at);
        }
    }

    /// How long until `at` by this clock, for a timer; zero when it has
    /// passed. A manual clock never gets there by itself: `None`.
    pub fn until(&self, at: DateTime<Utc>) -> Option<std::time::Duration> {
        match self {
            Clock::Manual(_) => None,
            _ => Some((at - self.now()).to_std().unwrap_or_default()),
        }
    }
}

/// A time as every `--now`, `--from`, `--at` and `TRELLIS_NOW` take it, the
/// one parser of them all: RFC 3339 (`2015-05-03T07:00:00Z`, fractions of a
/// second too), or the ISO 8601 a project file takes (`2014-10-19T07:00Z`,
/// `2015-05-03T07:00`, seconds optional, UTC without an offset), or a date
/// alone (midnight UTC).
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    if let Ok(time) = crate::catalog::time::parse_timestamp(text, chrono_tz::Tz::UTC) {
        return Ok(time.with_timezone(&Utc));
    }
    Err(format!(
        "`{text}` is not a time (RFC 3339 or ISO 8601, as 2015-05-03T07:00:00Z or 2015-05-03T07:00Z, or a date, as 2015-05-03)"
    ))
}

/// The end of a range as `--to` takes it: a time, or a date meaning the
/// whole of that day (UTC), so that `--from 2015-05-01 --to 2015-05-02`
/// covers two days of actions whatever their time of day.
pub fn parse_time_until(text: &str) -> Result<DateTime<Utc>, String> {
    let time = parse_time(text)?;
    let date_alone = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok();
    Ok(if date_alone { time + chrono::TimeDelta::days(1) - chrono::TimeDelta::milliseconds(1) } else { time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_ending_a_range_covers_its_whole_day() {
        assert_eq!(parse_time_until("2015-05-02").unwrap().to_rfc3339(), "2015-05-02T23:59:59.999+00:00");
        assert_eq!(parse_time_until("2015-05-02T06:00:00Z").unwrap().to_rfc3339(), "2015-05-02T06:00:00+00:00");
        assert_eq!(parse_time_until("2015-05-02T06:00Z").unwrap().to_rfc3339(), "2015-05-02T06:00:00+00:00");
    }

    #[test]
    fn times_are_read_as_rfc_3339_or_dates() {
        assert_eq!(parse_time("2015-05-03T07:00:00Z").unwrap().to_rfc3339(), "2015-05-03T07:00:00+00:00");
        assert_eq!(parse_time("2015-05-03T09:00:00+02:00").unwrap().to_rfc3339(), "2015-05-03T07:00:00+00:00");
        assert_eq!(parse_time("2015-05-03").unwrap().to_rfc3339(), "2015-05-03T00:00:00+00:00");
        assert!(parse_time("yesterday").unwrap_err().contains("`yesterday` is not a time"));
        // As a project file and `deps --now` write times (Oozie's form).
        assert_eq!(parse_time("2014-10-19T07:00Z").unwrap().to_rfc3339(), "2014-10-19T07:00:00+00:00");
        assert_eq!(parse_time("2014-10-19T07:00").unwrap().to_rfc3339(), "2014-10-19T07:00:00+00:00");
        assert_eq!(parse_time("2014-10-19T09:00+02:00").unwrap().to_rfc3339(), "2014-10-19T07:00:00+00:00");
        assert_eq!(parse_time("2015-05-03T07:00:00.5Z").unwrap().to_rfc3339(), "2015-05-03T07:00:00.500+00:00");
        assert!(parse_time("2015-5-3").is_err());
    }

    #[test]
    fn a_manual_clock_moves_only_when_set_and_its_clones_share_it() {
        let start = parse_time("2015-05-03").unwrap();
        let clock = Clock::manual(start);
        let clone = clock.clone();
        assert_eq!(clock.now(), start);
        clone.set(start + chrono::Duration::hours(6));
        assert_eq!(clock.now(), start + chrono::Duration::hours(6));
        assert_eq!(clock.until(start), None);
    }

    #[test]
    fn a_clock_from_a_time_runs_on_from_it() {
        let start = parse_time("2015-05-03").unwrap();
        let clock = Clock::starting_at(start);
        assert!(clock.now() >= start && clock.now() < start + chrono::Duration::minutes(1));
        assert_eq!(clock.until(start), Some(std::time::Duration::ZERO));
    }
}
