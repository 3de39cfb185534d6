//! Integration tests of `POST /api/v1/images/generations`: the real server on `127.0.0.1:0` over real
//! SQLite (and PostgreSQL when `TEST_DATABASE_URL` is set), the upstream simulator behind it over real
//! HTTP. Every bound of the spec's three branches just inside and just outside (never a 5xx, refusals move
//! no money), the charges of DESIGN §3 recomputed here from the spec's rates, refunds on every upstream
//! fault, the answer's shape, body limits and `Idempotency-Key`. After each scenario the books balance.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Env, Reply, amount, databases, unique};
use domain::Scope;
use serde_json::{Value, json};

const IMAGES: &str = "/api/v1/images/generations";
const AUDIO: &str = "/api/v1/audio/generations";
const V45: &str = "Vendor-Imagegen-4.5";
const LITE: &str = "Vendor-Imagegen-5.0-lite";
const PRO: &str = "Vendor-Imagegen-5.0-pro";

/// Upstream timeout for the tests (the `timeout` fault waits for it).
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
const SCOPES: &[Scope] = &[Scope::ImageCreate, Scope::AudioCreate, Scope::TaskRead];

/// The spec's image rates, micro-USD per image.
const PIECE_45: i64 = 36_000;
const PIECE_LITE: i64 = 31_500;
const PRO_INPUT: i64 = 3_000;
const PRO_SMALL: i64 = 45_000;
const PRO_LARGE: i64 = 90_000;
const PRO_SMALL_MAX_PIXELS: u64 = 2_360_000;

/// 30 MiB, the decoded limit of one reference.
const MAX_DECODED: usize = 30 * 1024 * 1024;

/// A request for `model` with `prompt` and the `extra` fields.
fn body(model: &str, prompt: &str, extra: Value) -> Value {
    let mut b = json!({"model": model, "prompt": prompt});
    if let (Some(o), Value::Object(e)) = (b.as_object_mut(), extra) {
        o.extend(e);
    }
    b
}

/// `n` distinct https references.
fn urls(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("https://images.example.com/ref-{i}.png")).collect()
}

/// A `data:image/png;base64,` reference that decodes to exactly `bytes` bytes.
fn data_uri(bytes: usize) -> String {
    let mut b64 = "A".repeat(bytes / 3 * 4);
    match bytes % 3 {
        1 => b64.push_str("AA=="),
        2 => b64.push_str("AAA="),
        _ => {}
    }
    format!("data:image/png;base64,{b64}")
}

/// How many references the request sends.
fn reference_count(request: &Value) -> u64 {
    match &request["image"] {
        Value::String(_) => 1,
        Value::Array(items) => items.len() as u64,
        _ => 0,
    }
}

/// `(W, H)` of a `WxH` size.
fn pixels(size: &str) -> u64 {
    let (w, h) = size.split_once(['x', 'X']).unwrap_or_else(|| panic!("size {size:?} is not WxH"));
    w.parse::<u64>().expect("width") * h.parse::<u64>().expect("height")
}

/// The charge of an answer recomputed from the spec's rates: successful items only; 5.0-pro adds its
/// references and prices each item by the pixels of its reported size; nothing generated costs nothing.
fn spec_charge(model: &str, answer: &Value, references: u64) -> i64 {
    let items: Vec<&Value> =
        answer["data"].as_array().map(|d| d.iter().filter(|i| i.get("error").is_none()).collect()).unwrap_or_default();
    let n = items.len() as i64;
    match model {
        V45 => n * PIECE_45,
        LITE => n * PIECE_LITE,
        PRO if n == 0 => 0,
        PRO => {
            let outputs: i64 = items
                .iter()
                .map(|i| {
                    let size = i["size"].as_str().unwrap_or_else(|| panic!("item without size: {i}"));
                    if pixels(size) <= PRO_SMALL_MAX_PIXELS { PRO_SMALL } else { PRO_LARGE }
                })
                .sum();
            references as i64 * PRO_INPUT + outputs
        }
        other => panic!("no rates for {other}"),
    }
}

/// Checks an ImageGenerationResponse: `model`, `created`, every `data` item (`url` xor `b64_json`, `size`,
/// `output_format`; or `error` with `code` and `message`), `usage`, `task_id` (and the header), `billing`.
fn assert_image_answer(r: &Reply, model: &str, references: u64, ctx: &str) {
    assert_eq!(r.status, 200, "{ctx}: {}", String::from_utf8_lossy(&r.raw));
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{ctx}");
    let a = &r.json;
    assert_eq!(a["model"], model, "{ctx}: the public model name");
    assert!(a["created"].is_i64(), "{ctx}: created: {a}");
    let data = a["data"].as_array().unwrap_or_else(|| panic!("{ctx}: no data array: {a}"));
    assert!(!data.is_empty(), "{ctx}: empty data");
    let mut generated = 0;
    for (i, item) in data.iter().enumerate() {
        let ctx = format!("{ctx}: data[{i}]");
        if let Some(error) = item.get("error") {
            assert!(error["code"].is_string() && error["message"].is_string(), "{ctx}: {item}");
            assert!(item.get("url").is_none() && item.get("b64_json").is_none(), "{ctx}: {item}");
            continue;
        }
        generated += 1;
        let url = item.get("url").and_then(Value::as_str);
        let b64 = item.get("b64_json").and_then(Value::as_str);
        assert!(url.is_some() != b64.is_some(), "{ctx}: exactly one of url and b64_json: {item}");
        if let Some(url) = url {
            assert!(url.starts_with("http://") || url.starts_with("https://"), "{ctx}: {url}");
        }
        if let Some(b64) = b64 {
            assert!(!b64.is_empty() && b64.len().is_multiple_of(4) && !b64.starts_with("data:"), "{ctx}: raw Base64");
        }
        assert!(pixels(item["size"].as_str().unwrap_or_default()) > 0, "{ctx}: size {item}");
        assert!(matches!(item["output_format"].as_str(), Some("png" | "jpeg")), "{ctx}: output_format {item}");
    }
    let usage = &a["usage"];
    for key in ["generated_images", "input_images", "output_tokens", "total_tokens"] {
        assert!(usage[key].is_u64(), "{ctx}: usage.{key} is an integer: {usage}");
    }
    assert_eq!(usage["generated_images"], generated, "{ctx}: usage counts the successful items");
    assert_eq!(usage["input_images"], references, "{ctx}: usage counts the references");
    let task_id = a["task_id"].as_str().unwrap_or_else(|| panic!("{ctx}: task_id: {a}"));
    assert_eq!(r.header("x-svc-task-id"), Some(task_id), "{ctx}: the task header names the same task");
    let billing = &a["billing"];
    assert_eq!(billing["currency"], "USD", "{ctx}");
    assert!(billing["pricing_version_id"].as_str().is_some_and(|v| v.starts_with(model)), "{ctx}: {billing}");
    amount(&billing["estimated_amount"], ctx);
    amount(&billing["actual_amount"], ctx);
    amount(&billing["balance_after"], ctx);
}

/// Posts `request`, checks the answer's shape and that it was charged exactly the spec's amount (or
/// refunded when nothing was generated), the balance moved by that amount, and the task agrees.
/// Returns the answer.
async fn generate_and_check(env: &Env, request: &Value, ctx: &str) -> Value {
    let model = request["model"].as_str().unwrap_or_default();
    let references = reference_count(request);
    let before = env.balance().await;
    let r = env.post(IMAGES, request).await;
    assert_image_answer(&r, model, references, ctx);
    let billing = &r.json["billing"];
    let expected = spec_charge(model, &r.json, references);
    let actual = amount(&billing["actual_amount"], ctx);
    let generated = r.json["usage"]["generated_images"].as_u64().unwrap_or(0);
    let (status, task_status) = if generated > 0 { ("settled", "succeeded") } else { ("refunded", "failed") };
    assert_eq!(billing["status"], status, "{ctx}: {billing}");
    assert_eq!(actual.micros(), expected, "{ctx}: actual vs the spec's rates");
    assert_eq!(billing["actual_amount_microusd"], expected, "{ctx}");
    assert!(actual <= amount(&billing["estimated_amount"], ctx), "{ctx}: within the reservation");
    let after = env.balance().await;
    assert_eq!(before.checked_sub(actual).ok(), Some(after), "{ctx}: the balance moved by exactly the charge");
    assert_eq!(amount(&billing["balance_after"], ctx), after, "{ctx}: balance_after");
    let task = env.task(r.json["task_id"].as_str().unwrap_or_default()).await;
    assert_eq!(task["kind"], "image", "{ctx}");
    assert_eq!(task["model"], model, "{ctx}");
    assert_eq!(task["status"], task_status, "{ctx}: {task}");
    assert_eq!(task["billing"]["status"], status, "{ctx}");
    assert_eq!(amount(&task["billing"]["actual_amount"], ctx), actual, "{ctx}: task billing");
    let mode = if references == 0 { Some("text") } else { task["input_mode"].as_str() };
    assert_eq!(task["input_mode"].as_str(), mode, "{ctx}");
    assert!(matches!(mode, Some("text" | "url" | "base64" | "mixed")), "{ctx}: input_mode {mode:?}");
    let media = (references > 0).then_some("image");
    assert_eq!(task["media_type"].as_str(), media, "{ctx}: media_type");
    r.json
}

/// What a bounds case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// 200, charged at the spec's rates.
    Ok,
    /// 400 `invalid_request`.
    Invalid,
    /// 413 `request_too_large`.
    TooLarge,
}

/// One request of the bounds table.
struct Case {
    what: String,
    request: Value,
    want: Want,
}

fn case(what: impl Into<String>, request: Value, want: Want) -> Case {
    Case { what: what.into(), request, want }
}

/// The spec's per-model numbers the common cases need.
struct Bounds {
    model: &'static str,
    max_prompt: usize,
    max_refs: usize,
}

/// Cases every branch has: prompt length, references, the common fields, foreign fields.
fn common_cases(b: &Bounds) -> Vec<Case> {
    use Want::{Invalid, Ok, TooLarge};
    let m = b.model;
    let r = |extra: Value| body(m, "a lighthouse at dusk", extra);
    let mut no_prompt = r(json!({}));
    no_prompt.as_object_mut().map(|o| o.remove("prompt"));
    vec![
        // Characters, not bytes: 'é' is two bytes.
        case("prompt at the maximum (multi-byte)", body(m, &"é".repeat(b.max_prompt), json!({})), Ok),
        case("prompt one character over", body(m, &"a".repeat(b.max_prompt + 1), json!({})), Invalid),
        case("prompt of one character", body(m, "a", json!({})), Ok),
        case("empty prompt", body(m, "", json!({})), Invalid),
        case("no prompt", no_prompt, Invalid),
        case("prompt not a string", r(json!({"prompt": 7})), Invalid),
        case("references at the maximum", r(json!({"image": urls(b.max_refs)})), Ok),
        case("one reference over the maximum", r(json!({"image": urls(b.max_refs + 1)})), Invalid),
        case("empty reference array", r(json!({"image": []})), Invalid),
        case("one reference as a string", r(json!({"image": urls(1)[0]})), Ok),
        case("http reference", r(json!({"image": ["http://images.example.com/a.png"]})), Invalid),
        case("data URI of a type not allowed", r(json!({"image": ["data:image/svg+xml;base64,AAAA"]})), Invalid),
        case("data URI that is not Base64", r(json!({"image": ["data:image/png;base64,@@@@"]})), Invalid),
        case("reference of exactly 30 MiB decoded", r(json!({"image": [data_uri(MAX_DECODED)]})), Ok),
        case("reference one byte over 30 MiB", r(json!({"image": [data_uri(MAX_DECODED + 1)]})), TooLarge),
        case("response_format b64_json", r(json!({"response_format": "b64_json"})), Ok),
        case("response_format unknown", r(json!({"response_format": "base64"})), Invalid),
        case("watermark false", r(json!({"watermark": false})), Ok),
        case("watermark not a boolean", r(json!({"watermark": "no"})), Invalid),
        case("stream false", r(json!({"stream": false})), Ok),
        case("stream true", r(json!({"stream": true})), Invalid),
        case("explicit null", r(json!({"size": null})), Invalid),
        case("field of no branch", r(json!({"tools": []})), Invalid),
        case("OpenAI's n of one", r(json!({"n": 1})), Ok),
        case("OpenAI's n above one", r(json!({"n": 2})), Invalid),
        case("unknown nested field", r(json!({"optimize_prompt_options": {"mode": "standard", "x": 1}})), Invalid),
        case("optimize_prompt_options.mode standard", r(json!({"optimize_prompt_options": {"mode": "standard"}})), Ok),
        case("unknown model", body("Vendor-Imagegen-9.9", "a", json!({})), Invalid),
        case("size malformed", r(json!({"size": "2048*2048"})), Invalid),
        case("size with six digits", r(json!({"size": "002048x2048"})), Invalid),
        case("size 99999x99999", r(json!({"size": "99999x99999"})), Invalid),
        case("size 00x00", r(json!({"size": "00x00"})), Invalid),
        case("size not a string", r(json!({"size": 2048})), Invalid),
        case("reference not a string", r(json!({"image": [1]})), Invalid),
        case("image an object", r(json!({"image": {"url": "https://a.example.com/a.png"}})), Invalid),
        case("seed far out of range", r(json!({"seed": -9_223_372_036_854_775_808_i64})), Invalid),
        case("model not a string", json!({"model": 45, "prompt": "a"}), Invalid),
    ]
}

/// The custom-size and named-size cases of 4.5 and 5.0-lite (pixels 3,686,400..16,777,216).
fn large_size_cases(m: &str) -> Vec<Case> {
    use Want::{Invalid, Ok};
    let s = |size: &str, want| case(format!("size {size}"), body(m, "a harbour", json!({"size": size})), want);
    vec![
        s("2K", Ok),
        s("4K", Ok),
        s("1K", Invalid),
        s("1920x1920", Ok),      // 3,686,400 pixels: the minimum
        s("1919x1921", Invalid), // 3,686,399
        s("4096x4096", Ok),      // 16,777,216: the maximum
        s("4096x4097", Invalid), // 16,781,312
        s("512x8192", Ok),       // 1:16 exactly
        s("511x8192", Invalid),
        s("8192x512", Ok), // 16:1 exactly
        s("8192x511", Invalid),
        s("2048X2048", Ok),
    ]
}

/// The sequential-generation cases of 4.5 and 5.0-lite.
fn sequential_cases(m: &str) -> Vec<Case> {
    use Want::{Invalid, Ok};
    let seq = |refs: usize, max: Value| {
        let mut extra =
            json!({"sequential_image_generation": "auto", "sequential_image_generation_options": {"max_images": max}});
        if refs > 0 {
            extra["image"] = json!(urls(refs));
        }
        body(m, "a storyboard", extra)
    };
    vec![
        case("max_images 15 without references", seq(0, json!(15)), Ok),
        case("max_images 16", seq(0, json!(16)), Invalid),
        case("max_images 0", seq(0, json!(0)), Invalid),
        case("max_images 1", seq(0, json!(1)), Ok),
        case("14 references + max_images 1", seq(14, json!(1)), Ok),
        case("14 references + max_images 2", seq(14, json!(2)), Invalid),
        case("max_images not an integer", seq(0, json!(2.5)), Invalid),
        case("sequential disabled", body(m, "a", json!({"sequential_image_generation": "disabled"})), Ok),
        case("sequential unknown mode", body(m, "a", json!({"sequential_image_generation": "on"})), Invalid),
        case("auto without options", body(m, "a", json!({"sequential_image_generation": "auto"})), Ok),
    ]
}

/// Every case of `model`'s branch.
fn cases(model: &'static str) -> Vec<Case> {
    use Want::{Invalid, Ok};
    let r = |extra: Value| body(model, "a lighthouse at dusk", extra);
    match model {
        V45 => {
            let mut all = common_cases(&Bounds { model, max_prompt: 12_000, max_refs: 14 });
            all.extend(large_size_cases(model));
            all.extend(sequential_cases(model));
            all.extend([
                case("size 3K (not 4.5's)", r(json!({"size": "3K"})), Invalid),
                case("output_format (not in 4.5's branch)", r(json!({"output_format": "png"})), Invalid),
                case("optimize_prompt (not in 4.5's branch)", r(json!({"optimize_prompt": true})), Invalid),
                case("seed (not in 4.5's branch)", r(json!({"seed": 1})), Invalid),
                case("mode fast (only standard)", r(json!({"optimize_prompt_options": {"mode": "fast"}})), Invalid),
                case(
                    "thinking (not in 4.5's branch)",
                    r(json!({"optimize_prompt_options": {"thinking": "auto"}})),
                    Invalid,
                ),
            ]);
            all
        }
        LITE => {
            let mut all = common_cases(&Bounds { model, max_prompt: 12_000, max_refs: 14 });
            all.extend(large_size_cases(model));
            all.extend(sequential_cases(model));
            all.extend([
                case("size 3K", r(json!({"size": "3K"})), Ok),
                case("output_format png", r(json!({"output_format": "png"})), Ok),
                case("output_format jpeg", r(json!({"output_format": "jpeg"})), Ok),
                case("output_format webp", r(json!({"output_format": "webp"})), Invalid),
                case("optimize_prompt (not in 5.0-lite's branch)", r(json!({"optimize_prompt": false})), Invalid),
                case("seed (not in 5.0-lite's branch)", r(json!({"seed": -1})), Invalid),
                case("mode fast (only standard)", r(json!({"optimize_prompt_options": {"mode": "fast"}})), Invalid),
                case(
                    "thinking (not in 5.0-lite's branch)",
                    r(json!({"optimize_prompt_options": {"thinking": "auto"}})),
                    Invalid,
                ),
            ]);
            all
        }
        PRO => {
            let mut all = common_cases(&Bounds { model, max_prompt: 400_000, max_refs: 10 });
            let s = |size: &str, want| case(format!("size {size}"), r(json!({"size": size})), want);
            all.extend([
                s("1K", Ok),
                s("2K", Ok),
                s("4K", Invalid),
                s("3K", Invalid),
                s("960x960", Ok),        // 921,600 pixels: the minimum
                s("944x976", Invalid),   // 921,344
                s("1296x3568", Ok),      // 4,624,128: the largest multiple-of-16 size within 4,624,220
                s("2144x2160", Invalid), // 4,631,040
                s("256x4096", Ok),       // 1:16 exactly
                s("240x4096", Invalid),
                s("4096x256", Ok), // 16:1 exactly
                s("4096x240", Invalid),
                s("1536x1536", Ok),
                s("1536x1544", Invalid), // 1544 is not a multiple of 16
                s("1544x1536", Invalid),
                case(
                    "sequential (not in 5.0-pro's branch)",
                    r(json!({"sequential_image_generation": "disabled"})),
                    Invalid,
                ),
                case(
                    "sequential options (not in 5.0-pro's branch)",
                    r(json!({"sequential_image_generation_options": {"max_images": 1}})),
                    Invalid,
                ),
                case("output_format png", r(json!({"output_format": "png"})), Ok),
                case("output_format gif", r(json!({"output_format": "gif"})), Invalid),
                case("seed -1", r(json!({"seed": -1})), Ok),
                case("seed -2", r(json!({"seed": -2})), Invalid),
                case("seed 2147483647", r(json!({"seed": 2_147_483_647_i64})), Ok),
                case("seed 2147483648", r(json!({"seed": 2_147_483_648_i64})), Invalid),
                case("seed not an integer", r(json!({"seed": 1.5})), Invalid),
                case("optimize_prompt false", r(json!({"optimize_prompt": false})), Ok),
                case(
                    "options fast + thinking enabled",
                    r(json!({"optimize_prompt_options": {"mode": "fast", "thinking": "enabled"}})),
                    Ok,
                ),
                case("options mode unknown", r(json!({"optimize_prompt_options": {"mode": "turbo"}})), Invalid),
                case("options thinking unknown", r(json!({"optimize_prompt_options": {"thinking": "x"}})), Invalid),
            ]);
            all
        }
        other => panic!("no cases for {other}"),
    }
}

/// Runs every case of `model` and checks each answer and the books after it.
async fn run_cases(env: &Env, model: &'static str) {
    for c in cases(model) {
        let ctx = env.ctx(&format!("{model}: {}", c.what));
        let (balance, entries, tasks) = env.assert_books(&ctx).await;
        if c.want == Want::Ok {
            let answer = generate_and_check(env, &c.request, &ctx).await;
            if let Some(size) = c.request["size"].as_str().filter(|s| s.contains(['x', 'X'])) {
                let sent = size.replace('X', "x");
                for item in answer["data"].as_array().into_iter().flatten() {
                    assert_eq!(item["size"], sent.as_str(), "{ctx}: the custom size reached the upstream");
                }
            }
            let (_, entries_after, tasks_after) = env.assert_books(&ctx).await;
            assert_eq!((entries_after, tasks_after), (entries + 2, tasks + 1), "{ctx}: reserve + settle, one task");
            continue;
        }
        let r = env.post(IMAGES, &c.request).await;
        assert!(r.status < 500, "{ctx}: never a 5xx: {} {}", r.status, String::from_utf8_lossy(&r.raw));
        match c.want {
            Want::Invalid => r.assert_error(400, "invalid_request", &ctx),
            _ => r.assert_error(413, "request_too_large", &ctx),
        }
        let after = env.assert_books(&ctx).await;
        assert_eq!(after, (balance, entries, tasks), "{ctx}: a refused request moves no money and records no task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_branch_bound_just_inside_and_just_outside() {
    for db in databases() {
        let env = Env::new(&db, "1000", UPSTREAM_TIMEOUT, SCOPES).await;
        for model in [V45, LITE, PRO] {
            run_cases(&env, model).await;
        }
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sequential_45_with_a_failed_item_is_charged_for_eleven() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let request = |max: u64| {
            body(
                V45,
                "a comic strip in twelve panels [sim:fail_image=3]",
                json!({
                    "image": urls(3),
                    "sequential_image_generation": "auto",
                    "sequential_image_generation_options": {"max_images": max},
                }),
            )
        };
        let (start, entries, _) = env.assert_books("start").await;
        let r = env.post(IMAGES, &request(13)).await;
        r.assert_error(400, "invalid_request", &env.ctx("3 references + 13"));
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("15"), "{}: the message names the bound: {message}", env.ctx("13"));
        assert_eq!(env.assert_books("after 13").await, (start, entries, 0), "{}", env.ctx("13 moved nothing"));

        let ctx = env.ctx("3 references + 12");
        let a = generate_and_check(&env, &request(12), &ctx).await;
        let data = a["data"].as_array().expect("data");
        assert_eq!(data.len(), 12, "{ctx}: twelve items");
        assert_eq!(data[3]["error"]["code"], "OutputImageSensitiveContentDetected", "{ctx}: item 3 failed");
        assert!(data.iter().enumerate().all(|(i, d)| (i == 3) == d.get("error").is_some()), "{ctx}: only item 3");
        assert_eq!(a["usage"]["generated_images"], 11, "{ctx}");
        assert_eq!(a["usage"]["input_images"], 3, "{ctx}");
        let billing = &a["billing"];
        assert_eq!(billing["status"], "settled", "{ctx}");
        assert_eq!(billing["actual_amount_microusd"], 11 * PIECE_45, "{ctx}: 11 × 36,000");
        assert_eq!(billing["actual_amount"], "0.396000", "{ctx}");
        assert_eq!(billing["estimated_amount_microusd"], 12 * PIECE_45, "{ctx}: the hold was all twelve");
        let task = env.task(a["task_id"].as_str().expect("task id")).await;
        assert_eq!((task["kind"].as_str(), task["status"].as_str()), (Some("image"), Some("succeeded")), "{ctx}");
        assert_eq!(task["input_mode"], "url", "{ctx}");
        assert_eq!(task["media_type"], "image", "{ctx}");
        let (end, _, tasks) = env.assert_books("after 12").await;
        assert_eq!(start.checked_sub(end).map(|d| d.micros()).ok(), Some(11 * PIECE_45), "{ctx}");
        assert_eq!(tasks, 1, "{ctx}: one task");
        assert_eq!(env.sim.requests("/api/v3/images/generations"), 1, "{ctx}: the 400 never reached the upstream");
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pro_output_tier_follows_the_pixel_count() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let refs = json!([data_uri(64), urls(1)[0]]);
        for (size, expected) in [("1536x1536", 2 * PRO_INPUT + PRO_SMALL), ("1552x1552", 2 * PRO_INPUT + PRO_LARGE)] {
            let ctx = env.ctx(&format!("5.0-pro {size} + 2 references"));
            let request = body(PRO, "a portrait", json!({"size": size, "image": refs}));
            let a = generate_and_check(&env, &request, &ctx).await;
            assert_eq!(a["billing"]["actual_amount_microusd"], expected, "{ctx}");
            assert_eq!(a["billing"]["estimated_amount_microusd"], expected, "{ctx}: the hold is this exact case");
            assert_eq!(a["data"][0]["size"], size, "{ctx}");
            assert_eq!(a["data"][0]["output_format"], "jpeg", "{ctx}: 5.0-pro's default output_format");
            let task = env.task(a["task_id"].as_str().expect("task id")).await;
            assert_eq!(task["input_mode"], "mixed", "{ctx}: one URL and one data URI");
        }
        // Without a size, 5.0-pro defaults to 2K (2048x2048, the dearer tier).
        let a = generate_and_check(&env, &body(PRO, "a default", json!({})), &env.ctx("pro default size")).await;
        assert_eq!(a["data"][0]["size"], "2048x2048", "{}", env.ctx("default 2K"));
        assert_eq!(a["billing"]["actual_amount_microusd"], PRO_LARGE, "{}", env.ctx("default 2K"));
        env.assert_books("pro tiers").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_generated_is_refunded() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let (start, entries, _) = env.assert_books("start").await;
        for model in [V45, PRO] {
            let ctx = env.ctx(&format!("{model}: every item failed"));
            let request = body(model, "a forbidden subject [sim:fault=fail_all]", json!({"image": urls(2)}));
            let a = generate_and_check(&env, &request, &ctx).await;
            assert_eq!(a["billing"]["status"], "refunded", "{ctx}");
            assert_eq!(a["billing"]["actual_amount"], "0.000000", "{ctx}");
            assert_eq!(a["usage"]["generated_images"], 0, "{ctx}");
            let task = env.task(a["task_id"].as_str().expect("task id")).await;
            assert_eq!(task["status"], "failed", "{ctx}");
            assert_eq!(task["error_code"], "OutputImageSensitiveContentDetected", "{ctx}: {task}");
        }
        let (end, entries_after, tasks) = env.assert_books("after refunds").await;
        assert_eq!(end, start, "{}: the balance is unchanged", env.server.label);
        assert_eq!(entries_after, entries + 4, "{}: reserve + refund per call", env.server.label);
        assert_eq!(tasks, 2, "{}", env.server.label);
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upstream_faults_are_502_and_refunded() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let (start, _, _) = env.assert_books("start").await;
        let faults = ["status_400", "status_429", "status_500", "status_503", "timeout", "malformed", "drop"];
        for fault in faults {
            let ctx = env.ctx(&format!("fault {fault}"));
            let r = env.post(IMAGES, &body(LITE, &format!("a fault [sim:fault={fault}]"), json!({}))).await;
            let message = r.json["error"]["message"].as_str().unwrap_or_default();
            if fault == "status_400" {
                // The upstream refused the caller's own request: the caller's 400, with its reason.
                r.assert_error(400, "invalid_request", &ctx);
                assert!(message.starts_with("the upstream refused the request: "), "{ctx}: {message}");
                assert!(message.contains("refunded"), "{ctx}: {message}");
            } else {
                r.assert_error(502, "upstream_request_failed", &ctx);
                assert!(message.contains("refunded") && message.contains("retry"), "{ctx}: {message}");
            }
            assert_eq!(env.balance().await, start, "{ctx}: refunded");
        }
        let tasks = env.tasks().await;
        assert_eq!(tasks.len(), faults.len(), "{}: one task per failed call", env.server.label);
        for t in &tasks {
            let ctx = env.ctx(&format!("task {}", t["id"]));
            assert_eq!(t["kind"], "image", "{ctx}");
            assert_eq!(t["status"], "failed", "{ctx}");
            assert_eq!(t["error_code"], "upstream_request_failed", "{ctx}");
            assert_eq!(t["billing"]["status"], "refunded", "{ctx}");
        }
        // An answer without `usage` is still charged on its items.
        let a =
            generate_and_check(&env, &body(LITE, "no usage [sim:fault=empty_usage]", json!({})), "empty_usage").await;
        assert_eq!(a["billing"]["actual_amount_microusd"], PIECE_LITE, "{}", env.ctx("empty_usage"));
        env.assert_books("after faults").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answers_carry_urls_or_base64_as_asked() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let ctx = env.ctx("b64_json png");
        let request = body(LITE, "a tile", json!({"response_format": "b64_json", "output_format": "png"}));
        let a = generate_and_check(&env, &request, &ctx).await;
        let item = &a["data"][0];
        assert!(item.get("url").is_none(), "{ctx}: {item}");
        assert!(item["b64_json"].as_str().is_some_and(|b| b.starts_with("iVBOR")), "{ctx}: a PNG: {item}");
        assert_eq!(item["output_format"], "png", "{ctx}");
        let ctx = env.ctx("url");
        let a = generate_and_check(&env, &body(V45, "a tile", json!({})), &ctx).await;
        let item = &a["data"][0];
        assert!(item.get("b64_json").is_none() && item["url"].is_string(), "{ctx}: {item}");
        env.assert_books("shapes").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_size_scope_and_balance_are_checked_first() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let (start, entries, _) = env.assert_books("start").await;
        let bytes = serde_json::to_vec(&body(V45, "a", json!({}))).expect("json");
        for content_type in ["text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded"] {
            let r = env.server.post(IMAGES, Some(&env.key), content_type, &bytes).await;
            r.assert_error(415, "unsupported_content_type", &env.ctx(content_type));
        }
        // The documented whole-body limit of an image request is 600 MiB.
        let head = env.server.declare_body(IMAGES, &env.key, 600 * 1024 * 1024 + 1).await;
        assert!(head.starts_with("HTTP/1.1 413"), "{}: {head}", env.ctx("declared length"));
        assert!(head.contains("request_too_large"), "{head}");
        let weak = env.server.key(&env.user.id, &[Scope::AudioCreate, Scope::LanguageCreate]).await.secret;
        let r = env.server.post_json(IMAGES, Some(&weak), &body(V45, "a", json!({}))).await;
        r.assert_error(401, "invalid_api_key", &env.ctx("key without image:create"));
        let r = env.server.post(IMAGES, Some(&env.key), "application/json", b"{\"model\": ").await;
        r.assert_error(400, "invalid_request", &env.ctx("malformed JSON"));
        let r = env.server.post(IMAGES, Some(&env.key), "application/json", b"[1]").await;
        r.assert_error(400, "invalid_request", &env.ctx("a JSON array"));
        let r = env.post(IMAGES, &body("LangB-2.0-pro", "a", json!({}))).await;
        r.assert_error(400, "invalid_request", &env.ctx("a language model"));
        assert_eq!(env.assert_books("refusals").await, (start, entries, 0), "{}", env.ctx("nothing moved"));

        // 402 names the reservation: one 4.5 image is 0.036000.
        let poor = env.server.user("0.035999").await;
        let poor_key = env.server.key(&poor.id, SCOPES).await.secret;
        let r = env.server.post_json(IMAGES, Some(&poor_key), &body(V45, "a", json!({}))).await;
        r.assert_error(402, "insufficient_balance", &env.ctx("402"));
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("0.036000"), "{}: {message}", env.ctx("402 names the amount"));
        let (entries_poor, sum) = env.server.ledger(&poor.id).await;
        assert_eq!((entries_poor.len(), sum.micros()), (1, 35_999), "{}: only the top-up", env.ctx("402"));

        env.server.gateway.set_maintenance(true).await.expect("maintenance on");
        let r = env.post(IMAGES, &body(V45, "a", json!({}))).await;
        r.assert_error(503, "provider_not_configured", &env.ctx("maintenance"));
        env.server.gateway.set_maintenance(false).await.expect("maintenance off");
        assert_eq!(env.assert_books("after 402/503").await, (start, entries, 0), "{}", env.ctx("nothing moved"));
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_retries_replay_the_first_answer_and_bill_once() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let idem = unique("idem-img-");
        let headers = [("idempotency-key", idem.as_str())];
        let request = body(PRO, "a replayed picture", json!({"size": "1K", "image": urls(1)}));
        let first = env.server.post_json_with(IMAGES, Some(&env.key), &headers, &request).await;
        assert_eq!(first.status, 200, "{}: {}", env.server.label, first.json);
        let charged = first.json["billing"]["actual_amount_microusd"].as_i64().expect("charged");
        assert_eq!(charged, PRO_INPUT + PRO_SMALL, "{}", env.server.label);
        let after_first = env.balance().await;
        let second = env.server.post_json_with(IMAGES, Some(&env.key), &headers, &request).await;
        assert_eq!(second.status, 200, "{}", env.server.label);
        assert_eq!(second.header("idempotent-replayed"), Some("true"), "{}", env.server.label);
        assert_eq!(second.json, first.json, "{}: the replay is the first answer", env.server.label);
        assert_eq!(env.balance().await, after_first, "{}: billed once", env.server.label);
        assert_eq!(env.sim.requests("/api/v3/images/generations"), 1, "{}: one upstream call", env.server.label);

        let other = body(PRO, "another picture", json!({"size": "1K"}));
        let conflict = env.server.post_json_with(IMAGES, Some(&env.key), &headers, &other).await;
        conflict.assert_error(409, "idempotency_conflict", &env.ctx("another body"));
        // The same key on the audio route is another claim (keys are scoped by route).
        let speech = json!({"model": "AudioGen-1.0", "text_prompt": "hello"});
        let audio = env.server.post_json_with(AUDIO, Some(&env.key), &headers, &speech).await;
        assert_eq!(audio.status, 200, "{}: {}", env.ctx("same key, audio route"), audio.json);
        assert_eq!(audio.header("idempotent-replayed"), None, "{}", env.server.label);
        let (_, _, tasks) = env.assert_books("idempotency").await;
        assert_eq!(tasks, 2, "{}: one image task and one audio task", env.server.label);
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sequential_calls_never_overdraw() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        // Room for exactly five holds of twelve images; each call is charged for eleven.
        let hold = 12 * PIECE_45;
        let start_micros = 5 * hold;
        let balance = format!("{}.{:06}", start_micros / 1_000_000, start_micros % 1_000_000);
        let user = env.server.user(&balance).await;
        let key = env.server.key(&user.id, SCOPES).await.secret;
        let request = body(
            V45,
            "a storyboard [sim:fail_image=3] [sim:latency_ms=200]",
            json!({"image": urls(3), "sequential_image_generation": "auto",
                   "sequential_image_generation_options": {"max_images": 12}}),
        );
        let bytes = serde_json::to_vec(&request).expect("json");
        let server = &env.server;
        let calls: Vec<_> = (0..12).map(|_| server.post(IMAGES, Some(&key), "application/json", &bytes)).collect();
        let replies = tokio::time::timeout(Duration::from_secs(30), common::join_all(calls)).await.expect("in 30 s");
        let ok = replies.iter().filter(|r| r.status == 200).count() as i64;
        for r in &replies {
            if r.status != 200 {
                r.assert_error(402, "insufficient_balance", &env.ctx("concurrent"));
            }
        }
        assert!((5..12).contains(&ok), "{}: {ok} accepted", env.server.label);
        let (after, entries) = env.server.assert_ledger(&user.id, &env.ctx("concurrent")).await;
        assert_eq!(after.micros(), start_micros - ok * 11 * PIECE_45, "{}: eleven images per call", env.server.label);
        assert!(!after.is_negative(), "{}", env.server.label);
        assert_eq!(entries as i64, 1 + 2 * ok, "{}: top-up + reserve/settle per call", env.server.label);
        env.server.stop().await;
    }
}
