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

/// The same `rows` of sales (in 8 files) aggregated by the Rust plugin, the
/// Python plugin, and the Python plugin's code run natively by `python3`
/// with the SDK on its path; each output checked equal to the Rust one.
async fn csv_aggregate(rows: usize, python: &Path) {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("orders");
    std::fs::create_dir_all(&input).expect("input");
    let mut state = 42u64;
    let mut next = |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for file in 0..8 {
        let mut csv = String::from("shop,day,amount\n");
        for _ in 0..rows / 8 {
            let (shop, day, cents) = (next(50), next(28) + 1, next(100_000) as i64 - 5_000);
            let sign = if cents < 0 { "-" } else { "" };
            csv.push_str(&format!(
                "SHOP{shop},2015-05-{day:02},{sign}{}.{:02}\n",
                cents.abs() / 100,
                cents.abs() % 100
            ));
        }
        std::fs::write(input.join(format!("part-{file}.csv")), csv).expect("write input");
    }
    let config = [("group-by", "shop,day"), ("aggregates", "count(*), total=sum(amount), min(amount), max(amount)")];
    let runtime = Runtime::new(RuntimeOptions::default()).expect("runtime");
    let mut outputs = Vec::new();
    let mut timings = Vec::new();
    for (name, path) in [("Rust", Path::new(PLUGINS_DIR).join("csv_aggregate.wasm")), ("Python", python.to_path_buf())]
    {
        let plugin = runtime.load_file(&path).await.expect("load");
        let mut limits = plugin.limits();
        limits.deadline = Duration::from_secs(3600);
        let plugin = plugin.with_limits(limits);
        let output = dir.path().join(format!("out-{name}"));
        std::fs::create_dir_all(&output).expect("output");
        let inputs = vec![trellis::runtime::TransformInput {
            name: "orders".into(),
            view: "bench/Orders".into(),
            dir: input.clone(),
            timestamp: None,
            changed: true,
        }];
        let started = Instant::now();
        let report = plugin.transform(&request(&output, inputs, &config)).await.expect("call");
        timings.push((name, started.elapsed(), report.peak_memory));
        assert!(matches!(report.result, Ok(TransformOutcome::Data { .. })), "{name}: {:?}", report.result);
        outputs.push(std::fs::read(output.join("part-00000.csv")).expect("output"));
    }
    // Natively: the same module and SDK, on the machine's CPython.
    let native_output = dir.path().join("out-native");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = "import sys, time\n\
                  sys.path[:0] = [sys.argv[1], sys.argv[2]]\n\
                  import py_csv_aggregate\n\
                  from trellis_plugin import testing\n\
                  started = time.perf_counter()\n\
                  testing.run_transformation(py_csv_aggregate.run, output=sys.argv[4], inputs={'orders': sys.argv[3]}, \
                  config={'group-by': sys.argv[5], 'aggregates': sys.argv[6]})\n\
                  print(time.perf_counter() - started)\n";
    let native = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(root.join("plugin-sdk-python"))
        .arg(root.join("plugins/python/py-csv-aggregate"))
        .arg(&input)
        .arg(&native_output)
        .args([config[0].1, config[1].1])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    assert!(native.status.success(), "{}", String::from_utf8_lossy(&native.stderr));
    let native_seconds: f64 = String::from_utf8_lossy(&native.stdout).trim().parse().expect("seconds");
    outputs.push(std::fs::read(native_output.join("part-00000.csv")).expect("native output"));
    assert!(outputs.windows(2).all(|pair| pair[0] == pair[1]), "the three outputs differ");
    let rust = timings[0].1.as_secs_f64();
    let [(_, rust_time, rust_peak), (_, python_time, python_peak)] = [timings[0], timings[1]];
    println!(
        "csv-aggregate on {rows} rows: Rust plugin {:.2} s (peak {:.0} MiB); Python plugin {:.1} s (peak {:.0} MiB, {:.0}x Rust); \
         the same Python natively (CPython {}) {:.1} s ({:.0}x Rust); outputs identical",
        rust_time.as_secs_f64(),
        rust_peak as f64 / (1 << 20) as f64,
        python_time.as_secs_f64(),
        python_peak as f64 / (1 << 20) as f64,
        python_time.as_secs_f64() / rust,
        python_version(),
        native_seconds,
        native_seconds / rust,
    );
}

fn python_version() -> String {
    std::process::Command::new("python3")
        .args(["-c", "import platform; print(platform.python_version())"])
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .unwrap_or_default()
}
