//! A `[[coordinator]]`: when trellis materializes views by itself (Oozie's
//! coordinator jobs). The declaration and its pure calendar: the nominal
//! times at which it creates actions, and the view pattern each action
//! addresses. No I/O, no clock: the time is always given.

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::EvaluationTime;
use super::template::Template;
use super::time::{self, Dataset};
use crate::model::Mode;

/// A declared coordinator; valid once it exists (its pattern template
/// names only fields it has, its schedule yields times).
#[derive(Debug, Clone)]
pub struct Coordinator {
    pub name: String,
    /// A view pattern with the nominal time's fields (`${YEAR}`, `${MONTH}`,
    /// `${DAY}`, `${HOUR}`, `${MINUTE}`, in the coordinator's timezone).
    pub views: String,
    /// `views`, parsed.
    pub template: Template,
    pub schedule: Schedule,
    /// The first nominal time is the first tick at or after `start`.
    pub start: DateTime<Utc>,
    /// No action has a nominal time at or after `end`.
    pub end: Option<DateTime<Utc>>,
    pub timezone: Tz,
    /// How long an action waits for its inputs after its creation (its
    /// actual time); `None` waits forever.
    pub timeout: Option<Duration>,
    /// Actions SUBMITTED or RUNNING at once.
    pub concurrency: usize,
    /// Actions WAITING at once: creation pauses while that many wait.
    pub throttle: usize,
    pub execution: Execution,
    pub trigger: Trigger,
    /// The mode of the runs its actions start.
    pub mode: Mode,
    /// What an action's `latest()` and `actualTime()` count from.
    pub evaluation_time: EvaluationTime,
    /// Which of the nominal times due at once (after downtime, or from a
    /// `start` in the past) get an action.
    pub catchup: Catchup,
    /// How often a server looks at its waiting actions' inputs whatever the
    /// watches say: a change they missed (a network file system, an
    /// overflow, a watch that could not be added) delays an action by at
    /// most this, never strands it.
    pub rescan_interval: Duration,
    /// Its `[[coordinator]]` header's line.
    pub line: usize,
}

/// When a coordinator ticks.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// The dataset grammar (`1d`, `6h`, `1M`...), anchored at `start` in the
    /// coordinator's timezone, DST handled as datasets handle it.
    Every(Dataset),
    /// A cron expression, evaluated in the coordinator's timezone: a local
    /// time that a DST switch skips does not occur, one it repeats occurs
    /// once (croner's rules).
    Cron(Box<croner::Cron>),
}

/// Which READY actions run, and in what order (Oozie's `execution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Execution {
    /// Oldest nominal time first.
    Fifo,
    /// Newest nominal time first.
    Lifo,
    /// Only the newest READY action runs; older READY or WAITING ones are SKIPPED.
    LastOnly,
    /// An action whose nominal time has passed by more than one tick when
    /// it could start is SKIPPED; the rest run oldest first.
    None,
}

/// Which of the nominal times due at once get an action: every one, in
/// order (Oozie); only the newest (Airflow's `catchup=False`); or the
/// newest `n`. The older ones are passed over: they never get an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Catchup {
    All,
    Newest(usize),
}

impl Catchup {
    /// As written in `trellis.toml`: `all`, `none`, or a count.
    pub fn text(self) -> String {
        match self {
            Catchup::All => "all".into(),
            Catchup::Newest(1) => "none".into(),
            Catchup::Newest(n) => n.to_string(),
        }
    }
}

/// How far behind a coordinator is: the nominal times due by now that have
/// no action yet (counted up to [`LAG_COUNT_CAP`]), and the oldest of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lag {
    pub actions: usize,
    /// Whether there are more than `actions` (the count stopped at its cap).
    pub more: bool,
    pub since: Option<DateTime<Utc>>,
}

/// `rescan_interval` when not given.
pub const DEFAULT_RESCAN_INTERVAL: Duration = Duration::from_secs(300);

/// The shortest `rescan_interval`: a rescan looks at every waiting input.
pub const MIN_RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// Where counting the actions a coordinator is behind stops.
pub const LAG_COUNT_CAP: usize = 100_000;

/// More actions due at once than this is worth a warning (`validate`, and
/// when coordinators open): with `catchup = "all"` they take long to work off.
pub const MANY_DUE: usize = 1_000;

/// What makes a coordinator materialize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Each tick's action, once its inputs are ready.
    Time,
    /// As `Time`, and a past action among the last `lookback` ones runs
    /// again when one of its external inputs is re-delivered.
    Data { lookback: usize },
}

impl Coordinator {
    /// The nominal times after `after` (from `start` when `None`), in order,
    /// up to `end`.
    pub fn nominal_times_after(&self, after: Option<DateTime<Utc>>) -> Box<dyn Iterator<Item = DateTime<Utc>> + '_> {
        match &self.schedule {
            Schedule::Every(dataset) => {
                let first = match after {
                    None => 0,
                    Some(t) => dataset.index_at_or_before(t).map_or(0, |k| k + 1),
                };
                let end = self.end;
                Box::new(
                    (first..).map_while(|k| dataset.instance(k)).take_while(move |t| end.is_none_or(|end| *t < end)),
                )
            }
            Schedule::Cron(cron) => {
                let timezone = self.timezone;
                let end = self.end;
                // The first tick at or after `start`, then each one after the last.
                let mut last: Option<DateTime<Utc>> = None;
                let mut first = Some(match after {
                    Some(t) if t >= self.start => (t, false),
                    _ => (self.start, true),
                });
                Box::new(
                    std::iter::from_fn(move || {
                        let (from, inclusive) = first.take().or_else(|| last.map(|t| (t, false)))?;
                        let next = cron.find_next_occurrence(&from.with_timezone(&timezone), inclusive).ok()?;
                        let next = next.with_timezone(&Utc);
                        last = Some(next);
                        Some(next)
                    })
                    .take_while(move |t| end.is_none_or(|end| *t < end)),
                )
            }
        }
    }

    /// The nominal times due by `now` after `after` that have no action
    /// yet, counted up to `cap`.
    pub fn lag(&self, after: Option<DateTime<Utc>>, now: DateTime<Utc>, cap: usize) -> Lag {
        // A dataset frequency counts in one step: this runs at every tick,
        // and a coordinator far behind would otherwise walk `cap` times.
        if let Schedule::Every(dataset) = &self.schedule {
            let first = after.map_or(0, |t| dataset.index_at_or_before(t).map_or(0, |k| k + 1));
            let last_due = self.end.map_or(now, |end| now.min(end - chrono::TimeDelta::nanoseconds(1)));
            let due = dataset.index_at_or_before(last_due).map_or(0, |last| (last + 1 - first).max(0));
            let due = usize::try_from(due).unwrap_or(usize::MAX);
            let since = if due > 0 { dataset.instance(first) } else { None };
            return Lag { actions: due.min(cap), more: due > cap, since };
        }
        let mut lag = Lag::default();
        for nominal in self.nominal_times_after(after).take_while(|t| *t <= now) {
            if lag.actions == cap {
                lag.more = true;
                break;
            }
            lag.since.get_or_insert(nominal);
            lag.actions += 1;
        }
        lag
    }

    /// The first nominal time after `after`, if any.
    pub fn next_nominal(&self, after: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
        self.nominal_times_after(after).next()
    }

    /// The view pattern of the action at `nominal`.
    pub fn views_at(&self, nominal: DateTime<Utc>) -> String {
        render(&self.template, nominal, self.timezone)
    }

    /// How it ticks, as written: `1d`, or `cron: 0 6 * * *`.
    pub fn frequency_text(&self) -> String {
        match &self.schedule {
            Schedule::Every(dataset) => dataset.frequency().to_string(),
            Schedule::Cron(cron) => format!("cron: {}", cron.as_str()),
        }
    }
}

/// `template` with the fields of `nominal`, local to `timezone`.
pub fn render(template: &Template, nominal: DateTime<Utc>, timezone: Tz) -> String {
    let fields = time::template_values(nominal, timezone);
    template.render(|name| fields.iter().find(|(field, _)| *field == name).map(|(_, value)| value.as_str()))
}

/// The nominal time's fields a `views` template may use.
pub const FIELDS: [&str; 5] = ["YEAR", "MONTH", "DAY", "HOUR", "MINUTE"];
