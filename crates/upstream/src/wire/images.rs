//! `POST <platform base>/images/generations` (upstream-wire §3): the request body, written from a
//! [`domain::ports::ImageGeneration`] straight into one buffer sized for it, and the answer read
//! into a [`domain::ports::ImageAnswer`]. The references are
//! borrowed from the client's body, so a 600-MiB request costs its body and this one, and no tree
//! of JSON values is built.

use domain::ports::{ImageAnswer, ImageGeneration, ImageReferences, UpstreamError};
use serde::Serialize;
use serde_json::{Map, Value};

/// The request body, in the platform's field names and order.
#[derive(Debug, Serialize)]
struct ImageBody<'a> {
    model: &'a str,
    prompt: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    watermark: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<Refs<'a, 'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sequential_image_generation: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sequential_image_generation_options: Option<SequentialOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_format: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    optimize_prompt: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    optimize_prompt_options: Option<PromptOptions<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
}

/// `image`: one string or an array of them, as the client sent it.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Refs<'r, 'a> {
    One(&'a str),
    Many(&'r [&'a str]),
}

/// `sequential_image_generation_options`.
#[derive(Debug, Serialize)]
struct SequentialOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_images: Option<i64>,
}

/// `optimize_prompt_options`.
#[derive(Debug, Serialize)]
struct PromptOptions<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a str>,
}

/// Room the body needs besides its references and prompt (field names and short values).
const BODY_OVERHEAD: usize = 4096;

/// The request body for `request`.
pub fn request_body(request: &ImageGeneration<'_>) -> Result<Vec<u8>, UpstreamError> {
    let image = request.references.as_ref().map(|refs| match refs {
        ImageReferences::One(one) => Refs::One(one),
        ImageReferences::Many(many) => Refs::Many(many),
    });
    let body = ImageBody {
        model: request.model,
        prompt: request.prompt,
        response_format: request.response_format,
        watermark: request.watermark,
        stream: request.stream,
        image,
        size: request.size,
        sequential_image_generation: request.sequential,
        sequential_image_generation_options: request
            .sequential_options
            .map(|o| SequentialOptions { max_images: o.max_images }),
        output_format: request.output_format,
        optimize_prompt: request.optimize_prompt,
        optimize_prompt_options: request.prompt_options.map(|o| PromptOptions { mode: o.mode, thinking: o.thinking }),
        seed: request.seed,
    };
    let references = request.references.as_ref().map_or(0, ImageReferences::total_len);
    let mut out = Vec::with_capacity(references.saturating_add(request.prompt.len()).saturating_add(BODY_OVERHEAD));
    serde_json::to_writer(&mut out, &body)
        .map_err(|e| UpstreamError::Malformed(format!("the image request body cannot be written: {e}")))?;
    Ok(out)
}

/// `(width, height)` of a `<W>x<H>` size.
fn parse_size(size: &str) -> Option<(u64, u64)> {
    let (w, h) = size.split_once(['x', 'X'])?;
    Some((w.trim().parse().ok()?, h.trim().parse().ok()?))
}

/// Whether a `data[]` item failed (it carries a non-null `error`).
fn item_failed(item: &Value) -> bool {
    item.get("error").is_some_and(|e| !e.is_null())
}

/// A string member of an error object.
fn text(error: Option<&Value>, key: &str) -> Option<String> {
    error.and_then(|e| e.get(key)).and_then(Value::as_str).map(str::to_owned)
}

/// Reads a 2xx answer (upstream-wire §3) to a request that sent `references` reference images:
/// each generated image's pixels, why nothing was generated when nothing was, and the answer with
/// its `usage` stating what is billed. A top-level `error` without `data` is `Rejected`; an answer
/// without a `data` array, or a generated item without a `WxH` size, is `Malformed`.
pub fn read_answer(bytes: &[u8], references: u64) -> Result<ImageAnswer, UpstreamError> {
    let mut answer: Value =
        serde_json::from_slice(bytes).map_err(|e| UpstreamError::Malformed(format!("the answer is not JSON: {e}")))?;
    if !answer.is_object() {
        return Err(UpstreamError::Malformed("the answer is not a JSON object".into()));
    }
    if answer.get("data").is_none()
        && let Some(error) = answer.get("error").filter(|e| !e.is_null())
    {
        return Err(UpstreamError::Rejected {
            code: text(Some(error), "code").unwrap_or_default(),
            message: text(Some(error), "message").unwrap_or_default(),
        });
    }
    let items = answer
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| UpstreamError::Malformed("the image answer has no data array".into()))?;
    let mut pixels = Vec::new();
    for (i, item) in items.iter().enumerate().filter(|(_, item)| !item_failed(item)) {
        let (w, h) = item
            .get("size")
            .and_then(Value::as_str)
            .and_then(parse_size)
            .ok_or_else(|| UpstreamError::Malformed(format!("data[{i}] has no WxH size")))?;
        pixels.push(w.checked_mul(h).ok_or_else(|| UpstreamError::Malformed(format!("data[{i}] size overflows")))?);
    }
    let refusal = pixels.is_empty().then(|| {
        let error = items.iter().find(|i| item_failed(i)).and_then(|i| i.get("error"));
        (
            text(error, "code").unwrap_or_else(|| "no_image_generated".into()),
            text(error, "message").unwrap_or_else(|| "the upstream generated no image".into()),
        )
    });
    let usage = complete_usage(&mut answer, pixels.len() as u64, references);
    let body = serde_json::to_vec(&answer).map_err(|e| UpstreamError::Malformed(e.to_string()))?;
    Ok(ImageAnswer { body, pixels, refusal, usage })
}

/// Makes the answer's `usage` state what is billed (`generated_images` = successful items,
/// `input_images` = references sent), keeping the upstream's token counts; returns it as JSON text.
fn complete_usage(answer: &mut Value, generated: u64, references: u64) -> String {
    let Value::Object(object) = answer else { return String::from("{}") };
    let usage = object.entry("usage").or_insert_with(|| Value::Object(Map::new()));
    if !usage.is_object() {
        *usage = Value::Object(Map::new());
    }
    if let Value::Object(u) = usage {
        u.insert("generated_images".into(), Value::from(generated));
        u.insert("input_images".into(), Value::from(references));
        for key in ["output_tokens", "total_tokens"] {
            u.entry(key).or_insert(Value::from(0));
        }
    }
    usage.to_string()
}

#[cfg(test)]
mod tests {
    use domain::ports::{PromptOptimisation, SequentialImages};
    use serde_json::{Value, json};

    use super::*;

    fn minimal<'a>(references: Option<ImageReferences<'a>>) -> ImageGeneration<'a> {
        ImageGeneration {
            model: "doubao-seedream-4-5-251128",
            prompt: "a cat",
            response_format: None,
            watermark: None,
            stream: None,
            references,
            size: None,
            sequential: None,
            sequential_options: None,
            output_format: None,
            optimize_prompt: None,
            prompt_options: None,
            seed: None,
        }
    }

    fn written(request: &ImageGeneration<'_>) -> Value {
        serde_json::from_slice(&request_body(request).expect("written")).expect("JSON")
    }

    fn read(answer: &Value, references: u64) -> Result<ImageAnswer, UpstreamError> {
        read_answer(answer.to_string().as_bytes(), references)
    }

    #[test]
    fn failed_items_are_left_out_and_usage_states_what_is_billed() {
        let mut data: Vec<Value> = (0..12).map(|_| json!({"url": "https://x/a.png", "size": "2048x2048"})).collect();
        data[3] = json!({"error": {"code": "OutputImageSensitiveContentDetected", "message": "no"}});
        let answer = json!({"model": "up", "data": data, "usage": {"generated_images": 11, "output_tokens": 7}});
        let got = read(&answer, 3).expect("read");
        assert_eq!(got.pixels, vec![2048 * 2048; 11]);
        assert_eq!(got.refusal, None);
        let usage: Value = serde_json::from_str(&got.usage).expect("usage");
        assert_eq!(usage, json!({"generated_images": 11, "input_images": 3, "output_tokens": 7, "total_tokens": 0}));
        let body: Value = serde_json::from_slice(&got.body).expect("body");
        assert_eq!(body["usage"], usage);
        assert_eq!(body["model"], json!("up"));
        assert_eq!(body["data"][3]["error"]["code"], json!("OutputImageSensitiveContentDetected"));
    }

    #[test]
    fn nothing_generated_gives_the_reason_and_bad_answers_are_refused() {
        let all_failed = json!({"data": [{"error": {"code": "OutputImageSensitiveContentDetected", "message": "m"}}]});
        let got = read(&all_failed, 0).expect("read");
        assert_eq!(got.refusal, Some(("OutputImageSensitiveContentDetected".into(), "m".into())));
        assert!(got.usage.contains(r#""generated_images":0"#), "{}", got.usage);
        let empty = super::read_answer(br#"{"data": []}"#, 1).expect("read");
        assert_eq!(empty.refusal.map(|r| r.0).as_deref(), Some("no_image_generated"));
        let refused = read(&json!({"error": {"code": "InputTextSensitiveContentDetected", "message": "m"}}), 0);
        assert!(
            matches!(refused, Err(UpstreamError::Rejected { ref code, .. }) if code == "InputTextSensitiveContentDetected")
        );
        assert!(matches!(read(&json!({"data": 1}), 0), Err(UpstreamError::Malformed(_))));
        assert!(matches!(read(&json!([1]), 0), Err(UpstreamError::Malformed(_))));
        assert!(matches!(super::read_answer(b"nope", 0), Err(UpstreamError::Malformed(_))));
        assert!(matches!(read(&json!({"data": [{"url": "u"}]}), 0), Err(UpstreamError::Malformed(_))));
        assert!(read(&json!({"data": [{"url": "u", "size": "99999999999x99999999999"}]}), 0).is_err());
        assert_eq!(parse_size("2048X1024"), Some((2048, 1024)));
        assert_eq!(parse_size("2048*1024"), None);
    }

    #[test]
    fn the_documented_request_round_trips() {
        let many = vec!["https://x/1.png", "data:image/png;base64,AAAA"];
        let request = ImageGeneration {
            response_format: Some("url"),
            watermark: Some(false),
            stream: Some(false),
            size: Some("2K"),
            sequential: Some("auto"),
            sequential_options: Some(SequentialImages { max_images: Some(4) }),
            output_format: Some("png"),
            prompt_options: Some(PromptOptimisation { mode: Some("standard"), thinking: Some("auto") }),
            ..minimal(Some(ImageReferences::Many(many)))
        };
        // upstream-wire §3's example, less the fields the gateway does not send.
        let expected = json!({"model": "doubao-seedream-4-5-251128", "prompt": "a cat",
            "image": ["https://x/1.png", "data:image/png;base64,AAAA"], "size": "2K",
            "sequential_image_generation": "auto", "sequential_image_generation_options": {"max_images": 4},
            "response_format": "url", "watermark": false, "stream": false, "output_format": "png",
            "optimize_prompt_options": {"mode": "standard", "thinking": "auto"}});
        assert_eq!(written(&request), expected);
    }

    #[test]
    fn absent_settings_are_not_sent_and_the_clients_form_is_kept() {
        assert_eq!(written(&minimal(None)), json!({"model": "doubao-seedream-4-5-251128", "prompt": "a cat"}));
        let one = written(&minimal(Some(ImageReferences::One("https://x/a.png"))));
        assert_eq!(one["image"], json!("https://x/a.png"));
        let request = ImageGeneration {
            sequential_options: Some(SequentialImages { max_images: None }),
            prompt_options: Some(PromptOptimisation { mode: Some("fast"), thinking: None }),
            optimize_prompt: Some(true),
            seed: Some(-1),
            ..minimal(None)
        };
        let body = written(&request);
        assert_eq!(body["sequential_image_generation_options"], json!({}));
        assert_eq!(body["optimize_prompt_options"], json!({"mode": "fast"}));
        assert_eq!((&body["optimize_prompt"], &body["seed"]), (&json!(true), &json!(-1)));
    }

    #[test]
    fn the_body_is_written_in_one_buffer_with_the_model_first() {
        let reference = format!("data:image/png;base64,{}", "A".repeat(1 << 20));
        let request = minimal(Some(ImageReferences::Many(vec![&reference, &reference])));
        let body = request_body(&request).expect("written");
        assert!(body.starts_with(br#"{"model":"doubao-seedream-4-5-251128","prompt":"a cat","image":["#));
        assert!(body.capacity() >= body.len() && body.capacity() <= 2 * reference.len() + 4096 + 5, "no regrowth");
    }
}
