//! Two `trellis serve` processes on one bucket by mistake (two project
//! directories, two metastores, one `storage = "s3://..."`), asked to
//! materialize the same views at once: each view is committed whole by one
//! of them; a server whose commit is beaten says so in one line, does not
//! retry (which would transform the view again over the winner's version),
//! and leaves nothing of the version it withdrew.

use std::path::Path;

use futures_util::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;
use trellis::metastore::Metastore;

use crate::moto::{ENVIRONMENT, moto, move_to_bucket};
use crate::support::{Daily, Server, run, trellis};

const DAYS: usize = 40;
const PATTERN: &str = "w.mart/Out/rymd(20150101-20150209)";

/// Each day's `Out`: its URL path and its data's key in the bucket.
fn views() -> Vec<(String, String)> {
    let first = chrono::NaiveDate::from_ymd_opt(2015, 1, 1).unwrap();
    (0..DAYS as u64)
        .map(|i| {
            let day = (first + chrono::Days::new(i)).format("%Y/%m/%d");
            (format!("w.mart/Out/{day}"), format!("data/w/mart/Out/{day}"))
        })
        .collect()
}

/// How often each view was transformed, by the events of a server's metastore.
fn transformed(project: &Path) -> std::collections::HashMap<String, usize> {
    let store = Metastore::open(&project.join(".trellis/metastore")).unwrap();
    let mut counts = std::collections::HashMap::new();
    for event in store.events_from(0, usize::MAX).unwrap() {
        if event.event.actions.iter().any(|a| a == "transform") {
            *counts.entry(event.event.view.to_string()).or_default() += 1;
        }
    }
    counts
}

#[test]
fn two_servers_on_one_bucket_commit_each_view_once_and_the_loser_says_so() {
    let moto = moto();
    let bucket = moto.bucket(false);
    let client = moto.client(&bucket);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    Daily::new("w", "concat", DAYS).concurrency(2).part("v\n1\n").write(&a);
    move_to_bucket(&a, &bucket);
    std::fs::create_dir_all(b.join("plugins")).unwrap();
    std::fs::copy(a.join("trellis.toml"), b.join("trellis.toml")).unwrap();
    std::fs::copy(a.join("plugins/concat.wasm"), b.join("plugins/concat.wasm")).unwrap();

    let servers = [Server::start(&a, &[], ENVIRONMENT), Server::start(&b, &[], ENVIRONMENT)];
    let asked: Vec<_> = std::thread::scope(|scope| {
        let runs: Vec<_> = servers
            .iter()
            .map(|server| {
                scope.spawn(|| run(trellis().arg("--server").arg(&server.url).args(["materialize", "-v", PATTERN])))
            })
            .collect();
        runs.into_iter().map(|run| run.join().unwrap()).collect()
    });
    for server in servers {
        server.stop();
    }

    // Every view is there, whole, through its pointer.
    for (view, key) in views() {
        let pointer =
            moto.block_on(async { client.get(&ObjectPath::from(format!("{key}/_CURRENT"))).await?.bytes().await });
        let pointer: serde_json::Value =
            serde_json::from_slice(&pointer.unwrap_or_else(|e| panic!("{view}: {e}"))).unwrap();
        let version = pointer["version"].as_str().unwrap();
        let part = moto.block_on(async {
            client.get(&ObjectPath::from(format!("{key}/_v/{version}/part-00000"))).await?.bytes().await
        });
        assert_eq!(&part.unwrap()[..], b"v\n1\n", "{view}");
    }
    // A beaten commit is said once per view, and its version is gone.
    let withdrawn =
        regex::Regex::new(r"another writer committed this view first \(version (\S+)\); version (\S+) is withdrawn")
            .unwrap();
    let mut conflicts = 0;
    for result in &asked {
        let output = format!("{}{}", result.stdout, result.stderr);
        for found in withdrawn.captures_iter(&output) {
            conflicts += 1;
            let lost = found[2].to_string();
            let listed: Vec<object_store::ObjectMeta> =
                moto.block_on(client.list(Some(&ObjectPath::from("data/w/mart/Out"))).try_collect::<Vec<_>>()).unwrap();
            assert!(listed.iter().all(|meta| !meta.location.as_ref().contains(&lost)), "{lost} is left in the bucket");
        }
        assert!(result.code == 0 || output.contains("another writer committed this view first"), "{output}");
    }
    // Neither server transformed a view twice: a beaten commit is not retried.
    for project in [&a, &b] {
        let counts = transformed(project);
        let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "{} transformed again: {twice:?}", project.display());
    }
    eprintln!("{conflicts} commits beaten of {} views", DAYS);
}
