//! Write trellis plugins in Rust: implement one trait, call one export macro.
//!
//! A plugin is a WebAssembly component built for `wasm32-wasip2` against the
//! `trellis:plugin` contract in `wit/`. This crate hides the generated
//! bindings: plugin crates depend on it alone, never on `wit-bindgen`.
//!
//! | kind of plugin | trait | macro |
//! | --- | --- | --- |
//! | transformation type | [`Transformation`] | [`export_transformation!`] |
//! | incremental transformation type | [`Transformation`] + [`IncrementalTransformation`] | [`export_incremental_transformation!`] |
//! | engine-backed transformation type (Spark) | [`EngineTransformation`] | [`export_engine_transformation!`] |
//! | version-checksum function | [`Checksum`] | [`export_checksum!`] |
//! | scheduling listener | [`Listener`] | [`export_listener!`] |
//!
//! # A complete transformation
//!
//! ```no_run
//! use std::io::Write;
//! use trellis_plugin_sdk::{
//!     ConfigKey, Failure, Outcome, PluginInfo, Request, ResultExt, Transformation,
//!     export_transformation,
//! };
//!
//! /// Counts the lines of every input file and writes the total.
//! struct LineCount;
//!
//! impl Transformation for LineCount {
//!     fn describe() -> PluginInfo {
//!         PluginInfo::new("line-count", env!("CARGO_PKG_VERSION"))
//!             .description("counts the lines of all input files")
//!             .config_key(ConfigKey::optional("file", "output file name (default: count)"))
//!     }
//!
//!     fn run(request: Request) -> Result<Outcome, Failure> {
//!         let mut lines = 0u64;
//!         for file in request.input_files()? {
//!             let text = std::fs::read_to_string(&file.path).or_fatal(|| file.to_string())?;
//!             lines += text.lines().count() as u64;
//!         }
//!         if lines == 0 {
//!             return Ok(Outcome::NoData);
//!         }
//!         let name = request.config().get("file").unwrap_or("count");
//!         let mut out = request.create_output_file(name)?;
//!         writeln!(out, "{lines}").or_fatal(|| name.to_string())?;
//!         Ok(Outcome::Data(vec![("lines".into(), lines)]))
//!     }
//! }
//!
//! export_transformation!(LineCount);
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` and try it
//! with `trellis plugins run target/wasm32-wasip2/release/line_count.wasm
//! --input lines=some/dir --output /tmp/out`.
//!
//! # What a plugin can and cannot do
//!
//! A call sees its inputs read-only and its output directory read-write, and
//! nothing else: no environment, no network, no other files. It runs under a
//! deadline and a memory cap. Panics are reported to the host with their
//! message (see [`set_panic_hook`]); `stdout` and `stderr` are captured into
//! the host log, truncated at 64 KiB each. An engine-backed transformation
//! sees no files at all: it describes a [`Job`] and the engine runs it.
//!
//! # Inside the crate
//!
//! (Moved here from ARCHITECTURE.md in issue 40.) The bindings are generated
//! here with `pub_export_macro`, so the library's custom sections carry only
//! imports and the exports come with the macro into the plugin crate.
//! `incremental.rs`: `IncrementalTransformation` (a `Transformation` that also
//! has `run_incremental`) and its request (`new_files(name)`,
//! `new_input_files()`, `changed_files`, `last_commit(view)`,
//! `previous_output()`, `can_merge()`), generated in a world of the SDK's own
//! (`incremental-part`, inline WIT over `wit/`) that exports only
//! `transform-incremental`; `export_incremental_transformation!` calls both
//! export macros, and the component's world is their union. `engine.rs`
//! (contract 1.2.0): `EngineTransformation` and
//! `export_engine_transformation!`, the request's helpers (`resource_text`,
//! `input_names`), the `Job` builder (`Job::sql`, `Job::python`,
//! `with_config_options` for the `files` and `conf` keys both Spark samples
//! take) and `trim_sql_statement`. Invariant: plugin crates depend on this
//! crate alone, never on wit-bindgen; nothing here knows about the host's
//! internals.

extern crate self as trellis_plugin_sdk;

#[doc(hidden)]
pub mod bindings;
mod checksum;
mod config;
mod engine;
mod files;
mod incremental;
mod listener;
pub mod log;
mod transformation;

pub use checksum::{Checksum, ChecksumInput, NamedResource};
pub use config::Config;
pub use engine::{
    Application, EngineInput, EngineRequest, EngineResource, EngineTransformation, Field, Job, trim_sql_statement,
};
pub use files::{InputFile, ResultExt};
pub use incremental::{IncrementalOutcome, IncrementalRequest, IncrementalTransformation, InputDelta};
pub use listener::{Event, Gap, Listener, ListenerError, Transition, ViewState};
pub use transformation::{Failure, Input, Outcome, Request, Transformation};

pub use bindings::transformation::trellis::plugin::types::{ConfigKey, LogLevel, PluginInfo};

/// The version of the `trellis:plugin` contract this SDK builds against.
pub const CONTRACT_VERSION: &str = "1.2.0";

impl PluginInfo {
    /// A plugin called `name` at `version`, with no description and no configuration.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        PluginInfo { name: name.into(), version: version.into(), description: String::new(), config: Vec::new() }
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Declares a configuration key. The host refuses configurations that
    /// miss a required key or name a key that was not declared.
    pub fn config_key(mut self, key: ConfigKey) -> Self {
        self.config.push(key);
        self
    }
}

impl ConfigKey {
    pub fn required(name: impl Into<String>, description: impl Into<String>) -> Self {
        ConfigKey { name: name.into(), required: true, description: description.into() }
    }

    pub fn optional(name: impl Into<String>, description: impl Into<String>) -> Self {
        ConfigKey { name: name.into(), required: false, description: description.into() }
    }
}

/// Installs the SDK's panic hook: the panic message and location go to the
/// host through `report-panic`, so they appear in the call's outcome. The
/// export macros call this before every entry into the plugin; calling it
/// again is cheap.
pub fn set_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let message = if let Some(text) = info.payload().downcast_ref::<&str>() {
                (*text).to_string()
            } else if let Some(text) = info.payload().downcast_ref::<String>() {
                text.clone()
            } else {
                "panic with a non-string payload".to_string()
            };
            let report = match info.location() {
                Some(at) => format!("{message} (at {}:{})", at.file(), at.line()),
                None => message,
            };
            bindings::transformation::trellis::plugin::host::report_panic(&report);
        }));
    });
}

/// Re-exports for the export macros. Not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::checksum::ChecksumExport;
    pub use crate::engine::EngineExport;
    pub use crate::incremental::IncrementalExport;
    pub use crate::listener::ListenerExport;
    pub use crate::transformation::TransformationExport;
    pub use wit_bindgen;
}

/// Exports a [`Transformation`] implementation as the plugin's `transform`
/// interface. Call it once, at the top level of the plugin crate.
#[macro_export]
macro_rules! export_transformation {
    ($plugin:ty) => {
        const _: () = {
            type TrellisTransformationExport = $crate::__private::TransformationExport<$plugin>;
            $crate::bindings::transformation::__export_transformation_world!(
                TrellisTransformationExport with_types_in $crate::bindings::transformation
            );
        };
    };
}

/// Exports an [`IncrementalTransformation`] as the plugin's `transform` and
/// `transform-incremental` interfaces (contract 1.1.0): views of a type
/// declared `incremental = true` are run through
/// [`IncrementalTransformation::run_incremental`], others through
/// [`Transformation::run`]. Call it once, at the top level of the plugin crate.
#[macro_export]
macro_rules! export_incremental_transformation {
    ($plugin:ty) => {
        const _: () = {
            type TrellisTransformationExport = $crate::__private::TransformationExport<$plugin>;
            $crate::bindings::transformation::__export_transformation_world!(
                TrellisTransformationExport with_types_in $crate::bindings::transformation
            );
            type TrellisIncrementalExport = $crate::__private::IncrementalExport<$plugin>;
            $crate::bindings::incremental::__export_incremental_part_world!(
                TrellisIncrementalExport with_types_in $crate::bindings::incremental
            );
        };
    };
}

/// Exports an [`EngineTransformation`] as the plugin's `engine-job`
/// interface (contract 1.2.0). Call it once, at the top level of the plugin crate.
#[macro_export]
macro_rules! export_engine_transformation {
    ($plugin:ty) => {
        const _: () = {
            type TrellisEngineExport = $crate::__private::EngineExport<$plugin>;
            $crate::bindings::engine::__export_engine_transformation_world!(
                TrellisEngineExport with_types_in $crate::bindings::engine
            );
        };
    };
}

/// Exports a [`Checksum`] implementation as the plugin's `version-checksum`
/// interface. Call it once, at the top level of the plugin crate.
#[macro_export]
macro_rules! export_checksum {
    ($plugin:ty) => {
        const _: () = {
            type TrellisChecksumExport = $crate::__private::ChecksumExport<$plugin>;
            $crate::bindings::checksum::__export_checksum_world!(
                TrellisChecksumExport with_types_in $crate::bindings::checksum
            );
        };
    };
}

/// Exports a [`Listener`] implementation as the plugin's `events` interface.
/// Call it once, at the top level of the plugin crate.
#[macro_export]
macro_rules! export_listener {
    ($plugin:ty) => {
        const _: () = {
            type TrellisListenerExport = $crate::__private::ListenerExport<$plugin>;
            $crate::bindings::listener::__export_listener_world!(
                TrellisListenerExport with_types_in $crate::bindings::listener
            );
        };
    };
}
