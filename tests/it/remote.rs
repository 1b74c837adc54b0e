//! The remote CLI and the shell against a real `trellis serve` on a demo
//! project: every command prints with a server what it prints embedded,
//! errors included, and the shell runs lines as the command line does.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{Run, Server, demo, eventually_blocking, gated_project, ok, run, trellis};

const PATTERN: &str = "shop.datamart/MonthlyTotal/2015/05";
const DAILY: &str = "shop.datamart/DailySales/SHOP10/2015/05/01";
const TOKEN: &str = "remote-test-token";

/// The CLI without a server or a token from the environment of the test run.
fn cli() -> Command {
    let mut command = trellis();
    command.env_remove("TRELLIS_SERVER").env_remove("TRELLIS_TOKEN");
    command
}

/// A command sent to the server, with the token.
fn remote(server: &Server, args: &[&str]) -> Run {
    run(cli().env("TRELLIS_TOKEN", TOKEN).arg("--server").arg(&server.url).args(args))
}

fn embedded(project: &Path, args: &[&str]) -> Run {
    run(cli().args(args).arg("-p").arg(project))
}

/// Runs `shell` with `lines` on its standard input.
fn shell(command: &mut Command, lines: &str) -> Run {
    let mut child = command
        .arg("shell")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("trellis shell starts");
    child.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    Run::from(child.wait_with_output().unwrap())
}

#[test]
fn remote_commands_print_what_embedded_commands_print() {
    let dir = tempfile::tempdir().unwrap();
    let project = demo(dir.path());
    let server = Server::start(&project, &[], &[("TRELLIS_TOKEN", TOKEN)]);

    // Writes need the token, and so do reads that instantiate views; other
    // reads from loopback do not.
    let refused = run(cli().arg("--server").arg(&server.url).args(["invalidate", "-v", DAILY]));
    assert_eq!(refused.code, 2, "{}", refused.stdout);
    assert_eq!(
        refused.stderr,
        "error: this request needs `Authorization: Bearer <token>` (the server's TRELLIS_TOKEN)\n"
    );
    let refused = run(cli().arg("--server").arg(&server.url).args(["views", "-v", DAILY]));
    assert_eq!(refused.code, 2, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("this request instantiates views, so it needs `Authorization"),
        "{}",
        refused.stderr
    );
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let with_token =
        |args: &[&str]| run(cli().arg("--server").arg(&server.url).arg("--token-file").arg(&token_file).args(args));
    assert_eq!(ok(with_token(&["invalidate", "-v", DAILY]), "invalidate"), format!("invalidated {DAILY}\n"));
    // The first run of this server, as the embedded one below is the
    // first of its process.
    let remote_summary = ok(with_token(&["materialize", "-v", PATTERN, "--wait", "--verbose"]), "materialize --wait");
    assert!(remote_summary.contains(&format!("SUCCESSFUL             {DAILY}\n")), "{remote_summary}");

    // Without --wait the run is only accepted (the token from the environment this time).
    let accepted = ok(
        run(cli().env("TRELLIS_TOKEN", TOKEN).env("TRELLIS_SERVER", &server.url).args(["materialize", "-v", PATTERN])),
        "materialize",
    );
    let (first_line, follow_up) = accepted.split_once('\n').unwrap_or_else(|| panic!("{accepted}"));
    let run_id = first_line
        .strip_prefix("run ")
        .and_then(|rest| rest.strip_suffix(" accepted"))
        .unwrap_or_else(|| panic!("{accepted}"))
        .to_string();
    // It says how to follow the run, with the server it was sent to.
    assert_eq!(
        follow_up,
        format!(
            "see how it stands with `trellis --server {} runs {run_id}`; add --wait to follow a run to its end\n",
            server.url
        )
    );
    eventually_blocking("the accepted run ends", || {
        let detail: serde_json::Value =
            serde_json::from_str(&ok(remote(&server, &["runs", &run_id, "--json"]), "runs ID")).unwrap();
        !detail["run"]["termination"].is_null()
    });
    eventually_blocking("listeners catch up", || {
        let listeners: serde_json::Value =
            serde_json::from_str(&ok(remote(&server, &["listeners", "--json"]), "listeners")).unwrap();
        listeners.as_array().unwrap().iter().all(|listener| listener["behind"] == 0)
    });

    let cases: Vec<Vec<&str>> = vec![
        vec!["views", "-v", PATTERN],
        vec!["views", "-v", PATTERN, "--json"],
        vec!["views", "-v", PATTERN, "--deps"],
        vec!["views", "-v", PATTERN, "--deps", "--json"],
        vec!["views", "-v", PATTERN, "--deps", "-s", "no-data"],
        vec!["views", "-v", PATTERN, "--deps", "-f", "SHOP20/2015/05/0[1-3]$", "--json"],
        vec!["views", "-v", PATTERN, "--deps", "--overview"],
        vec!["views", "-v", PATTERN, "--deps", "--overview", "--json"],
        vec!["views", "-v", "shop.datamart/DailySales/e(SHOP10,SHOP20)/rymd(20150501-20150507)"],
        vec!["views", "-v", "shop.datamart/DailySales/e(SHOP10,SHOP20)/rymd(20150501-20150507)", "-s", "materialized"],
        vec!["views", "-v", "shop.datamart/DailySales/SHOP30/rymd(20150501-20150531)", "-f", "/0[2-4]$", "--json"],
        vec!["views", "-v", "shop.datamart/DailySales/SHOP30/rymd(20150501-20150531)", "-o"],
        vec!["views", "-v", "shop.datamart/DailySales/SHOP30/rymd(20150501-20150531)", "-o", "--json"],
        vec!["plan", "-v", PATTERN],
        vec!["plan", "-v", PATTERN, "--json"],
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["runs", &run_id],
        vec!["runs", &run_id, "--json"],
        vec!["listeners"],
        vec!["listeners", "--json"],
        vec!["listeners", "enable", "stats"],
        // Errors (the last three): the same line, the same exit code.
        vec!["views", "-v", "shop.datamart/DailySales/SHOP10/rymd(2015"],
        vec!["plan", "-v", "shop.datamart/NoSuchType/SHOP10"],
        vec!["listeners", "enable", "nobody"],
    ];
    let remote_runs: Vec<Run> = cases.iter().map(|args| remote(&server, args)).collect();
    for (n, (args, result)) in cases.iter().zip(&remote_runs).enumerate() {
        let error = n + 3 >= cases.len();
        assert_eq!(result.code, if error { 2 } else { 0 }, "{args:?}: {}", result.stderr);
        assert_eq!(result.stdout.is_empty(), error, "{args:?}: {}", result.stdout);
        assert_eq!(result.stderr.lines().count(), usize::from(error), "{args:?}: {}", result.stderr);
    }
    let output = |wanted: &[&str]| &remote_runs[cases.iter().position(|args| args == wanted).unwrap()];

    // The shell: each line as on the command line; bad lines say why and
    // the shell goes on; `exit` ends it.
    let lines = format!(
        "views -v {PATTERN}\nno-such-command\nviews -v 'shop.datamart/DailySales/SHOP10/rymd(2015'\n\n  plan -v {PATTERN} --json\nruns\nexit\nruns\n"
    );
    let shell_output = [
        output(&["views", "-v", PATTERN]).stdout.as_str(),
        &output(&["plan", "-v", PATTERN, "--json"]).stdout,
        &output(&["runs"]).stdout,
    ]
    .concat();
    let pattern_error = &output(&["views", "-v", "shop.datamart/DailySales/SHOP10/rymd(2015"]).stderr;
    // The shell's own --server wins over $TRELLIS_SERVER for every line.
    let session = shell(
        cli()
            .env("TRELLIS_SERVER", "http://127.0.0.1:9")
            .arg("--server")
            .arg(&server.url)
            .arg("--token-file")
            .arg(&token_file),
        &lines,
    );
    assert_eq!(session.code, 0, "{}", session.stderr);
    assert_eq!(session.stdout, shell_output);
    assert!(session.stderr.starts_with(&format!("trellis shell: commands go to the server at {}\n", server.url)));
    assert!(session.stderr.contains("error: unrecognized subcommand 'no-such-command'"), "{}", session.stderr);
    assert!(session.stderr.contains(pattern_error.as_str()), "{}", session.stderr);

    // Without a pattern, `views` lists what the server has instantiated
    // (and embedded, what the metastore records): the pattern's views among them.
    let everything = ok(remote(&server, &["views"]), "views");
    let addressed = &output(&["views", "-v", PATTERN]).stdout;
    assert!(addressed.lines().all(|line| everything.lines().any(|l| l == line)), "{everything}");
    assert!(everything.lines().count() > addressed.lines().count(), "{everything}");

    assert_eq!(server.stop(), 0);

    let recorded = ok(embedded(&project, &["views"]), "views");
    assert!(addressed.lines().all(|line| recorded.lines().any(|l| l == line)), "{recorded}");

    for (args, remote) in cases.iter().zip(&remote_runs) {
        let embedded = embedded(&project, args);
        let args = args.join(" ");
        assert_eq!(remote.stdout, embedded.stdout, "stdout of {args}");
        assert_eq!(remote.stderr, embedded.stderr, "stderr of {args}");
        assert_eq!(remote.code, embedded.code, "exit code of {args}");
    }

    // Without a server the shell runs the same lines embedded (in the
    // project, the default of -p).
    let mut embedded_shell = cli();
    embedded_shell.current_dir(&project);
    let session = shell(&mut embedded_shell, &lines);
    assert_eq!(session.code, 0, "{}", session.stderr);
    assert_eq!(session.stdout, shell_output);
    // It says where its lines go; `help` lists what a line may be (not
    // `serve` or `shell`); a bad line is one line, without the whole CLI's usage.
    assert!(session.stderr.starts_with("trellis shell: commands run here, on the project in "), "{}", session.stderr);
    let mut embedded_shell = cli();
    let session = shell(embedded_shell.current_dir(&project), "help\nhelp runs\nserve\nruns --bogus\n");
    assert!(
        session.stdout.contains("\n  materialize ") && session.stdout.contains("\n  help COMMAND "),
        "{}",
        session.stdout
    );
    assert!(!session.stdout.contains("\n  serve ") && !session.stdout.contains("\n  shell "), "{}", session.stdout);
    assert!(session.stdout.contains("Usage: trellis runs [OPTIONS] [ID]"), "`help runs`: {}", session.stdout);
    assert!(session.stderr.contains("error: `serve` runs until it is stopped; "), "{}", session.stderr);
    assert!(
        session.stderr.contains("error: unexpected argument '--bogus' found (`help` lists the commands)\n"),
        "{}",
        session.stderr
    );
    assert!(!session.stderr.contains("Usage:"), "{}", session.stderr);

    // What materialize --wait printed is what an embedded materialize of
    // the same invalidation prints.
    assert_eq!(embedded(&project, &["invalidate", "-v", DAILY]).stdout, format!("invalidated {DAILY}\n"));
    assert_eq!(ok(embedded(&project, &["materialize", "-v", PATTERN, "--verbose"]), "materialize"), remote_summary);
}

#[test]
fn an_unreachable_server_is_named_and_exits_2() {
    // Port 1 on loopback: nothing listens there.
    let result = run(cli().args(["--server", "http://127.0.0.1:1", "runs"]));
    assert_eq!(result.code, 2);
    assert!(result.stderr.starts_with("error: cannot reach http://127.0.0.1:1/runs: "), "{}", result.stderr);
    assert_eq!(result.stderr.lines().count(), 1, "{}", result.stderr);

    let result = run(cli().args(["transformations"]));
    assert_eq!(result.code, 2);
    assert!(result.stderr.contains("--server URL or TRELLIS_SERVER"), "{}", result.stderr);
}

#[test]
fn a_remote_run_is_followed_queued_behind_refused_and_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let project = gated_project(dir.path(), 10);
    let server = Server::start(&project, &[], &[("TRELLIS_TOKEN", TOKEN)]);

    // One client follows the run; the others act on it meanwhile.
    let follower = cli()
        .env("TRELLIS_TOKEN", TOKEN)
        .arg("--server")
        .arg(&server.url)
        .args(["materialize", "-v", "g.mart/Out/rymd(20150101-20150110)", "--wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut running = Vec::new();
    eventually_blocking("two transformations in flight", || {
        let now: serde_json::Value =
            serde_json::from_str(&ok(remote(&server, &["transformations", "--json"]), "transformations")).unwrap();
        running = now["running"].as_array().unwrap().iter().map(|r| r["view"].as_str().unwrap().to_string()).collect();
        running.len() == 2
    });
    let text = ok(remote(&server, &["transformations"]), "transformations");
    assert!(text.contains(&format!("{}  trivial  running for ", running[0])), "{text}");
    assert!(text.ends_with("permits in use: 2 of 2 overall, trivial 2 of 2\n"), "{text}");
    // Each of the two holds its memory cap (512 MiB) from the budget.
    assert!(text.contains("\nmemory reserved: 1024 of a budget of "), "{text}");

    // A view in flight is left alone, and says so: exit 1, as embedded.
    let refused = remote(&server, &["invalidate", "-v", &running[0]]);
    assert_eq!((refused.code, refused.stdout.as_str()), (1, ""), "{}", refused.stderr);
    assert!(refused.stderr.starts_with(&format!("refused {}: ", running[0])), "{}", refused.stderr);

    let queued = ok(remote(&server, &["materialize", "-v", "g.mart/Out/2015/01/01"]), "materialize");
    let first_line = queued.lines().next().unwrap_or_default();
    let second = first_line.strip_suffix(" accepted (queued behind 1 run)").and_then(|s| s.strip_prefix("run "));
    let second = second.unwrap_or_else(|| panic!("{queued}"));
    assert_eq!(
        ok(remote(&server, &["stop", second]), "stop queued"),
        format!("run {second} was queued; it will not start\n")
    );
    // Without an id, `stop` stops the run in progress and waits for its end.
    let stopped = ok(remote(&server, &["stop"]), "stop");
    let first = stopped.lines().next().and_then(|l| l.strip_prefix("asked run ")).and_then(|l| l.split(' ').next());
    let first = first.unwrap_or_else(|| panic!("{stopped}"));
    assert_eq!(stopped, format!("asked run {first} to stop ({})\nrun {first} stopped\n", server.url));
    assert_eq!(
        ok(remote(&server, &["stop", first]), "stop again"),
        format!("run {first} is not running: stopped by request\n")
    );

    // The follower saw the run end and printed its summary: stopped, exit 1.
    let output = follower.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        stdout.ends_with(&format!("20 views: 10 successful, 8 skipped, 2 canceled\nrun {first} stopped by request\n")),
        "{stdout}"
    );
    assert_eq!(server.stop(), 0);
}
