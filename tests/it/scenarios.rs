//! Data-driven scenarios: each `tests/scenarios/*.scenario` file sets up a
//! project and runs `trellis` commands against it, with their expected
//! output. Each file is a test of its own (listed in `scenarios!`), in a
//! project directory of its own. `UPDATE_EXPECT=1 cargo test` rewrites the
//! expectations.
//!
//! Format, line by line:
//! - `# ...` and blank lines between commands: comments and spacing;
//! - `@copy DIR`: copy DIR (relative to the repository) into the project;
//! - `@plugins`: copy every built plugin into the project's `plugins/`,
//!   named with dashes (`csv-aggregate.wasm`, `hostile-panic.wasm`);
//! - `@write PATH` ... `@end`: write a file into the project;
//! - `$ touch PATH`: create an empty file (and its directories), e.g. a done flag;
//! - `$ [NAME=VALUE ...] trellis ARGS`: run the real binary in the project
//!   directory, with those environment variables (`TRELLIS_NOW=...` sets
//!   its clock); the
//!   lines after it, up to a blank line, are its expected stdout and stderr,
//!   with the project directory shown as `$PROJECT`, version checksums as
//!   `<checksum>`, run ids as `[run <id>]`, manifest hashes and commit
//!   times as `<hash>` and `<time>`, blank lines left out, and a last line `[exit N]` when it
//!   exits non-zero.
//!
//! Anything else (an unknown directive, an `@write` without its `@end`, an
//! unknown command, a stray line) is an error naming the file and line, so
//! that a typo cannot quietly turn a step into a comment.
//!
//! Every file runs again on a second backend, an S3 bucket (the moto
//! server of `moto.rs`): the project's `storage = "X"` becomes
//! `s3://BUCKET/X` with the server's endpoint (no line of the file moves),
//! `$ touch` and `@write` under X put the object there, the bucket's URL is
//! shown as `$PROJECT`, and the `current_prefix` of `--json`, which only an
//! object store has, is left out: one expectation serves both backends.
//! The buckets keep versions, because a scenario delivers a flag again
//! within the second it first wrote it, which only a version id tells
//! apart on S3 (docs/storage.md); `s3.rs` covers unversioned buckets.

use std::path::{Path, PathBuf};

use crate::support::{Run, trellis};

/// Two tests per scenario file, one on each backend, and a check that no
/// file lacks its tests.
macro_rules! scenarios {
    ($($name:ident),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )+

        /// The same scenarios with the project's storage on S3.
        mod on_s3 {
            $(
                #[test]
                fn $name() {
                    super::check_on(stringify!($name), super::Backend::S3);
                }
            )+
        }

        const DECLARED: &[&str] = &[$(stringify!($name)),+];
    };
}

scenarios!(
    calendar,
    coordinator_actual_default,
    coordinator_actual_time,
    coordinator_last_only,
    coordinator_latest_waiting,
    coordinator_rules,
    coordinator_time,
    coordinators,
    empty,
    errors,
    evaluation,
    failures,
    flags,
    include,
    incremental,
    latest,
    limits,
    listeners,
    materialize,
    modes,
    now,
    oozie,
    oozie_el,
    refresh,
    resources,
    rules,
    shop,
    states
);

#[test]
fn every_scenario_file_has_its_test() {
    let mut files: Vec<String> = std::fs::read_dir(directory())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "scenario"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut declared = DECLARED.to_vec();
    declared.sort();
    assert_eq!(files, declared, "every tests/scenarios/NAME.scenario needs NAME in `scenarios!`, and only those");
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn directory() -> PathBuf {
    repository().join("tests/scenarios")
}

/// Where a scenario's project keeps its views' data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Local,
    S3,
}

/// Runs `tests/scenarios/NAME.scenario`; with `UPDATE_EXPECT` set, writes
/// the actual outputs into it instead of failing.
fn check(name: &str) {
    check_on(name, Backend::Local);
}

/// The same on `backend`; only the local backend rewrites expectations.
fn check_on(name: &str, backend: Backend) {
    let file = directory().join(format!("{name}.scenario"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let steps = parse(&file.display().to_string(), &text).unwrap_or_else(|error| panic!("{error}"));
    let (rewritten, mismatches) = run_scenario(&steps, backend);
    if backend == Backend::Local && std::env::var_os("UPDATE_EXPECT").is_some() {
        if rewritten != text {
            std::fs::write(&file, &rewritten).unwrap();
        }
    } else {
        assert!(
            mismatches.is_empty(),
            "{} failed on {backend:?} (UPDATE_EXPECT=1 to accept):\n\n{}",
            file.display(),
            mismatches.join("\n\n")
        );
    }
}

/// A line of a scenario, or a block of them.
#[derive(Debug, PartialEq)]
enum Step<'a> {
    /// A comment or a blank line, kept as it is.
    Text(&'a str),
    Plugins,
    Copy(&'a str),
    Write {
        path: &'a str,
        content: Vec<&'a str>,
    },
    /// `$ COMMAND` on line `line`, with the output expected of it.
    Command {
        line: usize,
        text: &'a str,
        command: Command,
        expected: Vec<&'a str>,
    },
}

#[derive(Debug, PartialEq)]
enum Command {
    Touch(String),
    /// The environment's additions, then the arguments.
    Trellis(Vec<(String, String)>, Vec<String>),
}

/// Reads a scenario; an error names `file` and the line.
fn parse<'a>(file: &str, text: &'a str) -> Result<Vec<Step<'a>>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let error = |index: usize, message: String| format!("{file}:{}: {message}", index + 1);
    let mut steps = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (index, line) = (i, lines[i]);
        i += 1;
        if line.is_empty() || line.starts_with('#') {
            steps.push(Step::Text(line));
        } else if let Some(directive) = line.strip_prefix('@') {
            let (name, argument) = directive.split_once(' ').map_or((directive, ""), |(n, a)| (n, a.trim()));
            match (name, argument) {
                ("plugins", "") => steps.push(Step::Plugins),
                ("copy" | "write", "") => return Err(error(index, format!("`@{name}` needs a path"))),
                ("plugins", _) => return Err(error(index, "`@plugins` takes no argument".into())),
                ("copy", dir) => steps.push(Step::Copy(dir)),
                ("write", path) => {
                    let Some(end) = lines[i..].iter().position(|l| *l == "@end") else {
                        return Err(error(index, format!("`{line}` has no `@end`")));
                    };
                    steps.push(Step::Write { path, content: lines[i..i + end].to_vec() });
                    i += end + 1;
                }
                ("end", _) => return Err(error(index, "`@end` without its `@write`".into())),
                _ => {
                    let message = format!("unknown directive `@{name}` (known: @copy DIR, @plugins, @write PATH)");
                    return Err(error(index, message));
                }
            }
        } else if let Some(text) = line.strip_prefix("$ ") {
            let command = command(text).map_err(|message| error(index, message))?;
            let expected = lines[i..].iter().take_while(|l| !l.is_empty()).copied().collect::<Vec<_>>();
            i += expected.len();
            steps.push(Step::Command { line: index + 1, text, command, expected });
        } else {
            let message = format!(
                "`{line}` is not a comment (#), a directive (@) or a command ($ ); \
                 expected output follows its command without a blank line"
            );
            return Err(error(index, message));
        }
    }
    Ok(steps)
}

fn command(text: &str) -> Result<Command, String> {
    let mut words = split(text)?;
    let assignments = words.iter().take_while(|word| word.contains('=') && word != &"trellis").count();
    let environment: Vec<(String, String)> = words
        .drain(..assignments)
        .map(|word| {
            let (name, value) = word.split_once('=').expect("counted as an assignment");
            (name.to_string(), value.to_string())
        })
        .collect();
    if !environment.is_empty() && words.first().map(String::as_str) != Some("trellis") {
        return Err(format!("`{text}`: only `trellis` takes NAME=VALUE before it"));
    }
    match words.first().map(String::as_str) {
        Some("touch") if words.len() == 2 => Ok(Command::Touch(words.pop().unwrap())),
        Some("touch") => Err("`$ touch` takes one path".into()),
        Some("trellis") => Ok(Command::Trellis(environment, words.split_off(1))),
        _ => Err(format!("unknown command `{text}` (known: touch PATH, [NAME=VALUE ...] trellis ARGS)")),
    }
}

/// Splits on spaces, keeping 'single-quoted' words together.
fn split(command: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in command.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if quoted {
        return Err(format!("`{command}` has an unclosed quote"));
    }
    if !word.is_empty() {
        words.push(word);
    }
    Ok(words)
}

/// Runs a scenario in a project directory of its own; returns its text
/// with the actual outputs, and every command whose output differed.
fn run_scenario(steps: &[Step], backend: Backend) -> (String, Vec<String>) {
    let temp = tempfile::tempdir().unwrap();
    let project = temp.path();
    let bucket = (backend == Backend::S3).then(|| crate::moto::moto().bucket(true));
    let place = Place { project, bucket: bucket.as_deref(), storage_dir: Default::default() };
    let mut out = String::new();
    let mut mismatches = Vec::new();
    let mut push = |line: &str| {
        out.push_str(line);
        out.push('\n');
    };
    for step in steps {
        match step {
            Step::Text(line) => push(line),
            Step::Plugins => {
                let plugins = project.join("plugins");
                std::fs::create_dir_all(&plugins).unwrap();
                for entry in std::fs::read_dir(trellis::bundled::PLUGINS_DIR).unwrap() {
                    let path = entry.unwrap().path();
                    if path.extension().is_some_and(|e| e == "wasm") {
                        let name = path.file_name().unwrap().to_string_lossy().replace('_', "-");
                        std::fs::copy(&path, plugins.join(name)).unwrap();
                    }
                }
                push("@plugins");
            }
            Step::Copy(dir) => {
                copy(&repository().join(dir), project);
                place.on_backend(&project.join("trellis.toml"));
                push(&format!("@copy {dir}"));
            }
            Step::Write { path, content } => {
                let target = project.join(path);
                let text = content.iter().map(|l| format!("{l}\n")).collect::<String>();
                if !place.put(path, &text) {
                    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
                    std::fs::write(&target, text).unwrap();
                }
                place.on_backend(&target);
                push(&format!("@write {path}"));
                content.iter().for_each(|line| push(line));
                push("@end");
            }
            Step::Command { line, text, command, expected } => {
                let actual = execute(command, &place);
                push(&format!("$ {text}"));
                actual.lines().for_each(&mut push);
                if actual.lines().ne(expected.iter().copied()) {
                    mismatches.push(format!(
                        "line {line}: $ {text}\n--- expected\n{}\n--- actual\n{actual}",
                        expected.join("\n")
                    ));
                }
            }
        }
    }
    (out, mismatches)
}

/// Where a scenario runs: its project directory, and the bucket its views'
/// data is in on the S3 backend.
struct Place<'a> {
    project: &'a Path,
    bucket: Option<&'a str>,
    /// The storage root in the bucket, as the project file last written
    /// says it: kept here rather than read again for each touch.
    storage_dir: std::cell::RefCell<Option<PathBuf>>,
}

impl Place<'_> {
    /// On S3, the project file (and any included file with a `[project]`
    /// table), written or copied, gets its storage root in the bucket,
    /// `storage = "X"` (`data` when unset) becoming `s3://BUCKET/X`, and
    /// the server's endpoint (see [`crate::moto::on_bucket`]).
    fn on_backend(&self, file: &Path) {
        let Some(bucket) = self.bucket else { return };
        let Ok(text) = std::fs::read_to_string(file) else { return };
        if text.lines().any(|line| line.trim() == "[project]") || file == self.project.join("trellis.toml") {
            let text = crate::moto::on_bucket(&text, bucket, self.project);
            std::fs::write(file, &text).unwrap();
            if file == self.project.join("trellis.toml") {
                let prefix = format!("storage = \"s3://{bucket}/");
                let line = text.lines().find(|line| line.starts_with(&prefix));
                *self.storage_dir.borrow_mut() =
                    line.map(|line| PathBuf::from(line[prefix.len()..].trim_end_matches('"')));
            }
        }
    }

    /// What the outputs show of where the views' data is, as `$PROJECT`.
    fn shown(&self) -> Vec<String> {
        let mut shown = vec![self.project.display().to_string()];
        shown.extend(self.bucket.map(|bucket| format!("s3://{bucket}")));
        shown
    }

    /// Creates an empty file at `path` (relative to the project): on S3,
    /// an object where it is under the storage root.
    fn touch(&self, path: &str) {
        if self.put(path, "") {
            return;
        }
        let path = self.project.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }

    /// On S3, writes `content` as the object at `path` (relative to the
    /// project) when it is under the storage root: whether it did.
    fn put(&self, path: &str, content: &str) -> bool {
        if let Some(bucket) = self.bucket
            && let Some(root) = self.storage_dir.borrow().clone()
            && let Ok(relative) = Path::new(path.trim_start_matches("./")).strip_prefix(&root)
        {
            let moto = crate::moto::moto();
            let location = object_store::path::Path::from(format!("{}/{}", root.display(), relative.display()));
            let client = moto.client(bucket);
            moto.block_on(object_store::ObjectStoreExt::put(&*client, &location, content.to_string().into())).unwrap();
            return true;
        }
        false
    }

    fn environment(&self) -> &'static [(&'static str, &'static str)] {
        if self.bucket.is_some() { crate::moto::ENVIRONMENT } else { &[] }
    }
}

/// The command's output as a scenario shows it (one line each, blank
/// lines left out).
fn execute(command: &Command, place: &Place) -> String {
    match command {
        Command::Touch(path) => {
            place.touch(path);
            String::new()
        }
        Command::Trellis(environment, args) => {
            // Logs carry timestamps; what a scenario checks is the output.
            let mut command = trellis();
            command
                .current_dir(place.project)
                .env("TRELLIS_LOG", "off")
                .envs(place.environment().iter().copied())
                .envs(environment.iter().cloned())
                .args(args);
            let result = run_to_end(&mut command);
            // Blank lines end an expectation in the file format, so they are left out.
            let mut output = format!("{}{}", result.stdout, result.stderr);
            for shown in place.shown() {
                output = output.replace(&shown, "$PROJECT");
            }
            // Only an object store has a current version's prefix to show.
            let shown_on_both =
                |line: &&str| !line.is_empty() && !line.trim_start().starts_with("\"current_prefix\": ");
            let mut output: String = output.lines().filter(shown_on_both).map(|l| format!("{l}\n")).collect();
            if result.code != 0 {
                output.push_str(&format!("[exit {}]\n", result.code));
            }
            // Version checksums depend on the plugins' bytes, which depend on
            // the toolchain: shown as <checksum>.
            let checksum = regex::Regex::new(r"\b[0-9a-f]{16}\b").unwrap();
            let output = checksum.replace_all(&output, "<checksum>");
            // Run ids are the wall-clock time they started at.
            let run = regex::Regex::new(r"\[run [0-9a-f]+\]").unwrap();
            let output = run.replace_all(&output, "[run <id>]");
            // So are commit times, and manifests hash the files' times.
            let manifest = regex::Regex::new(r"\bmanifest [0-9a-f]{32}\b").unwrap();
            let output = manifest.replace_all(&output, "manifest <hash>");
            let committed = regex::Regex::new(r" at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").unwrap();
            committed.replace_all(&output, " at <time>").into_owned()
        }
    }
}

/// Longer than any scenario's command takes, even on a busy machine.
const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs a command to its end. One that should refuse at once but runs on
/// (a `trellis serve` that starts) is killed and fails the scenario, rather
/// than hanging it.
fn run_to_end(command: &mut std::process::Command) -> Run {
    crate::support::run_within(command, COMMAND_TIMEOUT)
}

fn copy(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn a_scenario_parses_into_its_steps() {
    let text =
        "# setup\n@plugins\n@copy examples/shop\n@write a/b.toml\nx = 1\n@end\n\n$ trellis views -v 'a b'\nout\n";
    let steps = parse("t.scenario", text).unwrap();
    assert_eq!(
        steps,
        [
            Step::Text("# setup"),
            Step::Plugins,
            Step::Copy("examples/shop"),
            Step::Write { path: "a/b.toml", content: vec!["x = 1"] },
            Step::Text(""),
            Step::Command {
                line: 8,
                text: "trellis views -v 'a b'",
                command: Command::Trellis(Vec::new(), vec!["views".into(), "-v".into(), "a b".into()]),
                expected: vec!["out"],
            },
        ]
    );
}

#[test]
fn a_command_takes_its_environment_before_trellis() {
    let steps = parse("t.scenario", "$ TRELLIS_NOW=2015-05-03 trellis validate\n").unwrap();
    let Step::Command { command, .. } = &steps[0] else { panic!("{steps:?}") };
    assert_eq!(*command, Command::Trellis(vec![("TRELLIS_NOW".into(), "2015-05-03".into())], vec!["validate".into()]));
}

#[test]
fn an_unknown_directive_is_an_error_naming_file_and_line() {
    let error = parse("t.scenario", "# setup\n@plugins\n@wirte trellis.toml\nx = 1\n@end\n").unwrap_err();
    assert_eq!(error, "t.scenario:3: unknown directive `@wirte` (known: @copy DIR, @plugins, @write PATH)");
}

#[test]
fn an_unclosed_write_is_an_error_naming_file_and_line() {
    let error = parse("t.scenario", "@write trellis.toml\nx = 1\n\n$ trellis validate\n").unwrap_err();
    assert_eq!(error, "t.scenario:1: `@write trellis.toml` has no `@end`");
}

#[test]
fn other_mistakes_are_errors_naming_file_and_line() {
    for (text, message) in [
        ("@end\n", "t.scenario:1: `@end` without its `@write`"),
        ("@write\n@end\n", "t.scenario:1: `@write` needs a path"),
        ("@plugins all\n", "t.scenario:1: `@plugins` takes no argument"),
        ("\n$ ls\n", "t.scenario:2: unknown command `ls` (known: touch PATH, [NAME=VALUE ...] trellis ARGS)"),
        ("$ A=1 touch x\n", "t.scenario:1: `A=1 touch x`: only `trellis` takes NAME=VALUE before it"),
        ("$ touch\n", "t.scenario:1: `$ touch` takes one path"),
        ("$ trellis views -v 'a\n", "t.scenario:1: `trellis views -v 'a` has an unclosed quote"),
        (
            "$ trellis validate\n\nok\n",
            "t.scenario:3: `ok` is not a comment (#), a directive (@) or a command ($ ); \
             expected output follows its command without a blank line",
        ),
    ] {
        assert_eq!(parse("t.scenario", text).unwrap_err(), message, "{text:?}");
    }
}
