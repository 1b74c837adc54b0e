//! `trellis bench`: generates a shop lattice (shops × days: raw external
//! data, daily sales per shop, monthly sales per shop, a monthly total over
//! all shops) with a trivial real WASM transformation, and measures a cold
//! materialization, an unchanged re-materialization and a one-input change;
//! or, with `--listeners`, scheduling throughput with no listener, the jsonl
//! listener and a listener that fails on every event; or, with
//! `--coordinators N`, N daily coordinators catching up on every day, and
//! an idle server whose coordinators wait for the last days' inputs; or,
//! with `--incremental`, a year-to-date view after one new day, incremental
//! beside a full recomputation, and the manifest check of a large input.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use chrono::{Datelike, Duration, NaiveDate};
use clap::Args;

use super::Status;
use crate::bundled::{FAILING_LISTENER, TRIVIAL};
use crate::model::FlowStatus;
use crate::plugins::Plugins;
use crate::runtime::Runtime;
use crate::scheduler::{Mode, Scheduler};
use crate::session::Session;

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
    /// Measure throughput with no listener, the jsonl listener and an always-failing one
    #[arg(long)]
    listeners: bool,
    /// With --listeners: how many rounds of the three setups to run; the best of each counts
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Measure N daily coordinators (each over one shop's daily sales) catching up on every day,
    /// then an idle server whose coordinators wait for the last --waiting-days days' inputs
    #[arg(long, value_name = "N")]
    coordinators: Option<usize>,
    /// With --coordinators: the days at the end without input, for the idle server
    #[arg(long, default_value_t = 10)]
    waiting_days: usize,
    /// With --coordinators: how long to measure the idle server's CPU time
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    idle: std::time::Duration,
    /// Measure a year-to-date view over --days daily inputs of --rows rows, after one new day,
    /// incremental beside a full recomputation; and the manifest check of --files unchanged files
    #[arg(long)]
    incremental: bool,
    /// With --incremental: rows per daily input
    #[arg(long, default_value_t = 10_000)]
    rows: usize,
    /// With --incremental: files in the input whose manifest check is measured
    #[arg(long, default_value_t = 1_000)]
    files: usize,
    /// Keep the lattice's data on an S3-compatible store (`s3://bucket/prefix`, the bucket
    /// existing, credentials from the AWS environment): the runs then say the requests per view
    #[arg(long, value_name = "URL")]
    storage: Option<String>,
    /// With --storage: the store's endpoint (`http://127.0.0.1:5000` for a local server)
    #[arg(long, value_name = "URL", requires = "storage")]
    s3_endpoint: Option<String>,
    /// With --storage: measure one poll of N awaited done flags that have not arrived (--shops
    /// shops' days), the requests it sends and what one HEAD per flag would send
    #[arg(long, value_name = "N", requires = "storage")]
    poll: Option<usize>,
}

/// The listener setups `--listeners` compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    NoListener,
    Jsonl,
    AlwaysFailing,
}

impl Setup {
    const ALL: [Setup; 3] = [Setup::NoListener, Setup::Jsonl, Setup::AlwaysFailing];

    fn name(self) -> &'static str {
        match self {
            Setup::NoListener => "no listener",
            Setup::Jsonl => "jsonl listener",
            Setup::AlwaysFailing => "always-failing listener",
        }
    }

    /// The project's `[events]` and `[[listener]]`: the monitor is off in
    /// every setup, so that only the listener under test differs.
    fn toml(self) -> String {
        let listener = match self {
            Setup::NoListener => "",
            Setup::Jsonl => "[[listener]]\nname = \"jsonl\"\nplugin = \"jsonl\"\n",
            Setup::AlwaysFailing => {
                "[[listener]]\nname = \"failing\"\nplugin = \"failing\"\nconfig = { behaviour = \"fatal\" }\n"
            }
        };
        format!("[events]\nmonitor = false\n\n{listener}")
    }
}

/// The file that marks a directory as a bench's own: a later bench may
/// clear and reuse it, and nothing else.
const MARKER: &str = ".trellis-bench";

pub(super) async fn bench(args: &BenchArgs, runtime: &Runtime) -> anyhow::Result<Status> {
    let start = NaiveDate::from_ymd_opt(2015, 1, 1).expect("a valid date");
    let last = last_day(start, args.days)?;
    let temporary = tempfile::tempdir()?;
    let dir = match &args.dir {
        Some(dir) => {
            prepare(dir)?;
            dir.clone()
        }
        None => temporary.path().to_path_buf(),
    };
    if args.listeners {
        return bench_listeners(args, runtime, &dir, start, last).await;
    }
    if let Some(coordinators) = args.coordinators {
        let bench = Coordinators { args, count: coordinators, runtime, dir: &dir, start, last };
        return bench_coordinators(bench).await;
    }
    if args.incremental {
        return bench_incremental(args, runtime, &dir, start, last).await;
    }
    let on_store = match &args.storage {
        Some(url) => {
            let endpoint =
                args.s3_endpoint.as_ref().map(|e| format!("[project.s3]\nendpoint = {e:?}\n")).unwrap_or_default();
            format!("[project]\nname = \"bench\"\nstorage = {url:?}\n{endpoint}\n")
        }
        None => String::new(),
    };
    if let Some(flags) = args.poll {
        return bench_poll(&dir, &on_store, args.shops, flags, start);
    }
    write_project(&dir, args.shops, start, last, &on_store).context("writing the benchmark project")?;
    let catalog = super::project::load(&dir)?;
    let deliver = Delivery::to(&catalog, &dir)?;
    if matches!(deliver, Delivery::Store(_)) {
        deliver.all(args.shops, start, last)?;
    }
    let plugins = std::sync::Arc::new(Plugins::load(runtime, &catalog).await);
    let mut scheduler = Scheduler::open(catalog.clone(), plugins).await?;
    let pattern = format!("bench.mart/MonthlyTotal/rym({}-{})", start.format("%Y%m"), last.format("%Y%m"));
    let storage = scheduler.storage();
    let requests = || storage.as_object().map(crate::storage::ObjectDir::requests);

    let measure = async |label: &str, scheduler: &mut Scheduler| -> anyhow::Result<()> {
        let before = requests();
        let started = Instant::now();
        let summary = scheduler.materialize(&pattern, Mode::Default).await?;
        let elapsed = started.elapsed();
        let views = summary.views();
        let sent = match (before, requests()) {
            (Some(before), Some(after)) => {
                let sent = after.since(&before);
                format!("  {:.2} requests/view: {sent}", sent.total() as f64 / views.max(1) as f64)
            }
            _ => String::new(),
        };
        println!(
            "{label:<26} {views:>8} views {:>9.3} s {:>9.1} µs/view  transformed {:>7}  idle {:>7}  failed {}{sent}",
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
    deliver.flag(0, last, "again")?;
    measure("one input changed", &mut scheduler).await?;
    // A scheduler that lives on, as a server's does, remembers what it found
    // up to date and watches external data: after one full check, a run
    // visits only what may have changed.
    scheduler.remember_freshness();
    measure("server: first run", &mut scheduler).await?;
    measure("server: unchanged", &mut scheduler).await?;
    let day = last - Duration::days(1);
    // The second shop's, or with one shop its only one.
    let shop = 1 % args.shops.max(1);
    deliver.flag(shop, day, "again")?;
    if scheduler.storage().as_object().is_some() {
        // An object store is polled, not watched: the server's poll (at
        // its interval) is what learns of the delivery.
        scheduler.poll_watches();
    }
    measure("server: one input changed", &mut scheduler).await?;
    Ok(Status::Success)
}

/// One poll of `flags` awaited done flags on an object store, none of
/// them delivered: `shops` shops' days from `start`, the flags of a month
/// sharing its prefix. Says what watching them cost (a listing per month
/// sees them absent), what the poll sent (one LIST per month's prefix) and
/// what one HEAD per flag would.
fn bench_poll(dir: &Path, on_store: &str, shops: usize, flags: usize, start: NaiveDate) -> anyhow::Result<Status> {
    std::fs::write(dir.join("trellis.toml"), format!("{on_store}[[view]]\nname = \"bench.raw/Orders\"\n"))?;
    let catalog = super::project::load(dir)?;
    let storage = crate::storage::open(&catalog)?;
    let Some(object) = storage.as_object() else { bail!("--poll measures an object store: give --storage s3://...") };
    let mut watches = crate::storage::watch::Watches::of(&storage)?;
    let days = flags.div_ceil(shops.max(1));
    let started = Instant::now();
    let before = object.requests();
    let awaited: Vec<(u32, crate::storage::Key)> = (0..flags)
        .map(|index| {
            let (shop, day) = (index / days, start + Duration::days((index % days) as i64));
            let flag = format!("raw/SHOP{shop:03}/{}/{:02}/{:02}/_SUCCESS", day.year(), day.month(), day.day());
            (index as u32, storage.key(&storage.root().join(flag)))
        })
        .collect();
    // As a server's first run starts them: a listing per month for the
    // absent ones, a HEAD for any left.
    let absent = watches.await_absent(&awaited);
    for ((who, flag), absent) in awaited.iter().zip(absent) {
        if !absent {
            watches.await_flag(*who, flag);
        }
    }
    let watched = object.requests().since(&before);
    println!("watching {flags} flags: {:.3} s, {watched}", started.elapsed().as_secs_f64());
    let started = Instant::now();
    let before = object.requests();
    let asked = watches.poll();
    let sent = object.requests().since(&before);
    println!(
        "one poll: {:.3} s, {sent}: {} LIST ({} pages) + {} HEAD, {} changed; one HEAD per flag would be {flags} requests",
        started.elapsed().as_secs_f64(),
        asked.lists,
        asked.pages,
        asked.heads,
        asked.changed
    );
    Ok(Status::Success)
}

/// Cold and unchanged materializations in each listener setup, in rounds,
/// each in a fresh project; the best time of each setup counts, and the
/// ratios compare setups measured in this one process.
async fn bench_listeners(
    args: &BenchArgs,
    runtime: &Runtime,
    dir: &std::path::Path,
    start: NaiveDate,
    last: NaiveDate,
) -> anyhow::Result<Status> {
    let mut best: Vec<(Setup, f64, f64)> = Setup::ALL.iter().map(|&s| (s, f64::MAX, f64::MAX)).collect();
    let mut views = 0;
    for round in 1..=args.rounds.max(1) {
        // Each round starts with another setup, so that no setup always
        // runs after the same one.
        best.rotate_left(usize::from(round > 1));
        for (setup, best_cold, best_unchanged) in &mut best {
            let project = dir.join(format!("{}-{round}", setup.name().replace(' ', "-")));
            write_project(&project, args.shops, start, last, &setup.toml()).context("writing the benchmark project")?;
            // Earlier setups' writes are not this one's to flush.
            // SAFETY: sync(2) takes no arguments and cannot fail.
            unsafe { libc::sync() };
            let catalog = super::project::load(&project)?;
            let mut session = Session::open(catalog.clone(), runtime).await?;
            let scheduler = &mut session.scheduler;
            let pattern = format!("bench.mart/MonthlyTotal/rym({}-{})", start.format("%Y%m"), last.format("%Y%m"));
            let started = Instant::now();
            let cold = scheduler.materialize(&pattern, Mode::Default).await?;
            let cold_time = started.elapsed().as_secs_f64();
            let started = Instant::now();
            scheduler.materialize(&pattern, Mode::Default).await?;
            let unchanged_time = started.elapsed().as_secs_f64();
            let started = Instant::now();
            let store = scheduler.metastore();
            let lags = session.close(std::time::Duration::from_secs(10)).await?;
            let drain_time = started.elapsed().as_secs_f64();
            views = cold.views();
            let statuses = crate::listeners::status(&catalog, &store)?;
            let lag: Vec<String> = statuses.iter().map(|s| format!("{} behind {}", s.name, s.behind)).collect();
            println!(
                "round {round}  {:<24} cold {cold_time:>7.3} s  unchanged {unchanged_time:>7.3} s  then caught up in {drain_time:>6.3} s{}  {}",
                setup.name(),
                if lags.iter().all(|lag| lag.behind == 0) { "" } else { " (not all)" },
                lag.join(", ")
            );
            *best_cold = best_cold.min(cold_time);
            *best_unchanged = best_unchanged.min(unchanged_time);
            if args.dir.is_none() {
                std::fs::remove_dir_all(&project).ok();
            }
        }
    }
    best.sort_by_key(|(setup, _, _)| Setup::ALL.iter().position(|s| s == setup));
    let (_, base_cold, base_unchanged) = best[0];
    println!("\nbest of {} rounds, {views} views:", args.rounds.max(1));
    for (setup, cold, unchanged) in &best {
        println!(
            "{:<24} cold {:>9.0} views/s ({:>5.3}x the no-listener time)  unchanged {:>9.0} views/s ({:>5.3}x)",
            setup.name(),
            views as f64 / cold,
            cold / base_cold,
            views as f64 / unchanged,
            unchanged / base_unchanged
        );
    }
    Ok(Status::Success)
}

/// `count` daily coordinators from `first` to `last` (both included), the
/// i-th over shop i modulo `shops`.
fn coordinators_toml(count: usize, shops: usize, first: NaiveDate, last: NaiveDate) -> String {
    let end = last + Duration::days(1);
    let mut toml = String::new();
    for i in 0..count {
        let _ = writeln!(
            toml,
            "[[coordinator]]\nname = \"c{i:04}\"\nviews = \"bench.mart/Daily/SHOP{:03}/${{YEAR}}/${{MONTH}}/${{DAY}}\"\nstart = \"{first}\"\nend = \"{end}\"\nfrequency = \"1d\"\n",
            i % shops.max(1)
        );
    }
    toml
}

/// The process's CPU time so far (user and system, all threads).
fn cpu_time() -> std::time::Duration {
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is valid.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Coordinators: a catch-up of every day by `count` coordinators on a
/// lattice built beforehand (so that the runs measure the scheduler, not
/// transformations), then an idle server with `count` coordinators whose
/// last `--waiting-days` actions wait for their inputs: its CPU time, and
/// how soon a done flag appearing makes its actions READY.
async fn bench_coordinators(bench: Coordinators<'_>) -> anyhow::Result<Status> {
    catch_up(bench).await?;
    idle_server(bench).await?;
    Ok(Status::Success)
}

/// What both coordinator benchmarks measure on: `count` coordinators over
/// the days from `start` to `last`, in projects under `dir`.
#[derive(Clone, Copy)]
struct Coordinators<'a> {
    args: &'a BenchArgs,
    count: usize,
    runtime: &'a Runtime,
    dir: &'a std::path::Path,
    start: NaiveDate,
    last: NaiveDate,
}

/// Midnight (UTC) of `day`: a coordinator's nominal time.
fn midnight(day: NaiveDate) -> chrono::DateTime<chrono::Utc> {
    day.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc()
}

/// The catch-up of every day by `count` coordinators, on a lattice built
/// first: the time per action, the coordinators' own part apart.
async fn catch_up(bench: Coordinators<'_>) -> anyhow::Result<()> {
    let Coordinators { args, count, runtime, dir, start, last } = bench;
    use crate::clock::Clock;
    use crate::model::ActionState;
    use crate::scheduler::Coordination;

    let days = (last - start).num_days() as usize + 1;
    let project = dir.join("catch-up");
    let toml = format!("[events]\nmonitor = false\n\n{}", coordinators_toml(count, args.shops, start, last));
    write_project(&project, args.shops, start, last, &toml).context("writing the benchmark project")?;
    let catalog = super::project::load(&project)?;
    let plugins = std::sync::Arc::new(Plugins::load(runtime, &catalog).await);
    let mut scheduler = Scheduler::open(catalog.clone(), plugins).await?;
    let pattern = format!("bench.mart/MonthlyTotal/rym({}-{})", start.format("%Y%m"), last.format("%Y%m"));
    let started = Instant::now();
    let cold = scheduler.materialize(&pattern, Mode::Default).await?;
    println!("built the lattice first: {} views in {:.3} s", cold.views(), started.elapsed().as_secs_f64());
    let clock = Clock::manual(midnight(last + Duration::days(1)));
    let started = Instant::now();
    let mut coordination = Coordination::open(&mut scheduler, clock)?;
    let mut queue: std::collections::VecDeque<_> = coordination.tick(&mut scheduler)?.into();
    let created = started.elapsed();
    let mut runs = 0usize;
    // The coordinators' own part (creating, checking, deciding, recording
    // actions) apart from the runs their actions start.
    let mut coordinating = created;
    while let Some(submission) = queue.pop_front() {
        let id = submission.record.id.clone();
        let at = Instant::now();
        coordination.run_started(&mut scheduler, &id)?;
        coordinating += at.elapsed();
        let run = scheduler.begin(submission.record, submission.mode, &submission.addressed);
        let summary = scheduler.drive(run, std::future::pending()).await?;
        let at = Instant::now();
        coordination.run_ended(&mut scheduler, &id, summary.termination)?;
        runs += 1;
        queue.extend(coordination.tick(&mut scheduler)?);
        coordinating += at.elapsed();
    }
    scheduler.commit_deferred()?;
    let elapsed = started.elapsed();
    let statuses = coordination.statuses();
    let succeeded: usize = statuses.iter().map(|s| s.counts.get(&ActionState::Succeeded).copied().unwrap_or(0)).sum();
    let actions: usize = statuses.iter().map(|s| s.counts.values().sum::<usize>()).sum();
    let per_action = |time: std::time::Duration| time.as_secs_f64() * 1e6 / actions.max(1) as f64;
    println!(
        "catch-up: {count} coordinators x {days} days: {actions} actions created, {succeeded} succeeded, {runs} runs in {:.3} s \
         ({:.1} µs per action in all; the coordinators' own part {:.1} µs per action, the runs' {:.1} µs; \
         the first tick, which created them all, {:.3} s)",
        elapsed.as_secs_f64(),
        per_action(elapsed),
        per_action(coordinating),
        per_action(elapsed.saturating_sub(coordinating)),
        created.as_secs_f64()
    );
    Ok(())
}

/// An idle server with `count` coordinators whose last `--waiting-days`
/// actions wait for their inputs: its CPU time, and how soon a done flag
/// appearing makes the first of them READY.
async fn idle_server(bench: Coordinators<'_>) -> anyhow::Result<()> {
    let Coordinators { args, count, runtime, dir, start, last } = bench;
    use crate::clock::Clock;
    use crate::model::ActionState;
    use crate::scheduler::{CoordinatorAnswer, CoordinatorOperation, Service};

    let days = (last - start).num_days() as usize + 1;
    let waiting_days = args.waiting_days.clamp(1, days);
    let first_waiting = last - Duration::days(waiting_days as i64 - 1);
    let project = dir.join("idle");
    let toml = format!("[events]\nmonitor = false\n\n{}", coordinators_toml(count, args.shops, first_waiting, last));
    write_project(&project, args.shops, start, first_waiting - Duration::days(1), &toml)
        .context("writing the benchmark project")?;
    let catalog = super::project::load(&project)?;
    let plugins = std::sync::Arc::new(Plugins::load(runtime, &catalog).await);
    let scheduler = Scheduler::open(catalog.clone(), plugins).await?;
    let store = scheduler.metastore();
    let mut commits = store.subscribe();
    let (service, handle) = Service::with_clock(scheduler, Clock::starting_at(midnight(last + Duration::days(1))));
    let service = tokio::spawn(service.run());
    let waiting_of = async |handle: &crate::scheduler::Handle| -> anyhow::Result<usize> {
        Ok(match handle.coordinators(CoordinatorOperation::Statuses).await? {
            CoordinatorAnswer::Statuses(statuses) => {
                statuses.iter().map(|s| s.counts.get(&ActionState::Waiting).copied().unwrap_or(0)).sum()
            }
            CoordinatorAnswer::Actions(_) => 0,
        })
    };
    let started = Instant::now();
    let waiting = waiting_of(&handle).await?;
    println!(
        "idle server: {count} coordinators, {waiting} actions waiting (created in {:.3} s)",
        started.elapsed().as_secs_f64()
    );
    let before = cpu_time();
    let wall = Instant::now();
    tokio::time::sleep(args.idle).await;
    let cpu = cpu_time() - before;
    println!(
        "idle server: {:.3} s of CPU in {:.1} s: {:.3}% of one core",
        cpu.as_secs_f64(),
        wall.elapsed().as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.elapsed().as_secs_f64()
    );
    // A flag appears: how soon is the first action that needs it READY?
    let coordinator = "c0000";
    let nominal = midnight(first_waiting).timestamp_millis();
    let flag = project.join(format!(
        "data/raw/SHOP000/{}/{:02}/{:02}/_SUCCESS",
        first_waiting.year(),
        first_waiting.month(),
        first_waiting.day()
    ));
    commits.borrow_and_update();
    std::fs::create_dir_all(flag.parent().expect("a flag has a directory"))?;
    let written = Instant::now();
    std::fs::write(&flag, b"")?;
    loop {
        let state = store.action(coordinator, nominal)?.map(|action| action.state);
        if state.is_some_and(|state| state != ActionState::Waiting) {
            break;
        }
        commits.changed().await?;
    }
    println!(
        "idle server: {coordinator}@{first_waiting} READY {:.1} ms after its flag appeared",
        written.elapsed().as_secs_f64() * 1e3
    );
    handle.shutdown(std::time::Duration::ZERO);
    service.await??;
    Ok(())
}

/// A year-to-date aggregate over daily order files, twice: incremental
/// (`csv-aggregate-incremental`) and in full (`csv-aggregate`), both from
/// the same inputs. Every day but the last is delivered and both are
/// built; then the last day arrives and each is materialized again, side
/// by side. Then the manifest check of an unchanged input of many files.
async fn bench_incremental(
    args: &BenchArgs,
    runtime: &Runtime,
    dir: &std::path::Path,
    start: NaiveDate,
    last: NaiveDate,
) -> anyhow::Result<Status> {
    write_incremental_project(dir, start)?;
    let write_day = |index: usize, day: NaiveDate| -> std::io::Result<()> {
        let path = dir.join(format!("data/raw/{}/{:02}/{:02}", day.year(), day.month(), day.day()));
        std::fs::create_dir_all(&path)?;
        let mut csv = String::with_capacity(args.rows * 24);
        csv.push_str("order,shop,amount\n");
        for row in 0..args.rows {
            let n = index * args.rows + row;
            let _ = writeln!(csv, "{n},SHOP{:02},{}.{:02}", n % 13, n % 997, n % 100);
        }
        std::fs::write(path.join("orders.csv"), csv)?;
        std::fs::write(path.join("_SUCCESS"), b"")
    };
    let days = (last - start).num_days() as usize + 1;
    for index in 0..days - 1 {
        write_day(index, start + Duration::days(index as i64))?;
    }
    let catalog = super::project::load(dir)?;
    let plugins = std::sync::Arc::new(Plugins::load(runtime, &catalog).await);
    let mut scheduler = Scheduler::open(catalog.clone(), plugins).await?;
    let year = format!("{}/01", start.year());
    let views = [format!("bench.mart/YearToDate/{year}"), format!("bench.mart/YearToDateFull/{year}")];
    let measure = async |label: &str, view: &str, scheduler: &mut Scheduler| -> anyhow::Result<f64> {
        let started = Instant::now();
        let summary = scheduler.materialize(view, Mode::Default).await?;
        let elapsed = started.elapsed().as_secs_f64();
        anyhow::ensure!(summary.failures.is_empty(), "{view}: {:?}", summary.failures);
        println!("{label:<44} {elapsed:>9.3} s  ({} views)", summary.views());
        Ok(elapsed)
    };
    println!("{} daily inputs of {} rows; the last day arrives after the first builds", days, args.rows);
    measure("incremental, first build (reads everything)", &views[0], &mut scheduler).await?;
    measure("full, first build", &views[1], &mut scheduler).await?;
    write_day(days - 1, last)?;
    let incremental = measure("incremental, after one new day", &views[0], &mut scheduler).await?;
    let full = measure("full, after one new day", &views[1], &mut scheduler).await?;
    let read = |view: &str| std::fs::read(dir.join("data").join(view.replacen('.', "/", 1)).join("part-00000.csv"));
    anyhow::ensure!(read(&views[0])? == read(&views[1])?, "the incremental and the full outputs differ");
    println!("incremental / full after one new day: {:.2} % (the outputs are identical)", 100.0 * incremental / full);

    manifest_check(args, dir)?;
    Ok(Status::Success)
}

/// The incremental benchmark's project: daily orders, and a year to date
/// over them built incrementally and in full.
fn write_incremental_project(dir: &std::path::Path, start: NaiveDate) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join("plugins"))?;
    let mut toml = String::from("[project]\nname = \"bench\"\n\n[plugins]\n");
    for name in ["csv-aggregate", "csv-aggregate-incremental"] {
        let sample = crate::bundled::sample(name).expect("a sample");
        std::fs::write(dir.join("plugins").join(sample.file_name), sample.bytes)?;
        let _ = writeln!(toml, "{name} = \"plugins/{}\"", sample.file_name);
    }
    let _ = writeln!(
        toml,
        "\n[[view]]\nname = \"bench.raw/Orders\"\ntime = {{ frequency = \"1d\", initial = \"{start}\" }}\n\
         path = \"raw/${{YEAR}}/${{MONTH}}/${{DAY}}\""
    );
    for (name, plugin, incremental) in
        [("YearToDate", "csv-aggregate-incremental", "incremental = true\n"), ("YearToDateFull", "csv-aggregate", "")]
    {
        let _ = writeln!(
            toml,
            "\n[[view]]\nname = \"bench.mart/{name}\"\ntime = {{ frequency = \"12M\", initial = \"{start}\" }}\n\
             {incremental}transformation = {{ plugin = \"{plugin}\", config = {{ group-by = \"shop\", \
             aggregates = \"orders=count(*),revenue=sum(amount),smallest=min(amount),largest=max(amount)\" }} }}\n\
             [[view.dependency]]\nview = \"bench.raw/Orders\"\ntime = \"all\""
        );
    }
    std::fs::write(dir.join("trellis.toml"), toml)?;
    Ok(())
}

/// The manifest check: lists an input of `--files` files and compares it
/// with the manifest its last commit recorded, 200 times.
fn manifest_check(args: &BenchArgs, dir: &std::path::Path) -> anyhow::Result<()> {
    let input = dir.join("many");
    std::fs::create_dir_all(&input)?;
    for n in 0..args.files {
        std::fs::write(input.join(format!("part-{n:05}.csv")), b"v\n1\n")?;
    }
    let storage = crate::storage::LocalDir::new(&input);
    let recorded = crate::scheduler::txlog::manifest(&storage, &input)?;
    let mut times = Vec::with_capacity(200);
    for _ in 0..200 {
        let started = Instant::now();
        let now = crate::scheduler::txlog::manifest(&storage, &input)?;
        let (new, changed, removed) = crate::scheduler::txlog::compare(&recorded, &now);
        times.push(started.elapsed());
        anyhow::ensure!(new.is_empty() && changed.is_empty() && removed.is_empty(), "the input changed");
    }
    times.sort();
    println!(
        "manifest check of an unchanged input of {} files: median {:.3} ms, p90 {:.3} ms, fastest {:.3} ms (200 checks)",
        args.files,
        times[100].as_secs_f64() * 1e3,
        times[180].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3
    );
    Ok(())
}

/// The last of `days` days from `start` (at least one), refused when the
/// calendar would not reach it.
fn last_day(start: NaiveDate, days: usize) -> anyhow::Result<NaiveDate> {
    let latest = NaiveDate::from_ymd_opt(9999, 12, 31).expect("a valid date");
    u64::try_from(days.max(1) - 1)
        .ok()
        .and_then(|more| start.checked_add_days(chrono::Days::new(more)))
        .filter(|last| *last <= latest)
        .with_context(|| {
            format!(
                "--days {days}: the last day would be after {latest}; at most {} days from {start}",
                (latest - start).num_days() + 1
            )
        })
}

/// Makes `dir` the bench's: a new or empty directory, or one an earlier
/// bench marked as its own, which is cleared. Anything else (a project
/// above all) is refused untouched: the bench writes its own trellis.toml,
/// data and metastore.
fn prepare(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        let empty = entries.next().is_none();
        if !empty && !dir.join(MARKER).is_file() {
            bail!("{} exists and was not written by `trellis bench`; name a new or empty directory", dir.display());
        }
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let path = entry.path();
            if entry.file_name() == MARKER {
                continue;
            }
            // A link is removed, never followed.
            let removed = match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
            removed.with_context(|| format!("clearing {}", path.display()))?;
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(MARKER), "written by `trellis bench`; the next bench in this directory replaces it\n")
        .with_context(|| format!("writing {}", dir.join(MARKER).display()))?;
    Ok(())
}

fn write_project(
    dir: &std::path::Path,
    shops: usize,
    start: NaiveDate,
    last: NaiveDate,
    extra: &str,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("plugins"))?;
    std::fs::write(dir.join("plugins").join(TRIVIAL.file_name), TRIVIAL.bytes)?;
    std::fs::write(dir.join("plugins").join(FAILING_LISTENER.file_name), FAILING_LISTENER.bytes)?;
    let jsonl = crate::bundled::sample("jsonl-listener").expect("jsonl-listener is a sample");
    std::fs::write(dir.join("plugins").join(jsonl.file_name), jsonl.bytes)?;
    let names: Vec<String> = (0..shops).map(|i| format!("\"SHOP{i:03}\"")).collect();
    let time = |frequency: &str| format!("time = {{ frequency = \"{frequency}\", initial = \"{start}\" }}");
    let mut toml = format!(
        "[defaults]\nconcurrency = 4\n\n[plugins]\ntrivial = \"plugins/trivial.wasm\"\njsonl = \"plugins/{}\"\nfailing = \"plugins/{}\"\n\n{extra}\n",
        jsonl.file_name, FAILING_LISTENER.file_name
    );
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
    // A bench on an object store delivers there once the project is loaded.
    if !extra.contains("storage = \"s3://") {
        Delivery::Local(dir.join("data")).all(shops, start, last).map_err(std::io::Error::other)?;
    }
    Ok(())
}

/// Where the bench delivers its raw data's done flags: files in the local
/// root, or objects in the store (as a producer would: no pointer).
enum Delivery {
    Local(PathBuf),
    Store(crate::storage::Storage),
}

impl Delivery {
    /// The delivery to the project's root; a local root was delivered to
    /// when the project was written.
    fn to(catalog: &crate::catalog::Catalog, dir: &Path) -> anyhow::Result<Delivery> {
        let storage = crate::storage::open(catalog)?;
        Ok(match storage.as_object() {
            Some(_) => Delivery::Store(storage),
            None => Delivery::Local(dir.join("data")),
        })
    }

    /// Every day's flag of every shop, on an object store (a local root's
    /// were written with the project).
    fn all(&self, shops: usize, start: NaiveDate, last: NaiveDate) -> anyhow::Result<()> {
        for shop in 0..shops {
            let mut day = start;
            while day <= last {
                self.flag(shop, day, "")?;
                day += Duration::days(1);
            }
        }
        Ok(())
    }

    fn flag(&self, shop: usize, day: NaiveDate, body: &str) -> anyhow::Result<()> {
        let relative = format!("raw/SHOP{shop:03}/{}/{:02}/{:02}/_SUCCESS", day.year(), day.month(), day.day());
        match self {
            Delivery::Local(root) => {
                let path = root.join(&relative);
                std::fs::create_dir_all(path.parent().expect("a flag is in a directory"))?;
                std::fs::write(&path, body)?;
            }
            Delivery::Store(storage) => {
                let object = storage.as_object().expect("a store delivery is to an object store");
                object.put(&storage.key(&storage.root().join(&relative)), body.as_bytes().to_vec())?;
            }
        }
        Ok(())
    }
}
