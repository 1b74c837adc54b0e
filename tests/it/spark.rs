//! Views computed by Apache Spark, with a real PySpark from the package
//! registry in local mode (installed by `trellis engines install spark`
//! into the user's tools directory when it is missing, pip's wheel cache
//! kept between runs): Spark SQL and a PySpark application compute what
//! csv-aggregate computes; a failing query fails its view with its log; a
//! stop and a deadline kill the job and leave no partial data; editing the
//! query rebuilds exactly its cone. Each Spark application costs about
//! 15 s, so the tests run few of them, several steps each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::{Lcg, Run, plugin_path, run, run_within, trellis};

/// PySpark where `trellis` finds it, installed once per test binary; a
/// machine that cannot have it fails these tests saying why, never skips them.
fn spark() {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        let result = run(trellis().args(["engines", "install", "spark"]));
        if result.code != 0 {
            return Err(format!("`trellis engines install spark` failed: {}", result.stderr));
        }
        let found = run(trellis().arg("engines"));
        if !found.stdout.contains("spark-submit:") {
            return Err(format!("Spark is installed but not found: {}", found.stdout));
        }
        Ok(())
    });
    if let Err(reason) = installed {
        panic!("the Spark tests need PySpark and Java 17: {reason}");
    }
}

/// How long a materialize with Spark jobs may take before the test fails:
/// a hang turned into a failure, with room for a loaded machine.
const LIMIT: Duration = Duration::from_secs(600);

fn materialize(dir: &Path, pattern: &str) -> Run {
    run_within(trellis().args(["materialize", "-p"]).arg(dir).args(["-v", pattern]), LIMIT)
}

/// Orders of two shops on three days of May 2015, with amounts of up to
/// seven decimals, a file in a subdirectory, and the done flags.
fn orders(storage: &Path, random: &mut Lcg) {
    let mut id = 0;
    for shop in ["SHOP10", "SHOP20"] {
        for day in 1..=3 {
            let dir = storage.join(format!("raw/orders/{shop}/2015/05/{day:02}"));
            std::fs::create_dir_all(dir.join("late")).unwrap();
            for file in ["orders.csv", "late/orders.csv"] {
                let mut csv = String::from("order_id,shop,day,amount\n");
                for _ in 0..(2 + random.below(5)) {
                    id += 1;
                    let amount = match random.below(3) {
                        0 => format!("{}.{:02}", random.below(500), random.below(100)),
                        1 => format!("{}.{:07}", random.below(50), random.below(10_000_000)),
                        _ => format!("-{}.5", random.below(20)),
                    };
                    csv.push_str(&format!("{id},{shop},2015-05-{day:02},{amount}\n"));
                }
                std::fs::write(dir.join(file), csv).unwrap();
            }
            std::fs::write(dir.join("_SUCCESS"), "").unwrap();
        }
    }
}

/// A project in `dir` with the given plugins (copied from the build) and
/// the text after the raw orders' view type.
fn project(dir: &Path, plugins: &[(&str, &str)], rest: &str, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    let mut declared = String::new();
    for (name, built) in plugins {
        std::fs::copy(plugin_path(built), dir.join(format!("plugins/{name}.wasm"))).unwrap();
        declared.push_str(&format!("{name} = \"plugins/{name}.wasm\"\n"));
    }
    for (path, content) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let text = format!(
        r#"[project]
name = "spark-test"

[defaults]
retries = 0

[plugins]
{declared}
[[view]]
name = "t.raw/Orders"
parameters = [{{ name = "shop" }}]
fields = [
    {{ name = "order_id", type = "string" }},
    {{ name = "shop", type = "string" }},
    {{ name = "day", type = "date" }},
    {{ name = "amount", type = "decimal" }},
]
time = {{ frequency = "1d", initial = "2015-01-01", timezone = "Europe/Berlin" }}
path = "raw/orders/${{shop}}/${{YEAR}}/${{MONTH}}/${{DAY}}"
{rest}"#
    );
    std::fs::write(dir.join("trellis.toml"), text).unwrap();
}

/// A monthly view type over every day's orders of both shops.
fn monthly(name: &str, transformation: &str, extra: &str) -> String {
    format!(
        r#"
[[view]]
name = "{name}"
time = {{ frequency = "1M", initial = "2015-01-01", timezone = "Europe/Berlin" }}
transformation = {transformation}
{extra}
[[view.dependency]]
name = "orders"
view = "t.raw/Orders"
parameters = {{ shop = ["SHOP10", "SHOP20"] }}
time = "all"
"#
    )
}

/// A decimal as a number says it: no trailing zeros, no trailing dot.
fn number(text: &str) -> String {
    if !text.contains('.') {
        return text.to_string();
    }
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The rows of a view's CSV files, header first, numbers normalized, sorted.
fn rows(dir: &Path) -> Vec<String> {
    let mut header = None;
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "csv") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        header = lines.next().map(str::to_string);
        rows.extend(lines.map(|line| line.split(',').map(number).collect::<Vec<_>>().join(",")));
    }
    rows.sort();
    header.into_iter().chain(rows).collect()
}

/// Every entry below `dir`, relative.
fn listing(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&next) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                pending.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The processes whose command line mentions `dir` (a test's own
/// directory): the Spark jobs a test started, by their paths.
fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && !cmdline.contains("materialize") {
            found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// The counters of a view's flow in the run that addressed it.
fn counters(dir: &Path, view: &str) -> serde_json::Value {
    let runs = run(trellis().args(["runs", "--json", "-p"]).arg(dir));
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).unwrap();
    let id = runs.as_array().unwrap().iter().find(|r| r["pattern"] == view).unwrap()["id"].clone();
    let detail = run(trellis().args(["runs", "--json", "-p"]).arg(dir).arg(id.as_str().unwrap()));
    let detail: serde_json::Value = serde_json::from_str(&detail.stdout).unwrap();
    let flows = detail["flows"].as_array().unwrap();
    flows.iter().find(|f| f["view"] == view).map(|f| f["counters"].clone()).unwrap_or_default()
}

/// How many views the latest run transformed.
fn transformed(dir: &Path) -> u64 {
    let runs = run(trellis().args(["runs", "--json", "-p"]).arg(dir));
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).unwrap();
    runs.as_array().unwrap().iter().max_by_key(|r| r["started"].as_i64()).unwrap()["transformed"].as_u64().unwrap()
}

const DAILY_SQL: &str = "-- orders and revenue per shop and day
SELECT shop, day, COUNT(*) AS orders, SUM(amount) AS revenue
FROM orders
GROUP BY shop, day;
";

const DAILY_PY: &str = r#""""Orders and revenue per shop and day, as PySpark."""
import sys

from pyspark.sql import functions as F
from trellis_spark import job

assert job.arguments == ["a b", "c"], job.arguments
assert sorted(job.inputs) == ["orders"], job.inputs
orders = job.input("orders")
job.write(orders.groupBy("shop", "day").agg(F.count("*").alias("orders"), F.sum("amount").alias("revenue")))
"#;

#[test]
fn spark_sql_and_a_pyspark_application_compute_what_csv_aggregate_computes() {
    spark();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let aggregate = r#"{ plugin = "csv-aggregate", config = { group-by = "shop,day", aggregates = "orders=count(*),revenue=sum(amount)" } }"#;
    let fields = r#"fields = [{ name = "shop", type = "string" }, { name = "day", type = "date" }, { name = "orders", type = "long" }, { name = "revenue", type = "decimal" }]"#;
    let mut rest = monthly("t.wasm/Daily", aggregate, "");
    rest.push_str(&monthly(
        "t.spark/Daily",
        r#"{ plugin = "spark-sql", config = { query-file = "jobs/daily.sql" }, resources = ["jobs/daily.sql"] }"#,
        fields,
    ));
    rest.push_str(&monthly(
        "t.spark/DailyPy",
        r#"{ plugin = "spark-python", config = { application = "jobs/daily.py", args = "a b,c" }, resources = ["jobs/daily.py"] }"#,
        &format!("format = \"parquet\"\n{fields}"),
    ));
    // Spark SQL over the PySpark view's Parquet, written as CSV again.
    rest.push_str(
        r#"
[[view]]
name = "t.spark/FromParquet"
time = { frequency = "1M", initial = "2015-01-01", timezone = "Europe/Berlin" }
transformation = { plugin = "spark-sql", config = { query = "SELECT shop, day, orders, revenue FROM daily" } }

[[view.dependency]]
name = "daily"
view = "t.spark/DailyPy"
time = "current(0)"
"#,
    );
    project(
        root,
        &[("csv-aggregate", "csv_aggregate"), ("spark-sql", "spark_sql"), ("spark-python", "spark_python")],
        &rest,
        &[("jobs/daily.sql", DAILY_SQL), ("jobs/daily.py", DAILY_PY)],
    );
    orders(&root.join("data"), &mut Lcg::new(19));
    for pattern in ["t.wasm/Daily/2015/05", "t.spark/Daily/2015/05", "t.spark/FromParquet/2015/05"] {
        let result = materialize(root, pattern);
        assert_eq!(result.code, 0, "{pattern}: {}\n{}", result.stdout, result.stderr);
    }

    let data = root.join("data");
    let wasm = rows(&data.join("t/wasm/Daily/2015/05"));
    assert_eq!(wasm.len(), 7, "a header and 6 shop-days: {wasm:?}");
    assert_eq!(rows(&data.join("t/spark/Daily/2015/05")), wasm, "Spark SQL against csv-aggregate");
    assert_eq!(rows(&data.join("t/spark/FromParquet/2015/05")), wasm, "PySpark, then Spark SQL over its Parquet");
    // Published under trellis's names, with the view's done flag and
    // nothing of Spark's or of the job's scratch directory.
    // The data, its done flag, and the receipt of the attempt that published it.
    let receipt = trellis::scheduler::publish::RECEIPT;
    assert_eq!(listing(&data.join("t/spark/Daily/2015/05")), [receipt, "_SUCCESS", "part-00000.csv"]);
    assert_eq!(listing(&data.join("t/spark/DailyPy/2015/05")), [receipt, "_SUCCESS", "part-00000.snappy.parquet"]);
    assert_eq!(listing(&data.join(".trellis-staging")), Vec::<String>::new(), "no staging left");
    // What it read and wrote, from Spark's event log.
    let counted = counters(root, "t.spark/Daily/2015/05");
    assert_eq!(counted["rows_out"], 6, "{counted}");
    assert!(counted["rows_in"].as_u64().unwrap() >= 24, "{counted}");
    let logs = run(trellis().args(["logs", "-p"]).arg(root).arg("t.spark/DailyPy/2015/05"));
    assert!(logs.stdout.contains("input orders: 6 path(s) (csv)"), "{}", logs.stdout);
    assert!(logs.stdout.contains("outcome: data"), "{}", logs.stdout);
    assert!(processes_under(root).is_empty(), "{:?}", processes_under(root));
}

#[test]
fn a_failing_query_fails_its_view_with_its_log_and_editing_the_query_rebuilds_exactly_its_cone() {
    spark();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut rest = monthly(
        "t.spark/Total",
        r#"{ plugin = "spark-sql", config = { query-file = "jobs/total.sql" }, resources = ["jobs/total.sql"] }"#,
        r#"fields = [{ name = "orders", type = "long" }, { name = "revenue", type = "decimal" }]"#,
    );
    // A dependent of the Spark view, and a view beside it.
    rest.push_str(
        r#"
[[view]]
name = "t.wasm/OfTotal"
time = { frequency = "1M", initial = "2015-01-01", timezone = "Europe/Berlin" }
transformation = { plugin = "csv-aggregate", config = { aggregates = "orders=sum(orders)" } }

[[view.dependency]]
view = "t.spark/Total"
time = "current(0)"
"#,
    );
    rest.push_str(&monthly(
        "t.wasm/Beside",
        r#"{ plugin = "csv-aggregate", config = { aggregates = "orders=count(*)" } }"#,
        "",
    ));
    let broken = "SELECT COUNT(*) AS orders, SUM(amuont) AS revenue FROM orders";
    project(
        root,
        &[("csv-aggregate", "csv_aggregate"), ("spark-sql", "spark_sql")],
        &rest,
        &[("jobs/total.sql", broken)],
    );
    orders(&root.join("data"), &mut Lcg::new(7));
    let data = root.join("data");

    // The query names a column that does not exist: the view fails at
    // once (not retried: the same query fails the same way), with why.
    let (cone, beside_view) = ("t.wasm/OfTotal/2015/05", "t.wasm/Beside/2015/05");
    assert_eq!(materialize(root, beside_view).code, 0);
    let result = materialize(root, cone);
    assert_eq!(result.code, 1, "{}\n{}", result.stdout, result.stderr);
    assert!(result.stderr.contains("failed: t.spark/Total/2015/05"), "{}", result.stderr);
    assert!(result.stderr.contains("UNRESOLVED_COLUMN"), "{}", result.stderr);
    assert!(result.stderr.contains("42703"), "{}", result.stderr);
    assert!(result.stderr.contains("gave up after 1 attempt"), "{}", result.stderr);
    let logs = run(trellis().args(["logs", "-p"]).arg(root).arg("t.spark/Total/2015/05"));
    assert!(logs.stdout.contains("info  failed: AnalysisException: [UNRESOLVED_COLUMN"), "{}", logs.stdout);
    assert!(logs.stdout.contains("stdout Traceback (most recent call last)"), "the traceback: {}", logs.stdout);
    assert!(!data.join("t/spark/Total/2015/05").exists(), "nothing published");
    assert_eq!(listing(&data.join(".trellis-staging")), Vec::<String>::new(), "no staging left");

    // Fixed: the view and its dependent are built.
    let fixed = "SELECT COUNT(*) AS orders, SUM(amount) AS revenue FROM orders";
    std::fs::write(root.join("jobs/total.sql"), fixed).unwrap();
    let result = materialize(root, cone);
    assert_eq!(result.code, 0, "{}\n{}", result.stdout, result.stderr);
    let total = rows(&data.join("t/spark/Total/2015/05"));
    let beside = rows(&data.join("t/wasm/Beside/2015/05"));
    assert_eq!(total[0], "orders,revenue");
    assert_eq!(total[1].split(',').next(), beside.get(1).map(String::as_str), "{total:?} {beside:?}");

    // Edited again: plan names the file, and exactly the Spark view and
    // its dependent are rebuilt; the view beside them is not.
    let edited = "SELECT COUNT(*) AS orders, SUM(amount) AS revenue FROM orders WHERE amount > 0";
    std::fs::write(root.join("jobs/total.sql"), edited).unwrap();
    let plan = run(trellis().args(["plan", "-p"]).arg(root).args(["-v", cone]));
    assert!(
        plan.stdout.contains("t.spark/Total/2015/05: transform: version changed (resource jobs/total.sql)"),
        "{}",
        plan.stdout
    );
    let result = materialize(root, cone);
    assert_eq!(result.code, 0, "{}\n{}", result.stdout, result.stderr);
    assert_eq!(transformed(root), 2, "the Spark view and its dependent: {}", result.stdout);
    let positive = rows(&data.join("t/spark/Total/2015/05"));
    assert_ne!(positive, total, "the edited query's result");
    // Nothing beside the cone, and nothing more to do.
    for pattern in [beside_view, cone] {
        let result = materialize(root, pattern);
        assert_eq!(result.code, 0, "{}", result.stderr);
        assert_eq!(transformed(root), 0, "{pattern}");
    }
}

/// An application that, when its input holds an order of shop `SLOW`,
/// writes part of its output and then waits for ever.
const SLOW_PY: &str = r#""""Copies the orders; with a SLOW order among them, hangs halfway."""
import time

from trellis_spark import job

orders = job.input("orders")
if orders.filter(orders.shop == "SLOW").count() > 0:
    orders.write.csv(job.output + "/partial")
    time.sleep(3600)
job.write(orders.select("order_id", "amount"))
"#;

/// Waits until a job's partial output is there: the application is in its sleep.
fn wait_for_partial(storage: &Path) {
    let started = Instant::now();
    loop {
        let partial = listing(&storage.join(".trellis-staging"))
            .iter()
            .any(|path| path.contains(".trellis-spark/output/partial/part-"));
        if partial {
            return;
        }
        assert!(started.elapsed() < LIMIT, "the job never wrote its partial output");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The day's orders again, with an order of shop SLOW, re-delivered.
fn deliver_slow_order(storage: &Path) {
    let day = storage.join("raw/orders/SHOP10/2015/05/01");
    std::fs::write(day.join("slow.csv"), "order_id,shop,day,amount\n999,SLOW,2015-05-01,1.00\n").unwrap();
    std::fs::remove_file(day.join("_SUCCESS")).unwrap();
    std::fs::write(day.join("_SUCCESS"), "").unwrap();
}

#[test]
fn a_stop_and_a_deadline_kill_the_job_and_leave_no_partial_data() {
    spark();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let rest = r#"
[[view]]
name = "t.spark/Copy"
parameters = [{ name = "shop" }]
time = { frequency = "1d", initial = "2015-01-01", timezone = "Europe/Berlin" }
transformation = { plugin = "spark-python", config = { application = "jobs/slow.py" }, resources = ["jobs/slow.py"] }

[[view.dependency]]
name = "orders"
view = "t.raw/Orders"
time = "current(0)"
"#;
    project(root, &[("spark-python", "spark_python")], rest, &[("jobs/slow.py", SLOW_PY)]);
    let storage = root.join("data");
    orders(&storage, &mut Lcg::new(3));
    let view = "t.spark/Copy/SHOP10/2015/05/01";
    let published = storage.join("t/spark/Copy/SHOP10/2015/05/01");
    let result = materialize(root, view);
    assert_eq!(result.code, 0, "{}\n{}", result.stdout, result.stderr);
    let before: BTreeMap<PathBuf, Vec<u8>> = std::fs::read_dir(&published)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|path| (path.clone(), std::fs::read(&path).unwrap()))
        .collect();
    assert_eq!(before.len(), 3, "its data, done flag and receipt: {before:?}");
    let unchanged = || {
        for (path, content) in &before {
            assert_eq!(&std::fs::read(path).unwrap(), content, "{} changed", path.display());
        }
        assert_eq!(std::fs::read_dir(&published).unwrap().count(), before.len());
    };

    // Stopped from another shell while the job hangs: the run ends
    // stopped, the job with it, and nothing of it is left.
    deliver_slow_order(&storage);
    let started = Instant::now();
    let mut command = trellis();
    command.args(["materialize", "-p"]).arg(root).args(["-v", view]);
    let child = command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    wait_for_partial(&storage);
    assert!(!processes_under(root).is_empty(), "the job runs");
    let stop = run(trellis().args(["stop", "-p"]).arg(root));
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    let stopped = crate::support::Run::from(child.wait_with_output().unwrap());
    assert_eq!(stopped.code, 1, "stopped: {}\n{}", stopped.stdout, stopped.stderr);
    assert!(stopped.stdout.contains("canceled"), "{}", stopped.stdout);
    assert!(processes_under(root).is_empty(), "after a stop: {:?}", processes_under(root));
    assert_eq!(listing(&storage.join(".trellis-staging")), Vec::<String>::new(), "no staging left");
    unchanged();
    let views = run(trellis().args(["views", "--json", "-p"]).arg(root).args(["-v", view]));
    assert!(views.stdout.contains("\"materialized\""), "keeps its state: {}", views.stdout);
    eprintln!("stopped after {:?}", started.elapsed());

    // A deadline of 40 s: the job is killed at it, not retried (retries
    // = 0), and leaves nothing either.
    let text = std::fs::read_to_string(root.join("trellis.toml")).unwrap();
    let text = text.replace(
        "spark-python = \"plugins/spark-python.wasm\"",
        "spark-python = { file = \"plugins/spark-python.wasm\", deadline = \"40s\" }",
    );
    std::fs::write(root.join("trellis.toml"), text).unwrap();
    let started = Instant::now();
    let result = materialize(root, view);
    let took = started.elapsed();
    assert_eq!(result.code, 1, "{}\n{}", result.stdout, result.stderr);
    assert!(result.stderr.contains("the deadline of 40s passed"), "{}", result.stderr);
    assert!(took >= Duration::from_secs(40), "{took:?}");
    assert!(processes_under(root).is_empty(), "after the deadline: {:?}", processes_under(root));
    assert_eq!(listing(&storage.join(".trellis-staging")), Vec::<String>::new(), "no staging left");
    unchanged();
}

#[test]
fn a_missing_spark_or_java_is_one_line_in_validate_and_materialize() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let rest = monthly(
        "t.spark/Total",
        r#"{ plugin = "spark-sql", config = { query = "SELECT COUNT(*) AS n FROM orders" } }"#,
        "",
    );
    project(root, &[("spark-sql", "spark_sql")], &rest, &[]);
    orders(&root.join("data"), &mut Lcg::new(1));
    // Neither SPARK_HOME, nor trellis's tools, nor spark-submit on a PATH
    // that still has java.
    let without_spark = |command: &mut std::process::Command| {
        crate::support::without_spark(command, root).env("PATH", "/usr/bin:/bin");
    };
    let mut validate = trellis();
    without_spark(validate.args(["validate", "-p"]).arg(root));
    let validated = run(&mut validate);
    assert_eq!(validated.code, 0, "{}", validated.stderr);
    let warnings: Vec<&str> = validated.stderr.lines().filter(|l| l.contains("Spark")).collect();
    assert_eq!(warnings.len(), 1, "{}", validated.stderr);
    assert!(
        warnings[0]
            .starts_with("warning: t.spark/Total runs on Spark, which is not available here: Spark is not installed")
            && warnings[0].contains("trellis engines install spark"),
        "{}",
        warnings[0]
    );
    let mut materialize = trellis();
    without_spark(materialize.args(["materialize", "-p"]).arg(root).args(["-v", "t.spark/Total/2015/05"]));
    let refused = run(&mut materialize);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(
        refused.stderr.starts_with("error: t.spark/Total runs on Spark, which is not available here"),
        "{}",
        refused.stderr
    );

    // Spark where it says, but no Java.
    let home = root.join("spark-home");
    std::fs::create_dir_all(home.join("bin")).unwrap();
    std::fs::write(home.join("bin/spark-submit"), "#!/bin/sh\n").unwrap();
    let mut materialize = trellis();
    materialize
        .args(["materialize", "-p"])
        .arg(root)
        .args(["-v", "t.spark/Total/2015/05"])
        .env("SPARK_HOME", &home)
        .env("JAVA_HOME", root.join("no-java"));
    let refused = run(&mut materialize);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("Spark needs Java 17 or newer: JAVA_HOME"), "{}", refused.stderr);
    assert!(refused.stderr.contains("has no bin/java"), "{}", refused.stderr);
}

#[test]
fn the_demo_ranks_the_shops_of_may_with_spark_sql() {
    spark();
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let result = run_within(trellis().arg("demo").arg(&demo), LIMIT);
    assert_eq!(result.code, 0, "{}\n{}", result.stdout, result.stderr);
    assert!(result.stdout.contains("$ trellis materialize -v shop.datamart/ShopRanking/2015/05"), "{}", result.stdout);
    // The demo's orders are fixed, and so is their ranking.
    let ranking = std::fs::read_to_string(demo.join("data/shop/datamart/ShopRanking/2015/05/part-00000.csv")).unwrap();
    assert_eq!(
        ranking,
        "rank,shop,orders,revenue,share\n1,SHOP30,12,334.61,38.7\n2,SHOP20,12,281.33,32.6\n3,SHOP10,14,247.80,28.7\n"
    );
    assert!(result.stdout.contains("demo finished in"), "{}", result.stdout);
}

/// A PySpark application whose first two attempts find nothing listening
/// where it connects (a real refused connection), then compute.
const FLAKY_PY: &str = r#""""Orders per shop, once the network lets it connect."""
import socket
from pathlib import Path

from trellis_spark import job

counter = Path(job.arguments[0])
attempt = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(attempt))
if attempt <= 2:
    socket.create_connection(("127.0.0.1", int(job.arguments[1])), timeout=5)
job.write(job.input("orders").groupBy("shop").count())
"#;

#[test]
fn a_refused_connection_is_retried_without_counting_against_retries() {
    spark();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // A port nothing listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let counter = root.join("attempts");
    let transformation = format!(
        r#"{{ plugin = "spark-python", config = {{ application = "jobs/flaky.py", args = "{},{port}" }}, resources = ["jobs/flaky.py"], retries = 0, backoff = "100ms" }}"#,
        counter.display()
    );
    let rest = monthly("t.spark/Flaky", &transformation, "");
    project(root, &[("spark-python", "spark_python")], &rest, &[("jobs/flaky.py", FLAKY_PY)]);
    orders(&root.join("data"), &mut Lcg::new(3));
    let view = "t.spark/Flaky/2015/05";
    let done = materialize(root, view);
    // With `retries = 0`, a counted failure would have failed the view.
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "3");
    let views = run(trellis().args(["views", "-p"]).arg(root).args(["-v", view]));
    assert!(views.stdout.contains("  materialized"), "{}", views.stdout);
    // Three attempts in the one run: the refused ones were retried.
    let runs = run(trellis().args(["runs", "--json", "-p"]).arg(root));
    let runs: serde_json::Value = serde_json::from_str(&runs.stdout).unwrap();
    let id = runs.as_array().unwrap().iter().find(|r| r["pattern"] == view).unwrap()["id"].clone();
    let detail = run(trellis().args(["runs", "--json", "-p"]).arg(root).arg(id.as_str().unwrap()));
    let detail: serde_json::Value = serde_json::from_str(&detail.stdout).unwrap();
    let flow = detail["flows"].as_array().unwrap().iter().find(|f| f["view"] == view).unwrap().clone();
    assert_eq!(flow["attempts"], 3, "{flow}");
    assert_eq!(flow["status"], "SUCCESSFUL", "{flow}");
}

/// A project on S3 (moto): Spark has no s3a connector here, so the host
/// stages the committed inputs into its local cache, Spark reads those,
/// and the job's output is uploaded and committed as a plugin's is; the
/// job's log says so in one line. Its rows are csv-aggregate's, computed
/// beside it through the same cache.
#[test]
fn a_spark_view_on_s3_reads_its_inputs_staged_locally_and_commits_to_the_bucket() {
    use object_store::ObjectStoreExt;
    use trellis::storage::ViewStore;
    spark();
    let moto = crate::moto::moto();
    let bucket = moto.bucket(false);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let aggregate = r#"{ plugin = "csv-aggregate", config = { group-by = "shop,day", aggregates = "orders=count(*),revenue=sum(amount)" } }"#;
    let fields = r#"fields = [{ name = "shop", type = "string" }, { name = "day", type = "date" }, { name = "orders", type = "long" }, { name = "revenue", type = "decimal" }]"#;
    let mut rest = monthly("t.wasm/Daily", aggregate, "");
    rest.push_str(&monthly(
        "t.spark/Daily",
        r#"{ plugin = "spark-sql", config = { query-file = "jobs/daily.sql" }, resources = ["jobs/daily.sql"] }"#,
        fields,
    ));
    project(
        root,
        &[("csv-aggregate", "csv_aggregate"), ("spark-sql", "spark_sql")],
        &rest,
        &[("jobs/daily.sql", DAILY_SQL)],
    );
    let text = std::fs::read_to_string(root.join("trellis.toml")).unwrap();
    let on_s3 = format!(
        "[project]\nname = \"spark-test\"\nstorage = \"s3://{bucket}/proj\"\n\n[project.s3]\nendpoint = \"{}\"\npath_style = true\n",
        moto.endpoint
    );
    std::fs::write(root.join("trellis.toml"), text.replace("[project]\nname = \"spark-test\"\n", &on_s3)).unwrap();
    // The orders delivered into the bucket by another client.
    let delivery = root.join("delivery");
    orders(&delivery, &mut Lcg::new(19));
    let client = moto.client(&bucket);
    for name in listing(&delivery).into_iter().filter(|name| delivery.join(name).is_file()) {
        let location = object_store::path::Path::from(format!("proj/{name}"));
        let body = std::fs::read(delivery.join(&name)).unwrap();
        moto.block_on(client.put(&location, body.into())).unwrap();
    }
    let on_s3 = |args: &[&str]| {
        let mut command = trellis();
        command.args(args).arg("-p").arg(root).envs(crate::moto::ENVIRONMENT.iter().copied());
        command
    };
    for pattern in ["t.wasm/Daily/2015/05", "t.spark/Daily/2015/05"] {
        let result = run_within(&mut on_s3(&["materialize", "-v", pattern]), LIMIT);
        assert_eq!(result.code, 0, "{pattern}: {}\n{}", result.stdout, result.stderr);
    }
    // Both views' committed versions, fetched as a plugin's inputs are.
    let local = tempfile::tempdir().unwrap();
    let store = moto.dir(&bucket, local.path());
    let fetched = |relative: &str| store.local_input(&store.key(&store.root().join(relative))).unwrap();
    let (wasm, spark) = (fetched("t/wasm/Daily/2015/05"), fetched("t/spark/Daily/2015/05"));
    let expected = rows(wasm.path());
    assert_eq!(expected.len(), 7, "a header and 6 shop-days: {expected:?}");
    assert_eq!(rows(spark.path()), expected, "Spark SQL over the staged inputs against csv-aggregate");
    let receipt = trellis::scheduler::publish::RECEIPT;
    assert_eq!(listing(spark.path()), [receipt, "_SUCCESS", "part-00000.csv"]);
    let logs = run(&mut on_s3(&["logs", "t.spark/Daily/2015/05"]));
    let said = format!("inputs staged from s3://{bucket}/proj to a local cache: no s3a connector");
    assert_eq!(logs.stdout.matches(&said).count(), 1, "{}", logs.stdout);
    assert!(logs.stdout.contains("input orders: 6 path(s) (csv)"), "{}", logs.stdout);
    assert!(!root.join("data").exists(), "no view stored locally");
    assert_eq!(listing(&root.join(".trellis/staging/.trellis-staging")), Vec::<String>::new(), "no staging left");
    assert!(processes_under(root).is_empty(), "{:?}", processes_under(root));
}
