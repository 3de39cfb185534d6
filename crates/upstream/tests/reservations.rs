//! Memory for an answer is taken as its bytes arrive, never from the length the upstream
//! declares: a chat answer that announces 30 MB (under the 32 MiB bound) and sends a few bytes
//! makes no allocation near its announced size. Measured on the process's address space
//! (`VmSize`) while the call waits for the rest, so this file holds this one test alone.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use domain::ports::Endpoint;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use upstream::UpstreamConfig;

/// `VmSize`, the address space this process holds, in KiB: an allocation counts here in full
/// as soon as it is made, touched or not (resident memory would not show an untouched
/// reservation).
fn size_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn an_announced_length_reserves_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        // The request (small): read until its body has come, then the short answer and the close.
        let mut seen = Vec::new();
        while !seen.ends_with(b"}") {
            let n = socket.read(&mut buf).await.unwrap();
            if n == 0 {
                return;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 30000000\r\n\r\n";
        socket.write_all(format!("{head}{{\"id\":").as_bytes()).await.unwrap();
        // The rest never comes; the connection closes a while later.
        tokio::time::sleep(Duration::from_millis(600)).await;
    });
    let up = common::adapter(UpstreamConfig {
        platform_base: format!("http://{addr}/api/v3"),
        platform_key: "k".to_owned(),
        speech_origin: String::new(),
        speech_key: String::new(),
        messages_base: String::new(),
        connect_timeout: Duration::from_secs(5),
        timeout: Duration::from_secs(5),
    });
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let before = size_kib();
    let call = tokio::spawn(async move { common::send(&up, Endpoint::ChatCompletions, body).await });
    // The answer's head and first bytes are in, the rest is awaited.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rise = size_kib().saturating_sub(before);
    let result = tokio::time::timeout(Duration::from_secs(5), call).await.unwrap().unwrap();
    println!("30 MB announced, 6 bytes sent: {result:?}; address space +{rise} KiB while waiting");
    assert!(result.is_err(), "the answer was cut short");
    assert!(rise < 8 * 1024, "the peak address space rose by {rise} KiB");
}
