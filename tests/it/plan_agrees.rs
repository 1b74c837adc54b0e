//! `plan` and `materialize` agree (issue 13, item 2): over generated small
//! lattices and generated changes (flags delivered, re-delivered with an
//! old mtime, removed; a type's configuration changed; views invalidated;
//! outputs deleted; some views materialized on their own), the views
//! `plan` says will transform are exactly those the next DEFAULT
//! `materialize` transforms. Real plugins (`trivial`), a real sled in a temp
//! dir, embedded and as a long-lived scheduler that remembers freshness
//! (a server's).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::sample::Index;
use trellis::catalog::Catalog;
use trellis::scheduler::{Mode, Scheduler, Verdict};

use crate::inprocess::{events, open};

/// The lattice's shape: external types, then transformed types, each
/// depending on some earlier types (the same day, or the day before), over
/// a few days; a sink over every type addresses the whole lattice.
#[derive(Debug, Clone)]
struct Shape {
    externals: usize,
    /// Per transformed type: (an earlier type, the day before).
    transformed: Vec<Vec<(Index, bool)>>,
    days: u32,
}

impl Shape {
    fn types(&self) -> usize {
        self.externals + self.transformed.len()
    }

    fn name(&self, index: usize) -> String {
        if index < self.externals { format!("g.raw/E{index}") } else { format!("g.mart/T{index}") }
    }

    /// The project, with `labels[t]` as transformed type t's configuration.
    fn project(&self, labels: &[u32]) -> String {
        let trivial = crate::support::plugin_path("trivial");
        let time = "time = { frequency = \"1d\", initial = \"2015-01-01\" }";
        let mut text = format!("[plugins]\ntrivial = \"{}\"\n", trivial.display());
        for index in 0..self.externals {
            text += &format!(
                "\n[[view]]\nname = \"{}\"\n{time}\npath = \"e{index}/${{YEAR}}/${{MONTH}}/${{DAY}}\"\n",
                self.name(index)
            );
        }
        for (offset, dependencies) in self.transformed.iter().enumerate() {
            let index = self.externals + offset;
            text += &format!(
                "\n[[view]]\nname = \"{}\"\n{time}\ntransformation = {{ plugin = \"trivial\", config = {{ label = \"L{}\" }} }}\n",
                self.name(index),
                labels[offset]
            );
            let mut seen = BTreeSet::new();
            for (dependency, before) in dependencies {
                let dependency = dependency.index(index);
                if seen.insert((dependency, *before)) {
                    let name = format!("d{dependency}{}", if *before { "p" } else { "" });
                    text +=
                        &format!("\n[[view.dependency]]\nname = \"{name}\"\nview = \"{}\"\n", self.name(dependency));
                    if *before {
                        text += "time = \"current(-1)\"\n";
                    }
                }
            }
        }
        text += &format!("\n[[view]]\nname = \"g.sink/All\"\n{time}\ntransformation = {{ plugin = \"trivial\" }}\n");
        for index in 0..self.types() {
            text += &format!("\n[[view.dependency]]\nview = \"{}\"\n", self.name(index));
        }
        text
    }

    fn sink(&self) -> String {
        format!("g.sink/All/rymd(20150101-201501{:02})", self.days)
    }
}

/// One change between two runs.
#[derive(Debug, Clone)]
enum Change {
    /// A done flag written (again) now.
    Deliver {
        external: Index,
        day: Index,
    },
    /// A done flag put in place as `cp -p` would: a new file with an old mtime.
    DeliverOld {
        external: Index,
        day: Index,
    },
    RemoveFlag {
        external: Index,
        day: Index,
    },
    /// A transformed type's configuration, so its version checksum, changes.
    Configure {
        transformed: Index,
    },
    Invalidate {
        view_type: Index,
        day: Index,
        dependencies: bool,
    },
    /// A transformed view's published data directory deleted.
    DeleteOutput {
        transformed: Index,
        day: Index,
    },
    /// One view materialized on its own (not compared): a lattice partly
    /// rebuilt, partly not.
    MaterializeOne {
        view_type: Index,
        day: Index,
    },
}

fn shape() -> impl Strategy<Value = Shape> {
    let dependencies = prop::collection::vec((any::<Index>(), any::<bool>()), 0..=3);
    (1..=3usize, prop::collection::vec(dependencies, 1..=4), 1..=3u32)
        .prop_map(|(externals, transformed, days)| Shape { externals, transformed, days })
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (any::<Index>(), any::<Index>()).prop_map(|(external, day)| Change::Deliver { external, day }),
        (any::<Index>(), any::<Index>()).prop_map(|(external, day)| Change::DeliverOld { external, day }),
        (any::<Index>(), any::<Index>()).prop_map(|(external, day)| Change::RemoveFlag { external, day }),
        any::<Index>().prop_map(|transformed| Change::Configure { transformed }),
        (any::<Index>(), any::<Index>(), any::<bool>()).prop_map(|(view_type, day, dependencies)| Change::Invalidate {
            view_type,
            day,
            dependencies
        }),
        (any::<Index>(), any::<Index>()).prop_map(|(transformed, day)| Change::DeleteOutput { transformed, day }),
        (any::<Index>(), any::<Index>()).prop_map(|(view_type, day)| Change::MaterializeOne { view_type, day }),
    ]
}

/// A generated case: the shape, which flags exist at first, the changes,
/// and whether the scheduler remembers freshness between runs.
fn case() -> impl Strategy<Value = (Shape, Vec<bool>, Vec<Change>, bool)> {
    (shape(), prop::collection::vec(any::<bool>(), 9), prop::collection::vec(change(), 1..=4), any::<bool>())
}

struct Lab {
    dir: tempfile::TempDir,
    shape: Shape,
    labels: Vec<u32>,
    remember: bool,
}

impl Lab {
    fn catalog(&self) -> Arc<Catalog> {
        let text = self.shape.project(&self.labels);
        Arc::new(trellis::catalog::parse(&text, self.dir.path()).unwrap_or_else(|e| panic!("{e}\n{text}")))
    }

    async fn open(&self) -> Scheduler {
        let mut scheduler = open(&self.catalog()).await;
        if self.remember {
            scheduler.remember_freshness();
        }
        scheduler
    }

    fn day(&self, day: &Index) -> u32 {
        day.index(self.shape.days as usize) as u32 + 1
    }

    fn view(&self, view_type: usize, day: u32) -> String {
        format!("{}/2015/01/{day:02}", self.shape.name(view_type))
    }

    fn flag(&self, external: usize, day: u32) -> PathBuf {
        self.dir.path().join(format!("data/e{external}/2015/01/{day:02}/_SUCCESS"))
    }

    fn write_flag(&self, external: usize, day: u32, old: bool) {
        let flag = self.flag(external, day);
        std::fs::create_dir_all(flag.parent().unwrap()).unwrap();
        let fresh = flag.with_extension("new");
        std::fs::write(&fresh, "").unwrap();
        if old {
            let noon = UNIX_EPOCH + Duration::from_secs(1_420_113_600);
            std::fs::File::options().write(true).open(&fresh).unwrap().set_modified(noon).unwrap();
        }
        std::fs::rename(&fresh, &flag).unwrap();
    }
}

/// What `plan` says will transform (with why), what the next DEFAULT run
/// transformed.
async fn plan_and_run(scheduler: &mut Scheduler, pattern: &str) -> (BTreeSet<(String, String)>, BTreeSet<String>) {
    let plan = scheduler.plan(pattern).unwrap_or_else(|e| panic!("plan {pattern}: {e}"));
    let planned = plan
        .into_iter()
        .filter_map(|(view, verdict)| match verdict {
            Verdict::Transform(outdated) => Some((view, outdated.to_string())),
            _ => None,
        })
        .collect();
    let run = scheduler.materialize(pattern, Mode::Default).await.unwrap_or_else(|e| panic!("materialize: {e}"));
    let store = scheduler.metastore();
    let transformed = events(&store)
        .into_iter()
        .filter(|e| e.event.run_id.as_deref() == Some(run.id.as_str()))
        .filter(|e| e.event.actions.iter().any(|a| a == "record-materialized"))
        .map(|e| e.event.view.to_string())
        .collect();
    (planned, transformed)
}

/// The views of `planned`, without the reasons.
fn views(planned: &BTreeSet<(String, String)>) -> BTreeSet<String> {
    planned.iter().map(|(view, _)| view.clone()).collect()
}

/// A temp dir in memory where there is one: every commit is flushed, and
/// 200 cases of a few runs each make many.
fn temp_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().unwrap()
}

async fn check(shape: Shape, flags: Vec<bool>, changes: Vec<Change>, remember: bool) -> Result<(), TestCaseError> {
    let labels = vec![0; shape.transformed.len()];
    let mut lab = Lab { dir: temp_dir(), shape, labels, remember };
    for external in 0..lab.shape.externals {
        for day in 1..=lab.shape.days {
            if flags[external * 3 + day as usize - 1] {
                lab.write_flag(external, day, false);
            }
        }
    }
    let sink = lab.shape.sink();
    let mut scheduler = lab.open().await;
    let (planned, transformed) = plan_and_run(&mut scheduler, &sink).await;
    prop_assert_eq!(views(&planned), transformed, "the first run; plan: {:?}", planned);
    for (step, change) in changes.iter().enumerate() {
        match change {
            Change::Deliver { external, day } => {
                lab.write_flag(external.index(lab.shape.externals), lab.day(day), false)
            }
            Change::DeliverOld { external, day } => {
                lab.write_flag(external.index(lab.shape.externals), lab.day(day), true)
            }
            Change::RemoveFlag { external, day } => {
                let _ = std::fs::remove_file(lab.flag(external.index(lab.shape.externals), lab.day(day)));
            }
            Change::Configure { transformed } => {
                lab.labels[transformed.index(lab.shape.transformed.len())] += 1;
                // sled admits one opener: the old scheduler closes first.
                drop(scheduler);
                scheduler = lab.open().await;
            }
            Change::Invalidate { view_type, day, dependencies } => {
                let view = lab.view(view_type.index(lab.shape.types()), lab.day(day));
                scheduler.invalidate(&view, *dependencies, |_| false).unwrap();
            }
            Change::DeleteOutput { transformed, day } => {
                let index = lab.shape.externals + transformed.index(lab.shape.transformed.len());
                let view = lab.view(index, lab.day(day));
                let _ = std::fs::remove_dir_all(lab.dir.path().join("data").join(view.replacen('.', "/", 1)));
            }
            Change::MaterializeOne { view_type, day } => {
                let view = lab.view(view_type.index(lab.shape.types()), lab.day(day));
                scheduler.materialize(&view, Mode::Default).await.unwrap();
            }
        }
        let (planned, transformed) = plan_and_run(&mut scheduler, &sink).await;
        prop_assert_eq!(views(&planned), transformed, "after step {} ({:?}); plan: {:?}", step, change, planned);
    }
    Ok(())
}

#[test]
fn plan_says_what_materialize_transforms() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let config = ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner
        .run(&case(), |(shape, flags, changes, remember)| runtime.block_on(check(shape, flags, changes, remember)));
    if let Err(error) = result {
        panic!("{error}");
    }
}
