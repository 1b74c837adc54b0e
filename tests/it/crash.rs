//! A real `trellis materialize` killed with SIGKILL halfway through: after
//! the restart the metastore opens, no view has partial data, no view's
//! metadata claims data that is not there, and the next run converges.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use object_store::ObjectStoreExt;
use trellis::metastore::Metastore;
use trellis::model::ViewState;

use crate::support::{Daily, run, trellis};

const DAYS: usize = 400;

fn write_project(dir: &Path) {
    Daily::new("k", "concat", DAYS).concurrency(2).part(&"x\n".repeat(50)).write(dir);
}

fn out_dir(dir: &Path, day: chrono::NaiveDate) -> std::path::PathBuf {
    dir.join(format!("data/k/mart/Out/{}", day.format("%Y/%m/%d")))
}

const PATTERN: &str = "k.mart/Out/rymd(20150101-20160204)";

fn first_day() -> chrono::NaiveDate {
    chrono::NaiveDate::from_ymd_opt(2015, 1, 1).unwrap()
}

/// How many of the views have been published so far.
fn published(dir: &Path) -> usize {
    (0..DAYS).filter(|i| out_dir(dir, first_day() + chrono::Days::new(*i as u64)).exists()).count()
}

/// Starts `trellis materialize` on the project and returns once some of
/// its views are published, so that it can be interrupted mid-run.
fn start_run(dir: &Path, output: fn() -> std::process::Stdio) -> std::process::Child {
    let mut child = trellis()
        .current_dir(dir)
        .args(["materialize", "-v", PATTERN])
        .stdout(output())
        .stderr(output())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while published(dir) < 20 {
        assert!(Instant::now() < deadline, "no progress before the deadline");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be interrupted; make it larger");
        std::thread::yield_now();
    }
    child
}

/// The lattice of the kill loop: per day, external `In` (a part of
/// `LOOP_ROWS` rows), and two views over it: `Out`, which `concat` rebuilds
/// whole, and `Inc`, an incremental aggregate with its transaction log.
const LOOP_DAYS: usize = 60;
const LOOP_PATTERN: &str = "k.mart/e(Out,Inc)/rymd(20150101-20150301)";

fn write_loop_project(dir: &Path) {
    Daily::new("k", "concat", LOOP_DAYS)
        .concurrency(4)
        .part("v\n1\n2\n")
        .plugins(&["csv_aggregate_incremental"], "inc = \"plugins/csv_aggregate_incremental.wasm\"\n")
        .tail(
            "\n[[view]]\nname = \"k.mart/Inc\"\ntime = { frequency = \"1d\", initial = \"2015-01-01\" }\n\
             incremental = true\ntransformation = { plugin = \"inc\", config = { aggregates = \"n=count(*),s=sum(v)\" } }\n\n\
             [[view.dependency]]\nview = \"k.raw/In\"\n",
        )
        .write(dir);
}

/// Each view of the loop's lattice: its URL path and its data directory.
fn loop_views(dir: &Path) -> Vec<(String, std::path::PathBuf)> {
    let mut views = Vec::new();
    for name in ["Out", "Inc"] {
        for i in 0..LOOP_DAYS {
            let day = (first_day() + chrono::Days::new(i as u64)).format("%Y/%m/%d");
            views.push((format!("k.mart/{name}/{day}"), dir.join(format!("data/k/mart/{name}/{day}"))));
        }
    }
    views
}

/// Where the kill loop's project keeps its views' data.
enum Backend {
    Local,
    /// A bucket on the moto server (`moto.rs`), the data under `data/`.
    S3(String),
}

impl Backend {
    /// Each published view's data directory, with what identifies the
    /// version published there: locally its directory's inode (its done
    /// flag there), on S3 its pointer's ETag (one listing for all).
    fn published(&self, project: &Path, views: &[(String, std::path::PathBuf)]) -> HashMap<std::path::PathBuf, String> {
        use std::os::unix::fs::MetadataExt;
        match self {
            Backend::Local => views
                .iter()
                .filter(|(_, data)| data.join("_SUCCESS").exists())
                .filter_map(|(_, data)| Some((data.clone(), std::fs::metadata(data).ok()?.ino().to_string())))
                .collect(),
            Backend::S3(bucket) => {
                let moto = crate::moto::moto();
                let client = moto.client(bucket);
                let prefix = object_store::path::Path::from("data/k/mart");
                let listed: Vec<object_store::ObjectMeta> =
                    moto.block_on(futures_util::TryStreamExt::try_collect(client.list(Some(&prefix)))).unwrap();
                listed
                    .into_iter()
                    .filter(|meta| meta.location.filename() == Some(trellis::storage::object::POINTER))
                    .map(|meta| {
                        let key = meta.location.as_ref().trim_end_matches(trellis::storage::object::POINTER);
                        (project.join(key.trim_end_matches('/')), meta.e_tag.unwrap_or_default())
                    })
                    .collect()
            }
        }
    }

    /// A file of a view's published data: on S3, in the version its pointer names.
    fn read(&self, project: &Path, data: &Path, file: &str) -> Vec<u8> {
        match self {
            Backend::Local => std::fs::read(data.join(file)).unwrap(),
            Backend::S3(bucket) => {
                let version = s3_current_version(bucket, project, data);
                s3_object(bucket, project, data, &format!("_v/{version}/{file}")).unwrap()
            }
        }
    }

    /// Whether an outside reader finds the view's done flag: on S3, the
    /// object beside the pointer, naming the version it points to (a kill
    /// between the commit and the flag leaves it to the next run to write).
    fn flag_for_outside_readers(&self, project: &Path, data: &Path) -> bool {
        match self {
            Backend::Local => data.join("_SUCCESS").exists(),
            Backend::S3(bucket) => s3_object(bucket, project, data, "_SUCCESS")
                .is_some_and(|flag| flag == s3_current_version(bucket, project, data).as_bytes()),
        }
    }

    /// Where its staging directories are made.
    fn staging(&self, project: &Path) -> std::path::PathBuf {
        match self {
            Backend::Local => project.join("data/.trellis-staging"),
            Backend::S3(_) => project.join(".trellis/staging/.trellis-staging"),
        }
    }
}

/// The object `name` below a view's key in `bucket`, if it is there.
fn s3_object(bucket: &str, project: &Path, data: &Path, name: &str) -> Option<Vec<u8>> {
    let moto = crate::moto::moto();
    let client = moto.client(bucket);
    let key = data.strip_prefix(project).unwrap().display().to_string();
    let location = object_store::path::Path::from(format!("{key}/{name}"));
    moto.block_on(async { Some(client.get(&location).await.ok()?.bytes().await.unwrap().to_vec()) })
}

/// The version a view's pointer names.
fn s3_current_version(bucket: &str, project: &Path, data: &Path) -> String {
    let pointer = s3_object(bucket, project, data, "_CURRENT").expect("a pointer");
    let pointer: serde_json::Value = serde_json::from_slice(&pointer).unwrap();
    pointer["version"].as_str().unwrap().to_string()
}

/// Killed with SIGKILL again and again, each time as soon as it has
/// published a few more views (kill timing follows progress, so that many
/// kills land between a publish and the commit that records it), a run of
/// plain and incremental views, alternately embedded and in a server: no
/// view is ever transformed again once published, no published directory
/// is ever replaced, nothing recorded lacks its data, and the next run
/// converges to records as an uninterrupted run leaves them.
#[test]
fn kill_9_again_and_again_never_transforms_a_published_view_twice() {
    kill_loop(Backend::Local);
}

/// The same on S3: a version is published by its pointer's one
/// conditional write, so a kill anywhere leaves the pointer naming a whole
/// version or none, and the receipt inside it lets the next run adopt it.
#[test]
fn on_s3_kill_9_again_and_again_never_transforms_a_published_view_twice() {
    kill_loop(Backend::S3(crate::moto::moto().bucket(false)));
}

fn kill_loop(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("k");
    write_loop_project(&project);
    let environment: &[(&str, &str)] = match &backend {
        Backend::Local => &[],
        Backend::S3(bucket) => {
            crate::moto::move_to_bucket(&project, bucket);
            crate::moto::ENVIRONMENT
        }
    };
    let views = loop_views(&project);
    // Per view first seen published: its directory's inode, and the
    // first event sequence after that kill.
    let mut published: HashMap<String, (String, u64)> = Default::default();
    // Kills that left a publish the metastore had not recorded, per type.
    let mut unrecorded: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut random = crate::support::Lcg::new(38);
    let mut kills = 0;
    // At least 10 kills; more (up to 40) only until both types have had a
    // kill between their publish and its commit, which the loop is for.
    while kills < 10 || (unrecorded.len() < 2 && kills < 40) {
        let before = backend.published(&project, &views).len();
        if before == views.len() {
            break;
        }
        let target = (before + 1 + random.below(3) as usize).min(views.len());
        // Odd rounds kill a server that was asked to run, even ones an
        // embedded `trellis materialize`.
        let (mut child, mut server) = (None, None);
        if kills % 2 == 1 {
            let started = crate::support::Server::start(&project, &[], environment);
            let asked = run(trellis().arg("--server").arg(&started.url).args(["materialize", "-v", LOOP_PATTERN]));
            assert_eq!(asked.code, 0, "{}", asked.stderr);
            server = Some(started);
        } else {
            let spawned = trellis()
                .current_dir(&project)
                .envs(environment.iter().copied())
                .args(["materialize", "-v", LOOP_PATTERN])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            child = Some(spawned);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut ended = false;
        while backend.published(&project, &views).len() < target {
            assert!(Instant::now() < deadline, "no progress before the deadline");
            if let Some(child) = &mut child
                && child.try_wait().unwrap().is_some()
            {
                ended = true;
                break;
            }
        }
        match (child, server) {
            (Some(mut child), _) => {
                let _ = child.kill();
                child.wait().unwrap();
            }
            // Dropped, it is killed with SIGKILL.
            (_, Some(server)) => drop(server),
            _ => unreachable!(),
        }
        if ended {
            break;
        }
        kills += 1;

        // After each kill: nothing published was replaced, and what the
        // metastore does not record yet is counted.
        let store = Metastore::open(&project.join(".trellis/metastore")).unwrap();
        let next = store.next_sequence().unwrap();
        let mut missed = std::collections::BTreeSet::new();
        let now = backend.published(&project, &views);
        for (view, data) in &views {
            let record = store.view(view).unwrap().unwrap_or_default();
            let Some(inode) = now.get(data).cloned() else {
                assert_ne!(record.state, ViewState::Materialized, "{view} is recorded materialized without its data");
                continue;
            };
            let (first, _) = published.entry(view.clone()).or_insert((inode.clone(), next));
            assert_eq!(&inode, first, "{view} was published again after a kill");
            if record.state != ViewState::Materialized {
                missed.insert(if view.contains("/Inc/") { "incremental" } else { "plain" });
            }
        }
        for kind in missed {
            *unrecorded.entry(kind).or_default() += 1;
        }
    }
    eprintln!("{kills} kills; kills that left a publish unrecorded: {unrecorded:?}");
    assert!(kills >= 10, "only {kills} kills before the run ended; make the lattice larger");
    assert_eq!(unrecorded.len(), 2, "no kill landed between a publish and its commit for both types: {unrecorded:?}");

    // The next run converges, and the one after has nothing to do.
    let materialize = || {
        run(trellis().current_dir(&project).envs(environment.iter().copied()).args(["materialize", "-v", LOOP_PATTERN]))
    };
    let result = materialize();
    assert_eq!(result.code, 0, "{}\n{}", result.stdout, result.stderr);
    let result = materialize();
    assert_eq!(result.code, 0);
    let all = 3 * LOOP_DAYS;
    assert!(result.stdout.ends_with(&format!("{all} views: {all} idle\n")), "{}", result.stdout);
    assert!(std::fs::read_dir(backend.staging(&project)).is_ok_and(|mut d| d.next().is_none()));

    let store = Metastore::open(&project.join(".trellis/metastore")).unwrap();
    // Never transformed once published, never replaced; every output whole.
    let events = store.events_from(0, usize::MAX).unwrap();
    let now = backend.published(&project, &views);
    for (view, data) in &views {
        let inode = now.get(data).unwrap_or_else(|| panic!("{view} has no data"));
        if let Some((first, seen)) = published.get(view) {
            let seen = *seen;
            assert_eq!(inode, first, "{view} was published again after a kill");
            let again = events.iter().filter(|e| e.sequence >= seen && &*e.event.view == view);
            let transformed: Vec<_> = again.filter(|e| e.event.actions.iter().any(|a| a == "transform")).collect();
            assert!(transformed.is_empty(), "{view} was transformed again after its publish: {transformed:?}");
        }
        // An incremental view's log agrees with the marker it published.
        if view.contains("/Inc/") {
            let head = store.tx_head(view).unwrap().unwrap_or_else(|| panic!("{view} has no transaction log"));
            let marker = backend.read(&project, data, trellis::scheduler::txlog::MARKER);
            let marker: serde_json::Value = serde_json::from_slice(&marker).unwrap();
            assert_eq!(Some(head.generation), marker["generation"].as_u64(), "{view}");
        }
        assert!(backend.flag_for_outside_readers(&project, data), "{view}: no done flag for outside readers");
        let expected = if view.contains("/Inc/") { "n,s\n2,3\n" } else { "v\n1\n2\n" };
        let file = if view.contains("/Inc/") { "part-00000.csv" } else { "part-00000" };
        assert_eq!(String::from_utf8(backend.read(&project, data, file)).unwrap(), expected, "{view}");
    }
    // Every record is what an uninterrupted run writes: the same for every
    // day of a type (but the timestamps), the done flag it published.
    for kind in ["Out", "Inc"] {
        let records: Vec<_> = views
            .iter()
            .filter(|(view, _)| view.contains(&format!("/{kind}/")))
            .map(|(view, _)| (view, store.view(view).unwrap().unwrap()))
            .collect();
        for (view, record) in &records {
            assert_eq!(record.state, ViewState::Materialized, "{view}");
            assert!(matches!(record.done_flag, Some(trellis::metastore::SeenFlag::Present { .. })), "{view}");
            let (first, expected) = &records[0];
            let shape = |r: &trellis::metastore::ViewRecord| {
                (
                    r.version_checksum.clone(),
                    r.counters.clone(),
                    r.incomplete,
                    r.errors,
                    r.invalidated,
                    r.last_error.clone(),
                )
            };
            assert_eq!(shape(record), shape(expected), "{view} against {first}");
        }
    }
    drop(store);
    let check = run(trellis().current_dir(&project).envs(environment.iter().copied()).args(["metastore", "check"]));
    assert_eq!(check.code, 0, "{}", check.stderr);
}

#[test]
fn ctrl_c_stops_a_run_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path());
    let child = start_run(dir.path(), std::process::Stdio::piped);
    let first = first_day();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains(" stopped by request"), "{stdout}");
    assert!(stdout.contains(" skipped"), "{stdout}");
    let summary = stdout.lines().rev().nth(1).unwrap();
    assert!(!summary.contains("terminated_with_error"), "{summary}");
    // Nothing is left in staging, whatever was published is whole, and
    // the next run finishes the job.
    let staging = dir.path().join("data/.trellis-staging");
    assert!(std::fs::read_dir(&staging).is_ok_and(|mut entries| entries.next().is_none()), "staging left behind");
    for i in 0..DAYS {
        let out = out_dir(dir.path(), first + chrono::Days::new(i as u64));
        if out.exists() {
            assert!(out.join("_SUCCESS").exists(), "{} is partial", out.display());
        }
    }
    let result = run(trellis().current_dir(dir.path()).args(["materialize", "-v", PATTERN]));
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(published(dir.path()), DAYS);
}

#[test]
fn trellis_stop_stops_a_run_of_another_process() {
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path());
    let child = start_run(dir.path(), std::process::Stdio::piped);
    // The running materialize names its run next to the metastore.
    let active: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(".trellis/metastore.active-run")).unwrap()).unwrap();
    let id = active["run"].as_str().unwrap().to_string();
    assert_eq!(active["pid"], child.id());

    // Without an id, `stop` stops the run in progress.
    let stop = run(trellis().current_dir(dir.path()).args(["stop"]));
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    assert_eq!(stop.stdout, format!("asked run {id} to stop (process {})\nrun {id} stopped\n", child.id()));
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains(&format!("run {id} stopped by request")), "{stdout}");
    assert!(!dir.path().join(".trellis/metastore.active-run").exists());

    let runs = run(trellis().current_dir(dir.path()).args(["runs", &id]));
    assert!(runs.stdout.lines().next().unwrap().ends_with("stopped by request"), "{}", runs.stdout);
    assert!(runs.stdout.contains("SKIPPED"), "{}", runs.stdout);
    // Stopping it again, or a run that never was.
    let again = run(trellis().current_dir(dir.path()).args(["stop", &id]));
    assert_eq!((again.code, again.stdout), (0, format!("run {id} is not running: stopped by request\n")));
    let unknown = run(trellis().current_dir(dir.path()).args(["stop", "nope"]));
    assert_eq!((unknown.code, unknown.stderr), (2, "error: no run `nope` (see `trellis runs`)\n".to_string()));
    let nothing = run(trellis().current_dir(dir.path()).args(["stop"]));
    assert_eq!(
        (nothing.code, nothing.stderr),
        (2, "error: no run is in progress in .; name one (see `trellis runs`)\n".to_string())
    );
}

/// A daily coordinator over the `c` project's `Out`, catching up on
/// `CATCH_UP` days (from 2015-01-01) at the time the processes are given.
const CATCH_UP: usize = 100;
const CATCH_UP_NOW: &str = "2015-04-10T12:00:00Z";

fn out_published(dir: &Path) -> usize {
    (0..CATCH_UP)
        .filter(|i| {
            let day = first_day() + chrono::Days::new(*i as u64);
            dir.join(format!("data/c/mart/Out/{}", day.format("%Y/%m/%d"))).join("_SUCCESS").exists()
        })
        .count()
}

#[test]
fn kill_9_during_a_catch_up_loses_no_action_and_starts_none_twice() {
    let dir = tempfile::tempdir().unwrap();
    // Each day has a part, so that each day's `Out` is published (with
    // nothing to concatenate it would be NODATA, never published).
    Daily::new("c", "concat", CATCH_UP)
        .part("a,1\n")
        .tail(
            "\n[[coordinator]]\nname = \"daily\"\nviews = \"c.mart/Out/${YEAR}/${MONTH}/${DAY}\"\n\
             start = \"2015-01-01\"\nfrequency = \"1d\"\n",
        )
        .write(dir.path());
    // Killed at random points of its progress: sometimes before it has
    // done anything, mostly between and during runs. Odd rounds kill a
    // server, even ones an embedded `trellis coordinate`.
    let mut random = crate::support::Lcg::new(14);
    let mut kills = 0;
    while kills < 12 {
        let before = out_published(dir.path());
        if before == CATCH_UP {
            break;
        }
        let mut command = trellis();
        command.current_dir(dir.path()).env("TRELLIS_NOW", CATCH_UP_NOW);
        if kills % 2 == 1 {
            command.args(["serve", "--bind", "127.0.0.1:0"]);
        } else {
            command.args(["coordinate"]);
        }
        let mut child =
            command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        let target = before + random.below(6) as usize;
        let deadline = Instant::now() + Duration::from_secs(120);
        while out_published(dir.path()) < target.min(CATCH_UP) && child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "no progress before the deadline");
            std::thread::yield_now();
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
    }
    assert!(kills >= 10, "only {kills} kills before the catch-up ended; make it larger");

    // The last one runs to the end.
    let result = run(trellis().current_dir(dir.path()).env("TRELLIS_NOW", CATCH_UP_NOW).args(["coordinate"]));
    assert_eq!(result.code, 0, "{}\n{}", result.stdout, result.stderr);
    assert_eq!(out_published(dir.path()), CATCH_UP);

    let store = Metastore::open(&dir.path().join(".trellis/metastore")).unwrap();
    let actions = store.actions("daily", None, None).unwrap();
    assert_eq!(actions.len(), CATCH_UP, "one action per day, none lost, none twice");
    let mut runs = std::collections::HashSet::new();
    for (i, action) in actions.iter().enumerate() {
        let day = (first_day() + chrono::Days::new(i as u64)).and_hms_opt(0, 0, 0).unwrap().and_utc();
        assert_eq!(action.nominal, day.timestamp_millis());
        assert_eq!(action.state, trellis::model::ActionState::Succeeded, "{action:?}");
        // Never started twice: its one run, resumed under its id after
        // each kill, and no other.
        assert!(action.previous_runs.is_empty(), "{action:?}");
        let run = action.run.clone().expect("a succeeded action has its run");
        let record = store.run(&run).unwrap().expect("its run is recorded");
        assert_eq!(record.action, Some(("daily".to_string(), action.nominal)));
        assert!(runs.insert(run));
    }
    let linked = store.runs().unwrap().into_iter().filter(|run| run.action.is_some()).count();
    assert_eq!(linked, CATCH_UP, "every run an action started is that action's run");
}

/// An incremental monthly aggregate over daily files and its full twin.
fn write_incremental_project(dir: &Path) {
    let plugins = [("inc", "csv_aggregate_incremental"), ("full", "csv_aggregate")];
    let mut text = String::from("[project]\nname = \"k\"\nstorage = \"data\"\n\n[plugins]\n");
    for (name, file) in plugins {
        text.push_str(&format!("{name} = \"{}\"\n", crate::support::plugin_path(file).display()));
    }
    text.push_str(
        "\n[[view]]\nname = \"k.raw/Events\"\ntime = { frequency = \"1d\", initial = \"2015-01-01\" }\n\
         path = \"raw/${YEAR}/${MONTH}/${DAY}\"\n",
    );
    for (name, plugin, incremental) in [("Inc", "inc", "\nincremental = true"), ("Full", "full", "")] {
        text.push_str(&format!(
            "\n[[view]]\nname = \"k.mart/{name}\"\ntime = {{ frequency = \"1M\", initial = \"2015-01-01\" }}{incremental}\n\
             transformation = {{ plugin = \"{plugin}\", config = {{ aggregates = \"n=count(*),s=sum(v)\" }} }}\n\n\
             [[view.dependency]]\nview = \"k.raw/Events\"\ntime = \"all\"\n"
        ));
    }
    std::fs::write(dir.join("trellis.toml"), text).unwrap();
}

/// Delivers file number `n` (its own file in day `n % 28 + 1`, `n % 5 + 1`
/// rows of value 1) and writes the day's flag again; returns its rows.
fn deliver_file(dir: &Path, n: usize) -> usize {
    let day = dir.join(format!("data/raw/2015/01/{:02}", n % 28 + 1));
    std::fs::create_dir_all(&day).unwrap();
    let rows = n % 5 + 1;
    std::fs::write(day.join(format!("f{n}.csv")), format!("v\n{}", "1\n".repeat(rows))).unwrap();
    let _ = std::fs::remove_file(day.join("_SUCCESS"));
    std::fs::write(day.join("_SUCCESS"), "").unwrap();
    rows
}

/// The generation of the published marker.
fn published_generation(dir: &Path) -> u64 {
    let marker = std::fs::read(dir.join("data/k/mart/Inc/2015/01").join(trellis::scheduler::txlog::MARKER));
    marker
        .ok()
        .map_or(0, |bytes| serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["generation"].as_u64().unwrap())
}

/// The generation of the published marker, and of the metastore's log.
fn generations(dir: &Path) -> (u64, u64) {
    let published = published_generation(dir);
    let store = Metastore::open(&dir.join(".trellis/metastore")).unwrap();
    let logged = store.tx_head("k.mart/Inc/2015/01").unwrap().map_or(0, |head| head.generation);
    (published, logged)
}

#[test]
fn kill_9_at_random_moments_of_incremental_runs_reflects_each_input_file_once() {
    let dir = tempfile::tempdir().unwrap();
    write_incremental_project(dir.path());
    let materialize = |view: &str| {
        let mut command = trellis();
        command.current_dir(dir.path()).args(["materialize", "-v", view]);
        command
    };
    // Two uninterrupted runs (the first compiles the plugin into the
    // cache), the second to know how long a run takes.
    let mut rows = 0;
    let mut span = 0;
    for n in [0, 1] {
        rows += deliver_file(dir.path(), n);
        let started = Instant::now();
        let result = run(&mut materialize("k.mart/Inc/2015/01"));
        assert_eq!(result.code, 0, "{}", result.stderr);
        span = started.elapsed().as_micros() as u64;
    }

    // Each round delivers a file and kills a run at a moment drawn from
    // its whole span: before the manifest check, during the call, between
    // the publish and the log's commit, after it.
    let mut random = crate::support::Lcg::new(15);
    let (mut kills, mut moments) = (0, std::collections::BTreeMap::<&str, usize>::new());
    for n in 2..200 {
        if kills == 24 {
            break;
        }
        rows += deliver_file(dir.path(), n);
        let (before, _) = generations(dir.path());
        let mut child = materialize("k.mart/Inc/2015/01")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Odd rounds kill at a random moment of the run's span; even ones
        // the moment the new output is seen published, most often before
        // the log's commit (which waits for a flush).
        let kill_at = Instant::now() + Duration::from_micros(random.below(span));
        let deadline = Instant::now() + Duration::from_secs(120);
        let due = || match n % 2 {
            1 => Instant::now() >= kill_at,
            _ => published_generation(dir.path()) > before,
        };
        while !due() && child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the run neither published nor ended");
            std::thread::yield_now();
        }
        if child.try_wait().unwrap().is_some() {
            continue;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        let (published, logged) = generations(dir.path());
        let moment = match (published > before, published > logged) {
            (false, _) => "before the publish",
            (true, true) => "between the publish and the log's commit",
            (true, false) => "after the commit",
        };
        *moments.entry(moment).or_default() += 1;
    }
    assert!(kills >= 20, "only {kills} kills; the runs end too soon");
    eprintln!("kills by moment: {moments:?}");
    let between = moments.get("between the publish and the log's commit").copied().unwrap_or(0);
    assert!(between >= 1 && moments.len() >= 2, "the kills missed the moments that matter: {moments:?}");

    // The next runs converge: every file delivered counted once, as a
    // full recomputation counts it, and the log agrees with the output.
    let result = run(&mut materialize("k.mart/e(Inc,Full)/2015/01"));
    assert_eq!(result.code, 0, "{}\n{}", result.stdout, result.stderr);
    let read = |view: &str| std::fs::read_to_string(dir.path().join("data/k/mart").join(view).join("part-00000.csv"));
    let incremental = read("Inc/2015/01").unwrap();
    assert_eq!(incremental, format!("n,s\n{rows},{rows}\n"));
    assert_eq!(incremental, read("Full/2015/01").unwrap());
    let (published, logged) = generations(dir.path());
    assert_eq!(published, logged);
    // Each kill between the publish and the commit was reconciled at the next open.
    let store = Metastore::open(&dir.path().join(".trellis/metastore")).unwrap();
    let reconciled = store
        .events_from(0, usize::MAX)
        .unwrap()
        .iter()
        .filter(|e| e.event.txlog.as_ref().is_some_and(|change| change.kind == "reconcile"))
        .count();
    assert_eq!(reconciled, between);
    drop(store);
    let check = run(trellis().current_dir(dir.path()).args(["metastore", "check"]));
    assert_eq!(check.code, 0, "{}", check.stderr);
}
