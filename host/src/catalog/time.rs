//! Dataset time for trellis: Oozie-style frequencies, dataset instances, `current(n)` / `latest(n)`,
//! roll-up of one dataset's instances into another's period, path components, and the EL helpers
//! `dateOffset` and `formatTime`.
//!
//! # Model
//!
//! A [`Dataset`] has a [`Frequency`], an initial instance given as a *local* date-time, and an IANA timezone
//! (UTC unless stated). Instance `k` (`k >= 0`) is `initial + k * frequency`, always computed from the initial
//! instance in one step (never by repeated addition), so a monthly dataset that starts on Jan 31 yields
//! Feb 28/29, Mar 31, Apr 30, ... rather than drifting to the 28th. Instances before the initial instance do
//! not exist (Oozie returns the empty string for them; we return `None`).
//!
//! * Minute and hour frequencies step in absolute time (`6h` is always 21600 s apart, even across DST).
//! * Day and month frequencies step in the dataset's local calendar (a daily dataset in Europe/Berlin stays at
//!   local midnight across DST switches), which is what Oozie gets from `java.util.Calendar.add`.
//!
//! Local date-times that do not map to exactly one instant are resolved like `java.time.ZonedDateTime`:
//! a time inside a DST gap is moved forward by the length of the gap (02:30 on a spring-forward night becomes
//! 03:30 summer time), and an ambiguous time in a fold takes the earlier instant (the summer-time one).
//! Because day/month instances are at least a day apart and real gaps are at most a day long, the instance
//! sequence stays non-decreasing; only a gap of a whole day (Pacific/Apia skipped 2011-12-30) can make two
//! consecutive instances coincide, in which case [`Dataset::index_at_or_before`] reports the later index.
//!
//! # Cost
//!
//! [`Dataset::instance`] is a single calendar computation, and [`Dataset::index_at_or_before`] estimates the
//! index arithmetically (in absolute time for minutes/hours, in local wall time for days/months) and then
//! corrects the estimate by at most a couple of steps, so both are O(1) regardless of how far `t` is from the
//! initial instance and how many DST switches lie between.

use std::fmt::{self, Write as _};
use std::ops::Range;
use std::str::FromStr;

use chrono::{
    DateTime, Datelike, FixedOffset, LocalResult, Months, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeDelta,
    TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

/// Everything that can go wrong when parsing or computing dataset time. Messages are one line and say
/// what was wrong, so the catalog can show them next to the offending project-file value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("invalid frequency `{text}`: {reason}")]
    InvalidFrequency { text: String, reason: String },
    #[error("invalid time unit `{text}`: expected MINUTE, HOUR, DAY, WEEK, MONTH or YEAR")]
    InvalidUnit { text: String },
    #[error(
        "invalid timestamp `{text}`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, \
         `2015-05-01T00:00+02:00` or `2015-05-01`"
    )]
    InvalidTimestamp { text: String },
    #[error("unknown timezone `{name}`{}", did_you_mean(.suggestion))]
    UnknownTimezone { name: String, suggestion: Option<String> },
    #[error("latest({n}) is invalid: n must be 0 or negative")]
    PositiveLatest { n: i64 },
    #[error("invalid time pattern `{pattern}`: {reason}")]
    InvalidPattern { pattern: String, reason: String },
    #[error("time out of range: {what}")]
    OutOfRange { what: String },
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default()
}

/// The unit of a [`Frequency`]. Displays as Oozie's `TimeUnit` names (`MINUTE`, `HOUR`, `DAY`, `MONTH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    Minute,
    Hour,
    Day,
    Month,
}

impl Unit {
    /// The suffix used in frequency text (`15min`, `6h`, `1d`, `1M`).
    fn suffix(self) -> &'static str {
        match self {
            Unit::Minute => "min",
            Unit::Hour => "h",
            Unit::Day => "d",
            Unit::Month => "M",
        }
    }

    /// How many path components an instance of a dataset with this unit has: `[yyyy, MM]` for months, then
    /// one more per finer unit.
    fn depth(self) -> usize {
        match self {
            Unit::Month => 2,
            Unit::Day => 3,
            Unit::Hour => 4,
            Unit::Minute => 5,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Month => "MONTH",
        })
    }
}

/// The unit of [`date_offset`], as Oozie's `TimeUnit` names it (`MINUTE`, `HOUR`, `DAY`, `WEEK`, `MONTH`,
/// `YEAR`), which is what `dateOffset` and `offset` take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetUnit {
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl fmt::Display for OffsetUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OffsetUnit::Minute => "MINUTE",
            OffsetUnit::Hour => "HOUR",
            OffsetUnit::Day => "DAY",
            OffsetUnit::Week => "WEEK",
            OffsetUnit::Month => "MONTH",
            OffsetUnit::Year => "YEAR",
        })
    }
}

impl FromStr for OffsetUnit {
    type Err = TimeError;

    /// Case-sensitive, like Oozie's `TimeUnit.valueOf`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "MINUTE" => Ok(OffsetUnit::Minute),
            "HOUR" => Ok(OffsetUnit::Hour),
            "DAY" => Ok(OffsetUnit::Day),
            "WEEK" => Ok(OffsetUnit::Week),
            "MONTH" => Ok(OffsetUnit::Month),
            "YEAR" => Ok(OffsetUnit::Year),
            _ => Err(TimeError::InvalidUnit { text: s.to_owned() }),
        }
    }
}

/// How often a dataset produces an instance: a count >= 1 of a [`Unit`]. The text form is `15min`, `6h`, `1d`,
/// `3d`, `1M`; parsing accepts what `Display` prints and, for Oozie users, Oozie's spellings (`60` minutes,
/// `${coord:hours(6)}`), which display in the one form trellis prints. Frequencies are
/// not normalised: `60min` and `1h` step identically but are different values, and `24h` (absolute) differs
/// from `1d` (calendar) across DST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frequency {
    count: u32,
    unit: Unit,
}

impl Frequency {
    /// A frequency of `count` units; `count` must be at least 1.
    pub fn new(count: u32, unit: Unit) -> Result<Self, TimeError> {
        if count == 0 {
            return Err(TimeError::InvalidFrequency {
                text: format!("0{}", unit.suffix()),
                reason: "count must be at least 1".to_owned(),
            });
        }
        Ok(Self { count, unit })
    }

    pub fn count(self) -> u32 {
        self.count
    }

    pub fn unit(self) -> Unit {
        self.unit
    }
}

impl fmt::Display for Frequency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.count, self.unit.suffix())
    }
}

impl FromStr for Frequency {
    type Err = TimeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: &str| TimeError::InvalidFrequency { text: text.to_owned(), reason: reason.to_owned() };
        if let Some(call) = text.strip_prefix("${").and_then(|rest| rest.strip_suffix('}')) {
            return oozie_frequency(call.trim()).map_err(|reason| invalid(&reason));
        }
        // Oozie's plain number is minutes (`frequency="60"`).
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            if text.len() > 1 && text.starts_with('0') {
                return Err(invalid("count must not have leading zeros"));
            }
            let count = text.parse().map_err(|_| invalid("count is too large"))?;
            return Frequency::new(count, Unit::Minute).map_err(|_| invalid("count must be at least 1"));
        }
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (digits, suffix) = text.split_at(split);
        if digits.is_empty() {
            return Err(invalid("expected a count followed by min, h, d or M, like `15min` or `1d`"));
        }
        // One spelling per frequency: `01d` would display as `1d` and break round-tripping.
        if digits.len() > 1 && digits.starts_with('0') {
            return Err(invalid("count must not have leading zeros"));
        }
        let count: u32 = digits.parse().map_err(|_| invalid("count is too large"))?;
        let unit = match suffix {
            "min" => Unit::Minute,
            "h" => Unit::Hour,
            "d" => Unit::Day,
            "M" => Unit::Month,
            "" => return Err(invalid("missing unit: expected min, h, d or M after the count")),
            "m" => return Err(invalid("`m` is ambiguous: use `min` for minutes or `M` for months")),
            _ => return Err(invalid("unknown unit: expected min, h, d or M after the count")),
        };
        if count == 0 {
            return Err(invalid("count must be at least 1"));
        }
        Ok(Self { count, unit })
    }
}

/// Oozie's frequency functions, the text inside `${...}`: `coord:minutes(n)`, `coord:hours(n)`, `coord:days(n)`
/// and `coord:months(n)` (the `coord:` prefix may be left out). Hours are absolute like Oozie's (`hours(6)` is
/// 360 minutes); days and months are calendar steps in the dataset's timezone, like Oozie's.
fn oozie_frequency(call: &str) -> Result<Frequency, String> {
    let call = call.strip_prefix("coord:").unwrap_or(call);
    let expected = "expected ${coord:minutes(n)}, ${coord:hours(n)}, ${coord:days(n)} or ${coord:months(n)}";
    let Some((name, argument)) = call.split_once('(') else { return Err(expected.into()) };
    let Some(argument) = argument.trim_end().strip_suffix(')') else { return Err(expected.into()) };
    let unit = match name.trim() {
        "minutes" => Unit::Minute,
        "hours" => Unit::Hour,
        "days" => Unit::Day,
        "months" => Unit::Month,
        _ => return Err(expected.into()),
    };
    let argument = argument.trim();
    if argument.is_empty() || !argument.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{argument}` is not a count: {expected}"));
    }
    let count: u32 = argument.parse().map_err(|_| "count is too large".to_string())?;
    Frequency::new(count, unit).map_err(|_| "count must be at least 1".to_string())
}

/// A synchronous (time-based) dataset: instances at `initial + k * frequency` for `k >= 0`, in `timezone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dataset {
    frequency: Frequency,
    /// The initial instance as local wall time; day and month instances are computed from it.
    initial: NaiveDateTime,
    timezone: Tz,
    /// `initial` resolved to an instant; minute and hour instances are computed from it.
    initial_utc: DateTime<Utc>,
}

impl Dataset {
    /// A dataset whose initial instance is the local date-time `initial` in `timezone`. An initial instance in a
    /// DST gap is resolved forward (see the module docs); later day/month instances keep the written wall time.
    pub fn new(frequency: Frequency, initial: NaiveDateTime, timezone: Tz) -> Result<Self, TimeError> {
        let initial_utc = resolve(timezone, initial)
            .ok_or_else(|| TimeError::OutOfRange { what: format!("initial instance {initial} in {timezone}") })?;
        Ok(Self { frequency, initial, timezone, initial_utc })
    }

    /// Parses the three attributes of a dataset definition: a frequency (`1d`), an initial instance
    /// ([`parse_timestamp`] syntax; without an offset it is local to the timezone) and an optional timezone
    /// name (UTC when absent).
    pub fn parse(frequency: &str, initial: &str, timezone: Option<&str>) -> Result<Self, TimeError> {
        let timezone = timezone.map(parse_timezone).transpose()?.unwrap_or(Tz::UTC);
        let frequency = frequency.parse()?;
        // Keep the literal wall time when no offset is given, so `02:30` stays the anchor even if the first
        // day happens to be a spring-forward day; with an offset, the instant decides the local time.
        let initial = match parse_parts(initial)? {
            (local, None) => local,
            (_, Some(instant)) => instant.with_timezone(&timezone).naive_local(),
        };
        Self::new(frequency, initial, timezone)
    }

    pub fn frequency(&self) -> Frequency {
        self.frequency
    }

    /// The initial instance as written: local wall time in [`Dataset::timezone`].
    pub fn initial(&self) -> NaiveDateTime {
        self.initial
    }

    pub fn timezone(&self) -> Tz {
        self.timezone
    }

    /// Instance `k`: `initial + k * frequency`, computed in one step from the initial instance. `None` for
    /// `k < 0` (instances before the initial instance do not exist) or beyond chrono's range. Month steps clamp
    /// to the end of the month (Jan 31 + 1M = Feb 28, or Feb 29 in a leap year); the next step starts again
    /// from the initial instance, so Jan 31 + 2M = Mar 31.
    pub fn instance(&self, k: i64) -> Option<DateTime<Utc>> {
        if k < 0 {
            return None;
        }
        let steps = k.checked_mul(i64::from(self.frequency.count))?;
        match self.frequency.unit {
            Unit::Minute => self.initial_utc.checked_add_signed(TimeDelta::try_minutes(steps)?),
            Unit::Hour => self.initial_utc.checked_add_signed(TimeDelta::try_hours(steps)?),
            Unit::Day => resolve(self.timezone, self.initial.checked_add_signed(TimeDelta::try_days(steps)?)?),
            Unit::Month => resolve(self.timezone, add_months(self.initial, steps)?),
        }
    }

    /// The index of the instance closest to and not after `t`, or `None` if `t` is before the initial instance.
    pub fn index_at_or_before(&self, t: DateTime<Utc>) -> Option<i64> {
        let count = self.count_until(t, true);
        (count > 0).then(|| count - 1)
    }

    /// Oozie's `current(n)` for a nominal time: the instance closest to and not after `nominal`, moved `n`
    /// instances (`n` may be negative or positive). `None` if `nominal` is before the initial instance (Oozie
    /// then has no current instance at all) or if the result would be before the initial instance.
    pub fn current(&self, nominal: DateTime<Utc>, n: i64) -> Option<DateTime<Utc>> {
        self.instance(self.index_at_or_before(nominal)?.checked_add(n)?)
    }

    /// Oozie's `latest(n)` (`n <= 0`): walking back from the instance closest to and not after `evaluation`
    /// towards the initial instance and counting only instances for which `exists` is true, `latest(0)` is the
    /// first one found, `latest(-1)` the second, and so on. `evaluation` is the caller's choice: the action's actual
    /// time (Oozie's default) or the present wall-clock time. `Ok(None)` when not enough instances exist yet;
    /// Oozie then waits and evaluates again later. This walk necessarily calls `exists` once per visited instance.
    pub fn latest(
        &self,
        evaluation: DateTime<Utc>,
        n: i64,
        mut exists: impl FnMut(DateTime<Utc>) -> bool,
    ) -> Result<Option<DateTime<Utc>>, TimeError> {
        if n > 0 {
            return Err(TimeError::PositiveLatest { n });
        }
        let Some(mut k) = self.index_at_or_before(evaluation) else { return Ok(None) };
        let mut skip = n.unsigned_abs();
        // `instance` returns None once k drops below 0, which ends the walk at the initial instance.
        while let Some(instance) = self.instance(k) {
            if exists(instance) {
                if skip == 0 {
                    return Ok(Some(instance));
                }
                skip -= 1;
            }
            k -= 1;
        }
        Ok(None)
    }

    /// The indices of the instances inside the half-open period `[start, end)`; empty if `end <= start`.
    /// O(1): the range is computed, not collected.
    pub fn indices_within(&self, start: DateTime<Utc>, end: DateTime<Utc>) -> Range<i64> {
        let first = self.count_until(start, false);
        let last = self.count_until(end, false);
        first..last.max(first)
    }

    /// The instances inside the half-open period `[start, end)`, e.g. every day of a monthly instance
    /// `[m, month.next(m))`. Instances before this dataset's initial instance are not included.
    pub fn instances_within(&self, start: DateTime<Utc>, end: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> {
        self.indices_within(start, end).map_while(|k| self.instance(k))
    }

    /// The first instance strictly after `t` (the initial instance if `t` is before it). For an instance `i`,
    /// `[i, next(i))` is the period it covers.
    pub fn next(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.instance(self.count_until(t, true))
    }

    /// The path components of `instance` in local time, as deep as the frequency: `[yyyy, MM]` for monthly,
    /// `[yyyy, MM, dd]` for daily, plus `HH` for hourly and `mm` for minutely datasets. Note that an hourly or
    /// minutely dataset in a timezone with DST has two instances with the same components in the repeated hour.
    pub fn path_components(&self, instance: DateTime<Utc>) -> Vec<String> {
        // Only as many fields as the frequency needs: this renders every
        // URL and data path.
        let local = instance.with_timezone(&self.timezone);
        let fields =
            [local.year(), local.month() as i32, local.day() as i32, local.hour() as i32, local.minute() as i32];
        fields
            .iter()
            .take(self.frequency.unit.depth())
            .enumerate()
            .map(|(i, n)| if i == 0 { format!("{n:04}") } else { format!("{n:02}") })
            .collect()
    }

    /// The URI-template variables of `instance` in local time, zero-padded like Oozie:
    /// `YEAR` (4 digits), `MONTH`, `DAY`, `HOUR`, `MINUTE` (2 digits). All five are given whatever the frequency.
    pub fn template_values(&self, instance: DateTime<Utc>) -> [(&'static str, String); 5] {
        template_values(instance, self.timezone)
    }

    /// The number of instances at or before `t` (`inclusive`) or strictly before `t`. An arithmetic estimate is
    /// corrected in both directions; the estimate is off by at most a step or two (DST offsets and month-end
    /// clamping are far smaller than a day/month step, and minute/hour estimates are exact up to rounding),
    /// so the loops run a bounded number of times.
    fn count_until(&self, t: DateTime<Utc>, inclusive: bool) -> i64 {
        let precedes = |k: i64| self.instance(k).is_some_and(|i| if inclusive { i <= t } else { i < t });
        let mut count = self.estimate_count(t).max(0);
        while count > 0 && !precedes(count - 1) {
            count -= 1;
        }
        while precedes(count) {
            count += 1;
        }
        count
    }

    fn estimate_count(&self, t: DateTime<Utc>) -> i64 {
        let every = i64::from(self.frequency.count);
        let steps = match self.frequency.unit {
            Unit::Minute => (t - self.initial_utc).num_minutes(),
            Unit::Hour => (t - self.initial_utc).num_hours(),
            // Calendar units are estimated on local wall time, where the steps are regular.
            Unit::Day => (t.with_timezone(&self.timezone).naive_local() - self.initial).num_days(),
            Unit::Month => {
                let local = t.with_timezone(&self.timezone).naive_local();
                month_number(local) - month_number(self.initial)
            }
        };
        steps.div_euclid(every) + 1
    }
}

fn month_number(t: NaiveDateTime) -> i64 {
    i64::from(t.year()) * 12 + i64::from(t.month0())
}

/// `t` plus `n` calendar months, clamped to the end of the target month (chrono's `Months` semantics, which
/// match `java.util.Calendar.add(MONTH, n)`).
fn add_months(t: NaiveDateTime, n: i64) -> Option<NaiveDateTime> {
    let months = Months::new(u32::try_from(n.unsigned_abs()).ok()?);
    if n >= 0 { t.checked_add_months(months) } else { t.checked_sub_months(months) }
}

/// Index-based views of the operations above, which the lattice uses: it
/// identifies a view's instance by its index from the initial instance.
impl Dataset {
    /// The index of `current(n)` for `nominal`, if that instance exists.
    pub fn current_index(&self, nominal: DateTime<Utc>, n: i64) -> Option<i64> {
        let k = self.index_at_or_before(nominal)?.checked_add(n)?;
        // Past either end of time (before the initial instance, beyond
        // chrono's range) there is no instance.
        self.instance(k).map(|_| k)
    }

    /// The index of Oozie's `offset(n, unit)` for `nominal`: `current(0)` moved by `n` units on the dataset's
    /// calendar (minutes and hours absolute; days and longer in its local wall time, as `java.util.Calendar`
    /// in the dataset's zone moves), then the instance at or before that time, as Oozie rounds an offset that
    /// is not a whole number of instances. `None` before the initial instance.
    pub fn offset_index(&self, nominal: DateTime<Utc>, n: i64, unit: OffsetUnit) -> Option<i64> {
        let base = self.current(nominal, 0)?;
        let local = || base.with_timezone(&self.timezone).naive_local();
        let moved = match unit {
            OffsetUnit::Minute => base.checked_add_signed(TimeDelta::try_minutes(n)?),
            OffsetUnit::Hour => base.checked_add_signed(TimeDelta::try_hours(n)?),
            OffsetUnit::Day => resolve(self.timezone, local().checked_add_signed(TimeDelta::try_days(n)?)?),
            OffsetUnit::Week => resolve(self.timezone, local().checked_add_signed(TimeDelta::try_weeks(n)?)?),
            OffsetUnit::Month => resolve(self.timezone, add_months(local(), n)?),
            OffsetUnit::Year => resolve(self.timezone, add_months(local(), n.checked_mul(12)?)?),
        }?;
        self.index_at_or_before(moved)
    }

    /// The indices of Oozie's `future(n, limit)` search for `nominal`: from `current(0)` (or the initial instance
    /// when `nominal` is before it) forward, `limit` instances.
    pub fn future_indices(&self, nominal: DateTime<Utc>, limit: i64) -> Range<i64> {
        let first = self.index_at_or_before(nominal).unwrap_or(0);
        first..first.saturating_add(limit)
    }

    /// The index of `latest(n)` evaluated at `evaluation`; `exists` is asked
    /// about indices, walking back from the newest. `n > 0` finds nothing.
    pub fn latest_index(&self, evaluation: DateTime<Utc>, n: i64, mut exists: impl FnMut(i64) -> bool) -> Option<i64> {
        if n > 0 {
            return None;
        }
        let mut skip = n.unsigned_abs();
        let mut k = self.index_at_or_before(evaluation)?;
        while k >= 0 {
            if exists(k) {
                if skip == 0 {
                    return Some(k);
                }
                skip -= 1;
            }
            k -= 1;
        }
        None
    }

    /// The index of the instance whose path components (`yyyy/MM/dd/...`
    /// as deep as the frequency, local time) are `components`.
    pub fn index_of_components(&self, components: &[String]) -> Result<i64, String> {
        let depth = self.frequency.depth();
        if components.len() != depth {
            return Err(format!("expected {depth} time components, got {}", components.len()));
        }
        // Fields the path does not show (the hour of a daily dataset, the day
        // of a monthly one) are the initial instance's: that is where every
        // instance of the dataset lies.
        let initial = [
            self.initial.year() as u32,
            self.initial.month(),
            self.initial.day(),
            self.initial.hour(),
            self.initial.minute(),
        ];
        let mut fields = initial;
        for (i, text) in components.iter().enumerate() {
            let width = if i == 0 { 4 } else { 2 };
            if text.len() != width || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "`{text}` is not {}",
                    ["a year (yyyy)", "a month (MM)", "a day (dd)", "an hour (HH)", "a minute (mm)"][i]
                ));
            }
            fields[i] = text.parse().map_err(|_| format!("`{text}` is not a number"))?;
        }
        let [year, month, day, hour, minute] = fields;
        let first = NaiveDate::from_ymd_opt(year as i32, month, 1)
            .ok_or_else(|| format!("{} is not a valid date", components.join("/")))?;
        // A monthly dataset from the 31st has its February instance on the 28th or 29th.
        let day = if depth < 3 { day.min(days_in_month(first)) } else { day };
        let local = NaiveDate::from_ymd_opt(year as i32, month, day)
            .and_then(|date| date.and_hms_opt(hour, minute, 0))
            .ok_or_else(|| format!("{} is not a valid date and time", components.join("/")))?;
        let instant =
            resolve(self.timezone, local).ok_or_else(|| format!("{local} does not exist in {}", self.timezone))?;
        let before_initial = || {
            format!("it is before the initial instance {} ({})", self.initial.format("%Y-%m-%dT%H:%M"), self.timezone)
        };
        let k = self.index_at_or_before(instant).ok_or_else(before_initial)?;
        let matches = |k: i64| self.instance(k).is_some_and(|found| self.path_components(found) == components);
        let k = [k, k + 1].into_iter().find(|&k| matches(k)).ok_or_else(|| {
            format!(
                "instances are every {} from {} ({})",
                self.frequency,
                self.initial.format("%Y-%m-%dT%H:%M"),
                self.timezone
            )
        })?;
        Ok(k)
    }
}

fn days_in_month(first: NaiveDate) -> u32 {
    let next = first.checked_add_months(Months::new(1)).unwrap_or(first);
    next.signed_duration_since(first).num_days() as u32
}

impl Frequency {
    /// How many path components an instance has: 2 for months, 3 for
    /// days, 4 for hours, 5 for minutes.
    pub fn depth(self) -> usize {
        self.unit.depth()
    }

    /// The period in seconds, months counted as 30 days: only for comparing
    /// frequencies.
    pub fn approximate(self) -> i64 {
        let unit = match self.unit {
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Month => 30 * 86_400,
        };
        i64::from(self.count) * unit
    }
}

/// Local wall time to an instant: a fold takes the earlier instant, a gap moves forward by the gap's length
/// (both as `java.time.ZonedDateTime`). `None` only at the edges of chrono's range.
fn resolve(timezone: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    match timezone.from_local_datetime(&local) {
        LocalResult::Single(t) => Some(t.to_utc()),
        LocalResult::Ambiguous(earlier, _) => Some(earlier.to_utc()),
        LocalResult::None => {
            // Reading `local` with the offset in force before the gap lands exactly gap-length past the wall
            // time. The transition happens after `local - 15h` (UTC offsets are at most +14h), so the offset at
            // that instant is the one before the gap (two transitions within a day do not occur in tzdata).
            let probe = local.checked_sub_signed(TimeDelta::hours(15))?;
            let before = timezone.offset_from_utc_datetime(&probe).fix();
            Some(local.checked_sub_signed(TimeDelta::seconds(before.local_minus_utc().into()))?.and_utc())
        }
    }
}

/// The URI-template variables of `instance` local to `timezone`, as
/// [`Dataset::template_values`] gives them.
pub fn template_values(instance: DateTime<Utc>, timezone: Tz) -> [(&'static str, String); 5] {
    let local = instance.with_timezone(&timezone);
    [
        ("YEAR", format!("{:04}", local.year())),
        ("MONTH", format!("{:02}", local.month())),
        ("DAY", format!("{:02}", local.day())),
        ("HOUR", format!("{:02}", local.hour())),
        ("MINUTE", format!("{:02}", local.minute())),
    ]
}

/// Oozie's `dateOffset(t, n, unit)`: `t + n * unit` on the UTC calendar, as Oozie computes it (with
/// `Calendar.add` in its UTC processing zone), so daylight saving plays no part: a `DAY` is always 24 hours
/// and a `WEEK` 7 days, even across a local DST switch. Months and years clamp to the month end (Jan 31 +
/// 1 MONTH = Feb 28; Feb 29 + 1 YEAR = Feb 28).
pub fn date_offset(t: DateTime<Utc>, n: i64, unit: OffsetUnit) -> Result<DateTime<Utc>, TimeError> {
    let result = match unit {
        OffsetUnit::Minute => TimeDelta::try_minutes(n).and_then(|d| t.checked_add_signed(d)),
        OffsetUnit::Hour => TimeDelta::try_hours(n).and_then(|d| t.checked_add_signed(d)),
        OffsetUnit::Day => TimeDelta::try_days(n).and_then(|d| t.checked_add_signed(d)),
        OffsetUnit::Week => TimeDelta::try_weeks(n).and_then(|d| t.checked_add_signed(d)),
        OffsetUnit::Month => add_months(t.naive_utc(), n).map(|l| l.and_utc()),
        OffsetUnit::Year => n.checked_mul(12).and_then(|months| add_months(t.naive_utc(), months)).map(|l| l.and_utc()),
    };
    result.ok_or_else(|| TimeError::OutOfRange { what: format!("dateOffset({}, {n}, {unit})", t.to_rfc3339()) })
}

/// Oozie's `formatTime(t, pattern)`, with `t` shown in `timezone`, following `java.text.SimpleDateFormat` in
/// an English (US) locale, which is what Oozie servers run with: `G y M d D E u a H k K h m s S w W F z Z X`,
/// `'quoted literals'` and `''` for a quote. A numeric field is zero-padded to the letter's count (`yy` is the
/// year's last two digits); a text field is short below four letters (`EEE` = `Wed`, `MMM` = `Dec`) and full
/// from four (`EEEE` = `Wednesday`); `MM` and `M` are numbers. Weeks (`w`, `W`) start on Sunday and week 1 of a
/// year is the one holding January 1st (US rules). Java's other letters (`Y`, `L`, `zzzz`, ...) are refused
/// rather than guessed, and so is any other ASCII letter, which Java reserves.
pub fn format_time(t: DateTime<Utc>, pattern: &str, timezone: Tz) -> Result<String, TimeError> {
    let invalid = |reason: String| TimeError::InvalidPattern { pattern: pattern.to_owned(), reason };
    let local = t.with_timezone(&timezone);
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            if chars.get(i + 1) == Some(&'\'') {
                out.push('\'');
                i += 2;
                continue;
            }
            let opened = i;
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err(invalid(format!("quote opened at position {opened} is not closed"))),
                    Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                        out.push('\'');
                        i += 2;
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some(&literal) => {
                        out.push(literal);
                        i += 1;
                    }
                }
            }
        } else if c.is_ascii_alphabetic() {
            let run = chars[i..].iter().take_while(|&&d| d == c).count();
            if !format_field(&mut out, &local, c, run) {
                let field: String = chars[i..i + run].iter().collect();
                return Err(invalid(format!(
                    "unsupported field `{field}` at position {i} (supported: {SUPPORTED_FIELDS}, 'literal')"
                )));
            }
            i += run;
        } else {
            out.push(c);
            i += 1;
        }
    }
    Ok(out)
}

/// The pattern letters [`format_time`] knows, for its error message.
const SUPPORTED_FIELDS: &str = "G y M d D E u a H k K h m s S w W F z Z X";

/// English month names, for `formatTime` and for how a view pattern shows a month.
pub(crate) const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Writes field `letter` repeated `run` times; false if SimpleDateFormat would mean something else by it.
fn format_field(out: &mut String, local: &DateTime<Tz>, letter: char, run: usize) -> bool {
    let text = |full: &str| if run >= 4 { full.to_owned() } else { full[..3].to_owned() };
    let date = local.date_naive();
    // Days since the Sunday starting the week: US weeks.
    let from_sunday = |d: NaiveDate| i64::from(d.weekday().num_days_from_sunday());
    let number: i64 = match letter {
        'G' => return push(out, if local.year() > 0 { "AD" } else { "BC" }),
        'y' if run == 2 => i64::from(local.year()).rem_euclid(100),
        'y' => i64::from(local.year()),
        'M' if run >= 3 => return push(out, &text(MONTHS[local.month0() as usize])),
        'M' => i64::from(local.month()),
        'd' => i64::from(local.day()),
        'D' => i64::from(local.ordinal()),
        'E' => return push(out, &text(WEEKDAYS[local.weekday().num_days_from_monday() as usize])),
        'u' => i64::from(local.weekday().number_from_monday()),
        'a' => return push(out, if local.hour() < 12 { "AM" } else { "PM" }),
        'H' => i64::from(local.hour()),
        'k' => i64::from(if local.hour() == 0 { 24 } else { local.hour() }),
        'K' => i64::from(local.hour() % 12),
        'h' => i64::from(match local.hour() % 12 {
            0 => 12,
            hour => hour,
        }),
        'm' => i64::from(local.minute()),
        's' => i64::from(local.second()),
        'S' => i64::from(local.timestamp_subsec_millis().min(999)),
        'w' => {
            // Week 1 holds January 1st, so the last days of December whose week holds the next January 1st
            // are in week 1 of the next year already.
            let saturday = date.checked_add_signed(TimeDelta::days(6 - from_sunday(date)));
            if saturday.is_some_and(|saturday| saturday.year() > date.year()) {
                1
            } else {
                let first = date.with_ordinal(1).unwrap_or(date);
                (i64::from(date.ordinal0()) + from_sunday(first)) / 7 + 1
            }
        }
        'W' => {
            let first = date.with_day(1).unwrap_or(date);
            (i64::from(date.day0()) + from_sunday(first)) / 7 + 1
        }
        'F' => i64::from(date.day0()) / 7 + 1,
        'z' if run < 4 => return push(out, &local.format("%Z").to_string()),
        'Z' => return push(out, &local.format("%z").to_string()),
        'X' if run <= 3 => {
            let seconds = local.offset().fix().local_minus_utc();
            if seconds == 0 {
                return push(out, "Z");
            }
            let sign = if seconds < 0 { '-' } else { '+' };
            let (hours, minutes) = (seconds.abs() / 3600, seconds.abs() % 3600 / 60);
            let _ = match run {
                1 => write!(out, "{sign}{hours:02}"),
                2 => write!(out, "{sign}{hours:02}{minutes:02}"),
                _ => write!(out, "{sign}{hours:02}:{minutes:02}"),
            };
            return true;
        }
        _ => return false,
    };
    // Java pads a number to the count of letters. Writing to a String cannot fail.
    let _ = write!(out, "{number:0run$}");
    true
}

fn push(out: &mut String, text: &str) -> bool {
    out.push_str(text);
    true
}

/// Parses an ISO-8601 timestamp: `2015-05-01`, `2015-05-01T00:00` or `2015-05-01T00:00:00`, optionally followed
/// by `Z` or an offset `+02:00`. Without an offset the time is local to `timezone` (a time in a DST gap moves
/// forward, an ambiguous one takes the earlier instant); with one, it is that instant shown in `timezone`.
pub fn parse_timestamp(text: &str, timezone: Tz) -> Result<DateTime<Tz>, TimeError> {
    let instant = match parse_parts(text)? {
        (local, None) => {
            resolve(timezone, local).ok_or_else(|| TimeError::OutOfRange { what: format!("{text} in {timezone}") })?
        }
        (_, Some(instant)) => instant,
    };
    Ok(instant.with_timezone(&timezone))
}

/// The written local date-time, and the instant if the text carried an offset.
fn parse_parts(text: &str) -> Result<(NaiveDateTime, Option<DateTime<Utc>>), TimeError> {
    parse_parts_opt(text).ok_or_else(|| TimeError::InvalidTimestamp { text: text.to_owned() })
}

fn parse_parts_opt(text: &str) -> Option<(NaiveDateTime, Option<DateTime<Utc>>)> {
    // Hand-written rather than chrono's `parse_from_str`, which accepts unpadded fields like `2015-5-1`.
    let b = text.as_bytes();
    let num = |range: Range<usize>| -> Option<u32> {
        let digits = b.get(range)?;
        digits.iter().all(u8::is_ascii_digit).then(|| digits.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(at(4, b'-') && at(7, b'-')) {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(i32::try_from(num(0..4)?).ok()?, num(5..7)?, num(8..10)?)?;
    if b.len() == 10 {
        return Some((date.and_time(NaiveTime::MIN), None));
    }
    if !(at(10, b'T') && at(13, b':')) {
        return None;
    }
    let (second, rest) = if at(16, b':') { (num(17..19)?, 19) } else { (0, 16) };
    let local = date.and_time(NaiveTime::from_hms_opt(num(11..13)?, num(14..16)?, second)?);
    let offset = match &b[rest.min(b.len())..] {
        [] => return Some((local, None)),
        b"Z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (hours, minutes) = (num(rest + 1..rest + 3)?, num(rest + 4..rest + 6)?);
            if minutes >= 60 {
                return None;
            }
            let seconds = i32::try_from(hours * 3600 + minutes * 60).ok()?;
            if *sign == b'-' { -seconds } else { seconds }
        }
        _ => return None,
    };
    let instant = FixedOffset::east_opt(offset)?.from_local_datetime(&local).single()?.to_utc();
    Some((local, Some(instant)))
}

/// Parses an IANA timezone name (`Europe/Berlin`, `UTC`). Names are case-sensitive; the error suggests the
/// closest known name (a case-insensitive match, a city without its region, or a small typo).
pub fn parse_timezone(name: &str) -> Result<Tz, TimeError> {
    name.parse::<Tz>().map_err(|_| TimeError::UnknownTimezone { name: name.to_owned(), suggestion: suggest(name) })
}

fn suggest(name: &str) -> Option<String> {
    let wanted = name.to_ascii_lowercase();
    // Short inputs like `PST` are abbreviations; a one-letter edit of them (`EST`) would be a misleading hint.
    let tolerance = if wanted.chars().count() < 4 { 0 } else { (wanted.chars().count() / 4).max(1) };
    chrono_tz::TZ_VARIANTS
        .iter()
        .map(|tz| {
            let candidate = tz.name().to_ascii_lowercase();
            let city = candidate.rsplit('/').next().unwrap_or(&candidate);
            let distance = strsim::levenshtein(&wanted, &candidate).min(strsim::levenshtein(&wanted, city));
            (distance, tz.name())
        })
        .filter(|(distance, _)| *distance <= tolerance)
        .min()
        .map(|(_, name)| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    fn utc(text: &str) -> DateTime<Utc> {
        parse_timestamp(text, Tz::UTC).unwrap().to_utc()
    }

    fn tz(name: &str) -> Tz {
        parse_timezone(name).unwrap()
    }

    fn ds(frequency: &str, initial: &str, timezone: Option<&str>) -> Dataset {
        Dataset::parse(frequency, initial, timezone).unwrap()
    }

    /// Oozie's display form for UTC instants.
    fn show(t: Option<DateTime<Utc>>) -> String {
        t.map_or_else(|| "-".to_owned(), |t| t.format("%Y-%m-%dT%H:%MZ").to_string())
    }

    /// An instant as local time with its offset, to make DST visible.
    fn show_local(t: Option<DateTime<Utc>>, timezone: Tz) -> String {
        t.map_or_else(|| "-".to_owned(), |t| t.with_timezone(&timezone).format("%Y-%m-%dT%H:%M%:z").to_string())
    }

    fn check(actual: impl IntoIterator<Item = String>, expected: Expect) {
        let mut text = actual.into_iter().collect::<Vec<_>>().join("\n");
        text.push('\n');
        expected.assert_eq(&text);
    }

    /// Fills `${NAME}` from the template values, as the catalog's path templates will.
    fn fill(template: &str, dataset: &Dataset, instance: DateTime<Utc>) -> String {
        dataset
            .template_values(instance)
            .iter()
            .fold(template.to_owned(), |s, (name, value)| s.replace(&format!("${{{name}}}"), value))
    }

    #[test]
    fn frequency_parse_and_display() {
        let inputs =
            ["15min", "6h", "1d", "3d", "1M", "24h", "0d", "01d", "1m", "1", "d", "1y", "1 d", "-1d", "4294967296min"];
        let oozie = [
            "60",
            "0",
            "${coord:hours(6)}",
            "${coord:minutes(15)}",
            "${ coord:days( 3 ) }",
            "${months(1)}",
            "${coord:hours(0)}",
            "${coord:hours(-1)}",
            "${coord:weeks(1)}",
            "${coord:hours(6)",
            "${coord:hours}",
        ];
        let inputs: Vec<&str> = inputs.into_iter().chain(oozie).collect();
        check(
            inputs.iter().map(|s| match s.parse::<Frequency>() {
                Ok(f) => format!("{s:<14} => {f} ({:?} x{})", f.unit(), f.count()),
                Err(e) => format!("{s:<14} => error: {e}"),
            }),
            expect![[r#"
                15min          => 15min (Minute x15)
                6h             => 6h (Hour x6)
                1d             => 1d (Day x1)
                3d             => 3d (Day x3)
                1M             => 1M (Month x1)
                24h            => 24h (Hour x24)
                0d             => error: invalid frequency `0d`: count must be at least 1
                01d            => error: invalid frequency `01d`: count must not have leading zeros
                1m             => error: invalid frequency `1m`: `m` is ambiguous: use `min` for minutes or `M` for months
                1              => 1min (Minute x1)
                d              => error: invalid frequency `d`: expected a count followed by min, h, d or M, like `15min` or `1d`
                1y             => error: invalid frequency `1y`: unknown unit: expected min, h, d or M after the count
                1 d            => error: invalid frequency `1 d`: unknown unit: expected min, h, d or M after the count
                -1d            => error: invalid frequency `-1d`: expected a count followed by min, h, d or M, like `15min` or `1d`
                4294967296min  => error: invalid frequency `4294967296min`: count is too large
                60             => 60min (Minute x60)
                0              => error: invalid frequency `0`: count must be at least 1
                ${coord:hours(6)} => 6h (Hour x6)
                ${coord:minutes(15)} => 15min (Minute x15)
                ${ coord:days( 3 ) } => 3d (Day x3)
                ${months(1)}   => 1M (Month x1)
                ${coord:hours(0)} => error: invalid frequency `${coord:hours(0)}`: count must be at least 1
                ${coord:hours(-1)} => error: invalid frequency `${coord:hours(-1)}`: `-1` is not a count: expected ${coord:minutes(n)}, ${coord:hours(n)}, ${coord:days(n)} or ${coord:months(n)}
                ${coord:weeks(1)} => error: invalid frequency `${coord:weeks(1)}`: expected ${coord:minutes(n)}, ${coord:hours(n)}, ${coord:days(n)} or ${coord:months(n)}
                ${coord:hours(6) => error: invalid frequency `${coord:hours(6)`: expected a count followed by min, h, d or M, like `15min` or `1d`
                ${coord:hours} => error: invalid frequency `${coord:hours}`: expected ${coord:minutes(n)}, ${coord:hours(n)}, ${coord:days(n)} or ${coord:months(n)}
            "#]],
        );
        assert!(Frequency::new(0, Unit::Day).is_err());
        assert_eq!(Frequency::new(15, Unit::Minute).unwrap().to_string(), "15min");
    }

    /// Table 7-3 of the seed, evaluated for the second coordinator action (nominal time 2014-10-19T06:00Z).
    /// The seed names ds1 (1 day) and ds3 (3 days) with initial instance 2014-10-06T06:00Z; the table of the
    /// other two is not in the text, so they are the 60-minute and 24-hour forms with the same initial instance.
    #[test]
    fn seed_current_examples() {
        let nominal = utc("2014-10-19T06:00Z");
        let datasets = [("1d", "ds1"), ("60min", "ds2"), ("3d", "ds3"), ("24h", "ds4")];
        let ns = [-14, -13, -5, -4, -1, 0, 1, 2];
        check(
            datasets.map(|(frequency, name)| {
                let d = ds(frequency, "2014-10-06T06:00Z", None);
                let cells: Vec<String> = ns.iter().map(|&n| format!("{n}:{}", show(d.current(nominal, n)))).collect();
                format!("{name} {frequency:>5} {}", cells.join(" "))
            }),
            expect![[r#"
                ds1    1d -14:- -13:2014-10-06T06:00Z -5:2014-10-14T06:00Z -4:2014-10-15T06:00Z -1:2014-10-18T06:00Z 0:2014-10-19T06:00Z 1:2014-10-20T06:00Z 2:2014-10-21T06:00Z
                ds2 60min -14:2014-10-18T16:00Z -13:2014-10-18T17:00Z -5:2014-10-19T01:00Z -4:2014-10-19T02:00Z -1:2014-10-19T05:00Z 0:2014-10-19T06:00Z 1:2014-10-19T07:00Z 2:2014-10-19T08:00Z
                ds3    3d -14:- -13:- -5:- -4:2014-10-06T06:00Z -1:2014-10-15T06:00Z 0:2014-10-18T06:00Z 1:2014-10-21T06:00Z 2:2014-10-24T06:00Z
                ds4   24h -14:- -13:2014-10-06T06:00Z -5:2014-10-14T06:00Z -4:2014-10-15T06:00Z -1:2014-10-18T06:00Z 0:2014-10-19T06:00Z 1:2014-10-20T06:00Z 2:2014-10-21T06:00Z
            "#]],
        );
    }

    /// current(0) is the instance not after the nominal time, even when the nominal time falls between instances;
    /// a nominal time before the initial instance has no current instance at all, whatever n.
    #[test]
    fn current_between_instances_and_before_initial() {
        let d = ds("1d", "2014-10-06T06:00Z", None);
        let cases = [
            ("2014-10-19T05:59Z", 0),
            ("2014-10-19T06:00Z", 0),
            ("2014-10-19T06:01Z", 0),
            ("2014-10-06T06:00Z", 0),
            ("2014-10-06T06:00Z", -1),
            ("2014-10-06T05:59Z", 0),
            ("2014-10-06T05:59Z", 1),
            ("2014-10-01T00:00Z", 5),
        ];
        check(
            cases.map(|(nominal, n)| {
                let nominal = utc(nominal);
                format!(
                    "{} current({n}) = {} index_at_or_before = {:?}",
                    show(Some(nominal)),
                    show(d.current(nominal, n)),
                    d.index_at_or_before(nominal)
                )
            }),
            expect![[r#"
                2014-10-19T05:59Z current(0) = 2014-10-18T06:00Z index_at_or_before = Some(12)
                2014-10-19T06:00Z current(0) = 2014-10-19T06:00Z index_at_or_before = Some(13)
                2014-10-19T06:01Z current(0) = 2014-10-19T06:00Z index_at_or_before = Some(13)
                2014-10-06T06:00Z current(0) = 2014-10-06T06:00Z index_at_or_before = Some(0)
                2014-10-06T06:00Z current(-1) = - index_at_or_before = Some(0)
                2014-10-06T05:59Z current(0) = - index_at_or_before = None
                2014-10-06T05:59Z current(1) = - index_at_or_before = None
                2014-10-01T00:00Z current(5) = - index_at_or_before = None
            "#]],
        );
        assert_eq!(d.instance(-1), None);
        assert_eq!(show(d.next(utc("2014-01-01"))), "2014-10-06T06:00Z");
        assert_eq!(show(d.next(utc("2014-10-06T06:00Z"))), "2014-10-07T06:00Z");
    }

    /// The seed's dataIn('event_input1') example: ds_input1 (6 hours from 2014-12-29T02:00Z), data-in from
    /// current(-4) to current(-1), nominal time 2015-01-01T02:00Z. The seed prints `2013-12-31-20` once; by the
    /// formula current(-1) is 2014-12-31T20:00Z.
    #[test]
    fn seed_data_in_example() {
        let d = ds("6h", "2014-12-29T02:00Z", None);
        let nominal = utc("2015-01-01T02:00Z");
        let template = "hdfs://localhost:8020/user/joe/revenue_feed/${YEAR}-${MONTH}-${DAY}-${HOUR}";
        let paths: Vec<String> = (-4..=-1).map(|n| fill(template, &d, d.current(nominal, n).unwrap())).collect();
        check(
            [format!("current(-1) = {}", show(d.current(nominal, -1))), paths.join(",\n")],
            expect![[r#"
                current(-1) = 2014-12-31T20:00Z
                hdfs://localhost:8020/user/joe/revenue_feed/2014-12-31-02,
                hdfs://localhost:8020/user/joe/revenue_feed/2014-12-31-08,
                hdfs://localhost:8020/user/joe/revenue_feed/2014-12-31-14,
                hdfs://localhost:8020/user/joe/revenue_feed/2014-12-31-20
            "#]],
        );
    }

    /// The seed's latest() example (Tables 7-4/7-5): daily from 2014-10-06T06:00Z, evaluated on present time
    /// 10:00 and 11:00 on 10/19. At 10:00 the 10/18, 10/17 and 10/15 data are missing; at 11:00 10/18 arrived.
    #[test]
    fn seed_latest_before_and_after_late_data() {
        let d = ds("1d", "2014-10-06T06:00Z", None);
        let missing_at_10 = ["2014-10-18T06:00Z", "2014-10-17T06:00Z", "2014-10-15T06:00Z"].map(utc);
        let missing_at_11 = ["2014-10-17T06:00Z", "2014-10-15T06:00Z"].map(utc);
        let mut rows = Vec::new();
        for (present, missing) in [("2014-10-19T10:00Z", &missing_at_10[..]), ("2014-10-19T11:00Z", &missing_at_11[..])]
        {
            for n in [0, -1, -2, -10, -11] {
                let found = d.latest(utc(present), n, |i| !missing.contains(&i)).unwrap();
                rows.push(format!("at {present} latest({n}) = {}", show(found)));
            }
        }
        // Evaluated before the initial instance there is nothing to find; with no data, nothing either.
        rows.push(format!("before initial: {}", show(d.latest(utc("2014-10-06T05:00Z"), 0, |_| true).unwrap())));
        rows.push(format!("no data: {}", show(d.latest(utc("2014-10-19T10:00Z"), 0, |_| false).unwrap())));
        rows.push(format!("latest(1): {}", d.latest(utc("2014-10-19T10:00Z"), 1, |_| true).unwrap_err()));
        check(
            rows,
            expect![[r#"
                at 2014-10-19T10:00Z latest(0) = 2014-10-19T06:00Z
                at 2014-10-19T10:00Z latest(-1) = 2014-10-16T06:00Z
                at 2014-10-19T10:00Z latest(-2) = 2014-10-14T06:00Z
                at 2014-10-19T10:00Z latest(-10) = 2014-10-06T06:00Z
                at 2014-10-19T10:00Z latest(-11) = -
                at 2014-10-19T11:00Z latest(0) = 2014-10-19T06:00Z
                at 2014-10-19T11:00Z latest(-1) = 2014-10-18T06:00Z
                at 2014-10-19T11:00Z latest(-2) = 2014-10-16T06:00Z
                at 2014-10-19T11:00Z latest(-10) = 2014-10-07T06:00Z
                at 2014-10-19T11:00Z latest(-11) = 2014-10-06T06:00Z
                before initial: -
                no data: -
                latest(1): latest(1) is invalid: n must be 0 or negative
            "#]],
        );
    }

    /// Months are computed from the initial instance, clamped to the month end, and do not drift.
    #[test]
    fn month_arithmetic() {
        let mut rows = Vec::new();
        for (frequency, initial) in
            [("1M", "2015-01-31"), ("1M", "2016-01-31"), ("12M", "2016-02-29"), ("3M", "2015-11-30T12:00")]
        {
            let d = ds(frequency, initial, None);
            let instances: Vec<String> = (0..6).map(|k| show(d.instance(k))[..10].to_owned()).collect();
            rows.push(format!("{frequency:>3} from {initial}: {}", instances.join(" ")));
        }
        // A time between a clamped instance and the next is indexed against the clamped instance.
        let d = ds("1M", "2015-01-31", None);
        for t in
            ["2015-02-27T23:59Z", "2015-02-28T00:00Z", "2015-03-30T00:00Z", "2015-03-31T00:00Z", "2015-01-30T00:00Z"]
        {
            rows.push(format!("{t} -> index {:?}, next {}", d.index_at_or_before(utc(t)), show(d.next(utc(t)))));
        }
        check(
            rows,
            expect![[r#"
                 1M from 2015-01-31: 2015-01-31 2015-02-28 2015-03-31 2015-04-30 2015-05-31 2015-06-30
                 1M from 2016-01-31: 2016-01-31 2016-02-29 2016-03-31 2016-04-30 2016-05-31 2016-06-30
                12M from 2016-02-29: 2016-02-29 2017-02-28 2018-02-28 2019-02-28 2020-02-29 2021-02-28
                 3M from 2015-11-30T12:00: 2015-11-30 2016-02-29 2016-05-30 2016-08-30 2016-11-30 2017-02-28
                2015-02-27T23:59Z -> index Some(0), next 2015-02-28T00:00Z
                2015-02-28T00:00Z -> index Some(1), next 2015-03-31T00:00Z
                2015-03-30T00:00Z -> index Some(1), next 2015-03-31T00:00Z
                2015-03-31T00:00Z -> index Some(2), next 2015-04-30T00:00Z
                2015-01-30T00:00Z -> index None, next 2015-01-31T00:00Z
            "#]],
        );
    }

    /// A daily Europe/Berlin dataset stays at local midnight across both 2015 switches (March 29, October 25),
    /// so its instants are 23:00Z in winter and 22:00Z in summer. `24h` instead keeps absolute spacing and
    /// moves to 01:00 local after the spring switch.
    #[test]
    fn berlin_daily_across_dst() {
        let berlin = tz("Europe/Berlin");
        let mut rows = Vec::new();
        for (frequency, initial) in [("1d", "2015-03-27"), ("1d", "2015-10-23"), ("24h", "2015-03-27")] {
            let d = ds(frequency, initial, Some("Europe/Berlin"));
            rows.push(format!("{frequency} from {initial} Europe/Berlin:"));
            for k in 0..5 {
                let i = d.instance(k);
                rows.push(format!("  {k}: {} = {}", show_local(i, berlin), show(i)));
            }
        }
        // current(0) just before and just after local midnight on the short and the long day.
        let d = ds("1d", "2015-03-01", Some("Europe/Berlin"));
        for nominal in ["2015-03-29T21:59Z", "2015-03-29T22:00Z", "2015-10-25T22:59Z", "2015-10-25T23:00Z"] {
            rows.push(format!("current(0) at {nominal} = {}", show_local(d.current(utc(nominal), 0), berlin)));
        }
        check(
            rows,
            expect![[r#"
                1d from 2015-03-27 Europe/Berlin:
                  0: 2015-03-27T00:00+01:00 = 2015-03-26T23:00Z
                  1: 2015-03-28T00:00+01:00 = 2015-03-27T23:00Z
                  2: 2015-03-29T00:00+01:00 = 2015-03-28T23:00Z
                  3: 2015-03-30T00:00+02:00 = 2015-03-29T22:00Z
                  4: 2015-03-31T00:00+02:00 = 2015-03-30T22:00Z
                1d from 2015-10-23 Europe/Berlin:
                  0: 2015-10-23T00:00+02:00 = 2015-10-22T22:00Z
                  1: 2015-10-24T00:00+02:00 = 2015-10-23T22:00Z
                  2: 2015-10-25T00:00+02:00 = 2015-10-24T22:00Z
                  3: 2015-10-26T00:00+01:00 = 2015-10-25T23:00Z
                  4: 2015-10-27T00:00+01:00 = 2015-10-26T23:00Z
                24h from 2015-03-27 Europe/Berlin:
                  0: 2015-03-27T00:00+01:00 = 2015-03-26T23:00Z
                  1: 2015-03-28T00:00+01:00 = 2015-03-27T23:00Z
                  2: 2015-03-29T00:00+01:00 = 2015-03-28T23:00Z
                  3: 2015-03-30T01:00+02:00 = 2015-03-29T23:00Z
                  4: 2015-03-31T01:00+02:00 = 2015-03-30T23:00Z
                current(0) at 2015-03-29T21:59Z = 2015-03-29T00:00+01:00
                current(0) at 2015-03-29T22:00Z = 2015-03-30T00:00+02:00
                current(0) at 2015-10-25T22:59Z = 2015-10-25T00:00+02:00
                current(0) at 2015-10-25T23:00Z = 2015-10-26T00:00+01:00
            "#]],
        );
    }

    /// An hourly Berlin dataset steps in absolute hours: local 02:00 is skipped in March and occurs twice in
    /// October, which gives two instances with the same path components.
    #[test]
    fn berlin_hourly_across_dst() {
        let berlin = tz("Europe/Berlin");
        let mut rows = Vec::new();
        for initial in ["2015-03-29T00:00", "2015-10-25T00:00"] {
            let d = ds("1h", initial, Some("Europe/Berlin"));
            rows.push(format!("1h from {initial} Europe/Berlin:"));
            for k in 0..5 {
                let i = d.instance(k);
                rows.push(format!(
                    "  {k}: {} = {} {:?}",
                    show_local(i, berlin),
                    show(i),
                    d.path_components(i.unwrap())
                ));
            }
        }
        check(
            rows,
            expect![[r#"
                1h from 2015-03-29T00:00 Europe/Berlin:
                  0: 2015-03-29T00:00+01:00 = 2015-03-28T23:00Z ["2015", "03", "29", "00"]
                  1: 2015-03-29T01:00+01:00 = 2015-03-29T00:00Z ["2015", "03", "29", "01"]
                  2: 2015-03-29T03:00+02:00 = 2015-03-29T01:00Z ["2015", "03", "29", "03"]
                  3: 2015-03-29T04:00+02:00 = 2015-03-29T02:00Z ["2015", "03", "29", "04"]
                  4: 2015-03-29T05:00+02:00 = 2015-03-29T03:00Z ["2015", "03", "29", "05"]
                1h from 2015-10-25T00:00 Europe/Berlin:
                  0: 2015-10-25T00:00+02:00 = 2015-10-24T22:00Z ["2015", "10", "25", "00"]
                  1: 2015-10-25T01:00+02:00 = 2015-10-24T23:00Z ["2015", "10", "25", "01"]
                  2: 2015-10-25T02:00+02:00 = 2015-10-25T00:00Z ["2015", "10", "25", "02"]
                  3: 2015-10-25T02:00+01:00 = 2015-10-25T01:00Z ["2015", "10", "25", "02"]
                  4: 2015-10-25T03:00+01:00 = 2015-10-25T02:00Z ["2015", "10", "25", "03"]
            "#]],
        );
    }

    /// Local times that do not exist (midnight on a São Paulo spring-forward day, 02:30 in Berlin) move forward
    /// by the gap for that instance only; ambiguous ones take the earlier (summer-time) instant.
    #[test]
    fn gaps_and_folds_in_calendar_steps() {
        let mut rows = Vec::new();
        for (frequency, initial, zone, ks) in [
            ("1d", "2014-10-17", "America/Sao_Paulo", 0..4),
            ("1d", "2015-03-28T02:30", "Europe/Berlin", 0..3),
            ("1d", "2015-10-24T02:30", "Europe/Berlin", 0..3),
            ("1d", "2011-12-28", "Pacific/Apia", 0..5),
        ] {
            let d = ds(frequency, initial, Some(zone));
            let instances: Vec<String> = ks.map(|k| show_local(d.instance(k), d.timezone())).collect();
            rows.push(format!("{frequency} {initial} {zone}: {}", instances.join(" ")));
        }
        check(
            rows,
            expect![[r#"
                1d 2014-10-17 America/Sao_Paulo: 2014-10-17T00:00-03:00 2014-10-18T00:00-03:00 2014-10-19T01:00-02:00 2014-10-20T00:00-02:00
                1d 2015-03-28T02:30 Europe/Berlin: 2015-03-28T02:30+01:00 2015-03-29T03:30+02:00 2015-03-30T02:30+02:00
                1d 2015-10-24T02:30 Europe/Berlin: 2015-10-24T02:30+02:00 2015-10-25T02:30+02:00 2015-10-26T02:30+01:00
                1d 2011-12-28 Pacific/Apia: 2011-12-28T00:00-10:00 2011-12-29T00:00-10:00 2011-12-31T00:00+14:00 2011-12-31T00:00+14:00 2012-01-01T00:00+14:00
            "#]],
        );
    }

    /// Roll-up: the days of each month instance `[m, next(m))`, respecting the day dataset's initial instance
    /// (February starts on the 10th; January has no days at all).
    #[test]
    fn roll_up_days_into_months() {
        let mut rows = Vec::new();
        for zone in ["UTC", "Europe/Berlin"] {
            let months = ds("1M", "2015-01-01", Some(zone));
            let days = ds("1d", "2015-02-10", Some(zone));
            for k in 0..3 {
                let m = months.instance(k).unwrap();
                let end = months.next(m).unwrap();
                let within: Vec<_> = days.instances_within(m, end).collect();
                let range = days.indices_within(m, end);
                rows.push(format!(
                    "{zone} {}: {} days, indices {range:?}, first {}, last {}",
                    &show_local(Some(m), months.timezone())[..7],
                    within.len(),
                    show_local(within.first().copied(), days.timezone()),
                    show_local(within.last().copied(), days.timezone()),
                ));
            }
        }
        let days = ds("1d", "2015-02-10", None);
        rows.push(format!("empty period: {:?}", days.indices_within(utc("2015-03-05"), utc("2015-03-01"))));
        check(
            rows,
            expect![[r#"
                UTC 2015-01: 0 days, indices 0..0, first -, last -
                UTC 2015-02: 19 days, indices 0..19, first 2015-02-10T00:00+00:00, last 2015-02-28T00:00+00:00
                UTC 2015-03: 31 days, indices 19..50, first 2015-03-01T00:00+00:00, last 2015-03-31T00:00+00:00
                Europe/Berlin 2015-01: 0 days, indices 0..0, first -, last -
                Europe/Berlin 2015-02: 19 days, indices 0..19, first 2015-02-10T00:00+01:00, last 2015-02-28T00:00+01:00
                Europe/Berlin 2015-03: 31 days, indices 19..50, first 2015-03-01T00:00+01:00, last 2015-03-31T00:00+02:00
                empty period: 23..23
            "#]],
        );
    }

    #[test]
    fn path_components_and_template_values() {
        let mut rows = Vec::new();
        for (frequency, zone) in [("1M", "UTC"), ("1d", "UTC"), ("6h", "UTC"), ("15min", "UTC"), ("1d", "Asia/Kolkata")]
        {
            let d = ds(frequency, "2014-12-29T02:00Z", Some(zone));
            let i = d.instance(1).unwrap();
            rows.push(format!("{frequency:>5} {zone}: {:?} {:?}", d.path_components(i), d.template_values(i)));
        }
        check(
            rows,
            expect![[r#"
                   1M UTC: ["2015", "01"] [("YEAR", "2015"), ("MONTH", "01"), ("DAY", "29"), ("HOUR", "02"), ("MINUTE", "00")]
                   1d UTC: ["2014", "12", "30"] [("YEAR", "2014"), ("MONTH", "12"), ("DAY", "30"), ("HOUR", "02"), ("MINUTE", "00")]
                   6h UTC: ["2014", "12", "29", "08"] [("YEAR", "2014"), ("MONTH", "12"), ("DAY", "29"), ("HOUR", "08"), ("MINUTE", "00")]
                15min UTC: ["2014", "12", "29", "02", "15"] [("YEAR", "2014"), ("MONTH", "12"), ("DAY", "29"), ("HOUR", "02"), ("MINUTE", "15")]
                   1d Asia/Kolkata: ["2014", "12", "30"] [("YEAR", "2014"), ("MONTH", "12"), ("DAY", "30"), ("HOUR", "07"), ("MINUTE", "30")]
            "#]],
        );
    }

    #[test]
    fn date_offset_table() {
        let berlin = tz("Europe/Berlin");
        let cases = [
            ("2015-01-31T00:00Z", 1, "MONTH"),
            ("2016-01-31T00:00Z", 1, "MONTH"),
            ("2016-03-31T10:00Z", -1, "MONTH"),
            ("2015-01-01T00:00Z", -1, "DAY"),
            ("2014-12-31T20:00Z", 48, "HOUR"),
            ("2015-01-01T00:30Z", -90, "MINUTE"),
            ("2015-01-01T00:00Z", 2, "WEEK"),
            ("2016-02-29T06:00Z", 1, "YEAR"),
            ("2016-02-29T06:00Z", -4, "YEAR"),
            // Berlin's local midnight on its spring and autumn switch days: a DAY is 24 hours all the same
            // (landing on 01:00 summer time, or 23:00 winter time), as Oozie computes without daylight saving.
            ("2015-03-28T23:00Z", 1, "DAY"),
            ("2015-03-28T23:00Z", 24, "HOUR"),
            ("2015-10-24T22:00Z", 1, "DAY"),
        ];
        let mut rows: Vec<String> = cases
            .iter()
            .map(|&(t, n, unit)| {
                let out = date_offset(utc(t), n, unit.parse().unwrap()).unwrap();
                format!(
                    "dateOffset({t}, {n}, {unit}) = {} = {} in Berlin",
                    show(Some(out)),
                    show_local(Some(out), berlin)
                )
            })
            .collect();
        rows.push(format!("{}", "day".parse::<OffsetUnit>().unwrap_err()));
        rows.push(format!("{}", date_offset(utc("2015-01-01"), i64::MAX, OffsetUnit::Minute).unwrap_err()));
        rows.push(format!("{}", date_offset(utc("2015-01-01"), i64::MAX, OffsetUnit::Year).unwrap_err()));
        check(
            rows,
            expect![[r#"
            dateOffset(2015-01-31T00:00Z, 1, MONTH) = 2015-02-28T00:00Z = 2015-02-28T01:00+01:00 in Berlin
            dateOffset(2016-01-31T00:00Z, 1, MONTH) = 2016-02-29T00:00Z = 2016-02-29T01:00+01:00 in Berlin
            dateOffset(2016-03-31T10:00Z, -1, MONTH) = 2016-02-29T10:00Z = 2016-02-29T11:00+01:00 in Berlin
            dateOffset(2015-01-01T00:00Z, -1, DAY) = 2014-12-31T00:00Z = 2014-12-31T01:00+01:00 in Berlin
            dateOffset(2014-12-31T20:00Z, 48, HOUR) = 2015-01-02T20:00Z = 2015-01-02T21:00+01:00 in Berlin
            dateOffset(2015-01-01T00:30Z, -90, MINUTE) = 2014-12-31T23:00Z = 2015-01-01T00:00+01:00 in Berlin
            dateOffset(2015-01-01T00:00Z, 2, WEEK) = 2015-01-15T00:00Z = 2015-01-15T01:00+01:00 in Berlin
            dateOffset(2016-02-29T06:00Z, 1, YEAR) = 2017-02-28T06:00Z = 2017-02-28T07:00+01:00 in Berlin
            dateOffset(2016-02-29T06:00Z, -4, YEAR) = 2012-02-29T06:00Z = 2012-02-29T07:00+01:00 in Berlin
            dateOffset(2015-03-28T23:00Z, 1, DAY) = 2015-03-29T23:00Z = 2015-03-30T01:00+02:00 in Berlin
            dateOffset(2015-03-28T23:00Z, 24, HOUR) = 2015-03-29T23:00Z = 2015-03-30T01:00+02:00 in Berlin
            dateOffset(2015-10-24T22:00Z, 1, DAY) = 2015-10-25T22:00Z = 2015-10-25T23:00+01:00 in Berlin
            invalid time unit `day`: expected MINUTE, HOUR, DAY, WEEK, MONTH or YEAR
            time out of range: dateOffset(2015-01-01T00:00:00+00:00, 9223372036854775807, MINUTE)
            time out of range: dateOffset(2015-01-01T00:00:00+00:00, 9223372036854775807, YEAR)
        "#]],
        );
    }

    #[test]
    fn format_time_table() {
        let t = utc("2014-12-31T20:05:09Z");
        let cases = [
            ("yyyy-MM-dd'T'HH:mm:ss", Tz::UTC),
            ("yyyyMMdd", Tz::UTC),
            ("yy/MM/dd HH", Tz::UTC),
            ("'year' yyyy', it''s late'", Tz::UTC),
            ("yyyy, it''s late", Tz::UTC),
            ("'it''s' HH:mm", Tz::UTC),
            ("yyyy-MM-dd HH:mm", tz("Europe/Berlin")),
            ("", Tz::UTC),
            ("yyyy-MM-dd hh", Tz::UTC),
            ("EEE", Tz::UTC),
            ("yyy", Tz::UTC),
            ("M/d", Tz::UTC),
            ("'open", Tz::UTC),
            // The letters people use besides those: names, day of year, weeks, 12-hour clock, milliseconds.
            ("EEE, d MMM yyyy hh:mm:ss a", Tz::UTC),
            ("EEEE d MMMM yyyy G", Tz::UTC),
            ("D w W F u", Tz::UTC),
            ("HH:mm:ss.SSS k K h", Tz::UTC),
            ("yyyy-MM-dd'T'HH:mm:ss.SSSXXX z Z X XX", tz("Europe/Berlin")),
            ("yyyy-MM-dd'T'HH:mmX", Tz::UTC),
            ("yyyyy-M-d H:m:s", Tz::UTC),
            ("YYYY", Tz::UTC),
            ("zzzz", Tz::UTC),
        ];
        // A Sunday after New Year: week 2; half past midnight: 12 AM, hour 24 of `k`.
        let sunday = utc("2015-01-04T00:30:00Z");
        let weeks = [("EEE D w W hh a k K", Tz::UTC), ("D w", tz("America/New_York"))];
        let t = t + TimeDelta::milliseconds(7);
        check(
            cases.into_iter().map(|c| (t, c)).chain(weeks.into_iter().map(|c| (sunday, c))).map(
                |(t, (pattern, zone))| match format_time(t, pattern, zone) {
                    Ok(s) => format!("{pattern:?} in {zone} => {s:?}"),
                    Err(e) => format!("{pattern:?} => error: {e}"),
                },
            ),
            expect![[r#"
                "yyyy-MM-dd'T'HH:mm:ss" in UTC => "2014-12-31T20:05:09"
                "yyyyMMdd" in UTC => "20141231"
                "yy/MM/dd HH" in UTC => "14/12/31 20"
                "'year' yyyy', it''s late'" in UTC => "year 2014, it's late"
                "yyyy, it''s late" => error: invalid time pattern `yyyy, it''s late`: unsupported field `i` at position 6 (supported: G y M d D E u a H k K h m s S w W F z Z X, 'literal')
                "'it''s' HH:mm" in UTC => "it's 20:05"
                "yyyy-MM-dd HH:mm" in Europe/Berlin => "2014-12-31 21:05"
                "" in UTC => ""
                "yyyy-MM-dd hh" in UTC => "2014-12-31 08"
                "EEE" in UTC => "Wed"
                "yyy" in UTC => "2014"
                "M/d" in UTC => "12/31"
                "'open" => error: invalid time pattern `'open`: quote opened at position 0 is not closed
                "EEE, d MMM yyyy hh:mm:ss a" in UTC => "Wed, 31 Dec 2014 08:05:09 PM"
                "EEEE d MMMM yyyy G" in UTC => "Wednesday 31 December 2014 AD"
                "D w W F u" in UTC => "365 1 5 5 3"
                "HH:mm:ss.SSS k K h" in UTC => "20:05:09.007 20 8 8"
                "yyyy-MM-dd'T'HH:mm:ss.SSSXXX z Z X XX" in Europe/Berlin => "2014-12-31T21:05:09.007+01:00 CET +0100 +01 +0100"
                "yyyy-MM-dd'T'HH:mmX" in UTC => "2014-12-31T20:05Z"
                "yyyyy-M-d H:m:s" in UTC => "02014-12-31 20:5:9"
                "YYYY" => error: invalid time pattern `YYYY`: unsupported field `YYYY` at position 0 (supported: G y M d D E u a H k K h m s S w W F z Z X, 'literal')
                "zzzz" => error: invalid time pattern `zzzz`: unsupported field `zzzz` at position 0 (supported: G y M d D E u a H k K h m s S w W F z Z X, 'literal')
                "EEE D w W hh a k K" in UTC => "Sun 4 2 2 12 AM 24 0"
                "D w" in America/New_York => "3 1"
            "#]],
        );
    }

    #[test]
    fn parse_timestamp_table() {
        let berlin = tz("Europe/Berlin");
        let cases = [
            ("2015-05-01T00:00", Tz::UTC),
            ("2015-05-01T00:00Z", Tz::UTC),
            ("2015-05-01", Tz::UTC),
            ("2015-05-01T00:00", berlin),
            ("2015-05-01T00:00Z", berlin),
            ("2015-05-01T00:00:30+05:30", berlin),
            ("2015-05-01T00:00-01:00", Tz::UTC),
            ("2015-03-29T02:30", berlin),
            ("2015-10-25T02:30", berlin),
            ("2015-5-1", Tz::UTC),
            ("2015-05-01 00:00", Tz::UTC),
            ("2015-05-01T24:00", Tz::UTC),
            ("2015-02-30", Tz::UTC),
            ("2015-05-01T00:00z", Tz::UTC),
            ("2015-05-01T00", Tz::UTC),
            ("2015-05-01T00:00+0200", Tz::UTC),
            ("2015-05-01T00:00+01:60", Tz::UTC),
            ("", Tz::UTC),
        ];
        check(
            cases.map(|(text, zone)| match parse_timestamp(text, zone) {
                Ok(t) => {
                    format!("{text:<26} in {zone} => {} = {}", t.format("%Y-%m-%dT%H:%M:%S%:z"), show(Some(t.to_utc())))
                }
                Err(e) => format!("{text:<26} => error: {e}"),
            }),
            expect![[r#"
                2015-05-01T00:00           in UTC => 2015-05-01T00:00:00+00:00 = 2015-05-01T00:00Z
                2015-05-01T00:00Z          in UTC => 2015-05-01T00:00:00+00:00 = 2015-05-01T00:00Z
                2015-05-01                 in UTC => 2015-05-01T00:00:00+00:00 = 2015-05-01T00:00Z
                2015-05-01T00:00           in Europe/Berlin => 2015-05-01T00:00:00+02:00 = 2015-04-30T22:00Z
                2015-05-01T00:00Z          in Europe/Berlin => 2015-05-01T02:00:00+02:00 = 2015-05-01T00:00Z
                2015-05-01T00:00:30+05:30  in Europe/Berlin => 2015-04-30T20:30:30+02:00 = 2015-04-30T18:30Z
                2015-05-01T00:00-01:00     in UTC => 2015-05-01T01:00:00+00:00 = 2015-05-01T01:00Z
                2015-03-29T02:30           in Europe/Berlin => 2015-03-29T03:30:00+02:00 = 2015-03-29T01:30Z
                2015-10-25T02:30           in Europe/Berlin => 2015-10-25T02:30:00+02:00 = 2015-10-25T00:30Z
                2015-5-1                   => error: invalid timestamp `2015-5-1`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
                2015-05-01 00:00           => error: invalid timestamp `2015-05-01 00:00`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
                2015-05-01T24:00           => error: invalid timestamp `2015-05-01T24:00`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
                2015-02-30                 => error: invalid timestamp `2015-02-30`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
                2015-05-01T00:00z          => error: invalid timestamp `2015-05-01T00:00z`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
                2015-05-01T00              => error: invalid timestamp `2015-05-01T00`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
                2015-05-01T00:00+0200      => error: invalid timestamp `2015-05-01T00:00+0200`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
                2015-05-01T00:00+01:60     => error: invalid timestamp `2015-05-01T00:00+01:60`: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
                                           => error: invalid timestamp ``: expected ISO-8601 like `2015-05-01T00:00`, `2015-05-01T00:00:00Z`, `2015-05-01T00:00+02:00` or `2015-05-01`
            "#]],
        );
    }

    #[test]
    fn parse_timezone_table() {
        let names = [
            "Europe/Berlin",
            "UTC",
            "europe/berlin",
            "Europe/Berln",
            "Berlin",
            "America/New_Yrok",
            "PST",
            "Mars/Olympus",
        ];
        check(
            names.map(|name| match parse_timezone(name) {
                Ok(zone) => format!("{name} => {zone}"),
                Err(e) => format!("{name} => error: {e}"),
            }),
            expect![[r#"
                Europe/Berlin => Europe/Berlin
                UTC => UTC
                europe/berlin => error: unknown timezone `europe/berlin` (did you mean `Europe/Berlin`?)
                Europe/Berln => error: unknown timezone `Europe/Berln` (did you mean `Europe/Berlin`?)
                Berlin => error: unknown timezone `Berlin` (did you mean `Europe/Berlin`?)
                America/New_Yrok => error: unknown timezone `America/New_Yrok` (did you mean `America/New_York`?)
                PST => error: unknown timezone `PST`
                Mars/Olympus => error: unknown timezone `Mars/Olympus`
            "#]],
        );
        // Dataset::parse reports the timezone error as is, and defaults to UTC.
        assert_eq!(
            Dataset::parse("1d", "2015-01-01", Some("Europe/Berln")).unwrap_err().to_string(),
            "unknown timezone `Europe/Berln` (did you mean `Europe/Berlin`?)"
        );
        assert_eq!(Dataset::parse("1d", "2015-01-01", None).unwrap().timezone(), Tz::UTC);
    }

    /// index_at_or_before must agree with a reference that walks the instances one by one, for every frequency
    /// unit and across DST gaps and folds, half-hour DST (Lord Howe), midnight gaps (São Paulo) and a skipped
    /// day (Apia, 2011-12-30). Probes hit each instance exactly, just before it and at odd offsets in between.
    #[test]
    fn index_matches_linear_reference() {
        let datasets = [
            ds("1d", "2015-01-01", Some("Europe/Berlin")),
            ds("3d", "2015-01-02T02:30", Some("Europe/Berlin")),
            ds("1h", "2015-03-20", Some("Europe/Berlin")),
            ds("15min", "2015-10-24T23:50", Some("Europe/Berlin")),
            ds("1M", "2014-01-31T02:30", Some("Europe/Berlin")),
            ds("1d", "2014-01-01", Some("America/Sao_Paulo")),
            ds("1d", "2014-01-01T02:15", Some("Australia/Lord_Howe")),
            ds("1d", "2011-12-01", Some("Pacific/Apia")),
            ds("2M", "2012-01-31T12:00", Some("America/New_York")),
        ];
        for d in &datasets {
            let instances: Vec<DateTime<Utc>> = (0..400).map_while(|k| d.instance(k)).collect();
            // Instances never go backwards (they may coincide only on Apia's skipped day).
            assert!(instances.windows(2).all(|w| w[0] <= w[1]), "{d:?}");
            let mut probes: Vec<DateTime<Utc>> = instances
                .iter()
                .flat_map(|&i| [i - TimeDelta::nanoseconds(1), i, i + TimeDelta::minutes(7), i + TimeDelta::hours(13)])
                .collect();
            probes.push(instances[0] - TimeDelta::days(40));
            for t in probes {
                let expected = instances.iter().rposition(|&i| i <= t).map(|k| k as i64);
                // Skip probes past the last collected instance, where the reference cannot know the answer.
                if expected.is_none_or(|k| k as usize + 1 < instances.len()) {
                    assert_eq!(d.index_at_or_before(t), expected, "{d:?} at {t}");
                    assert_eq!(d.next(t), expected.map_or(d.instance(0), |k| d.instance(k + 1)), "{d:?} at {t}");
                }
            }
        }
    }

    /// instance(k) and index_at_or_before(t) are O(1): a minutely dataset asked about the year 9999 answers
    /// immediately (a walk would visit about four billion instances), and the answer round-trips.
    #[test]
    fn far_future_is_constant_time() {
        let mut rows = Vec::new();
        for (frequency, zone) in [("1min", "UTC"), ("1d", "Europe/Berlin"), ("1M", "Europe/Berlin")] {
            let d = ds(frequency, "2000-01-31", Some(zone));
            let t = utc("9999-12-31T23:59:59Z");
            let k = d.index_at_or_before(t).unwrap();
            let i = d.instance(k).unwrap();
            assert!(i <= t && d.instance(k + 1).is_none_or(|next| next > t));
            assert_eq!(d.index_at_or_before(i), Some(k));
            rows.push(format!("{frequency} {zone}: index {k} = {}", show_local(Some(i), d.timezone())));
        }
        check(
            rows,
            expect![[r#"
                1min UTC: index 4207550399 = 9999-12-31T23:59+00:00
                1d Europe/Berlin: index 2921910 = +10000-01-01T00:00+01:00
                1M Europe/Berlin: index 95999 = 9999-12-31T00:00+01:00
            "#]],
        );
    }
}
