//! The remote CLI's side of the HTTP API: requests to a `trellis serve`
//! with the client's bearer token, the server's one-line errors turned into
//! the CLI's, and a run's event stream (Server-Sent Events) followed to its end.
//!
//! It only moves `api::wire` data; what a command prints is the command's
//! own printing function, the one its embedded form uses too.

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use futures_util::StreamExt;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::wire::{self, StreamEvent};
use crate::model::{Termination, ViewState, from_wire_name};

/// What a URL path segment may not hold literally. `/` is not here: a
/// pattern's segments stay path segments. `%` is, so that a pattern's own
/// percent-escapes reach the pattern parser as written; `\` is, because
/// URL parsers read it as `/` in http URLs.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// `prefix/` and `value` percent-encoded segment by segment, keeping `/`.
pub(super) fn path(prefix: &str, value: &str) -> String {
    let segments: Vec<String> =
        value.split('/').map(|segment| utf8_percent_encode(segment, SEGMENT).to_string()).collect();
    format!("{prefix}/{}", segments.join("/"))
}

/// `views/PATTERN`, or `views` (those the server has instantiated).
pub(super) fn views_path(pattern: Option<&str>) -> String {
    pattern.map_or_else(|| "views".to_string(), |pattern| path("views", pattern))
}

/// How long to wait for a connection; a request's answer may take longer
/// (the server itself answers within its request timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Silence on a connection for this long means it is dead. Event streams
/// carry keep-alives every 15 s, so a live one is never cut.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Reconnections of an event stream in a row before giving up, and the
/// first wait between them (doubling).
const RECONNECTS: u32 = 6;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// A `trellis serve` to talk to.
pub(super) struct Server {
    client: reqwest::Client,
    /// The URL given, without a trailing `/`: paths are appended to it, so
    /// a server behind a path prefix works too.
    base: String,
    token: Option<String>,
}

/// A request without query parameters.
pub(super) const NO_QUERY: &[(&str, &str); 0] = &[];

/// Where every command with a remote form runs: through `server` (named
/// with `--server`, or the one holding the project) when there is one,
/// else here. Both forms gather the same data (`T`), which the command
/// prints with the one function they share.
pub(super) async fn dispatch<T>(
    server: Option<Server>,
    there: impl AsyncFnOnce(&Server) -> anyhow::Result<T>,
    here: impl AsyncFnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    match server {
        Some(server) => there(&server).await,
        None => here().await,
    }
}

impl Server {
    pub(super) fn new(url: &str, token: Option<String>) -> anyhow::Result<Server> {
        // `localhost:20698` would parse, with `localhost` as its scheme.
        if !url.contains("://") {
            bail!("--server {url} is not a URL: write it as http://HOST:PORT");
        }
        let parsed = reqwest::Url::parse(url).with_context(|| format!("--server {url} is not a URL"))?;
        // This build has no TLS: an https URL would fail at every request
        // with a message about the connection, not about the URL.
        if parsed.scheme() != "http" {
            bail!("--server {url}: trellis speaks plain http:// (put a TLS proxy on the client's side for https)");
        }
        // reqwest's TLS has no crypto provider of its own (see storage::object).
        crate::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .context("starting the HTTP client")?;
        Ok(Server { client, base: url.trim_end_matches('/').to_string(), token })
    }

    /// The server's URL, as given.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str, query: &impl Serialize) -> (String, reqwest::RequestBuilder) {
        let url = format!("{}/{path}", self.base);
        let mut request = self.client.request(method, &url).query(query);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        (url, request)
    }

    /// Sends a request and reads the whole answer, whatever its status.
    pub(super) async fn exchange(&self, method: Method, path: &str, query: &impl Serialize) -> anyhow::Result<Reply> {
        // A URL resolves `.` and `..` segments (escaped or not): a pattern
        // holding them would reach another endpoint than the one meant.
        if path.split('/').any(|segment| matches!(segment, "." | ".." | "%2E" | "%2e" | "%2E%2E" | "%2e%2e")) {
            bail!("`{path}` holds a `.` or `..` segment, which a URL cannot carry");
        }
        let (url, request) = self.request(method, path, query);
        let response = request.send().await.map_err(|e| unreachable(&url, &e))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| unreachable(&url, &e))?;
        Ok(Reply { url, status, body })
    }

    /// GET, decoding a success and turning an error status into its one line.
    pub(super) async fn get<T: DeserializeOwned>(&self, path: &str, query: &impl Serialize) -> anyhow::Result<T> {
        self.exchange(Method::GET, path, query).await?.json()
    }

    pub(super) async fn post<T: DeserializeOwned>(&self, path: &str, query: &impl Serialize) -> anyhow::Result<T> {
        self.exchange(Method::POST, path, query).await?.json()
    }

    /// Every page of a views request, following the `next` cursors.
    pub(super) async fn views(
        &self,
        pattern: Option<&str>,
        query: wire::ViewsQuery,
    ) -> anyhow::Result<Vec<wire::View>> {
        let path = views_path(pattern);
        let mut query = query;
        let mut views = Vec::new();
        loop {
            let page: wire::ViewsPage = self.get(&path, &query).await?;
            views.extend(page.views);
            match page.next {
                Some(next) => query.cursor = Some(next),
                None => return Ok(views),
            }
        }
    }

    /// Follows the events of run `run` from sequence number `from` (else
    /// from now) until the server says the run has ended, calling
    /// `on_view` with each view event; returns the run's termination. A
    /// dropped stream is resumed with `Last-Event-ID`, so no event is seen
    /// twice or missed.
    pub(super) async fn follow_run(
        &self,
        run: &str,
        from: Option<u64>,
        mut on_view: impl FnMut(ViewEvent),
    ) -> anyhow::Result<Termination> {
        let query = wire::EventsQuery { from, run: Some(run.to_string()) };
        let mut last_id: Option<String> = None;
        let mut attempts = 0;
        loop {
            let (url, mut request) = self.request(Method::GET, "events", &query);
            if let Some(id) = &last_id {
                request = request.header("Last-Event-ID", id.as_str());
            }
            let lost = match request.send().await {
                Ok(response) if response.status().is_success() => {
                    let mut stream = response.bytes_stream();
                    let mut parser = SseParser::default();
                    let mut lost = None;
                    while let Some(chunk) = stream.next().await {
                        let chunk = match chunk {
                            Ok(chunk) => chunk,
                            Err(e) => {
                                lost = Some(unreachable(&url, &e));
                                break;
                            }
                        };
                        for event in parser.push(&chunk) {
                            // Data arrived: the connection works again.
                            attempts = 0;
                            if let Some(id) = event.id {
                                last_id = Some(id);
                            }
                            match from_wire_name::<StreamEvent>(&event.kind) {
                                Some(StreamEvent::View) => {
                                    let view: ViewEvent = serde_json::from_str(&event.data)
                                        .with_context(|| format!("{url}: an event that is not a view's"))?;
                                    on_view(view);
                                }
                                Some(StreamEvent::End) => {
                                    let end: wire::End = serde_json::from_str(&event.data)
                                        .with_context(|| format!("{url}: an end event without a termination"))?;
                                    return Ok(end.termination);
                                }
                                Some(StreamEvent::Error) => bail!("the server's event stream failed: {}", event.data),
                                // Events retention removed, which progress only misses;
                                // or a kind this client does not know.
                                Some(StreamEvent::Gap) | None => {}
                            }
                        }
                    }
                    lost.unwrap_or_else(|| anyhow!("{url}: the event stream ended before run {run} did"))
                }
                Ok(response) => {
                    let status = response.status();
                    let body = response.bytes().await.unwrap_or_default();
                    return Err(Reply { url, status, body }.error());
                }
                Err(e) => unreachable(&url, &e),
            };
            attempts += 1;
            if attempts > RECONNECTS {
                return Err(lost.context(format!("following run {run}")));
            }
            tokio::time::sleep(FIRST_BACKOFF * 2u32.pow(attempts - 1)).await;
        }
    }
}

/// What progress needs of a logged event.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ViewEvent {
    pub(super) view: String,
    pub(super) current: ViewState,
}

/// An answer, read whole.
pub(super) struct Reply {
    url: String,
    pub(super) status: StatusCode,
    body: bytes::Bytes,
}

impl Reply {
    /// The body of a successful answer; an error status is an error.
    pub(super) fn json<T: DeserializeOwned>(self) -> anyhow::Result<T> {
        if !self.status.is_success() {
            return Err(self.error());
        }
        self.decode()
    }

    /// The body, whatever the status (for answers such as invalidate's 409
    /// that carry data with an error status).
    pub(super) fn decode<T: DeserializeOwned>(&self) -> anyhow::Result<T> {
        serde_json::from_slice(&self.body)
            .with_context(|| format!("{}: an answer this trellis does not understand ({})", self.url, self.status))
    }

    /// The server's one line, as an embedded command would have said it.
    pub(super) fn error(&self) -> anyhow::Error {
        match serde_json::from_slice::<wire::ErrorBody>(&self.body) {
            Ok(body) => anyhow!(body.error),
            // Not trellis speaking (a proxy, another service on that port).
            Err(_) => {
                let text = String::from_utf8_lossy(&self.body);
                let first = text.lines().next().unwrap_or_default().trim();
                if first.is_empty() {
                    anyhow!("{}: HTTP {}", self.url, self.status)
                } else {
                    anyhow!("{}: HTTP {}: {first}", self.url, self.status)
                }
            }
        }
    }
}

/// A request that got no answer: the URL, and the innermost cause
/// (reqwest's own message repeats the URL and every layer in between).
fn unreachable(url: &str, error: &reqwest::Error) -> anyhow::Error {
    let mut cause: &dyn std::error::Error = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    if error.is_timeout() {
        return anyhow!("cannot reach {url}: timed out");
    }
    anyhow!("cannot reach {url}: {cause}")
}

/// One Server-Sent Event.
#[derive(Debug, Default, PartialEq, Eq)]
struct SseEvent {
    kind: String,
    data: String,
    id: Option<String>,
}

/// Server-Sent Events from a byte stream, as the HTML standard parses
/// them: `field: value` lines, `:` comments (keep-alives), an event per
/// blank line. Chunks may split lines anywhere, even inside a character.
#[derive(Debug, Default)]
struct SseParser {
    buffer: Vec<u8>,
    current: SseEvent,
    has_data: bool,
}

impl SseParser {
    fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line);
            if line.is_empty() {
                let mut event = std::mem::take(&mut self.current);
                if std::mem::take(&mut self.has_data) || event.id.is_some() {
                    if event.kind.is_empty() {
                        event.kind = "message".into();
                    }
                    if event.data.ends_with('\n') {
                        event.data.pop();
                    }
                    events.push(event);
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line.as_ref(), ""),
            };
            match field {
                "event" => self.current.kind = value.to_string(),
                "data" => {
                    self.current.data.push_str(value);
                    self.current.data.push('\n');
                    self.has_data = true;
                }
                "id" if !value.contains('\0') => self.current.id = Some(value.to_string()),
                _ => {}
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_survive_any_split_and_skip_keep_alives() {
        let stream = b": keep-alive\n\nevent: view\r\nid: 7\ndata: {\"a\":\ndata: 1}\n\nevent:end\ndata:{}\n\n";
        for split in 0..stream.len() {
            let mut parser = SseParser::default();
            let mut events = parser.push(&stream[..split]);
            events.extend(parser.push(&stream[split..]));
            assert_eq!(
                events,
                vec![
                    SseEvent { kind: "view".into(), data: "{\"a\":\n1}".into(), id: Some("7".into()) },
                    SseEvent { kind: "end".into(), data: "{}".into(), id: None },
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn patterns_keep_their_slashes_and_lose_nothing_else() {
        assert_eq!(
            path("views", "shop.datamart/DailySales/SHOP10/rymd(20150501-20150507)"),
            "views/shop.datamart/DailySales/SHOP10/rymd(20150501-20150507)"
        );
        assert_eq!(path("plan", "a/b c/%28?#\\x/é"), "plan/a/b%20c/%2528%3F%23%5Cx/%C3%A9");
    }
}
