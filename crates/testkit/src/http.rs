//! The one test client: every test that asks a server for something asks through [`Client`]
//! (hyper's HTTP/1.1 client connection), for a whole [`Reply`] or for the head and the unread body
//! of a streamed answer. Only the hostile suites write bytes by hand, because what they test is the
//! framing itself (a head without its body, a stalled body, a window that never opens).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
pub use http::Method;
use http::{HeaderMap, Request, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Longest a test waits for one step of an exchange (connect, the answer's head, its body).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// One HTTP/1.1 connection to a server under test, kept open for as many requests as the test
/// sends; dropping it lets the connection end once no answer is owed.
pub struct Client {
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
    conn: JoinHandle<Result<(), hyper::Error>>,
    step: Duration,
}

impl Client {
    /// Connects to `addr` (a loopback address: tests talk to nothing else).
    pub async fn connect(addr: SocketAddr) -> Client {
        Client::connect_within(addr, STEP_TIMEOUT).await
    }

    /// [`Client::connect`], waiting at most `step` for each step of each exchange (a large upload
    /// needs longer than [`STEP_TIMEOUT`]).
    pub async fn connect_within(addr: SocketAddr, step: Duration) -> Client {
        Client::try_connect(addr, step).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Client::connect_within`], with the failure as text instead of a panic.
    pub async fn try_connect(addr: SocketAddr, step: Duration) -> Result<Client, String> {
        assert!(addr.ip().is_loopback(), "tests only talk to loopback, not {addr}");
        let stream = tokio::time::timeout(step, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connecting to {addr} timed out"))?
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| format!("handshake: {e}"))?;
        Ok(Client { addr, sender, conn: tokio::spawn(conn), step })
    }

    /// Sends `method path` with the `headers` and `body` (none when empty) and returns the answer's
    /// head and its unread body.
    pub async fn open(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (http::response::Parts, Incoming) {
        self.try_open(method, path, headers, body).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Client::open`], with the failure (a closed connection, no answer in time) as text.
    pub async fn try_open(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(http::response::Parts, Incoming), String> {
        let mut builder = Request::builder().method(method).uri(path).header(header::HOST, self.addr.to_string());
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::new(Bytes::copy_from_slice(body))).map_err(|e| format!("request: {e}"))?;
        let sender = &mut self.sender;
        let exchange = async move {
            sender.ready().await.map_err(|e| format!("connection not ready: {e}"))?;
            sender.send_request(request).await.map_err(|e| format!("send request: {e}"))
        };
        let response =
            tokio::time::timeout(self.step, exchange).await.map_err(|_| "no answer in time".to_owned())??;
        Ok(response.into_parts())
    }

    /// [`Client::open`], and the whole answer read.
    pub async fn send(&mut self, method: Method, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        let (parts, incoming) = self.open(method, path, headers, body).await;
        Reply { path: path.to_owned(), ..Reply::read_within(parts, incoming, self.step).await }
    }

    /// Waits (bounded) until the server closes this connection; true when it did.
    pub async fn closed_by_server(self) -> bool {
        let Client { sender, conn, .. } = self;
        // The sender stays alive, so that only the server can end the connection.
        let ended = tokio::time::timeout(STEP_TIMEOUT, conn).await.is_ok();
        drop(sender);
        ended
    }

    /// The task that drives the connection (abort it to close the connection while an answer's
    /// body is still being read).
    pub fn into_connection(self) -> JoinHandle<Result<(), hyper::Error>> {
        self.conn
    }
}

/// `method path` on a fresh connection, closed after the answer; the whole answer.
pub async fn fetch(addr: SocketAddr, method: Method, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    try_fetch(addr, method, path, headers, body, STEP_TIMEOUT).await.unwrap_or_else(|e| panic!("{e}"))
}

/// [`fetch`], waiting at most `step` for each step, with a failure as text (a test whose server
/// may die under the request).
pub async fn try_fetch(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    step: Duration,
) -> Result<Reply, String> {
    let mut client = Client::try_connect(addr, step).await?;
    let (parts, incoming) = client.try_open(method, path, headers, body).await?;
    let raw = tokio::time::timeout(step, incoming.collect())
        .await
        .map_err(|_| "reading the body timed out".to_owned())?
        .map_err(|e| format!("read body: {e}"))?
        .to_bytes();
    client.into_connection().abort();
    Ok(Reply { path: path.to_owned(), ..Reply::new(parts, raw) })
}

/// Runs `future` to its end on a runtime of its own: the client from a test that runs no async
/// runtime (the process tests).
pub fn blocking<T>(future: impl Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(future)
}

/// A whole HTTP answer.
#[derive(Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub raw: Bytes,
    /// Body as JSON, `Null` when it is not JSON.
    pub json: Value,
    /// The path asked for (empty when the reply was read from a head alone): under `/v1` an error
    /// also carries OpenAI's `type`.
    pub path: String,
}

impl Reply {
    /// Reads the whole `body` of an answer whose head is `parts` (within [`STEP_TIMEOUT`]).
    pub async fn read(parts: http::response::Parts, body: Incoming) -> Reply {
        Reply::read_within(parts, body, STEP_TIMEOUT).await
    }

    /// [`Reply::read`] within `limit`.
    pub async fn read_within(parts: http::response::Parts, body: Incoming, limit: Duration) -> Reply {
        let raw = tokio::time::timeout(limit, body.collect())
            .await
            .expect("reading the body timed out")
            .expect("read body")
            .to_bytes();
        Reply::new(parts, raw)
    }

    /// The answer with head `parts` and body `raw`.
    fn new(parts: http::response::Parts, raw: Bytes) -> Reply {
        let json = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        Reply { status: parts.status.as_u16(), headers: parts.headers, raw, json, path: String::new() }
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// Asserts the exact error envelope `{"error":{"code","message"}}` with `status` and `code`.
    /// Under `/v1` the error also carries OpenAI's `type` (and on the message-style routes
    /// Anthropic's outer `"type": "error"`), which are checked and set aside.
    pub fn assert_error(&self, status: u16, code: &str, context: &str) {
        assert_eq!(self.status, status, "{context}: status; body {}", self.text());
        let mut body = self.json.clone();
        if self.path.split('/').any(|segment| segment == "messages") && self.path.starts_with("/v1/") {
            let outer = body.as_object_mut().and_then(|b| b.remove("type"));
            assert_eq!(outer, Some(Value::String("error".into())), "{context}: a message-style error's type");
        }
        if self.path.starts_with("/v1/") {
            let kind = body["error"].as_object_mut().and_then(|e| e.remove("type"));
            let kind = kind.as_ref().and_then(Value::as_str).unwrap_or_default().to_owned();
            assert!(
                kind.ends_with("_error") || ["insufficient_quota", "request_too_large"].contains(&kind.as_str()),
                "{context}: /v1 error type {kind:?}"
            );
        }
        assert_envelope(&body, context);
        assert_eq!(self.json["error"]["code"], code, "{context}: error code");
        assert!(
            self.header("content-type").is_some_and(|c| c.starts_with("application/json")),
            "{context}: error content type"
        );
    }
}

/// Asserts the spec's error body: `{"error":{"code": string, "message": non-empty string}}` and
/// no other keys anywhere; the code snake_case.
pub fn assert_envelope(body: &Value, context: &str) {
    let top = body.as_object().unwrap_or_else(|| panic!("{context}: error body is not an object: {body}"));
    assert_eq!(top.keys().collect::<Vec<_>>(), vec!["error"], "{context}: top-level keys of {body}");
    let inner = top["error"].as_object().unwrap_or_else(|| panic!("{context}: error is not an object: {body}"));
    let mut keys: Vec<&String> = inner.keys().collect();
    keys.sort();
    assert_eq!(keys, vec!["code", "message"], "{context}: keys of error in {body}");
    let code = inner["code"].as_str().unwrap_or_else(|| panic!("{context}: code is not a string"));
    assert!(
        !code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
        "{context}: code {code:?} is not snake_case"
    );
    let message = inner["message"].as_str().unwrap_or_else(|| panic!("{context}: message is not a string"));
    assert!(!message.trim().is_empty(), "{context}: empty message");
}
