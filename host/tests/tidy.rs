//! The house's invariants checked, not only written (in the style of
//! rust-analyzer's `xtask/src/tidy.rs`): which crates each room may import,
//! which rooms may touch files, no import circles between the files of a
//! room, a `//!` line at the top of every Rust file, and a code map
//! (ARCHITECTURE.md) that names every room.
//!
//! Each rule is a function over a source tree that returns its problems,
//! each naming a file and a line; the test on the real tree expects none,
//! and a unit test on a small fake tree breaks each rule on purpose. The
//! test reads files only and does not use the `trellis` crate, so it
//! builds and runs in seconds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The crates only one room may import: the boundary each sits behind.
const CRATE_OWNERS: &[(&str, &str)] = &[
    // The metastore is the one place that knows the store is sled.
    ("sled", "metastore"),
    // The runtime is the one place that knows plugins are wasmtime components.
    ("wasmtime", "runtime"),
    ("wasmtime_wasi", "runtime"),
    ("wasmtime_wasi_io", "runtime"),
    ("wasmtime_wasi_http", "runtime"),
    ("wasmparser", "runtime"),
    ("wasm_encoder", "runtime"),
    // The API is the one place that knows the server is axum over hyper.
    ("axum", "api"),
    ("tower", "api"),
    ("tower_http", "api"),
    ("hyper", "api"),
    ("hyper_util", "api"),
    ("utoipa", "api"),
    ("maud", "api"),
    ("rust_sugiyama", "api"),
    // The storage room is the one place that knows view data may be in an object store.
    ("object_store", "storage"),
    // The terminal (prompts, progress bars) and the remote client are the CLI's.
    ("reqwest", "cli"),
    ("rustyline", "cli"),
    ("indicatif", "cli"),
];

/// What touches files: only `storage` touches a view's files, and the
/// modules of `FILES_ALLOWED` touch files of their own.
const FILE_ACCESS: &[&str] =
    &["std::fs", "tokio::fs", "fs::", "File::", "rename(", "renameat", "inotify", "rustix::fs", "cap_std"];

/// Modules (paths under host/src, a directory ending in `/`) that may touch
/// files other than a view's.
const FILES_ALLOWED: &[(&str, &str)] = &[
    ("storage/", "view data: publishing, staging, flags, listings, watching"),
    ("catalog/", "the project's files (trellis.toml, resources)"),
    ("metastore/", "its own directory, its commits file and backups"),
    ("runtime/cache.rs", "the compiled plugin cache"),
    ("runtime/engine.rs", "reading a plugin's component file"),
    ("runtime/budget.rs", "the cgroup's memory limit"),
    ("python/", "the Python toolchain and plugin builds"),
    ("cli/", "scaffolds, the demo, token files, the announce file, benchmarks"),
    ("engines/spark/install.rs", "installing Spark"),
    ("engines/spark/eventlog.rs", "Spark's own event log"),
    ("engines/spark/scratch.rs", "Spark's scratch directory: its runner, its job and the result it writes back"),
    ("listeners/supervisor.rs", "a listener's state directory"),
];

/// Offenders of the file rule let through for now: none since view data
/// moved into `storage` (issue 40). It may not gain an entry.
const FILES_PENDING: &[&str] = &[];

/// Import circles let through, each a set of files under host/src: none
/// since the executor and the coordinators moved out of the scheduler's
/// core (issue 40). It may not gain an entry.
const CIRCLES_PENDING: &[&[&str]] = &[];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

fn assert_none(rule: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{rule}:\n{}", problems.join("\n"));
}

#[test]
fn rooms_import_only_their_crates() {
    assert_none("a crate imported outside its room", crate_imports(&repository().join("host/src")));
}

#[test]
fn only_storage_touches_view_files() {
    assert_none("file access outside storage", file_access(&repository().join("host/src"), FILES_PENDING));
}

#[test]
fn no_import_circles_within_a_room() {
    assert_none("import circles within a room", import_circles(&repository().join("host/src"), CIRCLES_PENDING));
}

/// Where an HTTP client may be built: reqwest has TLS without a crypto
/// provider of its own, so a client built before the provider is installed
/// panics, and only these builders install it first.
const HTTP_CLIENT_BUILDERS: &[&str] = &["host/src/cli/remote.rs", "tests/it/support.rs"];

#[test]
fn http_clients_are_built_where_the_tls_provider_is_installed() {
    let root = repository();
    assert_none("an HTTP client built outside the builders", http_clients(&root, HTTP_CLIENT_BUILDERS));
}

#[test]
fn every_file_starts_with_its_doc_line() {
    let root = repository();
    let trees = ["host", "plugin-sdk", "plugins", "tests"].map(|tree| root.join(tree));
    assert_none("a file without its //! line", doc_lines(&root, &trees));
}

#[test]
fn the_code_map_names_every_room() {
    let root = repository();
    assert_none(
        "a room missing from ARCHITECTURE.md",
        rooms_named(&root.join("host/src"), &root.join("ARCHITECTURE.md")),
    );
}

// ---------------------------------------------------------------- the rules

/// Rule a: a crate of `CRATE_OWNERS` used outside its room.
fn crate_imports(src: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for file in rust_files(src) {
        let relative = relative(src, &file);
        let room = room_of(&relative);
        for (number, line) in code_lines(&read(&file)) {
            for (krate, owner) in CRATE_OWNERS {
                if room != *owner && names_crate(line, krate) {
                    problems
                        .push(format!("host/src/{relative}:{number}: uses `{krate}`, which only `{owner}` may import"));
                }
            }
        }
    }
    problems
}

/// Rule b: file access (`FILE_ACCESS`) outside `FILES_ALLOWED` and `pending`.
fn file_access(src: &Path, pending: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in rust_files(src) {
        let relative = relative(src, &file);
        let covered = |prefix: &&str| relative == *prefix || (prefix.ends_with('/') && relative.starts_with(prefix));
        if FILES_ALLOWED.iter().map(|(prefix, _)| prefix).any(&covered) || pending.iter().any(&covered) {
            continue;
        }
        for (number, line) in code_lines(&read(&file)) {
            if let Some(what) = FILE_ACCESS.iter().find(|what| mentions(line, what)) {
                problems.push(format!(
                    "host/src/{relative}:{number}: touches files (`{what}`): only `storage` touches a view's files"
                ));
            }
        }
    }
    problems
}

/// Rule c: a circle of `use super::`, `use crate::` and `crate::x::y` paths
/// between the files of one room (a top-level module of host/src). The
/// room's root (its `mod.rs`) is left out: it declares and re-exports every
/// file, so every file depends on it and it on them.
fn import_circles(src: &Path, pending: &[&[&str]]) -> Vec<String> {
    let files: Vec<String> = rust_files(src).iter().map(|file| relative(src, file)).collect();
    let modules: BTreeMap<Vec<String>, String> = files.iter().map(|file| (module_path(file), file.clone())).collect();
    // edges[from][to] = the first line of `from` that names `to`.
    let mut edges: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for file in &files {
        let room = room_of(file);
        let here = module_path(file);
        let is_root = |module: &[String]| module.len() == 1;
        if is_root(&here) {
            continue;
        }
        for (number, path) in referenced_paths(&read(&src.join(file))) {
            let Some(target) = resolve(&here, &path) else { continue };
            // The longest prefix of the path that is a file of the room.
            let found = (1..=target.len()).rev().find_map(|n| modules.get(&target[..n]).filter(|_| target[0] == room));
            if let Some(to) = found
                && to != file
                && !is_root(&module_path(to))
            {
                edges.entry(file.clone()).or_default().entry(to.clone()).or_insert(number);
            }
        }
    }
    let mut problems = Vec::new();
    for component in strongly_connected(&edges) {
        let set: BTreeSet<&str> = component.iter().map(String::as_str).collect();
        if pending.iter().any(|known| set.iter().all(|file| known.contains(file))) {
            continue;
        }
        let chain = circle_in(&component, &edges);
        let mut text = format!("an import circle among {}:", component.join(", "));
        for pair in chain.windows(2) {
            let line = edges[&pair[0]][&pair[1]];
            write!(text, "\n  host/src/{}:{line} uses {}", pair[0], pair[1]).unwrap();
        }
        problems.push(text);
    }
    problems
}

/// Rule f: reqwest clients are built only in `allowed` files (see
/// `HTTP_CLIENT_BUILDERS`).
fn http_clients(root: &Path, allowed: &[&str]) -> Vec<String> {
    const BUILDING: [&str; 3] = ["reqwest::get(", "reqwest::Client::new(", "reqwest::Client::builder("];
    let mut problems = Vec::new();
    for tree in ["host/src", "tests/it"] {
        for file in rust_files(&root.join(tree)) {
            let name = relative(root, &file);
            if allowed.contains(&name.as_str()) {
                continue;
            }
            for (index, line) in read(&file).lines().enumerate() {
                if let Some(call) = BUILDING.iter().find(|call| line.contains(*call)) {
                    problems.push(format!("{name}:{}: {call} builds a client without the TLS provider", index + 1));
                }
            }
        }
    }
    problems
}

/// Rule d: the first non-blank line of every `.rs` file is a `//!` line.
fn doc_lines(root: &Path, trees: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for tree in trees {
        for file in rust_files(tree) {
            let text = read(&file);
            let first = text.lines().enumerate().find(|(_, line)| !line.trim().is_empty());
            if !matches!(first, Some((_, line)) if line.starts_with("//!")) {
                let number = first.map_or(1, |(index, _)| index + 1);
                problems.push(format!(
                    "{}:{number}: does not start with a `//!` line saying what it is for",
                    relative(root, &file)
                ));
            }
        }
    }
    problems
}

/// Rule e: every room (top-level module of host/src but `lib.rs` and
/// `main.rs`) is named in the code map as `` `name/` `` or `` `name.rs` ``.
fn rooms_named(src: &Path, map: &Path) -> Vec<String> {
    let text = read(map);
    let mut problems = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(src).expect("host/src is a directory").flatten().collect();
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let named = if entry.path().is_dir() {
            format!("`{name}/`")
        } else if name.ends_with(".rs") && name != "lib.rs" && name != "main.rs" {
            format!("`{name}`")
        } else {
            continue;
        };
        if !text.contains(&named) {
            problems.push(format!("{}:1: names no room {named} (host/src/{name})", map.display()));
        }
    }
    problems
}

// ---------------------------------------------------------------- reading source

fn read(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// Every `.rs` file under `dir`, sorted, leaving out build output and hidden
/// directories.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let entries = std::fs::read_dir(&next).unwrap_or_else(|e| panic!("listing {}: {e}", next.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    pending.push(path);
                }
            } else if name.ends_with(".rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn relative(base: &Path, file: &Path) -> String {
    file.strip_prefix(base).unwrap_or(file).to_string_lossy().replace('\\', "/")
}

/// `scheduler/run.rs` and `scheduler/mod.rs` are in room `scheduler`, `clock.rs` in `clock`.
fn room_of(relative: &str) -> &str {
    let first = relative.split('/').next().unwrap_or(relative);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// `catalog/project/mod.rs` is module `catalog::project`, `catalog/time.rs` `catalog::time`.
fn module_path(relative: &str) -> Vec<String> {
    let mut parts: Vec<String> = relative.trim_end_matches(".rs").split('/').map(String::from).collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts
}

/// The numbered lines of code a rule reads: comments removed (doc links are
/// no imports) and a file's `#[cfg(test)]` module left out (tests may use
/// whatever they set up).
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    let mut previous_is_cfg_test = false;
    // Within a `#[cfg(test)] mod name {`: the braces still open.
    let mut test_depth = 0usize;
    for (index, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        let trimmed = code.trim_start();
        let opens = code.matches('{').count();
        let closes = code.matches('}').count();
        if test_depth > 0 {
            test_depth = (test_depth + opens).saturating_sub(closes);
            continue;
        }
        if previous_is_cfg_test && (trimmed.starts_with("mod ") || trimmed.starts_with("pub mod ")) {
            lines.pop();
            previous_is_cfg_test = false;
            test_depth = opens.saturating_sub(closes);
            continue;
        }
        previous_is_cfg_test = trimmed.starts_with("#[cfg(test)]");
        lines.push((index + 1, code));
    }
    lines
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `line` holds `needle` starting at a token boundary (not the tail
/// of a longer name or path: `std::fs` is not the `fs::` rule's business).
fn mentions(line: &str, needle: &str) -> bool {
    line.match_indices(needle).any(|(at, _)| line[..at].chars().next_back().is_none_or(|c| !is_ident(c) && c != ':'))
}

/// Whether `line` uses crate `name`: `name::...`, `use name;` or `use name as`.
fn names_crate(line: &str, name: &str) -> bool {
    line.match_indices(name).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = &line[at + name.len()..];
        let starts = before.is_none_or(|c| !is_ident(c) && c != ':');
        starts && (after.starts_with("::") || (line[..at].trim_end().ends_with("use") && !after.starts_with(is_ident)))
    })
}

/// Every `crate::`, `super::` and `self::` path a file names outside its
/// tests, with its line, grouped `use` trees expanded
/// (`use super::{a::X, b}` names `super::a::X` and `super::b`).
fn referenced_paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let lines = code_lines(text);
    // Tokens with the line they are on.
    let mut tokens: Vec<(usize, String)> = Vec::new();
    for (number, line) in &lines {
        let mut chars = line.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            if is_ident(c) {
                let mut end = at + c.len_utf8();
                while let Some(&(next, d)) = chars.peek() {
                    if !is_ident(d) {
                        break;
                    }
                    end = next + d.len_utf8();
                    chars.next();
                }
                tokens.push((*number, line[at..end].to_string()));
            } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
                chars.next();
                tokens.push((*number, "::".into()));
            } else if "{},;*".contains(c) {
                tokens.push((*number, c.to_string()));
            } else if c == '"' {
                // Skip a string literal (paths in strings are no imports).
                let mut escaped = false;
                for (_, d) in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' {
                        escaped = true;
                    } else if d == '"' {
                        break;
                    }
                }
            } else if !c.is_whitespace() {
                tokens.push((*number, c.to_string()));
            }
        }
    }
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].1.as_str();
        let previous_is_path = i > 0 && tokens[i - 1].1 == "::";
        if token == "use" {
            let mut j = i + 1;
            use_tree(&tokens, &mut j, Vec::new(), &mut paths);
            i = j;
        } else if matches!(token, "crate" | "super" | "self") && !previous_is_path {
            let (number, mut path) = (tokens[i].0, vec![token.to_string()]);
            let mut j = i + 1;
            while j + 1 < tokens.len() && tokens[j].1 == "::" && tokens[j + 1].1.starts_with(is_ident) {
                path.push(tokens[j + 1].1.clone());
                j += 2;
            }
            paths.push((number, path));
            i = j;
        } else {
            i += 1;
        }
    }
    paths
}

/// Expands one `use` tree starting at `tokens[*at]` under `prefix`.
fn use_tree(tokens: &[(usize, String)], at: &mut usize, prefix: Vec<String>, paths: &mut Vec<(usize, Vec<String>)>) {
    let mut path = prefix;
    while *at < tokens.len() {
        let (number, token) = (&tokens[*at].0, tokens[*at].1.as_str());
        match token {
            "{" => {
                *at += 1;
                while *at < tokens.len() && tokens[*at].1 != "}" {
                    use_tree(tokens, at, path.clone(), paths);
                    if *at < tokens.len() && tokens[*at].1 == "," {
                        *at += 1;
                    }
                }
                *at += 1;
                return;
            }
            "::" => *at += 1,
            "," | "}" | ";" => {
                if !path.is_empty() {
                    paths.push((*number, path));
                }
                if token == ";" {
                    *at += 1;
                }
                return;
            }
            "as" => *at += 2,
            "*" => *at += 1,
            _ => {
                path.push(token.to_string());
                *at += 1;
            }
        }
    }
}

/// The absolute module path `path` names from module `here` (a `mod.rs`
/// file is its directory's module; `super` is relative to that); `None`
/// for a path into another crate.
fn resolve(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("super") | Some("self") => here.to_vec(),
        _ => return None,
    };
    let mut rest = path;
    if rest.first().is_some_and(|s| s == "crate" || s == "self") {
        rest = &rest[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    (!base.is_empty()).then_some(base)
}

/// The strongly connected components with more than one file (petgraph's
/// Tarjan), each sorted, in the order of their first file.
fn strongly_connected(edges: &BTreeMap<String, BTreeMap<String, usize>>) -> Vec<Vec<String>> {
    let mut graph = petgraph::Graph::<&str, ()>::new();
    let mut nodes: BTreeMap<&str, petgraph::graph::NodeIndex> = BTreeMap::new();
    for file in edges.iter().flat_map(|(from, targets)| std::iter::once(from).chain(targets.keys())) {
        nodes.entry(file.as_str()).or_insert_with(|| graph.add_node(file.as_str()));
    }
    for (from, targets) in edges {
        for to in targets.keys() {
            graph.add_edge(nodes[from.as_str()], nodes[to.as_str()], ());
        }
    }
    let mut components: Vec<Vec<String>> = petgraph::algo::tarjan_scc(&graph)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            let mut files: Vec<String> = component.into_iter().map(|index| graph[index].to_string()).collect();
            files.sort();
            files
        })
        .collect();
    components.sort();
    components
}

/// One circle through the first file of `component`, as a chain of files
/// that ends where it starts (the shortest, found breadth first).
fn circle_in(component: &[String], edges: &BTreeMap<String, BTreeMap<String, usize>>) -> Vec<String> {
    let start = &component[0];
    let inside: BTreeSet<&String> = component.iter().collect();
    let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in edges.get(node).into_iter().flat_map(|targets| targets.keys()) {
            if !inside.contains(next) {
                continue;
            }
            if next == start {
                let mut chain = vec![start.clone(), node.clone()];
                let mut at = node;
                while at != start {
                    at = came_from[at];
                    chain.push(at.clone());
                }
                chain.reverse();
                return chain;
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    component.to_vec()
}

// ---------------------------------------------------------------- each rule caught

/// A fake tree in a temporary directory: `(path, contents)` pairs.
fn fake_tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, contents) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    dir
}

#[test]
fn a_crate_imported_outside_its_room_is_caught() {
    let tree = fake_tree(&[
        ("metastore/mod.rs", "//! The store.\nuse sled::Db;\n"),
        ("scheduler/run.rs", "//! A run.\n// sled:: in a comment is no import\nuse std::io;\nuse sled::Tree;\n"),
        ("api/mod.rs", "//! The API.\nfn f() { let _ = wasmtime::Engine::default(); }\n"),
        ("cli/mod.rs", "//! The CLI.\nuse axum;\n"),
        (
            "runtime/mod.rs",
            "//! The runtime.\nuse wasmtime::Engine;\n#[cfg(test)]\nmod tests {\n    use sled::Db;\n}\n",
        ),
        (
            "lattice/mod.rs",
            "//! After a test module.\n#[cfg(test)]\nmod tests {\n    fn f() {\n        sled::open(p);\n    }\n}\nfn g() { sled::open(p); }\n",
        ),
    ]);
    let problems = crate_imports(tree.path());
    assert_eq!(
        problems,
        [
            "host/src/api/mod.rs:2: uses `wasmtime`, which only `runtime` may import",
            "host/src/cli/mod.rs:2: uses `axum`, which only `api` may import",
            "host/src/lattice/mod.rs:8: uses `sled`, which only `metastore` may import",
            "host/src/scheduler/run.rs:4: uses `sled`, which only `metastore` may import",
        ]
    );
}

#[test]
fn file_access_outside_storage_is_caught() {
    let tree = fake_tree(&[
        ("storage/local.rs", "//! Local.\nuse std::fs;\nfn f() { fs::rename(a, b); }\n"),
        ("catalog/mod.rs", "//! Project files.\nfn f() { std::fs::read(p); }\n"),
        ("scheduler/publish.rs", "//! Publishing.\nfn f() { std::fs::rename(a, b); }\n"),
        ("scheduler/run.rs", "//! A run.\nuse std::{fs, io};\nfn f() {\n    fs::remove_dir_all(p);\n}\n"),
        ("api/ui/mod.rs", "//! Pages.\nfn f() { let _ = File::open(p); }\n"),
        ("lattice/mod.rs", "//! Lattice.\n// std::fs in a comment\nfn f() { tokio::fs::read(p); }\n"),
        ("listeners/watch.rs", "//! Watch.\nuse inotify::Inotify;\n"),
    ]);
    let problems = file_access(tree.path(), &["scheduler/publish.rs"]);
    assert_eq!(
        problems,
        [
            "host/src/api/ui/mod.rs:2: touches files (`File::`): only `storage` touches a view's files",
            "host/src/lattice/mod.rs:3: touches files (`tokio::fs`): only `storage` touches a view's files",
            "host/src/listeners/watch.rs:2: touches files (`inotify`): only `storage` touches a view's files",
            "host/src/scheduler/run.rs:4: touches files (`fs::`): only `storage` touches a view's files",
        ]
    );
}

#[test]
fn an_import_circle_is_caught_with_its_chain() {
    let tree = fake_tree(&[
        ("store/mod.rs", "//! Root.\nmod check;\nmod format;\nmod events;\npub use check::Check;\n"),
        ("store/check.rs", "//! Check.\nuse super::format::{decode, FORMAT};\nuse super::Error;\n"),
        ("store/format.rs", "//! Format.\nfn f() {\n    super::events::chunk();\n}\n"),
        (
            "store/events.rs",
            "//! Events (a doc link to [`x`](super::check::X) is no import).\nuse crate::store::{Error, check::{guarded as g}};\n",
        ),
        // A chain without a circle, and a file that names only itself and the root.
        ("store/views.rs", "//! Views.\nuse super::format::decode;\nuse self::inner::X;\n"),
        ("other/a.rs", "//! A.\nuse super::b::B;\n"),
        ("other/b.rs", "//! B.\nuse crate::other::a::A;\n"),
    ]);
    let problems = import_circles(tree.path(), &[&["other/a.rs", "other/b.rs"]]);
    assert_eq!(
        problems,
        [
            "an import circle among store/check.rs, store/events.rs, store/format.rs:\n  host/src/store/check.rs:2 uses store/format.rs\n  host/src/store/format.rs:3 uses store/events.rs\n  host/src/store/events.rs:2 uses store/check.rs"
        ]
    );
    assert_eq!(import_circles(tree.path(), &[&["other/a.rs"]]).len(), 2, "a circle only partly pending is reported");
}

#[test]
fn a_file_without_its_doc_line_is_caught() {
    let tree = fake_tree(&[
        ("host/src/good.rs", "\n//! Good.\nfn f() {}\n"),
        ("host/src/bad.rs", "// A plain comment.\n//! Too late.\n"),
        ("plugins/x/src/lib.rs", "#![no_std]\n"),
        ("plugins/target/debug/build/out.rs", "generated\n"),
    ]);
    let trees = ["host", "plugins"].map(|name| tree.path().join(name));
    let problems = doc_lines(tree.path(), &trees);
    assert_eq!(
        problems,
        [
            "host/src/bad.rs:1: does not start with a `//!` line saying what it is for",
            "plugins/x/src/lib.rs:1: does not start with a `//!` line saying what it is for",
        ]
    );
}

#[test]
fn a_room_missing_from_the_code_map_is_caught() {
    let tree = fake_tree(&[
        ("src/lib.rs", "//! Lib.\n"),
        ("src/main.rs", "//! Main.\n"),
        ("src/clock.rs", "//! Clock.\n"),
        ("src/storage/mod.rs", "//! Storage.\n"),
        ("src/scheduler/mod.rs", "//! Scheduler.\n"),
        ("ARCHITECTURE.md", "# Map\n`scheduler/` is the loop; the clock is `clock.rs`; storage is not named.\n"),
    ]);
    let map = tree.path().join("ARCHITECTURE.md");
    let problems = rooms_named(&tree.path().join("src"), &map);
    assert_eq!(problems, [format!("{}:1: names no room `storage/` (host/src/storage)", map.display())]);
}

#[test]
fn a_client_built_outside_the_builders_is_caught() {
    let tree = fake_tree(&[
        ("host/src/cli/remote.rs", "//! Remote.\nfn f() { reqwest::Client::builder(); }\n"),
        ("host/src/api/x.rs", "//! X.\nfn f() {\n    reqwest::Client::new();\n}\n"),
        ("tests/it/support.rs", "//! Support.\nfn f() { reqwest::Client::builder(); }\n"),
        ("tests/it/a.rs", "//! A.\nasync fn f() { reqwest::get(\"http://x\").await; }\n"),
    ]);
    assert_eq!(
        http_clients(tree.path(), HTTP_CLIENT_BUILDERS),
        [
            "host/src/api/x.rs:3: reqwest::Client::new( builds a client without the TLS provider",
            "tests/it/a.rs:2: reqwest::get( builds a client without the TLS provider",
        ]
    );
}
