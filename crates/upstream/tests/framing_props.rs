//! Property and differential tests of the upstream client's HTTP/1.1 framing: generated answers
//! (a `Content-Length` body; chunked with random chunk sizes, extensions and trailers; read to the
//! close; `100 Continue` heads first; 204 and 304; and malformed ones), each served over real
//! loopback TCP by a scripted server that writes its bytes in random pieces, maybe cut at a random
//! point, then closes. Each answer is read by our [`Client`] and by hyper's own client
//! (`hyper::client::conn::http1`), and the two must agree: the same status and body bytes, or
//! both refuse. Neither may hang (each read has a deadline) or panic (tests build with overflow
//! checks on).
//!
//! Deliberate divergences, all in the stricter direction (we refuse, hyper accepts), each named
//! by the text of our error in [`STRICTER`]:
//!
//! - a response head over 64 KiB (hyper's buffer takes ~400 KiB);
//! - a chunk-size line over 1 KiB with its extensions (hyper bounds only their 16 KiB in all);
//! - a chunk size of more than 16 hex digits (leading zeros; hyper counts the value only);
//! - a `Content-Length` that is a list (`5, 5`) or malformed beside a `Transfer-Encoding`
//!   (hyper takes the list, and ignores the length beside a coding);
//! - `101 Switching Protocols` on a request that asked for no upgrade (hyper hands it on);
//! - a bare LF inside a trailer line (hyper keeps it as a byte of the line, then parses the
//!   section with httparse, which takes a bare LF as a line end).
//!
//! The other direction (hyper refuses what we accept, or both accept with different bytes) fails
//! the test. A last test checks that the client's buffer stays within the framing's bounds plus
//! one read whatever an upstream sends.
#![allow(clippy::panic, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use upstream::transport::{Client, ClientConfig, MAX_READ};
use url::Url;

/// How long one read of one answer may take, by either client.
const CASE_DEADLINE: Duration = Duration::from_secs(5);
/// Our bound on a response head, and on a trailer section.
const MAX_HEAD: usize = 64 * 1024;
const MAX_TRAILERS: usize = 16 * 1024;

/// Texts of our errors where we refuse what hyper accepts, on purpose (see the file's head).
const STRICTER: [&str; 6] = [
    "response head larger than",
    "line too long",
    "bad chunk size",
    "content-length",
    "unexpected switch of protocols",
    "a bare LF",
];

/// How the generated answer's body is framed.
#[derive(Debug, Clone, Copy)]
enum Framing {
    Length,
    Chunked,
    Close,
    NoContent,
    NotModified,
}

/// A fault put into the answer (one at most).
#[derive(Debug, Clone)]
enum Mutation {
    None,
    /// A chunk size that is not one: `zz`, `-1`, empty, a leading space, `0x5`.
    BadChunkSize(u8),
    /// The first size written with 20 digits (leading zeros).
    LeadingZeros,
    /// No line end after a chunk's data.
    NoCrlfAfterData,
    /// A bare LF in the chunked framing: after a size, after data, after the last chunk, at the
    /// end, inside a trailer line.
    BareLf(u8),
    /// A bare CR inside an extension.
    BareCr,
    /// Two different `Content-Length` values.
    ConflictingLength,
    /// `Content-Length: n, n`.
    ListLength,
    /// A malformed `Content-Length`: `+n`, `-1`, `n x`, empty.
    BadLength(u8),
    /// A `Content-Length` beside `Transfer-Encoding: chunked`: the right one, or malformed.
    LengthBesideChunked(bool),
    /// A header of 70 KiB.
    OverlongHead,
    /// 1,100 bytes of extensions on one size line.
    OverlongChunkLine,
    /// 17 one-byte chunks with 1,000 bytes of extensions each.
    ManyExtensions,
    /// This many trailer lines (around hyper's 100).
    TrailerLines(usize),
    /// A trailer section of this many bytes (around the 16 KiB bound).
    TrailerBytes(usize),
    /// A trailer line that is not a field: no colon, a space in the name, an empty name, a
    /// control byte in the value.
    BadTrailer(u8),
    /// An HTTP/1.0 answer with `Transfer-Encoding: chunked`.
    ChunkedIn10,
    /// `101 Switching Protocols` as the answer.
    Switching,
    /// The byte at this fraction (per mille) of the answer replaced by this one.
    Flip(u16, u8),
}

/// One generated answer, and how it is sent.
#[derive(Debug, Clone)]
struct Case {
    informational: usize,
    http10: bool,
    framing: Framing,
    body: Vec<u8>,
    /// Sizes that cut the body into chunks (the rest is a last chunk).
    chunks: Vec<usize>,
    extensions: Vec<Vec<u8>>,
    trailers: Vec<(Vec<u8>, Vec<u8>)>,
    mutation: Mutation,
    /// Where the bytes are cut (per mille of their length), if they are.
    cut: Option<u16>,
    /// Where the writes are split (per mille), and whether to pause between pieces.
    splits: Vec<u16>,
    pause: bool,
}

fn token() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(b"abcxyzXYZ019-_!#$%&'*+.^`|~".to_vec()), 1..8)
}

fn field_value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(b"abc xyz\t019-_,;=\"()/:@[]{}~\x80\xff".to_vec()), 0..24)
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        8 => Just(Mutation::None),
        1 => (0u8..5).prop_map(Mutation::BadChunkSize),
        1 => Just(Mutation::LeadingZeros),
        1 => Just(Mutation::NoCrlfAfterData),
        1 => (0u8..5).prop_map(Mutation::BareLf),
        1 => Just(Mutation::BareCr),
        1 => Just(Mutation::ConflictingLength),
        1 => Just(Mutation::ListLength),
        1 => (0u8..4).prop_map(Mutation::BadLength),
        1 => any::<bool>().prop_map(Mutation::LengthBesideChunked),
        1 => Just(Mutation::OverlongHead),
        1 => Just(Mutation::OverlongChunkLine),
        1 => Just(Mutation::ManyExtensions),
        1 => (98usize..103).prop_map(Mutation::TrailerLines),
        1 => (MAX_TRAILERS - 3..MAX_TRAILERS + 3).prop_map(Mutation::TrailerBytes),
        1 => (0u8..4).prop_map(Mutation::BadTrailer),
        1 => Just(Mutation::ChunkedIn10),
        1 => Just(Mutation::Switching),
        3 => (0u16..1000, any::<u8>()).prop_map(|(at, byte)| Mutation::Flip(at, byte)),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let framing = prop_oneof![
        3 => Just(Framing::Length),
        4 => Just(Framing::Chunked),
        2 => Just(Framing::Close),
        1 => Just(Framing::NoContent),
        1 => Just(Framing::NotModified),
    ];
    let body = prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..200),
        1 => prop::collection::vec(any::<u8>(), 0..20_000),
    ];
    let extension = prop::collection::vec(prop::sample::select(b"abz=09\" \t;-".to_vec()), 0..12);
    (
        (0usize..3, prop::bool::weighted(0.1), framing, body),
        (
            prop::collection::vec(1usize..3000, 0..8),
            prop::collection::vec(extension, 0..8),
            prop::collection::vec((token(), field_value()), 0..4),
        ),
        (mutation(), prop::option::weighted(0.3, 0u16..1000), prop::collection::vec(0u16..1000, 0..6), any::<bool>()),
    )
        .prop_map(
            |(
                (informational, http10, framing, body),
                (chunks, extensions, trailers),
                (mutation, cut, splits, pause),
            )| {
                Case {
                    informational,
                    http10,
                    framing,
                    body,
                    chunks,
                    extensions,
                    trailers,
                    mutation,
                    cut,
                    splits,
                    pause,
                }
            },
        )
}

/// A trailer section (without its closing empty line) of `lines` lines taking `bytes` bytes
/// with their line ends.
fn trailer_lines(bytes: usize, lines: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes);
    for i in 0..lines {
        let len = bytes / lines + usize::from(i < bytes % lines);
        out.extend_from_slice(b"t:");
        out.resize(out.len() + len.max(4) - 4, b'v');
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The answer's bytes, as the server writes them (before any cut).
fn render(case: &Case) -> Vec<u8> {
    use Mutation as M;
    let m = &case.mutation;
    let framing = match m {
        M::BadChunkSize(_)
        | M::LeadingZeros
        | M::NoCrlfAfterData
        | M::BareLf(_)
        | M::BareCr
        | M::LengthBesideChunked(_)
        | M::OverlongChunkLine
        | M::ManyExtensions
        | M::TrailerLines(_)
        | M::TrailerBytes(_)
        | M::BadTrailer(_)
        | M::ChunkedIn10 => Framing::Chunked,
        M::ConflictingLength | M::ListLength | M::BadLength(_) => Framing::Length,
        _ => case.framing,
    };
    let mut out = Vec::new();
    for _ in 0..case.informational {
        out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    let version = if case.http10 || matches!(m, M::ChunkedIn10) { "HTTP/1.0" } else { "HTTP/1.1" };
    let status = match (m, framing) {
        (M::Switching, _) => "101 Switching Protocols",
        (_, Framing::NoContent) => "204 No Content",
        (_, Framing::NotModified) => "304 Not Modified",
        _ => "200 OK",
    };
    out.extend_from_slice(format!("{version} {status}\r\ncontent-type: application/octet-stream\r\n").as_bytes());
    if matches!(m, M::OverlongHead) {
        out.extend_from_slice(format!("x-long: {}\r\n", "a".repeat(70 * 1024)).as_bytes());
    }
    let len = case.body.len();
    match framing {
        Framing::Length | Framing::NoContent | Framing::NotModified => {
            let value = match m {
                M::ListLength => format!("{len}, {len}"),
                M::BadLength(0) => format!("+{len}"),
                M::BadLength(1) => "-1".to_owned(),
                M::BadLength(2) => format!("{len} x"),
                M::BadLength(_) => String::new(),
                _ => len.to_string(),
            };
            out.extend_from_slice(format!("content-length: {value}\r\n").as_bytes());
            if matches!(m, M::ConflictingLength) {
                out.extend_from_slice(format!("content-length: {}\r\n", len + 1).as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&case.body);
        }
        Framing::Close => {
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&case.body);
        }
        Framing::Chunked => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            match m {
                M::LengthBesideChunked(true) => out.extend_from_slice(format!("content-length: {len}\r\n").as_bytes()),
                M::LengthBesideChunked(false) => out.extend_from_slice(b"content-length: twelve\r\n"),
                _ => {}
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&chunked_body(case, m));
        }
    }
    if let M::Flip(at, byte) = m
        && !out.is_empty()
    {
        let last = out.len() - 1;
        let at = (out.len() * usize::from(*at) / 1000).min(last);
        out[at] = *byte;
    }
    out
}

/// The chunked body of `case` with the mutation `m` in it.
fn chunked_body(case: &Case, m: &Mutation) -> Vec<u8> {
    use Mutation as M;
    let mut out = Vec::new();
    let mut rest = &case.body[..];
    let mut sizes: Vec<usize> = Vec::new();
    for &size in &case.chunks {
        if rest.is_empty() {
            break;
        }
        let size = size.min(rest.len());
        sizes.push(size);
        rest = &rest[size..];
    }
    if !rest.is_empty() {
        sizes.push(rest.len());
    }
    if matches!(m, M::ManyExtensions) {
        sizes = vec![1; 17.min(case.body.len())];
    }
    let mut at = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let first = i == 0;
        let size_text = match m {
            M::BadChunkSize(0) if first => "zz".to_owned(),
            M::BadChunkSize(1) if first => "-1".to_owned(),
            M::BadChunkSize(2) if first => String::new(),
            M::BadChunkSize(3) if first => format!(" {size:x}"),
            M::BadChunkSize(_) if first => format!("0x{size:x}"),
            M::LeadingZeros if first => format!("{size:020x}"),
            _ => format!("{size:x}"),
        };
        out.extend_from_slice(size_text.as_bytes());
        if matches!(m, M::ManyExtensions) {
            out.push(b';');
            out.extend_from_slice(&[b'e'; 1000]);
        } else if matches!(m, M::OverlongChunkLine) && first {
            out.push(b';');
            out.extend_from_slice(&[b'e'; 1100]);
        } else if matches!(m, M::BareCr) && first {
            out.extend_from_slice(b";a\rb");
        } else if let Some(ext) = case.extensions.get(i)
            && !ext.is_empty()
        {
            out.push(b';');
            out.extend_from_slice(ext);
        }
        out.extend_from_slice(if matches!(m, M::BareLf(0)) && first { b"\n" } else { b"\r\n" });
        out.extend_from_slice(&case.body[at..at + size]);
        at += size;
        match m {
            M::NoCrlfAfterData if first => {}
            M::BareLf(1) if first => out.push(b'\n'),
            _ => out.extend_from_slice(b"\r\n"),
        }
    }
    out.extend_from_slice(if matches!(m, M::BareLf(2)) { b"0\n" } else { b"0\r\n" });
    match m {
        M::TrailerLines(n) => out.extend_from_slice(&trailer_lines(n * 8, *n)),
        M::TrailerBytes(total) => out.extend_from_slice(&trailer_lines(total - 2, 3)),
        M::BadTrailer(kind) => out.extend_from_slice(match kind {
            0 => &b"no colon here\r\n"[..],
            1 => b"x y: 1\r\n",
            2 => b": 1\r\n",
            _ => b"x: a\x01b\r\n",
        }),
        M::BareLf(4) => out.extend_from_slice(b"x: 1\n\r\n"),
        _ => {
            for (name, value) in &case.trailers {
                out.extend_from_slice(name);
                out.extend_from_slice(b": ");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
    out.extend_from_slice(if matches!(m, M::BareLf(3)) { b"\n" } else { b"\r\n" });
    out
}

/// A server for two connections (ours, then hyper's): on each, reads the request head, writes
/// `bytes` in the pieces `splits` cuts, then closes.
async fn serve(bytes: Vec<u8>, splits: Vec<u16>, pause: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut cuts: Vec<usize> = splits.iter().map(|s| bytes.len() * usize::from(*s) / 1000).collect();
    cuts.push(bytes.len());
    cuts.sort_unstable();
    tokio::spawn(async move {
        for _ in 0..2 {
            let Ok(Ok((mut socket, _))) = tokio::time::timeout(CASE_DEADLINE, listener.accept()).await else {
                return;
            };
            let _ = socket.set_nodelay(true);
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tokio::time::timeout(CASE_DEADLINE, socket.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => head.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            let mut from = 0;
            for &to in &cuts {
                if socket.write_all(&bytes[from..to]).await.is_err() {
                    break;
                }
                from = to;
                if pause {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                } else {
                    tokio::task::yield_now().await;
                }
            }
            let _ = socket.shutdown().await;
        }
    });
    addr
}

/// What one client made of an answer: its status and body, or the error's text; and for ours,
/// the peak of its read buffer.
type Outcome = Result<(StatusCode, Vec<u8>), String>;

async fn with_ours(addr: SocketAddr) -> (Outcome, usize) {
    let client = Client::new(ClientConfig { connect_timeout: CASE_DEADLINE, extra_ca_pem: None }).unwrap();
    let url = Url::parse(&format!("http://{addr}/")).unwrap();
    let mut response = match client.request(Method::GET, &url).send().await {
        Ok(response) => response,
        Err(e) => return (Err(e.to_string()), 0),
    };
    let status = response.status();
    let mut body = Vec::new();
    // Read before each step: at the body's end the connection is let go, with its buffer.
    let mut peak = response.peak_buffer_capacity();
    let outcome = loop {
        peak = peak.max(response.peak_buffer_capacity());
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(chunk),
            Ok(None) => break Ok((status, body)),
            Err(e) => break Err(e.to_string()),
        }
    };
    (outcome, peak.max(response.peak_buffer_capacity()))
}

async fn with_hyper(addr: SocketAddr) -> Outcome {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(tcp)).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(conn);
    let request = http::Request::get("/").header("host", addr.to_string()).body(Empty::new()).unwrap();
    let result = async {
        let response = sender.send_request(request).await.map_err(|e| format!("{e:?}"))?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| format!("{e:?}"))?.to_bytes();
        Ok((status, body.to_vec()))
    }
    .await;
    driver.abort();
    result
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap())
}

/// Cases where both read the answer, both refused it, only hyper refused, only we refused.
static TALLY: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];

/// Serves `case` to both clients and checks that they agree.
fn check(case: &Case) -> Result<(), TestCaseError> {
    let mut bytes = render(case);
    if let Some(cut) = case.cut {
        bytes.truncate(bytes.len() * usize::from(cut) / 1000);
    }
    let (ours, peak, theirs) = runtime().block_on(async {
        let addr = serve(bytes.clone(), case.splits.clone(), case.pause).await;
        let (ours, peak) =
            tokio::time::timeout(CASE_DEADLINE, with_ours(addr)).await.unwrap_or((Err("hung".into()), 0));
        let theirs = tokio::time::timeout(CASE_DEADLINE, with_hyper(addr)).await.unwrap_or(Err("hyper hung".into()));
        (ours, peak, theirs)
    });
    prop_assert!(ours.as_ref().err().is_none_or(|e| e != "hung"), "our client hung");
    prop_assert!(peak <= MAX_HEAD + MAX_READ, "our buffer reached {peak} bytes");
    let tally = match (&ours, &theirs) {
        (Ok(_), Ok(_)) => 0,
        (Err(_), Err(_)) => 1,
        (Ok(_), Err(_)) => 2,
        (Err(_), Ok(_)) => 3,
    };
    TALLY[tally].fetch_add(1, Ordering::Relaxed);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "both read it, differently"),
        (Err(_), Err(_)) => {}
        (Ok((status, body)), Err(e)) => {
            prop_assert!(false, "we read {status} and {} bytes where hyper refused: {e}", body.len());
        }
        (Err(e), Ok(_)) => {
            let documented = STRICTER.iter().any(|reason| e.contains(reason));
            prop_assert!(documented, "we refused what hyper read, for no documented reason: {e}");
        }
    }
    Ok(())
}

#[test]
fn our_client_reads_what_hyper_reads_or_refuses_more() {
    let config = Config { cases: 256, failure_persistence: None, max_shrink_iters: 2000, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let started = Instant::now();
    let result = runner.run(&case(), |case| check(&case));
    let [both_read, both_refused, hyper_only, ours_only] = TALLY.each_ref().map(|n| n.load(Ordering::Relaxed));
    println!(
        "{} answers checked (this file's tests together) in {:.1} s: both read {both_read}, both refused {both_refused}, only we \
         refused {ours_only}, only hyper refused {hyper_only}",
        both_read + both_refused + hyper_only + ours_only,
        started.elapsed().as_secs_f64()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Each deliberate divergence, once by hand: we refuse, hyper reads.
#[test]
fn the_documented_divergences_are_stricter() {
    let plain = Case {
        informational: 0,
        http10: false,
        framing: Framing::Chunked,
        body: b"hello world".to_vec(),
        chunks: vec![5],
        extensions: vec![],
        trailers: vec![],
        mutation: Mutation::None,
        cut: None,
        splits: vec![],
        pause: false,
    };
    for mutation in [
        Mutation::OverlongHead,
        Mutation::OverlongChunkLine,
        Mutation::LeadingZeros,
        Mutation::ListLength,
        Mutation::LengthBesideChunked(false),
        Mutation::Switching,
        Mutation::BareLf(4),
    ] {
        let case = Case { mutation: mutation.clone(), ..plain.clone() };
        let bytes = render(&case);
        let (ours, theirs) = runtime().block_on(async {
            let addr = serve(bytes, vec![], false).await;
            let (ours, _) = with_ours(addr).await;
            (ours, with_hyper(addr).await)
        });
        println!(
            "{mutation:?}: ours {:?}, hyper {:?}",
            ours.as_ref().err(),
            theirs.as_ref().map(|(s, b)| (s, b.len()))
        );
        let error = ours.expect_err("we refuse it");
        assert!(STRICTER.iter().any(|reason| error.contains(reason)), "{mutation:?}: {error}");
        assert!(theirs.is_ok(), "{mutation:?}: hyper reads it");
    }
    assert!(check(&plain).is_ok());
}

/// Whatever an upstream sends past a bound, the client's read buffer stays within that bound
/// plus one read: an endless trailer line (after one that ends exactly at the trailer bound, the
/// attack of issue 35), an endless chunk-size line, an endless head, an endless body.
#[test]
fn the_buffer_stays_within_the_bounds_plus_one_read() {
    let first_trailer = {
        let mut line = b"t:".to_vec();
        // Its LF is byte 16,384 of the trailers, counted from 0.
        line.resize(MAX_TRAILERS - 1, b'v');
        line.extend_from_slice(b"\r\n");
        line
    };
    let attacks: [(&str, Vec<u8>, Option<usize>); 4] = [
        (
            "endless trailer line",
            [&b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"[..], &first_trailer].concat(),
            Some(MAX_TRAILERS + MAX_READ),
        ),
        (
            "endless chunk-size line",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;".to_vec(),
            Some(1024 + MAX_READ),
        ),
        ("endless head", b"HTTP/1.1 200 OK\r\nx-long: ".to_vec(), None),
        ("endless body", b"HTTP/1.1 200 OK\r\n\r\n".to_vec(), Some(MAX_READ)),
    ];
    for (name, start, bound) in attacks {
        let (outcome, peak, sent, seconds) = runtime().block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(async move {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                let mut sent = 0usize;
                if socket.write_all(&start).await.is_ok() {
                    sent += start.len();
                }
                // Then 20 MiB of one line that never ends, in 64 KiB writes, within 10 s.
                let filler = vec![b'a'; 64 * 1024];
                let started = Instant::now();
                while sent < 20 * 1024 * 1024 && started.elapsed() < Duration::from_secs(10) {
                    if socket.write_all(&filler).await.is_err() {
                        break;
                    }
                    sent += filler.len();
                }
                sent
            });
            let started = Instant::now();
            let (outcome, peak) = tokio::time::timeout(Duration::from_secs(20), with_ours(addr)).await.unwrap();
            let seconds = started.elapsed().as_secs_f64();
            (outcome, peak, server.await.unwrap(), seconds)
        });
        println!(
            "{name}: {:?} after {seconds:.3} s, {sent} bytes sent, buffer peak {peak} bytes",
            outcome.as_ref().err()
        );
        match bound {
            Some(bound) if name == "endless body" => {
                assert!(outcome.is_ok(), "{name}: read to the close");
                assert!(peak <= bound, "{name}: {peak} > {bound}");
            }
            Some(bound) => {
                assert!(outcome.as_ref().is_err_and(|e| e.contains("error reading the answer")), "{name}: {outcome:?}");
                assert!(peak <= bound, "{name}: {peak} > {bound}");
            }
            // A head refused before a response exists: only its refusal is seen here (its bound
            // is `an_endless_head_is_cut_at_its_bound` in tests/transport.rs).
            None => assert!(outcome.is_err(), "{name}"),
        }
    }
}
