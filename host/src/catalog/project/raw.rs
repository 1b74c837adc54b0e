//! The shape of `trellis.toml` as serde reads it: raw structs that refuse
//! unknown keys, and the turning of TOML's and serde's errors into
//! diagnostics with a line and, for an unknown key, the closest valid one.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::Diagnostic;
use crate::catalog::{EvaluationTime, OnDependencyFailure, ParameterKind, closest};

/// Parses the file. A large one is parsed in parts, on two threads: the
/// longest run of `[[view]]` tables (up to a table that is not a view's) is
/// cut at `[[view]]` lines into chunks of about [`CHUNK_BYTES`], each parsed
/// on its own and its spans moved to where the chunk is in the file; the
/// rest of the file is parsed with that run blanked out (every byte but
/// newlines a space), so that its spans stay the file's. Parsing is most of
/// loading a project of many view types, and TOML's document tree is many
/// times the text: parts keep it small and reuse its memory.
///
/// The parts are used only when together they are the whole file's parse,
/// which holds when:
/// - every table of the run is a view's, its headers spelled plainly
///   (`[[view]]`, `[view.x]`, `[[view.x]]`), so that each of its sub-tables
///   belongs to the `[[view]]` before it in the same chunk; a header not
///   spelled plainly anywhere, or a view's table outside a run, and the
///   file is parsed whole ([`longest_view_run`]);
/// - the run starts where the file's parser is between tables, not inside
///   a value that a multi-line array left open: the first line of the
///   blanked run is the header [`SENTINEL`], which parses only there, and
///   must come out an empty table; each chunk parses on its own, so each
///   ends between tables too;
/// - the rest defines no `view` at all (no other view, no `view = [...]`),
///   so that every view is the run's, in the file's order.
///
/// Otherwise, or when any part fails to parse, the whole file is parsed as
/// one, so that errors are always the whole file's. A multi-line string
/// could hide a header line: a file with one is parsed whole too.
pub(super) fn parse(text: &str) -> Result<RawProject, toml::de::Error> {
    match in_parts(text) {
        Some(raw) => Ok(raw),
        None => toml::from_str(text),
    }
}

/// The file parsed in parts, or `None` when that would not be the whole
/// file's parse (or it is small, or some part fails).
fn in_parts(text: &str) -> Option<RawProject> {
    let run = longest_view_run(text)?;
    let chunks = chunks(text, &run);
    let sentinel = run.end != text.len();
    let rest_text = if sentinel {
        let mut bytes: Vec<u8> = text[..run.start]
            .bytes()
            .chain(text[run.clone()].bytes().map(|b| if b == b'\n' { b'\n' } else { b' ' }))
            .chain(text[run.end..].bytes())
            .collect();
        // The run's first line is at least as long as `[[view]]`.
        bytes[run.start..run.start + SENTINEL.len()].copy_from_slice(SENTINEL.as_bytes());
        // Only ASCII bytes and whole lines were replaced: UTF-8 still.
        std::borrow::Cow::Owned(String::from_utf8(bytes).ok()?)
    } else {
        // Nothing follows the run: what precedes it must parse on its own.
        std::borrow::Cow::Borrowed(&text[..run.start])
    };
    let parse_chunks = |parity: usize| -> Option<Vec<Spanned<RawViewType>>> {
        let mut views = Vec::new();
        for chunk in chunks.iter().skip(parity).step_by(2) {
            let part: RawProject = toml::from_str(&text[chunk.clone()]).ok()?;
            views.extend(part.views.into_iter().map(|view| shifted(view, chunk.start)));
        }
        Some(views)
    };
    let parse_rest = || -> Option<RawProject> {
        let mut table = toml::de::DeTable::parse(&rest_text).ok()?;
        if table.get_ref().contains_key("view") {
            return None;
        }
        if sentinel {
            match table.get_mut().remove(SENTINEL_KEY).map(Spanned::into_inner) {
                Some(toml::de::DeValue::Table(mark)) if mark.is_empty() => {}
                _ => return None,
            }
        }
        RawProject::deserialize(toml::de::Deserializer::from(table)).ok()
    };
    let (rest, odd, even) = std::thread::scope(|scope| {
        let odd = scope.spawn(|| parse_chunks(1));
        let even = parse_chunks(0);
        let rest = parse_rest();
        (rest, odd.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), even)
    });
    let (mut rest, odd, even) = (rest?, odd?, even?);
    rest.views.extend(odd);
    rest.views.extend(even);
    rest.views.sort_by_key(|view| view.span().start);
    Some(rest)
}

/// Below this size a file is parsed in one part.
const SPLIT_FROM_BYTES: usize = 1 << 20;

/// About how much of the file one part is.
const CHUNK_BYTES: usize = 1 << 20;

/// Written over the start of the blanked run in the rest: a table header,
/// which TOML allows only between tables. Had the part before the run left
/// a value open (`x = [` and lines on), the header would be read as part
/// of that value and fail, as the whole file's parse would. Its key is no
/// key of a project's: a file that uses it is parsed whole, since the
/// header then clashes with it or does not come out empty.
const SENTINEL: &str = "[_split]";
const SENTINEL_KEY: &str = "_split";
const _: () = assert!(SENTINEL.len() <= "[[view]]".len());

/// What a line that starts with `[` is, as [`longest_view_run`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    /// `[[view]]`: a new view type.
    View,
    /// `[view.x]` or `[[view.x]]` (bare keys, dotted): a table of the last view.
    OfView,
    /// `[x]` or `[[x]]`, `x` bare keys, dotted, the first not `view`.
    Other,
    /// Spelled any other way (`[[ view ]]`, `["view"]`, `[view]`, an array
    /// on a line of its own): where it belongs is the parser's to say.
    Unknown,
}

/// The header on `line`, or `None` when the line does not start with `[`.
/// A comment may follow; TOML's whitespace is spaces and tabs.
fn header(line: &str) -> Option<Header> {
    let line = line.trim_matches([' ', '\t', '\r', '\n']);
    if !line.starts_with('[') {
        return None;
    }
    let line = line.split_once('#').map_or(line, |(header, _comment)| header.trim_end_matches([' ', '\t']));
    let (keys, array) = match line.strip_prefix("[[").and_then(|rest| rest.strip_suffix("]]")) {
        Some(keys) => (keys, true),
        None => match line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
            Some(keys) => (keys, false),
            None => return Some(Header::Unknown),
        },
    };
    let bare = |key: &str| !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !keys.split('.').all(bare) {
        return Some(Header::Unknown);
    }
    Some(match (keys.split_once('.'), array) {
        (Some(("view", _)), _) => Header::OfView,
        (None, true) if keys == "view" => Header::View,
        // `[view]` would make `view` a table: the whole file's parse says why not.
        (None, false) if keys == "view" => Header::Unknown,
        _ => Header::Other,
    })
}

/// The longest run of lines, from a `[[view]]` line on, with no table
/// header but a view's (`[[view]]`, `[view.x]`, `[[view.x]]`), or `None`
/// for a small file, one with a multi-line string, one with a header not
/// spelled plainly ([`Header::Unknown`]), or one with a view's table
/// outside a run (after another table, where it still belongs to the last
/// `[[view]]`, which the run's chunks cannot see).
fn longest_view_run(text: &str) -> Option<std::ops::Range<usize>> {
    if text.len() < SPLIT_FROM_BYTES || text.contains("\"\"\"") || text.contains("'''") {
        return None;
    }
    let mut best: Option<std::ops::Range<usize>> = None;
    let mut start = None;
    let mut offset = 0;
    let mut close = |start: &mut Option<usize>, end: usize| {
        if let Some(from) = start.take()
            && best.as_ref().is_none_or(|best| end - from > best.len())
        {
            best = Some(from..end);
        }
    };
    for line in text.split_inclusive('\n') {
        match header(line) {
            None => {}
            Some(Header::Unknown) => return None,
            Some(Header::View) => {
                start.get_or_insert(offset);
            }
            Some(Header::OfView) if start.is_none() => return None,
            Some(Header::OfView) => {}
            Some(Header::Other) => close(&mut start, offset),
        }
        offset += line.len();
    }
    close(&mut start, text.len());
    best
}

/// `run` cut at `[[view]]` lines into parts of about [`CHUNK_BYTES`].
fn chunks(text: &str, run: &std::ops::Range<usize>) -> Vec<std::ops::Range<usize>> {
    let mut chunks = Vec::new();
    let mut start = run.start;
    let mut offset = run.start;
    for line in text[run.clone()].split_inclusive('\n') {
        if offset - start >= CHUNK_BYTES && header(line) == Some(Header::View) {
            chunks.push(start..offset);
            start = offset;
        }
        offset += line.len();
    }
    chunks.push(start..run.end);
    chunks
}

/// A view parsed from a part of the file, with its spans moved by `by`,
/// where the part starts in the file.
pub(super) fn shifted(view: Spanned<RawViewType>, by: usize) -> Spanned<RawViewType> {
    fn moved<T>(spanned: Spanned<T>, by: usize) -> Spanned<T> {
        let span = spanned.span();
        Spanned::new(span.start + by..span.end + by, spanned.into_inner())
    }
    let span = view.span();
    let mut raw = view.into_inner();
    raw.name = moved(raw.name, by);
    raw.parameters = raw.parameters.into_iter().map(|p| moved(p, by)).collect();
    raw.fields = raw.fields.into_iter().map(|f| moved(f, by)).collect();
    raw.time = raw.time.map(|t| moved(t, by));
    raw.transformation = raw.transformation.map(|transformation| {
        let span = transformation.span();
        let mut t = transformation.into_inner();
        t.resources = t.resources.into_iter().map(|r| moved(r, by)).collect();
        Spanned::new(span.start + by..span.end + by, t)
    });
    raw.dependencies = raw
        .dependencies
        .into_iter()
        .map(|dependency| {
            let span = dependency.span();
            let mut d = dependency.into_inner();
            d.view = moved(d.view, by);
            d.parameters = d.parameters.map(|p| moved(p, by));
            d.time = d.time.map(|t| moved(t, by));
            d.incremental = d.incremental.map(|i| moved(i, by));
            Spanned::new(span.start + by..span.end + by, d)
        })
        .collect();
    raw.path = raw.path.map(|p| moved(p, by));
    raw.done_flag = raw.done_flag.map(|d| moved(d, by));
    raw.incremental = raw.incremental.map(|i| moved(i, by));
    raw.storage = raw.storage.map(|s| moved(s, by));
    Spanned::new(span.start + by..span.end + by, raw)
}

pub(super) fn syntax_error(error: &toml::de::Error, lines: &LineIndex) -> Diagnostic {
    let line = error.span().map(|span| lines.line(span.start));
    let file = error.span().and_then(|span| lines.file(span.start)).map(str::to_string);
    Diagnostic { file, line, message: with_suggestion(error.message().trim()), plugin: None }
}

/// serde says "unknown field `x`, expected one of `a`, `b`": add the
/// closest valid key, which is usually the typo's fix.
pub(super) fn with_suggestion(message: &str) -> String {
    if let Some(unknown) = message.strip_prefix("unknown field `").and_then(|rest| rest.split('`').next()) {
        let expected: Vec<&str> =
            message.split("expected").nth(1).unwrap_or_default().split('`').skip(1).step_by(2).collect();
        if let Some(best) = closest(unknown, expected.iter().copied()).first() {
            return format!("{message}; did you mean `{best}`?");
        }
    }
    message.to_string()
}

/// Byte offsets, as spans give them, to line numbers, in trellis.toml and
/// the files it includes: each included file's spans are moved past the
/// files before it (see [`LineIndex::add`]), so one offset names one file.
pub(super) struct LineIndex {
    starts: Vec<usize>,
    /// Each included file: where its offsets begin, its name, and its lines.
    included: Vec<(usize, String, LineIndex)>,
    end: usize,
}

impl LineIndex {
    pub(super) fn new(text: &str) -> Self {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        LineIndex { starts, included: Vec::new(), end: text.len() + 1 }
    }

    /// Adds an included file's text, named `name`; its offsets start at
    /// the returned base, which its spans are to be moved by.
    pub(super) fn add(&mut self, name: String, text: &str) -> usize {
        let base = self.end;
        self.end = base + text.len() + 1;
        self.included.push((base, name, LineIndex::new(text)));
        base
    }

    fn part(&self, offset: usize) -> Option<&(usize, String, LineIndex)> {
        self.included.iter().rev().find(|(base, _, _)| offset >= *base)
    }

    /// 1-based line of a byte offset, in the file it is in.
    pub(super) fn line(&self, offset: usize) -> usize {
        match self.part(offset) {
            Some((base, _, lines)) => lines.line(offset - base),
            None => self.starts.partition_point(|&start| start <= offset),
        }
    }

    /// The included file a byte offset is in; `None` for trellis.toml.
    pub(super) fn file(&self, offset: usize) -> Option<&str> {
        self.part(offset).map(|(_, name, _)| name.as_str())
    }
}

/// A file `include` names: view types, and the files it includes in turn.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIncluded {
    #[serde(default)]
    pub(super) include: Vec<Spanned<String>>,
    #[serde(default, rename = "view")]
    pub(super) views: Vec<Spanned<RawViewType>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProject {
    /// Files of `[[view]]` tables shared between projects (Oozie's
    /// `<include>`), relative to this file.
    #[serde(default)]
    pub(super) include: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) project: RawSettings,
    #[serde(default)]
    pub(super) defaults: RawDefaults,
    #[serde(default)]
    pub(super) plugins: BTreeMap<String, Spanned<toml::Value>>,
    #[serde(default, rename = "view")]
    pub(super) views: Vec<Spanned<RawViewType>>,
    #[serde(default)]
    pub(super) events: RawEvents,
    #[serde(default, rename = "listener")]
    pub(super) listeners: Vec<Spanned<RawListener>>,
    #[serde(default, rename = "coordinator")]
    pub(super) coordinators: Vec<Spanned<RawCoordinator>>,
    #[serde(default)]
    pub(super) engines: RawEngines,
}

/// `[engines]`: one table per engine a driver exists for.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEngines {
    pub(super) spark: Option<Spanned<RawSpark>>,
}

/// `[engines.spark]`. The dashed spellings are accepted beside trellis's
/// own underscores, since Spark's documentation writes `deploy-mode`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpark {
    pub(super) master: Option<Spanned<String>>,
    #[serde(alias = "deploy-mode")]
    pub(super) deploy_mode: Option<Spanned<String>>,
    #[serde(alias = "spark-home")]
    pub(super) spark_home: Option<Spanned<String>>,
    pub(super) python: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) conf: BTreeMap<String, Spanned<toml::Value>>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, Spanned<String>>,
    pub(super) concurrency: Option<Spanned<i64>>,
    #[serde(alias = "memory-mib")]
    pub(super) memory_mib: Option<Spanned<i64>>,
    pub(super) grace: Option<Spanned<String>>,
}

/// A `[[coordinator]]`: every value spanned, since each has its own checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCoordinator {
    pub(super) name: Spanned<String>,
    pub(super) views: Spanned<String>,
    pub(super) start: Spanned<String>,
    pub(super) end: Option<Spanned<String>>,
    pub(super) frequency: Spanned<String>,
    pub(super) timezone: Option<Spanned<String>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) concurrency: Option<Spanned<i64>>,
    pub(super) throttle: Option<Spanned<i64>>,
    pub(super) execution: Option<Spanned<String>>,
    pub(super) trigger: Option<Spanned<String>>,
    pub(super) lookback: Option<Spanned<i64>>,
    pub(super) mode: Option<Spanned<String>>,
    pub(super) evaluation_time: Option<Spanned<EvaluationTime>>,
    /// `"all"`, `"none"` or a count.
    pub(super) catchup: Option<Spanned<toml::Value>>,
    pub(super) rescan_interval: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEvents {
    pub(super) monitor: Option<bool>,
    pub(super) history: Option<u64>,
    pub(super) max: Option<u64>,
    pub(super) drain: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListener {
    pub(super) name: Spanned<String>,
    pub(super) plugin: Spanned<String>,
    #[serde(default)]
    pub(super) config: BTreeMap<String, toml::Value>,
    pub(super) max_retries: Option<Spanned<i64>>,
    pub(super) backoff: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) allow_http: Vec<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    pub(super) name: Option<String>,
    pub(super) storage: Option<Spanned<String>>,
    pub(super) metastore: Option<Spanned<String>>,
    pub(super) evaluation_time: Option<EvaluationTime>,
    /// `[project.s3]`, converted by hand (see `settings`): a credential
    /// among its keys gets a line of its own, not serde's unknown field.
    pub(super) s3: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) retries: Option<u32>,
    pub(super) backoff: Option<Spanned<String>>,
    pub(super) retry_panics: Option<bool>,
    pub(super) on_dependency_failure: Option<OnDependencyFailure>,
    pub(super) concurrency: Option<usize>,
    pub(super) deadline: Option<Spanned<String>>,
    pub(super) memory_mib: Option<usize>,
    pub(super) memory_budget_mib: Option<Spanned<u64>>,
    pub(super) output_mib: Option<Spanned<u64>>,
    pub(super) output_entries: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPluginTable {
    pub(super) file: String,
    pub(super) deadline: Option<String>,
    pub(super) memory_mib: Option<usize>,
    pub(super) concurrency: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawViewType {
    pub(super) name: Spanned<String>,
    #[serde(default)]
    pub(super) comment: String,
    #[serde(default)]
    pub(super) parameters: Vec<Spanned<RawParameter>>,
    #[serde(default)]
    pub(super) fields: Vec<Spanned<RawField>>,
    pub(super) time: Option<Spanned<RawTime>>,
    pub(super) transformation: Option<Spanned<RawTransformation>>,
    pub(super) version: Option<String>,
    #[serde(default, rename = "dependency")]
    pub(super) dependencies: Vec<Spanned<RawDependency>>,
    pub(super) path: Option<Spanned<String>>,
    pub(super) done_flag: Option<Spanned<String>>,
    pub(super) format: Option<String>,
    #[serde(default)]
    pub(super) materialize_once: bool,
    pub(super) on_dependency_failure: Option<OnDependencyFailure>,
    pub(super) incremental: Option<Spanned<bool>>,
    /// A storage root of the type's own, as `[project] storage` is written.
    pub(super) storage: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParameter {
    pub(super) name: String,
    #[serde(rename = "type", default = "default_parameter_kind")]
    pub(super) kind: ParameterKind,
    #[serde(default)]
    pub(super) comment: String,
    /// The values it may take: a list, or a regular expression.
    #[serde(default)]
    pub(super) values: Option<crate::catalog::RawValues>,
}

fn default_parameter_kind() -> ParameterKind {
    ParameterKind::String
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawField {
    pub(super) name: String,
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) comment: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTime {
    pub(super) frequency: String,
    pub(super) initial: String,
    pub(super) timezone: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTransformation {
    pub(super) plugin: String,
    #[serde(default)]
    pub(super) config: BTreeMap<String, toml::Value>,
    pub(super) checksum: Option<String>,
    pub(super) output_mib: Option<u64>,
    pub(super) output_entries: Option<u64>,
    /// Files of the project whose contents are part of the logic (query
    /// files), each with its place in the file.
    #[serde(default)]
    pub(super) resources: Vec<Spanned<String>>,
    pub(super) retries: Option<u32>,
    pub(super) backoff: Option<String>,
    pub(super) retry_panics: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDependency {
    pub(super) view: Spanned<String>,
    pub(super) name: Option<String>,
    pub(super) parameters: Option<Spanned<BTreeMap<String, toml::Value>>>,
    pub(super) time: Option<Spanned<String>>,
    pub(super) incremental: Option<Spanned<bool>>,
}

/// A dependency parameter's value as written: one scalar, or a list of
/// them (an enumeration).
pub(super) enum RawBinding {
    One(String),
    Each(Vec<String>),
}

impl RawBinding {
    pub(super) fn from_value(value: &toml::Value) -> Option<RawBinding> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file large enough to be parsed in two parts, with tables other
    /// than views before and after them.
    fn large(error_at: Option<usize>) -> String {
        let mut text = String::from("[plugins]\nconcat = \"concat.wasm\"\n\n");
        for i in 0..8000 {
            let key = if Some(i) == error_at { "nmae" } else { "name" };
            text.push_str(&format!(
                "[[view]]\n{key} = \"p.q/T{i}\"\nparameters = [{{ name = \"shop\" }}]\ntransformation = {{ plugin = \"concat\", config = {{ a = \"é{i}\" }}, resources = [\"sql/q{i}.sql\"] }}\n\n[[view.dependency]]\nview = \"p.q/T{}\"\n\n",
                i.saturating_sub(1)
            ));
        }
        text.push_str("[[listener]]\nname = \"audit\"\nplugin = \"concat\"\n\n[events]\nhistory = 5\n");
        text
    }

    fn summary(raw: &RawProject) -> Vec<String> {
        let views = raw.views.iter().map(|view| {
            let v = view.get_ref();
            let dependencies: Vec<usize> = v.dependencies.iter().map(|d| d.span().start).collect();
            let parameters: Vec<usize> = v.parameters.iter().map(|p| p.span().start).collect();
            let transformation = v.transformation.as_ref().map(|t| t.span());
            let resources: Vec<usize> =
                v.transformation.iter().flat_map(|t| t.get_ref().resources.iter().map(|r| r.span().start)).collect();
            let dependency_views: Vec<usize> = v.dependencies.iter().map(|d| d.get_ref().view.span().start).collect();
            format!(
                "{} {} {:?} {dependencies:?} {parameters:?} {transformation:?} {resources:?} {dependency_views:?}",
                view.span().start,
                v.name.get_ref(),
                v.name.span()
            )
        });
        let listeners = raw.listeners.iter().map(|l| format!("{} {}", l.span().start, l.get_ref().name.get_ref()));
        views.chain(listeners).chain(raw.plugins.keys().cloned()).chain([format!("{:?}", raw.events.history)]).collect()
    }

    #[test]
    fn a_large_file_parsed_in_parts_is_the_file_parsed_whole() {
        let text = large(None);
        let run = longest_view_run(&text).expect("the file is split");
        assert!(text[run.end..].starts_with("[[listener]]"), "{run:?}");
        assert!(chunks(&text, &run).len() >= 2);
        let split = in_parts(&text).expect("parsed in parts");
        let whole = toml::from_str::<RawProject>(&text).unwrap();
        assert_eq!(split.views.len(), 8000);
        assert_eq!(summary(&split), summary(&whole));
    }

    #[test]
    fn an_error_in_either_part_is_the_whole_files_error() {
        for at in [10, 7000] {
            let text = large(Some(at));
            let split = parse(&text).err().unwrap();
            let whole = toml::from_str::<RawProject>(&text).err().unwrap();
            assert_eq!((split.message(), split.span()), (whole.message(), whole.span()));
        }
    }

    /// Plain view types from `p.q/T0` on, enough of them that a file
    /// holding them is parsed in parts.
    fn many_views() -> String {
        let mut text = String::new();
        for i in 0..12_000 {
            text.push_str(&format!(
                "[[view]]\nname = \"p.q/T{i}\"\nparameters = [{{ name = \"shop\" }}]\ntransformation = {{ plugin = \"concat\" }}\n\n"
            ));
        }
        text
    }

    /// Parsed as `parse` does and parsed whole: the same views with the
    /// same spans, the same settings, or the same error; and parsed in
    /// parts or not, as `parts` says. Returns the whole parse.
    fn assert_split_is_whole(case: &str, text: &str, parts: bool) -> Result<RawProject, toml::de::Error> {
        assert!(text.len() >= SPLIT_FROM_BYTES, "{case}: large enough to be split");
        assert_eq!(in_parts(text).is_some(), parts, "{case}: parsed in parts?");
        let whole = toml::from_str::<RawProject>(text);
        match (parse(text), &whole) {
            (Ok(split), Ok(whole)) => {
                let (split, whole) = (summary(&split), summary(whole));
                // The first difference, not two lists of 12,000 views.
                let differ = split.iter().zip(&whole).find(|(split, whole)| split != whole);
                assert_eq!(differ, None, "{case}: parsed as `parse` does, then whole");
                assert_eq!(split.len(), whole.len(), "{case}");
            }
            (Err(split), Err(whole)) => {
                assert_eq!((split.message(), split.span()), (whole.message(), whole.span()), "{case}")
            }
            (split, whole) => panic!(
                "{case}: parsed as `parse` does it {}, parsed whole it {}",
                split.map_or_else(|e| format!("fails ({})", e.message()), |_| "succeeds".into()),
                whole.as_ref().map_or_else(|e| format!("fails ({})", e.message()), |_| "succeeds".into()),
            ),
        }
        whole
    }

    #[test]
    fn a_views_table_after_another_table_is_the_last_views_when_split_too() {
        // The reviewer's file: view X, `[project]`, the run, `[events]`, and
        // then a table of the last view (TOML gives it to T11999, not X).
        let before = "[[view]]\nname = \"p.q/X\"\n\n[project]\nname = \"p\"\n\n";
        for (case, after) in [
            ("a dependency", "[[view.dependency]]\nview = \"p.q/T0\"\n"),
            ("a dependency, spaced", "[[ view.dependency ]]\nview = \"p.q/T0\"\n"),
            ("a dependency, quoted", "[[\"view\".dependency]]\nview = \"p.q/T0\"\n"),
            ("a dependency, spaced around the dot", "[[view . dependency]]\nview = \"p.q/T0\"\n"),
            ("fields", "[[view.fields]]\nname = \"total\"\ntype = \"long\"\n"),
        ] {
            let text = format!("{before}{}[events]\nhistory = 5\n\n{after}", many_views());
            let whole = assert_split_is_whole(case, &text, false).unwrap();
            let last = whole.views.last().unwrap().get_ref();
            assert_eq!(last.name.get_ref(), "p.q/T11999", "{case}");
            assert_eq!(last.dependencies.len() + last.fields.len(), 1, "{case}: the last view's, as TOML says");
        }
        // A table of a view spelled with spaces, right after its view in the
        // run: it ends the run (it is not spelled plainly), and belongs to
        // the view above it, not to X.
        let mut run = many_views();
        run.push_str("[ view.time ]\nfrequency = \"daily\"\ninitial = \"2015-01-01\"\n\n");
        let text = format!("{before}{run}[events]\nhistory = 5\n");
        assert_split_is_whole("a table spaced inside the run", &text, false).unwrap();
        // Another view outside the run: parsed whole, whatever follows.
        let text = format!("{before}{}[events]\nhistory = 5\n", many_views());
        assert_split_is_whole("another view before the run", &text, false).unwrap();
    }

    #[test]
    fn a_file_the_whole_parse_refuses_is_refused_when_split_too() {
        for (case, before, after) in [
            // `view` defined twice: an array, then tables appended to it.
            ("a view array before the tables", "view = [{ name = \"p.q/Z\" }]\n\n", ""),
            ("an empty view array before the tables", "view = []\n\n", ""),
            ("a view table before the tables", "[view]\nname = \"p.q/Z\"\n\n", "[events]\nhistory = 5\n"),
            // The run's first `[[view]]` inside an array the lines before it
            // left open, closed after the run: not a header, so an error.
            ("the run inside an open array", "[plugins]\nx = [\n", "[1]\n]\n"),
            ("the run inside an open array, to the end", "[plugins]\nx = [\n", ""),
        ] {
            let text = format!("{before}{}{after}", many_views());
            assert!(assert_split_is_whole(case, &text, false).is_err(), "{case}: the whole parse refuses it");
        }
    }

    #[test]
    fn a_header_not_spelled_plainly_or_a_views_table_outside_a_run_is_parsed_whole() {
        let run = many_views();
        for header in ["[[ view ]]", "[\"view\"]", "[[view]] trailing", "[ view.x ]", "[view]", "[1, 2],"] {
            let text = format!("{run}{header}\n");
            assert_eq!(longest_view_run(&text), None, "{header}");
        }
        let text = format!("{run}[events]\nhistory = 5\n[[view.dependency]]\nview = \"p.q/T0\"\n");
        assert_eq!(longest_view_run(&text), None, "a view's table outside the run");
        // Plain headers, and comments after them, keep the split.
        let text = format!(
            "[project] # p\nname = \"p\"\n{}[[listener]]\t# audit\nname = \"a\"\nplugin = \"concat\"\n",
            run.replacen("[[view]]\n", "[[view]]   # first\n", 1)
        );
        let found = longest_view_run(&text).expect("split");
        assert_eq!(&text[found.clone()][..8], "[[view]]");
        assert!(text[found.end..].starts_with("[[listener]]"));
        assert_split_is_whole("comments after headers", &text, true).unwrap();
        // A run to the end of the file, after settings.
        let text = format!("[project]\nname = \"p\"\n\n{run}");
        assert_split_is_whole("a run to the end", &text, true).unwrap();
    }
}
