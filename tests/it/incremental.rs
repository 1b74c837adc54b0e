//! Incremental views in process: real plugins (`csv-aggregate-incremental`
//! beside `csv-aggregate` over the same inputs, a plugin built against
//! contract 1.0.0, one that commits offsets of its own), a real metastore,
//! real files. The property: whatever is delivered, delivered again,
//! rewritten or deleted, the incremental view holds what a full
//! recomputation holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use trellis::catalog::Catalog;
use trellis::metastore::{CommitType, LoggedEvent};
use trellis::model::ViewState;
use trellis::scheduler::{Increment, Mode, Scheduler, Verdict};

use crate::inprocess::{events, open};
use crate::support::plugin_path;

/// Daily external events; their monthly aggregate computed incrementally
/// (`t.mart/Inc`) and in full (`t.mart/Full`); the same incremental
/// declaration over a plugin built against 1.0.0 (`t.mart/Legacy`); and a
/// log read from offsets the plugin keeps (`t.log/Lines`).
const PROJECT: &str = r#"
[project]
name = "inc"

[plugins]
inc = "INC"
full = "FULL"
legacy = "LEGACY"
offsets = "OFFSETS"

[[view]]
name = "t.raw/Events"
time = { frequency = "1d", initial = "2015-01-01" }
path = "raw/${YEAR}/${MONTH}/${DAY}"

[[view]]
name = "t.mart/Inc"
FIELDS
time = { frequency = "1M", initial = "2015-01-01" }
incremental = true
transformation = { plugin = "inc", config = { group-by = "k", aggregates = "AGGREGATES" } }

[[view.dependency]]
view = "t.raw/Events"
time = "all"

[[view]]
name = "t.mart/Full"
time = { frequency = "1M", initial = "2015-01-01" }
transformation = { plugin = "full", config = { group-by = "k", aggregates = "AGGREGATES" } }

[[view.dependency]]
view = "t.raw/Events"
time = "all"

[[view]]
name = "t.mart/Legacy"
time = { frequency = "1M", initial = "2015-01-01" }
incremental = true
transformation = { plugin = "legacy" }

[[view.dependency]]
view = "t.raw/Events"
time = "all"

[[view]]
name = "t.raw/Log"
path = "log"

[[view]]
name = "t.log/Lines"
incremental = true
transformation = { plugin = "offsets" }

[[view.dependency]]
view = "t.raw/Log"
"#;

const AGGREGATES: &str = "n=count(*),s=sum(v),lo=min(v),hi=max(v)";
const INC: &str = "t.mart/Inc/2015/01";
const FULL: &str = "t.mart/Full/2015/01";

/// A project in a temp dir, with a clock of its own for the files it
/// writes: every write gets a later modification time, set rather than
/// left to the file system's coarse clock.
struct Lab {
    dir: tempfile::TempDir,
    tick: std::cell::Cell<u64>,
}

impl Lab {
    fn new() -> Lab {
        Lab { dir: tempfile::tempdir().unwrap(), tick: std::cell::Cell::new(0) }
    }

    fn catalog(&self) -> Arc<Catalog> {
        self.catalog_with(AGGREGATES, "")
    }

    /// The catalog with other aggregates (another version of Inc's logic)
    /// or more `fields` (another schema).
    fn catalog_with(&self, aggregates: &str, fields: &str) -> Arc<Catalog> {
        let text = PROJECT
            .replace("INC", &plugin_path("csv_aggregate_incremental").display().to_string())
            .replace("FULL", &plugin_path("csv_aggregate").display().to_string())
            .replace("LEGACY", &plugin_path("fixture_legacy_v1").display().to_string())
            .replace("OFFSETS", &plugin_path("fixture_line_offsets").display().to_string())
            .replace("AGGREGATES", aggregates)
            .replace("FIELDS", fields);
        Arc::new(trellis::catalog::parse(&text, self.dir.path()).unwrap_or_else(|e| panic!("a valid project: {e}")))
    }

    fn day(&self, day: u32) -> PathBuf {
        self.dir.path().join(format!("data/raw/2015/01/{day:02}"))
    }

    fn next_time(&self) -> std::time::SystemTime {
        self.tick.set(self.tick.get() + 1);
        UNIX_EPOCH + Duration::from_secs(1_420_070_400) + Duration::from_millis(self.tick.get())
    }

    /// Writes (or replaces, by rename, as a delivery does) a file of a day.
    fn write(&self, dir: &Path, name: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        let temporary = dir.join(format!(".{name}.part"));
        std::fs::write(&temporary, text).unwrap();
        std::fs::File::options().write(true).open(&temporary).unwrap().set_modified(self.next_time()).unwrap();
        std::fs::rename(&temporary, dir.join(name)).unwrap();
    }

    /// A day's done flag written anew: the day is (re)delivered.
    fn flag(&self, dir: &Path) {
        let flag = dir.join("_SUCCESS");
        let _ = std::fs::remove_file(&flag);
        std::fs::create_dir_all(dir).unwrap();
        std::fs::File::create(&flag).unwrap().set_modified(self.next_time()).unwrap();
    }

    fn deliver(&self, day: u32, name: &str, rows: &[(&str, i64)]) {
        let mut text = String::from("k,v\n");
        for (key, cents) in rows {
            text.push_str(&format!("{key},{}.{:02}\n", cents / 100, (cents % 100).abs()));
        }
        let dir = self.day(day);
        self.write(&dir, name, &text);
        self.flag(&dir);
    }

    fn output(&self, view: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join("data").join(view.replacen('.', "/", 1)).join("part-00000.csv"))
            .ok()
    }
}

/// Materializes both aggregates and returns Inc's state and output, then Full's.
async fn both(scheduler: &mut Scheduler, lab: &Lab) -> [(ViewState, Option<String>); 2] {
    let mut found = Vec::new();
    for view in [INC, FULL] {
        let summary = scheduler.materialize(view, Mode::Default).await.unwrap();
        assert!(summary.failures.is_empty(), "{view}: {:?}", summary.failures);
        let state = scheduler.metastore().view(view).unwrap().map_or(ViewState::Receive, |record| record.state);
        found.push((state, (state == ViewState::Materialized).then(|| lab.output(view)).flatten()));
    }
    [found[0].clone(), found[1].clone()]
}

/// The log's changes of a view, from the event log.
fn txlog_events(events: &[LoggedEvent], view: &str) -> Vec<trellis::metastore::TxLogChange> {
    events.iter().filter(|e| &*e.event.view == view).filter_map(|e| e.event.txlog.clone()).collect()
}

#[derive(Debug, Clone)]
enum Change {
    /// A file of a day written (new, or replacing one) and its flag.
    Deliver { day: u32, file: usize, rows: Vec<(bool, i64)> },
    /// A day's flag written again, its files unchanged.
    Redeliver { day: u32 },
    /// A file of a day removed, and its flag written again.
    DeleteFile { day: u32, file: usize },
    /// A whole day gone.
    DeleteDay { day: u32 },
}

fn change() -> impl Strategy<Value = Change> {
    let day = 1u32..=4;
    let file = 0usize..3;
    let rows = prop::collection::vec((any::<bool>(), -5000i64..5000), 0..4);
    prop_oneof![
        4 => (day.clone(), file.clone(), rows).prop_map(|(day, file, rows)| Change::Deliver { day, file, rows }),
        2 => day.clone().prop_map(|day| Change::Redeliver { day }),
        1 => (day.clone(), file).prop_map(|(day, file)| Change::DeleteFile { day, file }),
        1 => day.prop_map(|day| Change::DeleteDay { day }),
    ]
}

const FILES: [&str; 3] = ["a.csv", "b.csv", "c.csv"];

async fn check(changes: Vec<Change>) -> Result<(), TestCaseError> {
    let lab = Lab::new();
    let mut scheduler = open(&lab.catalog()).await;
    for (step, change) in changes.iter().enumerate() {
        match change {
            Change::Deliver { day, file, rows } => {
                let rows: Vec<(&str, i64)> = rows.iter().map(|(x, v)| (if *x { "x" } else { "y" }, *v)).collect();
                lab.deliver(*day, FILES[*file], &rows);
            }
            Change::Redeliver { day } => {
                if lab.day(*day).exists() {
                    lab.flag(&lab.day(*day));
                }
            }
            Change::DeleteFile { day, file } => {
                let path = lab.day(*day).join(FILES[*file]);
                if path.exists() {
                    std::fs::remove_file(path).unwrap();
                    lab.flag(&lab.day(*day));
                }
            }
            Change::DeleteDay { day } => {
                let _ = std::fs::remove_dir_all(lab.day(*day));
            }
        }
        let [incremental, full] = both(&mut scheduler, &lab).await;
        prop_assert_eq!(&incremental, &full, "after step {} ({:?}) of {:?}", step, change, changes);
    }
    let commits = txlog_events(&events(&scheduler.metastore()), INC);
    MERGED.fetch_add(commits.iter().filter(|c| c.full.is_none()).count(), Ordering::Relaxed);
    Ok(())
}

/// Commits that merged into a previous output, over all cases: the
/// property is worth little if every run read everything.
static MERGED: AtomicUsize = AtomicUsize::new(0);

#[test]
fn incremental_results_equal_a_full_recomputation() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let config = ProptestConfig { cases: 100, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&prop::collection::vec(change(), 1..7), |changes| runtime.block_on(check(changes)));
    if let Err(error) = result {
        panic!("{error}");
    }
    let merged = MERGED.load(Ordering::Relaxed);
    assert!(merged >= 50, "only {merged} commits merged into a previous output");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_day_is_read_alone_and_a_redelivery_costs_only_the_manifest_check() {
    let lab = Lab::new();
    for day in 1..=3 {
        lab.deliver(day, "a.csv", &[("x", 100 * i64::from(day))]);
    }
    let mut scheduler = open(&lab.catalog()).await;
    let first = scheduler.materialize(INC, Mode::Default).await.unwrap();
    assert_eq!(first.failures, []);
    lab.deliver(4, "a.csv", &[("x", 400), ("y", 1)]);
    let plan = scheduler.plan(INC).unwrap();
    let verdict = &plan.iter().find(|(view, _)| view == INC).unwrap().1;
    let Verdict::Transform(outdated) = verdict else { panic!("{verdict:?}") };
    assert_eq!(outdated.increment, Some(Increment::NewFiles(1)), "{verdict:?}");
    let second = scheduler.materialize(INC, Mode::Default).await.unwrap();
    assert_eq!(second.failures, []);
    assert_eq!(lab.output(INC).unwrap(), "k,n,s,lo,hi\nx,4,10,1,4\ny,1,0.01,0.01,0.01\n");
    // What the transformation read: the new day's file alone, merged.
    let flows = scheduler.metastore().flow_records(&second.id).unwrap();
    let (_, flow) = flows.iter().find(|(view, _)| view == INC).unwrap();
    assert_eq!(flow.counters.as_ref().unwrap()["files"], 1, "{flow:?}");

    // Delivered again, files unchanged: the view is transformed (its input
    // is newer) but reads nothing and merges nothing.
    lab.flag(&lab.day(2));
    let third = scheduler.materialize(INC, Mode::Default).await.unwrap();
    let flows = scheduler.metastore().flow_records(&third.id).unwrap();
    let (_, flow) = flows.iter().find(|(view, _)| view == INC).unwrap();
    assert_eq!(flow.counters.as_ref().unwrap()["files"], 0, "{flow:?}");
    assert_eq!(lab.output(INC).unwrap(), "k,n,s,lo,hi\nx,4,10,1,4\ny,1,0.01,0.01,0.01\n");

    let changes = txlog_events(&events(&scheduler.metastore()), INC);
    let summary: Vec<(String, u64, usize, Option<String>)> =
        changes.iter().map(|c| (c.kind.clone(), c.generation, c.new_files, c.full.clone())).collect();
    assert_eq!(
        summary,
        [
            ("commit".into(), 1, 3, Some("first run".into())),
            ("commit".into(), 2, 1, None),
            ("commit".into(), 3, 0, None)
        ]
    );
    let log = scheduler.txlog(Some(INC)).unwrap();
    assert_eq!(log.len(), 1);
    assert!(log[0].incremental);
    assert_eq!(log[0].head.as_ref().unwrap().generation, 3);
    let entries: Vec<(&str, &str, CommitType, bool)> =
        log[0].entries.iter().map(|e| (e.source.as_str(), e.path.as_str(), e.commit_type, e.enabled)).collect();
    assert_eq!(
        entries,
        [
            ("events", "raw/2015/01/01", CommitType::Manifest, true),
            ("events", "raw/2015/01/02", CommitType::Manifest, true),
            ("events", "raw/2015/01/03", CommitType::Manifest, true),
            ("events", "raw/2015/01/04", CommitType::Manifest, true),
        ]
    );
    assert!(log[0].entries.iter().all(|e| e.project == "inc" && e.generation == 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_invalidation_and_version_or_schema_changes_read_everything_again() {
    let lab = Lab::new();
    lab.deliver(1, "a.csv", &[("x", 100)]);
    let mut scheduler = open(&lab.catalog()).await;
    scheduler.materialize(INC, Mode::Default).await.unwrap();

    // A reset: refused while the run in progress has settled the view.
    let refused = scheduler.reset_txlog(INC, None, |_| true).unwrap();
    assert_eq!(refused.reset, Vec::<String>::new());
    assert_eq!(refused.refused.len(), 1, "{refused:?}");
    let unknown = scheduler.reset_txlog(INC, Some("orders"), |_| false).unwrap_err();
    assert_eq!(
        unknown.to_string(),
        "t.mart/Inc reads no source `orders` incrementally (its incremental sources: events)"
    );
    let done = scheduler.reset_txlog(INC, None, |_| false).unwrap();
    assert_eq!(done.reset, [INC]);
    let log = scheduler.txlog(Some(INC)).unwrap();
    assert!(log[0].entries.iter().all(|e| !e.enabled), "{log:?}");
    lab.deliver(2, "a.csv", &[("x", 200)]);
    scheduler.materialize(INC, Mode::Default).await.unwrap();
    assert_eq!(lab.output(INC).unwrap(), "k,n,s,lo,hi\nx,2,3,1,2\n");
    let log = scheduler.txlog(Some(INC)).unwrap();
    assert!(log[0].entries.iter().all(|e| e.enabled), "{log:?}");

    // Invalidated: rebuilt from nothing.
    let invalidated = scheduler.invalidate(INC, false, |_| false).unwrap();
    assert_eq!(invalidated.invalidated, [INC]);
    scheduler.materialize(INC, Mode::Default).await.unwrap();

    // A full refresh.
    scheduler.materialize_until(INC, Mode::Default, true, std::future::pending()).await.unwrap();
    drop(scheduler);

    // Another version of the logic (the aggregates), then another schema.
    let mut scheduler = open(&lab.catalog_with("n=count(*),s=sum(v)", "")).await;
    scheduler.materialize(INC, Mode::Default).await.unwrap();
    assert_eq!(lab.output(INC).unwrap(), "k,n,s\nx,2,3\n");
    drop(scheduler);
    let fields = r#"fields = [{ name = "k", type = "string" }]"#;
    let mut scheduler = open(&lab.catalog_with("n=count(*),s=sum(v)", fields)).await;
    scheduler.materialize(INC, Mode::Default).await.unwrap();

    let changes = txlog_events(&events(&scheduler.metastore()), INC);
    let kinds: Vec<(String, Option<String>)> = changes.iter().map(|c| (c.kind.clone(), c.full.clone())).collect();
    assert_eq!(
        kinds,
        [
            ("commit".into(), Some("first run".into())),
            ("reset".into(), None),
            ("commit".into(), Some("reset".into())),
            ("reset".into(), None),
            ("commit".into(), Some("reset".into())),
            ("commit".into(), Some("full refresh".into())),
            ("commit".into(), Some("version changed".into())),
            ("commit".into(), Some("schema changed".into())),
        ]
    );
    assert_eq!(lab.output(INC).unwrap(), "k,n,s\nx,2,3\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_built_against_1_0_runs_beside_an_incremental_one_and_is_rebuilt_whole() {
    let lab = Lab::new();
    lab.deliver(1, "a.csv", &[("x", 100)]);
    lab.deliver(2, "a.csv", &[("x", 100)]);
    let catalog = lab.catalog();
    let plugins = trellis::plugins::Plugins::load(crate::support::runtime(), &catalog).await;
    let warning = plugins.warnings.iter().map(|w| w.message.as_str()).find(|w| w.contains("t.mart/Legacy"));
    assert_eq!(
        warning,
        Some(
            "view type t.mart/Legacy: `incremental = true`, but legacy does not export transform-incremental \
             (contract 1.1.0); it is rebuilt whole each time"
        )
    );
    let mut scheduler = open(&catalog).await;
    let summary = scheduler.materialize("t.mart/e(Legacy,Inc)/2015/01", Mode::Default).await.unwrap();
    assert_eq!(summary.failures, []);
    let legacy = lab.dir.path().join("data/t/mart/Legacy/2015/01");
    assert_eq!(std::fs::read_to_string(legacy.join("files")).unwrap(), "2\n");
    assert!(!legacy.join(trellis::scheduler::txlog::MARKER).exists(), "a plugin that cannot merge keeps no log");
    let log = scheduler.txlog(Some("t.mart/Legacy/2015/01")).unwrap();
    assert_eq!((log[0].incremental, log[0].head.is_none()), (false, true));
    assert_eq!(scheduler.txlog(Some(INC)).unwrap()[0].head.as_ref().unwrap().generation, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_keeps_its_own_offsets_reads_each_line_once() {
    let lab = Lab::new();
    let log = lab.dir.path().join("data/log");
    lab.write(&log, "events.log", "one\ntwo\nthree\n");
    lab.flag(&log);
    let mut scheduler = open(&lab.catalog()).await;
    scheduler.materialize("t.log/Lines", Mode::Default).await.unwrap();
    let count = || std::fs::read_to_string(lab.dir.path().join("data/t/log/Lines/count")).unwrap();
    assert_eq!(count(), "3\n");
    // Appended to, and a line half written: only whole new lines count.
    lab.write(&log, "events.log", "one\ntwo\nthree\nfour\nfive\nsix-in-prog");
    lab.flag(&log);
    scheduler.materialize("t.log/Lines", Mode::Default).await.unwrap();
    assert_eq!(count(), "5\n");
    let entries = &scheduler.txlog(Some("t.log/Lines")).unwrap()[0].entries;
    let committed: Vec<(&str, CommitType)> = entries.iter().map(|e| (e.commit_id.as_str(), e.commit_type)).collect();
    // Its offset: the bytes of the five whole lines.
    assert_eq!(committed, [("24", CommitType::Plugin)]);
}
