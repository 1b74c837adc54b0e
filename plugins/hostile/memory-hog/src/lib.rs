//! Hostile fixture: takes most of its memory cap and holds it, for the
//! tests and benchmarks of the host's memory budget.
//!
//! Configuration (all optional):
//! - `mib`: how many MiB to allocate and touch (default 400);
//! - `gate`: a file name: once the memory is held, wait until a file of that
//!   name exists in some input's directory (as `trivial` does);
//! - `hold_ms`: once the memory is held, sleep this long (default 0).
//!
//! Once the memory is held it creates `/output/holding`, so that a test can
//! count the calls that got this far.
use std::path::Path;
use std::time::Duration;

use trellis_plugin_sdk::{ConfigKey, Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-memory-hog", "0.0.0")
            .config_key(ConfigKey::optional("mib", "MiB to allocate and touch (default 400)"))
            .config_key(ConfigKey::optional("gate", "a file name: hold the memory until it exists in an input"))
            .config_key(ConfigKey::optional("hold_ms", "hold the memory this long (default 0)"))
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        let number = |key: &str, default: u64| {
            request.config().get(key).map_or(Ok(default), |value| {
                value.parse::<u64>().map_err(|_| Failure::fatal(format!("`{key}` must be a number, not `{value}`")))
            })
        };
        let mib = number("mib", 400)?;
        let hold = Duration::from_millis(number("hold_ms", 0)?);
        // Touch every page so that the memory is really used.
        let hoard: Vec<Vec<u8>> = (0..mib).map(|_| vec![0xA5; 1 << 20]).collect();
        std::hint::black_box(&hoard);
        request.create_output_file("holding")?;
        if let Some(gate) = request.config().get("gate") {
            while !request.inputs.iter().any(|input| Path::new(&input.path).join(gate).exists()) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        std::thread::sleep(hold);
        std::hint::black_box(&hoard);
        Ok(Outcome::Data(vec![("mib".into(), mib)]))
    }
}

export_transformation!(Hostile);
