//! Serving the router over TCP: HTTP/1.1 connections that must send a
//! request's headers within a deadline, a cap on open connections with a
//! reserve that keeps `/health` and the token holder's requests getting
//! through when others hold every connection, and JSON bodies on the few
//! errors hyper answers by itself.
//!
//! Why not `axum::serve`: it has no header-read deadline and no limit on
//! connections, so a thousand clients that never finish their headers hold
//! a thousand file descriptors until the process runs out of them and
//! nobody, `/health` included, gets an answer.
//!
//! Admission, at each accepted connection (oldest first):
//! 1. under `max_connections`: served as usual;
//! 2. else the oldest *idle* connection (no request in flight: still
//!    sending its headers, or kept alive between requests) is closed to
//!    make room. Stalled clients are thus pushed out by new ones instead of
//!    locking them out;
//! 3. else, every connection being busy, up to `reserve` more are admitted,
//!    on which only `/health` and requests bearing the token are served
//!    (others get a 503 naming the limit);
//! 4. else the new connection is closed at once.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tower::ServiceExt;

use super::ApiError;

/// How many connections the server keeps, and how long it waits for them.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections served as usual.
    pub max_connections: usize,
    /// Connections admitted past that while every other one is busy, on
    /// which only `/health` and requests with the token are served.
    pub reserve: usize,
    /// A connection that has not sent a whole request head this long after
    /// it started one (or after its previous response) is closed.
    pub header_timeout: Duration,
    /// A connection whose client takes nothing of a response for this long
    /// (an event stream nobody reads) is closed.
    pub write_timeout: Duration,
    /// How long connections may go on after a shutdown is asked before
    /// they are closed, finished or not.
    pub shutdown_grace: Duration,
}

impl ConnectionLimits {
    /// `asked` connections, or as many as the open files this process may
    /// have (raised to the hard limit first) leave room for beside the
    /// metastore, plugins and listeners; an error when that is none.
    pub fn within_open_files(asked: usize, header_timeout: Duration, shutdown_grace: Duration) -> Result<Self, String> {
        const RESERVE: usize = 32;
        /// How long a client may take nothing of a response before its
        /// connection closes: far longer than any reader that reads.
        const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
        /// Files the rest of the server may need: the metastore, plugins'
        /// inputs and outputs, inotify, listeners' state.
        const OTHER_FILES: usize = 256;
        let files = raise_open_file_limit();
        let room = files.saturating_sub(OTHER_FILES + RESERVE);
        if room == 0 {
            return Err(format!("this process may open only {files} files, too few to serve (raise `ulimit -n`)"));
        }
        let max_connections = if asked > room {
            tracing::warn!(
                asked,
                serving = room,
                "--max-connections lowered to what the open-file limit ({files}) leaves room for"
            );
            room
        } else {
            asked
        };
        Ok(ConnectionLimits {
            max_connections,
            reserve: RESERVE,
            header_timeout,
            write_timeout: WRITE_TIMEOUT,
            shutdown_grace,
        })
    }
}

/// Raises the soft limit on open files to the hard one and returns the
/// limit in force; a server holds a descriptor per connection.
fn raise_open_file_limit() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// What a connection was admitted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    Normal,
    /// Past `max_connections`: only `/health` and the token holder.
    Reserved,
}

/// What a connection's task and the accept loop both know of it.
#[derive(Debug, Default)]
struct Usage {
    /// Requests whose response has not been sent to its end, or
    /// [`EVICTED`] once the accept loop has taken the connection to close.
    in_flight: AtomicUsize,
    /// Whether a whole request head ever came on it.
    served: AtomicBool,
}

const EVICTED: usize = usize::MAX;

impl Usage {
    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// Takes an idle connection for closing, unless a request has started
    /// on it meanwhile: a request is never cut off by an eviction.
    fn claim_idle(&self) -> bool {
        self.in_flight.compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Counts a request in; false once the connection was taken for closing.
    fn begin(&self) -> bool {
        self.served.store(true, Ordering::Release);
        self.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n != EVICTED).then(|| n + 1)).is_ok()
    }

    fn end(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One open connection, as the accept loop sees it.
struct Open {
    admission: Admission,
    usage: Arc<Usage>,
    /// Closes the connection when sent (or dropped).
    evict: oneshot::Sender<()>,
}

/// The open connections, by id; ids grow with age.
#[derive(Default)]
struct Registry {
    next_id: u64,
    open: BTreeMap<u64, Open>,
}

/// A connection admitted: its id, what it may do, and what closes it.
struct Admitted {
    id: u64,
    admission: Admission,
    usage: Arc<Usage>,
    evicted: oneshot::Receiver<()>,
}

impl Registry {
    fn count(&self, admission: Admission) -> usize {
        self.open.values().filter(|open| open.admission == admission).count()
    }

    /// Closes an idle connection admitted as `admission` (any, for `None`):
    /// the oldest that never sent a whole request (a stalled client), else
    /// the oldest kept alive between requests. False if every one of them
    /// is busy. It leaves the registry at once, so that it no longer
    /// counts, while its task closes the socket.
    fn evict_idle(&mut self, admission: Option<Admission>) -> bool {
        let eligible =
            |open: &Open| admission.is_none_or(|admission| open.admission == admission) && open.usage.is_idle();
        let never_served = |open: &Open| !open.usage.served.load(Ordering::Acquire);
        let candidates: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, open)| eligible(open) && never_served(open))
            .chain(self.open.iter().filter(|(_, open)| eligible(open) && !never_served(open)))
            .map(|(id, _)| *id)
            .collect();
        for id in candidates {
            if self.open[&id].usage.claim_idle() {
                let evicted = self.open.remove(&id).expect("a candidate is open");
                let _ = evicted.evict.send(());
                return true;
            }
        }
        false
    }

    /// Admits a new connection by the rules in the module's documentation,
    /// or refuses it (`None`).
    fn admit(&mut self, limits: &ConnectionLimits) -> Option<Admitted> {
        let admission =
            if self.count(Admission::Normal) < limits.max_connections || self.evict_idle(Some(Admission::Normal)) {
                Admission::Normal
            } else if self.count(Admission::Reserved) < limits.reserve || self.evict_idle(Some(Admission::Reserved)) {
                Admission::Reserved
            } else {
                return None;
            };
        let id = self.next_id;
        self.next_id += 1;
        let usage = Arc::new(Usage::default());
        let (evict, evicted) = oneshot::channel();
        self.open.insert(id, Open { admission, usage: usage.clone(), evict });
        Some(Admitted { id, admission, usage, evicted })
    }
}

/// Serves `state`'s router on `listener` until `shutdown` completes, on a
/// runtime with two threads of its own, started here: transformations keep
/// the caller's workers busy, and a run's long steps (a commit of 100k
/// records) hold one; neither must make a request wait. The thread ends
/// when [`serve`] returns.
pub fn serve_on_own_threads(
    listener: std::net::TcpListener,
    state: Arc<super::AppState>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<std::thread::JoinHandle<io::Result<()>>> {
    let router = super::router(state.clone());
    let token = state.settings.token.clone();
    std::thread::Builder::new().name("trellis-api".into()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("trellis-api")
            .enable_all()
            .build()
            .map_err(|e| io::Error::new(e.kind(), format!("starting the API's runtime: {e}")))?;
        runtime.block_on(async move {
            let listener = TcpListener::from_std(listener)?;
            serve(listener, router, limits, token, shutdown).await;
            Ok(())
        })
    })
}

/// Serves `router` on `listener` until `shutdown` completes; then stops
/// accepting, lets every connection finish its response and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    token: Option<String>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let registry = Arc::new(Mutex::new(Registry::default()));
    let token: Option<Arc<str>> = token.map(Into::into);
    let (closing, closing_watch) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    on_accept_error(&registry, &error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while tasks.try_join_next().is_some() {}
        let admitted = lock(&registry).admit(&limits);
        let Some(admitted) = admitted else {
            tracing::debug!("connection refused: every connection, the reserve included, is busy");
            continue;
        };
        let connection = Connection {
            router: router.clone(),
            token: token.clone(),
            registry: registry.clone(),
            limits,
            closing: closing_watch.clone(),
        };
        tasks.spawn(connection.serve(stream, admitted));
    }
    // Busy connections finish their response; idle ones (a stalled head
    // included, which hyper would wait for until its deadline) close now.
    let _ = closing.send(true);
    {
        let mut registry = lock(&registry);
        while registry.evict_idle(None) {}
    }
    let finished = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.shutdown_grace, finished).await.is_err() {
        tracing::warn!(grace = ?limits.shutdown_grace, "closing the connections still open after the grace period");
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

/// Out of file descriptors, an accept fails until one is closed: close the
/// oldest idle connection, or wait a moment for one to end, rather than
/// spin on the error.
async fn on_accept_error(registry: &Mutex<Registry>, error: &io::Error) {
    let out_of_files = matches!(error.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE));
    if out_of_files {
        let freed = lock(registry).evict_idle(None);
        tracing::warn!(freed, "accept: {error}");
        if freed {
            tokio::task::yield_now().await;
            return;
        }
    } else {
        tracing::debug!("accept: {error}");
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
}

fn lock(registry: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What one connection's task needs.
struct Connection {
    router: Router,
    token: Option<Arc<str>>,
    registry: Arc<Mutex<Registry>>,
    limits: ConnectionLimits,
    closing: watch::Receiver<bool>,
}

/// Removes a connection from the registry when its task ends, however.
struct Registered {
    id: u64,
    registry: Arc<Mutex<Registry>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.registry).open.remove(&self.id);
    }
}

impl Connection {
    async fn serve(mut self, stream: TcpStream, admitted: Admitted) {
        let _registered = Registered { id: admitted.id, registry: self.registry.clone() };
        let Admitted { admission, usage, mut evicted, .. } = admitted;
        let (router, token) = (self.router.clone(), self.token.clone());
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            let guard = InFlight::begin(&usage);
            let (router, token) = (router.clone(), token.clone());
            async move {
                let request = request.map(Body::new);
                let response = match guard {
                    // Taken for closing just before this request came: it
                    // is not served, and the client may send it again.
                    None => busy(),
                    Some(_) if admission == Admission::Reserved && !reserve_serves(&request, token.as_deref()) => {
                        busy()
                    }
                    Some(_) => router.oneshot(request).await.unwrap_or_else(|never: Infallible| match never {}),
                };
                Ok::<_, Infallible>(response.map(|body| Body::new(Guarded { body, _guard: guard })))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_timeout)
            // One buffer per write, so that a response head hyper writes by
            // itself is seen whole by `Socket`.
            .writev(false);
        let socket = Socket::new(stream, self.limits.write_timeout);
        let connection = builder.serve_connection(TokioIo::new(socket), service);
        tokio::pin!(connection);
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!("connection: {error}");
                    }
                    return;
                }
                // Evicted: dropping the connection closes it.
                _ = &mut evicted => return,
                Ok(()) = self.closing.changed() => {
                    if *self.closing.borrow() {
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

/// On a reserved connection, only what an operator needs while the server
/// is full: `/health`, and requests that carry the token.
fn reserve_serves(request: &Request<Body>, token: Option<&str>) -> bool {
    request.uri().path() == "/health" || token.is_some_and(|token| super::bearer_matches(request.headers(), token))
}

fn busy() -> Response {
    let mut response = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the server is at its limit of connections (serve --max-connections); \
         until some close, only /health and requests with the token are served",
    )
    .into_response();
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Counts a request as in flight from the moment it is read until its
/// response has been sent, or abandoned.
struct InFlight(Arc<Usage>);

impl InFlight {
    /// `None` when the connection was taken for closing.
    fn begin(usage: &Arc<Usage>) -> Option<InFlight> {
        usage.begin().then(|| InFlight(usage.clone()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A response body that keeps its request counted as in flight until it is
/// sent to its end or dropped: an event stream is busy, not idle.
struct Guarded {
    body: Body,
    _guard: Option<InFlight>,
}

impl http_body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket of a connection, with two things hyper does not do:
/// - a JSON body for the answers hyper writes by itself, without calling
///   the router, to requests it cannot parse (a malformed request line or
///   header: 400; headers too large: 431; a URI too long: 414). Those come
///   with `content-length: 0`; every error the router answers has a JSON
///   body, so a 4xx or 5xx head of length 0 can only be hyper's;
/// - a deadline on writes: a client that takes nothing of a response for
///   `write_timeout` (an event stream it never reads) fails the write, and
///   the connection closes, rather than holding it, busy, for ever.
struct Socket<S> {
    inner: S,
    /// A replacement being written, and how far; once it is all written, the
    /// original write is reported done.
    replacing: Option<(Vec<u8>, usize)>,
    write_timeout: Duration,
    /// Runs while a write waits for the client to take data.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> Socket<S> {
    fn new(inner: S, write_timeout: Duration) -> Self {
        Socket { inner, replacing: None, write_timeout, stalled: None }
    }

    /// Passes on the outcome of a write or flush; a write that has made no
    /// progress for `write_timeout` fails instead.
    fn deadline<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let timeout = self.write_timeout;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stalled.as_mut().poll(cx).is_ready() {
            self.stalled = None;
            let message = format!("the client took nothing of its response for {timeout:?}");
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, message)));
        }
        Poll::Pending
    }
}

/// The replacement for a bodiless error head, or `None` if `head` is not one.
fn json_error_for(head: &[u8]) -> Option<Vec<u8>> {
    let end = head.windows(4).position(|window| window == b"\r\n\r\n")?;
    let text = std::str::from_utf8(&head[..end]).ok()?;
    let (status_line, headers) = text.split_once("\r\n").unwrap_or((text, ""));
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next()?, parts.next()?);
    let status = StatusCode::from_bytes(code.as_bytes()).ok()?;
    let empty = headers.split("\r\n").any(|line| line.eq_ignore_ascii_case("content-length: 0"));
    if !version.starts_with("HTTP/1.") || !(status.is_client_error() || status.is_server_error()) || !empty {
        return None;
    }
    let message = match status {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "the request's headers are too large",
        StatusCode::URI_TOO_LONG => "the request's URI is too long",
        _ => "the request is not valid HTTP/1.1: a malformed request line or header",
    };
    let body = serde_json::to_vec(&super::wire::ErrorBody { error: message.to_string() }).ok()?;
    let mut replacement = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    replacement.extend_from_slice(&body);
    Some(replacement)
}

impl<S: AsyncRead + Unpin> AsyncRead for Socket<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Socket<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            match json_error_for(buf) {
                Some(replacement) => this.replacing = Some((replacement, 0)),
                None => {
                    let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
                    return this.deadline(cx, polled);
                }
            }
        }
        // hyper writes the same buffer again after `Pending`, until told it
        // was taken: the replacement goes out in its place.
        loop {
            let Some((replacement, written)) = &mut this.replacing else { unreachable!("set above") };
            if *written == replacement.len() {
                break;
            }
            match Pin::new(&mut this.inner).poll_write(cx, &replacement[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return this.deadline(cx, Poll::Pending),
            }
        }
        this.replacing = None;
        this.stalled = None;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.deadline(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_s_bodiless_errors_get_a_json_body() {
        let head = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 00:00:00 GMT\r\n\r\n";
        let replaced = String::from_utf8(json_error_for(head).expect("replaced")).unwrap();
        let (head, body) = replaced.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"], "the request is not valid HTTP/1.1: a malformed request line or header");
        let too_large = json_error_for(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n");
        assert!(
            String::from_utf8(too_large.unwrap())
                .unwrap()
                .ends_with(r#"{"error":"the request's headers are too large"}"#)
        );
    }

    #[test]
    fn other_writes_are_left_alone() {
        for write in [
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".as_slice(),
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{\"error\":\"gone\"}",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n", // not a whole head
            b"{\"views\":[]}",
            b"data: {\"sequence\":1}\n\n",
        ] {
            assert_eq!(json_error_for(write), None, "{}", String::from_utf8_lossy(write));
        }
    }

    fn limits(max_connections: usize, reserve: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections,
            reserve,
            header_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(1),
        }
    }

    fn busy(admitted: &Admitted) {
        assert!(admitted.usage.begin(), "a request starts");
    }

    #[test]
    fn idle_connections_make_room_and_busy_ones_leave_the_reserve() {
        let mut registry = Registry::default();
        let limits = limits(2, 1);
        let mut first = registry.admit(&limits).unwrap();
        let mut second = registry.admit(&limits).unwrap();
        assert_eq!((first.admission, second.admission), (Admission::Normal, Admission::Normal));
        // Both idle: the third pushes out the oldest.
        let third = registry.admit(&limits).unwrap();
        assert_eq!(third.admission, Admission::Normal);
        assert!(first.evicted.try_recv().is_ok(), "the oldest idle connection is closed");
        assert!(second.evicted.try_recv().is_err());
        // Both busy: the next goes to the reserve, the one after is refused.
        busy(&second);
        busy(&third);
        let reserved = registry.admit(&limits).unwrap();
        assert_eq!(reserved.admission, Admission::Reserved);
        busy(&reserved);
        assert!(registry.admit(&limits).is_none(), "no room anywhere");
        // A busy connection ends: room again.
        registry.open.remove(&second.id);
        assert_eq!(registry.admit(&limits).unwrap().admission, Admission::Normal);
    }

    #[test]
    fn a_stalled_client_goes_before_a_kept_alive_one() {
        let mut registry = Registry::default();
        let limits = limits(2, 0);
        let mut kept_alive = registry.admit(&limits).unwrap();
        let mut stalled = registry.admit(&limits).unwrap();
        // The older one served a request and now waits for the next.
        busy(&kept_alive);
        kept_alive.usage.end();
        registry.admit(&limits).unwrap();
        assert!(stalled.evicted.try_recv().is_ok(), "the stalled client is closed");
        assert!(kept_alive.evicted.try_recv().is_err(), "the kept-alive client stays");
    }

    #[test]
    fn an_eviction_and_a_starting_request_never_both_win() {
        let usage = Usage::default();
        assert!(usage.claim_idle(), "idle: taken for closing");
        assert!(!usage.begin(), "a request on it is refused, not cut off later");
        let usage = Usage::default();
        assert!(usage.begin());
        assert!(!usage.claim_idle(), "a request in flight keeps its connection");
        usage.end();
        assert!(usage.claim_idle());
    }

    #[tokio::test]
    async fn a_client_that_takes_nothing_fails_the_write_at_its_deadline() {
        use tokio::io::AsyncWriteExt;
        // A pipe of 64 bytes whose other end nobody reads.
        let (server, _client) = tokio::io::duplex(64);
        let mut socket = Socket::new(server, Duration::from_millis(100));
        let error = socket.write_all(&[b'x'; 4096]).await.expect_err("the write cannot finish");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(error.to_string().contains("took nothing of its response"), "{error}");
    }
}
