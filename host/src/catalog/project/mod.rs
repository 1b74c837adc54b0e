//! Loading `trellis.toml`: TOML into raw structs (unknown keys refused with
//! their line and the closest valid key), then every semantic check, with
//! all errors collected so that `trellis validate` can show them at once.
//!
//! This module holds the entry points and the order of the checks; each
//! check lives with its subject: `raw` (the file's shape), `settings`
//! (project-wide tables, plugins, listeners), `types` (one view type),
//! `dependencies` (one dependency declaration), `paths` (every view its own
//! directory), `graph` (no cycle between types), `checksum` (what a
//! type stores), `resources` (the files a transformation's logic
//! includes, read here, the only I/O of loading besides the file itself
//! and `settings`' and `types`' look at whether the storage roots and the
//! metastore name files)
//! and `engines` (`[engines.spark]`).

mod checksum;
mod coordinators;
mod dependencies;
mod engines;
mod graph;
mod paths;
mod raw;
mod resources;
mod settings;
mod types;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use super::{Catalog, EvaluationTime, OnDependencyFailure, PROJECT_FILE, RetryPolicy, ViewTypeId};
use raw::{LineIndex, RawIncluded, RawProject, syntax_error};
use types::check_type_name;

/// One problem in the project file, with its line when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The included file it is in, as the include named it from the
    /// project directory; `None` for trellis.toml.
    pub file: Option<String>,
    pub line: Option<usize>,
    pub message: String,
    /// The plugin it is a problem of, if any: `GET /plugins` lists each
    /// plugin's problems by this, not by what the message says.
    pub plugin: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.as_deref().unwrap_or(PROJECT_FILE);
        match self.line {
            Some(line) => write!(f, "{file}:{line}: {}", self.message),
            None => write!(f, "{file}: {}", self.message),
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

/// Where the project in `dir` keeps its metastore, from its file alone,
/// neither validated nor its resources read: what a command looks at
/// before it loads the project, to find a server that holds it. `None`
/// when the file cannot be read or parsed (loading it says why).
pub fn metastore_path(dir: &Path) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string(dir.join(PROJECT_FILE)).ok()?;
    let raw: RawProject = raw::parse(&text).ok()?;
    let root = std::path::absolute(dir).ok()?;
    Some(settings::metastore_path(&root, raw.project.metastore.as_ref().map(|m| m.get_ref().as_str())))
}

/// Parses and validates a project file's text; `root` is its directory.
pub fn parse(text: &str, root: &Path) -> Result<Catalog, LoadError> {
    let mut lines = LineIndex::new(text);
    let mut raw: RawProject = raw::parse(text).map_err(|e| LoadError::Invalid(vec![syntax_error(&e, &lines)]))?;
    let includes = std::mem::take(&mut raw.include);
    let mut including = Including {
        root,
        lines: &mut lines,
        views: &mut raw.views,
        chain: Vec::new(),
        seen: HashSet::new(),
        diagnostics: Vec::new(),
    };
    including.include(&includes, None, 0, root);
    if !including.diagnostics.is_empty() {
        return Err(LoadError::Invalid(including.diagnostics));
    }
    let mut checker = Checker { lines: &lines, root, diagnostics: Vec::new() };
    let catalog = checker.check(raw, root);
    match catalog {
        Some(catalog) if checker.diagnostics.is_empty() => Ok(catalog),
        _ => Err(LoadError::Invalid(checker.diagnostics)),
    }
}

/// Reads the files `include` names (Oozie's `<include>`), each relative
/// to the file that names it, and adds their view types after the
/// project file's, their spans moved past the files before them so that a
/// problem names the file and line it is in. An included file may include
/// others; a file included again by another path is read once, a cycle is
/// refused.
struct Including<'a> {
    root: &'a Path,
    lines: &'a mut LineIndex,
    views: &'a mut Vec<toml::Spanned<raw::RawViewType>>,
    /// The files being included, outermost first, as canonical paths and names.
    chain: Vec<(PathBuf, String)>,
    seen: HashSet<PathBuf>,
    diagnostics: Vec<Diagnostic>,
}

impl Including<'_> {
    /// The includes of the file `from` (`None`: trellis.toml), whose spans
    /// start at `base`, and which is in `dir`.
    fn include(&mut self, includes: &[toml::Spanned<String>], from: Option<&str>, base: usize, dir: &Path) {
        for include in includes {
            let written = include.get_ref();
            let at = include.span().start + base;
            let problem = |message: String| Diagnostic {
                file: from.map(str::to_string),
                line: Some(self.lines.line(at)),
                message: format!("include `{written}`: {message}"),
                plugin: None,
            };
            let path = dir.join(written);
            let canonical = match std::fs::canonicalize(&path) {
                Ok(canonical) => canonical,
                Err(e) => {
                    let diagnostic = problem(format!("cannot read {}: {e}", path.display()));
                    self.diagnostics.push(diagnostic);
                    continue;
                }
            };
            let name = path.strip_prefix(self.root).unwrap_or(&path).display().to_string();
            if self.chain.iter().any(|(file, _)| *file == canonical) {
                let names: Vec<&str> = std::iter::once(PROJECT_FILE)
                    .chain(self.chain.iter().map(|(_, name)| name.as_str()))
                    .chain([name.as_str()])
                    .collect();
                let diagnostic = problem(format!("include cycle: {}", names.join(" -> ")));
                self.diagnostics.push(diagnostic);
                continue;
            }
            if !self.seen.insert(canonical.clone()) {
                continue;
            }
            let text = match std::fs::read_to_string(&canonical) {
                Ok(text) => text,
                Err(e) => {
                    let diagnostic = problem(format!("cannot read {}: {e}", path.display()));
                    self.diagnostics.push(diagnostic);
                    continue;
                }
            };
            let own_lines = LineIndex::new(&text);
            let included: RawIncluded = match toml::from_str(&text) {
                Ok(included) => included,
                Err(e) => {
                    let mut diagnostic = syntax_error(&e, &own_lines);
                    diagnostic.file = Some(name);
                    self.diagnostics.push(diagnostic);
                    continue;
                }
            };
            let own_base = self.lines.add(name.clone(), &text);
            self.views.extend(included.views.into_iter().map(|view| raw::shifted(view, own_base)));
            self.chain.push((canonical, name.clone()));
            let own_dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| dir.to_path_buf());
            self.include(&included.include, Some(&name), own_base, &own_dir);
            self.chain.pop();
        }
    }
}

/// From this many view types on, loading uses a second thread: below it,
/// starting one costs more than it saves.
const PARALLEL_FROM: usize = 2_000;

/// Collects diagnostics while the raw project is turned into a catalog.
/// Its checks are methods spread over this module's files, one file per
/// subject; every one records problems here rather than stopping at the
/// first.
struct Checker<'a> {
    lines: &'a LineIndex,
    /// The project directory, which resources are read from.
    root: &'a Path,
    diagnostics: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn error(&mut self, offset: usize, message: impl Into<String>) {
        let line = Some(self.lines.line(offset));
        let file = self.lines.file(offset).map(str::to_string);
        self.diagnostics.push(Diagnostic { file, line, message: message.into(), plugin: None });
    }

    fn check(&mut self, raw: RawProject, root: &Path) -> Option<Catalog> {
        let settings = self.settings(&raw, root);
        let plugins = self.plugins(&raw.plugins, root);
        // What a view type does not set itself comes from `[defaults]` (or,
        // when those have errors already reported, their own defaults).
        let (retry, on_dependency_failure) = settings.as_ref().map_or(
            (
                RetryPolicy { retries: 3, backoff: settings::DEFAULT_BACKOFF, retry_panics: false },
                OnDependencyFailure::Continue,
            ),
            |s| (s.retry, s.on_dependency_failure),
        );
        let project = types::Project { plugins: &plugins, retry, on_dependency_failure, settings: settings.as_ref() };

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

        // Each type is checked on its own: the second half on a thread of
        // its own, into a checker of its own, whose diagnostics follow the
        // first half's, as one loop would give them.
        let check_types = |checker: &mut Checker<'_>, from: usize, to: usize| {
            let mut types = Vec::with_capacity(to - from);
            for (index, view) in raw.views.iter().enumerate().take(to).skip(from) {
                let line = checker.lines.line(view.span().start);
                let id = ViewTypeId(index as u32);
                if let Some(view_type) = checker.view_type(id, view.get_ref(), line, &by_name, &raw.views, project) {
                    types.push(view_type);
                }
            }
            types
        };
        let total = raw.views.len();
        let (mut types, rest) = if total < PARALLEL_FROM {
            (check_types(self, 0, total), None)
        } else {
            let (lines, root) = (self.lines, self.root);
            std::thread::scope(|scope| {
                let second = scope.spawn(|| {
                    let mut checker = Checker { lines, root, diagnostics: Vec::new() };
                    let types = check_types(&mut checker, total / 2, total);
                    (types, checker.diagnostics)
                });
                let first = check_types(self, 0, total / 2);
                (first, Some(second.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))))
            })
        };
        if let Some((more, diagnostics)) = rest {
            types.extend(more);
            self.diagnostics.extend(diagnostics);
        }
        if types.len() != raw.views.len() {
            return None;
        }
        self.check_cycles(&types);
        self.check_distinct_paths(&types, settings.as_ref().map(|s| s.storage.as_path()));
        let listeners = self.listeners(&raw.listeners, &plugins);
        let settings = settings?;
        self.check_s3_used(&raw, &settings, &types);
        // A coordinator evaluates as Oozie does by default (seed 002: the
        // action's actual time), unless the project or it says otherwise.
        let coordinators = self.coordinators(
            &raw.coordinators,
            &by_name,
            raw.project.evaluation_time.unwrap_or(EvaluationTime::Actual),
        );
        Some(Catalog { root: root.to_path_buf(), settings, plugins, types, by_name, listeners, coordinators })
    }
}
