//! Hostile fixture: panics with a known message.
use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-panic", "0.0.0")
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        panic!("deliberate panic while materializing {}", request.view);
    }
}

export_transformation!(Hostile);
