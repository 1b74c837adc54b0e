//! Hostile fixture: a transformation that never returns.
use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-spin", "0.0.0")
    }

    fn run(_: Request) -> Result<Outcome, Failure> {
        let mut n = 0u64;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

export_transformation!(Hostile);
