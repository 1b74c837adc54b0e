//! `trellis shell`: an interactive shell whose lines are trellis commands,
//! split as a Unix shell splits them and parsed by the same clap `Cli`, so
//! that every command and option works as on the command line.
//!
//! A line's error is printed as one line and the shell goes on. On a
//! terminal it has line editing and a history file; from a pipe it reads
//! line by line, without prompt or history.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use rustyline::error::ReadlineError;

use super::{Cli, Command, Globals, Status};

const PROMPT: &str = "trellis> ";

/// Commands that make no sense as a shell's line: the shell itself, and a
/// server, which would hold the shell until it stops.
const NOT_IN_THE_SHELL: [&str; 2] = ["serve", "shell"];

pub(super) async fn run(globals: &Globals) -> anyhow::Result<Status> {
    let mut editor = rustyline::Editor::<Completion, rustyline::history::DefaultHistory>::new()
        .context("starting the line editor")?;
    editor.set_helper(Some(Completion));
    // Where its lines go, on stderr (stdout is the commands' own).
    match globals.server.as_deref().map(str::trim).filter(|url| !url.is_empty()) {
        Some(url) => eprintln!("trellis shell: commands go to the server at {url}"),
        None => eprintln!(
            "trellis shell: commands run here, on the project in {} unless a line says -p DIR",
            std::env::current_dir().map(|dir| dir.display().to_string()).unwrap_or_else(|_| ".".into())
        ),
    }
    eprintln!("`help` lists the commands, `help COMMAND` one's options, Tab completes; exit, quit or Ctrl-D end it");
    // Lines piped in are not the user's typing: they stay out of the history.
    let history = std::io::stdin().is_terminal().then(history_file).flatten();
    if let Some(file) = &history {
        // A first session has no history yet.
        let _ = editor.load_history(file);
    }
    loop {
        let line = match editor.readline(PROMPT) {
            Ok(line) => line,
            // Ctrl-C abandons the line being typed, as in a shell.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e).context("reading a line"),
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(file) = &history {
            let _ = editor.add_history_entry(line);
            // Appended line by line, so that a killed shell keeps its history.
            if let Err(e) = editor.append_history(file) {
                tracing::debug!("cannot write the history to {}: {e}", file.display());
            }
        }
        if matches!(line, "exit" | "quit") {
            break;
        }
        if line == "help" {
            print!("{}", help());
            continue;
        }
        // `help COMMAND` is `COMMAND --help`.
        match line.strip_prefix("help ") {
            Some(command) => execute(&format!("{} --help", command.trim()), globals).await,
            None => execute(line, globals).await,
        }
    }
    Ok(Status::Success)
}

/// Runs one line, printing what went wrong; nothing ends the shell.
async fn execute(line: &str, globals: &Globals) {
    let Some(words) = shlex::split(line) else {
        eprintln!("error: unbalanced quotes or a trailing backslash");
        return;
    };
    let parsed =
        Cli::command().try_get_matches_from(std::iter::once("trellis".to_string()).chain(words)).and_then(|matches| {
            super::refuse_server_before_local(&matches)?;
            let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches)?;
            Ok((cli, matches.value_source("server")))
        });
    let (mut cli, server_source) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            use clap::error::ErrorKind;
            match e.kind() {
                // Help and version on stdout, as clap prints them.
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                }
                // A usage error in one line (clap's own ends with the whole
                // program's usage, which is not what a shell's line needs).
                _ => {
                    let rendered = e.render().to_string();
                    let first = rendered.lines().next().unwrap_or("error: the line is not a command");
                    eprintln!("{first} (`help` lists the commands)");
                }
            }
            return;
        }
    };
    // Only a `--server` typed on the line overrides the shell's: one from
    // $TRELLIS_SERVER must not send a line elsewhere than the shell's own.
    if server_source != Some(clap::parser::ValueSource::CommandLine) {
        cli.globals.server = None;
    }
    if matches!(cli.command, Command::Shell) {
        eprintln!("error: this is the shell already");
        return;
    }
    if matches!(cli.command, Command::Serve(_)) {
        eprintln!(
            "error: `serve` runs until it is stopped; start it outside the shell, then `trellis shell --server URL`"
        );
        return;
    }
    cli.globals.inherit(globals);
    // Embedded materialize and serve stop on Ctrl-C themselves, cleanly;
    // any other command is abandoned, and the shell goes on.
    let embedded = cli.globals.server.as_deref().map(str::trim).is_none_or(str::is_empty);
    let stops_itself =
        matches!(cli.command, Command::Serve(_)) || (matches!(cli.command, Command::Materialize(_)) && embedded);
    let interrupt = async {
        #[cfg(unix)]
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
            Ok(mut interrupt) if !stops_itself => {
                interrupt.recv().await;
            }
            _ => std::future::pending::<()>().await,
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await;
    };
    // Boxed: the shell is itself a command of `Cli::run`.
    let outcome = tokio::select! {
        outcome = Box::pin(cli.run()) => outcome,
        () = interrupt => Err(anyhow::anyhow!("interrupted")),
    };
    if let Err(e) = outcome {
        eprintln!("error: {e:#}");
    }
}

/// `$XDG_STATE_HOME/trellis/history`, else `~/.local/state/trellis/history`,
/// its directory created; none if neither variable is set.
fn history_file() -> Option<PathBuf> {
    let env = |key: &str| std::env::var_os(key).filter(|value| !value.is_empty()).map(PathBuf::from);
    let dir =
        env("XDG_STATE_HOME").or_else(|| env("HOME").map(|home| home.join(".local").join("state")))?.join("trellis");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::debug!("no history: cannot create {}: {e}", dir.display());
        return None;
    }
    Some(dir.join("history"))
}

/// The commands a shell's line may be, with what each does.
fn help() -> String {
    let cli = Cli::command();
    let mut text = String::from("commands (each as on the command line, without `trellis`):\n");
    for command in cli.get_subcommands().filter(|c| !NOT_IN_THE_SHELL.contains(&c.get_name())) {
        let about = command.get_about().map(|about| about.to_string()).unwrap_or_default();
        text.push_str(&format!("  {:<16} {about}\n", command.get_name()));
    }
    text.push_str("  help COMMAND     a command's options\n  exit, quit       end the shell (so does Ctrl-D)\n");
    text
}

/// Tab completion: commands, then a command's subcommands and flags, and
/// after `-v` the project's view types.
struct Completion;

impl rustyline::completion::Completer for Completion {
    type Candidate = String;

    fn complete(&self, line: &str, pos: usize, _: &rustyline::Context<'_>) -> rustyline::Result<(usize, Vec<String>)> {
        let before = &line[..pos];
        let words: Vec<&str> = before.split_whitespace().collect();
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let typed = &before[start..];
        // The words before the one being typed.
        let done = if typed.is_empty() { &words[..] } else { &words[..words.len().saturating_sub(1)] };
        let view_types = || {
            let project = done.windows(2).find(|w| w[0] == "-p" || w[0] == "--project").map_or(".", |w| w[1]);
            crate::catalog::load(std::path::Path::new(project))
                .map(|catalog| catalog.types().iter().map(|t| t.name.to_string()).collect())
                .unwrap_or_default()
        };
        Ok((start, candidates(done, typed, view_types)))
    }
}

impl rustyline::hint::Hinter for Completion {
    type Hint = String;
}
impl rustyline::highlight::Highlighter for Completion {}
impl rustyline::validate::Validator for Completion {}
impl rustyline::Helper for Completion {}

/// What may come where `typed` is being typed after the words `done`.
fn candidates(done: &[&str], typed: &str, view_types: impl FnOnce() -> Vec<String>) -> Vec<String> {
    let cli = Cli::command();
    let names = |command: &clap::Command| -> Vec<String> {
        command
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .filter(|n| !NOT_IN_THE_SHELL.contains(&n.as_str()))
            .collect()
    };
    let matching = |all: Vec<String>| -> Vec<String> {
        let mut all: Vec<String> = all.into_iter().filter(|c| c.starts_with(typed)).collect();
        all.sort();
        all.dedup();
        all
    };
    let Some((first, rest)) = done.split_first() else {
        let mut commands = names(&cli);
        commands.extend(["help", "exit", "quit"].map(String::from));
        return matching(commands);
    };
    // `help COMMAND` completes as COMMAND does.
    let (first, rest) = match (*first, rest.split_first()) {
        ("help", Some((command, rest))) => (command, rest),
        ("help", None) => return matching(names(&cli)),
        _ => (first, rest),
    };
    // The deepest subcommand named so far (`plugins run`, `txlog reset`).
    let Some(mut command) = cli.find_subcommand(first) else { return Vec::new() };
    for word in rest {
        if let Some(sub) = command.find_subcommand(word) {
            command = sub;
        }
    }
    if matches!(done.last(), Some(&"-v") | Some(&"--views")) {
        return matching(view_types().into_iter().map(|name| format!("{name}/")).collect());
    }
    if typed.starts_with('-') {
        let flags = command
            .get_arguments()
            .chain(cli.get_arguments())
            .filter(|arg| !arg.is_hide_set())
            .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")));
        return matching(flags.collect());
    }
    matching(names(command))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (done, typed) = match (line.ends_with(' ') || line.is_empty(), words.split_last()) {
            (false, Some((typed, done))) => (done, *typed),
            _ => (&words[..], ""),
        };
        let types = || vec!["shop.datamart/DailySales".to_string(), "shop.raw/Orders".to_string()];
        candidates(done, typed, types).join(" ")
    }

    #[test]
    fn tab_completes_commands_flags_and_view_types() {
        expect_test::expect![[r#"
            "ma" -> materialize
            "" -> actions bench coordinate coordinators demo deps engines exit gc help invalidate kill listeners logs materialize metastore plan plugins quit reload rerun resume runs stop suspend transformations txlog validate views
            "plugins " -> build checksum inspect new run
            "materialize --f" -> --full-refresh
            "views -v shop.d" -> shop.datamart/DailySales/
            "views -p shop -v " -> shop.datamart/DailySales/ shop.raw/Orders/
            "se" -> 
        "#]]
        .assert_eq(
            &["ma", "", "plugins ", "materialize --f", "views -v shop.d", "views -p shop -v ", "se"]
                .map(|line| format!("{line:?} -> {}\n", complete(line)))
                .concat(),
        );
    }

    #[test]
    fn help_lists_the_commands_but_serve_and_shell() {
        let help = help();
        assert!(help.contains("  materialize ") && help.contains("  help COMMAND "), "{help}");
        assert!(!help.contains("  serve ") && !help.contains("  shell "), "{help}");
    }
}
