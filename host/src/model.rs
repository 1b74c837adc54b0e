//! Vocabulary shared by the metastore, the scheduler, the runtime and the
//! API: plain data and the names it is written with; no I/O.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! vocabulary shared by the metastore, scheduler, runtime,
//! listeners and API: `ViewState`, `FlowStatus`, `Termination` (how a run
//! ended, stored and sent as one line of text and read back into the
//! type; its `kind()` (`EndKind`), `stopped_by()` (`StoppedBy`), failed
//! views and reason, which the API's typed `ended` is made of, so text and
//! type never disagree), `Counters` (what a transformation returned), and the API's names `RunStatus` (queued, running, finished,
//! interrupted), `StopEffect` (stopping, dequeued), `Issue` (errors,
//! incomplete) and `ListenerStateKind` (the name of a `listeners::State`);
//! `AllowedHost` (an `allow_http` entry, parsed with `http`'s `Authority`,
//! and which requests it admits);
//! `plural` and `duration`, the words for counts and spans every command
//! and the UI print;
//! `ViewCondition`, what is shown of a view wherever it is shown (state,
//! incomplete and errors flags, an invalidation pending apart from the
//! state), with the one rule of the state filters (`is_in`: a view with an
//! invalidation pending is also `invalidated`, as `plan` says) and of the
//! issue filter (`has`), which the CLI and the API both apply.
//! Each is spelled once, by its serde attributes; `wire_name` reads that
//! spelling for JSON, the metastore and the CLI's text, and
//! `from_wire_name` reads it back from bare text. Code matches on these
//! enums, never on their text. Plain data, no I/O.

use std::fmt;

/// The name a unit variant is written with (`SUCCESSFUL`, `DEFAULT`,
/// `stack-overflow`), from its serde attributes: one spelling for JSON,
/// the metastore and the text the CLI prints.
pub fn wire_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
}

/// `n` and the noun that goes with it: `1 event`, `2 events`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A span of milliseconds as people read it: `35 ms`, `4.2 s`, `3 min 05 s`, `2 h 10 min`.
pub fn duration(ms: i64) -> String {
    let seconds = ms.max(0) as f64 / 1000.0;
    match seconds {
        _ if ms < 1000 => format!("{} ms", ms.max(0)),
        s if s < 60.0 => format!("{s:.1} s"),
        s if s < 3600.0 => format!("{} min {:02} s", (s / 60.0) as u64, (s % 60.0) as u64),
        s => format!("{} h {:02} min", (s / 3600.0) as u64, ((s % 3600.0) / 60.0) as u64),
    }
}

/// The variant written `text` (the inverse of `wire_name`), for names that
/// arrive as bare text rather than inside JSON, such as a Server-Sent
/// Event's kind.
pub fn from_wire_name<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(text.to_string())).ok()
}

/// An enum of unit variants spelled once: each variant's name in one
/// table, from which its serde name, `as_str` and `ALL` all come (and
/// `FromStr`, written over `ALL` and `as_str`), so no two can disagree.
macro_rules! spelled {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$variant_meta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$variant_meta])* #[serde(rename = $text)] $variant,)*
        }

        impl $name {
            pub const ALL: [$name; [$($text),*].len()] = [$($name::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }
    };
}

spelled! {
    /// A view's scheduling state. It outlives runs and is kept in the metastore.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum ViewState {
        /// Where every view starts.
        #[default]
        Receive = "receive",
        Invalidated = "invalidated",
        NoData = "no-data",
        Waiting = "waiting",
        Transforming = "transforming",
        Materialized = "materialized",
        Retrying = "retrying",
        Failed = "failed",
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

/// What is shown of a view wherever it is shown (`views`, embedded or
/// remote, text or JSON, and `GET /views`): its state, the flags it took
/// from its dependencies, and an invalidation not acted on yet. That last
/// is kept apart from the state (a run stopped or killed after taking the
/// view up, or a failed transformation, leaves the view in the state it
/// had), and `plan` counts it: the view will be transformed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ViewCondition {
    pub state: ViewState,
    /// Materialized while some dependencies had no data.
    pub incomplete: bool,
    /// Materialized while some dependencies had failed.
    pub errors: bool,
    /// Invalidated, and not rematerialized since, while its state says
    /// something else.
    pub invalidation_pending: bool,
}

impl ViewCondition {
    /// The one rule of the state filters (`views -s`, `?status=`): a view
    /// is in its state, and one with an invalidation pending is also
    /// `invalidated`, as `plan` says it is.
    pub fn is_in(&self, wanted: ViewState) -> bool {
        self.state == wanted || (wanted == ViewState::Invalidated && self.invalidation_pending)
    }

    /// The rule of the issue filter (`?issue=`): a failed view has
    /// errors, as does one materialized while some dependencies had failed.
    pub fn has(&self, issue: Issue) -> bool {
        match issue {
            Issue::Errors => self.errors || self.state == ViewState::Failed,
            Issue::Incomplete => self.incomplete,
        }
    }

    /// The flags as text shows them after the state, e.g.
    /// ` (invalidation pending, incomplete)`; empty without any.
    pub fn flags_text(&self) -> String {
        let flags: Vec<&str> = [
            (self.invalidation_pending, "invalidation pending"),
            (self.incomplete, "incomplete"),
            (self.errors, "errors"),
        ]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect();
        if flags.is_empty() { String::new() } else { format!(" ({})", flags.join(", ")) }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FlowStatus {
    /// Asked, and waiting for its dependencies to settle.
    Queued,
    /// Its dependencies settled and it is to be transformed: waiting for
    /// its permits (or, for external data, its done flag's check).
    Starting,
    /// Its transformation holds its permits and runs.
    Running,
    Successful,
    TerminatedWithError,
    /// Never started, because the run was stopped.
    Skipped,
    /// Depended on by the views a run addresses, but not selected by it
    /// (TRANSFORM_ONLY, SET_ONLY, a full refresh): taken as it stood.
    Excluded,
    /// Up to date: nothing to do.
    Idle,
    /// Running when the run was stopped.
    Canceled,
}

/// What a transformation returned with its data (`Outcome::Data`): free-form
/// counters (rows in, rows out, ...) by name. A name the plugin gave twice
/// is summed, so that nothing it reported is dropped.
pub type Counters = std::collections::BTreeMap<String, u64>;

/// The counters of a transformation's answer, as [`Counters`].
pub fn counters_of(pairs: &[(String, u64)]) -> Counters {
    let mut counters = Counters::new();
    for (name, value) in pairs {
        let sum = counters.entry(name.clone()).or_insert(0);
        *sum = sum.saturating_add(*value);
    }
    counters
}

/// Where a run stands, as the API reports it: its record says whether it
/// finished, the service whether it runs or waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Accepted, and waiting for the runs ahead of it.
    Queued,
    Running,
    /// Its record holds how it ended.
    Finished,
    /// Recorded by a process that ended during the run: it never will finish.
    Interrupted,
}

/// What a stop request did to a run that had not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StopEffect {
    /// It was executing and is being stopped.
    Stopping,
    /// It was queued, and is taken off the queue unstarted.
    Dequeued,
}

/// A flag a view takes from its dependencies, by which views are selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Issue {
    /// It failed, or a dependency failed.
    Errors,
    /// A dependency had no data.
    Incomplete,
}

/// Whether a listener takes events: the name of a `listeners::State`,
/// without its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListenerStateKind {
    Enabled,
    Disabled,
    Unavailable,
}

/// How a run ended. Written as one line of text (the metastore and the
/// API keep that spelling), read back into this type: code asks it, never
/// the text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Termination {
    Completed,
    /// Completed, and this many views failed.
    CompletedWithFailures(usize),
    /// Stopped by a stop request (or Ctrl-C) while it executed.
    Stopped,
    /// Stopped by the server's shutdown, after the grace period.
    StoppedByShutdown,
    /// Removed from the queue by a stop request before it started.
    Dequeued,
    /// The server shut down before it started.
    DequeuedByShutdown,
    /// Recorded by a process that ended during the run.
    Interrupted,
    /// It could not go on (the metastore failed), and why.
    Failed(String),
}

impl Termination {
    /// It was stopped, executing or queued, rather than running to its end.
    pub fn is_stopped(&self) -> bool {
        matches!(
            self,
            Termination::Stopped
                | Termination::StoppedByShutdown
                | Termination::Dequeued
                | Termination::DequeuedByShutdown
        )
    }

    /// How a run with `failed` failed views ended when it ran to its end.
    pub fn completed(failed: usize) -> Termination {
        match failed {
            0 => Termination::Completed,
            n => Termination::CompletedWithFailures(n),
        }
    }
}

/// What kind of end a run had: [`Termination`] without its details, for
/// the typed account the API and `trellis runs --json` give beside the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndKind {
    Completed,
    CompletedWithFailures,
    /// Stopped while it executed.
    Stopped,
    /// Stopped before it started.
    Dequeued,
    Interrupted,
    Failed,
}

/// Who stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoppedBy {
    /// A stop request (`trellis stop`, `POST /runs/{id}/stop`) or Ctrl-C.
    Request,
    /// The server's shutdown.
    Shutdown,
}

impl Termination {
    pub fn kind(&self) -> EndKind {
        match self {
            Termination::Completed => EndKind::Completed,
            Termination::CompletedWithFailures(_) => EndKind::CompletedWithFailures,
            Termination::Stopped | Termination::StoppedByShutdown => EndKind::Stopped,
            Termination::Dequeued | Termination::DequeuedByShutdown => EndKind::Dequeued,
            Termination::Interrupted => EndKind::Interrupted,
            Termination::Failed(_) => EndKind::Failed,
        }
    }

    /// Who stopped it, if it was stopped (executing or queued).
    pub fn stopped_by(&self) -> Option<StoppedBy> {
        match self {
            Termination::Stopped | Termination::Dequeued => Some(StoppedBy::Request),
            Termination::StoppedByShutdown | Termination::DequeuedByShutdown => Some(StoppedBy::Shutdown),
            _ => None,
        }
    }

    /// How many views failed, if it completed with failures.
    pub fn failed_views(&self) -> Option<usize> {
        match self {
            Termination::CompletedWithFailures(n) => Some(*n),
            _ => None,
        }
    }

    /// Why it could not go on, if it failed.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Termination::Failed(reason) => Some(reason),
            _ => None,
        }
    }
}

const COMPLETED_WITH: &str = "completed with ";
const FAILED: &str = "failed: ";

impl fmt::Display for Termination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Termination::Completed => f.write_str("completed"),
            Termination::CompletedWithFailures(n) => {
                write!(f, "{COMPLETED_WITH}{}", plural(*n, "failed view", "failed views"))
            }
            Termination::Stopped => f.write_str("stopped by request"),
            Termination::StoppedByShutdown => f.write_str("stopped: the server shut down before the run finished"),
            Termination::Dequeued => f.write_str("stopped by request before it started"),
            Termination::DequeuedByShutdown => f.write_str("stopped: the server shut down before it started"),
            Termination::Interrupted => f.write_str("interrupted: its process ended during the run"),
            Termination::Failed(reason) => write!(f, "{FAILED}{reason}"),
        }
    }
}

impl From<Termination> for String {
    fn from(termination: Termination) -> String {
        termination.to_string()
    }
}

impl TryFrom<String> for Termination {
    type Error = String;

    fn try_from(text: String) -> Result<Termination, String> {
        let fixed = [
            Termination::Completed,
            Termination::Stopped,
            Termination::StoppedByShutdown,
            Termination::Dequeued,
            Termination::DequeuedByShutdown,
            Termination::Interrupted,
        ];
        if let Some(known) = fixed.into_iter().find(|t| t.to_string() == text) {
            return Ok(known);
        }
        if let Some(reason) = text.strip_prefix(FAILED) {
            return Ok(Termination::Failed(reason.to_string()));
        }
        // "1 failed views" is how records before the grammar was fixed say it.
        text.strip_prefix(COMPLETED_WITH)
            .and_then(|rest| rest.strip_suffix(" failed views").or_else(|| rest.strip_suffix(" failed view")))
            .and_then(|n| n.parse().ok())
            .map(Termination::CompletedWithFailures)
            .ok_or_else(|| format!("`{text}` is not how a run ends"))
    }
}

/// How the metastore keeps a run's end (`#[serde(with)]` on the run
/// record): the variant by name, with its data, not the prose the API and
/// the CLI show (which may be reworded). Records written before, in prose,
/// still read.
pub mod termination_record {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Termination;

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "kebab-case")]
    enum Record {
        Completed,
        CompletedWithFailures { failed: usize },
        Stopped,
        StoppedByShutdown,
        Dequeued,
        DequeuedByShutdown,
        Interrupted,
        Failed { reason: String },
    }

    /// A record as written now, or as written before: prose.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Record(Record),
        Prose(Termination),
    }

    impl From<&Termination> for Record {
        fn from(termination: &Termination) -> Record {
            match termination {
                Termination::Completed => Record::Completed,
                Termination::CompletedWithFailures(failed) => Record::CompletedWithFailures { failed: *failed },
                Termination::Stopped => Record::Stopped,
                Termination::StoppedByShutdown => Record::StoppedByShutdown,
                Termination::Dequeued => Record::Dequeued,
                Termination::DequeuedByShutdown => Record::DequeuedByShutdown,
                Termination::Interrupted => Record::Interrupted,
                Termination::Failed(reason) => Record::Failed { reason: reason.clone() },
            }
        }
    }

    impl From<Stored> for Termination {
        fn from(stored: Stored) -> Termination {
            match stored {
                Stored::Prose(termination) => termination,
                Stored::Record(record) => match record {
                    Record::Completed => Termination::Completed,
                    Record::CompletedWithFailures { failed } => Termination::CompletedWithFailures(failed),
                    Record::Stopped => Termination::Stopped,
                    Record::StoppedByShutdown => Termination::StoppedByShutdown,
                    Record::Dequeued => Termination::Dequeued,
                    Record::DequeuedByShutdown => Termination::DequeuedByShutdown,
                    Record::Interrupted => Termination::Interrupted,
                    Record::Failed { reason } => Termination::Failed(reason),
                },
            }
        }
    }

    pub fn serialize<S: Serializer>(termination: &Option<Termination>, serializer: S) -> Result<S::Ok, S::Error> {
        termination.as_ref().map(Record::from).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Termination>, D::Error> {
        Ok(Option::<Stored>::deserialize(deserializer)?.map(Termination::from))
    }
}

/// A host a listener may reach over HTTP, as its `allow_http` lists it:
/// `name` (the scheme's default port, 80 or 443) or `name:port`. Names
/// compare without case; an IPv6 address is written in brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    host: String,
    port: Option<u16>,
}

impl std::str::FromStr for AllowedHost {
    type Err = String;

    fn from_str(text: &str) -> Result<AllowedHost, String> {
        let form = "write a host as `name` or `name:port`, such as `hooks.example.com` or `127.0.0.1:8080`";
        if text.contains("://") {
            return Err(format!("`{text}` is a URL; {form}"));
        }
        if text.contains(['@', '/', '?', '#', '*']) || text.is_empty() {
            return Err(format!("`{text}` is not a host; {form}"));
        }
        let authority: http::uri::Authority = text.parse().map_err(|e| format!("`{text}`: {e}; {form}"))?;
        if authority.as_str().ends_with(':')
            || (text.contains(':') && authority.port().is_none() && !text.ends_with(']'))
        {
            return Err(format!("`{text}` has no valid port; {form}"));
        }
        Ok(AllowedHost { host: authority.host().to_ascii_lowercase(), port: authority.port_u16() })
    }
}

impl AllowedHost {
    /// Whether a request to `host` on `port` (the URL's, or its scheme's
    /// default) may go out.
    pub fn admits(&self, host: &str, port: u16, default_port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host) && self.port.unwrap_or(default_port) == port
    }
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        let said: Vec<String> = [-5, 0, 35, 999, 1000, 4_250, 59_999, 60_000, 185_000, 3_600_000, 7_860_000]
            .into_iter()
            .map(duration)
            .collect();
        expect_test::expect![[r#"
            ["0 ms", "0 ms", "35 ms", "999 ms", "1.0 s", "4.2 s", "60.0 s", "1 min 00 s", "3 min 05 s", "1 h 00 min", "2 h 11 min"]
        "#]]
        .assert_eq(&format!("{said:?}\n"));
    }

    #[test]
    fn an_allowed_host_admits_its_own_port_or_its_scheme_s_default() {
        let named: AllowedHost = "Hooks.Example.com".parse().unwrap();
        assert!(named.admits("hooks.example.com", 443, 443));
        assert!(named.admits("hooks.example.com", 80, 80));
        assert!(!named.admits("hooks.example.com", 8443, 443));
        assert!(!named.admits("example.com", 443, 443));
        assert!(!named.admits("evil-hooks.example.com", 443, 443));
        let local: AllowedHost = "127.0.0.1:8080".parse().unwrap();
        assert!(local.admits("127.0.0.1", 8080, 80) && !local.admits("127.0.0.1", 80, 80));
        assert!(!local.admits("localhost", 8080, 80));
        let v6: AllowedHost = "[::1]:9000".parse().unwrap();
        assert!(v6.admits("[::1]", 9000, 80));
        assert_eq!(v6.to_string(), "[::1]:9000");
        for bad in [
            "https://hooks.example.com",
            "user@host",
            "host/path",
            "",
            "host:",
            "host:http",
            "*.example.com",
            "host:99999",
        ] {
            assert!(bad.parse::<AllowedHost>().is_err(), "{bad}");
        }
    }

    /// Each name is spelled once, by serde; these are the strings the API
    /// and the metastore have always written.
    #[test]
    fn names_are_spelled_as_they_always_were() {
        for state in ViewState::ALL {
            assert_eq!(wire_name(&state), state.as_str());
            assert_eq!(from_wire_name::<ViewState>(state.as_str()), Some(state));
        }
        let runs = [RunStatus::Queued, RunStatus::Running, RunStatus::Finished, RunStatus::Interrupted];
        assert_eq!(runs.map(|s| wire_name(&s)), ["queued", "running", "finished", "interrupted"]);
        assert_eq!([StopEffect::Stopping, StopEffect::Dequeued].map(|s| wire_name(&s)), ["stopping", "dequeued"]);
        assert_eq!([Issue::Errors, Issue::Incomplete].map(|s| wire_name(&s)), ["errors", "incomplete"]);
        let listeners = [ListenerStateKind::Enabled, ListenerStateKind::Disabled, ListenerStateKind::Unavailable];
        assert_eq!(listeners.map(|s| wire_name(&s)), ["enabled", "disabled", "unavailable"]);
        assert_eq!(from_wire_name::<Issue>("warnings"), None);
    }

    /// `ALL`, `as_str`, serde and `FromStr` of each table-spelled enum agree,
    /// and the names are those records and the API have always used.
    #[test]
    fn each_spelled_enum_has_one_spelling() {
        fn agree<T>(all: &[T], as_str: fn(&T) -> &'static str)
        where
            T: serde::Serialize + serde::de::DeserializeOwned + std::str::FromStr + PartialEq + fmt::Debug,
        {
            for value in all {
                let name = as_str(value);
                assert_eq!(wire_name(value), name);
                assert_eq!(from_wire_name::<T>(name).as_ref(), Some(value));
                assert_eq!(name.parse::<T>().ok().as_ref(), Some(value), "{name}");
            }
        }
        agree(&ViewState::ALL, |s| s.as_str());
        agree(&ActionState::ALL, |s| s.as_str());
        agree(&Mode::ALL, |m| m.as_str());
        assert_eq!(
            ViewState::ALL.map(ViewState::as_str).join(" "),
            "receive invalidated no-data waiting transforming materialized retrying failed"
        );
        assert_eq!(
            ActionState::ALL.map(ActionState::as_str).join(" "),
            "WAITING READY SUBMITTED RUNNING SUCCEEDED FAILED TIMEDOUT SKIPPED KILLED"
        );
        assert_eq!(
            Mode::ALL.map(Mode::as_str).join(" "),
            "DEFAULT RESET_TRANSFORMATION_CHECKSUMS RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS TRANSFORM_ONLY SET_ONLY"
        );
        assert_eq!("transform_only".parse::<Mode>(), Ok(Mode::TransformOnly), "any case");
        assert_eq!("killed".parse::<ActionState>(), Ok(ActionState::Killed), "any case");
        assert!("Materialized".parse::<ViewState>().is_err(), "a view state exactly as written");
    }

    #[test]
    fn a_pending_invalidation_counts_as_invalidated_and_is_shown() {
        let pending =
            ViewCondition { state: ViewState::Materialized, invalidation_pending: true, ..Default::default() };
        assert!(pending.is_in(ViewState::Materialized) && pending.is_in(ViewState::Invalidated));
        assert!(!pending.is_in(ViewState::Failed));
        let plain = ViewCondition { state: ViewState::Materialized, errors: true, ..Default::default() };
        assert!(!plain.is_in(ViewState::Invalidated) && plain.has(Issue::Errors) && !plain.has(Issue::Incomplete));
        let failed = ViewCondition { state: ViewState::Failed, ..Default::default() };
        assert!(failed.has(Issue::Errors) && !failed.has(Issue::Incomplete), "a failed view has errors");
        assert_eq!(pending.flags_text(), " (invalidation pending)");
        assert_eq!(plain.flags_text(), " (errors)");
        assert_eq!(ViewCondition::default().flags_text(), "");
    }

    #[test]
    fn a_termination_reads_back_as_it_was_written() {
        let all = [
            Termination::Completed,
            Termination::CompletedWithFailures(3),
            Termination::CompletedWithFailures(1),
            Termination::Stopped,
            Termination::StoppedByShutdown,
            Termination::Dequeued,
            Termination::DequeuedByShutdown,
            Termination::Interrupted,
            Termination::Failed("disk full".into()),
        ];
        for termination in all {
            let text = serde_json::to_string(&termination).unwrap();
            assert_eq!(serde_json::from_str::<Termination>(&text).unwrap(), termination, "{text}");
        }
        assert!(Termination::try_from("finished somehow".to_string()).is_err());
        assert_eq!(Termination::CompletedWithFailures(1).to_string(), "completed with 1 failed view");
        // As records written before the grammar was fixed say it.
        let old: Termination = serde_json::from_str("\"completed with 1 failed views\"").unwrap();
        assert_eq!(old, Termination::CompletedWithFailures(1));
    }

    /// A run record keeps its end as the variant, and reads the prose
    /// records written before it did.
    #[test]
    fn a_run_record_keeps_its_end_as_a_variant_and_reads_old_prose() {
        #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
        struct Record {
            #[serde(with = "termination_record")]
            termination: Option<Termination>,
        }
        let written = |termination| serde_json::to_string(&Record { termination }).unwrap();
        expect_test::expect![[r#"{"termination":{"kind":"completed-with-failures","failed":2}}"#]]
            .assert_eq(&written(Some(Termination::CompletedWithFailures(2))));
        expect_test::expect![[r#"{"termination":{"kind":"failed","reason":"disk full"}}"#]]
            .assert_eq(&written(Some(Termination::Failed("disk full".into()))));
        assert_eq!(written(None), r#"{"termination":null}"#);
        for termination in [
            Termination::Completed,
            Termination::CompletedWithFailures(1),
            Termination::Stopped,
            Termination::StoppedByShutdown,
            Termination::Dequeued,
            Termination::DequeuedByShutdown,
            Termination::Interrupted,
            Termination::Failed("failed: twice".into()),
        ] {
            let text = written(Some(termination.clone()));
            let read: Record = serde_json::from_str(&text).unwrap();
            assert_eq!(read.termination, Some(termination), "{text}");
        }
        // As the records written before this one said it.
        for (old, termination) in [
            (r#""completed""#, Termination::Completed),
            (r#""completed with 1 failed views""#, Termination::CompletedWithFailures(1)),
            (r#""completed with 3 failed views""#, Termination::CompletedWithFailures(3)),
            (r#""stopped by request before it started""#, Termination::Dequeued),
            (r#""failed: the metastore: disk full""#, Termination::Failed("the metastore: disk full".into())),
        ] {
            let read: Record = serde_json::from_str(&format!(r#"{{"termination":{old}}}"#)).unwrap();
            assert_eq!(read.termination, Some(termination), "{old}");
        }
        assert!(serde_json::from_str::<Record>(r#"{"termination":"finished somehow"}"#).is_err());
        assert!(serde_json::from_str::<Record>(r#"{"termination":{"kind":"exploded"}}"#).is_err());
    }
}

spelled! {
    /// How a materialize request treats the lattice (Schedoscope's modes).
    /// Runs record it, and the API writes it, by this name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Mode {
        Default = "DEFAULT",
        /// Record current version checksums where only they changed, without
        /// transforming.
        ResetTransformationChecksums = "RESET_TRANSFORMATION_CHECKSUMS",
        /// A dry run: record checksums and timestamps as if everything outdated
        /// had been transformed, so the next DEFAULT run transforms nothing.
        ResetTransformationChecksumsAndTimestamps = "RESET_TRANSFORMATION_CHECKSUMS_AND_TIMESTAMPS",
        /// Transform this view without asking its dependencies.
        TransformOnly = "TRANSFORM_ONLY",
        /// Mark the view materialized without transforming.
        SetOnly = "SET_ONLY",
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    /// A mode by its name, in any case; the error lists the modes.
    fn from_str(text: &str) -> Result<Mode, String> {
        Mode::ALL.into_iter().find(|m| m.as_str().eq_ignore_ascii_case(text)).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
            format!("`{text}` is not a mode ({})", names.join(", "))
        })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Padded: `runs` lines modes up in a column.
        f.pad(self.as_str())
    }
}

spelled! {
    /// The state of a coordinator's action (Oozie's coordinator action
    /// states). An action is created WAITING for its inputs, READY once they
    /// are all there, SUBMITTED when its run is recorded, RUNNING while the run
    /// executes, and ends SUCCEEDED, FAILED (its run did not succeed), TIMEDOUT
    /// (its inputs did not all arrive within the coordinator's `timeout`),
    /// SKIPPED (the `execution` policy passed it over) or KILLED (an operator
    /// killed it).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum ActionState {
        Waiting = "WAITING",
        Ready = "READY",
        Submitted = "SUBMITTED",
        Running = "RUNNING",
        Succeeded = "SUCCEEDED",
        Failed = "FAILED",
        Timedout = "TIMEDOUT",
        Skipped = "SKIPPED",
        Killed = "KILLED",
    }
}

impl ActionState {
    /// No transition leaves it but an operator's rerun.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ActionState::Succeeded
                | ActionState::Failed
                | ActionState::Timedout
                | ActionState::Skipped
                | ActionState::Killed
        )
    }
}

impl fmt::Display for ActionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ActionState {
    type Err = String;

    /// A state by its name, in any case; the error lists the states.
    fn from_str(text: &str) -> Result<ActionState, String> {
        ActionState::ALL.into_iter().find(|s| s.as_str().eq_ignore_ascii_case(text)).ok_or_else(|| {
            let names: Vec<&str> = ActionState::ALL.iter().map(|s| s.as_str()).collect();
            format!("`{text}` is not an action state ({})", names.join(", "))
        })
    }
}
