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

pub(super) async fn run(globals: &Globals) -> anyhow::Result<Status> {
    let mut editor = rustyline::DefaultEditor::new().context("starting the line editor")?;
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
        execute(line, globals).await;
    }
    Ok(Status::Success)
}

/// Runs one line, printing what went wrong; nothing ends the shell.
async fn execute(line: &str, globals: &Globals) {
    let Some(words) = shlex::split(line) else {
        eprintln!("error: unbalanced quotes or a trailing backslash");
        return;
    };
    let parsed = <Cli as clap::CommandFactory>::command()
        .try_get_matches_from(std::iter::once("trellis".to_string()).chain(words))
        .and_then(|matches| {
            let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches)?;
            Ok((cli, matches.value_source("server")))
        });
    let (mut cli, server_source) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            // Help and version on stdout, usage errors on stderr, as clap does.
            let _ = e.print();
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
