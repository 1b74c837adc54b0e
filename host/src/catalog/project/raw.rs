//! The shape of `trellis.toml` as serde reads it: raw structs that refuse
//! unknown keys, and the turning of TOML's and serde's errors into
//! diagnostics with a line and, for an unknown key, the closest valid one.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::Diagnostic;
use crate::catalog::{EvaluationTime, ParameterKind, closest};

/// Parses the file. A large one is parsed in two parts at once: a run of
/// `[[view]]` tables from the middle on (up to the next table that is not a
/// view's), and the rest, each the whole text with the other part blanked
/// out (every byte but newlines a space), so that spans and lines stay
/// those of the file. Parsing is the larger part of loading a project of
/// many view types. Whenever the split is not plainly safe (a multi-line
/// string, which could hide a header line) or a part fails to parse, the
/// whole file is parsed as one, so errors are always the whole file's.
pub(super) fn parse(text: &str) -> Result<RawProject, toml::de::Error> {
    let whole = || toml::from_str::<RawProject>(text);
    let Some(views) = views_in_the_middle(text) else { return whole() };
    let (Some(middle_text), Some(rest_text)) = (only(text, &views), without(text, &views)) else { return whole() };
    let (rest, middle) = std::thread::scope(|scope| {
        let middle = scope.spawn(|| toml::from_str::<RawProject>(&middle_text));
        let rest = toml::from_str::<RawProject>(&rest_text);
        (rest, middle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    });
    match (rest, middle) {
        (Ok(mut rest), Ok(middle)) => {
            rest.views.extend(middle.views);
            rest.views.sort_by_key(|view| view.span().start);
            Ok(rest)
        }
        _ => whole(),
    }
}

/// Spaces for every byte of `text` but its newlines.
fn blank(text: &str) -> impl Iterator<Item = u8> + '_ {
    text.bytes().map(|b| if b == b'\n' { b'\n' } else { b' ' })
}

/// The text with everything outside `keep` blanked. `keep` starts and ends
/// at line boundaries, so the result is UTF-8 again.
fn only(text: &str, keep: &std::ops::Range<usize>) -> Option<String> {
    let bytes = blank(&text[..keep.start]).chain(text[keep.clone()].bytes()).chain(blank(&text[keep.end..])).collect();
    String::from_utf8(bytes).ok()
}

/// The text with `drop` blanked.
fn without(text: &str, drop: &std::ops::Range<usize>) -> Option<String> {
    let bytes = text[..drop.start].bytes().chain(blank(&text[drop.clone()])).chain(text[drop.end..].bytes()).collect();
    String::from_utf8(bytes).ok()
}

/// Below this size a file is parsed in one part.
const SPLIT_FROM_BYTES: usize = 1 << 20;

/// The byte range of the run of view tables `parse` gives a thread: from
/// the first `[[view]]` line after the middle of the file to the next
/// header line that is not a view's (`[[view]]`, `[view.x]`,
/// `[[view.x]]`), or the end.
fn views_in_the_middle(text: &str) -> Option<std::ops::Range<usize>> {
    if text.len() < SPLIT_FROM_BYTES || text.contains("\"\"\"") || text.contains("'''") {
        return None;
    }
    let mut start = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let header = line.trim();
        if let Some(start) = start {
            if header.starts_with('[') && !is_view_header(header) {
                return Some(start..offset);
            }
        } else if offset >= text.len() / 2 && header == "[[view]]" {
            start = Some(offset);
        }
        offset += line.len();
    }
    start.map(|start| start..text.len())
}

fn is_view_header(header: &str) -> bool {
    header == "[[view]]" || header.starts_with("[view.") || header.starts_with("[[view.")
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
            format!("{} {} {:?} {:?}", view.span().start, v.name.get_ref(), v.name.span(), dependencies)
        });
        let listeners = raw.listeners.iter().map(|l| format!("{} {}", l.span().start, l.get_ref().name.get_ref()));
        views.chain(listeners).chain(raw.plugins.keys().cloned()).chain([format!("{:?}", raw.events.history)]).collect()
    }

    #[test]
    fn a_large_file_parsed_in_two_parts_is_the_file_parsed_whole() {
        let text = large(None);
        let middle = views_in_the_middle(&text).expect("the file is split");
        assert!(middle.start > text.len() / 2 && middle.end < text.len(), "{middle:?}");
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
