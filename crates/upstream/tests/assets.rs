//! The asset control plane: `HttpAssetUpstream` (signed requests) against the simulator over
//! real HTTP on 127.0.0.1, the simulator fetching asset URLs from a local server.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{LONG, body_server, raw_answer};
use domain::ports::{AssetKind, AssetStatus, AssetUpstream, UpstreamError};
use serde_json::{Value, json};
use sim::{ASSETS_PATH, SimHandle, SimOptions};
use upstream::assets::sign;
use upstream::config::{SIM_ASSETS_ACCESS_KEY, SIM_ASSETS_SECRET_KEY};
use upstream::{AssetsConfig, HttpAssetUpstream, UpstreamConfig};

async fn start() -> (HttpAssetUpstream, SimHandle, SocketAddr) {
    let (addr, handle) = sim::spawn_with(SimOptions::manual()).await.unwrap();
    (assets_for(addr), handle, addr)
}

fn assets_for(addr: SocketAddr) -> HttpAssetUpstream {
    HttpAssetUpstream::new(AssetsConfig::for_simulator(addr, LONG, LONG)).unwrap()
}

/// Polls until the asset is no longer processing (bounded).
async fn settled(up: &HttpAssetUpstream, id: &str) -> AssetStatus {
    for _ in 0..250 {
        match up.asset_status(id).await.unwrap() {
            AssetStatus::Processing => tokio::time::sleep(Duration::from_millis(20)).await,
            other => return other,
        }
    }
    panic!("asset {id} still processing");
}

#[tokio::test]
async fn groups_are_created_once_and_cached() {
    let (up, sim, addr) = start().await;
    let first = up.asset_group("user-1").await.unwrap();
    assert!(first.starts_with("group-"), "{first}");
    assert_eq!(sim.requests(ASSETS_PATH), 2, "ListAssetGroups, then CreateAssetGroup");
    assert_eq!(up.asset_group("user-1").await.unwrap(), first);
    assert_eq!(sim.requests(ASSETS_PATH), 2, "cached");
    let other = up.asset_group("user-2").await.unwrap();
    assert_ne!(other, first);
    let replica = assets_for(addr);
    assert_eq!(replica.asset_group("user-1").await.unwrap(), first);
    assert_eq!(sim.requests(ASSETS_PATH), 5, "another process finds the group with one list");
}

#[tokio::test]
async fn concurrent_replicas_agree_on_one_group() {
    let (_, _sim, addr) = start().await;
    let replicas: Vec<Arc<HttpAssetUpstream>> = (0..6).map(|_| Arc::new(assets_for(addr))).collect();
    let mut joins = Vec::new();
    for r in &replicas {
        let r = Arc::clone(r);
        joins.push(tokio::spawn(async move { r.asset_group("shared-user").await }));
    }
    let mut ids = Vec::new();
    for j in joins {
        ids.push(j.await.unwrap().unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "{ids:?}");
}

#[tokio::test]
async fn asset_becomes_active_after_the_fetch_and_serves_a_task() {
    let (up, sim, addr) = start().await;
    let (server, mut rx) = body_server(raw_answer("200 OK", "image/png", b"\x89PNG\r\n\x1a\nrest")).await;
    let group = up.asset_group("user-1").await.unwrap();
    let url = format!("http://{server}/media/u1/a.png?expires=9&sig=ab");
    let id = up.create_asset(&group, &url, AssetKind::Image).await.unwrap();
    assert!(id.starts_with("asset-"), "{id}");
    assert_eq!(settled(&up, &id).await, AssetStatus::Active);
    let head = rx.recv().await.unwrap();
    assert!(head.starts_with("GET /media/u1/a.png?expires=9&sig=ab "), "{head}");
    let tasks = common::adapter(UpstreamConfig::for_simulator(addr, LONG, LONG));
    let body = json!({"model": "m", "content": [
        {"type": "text", "text": "animate"},
        {"type": "image_url", "image_url": {"url": format!("asset://{id}")}, "role": "reference_image"},
    ]});
    let created: Value =
        serde_json::from_slice(&tasks.create_task_body(body.to_string().into_bytes()).await.unwrap()).unwrap();
    assert!(created["id"].as_str().unwrap().starts_with("cgt-"));
    drop(sim);
}

#[tokio::test]
async fn failed_fetches_and_unreachable_urls() {
    let (up, _sim, addr) = start().await;
    let group = up.asset_group("user-1").await.unwrap();
    let (missing, _rx1) = body_server(raw_answer("404 Not Found", "text/plain", b"no")).await;
    let (empty, _rx2) = body_server(raw_answer("200 OK", "video/mp4", b"")).await;
    for (url, reason) in [
        (format!("http://{missing}/x.mp4"), "404"),
        (format!("http://{empty}/x.mp4"), "empty"),
        ("https://example.com/x.mp4".to_owned(), "loopback"),
    ] {
        let id = up.create_asset(&group, &url, AssetKind::Video).await.unwrap();
        match settled(&up, &id).await {
            AssetStatus::Failed(message) => assert!(message.contains(reason), "{message}"),
            other => panic!("{url}: {other:?}"),
        }
        let tasks = common::adapter(UpstreamConfig::for_simulator(addr, LONG, LONG));
        let body =
            json!({"model": "m", "content": [{"type": "video_url", "video_url": {"url": format!("asset://{id}")}}]});
        match tasks.create_task_body(body.to_string().into_bytes()).await {
            Err(UpstreamError::Status { status: 400, body, .. }) => assert!(body.contains("not active"), "{body}"),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn business_errors_arrive_in_http_200_envelopes() {
    let (up, _sim, _) = start().await;
    match up.create_asset("group-unknown", "http://127.0.0.1:9/x", AssetKind::Audio).await {
        Err(UpstreamError::Rejected { code, .. }) => assert_eq!(code, "NotFound.AssetGroup"),
        other => panic!("{other:?}"),
    }
    match up.asset_status("asset-unknown").await {
        Err(UpstreamError::Rejected { code, message }) => {
            assert_eq!(code, "NotFound.Asset");
            assert!(message.contains("asset-unknown"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn bad_credentials_are_refused_with_401() {
    let (_, sim, addr) = start().await;
    let cases = [
        (SIM_ASSETS_ACCESS_KEY, "wrong-secret", "SignatureDoesNotMatch"),
        ("AKLTsomeoneelse", SIM_ASSETS_SECRET_KEY, "InvalidAccessKey"),
    ];
    for (access_key, secret_key, code) in cases {
        let config = AssetsConfig {
            access_key: access_key.to_owned(),
            secret_key: secret_key.to_owned(),
            ..AssetsConfig::for_simulator(addr, LONG, LONG)
        };
        match HttpAssetUpstream::new(config).unwrap().asset_group("u").await {
            Err(UpstreamError::Status { status: 401, body, .. }) => {
                let body: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(body["ResponseMetadata"]["Error"]["Code"], code);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(sim.requests(ASSETS_PATH), 2);
}

/// A hand-made signed request; status and parsed body.
async fn signed(addr: SocketAddr, action: &str, body: &str, when: i64, tamper: bool) -> (u16, Value) {
    let host = addr.to_string();
    let creds = sign::Credentials {
        access_key: SIM_ASSETS_ACCESS_KEY,
        secret_key: SIM_ASSETS_SECRET_KEY,
        region: "cn-beijing",
    };
    let s = sign::sign(creds, &host, &[("Action", action), ("Version", sign::VERSION)], body.as_bytes(), when);
    let sent = if tamper { format!("{body} ") } else { body.to_owned() };
    let r = common::http_client()
        .post(format!("http://{host}/?Action={action}&Version=2024-01-01"))
        .header("content-type", "application/json")
        .header("x-date", s.x_date)
        .header("x-content-sha256", s.x_content_sha256)
        .header("authorization", s.authorization)
        .body(sent)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), serde_json::from_slice(&r.bytes().await.unwrap()).unwrap())
}

#[tokio::test]
async fn raw_signed_requests() {
    let (_, _sim, addr) = start().await;
    let now =
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()).unwrap();
    let code = |v: &Value| v["ResponseMetadata"]["Error"]["Code"].as_str().unwrap_or("").to_owned();
    let (status, body) = signed(addr, "ListAssetGroups", "{}", now, false).await;
    assert_eq!((status, code(&body)), (200, String::new()));
    assert_eq!(body["Result"]["Items"], json!([]));
    assert_eq!(body["ResponseMetadata"]["Action"], "ListAssetGroups");
    let (status, body) = signed(addr, "DeleteEverything", "{}", now, false).await;
    assert_eq!((status, code(&body).as_str()), (200, "InvalidActionOrVersion"));
    let (status, body) = signed(addr, "CreateAssetGroup", r#"{"Name":"n"}"#, now, false).await;
    assert_eq!((status, code(&body).as_str()), (200, "InvalidParameter"));
    let (status, body) = signed(addr, "ListAssetGroups", "{}", now - 901, false).await;
    assert_eq!((status, code(&body).as_str()), (401, "RequestExpired"));
    let (status, _) = signed(addr, "ListAssetGroups", "{}", now - 880, false).await;
    assert_eq!(status, 200, "inside the allowed skew");
    let (status, body) = signed(addr, "ListAssetGroups", "{}", now, true).await;
    assert_eq!((status, code(&body).as_str()), (401, "SignatureDoesNotMatch"));
    let r = common::http_client()
        .post(format!("http://{addr}/?Action=ListAssetGroups&Version=2024-01-01"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
}

#[tokio::test]
async fn unconfigured_control_plane_sends_nothing() {
    let (addr, sim) = sim::spawn().await.unwrap();
    let config = AssetsConfig { origin: String::new(), ..AssetsConfig::for_simulator(addr, LONG, LONG) };
    let up = HttpAssetUpstream::new(config).unwrap();
    assert_eq!(up.asset_group("u").await, Err(UpstreamError::NotConfigured("assets".to_owned())));
    assert_eq!(sim.requests_total(), 0);
}
