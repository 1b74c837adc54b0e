//! Python plugins: a directory of Python sources (a `pyproject.toml` and a
//! module that declares its plugin with the `trellis_plugin` SDK) built into
//! a component by componentize-py, which is installed on first use into a
//! private directory of the user's cache.
//!
//! Invariants:
//! - It knows the plugin contract only as text: the WIT and the Python SDK,
//!   embedded in the binary, so that a build needs no checkout; and the
//!   build stamp's format (`runtime::stamp`). Nothing of projects, views,
//!   the scheduler or wasmtime.
//! - A component is written by rename, so a failed or interrupted build
//!   leaves the previous one in place; an install is renamed into place
//!   whole, so a half-installed toolchain is never used.
//! - An unchanged rebuild writes nothing: componentize-py does not write the
//!   same bytes twice (its issue #247), and new bytes would be a new entry
//!   in the compile cache.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! building Python plugins. `toolchain.rs`: componentize-py,
//! pinned (0.25.1), pip-installed on first use with `--target` into a
//! staging directory of `$XDG_CACHE_HOME/trellis/tools` (or
//! `TRELLIS_TOOLS_DIR`; `user_cache_dir` is the one rule for trellis's
//! cache directory, which the CLI's compile cache uses too) that is renamed
//! into place whole, and run as
//! `python3 -I -S` with an explicit environment (no `VIRTUAL_ENV` or
//! `PYTHONPATH`, which would leak packages into the component). `pip_install`
//! and `interpreter` serve the PySpark install of `engines` too.
//! `builder.rs`: `pyproject.toml` (`[project] name`, `[tool.trellis] kind`,
//! `module`), the plugin's sources (everything but build output, caches, a
//! vendored SDK, an example project, tests, `*.md`), their stamp, and the build:
//! the binary's own WIT and SDK, the generated entry module and a copy of
//! exactly the hashed sources in a temporary directory, componentize-py
//! there, the stamp appended, the component renamed into place. A
//! component already stamped with the same `build` hash is left as it is,
//! before any toolchain is needed (offline, instant).
//! Invariants: nothing of projects, views, the scheduler or wasmtime; a
//! failed build leaves the previous component in place; the reason is one
//! line (the SDK's `trellis: ` line, else the tool's last).

mod builder;
mod toolchain;

pub use builder::{Built, Kind, Manifest, build, read_manifest};
pub use toolchain::{
    COMPONENTIZE_PY, Toolchain, default_tools_dir, env_path, interpreter, last_line, pip_install, user_cache_dir,
};

use std::path::PathBuf;

include!(concat!(env!("OUT_DIR"), "/python_sdk.rs"));

/// The Python SDK's version, as its pyproject.toml gives it.
pub fn sdk_version() -> &'static str {
    let pyproject = PYTHON_SDK.iter().find(|(path, _)| *path == "pyproject.toml").map_or("", |(_, text)| text);
    pyproject
        .lines()
        .find_map(|line| line.trim().strip_prefix("version").map(|rest| rest.trim_start_matches([' ', '=']).trim()))
        .map_or("unknown", |version| version.trim_matches('"'))
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {reason}", path.display())]
    Manifest { path: PathBuf, reason: String },
    #[error("cannot read {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("cannot write {}: {reason}", path.display())]
    Write { path: PathBuf, reason: String },
    #[error(
        "building Python plugins needs Python 3.9 or newer with pip, to install componentize-py: {reason} \
         (install python3 and python3-pip, or name an interpreter with TRELLIS_PYTHON)"
    )]
    NoPython { reason: String },
    #[error("cannot install componentize-py {COMPONENTIZE_PY} into {}: {reason}", dir.display())]
    Install { dir: PathBuf, reason: String },
    #[error("componentize-py failed to build {}: {reason}", dir.display())]
    Componentize { dir: PathBuf, reason: String },
}
