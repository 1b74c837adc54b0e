//! What a served scheduler does, in process: the scheduler `trellis serve`
//! holds (open between runs, remembering freshness), without a server's
//! process and HTTP, which these rules do not need: what a run visits and
//! skips, which instance `latest()` reads, and the flows it records while it
//! runs. `server.rs` keeps what only a real server proves.

use std::sync::Arc;

use trellis::catalog::Catalog;
use trellis::model::{FlowStatus, Termination, ViewState};
use trellis::scheduler::{Mode, RunSummary, Scheduler};

use crate::inprocess::{committed, events, open};
use crate::support::{Daily, demo, gated_project, open_gates};

const MONTH: &str = "shop.datamart/MonthlyTotal/2015/05";

/// A scheduler on the project in `dir`, remembering freshness between runs
/// as a server's does.
async fn served(dir: &std::path::Path) -> Scheduler {
    let catalog: Arc<Catalog> =
        Arc::new(trellis::catalog::load(dir).unwrap_or_else(|e| panic!("the project loads: {e}")));
    let mut scheduler = open(&catalog).await;
    scheduler.remember_freshness();
    scheduler
}

async fn materialize(scheduler: &mut Scheduler, pattern: &str) -> RunSummary {
    scheduler.materialize(pattern, Mode::Default).await.unwrap_or_else(|e| panic!("materialize {pattern}: {e}"))
}

/// Flows where every view of `views` was transformed successfully, sorted
/// as a summary lists them.
fn successful<S: AsRef<str>>(views: &[S]) -> Vec<(String, FlowStatus)> {
    let mut flows: Vec<(String, FlowStatus)> =
        views.iter().map(|view| (view.as_ref().to_string(), FlowStatus::Successful)).collect();
    flows.sort();
    flows
}

#[tokio::test(flavor = "multi_thread")]
async fn after_one_full_check_a_run_visits_only_what_may_have_changed() {
    let dir = tempfile::tempdir().unwrap();
    let project = demo(dir.path());
    let mut scheduler = served(&project).await;

    // The first run checks all 190 views; the next one only the view asked for.
    let first = materialize(&mut scheduler, MONTH).await;
    assert_eq!((first.flows.len(), first.idle), (0, 190), "{first:?}");
    let unchanged = materialize(&mut scheduler, MONTH).await;
    assert_eq!((unchanged.flows.len(), unchanged.idle), (0, 1), "{unchanged:?}");

    let cone = |shop: &str, day: &str| {
        successful(&[
            &format!("shop.raw/Orders/{shop}/2015/05/{day}"),
            &format!("shop.datamart/DailySales/{shop}/2015/05/{day}"),
            &format!("shop.datamart/MonthlySales/{shop}/2015/05"),
            MONTH,
        ])
    };
    let raw = scheduler.instantiate("shop.raw/Orders/SHOP10/2015/05/03").unwrap();
    let raw_dir = scheduler.lattice().data_path(raw[0]);
    assert!(raw_dir.join("_SUCCESS").exists(), "{}", raw_dir.display());

    // New data for one day: exactly its cone, and nothing else is visited.
    std::fs::write(raw_dir.join("_SUCCESS"), "").unwrap();
    let redelivered = materialize(&mut scheduler, MONTH).await;
    assert_eq!(redelivered.flows, cone("SHOP10", "03"), "{redelivered:?}");
    assert_eq!(redelivered.idle, 0, "{redelivered:?}");

    // The day's directory replaced as a whole (a watched directory gone).
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(&raw_dir).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    std::fs::remove_dir_all(&raw_dir).unwrap();
    std::fs::rename(&copy, &raw_dir).unwrap();
    let replaced = materialize(&mut scheduler, MONTH).await;
    assert_eq!(replaced.flows, cone("SHOP10", "03"), "{replaced:?}");
    let unchanged = materialize(&mut scheduler, MONTH).await;
    assert_eq!((unchanged.flows.len(), unchanged.idle), (0, 1), "{unchanged:?}");

    // An invalidation: that view and what depends on it.
    let invalidation = scheduler.invalidate("shop.datamart/DailySales/SHOP10/2015/05/03", false, |_| false).unwrap();
    assert!(invalidation.refused.is_empty(), "{:?}", invalidation.refused);
    let invalidated = materialize(&mut scheduler, MONTH).await;
    let mut expected = cone("SHOP10", "03");
    expected.retain(|(view, _)| !view.starts_with("shop.raw/"));
    assert_eq!(invalidated.flows, expected, "{invalidated:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_run_skips_is_never_outdated() {
    // A chain: each day's `Out` depends on that day's input and on the day before.
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("chain");
    Daily::new("c", "trivial", 3).chained().write(&project);
    let mut scheduler = served(&project).await;
    let days = "c.mart/Out/rymd(20150101-20150103)";
    let out = |day: &str| format!("c.mart/Out/2015/01/{day}");
    let first = materialize(&mut scheduler, days).await;
    assert_eq!(first.termination, Termination::Completed, "{first:?}");
    let unchanged = materialize(&mut scheduler, days).await;
    assert_eq!(unchanged.flows, vec![], "{unchanged:?}");

    // Day 1 rebuilt alone: day 2, which depends on it, is outdated, and
    // must be rebuilt when asked together with day 1 (which this run has
    // in flight while day 2 asks for it).
    std::fs::write(project.join("data/raw/2015/01/01/_SUCCESS"), "").unwrap();
    let alone = materialize(&mut scheduler, &out("01")).await;
    assert_eq!(alone.flows, successful(&[out("01"), "c.raw/In/2015/01/01".into()]), "{alone:?}");
    let together = materialize(&mut scheduler, "c.mart/Out/rymd(20150101-20150102)").await;
    assert_eq!(together.flows, successful(&[out("02")]), "{together:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_view_whose_run_was_stopped_is_not_taken_as_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    let project = gated_project(dir.path(), 2);
    open_gates(&project);
    let mut scheduler = served(&project).await;
    let store = scheduler.metastore();
    let day = "g.mart/Out/2015/01/01";
    let first = materialize(&mut scheduler, day).await;
    assert_eq!(first.termination, Termination::Completed, "{first:?}");

    // New input; the transformation is held, and the run stopped once the
    // view is being transformed.
    std::fs::remove_file(project.join("data/raw/2015/01/01/GO")).unwrap();
    std::fs::write(project.join("data/raw/2015/01/01/_SUCCESS"), "").unwrap();
    // The first run logged it transforming too: the stop waits for this run's.
    let before = events(&store).len();
    let transforming = async {
        committed(&store, "the view transforming again", |store| {
            events(store)
                .into_iter()
                .skip(before)
                .find(|e| &*e.event.view == day && e.event.current == ViewState::Transforming)
        })
        .await;
    };
    let stopped = scheduler.materialize_until(day, Mode::Default, false, transforming).await.unwrap();
    assert_eq!(stopped.termination, Termination::Stopped, "{stopped:?}");

    // Still outdated: the next run transforms it.
    open_gates(&project);
    let next = materialize(&mut scheduler, day).await;
    assert_eq!(next.flows, successful(&[day]), "{next:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_s_flows_are_recorded_as_its_views_settle_not_only_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let project = gated_project(dir.path(), 2);
    let mut scheduler = served(&project).await;
    let store = scheduler.metastore();
    let (announce, announced) = tokio::sync::oneshot::channel();
    let mut announce = Some(announce);
    scheduler.on_run_started(move |id| {
        if let Some(announce) = announce.take() {
            let _ = announce.send(id.to_string());
        }
    });
    let out = |day: u32, status: FlowStatus| (format!("g.mart/Out/2015/01/{day:02}"), status);
    let input = |day: u32| (format!("g.raw/In/2015/01/{day:02}"), FlowStatus::Successful);
    let flows = |store: &trellis::metastore::Metastore, id: &str| {
        let mut flows = store.flows(id).expect("the metastore reads");
        flows.sort();
        flows
    };

    let run = scheduler.materialize("g.mart/Out/rymd(20150101-20150102)", Mode::Default);
    let watch = async {
        let id = announced.await.expect("the run is announced");
        // One day's transformation let through, the other still held: the
        // run is running, and the flows of what has settled are recorded
        // (the other's live status is the API's, from the scheduler's
        // table: `api.rs`).
        std::fs::write(project.join("data/raw/2015/01/01/GO"), "").unwrap();
        let expected = vec![out(1, FlowStatus::Successful), input(1), input(2)];
        committed(&store, "the settled flows while the run runs", |store| {
            (flows(store, &id) == expected).then_some(())
        })
        .await;
        let record = store.run(&id).unwrap().expect("the run is recorded");
        assert_eq!(record.termination, None, "the run still runs: {record:?}");
        std::fs::write(project.join("data/raw/2015/01/02/GO"), "").unwrap();
        id
    };
    let (summary, id) = tokio::join!(run, watch);
    let summary = summary.unwrap();
    assert_eq!(summary.id, id);
    let expected = vec![out(1, FlowStatus::Successful), out(2, FlowStatus::Successful), input(1), input(2)];
    assert_eq!(flows(&store, &id), expected, "{summary:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_served_scheduler_reads_the_newest_instance_of_latest() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    let newest = r#"
[[view]]
name = "l.mart/Newest"
transformation = { plugin = "concat" }

[[view.dependency]]
view = "l.raw/In"
time = "latest(0)"
"#;
    Daily::new("l", "concat", 1).part("day 1\n").tail(newest).write(&project);
    let mut scheduler = served(&project).await;
    let output = project.join("data/l/mart/Newest/part-00000");
    let expected = |day: &str| successful(&[format!("l.raw/In/2015/01/{day}"), "l.mart/Newest".to_string()]);

    let first = materialize(&mut scheduler, "l.mart/Newest").await;
    assert_eq!(first.flows, expected("01"), "{first:?}");
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "day 1\n");

    // The next day's data arrives while the scheduler stays open.
    let day2 = project.join("data/raw/2015/01/02");
    std::fs::create_dir_all(&day2).unwrap();
    std::fs::write(day2.join("part.csv"), "day 2\n").unwrap();
    std::fs::write(day2.join("_SUCCESS"), "").unwrap();
    let newer = materialize(&mut scheduler, "l.mart/Newest").await;
    assert_eq!(newer.flows, expected("02"), "{newer:?}");
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "day 2\n", "the newer instance is read");
    let unchanged = materialize(&mut scheduler, "l.mart/Newest").await;
    assert!(unchanged.flows.is_empty(), "{unchanged:?}");
}
