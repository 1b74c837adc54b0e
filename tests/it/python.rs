//! Python plugins, built from plugins/python with `trellis plugins build`
//! as a user builds them (componentize-py installed on first use from the
//! package registry, kept in the user's cache afterwards) and run by the
//! real host: byte-identical output against the Rust sample, the hostile
//! fixtures contained, an exception's traceback in the view's log, a
//! listener receiving a run's events, and rebuilds that rematerialize only
//! when the sources changed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use trellis::runtime::{FailureKind, TransformOutcome};

use crate::support::{Lcg, load, request, run, run_within, runtime, trellis};

/// Where the repository keeps its Python plugins.
fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/python").join(name)
}

/// `trellis plugins build DIR --out FILE`.
fn build(dir: &Path, out: &Path) -> crate::support::Run {
    run_within(trellis().args(["plugins", "build"]).arg(dir).arg("--out").arg(out), Duration::from_secs(600))
}

/// The Python plugins these tests use, built once per test binary (in
/// parallel), by name.
fn built(name: &str) -> PathBuf {
    const BUILT: [&str; 5] =
        ["py-csv-aggregate", "py-jsonl-listener", "hostile/py-spin", "hostile/py-memory-bomb", "hostile/py-raise"];
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("trellis-it-python-").tempdir().unwrap();
        // The first build may install componentize-py: one build does that
        // before the others start, so that they do not all install it.
        let (first, rest) = BUILT.split_first().unwrap();
        let out = |name: &str| dir.path().join(format!("{}.wasm", name.trim_start_matches("hostile/")));
        let result = build(&source(first), &out(first));
        assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
        std::thread::scope(|scope| {
            for name in rest {
                let out = out(name);
                scope.spawn(move || {
                    let result = build(&source(name), &out);
                    assert_eq!(result.code, 0, "{name}: {}{}", result.stdout, result.stderr);
                });
            }
        });
        dir
    });
    let path = dir.path().join(format!("{name}.wasm"));
    assert!(path.exists(), "{name} is not among the Python plugins built here");
    path
}

/// Regular files under `dir`, by relative path, with their bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                pending.push(entry.path());
            } else {
                let relative = entry.path().strip_prefix(dir).unwrap().display().to_string();
                found.insert(relative, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    found
}

#[test]
fn the_sdk_and_the_sample_pass_their_native_unit_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (dir, top) in [
        ("plugin-sdk-python/tests", "plugin-sdk-python"),
        ("plugins/python/py-csv-aggregate", "plugins/python/py-csv-aggregate"),
    ] {
        let result = run(std::process::Command::new("python3")
            .current_dir(&root)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-m", "unittest", "discover", "-s", dir, "-t", top]));
        assert_eq!(result.code, 0, "{dir}: {}{}", result.stdout, result.stderr);
        assert!(result.stderr.contains("\nOK"), "{dir}: {}", result.stderr);
    }
}

/// A day of sales in several files, with what makes formatting differ:
/// negatives, many decimals, missing values, quoted fields, a subdirectory.
fn sales(dir: &Path, random: &mut Lcg) {
    std::fs::create_dir_all(dir.join("late")).unwrap();
    for file in 0..3 {
        let mut csv = String::from("shop,day,amount,note\n");
        for _ in 0..random.below(300) + 100 {
            let shop = format!("SHOP{}", random.below(7));
            let day = format!("2015-05-0{}", random.below(3) + 1);
            let amount = match random.below(12) {
                0 => String::new(),
                1 => format!("-{}.{:03}", random.below(500), random.below(1000)),
                2 => format!("{}", random.below(10_000)),
                3 => format!("{}.{:07}", random.below(100), random.below(10_000_000)),
                _ => format!("{}.{:02}", random.below(2_000), random.below(100)),
            };
            writeln!(csv, "{shop},{day},{amount},\"a note, quoted {}\"", random.below(9)).unwrap();
        }
        let name = if file == 2 { "late/part-2.csv".to_string() } else { format!("part-{file}.csv") };
        std::fs::write(dir.join(name), csv).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn py_csv_aggregate_writes_byte_for_byte_what_csv_aggregate_writes() {
    let rust = load("csv_aggregate").await;
    let python = runtime().load_file(&built("py-csv-aggregate")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut random = Lcg::new(18);
    let (north, south) = (dir.path().join("north"), dir.path().join("south"));
    sales(&north, &mut random);
    sales(&south, &mut random);
    let configs: [&[(&str, &str)]; 3] = [
        &[
            ("group-by", "shop,day"),
            ("aggregates", "count(*), count(amount), total=sum(amount), min(amount), max(amount)"),
        ],
        &[("group-by", "day"), ("aggregates", "sum(amount)"), ("file", "by-day.csv")],
        &[("aggregates", "count(*), max(amount)")],
    ];
    for config in configs {
        let mut outputs = Vec::new();
        for (name, plugin) in [("rust", &rust), ("python", &python)] {
            let out = dir.path().join(format!("out-{name}-{}", outputs.len()));
            std::fs::create_dir_all(&out).unwrap();
            let report =
                plugin.transform(&request(&[("north", &north), ("south", &south)], &out, config)).await.unwrap();
            let counters = match report.result {
                Ok(TransformOutcome::Data { counters }) => counters,
                other => panic!("{name} with {config:?}: {other:?}"),
            };
            outputs.push((counters, files(&out)));
        }
        assert!(!outputs[0].1.is_empty());
        assert_eq!(outputs[0], outputs[1], "Python and Rust outputs differ with {config:?}");
    }

    // A malformed number fails both the same way, naming file and line.
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("a.csv"), "shop,amount\nS1,1.5\nS1,abc\n").unwrap();
    let mut failures = Vec::new();
    for plugin in [&rust, &python] {
        let out = dir.path().join(format!("bad-out-{}", failures.len()));
        std::fs::create_dir_all(&out).unwrap();
        let report = plugin
            .transform(&request(&[("orders", &bad)], &out, &[("group-by", "shop"), ("aggregates", "sum(amount)")]))
            .await
            .unwrap();
        let failure = report.result.unwrap_err();
        failures.push((failure.kind, failure.message));
    }
    assert_eq!(failures[0], failures[1]);
    assert_eq!(failures[0].0, FailureKind::Fatal);
    assert!(failures[0].1.contains("orders:a.csv line 3"), "{}", failures[0].1);
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_python_plugins_are_contained_like_the_rust_ones() {
    let with_limits = |plugin: trellis::runtime::Plugin, deadline: u64, memory_mib: usize| {
        let mut limits = plugin.limits();
        limits.deadline = Duration::from_secs(deadline);
        limits.memory = memory_mib << 20;
        plugin.with_limits(limits)
    };
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| {
        let out = dir.path().join(name);
        std::fs::create_dir_all(&out).unwrap();
        out
    };

    let spin = with_limits(runtime().load_file(&built("py-spin")).await.unwrap(), 2, 512);
    let failure = spin.transform(&request(&[], &out("spin"), &[])).await.unwrap().result.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Timeout, "{}", failure.message);

    // The cap counts the interpreter too: 64 MiB leaves some 50 for the list.
    let bomb = with_limits(runtime().load_file(&built("py-memory-bomb")).await.unwrap(), 60, 64);
    let report = bomb.transform(&request(&[], &out("bomb"), &[])).await.unwrap();
    let failure = report.result.unwrap_err();
    assert_eq!(failure.kind, FailureKind::MemoryExhausted, "{}", failure.message);
    assert!(report.peak_memory <= 64 << 20, "{}", report.peak_memory);

    let raise = runtime().load_file(&built("py-raise")).await.unwrap();
    let report = raise.transform(&request(&[], &out("raise"), &[])).await.unwrap();
    let failure = report.result.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Panic, "{}", failure.message);
    for expected in [
        "Traceback (most recent call last)",
        "in run",
        "in materialize",
        "ValueError: deliberate exception while materializing test/View",
    ] {
        assert!(failure.message.contains(expected), "{expected:?} is not in {}", failure.message);
    }
    assert_eq!(std::fs::read_dir(out("raise")).unwrap().count(), 0, "nothing is left in the output");

    // The host is unharmed: a well-behaved Python plugin still runs.
    let input = out("input");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("a.csv"), "shop,amount\nS1,1.5\nS1,2\n").unwrap();
    let aggregate = runtime().load_file(&built("py-csv-aggregate")).await.unwrap();
    let report = aggregate
        .transform(&request(
            &[("orders", &input)],
            &out("after"),
            &[("group-by", "shop"), ("aggregates", "sum(amount)")],
        ))
        .await
        .unwrap();
    assert!(matches!(report.result, Ok(TransformOutcome::Data { .. })), "{:?}", report.result);
    assert_eq!(std::fs::read_to_string(out("after").join("part-00000.csv")).unwrap(), "shop,sum_amount\nS1,3.5\n");
}

/// A project of one day's sales aggregated by the Python plugin at
/// `plugin`, with the Python listener recording every event, and a view
/// type that `raises` if asked.
fn project(dir: &Path, plugin: &Path) {
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    std::fs::copy(built("py-jsonl-listener"), dir.join("plugins/py-jsonl-listener.wasm")).unwrap();
    std::fs::copy(built("py-raise"), dir.join("plugins/py-raise.wasm")).unwrap();
    let toml = format!(
        r#"[plugins]
aggregate = "{}"
jsonl = "plugins/py-jsonl-listener.wasm"
raise = "plugins/py-raise.wasm"

[[view]]
name = "py.raw/Sales"
time = {{ frequency = "1d", initial = "2015-05-01" }}
path = "raw/${{YEAR}}/${{MONTH}}/${{DAY}}"

[[view]]
name = "py.mart/Daily"
time = {{ frequency = "1d", initial = "2015-05-01" }}
transformation = {{ plugin = "aggregate", config = {{ group-by = "shop", aggregates = "count(*), sum(amount)" }} }}

[[view.dependency]]
view = "py.raw/Sales"

[[view]]
name = "py.mart/Broken"
time = {{ frequency = "1d", initial = "2015-05-01" }}
transformation = {{ plugin = "raise" }}

[[view.dependency]]
view = "py.raw/Sales"

[[listener]]
name = "events"
plugin = "jsonl"
"#,
        plugin.display()
    );
    std::fs::write(dir.join("trellis.toml"), toml).unwrap();
    let day = dir.join("data/raw/2015/05/01");
    std::fs::create_dir_all(&day).unwrap();
    std::fs::write(day.join("sales.csv"), "shop,amount\nS1,1.5\nS2,4\nS1,-0.25\n").unwrap();
    std::fs::write(day.join("_SUCCESS"), "").unwrap();
}

/// How many views the project's latest run transformed.
fn transformed(dir: &Path) -> u64 {
    let result = run(trellis().args(["runs", "--json", "-p"]).arg(dir));
    assert_eq!(result.code, 0, "{}", result.stderr);
    let runs: serde_json::Value = serde_json::from_str(&result.stdout).unwrap();
    let latest = runs.as_array().unwrap().iter().max_by_key(|run| run["started"].as_i64()).unwrap().clone();
    latest["transformed"].as_u64().unwrap()
}

fn materialize(dir: &Path, view: &str) -> crate::support::Run {
    run_within(trellis().args(["materialize", "-p"]).arg(dir).args(["-v", view]), Duration::from_secs(300))
}

#[test]
fn an_exception_fails_the_view_with_its_traceback_in_the_view_log() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path(), &built("py-csv-aggregate"));
    let result = materialize(dir.path(), "py.mart/Broken/2015/05/01");
    assert_ne!(result.code, 0, "{}{}", result.stdout, result.stderr);
    assert!(result.stderr.contains("failed: py.mart/Broken/2015/05/01: "), "{}", result.stderr);
    assert!(result.stderr.contains("ValueError: deliberate exception"), "{}", result.stderr);
    let logs = run(trellis().args(["logs", "-p"]).arg(dir.path()).arg("py.mart/Broken/2015/05/01"));
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    for expected in [
        "Traceback (most recent call last)",
        "in materialize",
        "ValueError: deliberate exception while materializing py.mart/Broken/2015/05/01",
    ] {
        assert!(logs.stdout.contains(expected), "{expected:?} is not in the view's log:\n{}", logs.stdout);
    }
}

/// The view's recorded version checksum (with no process holding the metastore).
fn version_of(dir: &Path, view: &str) -> String {
    let store = trellis::metastore::Metastore::open(&dir.join(".trellis/metastore")).unwrap();
    let record = store.view(view).unwrap().unwrap_or_else(|| panic!("{view} is not recorded"));
    record.version_checksum.unwrap_or_else(|| panic!("{view} has no version checksum"))
}

#[test]
fn a_rebuild_rematerializes_only_when_the_sources_changed_and_the_listener_sees_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let plugin_dir = dir.path().join("py-csv-aggregate");
    for (relative, content) in files(&source("py-csv-aggregate")) {
        let path = plugin_dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let component = plugin_dir.join("build/py-csv-aggregate.wasm");
    let build_here = || run_within(trellis().args(["plugins", "build"]).arg(&plugin_dir), Duration::from_secs(600));
    let first = build_here();
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(first.stdout.starts_with("built the transformation plugin py-csv-aggregate in "), "{}", first.stdout);
    let bytes = std::fs::read(&component).unwrap();
    let again = build_here();
    assert_eq!(
        again.stdout,
        format!("py-csv-aggregate is up to date (its sources are unchanged): {}\n", component.display())
    );
    assert_eq!(std::fs::read(&component).unwrap(), bytes, "an unchanged rebuild writes nothing");

    let project_dir = dir.path().join("project");
    project(&project_dir, &component);
    let view = "py.mart/Daily/2015/05/01";
    let result = materialize(&project_dir, view);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    assert_eq!(transformed(&project_dir), 1, "{}", result.stdout);
    let output = project_dir.join("data/py/mart/Daily/2015/05/01/part-00000.csv");
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "shop,count,sum_amount\nS1,2,1.25\nS2,1,4\n");
    let checksum = version_of(&project_dir, view);

    // Built again from the same sources, with other bytes (componentize-py
    // does not reproduce them): nothing is outdated.
    std::fs::remove_file(&component).unwrap();
    assert_eq!(build_here().code, 0);
    let result = materialize(&project_dir, view);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    assert_eq!(transformed(&project_dir), 0, "{}", result.stdout);
    assert_eq!(version_of(&project_dir, view), checksum);

    // A changed source is a changed version.
    let module = plugin_dir.join("py_csv_aggregate.py");
    let mut text = std::fs::read_to_string(&module).unwrap();
    text.push_str("\n# a change of logic, as far as trellis can tell\n");
    std::fs::write(&module, text).unwrap();
    let rebuilt = build_here();
    assert!(rebuilt.stdout.starts_with("built the "), "{}", rebuilt.stdout);
    let result = materialize(&project_dir, view);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    assert_eq!(transformed(&project_dir), 1, "{}", result.stdout);
    assert_ne!(version_of(&project_dir, view), checksum);

    // The Python listener received every event of the three runs.
    let recorded = std::fs::read_to_string(project_dir.join(".trellis/listeners/events/events.jsonl")).unwrap();
    let events: Vec<serde_json::Value> = recorded.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let sequences: Vec<u64> = events.iter().map(|event| event["sequence"].as_u64().unwrap()).collect();
    assert!(sequences.windows(2).all(|pair| pair[0] < pair[1]), "{sequences:?}");
    let count = |state: &str| events.iter().filter(|event| event["view"] == view && event["current"] == state).count();
    assert_eq!((count("transforming"), count("materialized")), (2, 3), "{recorded}");
    let runs: std::collections::BTreeSet<&str> = events.iter().filter_map(|event| event["run_id"].as_str()).collect();
    assert_eq!(runs.len(), 3, "{recorded}");
}

#[test]
fn a_plugin_directory_the_build_refuses_is_named_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let cases = [
        ("", "pyproject.toml: not found"),
        ("[project]\nname = \"x\"\n", "pyproject.toml: it has no [tool.trellis] table"),
        (
            "[project]\nname = \"x\"\n[tool.trellis]\nkind = \"sink\"\n",
            "kind `sink` is not one of transformation, checksum, listener",
        ),
        (
            "[project]\nname = \"x\"\n[tool.trellis]\nkind = \"listener\"\nmodule = \"x-y\"\n",
            "module `x-y` is not a Python module name",
        ),
    ];
    for (pyproject, expected) in cases {
        let plugin = tempfile::tempdir().unwrap();
        if !pyproject.is_empty() {
            std::fs::write(plugin.path().join("pyproject.toml"), pyproject).unwrap();
        }
        let result = build(plugin.path(), &out);
        assert_eq!(result.code, 2, "{}", result.stdout);
        assert_eq!(result.stderr.lines().count(), 1, "{}", result.stderr);
        assert!(result.stderr.contains(expected), "{expected:?} is not in {}", result.stderr);
    }

    // The module declares another kind than pyproject.toml says: the SDK's
    // line, not componentize-py's backtrace.
    let plugin = dir.path().join("wrong-kind");
    std::fs::create_dir_all(&plugin).unwrap();
    std::fs::write(
        plugin.join("pyproject.toml"),
        "[project]\nname = \"wrong-kind\"\n[tool.trellis]\nkind = \"checksum\"\n",
    )
    .unwrap();
    std::fs::copy(source("py-trivial/py_trivial.py"), plugin.join("wrong_kind.py")).unwrap();
    let result = build(&plugin, &out);
    assert_eq!(result.code, 2, "{}", result.stdout);
    // On a machine without componentize-py, this build may be the one that
    // installs it, which it says first.
    let said: Vec<&str> =
        result.stderr.lines().filter(|line| !line.starts_with("installing componentize-py ")).collect();
    assert_eq!(said.len(), 1, "{}", result.stderr);
    assert!(
        result.stderr.contains("declares a transformation") && result.stderr.contains("kind = \"checksum\""),
        "{}",
        result.stderr
    );
    assert!(!out.exists());

    // No interpreter to install componentize-py with: said, not skipped.
    let tools = tempfile::tempdir().unwrap();
    let result = run(trellis()
        .args(["plugins", "build"])
        .arg(source("py-trivial"))
        .arg("--out")
        .arg(&out)
        .env("TRELLIS_TOOLS_DIR", tools.path())
        .env("TRELLIS_PYTHON", "/nonexistent/python3"));
    assert_eq!(result.code, 2, "{}", result.stdout);
    assert_eq!(
        result.stderr.lines().collect::<Vec<_>>(),
        ["error: building Python plugins needs Python 3.9 or newer with pip, to install componentize-py: \
          cannot run /nonexistent/python3: No such file or directory (os error 2) \
          (install python3 and python3-pip, or name an interpreter with TRELLIS_PYTHON)"]
    );
}

#[test]
fn a_python_plugin_from_plugins_new_tests_builds_and_runs_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|scope| {
        for kind in ["transformation", "checksum", "listener"] {
            let dir = dir.path().join(kind);
            scope.spawn(move || {
                let name = format!("my-{kind}");
                let new = run(trellis().args(["plugins", "new", &name, "--python", "--kind", kind, "--dir"]).arg(&dir));
                assert_eq!(new.code, 0, "{}", new.stderr);
                let tests = run(std::process::Command::new("python3")
                    .current_dir(&dir)
                    .env("PYTHONDONTWRITEBYTECODE", "1")
                    .args(["-m", "unittest"]));
                assert_eq!(tests.code, 0, "{kind}: {}{}", tests.stdout, tests.stderr);
                let built =
                    run_within(trellis().current_dir(&dir).args(["plugins", "build", "."]), Duration::from_secs(600));
                assert_eq!(built.code, 0, "{kind}: {}", built.stderr);
                let component = dir.join(format!("build/{name}.wasm"));
                let inspect = run(trellis().args(["plugins", "inspect"]).arg(&component));
                assert_eq!(inspect.code, 0, "{kind}: {}", inspect.stderr);
                assert!(inspect.stdout.contains(&format!("world:        {kind}\n")), "{}", inspect.stdout);
                assert!(inspect.stdout.contains("built from:   python sources "), "{}", inspect.stdout);
                if kind == "transformation" {
                    let result = materialize(&dir.join("project"), "example.mart/Lines/2015/05/01");
                    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
                    let lines = dir.join("project/data/example/lines/2015/05/01/part-00000.csv");
                    assert_eq!(std::fs::read_to_string(lines).unwrap(), "lines\n3\n");
                }
            });
        }
    });
}
