//! The upstream's HTTP/1.1 client against scripted servers on 127.0.0.1: what it writes, how it
//! reads every framing, when it keeps a connection, and the bounds on what an upstream can make
//! it read. TLS against the test CA's https receiver.
#![allow(clippy::panic, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::{HeaderValue, Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use upstream::transport::{Client, ClientConfig, ErrorKind, INITIAL_READ, MAX_READ, Response};
use url::Url;

/// A server that answers each request on a connection with the next of `answers` (the same
/// list on every connection) and records every request's bytes; the connections it accepted.
struct Scripted {
    url: String,
    accepted: Arc<AtomicUsize>,
    requests: Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

/// One scripted answer: the bytes to write, in pieces with a pause between, and whether to
/// close after it.
#[derive(Clone)]
struct Answer {
    pieces: Vec<Vec<u8>>,
    pause: Duration,
    close: bool,
}

fn answer(text: &str) -> Answer {
    Answer { pieces: vec![text.as_bytes().to_vec()], pause: Duration::ZERO, close: false }
}

async fn scripted(answers: Vec<Answer>) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (count, log) = (Arc::clone(&accepted), Arc::clone(&requests));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (answers, log) = (answers.clone(), Arc::clone(&log));
            tokio::spawn(async move {
                for answer in answers {
                    let Some(request) = read_request(&mut socket).await else { return };
                    log.lock().unwrap().push(request);
                    for piece in &answer.pieces {
                        if socket.write_all(piece).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(answer.pause).await;
                    }
                    if answer.close {
                        return;
                    }
                }
                // Past the script: keep the connection open a while, then close it.
                tokio::time::sleep(Duration::from_millis(300)).await;
            });
        }
    });
    Scripted { url, accepted, requests }
}

/// One request's bytes (head and `content-length` body); `None` at the close.
async fn read_request(socket: &mut TcpStream) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if data.len() >= end + 4 + len {
                return Some(data);
            }
        }
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    }
}

fn client() -> Client {
    Client::new(ClientConfig { connect_timeout: Duration::from_secs(2), extra_ca_pem: None }).unwrap()
}

async fn body(response: &mut Response) -> Result<Vec<u8>, upstream::transport::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        out.extend_from_slice(chunk);
    }
    Ok(out)
}

async fn get(client: &Client, url: &str) -> Result<(StatusCode, Vec<u8>), upstream::transport::Error> {
    let mut response = client.request(Method::GET, &Url::parse(url).unwrap()).send().await?;
    let status = response.status();
    Ok((status, body(&mut response).await?))
}

#[tokio::test]
async fn the_request_on_the_wire() {
    let server = scripted(vec![answer("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")]).await;
    let url = Url::parse(&format!("{}/v1/chat?x=1", server.url)).unwrap();
    let mut response = client()
        .request(Method::POST, &url)
        .header(&http::header::AUTHORIZATION, &HeaderValue::from_static("Bearer k"))
        .body(b"{\"a\":1}".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(body(&mut response).await.unwrap(), b"ok");
    let host = server.url.trim_start_matches("http://");
    let expected = format!(
        "POST /v1/chat?x=1 HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer k\r\ncontent-length: 7\r\n\r\n{{\"a\":1}}"
    );
    assert_eq!(String::from_utf8_lossy(&server.requests.lock().unwrap()[0]), expected);
}

#[tokio::test]
async fn every_framing_read_in_pieces() {
    let slow = |text: &str| Answer {
        pieces: text.as_bytes().chunks(3).map(<[u8]>::to_vec).collect(),
        pause: Duration::from_millis(2),
        close: false,
    };
    let server = scripted(vec![
        slow("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nwiki\r\n5;x=y\r\npedia\r\n0\r\nx-t: 1\r\n\r\n"),
        slow("HTTP/1.1 201 Created\r\ncontent-length: 11\r\n\r\nhello world"),
        answer("HTTP/1.1 204 No Content\r\n\r\n"),
        Answer { close: true, ..slow("HTTP/1.1 200 OK\r\n\r\nto the close") },
    ])
    .await;
    let client = client();
    assert_eq!(get(&client, &server.url).await.unwrap(), (StatusCode::OK, b"wikipedia".to_vec()));
    assert_eq!(get(&client, &server.url).await.unwrap(), (StatusCode::CREATED, b"hello world".to_vec()));
    assert_eq!(get(&client, &server.url).await.unwrap(), (StatusCode::NO_CONTENT, Vec::new()));
    assert_eq!(client.idle_connections(), 1, "kept after an answer without a body");
    assert_eq!(get(&client, &server.url).await.unwrap(), (StatusCode::OK, b"to the close".to_vec()));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1, "four answers on one connection");
    assert_eq!(client.idle_connections(), 0, "a body read to the close leaves nothing to keep");
}

#[tokio::test]
async fn a_connection_is_kept_only_after_a_whole_answer_it_may_carry_on() {
    let ok = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
    let server = scripted(vec![answer(ok), answer(ok), answer(ok)]).await;
    let client = client();
    let url = Url::parse(&server.url).unwrap();
    get(&client, &server.url).await.unwrap();
    get(&client, &server.url).await.unwrap();
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1, "the second request reused the connection");
    // An answer left before its end: that connection closes; the next request opens another.
    let left = client.request(Method::GET, &url).send().await.unwrap();
    drop(left);
    assert_eq!(client.idle_connections(), 0);
    get(&client, &server.url).await.unwrap();
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);

    let closing = scripted(vec![answer("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\nx")]).await;
    get(&client, &closing.url).await.unwrap();
    get(&client, &closing.url).await.unwrap();
    assert_eq!(closing.accepted.load(Ordering::SeqCst), 2, "connection: close is honoured");
}

#[tokio::test]
async fn a_kept_connection_the_upstream_closed_is_not_used() {
    // One answer per connection, then the server closes it after 300 ms without saying so.
    let server = scripted(vec![answer("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx")]).await;
    let client = client();
    get(&client, &server.url).await.unwrap();
    assert_eq!(client.idle_connections(), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(get(&client, &server.url).await.unwrap().1, b"x", "a new connection, not the closed one");
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn failures_name_no_address() {
    let client = client();
    // Port 1 on the loopback: refused at once, nothing leaves the machine.
    let refused = get(&client, "http://127.0.0.1:1/private/path").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Connect);
    assert!(refused.is_connect());
    let text = refused.to_string();
    assert!(
        text.starts_with("error sending request") && !text.contains("127.0.0.1") && !text.contains("private"),
        "{text}"
    );

    let dropped = scripted(vec![Answer { pieces: vec![], pause: Duration::ZERO, close: true }]).await;
    let closed = get(&client, &dropped.url).await.unwrap_err();
    assert_eq!(closed.kind(), ErrorKind::Receive, "{closed}");
    assert!(!closed.is_connect(), "the request was sent");

    let cut =
        scripted(vec![Answer { close: true, ..answer("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort") }]).await;
    let short = get(&client, &cut.url).await.unwrap_err();
    assert_eq!(short.kind(), ErrorKind::Receive, "{short}");

    let bad = scripted(vec![answer("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")]).await;
    assert_eq!(get(&client, &bad.url).await.unwrap_err().kind(), ErrorKind::Protocol);
    let unsupported = client.request(Method::GET, &Url::parse("ftp://127.0.0.1/x").unwrap()).send().await;
    assert_eq!(unsupported.unwrap_err().kind(), ErrorKind::Config);
}

#[tokio::test]
async fn an_endless_head_is_cut_at_its_bound() {
    // A head that never ends: the client stops reading at 64 KiB instead of buffering it all.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        let filler =
            format!("HTTP/1.1 200 OK\r\n{}", "x-filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(20));
        if socket.write_all(filler.as_bytes()).await.is_ok() {
            counter.fetch_add(filler.len(), Ordering::SeqCst);
        }
        let line = b"x-more: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(64);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) && socket.write_all(&line).await.is_ok() {
            counter.fetch_add(line.len(), Ordering::SeqCst);
        }
    });
    let started = Instant::now();
    let error = get(&client(), &url).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
    let sent = sent.load(Ordering::SeqCst);
    println!("endless head: cut after {:.3} s, {sent} bytes sent by then", started.elapsed().as_secs_f64());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn https_with_a_private_ca() {
    let (ca, identity) = testkit::test_pki();
    let (addr, log) = testkit::receiver("127.0.0.1:0", identity).await.unwrap();
    let trusting =
        Client::new(ClientConfig { connect_timeout: Duration::from_secs(2), extra_ca_pem: Some(ca) }).unwrap();
    let (status, data) = get(&trusting, &format!("https://127.0.0.1:{}/sized/3000", addr.port())).await.unwrap();
    assert_eq!((status, data.len()), (StatusCode::OK, 3000));
    assert_eq!(log.connections(), 1);
    // Without the CA the handshake fails, and the error names no host.
    let (_, identity) = testkit::test_pki();
    let (other, _) = testkit::receiver("127.0.0.1:0", identity).await.unwrap();
    let error = get(&client(), &format!("https://localhost:{}/sized/1", other.port())).await.unwrap_err();
    assert!(error.is_connect(), "{error}");
    assert!(!error.to_string().contains("localhost"), "{error}");
    assert!(
        Client::new(ClientConfig { extra_ca_pem: Some(b"no pem here".to_vec()), ..ClientConfig::default() }).is_err()
    );
}

#[tokio::test]
async fn a_certificate_s_names_never_reach_the_error() {
    // The test CA is trusted, but its certificate is for a name we do not connect to: rustls's
    // own text would list the names the certificate holds.
    let (ca, identity) = testkit::test_pki_for(&["secret-internal-name.example"]);
    let (addr, _log) = testkit::receiver("127.0.0.1:0", identity).await.unwrap();
    let trusting =
        Client::new(ClientConfig { connect_timeout: Duration::from_secs(2), extra_ca_pem: Some(ca) }).unwrap();
    for url in [format!("https://127.0.0.1:{}/ok", addr.port()), format!("https://localhost:{}/ok", addr.port())] {
        let error = get(&trusting, &url).await.unwrap_err();
        let text = error.to_string();
        println!("{url}: {text}");
        assert_eq!(error.kind(), ErrorKind::Connect, "{text}");
        assert_eq!(text, "error sending request: cannot connect: upstream TLS handshake failed");
        for secret in ["secret", "internal", "example", "localhost", "127.0.0.1"] {
            assert!(!text.contains(secret) && !format!("{error:?}").contains(secret), "{secret} in {error:?}");
        }
    }
}

#[tokio::test]
async fn the_read_buffer_grows_with_the_bytes_not_the_declared_length() {
    // A length of 1 GB declared, ten bytes sent, then the close: the buffer stays at its first
    // size. A large body read quickly: the buffer grows to one read at most.
    let declared = scripted(vec![Answer {
        close: true,
        ..answer("HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n0123456789")
    }])
    .await;
    let client = client();
    let mut response = client.request(Method::GET, &Url::parse(&declared.url).unwrap()).send().await.unwrap();
    assert_eq!(response.content_length(), Some(1_000_000_000));
    assert_eq!(response.chunk().await.unwrap(), Some(&b"0123456789"[..]));
    assert_eq!(response.chunk().await.unwrap_err().kind(), ErrorKind::Receive);
    println!("1 GB declared, 10 bytes sent: buffer peak {} bytes", response.peak_buffer_capacity());
    assert_eq!(response.peak_buffer_capacity(), INITIAL_READ);

    let big = vec![b'x'; 4 * 1024 * 1024];
    let text = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{}", big.len(), String::from_utf8_lossy(&big));
    let fast = scripted(vec![answer(&text)]).await;
    let mut response = client.request(Method::GET, &Url::parse(&fast.url).unwrap()).send().await.unwrap();
    let mut read = 0;
    let mut peak = 0;
    while let Some(chunk) = response.chunk().await.unwrap() {
        read += chunk.len();
        peak = peak.max(response.peak_buffer_capacity());
    }
    println!("4 MiB read: buffer peak {peak} bytes");
    assert_eq!(read, big.len());
    assert!(peak <= MAX_READ, "{peak}");
}
