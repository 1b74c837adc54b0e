//! `trellis bench`: generates a shop lattice (shops × days: raw external
//! data, daily sales per shop, monthly sales per shop, a monthly total over
//! all shops) with a trivial real WASM transformation, and measures a cold
//! materialization, an unchanged re-materialization and a one-input change.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use chrono::{Datelike, Duration, NaiveDate};
use clap::Args;

use super::Status;
use crate::bundled::TRIVIAL;
use crate::catalog;
use crate::model::FlowStatus;
use crate::runtime::Runtime;
use crate::scheduler::{Mode, Scheduler};

#[derive(Debug, Args)]
pub(super) struct BenchArgs {
    /// Number of shops
    #[arg(long, default_value_t = 13)]
    shops: usize,
    /// Number of days, from 2015-01-01
    #[arg(long, default_value_t = 365)]
    days: usize,
    /// Where to write the project [default: a temporary directory]
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub(super) async fn bench(args: &BenchArgs, runtime: &Runtime) -> anyhow::Result<Status> {
    let temporary = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| temporary.path().to_path_buf());
    let start = NaiveDate::from_ymd_opt(2015, 1, 1).expect("a valid date");
    let last = start + Duration::days(args.days.max(1) as i64 - 1);
    write_project(&dir, args.shops, start, last).context("writing the benchmark project")?;
    let catalog = catalog::load(&dir).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut scheduler = Scheduler::open(&catalog, runtime).await?;
    let pattern = format!("bench.mart/MonthlyTotal/rym({}-{})", start.format("%Y%m"), last.format("%Y%m"));

    let measure = async |label: &str, scheduler: &mut Scheduler<'_>| -> anyhow::Result<()> {
        let started = Instant::now();
        let summary = scheduler.materialize(&pattern, Mode::Default).await?;
        let elapsed = started.elapsed();
        let views = summary.views();
        println!(
            "{label:<26} {views:>8} views {:>9.3} s {:>9.1} µs/view  transformed {:>7}  idle {:>7}  failed {}",
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / views.max(1) as f64,
            summary.count(FlowStatus::Successful),
            summary.count(FlowStatus::Idle),
            summary.failures.len(),
        );
        Ok(())
    };
    measure("cold", &mut scheduler).await?;
    measure("unchanged", &mut scheduler).await?;
    // Re-deliver one day of one shop: its cone is that raw view, its daily
    // view, its shop's month and the month's total.
    let flag = dir.join(format!("data/raw/SHOP000/{}/{:02}/{:02}/_SUCCESS", last.year(), last.month(), last.day()));
    std::fs::write(&flag, b"")?;
    measure("one input changed", &mut scheduler).await?;
    Ok(Status::Success)
}

fn write_project(dir: &std::path::Path, shops: usize, start: NaiveDate, last: NaiveDate) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("plugins"))?;
    std::fs::write(dir.join("plugins").join(TRIVIAL.file_name), TRIVIAL.bytes)?;
    let names: Vec<String> = (0..shops).map(|i| format!("\"SHOP{i:03}\"")).collect();
    let time = |frequency: &str| format!("time = {{ frequency = \"{frequency}\", initial = \"{start}\" }}");
    let mut toml = String::from("[defaults]\nconcurrency = 4\n\n[plugins]\ntrivial = \"plugins/trivial.wasm\"\n\n");
    let _ = writeln!(
        toml,
        "[[view]]\nname = \"bench.raw/Orders\"\nparameters = [{{ name = \"shop\" }}]\n{}\npath = \"raw/${{shop}}/${{YEAR}}/${{MONTH}}/${{DAY}}\"\n",
        time("1d")
    );
    let _ = writeln!(
        toml,
        "[[view]]\nname = \"bench.mart/Daily\"\nparameters = [{{ name = \"shop\" }}]\n{}\ntransformation = {{ plugin = \"trivial\" }}\n[[view.dependency]]\nview = \"bench.raw/Orders\"\n",
        time("1d")
    );
    let _ = writeln!(
        toml,
        "[[view]]\nname = \"bench.mart/Monthly\"\nparameters = [{{ name = \"shop\" }}]\n{}\ntransformation = {{ plugin = \"trivial\" }}\n[[view.dependency]]\nview = \"bench.mart/Daily\"\ntime = \"all\"\n",
        time("1M")
    );
    let _ = writeln!(
        toml,
        "[[view]]\nname = \"bench.mart/MonthlyTotal\"\n{}\ntransformation = {{ plugin = \"trivial\" }}\n[[view.dependency]]\nview = \"bench.mart/Monthly\"\nparameters = {{ shop = [{}] }}\n",
        time("1M"),
        names.join(", ")
    );
    std::fs::write(dir.join("trellis.toml"), toml)?;
    for shop in 0..shops {
        let mut day = start;
        while day <= last {
            let path = dir.join(format!("data/raw/SHOP{shop:03}/{}/{:02}/{:02}", day.year(), day.month(), day.day()));
            std::fs::create_dir_all(&path)?;
            std::fs::write(path.join("_SUCCESS"), b"")?;
            day += Duration::days(1);
        }
    }
    Ok(())
}
