//! `webhook-listener`: posts a JSON message to a URL for each view that
//! failed, naming the run it failed in, e.g. to a Slack or Teams incoming
//! webhook or to an alerting gateway.
//!
//! Configuration: `url` (required), an `http://` or `https://` URL whose
//! host the `[[listener]]` entry lists in `allow_http`; trellis refuses
//! every other host. Optional `states`, a comma-separated list of states
//! that alert (default `failed`; `retrying` is the other useful one).
//! Optional `timeout`, in seconds (default 10): how long to wait for the
//! connection, and then for the answer. The host's own limit on a
//! listener's wall-clock time is far longer (200 times its deadline).
//!
//! The message is `{"text": "...", "view", "state", "run", "error", "time"}`:
//! `text` is what chat webhooks show, the rest is for machines.
//!
//! A refused host, or a URL that cannot work, is fatal: restarting would
//! not help. A network error or a 5xx answer is retryable, so trellis
//! restarts the listener and replays the latest event of every view. Any
//! other answer than 2xx is fatal.

use http::Uri;
use serde_json::json;
use trellis_plugin_sdk::{Config, ConfigKey, Event, Listener, ListenerError, PluginInfo, ViewState, export_listener};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme};

struct WebhookListener {
    target: Target,
    states: Vec<ViewState>,
}

/// Where messages go, checked once at start.
struct Target {
    url: String,
    /// Nanoseconds to wait for the connection, and then for the answer.
    timeout: u64,
    https: bool,
    authority: String,
    path_and_query: String,
}

impl Listener for WebhookListener {
    fn describe() -> PluginInfo {
        PluginInfo::new("webhook-listener", env!("CARGO_PKG_VERSION"))
            .description("posts a JSON message to a URL for each failed view")
            .config_key(ConfigKey::required(
                "url",
                "http:// or https:// URL to post to; its host must be in allow_http",
            ))
            .config_key(ConfigKey::optional("states", "comma-separated states that alert (default failed)"))
            .config_key(ConfigKey::optional("timeout", "seconds to wait to connect, then for the answer (default 10)"))
    }

    fn start(config: Config<'_>) -> Result<Self, ListenerError> {
        let url = config.get("url").ok_or_else(|| ListenerError::fatal("config `url` is required"))?;
        let seconds = match config.get("timeout") {
            None => 10,
            Some(text) => text.parse::<u64>().ok().filter(|s| (1..=3600).contains(s)).ok_or_else(|| {
                ListenerError::fatal(format!("config `timeout`: `{text}` is not a number of seconds from 1 to 3600"))
            })?,
        };
        let target = Target::parse(url, seconds * 1_000_000_000).map_err(ListenerError::fatal)?;
        let states = match config.get("states") {
            None => vec![ViewState::Failed],
            Some(list) => list.split(',').map(|name| state_named(name.trim())).collect::<Result<_, _>>()?,
        };
        Ok(WebhookListener { target, states })
    }

    fn on_event(&mut self, event: Event) -> Result<(), ListenerError> {
        let Event::Transition(transition) = event else { return Ok(()) };
        if !self.states.contains(&transition.current) {
            return Ok(());
        }
        let state = transition.current.as_str();
        let mut text = format!("trellis: {} is {state}", transition.view);
        if let Some(run) = &transition.run_id {
            text.push_str(&format!(" in run {run}"));
        }
        if let Some(error) = &transition.error {
            text.push_str(&format!(": {error}"));
        }
        let message = json!({
            "text": text,
            "view": transition.view,
            "state": state,
            "run": transition.run_id,
            "error": transition.error,
            "time": transition.time,
        });
        self.target.post(message.to_string().as_bytes())
    }
}

export_listener!(WebhookListener);

fn state_named(name: &str) -> Result<ViewState, ListenerError> {
    ViewState::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = ViewState::ALL.iter().map(ViewState::as_str).collect();
        ListenerError::fatal(format!("config `states`: `{name}` is not a state; states are {}", names.join(", ")))
    })
}

impl Target {
    fn parse(url: &str, timeout: u64) -> Result<Target, String> {
        let uri: Uri = url.parse().map_err(|e| format!("config `url` `{url}`: {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("config `url` `{url}`: the scheme must be http:// or https://")),
        };
        let authority =
            uri.authority().ok_or_else(|| format!("config `url` `{url}`: it names no host"))?.as_str().to_string();
        let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        Ok(Target { url: url.to_string(), timeout, https, authority, path_and_query })
    }

    /// Posts `body` and waits for the answer's status.
    fn post(&self, body: &[u8]) -> Result<(), ListenerError> {
        let headers = Fields::from_list(&[
            ("content-type".to_string(), b"application/json".to_vec()),
            ("content-length".to_string(), body.len().to_string().into_bytes()),
        ])
        .map_err(|e| ListenerError::fatal(format!("cannot build the request's headers: {e:?}")))?;
        let request = OutgoingRequest::new(headers);
        let scheme = if self.https { Scheme::Https } else { Scheme::Http };
        let unsettable = |what: &str| ListenerError::fatal(format!("cannot set the request's {what}"));
        request.set_method(&Method::Post).map_err(|()| unsettable("method"))?;
        request.set_scheme(Some(&scheme)).map_err(|()| unsettable("scheme"))?;
        request.set_authority(Some(&self.authority)).map_err(|()| unsettable("authority"))?;
        request.set_path_with_query(Some(&self.path_and_query)).map_err(|()| unsettable("path"))?;
        let outgoing = request.body().map_err(|()| unsettable("body"))?;

        let options = RequestOptions::new();
        let timeout = Some(self.timeout);
        options.set_connect_timeout(timeout).map_err(|()| unsettable("connect timeout"))?;
        options.set_first_byte_timeout(timeout).map_err(|()| unsettable("answer timeout"))?;
        let response = outgoing_handler::handle(request, Some(options)).map_err(|e| self.failure(e))?;
        let sent = send_body(outgoing, body);
        // A refused or failed request ends the body's stream too: the
        // answer says why, so it is read before the body's own error.
        response.subscribe().block();
        let response = match response.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(e))) => return Err(self.failure(e)),
            Some(Err(())) | None => return Err(ListenerError::retryable(format!("no answer from {}", self.url))),
        };
        sent.map_err(|e| ListenerError::retryable(format!("cannot send to {}: {e}", self.url)))?;
        match response.status() {
            200..=299 => Ok(()),
            status @ 500..=599 => Err(ListenerError::retryable(format!("{} answered {status}", self.url))),
            status => Err(ListenerError::fatal(format!("{} answered {status}", self.url))),
        }
    }

    fn failure(&self, error: ErrorCode) -> ListenerError {
        match error {
            ErrorCode::HttpRequestDenied => ListenerError::fatal(format!(
                "posting to {} was refused: add `{}` to this listener's allow_http",
                self.url, self.authority
            )),
            ErrorCode::HttpRequestUriInvalid | ErrorCode::HttpProtocolError => {
                ListenerError::fatal(format!("cannot post to {}: {error:?}", self.url))
            }
            other => ListenerError::retryable(format!("cannot post to {}: {other:?}", self.url)),
        }
    }
}

/// Writes `body` to the request and finishes it.
fn send_body(outgoing: OutgoingBody, body: &[u8]) -> Result<(), String> {
    {
        let stream = outgoing.write().map_err(|()| "the body's stream is gone".to_string())?;
        // blocking_write_and_flush takes at most 4096 bytes at a time.
        for chunk in body.chunks(4096) {
            stream.blocking_write_and_flush(chunk).map_err(|e| format!("{e:?}"))?;
        }
    }
    OutgoingBody::finish(outgoing, None).map_err(|e| format!("{e:?}"))
}
