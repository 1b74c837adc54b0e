//! Spark engine benchmarks, each side by side with the WebAssembly
//! csv-aggregate in one run, through the scheduler as `trellis
//! materialize` runs them (submit to publish): the fixed cost of a Spark
//! view in local mode for a trivial query, then the same aggregation (rows
//! per shop counted and summed) on generated orders of growing size, by
//! csv-aggregate and by Spark SQL, with where the two lines cross.
//!
//! Run: `cargo bench -p trellis --bench spark` (`-- --rows 1000000,10000000`
//! sets the sizes, `-- --trivial N` how many trivial views are timed).
//! Needs PySpark where trellis finds it (`trellis engines install spark`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use trellis::bundled::PLUGINS_DIR;
use trellis::runtime::{Runtime, RuntimeOptions};
use trellis::scheduler::Mode;
use trellis::session::Session;

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::args().skip_while(|arg| arg != name).nth(1).and_then(|n| n.parse().ok()).unwrap_or(default)
}

const SHOPS: u64 = 8;

fn main() {
    let sizes: Vec<u64> = arg("--rows", "1000000,10000000".to_string())
        .split(',')
        .map(|n| n.trim().parse().expect("--rows takes numbers separated by commas"))
        .collect();
    let trivial = arg("--trivial", 3u32);
    let tools = trellis::python::default_tools_dir();
    let settings = trellis::catalog::SparkSettings::default();
    let found = trellis::engines::spark::locate(&settings, tools.as_deref())
        .unwrap_or_else(|reason| panic!("the Spark benchmark needs Spark: {reason}"));
    println!("Spark at {} (found by {}), Java {}", found.spark_home.display(), found.found_by, found.java_version);
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    tokio.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        project(dir.path());
        let runtime = Runtime::new(RuntimeOptions::default()).expect("runtime");
        let catalog = Arc::new(trellis::catalog::load(dir.path()).expect("project loads"));
        let mut session = Session::open(catalog, &runtime).await.expect("session");

        // The fixed cost: one order, a trivial query, one view at a time.
        let mut fixed = Vec::new();
        for day in 1..=trivial {
            write_orders(dir.path(), day, 1);
            let started = Instant::now();
            let summary =
                session.scheduler.materialize(&format!("b.spark/Trivial/2015/01/{day:02}"), Mode::Default).await;
            let summary = summary.expect("materialize");
            assert!(summary.failures.is_empty(), "{:?}", summary.failures);
            fixed.push(started.elapsed());
        }
        fixed.sort();
        let median = fixed[fixed.len() / 2];
        println!(
            "fixed cost of a Spark view (local[*], trivial query, submit to publish): median {:.2} s of {} ({})",
            median.as_secs_f64(),
            fixed.len(),
            fixed.iter().map(|d| format!("{:.2}", d.as_secs_f64())).collect::<Vec<_>>().join(", ")
        );

        // The same aggregation both ways, at each size.
        let mut points = Vec::new();
        for (index, rows) in sizes.iter().enumerate() {
            let day = trivial + 1 + index as u32;
            let written = write_orders(dir.path(), day, *rows);
            let mut times = Vec::new();
            for kind in ["wasm", "spark"] {
                let started = Instant::now();
                let pattern = format!("b.{kind}/Sales/2015/01/{day:02}");
                let summary = session.scheduler.materialize(&pattern, Mode::Default).await.expect("materialize");
                assert!(summary.failures.is_empty(), "{:?}", summary.failures);
                times.push(started.elapsed());
            }
            let wasm = read_sums(&dir.path().join(format!("data/b/wasm/Sales/2015/01/{day:02}")));
            let spark = read_sums(&dir.path().join(format!("data/b/spark/Sales/2015/01/{day:02}")));
            assert_eq!(wasm, spark, "both compute the same sums");
            println!(
                "{rows} rows ({:.0} MiB of CSV): csv-aggregate {:.2} s, Spark SQL {:.2} s ({:.2}x)",
                written as f64 / (1 << 20) as f64,
                times[0].as_secs_f64(),
                times[1].as_secs_f64(),
                times[1].as_secs_f64() / times[0].as_secs_f64()
            );
            points.push((*rows as f64, times[0].as_secs_f64(), times[1].as_secs_f64()));
        }
        if let [(r1, w1, s1), .., (r2, w2, s2)] = points.as_slice() {
            // Two lines through the sizes measured: a + b * rows each.
            let (wb, sb) = ((w2 - w1) / (r2 - r1), (s2 - s1) / (r2 - r1));
            let (wa, sa) = (w1 - wb * r1, s1 - sb * r1);
            println!(
                "per million rows: csv-aggregate {:.2} s, Spark {:.2} s; fixed: csv-aggregate {:.2} s, Spark {:.2} s",
                wb * 1e6,
                sb * 1e6,
                wa,
                sa
            );
            if wb > sb {
                println!("the lines cross at about {:.0} million rows", (sa - wa) / (wb - sb) / 1e6);
            } else {
                println!("the lines do not cross: Spark is not faster per row on this machine");
            }
        }
        let usage = rusage_children();
        println!("peak RSS of the largest child process (the Spark JVM): {} MiB", usage / 1024);
        session.close(Duration::ZERO).await.expect("close");
    });
}

/// The largest resident set of any child process so far, in KiB.
fn rusage_children() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage.ru_maxrss
    }
}

/// Orders of one day, external data, and three view types over it.
fn project(dir: &Path) {
    std::fs::create_dir_all(dir.join("plugins")).expect("plugins dir");
    for (name, built) in [("csv-aggregate", "csv_aggregate"), ("spark-sql", "spark_sql")] {
        std::fs::copy(Path::new(PLUGINS_DIR).join(format!("{built}.wasm")), dir.join(format!("plugins/{name}.wasm")))
            .expect("copy plugin");
    }
    let daily = |name: &str, transformation: &str| {
        format!(
            r#"
[[view]]
name = "{name}"
time = {{ frequency = "1d", initial = "2015-01-01" }}
transformation = {transformation}

[[view.dependency]]
name = "orders"
view = "b.raw/Orders"
time = "current(0)"
"#
        )
    };
    let mut text = String::from(
        r#"[project]
name = "spark-bench"

[defaults]
retries = 0
deadline = "30m"
memory_budget_mib = 4096

[plugins]
csv-aggregate = "plugins/csv-aggregate.wasm"
spark-sql = "plugins/spark-sql.wasm"

[[view]]
name = "b.raw/Orders"
fields = [
    { name = "order_id", type = "long" },
    { name = "shop", type = "string" },
    { name = "amount", type = "decimal" },
]
time = { frequency = "1d", initial = "2015-01-01" }
"#,
    );
    text.push_str(&daily(
        "b.wasm/Sales",
        r#"{ plugin = "csv-aggregate", config = { group-by = "shop", aggregates = "orders=count(*),revenue=sum(amount)" } }"#,
    ));
    text.push_str(&daily(
        "b.spark/Sales",
        r#"{ plugin = "spark-sql", config = { query = "SELECT shop, COUNT(*) AS orders, SUM(amount) AS revenue FROM orders GROUP BY shop" } }"#,
    ));
    text.push_str(&daily("b.spark/Trivial", r#"{ plugin = "spark-sql", config = { query = "SELECT 1 AS one" } }"#));
    std::fs::write(dir.join("trellis.toml"), text).expect("trellis.toml");
}

/// `rows` orders for day `day` of January 2015 in four files; returns the bytes written.
fn write_orders(dir: &Path, day: u32, rows: u64) -> u64 {
    use std::io::Write;
    let day_dir = dir.join(format!("data/b/raw/Orders/2015/01/{day:02}"));
    std::fs::create_dir_all(&day_dir).expect("day dir");
    let mut written = 0;
    let files = 4.min(rows.max(1));
    for file in 0..files {
        let path = day_dir.join(format!("orders-{file}.csv"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("orders file"));
        writeln!(out, "order_id,shop,amount").expect("write");
        let mut state = 0x9e3779b97f4a7c15u64 ^ u64::from(day) ^ (file << 32);
        for id in (file..rows).step_by(files as usize) {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let cents = (state >> 33) % 100_000;
            writeln!(out, "{id},SHOP{},{}.{:02}", (state >> 20) % SHOPS, cents / 100, cents % 100).expect("write");
        }
        out.flush().expect("flush");
        written += std::fs::metadata(&path).expect("written").len();
    }
    std::fs::write(day_dir.join("_SUCCESS"), "").expect("flag");
    written
}

/// Each shop's count and sum, as numbers (csv-aggregate writes exact
/// decimals, Spark with the scale of its decimal type).
fn read_sums(dir: &Path) -> Vec<(String, String, String)> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(dir).expect("output") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "csv") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split(',').collect();
            let number = |text: &str| {
                if text.contains('.') {
                    text.trim_end_matches('0').trim_end_matches('.').to_string()
                } else {
                    text.to_string()
                }
            };
            rows.push((fields[0].to_string(), fields[1].to_string(), number(fields[2])));
        }
    }
    rows.sort();
    rows
}
