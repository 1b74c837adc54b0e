//! `trivial`: a transformation that does nothing and reports data. It
//! measures the cost of a call itself, in benchmarks and scheduler tests.

use trellis_plugin_sdk::{ConfigKey, Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Trivial;

impl Transformation for Trivial {
    fn describe() -> PluginInfo {
        PluginInfo::new("trivial", env!("CARGO_PKG_VERSION"))
            .description("does nothing, reports data")
            .config_key(ConfigKey::optional("label", "ignored; lets a test change a view type's configuration"))
    }

    fn run(_: Request) -> Result<Outcome, Failure> {
        Ok(Outcome::Data(Vec::new()))
    }
}

export_transformation!(Trivial);
