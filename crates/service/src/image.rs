//! `POST /api/v1/images/generations`: validate against the model's branch, hold the worst case, call
//! upstream, and settle on the images actually generated (failed items are free; nothing generated is
//! refunded).
//!
//! Worst case (DESIGN §3): every image the request may produce, at the dearer output tier when an
//! output could exceed 2,360,000 pixels, plus 5.0-pro's reference images. The charge counts each
//! successful item of `data[]` at the pixel count of its reported `size`.

use billing::ImageUsage;
use domain::ports::{Endpoint, UpstreamError};
use domain::{ModelKind, PriceSheet};
use serde_json::{Map, Value};

use crate::call::{CallSpec, Close, Finished, TaskDetails};
use crate::chat::public_answer;
use crate::reply::CallReply;
use crate::{Answer, Gateway, Principal, ServiceError};

impl Gateway {
    /// An image request checked for `who`: its model and price, the plan, and the hold the call
    /// takes (nothing is held here).
    async fn checked_image<'b>(
        &self,
        who: &Principal,
        body: &'b [u8],
    ) -> Result<
        (std::sync::Arc<catalog::ModelDef>, domain::PricingVersion, validation::ImagePlan<'b>, domain::UsdAmount),
        ServiceError,
    > {
        let request = validation::parse_image_request(body)?;
        let (def, pricing) = self.priced_model(who, ModelKind::Image, &request.model).await?;
        let plan = validation::check_image_request(&def, request)?;
        let estimate = billing::image_reservation(
            &pricing.sheet,
            plan.reference_images,
            plan.max_images,
            plan.max_pixels_per_image,
        )
        .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", def.name)))?;
        Ok((def, pricing, plan, estimate))
    }

    /// What an image call with `body` would hold, and at which price, without making it.
    pub async fn quote_image(&self, who: &Principal, body: &[u8]) -> Result<crate::Quote, ServiceError> {
        let (def, pricing, _, hold) = self.checked_image(who, body).await?;
        Ok(crate::Quote { model: def.name.clone(), pricing, hold })
    }

    /// Runs an image generation for `who` with the raw JSON `body`.
    pub async fn image(&self, who: &Principal, body: &[u8]) -> Result<CallReply, ServiceError> {
        let upstream = self.upstream()?;
        let (def, pricing, plan, estimate) = self.checked_image(who, body).await?;
        let upstream_body = upstream
            .image_body(&plan.generation(&def.upstream.model_id))
            .map_err(|e| ServiceError::Internal(format!("the image request for {}: {e}", def.name)))?;
        let details = TaskDetails {
            prompt: Some(plan.request.prompt.clone()),
            input_mode: Some(plan.input_mode),
            media_type: (plan.reference_images > 0).then_some(domain::MediaType::Image),
            ..TaskDetails::default()
        };
        let (public_model, sheet, references) = (def.name.clone(), pricing.sheet.clone(), plan.reference_images);
        let rate = crate::rates::RateClaim::request(who);
        let call = self
            .open_call(CallSpec {
                user: who.user_id.clone(),
                key: who.key_id.clone(),
                budget_keys: who.budget_keys.clone(),
                def,
                pricing,
                estimate,
                rate,
                details,
            })
            .await?;
        self.run_sync(upstream.as_ref(), call, Endpoint::ImageGenerations, upstream_body, |bytes| {
            finish_image(&bytes, &public_model, &sheet, references)
        })
        .await
    }
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

/// The upstream answer as the client's ImageGenerationResponse, and the charge for its images.
fn finish_image(
    bytes: &[u8],
    public_model: &str,
    sheet: &PriceSheet,
    references: u64,
) -> Result<Finished, UpstreamError> {
    let mut answer = public_answer(bytes, public_model)?;
    if answer.get("data").is_none()
        && let Some(error) = answer.get("error").filter(|e| !e.is_null())
    {
        let text = |k: &str| error.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        return Err(UpstreamError::Rejected { code: text("code"), message: text("message") });
    }
    let items = answer
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| UpstreamError::Malformed("the image answer has no data array".into()))?;
    let mut generated = Vec::new();
    for (i, item) in items.iter().enumerate().filter(|(_, item)| !item_failed(item)) {
        let (w, h) = item
            .get("size")
            .and_then(Value::as_str)
            .and_then(parse_size)
            .ok_or_else(|| UpstreamError::Malformed(format!("data[{i}] has no WxH size")))?;
        generated.push(w.checked_mul(h).ok_or_else(|| UpstreamError::Malformed(format!("data[{i}] size overflows")))?);
    }
    let first_error = items.iter().find(|i| item_failed(i)).and_then(|i| i.get("error")).cloned();
    let count = generated.len() as u64;
    let usage = complete_usage(&mut answer, count, references);
    if generated.is_empty() {
        let text = |k: &str| first_error.as_ref().and_then(|e| e.get(k)).and_then(Value::as_str).map(str::to_owned);
        let code = text("code").unwrap_or_else(|| "no_image_generated".into());
        let message = text("message").unwrap_or_else(|| "the upstream generated no image".into());
        return Ok(Finished {
            answer: Answer::Value(answer),
            close: Close::Refund { code, message, usage: Some(usage) },
        });
    }
    let charge = billing::image_charge(sheet, &ImageUsage { reference_images: references, generated })
        .map_err(|e| UpstreamError::Malformed(format!("the generated images cannot be priced: {e}")))?;
    Ok(Finished {
        answer: Answer::Value(answer),
        close: Close::Charge { amount: charge.total, usage: Some(usage), tokens: 0 },
    })
}

/// Makes the answer's `usage` state what was billed (`generated_images` = successful items,
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
    use super::*;
    use serde_json::json;

    fn pieces() -> PriceSheet {
        let catalog = catalog::Catalog::builtin().expect("catalog");
        catalog.get("Vendor-Imagegen-4.5").and_then(|d| d.pricing.clone()).expect("priced")
    }

    fn pro() -> PriceSheet {
        let catalog = catalog::Catalog::builtin().expect("catalog");
        catalog.get("Vendor-Imagegen-5.0-pro").and_then(|d| d.pricing.clone()).expect("priced")
    }

    fn finish(answer: Value, sheet: &PriceSheet, references: u64) -> Result<Finished, UpstreamError> {
        finish_image(answer.to_string().as_bytes(), "Public", sheet, references)
    }

    #[test]
    fn failed_items_are_free() {
        let mut data: Vec<Value> = (0..12).map(|_| json!({"url": "https://x/a.png", "size": "2048x2048"})).collect();
        data[3] = json!({"error": {"code": "OutputImageSensitiveContentDetected", "message": "no"}});
        let done = finish(json!({"model": "up", "data": data, "usage": {"generated_images": 11}}), &pieces(), 3)
            .expect("finished");
        assert_eq!(done.answer.member("model").expect("model"), json!("Public"));
        assert_eq!(done.answer.member("usage").expect("usage")["input_images"], json!(3));
        assert!(matches!(done.close, Close::Charge { amount, .. } if amount.micros() == 11 * 36_000));
    }

    #[test]
    fn pro_pixel_tiers_follow_the_reported_size() {
        let answer = |size: &str| json!({"data": [{"b64_json": "AA==", "size": size}]});
        let charge = |size: &str| match finish(answer(size), &pro(), 2).expect("finished").close {
            Close::Charge { amount, .. } => amount.micros(),
            Close::Refund { .. } => -1,
        };
        assert_eq!(charge("1536x1536"), 2 * 3_000 + 45_000);
        assert_eq!(charge("1552x1552"), 2 * 3_000 + 90_000);
    }

    #[test]
    fn nothing_generated_is_refunded_and_bad_answers_refused() {
        let all_failed = json!({"data": [{"error": {"code": "OutputImageSensitiveContentDetected", "message": "m"}}]});
        let done = finish(all_failed, &pieces(), 0).expect("finished");
        assert!(matches!(&done.close, Close::Refund { code, .. } if code == "OutputImageSensitiveContentDetected"));
        assert_eq!(done.answer.member("usage").expect("usage")["generated_images"], json!(0));
        let refused =
            finish(json!({"error": {"code": "InputTextSensitiveContentDetected", "message": "m"}}), &pieces(), 0);
        assert!(
            matches!(refused, Err(UpstreamError::Rejected { ref code, .. }) if code == "InputTextSensitiveContentDetected")
        );
        assert!(matches!(finish(json!({"data": 1}), &pieces(), 0), Err(UpstreamError::Malformed(_))));
        assert!(matches!(finish(json!({"data": [{"url": "u"}]}), &pieces(), 0), Err(UpstreamError::Malformed(_))));
        assert!(finish(json!({"data": [{"url": "u", "size": "99999999999x99999999999"}]}), &pieces(), 0).is_err());
        assert_eq!(parse_size("2048X1024"), Some((2048, 1024)));
        assert_eq!(parse_size("2048*1024"), None);
    }
}
