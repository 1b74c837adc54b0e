//! Which failures are transient network trouble (seed 000: "network errors
//! will be caught by the actions manager and retried indefinitely"): a
//! refused or reset connection, a socket timeout, a name that did not
//! resolve. One list for every place a failure is classified, the Spark
//! driver's outcome table today and object stores' I/O next, so that what
//! counts as network trouble is the same everywhere; the scheduler retries
//! such a failure with capped backoff, without counting it against the
//! type's `retries` (`FailureClass::Network`).
//!
//! Pure: names and kinds in, a yes or no out.

/// Java exceptions (a job's root cause, by class name) that say the
/// network failed, not the job: worth trying again however often.
pub const JAVA_EXCEPTIONS: [&str; 6] = [
    "java.net.ConnectException",
    "java.net.SocketTimeoutException",
    "java.net.UnknownHostException",
    "java.net.NoRouteToHostException",
    "java.net.PortUnreachableException",
    "java.net.http.HttpConnectTimeoutException",
];

/// Python exceptions (by class name, as `type(error).__name__` gives it)
/// that say the same: the `ConnectionError` family, `TimeoutError` (also
/// `socket.timeout` since Python 3.10), and the resolver's `gaierror`.
pub const PYTHON_EXCEPTIONS: [&str; 7] = [
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "ConnectionAbortedError",
    "TimeoutError",
    "timeout",
    "gaierror",
];

/// SQLSTATE class 08 is "connection exception" (ISO/IEC 9075).
pub const SQLSTATE_CLASS: &str = "08";

/// Whether a Java exception's class name is network trouble.
pub fn is_java(class: &str) -> bool {
    JAVA_EXCEPTIONS.contains(&class)
}

/// Whether a Python exception's class name is network trouble.
pub fn is_python(class: &str) -> bool {
    PYTHON_EXCEPTIONS.contains(&class)
}

/// Whether a SQLSTATE is a connection exception.
pub fn is_sqlstate(state: &str) -> bool {
    state.starts_with(SQLSTATE_CLASS)
}

/// Whether an I/O error of the host's own (an object store's request, say)
/// is network trouble.
pub fn is_io(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        kind,
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | NotConnected
            | TimedOut
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_trouble_is_told_from_the_job_s_own() {
        let mut table = String::new();
        for name in ["java.net.ConnectException", "java.net.SocketTimeoutException", "java.io.IOException"] {
            table.push_str(&format!("java {name}: {}\n", is_java(name)));
        }
        for name in ["ConnectionRefusedError", "TimeoutError", "gaierror", "ValueError", "OSError"] {
            table.push_str(&format!("python {name}: {}\n", is_python(name)));
        }
        for state in ["08001", "08S01", "42601", "XX000"] {
            table.push_str(&format!("sqlstate {state}: {}\n", is_sqlstate(state)));
        }
        use std::io::ErrorKind;
        for kind in
            [ErrorKind::ConnectionRefused, ErrorKind::TimedOut, ErrorKind::NotFound, ErrorKind::PermissionDenied]
        {
            table.push_str(&format!("io {kind:?}: {}\n", is_io(kind)));
        }
        expect_test::expect![[r#"
            java java.net.ConnectException: true
            java java.net.SocketTimeoutException: true
            java java.io.IOException: false
            python ConnectionRefusedError: true
            python TimeoutError: true
            python gaierror: true
            python ValueError: false
            python OSError: false
            sqlstate 08001: true
            sqlstate 08S01: true
            sqlstate 42601: false
            sqlstate XX000: false
            io ConnectionRefused: true
            io TimedOut: true
            io NotFound: false
            io PermissionDenied: false
        "#]]
        .assert_eq(&table);
    }
}
