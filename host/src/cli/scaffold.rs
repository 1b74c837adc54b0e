//! `trellis plugins new NAME`: writes a plugin crate that builds as it is,
//! with its own copy of the SDK and the WIT contract this binary speaks (so
//! it needs no trellis checkout beside it), a unit test, and for a
//! transformation an example project that materializes a view with it.
//! With `--python`, the same as a Python plugin directory, with a copy of
//! the Python SDK for its native tests (`trellis plugins build` builds it).
//!
//! Invariant: what it writes comes from `host/templates/plugin` and
//! `host/templates/python`, the repository's `plugin-sdk/` and `wit/`, and
//! the Python SDK, embedded at build time; it writes only into a directory
//! that is new or empty.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

use super::Status;

#[derive(Debug, Args)]
pub(super) struct NewArgs {
    /// The crate's name, e.g. line-count: lowercase letters, digits and dashes
    name: String,
    /// What the plugin is
    #[arg(long, value_enum, default_value_t = Kind::Transformation)]
    kind: Kind,
    /// Where to write the crate [default: ./NAME]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Write a Python plugin (built with `trellis plugins build`) instead of a Rust crate
    #[arg(long)]
    python: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Kind {
    /// A transformation type: computes a view's data from its inputs
    Transformation,
    /// A version-checksum function: what of a transformation's logic counts as a change
    Checksum,
    /// A scheduling listener: receives every scheduling event
    Listener,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Transformation => "transformation",
            Kind::Checksum => "checksum",
            Kind::Listener => "listener",
        }
    }
}

macro_rules! template {
    ($file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/plugin/", $file))
    };
}

macro_rules! python_template {
    ($file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/python/", $file))
    };
}

macro_rules! sdk_file {
    ($path:literal) => {
        ($path, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../", $path)))
    };
}

/// The SDK and the contract, as this binary was built with them: a plugin
/// built against them is one this binary loads.
const SDK: &[(&str, &str)] = &[
    sdk_file!("plugin-sdk/Cargo.toml"),
    sdk_file!("plugin-sdk/src/bindings.rs"),
    sdk_file!("plugin-sdk/src/checksum.rs"),
    sdk_file!("plugin-sdk/src/config.rs"),
    sdk_file!("plugin-sdk/src/engine.rs"),
    sdk_file!("plugin-sdk/src/files.rs"),
    sdk_file!("plugin-sdk/src/incremental.rs"),
    sdk_file!("plugin-sdk/src/lib.rs"),
    sdk_file!("plugin-sdk/src/listener.rs"),
    sdk_file!("plugin-sdk/src/log.rs"),
    sdk_file!("plugin-sdk/src/transformation.rs"),
    sdk_file!("wit/plugin.wit"),
    sdk_file!("wit/published/plugin@1.0.0.wit"),
    sdk_file!("wit/published/plugin@1.1.0.wit"),
];

/// Where the crate keeps its copy of the SDK.
const SDK_DIR: &str = "trellis-sdk";

/// The example project's day of input (a transformation's crate only).
const EXAMPLE_INPUT: &str = "project/data/example/input/2015/05/01";

/// The files of a new plugin crate, by path inside it.
fn files(name: &str, kind: Kind) -> Vec<(PathBuf, String)> {
    let lib = name.replace('-', "_");
    let fill = |text: &str| text.replace("{{name}}", name).replace("{{lib}}", &lib).replace("{{kind}}", kind.as_str());
    let (code, usage) = match kind {
        Kind::Transformation => (template!("transformation.rs.tmpl"), template!("usage-transformation.md.tmpl")),
        Kind::Checksum => (template!("checksum.rs.tmpl"), template!("usage-checksum.md.tmpl")),
        Kind::Listener => (template!("listener.rs.tmpl"), template!("usage-listener.md.tmpl")),
    };
    let mut files = vec![
        (PathBuf::from("Cargo.toml"), fill(template!("Cargo.toml.tmpl"))),
        (PathBuf::from(".cargo/config.toml"), fill(template!("config.toml.tmpl"))),
        (PathBuf::from(".gitignore"), fill(template!("gitignore.tmpl"))),
        (PathBuf::from("src/lib.rs"), fill(code)),
        (PathBuf::from("README.md"), fill(template!("README.md.tmpl")).replace("{{usage}}", &fill(usage))),
    ];
    if kind == Kind::Transformation {
        files.push((PathBuf::from("project/trellis.toml"), fill(template!("project.toml.tmpl"))));
        files.extend(example_input());
    }
    files.extend(SDK.iter().map(|(path, text)| (Path::new(SDK_DIR).join(path), text.to_string())));
    files
}

/// The files of a new Python plugin, by path inside its directory.
fn python_files(name: &str, kind: Kind) -> Vec<(PathBuf, String)> {
    let lib = name.replace('-', "_");
    let fill = |text: &str| text.replace("{{name}}", name).replace("{{lib}}", &lib).replace("{{kind}}", kind.as_str());
    let (code, test, usage) = match kind {
        Kind::Transformation => (
            python_template!("transformation.py.tmpl"),
            python_template!("test-transformation.py.tmpl"),
            python_template!("usage-transformation.md.tmpl"),
        ),
        Kind::Checksum => (
            python_template!("checksum.py.tmpl"),
            python_template!("test-checksum.py.tmpl"),
            python_template!("usage-checksum.md.tmpl"),
        ),
        Kind::Listener => (
            python_template!("listener.py.tmpl"),
            python_template!("test-listener.py.tmpl"),
            python_template!("usage-listener.md.tmpl"),
        ),
    };
    let readme = fill(python_template!("README.md.tmpl")).replace("{{usage}}", &fill(usage));
    let mut files = vec![
        (PathBuf::from("pyproject.toml"), fill(python_template!("pyproject.toml.tmpl"))),
        (PathBuf::from(format!("{lib}.py")), fill(code)),
        (PathBuf::from(format!("test_{lib}.py")), fill(test)),
        (PathBuf::from(".gitignore"), fill(python_template!("gitignore.tmpl"))),
        (PathBuf::from("README.md"), readme),
    ];
    if kind == Kind::Transformation {
        files.push((PathBuf::from("project/trellis.toml"), fill(python_template!("project.toml.tmpl"))));
        files.extend(example_input());
    }
    // Not the guest glue: it imports componentize-py's bindings, which
    // exist only in a build, and `python3 -m unittest` imports every package.
    let sdk = crate::python::PYTHON_SDK
        .iter()
        .filter(|(path, _)| path.starts_with("trellis_plugin/") && !path.starts_with("trellis_plugin/_guest/"));
    files.extend(sdk.map(|(path, text)| (PathBuf::from(path), text.to_string())));
    files
}

/// The example project's one day of input.
fn example_input() -> [(PathBuf, String); 2] {
    let input = Path::new(EXAMPLE_INPUT);
    [
        (input.join("lines.txt"), "the first line\n\nthe second line\nthe third line\n".to_string()),
        (input.join("_SUCCESS"), String::new()),
    ]
}

/// A crate name cargo takes and a file name without surprises.
fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !starts_well || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') || name.ends_with('-') {
        bail!("`{name}` is not a plugin name: use lowercase letters, digits and dashes, starting with a letter");
    }
    Ok(())
}

pub(super) fn new(args: &NewArgs) -> anyhow::Result<Status> {
    check_name(&args.name)?;
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        bail!("{} exists and is not empty; name a new or empty directory with --dir", dir.display());
    }
    let files = if args.python { python_files(&args.name, args.kind) } else { files(&args.name, args.kind) };
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let shown = dir.display();
    if args.python {
        println!("wrote the Python {} plugin {} in {shown}", args.kind.as_str(), args.name);
        println!(
            "next:\n  cd {shown}\n  python3 -m unittest        # its tests, natively\n  trellis plugins build .    # builds the component"
        );
        if args.kind == Kind::Transformation {
            println!("  trellis materialize -p project -v example.mart/Lines/2015/05/01");
        }
        println!("(README.md there says more)");
        return Ok(Status::Success);
    }
    println!("wrote the {} plugin {} in {}", args.kind.as_str(), args.name, dir.display());
    ensure_wasm_target(&dir);
    println!("next:\n  cd {shown}\n  cargo test     # its unit test\n  cargo plugin   # builds the component");
    if args.kind == Kind::Transformation {
        println!("  trellis materialize -p project -v example.mart/Lines/2015/05/01");
    }
    println!("(README.md there says more)");
    Ok(Status::Success)
}

/// The crate builds for wasm32-wasip2: the toolchain that will build it
/// gets the target through rustup if it lacks it, with a word on stderr;
/// without rustup, the user is told what is needed.
fn ensure_wasm_target(dir: &Path) {
    const TARGET: &str = "wasm32-wasip2";
    let installed =
        std::process::Command::new("rustup").current_dir(dir).args(["target", "list", "--installed"]).output();
    match installed {
        Ok(output) if output.status.success() => {
            if String::from_utf8_lossy(&output.stdout).lines().any(|line| line.trim() == TARGET) {
                return;
            }
            eprintln!("installing the {TARGET} target the plugin builds for (rustup target add {TARGET})");
            let added = std::process::Command::new("rustup").current_dir(dir).args(["target", "add", TARGET]).status();
            if !added.is_ok_and(|status| status.success()) {
                eprintln!("warning: `rustup target add {TARGET}` failed; the plugin builds once it succeeds");
            }
        }
        _ => eprintln!(
            "note: rustup was not found; the plugin builds with a Rust toolchain that has the {TARGET} target"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_sdk_and_the_contract_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut on_disk = Vec::new();
        for dir in ["plugin-sdk/src", "wit", "wit/published"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
                let path = entry.path();
                let wanted = path.extension().is_some_and(|e| e == "rs" || e == "wit");
                if path.is_file() && wanted {
                    on_disk.push(path.strip_prefix(root).unwrap().display().to_string());
                }
            }
        }
        on_disk.push("plugin-sdk/Cargo.toml".to_string());
        on_disk.sort();
        let mut embedded: Vec<String> = SDK.iter().map(|(path, _)| path.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "SDK in scaffold.rs lists what a plugin crate needs of plugin-sdk/ and wit/");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("line-count").is_ok() && check_name("a2").is_ok());
        for bad in ["", "Line", "2lines", "line_count", "line-", "../x", "a b"] {
            let error = check_name(bad).unwrap_err().to_string();
            assert!(error.contains("is not a plugin name"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_templates_are_filled() {
        for kind in [Kind::Transformation, Kind::Checksum, Kind::Listener] {
            for (path, text) in files("line-count", kind).into_iter().filter(|(path, _)| !path.starts_with(SDK_DIR)) {
                assert!(!text.contains("{{"), "{} of a {} is not filled", path.display(), kind.as_str());
            }
        }
    }
}
