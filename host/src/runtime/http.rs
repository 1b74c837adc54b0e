//! Outgoing HTTP (`wasi:http/outgoing-handler`) for the hosts a store was
//! granted: every request to another host is refused before it leaves,
//! so a plugin has no network but what its project lists.

use std::sync::Arc;

use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::model::AllowedHost;

/// The hosts one store may reach; none by default.
#[derive(Debug)]
pub(super) struct HttpGrant {
    allowed: Arc<[AllowedHost]>,
    plugin: Arc<str>,
}

impl HttpGrant {
    pub(super) fn new(plugin: Arc<str>, allowed: &[AllowedHost]) -> HttpGrant {
        HttpGrant { allowed: allowed.into(), plugin }
    }

    fn admits(&self, uri: &http::Uri) -> bool {
        let Some(authority) = uri.authority() else { return false };
        let default_port = if uri.scheme() == Some(&http::uri::Scheme::HTTP) { 80 } else { 443 };
        let port = authority.port_u16().unwrap_or(default_port);
        self.allowed.iter().any(|allowed| allowed.admits(authority.host(), port, default_port))
    }
}

/// What the guest's request future resolves to when it completes.
type Sent = Box<dyn Future<Output = Result<(), Error>> + Send>;

impl WasiHttpHooks for HttpGrant {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Sent,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, Sent), Error>> + Send> {
        drop(fut);
        if !self.admits(request.uri()) {
            let host = request.uri().authority().map_or("", |a| a.as_str()).to_string();
            tracing::warn!(target: "trellis::plugin", plugin = &*self.plugin, "HTTP request to {host} refused: the host is not in its allow_http");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((response.map(BodyExt::boxed_unsync), Box::new(io) as Sent))
        })
    }
}
