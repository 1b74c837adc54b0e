//! Hostile fixture: recurses until the stack runs out.
use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

#[allow(unconditional_recursion)]
fn dive(depth: u64, ballast: [u64; 16]) -> u64 {
    let next = std::hint::black_box(ballast);
    // Using the result after the call keeps this from becoming a loop.
    dive(depth + 1, next) + next[(depth % 16) as usize]
}

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-stack-overflow", "0.0.0")
    }

    fn run(_: Request) -> Result<Outcome, Failure> {
        let depth = dive(0, [1; 16]);
        Ok(Outcome::Data(vec![("depth".into(), depth)]))
    }
}

export_transformation!(Hostile);
