//! Every command in README.md and docs/*.md runs as written: each file's
//! command blocks (indented code whose first word is a command) are run in
//! order, as a reader following the file would type them, in a directory
//! holding a copy of `examples/`, with `cd` and `export` carrying over from
//! block to block. Each command must exit 0.
//!
//! What the test does beyond typing: a `trellis serve` listens on port 0
//! rather than 20698 (a test must not take a fixed port), and the
//! server's address in later commands is the one it got; a server started
//! with `&` runs until the end of its file, one started without it (as a
//! reader would, then Ctrl-C) is stopped once it listens. `cargo run -p
//! trellis --` is the binary under test; `cargo test --workspace` and
//! `cargo install` are what CI and a user's machine do, not run here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{Server, run, trellis};

/// The files whose commands are run, in the order a reader meets them.
fn documents() -> Vec<PathBuf> {
    let root = repository();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    std::iter::once(root.join("README.md")).chain(docs).collect()
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A command as written: its line in the file and its text (joined over
/// `\` continuations).
struct Written {
    line: usize,
    text: String,
}

/// The command blocks of a Markdown file: indented code outside fences
/// whose first word is a command a reader types.
fn command_blocks(markdown: &str) -> Vec<Vec<Written>> {
    let mut blocks = Vec::new();
    let mut block: Vec<Written> = Vec::new();
    let mut fenced = false;
    let mut previous_blank = true;
    let mut continued: Option<Written> = None;
    for (n, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let code = !fenced && line.starts_with("    ") && (previous_blank || !block.is_empty() || continued.is_some());
        if code {
            let text = line.trim();
            let joined = match continued.take() {
                Some(mut start) => {
                    start.text.push(' ');
                    start.text.push_str(text.trim_end_matches('\\'));
                    start
                }
                None => Written { line: n + 1, text: text.trim_end_matches('\\').to_string() },
            };
            if text.ends_with('\\') {
                continued = Some(joined);
            } else {
                block.push(joined);
            }
        } else if (!line.trim().is_empty() || fenced) && !block.is_empty() {
            blocks.push(std::mem::take(&mut block));
        }
        previous_blank = line.trim().is_empty() && !fenced;
    }
    blocks.push(block);
    blocks.retain(|block| block.first().is_some_and(|first| is_command(&first.text)));
    blocks
}

/// Whether a line of indented code is a command rather than output or a
/// file's contents.
fn is_command(text: &str) -> bool {
    let first = text.split_whitespace().next().unwrap_or_default();
    let assignment = first.contains('=') && first.chars().next().is_some_and(|c| c.is_ascii_uppercase());
    assignment || ["trellis", "cargo", "curl", "cd", "export", "cat", "mv", "python3"].contains(&first)
}

/// A reader's shell, as far as the documents need one.
struct Reader {
    cwd: PathBuf,
    env: BTreeMap<String, String>,
    /// Servers started with `&`, stopped at the end of their document.
    servers: Vec<Server>,
    /// The address a command written with 127.0.0.1:20698 reaches.
    server_url: Option<String>,
    sandbox: PathBuf,
}

impl Reader {
    fn new(sandbox: &Path) -> Reader {
        Reader {
            cwd: sandbox.to_path_buf(),
            env: BTreeMap::new(),
            servers: Vec::new(),
            server_url: None,
            sandbox: sandbox.to_path_buf(),
        }
    }

    /// `$NAME` from the session, and the documented address as the one the
    /// server got.
    fn expand(&self, text: &str) -> String {
        let mut text = text.to_string();
        if let Some(url) = &self.server_url {
            text = text.replace("http://127.0.0.1:20698", url);
        }
        for (key, value) in &self.env {
            text = text.replace(&format!("${key}"), value);
        }
        text
    }

    fn trellis(&self, args: &[String], env: &[(String, String)]) -> Command {
        let mut command = trellis();
        command.current_dir(&self.cwd).env_remove("TRELLIS_SERVER").env_remove("TRELLIS_TOKEN");
        command.envs(&self.env).envs(env.iter().cloned()).args(args);
        command
    }

    /// Runs one command; a failure says where it is written.
    fn run(&mut self, at: &str, written: &Written) {
        let text = self.expand(&written.text);
        let mut words = shlex::split(&text).unwrap_or_else(|| panic!("{at}: cannot split `{text}`"));
        let background = words.last().is_some_and(|w| w == "&");
        if background {
            words.pop();
        }
        // `> FILE` sends stdout to a file.
        let redirect = words.iter().position(|w| w == ">").map(|i| {
            let file = words.get(i + 1).cloned().unwrap_or_else(|| panic!("{at}: `>` without a file"));
            words.truncate(i);
            file
        });
        let mut env = Vec::new();
        while let Some((key, value)) =
            words.first().and_then(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string()))
        {
            env.push((key, value));
            words.remove(0);
        }
        let (program, args) = words.split_first().unwrap_or_else(|| panic!("{at}: an empty command"));
        let output = match (program.as_str(), args) {
            ("cd", [dir]) => {
                self.cwd = self.cwd.join(dir);
                assert!(self.cwd.is_dir(), "{at}: cd {dir}: no such directory");
                return;
            }
            ("export", [assignment]) => {
                let (key, value) = assignment.split_once('=').unwrap_or_else(|| panic!("{at}: export {assignment}"));
                self.env.insert(key.to_string(), value.to_string());
                return;
            }
            ("mv", [from, to]) => {
                std::fs::rename(self.cwd.join(from), self.cwd.join(to)).unwrap_or_else(|e| panic!("{at}: mv: {e}"));
                return;
            }
            ("cat", [file]) => {
                let path = self.cwd.join(file);
                assert!(path.is_file(), "{at}: cat {file}: no such file");
                return;
            }
            ("cargo", [run_, p, name, dashes, rest @ ..])
                if run_ == "run" && p == "-p" && name == "trellis" && dashes == "--" =>
            {
                run(&mut self.trellis(rest, &env))
            }
            ("cargo", [test, workspace]) if test == "test" && workspace == "--workspace" => return,
            ("cargo", [install, ..]) if install == "install" => return,
            ("cargo", _) => crate::cli::nested_cargo(&self.cwd, &args.iter().map(String::as_str).collect::<Vec<_>>()),
            ("python3", _) => {
                let mut python = Command::new("python3");
                python.current_dir(&self.cwd).env("PYTHONDONTWRITEBYTECODE", "1").envs(env.iter().cloned()).args(args);
                run(&mut python)
            }
            ("curl", _) => {
                let mut curl = Command::new("curl");
                curl.current_dir(&self.cwd).args(["--fail", "--silent", "--show-error"]).args(args);
                run(&mut curl)
            }
            ("trellis", [serve, rest @ ..]) if serve == "serve" => {
                self.serve(at, rest, &env, background);
                return;
            }
            ("trellis", [shell]) if shell == "shell" => {
                let mut command = self.trellis(args, &env);
                run(command.stdin(std::process::Stdio::null()))
            }
            ("trellis", _) => run(&mut self.trellis(args, &env)),
            _ => panic!("{at}: `{program}` is not a command this test knows how to run"),
        };
        assert_eq!(
            output.code, 0,
            "{at}: `{}` exited {}:\n{}{}",
            written.text, output.code, output.stdout, output.stderr
        );
        if let Some(file) = redirect {
            std::fs::write(self.cwd.join(file), &output.stdout).unwrap();
        }
    }

    /// `trellis serve ARGS` on port 0: kept until the end of the document
    /// with `&`, else stopped once it listens.
    fn serve(&mut self, at: &str, args: &[String], env: &[(String, String)], background: bool) {
        let mut args = args.to_vec();
        match args.iter().position(|a| a == "--bind") {
            Some(i) => {
                let bind = args.get_mut(i + 1).unwrap_or_else(|| panic!("{at}: --bind without an address"));
                *bind = bind.replace(":20698", ":0");
            }
            None => args.extend(["--bind".to_string(), "127.0.0.1:0".to_string()]),
        }
        let mut command = self.trellis(&[], env);
        command.arg("serve").args(&args);
        let log = self.sandbox.join(format!("serve-{}.log", at.replace(['/', ':'], "-")));
        let server = Server::spawn(command, log);
        let url = server.url.replace("0.0.0.0", "127.0.0.1");
        if background {
            self.server_url = Some(url);
            self.servers.push(server);
        } else {
            assert_eq!(server.stop(), 0, "{at}: the server did not stop cleanly");
        }
    }

    /// The end of a document: its servers stop, the next starts afresh.
    fn finish(&mut self, document: &str) {
        for server in self.servers.drain(..) {
            assert_eq!(server.stop(), 0, "{document}: a server started there did not stop cleanly");
        }
        self.server_url = None;
        self.env.clear();
        self.cwd = self.sandbox.clone();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn every_command_in_the_readme_and_the_docs_runs_as_written() {
    let sandbox = tempfile::tempdir().unwrap();
    copy_dir(&repository().join("examples"), &sandbox.path().join("examples"));
    let mut reader = Reader::new(sandbox.path());
    let mut ran = 0;
    for document in documents() {
        let name = document.strip_prefix(repository()).unwrap().display().to_string();
        let markdown = std::fs::read_to_string(&document).unwrap();
        for block in command_blocks(&markdown) {
            for written in &block {
                reader.run(&format!("{name}:{}", written.line), written);
                ran += 1;
            }
        }
        reader.finish(&name);
    }
    // The README alone has more than forty: a parser that found none would pass.
    assert!(ran > 40, "only {ran} commands found");
}

#[test]
fn command_blocks_are_told_from_output_and_files() {
    let markdown = "Run it:\n\n    trellis demo\n    trellis plugins run x.wasm \\\n        --output /tmp/o\n\nIt prints:\n\n    demo finished\n\n```toml\n    trellis = \"not a command\"\n```\n";
    let blocks = command_blocks(markdown);
    let texts: Vec<Vec<&str>> = blocks.iter().map(|b| b.iter().map(|w| w.text.as_str()).collect()).collect();
    assert_eq!(texts, [vec!["trellis demo", "trellis plugins run x.wasm  --output /tmp/o"]]);
    assert_eq!(blocks[0][1].line, 4);
}
