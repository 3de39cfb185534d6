//! An S3-compatible server for tests: the server named by `TEST_S3_ENDPOINT` (`.ci/run` starts
//! `moto_server` from PyPI on 127.0.0.1), one bucket, a fresh prefix per test, what is stored
//! under it and the multipart uploads left open, and the visible skip (a failure in CI) of a test
//! that needs it. Plus [`Relay`], a TCP relay on loopback that can be cut and restored (a store
//! that becomes unreachable) or pointed elsewhere (a load balancer in front of replicas).
//!
//! The server's own API is spoken over plain HTTP/1.1 here (listing and bucket creation need no
//! signature on a test server), so this crate needs no S3 client of its own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;

/// The variable naming the S3-compatible server the tests may use (`http://127.0.0.1:PORT`).
pub const ENDPOINT_VAR: &str = "TEST_S3_ENDPOINT";
/// The variable that lets a CI pass run without an S3 server on purpose.
pub const SKIP_VAR: &str = "TEST_SKIP_S3";
/// The bucket the tests share (each test under its own prefix).
pub const BUCKET: &str = "gateway-tests";
/// Credentials the tests sign with (a test server takes any).
pub const ACCESS_KEY_ID: &str = "test-access-key";
/// See [`ACCESS_KEY_ID`].
pub const SECRET_ACCESS_KEY: &str = "test-secret-key";

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// One test's place in the bucket.
#[derive(Debug, Clone)]
pub struct S3Place {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// This test's prefix (no slashes at either end).
    pub prefix: String,
}

/// A fresh prefix in the test bucket (created if missing) for `test`. Without
/// `TEST_S3_ENDPOINT` it prints `skipped` and returns `None`, except in CI (`CI` set) where it
/// fails, unless `TEST_SKIP_S3` is set too.
pub fn place(test: &str) -> Option<S3Place> {
    let Some(endpoint) = std::env::var(ENDPOINT_VAR).ok().filter(|e| !e.trim().is_empty()) else {
        assert!(
            !flag("CI") || flag(SKIP_VAR),
            "{test}: {ENDPOINT_VAR} unset in CI, so this S3 test would pass without running; set it (moto_server), \
             or {SKIP_VAR}=1"
        );
        eprintln!("{test}: skipped: {ENDPOINT_VAR} unset");
        return None;
    };
    let endpoint = endpoint.trim().trim_end_matches('/').to_owned();
    let (status, _) = request(&endpoint, "PUT", &format!("/{BUCKET}"));
    assert!(status == 200 || status == 409, "{test}: creating bucket {BUCKET} answered {status}");
    let prefix = format!("t-{}", uuid::Uuid::new_v4().simple());
    Some(S3Place { endpoint, bucket: BUCKET.to_owned(), prefix })
}

impl S3Place {
    /// `s3://<bucket>/<prefix>`, as `GATEWAY_MEDIA_STORE` takes it.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    /// The environment of a `gateway serve` storing media here.
    pub fn gateway_env(&self) -> Vec<(String, String)> {
        [
            ("GATEWAY_MEDIA_STORE", self.url()),
            ("GATEWAY_S3_ENDPOINT", self.endpoint.clone()),
            ("GATEWAY_S3_ALLOW_HTTP", "true".to_owned()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Keys of the objects stored under the prefix (relative to it), sorted.
    pub fn objects(&self) -> Vec<String> {
        let (status, body) =
            request(&self.endpoint, "GET", &format!("/{}?list-type=2&prefix={}/", self.bucket, self.prefix));
        assert_eq!(status, 200, "listing {}: {body}", self.prefix);
        let mut keys: Vec<String> = tags(&body, "Key")
            .into_iter()
            .map(|k| k.strip_prefix(&format!("{}/", self.prefix)).unwrap_or(&k).to_owned())
            .collect();
        keys.sort();
        keys
    }

    /// Multipart uploads begun under the prefix and neither completed nor aborted.
    pub fn open_uploads(&self) -> usize {
        let (status, body) =
            request(&self.endpoint, "GET", &format!("/{}?uploads&prefix={}/", self.bucket, self.prefix));
        assert_eq!(status, 200, "listing uploads of {}: {body}", self.prefix);
        tags(&body, "UploadId").len()
    }
}

/// The texts of every `<name>…</name>` in `xml`.
fn tags(xml: &str, name: &str) -> Vec<String> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        found.push(after[..end].to_owned());
        rest = &after[end + close.len()..];
    }
    found
}

/// One unsigned HTTP/1.1 request without a body to `endpoint`: (status, body).
fn request(endpoint: &str, method: &str, target: &str) -> (u16, String) {
    let host = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connecting to {endpoint}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// A TCP relay on 127.0.0.1 to a target that can be changed, cut (every open connection closed,
/// new ones closed as they come) and restored. Runs on the runtime it was started on.
#[derive(Debug, Clone)]
pub struct Relay {
    /// Where the relay listens.
    pub addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    cut: Arc<AtomicBool>,
    generation: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Relay {
    /// A relay to `target`.
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (tx, _) = tokio::sync::watch::channel(0u64);
        let relay = Relay {
            addr: listener.local_addr().unwrap(),
            target: Arc::new(Mutex::new(target)),
            cut: Arc::new(AtomicBool::new(false)),
            generation: Arc::new(tx),
        };
        let this = relay.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if this.cut.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let target = *this.target.lock().unwrap();
                let mut cut = this.generation.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        relay
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends new connections to `target` from now on.
    pub fn point_to(&self, target: SocketAddr) {
        *self.target.lock().unwrap() = target;
    }

    /// Closes every connection open through the relay and every new one, until [`Self::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Relays new connections again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_read_in_order() {
        let xml = "<a><Key>x/1</Key><Size>3</Size><Key>x/2</Key></a><Key>unclosed";
        assert_eq!(tags(xml, "Key"), ["x/1", "x/2"]);
        assert!(tags(xml, "UploadId").is_empty());
    }
}
