//! The shape of `trellis.toml` as serde reads it: raw structs that refuse
//! unknown keys, and the turning of TOML's and serde's errors into
//! diagnostics with a line and, for an unknown key, the closest valid one.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::Diagnostic;
use crate::catalog::{EvaluationTime, ParameterKind, closest};

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
