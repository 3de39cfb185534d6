//! The egress client against an https receiver on 127.0.0.1 / ::1 with a test CA. Nothing here
//! connects anywhere else: refused URLs are refused before any connection.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{Log, MemSink, receiver, test_pki};
use domain::ports::MediaStore;
use media::{AllowList, Egress, EgressConfig, EgressError, LocalMediaStore, MinRate};

struct Setup {
    ca: Vec<u8>,
    v4: (SocketAddr, Arc<Log>),
    v6: Option<(SocketAddr, Arc<Log>)>,
}

async fn setup() -> Setup {
    let (ca, identity) = test_pki();
    let v4 = receiver("127.0.0.1:0", identity.clone()).await.unwrap();
    let v6 = receiver("[::1]:0", identity).await;
    Setup { ca, v4, v6 }
}

fn egress(setup: &Setup, allow: &str, timeout: Duration) -> Egress {
    Egress::new(EgressConfig {
        allow: AllowList::parse(allow).unwrap(),
        extra_ca_pem: Some(setup.ca.clone()),
        connect_timeout: Duration::from_secs(2),
        timeout,
        webhook_timeout: None,
        min_rate: None,
    })
    .unwrap()
}

const LONG: Duration = Duration::from_secs(10);

async fn fetch(e: &Egress, url: &str, max: u64) -> (Result<media::FetchedMeta, EgressError>, Vec<u8>) {
    let mut sink = MemSink::default();
    let result = e.fetch_to(url, max, &mut sink).await;
    (result, sink.data)
}

fn refused<T: std::fmt::Debug>(result: &Result<T, EgressError>) -> bool {
    matches!(result, Err(EgressError::Refused(_)))
}

#[tokio::test]
async fn loopback_is_refused_by_default_without_any_connection() {
    let s = setup().await;
    let e = egress(&s, "", LONG);
    let port = s.v4.0.port();
    let mut urls = vec![
        format!("https://127.0.0.1:{port}/ok"),
        format!("https://localhost:{port}/ok"),
        format!("https://127.1:{port}/ok"),
        format!("https://[::ffff:127.0.0.1]:{port}/ok"),
        format!("https://0.0.0.0:{port}/ok"),
        "https://169.254.169.254/latest/meta-data/".to_owned(),
        "https://10.0.0.1/x".to_owned(),
        "https://[fd00::1]/x".to_owned(),
    ];
    if let Some((v6, _)) = &s.v6 {
        urls.push(format!("https://[::1]:{}/ok", v6.port()));
    }
    for url in &urls {
        let (result, data) = fetch(&e, url, 1000).await;
        assert!(refused(&result), "{url}: {result:?}");
        assert!(data.is_empty());
        assert!(refused(&e.post_json(url, &[], b"{}".to_vec()).await), "{url}");
    }
    assert_eq!(s.v4.1.connections(), 0, "the receiver saw no connection");
    if let Some((_, log)) = &s.v6 {
        assert_eq!(log.connections(), 0);
    }
}

#[tokio::test]
async fn non_https_is_refused_even_when_allow_listed() {
    let s = setup().await;
    let e = egress(&s, "127.0.0.1, localhost", LONG);
    let port = s.v4.0.port();
    for url in [
        format!("http://127.0.0.1:{port}/ok"),
        format!("http://localhost:{port}/ok"),
        format!("ftp://127.0.0.1:{port}/ok"),
        format!("https://user:pw@127.0.0.1:{port}/ok"),
        "not a url".to_owned(),
        "data:text/plain,hi".to_owned(),
    ] {
        let (result, _) = fetch(&e, &url, 1000).await;
        assert!(refused(&result), "{url}: {result:?}");
    }
    assert_eq!(s.v4.1.connections(), 0);
}

#[tokio::test]
async fn allow_listed_by_address_by_network_and_by_name() {
    let s = setup().await;
    let port = s.v4.0.port();
    for (allow, url) in [
        ("127.0.0.1", format!("https://127.0.0.1:{port}/ok")),
        ("127.0.0.0/8", format!("https://127.0.0.1:{port}/ok")),
        ("localhost", format!("https://localhost:{port}/ok")),
    ] {
        let e = egress(&s, allow, LONG);
        let (result, data) = fetch(&e, &url, 1000).await;
        let meta = result.unwrap_or_else(|err| panic!("{allow} {url}: {err:?}"));
        assert_eq!((meta.bytes, meta.content_type.as_deref()), (108, Some("image/png")));
        assert_eq!(meta.final_url, url);
        assert!(data.starts_with(b"\x89PNG") && data.len() == 108);
    }
    if let Some((v6, log)) = &s.v6 {
        let e = egress(&s, "::1", LONG);
        let (result, _) = fetch(&e, &format!("https://[::1]:{}/ok", v6.port()), 1000).await;
        assert_eq!(result.unwrap().bytes, 108);
        assert_eq!(log.lines(), ["GET /ok"]);
    }
}

#[tokio::test]
async fn certificates_are_checked() {
    let s = setup().await;
    let e = Egress::new(EgressConfig {
        allow: AllowList::parse("127.0.0.1").unwrap(),
        extra_ca_pem: None,
        connect_timeout: Duration::from_secs(2),
        timeout: LONG,
        webhook_timeout: None,
        min_rate: None,
    })
    .unwrap();
    let (result, _) = fetch(&e, &format!("https://127.0.0.1:{}/ok", s.v4.0.port()), 1000).await;
    assert!(matches!(result, Err(EgressError::Network(_))), "{result:?}");
    assert!(s.v4.1.lines().is_empty(), "no request over an unverified connection");
    let bad_pem = EgressConfig { extra_ca_pem: Some(b"not a pem".to_vec()), ..EgressConfig::default() };
    assert!(matches!(Egress::new(bad_pem), Err(EgressError::Config(_))));
}

#[tokio::test]
async fn redirects_are_followed_and_each_hop_checked() {
    let s = setup().await;
    let port = s.v4.0.port();
    let e = egress(&s, "127.0.0.1", LONG);
    let target = format!("https://127.0.0.1:{port}/ok");
    let (result, _) = fetch(&e, &format!("https://127.0.0.1:{port}/redirect?to={target}"), 1000).await;
    assert_eq!(result.unwrap().final_url, target);
    let (result, data) = fetch(&e, &format!("https://127.0.0.1:{port}/hops/5"), 1000).await;
    assert_eq!((result.unwrap().bytes, data.as_slice()), (4, &b"done"[..]), "five redirects are followed");
    let (result, _) = fetch(&e, &format!("https://127.0.0.1:{port}/hops/6"), 1000).await;
    assert!(refused(&result), "a sixth is refused: {result:?}");
    let before = s.v4.1.lines().len();
    let (result, _) =
        fetch(&e, &format!("https://127.0.0.1:{port}/redirect?to=http://127.0.0.1:{port}/ok"), 1000).await;
    assert!(refused(&result), "{result:?}");
    assert_eq!(s.v4.1.lines().len(), before + 1, "the http target was not requested");

    let by_name = egress(&s, "localhost", LONG);
    let (result, _) = fetch(&by_name, &format!("https://localhost:{port}/redirect?to={target}"), 1000).await;
    assert!(refused(&result), "a redirect to a host not on the list: {result:?}");
    assert_eq!(s.v4.1.lines().last().map(String::as_str), Some(format!("GET /redirect?to={target}").as_str()));
}

#[tokio::test]
async fn size_bounds_just_inside_and_outside() {
    let s = setup().await;
    let port = s.v4.0.port();
    let e = egress(&s, "127.0.0.1", LONG);
    let (result, data) = fetch(&e, &format!("https://127.0.0.1:{port}/sized/1000"), 1000).await;
    assert_eq!((result.unwrap().bytes, data.len()), (1000, 1000));
    let (result, data) = fetch(&e, &format!("https://127.0.0.1:{port}/sized/1000"), 999).await;
    assert_eq!(result, Err(EgressError::TooLarge { limit: 999 }));
    assert!(data.is_empty(), "an announced length over the bound is refused before reading");
    let (result, data) = fetch(&e, &format!("https://127.0.0.1:{port}/chunked/50000"), 50_000).await;
    assert_eq!((result.unwrap().bytes, data.len()), (50_000, 50_000));
    let (result, data) = fetch(&e, &format!("https://127.0.0.1:{port}/chunked/300000"), 50_000).await;
    assert_eq!(result, Err(EgressError::TooLarge { limit: 50_000 }));
    assert!(data.len() <= 50_000, "stopped mid-stream at the bound, wrote {}", data.len());
}

#[tokio::test]
async fn statuses_and_time_bound() {
    let s = setup().await;
    let port = s.v4.0.port();
    let e = egress(&s, "127.0.0.1", Duration::from_millis(500));
    let (result, _) = fetch(&e, &format!("https://127.0.0.1:{port}/status/404"), 1000).await;
    assert_eq!(result, Err(EgressError::Status(404)));
    let (result, _) = fetch(&e, &format!("https://127.0.0.1:{port}/hang"), 1000).await;
    assert_eq!(result, Err(EgressError::Timeout));
    assert_eq!(
        e.post_json(&format!("https://127.0.0.1:{port}/hang"), &[], b"{}".to_vec()).await,
        Err(EgressError::Timeout)
    );
}

#[tokio::test]
async fn a_drip_fed_body_is_cut_below_the_minimum_rate_and_webhooks_have_their_own_timeout() {
    let s = setup().await;
    let port = s.v4.0.port();
    let rate = MinRate { bytes_per_sec: 1000, window: Duration::from_millis(500), grace: Duration::from_millis(500) };
    let e = Egress::new(EgressConfig {
        allow: AllowList::parse("127.0.0.1").unwrap(),
        extra_ca_pem: Some(s.ca.clone()),
        connect_timeout: Duration::from_secs(2),
        timeout: LONG,
        webhook_timeout: Some(Duration::from_millis(300)),
        min_rate: Some(rate),
    })
    .unwrap();
    // 20 bytes a second against a floor of 1,000: cut after the grace and one window, not at the
    // 10-s timeout.
    let started = std::time::Instant::now();
    let (result, data) = fetch(&e, &format!("https://127.0.0.1:{port}/drip/50"), 2_000_000).await;
    let cut = started.elapsed();
    println!("drip-fed body cut after {:.2} s ({} bytes)", cut.as_secs_f64(), data.len());
    assert_eq!(result, Err(EgressError::TooSlow { bytes_per_sec: 1000 }));
    assert!(cut < Duration::from_secs(5), "cut after {cut:?}");
    // A body that comes at once passes the same floor.
    let (result, data) = fetch(&e, &format!("https://127.0.0.1:{port}/chunked/300000"), 1_000_000).await;
    assert_eq!((result.unwrap().bytes, data.len()), (300_000, 300_000));
    // A receiver that never answers is given up after the webhook timeout, not the fetch timeout.
    let started = std::time::Instant::now();
    let posted = e.post_json(&format!("https://127.0.0.1:{port}/hook/hang"), &[], b"{}".to_vec()).await;
    let waited = started.elapsed();
    println!("silent webhook receiver given up after {:.2} s", waited.as_secs_f64());
    assert_eq!(posted, Err(EgressError::Timeout));
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
}

#[tokio::test]
async fn webhook_posts() {
    let s = setup().await;
    let port = s.v4.0.port();
    let e = egress(&s, "localhost", LONG);
    let headers = vec![
        ("X-Svc-Webhook-Timestamp".to_owned(), "1700000000".to_owned()),
        ("X-Svc-Webhook-Signature".to_owned(), "v1=abc".to_owned()),
    ];
    let status =
        e.post_json(&format!("https://localhost:{port}/hook"), &headers, br#"{"type":"task.queued"}"#.to_vec()).await;
    assert_eq!(status, Ok(204));
    let seen = s.v4.1.requests.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen.line, "POST /hook");
    assert_eq!(seen.body, br#"{"type":"task.queued"}"#);
    let head = seen.head.to_ascii_lowercase();
    assert!(
        head.contains("x-svc-webhook-signature: v1=abc") && head.contains("content-type: application/json"),
        "{head}"
    );
    let redirect = format!("https://localhost:{port}/redirect?to=https://localhost:{port}/hook");
    assert_eq!(e.post_json(&redirect, &[], b"{}".to_vec()).await, Ok(302), "not followed");
    assert_eq!(e.post_json(&format!("https://localhost:{port}/status/500"), &[], b"{}".to_vec()).await, Ok(500));
    assert!(refused(&e.post_json(&format!("http://localhost:{port}/hook"), &[], b"{}".to_vec()).await));
    assert!(refused(&e.post_json(&format!("https://127.0.0.1:{port}/hook"), &[], b"{}".to_vec()).await));
}

#[tokio::test]
async fn import_into_the_local_store() {
    let s = setup().await;
    let dir = std::env::temp_dir().join(format!("media-egress-{}-{}", std::process::id(), s.v4.0.port()));
    let store = LocalMediaStore::new(&dir).await.unwrap();
    let e = egress(&s, "127.0.0.1", LONG);
    let mut sink = store.create("u1/imported.png").await.unwrap();
    let meta = e.fetch_to(&format!("https://127.0.0.1:{}/ok", s.v4.0.port()), 30_000_000, sink.as_mut()).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), meta.bytes);
    let mut source = store.open("u1/imported.png").await.unwrap().unwrap();
    assert_eq!(source.len(), 108);
    let first = source.next_chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"\x89PNG\r\n\x1a\n"), "the stored bytes are the PNG served");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn check_applies_the_policy_without_sending_anything() {
    use domain::Outbound;
    let s = setup().await;
    let port = s.v4.0.port();
    let closed = egress(&s, "", LONG);
    for url in [
        format!("https://127.0.0.1:{port}/a"),
        format!("https://localhost:{port}/a"),
        format!("https://[::1]:{port}/a"),
        "https://169.254.169.254/".to_owned(),
        format!("http://127.0.0.1:{port}/a"),
        "not a url".to_owned(),
    ] {
        assert!(refused(&closed.check(&url).await), "{url}");
    }
    let open = egress(&s, "127.0.0.1 localhost", LONG);
    assert!(open.check(&format!("https://127.0.0.1:{port}/a")).await.is_ok());
    assert!(open.check(&format!("https://localhost:{port}/a")).await.is_ok());
    assert!(refused(&open.check(&format!("http://localhost:{port}/a")).await), "http stays refused");
    assert_eq!(s.v4.1.connections(), 0, "checking never connects");
}

#[tokio::test]
async fn a_refused_name_does_not_tell_what_it_resolves_to() {
    let s = setup().await;
    let e = egress(&s, "", LONG);
    let url = format!("https://localhost:{}/ok", s.v4.0.port());
    let (fetched, _) = fetch(&e, &url, 1000).await;
    let posted = e.post_json(&url, &[], b"{}".to_vec()).await;
    let checked = domain::Outbound::check(&e, &url).await;
    for (what, result) in [("fetch", fetched.map(drop)), ("post", posted.map(drop)), ("check", checked)] {
        let Err(EgressError::Refused(why)) = &result else { panic!("{what}: {result:?}") };
        let shown = result.as_ref().err().map(ToString::to_string).unwrap_or_default();
        println!("{what}: {shown}");
        assert!(why.contains("localhost"), "{what}: the name the caller gave is named: {why}");
        for secret in ["127.0.0.1", "::1", "loopback", "private"] {
            assert!(!shown.contains(secret), "{what}: {secret} in {shown:?}");
        }
    }
    assert_eq!(s.v4.1.connections(), 0, "refused without connecting");
}
