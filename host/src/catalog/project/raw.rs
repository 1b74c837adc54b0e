//! The shape of `trellis.toml` as serde reads it: raw structs that refuse
//! unknown keys, and the turning of TOML's and serde's errors into
//! diagnostics with a line and, for an unknown key, the closest valid one.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::Diagnostic;
use crate::catalog::{EvaluationTime, ParameterKind, closest};

/// Parses the file. A large one is parsed in parts, on two threads: the
/// longest run of `[[view]]` tables (up to a table that is not a view's) is
/// cut at `[[view]]` lines into chunks of about [`CHUNK_BYTES`], each parsed
/// on its own and its spans moved to where the chunk is in the file; the
/// rest of the file is parsed with that run blanked out (every byte but
/// newlines a space), so that its spans stay the file's. Parsing is most of
/// loading a project of many view types, and TOML's document tree is many
/// times the text: parts keep it small and reuse its memory. Whenever the
/// split is not plainly safe (a multi-line string could hide a header line)
/// or any part fails to parse, the whole file is parsed as one, so that
/// errors are always the whole file's.
pub(super) fn parse(text: &str) -> Result<RawProject, toml::de::Error> {
    let whole = || toml::from_str::<RawProject>(text);
    let Some(run) = longest_view_run(text) else { return whole() };
    let chunks = chunks(text, &run);
    let rest_text = if run.end == text.len() {
        std::borrow::Cow::Borrowed(&text[..run.start])
    } else {
        let bytes: Vec<u8> = text[..run.start]
            .bytes()
            .chain(text[run.clone()].bytes().map(|b| if b == b'\n' { b'\n' } else { b' ' }))
            .chain(text[run.end..].bytes())
            .collect();
        // Only ASCII bytes and whole lines were replaced: UTF-8 still.
        match String::from_utf8(bytes) {
            Ok(rest) => std::borrow::Cow::Owned(rest),
            Err(_) => return whole(),
        }
    };
    let parse_chunks = |parity: usize| -> Option<Vec<Spanned<RawViewType>>> {
        let mut views = Vec::new();
        for chunk in chunks.iter().skip(parity).step_by(2) {
            let part: RawProject = toml::from_str(&text[chunk.clone()]).ok()?;
            views.extend(part.views.into_iter().map(|view| shifted(view, chunk.start)));
        }
        Some(views)
    };
    let (rest, odd, even) = std::thread::scope(|scope| {
        let odd = scope.spawn(|| parse_chunks(1));
        let even = parse_chunks(0);
        let rest = toml::from_str::<RawProject>(&rest_text);
        (rest, odd.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), even)
    });
    match (rest, odd, even) {
        (Ok(mut rest), Some(odd), Some(even)) => {
            rest.views.extend(odd);
            rest.views.extend(even);
            rest.views.sort_by_key(|view| view.span().start);
            Ok(rest)
        }
        _ => whole(),
    }
}

/// Below this size a file is parsed in one part.
const SPLIT_FROM_BYTES: usize = 1 << 20;

/// About how much of the file one part is.
const CHUNK_BYTES: usize = 1 << 20;

/// The longest run of lines, from a `[[view]]` line on, with no table
/// header but a view's (`[[view]]`, `[view.x]`, `[[view.x]]`), or `None`
/// for a small file or one with a multi-line string.
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
        let header = line.trim();
        if header.starts_with('[') && !is_view_header(header) {
            close(&mut start, offset);
        } else if header == "[[view]]" && start.is_none() {
            start = Some(offset);
        }
        offset += line.len();
    }
    close(&mut start, text.len());
    best
}

fn is_view_header(header: &str) -> bool {
    header == "[[view]]" || header.starts_with("[view.") || header.starts_with("[[view.")
}

/// `run` cut at `[[view]]` lines into parts of about [`CHUNK_BYTES`].
fn chunks(text: &str, run: &std::ops::Range<usize>) -> Vec<std::ops::Range<usize>> {
    let mut chunks = Vec::new();
    let mut start = run.start;
    let mut offset = run.start;
    for line in text[run.clone()].split_inclusive('\n') {
        if offset - start >= CHUNK_BYTES && line.trim() == "[[view]]" {
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
fn shifted(view: Spanned<RawViewType>, by: usize) -> Spanned<RawViewType> {
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
    raw.transformation = raw.transformation.map(|t| moved(t, by));
    raw.dependencies = raw
        .dependencies
        .into_iter()
        .map(|dependency| {
            let span = dependency.span();
            let mut d = dependency.into_inner();
            d.view = moved(d.view, by);
            d.parameters = d.parameters.map(|p| moved(p, by));
            d.time = d.time.map(|t| moved(t, by));
            Spanned::new(span.start + by..span.end + by, d)
        })
        .collect();
    raw.path = raw.path.map(|p| moved(p, by));
    raw.done_flag = raw.done_flag.map(|d| moved(d, by));
    Spanned::new(span.start + by..span.end + by, raw)
}

pub(super) fn syntax_error(error: &toml::de::Error, lines: &LineIndex) -> Diagnostic {
    let line = error.span().map(|span| lines.line(span.start));
    Diagnostic { line, message: with_suggestion(error.message().trim()) }
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

/// Byte offsets, as spans give them, to line numbers.
pub(super) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(super) fn new(text: &str) -> Self {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        LineIndex { starts }
    }

    /// 1-based line of a byte offset.
    pub(super) fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProject {
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
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettings {
    pub(super) name: Option<String>,
    pub(super) storage: Option<String>,
    pub(super) metastore: Option<String>,
    pub(super) evaluation_time: Option<EvaluationTime>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) retries: Option<u32>,
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParameter {
    pub(super) name: String,
    #[serde(rename = "type", default = "default_parameter_kind")]
    pub(super) kind: ParameterKind,
    #[serde(default)]
    pub(super) comment: String,
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDependency {
    pub(super) view: Spanned<String>,
    pub(super) name: Option<String>,
    pub(super) parameters: Option<Spanned<BTreeMap<String, toml::Value>>>,
    pub(super) time: Option<Spanned<String>>,
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
                "[[view]]\n{key} = \"p.q/T{i}\"\nparameters = [{{ name = \"shop\" }}]\ntransformation = {{ plugin = \"concat\", config = {{ a = \"é{i}\" }} }}\n\n[[view.dependency]]\nview = \"p.q/T{}\"\n\n",
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
            let dependency_views: Vec<usize> = v.dependencies.iter().map(|d| d.get_ref().view.span().start).collect();
            format!(
                "{} {} {:?} {dependencies:?} {parameters:?} {transformation:?} {dependency_views:?}",
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
        let split = parse(&text).unwrap();
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
}
