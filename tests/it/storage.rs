//! The storage root belongs to the views and to trellis's staging area;
//! neither may destroy the other. Real `trellis` processes on the daily
//! project: a view path inside `.trellis-staging` is refused before anything
//! runs, and what trellis finds there but did not create survives its runs.

use crate::support::{Daily, run, trellis};

#[test]
fn a_view_path_inside_the_staging_area_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    Daily::new("st", "concat", 2).part("x\n").write(dir.path());
    // The probe's project: `Out` published into the staging area, which the
    // next materialize emptied, while `views` still said materialized.
    let toml = std::fs::read_to_string(dir.path().join("trellis.toml")).unwrap().replace(
        "transformation = { plugin = \"concat\" }",
        "transformation = { plugin = \"concat\" }\npath = \".trellis-staging/${YEAR}/${MONTH}/${DAY}\"",
    );
    std::fs::write(dir.path().join("trellis.toml"), toml).unwrap();
    let materialize =
        || run(trellis().current_dir(dir.path()).args(["materialize", "-v", "st.mart/Out/rymd(20150101-20150102)"]));
    for _ in 0..2 {
        let result = materialize();
        assert_eq!(result.code, 2, "{}{}", result.stdout, result.stderr);
        assert!(
            result.stderr.contains(
                "st.mart/Out: path `.trellis-staging/${YEAR}/${MONTH}/${DAY}` may not start with `.trellis-staging`"
            ),
            "{}",
            result.stderr
        );
    }
    assert!(!dir.path().join("data/.trellis-staging").exists(), "nothing was published or staged");
}

#[test]
fn what_trellis_did_not_create_in_the_staging_area_survives_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    Daily::new("st", "concat", 2).part("x\n").write(dir.path());
    // Data a user (or an older trellis's view path) left in the staging
    // area, and a staging directory an interrupted run left behind.
    let staging = dir.path().join("data/.trellis-staging");
    let foreign = staging.join("2015/01/01");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("part.csv"), "someone's data\n").unwrap();
    let leftover = staging.join("view-A1b2C3");
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::write(leftover.join("part.csv"), "half written\n").unwrap();
    for _ in 0..2 {
        let result =
            run(trellis().current_dir(dir.path()).args(["materialize", "-v", "st.mart/Out/rymd(20150101-20150102)"]));
        assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
        assert!(result.stderr.contains("that trellis did not create, left alone: 2015"), "{}", result.stderr);
    }
    assert_eq!(std::fs::read_to_string(foreign.join("part.csv")).unwrap(), "someone's data\n");
    assert!(!leftover.exists(), "trellis's own leftovers are still removed");
    assert!(dir.path().join("data/st/mart/Out/2015/01/02/_SUCCESS").exists());
}
