//! Integration tests of what the catalogue shows: the model list against the interface's models and
//! price tables, the operator's switches and prices as the list shows them, and the overview (which
//! lists the models too). The real server on `127.0.0.1:0` over real SQLite (and PostgreSQL when
//! `TEST_DATABASE_URL` is set), driven by a hyper HTTP/1.1 client.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Server, databases, is_date_time, is_usd_amount, task};
use domain::{PriceSheet, Rate, Scope, TaskStatus, UsdAmount};
use serde_json::{Value, json};

const MODELS: &str = "/api/v1/models";
const OVERVIEW: &str = "/api/v1/overview";

/// Every public model name of the interface with its kind.
fn spec_models() -> BTreeMap<&'static str, &'static str> {
    catalog::SPEC_MODELS.iter().map(|(name, kind)| (*name, kind.as_str())).collect()
}

/// `(model, rate key, amountMicrousd, denominator, unit)` for every rate the spec's tables publish.
fn spec_rates() -> Vec<(&'static str, String, &'static str, &'static str, &'static str)> {
    let mut rates = Vec::new();
    let mut language = |model: &'static str, suffix: &str, entries: &[(&str, &'static str)]| {
        for (key, amount) in entries {
            let unit = if *key == "storage_token_hours" { "token_hour" } else { "token" };
            rates.push((model, format!("{key}{suffix}"), *amount, "1000000", unit));
        }
    };
    language(
        "LangA-V4-flash",
        "",
        &[
            ("input_tokens", "140000"),
            ("output_tokens", "280000"),
            ("storage_token_hours", "8300"),
            ("cache_hit_tokens", "28000"),
        ],
    );
    language(
        "LangA-V4-pro",
        "",
        &[
            ("input_tokens", "1740000"),
            ("output_tokens", "3480000"),
            ("storage_token_hours", "8300"),
            ("cache_hit_tokens", "145000"),
        ],
    );
    for model in ["LangB-2.0-Code", "LangB-2.0-pro"] {
        language(
            model,
            "_lte_128k",
            &[
                ("input_tokens", "500000"),
                ("output_tokens", "3000000"),
                ("cache_hit_tokens", "100000"),
                ("storage_token_hours", "8300"),
            ],
        );
        language(
            model,
            "_gt_128k_lte_256k",
            &[
                ("input_tokens", "1000000"),
                ("output_tokens", "6000000"),
                ("cache_hit_tokens", "200000"),
                ("storage_token_hours", "8300"),
            ],
        );
    }
    language(
        "LangB-2.0-lite",
        "_lte_128k",
        &[
            ("input_tokens", "250000"),
            ("output_tokens", "2000000"),
            ("cache_hit_tokens", "50000"),
            ("audio_input_tokens", "3750000"),
            ("audio_cache_hit_tokens", "750000"),
            ("storage_token_hours", "8300"),
        ],
    );
    language(
        "LangB-2.0-lite",
        "_gt_128k_lte_256k",
        &[
            ("input_tokens", "500000"),
            ("output_tokens", "4000000"),
            ("cache_hit_tokens", "100000"),
            ("audio_input_tokens", "7500000"),
            ("audio_cache_hit_tokens", "1500000"),
            ("storage_token_hours", "8300"),
        ],
    );
    language(
        "LangB-2.0-mini",
        "_lte_128k",
        &[
            ("input_tokens", "100000"),
            ("output_tokens", "400000"),
            ("cache_hit_tokens", "20000"),
            ("audio_input_tokens", "1500000"),
            ("audio_cache_hit_tokens", "300000"),
            ("storage_token_hours", "8300"),
        ],
    );
    language(
        "LangB-2.0-mini",
        "_gt_128k_lte_256k",
        &[
            ("input_tokens", "200000"),
            ("output_tokens", "800000"),
            ("cache_hit_tokens", "40000"),
            ("audio_input_tokens", "3000000"),
            ("audio_cache_hit_tokens", "600000"),
            ("storage_token_hours", "8300"),
        ],
    );
    language(
        "LangB-2.1-turbo",
        "",
        &[
            ("input_tokens", "500000"),
            ("output_tokens", "2500000"),
            ("cache_hit_tokens", "100000"),
            ("storage_token_hours", "8300"),
        ],
    );
    let image = [
        ("Vendor-Imagegen-4.5", "text_to_image_pieces", "36000"),
        ("Vendor-Imagegen-4.5", "image_to_image_pieces", "36000"),
        ("Vendor-Imagegen-5.0-lite", "text_to_image_pieces", "31500"),
        ("Vendor-Imagegen-5.0-lite", "image_to_image_pieces", "31500"),
        ("Vendor-Imagegen-5.0-pro", "input_images", "3000"),
        ("Vendor-Imagegen-5.0-pro", "output_images_lte_2360000_pixels", "45000"),
        ("Vendor-Imagegen-5.0-pro", "output_images_gt_2360000_pixels", "90000"),
    ];
    for (model, key, amount) in image {
        rates.push((model, key.to_owned(), amount, "1", "image"));
    }
    rates
}

/// The listed models by name; fails on duplicates.
fn by_name(list: &Value, context: &str) -> BTreeMap<String, Value> {
    let data = list["data"].as_array().unwrap_or_else(|| panic!("{context}: data is not an array: {list}"));
    let mut out = BTreeMap::new();
    for m in data {
        let name = m["id"].as_str().unwrap_or_else(|| panic!("{context}: model without id: {m}")).to_owned();
        assert!(out.insert(name.clone(), m.clone()).is_none(), "{context}: {name} listed twice");
    }
    out
}

/// Fails when any object key anywhere in `value` mentions the upstream.
fn assert_no_upstream_key(value: &Value, path: &str) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                assert!(!k.to_ascii_lowercase().contains("upstream"), "upstream field leaked at {path}.{k}");
                assert_no_upstream_key(v, &format!("{path}.{k}"));
            }
        }
        Value::Array(items) => {
            items.iter().enumerate().for_each(|(i, v)| assert_no_upstream_key(v, &format!("{path}[{i}]")))
        }
        _ => {}
    }
}

/// Checks one `Model` object: the spec's fields, enabled, a cap in range, and an integer pricing version
/// (absent, with null pricing, for the unpriced LangC-5.2), and request and response schemas.
fn assert_model_shape(m: &Value, context: &str) {
    let name = m["id"].as_str().unwrap_or_default();
    let kinds = spec_models();
    let ctx = format!("{context}: {name}");
    assert!(m["request_schema"]["properties"]["model"].is_object(), "{ctx}: request_schema names model");
    assert!(m["response_schema"]["properties"].is_object(), "{ctx}: response_schema");
    assert_eq!(m["public_model"], name, "{ctx}: public_model");
    assert_eq!(Some(m["kind"].as_str().unwrap_or("?")), kinds.get(name).copied(), "{ctx}: kind");
    assert_eq!(m["enabled"], true, "{ctx}: enabled");
    let cap = m["concurrency_limit"].as_i64().unwrap_or_else(|| panic!("{ctx}: concurrency_limit not an integer"));
    assert!((1..=100_000).contains(&cap), "{ctx}: concurrency_limit {cap}");
    if name == "LangC-5.2" {
        assert!(m["pricing"].is_null(), "{ctx}: unpriced model shows a price {}", m["pricing"]);
        assert!(m.get("pricing_version").is_none(), "{ctx}: an unpriced model has no pricing_version");
    } else {
        let v = m["pricing_version"].as_i64().unwrap_or_else(|| panic!("{ctx}: pricing_version not an integer"));
        assert!(v >= 1, "{ctx}: pricing_version {v}");
        let rates = m["pricing"].as_object().unwrap_or_else(|| panic!("{ctx}: pricing not an object"));
        assert!(!rates.is_empty(), "{ctx}: empty pricing");
        for (key, rate) in rates {
            let fields: BTreeSet<&str> =
                rate.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
            assert_eq!(fields, BTreeSet::from(["amountMicrousd", "denominator", "unit"]), "{ctx}: rate {key}");
            for f in ["amountMicrousd", "denominator"] {
                let text = rate[f].as_str().unwrap_or_default();
                assert!(!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()), "{ctx}: {key}.{f} = {}", rate[f]);
            }
        }
    }
    for optional in ["description", "pricing_kind", "capabilities"] {
        let v = &m[optional];
        assert!(v.is_null() || v.is_string() || v.is_object(), "{ctx}: {optional} = {v}");
    }
}

#[tokio::test]
async fn model_list_shows_the_catalog_with_spec_prices() {
    let catalog = catalog::Catalog::builtin().expect("catalog");
    for db in databases() {
        let server = Server::start(&db).await;
        let ctx = server.label;
        let user = server.user("10").await;
        let key = server.key(&user.id, &[Scope::ModelsRead]).await;

        let reply = server.get(MODELS, Some(&key.secret)).await;
        assert_eq!(reply.status, 200, "{ctx}: {}", String::from_utf8_lossy(&reply.raw));
        assert!(reply.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{ctx}: content type");
        assert!(reply.header("x-request-id").is_some_and(|v| !v.is_empty()), "{ctx}: x-request-id");
        assert_eq!(reply.json["object"], "list", "{ctx}");
        let models = by_name(&reply.json, ctx);
        assert_eq!(models.len(), 15, "{ctx}: model count");
        let names: BTreeSet<&str> = models.keys().map(String::as_str).collect();
        let expected: BTreeSet<&str> = spec_models().keys().copied().collect();
        assert_eq!(names, expected, "{ctx}: model names");
        for m in models.values() {
            assert_model_shape(m, ctx);
        }

        for (model, rate, amount, denominator, unit) in spec_rates() {
            assert_eq!(
                models[model]["pricing"][&rate],
                json!({"amountMicrousd": amount, "denominator": denominator, "unit": unit}),
                "{ctx}: {model} rate {rate}"
            );
        }
        assert_eq!(
            models["LangB-2.0-pro"]["pricing"]["input_tokens_gt_128k_lte_256k"],
            json!({"amountMicrousd": "1000000", "denominator": "1000000", "unit": "token"}),
            "{ctx}"
        );
        assert_eq!(
            models["Vendor-Imagegen-5.0-pro"]["pricing"]["output_images_gt_2360000_pixels"]["amountMicrousd"], "90000",
            "{ctx}"
        );

        // The upstream profile stays inside the gateway.
        assert_no_upstream_key(&reply.json, "$");
        let body = String::from_utf8_lossy(&reply.raw);
        for def in &catalog.models {
            assert!(
                !body.contains(&def.upstream.model_id),
                "{ctx}: upstream model id {} leaked",
                def.upstream.model_id
            );
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn operator_switches_and_prices_show_in_the_list() {
    for db in databases() {
        let server = Server::start(&db).await;
        let ctx = server.label;
        let user = server.user("1").await;
        let key = server.key(&user.id, &[Scope::ModelsRead, Scope::OverviewRead]).await;

        server.gateway.set_model("LangA-V4-pro", Some(false), None).await.expect("disable");
        let models = by_name(&server.get(MODELS, Some(&key.secret)).await.json, ctx);
        assert_eq!(models.len(), 14, "{ctx}: one model disabled");
        assert!(!models.contains_key("LangA-V4-pro"), "{ctx}: disabled model still listed");
        let overview = server.get(OVERVIEW, Some(&key.secret)).await;
        let routes: Vec<&str> =
            overview.json["routes"].as_array().expect("routes").iter().filter_map(|m| m["id"].as_str()).collect();
        assert_eq!(routes.len(), 14, "{ctx}: routes after disabling");
        assert!(!routes.contains(&"LangA-V4-pro"), "{ctx}: disabled model in routes");

        server.gateway.set_model("LangA-V4-pro", Some(true), Some(7)).await.expect("enable with a new cap");
        let models = by_name(&server.get(MODELS, Some(&key.secret)).await.json, ctx);
        assert_eq!(models.len(), 15, "{ctx}: re-enabled");
        assert_eq!(models["LangA-V4-pro"]["concurrency_limit"], 7, "{ctx}: new cap");
        assert_eq!(models["LangA-V4-pro"]["pricing_version"], 1, "{ctx}: switching keeps the price");

        let sheet = PriceSheet {
            rates: [
                ("input_tokens", 600_000, "token"),
                ("output_tokens", 2_600_000, "token"),
                ("cache_hit_tokens", 110_000, "token"),
                ("storage_token_hours", 8_300, "token_hour"),
            ]
            .into_iter()
            .map(|(k, amount, unit)| {
                (k.to_owned(), Rate { amount_microusd: amount, denominator: 1_000_000, unit: unit.to_owned() })
            })
            .collect(),
        };
        let version = server.gateway.set_price("LangB-2.1-turbo", sheet).await.expect("set price");
        assert_eq!(version.version, 2, "{ctx}: second version");
        let unpriced = PriceSheet {
            rates: [("input_tokens".to_owned(), Rate { amount_microusd: 1, denominator: 1, unit: "token".into() })]
                .into(),
        };
        server.gateway.set_price("LangC-5.2", unpriced).await.expect("first price of LangC-5.2");

        let models = by_name(&server.get(MODELS, Some(&key.secret)).await.json, ctx);
        let turbo = &models["LangB-2.1-turbo"];
        assert_eq!(turbo["pricing_version"], 2, "{ctx}: new pricing_version");
        assert_eq!(
            turbo["pricing"],
            json!({
                "input_tokens": {"amountMicrousd": "600000", "denominator": "1000000", "unit": "token"},
                "output_tokens": {"amountMicrousd": "2600000", "denominator": "1000000", "unit": "token"},
                "cache_hit_tokens": {"amountMicrousd": "110000", "denominator": "1000000", "unit": "token"},
                "storage_token_hours": {"amountMicrousd": "8300", "denominator": "1000000", "unit": "token_hour"},
            }),
            "{ctx}: the new rates replace the old ones"
        );
        assert_eq!(models["LangC-5.2"]["pricing_version"], 1, "{ctx}: LangC-5.2 priced at last");
        assert_eq!(
            models["LangC-5.2"]["pricing"],
            json!({"input_tokens": {"amountMicrousd": "1", "denominator": "1", "unit": "token"}}),
            "{ctx}"
        );
        assert_eq!(models["LangB-2.0-pro"]["pricing_version"], 1, "{ctx}: other models untouched");

        // Bad operator input is refused and changes nothing.
        assert!(server.gateway.set_model("LangA-V4-pro", None, Some(0)).await.is_err(), "{ctx}: cap 0");
        assert!(server.gateway.set_model("LangA-V4-pro", None, Some(100_001)).await.is_err(), "{ctx}: cap 100001");
        assert!(server.gateway.set_model("no-such-model", Some(false), None).await.is_err(), "{ctx}: unknown model");
        assert!(
            server.gateway.set_price("LangB-2.1-turbo", PriceSheet::default()).await.is_err(),
            "{ctx}: empty sheet"
        );
        let models = by_name(&server.get(MODELS, Some(&key.secret)).await.json, ctx);
        assert_eq!(models["LangA-V4-pro"]["concurrency_limit"], 7, "{ctx}: cap unchanged");
        assert_eq!(models["LangB-2.1-turbo"]["pricing_version"], 2, "{ctx}: version unchanged");
        server.stop().await;
    }
}

#[tokio::test]
async fn overview_shows_balance_stats_routes_ledger_and_maintenance() {
    for db in databases() {
        let server = Server::start(&db).await;
        let ctx = server.label;
        let user = server.user("12.5").await;
        let key = server.key(&user.id, &[Scope::OverviewRead]).await;

        let reply = server.get(OVERVIEW, Some(&key.secret)).await;
        assert_eq!(reply.status, 200, "{ctx}: {}", String::from_utf8_lossy(&reply.raw));
        let o = &reply.json;
        for field in ["user", "stats", "routes", "ledger", "maintenance"] {
            assert!(o.get(field).is_some(), "{ctx}: overview lacks {field}");
        }
        let u = &o["user"];
        assert_eq!(u["id"], user.id.as_str(), "{ctx}");
        assert_eq!(u["name"], user.name.as_str(), "{ctx}");
        assert_eq!(u["email"], user.email.as_str(), "{ctx}");
        assert_eq!(u["role"], "user", "{ctx}");
        assert_eq!(u["balance_usd"], "12.500000", "{ctx}: opening balance");
        assert_eq!(u["concurrency_limit"], 8, "{ctx}");
        assert_eq!(u["media_quota_bytes"], 1 << 20, "{ctx}");
        for (field, value) in
            [("total", json!(0)), ("succeeded", json!(0)), ("active", json!(0)), ("spent_usd", json!("0.000000"))]
        {
            assert_eq!(o["stats"][field], value, "{ctx}: stats.{field}");
        }
        assert_eq!(o["maintenance"], false, "{ctx}");
        let routes = by_name(&json!({"data": o["routes"]}), ctx);
        assert_eq!(routes.len(), 15, "{ctx}: routes");
        routes.values().for_each(|m| assert_model_shape(m, ctx));
        assert_no_upstream_key(o, "$");
        let ledger = o["ledger"].as_array().expect("ledger");
        assert_eq!(ledger.len(), 1, "{ctx}: the opening balance is one entry");
        assert_eq!(ledger[0]["amount_usd"], "12.500000", "{ctx}");
        assert_eq!(ledger[0]["kind"], "topup", "{ctx}");

        // 25 top-ups of 0.000001, 0.000002, …: the overview shows the newest 20, newest first.
        let mut expected = UsdAmount::parse_decimal("12.5").expect("amount");
        for i in 1..=25_i64 {
            let amount = UsdAmount::from_micros(i);
            server.gateway.topup(&user.id, amount, &format!("top-up {i}")).await.expect("topup");
            expected = expected.checked_add(amount).expect("sum");
        }
        // Another user's money never shows.
        let other = server.user("3").await;
        server.gateway.topup(&other.id, UsdAmount::from_micros(999), "other").await.expect("topup");

        let o = server.get(OVERVIEW, Some(&key.secret)).await.json;
        let balance = o["user"]["balance_usd"].as_str().expect("balance_usd is a string");
        assert!(is_usd_amount(balance), "{ctx}: {balance:?} is not a UsdAmount");
        assert_eq!(balance, expected.to_string(), "{ctx}: balance after top-ups");
        assert_eq!(balance, "12.500325", "{ctx}: 12.5 + (1+…+25) micro-USD");
        let ledger = o["ledger"].as_array().expect("ledger");
        assert_eq!(ledger.len(), 20, "{ctx}: at most 20 ledger entries");
        for (n, entry) in ledger.iter().enumerate() {
            let i = 25 - i64::try_from(n).expect("small");
            assert_eq!(entry["amount_usd"], UsdAmount::from_micros(i).to_string(), "{ctx}: entry {n} is top-up {i}");
            assert_eq!(entry["kind"], "topup", "{ctx}");
            for amount_field in ["amount_usd", "balance_after"] {
                let text = entry[amount_field].as_str().unwrap_or_default();
                assert!(is_usd_amount(text), "{ctx}: ledger {amount_field} {text:?}");
            }
            assert!(entry["created_at"].as_str().is_some_and(is_date_time), "{ctx}: ledger created_at");
        }
        assert_eq!(ledger[0]["balance_after"], balance, "{ctx}: newest entry ends at the balance");
        let ids: Vec<i64> = ledger.iter().map(|e| e["id"].as_i64().expect("ledger id")).collect();
        assert!(ids.windows(2).all(|w| w[0] > w[1]), "{ctx}: newest first: {ids:?}");

        // Stats count the caller's tasks only.
        let base = domain::Clock::now(&domain::SystemClock).millis();
        let statuses = [
            TaskStatus::Succeeded,
            TaskStatus::Succeeded,
            TaskStatus::Queued,
            TaskStatus::Processing,
            TaskStatus::Failed,
        ];
        for (i, status) in statuses.into_iter().enumerate() {
            server.insert_task(task(&user.id, status, base + i64::try_from(i).expect("small"))).await;
        }
        server.insert_task(task(&other.id, TaskStatus::Queued, base)).await;
        let o = server.get(OVERVIEW, Some(&key.secret)).await.json;
        assert_eq!(o["stats"]["total"], 5, "{ctx}: stats.total");
        assert_eq!(o["stats"]["succeeded"], 2, "{ctx}: stats.succeeded");
        assert_eq!(o["stats"]["active"], 2, "{ctx}: stats.active");
        assert!(o["stats"]["spent_usd"].as_str().is_some_and(is_usd_amount), "{ctx}: spent_usd");

        server.gateway.set_maintenance(true).await.expect("maintenance on");
        assert_eq!(server.get(OVERVIEW, Some(&key.secret)).await.json["maintenance"], true, "{ctx}: maintenance on");
        server.gateway.set_maintenance(false).await.expect("maintenance off");
        assert_eq!(server.get(OVERVIEW, Some(&key.secret)).await.json["maintenance"], false, "{ctx}: maintenance off");
        server.stop().await;
    }
}
