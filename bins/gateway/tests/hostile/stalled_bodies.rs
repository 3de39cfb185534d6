//! Stalled request bodies: a tenant that sends most of a large body fast and then stops holds its
//! room in the body budget only for `GATEWAY_BODY_STALL`, so another tenant's large body is
//! answered instead of 503; and a body that declares a huge `Content-Length` and sends a few bytes
//! costs the gateway a few bytes, not the declared length.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{self, memory_kib, sandbox};
use crate::connections::read_status;

const MIB: u64 = 1024 * 1024;

/// An image request of about `size` bytes (two Base64 references of half of it each).
fn image_body(size: u64) -> Vec<u8> {
    let half = usize::try_from(size / 2).unwrap_or(0);
    let reference = format!("data:image/png;base64,{}", "A".repeat(half - 32));
    json!({"model": "Vendor-Imagegen-4.5", "prompt": "a cat", "image": [reference.clone(), reference]})
        .to_string()
        .into_bytes()
}

/// Opens an image request that declares `length` bytes and sends `first` of them.
fn start_image(addr: &str, key: &str, length: u64, first: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST /api/v1/images/generations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("write head");
    stream.write_all(first).expect("write the first bytes");
    stream
}

#[test]
fn a_body_sent_fast_then_stopped_holds_its_room_only_for_the_stall_time() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (_, a) = common::account(&sandbox, "100", "image:create");
    let (_, b) = common::account(&sandbox, "100", "image:create");
    let env = [
        ("GATEWAY_BODY_BUDGET_BYTES", (8 * MIB).to_string()),
        ("GATEWAY_BODY_STALL", "1500ms".to_owned()),
        ("GATEWAY_CAPS", "false".to_owned()),
    ];
    let (_server, addr) = common::serve_against(&sandbox, sim, "serve-stall", &env);

    // A declares 7 MiB, sends 6 MiB fast, then nothing: it holds 6 to 7 MiB of the 8-MiB budget,
    // and its average rate since the start (MiB/s) would buy it minutes of silence at 32 KiB/s.
    let a_body = image_body(7 * MIB);
    let sent = usize::try_from(6 * MIB).unwrap_or(0);
    let mut a_call = start_image(&addr, &a, a_body.len() as u64, &a_body[..sent]);
    std::thread::sleep(Duration::from_millis(100));
    let stalled = Instant::now();
    // B's 4-MiB image request finds no room until A's body is cut.
    let b_body = image_body(4 * MIB);
    let (addr_b, key_b) = (addr.clone(), b.clone());
    let b_call = std::thread::spawn(move || {
        let (status, answer) =
            super::raw::post_bytes(&addr_b, "/api/v1/images/generations", &key_b, "", &b_body, Duration::from_secs(30));
        (status, answer, stalled.elapsed())
    });
    let a_end = read_status(&mut a_call, Duration::from_secs(30)).map(|(s, _)| s);
    let a_cut = stalled.elapsed();
    let (b_status, b_answer, b_took) = b_call.join().expect("B's call");
    println!(
        "budget 8 MiB, stall 1.5 s: A sent 6 of a declared 7 MiB and stopped; A got {a_end:?} {:.2} s later; \
         B's 4-MiB image request got {b_status} {:.2} s after A stopped",
        a_cut.as_secs_f64(),
        b_took.as_secs_f64()
    );
    assert_eq!(a_end, Some(408), "A's stalled body is cut");
    assert_eq!(b_status, 200, "B is answered, not turned away: {}", b_answer.lines().last().unwrap_or_default());
    // B's wait is A's stall time plus B's own upload and call (a second alone; up to three with the
    // rest of the hostile suite on two cores), not the minutes an average pace would have bought A.
    assert!(b_took <= Duration::from_millis(1500 + 3000), "B waited {b_took:?}");
    assert!(a_cut <= Duration::from_millis(2500), "A was cut after {a_cut:?}");
}

/// `VmSize` (address space) of process `pid`, in KiB.
fn address_space_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_huge_declared_length_costs_only_the_bytes_sent() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (_, key) = common::account(&sandbox, "100", "image:create");
    let (server, addr) =
        common::serve_against(&sandbox, sim, "serve-declared", &[("GATEWAY_CAPS", "false".to_owned())]);
    let pid = server.0.id();
    let (status, _) = super::raw::post_bytes(
        &addr,
        "/api/v1/images/generations",
        &key,
        "",
        &image_body(2 * MIB),
        Duration::from_secs(30),
    );
    assert_eq!(status, 200, "warm-up");

    // 16 bodies that declare 600 MiB each (the image route's limit) and send 4 KiB.
    let (rss_before, _) = memory_kib(pid);
    let space_before = address_space_kib(pid);
    let declared = 600 * MIB;
    let first = &image_body(2 * MIB)[..4096];
    let calls: Vec<TcpStream> = (0..16).map(|_| start_image(&addr, &key, declared, first)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let (rss_after, _) = memory_kib(pid);
    let space_after = address_space_kib(pid);
    let rss = rss_after.saturating_sub(rss_before);
    let space = space_after.saturating_sub(space_before);
    println!(
        "16 bodies declaring 600 MiB each (9,600 MiB in all), 4 KiB sent each: RSS +{rss} KiB, \
         address space +{} MiB",
        space / 1024
    );
    assert!(rss < 16 * 1024, "RSS grew {rss} KiB");
    assert!(space < 1024 * 1024, "the address space grew {space} KiB: a declared length was reserved");
    drop(calls);
}
