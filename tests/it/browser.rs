//! The web UI in a real headless Chromium (Debian's `chromium` and
//! `chromium-driver`) driven over WebDriver, against a real `trellis
//! serve`: the overview's counts against the API's, a materialize started
//! from the page seen live, a failed view's error and log, the graph and a
//! click through it, the token asked for and sent, and crafted links and
//! markup that run no script (the page routes only its own pages, and the
//! server's Content-Security-Policy blocks inline script).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::server::finished;
use crate::support::{Daily, Server, open_gates};

/// Where Debian puts them.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Installs Debian's chromium and chromium-driver when they are missing and
/// the tests run as root (as CI does); otherwise says what to install.
fn installed() {
    static INSTALLED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut done = INSTALLED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if *done || (Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists()) {
        *done = true;
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "the browser tests need Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}): \
         run `sudo apt-get install -y chromium chromium-driver` (.ci/run installs them when it runs as root)"
    );
    eprintln!("installing Debian's chromium and chromium-driver for the browser tests (apt-get, once)");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", "chromium", "chromium-driver"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|status| status.success())
    };
    let installed = install() || {
        let _ = Command::new("apt-get").args(["update", "-q"]).status();
        install()
    };
    assert!(installed, "apt-get could not install chromium and chromium-driver (see its output above)");
    *done = true;
}

/// A headless Chromium session, its chromedriver in a process group of its
/// own so that both go when the test ends, passed or failed.
struct Browser {
    client: Option<Client>,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Browser {
        installed();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut command = Command::new(CHROMEDRIVER);
        command.arg(format!("--port={port}")).stdout(Stdio::null()).stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver = command.spawn().expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let status = crate::support::http().build().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !status.get(format!("{url}/status")).send().await.is_ok_and(|r| r.status().is_success()) {
            assert!(Instant::now() < deadline, "chromedriver did not answer on {url} within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        // Headless, as root, and quiet on a machine with no way out: the
        // background-networking flags keep Chromium from reaching for Google.
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }
        });
        let Value::Object(capabilities) = capabilities else { unreachable!() };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&url)
            .await
            .expect("a Chromium session");
        Browser { client: Some(client), driver, _profile: profile }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    async fn goto(&self, url: &str) {
        self.client().goto(url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    }

    /// Polls the page's script `probe` (which returns null until it holds)
    /// for at most a minute.
    async fn until(&self, what: &str, probe: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let value = self.client().execute(probe, vec![]).await.unwrap_or(Value::Null);
            if !value.is_null() {
                return value;
            }
            if Instant::now() > deadline {
                let text = self.text("main").await;
                panic!("timed out waiting for {what}; the page shows:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn text(&self, css: &str) -> String {
        match self.client().find(Locator::Css(css)).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Saves a screenshot as `name.png` in `dir` (and in
    /// TRELLIS_UI_SCREENSHOTS, where the docs' pictures are made).
    async fn screenshot(&self, dir: &Path, name: &str) {
        let png = self.client().screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a screenshot is a PNG");
        std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
        if let Some(out) = std::env::var_os("TRELLIS_UI_SCREENSHOTS") {
            std::fs::write(PathBuf::from(out).join(format!("{name}.png")), &png).unwrap();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The session's Chromium is the driver's child, in its group.
        // SAFETY: killpg on the process group this test made.
        unsafe { libc::killpg(self.driver.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}

/// A day's view of each type, chained day to day, gated (a transformation
/// waits for a `GO` file in its input), and a type whose plugin panics.
fn project(dir: &Path) -> PathBuf {
    let project = dir.join("ui");
    Daily::new("b", "trivial", 4)
        .chained()
        .concurrency(2)
        .deadline("600s")
        .config(r##"gate = "GO""##)
        .plugins(&["hostile_panic"], "panic = \"plugins/hostile_panic.wasm\"\n")
        .tail(
            r##"
[[view]]
name = "b.bad/Broken"
time = { frequency = "1d", initial = "2015-01-01" }
transformation = { plugin = "panic" }

[[view.dependency]]
view = "b.raw/In"

[[view]]
name = "b.raw/Shop"
parameters = [{ name = "shop" }]
time = { frequency = "1d", initial = "2015-01-01" }
path = "shops/${shop}/${YEAR}/${MONTH}/${DAY}"
"##,
        )
        .write(&project);
    project
}

async fn api(method: reqwest::Method, url: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = crate::support::http().build().unwrap().request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The run the page's status line says was started.
async fn accepted_run(browser: &Browser) -> String {
    let status = browser.text("#status").await;
    status.rsplit(": run ").next().unwrap().trim().to_string()
}

const DAYS: &str = "b.mart/Out/2015/01/e(01,02,03)";
const BROKEN: &str = "b.bad/Broken/2015/01/01";

/// The states the views table shows, by view.
const TABLE_STATES: &str = r##"
    const rows = [...document.querySelectorAll("#views-table tbody tr")];
    if (rows.length === 0) return null;
    return Object.fromEntries(rows.map(r => [r.dataset.view, r.querySelector(".view-state").textContent.trim()]));
"##;

#[tokio::test(flavor = "multi_thread")]
async fn the_ui_shows_what_the_api_says_and_a_run_started_from_it_live() {
    let dir = tempfile::tempdir().unwrap();
    let project = project(dir.path());
    let server = Server::start(&project, &[], &[]);
    let url = &server.url;
    let shots = dir.path().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();

    // A view that fails, before the page opens.
    let (status, accepted) = api(reqwest::Method::POST, &format!("{url}/materialize/{BROKEN}"), None).await;
    assert_eq!(status, 202, "{accepted}");
    finished(url, accepted["run"].as_str().unwrap()).await;

    let browser = Browser::start().await;

    // The views of a pattern, then a materialize from the page: their
    // states change on screen, without a reload, while the gates hold them
    // and once they open.
    browser.goto(&format!("{url}/#/views?pattern={}", DAYS.replace('(', "%28").replace(')', "%29"))).await;
    let before = browser.until("the views table", &format!("return (() => {{ {TABLE_STATES} }})()")).await;
    assert_eq!(before.as_object().unwrap().len(), 3, "{before}");
    assert!(before.as_object().unwrap().values().all(|s| s != "materialized"), "{before}");
    browser.client().execute("window.notReloaded = true; return null", vec![]).await.unwrap();
    browser.client().find(Locator::Css("button[data-action=materialize]")).await.unwrap().click().await.unwrap();
    let in_flight = browser
        .until(
            "a view shown in flight",
            &format!(
                "const s = (() => {{ {TABLE_STATES} }})(); \
                 return s && Object.values(s).some(v => v === 'transforming') ? s : null"
            ),
        )
        .await;
    assert!(in_flight.as_object().unwrap().values().any(|s| s == "waiting" || s == "transforming"), "{in_flight}");
    browser.screenshot(&shots, "views").await;
    open_gates(&project);
    let after = browser
        .until(
            "every view shown materialized",
            &format!(
                "const s = (() => {{ {TABLE_STATES} }})(); \
                 return s && Object.values(s).every(v => v === 'materialized') ? s : null"
            ),
        )
        .await;
    assert_eq!(after.as_object().unwrap().len(), 3, "{after}");
    let kept = browser.client().execute("return window.notReloaded === true", vec![]).await.unwrap();
    assert_eq!(kept, Value::Bool(true), "the page was not reloaded");
    assert!(browser.text("#status").await.starts_with(&format!("Materializing {DAYS}: run ")));
    let run = accepted_run(&browser).await;
    let (_, detail) = api(reqwest::Method::GET, &format!("{url}/runs/{run}"), None).await;
    assert_eq!(detail["run"]["pattern"], DAYS, "{detail}");

    // A fragment older than what the stream has brought does not undo it
    // (the click above raced one: the table fetched after the click could
    // be rendered before the run's first events and arrive after them). The
    // race made certain: a state the stream "brought" that is newer than
    // anything the server knows, then the table drawn again from the server.
    let day = "b.mart/Out/2015/01/01";
    let redrawn = browser
        .client()
        .execute(
            &format!(
                "onEvent(JSON.stringify({{ view: '{day}', previous: 'materialized', current: 'invalidated', sequence: 0, time: 0 }})); \
                 return render(false).then(() => (() => {{ {TABLE_STATES} }})())"
            ),
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(redrawn[day], "invalidated", "{redrawn}");
    let (_, server_side) = api(reqwest::Method::GET, &format!("{url}/views/{day}"), None).await;
    assert_eq!(server_side["views"][0]["state"], "materialized", "{server_side}");
    browser
        .client()
        .execute(
            &format!("onEvent(JSON.stringify({{ view: '{day}', previous: 'invalidated', current: 'materialized', sequence: 0, time: 0 }})); return null"),
            vec![],
        )
        .await
        .unwrap();

    // The overview counts what the API counts, state by state.
    let (_, counts) = api(reqwest::Method::GET, &format!("{url}/views?overview=true"), None).await;
    browser.goto(&format!("{url}/#/")).await;
    let shown = browser
        .until(
            "the overview",
            r##"const items = [...document.querySelectorAll("#state-counts li")];
               if (items.length === 0) return null;
               return Object.fromEntries(items.map(li => [li.dataset.state, Number(li.querySelector(".count").textContent)]));"##,
        )
        .await;
    for (state, n) in shown.as_object().unwrap() {
        assert_eq!(
            n.as_u64().unwrap(),
            counts["overview"][state].as_u64().unwrap_or(0),
            "{state}: {shown} vs {counts}"
        );
    }
    assert!(browser.text("main").await.contains(&format!("{} views held.", counts["total"])));
    browser.screenshot(&shots, "overview").await;

    // A failed view's page shows its error and its transformation's log.
    browser.goto(&format!("{url}/#/view/{BROKEN}")).await;
    browser.until("the failed view's page", "return document.querySelector('#last-error') ? true : null").await;
    // The log comes on its own, after the page.
    browser.until("the view's log", "return document.querySelector('#view-log [data-load]') ? null : true").await;
    browser.screenshot(&shots, "failed-view").await;
    let error = browser.text("#last-error").await;
    assert!(error.contains("deliberate panic while materializing b.bad/Broken/2015/01/01"), "{error}");
    let log = browser.text("#view-log").await;
    assert!(log.contains("failed: ") && log.contains("deliberate panic"), "{log}");

    // The graph of a view draws what it depends on and what depends on it;
    // a click on a box moves to that view.
    browser.goto(&format!("{url}/#/view/b.mart/Out/2015/01/02")).await;
    let drawn = browser
        .until(
            "the graph",
            r##"const h = document.querySelector("h1[data-view]");
               if (!h || h.dataset.view !== "b.mart/Out/2015/01/02") return null;
               const nodes = [...document.querySelectorAll("svg.graph a.node")];
               return nodes.length ? nodes.map(a => [a.dataset.view, Number(a.dataset.level)]) : null;"##,
        )
        .await;
    let drawn: Vec<(String, i64)> = serde_json::from_value(drawn).unwrap();
    for expected in [
        ("b.mart/Out/2015/01/02", 0),
        ("b.raw/In/2015/01/02", -1),
        ("b.mart/Out/2015/01/01", -1),
        ("b.mart/Out/2015/01/03", 1),
    ] {
        assert!(drawn.contains(&(expected.0.to_string(), expected.1)), "{expected:?} not in {drawn:?}");
    }
    browser.screenshot(&shots, "view").await;
    browser
        .client()
        .find(Locator::Css(r##"svg.graph a.node[data-view="b.mart/Out/2015/01/01"]"##))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .until(
            "the dependency's page",
            "const h = document.querySelector('h1[data-view]'); return h && h.dataset.view === 'b.mart/Out/2015/01/01' ? true : null",
        )
        .await;
    assert!(browser.client().current_url().await.unwrap().as_str().ends_with("#/view/b.mart/Out/2015/01/01"));

    // Runs and events.
    browser.goto(&format!("{url}/#/runs")).await;
    browser.until("the runs", "return document.querySelector('#runs-table') ? true : null").await;
    let runs = browser.text("#runs-table").await;
    let (_, detail) = api(reqwest::Method::GET, &format!("{url}/runs/{run}"), None).await;
    let successful = detail["flows"].as_array().unwrap().iter().filter(|f| f["status"] == "SUCCESSFUL").count();
    let row = runs.lines().find(|line| line.starts_with(&run)).unwrap_or_else(|| panic!("{run} not in {runs}"));
    assert!(row.contains(DAYS) && row.contains(&format!("SUCCESSFUL {successful}")), "{row} vs {detail}");
    browser.screenshot(&shots, "runs").await;
    browser.goto(&format!("{url}/#/events")).await;
    browser.until("the events", "return document.querySelector('#events-table tbody tr') ? true : null").await;
    assert!(browser.text("#events-table").await.contains("b.mart/Out/2015/01/03"));
    browser.screenshot(&shots, "events").await;
    for page in ["overview", "views", "view", "runs", "events"] {
        assert!(shots.join(format!("{page}.png")).exists(), "{page}");
    }
    crafted_links_run_no_script(&browser, url).await;
    assert_eq!(server.stop(), 0);
}

/// A link whose hash climbs out of `/ui/` to the JSON API, which echoes a
/// string parameter's markup (a view of `b.raw/Shop/<img ...>`), shows
/// that there is no such page and puts nothing of it in the DOM; markup
/// that does get into the page runs no inline script under the server's
/// Content-Security-Policy.
async fn crafted_links_run_no_script(browser: &Browser, url: &str) {
    let markup = "%3Cimg%20src%3Dx%20onerror%3Ddocument.body.dataset.ran%3D1%3E";
    for hash in [
        format!("#/../views/b.raw/Shop/{markup}/2015/01/01"),
        format!("#/view/%2e%2e/%2e%2e/views/b.raw/Shop/{markup}/2015/01/02"),
        format!("#/views/../../views/b.raw/Shop/{markup}/2015/01/03"),
    ] {
        // Opened afresh, as a link from elsewhere is, not as a hash change.
        browser.goto("about:blank").await;
        browser.goto(&format!("{url}/{hash}")).await;
        let shown = browser
            .until(
                "the page's answer to the crafted link",
                "const t = document.getElementById('main').textContent.trim(); return t && t !== 'Loading…' ? t : null",
            )
            .await;
        let found = browser
            .client()
            .execute("return [document.querySelectorAll('img').length, document.body.dataset.ran || null]", vec![])
            .await
            .unwrap();
        assert_eq!(found, json!([0, null]), "{hash}: the page shows {shown}");
        assert!(shown.as_str().unwrap().contains("There is no such page"), "{hash}: {shown}");
    }
    // Markup in the page anyway (as if a fragment let it through): its
    // inline handler is blocked. The script's own listener runs after it
    // would have.
    let inline_ran = browser
        .client()
        .execute_async(
            r##"const done = arguments[arguments.length - 1];
               const main = document.getElementById("main");
               main.innerHTML = '<img id="probe" src="/nowhere.png" onerror="document.body.dataset.ran = 1">';
               document.getElementById("probe").addEventListener("error", () => done(document.body.dataset.ran || null));"##,
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(inline_ran, Value::Null, "an inline handler ran despite the Content-Security-Policy");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_token_the_page_asks_for_it_and_an_action_without_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let project = project(dir.path());
    open_gates(&project);
    let server = Server::start(&project, &[], &[("TRELLIS_TOKEN", "s3cret")]);
    let url = &server.url;
    let browser = Browser::start().await;
    browser.goto(&format!("{url}/#/")).await;
    browser.until("the overview", "return document.querySelector('#state-counts') ? true : null").await;
    let runs = async || api(reqwest::Method::GET, &format!("{url}/runs"), None).await.1.as_array().unwrap().len();

    // From the keyboard: the pattern typed and Enter pressed.
    let pattern = browser.client().find(Locator::Css("#materialize-pattern")).await.unwrap();
    pattern.send_keys(&format!("{BROKEN}\u{E007}")).await.unwrap();
    browser.until("the token prompt", "return document.querySelector('#token-dialog').hidden ? null : true").await;
    assert!(browser.text("#token-reason").await.contains("needs `Authorization: Bearer <token>`"));
    browser.client().find(Locator::Css("#token-cancel")).await.unwrap().click().await.unwrap();
    browser.until("the refusal", "return document.querySelector('#status.error') ? true : null").await;
    assert_eq!(runs().await, 0, "nothing ran without the token");

    // A wrong token is refused too.
    browser.client().find(Locator::Css("form[data-action=materialize] button")).await.unwrap().click().await.unwrap();
    browser.until("the token prompt", "return document.querySelector('#token-dialog').hidden ? null : true").await;
    let input = browser.client().find(Locator::Css("#token-input")).await.unwrap();
    input.send_keys("wrong\u{E007}").await.unwrap();
    browser
        .until("the wrong token's refusal", "const s = document.querySelector('#status.error'); return s && s.textContent.includes('wrong') ? true : null")
        .await;
    assert_eq!(browser.text("#status").await, "the bearer token is wrong");
    assert_eq!(runs().await, 0);

    // With the right one, set from the header's button, the action goes through.
    browser.client().find(Locator::Css("#token-button")).await.unwrap().click().await.unwrap();
    let input = browser.client().find(Locator::Css("#token-input")).await.unwrap();
    input.send_keys("s3cret\u{E007}").await.unwrap();
    browser.client().find(Locator::Css("form[data-action=materialize] button")).await.unwrap().click().await.unwrap();
    browser
        .until("the run accepted", "const s = document.querySelector('#status'); return s && s.textContent.includes(': run ') && !s.classList.contains('error') ? true : null")
        .await;
    assert_eq!(runs().await, 1);
    // The token is held by the tab, never as a cookie.
    let cookies = browser.client().execute("return document.cookie", vec![]).await.unwrap();
    assert_eq!(cookies, Value::String(String::new()));
    assert_eq!(server.stop(), 0);
}
