//! Loading `trellis.toml`: TOML into raw structs (unknown keys refused with
//! their line and the closest valid key), then every semantic check, with
//! all errors collected so that `trellis validate` can show them at once.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::expression::ConfigValue;
use super::template::{Template, is_identifier};
use super::time::{Dataset, Frequency};
use super::{
    Binding, Catalog, Dependency, EvaluationTime, EventSettings, Field, ListenerDecl, MONITOR, PROJECT_FILE, Parameter,
    ParameterKind, PluginDecl, Settings, TIME_VARIABLES, TimeSelection, Transformation, ViewType, ViewTypeId,
    canonical_value, closest, did_you_mean, names_or_none,
};

/// One problem in the project file, with its line when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{PROJECT_FILE}:{line}: {}", self.message),
            None => write!(f, "{PROJECT_FILE}: {}", self.message),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// Every problem found; at least one.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Diagnostic>),
}

/// Loads `dir/trellis.toml`.
pub fn load(dir: &Path) -> Result<Catalog, LoadError> {
    let path = dir.join(PROJECT_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Read { path: path.clone(), source })?;
    let root = std::path::absolute(dir).map_err(|source| LoadError::Read { path, source })?;
    parse(&text, &root)
}

/// Parses and validates a project file's text; `root` is its directory.
pub fn parse(text: &str, root: &Path) -> Result<Catalog, LoadError> {
    let lines = LineIndex::new(text);
    let raw: RawProject = toml::from_str(text).map_err(|e| LoadError::Invalid(vec![syntax_error(&e, &lines)]))?;
    let mut checker = Checker { lines: &lines, diagnostics: Vec::new() };
    let catalog = checker.check(raw, root);
    match catalog {
        Some(catalog) if checker.diagnostics.is_empty() => Ok(catalog),
        _ => Err(LoadError::Invalid(checker.diagnostics)),
    }
}

fn syntax_error(error: &toml::de::Error, lines: &LineIndex) -> Diagnostic {
    let line = error.span().map(|span| lines.line(span.start));
    Diagnostic { line, message: with_suggestion(error.message().trim()) }
}

/// serde says "unknown field `x`, expected one of `a`, `b`": add the
/// closest valid key, which is usually the typo's fix.
fn with_suggestion(message: &str) -> String {
    if let Some(unknown) = message.strip_prefix("unknown field `").and_then(|rest| rest.split('`').next()) {
        let expected: Vec<&str> =
            message.split("expected").nth(1).unwrap_or_default().split('`').skip(1).step_by(2).collect();
        if let Some(best) = closest(unknown, expected.iter().copied()).first() {
            return format!("{message}; did you mean `{best}`?");
        }
    }
    message.to_string()
}

struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        LineIndex { starts }
    }

    /// 1-based line of a byte offset.
    fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProject {
    #[serde(default)]
    project: RawSettings,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    plugins: BTreeMap<String, Spanned<toml::Value>>,
    #[serde(default, rename = "view")]
    views: Vec<Spanned<RawViewType>>,
    #[serde(default)]
    events: RawEvents,
    #[serde(default, rename = "listener")]
    listeners: Vec<Spanned<RawListener>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    monitor: Option<bool>,
    history: Option<u64>,
    max: Option<u64>,
    drain: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListener {
    name: Spanned<String>,
    plugin: Spanned<String>,
    #[serde(default)]
    config: BTreeMap<String, toml::Value>,
    max_retries: Option<Spanned<i64>>,
    backoff: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    name: Option<String>,
    storage: Option<String>,
    metastore: Option<String>,
    evaluation_time: Option<EvaluationTime>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    retries: Option<u32>,
    concurrency: Option<usize>,
    deadline: Option<Spanned<String>>,
    memory_mib: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPluginTable {
    file: String,
    deadline: Option<String>,
    memory_mib: Option<usize>,
    concurrency: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawViewType {
    name: Spanned<String>,
    #[serde(default)]
    comment: String,
    #[serde(default)]
    parameters: Vec<Spanned<RawParameter>>,
    #[serde(default)]
    fields: Vec<Spanned<RawField>>,
    time: Option<Spanned<RawTime>>,
    transformation: Option<Spanned<RawTransformation>>,
    version: Option<String>,
    #[serde(default, rename = "dependency")]
    dependencies: Vec<Spanned<RawDependency>>,
    path: Option<Spanned<String>>,
    done_flag: Option<Spanned<String>>,
    format: Option<String>,
    #[serde(default)]
    materialize_once: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParameter {
    name: String,
    #[serde(rename = "type", default = "default_parameter_kind")]
    kind: ParameterKind,
    #[serde(default)]
    comment: String,
}

fn default_parameter_kind() -> ParameterKind {
    ParameterKind::String
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    comment: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTime {
    frequency: String,
    initial: String,
    timezone: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTransformation {
    plugin: String,
    #[serde(default)]
    config: BTreeMap<String, toml::Value>,
    checksum: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDependency {
    view: Spanned<String>,
    name: Option<String>,
    parameters: Option<Spanned<BTreeMap<String, toml::Value>>>,
    time: Option<Spanned<String>>,
}

enum RawBinding {
    One(String),
    Each(Vec<String>),
}

impl RawBinding {
    fn from_value(value: &toml::Value) -> Option<RawBinding> {
        match value {
            toml::Value::String(text) => Some(RawBinding::One(text.clone())),
            toml::Value::Integer(n) => Some(RawBinding::One(n.to_string())),
            toml::Value::Boolean(b) => Some(RawBinding::One(b.to_string())),
            toml::Value::Array(items) => {
                let texts: Option<Vec<String>> = items
                    .iter()
                    .map(|item| match item {
                        toml::Value::String(text) => Some(text.clone()),
                        toml::Value::Integer(n) => Some(n.to_string()),
                        toml::Value::Boolean(b) => Some(b.to_string()),
                        _ => None,
                    })
                    .collect();
                texts.map(RawBinding::Each)
            }
            _ => None,
        }
    }
}

/// The field types a schema may use.
const FIELD_KINDS: [&str; 9] = ["string", "int", "long", "double", "decimal", "boolean", "date", "timestamp", "bytes"];

struct Checker<'a> {
    lines: &'a LineIndex,
    diagnostics: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn error(&mut self, offset: usize, message: impl Into<String>) {
        let line = Some(self.lines.line(offset));
        self.diagnostics.push(Diagnostic { line, message: message.into() });
    }

    fn check(&mut self, raw: RawProject, root: &Path) -> Option<Catalog> {
        let settings = self.settings(&raw, root);
        if let Some(settings) = &settings
            && (root.starts_with(&settings.storage) || settings.metastore.starts_with(&settings.storage))
        {
            // Publishing a view replaces its directory: the storage root
            // must never hold the project file, plugins or the metastore.
            self.diagnostics.push(Diagnostic {
                line: None,
                message:
                    "project.storage must be a directory of its own, holding neither the project nor the metastore"
                        .into(),
            });
        }
        let plugins = self.plugins(&raw.plugins, root);

        // Names first, so that dependencies can refer to types declared later.
        let mut by_name: HashMap<String, ViewTypeId> = HashMap::new();
        for (index, view) in raw.views.iter().enumerate() {
            let name = view.get_ref().name.get_ref();
            let offset = view.get_ref().name.span().start;
            if let Err(message) = check_type_name(name) {
                self.error(offset, message);
            }
            if by_name.insert(name.clone(), ViewTypeId(index as u32)).is_some() {
                self.error(offset, format!("view type {name} is declared twice"));
            }
        }

        let mut types = Vec::with_capacity(raw.views.len());
        for (index, view) in raw.views.iter().enumerate() {
            let line = self.lines.line(view.span().start);
            if let Some(view_type) =
                self.view_type(ViewTypeId(index as u32), view.get_ref(), line, &by_name, &raw.views, &plugins)
            {
                types.push(view_type);
            }
        }
        if types.len() != raw.views.len() {
            return None;
        }
        self.check_cycles(&types);
        self.check_distinct_paths(&types);
        let listeners = self.listeners(&raw.listeners, &plugins);
        Some(Catalog { root: root.to_path_buf(), settings: settings?, plugins, types, by_name, listeners })
    }

    fn settings(&mut self, raw: &RawProject, root: &Path) -> Option<Settings> {
        let deadline = match &raw.defaults.deadline {
            Some(text) => match humantime::parse_duration(text.get_ref()) {
                Ok(deadline) => Some(deadline),
                Err(e) => {
                    self.error(text.span().start, format!("defaults.deadline `{}`: {e}", text.get_ref()));
                    return None;
                }
            },
            None => None,
        };
        let drain = match &raw.events.drain {
            Some(text) => match humantime::parse_duration(text.get_ref()) {
                Ok(drain) => drain,
                Err(e) => {
                    self.error(text.span().start, format!("events.drain `{}`: {e}", text.get_ref()));
                    return None;
                }
            },
            None => Duration::from_secs(10),
        };
        let events = EventSettings {
            monitor: raw.events.monitor.unwrap_or(true),
            history: raw.events.history.unwrap_or(10_000),
            max: raw.events.max.unwrap_or(1_000_000).max(1),
            drain,
        };
        let settings = &raw.project;
        Some(Settings {
            events,
            name: settings
                .name
                .clone()
                .unwrap_or_else(|| root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()),
            storage: root.join(settings.storage.as_deref().unwrap_or("data")),
            metastore: root.join(settings.metastore.as_deref().unwrap_or(".trellis/metastore")),
            evaluation_time: settings.evaluation_time.unwrap_or(EvaluationTime::Present),
            retries: raw.defaults.retries.unwrap_or(3),
            concurrency: raw.defaults.concurrency.unwrap_or(4).max(1),
            deadline,
            memory_mib: raw.defaults.memory_mib,
        })
    }

    fn plugins(&mut self, raw: &BTreeMap<String, Spanned<toml::Value>>, root: &Path) -> BTreeMap<String, PluginDecl> {
        let mut plugins = BTreeMap::new();
        for (name, plugin) in raw {
            let offset = plugin.span().start;
            // A file name, or a table with limits: converted by hand, because
            // serde's untagged enums would lose the unknown-key message.
            let table = match plugin.get_ref() {
                toml::Value::String(file) => {
                    RawPluginTable { file: file.clone(), deadline: None, memory_mib: None, concurrency: None }
                }
                value @ toml::Value::Table(_) => match value.clone().try_into::<RawPluginTable>() {
                    Ok(table) => table,
                    Err(e) => {
                        let message = with_suggestion(e.message().trim());
                        self.error(offset, format!("plugin {name}: {message}"));
                        continue;
                    }
                },
                other => {
                    self.error(
                        offset,
                        format!("plugin {name}: expected a file name or a table, found {}", other.type_str()),
                    );
                    continue;
                }
            };
            let deadline = match table.deadline.as_deref().map(humantime::parse_duration) {
                Some(Ok(deadline)) => Some(deadline),
                Some(Err(e)) => {
                    self.error(offset, format!("plugin {name}: deadline: {e}"));
                    None
                }
                None => None,
            };
            if table.concurrency == Some(0) || table.memory_mib == Some(0) {
                self.error(offset, format!("plugin {name}: concurrency and memory_mib must be at least 1"));
            }
            if name == "noop" {
                self.error(offset, "`noop` is built in (external data): leave `transformation` out instead");
            }
            let decl = PluginDecl {
                name: name.clone(),
                file: root.join(&table.file),
                deadline,
                memory_mib: table.memory_mib,
                concurrency: table.concurrency,
            };
            plugins.insert(name.clone(), decl);
        }
        plugins
    }

    fn listeners(&mut self, raw: &[Spanned<RawListener>], plugins: &BTreeMap<String, PluginDecl>) -> Vec<ListenerDecl> {
        let mut listeners: Vec<ListenerDecl> = Vec::new();
        for listener in raw {
            let at = listener.span().start;
            let listener = listener.get_ref();
            let name = listener.name.get_ref();
            if !is_identifier(&name.replace('-', "_")) {
                self.error(
                    listener.name.span().start,
                    format!("listener `{name}`: names are letters, digits, `_` and `-`"),
                );
            } else if name == MONITOR {
                self.error(
                    listener.name.span().start,
                    "listener `monitor` is built in; turn it off with `[events] monitor = false`",
                );
            } else if listeners.iter().any(|l| &l.name == name) {
                self.error(listener.name.span().start, format!("listener `{name}` is declared twice"));
            }
            // The plugin's file is not checked here: a listener whose plugin
            // cannot be loaded is skipped when scheduling starts, not fatal.
            let plugin = listener.plugin.get_ref();
            if !plugins.contains_key(plugin) {
                let hint = did_you_mean(plugin, plugins.keys().map(String::as_str));
                self.error(
                    listener.plugin.span().start,
                    format!("listener `{name}`: plugin `{plugin}` is not declared in [plugins]{hint}"),
                );
            }
            let max_retries = match listener.max_retries.as_ref().map(|n| (*n.get_ref(), n.span().start)) {
                None | Some((-1, _)) => None,
                Some((n, _)) if n >= 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
                Some((n, offset)) => {
                    self.error(
                        offset,
                        format!("listener `{name}`: max_retries is -1 (unlimited) or at least 0, not {n}"),
                    );
                    None
                }
            };
            let backoff = match &listener.backoff {
                Some(text) => humantime::parse_duration(text.get_ref()).unwrap_or_else(|e| {
                    self.error(text.span().start, format!("listener `{name}`: backoff `{}`: {e}", text.get_ref()));
                    Duration::ZERO
                }),
                None => Duration::from_millis(100),
            };
            let mut config = Vec::new();
            for (key, value) in &listener.config {
                match value {
                    toml::Value::String(text) => config.push((key.clone(), text.clone())),
                    toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                        config.push((key.clone(), value.to_string()))
                    }
                    other => self.error(
                        at,
                        format!(
                            "listener `{name}`: config `{key}` must be a string, number or boolean, not {}",
                            other.type_str()
                        ),
                    ),
                }
            }
            listeners.push(ListenerDecl {
                name: name.clone(),
                plugin: plugin.clone(),
                config,
                max_retries,
                backoff,
                line: self.lines.line(at),
            });
        }
        listeners
    }

    fn view_type(
        &mut self,
        id: ViewTypeId,
        raw: &RawViewType,
        line: usize,
        by_name: &HashMap<String, ViewTypeId>,
        all: &[Spanned<RawViewType>],
        plugins: &BTreeMap<String, PluginDecl>,
    ) -> Option<ViewType> {
        let name = raw.name.get_ref().clone();
        let at = raw.name.span().start;
        let errors_before = self.diagnostics.len();

        let mut parameters = Vec::new();
        for parameter in &raw.parameters {
            let p = parameter.get_ref();
            if !is_identifier(&p.name) || TIME_VARIABLES.contains(&p.name.as_str()) {
                self.error(parameter.span().start, format!("{name}: `{}` cannot be a parameter name", p.name));
            } else if parameters.iter().any(|q: &Parameter| q.name == p.name) {
                self.error(parameter.span().start, format!("{name}: parameter `{}` is declared twice", p.name));
            }
            parameters.push(Parameter { name: p.name.clone(), kind: p.kind, comment: p.comment.clone() });
        }
        let mut fields = Vec::new();
        for field in &raw.fields {
            let f = field.get_ref();
            if !FIELD_KINDS.contains(&f.kind.as_str()) {
                let hint = did_you_mean(&f.kind, FIELD_KINDS.iter().copied());
                self.error(
                    field.span().start,
                    format!(
                        "{name}: field `{}` has unknown type `{}` (types: {}){hint}",
                        f.name,
                        f.kind,
                        FIELD_KINDS.join(", ")
                    ),
                );
            }
            if fields.iter().any(|g: &Field| g.name == f.name) {
                self.error(field.span().start, format!("{name}: field `{}` is declared twice", f.name));
            }
            fields.push(Field { name: f.name.clone(), kind: f.kind.clone(), comment: f.comment.clone() });
        }

        let time = raw.time.as_ref().and_then(|time| {
            let t = time.get_ref();
            match Dataset::parse(&t.frequency, &t.initial, t.timezone.as_deref()) {
                Ok(dataset) => Some(dataset),
                Err(e) => {
                    self.error(time.span().start, format!("{name}: time: {e}"));
                    None
                }
            }
        });
        let depth = time.as_ref().map_or(0, |dataset| dataset.frequency().depth());
        if let (Some(dataset), Some(raw_time)) = (&time, &raw.time) {
            let zone = dataset.timezone().name();
            if depth > 3 && zone != "UTC" && !zone.starts_with("Etc/") {
                // In the repeated hour of autumn, two instances would have
                // the same local path: two views, one directory.
                self.error(
                    raw_time.span().start,
                    format!("{name}: a {} dataset must use UTC or a fixed-offset Etc/ zone, not {zone}, so that no two instances share a path across a daylight-saving switch", dataset.frequency()),
                );
            }
        }

        let transformation = match &raw.transformation {
            None => Transformation::External,
            Some(transformation) => {
                let t = transformation.get_ref();
                let offset = transformation.span().start;
                for plugin in std::iter::once(&t.plugin).chain(&t.checksum) {
                    if plugin != "noop" && !plugins.contains_key(plugin) {
                        let hint = did_you_mean(plugin, plugins.keys().map(String::as_str));
                        self.error(offset, format!("{name}: plugin `{plugin}` is not declared in [plugins]{hint}"));
                    }
                }
                let mut config = Vec::new();
                for (key, value) in &t.config {
                    let value = match value {
                        toml::Value::String(text) => text.clone(),
                        toml::Value::Integer(n) => n.to_string(),
                        toml::Value::Float(x) => x.to_string(),
                        toml::Value::Boolean(b) => b.to_string(),
                        other => {
                            self.error(
                                offset,
                                format!(
                                    "{name}: config `{key}` must be a string, number or boolean, not {}",
                                    other.type_str()
                                ),
                            );
                            continue;
                        }
                    };
                    match ConfigValue::parse(&value) {
                        Ok(parsed) => config.push((key.clone(), parsed)),
                        Err(e) => self.error(offset, format!("{name}: config `{key}`: {e}")),
                    }
                }
                if t.plugin == "noop" {
                    Transformation::External
                } else {
                    Transformation::Plugin { plugin: t.plugin.clone(), config, checksum: t.checksum.clone() }
                }
            }
        };

        let default_path = default_path(&name, &parameters, depth);
        let (path_text, path_at) = match &raw.path {
            Some(path) => (path.get_ref().clone(), path.span().start),
            None => (default_path, at),
        };
        let path = match Template::parse(&path_text) {
            Ok(path) => {
                self.check_path(&name, &path, &path_text, path_at, &parameters, depth);
                Some(path)
            }
            Err(e) => {
                self.error(path_at, format!("{name}: path: {e}"));
                None
            }
        };

        let done_flag = raw.done_flag.as_ref().map(|f| f.get_ref().clone()).unwrap_or_else(|| "_SUCCESS".into());
        if done_flag.contains(['/', '\\'])
            || done_flag == "."
            || done_flag == ".."
            || done_flag.chars().any(char::is_control)
        {
            let offset = raw.done_flag.as_ref().map_or(at, |f| f.span().start);
            self.error(offset, format!("{name}: done_flag `{done_flag}` must be a plain file name"));
        }

        if raw.dependencies.len() > DEPENDENCY_LIMIT {
            self.error(at, format!("{name}: {} dependencies, more than {DEPENDENCY_LIMIT}", raw.dependencies.len()));
        }
        let mut dependencies = Vec::new();
        for dependency in &raw.dependencies {
            if let Some(resolved) = self.dependency(&name, dependency, &parameters, time.as_ref(), by_name, all) {
                dependencies.push(resolved);
            }
        }
        let mut seen = std::collections::HashSet::new();
        for dependency in &dependencies {
            if !seen.insert(dependency.name.as_str()) {
                self.error(at, format!("{name}: two dependencies are named `{}`; give one a `name`", dependency.name));
            }
        }
        if let (Transformation::Plugin { config, .. }, Some(transformation)) = (&transformation, &raw.transformation) {
            let parameter_names: Vec<&str> = parameters.iter().map(|p| p.name.as_str()).collect();
            let dependency_names: Vec<&str> = dependencies.iter().map(|d| d.name.as_str()).collect();
            for (key, value) in config {
                if let Err(e) = value.check(&parameter_names, &dependency_names, time.is_some()) {
                    self.error(transformation.span().start, format!("{name}: config `{key}`: {e}"));
                }
            }
        }

        if self.diagnostics.len() > errors_before {
            return None;
        }
        let path = path?;
        let format = raw.format.clone().unwrap_or_else(|| "csv".into());
        let schema_checksum = schema_checksum(&parameters, &fields, time.as_ref(), &path, &format, &done_flag);
        let package = name.split_once('/').map(|(package, _)| package.to_string()).unwrap_or_default();
        Some(ViewType {
            id,
            name,
            package,
            comment: raw.comment.clone(),
            parameters,
            fields,
            time,
            transformation,
            version: raw.version.clone(),
            dependencies,
            path,
            done_flag,
            format,
            materialize_once: raw.materialize_once,
            schema_checksum,
            line,
        })
    }

    /// Every view must get a path of its own, inside the storage root.
    fn check_path(
        &mut self,
        name: &str,
        path: &Template,
        text: &str,
        at: usize,
        parameters: &[Parameter],
        depth: usize,
    ) {
        for variable in path.variables() {
            let is_parameter = parameters.iter().any(|p| p.name == variable);
            let time_level = TIME_VARIABLES.iter().position(|t| *t == variable);
            match time_level {
                _ if is_parameter => {}
                Some(level) if level < depth => {}
                Some(_) => {
                    self.error(at, format!("{name}: path uses ${{{variable}}}, finer than the view type's frequency"))
                }
                None => self.error(at, format!("{name}: path uses ${{{variable}}}, which is not a parameter")),
            }
        }
        let used: Vec<&str> = path.variables().collect();
        let missing: Vec<&str> = parameters
            .iter()
            .map(|p| p.name.as_str())
            .chain(TIME_VARIABLES[..depth].iter().copied())
            .filter(|v| !used.contains(v))
            .collect();
        if !missing.is_empty() {
            let missing: Vec<String> = missing.iter().map(|v| format!("${{{v}}}")).collect();
            self.error(
                at,
                format!("{name}: path `{text}` must use {} so that every view has its own path", missing.join(", ")),
            );
        }
        let literal_parts = path.render(|_| Some("x"));
        if literal_parts.starts_with('/') || literal_parts.split('/').any(|part| part == ".." || part == ".") {
            self.error(
                at,
                format!("{name}: path `{text}` must stay inside the storage root (no leading `/`, no `..`)"),
            );
        }
        if literal_parts.contains('\\') || literal_parts.chars().any(char::is_control) {
            self.error(
                at,
                format!("{name}: path `{}` may not contain `\\` or control characters", text.escape_debug()),
            );
        }
        let shape = path_shape(path);
        if shape.first().is_none_or(|first| first.is_none()) || shape.iter().any(|c| c == &Some(String::new())) {
            self.error(
                at,
                format!("{name}: path `{text}` must start with a fixed directory name and have no empty components"),
            );
        }
        // A parameter value may hold any character but `/`: next to other
        // text in one component, two different values could give one path.
        for component in text.split('/') {
            let parameter_inside = parameters.iter().any(|p| component.contains(&format!("${{{}}}", p.name)));
            if parameter_inside && !parameters.iter().any(|p| component == format!("${{{}}}", p.name)) {
                self.error(
                    at,
                    format!("{name}: path component `{component}` must be a parameter alone, like `${{shop}}`"),
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn dependency(
        &mut self,
        name: &str,
        raw: &Spanned<RawDependency>,
        parameters: &[Parameter],
        time: Option<&Dataset>,
        by_name: &HashMap<String, ViewTypeId>,
        all: &[Spanned<RawViewType>],
    ) -> Option<Dependency> {
        let d = raw.get_ref();
        let at = d.view.span().start;
        let target_name = d.view.get_ref();
        let Some(&target) = by_name.get(target_name) else {
            let hint = closest(target_name, all.iter().map(|v| v.get_ref().name.get_ref().as_str()));
            let hint = if hint.is_empty() { String::new() } else { format!("; did you mean {}?", hint.join(" or ")) };
            self.error(at, format!("{name} depends on {target_name}, which is not declared{hint}"));
            return None;
        };
        let target_raw = all[target.0 as usize].get_ref();
        let errors_before = self.diagnostics.len();
        let context = format!("{name}: dependency on {target_name}");

        // Every parameter of the target gets values: explicitly, or from
        // the dependent's parameter of the same name and kind.
        let bindings_at = d.parameters.as_ref().map_or(at, |p| p.span().start);
        let raw_bindings: BTreeMap<&str, Option<RawBinding>> = d
            .parameters
            .iter()
            .flat_map(|p| p.get_ref().iter())
            .map(|(key, value)| (key.as_str(), RawBinding::from_value(value)))
            .collect();
        let target_parameters: Vec<(&str, ParameterKind)> =
            target_raw.parameters.iter().map(|p| (p.get_ref().name.as_str(), p.get_ref().kind)).collect();
        for (key, binding) in &raw_bindings {
            if !target_parameters.iter().any(|(name, _)| name == key) {
                let known: Vec<&str> = target_parameters.iter().map(|(name, _)| *name).collect();
                let known = names_or_none(&known);
                self.error(
                    bindings_at,
                    format!("{context}: {target_name} has no parameter `{key}` (its parameters: {known})"),
                );
            } else if binding.is_none() {
                self.error(bindings_at, format!("{context}: `{key}` must be a string or a list of strings"));
            }
        }
        let mut bindings = Vec::new();
        let mut fan_out: usize = 1;
        for &(target_parameter, kind) in &target_parameters {
            let (texts, each): (Vec<&String>, bool) = match raw_bindings.get(target_parameter) {
                Some(Some(RawBinding::One(text))) => (vec![text], false),
                Some(Some(RawBinding::Each(values))) if values.is_empty() => {
                    self.error(bindings_at, format!("{context}: `{target_parameter}` enumerates no values"));
                    continue;
                }
                Some(Some(RawBinding::Each(values))) => (values.iter().collect(), true),
                Some(None) => continue,
                None => match parameters.iter().find(|p| p.name == target_parameter) {
                    Some(own) if own.kind == kind => {
                        bindings.push(Binding::One(Template::parse(&format!("${{{target_parameter}}}")).ok()?));
                        continue;
                    }
                    Some(own) => {
                        self.error(at, format!("{context}: `{target_parameter}` is {} in {name} but {} in {target_name}; bind it explicitly", kind_name(own.kind), kind_name(kind)));
                        continue;
                    }
                    None => {
                        self.error(
                            at,
                            format!("{context}: parameter `{target_parameter}` of {target_name} has no value; bind it with parameters = {{ {target_parameter} = ... }}"),
                        );
                        continue;
                    }
                },
            };
            fan_out = fan_out.saturating_mul(texts.len());
            let mut templates: Vec<Template> = Vec::new();
            let mut literals = std::collections::HashSet::new();
            for text in texts {
                match Template::parse(text) {
                    Ok(template) => {
                        for variable in template.variables() {
                            if !parameters.iter().any(|p| p.name == variable) {
                                self.error(
                                    bindings_at,
                                    format!("{context}: `${{{variable}}}` is not a parameter of {name}"),
                                );
                            }
                        }
                        // A literal is checked now, not when the first view
                        // using it is instantiated.
                        if let Some(literal) = template.as_literal() {
                            match canonical_value(kind, literal) {
                                Ok(value) if !literals.insert(value.clone()) => {
                                    self.error(
                                        bindings_at,
                                        format!("{context}: `{target_parameter}` lists `{value}` twice"),
                                    );
                                }
                                Ok(_) => {}
                                Err(reason) => self.error(
                                    bindings_at,
                                    format!("{context}: `{target_parameter}` = `{}`: {reason}", literal.escape_debug()),
                                ),
                            }
                        }
                        templates.push(template);
                    }
                    Err(e) => self.error(bindings_at, format!("{context}: {e}")),
                }
            }
            bindings.push(if each { Binding::Each(templates) } else { Binding::One(templates.pop()?) });
        }
        if fan_out > FAN_OUT_LIMIT {
            self.error(
                bindings_at,
                format!(
                    "{context}: the enumerations give {fan_out} dependency views per view, more than {FAN_OUT_LIMIT}"
                ),
            );
        }

        let time_at = d.time.as_ref().map_or(at, |t| t.span().start);
        let selection = match d.time.as_ref().map(|t| parse_time_selection(t.get_ref())).transpose() {
            Ok(selection) => selection,
            Err(e) => {
                self.error(time_at, format!("{context}: {e}"));
                return None;
            }
        };
        let target_time = target_raw.time.as_ref().map(|t| t.get_ref());
        let time = match (target_time, selection) {
            (None, None) => TimeSelection::Timeless,
            (None, Some(_)) => {
                self.error(time_at, format!("{context}: {target_name} has no time dimension; remove `time`"));
                return None;
            }
            (Some(target_time), None) => {
                let same =
                    Dataset::parse(&target_time.frequency, &target_time.initial, target_time.timezone.as_deref());
                match (time, same) {
                    // Same frequency, start and zone: instance for instance.
                    (Some(own), Ok(theirs)) if *own == theirs => TimeSelection::Current { from: 0, to: 0 },
                    (Some(_), _) => {
                        self.error(at, format!("{context}: the two time dimensions differ; say which instances with `time` (current(n), current(a)..current(b), latest(n) or all)"));
                        return None;
                    }
                    (None, _) => {
                        self.error(at, format!("{context}: {name} has no time dimension; say which instance with `time = \"latest(n)\"`"));
                        return None;
                    }
                }
            }
            (Some(_), Some(TimeSelection::Latest(n))) => TimeSelection::Latest(n),
            (Some(_), Some(selection)) if time.is_none() => {
                let what = if selection == TimeSelection::All { "all" } else { "current()" };
                self.error(time_at, format!("{context}: {what} needs {name} to have a time dimension; use latest(n)"));
                return None;
            }
            (Some(target_time), Some(TimeSelection::All)) => {
                let coarser = target_time
                    .frequency
                    .parse::<Frequency>()
                    .ok()
                    .zip(time.map(Dataset::frequency))
                    .is_some_and(|(target, own)| target.approximate() > own.approximate());
                if coarser {
                    self.error(
                        time_at,
                        format!("{context}: `all` rolls up finer instances, but {target_name} is coarser than {name}"),
                    );
                    return None;
                }
                TimeSelection::All
            }
            (Some(_), Some(selection)) => selection,
        };
        if self.diagnostics.len() > errors_before {
            return None;
        }
        let short = target_name.rsplit('/').next().unwrap_or(target_name);
        let default_name: String =
            short.chars().take(1).flat_map(char::to_lowercase).chain(short.chars().skip(1)).collect();
        Some(Dependency {
            name: d.name.clone().unwrap_or(default_name),
            target,
            parameters: bindings,
            time,
            line: self.lines.line(raw.span().start),
        })
    }

    /// No two view types may have paths that could meet: equal, or one
    /// inside the other. Components with variables match anything.
    fn check_distinct_paths(&mut self, types: &[ViewType]) {
        let shapes: Vec<Vec<Option<String>>> = types.iter().map(|t| path_shape(&t.path)).collect();
        for (i, a) in shapes.iter().enumerate() {
            for (j, b) in shapes.iter().enumerate().skip(i + 1) {
                let overlap = a.iter().zip(b).all(|(x, y)| match (x, y) {
                    (Some(x), Some(y)) => x == y,
                    _ => true,
                });
                if overlap {
                    let (first, second) = (&types[i], &types[j]);
                    self.diagnostics.push(Diagnostic {
                        line: Some(second.line),
                        message: format!(
                            "{} and {} could share data: paths `{}` and `{}` overlap; give each its own directory",
                            first.name, second.name, first.path, second.path
                        ),
                    });
                }
            }
        }
    }

    /// Type-level cycles are errors, except a type depending on its own
    /// past (`current(-1)`: yesterday's snapshot), which ends at the
    /// initial instance.
    fn check_cycles(&mut self, types: &[ViewType]) {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Active,
            Done,
        }
        fn visit(at: usize, types: &[ViewType], marks: &mut [Mark], stack: &mut Vec<usize>) -> Option<Vec<usize>> {
            marks[at] = Mark::Active;
            stack.push(at);
            for dependency in &types[at].dependencies {
                let next = dependency.target.0 as usize;
                let into_the_past = matches!(dependency.time, TimeSelection::Current { to, .. } if to < 0);
                if next == at && into_the_past {
                    continue;
                }
                match marks[next] {
                    Mark::Active => {
                        let start = stack.iter().position(|&s| s == next).unwrap_or(0);
                        let mut cycle = stack[start..].to_vec();
                        cycle.push(next);
                        return Some(cycle);
                    }
                    Mark::New => {
                        if let Some(cycle) = visit(next, types, marks, stack) {
                            return Some(cycle);
                        }
                    }
                    Mark::Done => {}
                }
            }
            stack.pop();
            marks[at] = Mark::Done;
            None
        }
        let mut marks = vec![Mark::New; types.len()];
        for start in 0..types.len() {
            if marks[start] != Mark::New {
                continue;
            }
            if let Some(cycle) = visit(start, types, &mut marks, &mut Vec::new()) {
                let names: Vec<&str> = cycle.iter().map(|&i| types[i].name.as_str()).collect();
                let line = Some(types[cycle[0]].line);
                self.diagnostics
                    .push(Diagnostic { line, message: format!("dependency cycle: {}", names.join(" -> ")) });
                return;
            }
        }
    }
}

/// A path template's components: `Some(text)` for a fixed one, `None` for
/// one that holds a variable.
fn path_shape(path: &Template) -> Vec<Option<String>> {
    let marked = path.render(|_| Some("\u{1}"));
    marked.split('/').map(|component| (!component.contains('\u{1}')).then(|| component.to_string())).collect()
}

/// `package/Name`: a dotted lower-case package and a capitalized name.
fn check_type_name(name: &str) -> Result<(), String> {
    let guide = "view type names look like shop.datamart/DailySales";
    let Some((package, short)) = name.split_once('/') else {
        return Err(format!("`{name}` is not package/Name ({guide})"));
    };
    let package_ok = !package.is_empty()
        && package.split('.').all(|part| {
            part.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        });
    let short_ok = short.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && short.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !package_ok {
        return Err(format!("`{package}` in `{name}` is not a package: lower-case words separated by dots ({guide})"));
    }
    if !short_ok {
        return Err(format!(
            "`{short}` in `{name}` is not a view type name: a capital letter, then letters and digits ({guide})"
        ));
    }
    Ok(())
}

/// `shop/datamart/DailySales/${shop}/${YEAR}/${MONTH}/${DAY}`.
fn default_path(name: &str, parameters: &[Parameter], depth: usize) -> String {
    let mut path = name.replacen('.', "/", usize::MAX);
    for parameter in parameters {
        path.push_str(&format!("/${{{}}}", parameter.name));
    }
    for variable in &TIME_VARIABLES[..depth] {
        path.push_str(&format!("/${{{variable}}}"));
    }
    path
}

/// How far `current(n)` and `latest(n)` may reach, and how wide a range
/// may be: a minute dataset over ten years is five million instances.
const OFFSET_LIMIT: i64 = 10_000_000;
const RANGE_LIMIT: i64 = 100_000;

/// Most dependency views one declaration may give a view through its
/// enumerations, and most declarations a view type may have.
const FAN_OUT_LIMIT: usize = 100_000;
const DEPENDENCY_LIMIT: usize = 1_000;

/// `current(n)`, `current(a)..current(b)`, `latest(n)` or `all`.
fn parse_time_selection(text: &str) -> Result<TimeSelection, String> {
    let guide = "time is current(n), current(a)..current(b), latest(n) or all";
    let call = |text: &str, function: &str| -> Option<Result<i64, String>> {
        let inner = text.trim().strip_prefix(function)?.trim_start().strip_prefix('(')?.strip_suffix(')')?;
        Some(match inner.trim().parse::<i64>() {
            Ok(n) if n.abs() <= OFFSET_LIMIT => Ok(n),
            Ok(_) => Err(format!("`{}` is further than {OFFSET_LIMIT} instances away", inner.trim())),
            Err(_) => Err(format!("`{}` is not a whole number ({guide})", inner.trim())),
        })
    };
    let text = text.trim();
    if text == "all" {
        return Ok(TimeSelection::All);
    }
    if let Some((from, to)) = text.split_once("..") {
        let from = call(from, "current").ok_or_else(|| format!("`{text}`: {guide}"))??;
        let to = call(to, "current").ok_or_else(|| format!("`{text}`: {guide}"))??;
        if from > to {
            return Err(format!("`{text}`: the range runs backwards; write current({to})..current({from})"));
        }
        if to - from >= RANGE_LIMIT {
            return Err(format!("`{text}`: a range of more than {RANGE_LIMIT} instances"));
        }
        return Ok(TimeSelection::Current { from, to });
    }
    if let Some(n) = call(text, "current") {
        let n = n?;
        return Ok(TimeSelection::Current { from: n, to: n });
    }
    if let Some(n) = call(text, "latest") {
        let n = n?;
        if n > 0 {
            return Err(format!("`{text}`: latest(n) counts back from now, so n is 0 or negative"));
        }
        return Ok(TimeSelection::Latest(n));
    }
    Err(format!("`{text}`: {guide}"))
}

/// blake3 over a canonical rendering of what a view type stores: its
/// parameters, fields and their types, its time partitioning and storage.
/// Comments, key order and formatting of the file do not enter it.
fn schema_checksum(
    parameters: &[Parameter],
    fields: &[Field],
    time: Option<&Dataset>,
    path: &Template,
    format: &str,
    done_flag: &str,
) -> String {
    let canonical = serde_json::json!({
        "parameters": parameters.iter().map(|p| [p.name.as_str(), kind_name(p.kind)]).collect::<Vec<_>>(),
        "fields": fields.iter().map(|f| [f.name.as_str(), f.kind.as_str()]).collect::<Vec<_>>(),
        "time": time.map(|t| [t.frequency().to_string(), t.timezone().to_string()]),
        "path": path.to_string(),
        "format": format,
        "done_flag": done_flag,
    });
    blake3::hash(canonical.to_string().as_bytes()).to_hex().to_string()
}

fn kind_name(kind: ParameterKind) -> &'static str {
    match kind {
        ParameterKind::String => "string",
        ParameterKind::Int => "int",
        ParameterKind::Boolean => "boolean",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checksum(text: &str) -> String {
        let catalog = parse(text, Path::new("/project")).unwrap_or_else(|e| panic!("{e}"));
        catalog.find("s.raw/Orders").unwrap().schema_checksum.clone()
    }

    const BASE: &str = r#"
[[view]]
name = "s.raw/Orders"
comment = "orders"
parameters = [{ name = "shop" }]
fields = [{ name = "id", type = "string" }, { name = "amount", type = "decimal" }]
time = { frequency = "1d", initial = "2015-01-01" }
"#;

    #[test]
    fn schema_checksum_ignores_key_order_comments_and_documentation() {
        let reordered = r#"
# a comment
[[view]]
time = { initial = "2015-01-01", frequency = "1d" }   # inline comment
fields = [{ type = "string", name = "id" }, { type = "decimal", name = "amount", comment = "EUR" }]
parameters = [{ comment = "the shop", name = "shop" }]
comment = "other documentation"
name = "s.raw/Orders"
"#;
        assert_eq!(checksum(BASE), checksum(reordered));
        // The initial instance says which views exist, not what they hold.
        assert_eq!(checksum(BASE), checksum(&BASE.replace("2015-01-01", "2016-01-01")));
    }

    #[test]
    fn schema_checksum_changes_with_the_schema() {
        let base = checksum(BASE);
        let changes = [
            BASE.replace(r#"type = "decimal""#, r#"type = "double""#),
            BASE.replace(r#"name = "amount""#, r#"name = "total""#),
            BASE.replace(
                r#"{ name = "amount", type = "decimal" }"#,
                r#"{ name = "amount", type = "decimal" }, { name = "x", type = "int" }"#,
            ),
            BASE.replace(r#"[{ name = "shop" }]"#, r#"[{ name = "shop", type = "int" }]"#),
            BASE.replace(r#"frequency = "1d""#, r#"frequency = "1M""#),
            BASE.replace(r#"initial = "2015-01-01" }"#, r#"initial = "2015-01-01", timezone = "Europe/Berlin" }"#),
            format!("{BASE}format = \"parquet\"\n"),
            format!("{BASE}done_flag = \"\"\n"),
            format!("{BASE}path = \"orders/${{shop}}/${{YEAR}}/${{MONTH}}/${{DAY}}\"\n"),
        ];
        for changed in &changes {
            assert_ne!(checksum(changed), base, "{changed}");
        }
    }
}
