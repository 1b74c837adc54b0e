//! Building one Python plugin directory: its manifest, the hash of its
//! sources, the skip when nothing changed, and the componentize-py run.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::toolchain::last_line;
use super::{COMPONENTIZE_PY, Error, PYTHON_SDK, Toolchain, sdk_version};
use crate::runtime::stamp::{self, Stamp};

/// The contract the binary speaks, which the component is built against.
const WIT: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/plugin.wit"));

/// Top-level directories of a plugin that are not its sources: build
/// output, a vendored copy of the SDK (the build uses the binary's own), an
/// example project, tests. Below the top, a package may have directories
/// of any name; `__pycache__` and hidden ones are skipped everywhere.
const NOT_SOURCES: &[&str] = &["build", "trellis_plugin", "target", "project", "tests"];

/// Whether a file is part of the plugin: not compiled Python, a component,
/// a native test module (`test_*.py`, `*_test.py`) or documentation
/// (`*.md`: editing a README must not rematerialize views).
fn is_source(name: &str) -> bool {
    let test = name.ends_with(".py") && (name.starts_with("test_") || name.ends_with("_test.py"));
    !(test || name.ends_with(".pyc") || name.ends_with(".wasm") || name.ends_with(".md"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Transformation,
    Checksum,
    Listener,
}

impl Kind {
    /// The world in wit/plugin.wit.
    pub fn world(self) -> &'static str {
        match self {
            Kind::Transformation => "transformation",
            Kind::Checksum => "checksum",
            Kind::Listener => "listener",
        }
    }
}

/// What `pyproject.toml` says of the plugin.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// `[project] name`: the component is `<name>.wasm`.
    pub name: String,
    pub version: String,
    /// `[tool.trellis] kind`.
    pub kind: Kind,
    /// `[tool.trellis] module`, else the name with `-` as `_`.
    pub module: String,
}

#[derive(serde::Deserialize)]
struct PyProject {
    project: Option<Project>,
    tool: Option<Tool>,
}

#[derive(serde::Deserialize)]
struct Project {
    name: Option<String>,
    version: Option<String>,
}

#[derive(serde::Deserialize)]
struct Tool {
    trellis: Option<TrellisTable>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TrellisTable {
    kind: Option<String>,
    module: Option<String>,
}

/// Reads `dir/pyproject.toml`.
pub fn read_manifest(dir: &Path) -> Result<Manifest, Error> {
    let path = dir.join("pyproject.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Manifest {
            path: path.clone(),
            reason: "not found: a Python plugin's directory has a pyproject.toml with [project] name and \
                     [tool.trellis] kind"
                .to_string(),
        },
        _ => Error::Read { path: path.clone(), reason: e.to_string() },
    })?;
    let bad = |reason: String| Error::Manifest { path: path.clone(), reason };
    let parsed: PyProject = toml::from_str(&text).map_err(|e| {
        let line = e.span().map(|span| text[..span.start].lines().count().max(1));
        let at = line.map(|line| format!("line {line}: ")).unwrap_or_default();
        bad(format!("{at}{}", e.message()))
    })?;
    let project = parsed.project.ok_or_else(|| bad("it has no [project] table".to_string()))?;
    let name = project.name.ok_or_else(|| bad("[project] has no name".to_string()))?;
    let valid_name = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid_name {
        return Err(bad(format!("[project] name `{name}` is not a plugin name: use letters, digits, `-` and `_`")));
    }
    let trellis = parsed.tool.and_then(|tool| tool.trellis).ok_or_else(|| {
        bad("it has no [tool.trellis] table: add one with kind = \"transformation\", \"checksum\" or \"listener\""
            .to_string())
    })?;
    let kind = match trellis.kind.as_deref() {
        Some("transformation") => Kind::Transformation,
        Some("checksum") => Kind::Checksum,
        Some("listener") => Kind::Listener,
        Some(other) => {
            return Err(bad(format!("[tool.trellis] kind `{other}` is not one of transformation, checksum, listener")));
        }
        None => return Err(bad("[tool.trellis] has no kind (transformation, checksum or listener)".to_string())),
    };
    let module = trellis.module.unwrap_or_else(|| name.replace('-', "_"));
    let valid_module = module.split('.').all(|part| {
        part.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    if !valid_module {
        return Err(bad(format!("[tool.trellis] module `{module}` is not a Python module name")));
    }
    let version = project.version.unwrap_or_else(|| "0.0.0".to_string());
    Ok(Manifest { name, version, kind, module })
}

/// What a build did.
#[derive(Debug)]
pub struct Built {
    pub manifest: Manifest,
    pub output: PathBuf,
    /// False when the component there was built from the same sources and
    /// was left as it was.
    pub rebuilt: bool,
}

/// Builds the plugin in `dir` into `output` (default `dir/build/NAME.wasm`)
/// unless the component there was built from the same inputs. The
/// toolchain is installed into `tools` on first use; `note` hears of it.
pub fn build(dir: &Path, output: Option<&Path>, tools: &Path, note: &mut dyn FnMut(String)) -> Result<Built, Error> {
    let manifest = read_manifest(dir)?;
    let output =
        output.map(Path::to_path_buf).unwrap_or_else(|| dir.join("build").join(format!("{}.wasm", manifest.name)));
    let sources = sources(dir)?;
    let stamp = stamp_of(&manifest, &sources);
    let previous = std::fs::read(&output).ok().and_then(|bytes| stamp::read(&bytes));
    if previous.is_some_and(|previous| previous.build == stamp.build) {
        return Ok(Built { manifest, output, rebuilt: false });
    }

    let toolchain = Toolchain::ensure(tools, note)?;
    let workspace = tempfile::Builder::new()
        .prefix("trellis-python-build-")
        .tempdir()
        .map_err(|e| Error::Write { path: std::env::temp_dir(), reason: e.to_string() })?;
    let root = workspace.path();
    let write = |path: PathBuf, content: &[u8]| -> Result<(), Error> {
        let failed = |e: std::io::Error| Error::Write { path: path.clone(), reason: e.to_string() };
        std::fs::create_dir_all(path.parent().unwrap_or(root)).map_err(failed)?;
        std::fs::write(&path, content).map_err(failed)
    };
    write(root.join("wit/plugin.wit"), WIT.as_bytes())?;
    for (path, text) in PYTHON_SDK {
        if path.starts_with("trellis_plugin/") {
            write(root.join("sdk").join(path), text.as_bytes())?;
        }
    }
    write(root.join("main/trellis_main.py"), entry_module(&manifest).as_bytes())?;
    // Only the hashed files are bundled: what the stamp says is what is in it.
    for (relative, content) in &sources {
        write(root.join("src").join(relative), content)?;
    }

    let built = root.join("plugin.wasm");
    let result = toolchain
        .componentize_py(root)
        .args(["-d", "wit", "-w", manifest.kind.world(), "componentize", "trellis_main"])
        .args(["-p", "main", "-p", "sdk", "-p", "src", "-o"])
        .arg(&built)
        .output()
        .map_err(|e| Error::Componentize { dir: dir.to_path_buf(), reason: format!("cannot run it: {e}") })?;
    if !result.status.success() {
        // The SDK's own refusals are one line marked `trellis: ` amid
        // componentize-py's backtrace; a Python error ends the output.
        let stderr = String::from_utf8_lossy(&result.stderr);
        let reason = stderr
            .lines()
            .find_map(|line| line.trim().strip_prefix("trellis: "))
            .map(str::to_string)
            .unwrap_or_else(|| last_line(&result.stderr));
        return Err(Error::Componentize { dir: dir.to_path_buf(), reason });
    }
    let mut bytes = std::fs::read(&built).map_err(|e| Error::Read { path: built.clone(), reason: e.to_string() })?;
    stamp::append(&mut bytes, &stamp);
    write_atomically(&output, &bytes)?;
    Ok(Built { manifest, output, rebuilt: true })
}

/// The plugin's own files, by path relative to `dir`, sorted: everything
/// but the top-level directories in [`NOT_SOURCES`], `__pycache__` and
/// hidden ones, and what [`is_source`] leaves out.
fn sources(dir: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>, Error> {
    let mut files = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let path = dir.join(&relative);
        let entries =
            std::fs::read_dir(&path).map_err(|e| Error::Read { path: path.clone(), reason: e.to_string() })?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name_text = name.to_string_lossy();
            let child = relative.join(&name);
            let Ok(file_type) = entry.file_type() else { continue };
            if name_text.starts_with('.') {
                continue;
            }
            if file_type.is_dir() {
                let top = relative.as_os_str().is_empty();
                if name_text != "__pycache__" && !(top && NOT_SOURCES.contains(&name_text.as_ref())) {
                    pending.push(child);
                }
            } else if is_source(&name_text) {
                let full = dir.join(&child);
                let content =
                    std::fs::read(&full).map_err(|e| Error::Read { path: full.clone(), reason: e.to_string() })?;
                files.push((child, content));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// `sources` covers the plugin's files and the SDK's version (its logic);
/// `build` also covers the kind, the module, the SDK's files, the contract
/// and componentize-py's version (everything that shapes the component).
fn stamp_of(manifest: &Manifest, sources: &[(PathBuf, Vec<u8>)]) -> Stamp {
    let mut logic = blake3::Hasher::new();
    logic.update(b"python\0").update(sdk_version().as_bytes()).update(b"\0");
    for (path, content) in sources {
        let path = path.to_string_lossy();
        logic.update(&(path.len() as u64).to_le_bytes()).update(path.as_bytes());
        logic.update(&(content.len() as u64).to_le_bytes()).update(content);
    }
    let sources_hash = logic.finalize().to_hex().to_string();
    let mut build = blake3::Hasher::new();
    build.update(sources_hash.as_bytes()).update(manifest.kind.world().as_bytes()).update(b"\0");
    build.update(manifest.module.as_bytes()).update(b"\0").update(COMPONENTIZE_PY.as_bytes()).update(b"\0");
    build.update(WIT.as_bytes());
    for (path, text) in PYTHON_SDK {
        build.update(path.as_bytes()).update(&(text.len() as u64).to_le_bytes()).update(text.as_bytes());
    }
    Stamp {
        language: "python".to_string(),
        sdk: sdk_version().to_string(),
        sources: sources_hash,
        build: build.finalize().to_hex().to_string(),
    }
}

/// The module componentize-py builds: the SDK's template, which imports the
/// plugin's module and exports what it declared.
fn entry_module(manifest: &Manifest) -> String {
    let template = PYTHON_SDK.iter().find(|(path, _)| *path == "trellis_main.py.tmpl").map_or("", |(_, text)| text);
    // str.format's rules: the two fields, and doubled braces for literal ones.
    template
        .replace("{module}", &manifest.module)
        .replace("{kind}", manifest.kind.world())
        .replace("{{", "{")
        .replace("}}", "}")
}

/// Writes next to `path`, then renames into place.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let failed = |e: &dyn std::fmt::Display| Error::Write { path: path.to_path_buf(), reason: e.to_string() };
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| failed(&e))?;
    // Readable by all, as any build output is (a temporary file is private).
    let mut temporary = tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(|e| failed(&e))?;
    temporary.write_all(bytes).map_err(|e| failed(&e))?;
    temporary.as_file().sync_all().map_err(|e| failed(&e))?;
    temporary.persist(path).map_err(|e| failed(&e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_the_plugin_s_own_files_and_only_they_move_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let write = |path: &str, text: &str| {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        for path in ["pyproject.toml", "plugin.py", "pkg/build/rules.py", "pkg/tests/data.csv", "README.md"] {
            write(path, path);
        }
        for path in ["build/plugin.wasm", "tests/t.py", "test_plugin.py", "plugin_test.py", "project/trellis.toml"] {
            write(path, "not a source");
        }
        for path in ["__pycache__/plugin.pyc", "pkg/__pycache__/rules.pyc", ".venv/lib.py", "trellis_plugin/x.py"] {
            write(path, "not a source");
        }
        let listed = |dir: &Path| -> Vec<String> {
            sources(dir).unwrap().into_iter().map(|(path, _)| path.display().to_string()).collect()
        };
        assert_eq!(listed(dir.path()), ["pkg/build/rules.py", "pkg/tests/data.csv", "plugin.py", "pyproject.toml"]);

        let manifest =
            Manifest { name: "p".into(), version: "1".into(), kind: Kind::Transformation, module: "plugin".into() };
        let stamp = || stamp_of(&manifest, &sources(dir.path()).unwrap());
        let before = stamp();
        write("README.md", "edited");
        write("test_plugin.py", "edited");
        assert_eq!(stamp(), before, "documentation and tests are not the plugin's logic");
        write("pkg/build/rules.py", "edited");
        let after = stamp();
        assert_ne!(after.sources, before.sources);
        assert_ne!(after.build, before.build);
    }
}
