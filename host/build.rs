//! Builds the `plugins/` workspace (sample plugins and hostile test
//! fixtures) for wasm32-wasip2, so that the binary can embed the samples and
//! the tests always run against freshly built plugins.
//!
//! The nested cargo gets its own target directory (`target/plugins`), which
//! avoids deadlocking on the outer build's lock, and an environment cleaned
//! of the outer build's variables. A missing wasm target is installed with
//! rustup, or the build stops with one line naming the command to run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("host/ has a parent").to_path_buf();
    let plugins = root.join("plugins");
    for watched in ["plugins/Cargo.toml", "plugins/Cargo.lock", "plugin-sdk/Cargo.toml", "plugin-sdk/src", "wit"] {
        println!("cargo::rerun-if-changed={}", root.join(watched).display());
    }
    for member in std::fs::read_dir(&plugins).expect("plugins/ exists").flatten() {
        let path = member.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target" && n != ".cargo") {
            println!("cargo::rerun-if-changed={}", path.display());
        }
    }
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_DIR");

    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| if dir.is_relative() { root.join(dir) } else { dir })
        .unwrap_or_else(|| root.join("target"))
        .join("plugins");

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
    let status = command.status();
    if !matches!(status, Ok(status) if status.success()) {
        fail("building the plugins in plugins/ for wasm32-wasip2 failed; the errors are above");
    }
    let built = target_dir.join(TARGET).join("release");
    println!("cargo::rustc-env=TRELLIS_PLUGINS_DIR={}", built.display());
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
        let outer_cargo = key.starts_with("CARGO")
            && !(key == "CARGO_HOME"
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
