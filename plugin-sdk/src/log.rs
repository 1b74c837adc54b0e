//! Logging into the host's log. Messages are tagged by the host with the
//! plugin and the view being materialized.

pub use crate::LogLevel as Level;

/// Sends one message to the host log.
pub fn log(level: Level, message: &str) {
    crate::bindings::transformation::trellis::plugin::host::log(level, message);
}

/// Logs at info level: `trellis_plugin_sdk::info!("read {} rows", n)`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Info, &format!($($arg)*)) };
}

/// Logs at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Warn, &format!($($arg)*)) };
}

/// Logs at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Debug, &format!($($arg)*)) };
}

/// Logs at error level. An error log does not fail the call: return a
/// [`Failure`](crate::Failure) for that.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log::log($crate::log::Level::Error, &format!($($arg)*)) };
}
