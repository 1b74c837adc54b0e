//! Shared test helpers: the built plugins, a runtime, the binary, and one
//! compile cache for the whole test binary.

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
    RUNTIME.get_or_init(|| {
        let options = RuntimeOptions { cache_dir: Some(compile_cache().to_path_buf()), ..RuntimeOptions::default() };
        Runtime::new(options).expect("runtime starts")
    })
}

/// The compile cache of this test binary: created at first use, shared by
/// every test and every `trellis` it starts, so that each plugin is compiled
/// about once per run instead of once per test. Tests about the cache
/// itself give their runtime a directory of their own.
pub fn compile_cache() -> &'static Path {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    // A static is never dropped, so the directory is removed at exit instead.
    extern "C" fn remove() {
        if let Some(dir) = CACHE.get() {
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }
    CACHE
        .get_or_init(|| {
            let dir = tempfile::Builder::new().prefix("trellis-it-cache-").tempdir().expect("a temporary directory");
            // SAFETY: registers a function that takes nothing and returns nothing.
            assert_eq!(unsafe { libc::atexit(remove) }, 0, "atexit");
            dir
        })
        .path()
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

/// The `trellis` binary with the test binary's compile cache.
pub fn trellis() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command.env("TRELLIS_CACHE_DIR", compile_cache()).env_remove("TRELLIS_LOG");
    command
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(command: &mut Command) -> Run {
    Run::from(command.output().expect("trellis runs"))
}

impl From<Output> for Run {
    fn from(Output { status, stdout, stderr }: Output) -> Run {
        Run {
            code: status.code().expect("exited, not killed"),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }
}

/// `trellis demo` into `dir/demo`: the sample shop, materialized.
pub fn demo(dir: &Path) -> PathBuf {
    let project = dir.join("demo");
    let result = run(trellis().arg("demo").arg(&project));
    assert_eq!(result.code, 0, "{}", result.stderr);
    project
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

/// A `trellis serve` on port 0 whose log goes to a file, stopped with
/// SIGTERM (or killed, when a test fails, by `Drop`).
pub struct Server {
    child: Option<std::process::Child>,
    /// Kept open: the server's stdout stays a live pipe.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
    pub url: String,
    log: PathBuf,
}

impl Server {
    /// Starts `trellis serve -p project ARGS` with `env` (and neither a
    /// token nor a server from the test's own environment). Its log goes
    /// next to the project, in the test's own directory.
    pub fn start(project: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        use std::io::BufRead;
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let log = project.with_file_name(format!("serve-{n}.log"));
        let mut command = trellis();
        command.args(["serve", "--bind", "127.0.0.1:0", "-p"]).arg(project).args(args);
        command.env_remove("TRELLIS_TOKEN").env_remove("TRELLIS_SERVER").env("TRELLIS_LOG", "info");
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("trellis serve starts");
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        // The first line comes once the server listens: reading it is the wait.
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let Some(url) = line.trim().strip_prefix("listening on ").map(str::to_string) else {
            let _ = child.kill();
            panic!("serve printed {line:?}; its log:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        };
        Server { child: Some(child), _stdout: stdout, url, log }
    }

    /// SIGTERM, then the exit code; afterwards the metastore is free for
    /// embedded commands.
    pub fn stop(mut self) -> i32 {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child, which has not been waited for.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
        let status = child.wait().unwrap();
        status.code().unwrap_or_else(|| panic!("serve ended with {status}; its log:\n{}", self.log()))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A project whose transformations (one per day, `days` of them) wait for
/// a `GO` file in their input, so that a run stays in flight until the
/// test says (`open_gates`).
pub fn gated_project(dir: &Path, days: u32) -> PathBuf {
    let project = dir.join("gated");
    std::fs::create_dir_all(project.join("plugins")).unwrap();
    std::fs::copy(plugin_path("trivial"), project.join("plugins/trivial.wasm")).unwrap();
    let toml = r#"
[defaults]
concurrency = 2

[plugins]
trivial = { file = "plugins/trivial.wasm", deadline = "600s" }

[[view]]
name = "g.raw/In"
time = { frequency = "1d", initial = "2015-01-01" }
path = "raw/${YEAR}/${MONTH}/${DAY}"

[[view]]
name = "g.mart/Out"
time = { frequency = "1d", initial = "2015-01-01" }
transformation = { plugin = "trivial", config = { gate = "GO" } }

[[view.dependency]]
view = "g.raw/In"
"#;
    std::fs::write(project.join("trellis.toml"), toml).unwrap();
    for day in 1..=days {
        let raw = project.join(format!("data/raw/2015/01/{day:02}"));
        std::fs::create_dir_all(&raw).unwrap();
        std::fs::write(raw.join("_SUCCESS"), "").unwrap();
    }
    project
}

/// Lets every gated transformation finish.
pub fn open_gates(project: &Path) {
    for entry in std::fs::read_dir(project.join("data/raw/2015/01")).unwrap() {
        std::fs::write(entry.unwrap().path().join("GO"), "").unwrap();
    }
}
