//! Hostile fixture: recurses until the WebAssembly call stack runs out.
//! Only scalars are involved, so nothing lands on the shadow stack in linear
//! memory and what overflows is the stack the host limits.
use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

#[inline(never)]
fn dive(depth: u64) -> u64 {
    if depth == u64::MAX {
        return 1;
    }
    // Not associative, so the compiler cannot turn the recursion into a loop.
    dive(depth + 1).rotate_left(7) ^ depth
}

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-stack-overflow", "0.0.0")
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        let depth = dive(request.actual_time as u64);
        Ok(Outcome::Data(vec![("depth".into(), depth)]))
    }
}

export_transformation!(Hostile);
