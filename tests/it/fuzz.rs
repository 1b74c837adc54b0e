//! A fuzz test of a real `trellis serve`, generated from its own
//! `/openapi.json`: thousands of requests over raw TCP, each an operation
//! of the description with hostile values in its path and query, wrong
//! methods and content types, bodies where none is taken, and malformed
//! request lines and headers that an HTTP client library would refuse to
//! send. Every answer must be below 500, and every error the documented
//! `{"error": "..."}` on one line. The generator is seeded: a failure
//! names the request, and the same seed makes it again.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Daily, Lcg, Server};

const TOKEN: &str = "fuzz-token";
const REQUESTS: usize = 2_500;

/// An answer read off the socket.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Sends `request` as it is on a new connection and reads the answer: its
/// head, then as much body as it declares (none for HEAD, only the head of
/// an event stream), or what comes until the server closes.
fn exchange(address: &str, request: &[u8], head_only: bool) -> Result<Answer, String> {
    let mut stream = TcpStream::connect(address).map_err(|e| format!("connect: {e}"))?;
    // Bounds a hang only; an answer takes milliseconds.
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // The server may answer and close before it has read all we send.
    let _ = stream.write_all(request);
    let mut received = Vec::new();
    let mut buffer = [0u8; 16 << 10];
    let head_end = loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        match stream.read(&mut buffer) {
            Ok(0) => return Err(format!("closed without an answer after {} bytes", received.len())),
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            Err(e) => return Err(format!("read: {e} after {:?}", String::from_utf8_lossy(&received))),
        }
    };
    let head = String::from_utf8_lossy(&received[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
        .collect();
    let mut answer = Answer { status, headers, body: received[head_end + 4..].to_vec() };
    let streaming = answer.header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
    if head_only || streaming || status == 204 || status == 304 {
        return Ok(answer);
    }
    match answer.header("content-length").map(str::parse::<usize>) {
        Some(Ok(length)) => {
            while answer.body.len() < length {
                match stream.read(&mut buffer) {
                    Ok(0) => return Err(format!("body cut at {} of {length} bytes", answer.body.len())),
                    Ok(n) => answer.body.extend_from_slice(&buffer[..n]),
                    Err(e) => return Err(format!("reading the body: {e}")),
                }
            }
        }
        Some(Err(_)) => return Err("a malformed content-length".into()),
        // Chunked: what comes until the close is enough to check the type.
        None => {
            let _ = stream.read_to_end(&mut answer.body);
        }
    }
    Ok(answer)
}

/// The operations `/openapi.json` describes: method, path template, and
/// its path and query parameters with the values their schemas list.
struct Operation {
    method: String,
    path: String,
    in_path: Vec<String>,
    in_query: Vec<(String, Vec<String>)>,
}

fn operations(spec: &Value) -> Vec<Operation> {
    let mut operations = Vec::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("an operation per method") {
            let parameters = operation["parameters"].as_array().cloned().unwrap_or_default();
            let names = |place: &'static str| {
                parameters.iter().filter(move |p| p["in"] == place).map(|p| {
                    let schema = resolve(spec, &p["schema"]);
                    let listed = schema["enum"]
                        .as_array()
                        .map(|values| values.iter().filter_map(|v| v.as_str().map(String::from)).collect())
                        .unwrap_or_default();
                    (p["name"].as_str().expect("a parameter name").to_string(), listed)
                })
            };
            operations.push(Operation {
                method: method.to_uppercase(),
                path: path.clone(),
                in_path: names("path").map(|(name, _)| name).collect(),
                in_query: names("query").collect(),
            });
        }
    }
    operations
}

/// A schema, following `$ref`s into the components and `oneOf`/`allOf` to their first member.
fn resolve<'a>(spec: &'a Value, schema: &'a Value) -> &'a Value {
    if let Some(reference) = schema["$ref"].as_str() {
        let pointer = reference.trim_start_matches('#');
        return spec.pointer(pointer).map_or(schema, |target| resolve(spec, target));
    }
    for combined in ["oneOf", "allOf", "anyOf"] {
        if let Some(first) = schema[combined].as_array().and_then(|members| members.first()) {
            return resolve(spec, first);
        }
    }
    schema
}

/// Values for path segments and query parameters: real views of the
/// project, near misses, and hostile text, raw or percent-encoded.
const VALUES: &[&str] = &[
    "f.mart/Out/2015/01/01",
    "f.mart/Out/rymd(20150101-20150103)",
    "f.raw/In/2015/01/e(01,02)",
    "f.mart/Out/2015/01",
    "f.mart/Nope/2015/01/01",
    "f.mart/Out/rymd(2015",
    "f.mart/Out/rymd(20150101-99991231)",
    "f.mart/Out/rym(000101-999912)",
    "stats",
    "monitor",
    "1a2b3c",
    "",
    "..",
    "../../etc/passwd",
    "%",
    "%zz",
    "%00",
    "%FF%FE",
    "a\0b",
    "ünïcødé ✓ 日本",
    "-1",
    "0",
    "18446744073709551616",
    "99999999999999999999999999",
    "true",
    "null",
    "{}",
    "[]",
    "*",
    "e(",
    "e(a,,b)",
    "\\",
    "'; DROP TABLE views; --",
    "<script>alert(1)</script>",
];

fn encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn pick<T: Clone>(random: &mut Lcg, items: &[T]) -> T {
    items[random.below(items.len() as u64) as usize].clone()
}

/// A value for a path segment or query parameter: mostly encoded as a
/// client would, sometimes raw (spaces and all), sometimes huge.
fn value(random: &mut Lcg, listed: &[String]) -> String {
    match random.below(10) {
        0 if !listed.is_empty() => pick(random, listed),
        1 => "x".repeat(1 + random.below(9000) as usize),
        2 => pick(random, VALUES).to_string(),
        3 => (0..1 + random.below(12)).map(|_| format!("%{:02X}", random.below(256))).collect(),
        _ => encode(pick(random, VALUES)),
    }
}

/// One generated request: its bytes, and whether only its head is to be read.
fn request(random: &mut Lcg, operations: &[Operation], address: &str) -> (Vec<u8>, bool) {
    let operation = &operations[random.below(operations.len() as u64) as usize];
    let mut method = operation.method.clone();
    if random.below(5) == 0 {
        method = pick(random, &["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "FOO", "get"])
            .to_string();
    }
    let mut target = operation.path.clone();
    for name in &operation.in_path {
        target = target.replace(&format!("{{{name}}}"), &value(random, &[]));
    }
    let mut query = Vec::new();
    for (name, listed) in &operation.in_query {
        if random.below(2) == 0 {
            query.push(format!("{name}={}", value(random, listed)));
        }
    }
    if random.below(8) == 0 {
        query.push(pick(random, &["=", "&&", "limit", "limit=1&limit=2", "%=%", "cursor=-5", "a[b]=c"]).to_string());
    }
    if !query.is_empty() {
        target = format!("{target}?{}", query.join("&"));
    }
    let version = match random.below(30) {
        0 => "HTTP/1.0",
        1 => "HTTP/2.0",
        2 => "HTTP/1.1x",
        3 => "",
        _ => "HTTP/1.1",
    };
    let mut head = format!("{method} {target} {version}").trim_end().to_string().into_bytes();
    head.extend_from_slice(b"\r\n");
    let mut header = |line: &[u8]| {
        head.extend_from_slice(line);
        head.extend_from_slice(b"\r\n");
    };
    if random.below(20) != 0 {
        header(format!("Host: {address}").as_bytes());
    }
    header(b"Connection: close");
    match random.below(6) {
        0 | 1 => header(format!("Authorization: Bearer {TOKEN}").as_bytes()),
        2 => header(b"Authorization: Bearer wrong"),
        3 => header(pick(
            random,
            &[&b"Authorization: Basic Zm9vOmJhcg=="[..], b"Authorization: Bearer", b"Authorization: \xff\xfe"],
        )),
        _ => {}
    }
    let mut body: Vec<u8> = Vec::new();
    match random.below(8) {
        0 => {
            header(pick(
                random,
                &[
                    &b"Content-Type: application/json"[..],
                    b"Content-Type: text/plain",
                    b"Content-Type: multipart/form-data; boundary=x",
                    b"Content-Type: \x01\x02",
                ],
            ));
            body = pick(random, &[&b"{\"views\": [1, 2"[..], b"[]", b"\x00\xff\x00", b"pattern=x"]).to_vec();
            header(format!("Content-Length: {}", body.len()).as_bytes());
        }
        1 => header(format!("Content-Length: {}", 1u64 << (10 + random.below(24))).as_bytes()),
        2 => {
            header(b"Transfer-Encoding: chunked");
            body = pick(random, &[&b"5\r\nhello\r\n0\r\n\r\n"[..], b"zz\r\nbad\r\n", b"FFFFFFFFFFFFFFFF\r\n"]).to_vec();
        }
        _ => {}
    }
    // Malformed and hostile header lines.
    match random.below(10) {
        0 => header(pick(random, &[&b"X-Bad: a\x01b"[..], b"X-Bad: \x7f", b"X-Null: a\x00b"])),
        1 => header(pick(random, &[&b"Bad Header: x"[..], b"NoColon", b": empty-name", b"X-Fold: a\r\n folded"])),
        2 => header(format!("Last-Event-ID: {}", value(random, &[])).as_bytes()),
        3 => header(b"Content-Length: 1\r\nContent-Length: 2"),
        4 => header(format!("X-Long: {}", "y".repeat(64 << 10)).as_bytes()),
        5 => header(b"X-Latin: caf\xe9"),
        _ => {}
    }
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(&body);
    (head, method == "HEAD")
}

#[test]
fn a_fuzzed_server_never_answers_5xx_and_every_error_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("f");
    Daily::new("f", "trivial", 3).write(&project);
    let server = Server::start(&project, &[], &[("TRELLIS_TOKEN", TOKEN)]);
    let address = server.address().to_string();

    let spec = exchange(
        &address,
        format!("GET /openapi.json HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").as_bytes(),
        false,
    )
    .expect("the description is served");
    let spec: Value = serde_json::from_slice(&spec.body).expect("the description is JSON");
    let operations = operations(&spec);
    assert!(operations.len() >= 16, "{} operations", operations.len());

    let mut random = Lcg::new(0x7e11_1515);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for n in 0..REQUESTS {
        let (request, head_only) = request(&mut random, &operations, &address);
        let shown = String::from_utf8_lossy(&request[..request.len().min(300)]).into_owned();
        let answer = exchange(&address, &request, head_only).unwrap_or_else(|e| panic!("request {n}: {e}:\n{shown}"));
        *statuses.entry(answer.status).or_default() += 1;
        assert!(
            answer.status < 500,
            "request {n} got {}:\n{shown}\n{}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
        if answer.status >= 400 {
            let content_type = answer.header("content-type").unwrap_or_default();
            assert!(
                content_type.starts_with("application/json"),
                "request {n} got {} as {content_type:?}:\n{shown}",
                answer.status
            );
            if head_only {
                continue;
            }
            let body: Value = serde_json::from_slice(&answer.body)
                .unwrap_or_else(|e| panic!("request {n}: {e}: {:?}:\n{shown}", String::from_utf8_lossy(&answer.body)));
            let error = body["error"].as_str().unwrap_or_else(|| panic!("request {n}: no error in {body}:\n{shown}"));
            assert!(!error.is_empty() && !error.contains('\n'), "request {n}: {error:?}:\n{shown}");
        }
    }
    eprintln!("{REQUESTS} requests, by status: {statuses:?}");
    // The malformed requests and the wrong methods were all made.
    for status in [400, 401, 404, 405] {
        assert!(statuses.get(&status).is_some_and(|&count| count > 10), "{statuses:?}");
    }
    let health = exchange(
        &address,
        format!("GET /health HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").as_bytes(),
        false,
    )
    .expect("the server is still up");
    assert_eq!(health.status, 200);
    assert!(!server.log().contains("panicked"), "{}", server.log());
    assert_eq!(server.stop(), 0);
}
