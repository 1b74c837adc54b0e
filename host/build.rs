//! Builds the `plugins/` workspace (sample plugins and hostile test
//! fixtures) for wasm32-wasip2, so that the binary can embed the samples and
//! the tests always run against freshly built plugins; and lists the Python
//! SDK's files for the binary to embed (`python_sdk.rs` in OUT_DIR), so that
//! `trellis plugins build` needs no checkout.
//!
//! The nested cargo gets its own target directory (`<target>/plugins`), which
//! avoids deadlocking on the outer build's lock, and an environment cleaned
//! of the outer build's variables. A missing wasm target is installed with
//! rustup, or the build stops with one line naming the command to run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let Some(root) = manifest_dir.parent().map(Path::to_path_buf) else {
        fail("CARGO_MANIFEST_DIR has no parent: host/ must sit in the trellis checkout");
    };
    let plugins = root.join("plugins");
    let watched = [
        "plugins/Cargo.toml",
        "plugins/Cargo.lock",
        "plugins/.cargo/config.toml",
        "plugin-sdk/Cargo.toml",
        "plugin-sdk/src",
        "wit",
        "rust-toolchain.toml",
    ];
    for path in watched {
        println!("cargo::rerun-if-changed={}", root.join(path).display());
    }
    let Ok(members) = std::fs::read_dir(&plugins) else {
        fail(&format!("cannot read {}", plugins.display()));
    };
    for member in members.flatten() {
        let path = member.path();
        // plugins/python holds Python plugins, which cargo does not build.
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target" && n != ".cargo" && n != "python") {
            println!("cargo::rerun-if-changed={}", path.display());
        }
    }

    // `<target dir>/<profile>/build/trellis-<hash>/out` → `<target dir>/plugins`,
    // shared by every profile, wherever cargo was told to put its target dir.
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    embed_python_sdk(&root, &out_dir);
    let Some(target_dir) = out_dir.ancestors().nth(4).map(|dir| dir.join("plugins")) else {
        fail(&format!("unexpected OUT_DIR {}", out_dir.display()));
    };

    ensure_wasm_target();

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&plugins)
        .args(["build", "--release", "--target", TARGET, "--target-dir"])
        .arg(&target_dir)
        .stdin(Stdio::null())
        // Our stdout is read by cargo as directives: keep the nested build's off it.
        .stdout(Stdio::from(std::io::stderr()));
    clean_environment(&mut command);
    match command.status() {
        Ok(status) if status.success() => {}
        Ok(_) => fail("building the plugins in plugins/ for wasm32-wasip2 failed; the errors are above"),
        Err(e) => fail(&format!("cannot run cargo to build the plugins in plugins/: {e}")),
    }
    let built = target_dir.join(TARGET).join("release");
    // If someone deletes a built plugin, build it again.
    if let Ok(entries) = std::fs::read_dir(&built) {
        for entry in entries.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "wasm")) {
            println!("cargo::rerun-if-changed={}", entry.path().display());
        }
    }
    println!("cargo::rustc-env=TRELLIS_PLUGINS_DIR={}", built.display());
}

/// Writes `python_sdk.rs`: `PYTHON_SDK`, every file of
/// `plugin-sdk-python/trellis_plugin` (by path below `plugin-sdk-python`)
/// and the build's entry template, as `include_str!`s.
fn embed_python_sdk(root: &Path, out_dir: &Path) {
    let sdk = root.join("plugin-sdk-python");
    println!("cargo::rerun-if-changed={}", sdk.display());
    let mut files = Vec::new();
    let mut pending = vec![sdk.join("trellis_plugin")];
    while let Some(dir) = pending.pop() {
        println!("cargo::rerun-if-changed={}", dir.display());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            fail(&format!("cannot read {}", dir.display()));
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && path.file_name().is_some_and(|name| name != "__pycache__") {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "py") {
                files.push(path);
            }
        }
    }
    files.push(sdk.join("trellis_main.py.tmpl"));
    files.push(sdk.join("pyproject.toml"));
    files.sort();
    let mut rust = String::from(
        "/// The Python SDK's files, by path below `plugin-sdk-python/`.\npub const PYTHON_SDK: &[(&str, &str)] = &[\n",
    );
    for file in &files {
        println!("cargo::rerun-if-changed={}", file.display());
        let relative = file.strip_prefix(&sdk).unwrap_or(file).display().to_string();
        rust.push_str(&format!("    ({relative:?}, include_str!({:?})),\n", file.display().to_string()));
    }
    rust.push_str("];\n");
    if let Err(e) = std::fs::write(out_dir.join("python_sdk.rs"), rust) {
        fail(&format!("cannot write python_sdk.rs in {}: {e}", out_dir.display()));
    }
}

/// Installs the wasm target through rustup when the toolchain lacks it.
fn ensure_wasm_target() {
    if has_wasm_target() {
        return;
    }
    let installed = Command::new("rustup")
        .args(["target", "add", TARGET])
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .is_ok_and(|status| status.success());
    if !installed || !has_wasm_target() {
        fail(&format!("the {TARGET} target is missing and could not be installed: run `rustup target add {TARGET}`"));
    }
}

fn has_wasm_target() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(output) = Command::new(rustc).args(["--print", "target-libdir", "--target", TARGET]).output() else {
        return false;
    };
    let libdir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    output.status.success()
        && std::fs::read_dir(Path::new(&libdir))
            .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("libstd")))
            .unwrap_or(false)
}

/// Removes what the outer build set for itself (its target, flags, clippy
/// wrapper, package metadata), keeping the user's cargo home and registries.
fn clean_environment(command: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let outer_cargo = (key.starts_with("CARGO") || key.starts_with("__CARGO"))
            && !(key == "CARGO_HOME"
                // The jobserver: the nested build shares the outer build's job slots.
                || key == "CARGO_MAKEFLAGS"
                || key.starts_with("CARGO_NET_")
                || key.starts_with("CARGO_HTTP_")
                || key.starts_with("CARGO_REGISTRIES_")
                || key.starts_with("CARGO_REGISTRY_"));
        let outer_rust = key.starts_with("RUST") && !key.starts_with("RUSTUP_");
        let build_script =
            matches!(key, "OUT_DIR" | "TARGET" | "HOST" | "PROFILE" | "OPT_LEVEL" | "DEBUG" | "NUM_JOBS");
        if outer_cargo || outer_rust || build_script {
            command.env_remove(key);
        }
    }
}

fn fail(message: &str) -> ! {
    println!("cargo::error={message}");
    std::process::exit(1);
}
