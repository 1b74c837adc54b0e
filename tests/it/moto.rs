//! A real S3 protocol server for the tests that need one: moto
//! (`moto[server]` from the package registry, pip-installed into
//! trellis's tools directory the first time, as PySpark and schemathesis
//! are, so that a second run installs nothing), one per test binary run on
//! a free loopback port, each test in buckets of its own. moto honours
//! `If-None-Match` and `If-Match` on PutObject atomically, which is what
//! the commit protocol's tests need; it ignores SIGTERM, so it is killed
//! with SIGKILL when the test binary exits.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use futures_util::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore, ObjectStoreExt};
use trellis::storage::{ObjectDir, S3Config};

use crate::support::eventually_blocking;

/// The moto the tests run.
pub const MOTO: &str = "5.2.5";

/// The credentials the tests' clients sign with: moto takes any.
pub const ENVIRONMENT: &[(&str, &str)] =
    &[("AWS_ACCESS_KEY_ID", "trellis-test"), ("AWS_SECRET_ACCESS_KEY", "trellis-test"), ("AWS_REGION", "us-east-1")];

/// A project file's text with its views' data in `bucket` on this
/// server: `[project]`'s `storage = "X"` (`data` when unset, and a
/// `[project]` table added at the end when there is none) becomes
/// `s3://BUCKET/X`, with the server's endpoint in `[project.s3]` at the
/// end (where some root is on it: trellis refuses options that do nothing). No line moves, so that errors name the lines the file's author
/// wrote: an unset root takes the place of the blank line that ends the
/// `[project]` table (such a table without one is refused). A root that is
/// not a plain relative directory (`.`, an absolute path) is about the
/// local layout and stays as it is, as does one naming a file of
/// `project`.
pub fn on_bucket(text: &str, bucket: &str, project: &Path) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let root = |dir: &str| format!("storage = \"s3://{bucket}/{dir}\"");
    let table = lines.iter().position(|line| line.trim() == "[project]");
    let table_end = |start: usize| {
        lines[start + 1..]
            .iter()
            .position(|line| line.trim_start().starts_with('['))
            .map_or(lines.len(), |i| start + 1 + i)
    };
    match table {
        Some(start) => {
            let end = table_end(start);
            let storage = (start + 1..end).find(|&i| {
                let line = lines[i].trim();
                line.strip_prefix("storage").map(str::trim_start).is_some_and(|rest| rest.starts_with('='))
            });
            match storage {
                Some(i) => {
                    let value = lines[i].split_once('=').unwrap().1.trim().trim_matches('"').to_string();
                    let dir = value.trim_start_matches("./").trim_end_matches('/');
                    let plain = !dir.is_empty()
                        && !dir.starts_with('/')
                        && !dir.split('/').any(|c| c == "." || c == "..")
                        && !project.join(dir).is_file();
                    if plain {
                        lines[i] = root(dir);
                    }
                }
                None if end == lines.len() => lines.push(root("data")),
                None => {
                    let blank = (start + 1..end).rev().find(|&i| lines[i].trim().is_empty());
                    let blank = blank.unwrap_or_else(|| {
                        panic!("on S3, a `[project]` table without `storage` needs a blank line before the next table:\n{text}")
                    });
                    lines[blank] = root("data");
                }
            }
        }
        None => lines.extend([String::new(), "[project]".into(), root("data")]),
    }
    let mut out = lines.join("\n");
    if out.contains(&format!("\"s3://{bucket}/")) {
        out.push_str(&format!("\n\n[project.s3]\nendpoint = \"{}\"\n", moto().endpoint));
    } else {
        out.push('\n');
    }
    out
}

/// Moves a project's views' data to `bucket`: its `trellis.toml` rewritten
/// by [`on_bucket`], every file under its `data/` put under `data/` there
/// (as a producer delivers it), and the local `data/` removed.
pub fn move_to_bucket(project: &Path, bucket: &str) {
    let file = project.join("trellis.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, on_bucket(&text, bucket, project)).unwrap();
    let client = moto().client(bucket);
    let data = project.join("data");
    let mut pending = vec![data.clone()];
    let mut files = Vec::new();
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { pending.push(path) } else { files.push(path) }
        }
    }
    moto().block_on(async {
        let puts = files.iter().map(|path| {
            let location = format!("data/{}", path.strip_prefix(&data).unwrap().display());
            let (client, bytes) = (client.clone(), std::fs::read(path).unwrap());
            async move { client.put(&object_store::path::Path::from(location), bytes.into()).await.unwrap() }
        });
        futures_util::stream::iter(puts).buffer_unordered(16).collect::<Vec<_>>().await;
    });
    std::fs::remove_dir_all(&data).unwrap();
}

/// Puts [`ENVIRONMENT`] into this process's environment, once, for the
/// in-process tests whose scheduler opens its store as `trellis` does
/// (from the AWS variables). Set once and never changed, to the same values
/// by every caller; std's environment functions are locked against each
/// other, and no test of this binary reads these variables through libc.
pub fn credentials_in_process() {
    static SET: std::sync::Once = std::sync::Once::new();
    SET.call_once(|| {
        for (name, value) in ENVIRONMENT {
            // SAFETY: see above; set once, before any reader of these names.
            unsafe { std::env::set_var(name, value) };
        }
    });
}

/// Runs moto's server from the directory given first, as `moto_server` would.
const LAUNCHER: &str = "import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'moto_server'; \
                        from moto.server import main; sys.exit(main())";

/// The running server.
pub struct Moto {
    child: Child,
    port: u16,
    pub endpoint: String,
    /// Where moto logs each request it answers (one line a request).
    pub log: PathBuf,
    /// For the outside writer's requests ([`Moto::client`]).
    runtime: tokio::runtime::Runtime,
}

/// The server of this test binary, started (and installed) at first use.
pub fn moto() -> &'static Moto {
    static MOTO_SERVER: OnceLock<Moto> = OnceLock::new();
    static PID: AtomicI32 = AtomicI32::new(0);
    // A static is never dropped: the server is killed at exit instead.
    extern "C" fn kill() {
        let pid = PID.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill(2) on the server this process started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    MOTO_SERVER.get_or_init(|| {
        let packages = installed().unwrap_or_else(|reason| panic!("the S3 test server: {reason}"));
        let moto = Moto::start(&packages);
        PID.store(moto.child.id() as i32, Ordering::SeqCst);
        // SAFETY: registers a function that takes nothing and returns nothing.
        assert_eq!(unsafe { libc::atexit(kill) }, 0, "atexit");
        moto
    })
}

/// Where moto is installed, installing it first if it is not: a machine
/// without Python and pip fails the test saying what to install.
fn installed() -> Result<PathBuf, String> {
    let tools = trellis::python::default_tools_dir()
        .ok_or("no tools directory: set TRELLIS_TOOLS_DIR, XDG_CACHE_HOME or HOME")?;
    let python = python()?;
    let packages = tools.join(format!("moto-{MOTO}"));
    if !packages.join("moto").join("server.py").is_file() {
        eprintln!("installing moto[server] {MOTO} into {} (once)", packages.display());
        trellis::python::pip_install(&python, &tools, &packages, &format!("moto[server]=={MOTO}"), "moto")
            .map_err(|reason| format!("cannot install moto[server] {MOTO} into {}: {reason}", packages.display()))?;
    }
    Ok(packages)
}

fn python() -> Result<PathBuf, String> {
    trellis::python::interpreter((3, 9)).map_err(|e| {
        format!(
            "it needs Python 3.9 or newer with pip to install and run moto (Debian: apt-get install python3 \
             python3-pip; or name an interpreter with TRELLIS_PYTHON): {e}"
        )
    })
}

impl Moto {
    /// Starts moto on a free loopback port (another, should that one be
    /// taken meanwhile) and waits until it answers a request.
    fn start(packages: &Path) -> Moto {
        let python = python().unwrap_or_else(|reason| panic!("the S3 test server: {reason}"));
        // Its logs beside the compile cache, removed with it at exit.
        let dir = crate::support::compile_cache().join("moto");
        std::fs::create_dir_all(&dir).unwrap();
        for attempt in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let log = dir.join(format!("moto-{attempt}.log"));
            let output = std::fs::File::create(&log).unwrap();
            let mut child = Command::new(&python)
                .args(["-I", "-c", LAUNCHER])
                .arg(packages)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(output.try_clone().unwrap())
                .stderr(output)
                .spawn()
                .expect("python starts");
            let mut exited = None;
            eventually_blocking("moto to answer", || {
                if let Some(status) = child.try_wait().unwrap() {
                    exited = Some(status);
                    return true;
                }
                status(port, "GET", "/", "").is_ok()
            });
            if let Some(status) = exited {
                eprintln!("moto on port {port} ended with {status}: {}", std::fs::read_to_string(&log).unwrap());
                continue;
            }
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            return Moto { child, port, endpoint: format!("http://127.0.0.1:{port}"), log, runtime };
        }
        panic!("moto did not start (its logs are in {})", dir.display());
    }

    /// A new, empty bucket of this test's own; with versioning, every
    /// object written gets a version id.
    pub fn bucket(&self, versioned: bool) -> String {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let name = format!("trellis-test-{}-{}", std::process::id(), MADE.fetch_add(1, Ordering::SeqCst));
        // moto checks no signature: plain requests make and configure buckets.
        let made = status(self.port, "PUT", &format!("/{name}"), "");
        assert!(matches!(made, Ok(200)), "bucket {name}: {made:?} (moto's log: {})", self.log.display());
        if versioned {
            let body = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
            assert_eq!(status(self.port, "PUT", &format!("/{name}?versioning"), body).unwrap(), 200);
        }
        name
    }

    /// How a project would name `bucket` on this server.
    pub fn config(&self, bucket: &str) -> S3Config {
        S3Config {
            bucket: bucket.to_string(),
            prefix: "proj".into(),
            endpoint: Some(self.endpoint.clone()),
            region: None,
            path_style: true,
            allow_http: true,
        }
    }

    /// The view storage in `bucket`, staging in `local`, its credentials
    /// from [`ENVIRONMENT`] as a process would read them.
    pub fn dir(&self, bucket: &str, local: &Path) -> ObjectDir {
        let environment = ENVIRONMENT.iter().map(|(key, value)| (key.to_string(), value.to_string()));
        ObjectDir::s3_from(&self.config(bucket), local, environment).expect("the S3 storage opens")
    }

    /// A client of `bucket` as another party writing and reading it
    /// directly (a producer delivering external data, an outside reader).
    pub fn client(&self, bucket: &str) -> Arc<dyn ObjectStore> {
        trellis::tls::install_crypto_provider();
        let store = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("trellis-test")
            .with_secret_access_key("trellis-test")
            .build()
            .unwrap();
        Arc::new(store)
    }

    /// Runs an outside client's request to its end.
    pub fn block_on<T>(&self, work: impl Future<Output = T>) -> T {
        self.runtime.block_on(work)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // moto ignores SIGTERM.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 request to moto, and the status it answered.
fn status(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {response:?}")))
}
