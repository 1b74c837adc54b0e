//! `trellis demo`: writes sample shop orders and the sample plugins to a
//! directory, then runs each plugin kind once on them, end to end.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, bail};
use clap::Args;

use super::Status;
use crate::bundled::SAMPLES;
use crate::runtime::{
    ChecksumRequest, ListenerEvent, Plugin, Runtime, TransformInput, TransformOutcome, TransformRequest, ViewState,
};

#[derive(Debug, Args)]
pub(super) struct DemoArgs {
    /// The directory to write the demo into; it must be new, empty, or an earlier demo
    #[arg(default_value = "trellis-demo")]
    dir: PathBuf,
}

/// Marks a directory as written by `trellis demo`, so that running the demo
/// again may overwrite it, and nothing else is ever overwritten.
const MARKER: &str = ".trellis-demo";

const SHOPS: [&str; 3] = ["SHOP10", "SHOP20", "SHOP30"];
const DAYS: [&str; 3] = ["2015-05-01", "2015-05-02", "2015-05-03"];

const QUERY: &str = "-- daily sales\nSET hive.exec.parallel=true;\nSELECT shop, day, SUM(amount)\nFROM orders /* raw */ GROUP BY shop, day";
const QUERY_REFORMATTED: &str = "SELECT shop,   day, SUM(amount) FROM orders\n  GROUP BY shop, day -- same logic";

impl DemoArgs {
    pub(super) async fn run(self, runtime: &Runtime) -> anyhow::Result<Status> {
        let dir = &self.dir;
        prepare(dir)?;
        let plugins_dir = dir.join("plugins");
        std::fs::create_dir_all(&plugins_dir).with_context(|| format!("creating {}", plugins_dir.display()))?;
        for sample in &SAMPLES {
            std::fs::write(plugins_dir.join(sample.file_name), sample.bytes)
                .with_context(|| format!("writing {}", sample.file_name))?;
        }
        let orders = dir.join("data/orders");
        write_orders(&orders)?;
        println!("wrote {} shops × {} days of orders to {}", SHOPS.len(), DAYS.len(), orders.display());

        let csv_aggregate = load(runtime, &plugins_dir, "csv-aggregate").await?;
        let concat = load(runtime, &plugins_dir, "concat").await?;
        let sql_checksum = load(runtime, &plugins_dir, "sql-checksum").await?;
        let jsonl_listener = load(runtime, &plugins_dir, "jsonl-listener").await?;

        let daily = dir.join("data/daily-sales");
        let config = [
            ("group-by", "shop,day"),
            ("aggregates", "orders=count(*),revenue=sum(amount),smallest=min(amount),largest=max(amount)"),
            ("file", "daily-sales.csv"),
        ];
        let ok_daily = transform(&csv_aggregate, "demo/DailySales", &orders, &daily, &config).await?;
        let all = dir.join("data/all-orders");
        let ok_all =
            transform(&concat, "demo/AllOrders", &orders, &all, &[("header", "true"), ("file", "orders.csv")]).await?;
        if ok_daily {
            println!("\n{}:", daily.join("daily-sales.csv").display());
            let written = daily.join("daily-sales.csv");
            print!("{}", std::fs::read_to_string(&written).with_context(|| format!("reading {}", written.display()))?);
            println!();
        }

        let mut ok_checksum = true;
        let mut checksums = Vec::new();
        for query in [QUERY, QUERY_REFORMATTED] {
            let request = ChecksumRequest {
                transformation: "hive".into(),
                config: vec![("query".into(), query.into())],
                resources: Vec::new(),
            };
            match sql_checksum.checksum(&request).await?.result {
                Ok(checksum) => checksums.push(checksum),
                Err(failure) => {
                    println!("sql-checksum failed: {failure}");
                    ok_checksum = false;
                }
            }
        }
        if let [first, second] = checksums.as_slice() {
            let same = if first == second { "the same" } else { "DIFFERENT" };
            println!("sql-checksum: a query and its reformatted copy have {same} version checksum {first}");
        }

        let state = dir.join("state");
        std::fs::create_dir_all(&state).with_context(|| format!("creating {}", state.display()))?;
        let ok_listener =
            listen(&jsonl_listener, &state, [(ok_daily, "demo/DailySales"), (ok_all, "demo/AllOrders")]).await?;

        let ok = ok_daily && ok_all && ok_checksum && ok_listener;
        println!("\ndemo {} in {}", if ok { "finished" } else { "FAILED" }, dir.display());
        Ok(if ok { Status::Success } else { Status::Failed })
    }
}

async fn load(runtime: &Runtime, plugins_dir: &Path, name: &str) -> anyhow::Result<Plugin> {
    let path = plugins_dir.join(format!("{name}.wasm"));
    runtime.load_file(&path).await.with_context(|| format!("loading {name}"))
}

fn prepare(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        let empty = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?.next().is_none();
        if !empty && !dir.join(MARKER).exists() {
            bail!("{} exists and was not written by `trellis demo`; name a new or empty directory", dir.display());
        }
        for old in ["data", "state", "plugins"] {
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

/// Deterministic sample orders: one CSV file per shop and day.
fn write_orders(orders: &Path) -> anyhow::Result<()> {
    let mut order_id = 1000;
    for (s, shop) in SHOPS.iter().enumerate() {
        let shop_dir = orders.join(shop);
        std::fs::create_dir_all(&shop_dir).with_context(|| format!("creating {}", shop_dir.display()))?;
        for (d, day) in DAYS.iter().enumerate() {
            let mut csv = String::from("order_id,shop,day,amount\n");
            for n in 0..(3 + (s + d) % 3) {
                order_id += 1;
                let cents = 500 + (order_id * 37 + n * 101) % 9000;
                writeln!(csv, "{order_id},{shop},{day},{}.{:02}", cents / 100, cents % 100)?;
            }
            let file = shop_dir.join(format!("{day}.csv"));
            std::fs::write(&file, csv).with_context(|| format!("writing {}", file.display()))?;
        }
        let flag = shop_dir.join("_SUCCESS");
        std::fs::write(&flag, "").with_context(|| format!("writing {}", flag.display()))?;
    }
    Ok(())
}

async fn transform(
    plugin: &Plugin,
    view: &str,
    input: &Path,
    output: &Path,
    config: &[(&str, &str)],
) -> anyhow::Result<bool> {
    std::fs::create_dir_all(output).with_context(|| format!("creating {}", output.display()))?;
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let request = TransformRequest {
        view: view.into(),
        parameters: Vec::new(),
        nominal_time: None,
        actual_time: now,
        config: config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        inputs: vec![TransformInput {
            name: "orders".into(),
            view: "demo/Orders".into(),
            dir: input.to_path_buf(),
            timestamp: Some(now),
            changed: true,
        }],
        output_dir: output.to_path_buf(),
    };
    let report = plugin.transform(&request).await?;
    let took = format!("{:.1} ms", report.elapsed.as_secs_f64() * 1e3);
    match report.result {
        Ok(TransformOutcome::Data { counters }) => {
            let counters: Vec<String> = counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("{}: {view} → {} ({}, {took})", plugin.name(), output.display(), counters.join(" "));
            Ok(true)
        }
        Ok(TransformOutcome::NoData) => {
            println!("{}: {view} has no data ({took})", plugin.name());
            Ok(true)
        }
        Err(failure) => {
            println!("{}: {view} failed: {failure}", plugin.name());
            Ok(false)
        }
    }
}

/// Feeds the listener the transitions the scheduler would have emitted.
async fn listen(plugin: &Plugin, state: &Path, views: [(bool, &str); 2]) -> anyhow::Result<bool> {
    let (mut listener, started) = plugin.start_listener(&[], Some(state)).await?;
    if let Err(failure) = started.result {
        println!("jsonl-listener failed to start: {failure}");
        return Ok(false);
    }
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let mut sequence = 0;
    for (ok, view) in views {
        let end = if ok { ViewState::Materialized } else { ViewState::Failed };
        for (previous, current) in [
            (ViewState::Receive, ViewState::Waiting),
            (ViewState::Waiting, ViewState::Transforming),
            (ViewState::Transforming, end),
        ] {
            sequence += 1;
            let event = ListenerEvent::Transition {
                sequence,
                view: view.into(),
                previous,
                current,
                actions: Vec::new(),
                time: now,
                run_id: Some("demo".into()),
                error: None,
            };
            if let Err(failure) = listener.on_event(&event).await.result {
                println!("jsonl-listener failed: {failure}");
                return Ok(false);
            }
        }
    }
    println!("jsonl-listener: {sequence} events → {}", state.join("events.jsonl").display());
    Ok(true)
}
