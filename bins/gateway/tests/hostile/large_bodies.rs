//! Memory bounded by the bytes received, for the image and audio routes: a large body raises the
//! gateway's peak RSS by at most twice its size plus 32 MiB (its buffer and the upstream body written
//! from it; no tree of JSON values, no third copy of a Base64 reference), an unknown field of 60 MB is
//! refused without growing memory, and ten large bodies at once keep RSS under 1.5 GiB (the body budget
//! turns the rest away with 503).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common;
use crate::common::memory_kib;

const MIB: u64 = 1024 * 1024;

/// Sends `body` as a JSON `POST path` on a fresh connection and returns (status, time to answer).
fn post(addr: &str, key: &str, path: &str, body: &[u8]) -> (u16, Duration) {
    let started = Instant::now();
    let (status, _) = super::raw::post_bytes(addr, path, key, "", body, Duration::from_secs(120));
    (status, started.elapsed())
}

/// An image request of about `size` bytes: two Base64 references of half of it each.
fn image_body(size: u64) -> Vec<u8> {
    let half = usize::try_from(size / 2).unwrap_or(0);
    let reference = format!("data:image/png;base64,{}", "A".repeat(half - 32));
    json!({"model": "Vendor-Imagegen-4.5", "prompt": "a cat", "image": [reference.clone(), reference]})
        .to_string()
        .into_bytes()
}

/// A 60-MB array of zeros in a member the request does not have.
fn zeros_body(model: &str, prompt_field: &str, size: u64) -> Vec<u8> {
    let zeros = "0,".repeat(usize::try_from(size / 2).unwrap_or(0));
    format!(r#"{{"model":"{model}","{prompt_field}":"a cat","pad":[{zeros}0]}}"#).into_bytes()
}

fn mib_of(kib: u64) -> u64 {
    kib / 1024
}

#[test]
fn large_image_and_audio_bodies_cost_at_most_twice_their_bytes() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    // Memory is the edge's and the validation's business, not the database's: SQLite only.
    let sandbox = common::Sandbox::new();
    let (_, key) = common::account(&sandbox, "100", "image:create,audio:create");
    // The models' concurrency caps (a 429 after the queue wait) are not what this measures.
    let (server, addr) = common::serve_against(&sandbox, sim, "serve-large", &[("GATEWAY_CAPS", "false".to_owned())]);
    let pid = server.0.id();
    let mut report = Vec::new();

    // A warm-up call, so that the figures below are what a body costs, not the first arenas.
    let (status, _) = post(&addr, &key, "/api/v1/images/generations", &image_body(2 * MIB));
    assert_eq!(status, 200, "warm-up");

    // One 60-MB image request with two Base64 references.
    let body = image_body(60 * MIB);
    let (_, before) = memory_kib(pid);
    let (status, took) = post(&addr, &key, "/api/v1/images/generations", &body);
    let (_, after) = memory_kib(pid);
    assert_eq!(status, 200);
    let grew = after.saturating_sub(before);
    report.push(format!("60-MiB image request: {status:?} in {} ms, peak +{} MiB", took.as_millis(), mib_of(grew)));
    assert!(grew <= 2 * 60 * 1024 + 32 * 1024, "peak grew {grew} KiB for a 60-MiB body");
    drop(body);

    // 60 MB of zeros in an unknown member: refused, and costs no tree of values.
    let body = zeros_body("Vendor-Imagegen-4.5", "prompt", 60 * MIB);
    let (_, before) = memory_kib(pid);
    let (status, took) = post(&addr, &key, "/api/v1/images/generations", &body);
    let (_, after) = memory_kib(pid);
    assert_eq!(status, 400);
    let grew = after.saturating_sub(before);
    report.push(format!(
        "60-MiB unknown image member: {status:?} in {} ms, peak +{} MiB",
        took.as_millis(),
        mib_of(grew)
    ));
    assert!(grew <= 60 * 1024 + 32 * 1024, "peak grew {grew} KiB for a refused 60-MiB body");
    drop(body);

    // An audio request of about 40 MB: a 13-MB Base64 reference and a 27-MB watermark passed through.
    let reference = format!("data:audio/wav;base64,UklGRiQAAABXQVZF{}", "A".repeat(13_000_000));
    let pad = "0,".repeat(13_500_000);
    let body = format!(
        r#"{{"model":"AudioGen-1.0","text_prompt":"Hello.","references":[{{"audio_data":"{reference}"}}],"watermark":{{"aigc_watermark":true,"pad":[{pad}0]}}}}"#
    )
    .into_bytes();
    let size = body.len() as u64;
    let (_, before) = memory_kib(pid);
    let (status, took) = post(&addr, &key, "/api/v1/audio/generations", &body);
    let (_, after) = memory_kib(pid);
    let grew = after.saturating_sub(before);
    report.push(format!(
        "{}-MiB audio request: {status:?} in {} ms, peak +{} MiB",
        size / MIB,
        took.as_millis(),
        mib_of(grew)
    ));
    assert!(matches!(status, 200 | 400), "{status:?}");
    assert!(grew <= 2 * size / 1024 + 32 * 1024, "peak grew {grew} KiB for a {size}-byte body");
    drop(body);

    // Ten 60-MB image requests at once: under 1.5 GiB; what the 1-GiB budget cannot take waits or is 503.
    let body = std::sync::Arc::new(image_body(60 * MIB));
    let started = Instant::now();
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let (addr, key, body) = (addr.clone(), key.clone(), std::sync::Arc::clone(&body));
            std::thread::spawn(move || post(&addr, &key, "/api/v1/images/generations", &body).0)
        })
        .collect();
    let statuses: Vec<u16> = calls.into_iter().map(|c| c.join().expect("caller")).collect();
    let (rss, peak) = memory_kib(pid);
    report.push(format!(
        "ten 60-MiB image requests at once: {statuses:?} in {} ms, RSS {} MiB, peak {} MiB",
        started.elapsed().as_millis(),
        mib_of(rss),
        mib_of(peak)
    ));
    println!("{}", report.join("\n"));
    assert!(
        statuses.iter().all(|s| matches!(s, 200 | 503)),
        "{statuses:?}; the gateway logged:\n{}",
        common::logged_problems(&sandbox, "serve-large")
    );
    assert!(peak < 1536 * 1024, "peak RSS {peak} KiB");
}
