//! Integration test of `GET /metrics`: the real server over real SQLite (and PostgreSQL when
//! `TEST_DATABASE_URL` is set) with the upstream simulator behind it. Known traffic is sent, the
//! answer is read with a Prometheus text parser, and its counters are checked against that traffic.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Env, amount, databases};
use domain::{Scope, UsdAmount};
use prometheus_parse::{Sample, Scrape, Value as Metric};
use serde_json::{Value, json};

const CHAT: &str = "/api/v1/chat/completions";
const MODEL: &str = "LangA-V4-flash";

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": MODEL, "messages": [{"role": "user", "content": "count me"}], "max_tokens": 64});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

/// The value of the one sample named `name` whose labels include `labels` (0 when there is none).
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<&Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert!(matching.len() <= 1, "{name} {labels:?}: {} samples", matching.len());
    match matching.first().map(|s| &s.value) {
        None => 0.0,
        Some(Metric::Counter(v) | Metric::Gauge(v) | Metric::Untyped(v)) => *v,
        Some(other) => panic!("{name}: not a single number: {other:?}"),
    }
}

/// The count of the histogram `name` at `labels`.
fn histogram_count(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let sample = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no histogram {name} {labels:?}"));
    match &sample.value {
        Metric::Histogram(buckets) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
        other => panic!("{name}: not a histogram: {other:?}"),
    }
}

#[tokio::test]
async fn metrics_parse_and_count_the_traffic() {
    for db in databases() {
        let scopes = [Scope::LanguageCreate, Scope::TaskRead];
        let env = Env::new(&db, "10.000000", Duration::from_secs(2), &scopes).await;
        let mut settled = UsdAmount::ZERO;
        for i in 0..3 {
            let reply = env.post(CHAT, &chat(json!({}))).await;
            assert_eq!(reply.status, 200, "{}", env.ctx(&format!("chat {i}")));
            settled = settled
                .checked_add(amount(&reply.json["svc"]["billing"]["actual_amount"], &env.ctx("actual")))
                .unwrap_or_else(|e| panic!("sum: {e}"));
        }
        let failed = env.post(CHAT, &chat(json!({"sim_fault": "status_500"}))).await;
        assert_eq!(failed.status, 502, "{}", env.ctx("upstream fault"));
        let refused = env.post(CHAT, &json!({"model": MODEL, "messages": []})).await;
        assert_eq!(refused.status, 400, "{}", env.ctx("bad request"));
        let unknown = env.server.get("/api/v1/nothing-here", Some(&env.key)).await;
        assert_eq!(unknown.status, 404, "{}", env.ctx("unknown route"));

        let reply = env.server.get("/metrics", None).await;
        let ctx = env.ctx("metrics");
        assert_eq!(reply.status, 200, "{ctx}");
        assert!(reply.header("content-type").is_some_and(|t| t.starts_with("application/openmetrics-text")), "{ctx}");
        let text = String::from_utf8(reply.raw.to_vec()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(text.trim_end().ends_with("# EOF"), "{ctx}: OpenMetrics text ends with # EOF");
        assert!(!text.contains(&env.user.id.0), "{ctx}: no user id in the metrics");
        assert!(!text.contains(&env.key), "{ctx}: no key in the metrics");
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
            .unwrap_or_else(|e| panic!("{ctx}: the text does not parse: {e}"));

        let requests = "gateway_http_requests_total";
        assert_eq!(value(&scrape, requests, &[("route", CHAT), ("status", "200")]), 3.0, "{ctx}");
        assert_eq!(value(&scrape, requests, &[("route", CHAT), ("status", "502")]), 1.0, "{ctx}");
        assert_eq!(value(&scrape, requests, &[("route", CHAT), ("status", "400")]), 1.0, "{ctx}");
        assert_eq!(value(&scrape, requests, &[("route", "unmatched"), ("status", "404")]), 1.0, "{ctx}");
        let latency = "gateway_http_request_duration_seconds";
        assert_eq!(histogram_count(&scrape, latency, &[("route", CHAT)]), 5.0, "{ctx}: every chat request timed");

        let model = [("model", MODEL)];
        assert_eq!(
            histogram_count(&scrape, "gateway_upstream_duration_seconds", &model),
            4.0,
            "{ctx}: 4 upstream calls"
        );
        let errors = "gateway_upstream_errors_total";
        assert_eq!(value(&scrape, errors, &[("model", MODEL), ("kind", "status")]), 1.0, "{ctx}");
        let ended = "gateway_calls_ended_total";
        assert_eq!(value(&scrape, ended, &[("model", MODEL), ("outcome", "settled")]), 3.0, "{ctx}");
        assert_eq!(value(&scrape, ended, &[("model", MODEL), ("outcome", "refunded")]), 1.0, "{ctx}");
        let settled_micros = u64::try_from(settled.micros()).unwrap_or_default();
        assert!(settled_micros > 0, "{ctx}: the calls cost something");
        assert_eq!(value(&scrape, "gateway_settled_micro_usd_total", &model) as u64, settled_micros, "{ctx}");
        assert!(value(&scrape, "gateway_refunded_micro_usd_total", &model) > 0.0, "{ctx}: the failed call's hold");
        assert_eq!(value(&scrape, "gateway_calls_in_flight", &model), 0.0, "{ctx}: nothing left open");
        assert_eq!(value(&scrape, "gateway_reservations_open", &[]), 0.0, "{ctx}");
        assert_eq!(value(&scrape, "gateway_video_worker_lag_seconds", &[]), 0.0, "{ctx}");
        assert_eq!(value(&scrape, "gateway_store_up", &[]), 1.0, "{ctx}");
        assert_eq!(value(&scrape, "gateway_calls_queued", &model), 0.0, "{ctx}");
        assert!(value(&scrape, "gateway_model_slots_leased", &model) >= 1.0, "{ctx}: the model's cap is leased");
        env.server.stop().await;
    }
}
