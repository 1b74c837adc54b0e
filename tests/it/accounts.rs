//! What runs and views record, through the real binary and a real server:
//! the counters a transformation returns (kept with the view and the
//! run's flow), and a run's own account of how it ended and what failed in
//! it. (A run's flows while it runs: `served.rs`, in process.)

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{Daily, Run, Server, ok, run, trellis};

const OUT: &str = "ca.mart/Out/2015/01/01";

/// One day of input (`part.csv` with `csv`), summed by csv-aggregate.
fn summing_project(dir: &Path, csv: &str) -> PathBuf {
    let project = dir.join("summing");
    Daily::new("ca", "csv_aggregate", 1).config(r#"aggregates = "sum(amount)""#).part(csv).write(&project);
    project
}

fn json(result: Run, what: &str) -> Value {
    let text = ok(result, what);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"))
}

fn cli(project: &Path, args: &[&str]) -> Run {
    run(trellis().args(args).arg("-p").arg(project))
}

/// The ids of the runs recorded, in order.
fn run_ids(project: &Path) -> Vec<String> {
    let runs = json(cli(project, &["runs", "--json"]), "runs --json");
    runs.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

async fn get(url: &str) -> Value {
    let client = crate::support::http().build().unwrap();
    let response = client.get(url).send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let text = response.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_counters_a_transformation_returns_are_kept_with_the_view_and_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let project = summing_project(dir.path(), "amount\n1\n2\n3\n");
    ok(cli(&project, &["materialize", "-v", OUT]), "materialize");
    let expected = serde_json::json!({ "files": 1, "rows-in": 3, "rows-out": 1 });

    // `views`, in JSON and as text.
    let views = json(cli(&project, &["views", "--json", "-v", OUT]), "views --json");
    assert_eq!(views[0]["counters"], expected, "{views}");
    let text = ok(cli(&project, &["views", "-v", OUT]), "views");
    assert!(text.trim_end().ends_with("  [files=1 rows-in=3 rows-out=1]"), "{text}");
    // The external input returned nothing, and shows nothing.
    let input = json(cli(&project, &["views", "--json", "-v", "ca.raw/In/2015/01/01"]), "views --json");
    assert_eq!(input[0].get("counters"), None, "{input}");

    // `runs ID`: the run's flow of the view.
    let id = run_ids(&project).pop().unwrap();
    let detail = json(cli(&project, &["runs", "--json", &id]), "runs --json ID");
    let flow = detail["flows"].as_array().unwrap().iter().find(|f| f["view"] == OUT).cloned();
    assert_eq!(flow.map(|f| f["counters"].clone()), Some(expected.clone()), "{detail}");
    // The fields the API gives: the run's status, and the views' flags.
    assert_eq!(detail["run"]["status"], "finished", "{detail}");
    assert_eq!(
        (&detail["with_errors"], &detail["incomplete"]),
        (&serde_json::json!([]), &serde_json::json!([])),
        "{detail}"
    );
    assert_eq!(detail["run"]["no_data"], 0, "{detail}");
    let text = ok(cli(&project, &["runs", &id]), "runs ID");
    assert!(text.contains(&format!("SUCCESSFUL             {OUT}  [files=1 rows-in=3 rows-out=1]\n")), "{text}");

    // The API: GET /views and GET /runs/{id}.
    let server = Server::start(&project, &[], &[]);
    let views = get(&format!("{}/views/{OUT}", server.url)).await;
    assert_eq!(views["views"][0]["counters"], expected, "{views}");
    let detail = get(&format!("{}/runs/{id}", server.url)).await;
    let flow = detail["flows"].as_array().unwrap().iter().find(|f| f["view"] == OUT).cloned();
    assert_eq!(flow.map(|f| f["counters"].clone()), Some(expected), "{detail}");
    assert_eq!(server.stop(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_keeps_its_own_account_of_how_it_ended_and_what_failed_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let project = summing_project(dir.path(), "amount\n1\nlots\n");
    let failed = cli(&project, &["materialize", "-v", OUT]);
    assert_eq!(failed.code, 1, "{}{}", failed.stdout, failed.stderr);
    // The input fixed, the next run succeeds and the view's record moves on.
    std::fs::write(project.join("data/raw/2015/01/01/part.csv"), "amount\n1\n2\n").unwrap();
    ok(cli(&project, &["materialize", "-v", OUT]), "materialize after the fix");
    let [first, second] = <[String; 2]>::try_from(run_ids(&project)).unwrap();

    // `runs ID` of the first run shows its own error, not the view's record now.
    let text = ok(cli(&project, &["runs", &first]), "runs ID");
    assert!(text.starts_with(&format!("run {first} (DEFAULT, {OUT}): completed with 1 failed view\n")), "{text}");
    let failure = format!("  TERMINATED_WITH_ERROR  {OUT}\n    error: ");
    assert!(text.contains(&failure) && text.contains("lots"), "{text}");
    // With its times, how long it took and its views counted by flow status.
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[1].starts_with("  started ") && lines[1].contains(", took "), "{text}");
    assert!(lines[2].starts_with("  2 views: ") && lines[2].ends_with("1 terminated_with_error"), "{text}");
    // Filtered by flow status, the summary stays and the other flows go.
    let successful = ok(cli(&project, &["runs", &first, "--status", "SUCCESSFUL"]), "runs ID --status");
    assert!(successful.contains(lines[2]) && !successful.contains("TERMINATED_WITH_ERROR"), "{successful}");
    let text = ok(cli(&project, &["runs", &second]), "runs ID");
    assert!(text.contains(&format!("SUCCESSFUL             {OUT}  [files=1 rows-in=2 rows-out=1]")), "{text}");
    assert!(!text.contains("error"), "{text}");
    // The list says how long each run took and what it did.
    let listed = ok(cli(&project, &["runs"]), "runs");
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(
        listed.lines().all(|line| line.contains(" s  DEFAULT") || line.contains(" ms  DEFAULT")),
        "a duration on each line: {listed}"
    );
    // Counted in the words the runs' own summaries used.
    let counts: Vec<&str> = listed.lines().filter_map(|line| line.rsplit_once(" (")).map(|(_, c)| c).collect();
    assert_eq!(
        counts,
        ["2 views: 1 successful, 1 terminated_with_error)", "2 views: 1 successful, 1 idle)"],
        "{listed}"
    );

    // Typed, in `runs --json` and the API, beside the text.
    let runs = json(cli(&project, &["runs", "--json"]), "runs --json");
    assert_eq!(runs[0]["ended"], serde_json::json!({ "kind": "completed_with_failures", "failed_views": 1 }));
    assert_eq!(runs[1]["ended"], serde_json::json!({ "kind": "completed" }));
    let server = Server::start(&project, &[], &[]);
    let listed = get(&format!("{}/runs", server.url)).await;
    assert_eq!(listed[0]["ended"]["kind"], "completed_with_failures", "{listed}");
    assert_eq!(listed[0]["termination"], "completed with 1 failed view", "{listed}");
    // Times as RFC 3339 beside the milliseconds, and what the run did.
    for (run, api) in [(&runs[0], &listed[0]), (&runs[1], &listed[1])] {
        let started = api["started_at"].as_str().unwrap_or_else(|| panic!("{api}"));
        let parsed = chrono::DateTime::parse_from_rfc3339(started).unwrap();
        assert_eq!(parsed.timestamp(), api["started"].as_i64().unwrap() / 1000, "{api}");
        assert_eq!(api["duration_ms"], api["finished"].as_i64().unwrap() - api["started"].as_i64().unwrap());
        assert_eq!(api["transformed"], 1, "{api}");
        assert_eq!(api["no_data"], 0, "its input had data: {api}");
        for field in ["started_at", "finished_at", "duration_ms", "transformed"] {
            assert_eq!(run[field], api[field], "`runs --json` and the API agree on {field}");
        }
    }
    let views = get(&format!("{}/views/{OUT}", server.url)).await;
    let view = &views["views"][0];
    let at =
        chrono::DateTime::parse_from_rfc3339(view["materialized_at"].as_str().unwrap_or_else(|| panic!("{views}")));
    assert_eq!(at.unwrap().timestamp(), view["timestamp"].as_i64().unwrap() / 1000, "{views}");
    let detail = get(&format!("{}/runs/{first}", server.url)).await;
    assert_eq!(detail["run"]["ended"]["failed_views"], 1, "{detail}");
    let error = detail["failures"][0]["error"].as_str().unwrap_or_else(|| panic!("{detail}"));
    assert!(error.contains("lots"), "{detail}");
    let flow = detail["flows"].as_array().unwrap().iter().find(|f| f["view"] == OUT).cloned().unwrap();
    assert_eq!(flow["error"].as_str(), Some(error), "{detail}");
    assert_eq!(server.stop(), 0);
}
