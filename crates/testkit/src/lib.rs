//! Test support shared by the crates' tests (a dev-dependency only), one helper per job:
//! [`http`], the one client tests drive a server with; [`pg`], a private PostgreSQL schema per test and the visible skip (a failure in CI) of a test
//! that runs on PostgreSQL alone; [`s3`], a prefix of its own on the test S3 server, what is stored
//! there, and a relay that can be cut; [`books`], the one test user (`NewUser`) and the check that a
//! balance equals the sum of its ledger entries; and here a test CA and a server certificate for
//! `localhost`, `127.0.0.1` and `::1` made with rcgen and served with rustls, and an https receiver on loopback that
//! records every request reaching it and answers a few fixed routes (media files of each kind,
//! redirects, statuses, a webhook endpoint that can fail its first calls).
//!
//! It depends on `domain` and `billing`, never on `store`, so the store's own unit tests can use
//! it without a second copy of the store. Tests never reach any address but 127.0.0.1 and ::1.
#![allow(clippy::unwrap_used, clippy::panic, missing_docs)]

pub mod books;
pub mod http;
pub mod pg;
pub mod s3;

pub use books::{assert_balance_is_ledger_sum, new_user, user_id};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A server's TLS identity (its certificate and key, as a rustls server configuration), for
/// [`receiver`].
#[derive(Clone)]
pub struct Identity(Arc<rustls::ServerConfig>);

/// A test root (PEM) and a `localhost` / `127.0.0.1` / `::1` server identity signed by it.
pub fn test_pki() -> (Vec<u8>, Identity) {
    test_pki_for(&["localhost", "127.0.0.1", "::1"])
}

/// A test root (PEM) and a server identity signed by it for `names` (each an IP address or a DNS
/// name), such as a name no test connects to, for the tests of what a refused certificate's
/// error says. ECDSA P-256 keys, made with rcgen over ring and served with rustls: the product's
/// own TLS stack.
pub fn test_pki_for(names: &[&str]) -> (Vec<u8>, Identity) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name.push(DnType::CommonName, "media test root");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca.self_signed(&ca_key).unwrap();

    let leaf_key = KeyPair::generate().unwrap();
    // Each name that parses as an IP address becomes an IP subject alternative name.
    let mut leaf = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, names.first().copied().unwrap_or("localhost"));
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyAgreement];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf.signed_by(&leaf_key, &ca, &ca_key).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(leaf.der().to_vec())], key)
        .unwrap();
    (ca.pem().into_bytes(), Identity(Arc::new(config)))
}

/// One request that reached the receiver.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET /path?query`.
    pub line: String,
    /// The head.
    pub head: String,
    /// The body.
    pub body: Vec<u8>,
}

/// What the receiver saw.
#[derive(Debug, Default)]
pub struct Log {
    /// TCP connections accepted.
    pub connections: AtomicUsize,
    /// Complete requests.
    pub requests: Mutex<Vec<Seen>>,
    /// Requests per path, for the routes that fail their first calls.
    counts: Mutex<HashMap<String, usize>>,
    /// The slow routes' connections the client gave up on: path and how long it stayed.
    pub abandoned: Mutex<Vec<(String, Duration)>>,
}

impl Log {
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn lines(&self) -> Vec<String> {
        self.requests.lock().unwrap().iter().map(|s| s.line.clone()).collect()
    }

    /// The requests whose line starts with `prefix` (such as `POST /hook`), in arrival order.
    pub fn matching(&self, prefix: &str) -> Vec<Seen> {
        self.requests.lock().unwrap().iter().filter(|s| s.line.starts_with(prefix)).cloned().collect()
    }

    /// How long the client stayed on each connection to a slow route (`/drip/…`, `/hook/hang`)
    /// that it closed, for `path`, in the order they were closed.
    pub fn abandoned(&self, path: &str) -> Vec<Duration> {
        self.abandoned.lock().unwrap().iter().filter(|(p, _)| p == path).map(|(_, d)| *d).collect()
    }

    /// How many requests `path` had before this one (counting this one).
    fn count(&self, path: &str) -> usize {
        let mut counts = self.counts.lock().unwrap();
        let n = counts.entry(path.to_owned()).or_insert(0);
        *n += 1;
        *n
    }
}

impl Seen {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

/// A small file of each kind that content sniffing recognises: `png`, `mp4`, `wav`.
pub fn sample(kind: &str) -> Vec<u8> {
    match kind {
        "png" => [&b"\x89PNG\r\n\x1a\n"[..], &[7u8; 100]].concat(),
        "mp4" => [&b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"[..], &[0u8; 100]].concat(),
        "wav" => [&b"RIFF\x24\x00\x00\x00WAVEfmt "[..], &[0u8; 100]].concat(),
        _ => b"plain text, not media".to_vec(),
    }
}

/// An https receiver on `bind` (`127.0.0.1:0` or `[::1]:0`); its address and log. `None` when
/// the address cannot be bound (no IPv6 on this machine).
pub async fn receiver(bind: &str, identity: Identity) -> Option<(SocketAddr, Arc<Log>)> {
    let listener = TcpListener::bind(bind).await.ok()?;
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(identity.0);
    let log = Arc::new(Log::default());
    let shared = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            shared.connections.fetch_add(1, Ordering::SeqCst);
            let (acceptor, log) = (acceptor.clone(), Arc::clone(&shared));
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(socket).await {
                    serve(tls, addr, &log).await;
                }
            });
        }
    });
    Some((addr, log))
}

async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<Seen> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).into_owned();
            let len: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if data.len() >= end + 4 + len {
                let line = head.lines().next().unwrap_or_default().rsplit_once(' ').map(|(l, _)| l.to_owned())?;
                return Some(Seen { line, head, body: data[end + 4..end + 4 + len].to_vec() });
            }
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
}

fn head(status: &str, extra: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\nconnection: close\r\n{extra}\r\n").into_bytes()
}

/// The longest a slow route keeps a connection.
const SLOW_ROUTE_LIMIT: Duration = Duration::from_secs(300);

/// The routes: `/ok` (a PNG), `/sample/<png|mp4|wav|text>`, `/sized/N`, `/chunked/N`, `/hops/K`,
/// `/redirect?to=URL`, `/status/N`, `/hang`, `/drip/MS` (a PNG announced as 1 MB that then comes
/// one byte every MS milliseconds), `POST /hook` (204), `POST /hook/fail/N` (500 for its first N
/// calls, then 204), `POST /hook/hang` (never answers). The slow routes keep a connection at most
/// five minutes and log how long the client stayed when it gives up ([`Log::abandoned`]).
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, addr: SocketAddr, log: &Log) {
    let Some(seen) = read_request(&mut stream).await else {
        return;
    };
    let started = std::time::Instant::now();
    log.requests.lock().unwrap().push(seen.clone());
    let path = seen.line.split_once(' ').map(|(_, p)| p.to_owned()).unwrap_or_default();
    let number = |prefix: &str| path.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok());
    let mut out = Vec::new();
    if let Some(ms) = number("/drip/") {
        let head = head("200 OK", "content-type: image/png\r\ncontent-length: 1000000\r\n");
        let mut gone = stream.write_all(&[&head[..], b"\x89PNG\r\n\x1a\n"].concat()).await.is_err();
        while !gone && started.elapsed() < SLOW_ROUTE_LIMIT {
            tokio::time::sleep(Duration::from_millis(u64::try_from(ms).unwrap_or(1).max(1))).await;
            gone = stream.write_all(&[7]).await.is_err() || stream.flush().await.is_err();
        }
        if gone {
            log.abandoned.lock().unwrap().push((path.clone(), started.elapsed()));
        }
        return;
    }
    if path == "/hook/hang" {
        // Reads until the client closes (or sends more, which is ignored); never answers.
        let mut buf = [0u8; 1024];
        let closed = async { while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {} };
        if tokio::time::timeout(SLOW_ROUTE_LIMIT, closed).await.is_ok() {
            log.abandoned.lock().unwrap().push((path.clone(), started.elapsed()));
        }
        return;
    }
    if path == "/ok" {
        let body = [&b"\x89PNG\r\n\x1a\n"[..], &[7u8; 100]].concat();
        out = head("200 OK", &format!("content-type: image/png\r\ncontent-length: {}\r\n", body.len()));
        out.extend_from_slice(&body);
    } else if let Some(kind) = path.strip_prefix("/sample/") {
        let body = sample(kind);
        out = head("200 OK", &format!("content-length: {}\r\n", body.len()));
        out.extend_from_slice(&body);
    } else if let Some(n) = number("/hook/fail/") {
        let status = if log.count(&path) <= n { "500 Internal Server Error" } else { "204 No Content" };
        out = head(status, "content-length: 0\r\n");
    } else if let Some(n) = number("/sized/") {
        out = head("200 OK", &format!("content-type: application/octet-stream\r\ncontent-length: {n}\r\n"));
        out.resize(out.len() + n, b'x');
    } else if let Some(n) = number("/chunked/") {
        let _ = stream.write_all(&head("200 OK", "transfer-encoding: chunked\r\n")).await;
        let mut left = n;
        while left > 0 {
            let size = left.min(16 * 1024);
            let chunk = [format!("{size:x}\r\n").as_bytes(), &vec![b'y'; size], b"\r\n"].concat();
            if stream.write_all(&chunk).await.is_err() {
                return;
            }
            left -= size;
        }
        out = b"0\r\n\r\n".to_vec();
    } else if let Some(k) = number("/hops/") {
        out = if k == 0 {
            head("200 OK", "content-type: text/plain\r\ncontent-length: 4\r\n").into_iter().chain(*b"done").collect()
        } else {
            head("302 Found", &format!("location: /hops/{}\r\ncontent-length: 0\r\n", k - 1))
        };
    } else if let Some(to) = path.strip_prefix("/redirect?to=") {
        out = head("302 Found", &format!("location: {to}\r\ncontent-length: 0\r\n"));
    } else if let Some(n) = number("/status/") {
        out = head(&format!("{n} Whatever"), "content-length: 0\r\n");
    } else if path == "/hang" {
        tokio::time::sleep(Duration::from_secs(30)).await;
    } else if path == "/hook" {
        out = head("204 No Content", "");
    } else {
        out = head("404 Not Found", &format!("x-addr: {addr}\r\ncontent-length: 0\r\n"));
    }
    let _ = stream.write_all(&out).await;
    let _ = stream.shutdown().await;
}
