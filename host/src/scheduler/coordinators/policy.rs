//! The pure policy of one coordinator: given its declaration, what it has
//! created so far, its open actions and the time, which actions to create,
//! time out, skip and submit, and when it is next due. Oozie's rules:
//! `throttle` caps the actions WAITING (creation pauses), `concurrency` caps
//! those SUBMITTED or RUNNING, `execution` orders and skips (FIFO, LIFO,
//! LAST_ONLY, NONE). No clock, no I/O: everything is an argument.

use chrono::{DateTime, Utc};

use crate::catalog::coordinator::{Catchup, Coordinator, Execution};
use crate::model::ActionState;

/// An action not in a final state, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenAction {
    /// Milliseconds since the Unix epoch.
    pub nominal: i64,
    /// When it was created (milliseconds).
    pub actual: i64,
    pub state: ActionState,
}

/// The actions to create: the nominal times due by `now` after
/// `last_nominal` (all of them after downtime: catch-up), while fewer than
/// `throttle` would be WAITING, counting each new one as waiting; and the
/// next time creation is due (`None` when `end` is reached, or while the
/// throttle holds creation back: then a state change, not the clock,
/// frees it).
pub fn creations(
    coordinator: &Coordinator,
    last_nominal: Option<DateTime<Utc>>,
    waiting: usize,
    now: DateTime<Utc>,
) -> (Vec<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let mut created = Vec::new();
    if let Catchup::Newest(keep) = coordinator.catchup {
        // Only the newest `keep` of the times due: the older are passed over.
        let mut due = std::collections::VecDeque::with_capacity(keep.min(1024) + 1);
        let mut next = None;
        for nominal in coordinator.nominal_times_after(last_nominal) {
            if nominal > now {
                next = Some(nominal);
                break;
            }
            due.push_back(nominal);
            if due.len() > keep {
                due.pop_front();
            }
        }
        for nominal in due {
            if waiting + created.len() >= coordinator.throttle {
                return (created, None);
            }
            created.push(nominal);
        }
        return (created, next);
    }
    for nominal in coordinator.nominal_times_after(last_nominal) {
        if nominal > now {
            return (created, Some(nominal));
        }
        if waiting + created.len() >= coordinator.throttle {
            return (created, None);
        }
        created.push(nominal);
    }
    (created, None)
}

/// What to do with a coordinator's open actions now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions {
    /// WAITING actions whose timeout has passed (by nominal time).
    pub time_out: Vec<i64>,
    /// Actions `execution` passes over, with the reason.
    pub skip: Vec<(i64, String)>,
    /// READY actions to submit now, in the order to run them.
    pub submit: Vec<i64>,
    /// The earliest timeout still to come, if any.
    pub next_due: Option<DateTime<Utc>>,
}

/// Decides over `open` (in nominal order, each state as it is now).
pub fn decide(coordinator: &Coordinator, open: &[OpenAction], now: DateTime<Utc>) -> Decisions {
    let now_ms = now.timestamp_millis();
    let mut decisions = Decisions::default();
    let mut next_due: Option<i64> = None;
    let timeout_ms = coordinator.timeout.map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
    for action in open.iter().filter(|a| a.state == ActionState::Waiting) {
        if let Some(timeout) = timeout_ms {
            let due = action.actual.saturating_add(timeout);
            if now_ms >= due {
                decisions.time_out.push(action.nominal);
            } else {
                next_due = Some(next_due.map_or(due, |earliest| earliest.min(due)));
            }
        }
    }
    let mut ready: Vec<i64> = open.iter().filter(|a| a.state == ActionState::Ready).map(|a| a.nominal).collect();
    match coordinator.execution {
        Execution::Fifo => {}
        Execution::Lifo => ready.reverse(),
        Execution::LastOnly => {
            // Oozie's rule: an action WAITING or READY is SKIPPED once the
            // next action's nominal time has come, whether or not that one's
            // inputs are there (so of the actions due at once only the
            // newest runs, and a late input never runs an older action).
            for action in open.iter().filter(|a| matches!(a.state, ActionState::Waiting | ActionState::Ready)) {
                if decisions.time_out.contains(&action.nominal) {
                    continue;
                }
                let next = coordinator.next_nominal(DateTime::from_timestamp_millis(action.nominal));
                if let Some(next) = next.filter(|next| *next <= now) {
                    decisions.skip.push((
                        action.nominal,
                        format!(
                            "the next action's nominal time ({}) has come: LAST_ONLY runs only the newest",
                            time(next.timestamp_millis())
                        ),
                    ));
                }
            }
            ready.retain(|nominal| !decisions.skip.iter().any(|(skipped, _)| skipped == nominal));
        }
        Execution::None => ready.retain(|&nominal| {
            let next = coordinator.next_nominal(DateTime::from_timestamp_millis(nominal));
            match next.filter(|next| *next <= now) {
                Some(next) => {
                    decisions.skip.push((
                        nominal,
                        format!(
                            "its time passed by more than a tick (the next one, {}, has come): NONE skips it",
                            next.to_rfc3339()
                        ),
                    ));
                    false
                }
                None => true,
            }
        }),
    }
    let active = open.iter().filter(|a| matches!(a.state, ActionState::Submitted | ActionState::Running)).count();
    decisions.submit = ready.into_iter().take(coordinator.concurrency.saturating_sub(active)).collect();
    decisions.next_due = next_due.and_then(DateTime::from_timestamp_millis);
    decisions
}

/// A nominal time in milliseconds as RFC 3339.
fn time(nominal: i64) -> String {
    DateTime::from_timestamp_millis(nominal).map_or_else(|| nominal.to_string(), |t| t.to_rfc3339())
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::time::Duration;

    use chrono_tz::Tz;
    use expect_test::expect;

    use super::*;
    use crate::catalog::EvaluationTime;
    use crate::catalog::coordinator::{Schedule, Trigger};
    use crate::catalog::template::Template;
    use crate::catalog::time::Dataset;
    use crate::model::Mode;

    /// A daily coordinator from 2015-05-01T06:00Z.
    fn daily(execution: Execution, concurrency: usize, throttle: usize, timeout: Option<Duration>) -> Coordinator {
        Coordinator {
            name: "daily".into(),
            views: "a.b/C/${YEAR}/${MONTH}/${DAY}".into(),
            template: Template::parse("a.b/C/${YEAR}/${MONTH}/${DAY}").unwrap(),
            schedule: Schedule::Every(Dataset::parse("1d", "2015-05-01T06:00:00Z", None).unwrap()),
            start: day(1),
            end: Some(day(20)),
            timezone: Tz::UTC,
            timeout,
            concurrency,
            throttle,
            execution,
            trigger: Trigger::Time,
            mode: Mode::Default,
            evaluation_time: EvaluationTime::Actual,
            catchup: Catchup::All,
            rescan_interval: Duration::from_secs(300),
            line: 1,
        }
    }

    /// 06:00Z on May `n`, 2015.
    fn day(n: u32) -> DateTime<Utc> {
        format!("2015-05-{n:02}T06:00:00Z").parse().unwrap()
    }

    fn days(times: &[i64]) -> String {
        let names: Vec<String> =
            times.iter().map(|t| DateTime::from_timestamp_millis(*t).unwrap().format("%d").to_string()).collect();
        names.join(",")
    }

    /// Open actions on May `day`, created `late` hours after their nominal time.
    fn open(actions: &[(u32, ActionState, i64)]) -> Vec<OpenAction> {
        actions
            .iter()
            .map(|&(n, state, late)| OpenAction {
                nominal: day(n).timestamp_millis(),
                actual: day(n).timestamp_millis() + late * 3_600_000,
                state,
            })
            .collect()
    }

    #[test]
    fn creations_catch_up_pause_at_the_throttle_and_stop_at_the_end() {
        let mut table = String::new();
        let (all, none) = (Catchup::All, Catchup::Newest(1));
        for (case, last, waiting, throttle, catchup, now) in [
            ("before the start", None, 0, 12, all, day(1) - chrono::TimeDelta::hours(1)),
            ("at the start", None, 0, 12, all, day(1)),
            ("three days of catch-up", None, 0, 12, all, day(3) + chrono::TimeDelta::hours(1)),
            ("after the last created", Some(day(3)), 0, 12, all, day(5)),
            ("the throttle holds two of five", None, 1, 3, all, day(5)),
            ("the throttle is full", None, 3, 3, all, day(5)),
            ("the end is reached", Some(day(18)), 0, 12, all, day(30)),
            ("catchup none: the newest of five", None, 0, 12, none, day(5)),
            ("catchup none, on time", Some(day(4)), 0, 12, none, day(5)),
            ("catchup 2: the newest two of five", None, 0, 12, Catchup::Newest(2), day(5)),
            ("catchup 2, throttle full", None, 12, 12, Catchup::Newest(2), day(5)),
        ] {
            let mut coordinator = daily(Execution::Fifo, 1, throttle, None);
            coordinator.catchup = catchup;
            let (created, next) = creations(&coordinator, last, waiting, now);
            let created: Vec<i64> = created.iter().map(|t| t.timestamp_millis()).collect();
            let next = next.map_or("none".to_string(), |t| t.to_rfc3339());
            writeln!(table, "{case:<32} create [{}] next {next}", days(&created)).unwrap();
        }
        expect![[r#"
            before the start                 create [] next 2015-05-01T06:00:00+00:00
            at the start                     create [01] next 2015-05-02T06:00:00+00:00
            three days of catch-up           create [01,02,03] next 2015-05-04T06:00:00+00:00
            after the last created           create [04,05] next 2015-05-06T06:00:00+00:00
            the throttle holds two of five   create [01,02] next none
            the throttle is full             create [] next none
            the end is reached               create [19] next none
            catchup none: the newest of five create [05] next 2015-05-06T06:00:00+00:00
            catchup none, on time            create [05] next 2015-05-06T06:00:00+00:00
            catchup 2: the newest two of five create [04,05] next 2015-05-06T06:00:00+00:00
            catchup 2, throttle full         create [] next none
        "#]]
        .assert_eq(&table);
    }

    #[test]
    fn decisions_time_out_skip_and_submit_as_the_execution_says() {
        use ActionState::*;
        let hours = |h: u64| Some(Duration::from_secs(h * 3600));
        let mut table = String::new();
        // A case, its coordinator, its open actions (May day, state, hours
        // late) and the time.
        type Case = (&'static str, Coordinator, Vec<(u32, ActionState, i64)>, DateTime<Utc>);
        let cases: Vec<Case> = vec![
            (
                "FIFO runs the oldest first",
                daily(Execution::Fifo, 1, 12, None),
                vec![(1, Ready, 0), (2, Ready, 0)],
                day(3),
            ),
            (
                "LIFO runs the newest first",
                daily(Execution::Lifo, 1, 12, None),
                vec![(1, Ready, 0), (2, Ready, 0)],
                day(3),
            ),
            (
                "concurrency 2, one running",
                daily(Execution::Fifo, 2, 12, None),
                vec![(1, Running, 0), (2, Ready, 0), (3, Ready, 0)],
                day(4),
            ),
            ("concurrency full", daily(Execution::Fifo, 1, 12, None), vec![(1, Submitted, 0), (2, Ready, 0)], day(4)),
            (
                "timeout passed",
                daily(Execution::Fifo, 1, 12, hours(2)),
                vec![(1, Waiting, 0), (2, Waiting, 1)],
                day(2) + chrono::TimeDelta::hours(2),
            ),
            (
                "one timed out, one to come",
                daily(Execution::Fifo, 1, 12, hours(2)),
                vec![(2, Waiting, 1), (3, Waiting, 0)],
                day(3),
            ),
            (
                "LAST_ONLY skips older ready and waiting",
                daily(Execution::LastOnly, 3, 12, None),
                vec![(1, Waiting, 0), (2, Ready, 0), (3, Ready, 0), (4, Waiting, 0)],
                day(4),
            ),
            (
                "LAST_ONLY skips what the next passed",
                daily(Execution::LastOnly, 3, 12, None),
                vec![(1, Waiting, 0), (2, Waiting, 0)],
                day(2),
            ),
            (
                "LAST_ONLY keeps the newest waiting",
                daily(Execution::LastOnly, 3, 12, None),
                vec![(2, Ready, 0)],
                day(2) + chrono::TimeDelta::hours(23),
            ),
            (
                "LAST_ONLY after the newest started",
                daily(Execution::LastOnly, 3, 12, None),
                vec![(1, Ready, 0), (2, Running, 0)],
                day(4),
            ),
            (
                "NONE skips what the next tick passed",
                daily(Execution::None, 3, 12, None),
                vec![(1, Ready, 0), (2, Ready, 0), (3, Ready, 0)],
                day(3),
            ),
            (
                "NONE keeps all before the next tick",
                daily(Execution::None, 3, 12, None),
                vec![(3, Ready, 0)],
                day(3) + chrono::TimeDelta::hours(23),
            ),
        ];
        for (case, coordinator, actions, now) in cases {
            let decisions = decide(&coordinator, &open(&actions), now);
            let skipped: Vec<i64> = decisions.skip.iter().map(|(n, _)| *n).collect();
            writeln!(
                table,
                "{case:<40} timeout [{}] skip [{}] submit [{}] due {}",
                days(&decisions.time_out),
                days(&skipped),
                days(&decisions.submit),
                decisions.next_due.map_or("none".to_string(), |t| t.format("%d %H:%M").to_string())
            )
            .unwrap();
        }
        expect![[r#"
            FIFO runs the oldest first               timeout [] skip [] submit [01] due none
            LIFO runs the newest first               timeout [] skip [] submit [02] due none
            concurrency 2, one running               timeout [] skip [] submit [02] due none
            concurrency full                         timeout [] skip [] submit [] due none
            timeout passed                           timeout [01] skip [] submit [] due 02 09:00
            one timed out, one to come               timeout [02] skip [] submit [] due 03 08:00
            LAST_ONLY skips older ready and waiting  timeout [] skip [01,02,03] submit [] due none
            LAST_ONLY skips what the next passed     timeout [] skip [01] submit [] due none
            LAST_ONLY keeps the newest waiting       timeout [] skip [] submit [02] due none
            LAST_ONLY after the newest started       timeout [] skip [01] submit [] due none
            NONE skips what the next tick passed     timeout [] skip [01,02] submit [03] due none
            NONE keeps all before the next tick      timeout [] skip [] submit [03] due none
        "#]]
        .assert_eq(&table);
    }
}
