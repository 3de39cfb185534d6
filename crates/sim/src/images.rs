//! Image generation, `POST /api/v3/images/generations` (upstream-wire §3, non-streaming).
//!
//! A request needs `Authorization: Bearer <non-empty>` (else 401 `AuthenticationError`) and a
//! JSON object body with a string `model` and a string `prompt`; every other check below
//! answers 400 `InvalidParameter` naming the parameter, in the platform error body.
//!
//! # Rules
//!
//! - References: `image` is one string (1) or an array (its length), at most 14;
//!   `usage.input_images` = that number (0 without `image`).
//! - Count: with `sequential_image_generation: "auto"`,
//!   min(`sequential_image_generation_options.max_images` (an integer 1..15, default 15),
//!   15 − references); otherwise 1.
//! - Size: `1K` / `2K` / `3K` / `4K` → 1024x1024 / 2048x2048 / 3072x3072 / 4096x4096; `<W>x<H>`
//!   (`x` or `X`, each side 1..=16384) → exactly that; absent → 2048x2048.
//! - `response_format`: `url` (default) or `b64_json`; `output_format`: `jpeg` (default) or `png`.
//! - Each item: `url` = `http://<sim host>/files/images/<id>/<i>.<png|jpeg>` (served, see
//!   [`super::files`]) or `b64_json` = Base64 of that tiny image, plus `size` (`"<W>x<H>"`) and
//!   `output_format`.
//! - `usage`: `generated_images` = successful items, `output_tokens` = floor(sum of W×H over
//!   successful items / 256), `total_tokens` = `output_tokens`, `input_images`.
//! - Answer: `{"model","created","data":[…],"usage":{…}}`.
//!
//! # Switches (directives inside `prompt`)
//!
//! - `[sim:fault=<name>]`: `status_400`, `status_429`, `status_500`, `status_503`, `timeout`,
//!   `malformed`, `drop` as for chat; `empty_usage` (no `usage`); `fail_all` (200, every item
//!   an error, `generated_images` 0).
//! - `[sim:latency_ms=N]`: wait N ms (at most 10,000) first.
//! - `[sim:fail_image=I]` (repeatable): item I (0-based) becomes
//!   `{"error":{"code":"OutputImageSensitiveContentDetected","message":…}}`.
//!
//! An unknown or malformed directive is 400 (param `prompt`).

use http::{Request, Response};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::{Value, json};

use super::MAX_IMAGE_REQUEST_BYTES;
use super::body::SimBody;
use super::fault::{self, Family, Fault, Switches, error_response};
use super::files::{base64, image};
use super::request::{BodyError, has_bearer, now_secs, origin, read_body};
use super::state::SimState;

/// Most images of one request, references included.
pub const MAX_IMAGES_WITH_REFERENCES: u64 = 15;
/// Size when the request names none.
pub const DEFAULT_SIZE: (u64, u64) = (2048, 2048);
/// Largest side of a `<W>x<H>` size.
const MAX_SIDE: u64 = 16_384;

/// The number of references in `image`, counted without keeping them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct RefCount(u64);

impl<'de> Deserialize<'de> for RefCount {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RefCount;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array")
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<RefCount, E> {
                Ok(RefCount(1))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RefCount, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(RefCount(n))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The fields the simulator reads; references are counted, never copied.
#[derive(Debug, Default, Deserialize)]
struct ImageRequest {
    model: Option<Value>,
    prompt: Option<Value>,
    image: Option<RefCount>,
    size: Option<Value>,
    sequential_image_generation: Option<Value>,
    sequential_image_generation_options: Option<Value>,
    response_format: Option<Value>,
    output_format: Option<Value>,
}

/// What the answer contains, fixed before answering.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ImagePlan {
    model: String,
    references: u64,
    count: u64,
    size: (u64, u64),
    b64: bool,
    format: &'static str,
}

/// Answers `POST /api/v3/images/generations`; an `Err` closes the connection without a response.
pub(crate) async fn handle(
    state: &SimState,
    req: Request<Incoming>,
    rid: String,
) -> Result<Response<SimBody>, std::io::Error> {
    if !has_bearer(req.headers()) {
        return Ok(error_response(401, "AuthenticationError", "The API key is missing or malformed.", "", &rid));
    }
    let origin = origin(state, req.headers());
    let invalid = |message: &str, param: &str| Ok(error_response(400, "InvalidParameter", message, param, &rid));
    let bytes = match read_body(req, MAX_IMAGE_REQUEST_BYTES).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            return Ok(error_response(413, "RequestTooLarge", "The request body is too large.", "", &rid));
        }
        Err(BodyError::Unreadable) => return invalid("The request body could not be read.", ""),
    };
    let request = match serde_json::from_slice::<ImageRequest>(&bytes) {
        Ok(request) => request,
        Err(e) => return invalid(&format!("The request body is not valid: {e}."), ""),
    };
    drop(bytes);
    let (plan, prompt) = match plan(&request) {
        Ok(planned) => planned,
        Err((param, message)) => return invalid(&message, param),
    };
    let switches = match Switches::from_directives(&prompt, Family::Images) {
        Ok(switches) => switches,
        Err(message) => return invalid(&message, "prompt"),
    };
    if let Some(done) = fault::shared(&switches, |status| fault::status_response(status, &rid)).await {
        return done;
    }
    let id = state.next_hex();
    Ok(fault::json_response(200, answer(&plan, &switches, &origin, &id).to_string()))
}

/// The plan and the prompt, or the offending parameter and a message.
fn plan(request: &ImageRequest) -> Result<(ImagePlan, String), (&'static str, String)> {
    let text = |v: &Option<Value>| v.as_ref().and_then(Value::as_str).map(str::to_owned);
    let model =
        text(&request.model).ok_or(("model", "The parameter `model` is required and must be a string.".to_owned()))?;
    let prompt = text(&request.prompt)
        .ok_or(("prompt", "The parameter `prompt` is required and must be a string.".to_owned()))?;
    let references = request.image.unwrap_or_default().0;
    if references >= MAX_IMAGES_WITH_REFERENCES {
        return Err(("image", format!("At most {} reference images are allowed.", MAX_IMAGES_WITH_REFERENCES - 1)));
    }
    let count = if request.sequential_image_generation.as_ref().and_then(Value::as_str) == Some("auto") {
        let max = match request.sequential_image_generation_options.as_ref().and_then(|o| o.get("max_images")) {
            None | Some(Value::Null) => MAX_IMAGES_WITH_REFERENCES,
            Some(v) => v.as_u64().filter(|n| (1..=MAX_IMAGES_WITH_REFERENCES).contains(n)).ok_or((
                "sequential_image_generation_options.max_images",
                "The parameter `max_images` must be an integer in [1, 15].".to_owned(),
            ))?,
        };
        max.min(MAX_IMAGES_WITH_REFERENCES - references)
    } else {
        1
    };
    let size = match &request.size {
        None | Some(Value::Null) => DEFAULT_SIZE,
        Some(v) => v.as_str().and_then(parse_size).ok_or(("size", "The parameter `size` is not valid.".to_owned()))?,
    };
    let b64 = match &request.response_format {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "url" => false,
        Some(Value::String(s)) if s == "b64_json" => true,
        _ => return Err(("response_format", "The parameter `response_format` must be url or b64_json.".to_owned())),
    };
    let format = match &request.output_format {
        None | Some(Value::Null) => "jpeg",
        Some(Value::String(s)) if s == "jpeg" => "jpeg",
        Some(Value::String(s)) if s == "png" => "png",
        _ => return Err(("output_format", "The parameter `output_format` must be jpeg or png.".to_owned())),
    };
    Ok((ImagePlan { model, references, count, size, b64, format }, prompt))
}

/// `1K`..`4K` or `<W>x<H>`.
fn parse_size(size: &str) -> Option<(u64, u64)> {
    let named = match size {
        "1K" | "1k" => Some(1024),
        "2K" | "2k" => Some(2048),
        "3K" | "3k" => Some(3072),
        "4K" | "4k" => Some(4096),
        _ => None,
    };
    if let Some(side) = named {
        return Some((side, side));
    }
    let (w, h) = size.split_once(['x', 'X'])?;
    let side = |s: &str| s.parse::<u64>().ok().filter(|n| (1..=MAX_SIDE).contains(n));
    Some((side(w)?, side(h)?))
}

/// The answer body.
fn answer(plan: &ImagePlan, switches: &Switches, origin: &str, id: &str) -> Value {
    let (bytes, _) = image(plan.format);
    let (w, h) = plan.size;
    let mut generated = 0u64;
    let data: Vec<Value> = (0..plan.count)
        .map(|i| {
            if switches.fault == Some(Fault::FailAll) || switches.fail_images.contains(&i) {
                let message = "The generated image may contain sensitive content.";
                return json!({"error": {"code": "OutputImageSensitiveContentDetected", "message": message}});
            }
            generated += 1;
            let mut item = json!({"size": format!("{w}x{h}"), "output_format": plan.format});
            if let Some(obj) = item.as_object_mut() {
                let (key, value) = if plan.b64 {
                    ("b64_json", base64(&bytes))
                } else {
                    ("url", format!("{origin}/files/images/{id}/{i}.{}", plan.format))
                };
                obj.insert(key.to_owned(), json!(value));
            }
            item
        })
        .collect();
    let tokens = generated.saturating_mul(w.saturating_mul(h)) / 256;
    let mut answer = json!({"model": plan.model, "created": now_secs(), "data": data});
    if let (true, Some(a)) = (switches.fault != Some(Fault::EmptyUsage), answer.as_object_mut()) {
        let usage = json!({"generated_images": generated, "output_tokens": tokens, "total_tokens": tokens, "input_images": plan.references});
        a.insert("usage".to_owned(), usage);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(body: Value) -> Result<ImagePlan, &'static str> {
        let request: ImageRequest = serde_json::from_value(body).map_err(|_| "serde")?;
        plan(&request).map(|(p, _)| p).map_err(|(param, _)| param)
    }

    #[test]
    fn counts_and_references() {
        let base = |extra: Value| {
            let mut body = json!({"model": "m", "prompt": "p"});
            if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
                b.extend(e);
            }
            planned(body)
        };
        assert_eq!(base(json!({})).map(|p| (p.count, p.references)), Ok((1, 0)));
        assert_eq!(base(json!({"sequential_image_generation": "auto"})).map(|p| p.count), Ok(15));
        let refs = json!(["a", "b", "c"]);
        let auto = |max: Value| {
            base(
                json!({"sequential_image_generation": "auto", "image": refs, "sequential_image_generation_options": {"max_images": max}}),
            )
        };
        assert_eq!(auto(json!(12)).map(|p| (p.count, p.references)), Ok((12, 3)));
        assert_eq!(auto(json!(13)).map(|p| p.count), Ok(12));
        assert_eq!(auto(json!(0)), Err("sequential_image_generation_options.max_images"));
        assert_eq!(auto(json!(16)), Err("sequential_image_generation_options.max_images"));
        assert_eq!(
            base(json!({"image": "one", "sequential_image_generation": "disabled"})).map(|p| (p.count, p.references)),
            Ok((1, 1))
        );
        assert_eq!(base(json!({"image": vec!["x"; 14]})).map(|p| p.references), Ok(14));
        assert_eq!(base(json!({"image": vec!["x"; 15]})), Err("image"));
        assert_eq!(base(json!({"image": 5})), Err("serde"));
    }

    #[test]
    fn sizes_and_formats() {
        assert_eq!(parse_size("1K"), Some((1024, 1024)));
        assert_eq!(parse_size("4K"), Some((4096, 4096)));
        assert_eq!(parse_size("1536x1536"), Some((1536, 1536)));
        assert_eq!(parse_size("3104X1312"), Some((3104, 1312)));
        for bad in ["5K", "0x10", "10x", "x10", "16385x1", "axb", ""] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert_eq!(
            planned(json!({"model": "m", "prompt": "p"})).map(|p| (p.size, p.b64, p.format)),
            Ok((DEFAULT_SIZE, false, "jpeg"))
        );
        let p = planned(
            json!({"model": "m", "prompt": "p", "response_format": "b64_json", "output_format": "png", "size": "2K"}),
        );
        assert_eq!(p.map(|p| (p.size, p.b64, p.format)), Ok(((2048, 2048), true, "png")));
        assert_eq!(planned(json!({"model": "m", "prompt": "p", "response_format": "x"})), Err("response_format"));
        assert_eq!(planned(json!({"model": "m", "prompt": "p", "output_format": "webp"})), Err("output_format"));
        assert_eq!(planned(json!({"model": "m", "prompt": 1})), Err("prompt"));
        assert_eq!(planned(json!({"prompt": "p"})), Err("model"));
    }

    #[test]
    fn failed_items_are_not_counted() {
        let plan =
            ImagePlan { model: "m".into(), references: 3, count: 4, size: (1536, 1536), b64: false, format: "jpeg" };
        let switches = Switches { fail_images: vec![1, 9], ..Switches::default() };
        let a = answer(&plan, &switches, "http://h", "id1");
        assert_eq!(a["usage"]["generated_images"], 3);
        assert_eq!(a["usage"]["output_tokens"], 3 * 1536 * 1536 / 256);
        assert_eq!(a["usage"]["input_images"], 3);
        assert_eq!(a["data"][1]["error"]["code"], "OutputImageSensitiveContentDetected");
        assert_eq!(a["data"][2]["url"], "http://h/files/images/id1/2.jpeg");
        let all = Switches { fault: Some(Fault::FailAll), ..Switches::default() };
        assert_eq!(answer(&plan, &all, "http://h", "id2")["usage"]["generated_images"], 0);
    }
}
