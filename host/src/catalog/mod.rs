//! The catalog: a project's settings, plugins and view types, loaded from
//! `trellis.toml` and validated as a whole.
//!
//! Invariants: a `Catalog` that exists is valid. Every name it refers to
//! resolves (plugins, dependency view types, template variables), its
//! type-level dependency graph has no cycle except self-dependencies that
//! only look into the past, and every view it can describe has a path
//! inside the storage root. It does no I/O after loading and knows nothing
//! of instantiated views (that is `lattice`), the metastore or wasmtime.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! the project file and what it declares. Invariants: a
//! `Catalog` that exists is valid (every name resolves, no type-level cycle
//! but a type's dependency on its own past, every path template gives each
//! view its own directory inside the storage root); after loading it does no
//! I/O; it knows nothing of instantiated views, the metastore or wasmtime.
//! - `mod.rs`: the model (`Catalog`, `ViewType`, `Dependency`, `Binding`,
//!   `TimeSelection`, `Resource`); a type's and a dependency's `incremental`
//!   (a dependency's defaults to its type's; `true` on a dependency of a
//!   type that is not incremental, or on external data, is refused with its
//!   line in `types.rs`); a parameter's declared `Values` (a list, or an
//!   anchored regular expression), which `types.rs` checks at load, a
//!   dependency's literal binding at load (`dependencies.rs`) and every
//!   instantiation (`lattice::instantiate::check_value`), so that a value
//!   that cannot exist is refused in one line, not built as no-data.
//! - `project/`: `trellis.toml` → raw serde structs → checks that collect
//!   every problem with its line, so `trellis validate` shows them at once.
//!   - `mod.rs`: `load`, `parse`, `Diagnostic`, `LoadError`, and the
//!     `Checker` that collects diagnostics and sets the order of the checks;
//!     from 2,000 view types on, the second half of the types is checked on
//!     a thread of its own, its diagnostics following the first half's.
//!     `Including` reads the files `include` names (relative to the file
//!     naming them, nested, each read once, cycles refused) and appends their
//!     view types, spans moved past the files before them, so that the one
//!     `LineIndex` says for any offset its file and line (`Diagnostic.file`,
//!     `ViewType.file`).
//!   - `raw.rs`: the file's shape as serde reads it (unknown keys refused,
//!     with their line and the closest valid key; `RawIncluded`, an included
//!     file's, holds only `include` and `[[view]]`); byte offsets to lines.
//!     A file over 1 MiB is parsed in parts on two threads (the longest run
//!     of view tables in chunks of about 1 MiB, their spans moved to where
//!     each chunk is, and the rest with that run blanked), only when that
//!     is provably the whole file's parse: every header spelled plainly, no
//!     view's table outside the run, the run starting between tables (a
//!     sentinel header over its first line must parse as an empty table),
//!     no `view` in the rest, and no multi-line string that could hide a
//!     header. Otherwise, and on any error, the file is parsed whole, so
//!     errors are the whole file's. It knows no semantic rule.
//!   - `settings.rs`: `[project]`, `[defaults]`, `[events]` with their
//!     defaults (the storage root typed by `storage.rs`; a local one must
//!     hold neither the project nor the metastore), `[project.s3]` (each
//!     key on its line; credentials refused, never echoed; refused when no
//!     root is on S3), `[plugins]`, `[[listener]]`.
//!   - `coordinators.rs`: `[[coordinator]]` tables, each value checked on
//!     its own line (a frequency's mistakes show even when `start` has
//!     some); `views` may use only the nominal time's fields and must name
//!     declared view types (checked rendered at the first nominal time:
//!     the fields are digits, so one time stands for all). A coordinator
//!     that loads can always create its actions.
//!   - `types.rs`: one `[[view]]` into a `ViewType`: name, parameters,
//!     fields, time dimension, transformation, done flag, its own
//!     `storage` root (checked as the project's is, and neither holding the
//!     project's root nor under a `.` name in it), and its
//!     `RetryPolicy` and `on_dependency_failure` over `[defaults]`'.
//!   - `dependencies.rs`: one `[[view.dependency]]`: target, a binding per
//!     target parameter, time selection (`current`, `latest`, `all` and
//!     Oozie's `future`, `offset`, `absolute`, `currentRange`), and the
//!     limits on offsets, ranges and fan-out.
//!   - `paths.rs`: default path templates, and the checks that give every
//!     view its own directory inside the storage root, within a type and
//!     between types (compared under their roots when a type has a root
//!     of its own); a first component starting with `.` is refused, those
//!     names being trellis's own (`.trellis-staging`). Overlaps between
//!     types are found by partitioning the paths component by component
//!     (a variable component goes with every group), not by comparing every
//!     pair; a proptest holds it to the pairwise answer.
//!   - `graph.rs`: no type-level cycle but a type's dependency on its own
//!     past.
//!   - `checksum.rs`: the schema checksum, over what a type stores, never
//!     over comments, key order or formatting.
//!   - `engines.rs`: `[engines.spark]` into `SparkSettings`, each value
//!     checked on its line: the master (local, `spark://`, yarn,
//!     `k8s://`), `deploy_mode` (cluster needs YARN or Kubernetes: trellis's
//!     program on Spark is Python), properties (dotted keys flattened; the
//!     ones trellis sets itself, `SPARK_RESERVED_CONF`, refused), `env`,
//!     `concurrency`, `memory_mib`, `grace`; `spark-home` and `deploy-mode`
//!     are accepted as Spark writes them.
//!   - `resources.rs`: a transformation's `resources`, the project's files
//!     that are part of its logic, read at load (the only I/O of loading
//!     besides the file and a look at whether `storage` (the project's or a
//!     type's) and `metastore` name files, in `settings.rs` and `types.rs`): refused with their line when absolute, outside the
//!     project (by `..` or a link), not a file or unreadable; each kept with
//!     its contents and blake3 hash.
//! - `storage.rs`: storage roots typed (`StorageUrl`: a local directory,
//!   from a plain path or `file:///`, or `s3://bucket/prefix`, its bucket
//!   name and prefix checked) and `S3Options` (`[project.s3]`); any other
//!   scheme, and a `scheme:` without `//`, is refused rather than read as a
//!   directory.
//! - `time.rs`: Oozie dataset time: frequencies, instances by index in O(1)
//!   across DST, `current`, `latest`, roll-ups, `dateOffset`, `formatTime` (SimpleDateFormat's letters, English locale).
//! - `pattern.rs`: Schedoscope's view patterns, parsed with error columns
//!   and expanded lazily as a cartesian product.
//! - `expression.rs`: configuration values with `${...}` and Oozie's
//!   functions, checked at load, resolved per view.
//! - `template.rs`: `${name}` templates for paths and parameter bindings,
//!   and `segments`, the one `${...}`/`$$` scanner that configuration values
//!   use too.

pub mod coordinator;
pub mod expression;
pub mod pattern;
mod project;
pub mod storage;
pub mod template;
pub mod time;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

pub use project::{Diagnostic, LoadError, load, metastore_path, parse};
pub use storage::{S3Location, S3Options, StorageUrl};
use template::Template;

/// Names the time dimension gives to path templates, coarsest first.
pub const TIME_VARIABLES: [&str; 5] = ["YEAR", "MONTH", "DAY", "HOUR", "MINUTE"];

/// The file a project is declared in.
pub const PROJECT_FILE: &str = "trellis.toml";

/// A loaded, valid project.
#[derive(Debug)]
pub struct Catalog {
    /// The project directory; relative paths in the file are relative to it.
    pub root: PathBuf,
    pub settings: Settings,
    pub plugins: BTreeMap<String, PluginDecl>,
    types: Vec<ViewType>,
    by_name: HashMap<String, ViewTypeId>,
    /// The declared listener plugins; the built-in monitor is not among them.
    pub listeners: Vec<ListenerDecl>,
    /// The declared `[[coordinator]]`s, in file order.
    pub coordinators: Vec<coordinator::Coordinator>,
}

/// The name of the built-in listener that logs state changes.
pub const MONITOR: &str = "monitor";

/// A `[[listener]]`: a listener plugin with its configuration.
#[derive(Debug, Clone)]
pub struct ListenerDecl {
    pub name: String,
    /// A name from `[plugins]`.
    pub plugin: String,
    pub config: Vec<(String, String)>,
    /// Restarts allowed before the listener is disabled; `None` is unlimited (-1).
    pub max_retries: Option<u32>,
    /// The first restart's delay; it doubles with each failure in a row.
    pub backoff: Duration,
    /// The hosts it may reach over HTTP (WASI HTTP); none unless listed.
    pub allow_http: Vec<crate::model::AllowedHost>,
    pub line: usize,
}

/// `[events]`: the event log and its listeners.
#[derive(Debug, Clone)]
pub struct EventSettings {
    /// The built-in monitor listener, which logs state changes through tracing.
    pub monitor: bool,
    /// Events kept after every enabled listener has received them.
    pub history: u64,
    /// The most events the log holds: beyond it, the oldest go even if a
    /// listener has not received them, and that listener gets a gap event.
    pub max: u64,
    /// How long a command waits at its end for listeners to catch up.
    pub drain: Duration,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub name: String,
    /// The storage root rendered as a path, which every data path of a type
    /// without a root of its own is rendered under: the local directory
    /// itself, or for an S3 root `s3://bucket/prefix` (the URL as a path,
    /// no trailing `/`), which names no local file: `storage::Key::of`
    /// strips it, and nothing opens it (only `storage` touches view data).
    pub storage: PathBuf,
    /// `[project] storage`, typed; `storage` is its [`StorageUrl::root`].
    pub storage_url: StorageUrl,
    /// The line of `storage` in trellis.toml, when it is declared.
    pub storage_line: Option<usize>,
    /// `[project.s3]`: how to reach the S3 roots, when there are any.
    pub s3: S3Options,
    pub metastore: PathBuf,
    /// What `latest()` counts back from.
    pub evaluation_time: EvaluationTime,
    pub retries: u32,
    /// `[defaults] retries`, `backoff` and `retry_panics`: each view type's
    /// unless its `transformation` sets its own.
    pub retry: RetryPolicy,
    /// `[defaults] on_dependency_failure`.
    pub on_dependency_failure: OnDependencyFailure,
    pub concurrency: usize,
    pub deadline: Option<Duration>,
    pub memory_mib: Option<usize>,
    /// What the memory caps of all plugin calls alive at once may add up
    /// to, in MiB; `None` is the runtime's default (half the machine's memory).
    pub memory_budget_mib: Option<usize>,
    /// `[defaults] output_mib` and `output_entries`: each transformation's
    /// output cap unless its view type sets its own.
    pub output: OutputCap,
    pub events: EventSettings,
    /// `[engines.spark]`, with its defaults when the table is absent.
    pub spark: SparkSettings,
}

/// `[engines.spark]`: how the Spark driver submits the jobs of
/// engine-backed view types. None of it is part of a version checksum:
/// moving a project from local mode to a cluster rebuilds nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparkSettings {
    /// `local[*]`, `local[N]`, `spark://HOST:PORT`, `yarn` or `k8s://URL`.
    pub master: SparkMaster,
    pub deploy_mode: DeployMode,
    /// Where Spark is installed; `None`: `$SPARK_HOME`, then the PySpark
    /// `trellis engines install spark` put in trellis's tools directory,
    /// then `spark-submit` on the PATH.
    pub spark_home: Option<PathBuf>,
    /// The Python that runs the driver's program (`PYSPARK_PYTHON`).
    pub python: String,
    /// Spark properties every job gets, a job's own over them.
    pub conf: Vec<(String, String)>,
    /// Environment variables spark-submit gets besides the few trellis
    /// passes on (see `engines::spark`): `HADOOP_CONF_DIR`, `JAVA_HOME`...
    pub env: Vec<(String, String)>,
    /// Jobs in flight at once.
    pub concurrency: usize,
    /// The driver's memory (`spark.driver.memory`), which a job whose
    /// driver runs on this machine reserves from the memory budget.
    pub memory_mib: usize,
    /// How long a job has to stop after SIGTERM before it is killed.
    pub grace: Duration,
    /// Where `[engines.spark]` is, when the file has it.
    pub line: Option<usize>,
}

impl Default for SparkSettings {
    fn default() -> Self {
        SparkSettings {
            master: SparkMaster::Local { threads: LocalThreads::All, max_failures: None },
            deploy_mode: DeployMode::Client,
            spark_home: None,
            python: "python3".into(),
            conf: Vec::new(),
            env: Vec::new(),
            concurrency: 1,
            memory_mib: 1024,
            grace: Duration::from_secs(10),
            line: None,
        }
    }
}

impl SparkSettings {
    /// Whether executors run in the driver's process on this machine.
    pub fn is_local(&self) -> bool {
        matches!(self.master, SparkMaster::Local { .. })
    }

    /// Whether the driver runs on this machine (and holds its memory here).
    pub fn driver_is_local(&self) -> bool {
        self.deploy_mode == DeployMode::Client
    }
}

/// Where Spark runs a job (`spark-submit --master`): the forms Spark
/// takes, parsed once where the project is read, and written back as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SparkMaster {
    /// `local`, `local[*]`, `local[N]` or `local[N,F]`: executors in the
    /// driver's process, on this machine.
    Local {
        threads: LocalThreads,
        max_failures: Option<u32>,
    },
    /// `spark://HOST:PORT`: a standalone cluster (the URL as written).
    Standalone(String),
    Yarn,
    /// `k8s://URL`: Kubernetes (the URL as written).
    Kubernetes(String),
}

/// The threads of a local master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalThreads {
    /// `local`: one thread.
    One,
    /// `local[*]`: one per core.
    All,
    /// `local[N]`.
    Count(u32),
}

impl std::str::FromStr for SparkMaster {
    type Err = String;

    fn from_str(master: &str) -> Result<SparkMaster, String> {
        let threads = |inner: &str| match inner {
            "*" => Some(LocalThreads::All),
            _ => inner.parse::<u32>().ok().filter(|&n| n >= 1).map(LocalThreads::Count),
        };
        let local = |inner: &str| match inner.split_once(',') {
            Some((n, failures)) => {
                Some(SparkMaster::Local { threads: threads(n)?, max_failures: Some(failures.parse::<u32>().ok()?) })
            }
            None => Some(SparkMaster::Local { threads: threads(inner)?, max_failures: None }),
        };
        let parsed = match master {
            "local" => Some(SparkMaster::Local { threads: LocalThreads::One, max_failures: None }),
            "yarn" => Some(SparkMaster::Yarn),
            _ => {
                if let Some(inner) = master.strip_prefix("local[").and_then(|rest| rest.strip_suffix(']')) {
                    local(inner)
                } else if master.strip_prefix("spark://").is_some_and(|rest| !rest.is_empty()) {
                    Some(SparkMaster::Standalone(master.to_string()))
                } else if master.strip_prefix("k8s://").is_some_and(|rest| !rest.is_empty()) {
                    Some(SparkMaster::Kubernetes(master.to_string()))
                } else {
                    None
                }
            }
        };
        parsed.ok_or_else(|| {
            format!("`{master}`: expected local[*], local[N], spark://HOST:PORT, yarn or k8s://https://HOST:PORT")
        })
    }
}

impl std::fmt::Display for SparkMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SparkMaster::Local { threads: LocalThreads::One, max_failures: None } => f.write_str("local"),
            SparkMaster::Local { threads, max_failures } => {
                match threads {
                    LocalThreads::All => f.write_str("local[*")?,
                    // `local[1,F]` is how Spark spells one thread with failures.
                    LocalThreads::One => f.write_str("local[1")?,
                    LocalThreads::Count(n) => write!(f, "local[{n}")?,
                }
                match max_failures {
                    Some(failures) => write!(f, ",{failures}]"),
                    None => f.write_str("]"),
                }
            }
            SparkMaster::Standalone(url) | SparkMaster::Kubernetes(url) => f.write_str(url),
            SparkMaster::Yarn => f.write_str("yarn"),
        }
    }
}

/// Spark properties trellis sets itself for every job, which neither
/// `[engines.spark] conf` nor a job may set: where the job runs, where its
/// event log and scratch files go, and its driver's memory (`memory_mib`).
pub const SPARK_RESERVED_CONF: [&str; 10] = [
    "spark.master",
    "spark.submit.deployMode",
    "spark.app.name",
    "spark.driver.memory",
    "spark.local.dir",
    "spark.eventLog.enabled",
    "spark.eventLog.dir",
    "spark.eventLog.compress",
    "spark.eventLog.rolling.enabled",
    "spark.kubernetes.driver.pod.name",
];

/// `[engines.spark] deploy_mode`: where the driver runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeployMode {
    /// On this machine, as a child of trellis.
    Client,
    /// On the cluster (YARN or Kubernetes).
    Cluster,
}

/// How much one transformation may write to its output: `output_mib` and
/// `output_entries`, in `[defaults]` or a view type's `transformation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputCap {
    /// Bytes, by apparent size.
    pub bytes: u64,
    /// Files and directories.
    pub entries: u64,
}

impl Default for OutputCap {
    /// 10 GiB in at most 100,000 files and directories: far above what a
    /// view's data usually is, far below a full disk or inode table.
    fn default() -> Self {
        OutputCap { bytes: 10 << 30, entries: 100_000 }
    }
}

impl OutputCap {
    /// This cap (the project's), with what a view type sets itself.
    pub fn with(self, own: OwnOutputCap) -> OutputCap {
        OutputCap { bytes: own.bytes.unwrap_or(self.bytes), entries: own.entries.unwrap_or(self.entries) }
    }
}

/// The parts of the output cap a view type's `transformation` sets itself;
/// the rest comes from `[defaults]` ([`Settings::output`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnOutputCap {
    pub bytes: Option<u64>,
    pub entries: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvaluationTime {
    /// The wall clock when the dependency is resolved (Oozie with
    /// `latest-el.use-current-time`, the seed's worked example).
    Present,
    /// The actual time of the materialization (Oozie's default).
    Actual,
}

#[derive(Debug, Clone)]
pub struct PluginDecl {
    pub name: String,
    pub file: PathBuf,
    pub deadline: Option<Duration>,
    pub memory_mib: Option<usize>,
    /// At most this many transformations of this plugin at once.
    pub concurrency: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViewTypeId(pub u32);

/// `on_dependency_failure`: what a view does when a dependency failed (or
/// was skipped for a failure) in the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnDependencyFailure {
    /// Transform with what there is, flagged with errors (Schedoscope).
    #[default]
    Continue,
    /// Do not transform: keep the data and record, flow SKIPPED (seed 003).
    Skip,
}

/// How a view type's failed transformations are tried again: `retries`,
/// `backoff` and `retry_panics`, in its `transformation` or `[defaults]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries of a retryable failure (declared retryable, or a deadline).
    pub retries: u32,
    /// The delay before the first retry; it doubles with each one.
    pub backoff: Duration,
    /// Panics and traps are retried too, up to `retries` (off by default:
    /// a deterministic panic fails the same way every time).
    pub retry_panics: bool,
}

#[derive(Debug, Clone)]
pub struct ViewType {
    pub id: ViewTypeId,
    /// `package/Name`.
    pub name: String,
    pub package: String,
    pub comment: String,
    pub parameters: Vec<Parameter>,
    pub fields: Vec<Field>,
    pub time: Option<time::Dataset>,
    pub transformation: Transformation,
    /// Schedoscope's defineVersion: when set, the version checksum is this.
    pub version: Option<String>,
    pub dependencies: Vec<Dependency>,
    /// Relative to the storage root: the type's own when it has one,
    /// else the project's ([`Catalog::storage_root`]).
    pub path: Template,
    /// `storage = "..."` on the `[[view]]`: a root of its own (raw
    /// deliveries in one bucket, marts in another); `None`: the project's.
    pub storage: Option<StorageUrl>,
    /// Its root rendered as a path, as `Settings::storage` is; `None`: the
    /// project's.
    pub storage_root: Option<PathBuf>,
    /// The line of its `storage` key, in the file the type is in.
    pub storage_line: Option<usize>,
    /// Empty: the directory's existence is enough.
    pub done_flag: String,
    pub format: String,
    pub materialize_once: bool,
    /// `incremental = true`: its transformation reads only what changed
    /// since its last commit (`scheduler::txlog`), if its plugin can.
    pub incremental: bool,
    /// What a view does when a dependency failed in the run.
    pub on_dependency_failure: OnDependencyFailure,
    /// How its transformation's failures are retried.
    pub retry: RetryPolicy,
    pub schema_checksum: String,
    /// Where it is declared: in trellis.toml, or in the included file
    /// `file` names (as the include wrote it, from the project directory).
    pub line: usize,
    pub file: Option<String>,
    /// Where its `transformation` is (its own line when it has none), so
    /// that a problem with the plugin's use points there.
    pub transformation_line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParameterKind {
    String,
    Int,
    Boolean,
}

#[derive(Debug, Clone)]
pub struct Parameter {
    pub name: String,
    pub kind: ParameterKind,
    pub comment: String,
    /// The values it may take, when its declaration says (`values`): a
    /// value outside them cannot exist, and is refused rather than
    /// materialized as a view without data.
    pub values: Option<Values>,
}

/// A parameter's declared values: a list, or a regular expression the
/// whole value must match.
#[derive(Debug, Clone)]
pub enum Values {
    /// In canonical form, in declaration order.
    List(Vec<String>),
    /// Anchored at both ends; `text` as declared.
    Pattern { text: String, regex: regex::Regex },
}

impl Values {
    /// Whether `value` (canonical) is one of them, or why not.
    pub fn check(&self, value: &str) -> Result<(), String> {
        match self {
            Values::List(values) if values.iter().any(|v| v == value) => Ok(()),
            Values::List(values) => {
                let hint = closest(value, values.iter().map(String::as_str));
                let hint =
                    if hint.is_empty() { String::new() } else { format!("; did you mean {}?", hint.join(" or ")) };
                Err(format!("not one of its declared values ({}){hint}", values.join(", ")))
            }
            Values::Pattern { regex, .. } if regex.is_match(value) => Ok(()),
            Values::Pattern { text, .. } => Err(format!("does not match its declared values `{text}`")),
        }
    }

    /// From a declaration: values of `kind` (made canonical), or a
    /// regular expression; the error says what is wrong with it.
    pub fn declared(kind: ParameterKind, declared: &RawValues) -> Result<Values, String> {
        match declared {
            RawValues::List(values) if values.is_empty() => Err("`values` lists no value".to_string()),
            RawValues::List(values) => {
                let mut canonical: Vec<String> = Vec::with_capacity(values.len());
                for value in values {
                    let value = canonical_value(kind, value)
                        .map_err(|reason| format!("`values` lists `{}`: {reason}", value.escape_debug()))?;
                    if canonical.contains(&value) {
                        return Err(format!("`values` lists `{value}` twice"));
                    }
                    canonical.push(value);
                }
                Ok(Values::List(canonical))
            }
            RawValues::Pattern(text) => {
                let regex = crate::model::view_filter(&format!("^(?:{text})$"))
                    .map_err(|_| format!("`values` = `{text}` is not a usable regular expression"))?;
                Ok(Values::Pattern { text: text.clone(), regex })
            }
        }
    }
}

/// `values` as written: a list of values, or a regular expression.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub enum RawValues {
    List(Vec<String>),
    Pattern(String),
}

#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub kind: String,
    pub comment: String,
}

#[derive(Debug, Clone)]
pub enum Transformation {
    /// `noop`: external data, present when its done flag is.
    External,
    Plugin {
        plugin: String,
        /// Values may use `${parameter}` and the functions of
        /// `catalog::expression`; resolved per view.
        config: Vec<(String, expression::ConfigValue)>,
        /// A checksum plugin that extracts what of the logic counts.
        checksum: Option<String>,
        /// What one call may write, where the type sets it; not part of the
        /// version checksum.
        output: OwnOutputCap,
        /// Files of the project that are part of the logic (query files),
        /// in the order declared: they go to the checksum plugin, and into
        /// the default version checksum.
        resources: Vec<Resource>,
    },
}

impl Transformation {
    /// The plugin that transforms, or none for external data.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            Transformation::External => None,
            Transformation::Plugin { plugin, .. } => Some(plugin),
        }
    }
}

/// A file of the project that is part of a transformation's logic, read
/// once when the project is loaded (so that every version checksum of one
/// process is over the same contents).
#[derive(Clone)]
pub struct Resource {
    /// As declared: relative to the project directory.
    pub name: String,
    pub content: std::sync::Arc<[u8]>,
    /// blake3 of the content, the first 16 hex digits.
    pub hash: String,
}

impl std::fmt::Debug for Resource {
    /// Name, size and hash: a query file's bytes say nothing in a debug dump.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resource")
            .field("name", &self.name)
            .field("bytes", &self.content.len())
            .field("hash", &self.hash)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct Dependency {
    /// The input's name for the transformation (`dataIn('name')`).
    pub name: String,
    pub target: ViewTypeId,
    /// One binding per parameter of the target, in its order.
    pub parameters: Vec<Binding>,
    pub time: TimeSelection,
    /// Read incrementally: only its files that changed since the last
    /// commit are new to the transformation (default: the type's
    /// `incremental`).
    pub incremental: bool,
    pub line: usize,
}

/// The values a dependency's parameter takes, from the dependent's.
#[derive(Debug, Clone)]
pub enum Binding {
    One(Template),
    /// An enumeration: one dependency view per value (a total over shops).
    Each(Vec<Template>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSelection {
    /// The target has no time dimension.
    Timeless,
    /// `current(from)..current(to)`, relative to the dependent's instance.
    Current { from: i64, to: i64 },
    /// `latest(n)`: the n-th latest instance whose data exists.
    Latest(i64),
    /// Every instance of the target inside the dependent's period.
    All,
    /// Oozie's `future(n, limit)`: the n-th (from 0) instance whose data exists, looking forward from
    /// `current(0)` over `limit` instances.
    Future { n: i64, limit: i64 },
    /// Oozie's `offset(from, unit)..offset(to, unit)`: `current(0)` moved by whole units, rounded down to an
    /// instance; every instance between the two.
    Offset { from: i64, to: i64, unit: time::OffsetUnit },
    /// Oozie's `absolute(t)..current(to)`: every instance from the fixed instance `t` to `current(to)`.
    Absolute { from: chrono::DateTime<chrono::Utc>, to: i64 },
}

impl TimeSelection {
    /// Whether which instances it selects depends on which data exists (`latest`, `future`), so that the
    /// lattice resolves it again as data arrives.
    pub fn looks_for_data(&self) -> bool {
        matches!(self, TimeSelection::Latest(_) | TimeSelection::Future { .. })
    }
}

impl Catalog {
    /// The root a view type's data paths are rendered under: its own, else
    /// the project's.
    pub fn storage_root<'a>(&'a self, view_type: &'a ViewType) -> &'a std::path::Path {
        view_type.storage_root.as_deref().unwrap_or(&self.settings.storage)
    }

    pub fn types(&self) -> &[ViewType] {
        &self.types
    }

    /// Every storage root views' data is under: the project's first, then
    /// each root of the types' own, once.
    pub fn storage_roots(&self) -> Vec<&std::path::Path> {
        let mut roots = vec![self.settings.storage.as_path()];
        for view_type in &self.types {
            let root = self.storage_root(view_type);
            if !roots.contains(&root) {
                roots.push(root);
            }
        }
        roots
    }

    pub fn get(&self, id: ViewTypeId) -> &ViewType {
        &self.types[id.0 as usize]
    }

    pub fn find(&self, name: &str) -> Option<&ViewType> {
        self.by_name.get(name).map(|&id| self.get(id))
    }

    /// The declared view type names closest to `name`, best first.
    pub fn closest(&self, name: &str) -> Vec<&str> {
        closest(name, self.types.iter().map(|t| t.name.as_str()))
    }
}

/// Checks one parameter value: a safe single path component of its kind.
/// Returns it in canonical form (`007` and `+7` are the int `7`), so that
/// one value is one view, or why it is refused.
pub fn canonical_value(kind: ParameterKind, value: &str) -> Result<String, &'static str> {
    if value.is_empty() {
        return Err("empty values are not allowed");
    }
    if value.contains('/') || value.contains('\\') {
        return Err("values may not contain `/` or `\\`");
    }
    if value == "." || value.contains("..") {
        return Err("values may not contain `..`");
    }
    if value.chars().any(char::is_control) {
        return Err("values may not contain NUL or control characters");
    }
    match kind {
        ParameterKind::String => Ok(value.to_string()),
        ParameterKind::Int => value.parse::<i64>().map(|n| n.to_string()).map_err(|_| "not an int"),
        ParameterKind::Boolean if value == "true" || value == "false" => Ok(value.to_string()),
        ParameterKind::Boolean => Err("not true or false"),
    }
}

/// `; did you mean `x`?` for the candidate closest to `name`, or nothing.
pub fn did_you_mean<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    closest(name, candidates).first().map(|best| format!("; did you mean `{best}`?")).unwrap_or_default()
}

/// Names as a comma-separated list, or `none`.
pub fn names_or_none<S: AsRef<str>>(names: &[S]) -> String {
    if names.is_empty() { "none".to_string() } else { names.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(", ") }
}

/// Up to three of `candidates` that look like `name`, best first.
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(f64, &str)> = candidates
        .map(|candidate| (strsim::jaro_winkler(&name.to_lowercase(), &candidate.to_lowercase()), candidate))
        .filter(|(score, _)| *score > 0.7)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, candidate)| candidate).collect()
}
