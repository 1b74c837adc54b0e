//! Hostile fixture: fails every call with a failure it declares retryable,
//! so that a test can count how often the scheduler tries again.
use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-retryable", "0.0.0")
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        Err(Failure::retryable(format!("deliberate retryable failure while materializing {}", request.view)))
    }
}

export_transformation!(Hostile);
