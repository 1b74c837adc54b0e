//! What each view's last transformations logged and printed, keyed by its
//! URL path: a bounded record of its last attempts, written inside a
//! [`Commit`](super::Commit) with the report of the attempt it adds. The
//! scheduler decides how many attempts and how much text are kept.

use serde::{Deserialize, Serialize};

use super::format::decode;
use super::{Error, Metastore};

/// One line a plugin logged through the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedLine {
    pub level: String,
    pub message: String,
}

/// One transformation of a view: what it logged, printed, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptLog {
    pub run: String,
    /// Its number in the run, from 1.
    pub attempt: u32,
    /// When it ended, milliseconds since the Unix epoch.
    pub time: i64,
    pub plugin: String,
    /// `succeeded`, `no data`, or `failed: <the failure>`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<LoggedLine>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr: String,
    /// Bytes of lines, stdout and stderr left out to keep it bounded.
    #[serde(default)]
    pub truncated_bytes: u64,
}

/// A view's last attempts, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewLog {
    pub attempts: Vec<AttemptLog>,
}

impl Metastore {
    /// The last attempts recorded for a view; empty when there are none.
    pub fn view_log(&self, url_path: &str) -> Result<ViewLog, Error> {
        self.reading("logs", || {
            Ok(self
                .logs
                .get(url_path)?
                .map(|bytes| decode(url_path.as_bytes(), &bytes))
                .transpose()?
                .unwrap_or_default())
        })
    }
}
