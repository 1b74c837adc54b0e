//! `trellis demo`: writes the sample shop project (examples/shop) with
//! sample orders and the sample plugins to a directory, lets its daily
//! coordinator catch up on three days with the clock set, materializes
//! the month twice (once building the rest, once with nothing to do), and
//! then keeps the year-to-date sales current incrementally as a fourth day
//! arrives; last, where Spark is installed, it ranks the shops of May with
//! Spark SQL (where it is not, it says so, and how to install it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use super::Status;
use crate::bundled::SAMPLES;
use crate::catalog;
use crate::runtime::Runtime;
use crate::scheduler::{Mode, RunSummary, Scheduler};
use crate::session::Session;

#[derive(Debug, Args)]
pub(super) struct DemoArgs {
    /// The directory to write the demo into; it must be new, empty, or an earlier demo
    #[arg(default_value = "trellis-demo")]
    dir: PathBuf,
}

/// Marks a directory as written by `trellis demo`, so that running the demo
/// again may overwrite it, and nothing else is ever overwritten.
const MARKER: &str = ".trellis-demo";

/// The sample shop project, as in examples/shop.
const PROJECT: &str = include_str!("../../../examples/shop/trellis.toml");

/// The query of the view type Spark computes, a resource of the project.
const SHOP_RANKING_SQL: (&str, &str) =
    ("spark/shop_ranking.sql", include_str!("../../../examples/shop/spark/shop_ranking.sql"));

const SHOPS: [&str; 3] = ["SHOP10", "SHOP20", "SHOP30"];
const DAYS: [u32; 3] = [1, 2, 3];
const PATTERN: &str = "shop.datamart/MonthlyTotal/2015/05";

impl DemoArgs {
    pub(super) async fn run(self, runtime: &Runtime) -> anyhow::Result<Status> {
        let dir = &self.dir;
        prepare(dir)?;
        std::fs::write(dir.join(catalog::PROJECT_FILE), PROJECT).context("writing trellis.toml")?;
        let (query_file, query) = SHOP_RANKING_SQL;
        std::fs::create_dir_all(dir.join("spark")).context("creating spark/")?;
        std::fs::write(dir.join(query_file), query).with_context(|| format!("writing {query_file}"))?;
        let plugins_dir = dir.join("plugins");
        std::fs::create_dir_all(&plugins_dir).with_context(|| format!("creating {}", plugins_dir.display()))?;
        for sample in &SAMPLES {
            std::fs::write(plugins_dir.join(sample.file_name), sample.bytes)
                .with_context(|| format!("writing {}", sample.file_name))?;
        }
        write_orders(&dir.join("data/raw/orders"))?;
        println!(
            "wrote the sample shop project to {} with orders of {} shops for May {}-{}, 2015",
            dir.display(),
            SHOPS.len(),
            DAYS[0],
            DAYS[DAYS.len() - 1]
        );

        let catalog = super::project::load(dir)?;
        let mut session = Session::open(catalog.clone(), runtime).await?;
        // The listeners are shut down whatever the runs did; they catch up only after runs that ended.
        let runs = match catch_up(&mut session.scheduler, dir).await {
            Ok(()) => two_runs(&mut session.scheduler, dir).await,
            Err(e) => Err(e),
        };
        let runs = match runs {
            Ok((first, second)) => year_to_date(&mut session.scheduler, dir).await.map(|ytd| (first, second, ytd)),
            Err(e) => Err(e),
        };
        let runs = match runs {
            Ok((first, second, mut ytd)) => ranking(&mut session.scheduler, dir).await.map(|ranked| {
                ytd.failures.extend(ranked.into_iter().flat_map(|run| run.failures));
                (first, second, ytd)
            }),
            Err(e) => Err(e),
        };
        let drain = if runs.is_ok() { catalog.settings.events.drain } else { std::time::Duration::ZERO };
        let lags = session.close(drain).await?;
        let (first, second, ytd) = runs?;
        // The stats listener "followed" only if it received every event
        // without a restart (a restart drops or replays one).
        let stats_lag = lags.iter().find(|lag| lag.name == "stats");
        let followed =
            stats_lag.is_some_and(|lag| lag.behind == 0 && lag.restarts == 0 && lag.state.reason().is_none());
        if let Some(stats) = listener_stats(&crate::listeners::state_dir(&catalog, "stats").join("stats.json")) {
            if followed {
                println!("\nthe stats listener followed every run: {stats}");
            } else {
                println!("\nthe stats listener did not follow every run; it counted so far: {stats}");
            }
        }
        // Where every other listener stands, and the stats listener when it fell behind.
        let others: Vec<_> = lags.into_iter().filter(|lag| !(followed && lag.name == "stats")).collect();
        for line in super::schedule::lag_lines(&others) {
            println!("{line}");
        }

        let ok = [&first, &second, &ytd].iter().all(|run| run.failures.is_empty());
        println!(
            "\ndemo {} in {}; next, try: trellis plan -p {} -v {PATTERN}, or trellis listeners -p {}",
            if ok { "finished" } else { "FAILED" },
            dir.display(),
            dir.display(),
            dir.display()
        );
        Ok(if ok { Status::Success } else { Status::Failed })
    }
}

/// The time the demo's coordinator acts at: the morning after the last day
/// with orders, so that it catches up on May 1-3 and waits for May 4.
const COORDINATOR_NOW: &str = "2015-05-04T06:00:00+02:00";

/// The shop's daily coordinator, with the clock set: it creates the
/// actions it missed since its start, each materializing a day's sales
/// once that day's orders are in, and waits for the day whose are not.
async fn catch_up(scheduler: &mut Scheduler, dir: &Path) -> anyhow::Result<()> {
    println!(
        "
$ trellis coordinate -p {} --now {COORDINATOR_NOW}",
        dir.display()
    );
    let now = crate::clock::parse_time(COORDINATOR_NOW).map_err(anyhow::Error::msg)?;
    super::coordinate::drive(scheduler, crate::clock::Clock::manual(now)).await?;
    Ok(())
}

/// The demo's two materializations, with what each printed: the first
/// builds everything, the second finds nothing to do.
async fn two_runs(scheduler: &mut Scheduler, dir: &Path) -> anyhow::Result<(RunSummary, RunSummary)> {
    println!("\n$ trellis materialize -v {PATTERN}");
    let first = scheduler.materialize(PATTERN, Mode::Default).await?;
    println!(
        "{}; {} incomplete (a day without orders, or a view over one)",
        super::schedule::counts_line(&first),
        first.incomplete.len()
    );
    for (view, error) in &first.failures {
        println!("failed: {view}: {error}");
    }
    for file in ["MonthlyTotal/2015/05", "MonthlySales/SHOP10/2015/05", "DailySales/SHOP10/2015/05/01"] {
        let path = dir.join("data/shop/datamart").join(file).join("part-00000.csv");
        if let Ok(text) = std::fs::read_to_string(&path) {
            println!("\n{}:\n{}", path.display(), text.trim_end());
        }
    }

    println!("\n$ trellis materialize -v {PATTERN}   # again: nothing changed");
    let second = scheduler.materialize(PATTERN, Mode::Default).await?;
    println!("{}", super::schedule::counts_line(&second));
    Ok((first, second))
}

/// One shop's year to date: each reads 365 days of orders, so one shop
/// keeps the demo's event log (and its listeners' work) small.
const YEAR_TO_DATE: &str = "shop.datamart/YearToDateSales/SHOP10/2015/01";

/// The incremental view: built from the three days there are, then, once
/// late orders of May 3 arrive in a file of their own, from that file
/// alone, merged into what it published. The month is then brought up to
/// date too, so the demo leaves every view current.
async fn year_to_date(scheduler: &mut Scheduler, dir: &Path) -> anyhow::Result<RunSummary> {
    println!("\n$ trellis materialize -v {YEAR_TO_DATE}   # incremental: its first run reads every day");
    let first = scheduler.materialize(YEAR_TO_DATE, Mode::Default).await?;
    for (view, error) in &first.failures {
        println!("failed: {view}: {error}");
    }
    let ytd = dir.join("data/shop/datamart/YearToDateSales/SHOP10/2015/01/part-00000.csv");
    if let Ok(text) = std::fs::read_to_string(&ytd) {
        println!("{}:\n{}", ytd.display(), text.trim_end());
    }
    let late = write_late_orders(&dir.join("data/raw/orders"))?;
    println!("\n# late orders of SHOP10 for May 3 arrive: {}\n$ trellis plan -v {YEAR_TO_DATE}", late.display());
    for (view, line) in scheduler.plan(YEAR_TO_DATE)? {
        if view.contains("YearToDateSales") {
            println!("{view}: {line}");
        }
    }
    println!("\n$ trellis materialize -v {YEAR_TO_DATE}");
    let second = scheduler.materialize(YEAR_TO_DATE, Mode::Default).await?;
    if let Ok(text) = std::fs::read_to_string(&ytd) {
        println!("{}:\n{}", ytd.display(), text.trim_end());
    }
    println!("\n$ trellis txlog {YEAR_TO_DATE}");
    for view in scheduler.txlog(Some(YEAR_TO_DATE))? {
        let generation = view.head.map_or(0, |head| head.generation);
        println!("{}: generation {generation}, {} inputs committed", view.view, view.entries.len());
    }
    println!("\n$ trellis materialize -v {PATTERN}   # the month takes the late orders too");
    let month = scheduler.materialize(PATTERN, Mode::Default).await?;
    println!("{}", super::schedule::counts_line(&month));
    for (view, error) in second.failures.iter().chain(&month.failures) {
        println!("failed: {view}: {error}");
    }
    let mut all = second;
    all.failures.extend(first.failures);
    all.failures.extend(month.failures);
    Ok(all)
}

/// The view Spark computes.
const RANKING: &str = "shop.datamart/ShopRanking/2015/05";

/// May's shops ranked by Spark SQL, where Spark is installed; where it is
/// not, one line says so and how to get it (the demo needs nothing but the
/// binary, and PySpark is a download of about 500 MB).
async fn ranking(scheduler: &mut Scheduler, dir: &Path) -> anyhow::Result<Option<RunSummary>> {
    let catalog = super::project::load(dir)?;
    let tools = crate::python::default_tools_dir();
    if let Err(reason) = crate::engines::spark::locate(&catalog.settings.spark, tools.as_deref()) {
        println!(
            "\n# {RANKING} is computed by Spark SQL, which is not available here: {reason}\n\
             # then: trellis materialize -p {} -v {RANKING}",
            dir.display()
        );
        return Ok(None);
    }
    println!(
        "
$ trellis materialize -v {RANKING}   # Spark SQL, with spark-submit in local mode (about 15 s)"
    );
    let ranked = scheduler.materialize(RANKING, Mode::Default).await?;
    println!("{}", super::schedule::counts_line(&ranked));
    for (view, error) in &ranked.failures {
        println!("failed: {view}: {error}");
    }
    let path = dir.join("data/shop/datamart/ShopRanking/2015/05/part-00000.csv");
    if let Ok(text) = std::fs::read_to_string(&path) {
        println!(
            "{}:
{}",
            path.display(),
            text.trim_end()
        );
    }
    Ok(Some(ranked))
}

/// Two late orders of SHOP10 for May 3, in a file of their own beside the
/// day's first delivery, whose done flag is written again.
fn write_late_orders(orders: &Path) -> anyhow::Result<PathBuf> {
    let day_dir = orders.join("SHOP10/2015/05/03");
    let file = day_dir.join("orders-late.csv");
    std::fs::write(&file, "order_id,shop,day,amount\n9001,SHOP10,2015-05-03,12.50\n9002,SHOP10,2015-05-03,7.25\n")
        .with_context(|| format!("writing {}", file.display()))?;
    let flag = day_dir.join("_SUCCESS");
    std::fs::remove_file(&flag).with_context(|| format!("removing {}", flag.display()))?;
    std::fs::write(&flag, "").with_context(|| format!("writing {}", flag.display()))?;
    Ok(file)
}

/// A line about what the sample stats listener counted, from its file.
fn listener_stats(file: &Path) -> Option<String> {
    let stats: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    let transformations = &stats["transformations"];
    let count = transformations["count"].as_u64().unwrap_or(0);
    let total = transformations["total_ms"].as_u64().unwrap_or(0);
    Some(format!(
        "{} events, {} of them ending in materialized; {count} transformations, {} ms on average ({})",
        stats["events"],
        stats["states"]["materialized"].as_u64().unwrap_or(0),
        total.checked_div(count).unwrap_or(0),
        file.display()
    ))
}

fn prepare(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        let empty = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?.next().is_none();
        if !empty && !dir.join(MARKER).exists() {
            bail!("{} exists and was not written by `trellis demo`; name a new or empty directory", dir.display());
        }
        for old in ["data", "plugins", ".trellis"] {
            let old = dir.join(old);
            if old.exists() {
                std::fs::remove_dir_all(&old).with_context(|| format!("clearing {}", old.display()))?;
            }
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(MARKER), "written by `trellis demo`\n")
        .with_context(|| format!("writing {}", dir.join(MARKER).display()))?;
    Ok(())
}

/// Deterministic sample orders: one directory per shop and day, as the
/// shop system would deliver them, complete with a done flag.
fn write_orders(orders: &Path) -> anyhow::Result<()> {
    let mut order_id = 1000;
    for (s, shop) in SHOPS.iter().enumerate() {
        for (d, day) in DAYS.iter().enumerate() {
            let day_dir = orders.join(format!("{shop}/2015/05/{day:02}"));
            std::fs::create_dir_all(&day_dir).with_context(|| format!("creating {}", day_dir.display()))?;
            let mut csv = String::from("order_id,shop,day,amount\n");
            for n in 0..(3 + (s + d) % 3) {
                order_id += 1;
                let cents = 500 + (order_id * 37 + n * 101) % 9000;
                writeln!(csv, "{order_id},{shop},2015-05-{day:02},{}.{:02}", cents / 100, cents % 100)?;
            }
            let file = day_dir.join("orders.csv");
            std::fs::write(&file, csv).with_context(|| format!("writing {}", file.display()))?;
            let flag = day_dir.join("_SUCCESS");
            std::fs::write(&flag, "").with_context(|| format!("writing {}", flag.display()))?;
        }
    }
    Ok(())
}
