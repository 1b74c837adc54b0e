//! Shared test helpers: the built plugins, a runtime, and the binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use trellis::runtime::{Plugin, Runtime, RuntimeOptions, TransformInput, TransformRequest};

/// A built plugin's path, by crate name with underscores (`csv_aggregate`).
pub fn plugin_path(name: &str) -> PathBuf {
    let path = Path::new(trellis::bundled::PLUGINS_DIR).join(format!("{name}.wasm"));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// One runtime shared by the tests of this binary, the way one server
/// shares it between views: a test that breaks it breaks the others.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new(RuntimeOptions::default()).expect("runtime starts"))
}

pub async fn load(name: &str) -> Plugin {
    runtime().load_file(&plugin_path(name)).await.expect("plugin loads")
}

/// A transformation request with one input per directory.
pub fn request(inputs: &[(&str, &Path)], output: &Path, config: &[(&str, &str)]) -> TransformRequest {
    TransformRequest {
        view: "test/View".into(),
        parameters: Vec::new(),
        nominal_time: None,
        actual_time: 0,
        config: config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        inputs: inputs
            .iter()
            .map(|(name, dir)| TransformInput {
                name: name.to_string(),
                view: format!("test/{name}"),
                dir: dir.to_path_buf(),
                timestamp: None,
                changed: true,
            })
            .collect(),
        output_dir: output.to_path_buf(),
    }
}

/// The `trellis` binary with a private compile cache.
pub fn trellis(cache: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command.env("TRELLIS_CACHE_DIR", cache).env_remove("TRELLIS_LOG");
    command
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(command: &mut Command) -> Run {
    let Output { status, stdout, stderr } = command.output().expect("trellis runs");
    Run {
        code: status.code().expect("exited, not killed"),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A tiny deterministic generator, so that test data is varied but the
/// same on every run.
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Lcg(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}
