//! componentize-py, pinned, installed with pip into a private directory on
//! first use and run from there with an explicit environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::Error;

/// The componentize-py every Python plugin is built with.
pub const COMPONENTIZE_PY: &str = "0.25.1";

/// Runs componentize-py from the directory given first, with sys.argv as
/// its command line. `-I -S` keeps the interpreter's own site-packages,
/// user site and PYTHONPATH out (they would leak into the component).
const LAUNCHER: &str =
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import componentize_py; sys.exit(componentize_py.script())";

/// Where tools are installed unless `TRELLIS_TOOLS_DIR` says:
/// `$XDG_CACHE_HOME/trellis/tools`, else `~/.cache/trellis/tools`.
pub fn default_tools_dir() -> Option<PathBuf> {
    env_path("TRELLIS_TOOLS_DIR").or_else(|| user_cache_dir().map(|dir| dir.join("tools")))
}

/// trellis's directory in the user's cache: `$XDG_CACHE_HOME/trellis`,
/// else `~/.cache/trellis` (compiled plugins, tools).
pub fn user_cache_dir() -> Option<PathBuf> {
    env_path("XDG_CACHE_HOME")
        .map(|dir| dir.join("trellis"))
        .or_else(|| env_path("HOME").map(|dir| dir.join(".cache").join("trellis")))
}

/// An environment variable naming a path, unless it is unset or empty.
pub fn env_path(key: &str) -> Option<PathBuf> {
    std::env::var_os(key).filter(|value| !value.is_empty()).map(PathBuf::from)
}

/// An installed componentize-py and the interpreter that runs it.
#[derive(Debug, Clone)]
pub struct Toolchain {
    python: PathBuf,
    /// The directory pip installed componentize-py into (`--target`).
    packages: PathBuf,
}

impl Toolchain {
    /// componentize-py in `tools`, installed there first if it is not:
    /// `note` is told before the install starts, which needs the package
    /// registry once (pip's own cache serves later installs).
    pub fn ensure(tools: &Path, note: &mut dyn FnMut(String)) -> Result<Toolchain, Error> {
        let python = interpreter((3, 9))?;
        let packages = tools.join(format!("componentize-py-{COMPONENTIZE_PY}"));
        if !packages.join("componentize_py").is_dir() {
            note(format!(
                "installing componentize-py {COMPONENTIZE_PY} into {} (once; it needs the package registry)",
                packages.display()
            ));
            pip_install(&python, tools, &packages, &format!("componentize-py=={COMPONENTIZE_PY}"), "componentize_py")
                .map_err(|reason| Error::Install { dir: packages.clone(), reason })?;
        }
        Ok(Toolchain { python, packages })
    }

    /// componentize-py with `args`, in `dir`, with nothing of the caller's
    /// environment but what a build needs.
    pub fn componentize_py(&self, dir: &Path) -> Command {
        let mut command = Command::new(&self.python);
        command
            .current_dir(dir)
            .env_clear()
            .envs(kept_environment())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONHASHSEED", "0")
            .stdin(Stdio::null())
            .args(["-I", "-S", "-c", LAUNCHER])
            .arg(&self.packages);
        command
    }
}

/// What of the caller's environment a build keeps: where to find programs,
/// the home and temporary directories, the locale. Never VIRTUAL_ENV or
/// PYTHONPATH, which make componentize-py bundle other packages.
fn kept_environment() -> Vec<(OsString, OsString)> {
    ["PATH", "HOME", "TMPDIR", "LANG", "LC_ALL"]
        .into_iter()
        .filter_map(|key| std::env::var_os(key).map(|value| (OsString::from(key), value)))
        .collect()
}

/// The interpreter that installs trellis's tools: `TRELLIS_PYTHON`, else
/// `python3`, checked to be `minimum` or newer and to have pip.
pub fn interpreter(minimum: (u32, u32)) -> Result<PathBuf, Error> {
    let python = std::env::var_os("TRELLIS_PYTHON").filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".into());
    let (major, minor) = minimum;
    let check = format!(
        "import sys, importlib.util as u; sys.exit(2 if sys.version_info < ({major}, {minor}) else 0 if u.find_spec('pip') else 3)"
    );
    let shown = Path::new(&python).display().to_string();
    let status = Command::new(&python)
        .args(["-I", "-c", &check])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match status.map(|status| status.code()) {
        Ok(Some(0)) => Ok(PathBuf::from(python)),
        Ok(Some(2)) => Err(Error::NoPython { reason: format!("{shown} is older than {major}.{minor}") }),
        Ok(Some(3)) => Err(Error::NoPython { reason: format!("{shown} has no pip") }),
        Ok(_) => Err(Error::NoPython { reason: format!("{shown} failed to start") }),
        Err(e) => Err(Error::NoPython { reason: format!("cannot run {shown}: {e}") }),
    }
}

/// pip-installs `requirement` into a fresh directory beside `packages`,
/// then renames it into place whole, so that a half-done install is never
/// used: `packages/<installed>` existing is what says it is there. A
/// concurrent install that got there first wins; this one's copy is
/// dropped. pip's own cache (of downloads and built wheels) serves later
/// installs. The error is pip's last line.
pub fn pip_install(
    python: &Path,
    tools: &Path,
    packages: &Path,
    requirement: &str,
    installed: &str,
) -> Result<(), String> {
    std::fs::create_dir_all(tools).map_err(|e| e.to_string())?;
    let staging = tempfile::Builder::new().prefix(".installing-").tempdir_in(tools).map_err(|e| e.to_string())?;
    let output = Command::new(python)
        .args(["-I", "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--quiet", "--target"])
        .arg(staging.path())
        .arg(requirement)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run pip: {e}"))?;
    if !output.status.success() {
        return Err(format!("pip says: {}", last_line(&output.stderr)));
    }
    match std::fs::rename(staging.path(), packages) {
        Ok(()) => Ok(()),
        Err(_) if packages.join(installed).exists() => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// The last line a tool printed that says something: where pip and Python
/// put the error itself.
pub fn last_line(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    text.lines().rev().map(str::trim).find(|line| !line.is_empty()).unwrap_or("(it printed nothing)").to_string()
}
