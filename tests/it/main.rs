//! The integration tests: real WASM plugins built from plugins/, real
//! directories and a real metastore; the library in process at the middle
//! boundary (`scheduler`, `api`), the real `trellis` binary where only real
//! processes prove it. One crate, one module per area.
//!
//! # The room in detail
//!
//! (Moved here from ARCHITECTURE.md in issue 40, which keeps the
//! room's one paragraph and invariant.)
//!
//! The one integration-test crate, compiled as a test of the `trellis` package so
//! that it can run the real binary (`CARGO_BIN_EXE_trellis`) and use the
//! library. Real plugins, real directories, a real sled in a temp dir, no
//! mocks. `support.rs` holds what tests share: the built plugins, one runtime,
//! `trellis()` (the binary), `Server` (a `trellis serve` on port 0), `demo`, and
//! `Daily`, the builder of the small daily project (`<ns>.raw/In` →
//! `<ns>.mart/Out`) that the crash, listener, server and remote tests vary. One
//! compile cache serves the whole test binary: a temporary directory created
//! at first use and removed at exit, used by the shared runtime and passed to
//! every child process as `TRELLIS_CACHE_DIR`; only a test about the cache
//! itself has its own. Four kinds of test:
//!
//! - *Data-driven scenarios.* `scenarios.rs` runs `tests/scenarios/*.scenario`,
//!   each a test of its own (declared in `scenarios!`; a file without its test
//!   fails a check): a project written inline or copied from `examples/`,
//!   commands, and their expected output (`UPDATE_EXPECT=1` rewrites them).
//!   Its parser is strict: an unknown directive, an `@write` without `@end`,
//!   an unknown command or a stray line is an error naming file and line.
//! - *Golden tables* of every pure state machine and pure module
//!   (`transition`, `record`, `supervise`, the coordinator `action` machine
//!   and `policy`, patterns, dataset time) live next to their code as
//!   expect-test unit tests.
//! - *In process, at the middle boundary.* `inprocess.rs` holds a small
//!   project (daily external data, a transformation over it, a three-day
//!   roll-up, a failing view from the `hostile-panic` fixture with a
//!   dependent, a view gated by the `trivial` plugin's `gate`), opened through
//!   the library (`catalog::parse`, `Plugins::load`, `Scheduler::open`); tests
//!   wait on the metastore's commits (`subscribe`), never on a duration.
//!   `scheduler.rs` asserts on run summaries, view records and the event log:
//!   dependencies first; an unchanged run idle without writes; a re-delivered
//!   done flag rebuilding exactly its cone; a version-checksum change;
//!   invalidation; a failing transformation retried, then
//!   `TERMINATED_WITH_ERROR`, its dependent flagged `errors`; no data
//!   propagating as `incomplete`; `SET_ONLY` giving a new timestamp, so dependents rebuild; late data
//!   with an old mtime, and deleted outputs rebuilt (each embedded and with
//!   a memo); the dry run checking flags; the `Service`
//!   through its `Handle` (answers during a run, queueing, dequeue, stop,
//!   shutdown). `coordinators.rs` runs a `Service` on a manual clock over a
//!   real inotify watch: an action waiting then ready when its flag appears,
//!   a timeout from the actual time, concurrency, catch-up after a restart,
//!   suspend and resume, kill and rerun. `api.rs` drives `api::router` over a real service with
//!   `tower::ServiceExt::oneshot`: the error contract (status codes, one-line
//!   JSON `{"error": ...}`, bearer token, URI limit), 202 with a run id, 409
//!   for invalidating a view in flight. `plan_agrees.rs` is a proptest (200
//!   cases, on tmpfs where there is one): over generated small lattices
//!   and changes (flags delivered, re-delivered with an old mtime, removed;
//!   a configuration changed; invalidations; outputs deleted; single views
//!   materialized), embedded and with a memo, what `plan` says will
//!   transform is what the next `materialize` transforms.
//! - *Real processes*, for what only they prove: csv-aggregate against an
//!   independent computation, every hostile fixture, the cache, worlds,
//!   configuration checks, checksums, CLI exit codes and the demo;
//!   `readme.rs` runs every command of README.md and docs/*.md as written, in
//!   order, a server on port 0 where they start one; `cli.rs` builds a crate
//!   from `plugins new` with a real cargo and materializes a view with it;
//!   `spark.rs` runs a real PySpark in local mode (installed by `trellis
//!   engines install spark` when missing): Spark SQL and a PySpark
//!   application (through Parquet) equal csv-aggregate's results, a failing
//!   query fails its view at once with its log, editing the query rebuilds
//!   exactly its cone, and a stop and a deadline kill the job, leaving no
//!   process, staging or partial data;
//!   `python.rs` builds the Python plugins of `plugins/python` with
//!   `trellis plugins build` once per test binary (componentize-py installed
//!   into the user's cache on first use, as a user's is) and checks
//!   py-csv-aggregate's output byte for byte against csv-aggregate's on
//!   generated data, the Python hostile fixtures contained (deadline, memory
//!   cap counting the interpreter, an exception as a panic with its
//!   traceback), a traceback in the view's log, the Python listener seeing
//!   every event of three runs, an unchanged rebuild writing nothing, a
//!   rebuild with new bytes rematerializing nothing and a changed source
//!   rematerializing its view, the SDK's native unit tests, and one-line
//!   build refusals;
//!   `listeners.rs` drives real `trellis materialize` processes with the
//!   `hostile-listener` fixture and derives the expected deliveries (replays,
//!   drops, gaps) from the event log by seed 000's rules, and kills a host
//!   halfway through a listener's backlog; `crash.rs` kills a run of plain
//!   and incremental views (alternately embedded and a server) at least 10
//!   times, each as soon as a few more views are published, and asserts that
//!   no view is transformed (by the event log) or its directory replaced
//!   (by inode) once published, that kills landed between a publish and its
//!   commit for both kinds, and that records converge as an uninterrupted
//!   run writes them; it stops runs (leaving no staging directory),
//!   kills servers and embedded `coordinate`s at random points of a
//!   catch-up of 100 actions (no action lost, none started twice), and kills
//!   incremental runs 24 times, half at random moments and half the moment
//!   their output is published (most often before the log's commit): every
//!   file delivered is counted once, as a full recomputation counts it, and
//!   each kill between publish and commit was reconciled;
//!   `incremental.rs` (in process) is a proptest of 100 generated sequences
//!   of deliveries, re-deliveries, rewrites and deletions after each of
//!   which the incremental aggregate equals the full one, plus resets,
//!   invalidation, version, schema and full refresh, a 1.0.0 plugin beside
//!   an incremental one, and a plugin's own offsets;
//!   `server.rs` and `remote.rs` drive real `trellis serve` processes over
//!   HTTP (every endpoint, token, event-stream resume, requests during a
//!   gated run, graceful shutdown, `/openapi.json` against `ROUTES` with
//!   hostile values, a reload by `POST /reload`, SIGHUP and `trellis reload`,
//!   and a broken project refused, a served coordinator run by a real inotify
//!   event, an action killed by hand after its server died mid-run) and the
//!   remote CLI; `schemathesis.rs` runs schemathesis (pip-installed into
//!   the tools directory when missing) against a served demo on a bounded
//!   budget; `fuzz.rs` sends 2,500 requests
//!   generated from `/openapi.json` (hostile values, wrong methods and
//!   content types, malformed headers) over raw TCP and asserts no 5xx and a
//!   one-line JSON body on every error; `storage.rs` proves that paths under
//!   trellis's own names are refused and that the staging cleanup deletes
//!   only what trellis created; `s3.rs` drives the object-store storage
//!   against moto (`moto.rs`: `moto[server]` pip-installed into the tools
//!   directory on first use, one server per test binary, a bucket per
//!   test): a publish read through its pointer, a republish, 20 races of
//!   two writers with exactly one winner, ABA, external data, empty flags
//!   rewritten, old versions and orphans kept for the grace and collected
//!   after it, a root's probe; `s3_commands.rs` the commands on an S3 root
//!   (`validate`/`serve` refusing an unreachable endpoint or a missing
//!   bucket in one line, `gc`, `views --json` and the API's current
//!   prefix); `s3_project.rs` materializes a project on an S3 root
//!   with the real binary (plugins' inputs through the local cache, a
//!   second run idle, a re-delivery rebuilding its cone); `cli.rs` the commands' output and exit codes
//!   (flags and a pending invalidation shown, attempts per flow);
//!   `browser.rs` drives the web UI in Debian's headless Chromium over
//!   WebDriver (fantoccini and chromedriver, installed by the test itself
//!   when missing and running as root, as by `.ci/run`): the overview's
//!   counts against the API's, a materialize from the page seen live
//!   without a reload, a failed view's error and log, the graph and a click
//!   through it, the token asked for, refused when wrong, and never a
//!   cookie; it saves a screenshot of each page (TRELLIS_UI_SCREENSHOTS
//!   makes the ones in docs/);
//!   `accounts.rs` what a run keeps of its own (flows written as views
//!   settle, counters, its errors and how it ended) against a real server.
//!   The scenario files include `refresh` (EXCLUDED, `--full-refresh`),
//!   `failures` (`on_dependency_failure`, retries per type), `evaluation`
//!   (`latest()` under `evaluation_time = "actual"`), `coordinators` (an
//!   action's life with the clock set) and `coordinator_rules` (throttle,
//!   LAST_ONLY, NONE, `end`, a DST switch, the data trigger, cron, and every
//!   mistake in a `[[coordinator]]`).
//!
//! Invariant: a test asserts only on what it set up itself, and ends on a
//! fact (a commit, a record, the table, a process's exit); a timeout only
//! turns a hang into a failure.

mod inprocess;
mod moto;
mod support;

mod accounts;
mod api;
mod browser;
mod cli;
mod coordinators;
mod crash;
mod csv_aggregate;
mod fuzz;
mod incremental;
mod listeners;
mod metastore;
mod plan_agrees;
mod python;
mod readme;
mod remote;
mod runtime;
mod s3;
mod s3_commands;
mod s3_project;
mod s3_servers;
mod sandbox;
mod scenarios;
mod scheduler;
mod schemathesis;
mod served;
mod server;
mod spark;
mod storage;
