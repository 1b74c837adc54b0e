//! Lattice benchmark: load a generated shop project and instantiate about a
//! million views (shops × ten years of days: raw orders, daily sales,
//! monthly sales, and a monthly total over all shops).
//!
//! Run: `cargo bench -p trellis --bench lattice` (add `-- --shops N` to
//! change the size). Prints time and peak RSS, for BENCHMARKS.md.

use std::fmt::Write as _;
use std::time::Instant;

use trellis::catalog;
use trellis::catalog::pattern;
use trellis::lattice::{Lattice, Resolution};

fn main() {
    let shops: usize =
        std::env::args().skip_while(|a| a != "--shops").nth(1).and_then(|n| n.parse().ok()).unwrap_or(135);
    let project = tempfile::tempdir().expect("tempdir");
    std::fs::write(project.path().join("trellis.toml"), project_file(shops)).expect("write project");
    let rss_before = peak_rss_kib();

    let started = Instant::now();
    let catalog = catalog::load(project.path()).expect("project loads");
    let loaded = started.elapsed();
    let pattern = pattern::parse("shop.datamart/MonthlyTotal/rym(201501-202412)").expect("pattern");
    let mut lattice = Lattice::new(std::sync::Arc::new(catalog));
    let never = |_: &Lattice, _: &trellis::lattice::ResolvedView| false;
    let resolution = Resolution { evaluation_time: chrono::Utc::now(), exists: &never };
    let addressed = lattice.instantiate(&pattern, &resolution).expect("instantiate");
    let total = started.elapsed();
    let rss_after = peak_rss_kib();

    let views = lattice.len();
    println!(
        "{shops} shops x 10 years: {views} views ({} addressed), load {:.1} ms, load + instantiate {:.2} s, {:.0} ns per view",
        addressed.len(),
        loaded.as_secs_f64() * 1e3,
        total.as_secs_f64(),
        total.as_secs_f64() * 1e9 / views as f64,
    );
    println!(
        "peak RSS {:.0} MiB (before loading {:.0} MiB): {:.0} bytes per view of growth; lattice structures {:.0} bytes per view",
        rss_after as f64 / 1024.0,
        rss_before as f64 / 1024.0,
        (rss_after - rss_before) as f64 * 1024.0 / views as f64,
        lattice.heap_bytes() as f64 / views as f64,
    );
}

fn project_file(shops: usize) -> String {
    let names: Vec<String> = (0..shops).map(|i| format!("\"SHOP{i:03}\"")).collect();
    let mut text = String::new();
    let time = r#"time = { frequency = "1d", initial = "2015-01-01", timezone = "Europe/Berlin" }"#;
    let month = r#"time = { frequency = "1M", initial = "2015-01-01", timezone = "Europe/Berlin" }"#;
    writeln!(text, "[plugins]\ntrivial = \"trivial.wasm\"\n").unwrap();
    writeln!(text, "[[view]]\nname = \"shop.raw/Orders\"\nparameters = [{{ name = \"shop\" }}]\n{time}\n").unwrap();
    writeln!(text, "[[view]]\nname = \"shop.datamart/DailySales\"\nparameters = [{{ name = \"shop\" }}]\n{time}\ntransformation = {{ plugin = \"trivial\" }}\n[[view.dependency]]\nview = \"shop.raw/Orders\"\n").unwrap();
    writeln!(text, "[[view]]\nname = \"shop.datamart/MonthlySales\"\nparameters = [{{ name = \"shop\" }}]\n{month}\ntransformation = {{ plugin = \"trivial\" }}\n[[view.dependency]]\nview = \"shop.datamart/DailySales\"\ntime = \"all\"\n").unwrap();
    writeln!(text, "[[view]]\nname = \"shop.datamart/MonthlyTotal\"\n{month}\ntransformation = {{ plugin = \"trivial\" }}\n[[view.dependency]]\nview = \"shop.datamart/MonthlySales\"\nparameters = {{ shop = [{}] }}\n", names.join(", ")).unwrap();
    text
}

/// VmHWM: the process's peak resident set, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
