//! spark-submit as a process: its command line (an argv vector, never a
//! shell) and its environment, built from the settings and the job alone
//! (a golden table); its start in a process group of its own that dies
//! with trellis; its output captured within bounds; and its end, by itself,
//! at the deadline or on a stop: SIGTERM to the group, SIGKILL after the
//! grace period, and in cluster mode the application killed on the cluster.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use super::Installation;
use super::outcome::Exit;
use crate::catalog::{DeployMode, SparkMaster, SparkSettings};
use crate::runtime::Captured;

/// A program and its arguments, and the whole environment it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Where one job's files are, all inside its scratch directory.
#[derive(Debug, Clone)]
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn job(&self) -> PathBuf {
        self.dir.join("job.json")
    }
    pub fn result(&self) -> PathBuf {
        self.dir.join("result.json")
    }
    pub fn runner_dir(&self) -> PathBuf {
        self.dir.join("runner")
    }
    pub fn events(&self) -> PathBuf {
        self.dir.join("events")
    }
    /// Spark's own scratch space in local mode (shuffle files, spills):
    /// removed with the rest, even after a SIGKILL.
    pub fn local(&self) -> PathBuf {
        self.dir.join("local")
    }
    /// Where the job writes its data; it must not exist before.
    pub fn output(&self) -> PathBuf {
        self.dir.join("output")
    }
    pub fn application(&self, name: &str) -> PathBuf {
        let file = Path::new(name).file_name().map_or_else(|| "application.py".into(), |f| f.to_os_string());
        self.dir.join("app").join(file)
    }
}

/// Variables of trellis's own environment that spark-submit gets, where
/// they are set: finding programs and the home directory, the locale, Java,
/// and a cluster's client configuration. Nothing else leaks in.
const KEPT: [&str; 10] =
    ["PATH", "HOME", "USER", "TMPDIR", "LANG", "LC_ALL", "JAVA_HOME", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "KUBECONFIG"];

/// What of one job its command line names.
pub struct JobLine<'a> {
    /// The job's own Spark properties.
    pub conf: &'a [(String, String)],
    /// The view, as the application's name.
    pub view: &'a str,
    /// A Python application's resource name.
    pub application: Option<&'a str>,
    /// The Kubernetes driver pod's name, in cluster mode.
    pub pod: &'a str,
}

/// The spark-submit command line for one job. Properties are merged in
/// this order, later over earlier: trellis's defaults (no web UI, warnings
/// only), `[engines.spark] conf`, the job's own; then trellis's own, which
/// neither may set (see `SPARK_RESERVED_CONF`).
pub fn command_line(
    settings: &SparkSettings,
    installation: &Installation,
    scratch: &Scratch,
    job: &JobLine<'_>,
    environment: &dyn Fn(&str) -> Option<OsString>,
) -> CommandLine {
    let mut conf: BTreeMap<String, String> = BTreeMap::new();
    conf.insert("spark.ui.enabled".into(), "false".into());
    conf.insert("spark.log.level".into(), "WARN".into());
    // Spark's own done flag: trellis writes the view's.
    conf.insert("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs".into(), "false".into());
    for (key, value) in settings.conf.iter().chain(job.conf) {
        conf.insert(key.clone(), value.clone());
    }
    conf.insert("spark.eventLog.enabled".into(), "true".into());
    conf.insert("spark.eventLog.dir".into(), format!("file://{}", scratch.events().display()));
    conf.insert("spark.eventLog.compress".into(), "false".into());
    conf.insert("spark.eventLog.rolling.enabled".into(), "false".into());
    if settings.is_local() {
        conf.insert("spark.local.dir".into(), scratch.local().display().to_string());
    }
    let cluster = settings.deploy_mode == DeployMode::Cluster;
    if cluster && matches!(settings.master, SparkMaster::Kubernetes(_)) {
        // Named beforehand, so that a stop can kill it by name.
        conf.insert("spark.kubernetes.driver.pod.name".into(), job.pod.to_string());
    }
    let runner = scratch.runner_dir();
    let mut args: Vec<String> = vec![
        "--master".into(),
        settings.master.to_string(),
        "--deploy-mode".into(),
        if cluster { "cluster" } else { "client" }.into(),
        "--name".into(),
        job.view.to_string(),
        "--driver-memory".into(),
        format!("{}m", settings.memory_mib),
    ];
    for (key, value) in conf {
        args.push("--conf".into());
        args.push(format!("{key}={value}"));
    }
    args.push("--py-files".into());
    args.push(runner.join("trellis_spark.py").display().to_string());
    if cluster {
        // The driver runs elsewhere: its files go with it, into its
        // working directory, where the runner looks when the paths given
        // are not there.
        let mut files = vec![scratch.job().display().to_string()];
        files.extend(job.application.map(|name| scratch.application(name).display().to_string()));
        args.push("--files".into());
        args.push(files.join(","));
    }
    args.push(runner.join("trellis_spark_runner.py").display().to_string());
    args.push(scratch.job().display().to_string());

    let mut env: Vec<(String, String)> = KEPT
        .iter()
        .filter_map(|key| environment(key).map(|value| (key.to_string(), value.to_string_lossy().into_owned())))
        .collect();
    env.push(("SPARK_HOME".into(), installation.spark_home.display().to_string()));
    env.push(("PYSPARK_PYTHON".into(), settings.python.clone()));
    env.push(("PYSPARK_DRIVER_PYTHON".into(), settings.python.clone()));
    // The runner's and the application's modules are not worth caching.
    env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
    if settings.is_local() {
        // The machine's name may resolve to an address that is not its own.
        env.push(("SPARK_LOCAL_IP".into(), "127.0.0.1".into()));
    }
    if let Some(java_home) = installation.java.parent().and_then(Path::parent) {
        // The Java that was checked is the one Spark runs.
        env.retain(|(key, _)| key != "JAVA_HOME");
        env.push(("JAVA_HOME".into(), java_home.display().to_string()));
    }
    for (key, value) in &settings.env {
        env.retain(|(existing, _)| existing != key);
        env.push((key.clone(), value.clone()));
    }
    CommandLine { program: installation.spark_submit.clone(), args, env }
}

/// In cluster mode, how to kill the application on the cluster once
/// spark-submit is stopped (which leaves it running there): by the YARN
/// application id spark-submit printed, or by the Kubernetes driver pod
/// trellis named, in the namespace and with the Kubernetes properties the
/// job was submitted with (the job's over `[engines.spark] conf`). `None`
/// where there is nothing to kill (client mode, or YARN before it printed
/// an id). It runs with the job's own environment (`HADOOP_CONF_DIR`,
/// `KUBECONFIG`, the PATH).
pub fn cluster_kill(
    settings: &SparkSettings,
    installation: &Installation,
    printed: &str,
    job: &JobLine<'_>,
) -> Option<(PathBuf, Vec<String>)> {
    if settings.deploy_mode != DeployMode::Cluster {
        return None;
    }
    if settings.master == SparkMaster::Yarn {
        let id = printed.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).find(|word| {
            word.strip_prefix("application_").is_some_and(|rest| {
                let mut parts = rest.split('_');
                parts.next().is_some_and(|p| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty())
                    && parts.next().is_some_and(|p| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty())
                    && parts.next().is_none()
            })
        })?;
        return Some((PathBuf::from("yarn"), vec!["application".into(), "-kill".into(), id.to_string()]));
    }
    if let SparkMaster::Kubernetes(url) = &settings.master {
        let mut kubernetes: BTreeMap<&str, &str> = BTreeMap::new();
        for (key, value) in settings.conf.iter().chain(job.conf) {
            if key.starts_with("spark.kubernetes.") {
                kubernetes.insert(key, value);
            }
        }
        let namespace = kubernetes.get("spark.kubernetes.namespace").copied().unwrap_or("default");
        let mut args = vec!["--master".to_string(), url.clone()];
        for (key, value) in &kubernetes {
            args.extend(["--conf".to_string(), format!("{key}={value}")]);
        }
        args.extend(["--kill".to_string(), format!("{namespace}:{}", job.pod)]);
        return Some((installation.spark_submit.clone(), args));
    }
    None
}

/// What the process printed on one stream, within bounds: the beginning
/// and the end (where a failure's error is), the middle counted.
#[derive(Debug, Default)]
pub struct Bounded {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

/// What is kept of each stream: the first 4 KiB and the last 12 KiB.
const HEAD_BYTES: usize = 4 << 10;
const TAIL_BYTES: usize = 12 << 10;

impl Bounded {
    fn push(&mut self, bytes: &[u8]) {
        let room = HEAD_BYTES.saturating_sub(self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..room]);
        self.tail.extend(&bytes[room..]);
        while self.tail.len() > TAIL_BYTES {
            let over = self.tail.len() - TAIL_BYTES;
            self.tail.drain(..over);
            self.dropped += over as u64;
        }
    }

    /// The text kept, with a line where the middle was cut.
    pub fn captured(&self) -> Captured {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!("\n[... {} bytes not kept ...]\n", self.dropped));
        }
        let (a, b) = self.tail.as_slices();
        text.push_str(&String::from_utf8_lossy(&[a, b].concat()));
        Captured { text, truncated_bytes: self.dropped }
    }

    /// The last line that says something.
    pub fn last_line(&self) -> String {
        let (a, b) = self.tail.as_slices();
        let tail = [&self.head[..], a, b].concat();
        crate::python::last_line(&tail)
    }
}

/// A line the runner prints for the view's log, rather than as output.
pub const RUNNER_PREFIX: &str = "trellis: ";

/// The longest piece of a line `capture` holds: an application that prints
/// gigabytes without a newline is kept, as all output, in `Bounded`'s head
/// and tail, never whole in the host's memory.
const LONGEST_LINE: usize = 64 << 10;

/// Reads one stream to its end into `into`, line by line, handing the
/// runner's own lines to `line` instead (they are the view's log lines).
/// A line longer than `LONGEST_LINE` goes to `into` in pieces; only a
/// piece that starts a line can be the runner's.
pub async fn capture(stream: impl AsyncRead + Unpin, into: Arc<Mutex<Bounded>>, mut line: impl FnMut(&str) + Send) {
    let mut reader = BufReader::new(stream);
    let mut buffer = Vec::new();
    let mut starts_line = true;
    loop {
        let (taken, ended) = match reader.fill_buf().await {
            Ok([]) | Err(_) => (0, true),
            Ok(available) => match available.iter().position(|&b| b == b'\n') {
                Some(newline) => (newline + 1, true),
                None => (available.len().min(LONGEST_LINE - buffer.len()), false),
            },
        };
        if taken > 0 {
            buffer.extend_from_slice(&reader.buffer()[..taken]);
            reader.consume(taken);
        }
        if !buffer.is_empty() && (ended || buffer.len() >= LONGEST_LINE) {
            let runner = if starts_line { String::from_utf8_lossy(&buffer) } else { Default::default() };
            match runner.trim_end().strip_prefix(RUNNER_PREFIX) {
                Some(said) if ended => line(said),
                _ => into.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(&buffer),
            }
            starts_line = ended;
            buffer.clear();
        }
        if taken == 0 {
            return;
        }
    }
}

/// A process group that is killed when this is dropped, whatever happened:
/// a task aborted from outside still leaves no Spark behind.
pub struct Group {
    pgid: Option<i32>,
}

impl Group {
    pub fn new(pgid: i32) -> Group {
        Group { pgid: Some(pgid) }
    }

    pub fn signal(&self, signal: i32) {
        if let Some(pgid) = self.pgid {
            // SAFETY: kill(2) on a process group trellis created; ESRCH
            // (gone already) is fine.
            unsafe {
                libc::kill(-pgid, signal);
            }
        }
    }

    /// The group has been reaped: nothing to kill on drop.
    pub fn forget(&mut self) {
        self.pgid = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// Stops the group: SIGTERM, which Spark takes as a request to stop (its
/// shutdown hooks remove its temporary files), then SIGKILL once `grace`
/// has passed; returns once the process was reaped. The rest of the group
/// (the Python driver) is killed after.
pub async fn terminate(child: &mut tokio::process::Child, group: &mut Group, grace: Duration) -> Exit {
    group.signal(libc::SIGTERM);
    let exit = match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            group.signal(libc::SIGKILL);
            child.wait().await.ok()
        }
    };
    group.signal(libc::SIGKILL);
    group.forget();
    exit.map_or(Exit::Signal(libc::SIGKILL), exit_of)
}

/// An exit status as the verdict reads it.
pub fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Code(-1),
    }
}

/// Starts the command in a process group of its own (so that a stop
/// reaches the JVM and the Python driver it starts, and a terminal's
/// Ctrl-C reaches neither: trellis stops them itself), which the kernel
/// kills if trellis dies first (`PR_SET_PDEATHSIG`).
pub fn spawn(command: &CommandLine, cwd: &Path) -> std::io::Result<tokio::process::Child> {
    let mut process = tokio::process::Command::new(&command.program);
    process
        .args(&command.args)
        .env_clear()
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    // SAFETY: prctl is async-signal-safe, and the closure allocates nothing.
    unsafe {
        let parent = libc::getpid();
        process.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // trellis died before the death signal was armed: nobody will
            // ever stop this job.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("trellis ended while the job started"));
            }
            Ok(())
        });
    }
    process.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An application's endless line is kept within bounds, and never
    /// mistaken for the runner's: only whole lines that start so are.
    #[tokio::test]
    async fn a_long_line_is_captured_in_pieces_and_only_whole_runner_lines_are_log_lines() {
        let long = "x".repeat(1 << 20);
        let long_runner = format!("{RUNNER_PREFIX}{long}");
        let input =
            format!("{RUNNER_PREFIX}hello\n{long}{RUNNER_PREFIX}not a line\nplain\n{long_runner}\n{RUNNER_PREFIX}bye");
        let into = Arc::new(Mutex::new(Bounded::default()));
        let mut lines = Vec::new();
        capture(input.as_bytes(), into.clone(), |said| lines.push(said.to_string())).await;

        assert_eq!(lines, ["hello", "bye"]);
        let captured = into.lock().unwrap().captured();
        let output_bytes = long.len() + RUNNER_PREFIX.len() + "not a line\nplain\n".len() + long_runner.len() + 1;
        assert_eq!(captured.truncated_bytes as usize, output_bytes - HEAD_BYTES - TAIL_BYTES);
        assert!(captured.text.ends_with(&format!("{}\n", &long_runner[long_runner.len() - 100..])));
    }

    fn installation() -> Installation {
        Installation {
            spark_submit: "/opt/spark/bin/spark-submit".into(),
            spark_home: "/opt/spark".into(),
            found_by: "SPARK_HOME",
            java: "/usr/lib/jvm/java-17/bin/java".into(),
            java_version: "17.0.15".into(),
        }
    }

    fn line(settings: &SparkSettings, application: Option<&str>) -> String {
        let scratch = Scratch { dir: "/data/.trellis-staging/view-abc123/.trellis-spark".into() };
        let job_conf = [("spark.sql.shuffle.partitions".to_string(), "2".to_string())];
        let environment = |key: &str| match key {
            "PATH" => Some(OsString::from("/usr/bin")),
            "HOME" => Some(OsString::from("/home/u")),
            "JAVA_HOME" => Some(OsString::from("/elsewhere")),
            "SECRET" => Some(OsString::from("never")),
            _ => None,
        };
        let job = JobLine { conf: &job_conf, view: "p.q/V/2015", application, pod: "trellis-x" };
        let command = command_line(settings, &installation(), &scratch, &job, &environment);
        let mut text = format!("{}\n", command.program.display());
        for arg in command.args {
            text.push_str(&format!("  {arg}\n"));
        }
        for (key, value) in command.env {
            text.push_str(&format!("  env {key}={value}\n"));
        }
        text
    }

    #[test]
    fn the_command_line_in_local_mode_and_on_clusters() {
        let local = SparkSettings {
            conf: vec![("spark.sql.shuffle.partitions".into(), "8".into()), ("spark.ui.enabled".into(), "true".into())],
            env: vec![("HADOOP_CONF_DIR".into(), "/etc/hadoop".into())],
            ..SparkSettings::default()
        };
        expect_test::expect![[r#"
            /opt/spark/bin/spark-submit
              --master
              local[*]
              --deploy-mode
              client
              --name
              p.q/V/2015
              --driver-memory
              1024m
              --conf
              spark.eventLog.compress=false
              --conf
              spark.eventLog.dir=file:///data/.trellis-staging/view-abc123/.trellis-spark/events
              --conf
              spark.eventLog.enabled=true
              --conf
              spark.eventLog.rolling.enabled=false
              --conf
              spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs=false
              --conf
              spark.local.dir=/data/.trellis-staging/view-abc123/.trellis-spark/local
              --conf
              spark.log.level=WARN
              --conf
              spark.sql.shuffle.partitions=2
              --conf
              spark.ui.enabled=true
              --py-files
              /data/.trellis-staging/view-abc123/.trellis-spark/runner/trellis_spark.py
              /data/.trellis-staging/view-abc123/.trellis-spark/runner/trellis_spark_runner.py
              /data/.trellis-staging/view-abc123/.trellis-spark/job.json
              env PATH=/usr/bin
              env HOME=/home/u
              env SPARK_HOME=/opt/spark
              env PYSPARK_PYTHON=python3
              env PYSPARK_DRIVER_PYTHON=python3
              env PYTHONDONTWRITEBYTECODE=1
              env SPARK_LOCAL_IP=127.0.0.1
              env JAVA_HOME=/usr/lib/jvm/java-17
              env HADOOP_CONF_DIR=/etc/hadoop
        "#]]
        .assert_eq(&line(&local, None));
        let yarn =
            SparkSettings { master: SparkMaster::Yarn, deploy_mode: DeployMode::Cluster, ..SparkSettings::default() };
        expect_test::expect![[r#"
            /opt/spark/bin/spark-submit
              --master
              yarn
              --deploy-mode
              cluster
              --name
              p.q/V/2015
              --driver-memory
              1024m
              --conf
              spark.eventLog.compress=false
              --conf
              spark.eventLog.dir=file:///data/.trellis-staging/view-abc123/.trellis-spark/events
              --conf
              spark.eventLog.enabled=true
              --conf
              spark.eventLog.rolling.enabled=false
              --conf
              spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs=false
              --conf
              spark.log.level=WARN
              --conf
              spark.sql.shuffle.partitions=2
              --conf
              spark.ui.enabled=false
              --py-files
              /data/.trellis-staging/view-abc123/.trellis-spark/runner/trellis_spark.py
              --files
              /data/.trellis-staging/view-abc123/.trellis-spark/job.json,/data/.trellis-staging/view-abc123/.trellis-spark/app/top.py
              /data/.trellis-staging/view-abc123/.trellis-spark/runner/trellis_spark_runner.py
              /data/.trellis-staging/view-abc123/.trellis-spark/job.json
              env PATH=/usr/bin
              env HOME=/home/u
              env SPARK_HOME=/opt/spark
              env PYSPARK_PYTHON=python3
              env PYSPARK_DRIVER_PYTHON=python3
              env PYTHONDONTWRITEBYTECODE=1
              env JAVA_HOME=/usr/lib/jvm/java-17
        "#]]
        .assert_eq(&line(&yarn, Some("jobs/top.py")));
    }

    #[test]
    fn a_cluster_application_is_killed_by_its_id_or_its_pod() {
        let yarn =
            SparkSettings { master: SparkMaster::Yarn, deploy_mode: DeployMode::Cluster, ..SparkSettings::default() };
        let printed = "26/12/05 INFO Client: Submitted application application_1733390000000_0042\n";
        let show = |kill: Option<(PathBuf, Vec<String>)>| {
            kill.map_or("none".to_string(), |(program, args)| format!("{} {}", program.display(), args.join(" ")))
        };
        let job = |pod| JobLine { conf: &[], view: "v", application: None, pod };
        assert_eq!(
            show(cluster_kill(&yarn, &installation(), printed, &job("p"))),
            "yarn application -kill application_1733390000000_0042"
        );
        assert_eq!(show(cluster_kill(&yarn, &installation(), "no id yet application_x", &job("p"))), "none");
        let k8s = SparkSettings {
            master: SparkMaster::Kubernetes("k8s://https://k:6443".into()),
            deploy_mode: DeployMode::Cluster,
            conf: vec![("spark.kubernetes.namespace".into(), "etl".into())],
            ..SparkSettings::default()
        };
        assert_eq!(
            show(cluster_kill(&k8s, &installation(), "", &job("trellis-ab12"))),
            "/opt/spark/bin/spark-submit --master k8s://https://k:6443 --conf spark.kubernetes.namespace=etl --kill etl:trellis-ab12"
        );
        assert_eq!(show(cluster_kill(&SparkSettings::default(), &installation(), printed, &job("p"))), "none");
    }

    #[test]
    fn a_stream_keeps_its_beginning_and_its_end() {
        let mut bounded = Bounded::default();
        bounded.push(b"first line\n");
        for _ in 0..2000 {
            bounded.push(b"0123456789 a line in the middle\n");
        }
        bounded.push(b"the error at the end\n");
        let captured = bounded.captured();
        assert!(captured.text.starts_with("first line\n"));
        assert!(captured.text.ends_with("the error at the end\n"));
        assert!(captured.text.contains("bytes not kept ...]"));
        assert!(captured.truncated_bytes > 40_000);
        assert_eq!(bounded.last_line(), "the error at the end");
    }
}
