//! `concat`: concatenates every data file of every input into one output file.
//!
//! Inputs are taken in request order and their files in path order, so the
//! result is deterministic. Configuration:
//! - `file`: the output file name, default `part-00000`;
//! - `header`: `true` when the files are CSV with a header row: the first
//!   file's header is kept and the others' are dropped. Default `false`.

use std::io::{BufRead, BufReader, Write};

use trellis_plugin_sdk::{
    ConfigKey, Failure, Outcome, PluginInfo, Request, ResultExt, Transformation, export_transformation,
};

struct Concat;

impl Transformation for Concat {
    fn describe() -> PluginInfo {
        PluginInfo::new("concat", env!("CARGO_PKG_VERSION"))
            .description("concatenates all input files into one output file")
            .config_key(ConfigKey::optional("file", "output file name (default part-00000)"))
            .config_key(ConfigKey::optional(
                "header",
                "true: keep the first file's header line, drop the others' (default false)",
            ))
    }

    fn run(request: Request) -> Result<Outcome, Failure> {
        let config = request.config();
        let header = match config.get("header").unwrap_or("false") {
            "true" => true,
            "false" => false,
            other => return Err(Failure::fatal(format!("`header` must be true or false, not `{other}`"))),
        };
        let files = request.input_files()?;
        if files.is_empty() {
            return Ok(Outcome::NoData);
        }
        let name = config.get("file").unwrap_or("part-00000");
        let mut out = request.create_output_file(name)?;
        let mut bytes = 0u64;
        for (index, file) in files.iter().enumerate() {
            let mut reader = BufReader::new(std::fs::File::open(&file.path).or_fatal(|| file)?);
            if header && index > 0 {
                let mut first_line = Vec::new();
                reader.read_until(b'\n', &mut first_line).or_fatal(|| file)?;
            }
            bytes += std::io::copy(&mut reader, &mut out).or_fatal(|| file)?;
        }
        out.flush().or_fatal(|| name)?;
        Ok(Outcome::Data(vec![("files".into(), files.len() as u64), ("bytes".into(), bytes)]))
    }
}

export_transformation!(Concat);
