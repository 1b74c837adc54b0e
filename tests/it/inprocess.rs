//! What the in-process tests (`scheduler.rs`, `api.rs`) share: a small
//! project on real plugins in a temp dir, a scheduler opened on it through
//! the library, and waits on the metastore's commits rather than on time.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::Arc;

use trellis::catalog::Catalog;
use trellis::metastore::{LoggedEvent, Metastore, RunRecord};
use trellis::plugins::Plugins;
use trellis::scheduler::Scheduler;

use crate::support::{plugin_path, runtime};

/// How long a wait on the scheduler may take before the test fails rather
/// than hangs. It bounds a wait; it never decides its outcome.
const LIMIT: Duration = Duration::from_secs(120);

/// The project: daily external data `t.raw/In`; `t.mart/Daily` from it
/// (configuration `label`, which is its version checksum's only variable);
/// `t.mart/Summary`, a roll-up of three days of Daily; `t.bad/Broken`, whose
/// plugin panics, and `t.bad/Above` over it; `t.gate/Held`, whose
/// transformation waits for a `GO` file in its input (`open_gate`).
const PROJECT: &str = r#"
[project]
name = "inprocess"

[defaults]
retries = 1
concurrency = 2

[plugins]
trivial = { file = "TRIVIAL", deadline = "600s" }
panic = "PANIC"

[[view]]
name = "t.raw/In"
time = { frequency = "1d", initial = "2015-01-01" }
path = "raw/${YEAR}/${MONTH}/${DAY}"

[[view]]
name = "t.mart/Daily"
time = { frequency = "1d", initial = "2015-01-01" }
transformation = { plugin = "trivial", config = { label = "LABEL" } }

[[view.dependency]]
view = "t.raw/In"

[[view]]
name = "t.mart/Summary"
time = { frequency = "3d", initial = "2015-01-01" }
transformation = { plugin = "trivial" }

[[view.dependency]]
view = "t.mart/Daily"
time = "all"

[[view]]
name = "t.bad/Broken"
time = { frequency = "1d", initial = "2015-01-01" }
transformation = { plugin = "panic" }

[[view.dependency]]
view = "t.raw/In"

[[view]]
name = "t.bad/Above"
time = { frequency = "1d", initial = "2015-01-01" }
transformation = { plugin = "trivial" }

[[view.dependency]]
view = "t.bad/Broken"

[[view]]
name = "t.gate/Held"
time = { frequency = "1d", initial = "2015-01-01" }
transformation = { plugin = "trivial", config = { gate = "GO" } }

[[view.dependency]]
view = "t.raw/In"
"#;

/// The summary over the first three days and everything below it.
pub const SUMMARY: &str = "t.mart/Summary/2015/01/01";

/// A project in a temp dir, removed with it.
pub struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    /// A project whose external data has been delivered for `days` of
    /// January 2015.
    pub fn new(days: &[u32]) -> Project {
        let project = Project { dir: tempfile::tempdir().expect("a temp dir") };
        for &day in days {
            project.deliver(day);
        }
        project
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The catalog, with `label` as Daily's configuration.
    pub fn catalog(&self, label: &str) -> Arc<Catalog> {
        self.catalog_with(label, "")
    }

    /// The catalog with `more` (coordinators, say) after the project's text.
    pub fn catalog_with(&self, label: &str, more: &str) -> Arc<Catalog> {
        let text = format!("{PROJECT}\n{more}")
            .replace("TRIVIAL", &plugin_path("trivial").display().to_string())
            .replace("PANIC", &plugin_path("hostile_panic").display().to_string())
            .replace("LABEL", label);
        Arc::new(trellis::catalog::parse(&text, self.root()).unwrap_or_else(|e| panic!("the project is valid: {e}")))
    }

    /// The catalog with `more`, its views' data in `bucket` on the moto
    /// server (under `data/`, as a local project's is), polled every 100ms.
    pub fn catalog_on_s3(&self, label: &str, more: &str, bucket: &str) -> Arc<Catalog> {
        let endpoint = &crate::moto::moto().endpoint;
        let project = format!(
            "[project]\nname = \"inprocess\"\nstorage = \"s3://{bucket}/data\"\n\n[project.s3]\nendpoint = \"{endpoint}\"\npoll_interval = \"100ms\"\n"
        );
        let text = format!("{PROJECT}\n{more}")
            .replace("[project]\nname = \"inprocess\"\n", &project)
            .replace("TRIVIAL", &plugin_path("trivial").display().to_string())
            .replace("PANIC", &plugin_path("hostile_panic").display().to_string())
            .replace("LABEL", label);
        Arc::new(trellis::catalog::parse(&text, self.root()).unwrap_or_else(|e| panic!("the project is valid: {e}")))
    }

    /// A view's data directory, by URL path (every type but In uses the
    /// default path: the name with dots as directories, then the time).
    pub fn data(&self, view: &str) -> PathBuf {
        let path = match view.strip_prefix("t.raw/In/") {
            Some(time) => format!("raw/{time}"),
            None => view.replacen('.', "/", 1),
        };
        self.root().join("data").join(path)
    }

    /// Delivers a day of external data: its done flag, dated at noon of
    /// that day in 2015, so that every timestamp the scheduler records
    /// later is newer.
    pub fn deliver(&self, day: u32) {
        let noon = UNIX_EPOCH + Duration::from_secs(1_420_070_400 + u64::from(day - 1) * 86_400 + 43_200);
        self.flag(day, noon);
    }

    /// Delivers a day again: a new done flag, newer than `than` (a
    /// recorded timestamp) and not in the future.
    pub fn redeliver(&self, day: u32, than: i64) {
        let now = clock_past(than);
        self.flag(day, UNIX_EPOCH + Duration::from_millis(now as u64));
    }

    /// Writes a day's done flag with that modification time, set rather
    /// than left to the file system, whose clock may lag the wall clock by
    /// a few milliseconds.
    fn flag(&self, day: u32, modified: SystemTime) {
        let dir = self.data(&format!("t.raw/In/2015/01/{day:02}"));
        std::fs::create_dir_all(&dir).expect("the data directory is created");
        let flag = std::fs::File::create(dir.join("_SUCCESS")).expect("the done flag is written");
        flag.set_modified(modified).expect("the done flag's time is set");
    }

    /// Lets `t.gate/Held` of that day finish.
    pub fn open_gate(&self, day: u32) {
        let dir = self.data(&format!("t.raw/In/2015/01/{day:02}"));
        std::fs::write(dir.join("GO"), "").expect("the gate file is written");
    }
}

/// Loads the catalog's plugins and opens a scheduler on it, as `trellis
/// materialize` does (without listeners).
pub async fn open(catalog: &Arc<Catalog>) -> Scheduler {
    let plugins = Arc::new(Plugins::load(runtime(), catalog).await);
    Scheduler::open(catalog.clone(), plugins).await.unwrap_or_else(|e| panic!("the scheduler opens: {e}"))
}

pub fn now_millis() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970").as_millis() as i64
}

/// The wall clock once it is past `millis`. Timestamps are milliseconds:
/// a change made in the millisecond of the record it should outdate would
/// not be newer than it. Spins for at most about a millisecond.
pub fn clock_past(millis: i64) -> i64 {
    loop {
        let now = now_millis();
        if now > millis {
            return now;
        }
        std::hint::spin_loop();
    }
}

/// Waits, commit by commit, until `found` finds something in the metastore.
pub async fn committed<T>(store: &Metastore, what: &str, mut found: impl FnMut(&Metastore) -> Option<T>) -> T {
    // Subscribed before the first look: a commit in between is not missed.
    let mut commits = store.subscribe();
    let wait = async {
        loop {
            if let Some(value) = found(store) {
                return value;
            }
            commits.changed().await.expect("the metastore is open");
        }
    };
    tokio::time::timeout(LIMIT, wait).await.unwrap_or_else(|_| panic!("waited {LIMIT:?} for {what}"))
}

/// A run's record once it has finished.
pub async fn finished(store: &Metastore, run: &str) -> RunRecord {
    committed(store, &format!("run {run} to finish"), |store| {
        store.run(run).expect("the metastore reads").filter(|record| record.termination.is_some())
    })
    .await
}

/// Every event of the log.
pub fn events(store: &Metastore) -> Vec<LoggedEvent> {
    store.events_from(0, usize::MAX).expect("the metastore reads")
}

/// Waits until `view` has been logged entering `state`: once committed,
/// the scheduler holds it in that state for every request after.
pub async fn logged(store: &Metastore, view: &str, state: trellis::model::ViewState) -> LoggedEvent {
    committed(store, &format!("{view} to be {state}"), |store| {
        events(store).into_iter().find(|e| &*e.event.view == view && e.event.current == state)
    })
    .await
}
