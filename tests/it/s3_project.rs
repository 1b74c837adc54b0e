//! A project whose storage root is on S3 (moto, see `moto.rs`; a bucket of
//! its own), materialized by the real `trellis` binary: external data
//! delivered into the bucket by another client, plugins reading their
//! inputs through the local cache beside the metastore, their output
//! committed in the bucket; a second run transforming nothing; a
//! re-delivered input rebuilding its cone, each dependent reading the new
//! version. (The Spark view on S3 is in `spark.rs`, with the other Spark
//! tests.)

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;
use trellis::storage::ViewStore;

use crate::moto::{ENVIRONMENT, moto};
use crate::support::{Run, plugin_path, run, trellis};

/// `trellis ARGS -p dir` with the credentials moto takes.
fn trellis_on_s3(dir: &Path, args: &[&str]) -> Run {
    let mut command = trellis();
    command.args(args).arg("-p").arg(dir).envs(ENVIRONMENT.iter().copied());
    run(&mut command)
}

/// How many views the latest run transformed.
fn transformed(dir: &Path) -> u64 {
    let runs = trellis_on_s3(dir, &["runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).unwrap();
    runs.as_array().unwrap().iter().max_by_key(|r| r["started"].as_i64()).unwrap()["transformed"].as_u64().unwrap()
}

/// The cache's entries (not its hidden work in progress), sorted.
fn entries(cache: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cache)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Writes a project into `root` on the `concat` plugin: `head` (its
/// `[project]` tables), external `t.raw/In` (with the lines `raw`: its
/// path, its own storage), `t.mart/Out` over it, then `more`.
fn concat_project(root: &Path, head: &str, raw: &str, more: &str) {
    std::fs::create_dir_all(root.join("plugins")).unwrap();
    std::fs::copy(plugin_path("concat"), root.join("plugins/concat.wasm")).unwrap();
    let daily = "time = { frequency = \"1d\", initial = \"2015-01-01\" }";
    let text = format!(
        "{head}\n[plugins]\nconcat = \"plugins/concat.wasm\"\n\n[[view]]\nname = \"t.raw/In\"\n{daily}\n{raw}\n\n\
         [[view]]\nname = \"t.mart/Out\"\n{daily}\ntransformation = {{ plugin = \"concat\" }}\n\n\
         [[view.dependency]]\nview = \"t.raw/In\"\n\n{more}"
    );
    std::fs::write(root.join("trellis.toml"), text).unwrap();
}

#[test]
fn a_project_on_s3_is_materialized_its_plugins_reading_inputs_through_the_cache() {
    let moto = moto();
    let bucket = moto.bucket(false);
    let client = moto.client(&bucket);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let head = format!(
        "[project]\nname = \"on-s3\"\nstorage = \"s3://{bucket}/proj\"\n\n[project.s3]\nendpoint = \"{}\"\npath_style = true\n",
        moto.endpoint
    );
    let top = "[[view]]\nname = \"t.mart/Top\"\ntime = { frequency = \"1d\", initial = \"2015-01-01\" }\ntransformation = { plugin = \"concat\" }\n\n[[view.dependency]]\nview = \"t.mart/Out\"\n";
    concat_project(root, &head, "path = \"raw/${YEAR}/${MONTH}/${DAY}\"", top);
    // Delivered by another party: a file in a subdirectory, then the flag.
    let deliver = |part: &str, flag: &str| {
        moto.block_on(async {
            client.put(&ObjectPath::from("proj/raw/2015/01/01/sub/part.csv"), part.to_string().into()).await.unwrap();
            client.put(&ObjectPath::from("proj/raw/2015/01/01/_SUCCESS"), flag.to_string().into()).await.unwrap();
        })
    };
    deliver("a,1\nb,2\n", "");

    let view = "t.mart/Top/2015/01/01";
    let done = trellis_on_s3(root, &["materialize", "-v", view]);
    assert_eq!(done.code, 0, "{}\n{}", done.stdout, done.stderr);
    assert_eq!(transformed(root), 2);
    // Published in the bucket, read back through the pointers by a store of our own.
    let local = tempfile::tempdir().unwrap();
    let store = moto.dir(&bucket, local.path());
    let read = |relative: &str| {
        let key = store.key(&store.root().join(relative));
        store.read(&key).unwrap().map(|bytes| String::from_utf8(bytes).unwrap())
    };
    assert_eq!(read("t/mart/Out/2015/01/01/part-00000").as_deref(), Some("a,1\nb,2\n"));
    assert_eq!(read("t/mart/Top/2015/01/01/part-00000").as_deref(), Some("a,1\nb,2\n"));
    assert!(!root.join("data").exists() && !root.join("s3:").exists(), "nothing stored locally as a view");
    // The inputs read through the cache beside the metastore: the external
    // data as it lies and Out's committed version, one entry each, read-only.
    let cache = root.join(".trellis/cache");
    let first = entries(&cache);
    assert_eq!(first.len(), 2, "{first:?}");
    let delivered = first.iter().map(|entry| cache.join(entry).join("sub/part.csv")).find(|path| path.is_file());
    let delivered = delivered.expect("the external input's file in its entry");
    assert_eq!(std::fs::read_to_string(&delivered).unwrap(), "a,1\nb,2\n");
    assert_eq!(std::fs::metadata(&delivered).unwrap().permissions().mode() & 0o777, 0o444);
    let staging = root.join(".trellis/staging/.trellis-staging");
    assert_eq!(std::fs::read_dir(&staging).map_or(0, |entries| entries.count()), 0, "no staging left");

    // Nothing changed: nothing transformed, nothing fetched.
    let again = trellis_on_s3(root, &["materialize", "-v", view]);
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    assert_eq!(transformed(root), 0, "{}", again.stdout);
    assert_eq!(entries(&cache), first);

    // Re-delivered (a new flag, so a new identity): Out is rebuilt from the
    // new data, and Top reads Out's new version, not the cached old one.
    deliver("c,3\n", "2");
    let rebuilt = trellis_on_s3(root, &["materialize", "-v", view]);
    assert_eq!(rebuilt.code, 0, "{}\n{}", rebuilt.stdout, rebuilt.stderr);
    assert_eq!(transformed(root), 2, "{}", rebuilt.stdout);
    assert_eq!(read("t/mart/Out/2015/01/01/part-00000").as_deref(), Some("c,3\n"));
    assert_eq!(read("t/mart/Top/2015/01/01/part-00000").as_deref(), Some("c,3\n"));
    let now = entries(&cache);
    assert_eq!(now.len(), 4, "the new versions beside the old, within the bound: {now:?}");
    assert!(first.iter().all(|entry| now.contains(entry)));
}

/// Raw deliveries in a bucket (a view type's own root), marts in the
/// project's local directory: the mart reads its input through the cache
/// and is published locally, one rename; the bucket gets nothing of it.
#[test]
fn a_view_types_own_root_in_a_bucket_serves_a_project_whose_marts_are_local() {
    let moto = moto();
    let bucket = moto.bucket(false);
    let client = moto.client(&bucket);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let head = format!("[project]\nname = \"raw-on-s3\"\n\n[project.s3]\nendpoint = \"{}\"\n", moto.endpoint);
    let raw = format!("storage = \"s3://{bucket}/deliveries\"\npath = \"orders/${{YEAR}}/${{MONTH}}/${{DAY}}\"");
    concat_project(root, &head, &raw, "");
    moto.block_on(async {
        client.put(&ObjectPath::from("deliveries/orders/2015/01/01/part.csv"), "a,1\n".into()).await.unwrap();
        client.put(&ObjectPath::from("deliveries/orders/2015/01/01/_SUCCESS"), "".into()).await.unwrap();
    });
    let done = trellis_on_s3(root, &["materialize", "-v", "t.mart/Out/2015/01/01"]);
    assert_eq!(done.code, 0, "{}\n{}", done.stdout, done.stderr);
    assert_eq!(transformed(root), 1);
    let out = root.join("data/t/mart/Out/2015/01/01");
    assert_eq!(std::fs::read_to_string(out.join("part-00000")).unwrap(), "a,1\n");
    assert!(out.join("_SUCCESS").is_file());
    let listed: Vec<_> = moto
        .block_on(futures_util::TryStreamExt::try_collect::<Vec<_>>(client.list(None)))
        .unwrap()
        .into_iter()
        .map(|meta| meta.location.to_string())
        .collect();
    assert_eq!(listed.len(), 2, "only the delivery is in the bucket: {listed:?}");
    let again = trellis_on_s3(root, &["materialize", "-v", "t.mart/Out/2015/01/01"]);
    assert_eq!((again.code, transformed(root)), (0, 0), "{}", again.stdout);
}
