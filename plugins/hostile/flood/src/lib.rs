//! Hostile fixture: prints 8 MiB to stdout and to stderr, then succeeds.
use std::io::Write;

use trellis_plugin_sdk::{Failure, Outcome, PluginInfo, Request, Transformation, export_transformation};

struct Hostile;

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-flood", "0.0.0")
    }

    fn run(_: Request) -> Result<Outcome, Failure> {
        let line = [b'x'; 1023];
        let mut stdout = std::io::stdout().lock();
        let mut stderr = std::io::stderr().lock();
        for _ in 0..8 * 1024 {
            stdout.write_all(&line).and_then(|()| stdout.write_all(b"\n")).map_err(Failure::fatal)?;
            stderr.write_all(&line).and_then(|()| stderr.write_all(b"\n")).map_err(Failure::fatal)?;
        }
        stdout.flush().map_err(Failure::fatal)?;
        Ok(Outcome::Data(vec![("bytes".into(), 16 << 20)]))
    }
}

export_transformation!(Hostile);
