//! Hostile fixture: returns a result the canonical ABI forbids (a string
//! that is not UTF-8), as a buggy or malicious non-Rust guest could.
use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-bad-result", "0.0.0")
    }

    fn run(_: Request) -> Result<Outcome, Failure> {
        // SAFETY: deliberately not. The bytes are never used as a str inside
        // the guest; they are only copied into the result for the host to reject.
        let counter = unsafe { String::from_utf8_unchecked(vec![b'r', 0xFF, 0xFE, b'w']) };
        Ok(Outcome::Data(vec![(counter, 1)]))
    }
}

export_transformation!(Hostile);
