//! The sample plugins, built from `plugins/` by build.rs and embedded in the
//! binary, so that `trellis demo` needs nothing but the binary.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! the sample plugins embedded in the binary, and the path
//! where build.rs put every built plugin (tests load fixtures from there).

/// Where build.rs put every plugin it built: the samples and the hostile
/// test fixtures (`hostile_*.wasm`). Tests load fixtures from here.
pub const PLUGINS_DIR: &str = env!("TRELLIS_PLUGINS_DIR");

/// A sample plugin embedded in the binary.
pub struct Sample {
    /// Its file name, e.g. `csv-aggregate.wasm`.
    pub file_name: &'static str,
    pub bytes: &'static [u8],
}

macro_rules! sample {
    ($name:literal, $built:literal) => {
        Sample {
            file_name: concat!($name, ".wasm"),
            bytes: include_bytes!(concat!(env!("TRELLIS_PLUGINS_DIR"), "/", $built, ".wasm")),
        }
    };
}

/// The sample plugins: three transformations (one incremental), two
/// engine transformations (Spark), a checksum and three listeners.
pub const SAMPLES: [Sample; 9] = [
    sample!("csv-aggregate", "csv_aggregate"),
    sample!("csv-aggregate-incremental", "csv_aggregate_incremental"),
    sample!("concat", "concat"),
    sample!("spark-sql", "spark_sql"),
    sample!("spark-python", "spark_python"),
    sample!("sql-checksum", "sql_checksum"),
    sample!("jsonl-listener", "jsonl_listener"),
    sample!("stats-listener", "stats_listener"),
    sample!("webhook-listener", "webhook_listener"),
];

/// A transformation that does nothing and reports data: what `trellis
/// bench` measures the scheduler with.
pub const TRIVIAL: Sample = sample!("trivial", "trivial");

/// A listener that fails on every event (the `hostile-listener` fixture):
/// what `trellis bench --listeners` measures supervision with.
pub const FAILING_LISTENER: Sample = sample!("failing-listener", "hostile_listener");

/// The embedded sample called `name` (without `.wasm`).
pub fn sample(name: &str) -> Option<&'static Sample> {
    SAMPLES.iter().find(|sample| sample.file_name.strip_suffix(".wasm") == Some(name))
}
