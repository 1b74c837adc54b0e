//! Data-driven scenarios: each `tests/scenarios/*.scenario` file sets up a
//! project and runs `trellis` commands against it, with their expected
//! output. `UPDATE_EXPECT=1 cargo test` rewrites the expectations.
//!
//! Format, line by line:
//! - `# ...` and blank lines between commands: comments and spacing;
//! - `@copy DIR`: copy DIR (relative to the repository) into the project;
//! - `@plugins`: copy every built plugin into the project's `plugins/`,
//!   named with dashes (`csv-aggregate.wasm`, `hostile-panic.wasm`);
//! - `@write PATH` ... `@end`: write a file into the project;
//! - `$ touch PATH`: create an empty file (and its directories), e.g. a done flag;
//! - `$ trellis ARGS`: run the real binary in the project directory; the
//!   lines after it, up to a blank line, are its expected stdout and stderr,
//!   with the project directory shown as `$PROJECT`, version checksums as
//!   `<checksum>`, blank lines left out, and a last line `[exit N]` when it
//!   exits non-zero.

use std::path::{Path, PathBuf};

use crate::support::{run, trellis};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn scenarios() {
    let dir = repository().join("tests/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "scenario"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenarios in {}", dir.display());
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let (rewritten, mismatches) = run_scenario(&text);
        if update && rewritten != text {
            std::fs::write(file, &rewritten).unwrap();
        } else if !mismatches.is_empty() {
            failures.push(format!("{}:\n{}", file.display(), mismatches.join("\n")));
        }
    }
    assert!(failures.is_empty(), "scenarios failed (UPDATE_EXPECT=1 to accept):\n\n{}", failures.join("\n\n"));
}

/// Runs one scenario; returns its text with actual outputs, and every
/// command whose output differed.
fn run_scenario(text: &str) -> (String, Vec<String>) {
    let project = tempfile::tempdir().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut mismatches = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line == "@plugins" {
            let plugins = project.path().join("plugins");
            std::fs::create_dir_all(&plugins).unwrap();
            for entry in std::fs::read_dir(trellis::bundled::PLUGINS_DIR).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "wasm") {
                    let name = path.file_name().unwrap().to_string_lossy().replace('_', "-");
                    std::fs::copy(&path, plugins.join(name)).unwrap();
                }
            }
            out.push_str(line);
            out.push('\n');
        } else if let Some(source) = line.strip_prefix("@copy ") {
            copy(&repository().join(source.trim()), project.path());
            out.push_str(line);
            out.push('\n');
        } else if let Some(path) = line.strip_prefix("@write ") {
            out.push_str(line);
            out.push('\n');
            let mut content = String::new();
            while i < lines.len() && lines[i] != "@end" {
                content.push_str(lines[i]);
                content.push('\n');
                out.push_str(lines[i]);
                out.push('\n');
                i += 1;
            }
            i += 1;
            out.push_str("@end\n");
            let target = project.path().join(path.trim());
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, content).unwrap();
        } else if let Some(command) = line.strip_prefix("$ ") {
            let mut expected = Vec::new();
            while i < lines.len() && !lines[i].is_empty() {
                expected.push(lines[i]);
                i += 1;
            }
            let actual = execute(command, project.path());
            out.push_str(line);
            out.push('\n');
            out.push_str(&actual);
            if actual != expected.iter().map(|l| format!("{l}\n")).collect::<String>() {
                mismatches.push(format!("$ {command}\n--- expected\n{}\n--- actual\n{actual}", expected.join("\n")));
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    (out, mismatches)
}

fn execute(command: &str, project: &Path) -> String {
    let words = split(command);
    match words.first().map(String::as_str) {
        Some("touch") => {
            let path = project.join(&words[1]);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
            String::new()
        }
        Some("trellis") => {
            // Logs carry timestamps; what a scenario checks is the output.
            let result = run(trellis().current_dir(project).env("TRELLIS_LOG", "off").args(&words[1..]));
            let project = project.display().to_string();
            // Blank lines end an expectation in the file format, so they are left out.
            let output = format!("{}{}", result.stdout, result.stderr).replace(&project, "$PROJECT");
            let mut output: String = output.lines().filter(|l| !l.is_empty()).map(|l| format!("{l}\n")).collect();
            if result.code != 0 {
                output.push_str(&format!("[exit {}]\n", result.code));
            }
            // Version checksums depend on the plugins' bytes, which depend on
            // the toolchain: shown as <checksum>.
            let checksum = regex::Regex::new(r"\b[0-9a-f]{16}\b").unwrap();
            checksum.replace_all(&output, "<checksum>").into_owned()
        }
        _ => panic!("unknown scenario command `{command}`"),
    }
}

/// Splits on spaces, keeping 'single-quoted' words together.
fn split(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in command.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn copy(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
