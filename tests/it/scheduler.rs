//! The scheduler in process, through the library: a real sled metastore,
//! real plugins, real directories. Each test drives a small project
//! (`inprocess.rs`) through the semantics users rely on and asserts on run
//! summaries, view records and the event log; the last drives the
//! long-lived `Service` through its `Handle`.

use std::time::Duration;

use trellis::lattice;
use trellis::metastore::{Metastore, ViewRecord};
use trellis::model::{FlowStatus, Termination, ViewState};
use trellis::scheduler::{Error, Handle, Mode, RunSummary, Scheduler, Service, Stopping, Verdict};

use crate::inprocess::{Project, SUMMARY, clock_past, events, finished, logged, open};
use crate::support::plugin_path;

const DAYS: [&str; 3] = ["2015/01/01", "2015/01/02", "2015/01/03"];

fn record(store: &Metastore, view: &str) -> ViewRecord {
    store.view(view).expect("the metastore reads").unwrap_or_else(|| panic!("{view} has a record"))
}

fn in_(day: &str) -> String {
    format!("t.raw/In/{day}")
}

fn daily(day: &str) -> String {
    format!("t.mart/Daily/{day}")
}

/// A run's flows as the summary lists them: by view.
fn expected<S: AsRef<str>>(views: &[(S, FlowStatus)]) -> Vec<(String, FlowStatus)> {
    let mut views: Vec<(String, FlowStatus)> = views.iter().map(|(v, s)| (v.as_ref().to_string(), *s)).collect();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    views
}

/// Flows where every view of `views` was transformed successfully.
fn successful<S: AsRef<str>>(views: &[S]) -> Vec<(String, FlowStatus)> {
    expected(&views.iter().map(|view| (view.as_ref(), FlowStatus::Successful)).collect::<Vec<_>>())
}

async fn materialize(scheduler: &mut Scheduler, pattern: &str, mode: Mode) -> RunSummary {
    scheduler.materialize(pattern, mode).await.unwrap_or_else(|e| panic!("materialize {pattern}: {e}"))
}

/// The newest timestamp recorded among `views`.
fn newest(store: &Metastore, views: &[String]) -> i64 {
    views.iter().filter_map(|view| record(store, view).timestamp).max().expect("some view has a timestamp")
}

/// The summary and all below it: three days of In and Daily.
fn cone() -> Vec<String> {
    let mut views: Vec<String> = DAYS.iter().flat_map(|day| [in_(day), daily(day)]).collect();
    views.push(SUMMARY.to_string());
    views
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cold_run_materializes_dependencies_first_and_an_unchanged_run_transforms_nothing() {
    let project = Project::new(&[1, 2, 3]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    let store = scheduler.metastore();

    let cold = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    assert_eq!(cold.flows, successful(&cone()));
    assert_eq!((cold.idle, cold.termination.clone()), (0, Termination::Completed));
    assert!(cold.failures.is_empty() && cold.incomplete.is_empty() && cold.with_errors.is_empty(), "{cold:?}");
    // The run's record and flows say what the summary says.
    let run = store.run(&cold.id).unwrap().expect("the run is recorded");
    assert_eq!(run.termination, Some(Termination::Completed));
    let mut stored = store.flows(&cold.id).unwrap();
    stored.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(stored, cold.flows);

    // Each view was recorded materialized after everything it depends on.
    let log = events(&store);
    let materialized = |view: &str| {
        log.iter()
            .find(|e| &*e.event.view == view && e.event.actions.iter().any(|a| a == "record-materialized"))
            .unwrap_or_else(|| panic!("{view} was recorded materialized"))
            .sequence
    };
    for day in DAYS {
        assert!(materialized(&in_(day)) < materialized(&daily(day)), "{day}");
        assert!(materialized(&daily(day)) < materialized(SUMMARY), "{day}");
    }
    for view in cone() {
        let record = record(&store, &view);
        assert_eq!(record.state, ViewState::Materialized, "{view}");
        assert!(record.timestamp.is_some() && record.version_checksum.is_some(), "{view}: {record:?}");
        assert!(project.data(&view).join("_SUCCESS").exists(), "{view} has its data and done flag");
    }
    // External data is as new as trellis's first sight of its done flag,
    // not as its mtime (noon of that day in 2015).
    let external = record(&store, &in_(DAYS[0]));
    assert!(external.timestamp > Some(1_420_113_600_000), "{external:?}");

    // Nothing changed: nothing is transformed, and no record is written.
    let before: Vec<ViewRecord> = cone().iter().map(|view| record(&store, view)).collect();
    let unchanged = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    assert_eq!((unchanged.flows.len(), unchanged.idle), (0, 7), "{unchanged:?}");
    assert_eq!(unchanged.termination, Termination::Completed);
    assert_eq!(store.run(&unchanged.id).unwrap().unwrap().idle, 7);
    let after: Vec<ViewRecord> = cone().iter().map(|view| record(&store, view)).collect();
    assert_eq!(before, after);

    // What an up-to-date lattice plans is nothing.
    let plan = scheduler.plan(SUMMARY).unwrap();
    assert_eq!(plan.len(), 7);
    assert!(plan.iter().all(|(_, verdict)| *verdict == Verdict::UpToDate { once: false }), "{plan:?}");
    assert_eq!(plan.last().map(|(view, _)| view.as_str()), Some(SUMMARY), "dependencies come first");
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_counts_as_running_only_the_transformations_holding_a_permit() {
    let days: Vec<u32> = (1..=10).collect();
    let project = Project::new(&days);
    let mut scheduler = open(&project.catalog("v1")).await;
    let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = reports.clone();
    scheduler.on_progress(move |progress| kept.lock().unwrap().push(progress));
    let run = materialize(&mut scheduler, "t.mart/Daily/rymd(20150101-20150110)", Mode::Default).await;
    assert_eq!(run.count(FlowStatus::Successful), 20, "{run:?}");
    let reports = reports.lock().unwrap();
    // The project's concurrency is 2: never more running, the rest waiting.
    assert!(reports.iter().all(|p| p.running <= 2), "{reports:?}");
    assert!(reports.iter().any(|p| p.running + p.waiting == 10 && p.waiting >= 8), "{reports:?}");
    assert_eq!(reports.last().map(|p| (p.running, p.waiting, p.settled)), Some((0, 0, 20)), "{reports:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_upstream_rematerializes_exactly_its_cone() {
    let project = Project::new(&[1, 2, 3]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    let store = scheduler.metastore();
    materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    let before: Vec<(String, ViewRecord)> =
        cone().into_iter().map(|view| (view.clone(), record(&store, &view))).collect();

    // Day 2 is delivered again: its done flag is written anew.
    project.redeliver(2, newest(&store, &cone()));
    let plan = scheduler.plan(SUMMARY).unwrap();
    let line = |view: &str| plan_line(&plan, view);
    assert_eq!(line(&in_(DAYS[1])), "transform: new external data");
    assert_eq!(line(&daily(DAYS[1])), format!("transform: dependency {} will be rematerialized", in_(DAYS[1])));
    assert_eq!(line(SUMMARY), format!("transform: dependency {} will be rematerialized", daily(DAYS[1])));
    assert_eq!(line(&daily(DAYS[0])), "up to date");

    let run = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    let cone_of_day_2 = [in_(DAYS[1]), daily(DAYS[1]), SUMMARY.to_string()];
    assert_eq!(run.flows, successful(&cone_of_day_2));
    assert_eq!((run.idle, run.termination), (4, Termination::Completed));
    for (view, old) in before {
        let new = record(&store, &view);
        if cone_of_day_2.contains(&view) {
            assert!(new.timestamp > old.timestamp, "{view} is newer: {old:?} -> {new:?}");
        } else {
            assert_eq!(new, old, "{view} is untouched");
        }
    }
    // And it settles: the next run transforms nothing.
    let again = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    assert_eq!((again.flows.len(), again.idle), (0, 7), "{again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_configuration_rematerializes_that_types_views() {
    let project = Project::new(&[1, 2, 3]);
    let first = project.catalog("v1");
    let (versions, newest_before) = {
        let mut scheduler = open(&first).await;
        let store = scheduler.metastore();
        materialize(&mut scheduler, SUMMARY, Mode::Default).await;
        let versions: Vec<Option<String>> = cone().iter().map(|view| record(&store, view).version_checksum).collect();
        (versions, newest(&store, &cone()))
        // The scheduler closes here: sled admits one opener of the metastore.
    };
    clock_past(newest_before);

    // Daily's configuration changed; its schema did not.
    let second = project.catalog("v2");
    let mut scheduler = open(&second).await;
    let store = scheduler.metastore();
    let plan = scheduler.plan(SUMMARY).unwrap();
    for (view, verdict) in &plan {
        let line = verdict.to_string();
        let expected = match view.split('/').take(2).collect::<Vec<_>>().join("/").as_str() {
            "t.mart/Daily" => "transform: version changed ",
            "t.mart/Summary" => "transform: dependency t.mart/Daily/",
            _ => "up to date",
        };
        assert!(line.starts_with(expected), "{view}: {line}");
    }

    let run = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    let rebuilt: Vec<String> = DAYS.iter().map(|day| daily(day)).chain([SUMMARY.to_string()]).collect();
    assert_eq!(run.flows, successful(&rebuilt));
    assert_eq!((run.idle, run.termination), (3, Termination::Completed));
    // Only Daily's version checksum changed: Summary was rebuilt for its
    // newer inputs, with its own version as it was.
    for (view, old) in cone().iter().zip(versions) {
        let new = record(&store, view).version_checksum;
        assert_eq!(new != old, view.starts_with("t.mart/Daily/"), "{view}: {old:?} -> {new:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalidated_view_is_rematerialized_with_what_depends_on_it() {
    let project = Project::new(&[1, 2, 3]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    let store = scheduler.metastore();
    materialize(&mut scheduler, SUMMARY, Mode::Default).await;

    let done = scheduler.invalidate(&daily(DAYS[1]), false, |_| false).unwrap();
    assert_eq!((done.invalidated, done.refused), (vec![daily(DAYS[1])], vec![]));
    let invalidated = record(&store, &daily(DAYS[1]));
    assert_eq!((invalidated.state, invalidated.invalidated), (ViewState::Invalidated, true));
    // Its data stays until it is rebuilt.
    assert!(project.data(&daily(DAYS[1])).join("_SUCCESS").exists());
    let plan = scheduler.plan(SUMMARY).unwrap();
    let transforming: Vec<(&str, String)> =
        plan.iter().filter(|(_, verdict)| verdict.transforms()).map(|(v, l)| (v.as_str(), l.to_string())).collect();
    let summary_line = format!("transform: dependency {} will be rematerialized", daily(DAYS[1]));
    assert_eq!(transforming, [(daily(DAYS[1]).as_str(), "transform: invalidated".into()), (SUMMARY, summary_line)]);

    clock_past(newest(&store, &cone()));
    let run = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    assert_eq!(run.flows, successful(&[daily(DAYS[1]).as_str(), SUMMARY]));
    assert_eq!(run.idle, 5);
    let rebuilt = record(&store, &daily(DAYS[1]));
    assert_eq!((rebuilt.state, rebuilt.invalidated), (ViewState::Materialized, false));

    // With its dependencies, a view and everything below it.
    let mut done = scheduler.invalidate(&daily(DAYS[0]), true, |_| false).unwrap();
    done.invalidated.sort();
    assert_eq!(done.invalidated, [daily(DAYS[0]), in_(DAYS[0])]);
    clock_past(newest(&store, &cone()));
    let run = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    let rebuilt = [in_(DAYS[0]), daily(DAYS[0]), SUMMARY.to_string()];
    assert_eq!(run.flows, successful(&rebuilt));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_transformation_terminates_with_error_and_flags_its_dependents() {
    let project = Project::new(&[1]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    let store = scheduler.metastore();
    let (broken, above) = ("t.bad/Broken/2015/01/01", "t.bad/Above/2015/01/01");

    let run = materialize(&mut scheduler, above, Mode::Default).await;
    assert_eq!(
        run.flows,
        expected(&[
            (above, FlowStatus::Successful),
            (broken, FlowStatus::TerminatedWithError),
            (&in_(DAYS[0]), FlowStatus::Successful),
        ])
    );
    assert_eq!(run.termination, Termination::CompletedWithFailures(1));
    // A panic is fatal: deterministic, so `retries = 1` does not apply and
    // it ran once; the run's record counts the attempts.
    let [(view, error)] = run.failures.as_slice() else { panic!("one failure: {:?}", run.failures) };
    assert_eq!(view, broken);
    assert!(error.contains("deliberate panic") && error.ends_with("gave up after 1 attempt"), "{error}");
    let retried =
        events(&store).iter().filter(|e| &*e.event.view == broken && e.event.current == ViewState::Retrying).count();
    assert_eq!(retried, 0);
    let recorded = store.run(&run.id).unwrap().expect("the run is recorded");
    assert_eq!(recorded.attempts.get(broken), Some(&1), "{:?}", recorded.attempts);
    assert_eq!(recorded.attempts.get(above), Some(&1), "{:?}", recorded.attempts);
    // Its dependent is built all the same, and says so.
    assert_eq!(run.with_errors, [above]);
    let failed = record(&store, broken);
    assert_eq!((failed.state, failed.last_error.as_deref()), (ViewState::Failed, Some(error.as_str())));
    assert!(!project.data(broken).exists(), "a failed transformation publishes nothing");
    let built = record(&store, above);
    assert_eq!((built.state, built.errors, built.incomplete), (ViewState::Materialized, true, false));

    // Failed is not sticky: the next request tries again; its dependent,
    // with nothing newer below it, stays as it is.
    let again = materialize(&mut scheduler, above, Mode::Default).await;
    assert_eq!(again.flows, expected(&[(broken, FlowStatus::TerminatedWithError)]));
    assert_eq!((again.idle, again.termination), (2, Termination::CompletedWithFailures(1)));
}

#[tokio::test(flavor = "multi_thread")]
async fn no_data_propagates_and_a_view_built_without_it_is_incomplete_until_it_comes() {
    // Day 3 has not been delivered.
    let project = Project::new(&[1, 2]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    let store = scheduler.metastore();

    let run = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    assert_eq!(run.termination, Termination::Completed);
    assert_eq!(run.incomplete, [SUMMARY]);
    for view in [in_(DAYS[2]), daily(DAYS[2])] {
        let record = record(&store, &view);
        assert_eq!((record.state, record.timestamp), (ViewState::NoData, None), "{view}");
        assert!(!project.data(&view).join("_SUCCESS").exists(), "{view}");
    }
    let summary = record(&store, SUMMARY);
    assert_eq!((summary.state, summary.incomplete), (ViewState::Materialized, true));
    let plan = scheduler.plan(SUMMARY).unwrap();
    let line = |view: &str| plan_line(&plan, view);
    // It names the file looked for.
    let flag = project.data(&in_(DAYS[2])).join("_SUCCESS");
    assert_eq!(line(&in_(DAYS[2])), format!("no data (no done flag at {})", flag.display()));
    assert_eq!(line(&daily(DAYS[2])), "no data (no dependency has data)");
    assert_eq!(line(SUMMARY), "up to date");

    // Still no data is nothing new.
    let unchanged = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    assert_eq!((unchanged.flows.len(), unchanged.idle), (0, 7), "{unchanged:?}");

    // The data comes: the view built without it is built again, complete.
    clock_past(newest(&store, &cone()));
    project.deliver(3);
    let run = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    let rebuilt = [in_(DAYS[2]), daily(DAYS[2]), SUMMARY.to_string()];
    assert_eq!(run.flows, successful(&rebuilt));
    assert!(run.incomplete.is_empty(), "{run:?}");
    assert!(!record(&store, SUMMARY).incomplete);
}

/// Issue 13, item 3: SET_ONLY gives the view a new transformation
/// timestamp (seed 000), so its dependents are rebuilt by the next run.
#[tokio::test(flavor = "multi_thread")]
async fn set_only_marks_views_materialized_with_a_new_timestamp_so_dependents_rebuild() {
    let project = Project::new(&[1, 2, 3]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    let store = scheduler.metastore();
    materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    let before = record(&store, &daily(DAYS[1]));
    clock_past(newest(&store, &cone()));

    let run = materialize(&mut scheduler, &daily(DAYS[1]), Mode::SetOnly).await;
    // Its input was not selected: EXCLUDED (seed 003).
    assert_eq!(run.flows, expected(&[(daily(DAYS[1]), FlowStatus::Successful), (in_(DAYS[1]), FlowStatus::Excluded)]));
    let marked = record(&store, &daily(DAYS[1]));
    assert_eq!(marked.state, ViewState::Materialized);
    assert!(marked.timestamp > before.timestamp, "{before:?} -> {marked:?}");
    assert_eq!(
        plan_line(&scheduler.plan(SUMMARY).unwrap(), SUMMARY),
        format!("transform: dependency {} is newer", daily(DAYS[1]))
    );
    let next = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
    assert_eq!(next.flows, successful(&[SUMMARY]), "{next:?}");
    assert_eq!(next.idle, 6);

    // One never materialized is marked so, without asking its dependencies
    // and without a transformation: it has no data.
    let fourth = daily("2015/01/04");
    let run = materialize(&mut scheduler, &fourth, Mode::SetOnly).await;
    let input = in_("2015/01/04");
    assert_eq!(
        run.flows,
        expected(&[(fourth.as_str(), FlowStatus::Successful), (input.as_str(), FlowStatus::Excluded)])
    );
    let marked = record(&store, &fourth);
    assert_eq!(marked.state, ViewState::Materialized);
    assert!(marked.timestamp.is_some());
    assert!(store.view(&in_("2015/01/04")).unwrap().is_none(), "its dependency was not asked");
    assert!(!project.data(&fourth).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_answers_during_a_run_queues_stops_and_shuts_down() {
    let project = Project::new(&[1, 2]);
    let catalog = project.catalog("v1");
    let scheduler = open(&catalog).await;
    let store = scheduler.metastore();
    let (service, handle) = Service::new(scheduler);
    let service = tokio::spawn(service.run());
    let (held, input) = ("t.gate/Held/2015/01/01", in_(DAYS[0]));

    let first = handle.materialize(held.into(), Mode::Default).await.unwrap();
    assert_eq!(first.queued_behind, 0);
    assert_eq!(first.views, [(held.to_string(), ViewState::Receive)]);
    logged(&store, held, ViewState::Transforming).await;

    // Requests are answered while the run waits on its transformation.
    let refused = handle.invalidate(held.into(), false).await.unwrap();
    assert!(refused.invalidated.is_empty());
    assert_eq!(refused.refused.len(), 1);
    assert_eq!(refused.refused[0].0, held);
    assert!(refused.refused[0].1.contains("transforming"), "{:?}", refused.refused);
    // Its input was settled by this run already, which took it as it is.
    let settled = handle.invalidate(input.clone(), false).await.unwrap();
    assert_eq!(settled.refused.iter().map(|(view, _)| view.as_str()).collect::<Vec<_>>(), [input.as_str()]);
    let plan = handle.plan(held.into()).await.unwrap();
    assert_eq!(plan.iter().map(|(view, _)| view.as_str()).collect::<Vec<_>>(), [input.as_str(), held]);

    // A second request waits behind the first; stopping it dequeues it.
    let second = handle.materialize("t.gate/Held/2015/01/02".into(), Mode::Default).await.unwrap();
    assert_eq!(second.queued_behind, 1);
    assert_eq!(handle.table.read().unwrap().queued_runs, std::slice::from_ref(&second.run));
    assert_eq!(handle.stop(second.run.clone()).await.unwrap(), Stopping::Dequeued);
    assert_eq!(finished(&store, &second.run).await.termination, Some(Termination::Dequeued));

    // Stopping the first cancels its transformation once it holds its permits.
    permits_held(&handle, held).await;
    assert_eq!(handle.stop(first.run.clone()).await.unwrap(), Stopping::Stopping);
    assert_eq!(finished(&store, &first.run).await.termination, Some(Termination::Stopped));
    let flows = store.flows(&first.run).unwrap();
    assert_eq!(flows, expected(&[(held, FlowStatus::Canceled), (&input, FlowStatus::Successful)]));
    assert_eq!(store.view(held).unwrap().map(|r| r.state).unwrap_or_default(), ViewState::Receive);
    assert!(!project.data(held).exists(), "a canceled transformation publishes nothing");

    // With the gate open, the next run completes.
    project.open_gate(1);
    let third = handle.materialize(held.into(), Mode::Default).await.unwrap();
    assert_eq!(finished(&store, &third.run).await.termination, Some(Termination::Completed));
    assert_eq!(store.flows(&third.run).unwrap(), [(held.to_string(), FlowStatus::Successful)]);
    assert!(project.data(held).join("_SUCCESS").exists());
    {
        let table = handle.table.read().unwrap();
        let row = table.views().iter().find(|row| &*row.url == held).expect("the table has the view");
        assert_eq!(row.state, ViewState::Materialized);
    }
    assert_eq!(handle.stop(third.run.clone()).await.unwrap(), Stopping::Finished(Termination::Completed));
    assert_eq!(handle.stop("no-such-run".into()).await.unwrap(), Stopping::Unknown);
    let unknown = handle.materialize("t.no/Such".into(), Mode::Default).await;
    assert!(matches!(unknown, Err(Error::Lattice(lattice::Error::UnknownViewType { .. }))), "{unknown:?}");

    handle.shutdown(Duration::ZERO);
    service.await.expect("the service task ends").expect("the service ends cleanly");
    let after = handle.materialize(held.into(), Mode::Default).await;
    assert!(matches!(after, Err(Error::Gone)), "a service that ended takes nothing: {after:?}");
}

/// Waits until `view`'s transformation holds its permits, as the service's
/// table shows. The table learns it when the loop takes the task's report,
/// which no commit announces, so this looks again after each yield: the
/// wait ends on the fact, never on a duration.
async fn permits_held(handle: &Handle, view: &str) {
    let holds = || handle.table.read().unwrap().running.values().any(|running| &*running.view == view);
    let wait = async {
        while !holds() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .unwrap_or_else(|_| panic!("{view}'s transformation never held its permits"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_s_request_queue_is_bounded_and_a_shutdown_still_gets_through() {
    use futures_util::FutureExt;
    use trellis::scheduler::service::REQUEST_QUEUE;
    let project = Project::new(&[1]);
    let catalog = project.catalog("v1");
    let (service, handle) = Service::new(open(&catalog).await);
    // The service is not running yet: each request, polled once, is queued
    // and waits (its answer is never awaited).
    for _ in 0..REQUEST_QUEUE {
        assert!(handle.plan(SUMMARY.into()).now_or_never().is_none(), "queued, not answered");
    }
    let refused = handle.instantiate(SUMMARY.into(), false).now_or_never().expect("answered at once");
    assert!(matches!(refused, Err(Error::Busy { queued: REQUEST_QUEUE })), "{refused:?}");
    assert_eq!(
        refused.unwrap_err().to_string(),
        format!("the scheduler has {REQUEST_QUEUE} requests waiting, its limit; try again in a moment")
    );
    // A full queue does not hold up a shutdown: it comes on its own channel.
    handle.shutdown(Duration::ZERO);
    let service = tokio::spawn(service.run());
    service.await.expect("the service task ends").expect("the service ends cleanly");
}

/// Every file below `dir`, relative to it, with its content.
fn files_below(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                found.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transformation_over_its_output_cap_fails_the_view_and_publishes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data/raw/2015/01/01");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("part.csv"), "x\n").unwrap();
    std::fs::write(input.join("_SUCCESS"), "").unwrap();
    // Out is made by `plugin`, with an output cap of 2 MiB of its own.
    let catalog = |plugin: &str| {
        let text = format!(
            r#"
[defaults]
retries = 3

[plugins]
concat = "{}"
filler = {{ file = "{}", deadline = "600s" }}

[[view]]
name = "o.raw/In"
time = {{ frequency = "1d", initial = "2015-01-01" }}
path = "raw/${{YEAR}}/${{MONTH}}/${{DAY}}"

[[view]]
name = "o.mart/Out"
time = {{ frequency = "1d", initial = "2015-01-01" }}
transformation = {{ plugin = "{plugin}", output_mib = 2 }}

[[view.dependency]]
view = "o.raw/In"
"#,
            plugin_path("concat").display(),
            plugin_path("hostile_disk_filler").display()
        );
        std::sync::Arc::new(trellis::catalog::parse(&text, dir.path()).unwrap())
    };
    let out = "o.mart/Out/2015/01/01";

    let mut scheduler = open(&catalog("concat")).await;
    let first = materialize(&mut scheduler, out, Mode::Default).await;
    assert!(first.failures.is_empty(), "{first:?}");
    let storage = dir.path().join("data");
    let before = files_below(&storage);
    assert!(before.iter().any(|(name, _)| name.starts_with("o/mart/Out/2015/01/01/")), "{before:?}");
    drop(scheduler);

    // Another plugin, another version: Out is transformed again, by one
    // that writes until it is stopped.
    let mut scheduler = open(&catalog("filler")).await;
    let store = scheduler.metastore();
    let second = materialize(&mut scheduler, out, Mode::Default).await;
    assert_eq!(second.flows, expected(&[(out, FlowStatus::TerminatedWithError)]));
    let [(view, error)] = second.failures.as_slice() else { panic!("one failure: {:?}", second.failures) };
    assert_eq!(view, out);
    assert!(error.starts_with("the output grew past its cap of 2.0 MiB ("), "{error}");
    assert!(error.contains("nothing was published (OutputTooLarge)"), "{error}");
    // Not retried: it would only fill the disk again.
    let retried =
        events(&store).iter().filter(|e| &*e.event.view == out && e.event.current == ViewState::Retrying).count();
    assert_eq!(retried, 0);
    assert_eq!(record(&store, out).state, ViewState::Failed);
    // The previous data as it was, and nothing else anywhere in the
    // storage: the staging directory is gone.
    assert_eq!(files_below(&storage), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_nobody_waits_for_any_more_is_dropped_unserved() {
    use futures_util::FutureExt;
    let project = Project::new(&[1]);
    let catalog = project.catalog("v1");
    let (service, handle) = Service::new(open(&catalog).await);
    // Queued, then given up on (as by a client that timed out).
    assert!(handle.instantiate(SUMMARY.into(), false).now_or_never().is_none());
    let service = tokio::spawn(service.run());
    // Requests are served in order: once this one is answered, the other was dropped.
    let ids = handle.instantiate(in_(DAYS[0]), false).await.unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(handle.table.read().unwrap().views().len(), 1, "the summary's seven views were instantiated");
    handle.shutdown(Duration::ZERO);
    service.await.expect("the service task ends").expect("the service ends cleanly");
}

/// Two kinds of external data, `f.raw/A` and `f.raw/B`, and `f.mart/C`
/// over a day of each: the smallest lattice where a view has external
/// inputs of its own that arrive apart.
struct Pair {
    dir: tempfile::TempDir,
}

const PAIR_C: &str = "f.mart/C/2015/01/01";

impl Pair {
    fn new() -> Pair {
        Pair { dir: tempfile::tempdir().expect("a temp dir") }
    }

    fn catalog(&self) -> std::sync::Arc<trellis::catalog::Catalog> {
        let trivial = plugin_path("trivial");
        let text = format!(
            r#"
[plugins]
trivial = "{}"

[[view]]
name = "f.raw/A"
time = {{ frequency = "1d", initial = "2015-01-01" }}
path = "a/${{YEAR}}/${{MONTH}}/${{DAY}}"

[[view]]
name = "f.raw/B"
time = {{ frequency = "1d", initial = "2015-01-01" }}
path = "b/${{YEAR}}/${{MONTH}}/${{DAY}}"

[[view]]
name = "f.mart/C"
time = {{ frequency = "1d", initial = "2015-01-01" }}
transformation = {{ plugin = "trivial" }}

[[view.dependency]]
view = "f.raw/A"

[[view.dependency]]
view = "f.raw/B"
"#,
            trivial.display()
        );
        std::sync::Arc::new(trellis::catalog::parse(&text, self.dir.path()).expect("the project is valid"))
    }

    fn flag(&self, kind: &str) -> std::path::PathBuf {
        self.dir.path().join("data").join(kind).join("2015/01/01/_SUCCESS")
    }

    /// Delivers a kind's flag as `cp -p` or `rsync -t` would: a new file
    /// that keeps its source's mtime, here noon of 2015-01-01, older than
    /// anything trellis records.
    fn deliver_old(&self, kind: &str) {
        let flag = self.flag(kind);
        std::fs::create_dir_all(flag.parent().unwrap()).unwrap();
        let copy = flag.with_extension("copy");
        std::fs::write(&copy, "").unwrap();
        let noon = std::time::UNIX_EPOCH + Duration::from_secs(1_420_113_600);
        std::fs::File::options().write(true).open(&copy).unwrap().set_modified(noon).unwrap();
        // A rename, as rsync does: the flag is another file, of the same mtime.
        std::fs::rename(&copy, &flag).unwrap();
    }
}

fn plan_line(plan: &[(String, Verdict)], view: &str) -> String {
    plan.iter()
        .find(|(v, _)| v == view)
        .map(|(_, verdict)| verdict.to_string())
        .unwrap_or_else(|| panic!("{view} in {plan:?}"))
}

/// Issue 13, item 1: late data delivered with an old mtime is new data. The
/// external view's timestamp is when trellis saw its flag (or saw it
/// change), so the view built without it is rebuilt; in an embedded run
/// and in a scheduler that remembers freshness between runs (a server's).
async fn late_data_with_an_old_mtime_rebuilds_its_dependents(remember: bool) {
    let (a, b) = ("f.raw/A/2015/01/01", "f.raw/B/2015/01/01");
    let pair = Pair::new();
    pair.deliver_old("a");
    let mut scheduler = open(&pair.catalog()).await;
    if remember {
        scheduler.remember_freshness();
    }
    let store = scheduler.metastore();

    let first = materialize(&mut scheduler, PAIR_C, Mode::Default).await;
    assert_eq!(
        first.flows,
        expected(&[(a, FlowStatus::Successful), (b, FlowStatus::Successful), (PAIR_C, FlowStatus::Successful)])
    );
    assert_eq!(first.incomplete, [PAIR_C]);
    assert_eq!(record(&store, b).state, ViewState::NoData);
    // A's timestamp is when trellis saw its flag, not the flag's 2015 mtime.
    let seen = record(&store, a);
    assert!(seen.timestamp > Some(1_420_113_600_000), "{seen:?}");
    assert!(matches!(seen.done_flag, Some(trellis::metastore::SeenFlag::Present { .. })), "{seen:?}");
    let built = record(&store, PAIR_C).timestamp.unwrap();

    // B arrives late, with the mtime it had at its source, older than C.
    pair.deliver_old("b");
    let plan = scheduler.plan(PAIR_C).unwrap();
    assert_eq!(plan_line(&plan, b), "transform: never materialized");
    assert_eq!(plan_line(&plan, PAIR_C), format!("transform: dependency {b} will be rematerialized"));
    let late = materialize(&mut scheduler, PAIR_C, Mode::Default).await;
    assert_eq!(late.flows, expected(&[(b, FlowStatus::Successful), (PAIR_C, FlowStatus::Successful)]), "{late:?}");
    assert!(late.incomplete.is_empty(), "{late:?}");
    assert!(record(&store, b).timestamp > Some(built));
    assert!(!record(&store, PAIR_C).incomplete);

    // (A scheduler that remembers freshness visits only what it must.)
    let unchanged = materialize(&mut scheduler, PAIR_C, Mode::Default).await;
    assert!(unchanged.flows.is_empty() && unchanged.idle >= 1, "{unchanged:?}");

    // Delivered again, as a new file with the very same old mtime.
    pair.deliver_old("b");
    let plan = scheduler.plan(PAIR_C).unwrap();
    assert_eq!(plan_line(&plan, b), "transform: new external data");
    let again = materialize(&mut scheduler, PAIR_C, Mode::Default).await;
    assert_eq!(again.flows, expected(&[(b, FlowStatus::Successful), (PAIR_C, FlowStatus::Successful)]), "{again:?}");
    // (A scheduler that remembers freshness visits only what it must.)
    let unchanged = materialize(&mut scheduler, PAIR_C, Mode::Default).await;
    assert!(unchanged.flows.is_empty() && unchanged.idle >= 1, "{unchanged:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn late_data_with_an_old_mtime_rebuilds_its_dependents_embedded() {
    late_data_with_an_old_mtime_rebuilds_its_dependents(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn late_data_with_an_old_mtime_rebuilds_its_dependents_in_a_long_lived_scheduler() {
    late_data_with_an_old_mtime_rebuilds_its_dependents(true).await;
}

/// Issue 13, item 4: the dry run (RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS)
/// still checks done flags: an external view without one is no-data, not
/// materialized, before and after it had data.
#[tokio::test(flavor = "multi_thread")]
async fn the_dry_run_checks_done_flags() {
    let (a, b) = ("f.raw/A/2015/01/01", "f.raw/B/2015/01/01");
    let pair = Pair::new();
    pair.deliver_old("a");
    let mut scheduler = open(&pair.catalog()).await;
    let store = scheduler.metastore();
    let dry = Mode::ResetTransformationChecksumsAndTimestamps;

    let run = materialize(&mut scheduler, PAIR_C, dry).await;
    assert_eq!(record(&store, a).state, ViewState::Materialized);
    assert_eq!(record(&store, b).state, ViewState::NoData, "{run:?}");
    let c = record(&store, PAIR_C);
    assert_eq!((c.state, c.incomplete), (ViewState::Materialized, true));
    let flag = format!("no data (no done flag at {})", pair.flag("b").display());
    assert_eq!(plan_line(&scheduler.plan(PAIR_C).unwrap(), b), flag);

    // A's flag is taken away: the dry run finds it gone.
    std::fs::remove_file(pair.flag("a")).unwrap();
    materialize(&mut scheduler, PAIR_C, dry).await;
    assert_eq!(record(&store, a).state, ViewState::NoData);
    assert_eq!(record(&store, PAIR_C).state, ViewState::NoData, "no dependency has data");
}

/// Issue 13, item 5: a materialized view whose published data directory
/// was deleted is not materialized: `plan` says so and `materialize`
/// rebuilds it, and so its dependents; embedded, and in a scheduler that
/// remembers freshness between runs (a server's), which must see it too.
async fn deleted_data_is_rebuilt(remember: bool) {
    let project = Project::new(&[1, 2, 3]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    if remember {
        scheduler.remember_freshness();
    }
    let store = scheduler.metastore();
    materialize(&mut scheduler, SUMMARY, Mode::Default).await;

    // Deleted right after the run that built it, and after a run that found
    // it up to date (when a memo holds it clean).
    for (day, other) in [(DAYS[1], DAYS[0]), (DAYS[0], DAYS[2])] {
        std::fs::remove_dir_all(project.data(&daily(day))).unwrap();
        let plan = scheduler.plan(SUMMARY).unwrap();
        assert_eq!(plan_line(&plan, &daily(day)), "transform: data gone");
        assert_eq!(plan_line(&plan, SUMMARY), format!("transform: dependency {} will be rematerialized", daily(day)));
        assert_eq!(plan_line(&plan, &daily(other)), "up to date");
        let run = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
        assert_eq!(run.flows, successful(&[daily(day).as_str(), SUMMARY]), "{day}: {run:?}");
        assert!(project.data(&daily(day)).join("_SUCCESS").exists(), "{day} rebuilt");
        assert_eq!(record(&store, &daily(day)).state, ViewState::Materialized);
        let again = materialize(&mut scheduler, SUMMARY, Mode::Default).await;
        assert!(again.flows.is_empty(), "{again:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn deleted_data_is_rebuilt_embedded() {
    deleted_data_is_rebuilt(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deleted_data_is_rebuilt_in_a_long_lived_scheduler() {
    deleted_data_is_rebuilt(true).await;
}

/// Daily price lists `l.raw/Prices` and `l.mart/Newest`, the concatenation
/// of `latest(0)` of them, under `evaluation_time` as given.
struct Prices {
    dir: tempfile::TempDir,
}

const NEWEST: &str = "l.mart/Newest";

impl Prices {
    fn catalog(&self, evaluation_time: &str) -> std::sync::Arc<trellis::catalog::Catalog> {
        let concat = plugin_path("concat");
        let text = format!(
            r#"
[project]
name = "prices"
evaluation_time = "{evaluation_time}"

[plugins]
concat = "{}"

[[view]]
name = "l.raw/Prices"
time = {{ frequency = "1d", initial = "2015-01-01" }}
path = "prices/${{YEAR}}-${{MONTH}}-${{DAY}}"

[[view]]
name = "l.mart/Newest"
transformation = {{ plugin = "concat" }}

[[view.dependency]]
view = "l.raw/Prices"
time = "latest(0)"
"#,
            concat.display()
        );
        std::sync::Arc::new(trellis::catalog::parse(&text, self.dir.path()).expect("the project is valid"))
    }

    fn day(&self, day: u32) -> std::path::PathBuf {
        self.dir.path().join(format!("data/prices/2015-01-{day:02}"))
    }

    /// A day's price list and its done flag.
    fn deliver(&self, day: u32) {
        std::fs::create_dir_all(self.day(day)).unwrap();
        std::fs::write(self.day(day).join("prices.txt"), format!("prices of day {day}\n")).unwrap();
        std::fs::write(self.day(day).join("_SUCCESS"), "").unwrap();
    }

    /// What Newest last published.
    fn newest(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("data/l/mart/Newest/part-00000")).expect("Newest has data")
    }
}

/// Issue 13, item 8: in a scheduler that lives across runs, `latest()` is
/// resolved again at every check (`evaluation_time = "present"`): a newer
/// instance arriving after the view entered the lattice is read by the
/// next run, and `latest()` moving back to an older instance (its flag
/// gone) is a change too, though no timestamp says so. The instance read
/// is recorded with the view.
async fn latest_follows_the_data(remember: bool) {
    let prices = Prices { dir: tempfile::tempdir().expect("a temp dir") };
    prices.deliver(1);
    let mut scheduler = open(&prices.catalog("present")).await;
    if remember {
        scheduler.remember_freshness();
    }
    let store = scheduler.metastore();
    let (day1, day2) = ("l.raw/Prices/2015/01/01", "l.raw/Prices/2015/01/02");
    let first = materialize(&mut scheduler, NEWEST, Mode::Default).await;
    assert_eq!(first.flows, successful(&[day1, NEWEST]), "{first:?}");
    assert_eq!(prices.newest(), "prices of day 1\n");
    assert_eq!(record(&store, NEWEST).latest, Some(vec![day1.to_string()]));
    let unchanged = materialize(&mut scheduler, NEWEST, Mode::Default).await;
    assert!(unchanged.flows.is_empty(), "{unchanged:?}");

    // A newer price list arrives after Newest was instantiated and built.
    prices.deliver(2);
    let plan = scheduler.plan(NEWEST).unwrap();
    assert_eq!(plan_line(&plan, NEWEST), format!("transform: dependency {day2} will be rematerialized"));
    let newer = materialize(&mut scheduler, NEWEST, Mode::Default).await;
    assert_eq!(newer.flows, successful(&[day2, NEWEST]), "{newer:?}");
    assert_eq!(prices.newest(), "prices of day 2\n", "Newest read the newer instance");
    assert_eq!(record(&store, NEWEST).latest, Some(vec![day2.to_string()]));
    let unchanged = materialize(&mut scheduler, NEWEST, Mode::Default).await;
    assert!(unchanged.flows.is_empty(), "{unchanged:?}");

    // Its flag is taken away: latest(0) is the first day again, older than
    // Newest; the instance recorded says it changed.
    std::fs::remove_file(prices.day(2).join("_SUCCESS")).unwrap();
    let plan = scheduler.plan(NEWEST).unwrap();
    assert_eq!(plan_line(&plan, NEWEST), format!("transform: latest() now resolves to {day1} (it read {day2})"));
    let back = materialize(&mut scheduler, NEWEST, Mode::Default).await;
    assert_eq!(back.flows, successful(&[NEWEST]), "{back:?}");
    assert_eq!(prices.newest(), "prices of day 1\n");
    assert_eq!(record(&store, NEWEST).latest, Some(vec![day1.to_string()]));
    let unchanged = materialize(&mut scheduler, NEWEST, Mode::Default).await;
    assert!(unchanged.flows.is_empty(), "{unchanged:?}");
    assert_eq!(plan_line(&scheduler.plan(NEWEST).unwrap(), NEWEST), "up to date");
}

#[tokio::test(flavor = "multi_thread")]
async fn latest_follows_the_data_across_runs() {
    latest_follows_the_data(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn latest_follows_the_data_in_a_long_lived_scheduler() {
    latest_follows_the_data(true).await;
}

/// Issue 39, item 8: a flow skipped because the run was stopped before it
/// started says so in its record, as one skipped for a failed dependency does.
#[tokio::test(flavor = "multi_thread")]
async fn a_flow_skipped_by_a_stop_says_why() {
    let project = Project::new(&[1, 2, 3]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    let store = scheduler.metastore();
    let held: Vec<String> = DAYS.iter().map(|day| format!("t.gate/Held/{day}")).collect();

    // All three are transforming: two hold the two permits and wait at
    // their gate, the third waits for a permit when the stop comes.
    let waiting = store.clone();
    let gated = held.clone();
    let stop = async move {
        crate::inprocess::committed(&waiting, "the three gated views transforming", |store| {
            let transforming = events(store)
                .iter()
                .filter(|e| gated.iter().any(|v| **v == *e.event.view) && e.event.current == ViewState::Transforming)
                .count();
            (transforming == 3).then_some(())
        })
        .await;
    };
    let run = scheduler
        .materialize_until("t.gate/Held/rymd(20150101-20150103)", Mode::Default, false, stop)
        .await
        .expect("the run ends");
    assert_eq!(run.termination, Termination::Stopped);
    let reason = "the run was stopped before it started".to_string();
    let flows = store.flow_records(&run.id).unwrap();
    let skipped: Vec<&String> =
        flows.iter().filter(|(_, flow)| flow.status == FlowStatus::Skipped).map(|(view, _)| view).collect();
    assert!(!skipped.is_empty(), "{flows:?}");
    for view in skipped {
        assert!(held.contains(view), "{view}");
        let record = &flows.iter().find(|(v, _)| v == view).unwrap().1;
        assert_eq!(record.reason.as_ref(), Some(&reason), "{flows:?}");
        assert!(run.reasons.contains(&(view.clone(), reason.clone())), "{:?}", run.reasons);
    }
}

/// The flow statuses one view went through in `run`, as the flow changes
/// its events carry (issue 39, item 6) tell them.
fn flow_events(store: &Metastore, run: &str, view: &str) -> Vec<FlowStatus> {
    events(store)
        .into_iter()
        .filter(|e| e.event.run_id.as_deref() == Some(run) && &*e.event.view == view)
        .filter_map(|e| e.event.flow.map(|flow| flow.status))
        .collect()
}

/// Issue 39, item 6: a flow's change of status is in the event log (seed
/// 003's flow progress log), on the view's event that made it, with its
/// reason.
#[tokio::test(flavor = "multi_thread")]
async fn flow_statuses_are_in_the_event_log() {
    let project = Project::new(&[1]);
    let catalog = project.catalog("v1");
    let mut scheduler = open(&catalog).await;
    let store = scheduler.metastore();
    let (broken, above) = ("t.bad/Broken/2015/01/01", "t.bad/Above/2015/01/01");

    let run = materialize(&mut scheduler, above, Mode::Default).await;
    use FlowStatus::*;
    assert_eq!(flow_events(&store, &run.id, above), [Queued, Starting, Successful]);
    assert_eq!(flow_events(&store, &run.id, broken), [Queued, Starting, TerminatedWithError]);
    let reason = events(&store)
        .into_iter()
        .filter(|e| &*e.event.view == above)
        .find_map(|e| e.event.flow.filter(|flow| flow.status == Successful))
        .and_then(|flow| flow.reason);
    assert_eq!(reason.as_deref(), Some("upstream failed: t.bad/Broken/2015/01/01"));

    // An unchanged view: queued, then idle.
    let again = materialize(&mut scheduler, &in_(DAYS[0]), Mode::Default).await;
    assert_eq!(flow_events(&store, &again.id, &in_(DAYS[0])), [Queued, Idle]);
}

/// On an object store a run's cost is counted in requests. An unchanged
/// run sees the flags of a month's days with one listing of the month, and
/// asks nothing of each view alone but a view alone in its prefix (here
/// the summary, one HEAD); a redelivered day is still seen, and rebuilds
/// exactly its cone.
#[tokio::test(flavor = "multi_thread")]
async fn on_an_object_store_an_unchanged_run_lists_each_shared_prefix_once_and_asks_no_view_alone() {
    let moto = crate::moto::moto();
    let bucket = moto.bucket(false);
    let client = moto.client(&bucket);
    let deliver = async |day: u32, body: &'static str| {
        let flag = object_store::path::Path::from(format!("data/raw/2015/01/{day:02}/_SUCCESS"));
        object_store::ObjectStoreExt::put(&*client, &flag, body.into()).await.unwrap();
    };
    crate::moto::credentials_in_process();
    for day in 1..=3 {
        deliver(day, "").await;
    }
    let project = Project::new(&[]);
    let catalog = project.catalog_on_s3("v1", "", &bucket);
    let mut scheduler = open(&catalog).await;
    let storage = scheduler.storage();
    let object = storage.as_object().expect("the project's root is in the bucket");
    let first = scheduler.materialize(SUMMARY, Mode::Default).await.unwrap();
    assert_eq!(first.count(FlowStatus::Successful), 7, "{first:?}");

    let before = object.requests();
    let unchanged = scheduler.materialize(SUMMARY, Mode::Default).await.unwrap();
    let sent = object.requests().since(&before);
    assert_eq!((unchanged.views(), unchanged.count(FlowStatus::Successful)), (7, 0), "{unchanged:?}");
    // In's three flags and Daily's three, a listing each; Summary's, a HEAD.
    assert_eq!((sent.list, sent.head, sent.total()), (2, 1, 3), "{sent}");

    // Seen by the listing as a different flag from the one recorded: HEADed, and rebuilt.
    deliver(2, "again").await;
    let rebuilt = scheduler.materialize(SUMMARY, Mode::Default).await.unwrap();
    assert_eq!(rebuilt.count(FlowStatus::Successful), 3, "In/02 seen again, Daily/02 and the summary: {rebuilt:?}");
}

/// A server's first run over views materialized before it started: its
/// watches HEAD each external flag once (what they start from), but the
/// materialized views, whose flags it reads to look for an unrecorded
/// publish and then to check their data is still there, are seen by a
/// listing of their month each time; then nothing is asked of them.
#[tokio::test(flavor = "multi_thread")]
async fn on_an_object_store_a_servers_first_run_lists_the_materialized_views_of_a_month_once() {
    let moto = crate::moto::moto();
    let bucket = moto.bucket(false);
    let client = moto.client(&bucket);
    crate::moto::credentials_in_process();
    for day in 1..=3 {
        let flag = object_store::path::Path::from(format!("data/raw/2015/01/{day:02}/_SUCCESS"));
        object_store::ObjectStoreExt::put(&*client, &flag, "".into()).await.unwrap();
    }
    let project = Project::new(&[]);
    let catalog = project.catalog_on_s3("v1", "", &bucket);
    let mut embedded = open(&catalog).await;
    let first = embedded.materialize(SUMMARY, Mode::Default).await.unwrap();
    assert_eq!(first.count(FlowStatus::Successful), 7, "{first:?}");
    drop(embedded);

    let mut server = open(&catalog).await;
    server.remember_freshness();
    let storage = server.storage();
    let object = storage.as_object().expect("the project's root is in the bucket");
    let before = object.requests();
    let unchanged = server.materialize(SUMMARY, Mode::Default).await.unwrap();
    let sent = object.requests().since(&before);
    assert_eq!((unchanged.views(), unchanged.count(FlowStatus::Successful)), (7, 0), "{unchanged:?}");
    // Loading the records, an unrecorded publish is looked for (a kill
    // between a publish and its commit): Daily's three flags by a listing,
    // the Summary's by a HEAD. The run: In's three flags, a listing for
    // those absent (none here) and a HEAD each for those there (the
    // watches start from them), Daily's a listing, the Summary's a HEAD.
    assert_eq!((sent.list, sent.head, sent.total()), (3, 5, 8), "{sent}");

    // Then only the view asked for is looked at (a HEAD); the clean views
    // below it cost nothing.
    let before = object.requests();
    server.materialize(SUMMARY, Mode::Default).await.unwrap();
    let sent = object.requests().since(&before);
    assert_eq!((sent.head, sent.total()), (1, 1), "{sent}");
}
