//! Vocabulary shared by the metastore, the scheduler, the runtime and the
//! API: plain data and the names it is written with; no I/O.

use std::fmt;

/// The name a unit variant is written with (`SUCCESSFUL`, `DEFAULT`,
/// `stack-overflow`), from its serde attributes: one spelling for JSON,
/// the metastore and the text the CLI prints.
pub fn wire_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
}

/// A view's scheduling state. It outlives runs and is kept in the metastore.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViewState {
    /// Where every view starts.
    #[default]
    Receive,
    Invalidated,
    NoData,
    Waiting,
    Transforming,
    Materialized,
    Retrying,
    Failed,
}

impl ViewState {
    pub const ALL: [ViewState; 8] = [
        ViewState::Receive,
        ViewState::Invalidated,
        ViewState::NoData,
        ViewState::Waiting,
        ViewState::Transforming,
        ViewState::Materialized,
        ViewState::Retrying,
        ViewState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ViewState::Receive => "receive",
            ViewState::Invalidated => "invalidated",
            ViewState::NoData => "no-data",
            ViewState::Waiting => "waiting",
            ViewState::Transforming => "transforming",
            ViewState::Materialized => "materialized",
            ViewState::Retrying => "retrying",
            ViewState::Failed => "failed",
        }
    }
}

impl std::str::FromStr for ViewState {
    type Err = String;

    /// A state by its name; the error lists the states.
    fn from_str(text: &str) -> Result<ViewState, String> {
        ViewState::ALL.into_iter().find(|s| s.as_str() == text).ok_or_else(|| {
            let names: Vec<&str> = ViewState::ALL.iter().map(|s| s.as_str()).collect();
            format!("`{text}` is not a state ({})", names.join(", "))
        })
    }
}

/// A filter on views' URL paths: a regular expression, with a size limit so
/// that a hostile one cannot take the process's memory.
pub fn view_filter(text: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(text).size_limit(1 << 20).build().map_err(|e| {
        let reason = e.to_string().lines().rfind(|line| !line.trim().is_empty()).unwrap_or_default().trim().to_string();
        format!("`{text}` is not a usable regular expression: {reason}")
    })
}

impl fmt::Display for ViewState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A view's status within one run (Spark Declarative Pipelines' flow
/// states). It belongs to that run only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FlowStatus {
    Queued,
    Running,
    Successful,
    TerminatedWithError,
    /// Never started, because the run was stopped.
    Skipped,
    /// In the lattice but not selected (TRANSFORM_ONLY).
    Excluded,
    /// Up to date: nothing to do.
    Idle,
    /// Running when the run was stopped.
    Canceled,
}
