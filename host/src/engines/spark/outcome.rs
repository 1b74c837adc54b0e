//! How a Spark job ended, decided from what the runner wrote (`result.json`:
//! the error's class and SQLSTATE) and how the process ended, never from
//! the exit code alone: Spark exits 1 for a typo in a query and for a lost
//! executor alike. Pure, and a golden table.

use serde::Deserialize;

use crate::engines::network;

/// What the runner wrote to `result.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RunnerResult {
    /// `data`, `no-data` or `failed`.
    pub outcome: String,
    #[serde(default)]
    pub exception: Option<String>,
    #[serde(default)]
    pub error_class: Option<String>,
    #[serde(default)]
    pub sqlstate: Option<String>,
    #[serde(default)]
    pub java_exception: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// How the spark-submit process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it that trellis did not send (the kernel's OOM
    /// killer, an operator).
    Signal(i32),
    /// trellis ended it: the deadline passed.
    DeadlinePassed,
    /// trellis ended it: the run was stopped.
    Stopped,
}

/// What the scheduler makes of a job, in the words of its failure classes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Data,
    NoData,
    /// Trying again may help: the cluster or the machine had trouble, or
    /// the deadline passed.
    Retryable(String),
    /// The same job fails the same way: the query, the data or the setup.
    Fatal(String),
    /// The user's own application raised an exception of its own, like a
    /// plugin's panic: fatal unless the view type sets `retry_panics`.
    Crash(String),
    /// The deadline passed: retryable, as a plugin's deadline is.
    Timeout(String),
    /// Transient network trouble (a refused connection, a socket timeout,
    /// a name not resolved; [`crate::engines::network`]): retried with
    /// capped backoff however often, not counted against `retries`.
    Network(String),
    /// trellis's own trouble with its files (the scratch directory, moving
    /// the data): not the view's fault, retried until it passes.
    Host(String),
    /// The run was stopped; nothing is recorded as the view's failure.
    Stopped,
}

/// SQLSTATE classes whose errors are the job's own (ISO/IEC 9075 and
/// Spark's `K` classes): the statement, the data, a feature. Everything
/// else with a SQLSTATE (`08` connection, `40` rollback, `53` resources,
/// `58` system, `XX` internal...) is the engine's trouble.
const FATAL_SQLSTATE_CLASSES: [&str; 11] = ["0A", "21", "22", "23", "25", "2B", "34", "38", "39", "42", "44"];

/// Java exceptions that say the machine or the cluster was short of
/// something, or lost touch: worth another attempt.
/// (Network trouble is [`crate::engines::network`]'s, checked first.)
const TRANSIENT_JAVA: [&str; 5] = [
    "java.lang.OutOfMemoryError",
    "java.io.IOException",
    "java.util.concurrent.TimeoutException",
    "org.apache.spark.shuffle.FetchFailedException",
    "org.apache.spark.scheduler.BarrierJobUnsupportedRDDChainException",
];

/// The verdict on a job: what the runner said if it said anything, else
/// how the process ended. `last_line` is the last line the process
/// printed (spark-submit's own error when it failed before the runner);
/// `started` says whether the Spark application had started (its event
/// log said so), which a launcher's own failure never does.
pub fn verdict(exit: Exit, result: Option<&RunnerResult>, last_line: &str, started: bool) -> Verdict {
    match exit {
        Exit::Stopped => return Verdict::Stopped,
        Exit::DeadlinePassed => return Verdict::Retryable("the deadline passed; the job was stopped".into()),
        _ => {}
    }
    match (result.map(|r| r.outcome.as_str()), exit) {
        (Some("data"), Exit::Code(0)) => return Verdict::Data,
        (Some("no-data"), Exit::Code(0)) => return Verdict::NoData,
        (Some("failed"), _) => return failed(result.unwrap_or(&RunnerResult::default())),
        _ => {}
    }
    let said = if last_line.is_empty() { String::new() } else { format!(": {last_line}") };
    if let (Some(_), Exit::Code(code)) = (result, exit) {
        // The job said it succeeded, then something went wrong on the way
        // out (stopping the session): its data is not to be trusted.
        return Verdict::Retryable(format!("the job finished but spark-submit exited with {code}{said}"));
    }
    match exit {
        // It reported success but exited otherwise, or the reverse: the
        // process is not to be trusted with the data.
        Exit::Code(0) => Verdict::Retryable(format!("spark-submit exited without the job's result{said}")),
        // The application ran and ended without a word: its driver was
        // killed (out of memory), or a cluster lost it.
        Exit::Code(code) if started => Verdict::Retryable(format!(
            "the application ended without its result, spark-submit exiting with {code}{said}"
        )),
        // The launcher's own failures (no Java, a bad master URL or
        // option) happen before the runner starts, and again next time.
        Exit::Code(code) => Verdict::Fatal(format!("spark-submit exited with {code} before the job ran{said}")),
        Exit::Signal(signal) => Verdict::Retryable(format!(
            "spark-submit was killed by signal {signal} (not by trellis: the kernel's out-of-memory killer?)"
        )),
        Exit::DeadlinePassed | Exit::Stopped => unreachable!("handled above"),
    }
}

/// A failure the runner caught and described.
fn failed(result: &RunnerResult) -> Verdict {
    let message = result.message.clone().unwrap_or_else(|| "the job failed".into());
    let named = match (&result.error_class, &result.sqlstate) {
        // Spark's messages start with `[CLASS]` already.
        (Some(class), _) if message.contains(&format!("[{class}]")) => message.clone(),
        (Some(class), _) => format!("[{class}] {message}"),
        (None, _) => match &result.exception {
            Some(exception) if !message.starts_with(exception.as_str()) => format!("{exception}: {message}"),
            _ => message.clone(),
        },
    };
    let java = result.java_exception.as_deref().unwrap_or_default();
    // Network trouble first, whoever raised it: the JVM (its root cause),
    // a connection's SQLSTATE, or the application's own Python socket.
    if network::is_java(java) {
        return Verdict::Network(format!("{named} ({java})"));
    }
    if result.sqlstate.as_deref().is_some_and(network::is_sqlstate) {
        return Verdict::Network(named);
    }
    if java.is_empty() && result.exception.as_deref().is_some_and(network::is_python) {
        return Verdict::Network(named);
    }
    if TRANSIENT_JAVA.contains(&java) {
        return Verdict::Retryable(format!("{named} ({java})"));
    }
    if let Some(state) = &result.sqlstate {
        let class = state.get(..2).unwrap_or(state);
        // Spark's own `KD` (data source) and `K0`-`K9` classes are about
        // the statement or the data, like 42.
        let fatal = FATAL_SQLSTATE_CLASSES.contains(&class) || class.starts_with('K');
        return if fatal { Verdict::Fatal(named) } else { Verdict::Retryable(named) };
    }
    if result.error_class.is_some() {
        // A Spark error without a SQLSTATE: its class names a mistake in
        // how the job was written (PySpark's own API errors).
        return Verdict::Fatal(named);
    }
    match result.exception.as_deref() {
        // Spark's own exceptions without a class: a task or stage failed
        // for a reason it does not name (an executor lost, say).
        Some("Py4JJavaError" | "Py4JNetworkError" | "SparkException" | "SparkRuntimeException") => {
            Verdict::Retryable(named)
        }
        // The application's own exception, or the runner's complaint that
        // it wrote nothing: its code, which fails the same way again.
        Some("TrellisJobError" | "UnknownInputError") => Verdict::Fatal(named),
        _ => Verdict::Crash(named),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(
        exception: &str,
        class: Option<&str>,
        state: Option<&str>,
        java: Option<&str>,
        msg: &str,
    ) -> RunnerResult {
        RunnerResult {
            outcome: "failed".into(),
            exception: Some(exception.into()),
            error_class: class.map(Into::into),
            sqlstate: state.map(Into::into),
            java_exception: java.map(Into::into),
            message: Some(msg.into()),
        }
    }

    #[test]
    fn every_way_a_job_ends_has_its_verdict() {
        let ok = |outcome: &str| RunnerResult { outcome: outcome.into(), ..RunnerResult::default() };
        let cases: Vec<(&str, Exit, Option<RunnerResult>, &str)> = vec![
            ("ran, then exit 1, no result", Exit::Code(1), None, "Killed"),
            ("data", Exit::Code(0), Some(ok("data")), ""),
            ("no data", Exit::Code(0), Some(ok("no-data")), ""),
            ("data, exit 1", Exit::Code(1), Some(ok("data")), "x"),
            ("no result, exit 0", Exit::Code(0), None, ""),
            ("launcher failed", Exit::Code(127), None, "JAVA_HOME is not set"),
            ("killed by the kernel", Exit::Signal(9), None, ""),
            ("deadline", Exit::DeadlinePassed, Some(ok("data")), ""),
            ("stopped", Exit::Stopped, None, ""),
            (
                "syntax",
                Exit::Code(1),
                Some(failed(
                    "ParseException",
                    Some("PARSE_SYNTAX_ERROR"),
                    Some("42601"),
                    None,
                    "[PARSE_SYNTAX_ERROR] Syntax error at or near 'FORM'. SQLSTATE: 42601",
                )),
                "",
            ),
            (
                "unknown table",
                Exit::Code(1),
                Some(failed(
                    "AnalysisException",
                    Some("TABLE_OR_VIEW_NOT_FOUND"),
                    Some("42P01"),
                    None,
                    "The table or view `ordrs` cannot be found.",
                )),
                "",
            ),
            (
                "division by zero",
                Exit::Code(1),
                Some(failed(
                    "ArithmeticException",
                    Some("DIVIDE_BY_ZERO"),
                    Some("22012"),
                    None,
                    "[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012",
                )),
                "",
            ),
            (
                "path not found",
                Exit::Code(1),
                Some(failed(
                    "AnalysisException",
                    Some("PATH_NOT_FOUND"),
                    Some("42K03"),
                    None,
                    "[PATH_NOT_FOUND] Path does not exist.",
                )),
                "",
            ),
            (
                "a data source's error",
                Exit::Code(1),
                Some(failed("SparkException", Some("FAILED_READ_FILE.NO_HINT"), Some("KD001"), None, "m")),
                "",
            ),
            (
                "internal error",
                Exit::Code(1),
                Some(failed("SparkException", Some("INTERNAL_ERROR"), Some("XX000"), None, "[INTERNAL_ERROR] m")),
                "",
            ),
            (
                "out of memory",
                Exit::Code(1),
                Some(failed("Py4JJavaError", None, None, Some("java.lang.OutOfMemoryError"), "Java heap space")),
                "",
            ),
            (
                "connection refused (JVM)",
                Exit::Code(1),
                Some(failed("Py4JJavaError", None, None, Some("java.net.ConnectException"), "Connection refused")),
                "",
            ),
            (
                "socket timeout (JVM)",
                Exit::Code(1),
                Some(failed("Py4JJavaError", None, None, Some("java.net.SocketTimeoutException"), "Read timed out")),
                "",
            ),
            (
                "unknown host (JVM)",
                Exit::Code(1),
                Some(failed("Py4JJavaError", None, None, Some("java.net.UnknownHostException"), "db.internal")),
                "",
            ),
            (
                "a JDBC connection's SQLSTATE",
                Exit::Code(1),
                Some(failed("SparkException", Some("CONNECTION_FAILED"), Some("08001"), None, "m")),
                "",
            ),
            (
                "connection refused (Python)",
                Exit::Code(1),
                Some(failed("ConnectionRefusedError", None, None, None, "[Errno 111] Connection refused")),
                "",
            ),
            ("socket timeout (Python)", Exit::Code(1), Some(failed("TimeoutError", None, None, None, "timed out")), ""),
            (
                "name not resolved (Python)",
                Exit::Code(1),
                Some(failed("gaierror", None, None, None, "[Errno -2] Name or service not known")),
                "",
            ),
            (
                "other I/O (JVM)",
                Exit::Code(1),
                Some(failed("Py4JJavaError", None, None, Some("java.io.IOException"), "disk full")),
                "",
            ),
            (
                "a task failed",
                Exit::Code(1),
                Some(failed("Py4JJavaError", None, None, Some("org.apache.spark.SparkException"), "Job aborted")),
                "",
            ),
            (
                "a PySpark API error",
                Exit::Code(1),
                Some(failed("PySparkTypeError", Some("NOT_COLUMN_OR_STR"), None, None, "[NOT_COLUMN_OR_STR] m")),
                "",
            ),
            (
                "the application raised",
                Exit::Code(1),
                Some(failed("ValueError", None, None, None, "no shops in May")),
                "",
            ),
            (
                "the application wrote nothing",
                Exit::Code(1),
                Some(failed("TrellisJobError", None, None, None, "the application wrote nothing")),
                "",
            ),
        ];
        let lines: Vec<String> = cases
            .iter()
            .map(|(case, exit, result, last)| {
                let started = case.starts_with("ran");
                format!("{case:<30} {:?}", verdict(*exit, result.as_ref(), last, started))
            })
            .collect();
        expect_test::expect![[r#"
            ran, then exit 1, no result    Retryable("the application ended without its result, spark-submit exiting with 1: Killed")
            data                           Data
            no data                        NoData
            data, exit 1                   Retryable("the job finished but spark-submit exited with 1: x")
            no result, exit 0              Retryable("spark-submit exited without the job's result")
            launcher failed                Fatal("spark-submit exited with 127 before the job ran: JAVA_HOME is not set")
            killed by the kernel           Retryable("spark-submit was killed by signal 9 (not by trellis: the kernel's out-of-memory killer?)")
            deadline                       Retryable("the deadline passed; the job was stopped")
            stopped                        Stopped
            syntax                         Fatal("[PARSE_SYNTAX_ERROR] Syntax error at or near 'FORM'. SQLSTATE: 42601")
            unknown table                  Fatal("[TABLE_OR_VIEW_NOT_FOUND] The table or view `ordrs` cannot be found.")
            division by zero               Fatal("[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012")
            path not found                 Fatal("[PATH_NOT_FOUND] Path does not exist.")
            a data source's error          Fatal("[FAILED_READ_FILE.NO_HINT] m")
            internal error                 Retryable("[INTERNAL_ERROR] m")
            out of memory                  Retryable("Py4JJavaError: Java heap space (java.lang.OutOfMemoryError)")
            connection refused (JVM)       Network("Py4JJavaError: Connection refused (java.net.ConnectException)")
            socket timeout (JVM)           Network("Py4JJavaError: Read timed out (java.net.SocketTimeoutException)")
            unknown host (JVM)             Network("Py4JJavaError: db.internal (java.net.UnknownHostException)")
            a JDBC connection's SQLSTATE   Network("[CONNECTION_FAILED] m")
            connection refused (Python)    Network("ConnectionRefusedError: [Errno 111] Connection refused")
            socket timeout (Python)        Network("TimeoutError: timed out")
            name not resolved (Python)     Network("gaierror: [Errno -2] Name or service not known")
            other I/O (JVM)                Retryable("Py4JJavaError: disk full (java.io.IOException)")
            a task failed                  Retryable("Py4JJavaError: Job aborted")
            a PySpark API error            Fatal("[NOT_COLUMN_OR_STR] m")
            the application raised         Crash("ValueError: no shops in May")
            the application wrote nothing  Fatal("TrellisJobError: the application wrote nothing")
        "#]]
        .assert_eq(&(lines.join("\n") + "\n"));
    }
}
