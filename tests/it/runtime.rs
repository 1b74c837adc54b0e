//! The runtime's own guarantees: the compile cache, refusing non-plugins,
//! worlds, configuration checks, checksums and listener instances.

use trellis::runtime::{
    CPU_WALL_CEILING, ChecksumRequest, Clock, Error, FailureKind, Limits, ListenerEvent, Provenance, Runtime,
    RuntimeOptions, TransformOutcome, ViewState, World,
};

use std::time::{Duration, Instant};

use crate::support::{load, plugin_path, request, runtime};

#[tokio::test]
async fn compiled_components_are_cached_in_memory_and_on_disk() {
    let cache = tempfile::tempdir().unwrap();
    let options = RuntimeOptions { cache_dir: Some(cache.path().to_path_buf()), ..RuntimeOptions::default() };
    let path = plugin_path("concat");

    let first = Runtime::new(options.clone()).unwrap();
    assert_eq!(first.load_file(&path).await.unwrap().provenance(), Provenance::Compiled);
    assert_eq!(first.load_file(&path).await.unwrap().provenance(), Provenance::Memory);

    // A new process (here: a new runtime) finds it on disk.
    let second = Runtime::new(options.clone()).unwrap();
    let plugin = second.load_file(&path).await.unwrap();
    assert_eq!(plugin.provenance(), Provenance::Disk);
    let out = tempfile::tempdir().unwrap();
    assert!(plugin.transform(&request(&[], out.path(), &[])).await.unwrap().result.is_ok());

    // A damaged cache file is discarded and replaced, not trusted.
    let cached: Vec<_> =
        walk(cache.path()).into_iter().filter(|p| p.extension().is_some_and(|e| e == "cwasm")).collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    std::fs::write(&cached[0], b"not a compiled component").unwrap();
    let third = Runtime::new(options.clone()).unwrap();
    assert_eq!(third.load_file(&path).await.unwrap().provenance(), Provenance::Compiled);
    let fourth = Runtime::new(options.clone()).unwrap();
    assert_eq!(fourth.load_file(&path).await.unwrap().provenance(), Provenance::Disk);

    // Cached files are native code: one that others could have written is
    // not trusted either.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cached[0], std::fs::Permissions::from_mode(0o666)).unwrap();
    let fifth = Runtime::new(options).unwrap();
    assert_eq!(fifth.load_file(&path).await.unwrap().provenance(), Provenance::Compiled);
    let mode = std::fs::metadata(&cached[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "rewritten cache file has mode {mode:o}");
}

#[tokio::test]
async fn the_disk_cache_evicts_the_least_recently_used_past_its_limit() {
    let cached = |dir: &std::path::Path| -> Vec<(std::path::PathBuf, u64)> {
        let mut files: Vec<_> = walk(dir)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .map(|p| {
                let len = std::fs::metadata(&p).unwrap().len();
                (p, len)
            })
            .collect();
        files.sort();
        files
    };
    let names = ["concat", "trivial", "sql_checksum"];
    // The entries' sizes, from a cache without a limit.
    let scratch = tempfile::tempdir().unwrap();
    let unlimited =
        Runtime::new(RuntimeOptions { cache_dir: Some(scratch.path().to_path_buf()), ..RuntimeOptions::default() })
            .unwrap();
    for name in names {
        unlimited.load_file(&plugin_path(name)).await.unwrap();
    }
    let total: u64 = cached(scratch.path()).iter().map(|(_, len)| len).sum();

    // Room for all but one byte of the three: storing the third evicts
    // the one least recently used, which a load from disk is not.
    let cache = tempfile::tempdir().unwrap();
    let options = RuntimeOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        cache_limit: total - 1,
        ..RuntimeOptions::default()
    };
    let [concat, trivial, checksum] = names.map(plugin_path);
    Runtime::new(options.clone()).unwrap().load_file(&concat).await.unwrap();
    Runtime::new(options.clone()).unwrap().load_file(&trivial).await.unwrap();
    let reloaded = Runtime::new(options.clone()).unwrap().load_file(&concat).await.unwrap();
    assert_eq!(reloaded.provenance(), Provenance::Disk);
    Runtime::new(options.clone()).unwrap().load_file(&checksum).await.unwrap();
    assert_eq!(cached(cache.path()).len(), 2, "{:?}", cached(cache.path()));
    let fresh = Runtime::new(options.clone()).unwrap();
    assert_eq!(fresh.load_file(&concat).await.unwrap().provenance(), Provenance::Disk);
    assert_eq!(fresh.load_file(&checksum).await.unwrap().provenance(), Provenance::Disk);
    assert_eq!(
        fresh.load_file(&trivial).await.unwrap().provenance(),
        Provenance::Compiled,
        "the least recently used went"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() { found.extend(walk(&path)) } else { found.push(path) }
    }
    found
}

#[tokio::test]
async fn things_that_are_not_plugins_are_refused_with_a_reason() {
    let error = runtime().load("garbage", b"\0asm but not really".to_vec()).await.err().unwrap();
    assert!(matches!(error, Error::NotAPlugin { .. }), "{error}");
    assert!(error.to_string().starts_with("garbage is not a trellis plugin: "), "{error}");

    let empty_component = b"(component)".to_vec();
    let error = runtime().load("empty", empty_component).await.err().unwrap();
    assert_eq!(
        error.to_string(),
        "empty is not a trellis plugin: it exports none of trellis:plugin/transform@1.2.0, \
         trellis:plugin/engine-job@1.2.0, trellis:plugin/version-checksum@1.2.0, trellis:plugin/events@1.2.0"
    );

    // A file's problems, each in one line that names the file, said once
    // (no `source()` repeating what the message says).
    let error = runtime().load_file(std::path::Path::new("/no/such/plugin.wasm")).await.err().unwrap();
    assert_eq!(error.to_string(), "/no/such/plugin.wasm does not exist");
    assert!(std::error::Error::source(&error).is_none());
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let toml = file("Cargo.wasm", b"[package]\nname = \"oops\"\n");
    let error = runtime().load_file(&toml).await.err().unwrap();
    assert_eq!(
        error.to_string(),
        format!(
            "{} is not a trellis plugin: it is not a WebAssembly file (it lacks the `\\0asm` header); \
             name the .wasm a plugin's build wrote (target/wasm32-wasip2/release/NAME.wasm)",
            toml.display()
        )
    );
    let core = file("core.wasm", b"\0asm\x01\0\0\0");
    let error = runtime().load_file(&core).await.err().unwrap();
    assert_eq!(
        error.to_string(),
        format!(
            "{} is not a trellis plugin: it is a core WebAssembly module, not a component: build it for \
             wasm32-wasip2 (`cargo build --target wasm32-wasip2`), which writes a component",
            core.display()
        )
    );
    std::fs::create_dir(dir.path().join("a-directory.wasm")).unwrap();
    let error = runtime().load_file(&dir.path().join("a-directory.wasm")).await.err().unwrap();
    assert!(error.to_string().starts_with("cannot read plugin "), "{error}");
    assert!(std::error::Error::source(&error).is_none());
    let python = dir.path().join("py-plugin");
    std::fs::create_dir(&python).unwrap();
    std::fs::write(python.join("pyproject.toml"), "[project]\nname = \"py-plugin\"\n").unwrap();
    let error = runtime().load_file(&python).await.err().unwrap();
    assert_eq!(
        error.to_string(),
        format!(
            "{0} is not a trellis plugin: it is a Python plugin's directory, not a component: build it with \
             `trellis plugins build {0}` and name the .wasm that writes ({0}/build/NAME.wasm)",
            python.display()
        )
    );
}

#[tokio::test]
async fn a_plugin_is_only_called_through_its_own_world() {
    let checksum = load("sql_checksum").await;
    assert_eq!(checksum.world(), World::Checksum);
    let out = tempfile::tempdir().unwrap();
    let error = checksum.transform(&request(&[], out.path(), &[])).await.err().unwrap();
    assert_eq!(error.to_string(), "sql_checksum is a checksum plugin, not a transformation plugin");
}

#[tokio::test]
async fn describe_declares_configuration_that_the_host_checks() {
    let plugin = load("csv_aggregate").await;
    let info = plugin.describe().await.unwrap().result.unwrap();
    assert_eq!(info.name, "csv-aggregate");
    let keys: Vec<(&str, bool)> = info.config.iter().map(|k| (k.name.as_str(), k.required)).collect();
    assert_eq!(keys, [("group-by", false), ("aggregates", true), ("file", false)]);

    let config =
        |entries: &[(&str, &str)]| entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
    assert_eq!(info.check_config(&config(&[("aggregates", "count(*)")])), Ok(()));
    assert_eq!(
        info.check_config(&config(&[("group-by", "shop")])),
        Err("csv-aggregate needs configuration key `aggregates`: comma-separated sum(col), count(*), count(col), \
             min(col), max(col); optionally name=..."
            .into())
    );
    assert_eq!(
        info.check_config(&config(&[("aggregates", "count(*)"), ("groupby", "shop")])),
        Err("csv-aggregate has no configuration key `groupby` (it knows: group-by, aggregates, file)".into())
    );
}

async fn sql_checksum(query: &str) -> Result<String, String> {
    let plugin = load("sql_checksum").await;
    let request = ChecksumRequest {
        transformation: "hive".into(),
        config: vec![("query".into(), query.into())],
        resources: Vec::new(),
    };
    plugin.checksum(&request).await.unwrap().result.map_err(|failure| failure.message)
}

#[tokio::test]
async fn sql_checksum_ignores_comments_set_statements_and_whitespace() {
    let base = sql_checksum("SELECT shop, SUM(amount) FROM orders WHERE note = 'a  b' GROUP BY shop").await.unwrap();
    assert_eq!(base.len(), 64);
    assert!(base.chars().all(|c| c.is_ascii_hexdigit()));
    for same in [
        "SELECT shop, SUM(amount) FROM orders WHERE note = 'a  b' GROUP BY shop",
        "  SELECT shop,\n\tSUM(amount)\n  FROM orders -- the raw orders\n WHERE note = 'a  b'\n GROUP BY shop ;\n",
        "SET hive.exec.parallel=true;\nset mapred.job.queue.name = etl ;SELECT shop, SUM(amount) /* total */ FROM orders WHERE note = 'a  b' GROUP BY shop",
        "/* header\n comment */ SELECT shop, SUM(amount) FROM orders WHERE note = 'a  b' GROUP BY shop",
    ] {
        assert_eq!(sql_checksum(same).await.unwrap(), base, "{same}");
    }
    for different in [
        "SELECT shop, SUM(amount) FROM orders WHERE note = 'a b' GROUP BY shop",
        "SELECT shop, SUM(amount) FROM orders WHERE note = 'a  b -- not a comment' GROUP BY shop",
        "SELECT shop, MAX(amount) FROM orders WHERE note = 'a  b' GROUP BY shop",
        "SELECT shop, SUM(amount) FROM orders WHERE note = 'a  b' GROUP BY shop; SELECT 1",
    ] {
        assert_ne!(sql_checksum(different).await.unwrap(), base, "{different}");
    }
    assert_eq!(sql_checksum("SELECT 'unterminated").await, Err("query: unterminated ' quote".into()));
}

#[tokio::test]
async fn a_checksum_can_come_from_a_named_resource() {
    let plugin = load("sql_checksum").await;
    let from_resource = ChecksumRequest {
        transformation: "hive".into(),
        config: Vec::new(),
        resources: vec![("daily.sql".into(), b"SELECT 1 -- one".to_vec())],
    };
    let from_resource = plugin.checksum(&from_resource).await.unwrap().result.unwrap();
    assert_eq!(from_resource, sql_checksum("SELECT 1").await.unwrap());
    let missing = plugin.checksum(&ChecksumRequest::default()).await.unwrap().result.unwrap_err();
    assert_eq!(missing.kind, FailureKind::Fatal);
    assert_eq!(missing.message, "no `query` in the configuration and no resource to read it from");
}

fn transition(sequence: u64, view: &str, previous: ViewState, current: ViewState) -> ListenerEvent {
    ListenerEvent::Transition {
        sequence,
        view: view.into(),
        previous,
        current,
        actions: vec!["transform".into()],
        time: 1_430_438_400_000,
        run_id: Some("run-1".into()),
        error: None,
    }
}

#[tokio::test]
async fn the_jsonl_listener_appends_one_line_per_event_in_its_state_directory() {
    let plugin = load("jsonl_listener").await;
    let state = tempfile::tempdir().unwrap();
    let (mut listener, started) = plugin.start_listener(&[], Some(state.path()), &[]).await.unwrap();
    assert!(started.result.is_ok(), "{:?}", started.result);
    let events = [
        transition(1, "shop/Daily/SHOP10/2015/05/01", ViewState::Waiting, ViewState::Transforming),
        transition(2, "shop/Daily/SHOP10/2015/05/01", ViewState::Transforming, ViewState::Materialized),
        ListenerEvent::Gap { first_sequence: 3, last_sequence: 9 },
    ];
    for event in &events {
        assert!(listener.on_event(event).await.result.is_ok());
    }
    let written = std::fs::read_to_string(state.path().join("events.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = written.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["sequence"], 1);
    assert_eq!(lines[0]["previous"], "waiting");
    assert_eq!(lines[1]["current"], "materialized");
    assert_eq!(lines[1]["run_id"], "run-1");
    assert_eq!(lines[2]["gap"]["last_sequence"], 9);
}

#[tokio::test]
async fn a_listener_without_its_state_directory_fails_to_start_and_stays_dead() {
    let plugin = load("jsonl_listener").await;
    let (mut listener, started) = plugin.start_listener(&[], None, &[]).await.unwrap();
    let failure = started.result.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Fatal);
    assert!(failure.message.starts_with("cannot open /state/events.jsonl: "), "{}", failure.message);
    assert!(!listener.is_alive());
    let event = transition(1, "v", ViewState::Receive, ViewState::Waiting);
    let failure = listener.on_event(&event).await.result.unwrap_err();
    assert_eq!(failure.message, "the listener instance failed earlier; restart it");
}

#[tokio::test]
async fn overlapping_grants_are_refused() {
    let trivial = load("trivial").await;
    let out = tempfile::tempdir().unwrap();
    let inside = out.path().join("inside");
    std::fs::create_dir_all(&inside).unwrap();
    let error = trivial.transform(&request(&[("orders", &inside)], out.path(), &[])).await.err().unwrap();
    assert_eq!(
        error.to_string(),
        format!(
            "cannot grant {} to the plugin: it lies inside {}, and one of them is writable",
            inside.display(),
            out.path().display()
        )
    );
}

#[tokio::test]
async fn an_output_holding_a_symlink_is_refused() {
    // Readers of published data must never be pointed outside it.
    let trivial = load("trivial").await;
    let out = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(out.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", out.path().join("sub/link")).unwrap();
    let report = trivial.transform(&request(&[], out.path(), &[])).await.unwrap();
    let failure = report.result.unwrap_err();
    assert_eq!(failure.kind, FailureKind::MalformedResult);
    assert!(failure.message.ends_with("sub/link, which is not a regular file or directory"), "{}", failure.message);
}

#[tokio::test]
async fn sql_checksum_covers_every_resource_and_keeps_backslashes_in_identifiers() {
    let plugin = load("sql_checksum").await;
    let checksum = |resources: Vec<(&str, &str)>| {
        let request = ChecksumRequest {
            transformation: "hive".into(),
            config: Vec::new(),
            resources: resources.into_iter().map(|(n, c)| (n.to_string(), c.as_bytes().to_vec())).collect(),
        };
        let plugin = plugin.clone();
        async move { plugin.checksum(&request).await.unwrap().result }
    };
    let both = checksum(vec![("a.sql", "SELECT 1"), ("b.sql", "SELECT 2")]).await.unwrap();
    assert_ne!(both, checksum(vec![("a.sql", "SELECT 1"), ("b.sql", "SELECT 3")]).await.unwrap());
    assert_eq!(both, checksum(vec![("a.sql", "SELECT  1 -- x"), ("b.sql", "SELECT 2;")]).await.unwrap());
    // Backticks quote identifiers without escapes: this is complete SQL.
    assert!(checksum(vec![("a.sql", r"SELECT `odd\` FROM t")]).await.is_ok());
}

#[tokio::test]
async fn the_jsonl_listener_repairs_a_line_left_half_written() {
    let plugin = load("jsonl_listener").await;
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("events.jsonl"), "{\"sequence\":1,\"vi").unwrap();
    let (mut listener, started) = plugin.start_listener(&[], Some(state.path()), &[]).await.unwrap();
    assert!(started.result.is_ok());
    let event = transition(2, "v", ViewState::Receive, ViewState::Waiting);
    assert!(listener.on_event(&event).await.result.is_ok());
    let written = std::fs::read_to_string(state.path().join("events.jsonl")).unwrap();
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 2, "{written}");
    let last: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(last["sequence"], 2);
}

#[tokio::test]
async fn concat_never_joins_lines_of_different_files_and_keeps_one_header() {
    let concat = load("concat").await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("a.csv"), "").unwrap();
    std::fs::write(input.join("b.csv"), "shop,amount\nS1,1").unwrap();
    std::fs::write(input.join("c.csv"), "shop,amount\nS2,2\n").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let config = [("header", "true"), ("file", "all.csv")];
    let report = concat.transform(&request(&[("orders", &input)], &out, &config)).await.unwrap();
    assert!(report.result.is_ok(), "{:?}", report.result);
    assert_eq!(std::fs::read_to_string(out.join("all.csv")).unwrap(), "shop,amount\nS1,1\nS2,2\n");
}

/// The `hostile_listener` fixture with a deadline of `deadline`, started
/// with `config`, and its state directory.
async fn hostile_listener(
    deadline: Duration,
    config: &[(&str, &str)],
) -> (trellis::runtime::ListenerInstance, tempfile::TempDir) {
    let plugin = load("hostile_listener").await;
    let plugin = plugin.with_limits(Limits { deadline, ..plugin.limits() });
    let state = tempfile::tempdir().unwrap();
    let config: Vec<(String, String)> = config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let (listener, started) = plugin.start_listener(&config, Some(state.path()), &[]).await.unwrap();
    assert!(started.result.is_ok(), "{:?}", started.result);
    (listener, state)
}

#[tokio::test]
async fn a_listener_waiting_past_its_deadline_without_using_cpu_is_not_stopped() {
    // A sleep is a host-side wait, as is waiting for a CPU on a busy machine.
    let deadline = Duration::from_millis(200);
    let (mut listener, _state) = hostile_listener(deadline, &[("behaviour", "sleep"), ("sleep_ms", "600")]).await;
    let report = listener.on_event(&transition(1, "v", ViewState::Receive, ViewState::Waiting)).await;
    assert_eq!(report.result, Ok(()));
    assert_eq!(load("hostile_listener").await.limits().clock, Clock::Cpu, "listeners' deadlines count CPU time");
    assert!(report.elapsed >= Duration::from_millis(600), "{:?}", report.elapsed);
    assert!(report.cpu < deadline, "it slept, yet used {:?} of CPU", report.cpu);
    assert!(listener.is_alive());
}

#[tokio::test]
async fn a_listener_spinning_past_its_cpu_time_deadline_is_stopped() {
    let deadline = Duration::from_millis(200);
    let (mut listener, _state) = hostile_listener(deadline, &[("behaviour", "spin")]).await;
    let report = listener.on_event(&transition(1, "v", ViewState::Receive, ViewState::Waiting)).await;
    let failure = report.result.unwrap_err();
    assert_eq!((failure.kind, failure.message.as_str()), (FailureKind::Timeout, "CPU-time deadline of 200ms exceeded"));
    // Interrupted at the first epoch tick past it (every 10 ms of wall-clock time).
    assert!(report.cpu >= deadline && report.cpu < deadline * 3, "{:?}", report.cpu);
    assert!(!listener.is_alive());
}

#[tokio::test]
async fn a_listener_blocked_past_its_wall_clock_ceiling_is_abandoned() {
    // The ceiling is CPU_WALL_CEILING times the deadline: 2 s here.
    let deadline = Duration::from_millis(10);
    let (mut listener, _state) = hostile_listener(deadline, &[("behaviour", "sleep"), ("sleep_ms", "60000")]).await;
    let report = listener.on_event(&transition(1, "v", ViewState::Receive, ViewState::Waiting)).await;
    let failure = report.result.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Timeout);
    assert_eq!(
        failure.message,
        format!(
            "took more than 2s of wall-clock time ({CPU_WALL_CEILING} times its CPU-time deadline of 10ms), \
             blocked in a host call"
        )
    );
    // Abandoned, not waited for: its sleep of a minute had not ended.
    assert!(report.elapsed < Duration::from_secs(60), "{:?}", report.elapsed);
}

#[tokio::test]
async fn a_listener_taking_a_hundred_times_its_deadline_of_wall_clock_time_is_not_abandoned() {
    // At nice 19 beside one CPU-bound process, a listener gets about 1.4%
    // of a CPU: an event that uses its whole CPU-time deadline takes about
    // 70 times it of wall-clock time, which must stay under the ceiling.
    // A sleep of 100 times the deadline stands for it here.
    let deadline = Duration::from_millis(10);
    let (mut listener, _state) = hostile_listener(deadline, &[("behaviour", "sleep"), ("sleep_ms", "1000")]).await;
    let report = listener.on_event(&transition(1, "v", ViewState::Receive, ViewState::Waiting)).await;
    assert_eq!(report.result, Ok(()));
    assert!(report.elapsed >= deadline * 100, "{:?}", report.elapsed);
    assert!(listener.is_alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_wait_for_the_memory_budget_instead_of_exceeding_it() {
    const MIB: usize = 1 << 20;
    // Room for two caps of 64 MiB, not three.
    let runtime = runtime().with_memory_budget(160 * MIB);
    let hog = runtime.load_file(&plugin_path("hostile_memory_hog")).await.unwrap();
    let hog = hog.with_limits(Limits { memory: 64 * MIB, ..hog.limits() });
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let outputs: Vec<std::path::PathBuf> = (0..4).map(|n| dir.path().join(format!("out{n}"))).collect();
    let mut calls = Vec::new();
    for out in &outputs {
        std::fs::create_dir_all(out).unwrap();
        let request = request(&[("gate", &gate)], out, &[("mib", "48"), ("gate", "GO")]);
        let hog = hog.clone();
        calls.push(tokio::spawn(async move { hog.transform(&request).await.unwrap() }));
    }
    // Each call that has its store takes 48 MiB, says so, and holds it
    // until the gate opens.
    let holding = || outputs.iter().filter(|out| out.join("holding").exists()).count();
    let budget = hog.memory_budget();
    let waited = Instant::now();
    while !(budget.usage().waiting == 2 && holding() == 2) {
        assert!(waited.elapsed() < Duration::from_secs(60), "never 2 running, 2 waiting: {:?}", budget.usage());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let usage = budget.usage();
    assert_eq!((usage.budget, usage.reserved), (160 * MIB, 128 * MIB), "{usage:?}");

    std::fs::write(gate.join("GO"), "").unwrap();
    for call in calls {
        let report = call.await.unwrap();
        assert_eq!(report.result, Ok(TransformOutcome::Data { counters: vec![("mib".into(), 48)] }));
        assert!(report.peak_memory >= 48 * MIB, "{}", report.peak_memory);
    }
    assert_eq!(holding(), 4);
    let usage = budget.usage();
    assert_eq!((usage.reserved, usage.waiting), (0, 0), "{usage:?}");
    assert!(usage.peak_reserved <= 160 * MIB, "{usage:?}");
}

#[tokio::test]
async fn a_plugin_whose_cap_exceeds_the_memory_budget_is_refused_not_left_waiting() {
    let runtime = runtime().with_memory_budget(100 << 20);
    let trivial = runtime.load_file(&plugin_path("trivial")).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    let error = trivial.transform(&request(&[], out.path(), &[])).await.err().unwrap();
    assert_eq!(error.to_string(), "trivial's memory cap of 512 MiB exceeds the memory budget of 100 MiB");
}

#[tokio::test]
async fn the_webhook_listener_refuses_a_configuration_it_cannot_work_with_at_start() {
    let plugin = load("webhook_listener").await;
    let config = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    for (pairs, expected) in [
        (&[][..], "config `url` is required"),
        (
            &[("url", "ftp://hooks.example.com/x")][..],
            "config `url` `ftp://hooks.example.com/x`: the scheme must be http:// or https://",
        ),
        (
            &[("url", "https://hooks.example.com/x"), ("states", "failed,broken")][..],
            "config `states`: `broken` is not a state; states are receive, invalidated, no-data, waiting, transforming, materialized, retrying, failed",
        ),
        (
            &[("url", "https://hooks.example.com/x"), ("timeout", "0")][..],
            "config `timeout`: `0` is not a number of seconds from 1 to 3600",
        ),
    ] {
        let (_, started) = plugin.start_listener(&config(pairs), None, &[]).await.unwrap();
        let failure = started.result.unwrap_err();
        assert_eq!((failure.kind, failure.message.as_str()), (FailureKind::Fatal, expected));
    }
    let good = config(&[("url", "https://hooks.example.com/x"), ("states", "failed, retrying"), ("timeout", "5")]);
    let (listener, started) = plugin.start_listener(&good, None, &[]).await.unwrap();
    assert!(started.result.is_ok() && listener.is_alive(), "{:?}", started.result);
}
