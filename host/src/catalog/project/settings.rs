//! The project-wide tables: `[project]`, `[defaults]` and `[events]` into
//! `Settings` (with their defaults), `[plugins]` and `[[listener]]`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::raw::{RawDefaults, RawListener, RawPluginTable, RawProject, RawSettings, with_suggestion};
use super::{Checker, Diagnostic};
use crate::catalog::storage::{S3_KEYS, is_credential, is_http, lexical};
use crate::catalog::template::is_identifier;
use crate::catalog::{
    EvaluationTime, EventSettings, ListenerDecl, MONITOR, OutputCap, OwnOutputCap, PluginDecl, RetryPolicy, S3Options,
    Settings, StorageUrl, did_you_mean,
};

/// The largest `[project.s3] cache_mib`: its bytes still fit in 64 bits (an exbibyte).
const MAX_CACHE_MIB: u64 = 1 << 40;

/// The delay before a first retry when neither `[defaults]` nor the view
/// type says; it doubles with each retry.
pub(super) const DEFAULT_BACKOFF: Duration = Duration::from_millis(100);

/// Where a project in `root` keeps its metastore: `[project] metastore`,
/// else `.trellis/metastore`.
pub(super) fn metastore_path(root: &Path, declared: Option<&str>) -> std::path::PathBuf {
    lexical(&root.join(declared.unwrap_or(".trellis/metastore")))
}

impl Checker<'_> {
    /// `[project]`, `[defaults]` and `[events]`, with their defaults; the
    /// storage root must be a directory of its own.
    pub(super) fn settings(&mut self, raw: &RawProject, root: &Path) -> Option<Settings> {
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
        let events = self.event_settings(raw)?;
        let defaults = &raw.defaults;
        let (output, memory_budget_mib) = self.default_caps(defaults);
        let backoff = match &defaults.backoff {
            Some(text) => humantime::parse_duration(text.get_ref()).unwrap_or_else(|e| {
                self.error(text.span().start, format!("defaults.backoff `{}`: {e}", text.get_ref()));
                DEFAULT_BACKOFF
            }),
            None => DEFAULT_BACKOFF,
        };
        let retries = defaults.retries.unwrap_or(3);
        let retry = RetryPolicy { retries, backoff, retry_panics: defaults.retry_panics.unwrap_or(false) };
        let declared = &raw.project;
        let storage_url = self.project_storage(declared, root);
        let s3 = self.s3_options(declared.s3.as_ref());
        let settings = Settings {
            events,
            name: declared
                .name
                .clone()
                .unwrap_or_else(|| root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()),
            storage: storage_url.as_ref().map_or_else(|| lexical(&root.join("data")), StorageUrl::root),
            storage_url: storage_url.clone().unwrap_or_else(|| StorageUrl::Local(lexical(&root.join("data")))),
            storage_line: declared.storage.as_ref().map(|s| self.lines.line(s.span().start)),
            s3,
            metastore: metastore_path(root, declared.metastore.as_ref().map(|m| m.get_ref().as_str())),
            evaluation_time: declared.evaluation_time.unwrap_or(EvaluationTime::Present),
            retries,
            retry,
            on_dependency_failure: defaults.on_dependency_failure.unwrap_or_default(),
            concurrency: raw.defaults.concurrency.unwrap_or(4).max(1),
            deadline,
            memory_mib: raw.defaults.memory_mib,
            memory_budget_mib: memory_budget_mib.map(|mib| usize::try_from(mib).unwrap_or(usize::MAX)),
            output,
            spark: self.spark(raw.engines.spark.as_ref(), root),
        };
        self.check_directories(declared, root, &settings, storage_url.is_some());
        if settings.storage_url.is_local()
            && storage_url.is_some()
            && (root.starts_with(&settings.storage) || settings.metastore.starts_with(&settings.storage))
        {
            // Publishing a view replaces its directory: the storage root
            // must never hold the project file, plugins or the metastore.
            self.diagnostics.push(Diagnostic {
                file: None,
                line: None,
                message:
                    "project.storage must be a directory of its own, holding neither the project nor the metastore"
                        .into(),
                plugin: None,
            });
        }
        // A refused storage root (reported) is no root to check a view
        // type's own against.
        storage_url.map(|_| settings)
    }

    /// `[project] storage`, typed; `None` when it is refused (reported).
    fn project_storage(&mut self, declared: &RawSettings, root: &Path) -> Option<StorageUrl> {
        let Some(text) = &declared.storage else { return Some(StorageUrl::Local(lexical(&root.join("data")))) };
        match StorageUrl::parse(text.get_ref(), root) {
            Ok(url) => Some(url),
            Err(e) => {
                self.error(text.span().start, format!("project.storage {:?}: {e}", text.get_ref()));
                None
            }
        }
    }

    /// `[project.s3]`, each key checked on its line. Credentials are
    /// refused whatever their spelling, never echoed: they come from the
    /// standard AWS chain.
    fn s3_options(&mut self, raw: Option<&Spanned<BTreeMap<String, Spanned<toml::Value>>>>) -> S3Options {
        let mut options = S3Options::default();
        let Some(table) = raw else { return options };
        let mut allow_http_at = None;
        for (key, value) in table.get_ref() {
            let at = value.span().start;
            let value = value.get_ref();
            if is_credential(key) {
                self.error(
                    at,
                    format!(
                        "project.s3.{key}: credentials never go in trellis.toml; trellis takes them from the standard AWS chain (environment, profile, web identity)"
                    ),
                );
                continue;
            }
            let expected = |kind: &str| format!("project.s3.{key} must be {kind}, not {}", value.type_str());
            match (key.as_str(), value) {
                ("endpoint", toml::Value::String(endpoint)) => match endpoint_problem(endpoint) {
                    Some(problem) => self.error(at, format!("project.s3.endpoint {endpoint:?}: {problem}")),
                    None => options.endpoint = Some(endpoint.clone()),
                },
                ("region", toml::Value::String(region)) => {
                    if region.is_empty() || region.chars().any(|c| c.is_whitespace() || c.is_control()) {
                        self.error(
                            at,
                            format!("project.s3.region {region:?} must be a region's name, like `us-east-1`"),
                        );
                    } else {
                        options.region = Some(region.clone());
                    }
                }
                ("path_style", toml::Value::Boolean(b)) => options.path_style = Some(*b),
                ("allow_http", toml::Value::Boolean(b)) => {
                    options.allow_http = Some(*b);
                    allow_http_at = Some(at);
                }
                ("poll_interval", toml::Value::String(text)) => match humantime::parse_duration(text) {
                    Ok(interval) if interval >= std::time::Duration::from_millis(100) => {
                        options.poll_interval = Some(interval);
                    }
                    Ok(_) => self.error(at, format!("project.s3.poll_interval {text:?} is under 100ms")),
                    Err(e) => self.error(at, format!("project.s3.poll_interval {text:?} is not a duration: {e}")),
                },
                ("cache_mib", toml::Value::Integer(mib)) => match u64::try_from(*mib) {
                    Ok(mib) if (1..=MAX_CACHE_MIB).contains(&mib) => options.cache_mib = Some(mib),
                    _ => self.error(
                        at,
                        format!("project.s3.cache_mib must be a number of MiB from 1 to {MAX_CACHE_MIB}, not {mib}"),
                    ),
                },
                ("cache_mib", _) => self.error(at, expected("a whole number of MiB")),
                ("grace", toml::Value::String(text)) => match humantime::parse_duration(text) {
                    Ok(grace) => options.grace = Some(grace),
                    Err(e) => {
                        self.error(at, format!("project.s3.grace {text:?}: not a duration (like `1h` or `30min`): {e}"))
                    }
                },
                ("endpoint" | "region" | "poll_interval" | "grace", _) => self.error(at, expected("a string")),
                ("path_style" | "allow_http", _) => self.error(at, expected("true or false")),
                _ => {
                    let known: Vec<String> = S3_KEYS.iter().map(|k| format!("`{k}`")).collect();
                    let message = format!("unknown field `{key}`, expected one of {}", known.join(", "));
                    self.error(at, format!("project.s3: {}", with_suggestion(&message)));
                }
            }
        }
        if let (Some(false), Some(endpoint), Some(at)) = (options.allow_http, &options.endpoint, allow_http_at)
            && is_http(endpoint)
        {
            self.error(
                at,
                format!(
                    "project.s3.allow_http is false, but endpoint {endpoint:?} is plain HTTP; use an https:// endpoint, or allow_http = true"
                ),
            );
        }
        options
    }

    /// `[project.s3]` when no storage root is on S3 would do nothing: refused.
    pub(super) fn check_s3_used(&mut self, raw: &RawProject, settings: &Settings, types: &[crate::catalog::ViewType]) {
        let Some(table) = &raw.project.s3 else { return };
        let on_s3 = |url: &StorageUrl| matches!(url, StorageUrl::S3(_));
        if !on_s3(&settings.storage_url) && !types.iter().any(|t| t.storage.as_ref().is_some_and(on_s3)) {
            self.error(
                table.span().start,
                "project.s3: every storage root is a local directory, so these options would do nothing; remove [project.s3], or set storage to an s3:// URL",
            );
        }
    }

    /// `[events]`: what the monitor keeps, and how long a shutdown waits for listeners.
    fn event_settings(&mut self, raw: &RawProject) -> Option<EventSettings> {
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
        Some(EventSettings {
            monitor: raw.events.monitor.unwrap_or(true),
            history: raw.events.history.unwrap_or(10_000),
            max: raw.events.max.unwrap_or(1_000_000).max(1),
            drain,
        })
    }

    /// The default output cap and the memory budget of `[defaults]`.
    fn default_caps(&mut self, defaults: &RawDefaults) -> (OutputCap, Option<u64>) {
        let value = |n: &Option<Spanned<u64>>| n.as_ref().map(|n| *n.get_ref());
        let output = match output_cap(value(&defaults.output_mib), value(&defaults.output_entries)) {
            Ok(own) => OutputCap::default().with(own),
            Err((key, message)) => {
                let spanned = if key == "output_mib" { &defaults.output_mib } else { &defaults.output_entries };
                self.error(spanned.as_ref().map_or(0, |n| n.span().start), format!("defaults.{message}"));
                OutputCap::default()
            }
        };
        let memory_budget_mib = match &defaults.memory_budget_mib {
            Some(mib) if *mib.get_ref() == 0 => {
                self.error(mib.span().start, "defaults.memory_budget_mib must be at least 1");
                None
            }
            mib => mib.as_ref().map(|mib| *mib.get_ref()),
        };
        (output, memory_budget_mib)
    }

    /// The storage root and the metastore are directories: a setting that
    /// names a file (every view would be found without data) or puts the
    /// metastore's files among the project's is refused, at its line.
    fn check_directories(&mut self, declared: &RawSettings, root: &Path, settings: &Settings, storage_parsed: bool) {
        if let Some(storage) = &declared.storage
            && storage_parsed
            && settings.storage_url.is_local()
            && settings.storage.exists()
            && !settings.storage.is_dir()
        {
            self.error(
                storage.span().start,
                format!(
                    "project.storage `{}` is a file; the storage root is a directory (created when missing)",
                    storage.get_ref()
                ),
            );
        }
        let Some(metastore) = &declared.metastore else { return };
        let text = metastore.get_ref();
        let problem = if text.trim().is_empty() {
            Some("is empty; name a directory of its own (by default `.trellis/metastore`)".to_string())
        } else if root.starts_with(&settings.metastore) {
            Some(format!(
                "`{text}` is the project directory{}; the metastore needs a directory of its own (by default `.trellis/metastore`)",
                if settings.metastore == root { "" } else { " or one that holds it" }
            ))
        } else if settings.metastore.exists() && !settings.metastore.is_dir() {
            Some(format!("`{text}` is a file; the metastore is a directory (created when missing)"))
        } else {
            None
        };
        if let Some(problem) = problem {
            self.error(metastore.span().start, format!("project.metastore {problem}"));
        }
    }

    pub(super) fn plugins(
        &mut self,
        raw: &BTreeMap<String, Spanned<toml::Value>>,
        root: &Path,
    ) -> BTreeMap<String, PluginDecl> {
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

    pub(super) fn listeners(
        &mut self,
        raw: &[Spanned<RawListener>],
        plugins: &BTreeMap<String, PluginDecl>,
    ) -> Vec<ListenerDecl> {
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
            let config = self.listener_config(at, name, &listener.config);
            let allow_http = self.allow_http(name, &listener.allow_http);
            listeners.push(ListenerDecl {
                name: name.clone(),
                plugin: plugin.clone(),
                config,
                max_retries,
                backoff,
                allow_http,
                line: self.lines.line(at),
            });
        }
        listeners
    }
    /// A listener's config: scalars, as text.
    fn listener_config(&mut self, at: usize, name: &str, raw: &BTreeMap<String, toml::Value>) -> Vec<(String, String)> {
        let mut config = Vec::new();
        for (key, value) in raw {
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
        config
    }

    /// The hosts a listener may reach over plain HTTP.
    fn allow_http(&mut self, name: &str, raw: &[Spanned<String>]) -> Vec<crate::model::AllowedHost> {
        let mut allow_http = Vec::new();
        for host in raw {
            match host.get_ref().parse() {
                Ok(host) => allow_http.push(host),
                Err(reason) => self.error(host.span().start, format!("listener `{name}`: allow_http {reason}")),
            }
        }
        allow_http
    }
}

/// What is wrong with an `[project.s3] endpoint`, if anything: it is an
/// `http://` or `https://` URL with a host, and no credentials in it.
fn endpoint_problem(endpoint: &str) -> Option<&'static str> {
    let lower = endpoint.to_ascii_lowercase();
    let Some(rest) = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://")) else {
        return Some("must be an http:// or https:// URL");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some(
            "may not hold credentials; trellis takes them from the standard AWS chain (environment, profile, web identity)",
        );
    }
    if authority.is_empty()
        || authority.starts_with(':')
        || endpoint.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Some("must name a host, like http://127.0.0.1:9000");
    }
    if rest.contains(['?', '#']) {
        return Some("takes no `?query` or `#fragment`");
    }
    None
}

/// The cap that `output_mib` (in MiB) and `output_entries` give, or the
/// key that is out of range with what is wrong.
pub(super) fn output_cap(mib: Option<u64>, entries: Option<u64>) -> Result<OwnOutputCap, (&'static str, String)> {
    let bytes = match mib {
        Some(0) => return Err(("output_mib", "output_mib must be at least 1".into())),
        Some(mib) => Some(mib.checked_mul(1 << 20).ok_or(("output_mib", format!("output_mib {mib} is too large")))?),
        None => None,
    };
    if entries == Some(0) {
        return Err(("output_entries", "output_entries must be at least 1".into()));
    }
    Ok(OwnOutputCap { bytes, entries })
}
