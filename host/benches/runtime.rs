//! Plugin runtime benchmarks: per-call overhead of a trivial transformation,
//! cold compilation of csv-aggregate, and its load from the on-disk cache.
//!
//! Run: `cargo bench -p trellis --bench runtime` (add `-- --calls N` to change
//! the sample size, `-- --calls-only` to skip compilation, e.g. for perf). Prints one line per figure, for BENCHMARKS.md.

use std::path::Path;
use std::time::{Duration, Instant};

use trellis::bundled::PLUGINS_DIR;
use trellis::runtime::{OutputLimit, Provenance, Runtime, RuntimeOptions, TransformOutcome, TransformRequest};

fn main() {
    let calls =
        std::env::args().skip_while(|arg| arg != "--calls").nth(1).and_then(|n| n.parse().ok()).unwrap_or(5000usize);
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let calls_only = std::env::args().any(|arg| arg == "--calls-only");
    tokio.block_on(async {
        call_overhead(calls).await;
        if !calls_only {
            compile_and_cache().await;
        }
    });
}

fn plugin_path(name: &str) -> std::path::PathBuf {
    Path::new(PLUGINS_DIR).join(format!("{name}.wasm"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

async fn call_overhead(calls: usize) {
    let runtime = Runtime::new(RuntimeOptions::default()).expect("runtime");
    let plugin = runtime.load_file(&plugin_path("trivial")).await.expect("load trivial");
    let output = tempfile::tempdir().expect("tempdir");
    let request = TransformRequest {
        view: "bench/Trivial".into(),
        parameters: Vec::new(),
        nominal_time: None,
        actual_time: 0,
        config: Vec::new(),
        inputs: Vec::new(),
        output_dir: output.path().to_path_buf(),
        output_limit: OutputLimit { bytes: 1 << 30, entries: 1000 },
    };
    // Warm up allocator and caches; these calls are not counted.
    for _ in 0..200 {
        plugin.transform(&request).await.expect("call");
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let report = plugin.transform(&request).await.expect("call");
        samples.push(started.elapsed());
        assert!(matches!(report.result, Ok(TransformOutcome::Data { .. })), "{:?}", report.result);
    }
    samples.sort();
    println!(
        "trivial transformation call (fresh store, one output preopen), {calls} calls: median {:.1} µs, p99 {:.1} µs",
        percentile(&samples, 0.5).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
    );
}

async fn compile_and_cache() {
    let bytes = std::fs::read(plugin_path("csv_aggregate")).expect("csv_aggregate.wasm");
    let cache = tempfile::tempdir().expect("tempdir");
    let options = RuntimeOptions { cache_dir: Some(cache.path().to_path_buf()), ..RuntimeOptions::default() };

    let mut compiles = Vec::new();
    for round in 0..5 {
        // A fresh cache directory each round, so that every load compiles.
        let empty = tempfile::tempdir().expect("tempdir");
        let runtime =
            Runtime::new(RuntimeOptions { cache_dir: Some(empty.path().to_path_buf()), ..RuntimeOptions::default() })
                .expect("runtime");
        let started = Instant::now();
        let plugin = runtime.load("csv-aggregate", bytes.clone()).await.expect("compile");
        compiles.push(started.elapsed());
        assert_eq!(plugin.provenance(), Provenance::Compiled, "round {round}");
    }
    compiles.sort();

    // Fill the shared cache once, then load from it with fresh runtimes,
    // as a new process would.
    Runtime::new(options.clone()).expect("runtime").load("csv-aggregate", bytes.clone()).await.expect("fill cache");
    let mut loads = Vec::new();
    for _ in 0..20 {
        let runtime = Runtime::new(options.clone()).expect("runtime");
        let started = Instant::now();
        let plugin = runtime.load("csv-aggregate", bytes.clone()).await.expect("load");
        loads.push(started.elapsed());
        assert_eq!(plugin.provenance(), Provenance::Disk);
    }
    loads.sort();
    println!(
        "csv-aggregate ({} KiB): cold compile median {:.1} ms (min {:.1}, max {:.1}, 5 runs); load from disk cache median {:.2} ms (max {:.2}, 20 runs)",
        bytes.len() / 1024,
        percentile(&compiles, 0.5).as_secs_f64() * 1e3,
        compiles[0].as_secs_f64() * 1e3,
        compiles[compiles.len() - 1].as_secs_f64() * 1e3,
        percentile(&loads, 0.5).as_secs_f64() * 1e3,
        loads[loads.len() - 1].as_secs_f64() * 1e3,
    );
}
