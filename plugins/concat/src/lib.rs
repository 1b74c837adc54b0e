//! `concat`: concatenates every data file of every input into one output file.
//!
//! Inputs are taken in request order and their files in path order, so the
//! result is deterministic. Configuration:
//! - `file`: the output file name, default `part-00000`;
//! - `header`: `true` when the files are CSV with a header row: the first
//!   file's header is kept and the others' are dropped. Default `false`.
//!
//! Empty files are skipped, and a file that does not end with a newline gets
//! one, so lines of different files are never joined.

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
        let mut header_written = false;
        let mut ends_with_newline = true;
        for file in &files {
            let mut reader = BufReader::new(std::fs::File::open(&file.path).or_fatal(|| file)?);
            let mut first_line = Vec::new();
            reader.read_until(b'\n', &mut first_line).or_fatal(|| file)?;
            if first_line.is_empty() {
                continue; // an empty file adds nothing, not even a header
            }
            // Never glue the last line of one file to the first of the next.
            if !ends_with_newline {
                out.write_all(b"\n").or_fatal(|| name)?;
                bytes += 1;
            }
            if !(header && header_written) {
                out.write_all(&first_line).or_fatal(|| name)?;
                bytes += first_line.len() as u64;
                ends_with_newline = first_line.ends_with(b"\n");
            }
            header_written = true;
            let mut tracker = NewlineTracker { inner: &mut out, ends_with_newline };
            let copied = std::io::copy(&mut reader, &mut tracker).or_fatal(|| file)?;
            ends_with_newline = tracker.ends_with_newline;
            bytes += copied;
        }
        out.flush().or_fatal(|| name)?;
        Ok(Outcome::Data(vec![("files".into(), files.len() as u64), ("bytes".into(), bytes)]))
    }
}

export_transformation!(Concat);

/// Passes writes through and remembers whether the last byte was a newline.
struct NewlineTracker<'a, W: Write> {
    inner: &'a mut W,
    ends_with_newline: bool,
}

impl<W: Write> Write for NewlineTracker<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        if let Some(last) = buf[..written].last() {
            self.ends_with_newline = *last == b'\n';
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
