//! `POST /api/v1/audio/generations`: validate, hold 120 seconds of audio, call the speech service, and
//! settle on its `original_duration` (at most 120 s), rounded once. A non-zero `code` inside an HTTP 200
//! answer is an upstream refusal: refunded, 502.

use std::str::FromStr;

use domain::ports::{Endpoint, UpstreamError};
use domain::{ModelKind, PriceSheet};
use rust_decimal::Decimal;
use serde_json::Value;

use crate::Answer;
use crate::call::{CallSpec, Close, Finished, TaskDetails};
use crate::chat::public_answer;
use crate::reply::CallReply;
use crate::{Gateway, Principal, ServiceError};

impl Gateway {
    /// Runs a speech generation for `who` with the raw JSON `body`.
    pub async fn audio(&self, who: &Principal, body: &[u8]) -> Result<CallReply, ServiceError> {
        let upstream = self.upstream()?;
        let request = validation::parse_audio_request(body)?;
        let (def, pricing) = self.priced_model(who, ModelKind::Audio, &request.model).await?;
        let plan = validation::check_audio_request(&def, request)?;
        let estimate = billing::audio_reservation(&pricing.sheet)
            .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", def.name)))?;
        let upstream_body = plan.upstream_body(&def.upstream.model_id)?;
        let details = TaskDetails {
            prompt: Some(plan.request.text_prompt.clone()),
            input_mode: Some(plan.input_mode),
            media_type: plan.media_type,
            ..TaskDetails::default()
        };
        let (public_model, sheet) = (def.name.clone(), pricing.sheet.clone());
        let rate = crate::rates::RateClaim::request(who);
        let spec = CallSpec {
            user: who.user_id.clone(),
            key: who.key_id.clone(),
            budget_keys: who.budget_keys.clone(),
            def,
            pricing,
            estimate,
            rate,
            details,
        };
        let call = self.open_call(spec).await.map_err(|e| match e {
            ServiceError::InsufficientBalance { needed, available, .. } => ServiceError::InsufficientBalance {
                hold: format!("the {}-second audio reservation", plan.reserve_seconds),
                needed,
                available,
            },
            other => other,
        })?;
        self.run_sync(upstream.as_ref(), call, Endpoint::Speech, upstream_body, |bytes| {
            finish_audio(&bytes, &public_model, &sheet)
        })
        .await
    }
}

/// A JSON number as an exact decimal (its shortest text form, so `0.6` is exactly 0.6).
fn decimal(number: &serde_json::Number) -> Option<Decimal> {
    let text = number.to_string();
    Decimal::from_str(&text).or_else(|_| Decimal::from_scientific(&text)).ok()
}

/// The speech answer as the client's AudioGenerationResponse, and its charge.
fn finish_audio(bytes: &[u8], public_model: &str, sheet: &PriceSheet) -> Result<Finished, UpstreamError> {
    let mut answer = public_answer(bytes, public_model)?;
    // A missing code, or 0, is success (the service sometimes omits it).
    let code = answer.get("code").and_then(Value::as_i64).unwrap_or(0);
    if code != 0 {
        let message = answer.get("message").and_then(Value::as_str).unwrap_or_default().to_owned();
        return Err(UpstreamError::Rejected { code: code.to_string(), message });
    }
    let seconds = answer
        .get("original_duration")
        .and_then(|v| v.as_number())
        .and_then(decimal)
        .filter(|d| !d.is_sign_negative())
        .ok_or_else(|| UpstreamError::Malformed("the speech answer has no usable original_duration".into()))?;
    let audio = match answer.get("audio").and_then(Value::as_str) {
        // Always raw Base64 for the client, never a data URL.
        Some(text) => text.split_once(";base64,").map_or(text, |(_, data)| data).to_owned(),
        None => return Err(UpstreamError::Malformed("the speech answer has no audio".into())),
    };
    let charge = billing::audio_charge_seconds(sheet, seconds)
        .map_err(|e| UpstreamError::Malformed(format!("the audio duration cannot be priced: {e}")))?;
    if let Value::Object(o) = &mut answer {
        o.insert("audio".into(), Value::String(audio));
        o.entry("code").or_insert(Value::from(0));
        o.entry("message").or_insert(Value::String(String::new()));
    }
    let usage = serde_json::json!({ "original_duration": answer.get("original_duration"), "billed_seconds": seconds.min(Decimal::from(120)).to_string() });
    Ok(Finished {
        answer: Answer::Value(answer),
        close: Close::Charge { amount: charge.total, usage: Some(usage.to_string()), tokens: 0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sheet() -> PriceSheet {
        let catalog = catalog::Catalog::builtin().expect("catalog");
        catalog.get("AudioGen-1.0").and_then(|d| d.pricing.clone()).expect("priced")
    }

    fn finish(answer: Value) -> Result<Finished, UpstreamError> {
        finish_audio(answer.to_string().as_bytes(), "AudioGen-1.0", &sheet())
    }

    fn charged(answer: Value) -> i64 {
        match finish(answer).expect("finished").close {
            Close::Charge { amount, .. } => amount.micros(),
            Close::Refund { .. } => -1,
        }
    }

    #[test]
    fn charged_on_the_exact_original_duration() {
        assert_eq!(charged(json!({"code": 0, "audio": "AAAA", "duration": 74.7, "original_duration": 74.7})), 186_750);
        assert_eq!(charged(json!({"audio": "AAAA", "original_duration": 0.6})), 1_500);
        assert_eq!(charged(json!({"audio": "AAAA", "original_duration": 74.5002})), 186_251);
        assert_eq!(charged(json!({"audio": "AAAA", "original_duration": 250})), 300_000);
    }

    #[test]
    fn data_urls_become_raw_base64_and_refusals_are_errors() {
        let done = finish(json!({"audio": "data:audio/wav;base64,UklGRg==", "original_duration": 1})).expect("ok");
        assert_eq!(done.answer.member("audio").expect("audio"), json!("UklGRg=="));
        assert_eq!(done.answer.member("code").expect("code"), json!(0));
        let refused = finish(json!({"code": 45000001, "message": "text_prompt is invalid"}));
        assert!(matches!(refused, Err(UpstreamError::Rejected { ref code, .. }) if code == "45000001"));
        assert!(matches!(finish(json!({"audio": "AA"})), Err(UpstreamError::Malformed(_))));
        assert!(matches!(finish(json!({"original_duration": 1})), Err(UpstreamError::Malformed(_))));
        assert!(matches!(finish(json!({"audio": "AA", "original_duration": -1})), Err(UpstreamError::Malformed(_))));
    }
}
