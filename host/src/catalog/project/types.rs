//! One `[[view]]` into a `ViewType`: its name, parameters, fields, time
//! dimension, transformation and done flag, with its path (see `paths`),
//! dependencies (see `dependencies`) and resources (see `resources`)
//! checked by their own files.

use std::collections::{BTreeMap, HashMap};

use toml::Spanned;

use super::Checker;
use super::checksum::schema_checksum;
use super::dependencies::DEPENDENCY_LIMIT;
use super::paths::default_path;
use super::raw::{RawTransformation, RawViewType};
use super::settings::output_cap;
use crate::catalog::expression::ConfigValue;
use crate::catalog::template::{Template, is_identifier};
use crate::catalog::time::Dataset;
use crate::catalog::{
    Dependency, Field, OnDependencyFailure, Parameter, PluginDecl, RetryPolicy, Settings, StorageUrl, TIME_VARIABLES,
    Transformation, ViewType, ViewTypeId, did_you_mean,
};

/// The field types a schema may use.
const FIELD_KINDS: [&str; 9] = ["string", "int", "long", "double", "decimal", "boolean", "date", "timestamp", "bytes"];

/// What every view type is checked against: the declared plugins, and what
/// `[defaults]` gives a type that does not set its own.
#[derive(Clone, Copy)]
pub(super) struct Project<'a> {
    pub(super) plugins: &'a BTreeMap<String, PluginDecl>,
    pub(super) retry: RetryPolicy,
    pub(super) on_dependency_failure: OnDependencyFailure,
    /// The project's settings, which a type's own storage root is checked
    /// against; `None` when they have problems (reported).
    pub(super) settings: Option<&'a Settings>,
}

impl Checker<'_> {
    pub(super) fn view_type(
        &mut self,
        id: ViewTypeId,
        raw: &RawViewType,
        line: usize,
        by_name: &HashMap<String, ViewTypeId>,
        all: &[Spanned<RawViewType>],
        project: Project<'_>,
    ) -> Option<ViewType> {
        let Project { plugins, retry: defaults, on_dependency_failure: on_failure, settings } = project;
        let name = raw.name.get_ref().clone();
        let at = raw.name.span().start;
        let errors_before = self.diagnostics.len();

        let parameters = self.parameters(&name, raw);
        let fields = self.fields(&name, raw);
        let time = self.time(&name, raw);
        // Declared but not understood: reported above, and not a reason for more problems below.
        let time_invalid = raw.time.is_some() && time.is_none();
        let depth = time.as_ref().map_or(0, |dataset| dataset.frequency().depth());
        let retry = self.retry(&name, raw, defaults);
        let transformation = match &raw.transformation {
            None => Transformation::External,
            Some(transformation) => self.transformation(&name, transformation, plugins),
        };
        let known_depth = (!time_invalid).then_some(depth);
        let path = self.view_path(&name, raw, &parameters, depth, known_depth);
        let done_flag = self.done_flag(&name, raw);
        let storage = self.storage(&name, raw, settings);
        if raw.dependencies.len() > DEPENDENCY_LIMIT {
            self.error(at, format!("{name}: {} dependencies, more than {DEPENDENCY_LIMIT}", raw.dependencies.len()));
        }
        let incremental = raw.incremental.as_ref().is_some_and(|flag| *flag.get_ref());
        if let (true, Transformation::External, Some(flag)) = (incremental, &transformation, &raw.incremental) {
            self.error(
                flag.span().start,
                format!("{name}: `incremental = true` needs a transformation; external data is not transformed"),
            );
        }
        let scope = DependencyScope { parameters: &parameters, time: time.as_ref(), time_invalid, incremental };
        let dependencies = self.dependencies(&name, raw, scope, by_name, all);
        if let (Transformation::Plugin { config, .. }, Some(transformation)) = (&transformation, &raw.transformation) {
            let offset = transformation.span().start;
            self.check_config_references(&name, offset, config, &parameters, &dependencies, time.is_some());
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
            storage_root: storage.as_ref().map(StorageUrl::root),
            storage,
            storage_line: raw.storage.as_ref().map(|s| self.lines.line(s.span().start)),
            done_flag,
            format,
            materialize_once: raw.materialize_once,
            incremental,
            on_dependency_failure: raw.on_dependency_failure.unwrap_or(on_failure),
            retry,
            schema_checksum,
            line,
            file: self.lines.file(raw.name.span().start).map(str::to_string),
            transformation_line: raw.transformation.as_ref().map_or(line, |t| self.lines.line(t.span().start)),
        })
    }

    /// What the config's values refer to: the type's parameters, its
    /// dependencies by name, and the time only when it has one.
    fn check_config_references(
        &mut self,
        name: &str,
        offset: usize,
        config: &[(String, ConfigValue)],
        parameters: &[Parameter],
        dependencies: &[Dependency],
        timed: bool,
    ) {
        let parameter_names: Vec<&str> = parameters.iter().map(|p| p.name.as_str()).collect();
        let dependency_names: Vec<&str> = dependencies.iter().map(|d| d.name.as_str()).collect();
        for (key, value) in config {
            if let Err(e) = value.check(&parameter_names, &dependency_names, timed) {
                self.error(offset, format!("{name}: config `{key}`: {e}"));
            }
        }
    }

    /// The declared parameters, each with a usable name, once, and its
    /// declared values understood.
    fn parameters(&mut self, name: &str, raw: &RawViewType) -> Vec<Parameter> {
        let mut parameters = Vec::new();
        for parameter in &raw.parameters {
            let p = parameter.get_ref();
            if !is_identifier(&p.name) || TIME_VARIABLES.contains(&p.name.as_str()) {
                self.error(parameter.span().start, format!("{name}: `{}` cannot be a parameter name", p.name));
            } else if parameters.iter().any(|q: &Parameter| q.name == p.name) {
                self.error(parameter.span().start, format!("{name}: parameter `{}` is declared twice", p.name));
            }
            let values = match p.values.as_ref().map(|declared| crate::catalog::Values::declared(p.kind, declared)) {
                Some(Ok(values)) => Some(values),
                Some(Err(reason)) => {
                    self.error(parameter.span().start, format!("{name}: parameter `{}`: {reason}", p.name));
                    None
                }
                None => None,
            };
            parameters.push(Parameter { name: p.name.clone(), kind: p.kind, comment: p.comment.clone(), values });
        }
        parameters
    }

    /// The schema's fields, each of a known type and declared once.
    fn fields(&mut self, name: &str, raw: &RawViewType) -> Vec<Field> {
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
        fields
    }

    /// The time dimension, if declared and understood; finer than a day
    /// only in a zone without daylight-saving switches.
    fn time(&mut self, name: &str, raw: &RawViewType) -> Option<Dataset> {
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
        time
    }

    /// The retry policy: `[defaults]` overridden by the transformation's own.
    fn retry(&mut self, name: &str, raw: &RawViewType, defaults: RetryPolicy) -> RetryPolicy {
        // Retries belong to a transformation; external data is only looked at.
        let mut retry = defaults;
        if let Some(transformation) = &raw.transformation {
            let t = transformation.get_ref();
            retry.retries = t.retries.unwrap_or(retry.retries);
            retry.retry_panics = t.retry_panics.unwrap_or(retry.retry_panics);
            if let Some(text) = &t.backoff {
                match humantime::parse_duration(text) {
                    Ok(backoff) => retry.backoff = backoff,
                    Err(e) => {
                        self.error(transformation.span().start, format!("{name}: transformation backoff `{text}`: {e}"))
                    }
                }
            }
        }
        retry
    }

    /// A declared `[view.transformation]`: its plugins declared, its config
    /// understood, its output cap and resources checked; `noop` is external data.
    fn transformation(
        &mut self,
        name: &str,
        transformation: &Spanned<RawTransformation>,
        plugins: &BTreeMap<String, PluginDecl>,
    ) -> Transformation {
        let t = transformation.get_ref();
        let offset = transformation.span().start;
        for plugin in std::iter::once(&t.plugin).chain(&t.checksum) {
            if plugin != "noop" && !plugins.contains_key(plugin) {
                let hint = did_you_mean(plugin, plugins.keys().map(String::as_str));
                self.error(offset, format!("{name}: plugin `{plugin}` is not declared in [plugins]{hint}"));
            }
        }
        let config = self.config(name, offset, &t.config);
        let output = output_cap(t.output_mib, t.output_entries).unwrap_or_else(|(_, message)| {
            self.error(offset, format!("{name}: transformation {message}"));
            Default::default()
        });
        let resources = self.resources(name, &t.resources);
        if t.plugin == "noop" {
            if let Some(first) = t.resources.first() {
                self.error(
                    first.span().start,
                    format!("{name}: resources belong to a transformation plugin; external data (noop) has none"),
                );
            }
            Transformation::External
        } else {
            let checksum = t.checksum.clone();
            Transformation::Plugin { plugin: t.plugin.clone(), config, checksum, output, resources }
        }
    }

    /// The transformation's config: scalars only, each value an expression
    /// that parses (what it may refer to is checked once the dependencies are known).
    fn config(&mut self, name: &str, offset: usize, raw: &BTreeMap<String, toml::Value>) -> Vec<(String, ConfigValue)> {
        let mut config = Vec::new();
        for (key, value) in raw {
            let value = match value {
                toml::Value::String(text) => text.clone(),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    self.error(
                        offset,
                        format!("{name}: config `{key}` must be a string, number or boolean, not {}", other.type_str()),
                    );
                    continue;
                }
            };
            match ConfigValue::parse(&value) {
                Ok(parsed) => config.push((key.clone(), parsed)),
                Err(e) => self.error(offset, format!("{name}: config `{key}`: {e}")),
            }
        }
        config
    }

    /// The path template, declared or the default one, checked against the
    /// parameters and (when it is known) the time's depth.
    fn view_path(
        &mut self,
        name: &str,
        raw: &RawViewType,
        parameters: &[Parameter],
        depth: usize,
        known_depth: Option<usize>,
    ) -> Option<Template> {
        let default_path = default_path(name, parameters, depth);
        let (path_text, path_at) = match &raw.path {
            Some(path) => (path.get_ref().clone(), path.span().start),
            None => (default_path, raw.name.span().start),
        };
        match Template::parse(&path_text) {
            Ok(path) => {
                // Without its time the type's depth is unknown: what the
                // path's time variables would be measured against is the
                // problem already reported, not the path.
                self.check_path(name, &path, &path_text, path_at, parameters, known_depth);
                Some(path)
            }
            Err(e) => {
                self.error(path_at, format!("{name}: path: {e}"));
                None
            }
        }
    }

    /// The type's `storage`, a root of its own, typed as `[project] storage`
    /// is; a local one is a directory of its own as the project's is, and no
    /// root of a type holds the project's or sits in trellis's names in it.
    fn storage(&mut self, name: &str, raw: &RawViewType, settings: Option<&Settings>) -> Option<StorageUrl> {
        let text = raw.storage.as_ref()?;
        let (written, at) = (text.get_ref(), text.span().start);
        let url = match StorageUrl::parse(written, self.root) {
            Ok(url) => url,
            Err(e) => {
                self.error(at, format!("{name}: storage {written:?}: {e}"));
                return None;
            }
        };
        let reported = self.diagnostics.len();
        if let StorageUrl::Local(path) = &url {
            if path.exists() && !path.is_dir() {
                self.error(
                    at,
                    format!(
                        "{name}: storage {written:?} is a file; a storage root is a directory (created when missing)"
                    ),
                );
            }
            if self.root.starts_with(path) || settings.is_some_and(|s| s.metastore.starts_with(path)) {
                self.error(
                    at,
                    format!(
                        "{name}: storage {written:?} must be a directory of its own, holding neither the project nor the metastore"
                    ),
                );
            }
        }
        let own = url.root();
        // One line for a root: holding the project holds its storage too.
        if let Some(project) = settings.map(|s| s.storage.as_path()).filter(|_| self.diagnostics.len() == reported) {
            let reserved = own.strip_prefix(project).ok().and_then(|inside| {
                let first = inside.components().next()?.as_os_str().to_string_lossy().into_owned();
                first.starts_with('.').then_some(first)
            });
            if own != project && project.starts_with(&own) {
                self.error(
                    at,
                    format!(
                        "{name}: storage {written:?} holds project.storage; give the type a root beside it, or leave storage out for the project's"
                    ),
                );
            } else if let Some(first) = reserved {
                self.error(
                    at,
                    format!(
                        "{name}: storage {written:?} is under `{first}` in project.storage: names starting with `.` at the top of a storage root are reserved for trellis"
                    ),
                );
            }
        }
        Some(url)
    }

    /// The done flag's file name, `_SUCCESS` unless declared; a plain name.
    fn done_flag(&mut self, name: &str, raw: &RawViewType) -> String {
        let done_flag = raw.done_flag.as_ref().map(|f| f.get_ref().clone()).unwrap_or_else(|| "_SUCCESS".into());
        if done_flag.contains(['/', '\\'])
            || done_flag == "."
            || done_flag == ".."
            || done_flag.chars().any(char::is_control)
        {
            let offset = raw.done_flag.as_ref().map_or(raw.name.span().start, |f| f.span().start);
            self.error(offset, format!("{name}: done_flag `{done_flag}` must be a plain file name"));
        }
        done_flag
    }

    /// The dependencies, each resolved, read
    /// incrementally only by an incremental type, and each name used once.
    fn dependencies(
        &mut self,
        name: &str,
        raw: &RawViewType,
        scope: DependencyScope<'_>,
        by_name: &HashMap<String, ViewTypeId>,
        all: &[Spanned<RawViewType>],
    ) -> Vec<Dependency> {
        let DependencyScope { parameters, time, time_invalid, incremental } = scope;
        let at = raw.name.span().start;
        let mut dependencies = Vec::new();
        for dependency in &raw.dependencies {
            let resolved = self.dependency(name, dependency, parameters, time, time_invalid, by_name, all);
            if let Some(mut resolved) = resolved {
                match &dependency.get_ref().incremental {
                    Some(flag) if *flag.get_ref() && !incremental => self.error(
                        flag.span().start,
                        format!(
                            "{name}: dependency `{}` is read incrementally but the view type is not incremental; set `incremental = true` on the view",
                            resolved.name
                        ),
                    ),
                    Some(flag) => resolved.incremental = *flag.get_ref(),
                    None => resolved.incremental = incremental,
                }
                dependencies.push(resolved);
            }
        }
        let mut seen = std::collections::HashSet::new();
        for dependency in &dependencies {
            if !seen.insert(dependency.name.as_str()) {
                self.error(at, format!("{name}: two dependencies are named `{}`; give one a `name`", dependency.name));
            }
        }
        dependencies
    }
}

/// What a view type's dependencies are resolved against.
#[derive(Clone, Copy)]
struct DependencyScope<'a> {
    parameters: &'a [Parameter],
    time: Option<&'a Dataset>,
    /// A time was declared but not understood (already reported).
    time_invalid: bool,
    incremental: bool,
}

/// `package/Name`: a dotted lower-case package and a capitalized name.
pub(super) fn check_type_name(name: &str) -> Result<(), String> {
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
