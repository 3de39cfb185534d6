//! Image generation: `HttpUpstream` against the simulator over real HTTP on 127.0.0.1.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{LONG, call, get, start, with};
use domain::ports::{Endpoint, UpstreamError};
use serde_json::{Value, json};
use sim::IMAGES_PATH;
use upstream::HttpUpstream;

fn request(extra: Value) -> Value {
    with(json!({"model": "image-model", "prompt": "A lighthouse at dawn"}), extra)
}

async fn generate(up: &HttpUpstream, body: Value) -> Result<Value, UpstreamError> {
    call(up, Endpoint::ImageGenerations, &body).await
}

fn status_of(result: Result<Value, UpstreamError>) -> (u16, Value) {
    match result {
        Err(UpstreamError::Status { status, body, .. }) => (status, serde_json::from_str(&body).unwrap()),
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn default_request_one_jpeg_by_url() {
    let (up, sim, addr) = start(LONG).await;
    let a = generate(&up, request(json!({}))).await.unwrap();
    assert_eq!(a["model"], "image-model");
    assert!(a["created"].as_u64().unwrap() > 1_700_000_000);
    let data = a["data"].as_array().unwrap();
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["size"], "2048x2048");
    assert_eq!(data[0]["output_format"], "jpeg");
    assert!(data[0].get("b64_json").is_none());
    let url = data[0]["url"].as_str().unwrap();
    assert!(url.starts_with(&format!("http://{addr}/files/images/")) && url.ends_with("/0.jpeg"), "{url}");
    assert_eq!(
        a["usage"],
        json!({"generated_images": 1, "output_tokens": 2048 * 2048 / 256, "total_tokens": 2048 * 2048 / 256, "input_images": 0})
    );
    let (status, content_type, bytes) = get(url).await;
    assert_eq!((status, content_type.as_str()), (200, "image/jpeg"));
    assert!(bytes.starts_with(&[0xff, 0xd8]) && bytes.ends_with(&[0xff, 0xd9]));
    assert_eq!(sim.requests(IMAGES_PATH), 1);
}

#[tokio::test]
async fn b64_png_items() {
    let (up, _sim, _) = start(LONG).await;
    let a = generate(&up, request(json!({"response_format": "b64_json", "output_format": "png", "size": "1K"})))
        .await
        .unwrap();
    let item = &a["data"][0];
    assert!(item.get("url").is_none());
    assert_eq!((item["size"].as_str(), item["output_format"].as_str()), (Some("1024x1024"), Some("png")));
    let png = common::b64decode(item["b64_json"].as_str().unwrap());
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{png:?}");
    assert_eq!(a["usage"]["output_tokens"], 1024 * 1024 / 256);
}

#[tokio::test]
async fn named_and_explicit_sizes() {
    let (up, _sim, _) = start(LONG).await;
    for (size, want, pixels) in [
        ("1K", "1024x1024", 1024 * 1024),
        ("2K", "2048x2048", 2048 * 2048),
        ("3K", "3072x3072", 3072 * 3072),
        ("4K", "4096x4096", 4096 * 4096),
        ("1536x1536", "1536x1536", 2_359_296),
        ("1552X1552", "1552x1552", 2_408_704),
        ("3104x1312", "3104x1312", 3104 * 1312),
    ] {
        let a = generate(&up, request(json!({"size": size}))).await.unwrap();
        assert_eq!(a["data"][0]["size"], want, "{size}");
        assert_eq!(a["usage"]["output_tokens"], pixels / 256, "{size}");
    }
    let (status, body) = status_of(generate(&up, request(json!({"size": "5K"}))).await);
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("size")));
}

#[tokio::test]
async fn sequential_with_references_and_one_failed_item() {
    let (up, _sim, _) = start(LONG).await;
    let refs = json!(["https://example.com/1.png", "https://example.com/2.png", "data:image/png;base64,AAAA"]);
    let body = |max: u64, prompt: &str| {
        json!({"model": "m", "prompt": prompt, "image": refs, "size": "2K", "sequential_image_generation": "auto",
               "sequential_image_generation_options": {"max_images": max}})
    };
    let a = generate(&up, body(12, "A story [sim:fail_image=5]")).await.unwrap();
    let data = a["data"].as_array().unwrap();
    assert_eq!(data.len(), 12);
    let failed: Vec<usize> = (0..12).filter(|&i| data[i].get("error").is_some()).collect();
    assert_eq!(failed, [5]);
    assert_eq!(data[5]["error"]["code"], "OutputImageSensitiveContentDetected");
    assert!(data[5].get("url").is_none());
    assert_eq!(data[11]["url"].as_str().map(|u| u.ends_with("/11.jpeg")), Some(true));
    assert_eq!(a["usage"]["generated_images"], 11);
    assert_eq!(a["usage"]["output_tokens"], 11 * 2048 * 2048 / 256);
    assert_eq!(a["usage"]["total_tokens"], a["usage"]["output_tokens"]);
    assert_eq!(a["usage"]["input_images"], 3);
    // Never more than 15 − references; default max_images 15; not sequential: one image.
    assert_eq!(generate(&up, body(13, "x")).await.unwrap()["data"].as_array().unwrap().len(), 12);
    let default_max =
        json!({"model": "m", "prompt": "x", "image": "https://e/1.png", "sequential_image_generation": "auto"});
    assert_eq!(generate(&up, default_max).await.unwrap()["data"].as_array().unwrap().len(), 14);
    let single = json!({"model": "m", "prompt": "x", "image": refs, "sequential_image_generation": "disabled"});
    let a = generate(&up, single).await.unwrap();
    assert_eq!((a["data"].as_array().unwrap().len(), a["usage"]["input_images"].as_u64()), (1, Some(3)));
    // Several failed items.
    let a = generate(&up, body(4, "[sim:fail_image=0][sim:fail_image=3]")).await.unwrap();
    assert_eq!(a["usage"]["generated_images"], 2);
}

#[tokio::test]
async fn fail_all_and_empty_usage() {
    let (up, _sim, _) = start(LONG).await;
    let body = json!({"model": "m", "prompt": "[sim:fault=fail_all]", "sequential_image_generation": "auto",
                      "sequential_image_generation_options": {"max_images": 3}});
    let a = generate(&up, body).await.unwrap();
    assert!(a["data"].as_array().unwrap().iter().all(|item| item.get("error").is_some()));
    assert_eq!(a["data"].as_array().unwrap().len(), 3);
    assert_eq!((a["usage"]["generated_images"].as_u64(), a["usage"]["output_tokens"].as_u64()), (Some(0), Some(0)));
    let a = generate(&up, request(json!({"prompt": "x [sim:fault=empty_usage]"}))).await.unwrap();
    assert!(a.get("usage").is_none());
    assert_eq!(a["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn status_faults_in_the_prompt() {
    let (up, sim, _) = start(LONG).await;
    for (fault, status, code) in [
        ("status_400", 400, "InvalidParameter"),
        ("status_429", 429, "RateLimitExceeded.EndpointRPMExceeded"),
        ("status_500", 500, "InternalServiceError"),
        ("status_503", 503, "ServiceUnavailable"),
    ] {
        let (s, body) = status_of(generate(&up, request(json!({"prompt": format!("cat [sim:fault={fault}]")}))).await);
        assert_eq!((s, body["error"]["code"].as_str()), (status, Some(code)), "{fault}");
    }
    assert_eq!(sim.requests(IMAGES_PATH), 4);
}

#[tokio::test]
async fn transport_faults_in_the_prompt() {
    let (up, _sim, _) = start(Duration::from_millis(300)).await;
    let prompt = |p: &str| request(json!({"prompt": p}));
    assert_eq!(generate(&up, prompt("[sim:fault=timeout]")).await, Err(UpstreamError::Timeout));
    assert!(matches!(generate(&up, prompt("[sim:fault=malformed]")).await, Err(UpstreamError::Malformed(_))));
    assert!(matches!(generate(&up, prompt("[sim:fault=drop]")).await, Err(UpstreamError::Connect(_))));
    let (up, _sim, _) = start(LONG).await;
    let started = Instant::now();
    generate(&up, prompt("slow [sim:latency_ms=200]")).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn bad_requests_are_400_naming_the_parameter() {
    let (up, sim, _) = start(LONG).await;
    for (body, param) in [
        (json!({"model": "m"}), "prompt"),
        (json!({"prompt": "p"}), "model"),
        (json!({"model": "m", "prompt": 7}), "prompt"),
        (request(json!({"prompt": "[sim:fault=midstream_error]"})), "prompt"),
        (request(json!({"prompt": "[sim:nonsense=1]"})), "prompt"),
        (request(json!({"image": vec!["https://e/x.png"; 15]})), "image"),
        (request(json!({"response_format": "file"})), "response_format"),
        (request(json!({"output_format": "webp"})), "output_format"),
        (
            request(
                json!({"sequential_image_generation": "auto", "sequential_image_generation_options": {"max_images": 16}}),
            ),
            "sequential_image_generation_options.max_images",
        ),
    ] {
        let (status, error) = status_of(generate(&up, body.clone()).await);
        assert_eq!((status, error["error"]["param"].as_str()), (400, Some(param)), "{body}");
        assert_eq!(error["error"]["type"], "BadRequest");
    }
    // Just inside the reference bound.
    generate(&up, request(json!({"image": vec!["https://e/x.png"; 14]}))).await.unwrap();
    assert_eq!(sim.requests(IMAGES_PATH), 10);
}

#[tokio::test]
async fn large_reference_bodies_are_accepted() {
    let (up, _sim, _) = start(Duration::from_secs(60)).await;
    // Two 6 MiB references: 12 MiB, beyond the old 8 MiB chat bound.
    let reference = format!("data:image/png;base64,{}", "A".repeat(6 * 1024 * 1024));
    let a = generate(&up, request(json!({"image": [reference.clone(), reference]}))).await.unwrap();
    assert_eq!(a["usage"]["input_images"], 2);
}

#[tokio::test]
async fn bearer_is_required() {
    let (_up, _sim, addr) = start(LONG).await;
    let url = format!("http://{addr}{IMAGES_PATH}");
    let body = request(json!({})).to_string();
    let (status, text) = common::raw_post(&url, &[("content-type", "application/json")], &body).await;
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("AuthenticationError"), "{text}");
    let (status, _) = common::raw_post(&url, &[("authorization", "Bearer k")], &body).await;
    assert_eq!(status, 200);
}
