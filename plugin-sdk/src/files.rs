//! Helpers for reading a call's inputs and writing its output directory.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use crate::{Failure, Input, Request};

/// A data file of one input, as seen by the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    /// The name of the input it belongs to.
    pub input: String,
    /// Its path relative to the input's directory, with `/` separators.
    pub relative: String,
    /// Its full guest path, to open.
    pub path: PathBuf,
}

impl fmt::Display for InputFile {
    /// `orders:2015/05/01/part-0.csv`: short, and names the input, so error
    /// messages say where a bad row is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.input, self.relative)
    }
}

/// Whether a file holds data. Done flags (`_SUCCESS`), other `_` files and
/// hidden files are bookkeeping, not data.
pub fn is_data_file(name: &str) -> bool {
    !(name.starts_with('_') || name.starts_with('.'))
}

impl Input {
    /// Every data file under this input, recursively, sorted by path so that
    /// results do not depend on directory order.
    pub fn files(&self) -> Result<Vec<InputFile>, Failure> {
        let root = Path::new(&self.path);
        let mut found = Vec::new();
        collect(root, root, &mut found)
            .map_err(|e| Failure::Fatal(format!("cannot list input `{}`: {e}", self.name)))?;
        found.sort();
        Ok(found
            .into_iter()
            .map(|relative| InputFile { input: self.name.clone(), path: root.join(&relative), relative })
            .collect())
    }
}

fn collect(root: &Path, dir: &Path, found: &mut Vec<String>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let path = entry.path();
        let Some(name) = name.to_str() else {
            // Skipping it would silently lose data.
            return Err(io::Error::other(format!("{} has a name that is not UTF-8", path.display())));
        };
        if !is_data_file(name) {
            continue;
        }
        // is_dir follows symlinks, so a linked directory is walked, not read as a file.
        if path.is_dir() {
            collect(root, &path, found)?;
        } else {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            found.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

impl Request {
    /// The resolved configuration.
    pub fn config(&self) -> crate::Config<'_> {
        crate::Config::new(&self.config)
    }

    /// The input with this name.
    pub fn input(&self, name: &str) -> Option<&Input> {
        self.inputs.iter().find(|input| input.name == name)
    }

    /// Every data file of every input, inputs in request order, files sorted.
    pub fn input_files(&self) -> Result<Vec<InputFile>, Failure> {
        let mut all = Vec::new();
        for input in &self.inputs {
            all.extend(input.files()?);
        }
        Ok(all)
    }

    /// The guest path of `name` inside the output directory. `name` must be
    /// a plain relative path: the output directory is all a call may write.
    pub fn output_path(&self, name: &str) -> Result<PathBuf, Failure> {
        let relative = Path::new(name);
        let plain = relative.components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if name.is_empty() || !plain {
            return Err(Failure::Fatal(format!(
                "output file `{name}` must be a relative path inside the output directory"
            )));
        }
        Ok(Path::new(&self.output).join(relative))
    }

    /// Creates (or truncates) `name` in the output directory, with its
    /// parent directories, buffered.
    pub fn create_output_file(&self, name: &str) -> Result<BufWriter<File>, Failure> {
        let path = self.output_path(name)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).or_fatal(|| format!("output {name}"))?;
        }
        let file = File::create(&path).or_fatal(|| format!("output {name}"))?;
        Ok(BufWriter::new(file))
    }
}

/// Turns any error into a [`Failure`] with context: `.or_fatal(|| "orders.csv")?`
/// fails the call with `orders.csv: <error>`.
pub trait ResultExt<T> {
    fn or_fatal<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Failure>;
    fn or_retryable<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Failure>;
}

impl<T, E: fmt::Display> ResultExt<T> for Result<T, E> {
    fn or_fatal<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Failure> {
        self.map_err(|e| Failure::Fatal(format!("{}: {e}", context())))
    }

    fn or_retryable<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Failure> {
        self.map_err(|e| Failure::Retryable(format!("{}: {e}", context())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(input: &Path, output: &Path) -> Request {
        Request {
            view: "test/View".into(),
            parameters: vec![],
            nominal_time: None,
            actual_time: 0,
            config: vec![],
            inputs: vec![Input {
                name: "orders".into(),
                view: "test/Orders".into(),
                path: input.to_string_lossy().into_owned(),
                timestamp: None,
                changed: true,
            }],
            output: output.to_string_lossy().into_owned(),
        }
    }

    #[test]
    fn input_files_are_sorted_recursive_and_skip_bookkeeping() {
        let dir = std::env::temp_dir().join(format!("sdk-files-{}", std::process::id()));
        let input = dir.join("in");
        std::fs::create_dir_all(input.join("2015/05")).unwrap();
        for name in ["b.csv", "a.csv", "_SUCCESS", ".hidden", "2015/05/c.csv"] {
            std::fs::write(input.join(name), "x").unwrap();
        }
        let request = request(&input, &dir.join("out"));
        let files: Vec<String> = request.input_files().unwrap().iter().map(|f| f.to_string()).collect();
        assert_eq!(files, ["orders:2015/05/c.csv", "orders:a.csv", "orders:b.csv"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn output_paths_stay_inside_the_output_directory() {
        let request = request(Path::new("/in"), Path::new("/output"));
        assert_eq!(request.output_path("a/b.csv").unwrap(), Path::new("/output/a/b.csv"));
        for bad in ["", "../x", "/etc/passwd", "a/../../x"] {
            assert!(request.output_path(bad).is_err(), "{bad} accepted");
        }
    }
}
