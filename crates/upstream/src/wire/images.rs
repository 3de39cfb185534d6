//! `POST <platform base>/images/generations` (upstream-wire §3): the request body, written from a
//! [`domain::ports::ImageGeneration`] straight into one buffer sized for it. The references are
//! borrowed from the client's body, so a 600-MiB request costs its body and this one, and no tree
//! of JSON values is built.

use domain::ports::{ImageGeneration, ImageReferences, UpstreamError};
use serde::Serialize;

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
