//! Listeners as supervised plugins on the event log, end to end: a real
//! `trellis materialize` with the `hostile_listener` fixture, whose record
//! file says exactly what each instance received. Each test derives the
//! expected deliveries from the event log itself, by the rules of seed 000.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use trellis::metastore::Metastore;

use crate::support::{Daily, eventually_blocking, run, run_within, trellis};

/// Days of external input; each feeds one output view.
pub(crate) const DAYS: usize = 4;

/// The output views of the first `days` days.
pub(crate) fn pattern(days: usize) -> String {
    format!("l.mart/Out/rymd(20150101-201501{days:02})")
}

/// A small project with the given `[[listener]]` blocks, the fixture
/// among its plugins, and one that is not there.
fn project(dir: &Path, days: usize, listeners: &str) {
    let plugins = r#"fixture = { file = "plugins/hostile_listener.wasm", deadline = "5s" }
stats = "plugins/stats_listener.wasm"
missing = "plugins/not-there.wasm"
"#;
    Daily::new("l", "concat", days)
        .concurrency(1)
        .part("x\n")
        .plugins(&["hostile_listener", "stats_listener"], plugins)
        .tail(&format!("\n[events]\ndrain = \"60s\"\n{listeners}"))
        .write(dir);
}

pub(crate) fn listener(name: &str, config: &str, extra: &str) -> String {
    format!(
        "\n[[listener]]\nname = \"{name}\"\nplugin = \"fixture\"\nconfig = {{ {config} }}\nbackoff = \"1ms\"\n{extra}\n"
    )
}

fn materialize(dir: &Path) -> crate::support::Run {
    let days = std::fs::read_dir(dir.join("data/raw/2015/01")).unwrap().count();
    let result = run_within(
        trellis().args(["materialize", "-p"]).arg(dir).args(["-v", &pattern(days)]),
        Duration::from_secs(300),
    );
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    result
}

/// What an instance of the fixture received, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Received {
    Start,
    Event(u64),
    Gap(u64, u64),
}

fn received(dir: &Path, name: &str) -> Vec<Received> {
    let path = dir.join(".trellis/listeners").join(name).join("received.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            if value.get("start").is_some() {
                Received::Start
            } else if let Some(gap) = value.get("gap") {
                Received::Gap(gap[0].as_u64().unwrap(), gap[1].as_u64().unwrap())
            } else {
                Received::Event(value["sequence"].as_u64().unwrap())
            }
        })
        .collect()
}

/// The event log as it is now: (sequence, view).
fn log(dir: &Path) -> Vec<(u64, String)> {
    let store = Metastore::open(&dir.join(".trellis/metastore")).unwrap();
    store.events_from(0, usize::MAX).unwrap().into_iter().map(|e| (e.sequence, e.event.view.to_string())).collect()
}

fn status(dir: &Path, name: &str) -> serde_json::Value {
    let result = run(trellis().args(["listeners", "--json", "-p"]).arg(dir));
    assert_eq!(result.code, 0, "{}", result.stderr);
    let all: Vec<serde_json::Value> = serde_json::from_str(&result.stdout).unwrap();
    all.into_iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no listener {name}: {}", result.stdout))
}

/// The latest event of every view up to `upto`, in log order.
fn latest_per_view(log: &[(u64, String)], upto: u64) -> Vec<Received> {
    let mut latest: HashMap<&str, u64> = HashMap::new();
    for (sequence, view) in log.iter().filter(|(s, _)| *s <= upto) {
        latest.insert(view, *sequence);
    }
    let sequences: BTreeSet<u64> = latest.into_values().collect();
    sequences.into_iter().map(Received::Event).collect()
}

/// How the fixture's failures on every k-th event are handled.
enum Failing {
    /// Fatal, trap or timeout: restarted, the event dropped.
    Dropped,
    /// Retryable: restarted, then sent the latest event of every view so
    /// far (the failed one among them); the fixture fails each event once.
    Retryable,
}

/// Seed 000's rules applied to the log: what one instance after another of
/// the fixture receives when it fails every k-th event, and the restarts.
fn expected_with_failures(log: &[(u64, String)], k: u64, failing: Failing) -> (Vec<Received>, u64) {
    let mut expected = vec![Received::Start];
    let mut restarts = 0;
    for (sequence, _) in log {
        expected.push(Received::Event(*sequence));
        if sequence % k == 0 {
            restarts += 1;
            expected.push(Received::Start);
            if let Failing::Retryable = failing {
                expected.extend(latest_per_view(log, *sequence));
            }
        }
    }
    (expected, restarts)
}

fn events(range: impl Iterator<Item = u64>) -> Vec<Received> {
    range.map(Received::Event).collect()
}

pub(crate) fn setup(listeners: &str) -> (tempfile::TempDir, PathBuf) {
    setup_days(DAYS, listeners)
}

fn setup_days(days: usize, listeners: &str) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("project");
    project(&dir, days, listeners);
    (temp, dir)
}

#[test]
fn a_listener_receives_every_event_once_in_order_across_runs() {
    let (_temp, dir) = setup(&listener("fixture", "", ""));
    materialize(&dir);
    let first = log(&dir);
    // Every application of the state machine is an event: for each of the
    // 8 views at least "asked" and "settled".
    assert!(first.len() >= 16, "{first:?}");
    let mut expected = vec![Received::Start];
    expected.extend(events(1..=first.len() as u64));
    assert_eq!(received(&dir, "fixture"), expected);

    // An unchanged second run is still news for listeners: "asked, found
    // up to date".
    materialize(&dir);
    let all = log(&dir);
    assert!(all.len() > first.len());
    expected.push(Received::Start);
    expected.extend(events(first.len() as u64 + 1..=all.len() as u64));
    assert_eq!(received(&dir, "fixture"), expected);
    let status = status(&dir, "fixture");
    assert_eq!(status["state"], "enabled");
    assert_eq!(status["behind"], 0);
    assert_eq!(status["restarts"], 0);
    assert_eq!(status["delivered"], all.len());
}

#[test]
fn an_always_trapping_listener_drops_each_event_until_disabled_then_is_re_enabled() {
    let (_temp, dir) = setup(&listener("fixture", "behaviour = \"trap\"", "max_retries = 3"));
    let result = materialize(&dir);
    assert!(result.stdout.contains("8 successful"), "scheduling goes on: {}", result.stdout);
    let total = log(&dir).len() as u64;
    // Four events, each dropped with a restart, the fourth failure one too many.
    let trapped = |from: u64| {
        let mut expected = Vec::new();
        for sequence in from..from + 4 {
            expected.push(Received::Start);
            expected.push(Received::Event(sequence));
        }
        expected
    };
    assert_eq!(received(&dir, "fixture"), trapped(1));
    let status_now = status(&dir, "fixture");
    assert_eq!(status_now["state"], "disabled");
    assert_eq!(status_now["reason"], "failed again after 3 restarts (max_retries = 3)");
    assert_eq!(status_now["restarts"], 3);
    assert_eq!(status_now["behind"], total - 4);
    assert!(status_now["last_error"].as_str().unwrap().contains("Trap"), "{status_now}");

    // Disabled, it takes no events: the next run leaves it where it was.
    materialize(&dir);
    assert_eq!(received(&dir, "fixture"), trapped(1));

    let enable = run(trellis().args(["listeners", "enable", "fixture", "-p"]).arg(&dir));
    assert_eq!(enable.code, 0, "{}", enable.stderr);
    assert_eq!(enable.stdout, "listener fixture enabled; it continues from its cursor on the next run\n");
    assert_eq!(status(&dir, "fixture")["state"], "enabled");
    materialize(&dir);
    let mut expected = trapped(1);
    expected.extend(trapped(5));
    assert_eq!(received(&dir, "fixture"), expected);
    assert_eq!(status(&dir, "fixture")["state"], "disabled");

    let unknown = run(trellis().args(["listeners", "enable", "nobody", "-p"]).arg(&dir));
    assert_eq!(unknown.code, 2);
    assert_eq!(unknown.stderr, "error: no listener named `nobody` in trellis.toml (monitor, fixture)\n");
}

#[test]
fn a_retryable_failure_restarts_and_replays_the_latest_event_of_every_view() {
    const K: u64 = 5;
    let (_temp, dir) = setup(&listener("fixture", &format!("behaviour = \"retryable\", k = {K}"), ""));
    materialize(&dir);
    let log = log(&dir);
    let (expected, restarts) = expected_with_failures(&log, K, Failing::Retryable);
    assert!(restarts >= 3, "the test needs a few failures: {log:?}");
    assert_eq!(received(&dir, "fixture"), expected);
    let status = status(&dir, "fixture");
    assert_eq!(status["restarts"], restarts);
    assert_eq!(status["state"], "enabled");
    assert_eq!(status["behind"], 0);
}

#[test]
fn a_retryable_failure_is_replayed_even_when_it_was_the_last_event_of_the_run() {
    // Every event fails once, the last one too; the run must not end (nor
    // the cursor pass it) before the replay that delivers it went through.
    let (_temp, dir) = setup(&listener("fixture", "behaviour = \"retryable\", k = 1", ""));
    let toml = std::fs::read_to_string(dir.join("trellis.toml")).unwrap();
    std::fs::write(dir.join("trellis.toml"), toml.replace("backoff = \"1ms\"", "backoff = \"50ms\"")).unwrap();
    materialize(&dir);
    let log = log(&dir);
    let (expected, restarts) = expected_with_failures(&log, 1, Failing::Retryable);
    assert_eq!(received(&dir, "fixture"), expected);
    let status = status(&dir, "fixture");
    assert_eq!((status["restarts"].as_u64(), status["behind"].as_u64()), (Some(restarts), Some(0)));
}

/// The project of `setup` with the fixture's deadline set to `deadline`.
fn with_fixture_deadline(dir: &Path, deadline: &str) {
    let toml = std::fs::read_to_string(dir.join("trellis.toml")).unwrap();
    std::fs::write(dir.join("trellis.toml"), toml.replace("deadline = \"5s\"", &format!("deadline = \"{deadline}\"")))
        .unwrap();
}

#[test]
fn a_listener_waiting_past_its_deadline_without_using_cpu_is_not_restarted() {
    // A listener's deadline counts the CPU time it used: a sleep (a
    // host-side wait, like waiting for a CPU on a busy machine) past it is
    // no failure, as long as it stays under the wall-clock ceiling (200
    // times the deadline).
    const K: u64 = 7;
    let (_temp, dir) =
        setup(&listener("fixture", &format!("behaviour = \"sleep\", k = {K}, sleep_ms = 600"), "max_retries = -1"));
    with_fixture_deadline(&dir, "200ms");
    let result = materialize(&dir);
    let total = log(&dir).len() as u64;
    assert!(total >= K, "the test needs a sleep or two: {total} events");
    let mut expected = vec![Received::Start];
    expected.extend(events(1..=total));
    assert_eq!(received(&dir, "fixture"), expected);
    let status = status(&dir, "fixture");
    assert_eq!((status["restarts"].as_u64(), status["behind"].as_u64()), (Some(0), Some(0)), "{status}");
    assert!(result.stderr.contains("listener fixture: caught up\n"), "{}", result.stderr);
}

#[test]
fn a_listener_spinning_past_its_cpu_deadline_is_restarted_and_the_event_dropped() {
    const K: u64 = 7;
    let (_temp, dir) = setup(&listener("fixture", &format!("behaviour = \"spin\", k = {K}"), "max_retries = -1"));
    with_fixture_deadline(&dir, "300ms");
    let result = materialize(&dir);
    let (expected, restarts) = expected_with_failures(&log(&dir), K, Failing::Dropped);
    assert!(restarts >= 2, "the test needs a few failures");
    assert_eq!(received(&dir, "fixture"), expected);
    let status = status(&dir, "fixture");
    assert_eq!(status["restarts"], restarts);
    let last_error = status["last_error"].as_str().unwrap();
    assert_eq!(last_error, "CPU-time deadline of 300ms exceeded (Timeout)");
    // Caught up, yet not followed without loss: the restarts are said.
    assert!(
        result.stderr.contains(&format!(
            "listener fixture: caught up; restarted {restarts} times meanwhile, each dropping or replaying an event\n"
        )),
        "{}",
        result.stderr
    );
}

#[test]
fn a_restarted_listener_does_not_wait_for_the_memory_its_failed_instance_held() {
    // The budget holds the listener's cap (64 MiB) and one transformation's
    // (32 MiB), not the listener's twice: a new instance that reserved its
    // memory while the failed one still held its own would wait forever,
    // and every transformation behind it.
    const K: u64 = 5;
    let (_temp, dir) = setup(&listener("fixture", &format!("behaviour = \"trap\", k = {K}"), "max_retries = -1"));
    let toml = std::fs::read_to_string(dir.join("trellis.toml")).unwrap();
    let toml = toml.replacen("[defaults]\n", "[defaults]\nmemory_budget_mib = 96\n", 1).replacen(
        "concat = \"plugins/concat.wasm\"",
        "concat = { file = \"plugins/concat.wasm\", memory_mib = 32 }",
        1,
    );
    std::fs::write(dir.join("trellis.toml"), toml).unwrap();
    let result = materialize(&dir);
    assert!(result.stdout.contains("8 successful"), "{}", result.stdout);
    let (expected, restarts) = expected_with_failures(&log(&dir), K, Failing::Dropped);
    assert!(restarts >= 2, "the test needs a few restarts");
    assert_eq!(received(&dir, "fixture"), expected);
    assert_eq!(status(&dir, "fixture")["restarts"], restarts);
}

#[test]
fn materialize_says_how_far_behind_a_listener_is_at_its_end() {
    // Every event waits for a file that is not there: the listener is held
    // at its first event through the run and the drain (1 s), and the
    // shutdown abandons that event.
    let gated = listener("fixture", "gate = \"/state/GO\"", "");
    let (_temp, dir) = setup(&gated);
    let toml = std::fs::read_to_string(dir.join("trellis.toml")).unwrap();
    std::fs::write(dir.join("trellis.toml"), toml.replace("drain = \"60s\"", "drain = \"1s\"")).unwrap();
    let result = materialize(&dir);
    let total = log(&dir).len() as u64;
    assert_eq!(received(&dir, "fixture"), [Received::Start, Received::Event(1)]);
    let status = status(&dir, "fixture");
    assert_eq!((status["behind"].as_u64(), status["restarts"].as_u64()), (Some(total), Some(0)), "{status}");
    assert!(
        result.stderr.contains(&format!(
            "listener fixture: {total} events behind, which it receives from its cursor next time\n"
        )),
        "{}",
        result.stderr
    );
    assert!(!result.stderr.contains("caught up"), "{}", result.stderr);

    // The gate open, the next run gives it everything from its cursor: the
    // event it was abandoned in first.
    std::fs::write(dir.join(".trellis/listeners/fixture/GO"), "").unwrap();
    std::fs::write(dir.join("trellis.toml"), toml).unwrap();
    let result = materialize(&dir);
    assert!(result.stderr.contains("listener fixture: caught up\n"), "{}", result.stderr);
    let mut expected = vec![Received::Start, Received::Event(1), Received::Start];
    expected.extend(events(1..=log(&dir).len() as u64));
    assert_eq!(received(&dir, "fixture"), expected);
}

#[test]
fn listeners_that_cannot_be_instantiated_are_skipped_and_shown() {
    let listeners = [
        "\n[[listener]]\nname = \"no-file\"\nplugin = \"missing\"\n",
        "\n[[listener]]\nname = \"wrong-world\"\nplugin = \"concat\"\n",
        &listener("traps-on-start", "behaviour = \"trap-on-start\"", ""),
        &listener("fixture", "", ""),
    ]
    .concat();
    let (_temp, dir) = setup(&listeners);
    let result = materialize(&dir);
    assert!(result.stdout.contains("8 successful"), "{}", result.stdout);
    // The one that works gets everything.
    let total = log(&dir).len() as u64;
    let mut expected = vec![Received::Start];
    expected.extend(events(1..=total));
    assert_eq!(received(&dir, "fixture"), expected);

    let reason = |name: &str| {
        let status = status(&dir, name);
        assert_eq!(status["state"], "unavailable", "{status}");
        assert_eq!(status["behind"], total, "{status}");
        status["reason"].as_str().unwrap().to_string()
    };
    let no_file = reason("no-file");
    assert!(no_file.contains("not-there.wasm"), "{no_file}");
    let wrong_world = reason("wrong-world");
    assert!(wrong_world.contains("transformation"), "{wrong_world}");
    let trap = reason("traps-on-start");
    assert!(trap.starts_with("start failed"), "{trap}");

    let text = run(trellis().args(["listeners", "-p"]).arg(&dir));
    assert!(text.stdout.contains("unavailable: start failed"), "{}", text.stdout);
}

#[test]
fn a_listener_killed_halfway_receives_everything_from_its_cursor_after_the_restart() {
    // Slow: every event takes 40 ms, and 12 days make about 75 events, so
    // that the kill lands in the middle, after the cursor was stored (at
    // most every 200 ms, durable within sled's half-second flush).
    let slow = listener("fixture", "behaviour = \"sleep\", sleep_ms = 40", "");
    let (_temp, dir) = setup_days(12, &slow);
    let mut child = trellis()
        .args(["materialize", "-p"])
        .arg(&dir)
        .args(["-v", &pattern(12)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while received(&dir, "fixture").len() < 30 {
        assert!(Instant::now() < deadline, "the listener never got going");
        assert!(child.try_wait().unwrap().is_none(), "trellis ended before the kill");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before_kill = received(&dir, "fixture");
    let logged = log(&dir);
    let cursor = status(&dir, "fixture")["cursor"].as_u64().unwrap();
    let last_received = before_kill.iter().rev().find_map(|r| match r {
        Received::Event(s) => Some(*s),
        _ => None,
    });
    assert!(cursor > 1 && cursor < logged.len() as u64, "killed halfway: cursor {cursor} of {}", logged.len());
    assert!(cursor <= last_received.unwrap() + 1, "a cursor is stored only after delivery");

    // Restarted, the listener gets everything from its cursor on, in order.
    std::fs::write(
        dir.join("trellis.toml"),
        std::fs::read_to_string(dir.join("trellis.toml")).unwrap().replace("behaviour = \"sleep\", sleep_ms = 40", ""),
    )
    .unwrap();
    materialize(&dir);
    let after = received(&dir, "fixture");
    let total = log(&dir).len() as u64;
    let mut expected = before_kill.clone();
    expected.push(Received::Start);
    expected.extend(events(cursor..=total));
    assert_eq!(after, expected);
    // Nothing missing: every event of the log reached it at least once.
    let seen: BTreeSet<u64> =
        after.iter().filter_map(|r| if let Received::Event(s) = r { Some(*s) } else { None }).collect();
    assert_eq!(seen, (1..=total).collect());
}

#[test]
fn events_removed_by_the_cap_reach_a_listener_as_a_gap() {
    let (_temp, dir) = setup(&listener("fixture", "behaviour = \"trap\"", "max_retries = 0"));
    // Disabled at once: it no longer holds the log.
    materialize(&dir);
    assert_eq!(status(&dir, "fixture")["state"], "disabled");
    let toml = std::fs::read_to_string(dir.join("trellis.toml")).unwrap();
    let toml = toml.replace("behaviour = \"trap\"", "").replace("[events]\n", "[events]\nhistory = 5\nmax = 20\n");
    std::fs::write(dir.join("trellis.toml"), toml).unwrap();
    materialize(&dir);
    let first_kept = log(&dir).first().unwrap().0;
    assert!(first_kept > 2, "the log was trimmed to its history");

    let enable = run(trellis().args(["listeners", "enable", "fixture", "-p"]).arg(&dir));
    assert_eq!(enable.code, 0);
    materialize(&dir);
    let total = log(&dir).last().unwrap().0;
    // After the dropped first event: gaps and events that together cover
    // every sequence number to the end, each once, in order.
    let after_disable: Vec<Received> =
        received(&dir, "fixture").into_iter().skip(2).filter(|r| *r != Received::Start).collect();
    assert!(matches!(after_disable.first(), Some(Received::Gap(2, _))), "{after_disable:?}");
    let mut next = 2;
    for item in &after_disable {
        match item {
            Received::Gap(first, last) => {
                assert_eq!(*first, next, "{after_disable:?}");
                next = last + 1;
            }
            Received::Event(sequence) => {
                assert_eq!(*sequence, next, "{after_disable:?}");
                next += 1;
            }
            Received::Start => unreachable!(),
        }
    }
    assert_eq!(next, total + 1);
    // The log never holds more than the cap.
    assert!(log(&dir).len() <= 20);
}

#[test]
fn the_stats_listener_counts_states_and_transformation_durations() {
    let stats = "\n[[listener]]\nname = \"stats\"\nplugin = \"stats\"\n";
    let (_temp, dir) = setup(stats);
    materialize(&dir);
    let store = Metastore::open(&dir.join(".trellis/metastore")).unwrap();
    let logged = store.events_from(0, usize::MAX).unwrap();
    drop(store);
    let text = std::fs::read_to_string(dir.join(".trellis/listeners/stats/stats.json")).unwrap();
    let stats: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(stats["events"], logged.len(), "{stats}");
    let mut per_state: HashMap<&str, u64> = HashMap::new();
    for event in &logged {
        *per_state.entry(event.event.current.as_str()).or_default() += 1;
    }
    for (state, count) in &per_state {
        assert_eq!(stats["states"][state], *count, "{state}: {stats}");
    }
    // Every view that entered transforming left it again: one duration each.
    assert_eq!(stats["transformations"]["count"], per_state["transforming"], "{stats}");
    assert!(per_state["transforming"] >= 4, "the four outputs were transformed");
}

/// The nice value of each thread of this process named `name` (as the
/// kernel keeps it: its first 15 bytes).
fn nice_of_threads(name: &str) -> Vec<i64> {
    let name: String = name.chars().take(15).collect();
    let mut nice = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        // Fields after the parenthesized name: state is the first, nice the 17th.
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        nice.push(after_name.split(' ').nth(16).unwrap().parse().unwrap());
    }
    nice
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_moves_listeners_from_nice_19_to_the_callers_priority() {
    // While scheduling may need the CPU, a listener runs at nice 19; the
    // drain at a command's end, when scheduling is done, lets it catch up
    // at the caller's priority, so that busy processes beside it do not
    // starve it through the drain. Its instance goes with it: no restart.
    let (_temp, dir) = setup(&listener("prio-moved", "gate = \"/state/GO\"", ""));
    let catalog = std::sync::Arc::new(trellis::catalog::load(&dir).unwrap());
    let plugins = std::sync::Arc::new(trellis::plugins::Plugins::load(crate::support::runtime(), &catalog).await);
    let mut scheduler = trellis::scheduler::Scheduler::open(catalog.clone(), plugins.clone()).await.unwrap();
    let mut listeners = trellis::listeners::Listeners::start(&catalog, &plugins, scheduler.metastore()).await.unwrap();
    let summary = scheduler.materialize(&pattern(DAYS), trellis::scheduler::Mode::Default).await.unwrap();
    assert!(summary.failures.is_empty(), "{summary:?}");
    let thread = "listener prio-moved";
    eventually_blocking("the listener at nice 19", || nice_of_threads(thread) == [19]);
    // The gate holds it at its first event: every other one is still to come.
    eventually_blocking("the listener held at its first event", || {
        received(&dir, "prio-moved") == [Received::Start, Received::Event(1)]
    });
    let total = log_of(&scheduler).len() as u64;
    assert!(total >= 16, "{total} events");
    assert_eq!(listeners.lag_probe()(), total);

    let caller: i64 = {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        stat[stat.rfind(')').unwrap() + 2..].split(' ').nth(16).unwrap().parse().unwrap()
    };
    assert_ne!(caller, 19);
    // The drain asks it to park after the event in progress; only then does
    // the gate open, so it parks behind by all but one event, and receives
    // those on a thread at the caller's priority.
    let behind = {
        let mut drain = std::pin::pin!(listeners.drain(Duration::from_secs(60)));
        assert!(futures_util::poll!(drain.as_mut()).is_pending(), "the drain ended with the listener held");
        std::fs::write(dir.join(".trellis/listeners/prio-moved/GO"), "").unwrap();
        drain.await.unwrap()
    };
    assert!(behind.is_empty(), "{behind:?}");
    // The thread it left ends; it went on on the new one.
    eventually_blocking("the listener on one thread at the caller's priority", || nice_of_threads(thread) == [caller]);
    let lags = listeners.close(&catalog).await.unwrap();
    let moved = lags.iter().find(|lag| lag.name == "prio-moved").unwrap();
    assert_eq!((moved.behind, moved.restarts), (0, 0), "{moved:?}");
    drop(scheduler);
    let mut expected = vec![Received::Start];
    expected.extend(events(1..=total));
    assert_eq!(received(&dir, "prio-moved"), expected, "the instance moved with it, it was not started again");
}

/// The event log of the scheduler's metastore, while it holds it.
fn log_of(scheduler: &trellis::scheduler::Scheduler) -> Vec<u64> {
    let store = scheduler.metastore();
    store.events_from(0, usize::MAX).unwrap().into_iter().map(|e| e.sequence).collect()
}

/// What a webhook received: the request's method, path and body.
#[derive(Debug)]
struct Posted {
    method: String,
    path: String,
    body: serde_json::Value,
}

/// An HTTP server on 127.0.0.1 that answers 200 to every request and
/// hands each over: what the webhook listener posts to.
fn webhook_server() -> (std::net::SocketAddr, std::sync::mpsc::Receiver<Posted>) {
    use http_body_util::BodyExt;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    let (posted, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((socket, _)) = listener.accept().await else { return };
                let posted = posted.clone();
                let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let posted = posted.clone();
                    async move {
                        let method = request.method().to_string();
                        let path = request.uri().path().to_string();
                        let bytes = request.into_body().collect().await?.to_bytes();
                        let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                        let _ = posted.send(Posted { method, path, body });
                        Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Full::new(bytes::Bytes::new())))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(socket);
                tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
            }
        });
    });
    (address, received)
}

#[test]
fn the_webhook_listener_posts_failed_views_to_its_allowed_host_and_no_other() {
    let (address, posted) = webhook_server();
    let port = address.port();
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("project");
    let allowed = format!("allow_http = [\"127.0.0.1:{port}\"]");
    // The same server under another name: a request to it would arrive,
    // so only the allow list keeps it out.
    let listeners = format!(
        r#"
[events]
drain = "60s"

[[listener]]
name = "alert"
plugin = "webhook"
config = {{ url = "http://127.0.0.1:{port}/hook?team=data" }}
{allowed}

[[listener]]
name = "elsewhere"
plugin = "webhook"
config = {{ url = "http://localhost:{port}/elsewhere" }}
{allowed}
max_retries = 0
"#
    );
    Daily::new("w", "hostile_panic", 2)
        .plugins(&["webhook_listener"], "webhook = \"plugins/webhook_listener.wasm\"\n")
        .tail(&listeners)
        .write(&dir);
    let result = run_within(
        trellis().args(["materialize", "-p"]).arg(&dir).args(["-v", "w.mart/Out/rymd(20150101-20150102)"]),
        Duration::from_secs(300),
    );
    assert_ne!(result.code, 0, "both views fail: {}{}", result.stdout, result.stderr);

    // The drain waited for both listeners: everything posted has arrived.
    let received: Vec<Posted> = posted.try_iter().collect();
    assert_eq!(received.len(), 2, "one post per failed view: {received:?}");
    let mut views = BTreeSet::new();
    for post in &received {
        assert_eq!((post.method.as_str(), post.path.as_str()), ("POST", "/hook"), "{post:?}");
        let view = post.body["view"].as_str().unwrap();
        views.insert(view.to_string());
        assert_eq!(post.body["state"], "failed");
        let run = post.body["run"].as_str().expect("the run it failed in");
        let error = post.body["error"].as_str().unwrap();
        assert!(error.contains("deliberate panic while materializing"), "{error}");
        let text = post.body["text"].as_str().unwrap();
        assert!(text.starts_with(&format!("trellis: {view} is failed in run {run}: ")), "{text}");
    }
    assert_eq!(views, BTreeSet::from(["w.mart/Out/2015/01/01".to_string(), "w.mart/Out/2015/01/02".to_string()]));

    let refused = status(&dir, "elsewhere");
    assert_eq!(refused["state"], "disabled", "{refused}");
    let error = refused["last_error"].as_str().unwrap();
    assert!(
        error.contains(&format!(
            "posting to http://localhost:{port}/elsewhere was refused: add `localhost:{port}` to this listener's allow_http"
        )),
        "{error}"
    );
    assert_eq!(status(&dir, "alert")["state"], "enabled");
}

#[test]
fn an_allow_http_entry_that_is_not_a_host_is_refused_where_it_is_written() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("project");
    let listeners = "\n[[listener]]\nname = \"alert\"\nplugin = \"webhook\"\nconfig = { url = \"https://hooks.example.com/x\" }\nallow_http = [\"hooks.example.com\", \"https://hooks.example.com/x\"]\n";
    Daily::new("w", "trivial", 1)
        .plugins(&["webhook_listener"], "webhook = \"plugins/webhook_listener.wasm\"\n")
        .tail(listeners)
        .write(&dir);
    let result = run(trellis().args(["validate", "-p"]).arg(&dir));
    assert_eq!(result.code, 2, "{}", result.stdout);
    let line = result.stderr.lines().find(|l| l.contains("allow_http")).unwrap_or_else(|| panic!("{}", result.stderr));
    assert!(
        line.contains(
            "listener `alert`: allow_http `https://hooks.example.com/x` is a URL; write a host as `name` or `name:port`"
        ),
        "{line}"
    );
    assert!(line.contains("trellis.toml:"), "says where: {line}");
}
