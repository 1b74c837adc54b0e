//! The metastore as an operator meets it, through real `trellis`
//! processes: a damaged file refused at open with one line that says what
//! to do, and `trellis metastore check|backup|restore`.

use std::path::Path;

use crate::support::{Daily, Run, run, trellis};

const PATTERN: &str = "md.mart/Out/rymd(20150101-20150103)";

fn trellis_in(dir: &Path, args: &[&str]) -> Run {
    run(trellis().current_dir(dir).args(args))
}

fn materialized_project(dir: &Path) {
    Daily::new("md", "concat", 3).part("x\n").write(dir);
    let result = trellis_in(dir, &["materialize", "-v", PATTERN]);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
}

fn db_file(dir: &Path) -> std::path::PathBuf {
    dir.join(".trellis/metastore/db")
}

#[test]
fn a_zeroed_end_of_the_metastore_is_refused_at_open_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    materialized_project(dir.path());
    // The probe's corruption: the last 4 KiB of sled's file zeroed, as a
    // torn write at the end of the disk would leave it.
    let file = db_file(dir.path());
    let mut bytes = std::fs::read(&file).unwrap();
    let tail = bytes.len() - 4096;
    assert!(bytes[tail..].iter().any(|b| *b != 0), "the end of the file held data");
    bytes[tail..].fill(0);
    std::fs::write(&file, bytes).unwrap();
    let metastore = dir.path().join(".trellis/metastore").display().to_string();
    for args in [
        &["views", "-v", PATTERN][..],
        &["runs"],
        &["materialize", "-v", PATTERN],
        &["listeners"],
        &["metastore", "check"],
        &["metastore", "backup", "backup.jsonl"],
    ] {
        let result = trellis_in(dir.path(), args);
        assert_eq!(result.code, 2, "{args:?}: {}{}", result.stdout, result.stderr);
        let lines: Vec<&str> = result.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line: {}", result.stderr);
        assert!(lines[0].contains(&format!("the metastore in {metastore} is damaged (")), "{args:?}: {}", lines[0]);
        assert!(
            lines[0].ends_with(
                "restore it from a backup (`trellis metastore restore FILE`) or move it away to start afresh"
            ),
            "{}",
            lines[0]
        );
    }
    assert!(!dir.path().join("backup.jsonl").exists(), "no backup of a damaged store");
}

#[test]
fn a_backup_restored_holds_every_record_and_finds_everything_up_to_date() {
    let dir = tempfile::tempdir().unwrap();
    materialized_project(dir.path());
    let healthy = trellis_in(dir.path(), &["metastore", "check"]);
    assert_eq!(healthy.code, 0, "{}", healthy.stderr);
    let metastore = dir.path().join(".trellis/metastore");
    assert_eq!(
        healthy.stdout,
        format!(
            "metastore in {}: healthy; 2 view types, 6 views, 1 runs, 6 flows, 18 events, 1 listeners, 0 coordinators, 0 actions, 0 transaction log records, 3 views' logs\n",
            metastore.display()
        )
    );
    let runs_before = trellis_in(dir.path(), &["runs", "--json"]).stdout;
    let backup = trellis_in(dir.path(), &["metastore", "backup", "backup.jsonl"]);
    assert_eq!(backup.code, 0, "{}", backup.stderr);
    assert!(backup.stdout.starts_with("backed up 37 records from "), "{}", backup.stdout);
    // An existing file is replaced only when asked.
    let again = trellis_in(dir.path(), &["metastore", "backup", "backup.jsonl"]);
    assert_eq!(
        (again.code, again.stderr.as_str()),
        (
            2,
            "error: backup.jsonl exists; name a new file, or pass --force to replace it (once the new backup is complete)\n"
        )
    );
    let forced = trellis_in(dir.path(), &["metastore", "backup", "--force", "backup.jsonl"]);
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert_eq!(forced.stdout, backup.stdout);

    // A restore never overwrites a metastore in place.
    let refused = trellis_in(dir.path(), &["metastore", "restore", "backup.jsonl"]);
    assert_eq!(refused.code, 2);
    assert!(refused.stderr.contains("already holds a metastore; move it away first"), "{}", refused.stderr);

    std::fs::rename(&metastore, dir.path().join("metastore.old")).unwrap();
    let restored = trellis_in(dir.path(), &["metastore", "restore", "backup.jsonl"]);
    assert_eq!(restored.code, 0, "{}", restored.stderr);
    assert!(restored.stdout.starts_with("restored 37 records from backup.jsonl into "), "{}", restored.stdout);
    assert_eq!(trellis_in(dir.path(), &["metastore", "check"]).stdout, healthy.stdout);
    assert_eq!(trellis_in(dir.path(), &["runs", "--json"]).stdout, runs_before);
    let again = trellis_in(dir.path(), &["materialize", "-v", PATTERN]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("6 views: 6 idle"), "nothing to transform: {}", again.stdout);
}

#[test]
fn what_a_killed_backup_or_restore_left_is_removed_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    materialized_project(dir.path());
    let trellis_dir = dir.path().join(".trellis");
    // As a kill -9 leaves them: a partial backup and the note naming it,
    // and a restore's staging directory (a store no process holds).
    let partial = dir.path().join(".trellis-backup-k1ll3d");
    std::fs::write(&partial, "{\"kind\":\"header\"").unwrap();
    std::fs::write(trellis_dir.join("metastore/backup-in-progress"), partial.as_os_str().as_encoded_bytes()).unwrap();
    let staging = trellis_dir.join(".metastore-restore-k1ll3d");
    std::fs::create_dir(&staging).unwrap();
    std::fs::copy(db_file(dir.path()), staging.join("db")).unwrap();
    let runs = trellis_in(dir.path(), &["runs"]);
    assert_eq!(runs.code, 0, "{}", runs.stderr);
    assert!(!partial.exists(), "the partial backup is removed");
    assert!(!staging.exists(), "the staging directory is removed");
    assert!(!trellis_dir.join("metastore/backup-in-progress").exists());
    assert!(runs.stderr.contains("left by a backup or restore that was killed"), "{}", runs.stderr);
}

/// A store of several of sled's segments (4,000 views), for the damage
/// that only a larger file shows.
fn large_materialized_project(dir: &Path) {
    std::fs::write(
        dir.join("trellis.toml"),
        "[[view]]\nname = \"big.raw/In\"\ntime = { frequency = \"1d\", initial = \"2000-01-01\" }\n",
    )
    .unwrap();
    let mut day = chrono::NaiveDate::from_ymd_opt(2000, 1, 1).unwrap();
    for _ in 0..4000 {
        let flag = dir.join(format!("data/big/raw/In/{}/_SUCCESS", day.format("%Y/%m/%d")));
        std::fs::create_dir_all(flag.parent().unwrap()).unwrap();
        std::fs::write(flag, b"").unwrap();
        day = day.succ_opt().unwrap();
    }
    let result = trellis_in(dir, &["materialize", "-v", "big.raw/In/rymd(20000101-20101231)"]);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
}

#[test]
fn a_file_cut_in_half_or_zeroed_in_its_middle_is_refused_in_one_line_of_trellis_own() {
    let dir = tempfile::tempdir().unwrap();
    large_materialized_project(dir.path());
    let file = db_file(dir.path());
    let healthy = std::fs::read(&file).unwrap();
    let metastore = dir.path().join(".trellis/metastore").display().to_string();
    let cut = healthy[..healthy.len() / 2].to_vec();
    let mut zeroed = healthy.clone();
    let middle = healthy.len() / 2 / 4096 * 4096;
    zeroed[middle..middle + 16384].fill(0);
    for (damage, bytes) in [("cut in half", cut), ("zeroed in its middle", zeroed)] {
        std::fs::write(&file, &bytes).unwrap();
        let result = trellis_in(dir.path(), &["runs"]);
        assert_eq!(result.code, 2, "{damage}: {}{}", result.stdout, result.stderr);
        // Neither sled's own log lines nor its panic's location (a path on
        // the machine that built it) before or in the one line.
        let lines: Vec<&str> = result.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{damage}: one line: {}", result.stderr);
        assert!(lines[0].starts_with(&format!("error: the metastore in {metastore} is damaged (")), "{}", lines[0]);
        assert!(!lines[0].contains("panicked at") && !lines[0].contains(".cargo"), "{damage}: {}", lines[0]);
        assert!(lines[0].ends_with("or move it away to start afresh"), "{damage}: {}", lines[0]);
    }
}
