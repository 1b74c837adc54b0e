//! Hostile fixture: writes to its output until something stops it.
//!
//! Configuration `mode` (optional):
//! - `bytes` (default): appends 1 MiB blocks to `/output/fill` forever;
//! - `entries`: creates empty files, 1,000 per directory, forever;
//! - `sparse`: makes `/output/sparse` a sparse file of 64 GiB (which takes
//!   almost no disk) and returns data, so that only the host's exact check
//!   at the end, which counts apparent size, can refuse it.
use std::io::Write;

use trellis_plugin_sdk::{
    ConfigKey, Failure, Outcome, PluginInfo, Request, ResultExt, Transformation, export_transformation,
};

struct Hostile;

impl Transformation for Hostile {
    fn describe() -> PluginInfo {
        PluginInfo::new("hostile-disk-filler", "0.0.0")
            .config_key(ConfigKey::optional("mode", "bytes (default), entries or sparse"))
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        match request.config().get("mode").unwrap_or("bytes") {
            "bytes" => {
                let mut file = request.create_output_file("fill")?;
                let block = vec![0x5A; 1 << 20];
                loop {
                    file.write_all(&block).or_fatal(|| "fill".to_string())?;
                }
            }
            "entries" => {
                for n in 0u64.. {
                    let dir = request.output_path(&format!("d{}", n / 1000))?;
                    if n % 1000 == 0 {
                        std::fs::create_dir(&dir).or_fatal(|| dir.display().to_string())?;
                    }
                    let file = dir.join(format!("f{n}"));
                    std::fs::File::create(&file).or_fatal(|| file.display().to_string())?;
                }
                unreachable!("u64 ran out")
            }
            "sparse" => {
                let file = request.create_output_file("sparse")?;
                file.get_ref().set_len(64 << 30).or_fatal(|| "sparse".to_string())?;
                Ok(Outcome::Data(Vec::new()))
            }
            other => Err(Failure::fatal(format!("unknown mode `{other}`"))),
        }
    }
}

export_transformation!(Hostile);
