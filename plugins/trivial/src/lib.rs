//! `trivial`: a transformation that does nothing and reports data. It
//! measures the cost of a call itself, in benchmarks and scheduler tests;
//! with `gate`, it holds a transformation open until a test lets it finish.

use std::path::Path;
use std::time::Duration;

use trellis_plugin_sdk::{ConfigKey, Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Trivial;

impl Transformation for Trivial {
    fn describe() -> PluginInfo {
        PluginInfo::new("trivial", env!("CARGO_PKG_VERSION"))
            .description("does nothing, reports data")
            .config_key(ConfigKey::optional("label", "ignored; lets a test change a view type's configuration"))
            .config_key(ConfigKey::optional(
                "gate",
                "a file name: wait until a file of that name exists in some input's directory",
            ))
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        // A test's way to keep transformations in flight for as long as it
        // needs, without guessing durations: it creates the file when done.
        if let Some(gate) = request.config().get("gate") {
            while !request.inputs.iter().any(|input| Path::new(&input.path).join(gate).exists()) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(Outcome::Data(Vec::new()))
    }
}

export_transformation!(Trivial);
