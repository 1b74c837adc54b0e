//! Checks `[[coordinator]]` tables: each value on its own line with its own
//! message, and the `views` template against the declared view types, so
//! that a coordinator that loads can always create its actions.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use toml::Spanned;

use super::Checker;
use super::raw::RawCoordinator;
use crate::catalog::coordinator::{self, Catchup, Coordinator, Execution, FIELDS, Schedule, Trigger};
use crate::catalog::template::{Template, is_identifier};
use crate::catalog::time::{self, Dataset};
use crate::catalog::{EvaluationTime, ViewTypeId, closest, did_you_mean, pattern};
use crate::model::{Mode, from_wire_name};

/// Actions waiting at once when `throttle` is not given (Oozie's default).
pub const DEFAULT_THROTTLE: usize = 12;

/// Past actions a data trigger looks back over when `lookback` is not given.
pub const DEFAULT_LOOKBACK: usize = 3;

impl Checker<'_> {
    pub(super) fn coordinators(
        &mut self,
        raw: &[Spanned<RawCoordinator>],
        by_name: &HashMap<String, ViewTypeId>,
        evaluation_time: EvaluationTime,
    ) -> Vec<Coordinator> {
        let mut coordinators: Vec<Coordinator> = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for table in raw {
            let line = self.lines.line(table.span().start);
            let declared = table.get_ref();
            let name = declared.name.get_ref();
            let before = self.diagnostics.len();
            if !is_identifier(&name.replace('-', "_")) {
                self.error(
                    declared.name.span().start,
                    format!("coordinator `{name}`: names are letters, digits, `_` and `-`"),
                );
            } else if names.contains(&name.as_str()) {
                self.error(declared.name.span().start, format!("coordinator `{name}` is declared twice"));
            }
            names.push(name);
            if let Some(coordinator) = self.coordinator(declared, line, by_name, evaluation_time)
                && self.diagnostics.len() == before
            {
                self.check_catch_up(&coordinator, &declared.start);
                coordinators.push(coordinator);
            }
        }
        coordinators
    }

    /// One coordinator, or `None` with its errors recorded.
    fn coordinator(
        &mut self,
        raw: &RawCoordinator,
        line: usize,
        by_name: &HashMap<String, ViewTypeId>,
        evaluation_time: EvaluationTime,
    ) -> Option<Coordinator> {
        let name = raw.name.get_ref().as_str();
        let timezone = match &raw.timezone {
            None => Some(Tz::UTC),
            Some(text) => {
                self.value(text, |text| time::parse_timezone(text).map_err(|e| e.to_string()), name, "timezone")
            }
        };
        let timezone_or_utc = timezone.unwrap_or(Tz::UTC);
        let start = self.value(&raw.start, |text| instant(text, timezone_or_utc), name, "start");
        let end =
            raw.end.as_ref().and_then(|text| self.value(text, |text| instant(text, timezone_or_utc), name, "end"));
        if let (Some(start), Some(end), Some(text)) = (start, end, &raw.end)
            && end <= start
        {
            self.error(text.span().start, format!("coordinator `{name}`: end {end} is not after start {start}"));
        }
        let template = self.views(raw, by_name, start.zip(timezone));
        let schedule = self.schedule(raw, name, start, timezone);
        let (timeout, rescan_interval) = self.intervals(raw, name);
        let concurrency = self.count(&raw.concurrency, 1, name, "concurrency");
        let throttle = self.count(&raw.throttle, DEFAULT_THROTTLE, name, "throttle");
        let execution = match &raw.execution {
            None => Some(Execution::Fifo),
            Some(text) => self.value(text, execution, name, "execution"),
        };
        let trigger = self.trigger(raw, name);
        let mode = match &raw.mode {
            None => Some(Mode::Default),
            Some(text) => self.value(text, Mode::from_str, name, "mode"),
        };
        let catchup = match &raw.catchup {
            None => Some(Catchup::All),
            Some(value) => match catchup(value.get_ref()) {
                Ok(catchup) => Some(catchup),
                Err(message) => {
                    self.error(value.span().start, format!("coordinator `{name}`: catchup {message}"));
                    None
                }
            },
        };
        Some(Coordinator {
            name: name.to_string(),
            views: raw.views.get_ref().clone(),
            template: template?,
            schedule: schedule?,
            start: start?,
            end,
            timezone: timezone?,
            timeout,
            concurrency: concurrency?,
            throttle: throttle?,
            execution: execution?,
            trigger: trigger?,
            mode: mode?,
            evaluation_time: raw.evaluation_time.as_ref().map_or(evaluation_time, |e| *e.get_ref()),
            catchup: catchup?,
            rescan_interval: rescan_interval?,
            line,
        })
    }

    /// When the coordinator's actions are due: a cron expression, or every
    /// `frequency` from `start` in `timezone`.
    fn schedule(
        &mut self,
        raw: &RawCoordinator,
        name: &str,
        start: Option<DateTime<Utc>>,
        timezone: Option<Tz>,
    ) -> Option<Schedule> {
        // The frequency's own mistakes show even when `start` has some.
        let frequency = self.value(&raw.frequency, frequency, name, "frequency");
        match (frequency, start, timezone) {
            (Some(Frequency::Cron(cron)), _, _) => Some(Schedule::Cron(cron)),
            (Some(Frequency::Every), Some(_), Some(timezone)) => self.value(
                &raw.frequency,
                |text| {
                    Dataset::parse(text, raw.start.get_ref(), Some(timezone.name()))
                        .map(Schedule::Every)
                        .map_err(|e| e.to_string())
                },
                name,
                "frequency",
            ),
            _ => None,
        }
    }

    /// The optional `timeout` and the `rescan_interval` (or its default).
    fn intervals(&mut self, raw: &RawCoordinator, name: &str) -> (Option<Duration>, Option<Duration>) {
        let timeout = raw.timeout.as_ref().and_then(|text| {
            let duration = |text: &str| {
                humantime::parse_duration(text)
                    .map_err(|e| format!("not a duration (like `90min`, `36h` or `2days`): {e}"))
            };
            self.value(text, duration, name, "timeout")
        });
        let rescan_interval = match &raw.rescan_interval {
            None => Some(coordinator::DEFAULT_RESCAN_INTERVAL),
            Some(text) => {
                let duration = |text: &str| match humantime::parse_duration(text) {
                    Ok(d) if d >= coordinator::MIN_RESCAN_INTERVAL => Ok(d),
                    Ok(_) => Err("is at least 1s (each rescan looks at every waiting input)".to_string()),
                    Err(e) => Err(format!("not a duration (like `5min` or `30s`): {e}")),
                };
                self.value(text, duration, name, "rescan_interval")
            }
        };
        (timeout, rescan_interval)
    }

    /// A time trigger, or a data trigger with its `lookback`.
    fn trigger(&mut self, raw: &RawCoordinator, name: &str) -> Option<Trigger> {
        // Whether the trigger is `data`; `lookback` is its alone.
        let data = match &raw.trigger {
            None => Some(false),
            Some(text) => self.value(text, data_trigger, name, "trigger"),
        };
        match (data, &raw.lookback) {
            (Some(false), Some(lookback)) => {
                self.error(
                    lookback.span().start,
                    format!(
                        "coordinator `{name}`: lookback is for `trigger = \"data\"`; a time trigger never looks back"
                    ),
                );
                None
            }
            (Some(false), None) => Some(Trigger::Time),
            (Some(true), lookback) => {
                self.count(lookback, DEFAULT_LOOKBACK, name, "lookback").map(|lookback| Trigger::Data { lookback })
            }
            (None, _) => None,
        }
    }

    /// Refuses a coordinator that would create more than
    /// [`MAX_DUE_ACTIONS`] actions at once: a `start` in year 1 is a
    /// typo that would otherwise have `coordinate` write hundreds of
    /// thousands of actions (a daily one from year 1: 34 s and 1.4 GB of
    /// metastore) before anyone sees it. "Now" is the clock's
    /// (`TRELLIS_NOW` when set), read once here, the only clock loading reads.
    fn check_catch_up(&mut self, coordinator: &Coordinator, start: &Spanned<String>) {
        // Only the newest few are created: the start costs nothing then.
        if matches!(coordinator.catchup, crate::catalog::coordinator::Catchup::Newest(n) if n <= MAX_DUE_ACTIONS) {
            return;
        }
        let now = crate::clock::Clock::from_environment().map_or_else(|_| Utc::now(), |clock| clock.now());
        let Some(due) = due_actions(coordinator, now, MAX_DUE_ACTIONS) else { return };
        let name = &coordinator.name;
        let count = match coordinator.schedule {
            Schedule::Every(_) => due.to_string(),
            Schedule::Cron(_) => format!("more than {MAX_DUE_ACTIONS}"),
        };
        self.error(
            start.span().start,
            format!(
                "coordinator `{name}`: start `{}`: {count} actions would be due by now ({}) at frequency `{}`; \
                 at most {MAX_DUE_ACTIONS} are created at once: give a later start, or `catchup = \"none\"` or a count",
                start.get_ref(),
                now.format("%Y-%m-%d"),
                coordinator.frequency_text()
            ),
        );
    }

    /// `text` parsed by `parse`, or its error at its place, named by its key.
    fn value<T>(
        &mut self,
        text: &Spanned<String>,
        parse: impl FnOnce(&str) -> Result<T, String>,
        coordinator: &str,
        key: &str,
    ) -> Option<T> {
        match parse(text.get_ref()) {
            Ok(value) => Some(value),
            Err(message) => {
                self.error(
                    text.span().start,
                    format!("coordinator `{coordinator}`: {key} `{}`: {message}", text.get_ref()),
                );
                None
            }
        }
    }

    /// A count of at least 1, `default` when absent.
    fn count(&mut self, value: &Option<Spanned<i64>>, default: usize, coordinator: &str, key: &str) -> Option<usize> {
        match value {
            None => Some(default),
            Some(n) if *n.get_ref() >= 1 => Some(usize::try_from(*n.get_ref()).unwrap_or(usize::MAX)),
            Some(n) => {
                self.error(
                    n.span().start,
                    format!("coordinator `{coordinator}`: {key} is at least 1, not {}", n.get_ref()),
                );
                None
            }
        }
    }

    /// The `views` template: only the nominal time's fields, and at every
    /// nominal time a pattern of declared view types. It is checked at the
    /// first one (or a sample time when the others have errors): the fields
    /// are digits, so one time stands for all.
    fn views(
        &mut self,
        raw: &RawCoordinator,
        by_name: &HashMap<String, ViewTypeId>,
        start: Option<(DateTime<Utc>, Tz)>,
    ) -> Option<Template> {
        let name = raw.name.get_ref();
        let at = raw.views.span().start;
        let text = raw.views.get_ref();
        let template = match Template::parse(text) {
            Ok(template) => template,
            Err(message) => {
                self.error(at, format!("coordinator `{name}`: views: {message}"));
                return None;
            }
        };
        if let Some(unknown) = template.variables().find(|v| !FIELDS.contains(v)) {
            let hint = did_you_mean(unknown, FIELDS.into_iter());
            self.error(
                at,
                format!(
                    "coordinator `{name}`: views: `${{{unknown}}}` is not a field of the nominal time ({}){hint}",
                    FIELDS.map(|f| format!("${{{f}}}")).join(", ")
                ),
            );
            return None;
        }
        let (sample, timezone) = start.unwrap_or((DateTime::UNIX_EPOCH, Tz::UTC));
        let rendered = coordinator::render(&template, sample, timezone);
        let pattern = match pattern::parse(&rendered) {
            Ok(pattern) => pattern,
            Err(e) => {
                self.error(at, format!("coordinator `{name}`: views `{rendered}`: column {}: {}", e.column, e.message));
                return None;
            }
        };
        for view_type in &pattern.view_types {
            let full = format!("{}/{view_type}", pattern.package);
            if !by_name.contains_key(&full) {
                let candidates = closest(&full, by_name.keys().map(String::as_str));
                let hint = match candidates.as_slice() {
                    [] => String::new(),
                    names => format!("; did you mean {}?", names.join(", ")),
                };
                self.error(at, format!("coordinator `{name}`: views: no view type {full}{hint}"));
                return None;
            }
        }
        Some(template)
    }
}

/// The most actions a coordinator may have due at once (from its start to
/// now): about 5 s and 200 MB of metastore to create.
pub const MAX_DUE_ACTIONS: usize = 100_000;

/// How many actions `coordinator` has due by `now` (nominal times from its
/// start, at or before `now` and before its end) when that is more than
/// `limit`, else `None`: the coordinator's lag with nothing created yet
/// ([`Coordinator::lag`]). A cron schedule's count is then only "more than
/// `limit`".
fn due_actions(coordinator: &Coordinator, now: DateTime<Utc>, limit: usize) -> Option<usize> {
    // A dataset frequency is counted exactly, in one step; a cron schedule
    // is walked only as far as it takes to know it is over the limit.
    let cap = match coordinator.schedule {
        Schedule::Every(_) => usize::MAX,
        Schedule::Cron(_) => limit,
    };
    let lag = coordinator.lag(None, now, cap);
    (lag.more || lag.actions > limit).then_some(lag.actions)
}

/// `start` or `end`: a date or date-time, local to the coordinator's
/// timezone unless it carries an offset.
fn instant(text: &str, timezone: Tz) -> Result<DateTime<Utc>, String> {
    time::parse_timestamp(text, timezone).map(|t| t.with_timezone(&Utc)).map_err(|e| e.to_string())
}

/// A `frequency` as written: a cron expression, or a dataset frequency
/// (anchored at `start` once that is known).
enum Frequency {
    Cron(Box<croner::Cron>),
    /// Checked; the dataset is built with `start`.
    Every,
}

/// The dataset grammar (`1d`), or a cron expression written
/// `cron: 0 6 * * *`.
fn frequency(text: &str) -> Result<Frequency, String> {
    match text.strip_prefix("cron:") {
        Some(expression) => croner::Cron::from_str(expression.trim())
            .map(|cron| Frequency::Cron(Box::new(cron)))
            .map_err(|e| format!("not a cron expression: {e}")),
        None if text.trim().contains(' ') && !text.trim().starts_with("${") => {
            Err("a cron expression is written `cron: <expression>`; a frequency is like `1d` or `6h`".into())
        }
        None => text.parse::<time::Frequency>().map(|_| Frequency::Every).map_err(|e| e.to_string()),
    }
}

/// FIFO, LIFO, LAST_ONLY or NONE, in any case.
fn execution(text: &str) -> Result<Execution, String> {
    from_wire_name(&text.to_ascii_uppercase())
        .ok_or_else(|| "expected FIFO, LIFO, LAST_ONLY or NONE (in any case)".into())
}

/// `catchup`: `all` (every nominal time due gets its action, Oozie's
/// rule), `none` (only the newest, Airflow's `catchup=False`), or how many
/// of the newest.
fn catchup(value: &toml::Value) -> Result<Catchup, String> {
    let expected = "is `\"all\"`, `\"none\"` or how many of the newest due actions to create (at least 1)";
    match value {
        toml::Value::String(text) if text.eq_ignore_ascii_case("all") => Ok(Catchup::All),
        toml::Value::String(text) if text.eq_ignore_ascii_case("none") => Ok(Catchup::Newest(1)),
        toml::Value::Integer(n) if *n >= 1 => Ok(Catchup::Newest(usize::try_from(*n).unwrap_or(usize::MAX))),
        toml::Value::String(text) => Err(format!("`{text}`: {expected}")),
        other => Err(format!("{other}: {expected}")),
    }
}

/// `time` (false) or `data` (true), in any case.
fn data_trigger(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "time" => Ok(false),
        "data" => Ok(true),
        _ => Err("expected `time` or `data`".into()),
    }
}
