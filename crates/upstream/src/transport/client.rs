//! The upstream's HTTP/1.1 client: [`Client`], one request at a time per connection, read and
//! written by the task that makes the call.
//!
//! Why not `reqwest` (hyper's pooled client) for the upstream: that client drives each
//! connection from a task of its own and hands every request and every body chunk across a
//! channel to it, and keeps hyper's buffers (8 KiB to read, grown on churn; 8 KiB to write; a
//! 32-slot dispatch channel) for as long as the connection lives. An open stream held ~27 KiB
//! there. Here a connection is a socket (TLS through rustls when `https`), one read buffer that
//! starts at [`INITIAL_READ`] bytes and grows only for large answers, and nothing else: the
//! request head is written from a buffer dropped once sent, and the caller reads the body where
//! it stands, with no hand-off.
//!
//! Connections are kept for reuse per origin (at most [`MAX_IDLE_PER_ORIGIN`], each for
//! [`IDLE_TIMEOUT`]) once an answer is read to its end on a connection the upstream keeps open;
//! one whose body is not read to the end is closed (that is also how a stream the client left
//! is cancelled upstream). A kept connection the upstream has closed meanwhile is found closed
//! (a peek) and dropped when taken.
//!
//! Errors never name the upstream's URL or host ([`Error`]'s text is built here).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use url::Url;

use super::wire::{self, Decoder, Parsed, Step};

/// Bytes reserved for a connection's first read; reads that fill the buffer double it, up to
/// [`MAX_READ`]. Room is reserved for the next read only, never from a length the upstream
/// declares: the buffer holds at most what the framing leaves unread (a head under 64 KiB, a
/// chunk-size line, a trailer line under 16 KiB) plus one read.
pub const INITIAL_READ: usize = 2 * 1024;
/// Largest read.
pub const MAX_READ: usize = 64 * 1024;
/// A connection kept for reuse is dropped after this long unused.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(50);
/// Most connections kept for reuse per origin.
pub const MAX_IDLE_PER_ORIGIN: usize = 256;
/// A body up to this size is written in one piece with its head.
const COALESCE_BODY: usize = 16 * 1024;
/// A read buffer larger than this is not kept with a connection put back for reuse.
const KEEP_BUFFER: usize = 16 * 1024;

/// What went wrong with an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No connection could be made (address lookup, TCP, TLS): the request was not sent.
    Connect,
    /// No connection within the connect timeout: the request was not sent.
    ConnectTimeout,
    /// Writing the request failed.
    Send,
    /// The connection failed or closed before the answer was complete.
    Receive,
    /// The answer broke HTTP/1.1's framing.
    Protocol,
    /// The client or the URL cannot be used (a scheme other than `http`/`https`, bad roots).
    Config,
}

/// A failed exchange. Its text names no URL, host or address.
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    detail: String,
}

impl Error {
    fn new(kind: ErrorKind, detail: impl Into<String>) -> Error {
        Error { kind, detail: detail.into() }
    }

    /// What went wrong.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether the request certainly never left (no connection was made).
    #[must_use]
    pub fn is_connect(&self) -> bool {
        matches!(self.kind, ErrorKind::Connect | ErrorKind::ConnectTimeout)
    }

    /// Whether the connect timeout ran out.
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::ConnectTimeout
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            ErrorKind::Connect => write!(f, "error sending request: cannot connect: {}", self.detail),
            ErrorKind::ConnectTimeout => f.write_str("error sending request: connect timed out"),
            ErrorKind::Send => write!(f, "error sending request: {}", self.detail),
            ErrorKind::Receive | ErrorKind::Protocol => write!(f, "error reading the answer: {}", self.detail),
            ErrorKind::Config => write!(f, "client configuration: {}", self.detail),
        }
    }
}

impl std::error::Error for Error {}

/// Where a connection goes: scheme, host and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Origin {
    tls: bool,
    /// A domain name, or an IP address's text (IPv6 without brackets).
    host: String,
    ip: Option<IpAddr>,
    port: u16,
}

impl Origin {
    fn of(url: &Url) -> Result<Origin, Error> {
        let tls = match url.scheme() {
            "http" => false,
            "https" => true,
            _ => return Err(Error::new(ErrorKind::Config, "only http and https URLs are supported")),
        };
        let (host, ip) = match url.host() {
            Some(url::Host::Domain(name)) => (name.to_owned(), None),
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), Some(IpAddr::V4(ip))),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), Some(IpAddr::V6(ip))),
            None => return Err(Error::new(ErrorKind::Config, "the URL has no host")),
        };
        let port = url.port_or_known_default().unwrap_or(if tls { 443 } else { 80 });
        Ok(Origin { tls, host, ip, port })
    }
}

/// The settings of a [`Client`].
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// The longest the address lookup, TCP connect and TLS handshake of a new connection may take
    /// together (zero: no bound).
    pub connect_timeout: Duration,
    /// Certificates (PEM) trusted on top of the platform's roots, for an upstream behind a
    /// private CA.
    pub extra_ca_pem: Option<Vec<u8>>,
}

/// An HTTP/1.1 client with connections kept per origin. Cheap to clone (one shared pool).
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

struct Shared {
    connect_timeout: Duration,
    extra_roots: Vec<CertificateDer<'static>>,
    /// Built at the first `https` connection (the platform's roots are read then, not at start).
    tls: OnceLock<Result<tokio_rustls::TlsConnector, Error>>,
    idle: Mutex<HashMap<Origin, Vec<Idle>>>,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("connect_timeout", &self.shared.connect_timeout).finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `config`; fails with [`ErrorKind::Config`] when the extra PEM holds no
    /// certificate.
    pub fn new(config: ClientConfig) -> Result<Client, Error> {
        let mut extra_roots = Vec::new();
        if let Some(pem) = &config.extra_ca_pem {
            use rustls::pki_types::pem::PemObject;
            for cert in CertificateDer::pem_slice_iter(pem) {
                extra_roots.push(cert.map_err(|e| Error::new(ErrorKind::Config, format!("extra CA: {e}")))?);
            }
            if extra_roots.is_empty() {
                return Err(Error::new(ErrorKind::Config, "no certificate in the extra CA file"));
            }
        }
        Ok(Client {
            shared: Arc::new(Shared {
                connect_timeout: config.connect_timeout,
                extra_roots,
                tls: OnceLock::new(),
                idle: Mutex::default(),
            }),
        })
    }

    /// A request of `method` to `url`, to which headers and a body are added.
    pub fn request(&self, method: Method, url: &Url) -> RequestBuilder {
        let mut target = url.path().to_owned();
        if let Some(query) = url.query() {
            target.push('?');
            target.push_str(query);
        }
        let host = match (url.host_str(), url.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => String::new(),
        };
        RequestBuilder {
            client: self.clone(),
            method,
            origin: Origin::of(url),
            target,
            host,
            lines: Vec::with_capacity(256),
            host_given: false,
            body: None,
        }
    }

    /// Connections kept for reuse now, over all origins.
    #[must_use]
    pub fn idle_connections(&self) -> usize {
        self.shared.idle.lock().unwrap_or_else(PoisonError::into_inner).values().map(Vec::len).sum()
    }

    fn tls(&self) -> Result<tokio_rustls::TlsConnector, Error> {
        self.shared.tls.get_or_init(|| tls_connector(&self.shared.extra_roots)).clone()
    }

    /// A kept connection to `origin` that is still open, the most recently used first.
    fn checkout(&self, origin: &Origin) -> Option<Conn> {
        let mut idle = self.shared.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.get_mut(origin)?;
        while let Some(Idle { conn, since }) = list.pop() {
            if since.elapsed() < IDLE_TIMEOUT && conn.still_open() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next request to `origin`.
    fn checkin(&self, origin: Origin, mut conn: Conn) {
        if conn.buf.capacity() > KEEP_BUFFER {
            conn.buf = BytesMut::new();
            conn.read_size = INITIAL_READ;
            conn.peak = 0;
        }
        let mut idle = self.shared.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let list = idle.entry(origin).or_default();
        // Kept in the order they came back: the expired ones are at the front.
        let expired = list.iter().position(|entry| entry.since.elapsed() < IDLE_TIMEOUT).unwrap_or(list.len());
        list.drain(..expired);
        if list.len() < MAX_IDLE_PER_ORIGIN {
            list.push(Idle { conn, since: Instant::now() });
        }
    }

    async fn connect(&self, origin: &Origin) -> Result<Conn, Error> {
        let attempt = async {
            let tcp = connect_tcp(origin).await?;
            // Small requests and SSE events go out at once.
            let _ = tcp.set_nodelay(true);
            let io = if origin.tls {
                let name = match origin.ip {
                    Some(ip) => ServerName::IpAddress(ip.into()),
                    None => ServerName::try_from(origin.host.clone())
                        .map_err(|_| Error::new(ErrorKind::Config, "the host is not a valid TLS name"))?,
                };
                let tls = self.tls()?.connect(name, tcp).await.map_err(|e| {
                    // rustls's text may carry the names the certificate holds, or the host we
                    // expected: none of it goes into the error, whose text is fixed.
                    tracing::debug!(reason = tls_reason(&e), "upstream TLS handshake failed");
                    Error::new(ErrorKind::Connect, TLS_FAILED)
                })?;
                Io::Tls(Box::new(tls))
            } else {
                Io::Plain(tcp)
            };
            Ok(Conn { io, buf: BytesMut::new(), read_size: INITIAL_READ, peak: 0 })
        };
        if self.shared.connect_timeout.is_zero() {
            return attempt.await;
        }
        match tokio::time::timeout(self.shared.connect_timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Error::new(ErrorKind::ConnectTimeout, "")),
        }
    }
}

/// The whole text of a failed TLS handshake's error.
const TLS_FAILED: &str = "upstream TLS handshake failed";

/// A fixed word on why a handshake failed, for the debug log: never rustls's text, which may
/// name hosts.
fn tls_reason(error: &io::Error) -> &'static str {
    match error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(_)) => "the certificate was refused",
        Some(rustls::Error::AlertReceived(_)) => "the upstream sent an alert",
        Some(rustls::Error::PeerIncompatible(_)) => "no protocol or cipher in common",
        Some(_) => "a TLS protocol error",
        None => "the connection failed during the handshake",
    }
}

/// The TLS connector: ring, the platform's roots (and `extra`), HTTP/1.1 offered by ALPN.
fn tls_connector(extra: &[CertificateDer<'static>]) -> Result<tokio_rustls::TlsConnector, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config_error = |e: rustls::Error| Error::new(ErrorKind::Config, format!("TLS: {e}"));
    let verifier =
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra.iter().cloned(), Arc::clone(&provider))
            .map_err(config_error)?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// A TCP connection to the first of `origin`'s addresses that answers.
async fn connect_tcp(origin: &Origin) -> Result<TcpStream, Error> {
    let connect_error = |e: io::Error| Error::new(ErrorKind::Connect, e.to_string());
    let addresses: Vec<SocketAddr> = match origin.ip {
        Some(ip) => vec![SocketAddr::new(ip, origin.port)],
        None => tokio::net::lookup_host((origin.host.as_str(), origin.port)).await.map_err(connect_error)?.collect(),
    };
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host has no address");
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(tcp) => return Ok(tcp),
            Err(e) => last = e,
        }
    }
    Err(connect_error(last))
}

/// A request being built: [`Client::request`], then headers and a body, then [`Self::send`].
#[must_use]
pub struct RequestBuilder {
    client: Client,
    method: Method,
    origin: Result<Origin, Error>,
    target: String,
    host: String,
    /// The header lines so far, as they go on the wire.
    lines: Vec<u8>,
    host_given: bool,
    body: Option<bytes::Bytes>,
}

impl RequestBuilder {
    /// Adds the header `name: value` (a `Host` header replaces the one taken from the URL).
    pub fn header(mut self, name: &HeaderName, value: &HeaderValue) -> RequestBuilder {
        self.host_given |= name == http::header::HOST;
        wire::header_line(&mut self.lines, name, value);
        self
    }

    /// Adds every header of `headers`.
    pub fn headers(mut self, headers: &HeaderMap) -> RequestBuilder {
        for (name, value) in headers {
            self = self.header(name, value);
        }
        self
    }

    /// Sets the body, sent with its `Content-Length`.
    pub fn body(mut self, body: impl Into<bytes::Bytes>) -> RequestBuilder {
        self.body = Some(body.into());
        self
    }

    /// Sends the request on a kept connection to its origin, or a new one; the answer once its
    /// head is in. The body is read with [`Response::chunk`].
    pub async fn send(self) -> Result<Response, Error> {
        let origin = self.origin?;
        let body = self.body.unwrap_or_default();
        let announced = (!body.is_empty() || !matches!(self.method, Method::GET | Method::HEAD | Method::DELETE))
            .then_some(body.len());
        let coalesce = body.len() <= COALESCE_BODY;
        let mut head = Vec::with_capacity(
            self.target.len() + self.host.len() + self.lines.len() + 64 + if coalesce { body.len() } else { 0 },
        );
        let host = (!self.host_given).then_some(self.host.as_str());
        wire::write_head(&mut head, &self.method, &self.target, host, &self.lines, announced);
        drop(self.lines);
        if coalesce {
            head.extend_from_slice(&body);
        }
        let client = self.client;
        let mut conn = match client.checkout(&origin) {
            Some(conn) => conn,
            None => client.connect(&origin).await?,
        };
        let written = async {
            conn.io.write_all(&head).await?;
            if !coalesce {
                conn.io.write_all(&body).await?;
            }
            conn.io.flush().await
        };
        written.await.map_err(|e| Error::new(ErrorKind::Send, e.to_string()))?;
        drop(head);
        loop {
            match wire::parse_head(&conn.buf, &self.method).map_err(|e| Error::new(ErrorKind::Protocol, e))? {
                Parsed::Partial => {
                    if conn.read().await? == 0 {
                        let detail = if conn.buf.is_empty() {
                            "connection closed before an answer"
                        } else {
                            "connection closed inside the answer's head"
                        };
                        return Err(Error::new(ErrorKind::Receive, detail));
                    }
                }
                Parsed::Informational(len) => conn.buf.advance(len),
                Parsed::Complete(head, len) => {
                    conn.buf.advance(len);
                    let mut response = Response {
                        status: head.status,
                        headers: head.headers,
                        body: head.body,
                        reusable: head.reusable,
                        pending: 0,
                        conn: Some(conn),
                        origin,
                        client,
                    };
                    if response.body == Decoder::Length(0) {
                        response.finish();
                    }
                    return Ok(response);
                }
            }
        }
    }
}

/// An answer whose head is in; its body is read with [`Response::chunk`]. Dropping it before
/// the end of the body closes the connection.
pub struct Response {
    status: StatusCode,
    headers: HeaderMap,
    body: Decoder,
    reusable: bool,
    /// Bytes of the buffer handed out by the last `chunk`, consumed at the next.
    pending: usize,
    conn: Option<Conn>,
    origin: Origin,
    client: Client,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response").field("status", &self.status).field("body", &self.body).finish_non_exhaustive()
    }
}

impl Response {
    /// The status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers.
    #[must_use]
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body's announced length, when it has one.
    #[must_use]
    pub fn content_length(&self) -> Option<u64> {
        match self.body {
            Decoder::Length(n) if self.headers.contains_key(http::header::CONTENT_LENGTH) => Some(n),
            _ => None,
        }
    }

    /// The next piece of the body (borrowed until the next call), or `None` at its end. Waits as
    /// long as the upstream takes: callers bound the wait.
    pub async fn chunk(&mut self) -> Result<Option<&[u8]>, Error> {
        let len = loop {
            let Some(conn) = self.conn.as_mut() else { return Ok(None) };
            conn.buf.advance(std::mem::take(&mut self.pending));
            match self.body.decode(&conn.buf).map_err(|e| Error::new(ErrorKind::Protocol, e))? {
                Step::Data { skip, len } => {
                    conn.buf.advance(skip);
                    break len;
                }
                Step::End { skip } => {
                    conn.buf.advance(skip);
                    self.finish();
                    return Ok(None);
                }
                Step::NeedMore { skip } => {
                    conn.buf.advance(skip);
                    if conn.read().await? == 0 {
                        self.body.at_eof().map_err(|e| Error::new(ErrorKind::Receive, e))?;
                        self.reusable = false;
                        self.finish();
                        return Ok(None);
                    }
                }
            }
        };
        self.pending = len;
        Ok(self.conn.as_ref().map(|conn| &conn.buf[..len]))
    }

    /// The most bytes the connection's read buffer has held room for so far (for the tests of
    /// its bounds).
    #[doc(hidden)]
    #[must_use]
    pub fn peak_buffer_capacity(&self) -> usize {
        self.conn.as_ref().map_or(0, |conn| conn.peak)
    }

    /// The body has ended: the connection goes back for reuse when it may, else it closes.
    fn finish(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.reusable
            && conn.buf.is_empty()
        {
            self.client.checkin(self.origin.clone(), conn);
        }
    }
}

/// One connection: its socket and its read buffer.
struct Conn {
    io: Io,
    buf: BytesMut,
    /// Bytes to reserve for the next read.
    read_size: usize,
    /// The buffer's largest capacity so far.
    peak: usize,
}

impl Conn {
    /// Reads what the socket has into the buffer; 0 at the connection's close.
    ///
    /// The buffer grows to exactly what it holds plus one read: room already allocated (in
    /// front of what was consumed) is used again first, and a new allocation is never doubled
    /// as `BytesMut::reserve` may double it.
    async fn read(&mut self) -> Result<usize, Error> {
        if self.buf.capacity() - self.buf.len() < self.read_size / 4 && !self.buf.try_reclaim(self.read_size) {
            let mut grown = BytesMut::with_capacity(self.buf.len().saturating_add(self.read_size));
            grown.extend_from_slice(&self.buf);
            self.buf = grown;
        }
        self.peak = self.peak.max(self.buf.capacity());
        let spare = self.buf.capacity() - self.buf.len();
        let n = self.io.read_buf(&mut self.buf).await.map_err(|e| Error::new(ErrorKind::Receive, e.to_string()))?;
        if n == spare && self.read_size < MAX_READ {
            self.read_size *= 2;
        }
        Ok(n)
    }

    /// Whether the upstream has not closed a kept connection (nothing to read, no end seen).
    fn still_open(&self) -> bool {
        let tcp = match &self.io {
            Io::Plain(tcp) => tcp,
            Io::Tls(tls) => tls.get_ref().0,
        };
        let mut byte = [0u8; 1];
        let mut peeked = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        matches!(tcp.poll_peek(&mut cx, &mut peeked), Poll::Pending)
    }
}

/// A connection's socket, plain or TLS.
enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}
