//! Hostile fixture: allocates and touches memory until something stops it.
use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-memory-bomb", "0.0.0")
    }

    fn run(_: Request) -> Result<Outcome, Failure> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            // Touch every page so that the memory is really used.
            hoard.push(vec![0xA5; 8 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

export_transformation!(Hostile);
