//! What keeps the web pages a user opens from driving or reading a server
//! they can reach (one on loopback without a token most of all): the Host
//! check against DNS rebinding, the Origin check against cross-site
//! requests, and the headers that keep the UI from being framed, sniffed
//! or fed script from anywhere else.
//!
//! - **Host.** A page on `evil.example` whose name is made to resolve to
//!   127.0.0.1 is, to the browser, of its own origin: it may read what it
//!   asks. Its requests still name `evil.example` in `Host`, so a request
//!   is answered only if its `Host` is the address the server listens on
//!   (any IP address when it listens on all of them), `localhost`, or a
//!   name given with `serve --allowed-host`. A request without one (an
//!   HTTP/1.0 client; no browser) is answered: it cannot come from a page.
//! - **Origin.** Any page may send a form-style POST to any address
//!   (it cannot read the answer, but the run starts). A request that
//!   changes something, or that instantiates views (which grows what the
//!   server holds), is refused if its `Origin` is not the server's own
//!   (`null`, from a sandboxed frame or a file, included), or, without an
//!   `Origin`, if `Sec-Fetch-Site` says another site sent it. The UI's own
//!   requests carry the server's origin; curl and the CLI send neither.
//!
//! Invariant: every refusal is a 403 with the API's one-line JSON error,
//! naming what was refused and what to do instead.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, INSTANTIATING, ui};

/// The UI loads its script, style and fragments from the server and
/// nothing else, runs no inline script, and is never framed.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Sent with every answer, the UI's and the API's alike: a JSON answer
/// opened as a page runs nothing either.
pub(super) async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// What `Host` names: a host (lower case, without brackets or a final
/// dot) and the port, if given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(text: &str) -> Option<Authority> {
        let authority: axum::http::uri::Authority = text.parse().ok()?;
        if authority.as_str().contains('@') {
            return None;
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']');
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        (!host.is_empty()).then_some(Authority { host, port: authority.port_u16() })
    }
}

/// The names a server answers to, as `--allowed-host` takes them: a host
/// name or an IP address, without a scheme, port or path.
pub fn allowed_host(text: &str) -> Result<String, String> {
    match Authority::parse(text) {
        Some(Authority { host, port: None }) if !text.contains('/') => Ok(host),
        _ => Err(format!("`{text}` is not a host name or an IP address (no scheme, port or path)")),
    }
}

/// Whether the server answers to `host`.
fn host_allowed(state: &AppState, host: &str) -> bool {
    let bound = state.settings.bound.ip();
    let listed = state.settings.allowed_hosts.iter().any(|allowed| allowed == host);
    listed
        || match host.parse::<IpAddr>() {
            Ok(ip) => ip == bound || bound.is_unspecified(),
            Err(_) => host == "localhost",
        }
}

/// The authority a request names, in its URI (absolute form) or `Host`;
/// `Err` holds the text that is not one.
fn request_authority(request: &Request) -> Result<Option<Authority>, String> {
    if let Some(authority) = request.uri().authority() {
        return Authority::parse(authority.as_str()).map(Some).ok_or_else(|| authority.to_string());
    }
    match request.headers().get(header::HOST) {
        None => Ok(None),
        Some(value) => {
            let text = value.to_str().map_err(|_| String::from_utf8_lossy(value.as_bytes()).into_owned())?;
            Authority::parse(text).map(Some).ok_or_else(|| text.to_string())
        }
    }
}

fn refused(message: String) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, message).into_response()
}

/// The names the server answers to, for a refusal's message.
fn names(state: &AppState) -> String {
    let bound = state.settings.bound.ip();
    let mut names = vec![if bound.is_unspecified() { "any IP address".to_string() } else { bound.to_string() }];
    names.push("localhost".into());
    names.extend(state.settings.allowed_hosts.iter().cloned());
    names.join(", ")
}

/// Refuses a request whose `Host` is not one the server answers to.
pub(super) async fn check_host(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    match request_authority(&request) {
        Ok(None) => next.run(request).await,
        Ok(Some(authority)) if host_allowed(&state, &authority.host) => next.run(request).await,
        Ok(Some(authority)) => refused(format!(
            "refused: this server does not answer to the name `{}` (a web page may be rebinding that name to it); \
             it answers to {}: start it with `--allowed-host {}` to answer to that name too",
            authority.host,
            names(&state),
            authority.host,
        )),
        Err(text) => refused(format!("refused: the request's Host `{text}` is not a host name and port")),
    }
}

/// Whether a request with `method` on `matched` changes what the server
/// holds: a mutation, or a read that instantiates views.
fn acts(method: &Method, matched: Option<&str>) -> bool {
    let reads = method == Method::GET || method == Method::HEAD;
    !reads || matched.is_some_and(|matched| INSTANTIATING.contains(&matched) || ui::INSTANTIATING.contains(&matched))
}

/// The port an origin's scheme implies.
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// Whether `origin` (`scheme://host[:port]`) is the server's own: the
/// authority the request was sent to or, without one, an address the
/// server answers to on the port it listens on.
fn own_origin(state: &AppState, origin: &str, sent_to: Option<&Authority>) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    let scheme = scheme.to_ascii_lowercase();
    let Some(implied) = default_port(&scheme) else { return false };
    let Some(from) = Authority::parse(rest).filter(|_| !rest.contains('/')) else { return false };
    let from_port = from.port.unwrap_or(implied);
    match sent_to {
        Some(to) => from.host == to.host && from_port == to.port.unwrap_or(implied),
        None => host_allowed(state, &from.host) && from_port == state.settings.bound.port(),
    }
}

/// `Sec-Fetch-Site` values that say another origin's page sent the request.
fn from_another_site(headers: &HeaderMap) -> Option<&str> {
    const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");
    let value = headers.get(SEC_FETCH_SITE)?.to_str().unwrap_or("unreadable");
    (value != "same-origin" && value != "none").then_some(value)
}

/// Refuses a request that acts, sent by a page of another origin.
pub(super) async fn check_origin(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let matched = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
    if !acts(request.method(), matched) {
        return next.run(request).await;
    }
    let what = format!("{} {}", request.method(), request.uri().path());
    let advice = "a web page may not act on this server; use its own UI, curl or the CLI";
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        let sent_to = request_authority(&request).ok().flatten();
        if origin.trim() == "null" {
            return refused(format!(
                "refused: {what} comes from a page without an origin (`Origin: null`: a sandboxed frame or a file); {advice}"
            ));
        }
        if !own_origin(&state, origin.trim(), sent_to.as_ref()) {
            return refused(format!(
                "refused: {what} comes from a page of another origin (`Origin: {origin}`); {advice}"
            ));
        }
    } else if let Some(site) = from_another_site(request.headers()) {
        return refused(format!("refused: {what} comes from another site's page (`Sec-Fetch-Site: {site}`); {advice}"));
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_parsed_as_browsers_send_them() {
        let parsed = |text| Authority::parse(text).map(|a| (a.host, a.port));
        assert_eq!(parsed("127.0.0.1:20698"), Some(("127.0.0.1".into(), Some(20698))));
        assert_eq!(parsed("LocalHost."), Some(("localhost".into(), None)));
        assert_eq!(parsed("[::1]:80"), Some(("::1".into(), Some(80))));
        assert_eq!(parsed("evil.example:1"), Some(("evil.example".into(), Some(1))));
        assert_eq!(parsed("user@localhost"), None);
        assert_eq!(parsed(""), None);
    }

    #[test]
    fn allowed_hosts_are_names_or_addresses_only() {
        assert_eq!(allowed_host("Trellis.Internal"), Ok("trellis.internal".into()));
        assert_eq!(allowed_host("10.0.0.5"), Ok("10.0.0.5".into()));
        for bad in ["http://x", "x:80", "x/y", "", "a@b"] {
            assert!(allowed_host(bad).is_err(), "{bad}");
        }
    }
}
