//! The golden table of the pure step: for each rule, the event on a view
//! as the run finds it, and what follows (state, what the commit writes of
//! the record and the flow, what the memo learns, which `latest()` was
//! read, the event's flags, the actions).

use std::fmt::Write;

use expect_test::expect;

use super::*;
use crate::catalog::OnDependencyFailure;
use crate::model::wire_name;
use crate::scheduler::transition::{Freshness, Reason, Retry};

/// One row: the step's inputs besides the event, with defaults.
#[derive(Clone)]
struct Case {
    view: ViewNow,
    flow: FlowSoFar,
    mode: Mode,
    full_refresh: bool,
    external: bool,
    settled: Option<Settled>,
    failed_inputs: Vec<String>,
    errors_inputs: Vec<String>,
    flag: Option<FlagIdentity>,
    latest: Option<Vec<String>>,
    produced_at: Option<i64>,
}

const FLAG: FlagIdentity = FlagIdentity { mtime_nanos: 7_000_000, size: 0, inode: 9 };

fn fresh() -> Case {
    Case {
        view: ViewNow::default(),
        flow: FlowSoFar::default(),
        mode: Mode::Default,
        full_refresh: false,
        external: false,
        settled: Some(Settled::default()),
        failed_inputs: Vec::new(),
        errors_inputs: Vec::new(),
        flag: None,
        latest: None,
        produced_at: None,
    }
}

/// A view materialized at 100 with version v1, as stored.
fn materialized() -> Case {
    let record = ViewRecord {
        state: ViewState::Materialized,
        version_checksum: Some("v1".into()),
        timestamp: Some(100),
        ..ViewRecord::default()
    };
    Case { view: ViewNow { record, stored_state: ViewState::Materialized, network_retry: None }, ..fresh() }
}

/// `case` with its view in flight (in memory; the store holds it stable).
fn in_state(mut case: Case, state: ViewState) -> Case {
    case.view.record.state = state;
    case
}

fn settled(freshness: Freshness, settled: Settled) -> Event {
    Event::DependenciesSettled {
        mode: Mode::Default,
        settled,
        freshness,
        on_failure: OnDependencyFailure::default(),
        previous: ViewState::Materialized,
    }
}

fn show(applied: &Applied, before: &Case) -> String {
    let actions: Vec<&str> = applied.actions.iter().map(Action::name).collect();
    let stored = match &applied.stored {
        Some(record) => {
            format!("{}@{}", wire_name(&record.state), record.timestamp.map_or("-".into(), |t| t.to_string()))
        }
        None => "-".into(),
    };
    let flow = match (&applied.flow.status, &applied.flow_record) {
        (None, _) => "-".to_string(),
        (Some(status), None) => wire_name(status),
        (Some(status), Some(_)) => format!("{} written", wire_name(status)),
    };
    let memo: Vec<String> = applied
        .memo
        .iter()
        .map(|change| match change {
            MemoChange::Dirty => "dirty".into(),
            MemoChange::WatchPublished => "watch-published".into(),
            MemoChange::Settled { on_disk } => format!("settled({on_disk:?})"),
        })
        .collect();
    let latest = match (&before.view.record.latest, &applied.view.record.latest) {
        (a, b) if a == b => "-".into(),
        (_, Some(read)) => read.join("+"),
        (_, None) => "none".into(),
    };
    let mut extra = Vec::new();
    if applied.event.errors {
        extra.push("event.errors".to_string());
    }
    if let Some(reason) = &applied.flow.reason {
        extra.push(format!("reason={reason}"));
    }
    if let Some(failure) = &applied.failure {
        extra.push(format!("failure={failure}"));
    }
    if let Some(retry) = &applied.view.network_retry {
        extra.push(format!("network={retry}"));
    }
    format!(
        "{} -> {} | {} | stored={stored} flow={flow} memo=[{}] latest={latest}{}{}",
        wire_name(&before.view.record.state),
        wire_name(&applied.view.record.state),
        actions.join(","),
        memo.join(","),
        if extra.is_empty() { "" } else { " " },
        extra.join(" ")
    )
}

fn run_case(case: &Case, event: &Event) -> Applied {
    let url: Arc<str> = "t/V/1".into();
    let run: Arc<str> = "r1".into();
    let flag = case.flag;
    let latest = case.latest.clone();
    let ctx = Ctx {
        url: &url,
        run: &run,
        mode: case.mode,
        full_refresh: case.full_refresh,
        external: case.external,
        version: "v2",
        now: 500,
        stamp_floor: 400,
        settled: case.settled,
        no_data_before_run: false,
        produced_at: case.produced_at,
        returned: None,
        failed_inputs: &case.failed_inputs,
        errors_inputs: &case.errors_inputs,
        done_flag: &|| PathBuf::from("/s/t/V/1/_SUCCESS"),
        flag: &move || flag,
        latest: &move || latest.clone(),
    };
    apply(case.view.clone(), &case.flow, event, &ctx)
}

#[test]
fn golden_table() {
    let failed = Settled { some_failed: true, ..Settled::default() };
    let errors = Settled { some_errors: true, ..Settled::default() };
    let outdated = Freshness::Outdated(Reason::NeverMaterialized);
    let materialize = Event::Materialize { mode: Mode::Default, materialize_once: false };
    let transformed = Event::Transformed { data: true };
    let published = Case { flag: Some(FLAG), ..in_state(materialized(), ViewState::Transforming) };
    let cases: Vec<(&str, Case, Event)> = vec![
        ("asked, never built", fresh(), materialize.clone()),
        ("asked, invalidated", in_state(materialized(), ViewState::Invalidated), materialize.clone()),
        (
            "settled, up to date",
            in_state(materialized(), ViewState::Waiting),
            settled(Freshness::UpToDate, Settled::default()),
        ),
        (
            "settled, up to date, full refresh",
            Case { full_refresh: true, ..in_state(materialized(), ViewState::Waiting) },
            settled(Freshness::UpToDate, Settled::default()),
        ),
        (
            "settled, up to date, SET_ONLY",
            Case { mode: Mode::SetOnly, ..in_state(materialized(), ViewState::Waiting) },
            settled(Freshness::UpToDate, Settled::default()),
        ),
        ("settled, outdated", in_state(fresh(), ViewState::Waiting), settled(outdated.clone(), Settled::default())),
        (
            "settled, a dependency failed",
            Case { failed_inputs: vec!["t/D/1".into()], ..in_state(materialized(), ViewState::Waiting) },
            settled(outdated.clone(), failed),
        ),
        (
            "settled, a dependency failed, skip",
            Case { failed_inputs: vec!["t/D/1".into()], ..in_state(materialized(), ViewState::Waiting) },
            Event::DependenciesSettled {
                mode: Mode::Default,
                settled: failed,
                freshness: outdated.clone(),
                on_failure: OnDependencyFailure::Skip,
                previous: ViewState::Materialized,
            },
        ),
        ("transformed, published", published.clone(), transformed.clone()),
        (
            "transformed, latest() read",
            Case { latest: Some(vec!["t/D/2".into()]), ..published.clone() },
            transformed.clone(),
        ),
        (
            "transformed, produced before the floor",
            Case { produced_at: Some(50), ..published.clone() },
            transformed.clone(),
        ),
        (
            "transformed over errors",
            Case { errors_inputs: vec!["t/D/1".into()], settled: Some(errors), ..published.clone() },
            transformed.clone(),
        ),
        (
            "transformed, flow written before",
            Case {
                flow: FlowSoFar {
                    status: Some(FlowStatus::Successful),
                    written: Some(FlowStatus::Successful),
                    evented: Some(FlowStatus::Successful),
                    ..FlowSoFar::default()
                },
                ..published.clone()
            },
            transformed.clone(),
        ),
        ("transformed, no data", in_state(fresh(), ViewState::Transforming), Event::Transformed { data: false }),
        (
            "external, flag found",
            Case { external: true, flag: Some(FLAG), ..in_state(fresh(), ViewState::Transforming) },
            transformed.clone(),
        ),
        (
            "external, no flag",
            Case { external: true, ..in_state(fresh(), ViewState::Transforming) },
            Event::Transformed { data: false },
        ),
        (
            "failed, given up",
            in_state(materialized(), ViewState::Transforming),
            Event::TransformFailed { retry: Retry::No, error: "boom".into() },
        ),
        (
            "failed, network",
            in_state(materialized(), ViewState::Transforming),
            Event::TransformFailed { retry: Retry::Network, error: "reset".into() },
        ),
        (
            "retry due after network",
            Case {
                view: ViewNow {
                    network_retry: Some("reset".into()),
                    ..in_state(materialized(), ViewState::Retrying).view
                },
                ..materialized()
            },
            Event::RetryDue,
        ),
        (
            "canceled",
            in_state(materialized(), ViewState::Transforming),
            Event::Canceled { previous: ViewState::Materialized },
        ),
    ];
    let mut table = String::new();
    for (name, case, event) in &cases {
        let _ = writeln!(table, "{name:<40} {}", show(&run_case(case, event), case));
    }
    expect![[r#"
        asked, never built                       receive -> waiting | ask-dependencies | stored=- flow=QUEUED memo=[] latest=-
        asked, invalidated                       invalidated -> waiting | ask-dependencies | stored=- flow=QUEUED memo=[] latest=-
        settled, up to date                      waiting -> materialized | report-idle,notify-dependents | stored=- flow=IDLE memo=[settled(Some(true))] latest=-
        settled, up to date, full refresh        waiting -> materialized | report-idle,notify-dependents | stored=- flow=IDLE memo=[] latest=-
        settled, up to date, SET_ONLY            waiting -> materialized | report-idle,notify-dependents | stored=- flow=IDLE memo=[] latest=-
        settled, outdated                        waiting -> transforming | transform | stored=- flow=STARTING memo=[] latest=-
        settled, a dependency failed             waiting -> transforming | transform | stored=- flow=STARTING memo=[] latest=-
        settled, a dependency failed, skip       waiting -> materialized | report-skipped,notify-dependents | stored=- flow=SKIPPED written memo=[] latest=- event.errors reason=upstream failed: t/D/1
        transformed, published                   transforming -> materialized | record-materialized,notify-dependents | stored=materialized@500 flow=SUCCESSFUL written memo=[dirty,watch-published,settled(Some(true))] latest=-
        transformed, latest() read               transforming -> materialized | record-materialized,notify-dependents | stored=materialized@500 flow=SUCCESSFUL written memo=[dirty,watch-published,settled(Some(true))] latest=t/D/2
        transformed, produced before the floor   transforming -> materialized | record-materialized,notify-dependents | stored=materialized@400 flow=SUCCESSFUL written memo=[dirty,watch-published,settled(Some(true))] latest=-
        transformed over errors                  transforming -> materialized | record-materialized,notify-dependents | stored=materialized@500 flow=SUCCESSFUL written memo=[dirty,watch-published,settled(Some(true))] latest=- event.errors reason=upstream has errors: t/D/1
        transformed, flow written before         transforming -> materialized | record-materialized,notify-dependents | stored=materialized@500 flow=SUCCESSFUL memo=[dirty,watch-published,settled(Some(true))] latest=-
        transformed, no data                     transforming -> no-data | record-no-data,notify-dependents | stored=no-data@- flow=SUCCESSFUL written memo=[dirty,settled(None)] latest=-
        external, flag found                     transforming -> materialized | record-materialized,notify-dependents | stored=materialized@500 flow=SUCCESSFUL written memo=[dirty,settled(Some(true))] latest=-
        external, no flag                        transforming -> no-data | record-no-data,notify-dependents | stored=no-data@- flow=SUCCESSFUL written memo=[dirty,settled(Some(false))] latest=- reason=no done flag at /s/t/V/1/_SUCCESS
        failed, given up                         transforming -> failed | record-failed,notify-dependents | stored=failed@100 flow=TERMINATED_WITH_ERROR written memo=[dirty] latest=- failure=boom
        failed, network                          transforming -> retrying | schedule-retry,report-network-retry | stored=- flow=QUEUED memo=[] latest=- network=reset
        retry due after network                  retrying -> transforming | transform | stored=- flow=STARTING memo=[] latest=-
        canceled                                 transforming -> materialized | notify-dependents | stored=- flow=QUEUED memo=[] latest=-
    "#]].assert_eq(&table);
}

/// A view's second event in one batch starts from what the first left:
/// the fold hands the step its own output, and the flow is written once.
#[test]
fn a_second_event_starts_from_the_first() {
    let first = run_case(
        &in_state(fresh(), ViewState::Waiting),
        &settled(Freshness::Outdated(Reason::NeverMaterialized), Settled::default()),
    );
    let case = Case { view: first.view.clone(), flow: first.flow.clone(), flag: Some(FLAG), ..fresh() };
    let second = run_case(&case, &Event::Transformed { data: true });
    assert_eq!(first.view.record.state, ViewState::Transforming);
    assert_eq!(second.view.record.state, ViewState::Materialized);
    assert!(second.flow_record.is_some(), "the flow settles with the second event");
    let third = run_case(&Case { view: second.view.clone(), flow: second.flow.clone(), ..fresh() }, &Event::Invalidate);
    assert!(third.flow_record.is_none(), "a flow written is not written again");
}
