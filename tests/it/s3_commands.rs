//! The commands on a project whose storage root is on S3 (moto, see
//! `moto.rs`), run as the real binary: `validate` and `serve` refuse a
//! root they cannot reach or write in one line, `trellis gc` collects what
//! is past the grace and says so, and `views --json` and the API show the
//! prefix an outside reader reads.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::moto::{ENVIRONMENT, moto};
use crate::support::{Run, Server, run_within, trellis};

/// How long a command may take before the test calls it hung.
const LIMIT: Duration = Duration::from_secs(120);

/// A project in `dir` with one external view type, its storage `s3://bucket/proj` at `endpoint`.
fn project(dir: &Path, bucket: &str, endpoint: &str, extra: &str) -> PathBuf {
    let project = dir.join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let toml = format!(
        "[project]\nname = \"p\"\nstorage = \"s3://{bucket}/proj\"\n\n[project.s3]\nendpoint = \"{endpoint}\"\n{extra}\n\
         [[view]]\nname = \"t.raw/In\"\n"
    );
    std::fs::write(project.join("trellis.toml"), toml).unwrap();
    project
}

/// `trellis ARGS -p project` with the test server's credentials.
fn command(project: &Path, args: &[&str]) -> Command {
    let mut command = trellis();
    command.args(args).arg("-p").arg(project).env_remove("TRELLIS_SERVER");
    for (key, value) in ENVIRONMENT {
        command.env(key, value);
    }
    command
}

fn run(project: &Path, args: &[&str]) -> Run {
    run_within(&mut command(project, args), LIMIT)
}

fn put(client: &Arc<dyn ObjectStore>, location: &str, content: &str) {
    moto().block_on(client.put(&ObjectPath::from(location), content.to_string().into())).unwrap();
}

fn objects(client: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<String> {
    let prefix = ObjectPath::from(prefix);
    let found: Vec<_> = moto().block_on(client.list(Some(&prefix)).try_collect::<Vec<_>>()).unwrap();
    let mut found: Vec<_> = found.into_iter().map(|meta| meta.location.to_string()).collect();
    found.sort();
    found
}

/// A version id as a publish `ago` would have made it.
fn version_ago(ago: Duration, n: u64) -> String {
    let millis = (SystemTime::now() - ago).duration_since(UNIX_EPOCH).unwrap().as_millis();
    format!("{millis:013}-{n:016x}")
}

/// An unreachable endpoint and a missing bucket each fail `validate` and
/// `serve` (before it listens) with one line naming the root and the
/// cause; a root that is there passes.
#[test]
fn validate_and_serve_refuse_a_root_they_cannot_write_in_one_line() {
    let moto = moto();
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dead = project(&dir.path().join("dead"), "views", &format!("http://127.0.0.1:{closed}"), "");
    let missing = project(&dir.path().join("missing"), "trellis-no-such-bucket", &moto.endpoint, "");
    let expected = [
        (
            &dead,
            format!(
                "error: storage s3://views/proj: endpoint unreachable: cannot connect to http://127.0.0.1:{closed}"
            ),
        ),
        (&missing, "error: storage s3://trellis-no-such-bucket/proj: no such bucket (NoSuchBucket)".to_string()),
    ];
    for (project, line) in &expected {
        for args in [&["validate"][..], &["serve", "--bind", "127.0.0.1:0"]] {
            let refused = run(project, args);
            assert_eq!(refused.code, 2, "{args:?}: {refused:?}");
            assert_eq!(refused.stderr.trim_end(), line, "{args:?}");
            assert!(!refused.stdout.contains("listening"), "{args:?}: {refused:?}");
        }
    }
    let bucket = moto.bucket(false);
    let good = project(&dir.path().join("good"), &bucket, &moto.endpoint, "");
    let validated = run(&good, &["validate"]);
    assert_eq!(validated.code, 0, "{validated:?}");
    assert_eq!(objects(&moto.client(&bucket), ""), Vec::<String>::new(), "the probe leaves nothing");
}

/// `trellis gc` removes what is past the grace (a version replaced 3 h ago,
/// a crashed upload's orphan of 2 h) and keeps the current version and an
/// upload in progress, saying what it removed and kept; `--dry-run`
/// removes nothing; `--grace` and `[project.s3] grace` set the grace; a
/// local root has nothing to collect.
#[test]
fn gc_removes_what_is_past_the_grace_and_says_what_it_kept() {
    let moto = moto();
    let dir = tempfile::tempdir().unwrap();
    let bucket = moto.bucket(false);
    let client = moto.client(&bucket);
    let hour = Duration::from_secs(3600);
    let (old, current, orphan, uploading) = (
        version_ago(4 * hour, 1),
        version_ago(3 * hour, 2),
        version_ago(2 * hour, 3),
        version_ago(Duration::from_secs(60), 4),
    );
    put(&client, &format!("proj/a/_v/{old}/part"), "old!");
    put(&client, &format!("proj/a/_v/{current}/part"), "current");
    put(&client, &format!("proj/a/_v/{orphan}/part"), "orphan");
    put(&client, &format!("proj/a/_v/{uploading}/part"), "soon");
    put(&client, "proj/a/_CURRENT", &format!(r#"{{"format":1,"version":"{current}"}}"#));
    let project = project(dir.path(), &bucket, &moto.endpoint, "grace = \"5h\"\n");

    // The project's grace of 5 h keeps everything.
    let kept = run(&project, &["gc"]);
    assert_eq!(kept.code, 0, "{kept:?}");
    assert_eq!(
        kept.stdout,
        format!(
            "s3://{bucket}/proj: removed 0 versions (0 objects, 0 B); kept 4 versions (4 objects, 21 B) (current, or \
             within the grace of 5h), in 1 view\n"
        )
    );
    let dry = run(&project, &["gc", "--grace", "90min", "--dry-run", "--verbose"]);
    assert_eq!(dry.code, 0, "{dry:?}");
    assert_eq!(
        dry.stdout,
        format!(
            "  a: would remove 2 versions (2 objects, 10 B); kept 2 versions (2 objects, 11 B) (current {current})\n\
             s3://{bucket}/proj: would remove 2 versions (2 objects, 10 B); kept 2 versions (2 objects, 11 B) \
             (current, or within the grace of 1h 30m), in 1 view\n"
        )
    );
    assert_eq!(objects(&client, "proj/a/_v").len(), 4, "a dry run removes nothing");
    let removed = run(&project, &["gc", "--grace", "90min", "--json"]);
    assert_eq!(removed.code, 0, "{removed:?}");
    let json: serde_json::Value = serde_json::from_str(&removed.stdout).unwrap();
    assert_eq!(json[0]["removed"], serde_json::json!({ "versions": 2, "objects": 2, "bytes": 10 }));
    assert_eq!(json[0]["views"][0]["key"], "a");
    assert_eq!(
        objects(&client, "proj/a/_v"),
        [format!("proj/a/_v/{current}/part"), format!("proj/a/_v/{uploading}/part")]
    );

    let refused = run(&project, &["gc", "--grace", "soon"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("invalid value 'soon' for '--grace <DURATION>'"), "{refused:?}");

    let local = dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(local.join("trellis.toml"), "[project]\nname = \"l\"\n\n[[view]]\nname = \"t.raw/In\"\n").unwrap();
    let nothing = run(&local, &["gc"]);
    assert_eq!(nothing.code, 0, "{nothing:?}");
    assert_eq!(
        nothing.stdout,
        format!(
            "{}: a local directory, where a publish replaces its version in one rename: nothing to collect\n",
            local.join("data").display()
        )
    );
}

/// `views --json` and the API's view JSON name the prefix of a view's
/// current version, which an outside reader reads.
#[test]
fn views_json_and_the_api_show_the_current_versions_prefix() {
    let moto = moto();
    let dir = tempfile::tempdir().unwrap();
    let bucket = moto.bucket(false);
    let client = moto.client(&bucket);
    let project = project(dir.path(), &bucket, &moto.endpoint, "");
    let listed = |project: &Path| -> serde_json::Value {
        let run = run(project, &["views", "--json", "-v", "t.raw/In"]);
        assert_eq!(run.code, 0, "{run:?}");
        serde_json::from_str(&run.stdout).unwrap()
    };
    let before = listed(&project);
    assert_eq!(before[0].get("current_prefix"), None, "no pointer yet: {before}");
    let data_path = before[0]["data_path"].as_str().unwrap().to_string();
    let key = data_path.strip_prefix(&format!("s3://{bucket}/")).unwrap().to_string();
    let version = version_ago(Duration::ZERO, 7);
    put(&client, &format!("{key}/_v/{version}/part"), "rows");
    put(&client, &format!("{key}/_CURRENT"), &format!(r#"{{"format":1,"version":"{version}"}}"#));
    let expected = format!("s3://{bucket}/{key}/_v/{version}/");
    assert_eq!(listed(&project)[0]["current_prefix"], expected.as_str());

    let server = Server::start(&project, &[], ENVIRONMENT);
    let url = format!("http://{}/views/t.raw/In", server.address());
    let page: serde_json::Value = moto.block_on(async {
        crate::support::http().build().unwrap().get(&url).send().await.unwrap().json().await.unwrap()
    });
    assert_eq!(page["views"][0]["current_prefix"], expected.as_str(), "{page}");
    assert_eq!(server.stop(), 0);
}
