//! `/openapi.json` checked against what a real `trellis serve` of the demo
//! answers, by schemathesis (from the package registry, installed into
//! trellis's tools directory when it is missing, pip's cache kept): every
//! answer's status, content type, headers and body must be what the
//! description says, schema-violating requests must be refused, and none
//! may be a 500. A bounded budget of cases (a seed, a few examples per
//! operation, a minute at most), so that CI stays within its time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::support::{Server, demo};

/// The schemathesis the test runs.
const SCHEMATHESIS: &str = "4.32.5";

/// Where schemathesis is installed, installing it first if it is not; a
/// machine without Python and pip fails the test saying so, never skips it.
fn schemathesis() -> (PathBuf, PathBuf) {
    static INSTALLED: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        let tools = trellis::python::default_tools_dir()
            .ok_or("no tools directory: set TRELLIS_TOOLS_DIR, XDG_CACHE_HOME or HOME")?;
        let python = trellis::python::interpreter((3, 9)).map_err(|e| {
            format!(
                "it needs Python 3.9 or newer with pip to install schemathesis (or name one with TRELLIS_PYTHON): {e}"
            )
        })?;
        let packages = tools.join(format!("schemathesis-{SCHEMATHESIS}"));
        if !packages.join("schemathesis").is_dir() {
            eprintln!("installing schemathesis {SCHEMATHESIS} into {} (once)", packages.display());
            trellis::python::pip_install(
                &python,
                &tools,
                &packages,
                &format!("schemathesis=={SCHEMATHESIS}"),
                "schemathesis",
            )
            .map_err(|reason| format!("cannot install schemathesis {SCHEMATHESIS}: {reason}"))?;
        }
        Ok((python, packages))
    });
    match installed {
        Ok(found) => found.clone(),
        Err(reason) => panic!("the API description's test: {reason}"),
    }
}

/// Runs schemathesis's `st run ARGS` from `packages`, in `dir`, with
/// nothing of the interpreter's own site-packages.
fn st(python: &Path, packages: &Path, dir: &Path, args: &[&str]) -> std::process::Output {
    const LAUNCHER: &str = "import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'st'; \
                            from schemathesis.cli import schemathesis; sys.exit(schemathesis())";
    Command::new(python)
        .current_dir(dir)
        .args(["-I", "-c", LAUNCHER])
        .arg(packages)
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("python runs")
}

#[test]
fn the_api_answers_as_its_description_says() {
    let (python, packages) = schemathesis();
    let dir = tempfile::tempdir().unwrap();
    let project = demo(dir.path());
    let server = Server::start(&project, &[], &[("TRELLIS_TOKEN", "t")]);
    let spec = format!("{}/openapi.json", server.url);
    let output = st(
        &python,
        &packages,
        dir.path(),
        &[
            &spec,
            "--header",
            "Authorization: Bearer t",
            // Every check but one: a path's pattern is a string the
            // description cannot give the grammar of, so a generated one
            // is rightly refused with a 400.
            "--exclude-checks",
            "positive_data_acceptance",
            // The event stream never ends by itself.
            "--exclude-path",
            "/events",
            "--max-examples",
            "10",
            "--max-time",
            "60",
            "--seed",
            "1",
            "--workers",
            "1",
            "--generation-database",
            "none",
            "--request-timeout",
            "30",
            "--no-color",
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "schemathesis found disagreements:\n{stdout}\n{stderr}");
    // It did test: the summary counts the cases it generated.
    let generated = stdout
        .lines()
        .find_map(|line| line.trim().split_once(" generated").and_then(|(n, _)| n.trim().parse::<u64>().ok()))
        .unwrap_or_else(|| panic!("no count of cases in:\n{stdout}"));
    assert!(generated >= 100, "only {generated} cases:\n{stdout}");
    assert_eq!(server.stop(), 0);
}
