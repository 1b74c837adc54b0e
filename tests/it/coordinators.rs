//! Coordinators in a long-lived service, in process: a real sled
//! metastore, real plugins, real inotify on real directories, and a manual
//! clock that the tests move instead of sleeping. Each test waits on the
//! metastore's commits for the action states it expects.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use trellis::catalog::Catalog;
use trellis::clock::{Clock, parse_time};
use trellis::metastore::{ActionRecord, Metastore};
use trellis::model::{ActionState, Termination};
use trellis::scheduler::{CoordinatorAnswer, CoordinatorOperation, CoordinatorStatus, Handle, Service};

use crate::inprocess::{Project, committed, events, finished, open};

fn time(text: &str) -> DateTime<Utc> {
    parse_time(text).unwrap()
}

fn millis(text: &str) -> i64 {
    time(text).timestamp_millis()
}

/// A daily coordinator over `views` from 2015-01-01T06:00Z, with `more` fields.
fn coordinator(name: &str, views: &str, more: &str) -> String {
    format!(
        "[[coordinator]]\nname = \"{name}\"\nviews = \"{views}\"\nstart = \"2015-01-01T06:00:00Z\"\nfrequency = \"1d\"\n{more}\n"
    )
}

const DAILY: &str = "t.mart/Daily/${YEAR}/${MONTH}/${DAY}";
const HELD: &str = "t.gate/Held/${YEAR}/${MONTH}/${DAY}";

struct Running {
    handle: Handle,
    store: Arc<Metastore>,
    service: tokio::task::JoinHandle<Result<(), trellis::scheduler::Error>>,
}

async fn serve(catalog: &Arc<Catalog>, clock: &Clock) -> Running {
    let scheduler = open(catalog).await;
    let store = scheduler.metastore();
    let (service, handle) = Service::with_clock(scheduler, clock.clone());
    Running { handle, store, service: tokio::spawn(service.run()) }
}

impl Running {
    async fn stop(self) {
        self.handle.shutdown(Duration::ZERO);
        self.service.await.expect("the service task ends").expect("the service ends cleanly");
    }

    async fn statuses(&self) -> Vec<CoordinatorStatus> {
        match self.handle.coordinators(CoordinatorOperation::Statuses).await.unwrap() {
            CoordinatorAnswer::Statuses(statuses) => statuses,
            other => panic!("statuses answered with {other:?}"),
        }
    }

    async fn actions(&self, name: &str) -> Vec<ActionRecord> {
        let operation = CoordinatorOperation::Actions { name: name.into(), state: None };
        match self.handle.coordinators(operation).await.unwrap() {
            CoordinatorAnswer::Actions(actions) => actions,
            other => panic!("actions answered with {other:?}"),
        }
    }
}

/// Waits until the action of `coordinator` at `nominal` is committed in `state`.
async fn action_in(store: &Metastore, coordinator: &str, nominal: &str, state: ActionState) -> ActionRecord {
    let at = millis(nominal);
    committed(store, &format!("{coordinator}@{nominal} to be {state}"), |store| {
        store.action(coordinator, at).expect("the metastore reads").filter(|action| action.state == state)
    })
    .await
}

/// The states an action went through, from the event log.
fn history(store: &Metastore, coordinator: &str, nominal: &str) -> Vec<ActionState> {
    let at = millis(nominal);
    events(store)
        .into_iter()
        .filter_map(|e| e.event.action.filter(|a| a.coordinator == coordinator && a.nominal == at))
        .map(|change| change.current)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn actions_wait_for_their_inputs_and_run_when_the_flag_appears() {
    let project = Project::new(&[1]);
    let catalog = project.catalog_with("v1", &coordinator("daily", DAILY, ""));
    let clock = Clock::manual(time("2015-01-02T07:00:00Z"));
    let server = serve(&catalog, &clock).await;

    // Jan 1 has its input: it runs at once. Jan 2 waits for its input.
    let first = action_in(&server.store, "daily", "2015-01-01T06:00:00Z", ActionState::Succeeded).await;
    let second = action_in(&server.store, "daily", "2015-01-02T06:00:00Z", ActionState::Waiting).await;
    assert_eq!(second.missing, ["t.raw/In/2015/01/02"]);
    assert_eq!(second.actual, millis("2015-01-02T07:00:00Z"));
    assert_eq!(second.views, "t.mart/Daily/2015/01/02");
    // An action's run is an ordinary run, linked both ways.
    let run = first.run.clone().expect("a succeeded action has its run");
    let record = finished(&server.store, &run).await;
    assert_eq!(record.action, Some(("daily".to_string(), millis("2015-01-01T06:00:00Z"))));
    assert_eq!(record.termination, Some(Termination::Completed));
    assert!(project.data("t.mart/Daily/2015/01/01").join("_SUCCESS").exists());

    // The flag appears: inotify wakes the service, without the clock moving.
    project.deliver(2);
    action_in(&server.store, "daily", "2015-01-02T06:00:00Z", ActionState::Succeeded).await;
    assert_eq!(
        history(&server.store, "daily", "2015-01-02T06:00:00Z"),
        [
            ActionState::Waiting,
            ActionState::Ready,
            ActionState::Submitted,
            ActionState::Running,
            ActionState::Succeeded
        ]
    );
    assert!(project.data("t.mart/Daily/2015/01/02").join("_SUCCESS").exists());

    // The clock moves: the next day's action is created, and waits.
    clock.set(time("2015-01-03T06:30:00Z"));
    action_in(&server.store, "daily", "2015-01-03T06:00:00Z", ActionState::Waiting).await;
    let statuses = server.statuses().await;
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].next_nominal, Some(time("2015-01-04T06:00:00Z")));
    assert_eq!(statuses[0].counts.get(&ActionState::Succeeded), Some(&2));
    assert_eq!(statuses[0].counts.get(&ActionState::Waiting), Some(&1));
    server.stop().await;
}

/// On an object store there is nothing to wait on: the server polls the
/// awaited flags (`poll_interval`, here 100ms), and a flag put by a
/// producer wakes its action at the next poll.
#[tokio::test(flavor = "multi_thread")]
async fn on_an_object_store_a_waiting_action_runs_when_a_poll_sees_its_flag() {
    let moto = crate::moto::moto();
    let bucket = moto.bucket(false);
    let client = moto.client(&bucket);
    // Inside the test's runtime: the client's requests are awaited here.
    let deliver = async |day: u32| {
        let flag = object_store::path::Path::from(format!("data/raw/2015/01/{day:02}/_SUCCESS"));
        object_store::ObjectStoreExt::put(&*client, &flag, "".into()).await.unwrap();
    };
    crate::moto::credentials_in_process();
    deliver(1).await;
    let project = Project::new(&[]);
    let catalog = project.catalog_on_s3("v1", &coordinator("daily", DAILY, ""), &bucket);
    let clock = Clock::manual(time("2015-01-02T07:00:00Z"));
    let server = serve(&catalog, &clock).await;
    action_in(&server.store, "daily", "2015-01-01T06:00:00Z", ActionState::Succeeded).await;
    let waiting = action_in(&server.store, "daily", "2015-01-02T06:00:00Z", ActionState::Waiting).await;
    assert_eq!(waiting.missing, ["t.raw/In/2015/01/02"]);
    deliver(2).await;
    action_in(&server.store, "daily", "2015-01-02T06:00:00Z", ActionState::Succeeded).await;
    let published = object_store::path::Path::from("data/t/mart/Daily/2015/01/02/_CURRENT");
    assert!(object_store::ObjectStoreExt::head(&*client, &published).await.is_ok(), "published through its pointer");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_action_times_out_when_its_inputs_do_not_arrive_in_time() {
    let project = Project::new(&[]);
    let catalog = project.catalog_with("v1", &coordinator("daily", DAILY, "timeout = \"1h\""));
    let clock = Clock::manual(time("2015-01-01T06:10:00Z"));
    let server = serve(&catalog, &clock).await;
    action_in(&server.store, "daily", "2015-01-01T06:00:00Z", ActionState::Waiting).await;
    // An hour after its actual time (06:10), not its nominal time (06:00).
    clock.set(time("2015-01-01T07:05:00Z"));
    assert_eq!(server.actions("daily").await[0].state, ActionState::Waiting);
    clock.set(time("2015-01-01T07:10:00Z"));
    let timed_out = action_in(&server.store, "daily", "2015-01-01T06:00:00Z", ActionState::Timedout).await;
    assert!(timed_out.reason.is_some_and(|r| r.contains("timeout")));
    // Its input arriving later changes nothing: TIMEDOUT is final.
    project.deliver(1);
    assert_eq!(server.actions("daily").await[0].state, ActionState::Timedout);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrency_caps_the_actions_running_at_once() {
    let project = Project::new(&[1, 2]);
    let catalog = project.catalog_with("v1", &coordinator("held", HELD, "concurrency = 1"));
    let clock = Clock::manual(time("2015-01-02T07:00:00Z"));
    let server = serve(&catalog, &clock).await;

    // Jan 1 runs (its transformation waits for its gate); Jan 2 is READY
    // behind it, not submitted.
    action_in(&server.store, "held", "2015-01-01T06:00:00Z", ActionState::Running).await;
    action_in(&server.store, "held", "2015-01-02T06:00:00Z", ActionState::Ready).await;
    let counts = server.statuses().await[0].counts.clone();
    assert_eq!(counts.get(&ActionState::Running), Some(&1));
    assert_eq!(counts.get(&ActionState::Ready), Some(&1));
    assert_eq!(counts.get(&ActionState::Submitted), None);

    project.open_gate(1);
    action_in(&server.store, "held", "2015-01-01T06:00:00Z", ActionState::Succeeded).await;
    action_in(&server.store, "held", "2015-01-02T06:00:00Z", ActionState::Running).await;
    project.open_gate(2);
    action_in(&server.store, "held", "2015-01-02T06:00:00Z", ActionState::Succeeded).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_service_catches_up_on_the_actions_it_missed() {
    let project = Project::new(&[1, 2, 3, 4]);
    let catalog = project.catalog_with("v1", &coordinator("daily", DAILY, ""));
    let clock = Clock::manual(time("2015-01-01T07:00:00Z"));
    let server = serve(&catalog, &clock).await;
    action_in(&server.store, "daily", "2015-01-01T06:00:00Z", ActionState::Succeeded).await;
    server.stop().await;

    // Down for three days: on start it creates and runs what it missed.
    clock.set(time("2015-01-04T07:00:00Z"));
    let server = serve(&catalog, &clock).await;
    for day in ["2015-01-02", "2015-01-03", "2015-01-04"] {
        let action = action_in(&server.store, "daily", &format!("{day}T06:00:00Z"), ActionState::Succeeded).await;
        assert_eq!(action.actual, millis("2015-01-04T07:00:00Z"), "{day} was created on start");
    }
    let actions = server.actions("daily").await;
    assert_eq!(actions.len(), 4, "one action per nominal time, none twice: {actions:?}");
    let runs: std::collections::HashSet<_> = actions.iter().map(|a| a.run.clone().unwrap()).collect();
    assert_eq!(runs.len(), 4);
    assert_eq!(server.statuses().await[0].last_nominal, Some(time("2015-01-04T06:00:00Z")));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_suspended_coordinator_creates_nothing_until_resumed() {
    let project = Project::new(&[1, 2]);
    let catalog = project.catalog_with("v1", &coordinator("daily", DAILY, ""));
    let clock = Clock::manual(time("2015-01-01T07:00:00Z"));
    let server = serve(&catalog, &clock).await;
    action_in(&server.store, "daily", "2015-01-01T06:00:00Z", ActionState::Succeeded).await;

    server.handle.coordinators(CoordinatorOperation::Suspend { name: "daily".into() }).await.unwrap();
    clock.set(time("2015-01-02T07:00:00Z"));
    // (Every answer is as of now: the clock's move is applied first.)
    let statuses = server.statuses().await;
    assert!(statuses[0].suspended);
    assert_eq!(server.actions("daily").await.len(), 1);

    server.handle.coordinators(CoordinatorOperation::Resume { name: "daily".into() }).await.unwrap();
    action_in(&server.store, "daily", "2015-01-02T06:00:00Z", ActionState::Succeeded).await;

    // An unknown coordinator is an error that names the known ones.
    let unknown = server.handle.coordinators(CoordinatorOperation::Suspend { name: "weekly".into() }).await;
    let message = unknown.unwrap_err().to_string();
    assert!(message.contains("no coordinator `weekly`") && message.contains("daily"), "{message}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_ends_open_actions_and_rerun_runs_final_ones_again() {
    let project = Project::new(&[1]);
    let catalog = project.catalog_with("v1", &coordinator("daily", DAILY, ""));
    let clock = Clock::manual(time("2015-01-02T07:00:00Z"));
    let server = serve(&catalog, &clock).await;
    let first = action_in(&server.store, "daily", "2015-01-01T06:00:00Z", ActionState::Succeeded).await;
    action_in(&server.store, "daily", "2015-01-02T06:00:00Z", ActionState::Waiting).await;

    let kill = CoordinatorOperation::Kill { name: "daily".into(), from: None, to: None };
    let CoordinatorAnswer::Actions(killed) = server.handle.coordinators(kill).await.unwrap() else { panic!() };
    assert_eq!(killed.iter().map(|a| a.nominal).collect::<Vec<_>>(), [millis("2015-01-02T06:00:00Z")]);
    action_in(&server.store, "daily", "2015-01-02T06:00:00Z", ActionState::Killed).await;

    // A rerun rebuilds Jan 1 under a new run; the old one is kept.
    let rerun = CoordinatorOperation::Rerun {
        name: "daily".into(),
        from: Some(time("2015-01-01")),
        to: Some(time("2015-01-01T23:00:00Z")),
    };
    let CoordinatorAnswer::Actions(again) = server.handle.coordinators(rerun).await.unwrap() else { panic!() };
    assert_eq!(again.len(), 1);
    let rerun = committed(&server.store, "Jan 1 to succeed again", |store| {
        let action = store.action("daily", millis("2015-01-01T06:00:00Z")).unwrap()?;
        (action.state == ActionState::Succeeded && action.run != first.run).then_some(action)
    })
    .await;
    assert_eq!(rerun.previous_runs, [first.run.clone().unwrap()]);
    let run = finished(&server.store, rerun.run.as_ref().unwrap()).await;
    assert!(run.full_refresh, "a rerun rebuilds its views: {run:?}");
    server.stop().await;
}
