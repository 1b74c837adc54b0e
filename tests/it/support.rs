//! Shared test helpers: the built plugins, a runtime, the binary, one
//! compile cache for the whole test binary, and the daily test project.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use trellis::runtime::{OutputLimit, Plugin, Runtime, RuntimeOptions, TransformInput, TransformRequest};

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
        output_limit: {
            let cap = trellis::catalog::OutputCap::default();
            OutputLimit { bytes: cap.bytes, entries: cap.entries }
        },
    }
}

/// An HTTP client's builder, after the one thing every reqwest client of
/// this process needs first: the TLS crypto provider (reqwest is built
/// without one of its own; a client built before it is installed panics).
/// Every test builds its clients here (the tidy test checks that).
pub fn http() -> reqwest::ClientBuilder {
    trellis::tls::install_crypto_provider();
    reqwest::Client::builder()
}

/// The `trellis` binary with the test binary's compile cache.
pub fn trellis() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command.env("TRELLIS_CACHE_DIR", compile_cache()).env_remove("TRELLIS_LOG");
    command
}

#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(command: &mut Command) -> Run {
    Run::from(command.output().expect("trellis runs"))
}

/// Runs `command` to its end, like [`run`]; one still running after
/// `limit` is killed and fails the test: the limit only turns a hang into
/// a failure.
pub fn run_within(command: &mut Command, limit: std::time::Duration) -> Run {
    use std::process::Stdio;
    let what = format!("{command:?}");
    let child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match ended.recv_timeout(limit) {
        Ok(output) => Run::from(output.expect("trellis runs")),
        Err(_) => {
            // SAFETY: the pid of our own child, not yet reaped (its waiter is still waiting).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what} did not end within {limit:?}");
        }
    }
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

/// `command` as on a machine without Spark: no `SPARK_HOME`, and an empty
/// tools directory of its own below `dir` (spark-submit is never on the
/// test machine's PATH), whether or not the Spark tests installed it.
pub fn without_spark<'a>(command: &'a mut Command, dir: &Path) -> &'a mut Command {
    command.env_remove("SPARK_HOME").env("TRELLIS_TOOLS_DIR", dir.join("no-tools"))
}

/// `trellis demo` into `dir/demo`: the sample shop, materialized, without
/// the Spark view (so that it is the same whether Spark is installed).
pub fn demo(dir: &Path) -> PathBuf {
    let project = dir.join("demo");
    let result = run(without_spark(trellis().arg("demo").arg(&project), dir));
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
        Server::start_with(project, args, env, None)
    }

    /// Like `start`, with the server's open-file limit (soft and hard) set to `files`.
    pub fn start_with_file_limit(project: &Path, args: &[&str], env: &[(&str, &str)], files: u64) -> Server {
        Server::start_with(project, args, env, Some(files))
    }

    fn start_with(project: &Path, args: &[&str], env: &[(&str, &str)], files: Option<u64>) -> Server {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let log = project.with_file_name(format!("serve-{n}.log"));
        let mut command = trellis();
        command.args(["serve", "--bind", "127.0.0.1:0", "-p"]).arg(project).args(args);
        command.env_remove("TRELLIS_TOKEN").env_remove("TRELLIS_SERVER").env("TRELLIS_LOG", "info");
        for (key, value) in env {
            command.env(key, value);
        }
        if let Some(files) = files {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit { rlim_cur: files as libc::rlim_t, rlim_max: files as libc::rlim_t };
            // SAFETY: between fork and exec, setrlimit only changes the child's limit.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        Server::spawn(command, log)
    }

    /// Starts `command`, a `trellis serve` told to listen on port 0, with
    /// its log in `log`, and waits until it listens.
    pub fn spawn(mut command: Command, log: PathBuf) -> Server {
        use std::io::BufRead;
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

    /// The server's process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, std::process::Child::id)
    }

    /// The server's `host:port`.
    pub fn address(&self) -> &str {
        self.url.trim_start_matches("http://")
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

    /// SIGTERM, then the exit code if the server ends within `limit`
    /// (`None` if it is still running then; `Drop` kills it).
    pub fn stop_within(mut self, limit: std::time::Duration) -> Option<i32> {
        let child = self.child.as_mut().unwrap();
        // SAFETY: kill(2) on our own child, which has not been waited for.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
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
pub fn gated_project(dir: &Path, days: usize) -> PathBuf {
    let project = dir.join("gated");
    Daily::new("g", "trivial", days).concurrency(2).deadline("600s").config(r#"gate = "GO""#).write(&project);
    project
}

/// Lets every gated transformation finish.
pub fn open_gates(project: &Path) {
    for entry in std::fs::read_dir(project.join("data/raw/2015/01")).unwrap() {
        std::fs::write(entry.unwrap().path().join("GO"), "").unwrap();
    }
}

/// The daily test project: external input `<ns>.raw/In` under
/// `data/raw/YYYY/MM/DD`, one day after another from 2015-01-01, each with
/// its done flag, and `<ns>.mart/Out`, each day transformed from that day's
/// input by one built plugin. The options are what tests vary.
pub struct Daily {
    namespace: &'static str,
    plugin: &'static str,
    days: usize,
    concurrency: Option<u32>,
    deadline: Option<&'static str>,
    config: Option<&'static str>,
    chained: bool,
    part: Option<String>,
    copies: Vec<&'static str>,
    plugins: String,
    tail: String,
}

impl Daily {
    /// `days` days of input (no file but the done flag), transformed by
    /// the built plugin `plugin` (crate name), declared under that name.
    pub fn new(namespace: &'static str, plugin: &'static str, days: usize) -> Daily {
        Daily {
            namespace,
            plugin,
            days,
            concurrency: None,
            deadline: None,
            config: None,
            chained: false,
            part: None,
            copies: Vec::new(),
            plugins: String::new(),
            tail: String::new(),
        }
    }

    /// `[defaults] concurrency`.
    pub fn concurrency(mut self, concurrency: u32) -> Daily {
        self.concurrency = Some(concurrency);
        self
    }

    /// The transformation plugin's deadline.
    pub fn deadline(mut self, deadline: &'static str) -> Daily {
        self.deadline = Some(deadline);
        self
    }

    /// The transformation's configuration: the inside of its inline table.
    pub fn config(mut self, config: &'static str) -> Daily {
        self.config = Some(config);
        self
    }

    /// Each day's `Out` also depends on the day before's.
    pub fn chained(mut self) -> Daily {
        self.chained = true;
        self
    }

    /// Each day's input also holds `part.csv` with `content`.
    pub fn part(mut self, content: &str) -> Daily {
        self.part = Some(content.to_string());
        self
    }

    /// Copies more built plugins (crate names) into `plugins/` and adds
    /// `declarations` to `[plugins]`.
    pub fn plugins(mut self, copies: &[&'static str], declarations: &str) -> Daily {
        self.copies.extend(copies);
        self.plugins.push_str(declarations);
        self
    }

    /// TOML after the views (`[events]`, `[[listener]]`s).
    pub fn tail(mut self, toml: &str) -> Daily {
        self.tail.push_str(toml);
        self
    }

    /// Writes the project into `dir`.
    pub fn write(&self, dir: &Path) {
        let Daily { namespace: ns, plugin, .. } = *self;
        std::fs::create_dir_all(dir.join("plugins")).unwrap();
        for name in std::iter::once(&plugin).chain(&self.copies) {
            std::fs::copy(plugin_path(name), dir.join(format!("plugins/{name}.wasm"))).unwrap();
        }
        let mut toml = String::new();
        if let Some(concurrency) = self.concurrency {
            toml.push_str(&format!("[defaults]\nconcurrency = {concurrency}\n\n"));
        }
        let file = format!("\"plugins/{plugin}.wasm\"");
        let declaration = match self.deadline {
            Some(deadline) => format!("{{ file = {file}, deadline = \"{deadline}\" }}"),
            None => file,
        };
        toml.push_str(&format!("[plugins]\n{plugin} = {declaration}\n{}", self.plugins));
        let config = self.config.map(|config| format!(", config = {{ {config} }}")).unwrap_or_default();
        toml.push_str(&format!(
            r#"
[[view]]
name = "{ns}.raw/In"
time = {{ frequency = "1d", initial = "2015-01-01" }}
path = "raw/${{YEAR}}/${{MONTH}}/${{DAY}}"

[[view]]
name = "{ns}.mart/Out"
time = {{ frequency = "1d", initial = "2015-01-01" }}
transformation = {{ plugin = "{plugin}"{config} }}

[[view.dependency]]
view = "{ns}.raw/In"
"#
        ));
        if self.chained {
            toml.push_str(&format!(
                r#"
[[view.dependency]]
name = "yesterday"
view = "{ns}.mart/Out"
time = "current(-1)"
"#
            ));
        }
        toml.push_str(&self.tail);
        std::fs::write(dir.join("trellis.toml"), toml).unwrap();
        let mut day = chrono::NaiveDate::from_ymd_opt(2015, 1, 1).unwrap();
        for _ in 0..self.days {
            let path = dir.join(format!("data/raw/{}", day.format("%Y/%m/%d")));
            std::fs::create_dir_all(&path).unwrap();
            if let Some(part) = &self.part {
                std::fs::write(path.join("part.csv"), part).unwrap();
            }
            std::fs::write(path.join("_SUCCESS"), "").unwrap();
            day = day.succ_opt().unwrap();
        }
    }
}

/// A run's flows, as `GET /runs/{id}` gives them, as (view, status), sorted.
pub fn flows(detail: &serde_json::Value) -> Vec<(String, String)> {
    let mut flows: Vec<(String, String)> = detail["flows"]
        .as_array()
        .unwrap_or_else(|| panic!("no flows in {detail}"))
        .iter()
        .map(|f| (f["view"].as_str().unwrap().to_string(), f["status"].as_str().unwrap().to_string()))
        .collect();
    flows.sort();
    flows
}

// Waiting, plugins and results: one spelling of each helper for every test
// file (issue 40, item 5).

/// How long `eventually` and `eventually_blocking` wait before the test
/// fails rather than hangs. It bounds a wait; it never decides its outcome.
const EVENTUALLY: std::time::Duration = std::time::Duration::from_secs(60);

/// Polls `check` until it gives a value: the test fails rather than hangs,
/// and the wait decides nothing.
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + EVENTUALLY;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Polls `done` on this thread until it holds, as `eventually` does; for
/// tests without an async runtime, whose probes may start processes.
pub fn eventually_blocking(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + EVENTUALLY;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The standard output of a command that must have succeeded.
pub fn ok(result: Run, what: &str) -> String {
    assert_eq!(result.code, 0, "{what}: {}{}", result.stdout, result.stderr);
    result.stdout
}
