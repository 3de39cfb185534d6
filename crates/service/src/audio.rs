//! `POST /api/v1/audio/generations`: validate, hold 120 seconds of audio, call the speech service, and
//! settle on its `original_duration` (at most 120 s), rounded once. A non-zero `code` inside an HTTP 200
//! answer is an upstream refusal: refunded, 502.

use std::str::FromStr;

use domain::ports::{Endpoint, SpeechAnswer, UpstreamError};
use domain::{ModelKind, PriceSheet};
use rust_decimal::Decimal;

use crate::Answer;
use crate::call::{CallSpec, Close, Finished, TaskDetails};
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
            max_cost: who.max_cost,
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
            finish_audio(upstream.read_speech(&bytes), &public_model, &sheet)
        })
        .await
    }
}

/// The adapter's reading of the speech answer as the client's AudioGenerationResponse, and its
/// charge on the exact `original_duration` (at most 120 s billed).
fn finish_audio(
    read: Result<SpeechAnswer, UpstreamError>,
    public_model: &str,
    sheet: &PriceSheet,
) -> Result<Finished, UpstreamError> {
    let SpeechAnswer { body, seconds: text } = read?;
    let seconds = Decimal::from_str(&text)
        .or_else(|_| Decimal::from_scientific(&text))
        .ok()
        .filter(|d| !d.is_sign_negative())
        .ok_or_else(|| UpstreamError::Malformed(format!("the speech duration {text:?} is not a usable number")))?;
    let charge = billing::audio_charge_seconds(sheet, seconds)
        .map_err(|e| UpstreamError::Malformed(format!("the audio duration cannot be priced: {e}")))?;
    let billed = seconds.min(Decimal::from(120));
    let usage = format!(r#"{{"original_duration":{text},"billed_seconds":"{billed}"}}"#);
    Ok(Finished {
        answer: Answer::Upstream { body, model: public_model.to_owned() },
        close: Close::Charge { amount: charge.total, usage: Some(usage), tokens: 0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sheet() -> PriceSheet {
        let catalog = catalog::Catalog::builtin().expect("catalog");
        catalog.get("AudioGen-1.0").and_then(|d| d.pricing.clone()).expect("priced")
    }

    fn finish(seconds: &str) -> Result<Finished, UpstreamError> {
        let read = SpeechAnswer { body: br#"{"audio":"AA"}"#.to_vec(), seconds: seconds.into() };
        finish_audio(Ok(read), "AudioGen-1.0", &sheet())
    }

    fn charged(seconds: &str) -> i64 {
        match finish(seconds).expect("finished").close {
            Close::Charge { amount, .. } => amount.micros(),
            Close::Refund { .. } => -1,
        }
    }

    #[test]
    fn charged_on_the_exact_original_duration() {
        assert_eq!(charged("74.7"), 186_750);
        assert_eq!(charged("0.6"), 1_500);
        assert_eq!(charged("74.5002"), 186_251);
        assert_eq!(charged("250"), 300_000);
        assert_eq!(charged("1e1"), 25_000);
        let Close::Charge { usage, .. } = finish("250").expect("finished").close else { panic!("charged") };
        let usage: serde_json::Value = serde_json::from_str(&usage.expect("usage")).expect("JSON");
        assert_eq!(usage, serde_json::json!({"original_duration": 250, "billed_seconds": "120"}));
        assert!(matches!(finish("x"), Err(UpstreamError::Malformed(_))));
        assert!(matches!(finish("-1"), Err(UpstreamError::Malformed(_))));
    }
}
