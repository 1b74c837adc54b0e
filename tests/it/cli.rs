//! The plugin author's CLI: output, exit codes (0 success, 1 plugin failure,
//! 2 usage or bad input) and one-line errors; and the demo.

use expect_test::expect;

use crate::support::{plugin_path, run, run_within, trellis};

#[test]
fn inspect_shows_world_identity_exports_and_configuration() {
    let result = run(trellis().args(["plugins", "inspect"]).arg(plugin_path("csv_aggregate")));
    assert_eq!(result.code, 0, "{}", result.stderr);
    // The file and content hash change with every build; the rest must not.
    let stable: Vec<&str> =
        result.stdout.lines().filter(|l| !l.starts_with("file:") && !l.starts_with("content hash:")).collect();
    expect![[r#"
        world:        transformation
        name:         csv-aggregate
        version:      1.0.0
        description:  group-by with sum/count/min/max over the CSV files of all inputs
        exports:      trellis:plugin/transform@1.2.0
        limits:       60s deadline, 512 MiB memory
        config:
          group-by     optional  comma-separated columns to group by
          aggregates   required  comma-separated sum(col), count(*), count(col), min(col), max(col); optionally name=...
          file         optional  output file name (default part-00000.csv)"#]]
    .assert_eq(&stable.join("\n"));
    let hash = result.stdout.lines().find_map(|l| l.strip_prefix("content hash: ")).unwrap();
    let bytes = std::fs::read(plugin_path("csv_aggregate")).unwrap();
    assert_eq!(hash, blake3::hash(&bytes).to_hex().as_str());
}

#[test]
fn inspect_json_is_machine_readable() {
    let result = run(trellis().args(["plugins", "inspect", "--json"]).arg(plugin_path("jsonl_listener")));
    assert_eq!(result.code, 0, "{}", result.stderr);
    let value: serde_json::Value = serde_json::from_str(&result.stdout).unwrap();
    assert_eq!(value["world"], "listener");
    assert_eq!(value["name"], "jsonl-listener");
    assert_eq!(value["limits"]["deadline_ms"], 1000);
    assert_eq!(value["exports"][0], "trellis:plugin/events@1.2.0");
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let csv = plugin_path("csv_aggregate");
    let wrong_world = format!("error: {} is a transformation plugin, not a checksum plugin", csv.display());
    // A directory that holds something is not the plugin's to write into.
    let full = dir.path().join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("keep.txt"), "mine\n").unwrap();
    let not_empty = format!(
        "error: --output {} is not empty; name a new or empty directory, or pass --force to write into it",
        full.display()
    );
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (vec!["plugins".into(), "inspect".into(), "/no/such.wasm".into()], "error: /no/such.wasm does not exist"),
        (
            vec![
                "plugins".into(),
                "run".into(),
                csv.clone().into(),
                "--output".into(),
                out.clone().into(),
                "--input".into(),
                "orders=/no/such/dir".into(),
            ],
            "error: input `orders`: /no/such/dir is not a directory",
        ),
        (
            vec![
                "plugins".into(),
                "run".into(),
                csv.clone().into(),
                "--output".into(),
                out.clone().into(),
                "--config".into(),
                "aggregates=count(*)".into(),
                "--config".into(),
                "groupby=shop".into(),
            ],
            "error: csv-aggregate has no configuration key `groupby` (it knows: group-by, aggregates, file)",
        ),
        (vec!["plugins".into(), "checksum".into(), csv.clone().into()], &wrong_world),
        (
            vec![
                "plugins".into(),
                "run".into(),
                csv.clone().into(),
                "--output".into(),
                out.clone().into(),
                "--deadline=-1".into(),
            ],
            "error: --deadline -1 is not a positive number of seconds",
        ),
        (
            vec![
                "plugins".into(),
                "run".into(),
                csv.clone().into(),
                "--output".into(),
                full.clone().into(),
                "--config".into(),
                "aggregates=count(*)".into(),
            ],
            &not_empty,
        ),
    ];
    for (args, message) in cases {
        let result = run(trellis().args(&args));
        assert_eq!(result.code, 2, "{args:?}: {}", result.stderr);
        assert_eq!(result.stderr.trim_end(), message, "{args:?}");
    }
    assert_eq!(std::fs::read_dir(&full).unwrap().count(), 1, "nothing written beside keep.txt");
    // clap's own usage errors exit 2 as well.
    let result = run(trellis().args(["plugins", "run", "x.wasm", "--config", "novalue"]));
    assert_eq!(result.code, 2);
    assert!(result.stderr.contains("`novalue` is not KEY=VALUE"), "{}", result.stderr);
}

#[test]
fn a_plugin_failure_exits_1_and_says_what_kind() {
    let dir = tempfile::tempdir().unwrap();
    let result = run(trellis()
        .args(["plugins", "run"])
        .arg(plugin_path("hostile_panic"))
        .args(["--view", "shop/Daily/SHOP10", "--output"])
        .arg(dir.path().join("out")));
    assert_eq!(result.code, 1);
    assert!(
        result.stderr.contains("run failed (panic): panicked: deliberate panic while materializing shop/Daily/SHOP10"),
        "{}",
        result.stderr
    );
}

#[test]
fn checksum_prints_the_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let query = dir.path().join("q.sql");
    std::fs::write(&query, "SELECT 1").unwrap();
    let by_config = run(trellis()
        .args(["plugins", "checksum"])
        .arg(plugin_path("sql_checksum"))
        .args(["--config", "query=SELECT  1 -- one"]));
    assert_eq!(by_config.code, 0, "{}", by_config.stderr);
    let by_resource = run(trellis()
        .args(["plugins", "checksum"])
        .arg(plugin_path("sql_checksum"))
        .arg("--resource")
        .arg(format!("q.sql={}", query.display())));
    assert_eq!(by_resource.code, 0, "{}", by_resource.stderr);
    assert_eq!(by_config.stdout, by_resource.stdout);
    assert_eq!(by_config.stdout.trim().len(), 64);
}

#[test]
fn the_demo_runs_end_to_end_and_only_overwrites_its_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    for _ in 0..2 {
        let result = run(crate::support::without_spark(trellis().arg("demo").arg(&demo), dir.path()));
        assert_eq!(result.code, 0, "{}\n{}", result.stdout, result.stderr);
        // Without Spark, the view it computes is named, with how to get it.
        assert!(
            result.stdout.contains(
                "# shop.datamart/ShopRanking/2015/05 is computed by Spark SQL, which is not available here: \
                 Spark is not installed"
            ),
            "{}",
            result.stdout
        );
        // The coordinator built May 1-3's daily sales first, with the clock set.
        assert!(result.stdout.contains("coordinator daily-sales: 1 WAITING, 3 SUCCEEDED"), "{}", result.stdout);
        // Three days without orders, and the month over them: incomplete
        // travels up the lattice.
        assert!(
            result.stdout.contains(
                "190 views: 172 successful (168 without data), 18 idle; 4 incomplete (a day without orders, or a view over one)"
            ),
            "{}",
            result.stdout
        );
        assert!(result.stdout.contains("190 views: 190 idle"), "{}", result.stdout);
        assert!(
            result.stdout.contains("YearToDateSales/SHOP10/2015/01: transform: dependency shop.raw/Orders/SHOP10/2015/05/03 will be rematerialized; incremental: reads 1 new or changed file"),
            "{}",
            result.stdout
        );
        assert!(result.stdout.contains("demo finished in"), "{}", result.stdout);
        // It says the stats listener followed only when its record agrees
        // (on a busy machine it may not have); else it says where it stands.
        let listeners = run(trellis().args(["listeners", "--json", "-p"]).arg(&demo));
        let listeners: serde_json::Value = serde_json::from_str(&listeners.stdout).unwrap();
        let stats = listeners.as_array().unwrap().iter().find(|l| l["name"] == "stats").unwrap();
        let followed = stats["behind"] == 0 && stats["restarts"] == 0 && stats["state"] == "enabled";
        assert_eq!(result.stdout.contains("the stats listener followed every run: "), followed, "{}", result.stdout);
        assert_eq!(result.stdout.contains("\nlistener stats: "), !followed, "{}", result.stdout);
    }
    // Three shops, three days of orders and two late ones: the monthly
    // total is their sum (the demo's data is fixed, so is this).
    let total = std::fs::read_to_string(demo.join("data/shop/datamart/MonthlyTotal/2015/05/part-00000.csv")).unwrap();
    assert_eq!(total, "orders,revenue\n38,863.74\n");
    // The year to date took the late orders by reading their file alone,
    // and holds what reading everything would.
    let ytd = std::fs::read_to_string(demo.join("data/shop/datamart/YearToDateSales/SHOP10/2015/01/part-00000.csv"));
    assert_eq!(ytd.unwrap(), "shop,orders,revenue\nSHOP10,14,247.8\n");
    // A plugin's lines go to stderr with --verbose only, naming the view
    // they are for; by default a run prints its summary and no more. Never
    // colour codes into a pipe.
    let ytd = "shop.datamart/YearToDateSales/SHOP10/2015/01";
    for verbose in [false, true] {
        assert_eq!(run(trellis().args(["invalidate", "-v", ytd, "-p"]).arg(&demo)).code, 0);
        let mut materialize = trellis();
        materialize.args(["materialize", "-v", ytd, "-p"]).arg(&demo);
        if verbose {
            materialize.arg("--verbose");
        }
        let rebuilt = run(&mut materialize);
        assert_eq!(rebuilt.code, 0, "{}", rebuilt.stderr);
        assert!(!rebuilt.stderr.contains('\x1b') && !rebuilt.stdout.contains('\x1b'), "{rebuilt:?}");
        let plugin_line = format!("transform{{view={ytd}}}: read every input file: reset");
        assert_eq!(rebuilt.stderr.contains(&plugin_line), verbose, "verbose {verbose}: {}", rebuilt.stderr);
        assert_eq!(rebuilt.stdout.contains(&format!("SUCCESSFUL             {ytd}\n")), verbose, "{}", rebuilt.stdout);
        assert!(rebuilt.stdout.contains("views: 1 successful, "), "{}", rebuilt.stdout);
    }
    // On a terminal (a pty, from util-linux's `script`) the log lines are
    // coloured, unless NO_COLOR is set (no-color.org).
    let colour = regex::Regex::new("\x1b\\[[0-9;]*m").unwrap();
    for no_color in [false, true] {
        assert_eq!(run(trellis().args(["invalidate", "-v", ytd, "-p"]).arg(&demo)).code, 0);
        let line = format!("{} materialize --verbose -v {ytd} -p {}", env!("CARGO_BIN_EXE_trellis"), demo.display());
        let mut script = std::process::Command::new("script");
        script.args(["-qec", &line, "/dev/null"]).env_remove("TRELLIS_LOG");
        script.env("TRELLIS_CACHE_DIR", crate::support::compile_cache());
        if no_color {
            script.env("NO_COLOR", "1");
        } else {
            script.env_remove("NO_COLOR");
        }
        let on_a_terminal = run(&mut script);
        assert_eq!(on_a_terminal.code, 0, "{on_a_terminal:?}");
        assert!(on_a_terminal.stdout.contains("read every input file: reset"), "{on_a_terminal:?}");
        assert_eq!(colour.is_match(&on_a_terminal.stdout), !no_color, "NO_COLOR {no_color}: {on_a_terminal:?}");
    }
    // The project it wrote is a real project: the CLI works on it.
    let plan = run(trellis().args(["plan", "-v", "shop.datamart/MonthlyTotal/2015/05", "-p"]).arg(&demo));
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    assert!(plan.stdout.contains("shop.datamart/MonthlyTotal/2015/05: up to date"), "{}", plan.stdout);

    let precious = dir.path().join("precious");
    std::fs::create_dir_all(&precious).unwrap();
    std::fs::write(precious.join("thesis.tex"), "years of work").unwrap();
    let result = run(trellis().arg("demo").arg(&precious));
    assert_eq!(result.code, 2);
    assert!(result.stderr.contains("exists and was not written by `trellis demo`"), "{}", result.stderr);
    assert_eq!(std::fs::read_to_string(precious.join("thesis.tex")).unwrap(), "years of work");
}

#[test]
fn a_transformation_that_fits_the_memory_budget_only_without_the_listeners_is_refused_not_left_waiting() {
    // The demo's project with a budget of 512 MiB: its transformation's cap
    // (512 MiB) fits in it alone, but the stats listener's instance holds
    // its 64 MiB for as long as it runs, so every transformation would wait
    // for its memory forever.
    let dir = tempfile::tempdir().unwrap();
    let demo = crate::support::demo(dir.path());
    // From nothing again: only the project, its plugins and the orders stay.
    std::fs::remove_dir_all(demo.join(".trellis")).unwrap();
    std::fs::remove_dir_all(demo.join("data/shop")).unwrap();
    let project = std::fs::read_to_string(demo.join("trellis.toml")).unwrap();
    let with_budget = |mib: u32| {
        let toml = project.replacen("[defaults]\n", &format!("[defaults]\nmemory_budget_mib = {mib}\n"), 1);
        std::fs::write(demo.join("trellis.toml"), toml).unwrap();
    };
    let limit = std::time::Duration::from_secs(300);
    let materialize = || {
        run_within(trellis().args(["materialize", "-v", "shop.datamart/MonthlyTotal/2015/05", "-p"]).arg(&demo), limit)
    };
    let reason = "plugin csv-aggregate: its memory cap of 512 MiB exceeds the 448 MiB that the memory budget of \
                  512 MiB ([defaults] memory_budget_mib) leaves beside listener stats (64 MiB), which holds its cap \
                  while it runs; lower its memory_mib or a listener's, or raise the budget";

    with_budget(512);
    let refused = materialize();
    assert_eq!(refused.code, 2, "{}{}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains(reason), "{}", refused.stderr);
    let validate = run_within(trellis().args(["validate", "-p"]).arg(&demo), limit);
    assert_eq!(validate.code, 2, "{}{}", validate.stdout, validate.stderr);
    // One line per view type that uses it.
    assert_eq!(validate.stderr.matches(reason).count(), 3, "{}", validate.stderr);

    // With room for both, it runs.
    with_budget(576);
    let ran = materialize();
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("190 successful"), "{}", ran.stdout);
}

/// `trellis views` with a server, reading what `serve` on `project` shows.
fn views_remote(project: &std::path::Path, args: &[&str]) -> crate::support::Run {
    let server = crate::support::Server::start(project, &[], &[]);
    let result = run(trellis().env_remove("TRELLIS_SERVER").arg("--server").arg(&server.url).args(args));
    server.stop();
    result
}

/// The JSON of `views` and `materialize` carries the flags a view took from
/// its dependencies, as their text does, embedded and through a server.
#[test]
fn json_carries_the_incomplete_and_errors_flags() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("p");
    crate::support::Daily::new("j", "trivial", 2).chained().write(&project);
    // The second day's input has no data: its Out is built from the first day's Out only.
    std::fs::remove_file(project.join("data/raw/2015/01/02/_SUCCESS")).unwrap();
    let day = "j.mart/Out/2015/01/02";
    let result = run(trellis().current_dir(&project).args(["materialize", "--json", "-v", day]));
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    let summary: serde_json::Value = serde_json::from_str(&result.stdout).unwrap();
    assert_eq!(summary["incomplete"], serde_json::json!([day]), "{summary}");
    assert_eq!(summary["with_errors"], serde_json::json!([]), "{summary}");

    let embedded = run(trellis().current_dir(&project).args(["views", "--json", "-v", day]));
    let remote = views_remote(&project, &["views", "--json", "-v", day]);
    for listing in [embedded, remote] {
        assert_eq!(listing.code, 0, "{}", listing.stderr);
        let views: serde_json::Value = serde_json::from_str(&listing.stdout).unwrap();
        assert_eq!(views[0]["state"], "materialized", "{views}");
        assert_eq!(views[0]["incomplete"], true, "{views}");
        assert_eq!(views[0]["errors"], false, "{views}");
    }
    let text = run(trellis().current_dir(&project).args(["views", "-v", day]));
    assert!(text.stdout.contains("  materialized (incomplete)  "), "{}", text.stdout);
}

/// An invalidation a run took up and was stopped before acting on is kept
/// (the view stays materialized meanwhile): `views` shows it, embedded and
/// through a server, in text and JSON, and `-s invalidated` lists the view,
/// as `plan` says it will be transformed.
#[test]
fn a_pending_invalidation_is_shown_and_selected_as_plan_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let project = crate::support::gated_project(dir.path(), 1);
    let view = "g.mart/Out/2015/01/01";
    crate::support::open_gates(&project);
    let first = run(trellis().current_dir(&project).args(["materialize", "-v", view]));
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    // Gates closed again: the next transformation holds until it is stopped.
    std::fs::remove_file(project.join("data/raw/2015/01/01/GO")).unwrap();
    let invalidated = run(trellis().current_dir(&project).args(["invalidate", "-v", view]));
    assert_eq!(invalidated.stdout, format!("invalidated {view}\n"));

    let child = trellis()
        .current_dir(&project)
        .args(["materialize", "-v", view])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The transformation is in flight, held by its gate, once its staging
    // directory exists (the run naming itself is not enough: a stop before
    // the view starts skips it rather than cancels it).
    let staging = project.join("data/.trellis-staging");
    let in_flight = || {
        std::fs::read_dir(&staging)
            .map(|entries| entries.flatten().any(|entry| entry.file_name().to_string_lossy().starts_with("view-")))
            .unwrap_or(false)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !in_flight() {
        assert!(std::time::Instant::now() < deadline, "the transformation never started");
        std::thread::yield_now();
    }
    let stop = run(trellis().current_dir(&project).args(["stop"]));
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("CANCELED") && stdout.contains("stopped by request"), "{stdout}");
    // A clean stop takes the canceled transformation's staging directory with it.
    assert!(!in_flight(), "the stopped run left its staging directory behind");

    let plan = run(trellis().current_dir(&project).args(["plan", "-v", view]));
    assert!(plan.stdout.contains(&format!("{view}: transform: invalidated")), "{}", plan.stdout);
    let text = run(trellis().current_dir(&project).args(["views", "-v", view]));
    assert!(text.stdout.starts_with(&format!("{view}  materialized (invalidation pending)  ")), "{}", text.stdout);
    let selected =
        run(trellis().current_dir(&project).args(["views", "-v", "g.mart/Out/2015/01/01", "-s", "invalidated"]));
    assert_eq!(selected.stdout.lines().count(), 1, "{}", selected.stdout);
    let embedded = run(trellis().current_dir(&project).args(["views", "--json", "-s", "invalidated", "-v", view]));
    let remote = views_remote(&project, &["views", "--json", "-s", "invalidated", "-v", view]);
    for listing in [embedded, remote] {
        assert_eq!(listing.code, 0, "{}", listing.stderr);
        let views: serde_json::Value = serde_json::from_str(&listing.stdout).unwrap();
        assert_eq!(views.as_array().map(Vec::len), Some(1), "{views}");
        assert_eq!(views[0]["state"], "materialized", "{views}");
        assert_eq!(views[0]["invalidation_pending"], true, "{views}");
    }
    // The next run acts on it, and then it is pending no more.
    crate::support::open_gates(&project);
    let next = run(trellis().current_dir(&project).args(["materialize", "--verbose", "-v", view]));
    assert!(next.stdout.contains(&format!("SUCCESSFUL             {view}")), "{}", next.stdout);
    let after = run(trellis().current_dir(&project).args(["views", "-s", "invalidated", "-v", view]));
    assert_eq!(after.stdout, "");
}

#[test]
fn runs_shows_how_often_each_transformation_was_attempted() {
    // A plugin that always fails retryably, tried 1 + its type's `retries`
    // (2, over [defaults]' 5), and a panicking one, tried once however many
    // retries there are.
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path();
    std::fs::create_dir_all(project.join("data/a/raw/In")).unwrap();
    std::fs::write(project.join("data/a/raw/In/_SUCCESS"), "").unwrap();
    let toml = format!(
        r#"
[defaults]
retries = 5
backoff = "1ms"

[plugins]
flaky = "{flaky}"
panic = "{panic}"

[[view]]
name = "a.raw/In"

[[view]]
name = "a.mid/Flaky"
transformation = {{ plugin = "flaky", retries = 2 }}

[[view.dependency]]
view = "a.raw/In"

[[view]]
name = "a.mid/Panic"
transformation = {{ plugin = "panic" }}

[[view.dependency]]
view = "a.raw/In"
"#,
        flaky = plugin_path("hostile_retryable").display(),
        panic = plugin_path("hostile_panic").display(),
    );
    std::fs::write(project.join("trellis.toml"), toml).unwrap();
    let ran = run(trellis().args(["materialize", "-v", "a.mid/e(Flaky,Panic)", "-p"]).arg(project));
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);

    let listed = run(trellis().args(["runs", "--json", "-p"]).arg(project));
    let runs: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    let id = runs[0]["id"].as_str().unwrap().to_string();
    let shown = run(trellis().args(["runs", &id, "-p"]).arg(project));
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(shown.stdout.contains("TERMINATED_WITH_ERROR  a.mid/Flaky  (3 attempts)"), "{}", shown.stdout);
    assert!(shown.stdout.lines().any(|l| l.trim_end().ends_with("a.mid/Panic")), "{}", shown.stdout);
    let json = run(trellis().args(["runs", &id, "--json", "-p"]).arg(project));
    let detail: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let attempts = |view: &str| {
        detail["flows"].as_array().unwrap().iter().find(|f| f["view"] == view).map(|f| f["attempts"].clone())
    };
    assert_eq!(attempts("a.mid/Flaky"), Some(serde_json::json!(3)), "{detail}");
    assert_eq!(attempts("a.mid/Panic"), Some(serde_json::json!(1)), "{detail}");
    // External data is only looked at: no attempts.
    assert_eq!(attempts("a.raw/In"), Some(serde_json::Value::Null), "{detail}");
}

/// Lineage both ways on the sample shop: `deps --downstream` finds what
/// depends on a raw day among the views the metastore records, with the
/// steps between, and `deps --dot` draws a pattern's closure.
#[test]
fn deps_shows_lineage_downstream_and_as_a_dot_graph() {
    let dir = tempfile::tempdir().unwrap();
    let project = crate::support::demo(dir.path());
    let downstream =
        run(trellis().args(["deps", "--downstream", "shop.raw/Orders/SHOP10/2015/05/03", "-p"]).arg(&project));
    assert_eq!(downstream.code, 0, "{}", downstream.stderr);
    expect![[r#"
        shop.raw/Orders/SHOP10/2015/05/03: 4 views downstream (of 98 recorded views of the types that depend on its type)
          1  shop.datamart/DailySales/SHOP10/2015/05/03
          1  shop.datamart/YearToDateSales/SHOP10/2015/01
          2  shop.datamart/MonthlySales/SHOP10/2015/05
          3  shop.datamart/MonthlyTotal/2015/05
    "#]]
    .assert_eq(&downstream.stdout);
    let top = run(trellis()
        .args(["deps", "--downstream", "--json", "shop.datamart/MonthlyTotal/2015/05", "-p"])
        .arg(&project));
    let top: serde_json::Value = serde_json::from_str(&top.stdout).unwrap();
    assert_eq!(top["downstream"], serde_json::json!([]), "{top}");

    let dot = run(trellis().args(["deps", "--dot", "shop.datamart/MonthlySales/SHOP10/2015/05", "-p"]).arg(&project));
    assert_eq!(dot.code, 0, "{}", dot.stderr);
    assert!(dot.stdout.starts_with("digraph"), "{}", dot.stdout);
    assert!(
        dot.stdout.contains(
            r#""shop.datamart/DailySales/SHOP10/2015/05/31" -> "shop.datamart/MonthlySales/SHOP10/2015/05";"#
        ),
        "{}",
        dot.stdout
    );
    // The view may also be given with -v, as other commands take theirs.
    let flagged =
        run(trellis().args(["deps", "--dot", "-v", "shop.datamart/MonthlySales/SHOP10/2015/05", "-p"]).arg(&project));
    assert_eq!((flagged.code, &flagged.stdout), (0, &dot.stdout), "{}", flagged.stderr);
    let both =
        run(trellis().args(["deps", "shop.raw/Orders/SHOP10/2015/05/01", "-v", "shop.raw/Orders/SHOP10/2015/05/02"]));
    assert_eq!(both.code, 2, "{}", both.stderr);
}

/// `cargo` for a crate outside this build, as a user would run it there:
/// the outer build's variables (target dir, features, flags) cleared, and
/// no network (the SDK's dependencies are in cargo's cache from building
/// plugins/). Unlike a user's, its intermediates go to one build directory
/// shared by every crate the tests write.
pub(crate) fn nested_cargo(dir: &std::path::Path, args: &[&str]) -> crate::support::Run {
    let mut command = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if (key.starts_with("CARGO_") && key != "CARGO_HOME") || key.starts_with("RUSTC") || key == "RUSTFLAGS" {
            command.env_remove(key);
        }
    }
    // Cargo's `build.build-dir` holds only intermediates (each crate's own
    // target/ still gets its component), so wit-bindgen and the SDK are
    // compiled once per checkout instead of once per crate.
    let shared = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("nested-cargo-build");
    command.env("CARGO_BUILD_BUILD_DIR", shared);
    command.current_dir(dir).args(args).arg("--offline");
    run(&mut command)
}

#[test]
fn a_plugin_crate_from_plugins_new_tests_builds_and_materializes_a_view_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let new = run(trellis().current_dir(dir.path()).args(["plugins", "new", "line-count"]));
    assert_eq!(new.code, 0, "{}", new.stderr);
    assert!(new.stdout.starts_with("wrote the transformation plugin line-count in line-count\n"), "{}", new.stdout);
    let crate_dir = dir.path().join("line-count");

    let tested = nested_cargo(&crate_dir, &["test"]);
    assert_eq!(tested.code, 0, "cargo test: {}", tested.stderr);
    assert!(tested.stdout.contains("test tests::blank_lines_do_not_count ... ok"), "{}", tested.stdout);
    let built = nested_cargo(&crate_dir, &["plugin"]);
    assert_eq!(built.code, 0, "cargo plugin: {}", built.stderr);
    // The component lands where the example project looks for it, and a
    // view computed by it materializes.
    assert!(crate_dir.join("target/wasm32-wasip2/release/line_count.wasm").is_file());
    let view = "example.mart/Lines/2015/05/01";
    let materialized = run(trellis().current_dir(&crate_dir).args(["materialize", "-p", "project", "-v", view]));
    assert_eq!(materialized.code, 0, "{}{}", materialized.stdout, materialized.stderr);
    assert_eq!(materialized.stdout, "2 views: 2 successful\n");
    let output = crate_dir.join("project/data/example/lines/2015/05/01/part-00000.csv");
    assert_eq!(std::fs::read_to_string(output).unwrap(), "lines\n3\n");

    // The other kinds build as they are, into plugins of their world.
    for (kind, world) in [("checksum", "checksum"), ("listener", "listener")] {
        let name = format!("my-{kind}");
        let new = run(trellis().current_dir(dir.path()).args(["plugins", "new", &name, "--kind", kind]));
        assert_eq!(new.code, 0, "{}", new.stderr);
        let built = nested_cargo(&dir.path().join(&name), &["plugin"]);
        assert_eq!(built.code, 0, "cargo plugin of a {kind}: {}", built.stderr);
        let wasm = dir.path().join(&name).join(format!("target/wasm32-wasip2/release/my_{kind}.wasm"));
        let inspected = run(trellis().args(["plugins", "inspect"]).arg(&wasm));
        assert!(inspected.stdout.contains(&format!("world:        {world}\n")), "{}", inspected.stdout);
    }

    // It writes only into a new or empty directory, and takes only names cargo takes.
    let again = run(trellis().current_dir(dir.path()).args(["plugins", "new", "line-count"]));
    assert_eq!(again.code, 2);
    assert_eq!(again.stderr, "error: line-count exists and is not empty; name a new or empty directory with --dir\n");
    let bad = run(trellis().current_dir(dir.path()).args(["plugins", "new", "Line_Count"]));
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("`Line_Count` is not a plugin name"), "{}", bad.stderr);
}

#[test]
fn bench_writes_only_into_a_new_directory_or_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench");
    for _ in 0..2 {
        // A second run in its own directory starts afresh there.
        let result = run(trellis().args(["bench", "--days", "2", "--shops", "1", "--dir"]).arg(&bench));
        assert_eq!(result.code, 0, "{}", result.stderr);
        assert!(result.stdout.starts_with("cold "), "{}", result.stdout);
    }
    // A project is not the bench's: refused before anything is written.
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("trellis.toml"), "[project]\nname = \"mine\"\n").unwrap();
    let refused = run(trellis().args(["bench", "--days", "2", "--shops", "1", "--dir"]).arg(&project));
    assert_eq!(
        (refused.code, refused.stderr.as_str()),
        (
            2,
            format!(
                "error: {} exists and was not written by `trellis bench`; name a new or empty directory\n",
                project.display()
            )
            .as_str()
        )
    );
    assert_eq!(std::fs::read_to_string(project.join("trellis.toml")).unwrap(), "[project]\nname = \"mine\"\n");
    assert_eq!(std::fs::read_dir(&project).unwrap().count(), 1, "nothing written beside trellis.toml");
}
