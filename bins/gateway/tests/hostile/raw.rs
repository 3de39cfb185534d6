//! Bodies written by hand: what the hostile suites send when the framing is what they test (a large
//! body the gateway may answer and close before it has read it all). Every other request goes
//! through the one test client (`testkit::http`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `POST path` with the JSON bytes `body`, the user's `key` and extra header lines `headers` (each
/// ending in `\r\n`), on a fresh connection to 127.0.0.1 closed after the answer: the status (0
/// when none came within `limit`) and the whole answer's text. The gateway may answer (400, 413,
/// 503) before it has read the whole body; a failed write is then fine.
pub fn post_bytes(addr: &str, path: &str, key: &str, headers: &str, body: &[u8], limit: Duration) -> (u16, String) {
    post_body(addr, path, key, &format!("{headers}Content-Type: application/json\r\n"), body, limit)
}

/// [`post_bytes`] with the `Content-Type` (and any other header lines) in `headers`.
pub fn post_body(addr: &str, path: &str, key: &str, headers: &str, body: &[u8], limit: Duration) -> (u16, String) {
    assert!(addr.starts_with("127.0.0.1:"), "tests only talk to 127.0.0.1, not {addr}");
    let mut stream = TcpStream::connect(addr).expect("connect to the gateway");
    stream.set_read_timeout(Some(limit)).expect("read timeout");
    stream.set_write_timeout(Some(limit)).expect("write timeout");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n{headers}\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
    let mut raw = Vec::new();
    // What came before an error (a reset after an early answer) is kept.
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}
