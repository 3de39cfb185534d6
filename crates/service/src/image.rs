//! `POST /api/v1/images/generations`: validate against the model's branch, hold the worst case, call
//! upstream, and settle on the images actually generated (failed items are free; nothing generated is
//! refunded).
//!
//! Worst case (DESIGN §3): every image the request may produce, at the dearer output tier when an
//! output could exceed 2,360,000 pixels, plus 5.0-pro's reference images. The charge counts each
//! successful item of `data[]` at the pixel count of its reported `size`.

use billing::ImageUsage;
use domain::ports::{Endpoint, ImageAnswer, UpstreamError};
use domain::{ModelKind, PriceSheet};

use crate::call::{CallSpec, Close, Finished, TaskDetails};
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
        crate::call::within_cap(hold, who.max_cost)?;
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
                max_cost: who.max_cost,
            })
            .await?;
        self.run_sync(upstream.as_ref(), call, Endpoint::ImageGenerations, upstream_body, |bytes| {
            finish_image(upstream.read_image(&bytes, references), &public_model, &sheet, references)
        })
        .await
    }
}

/// The adapter's reading of the answer as the client's ImageGenerationResponse, and the charge
/// for its images (nothing generated is refunded with the upstream's reason).
fn finish_image(
    read: Result<ImageAnswer, UpstreamError>,
    public_model: &str,
    sheet: &PriceSheet,
    references: u64,
) -> Result<Finished, UpstreamError> {
    let ImageAnswer { body, pixels, refusal, usage } = read?;
    let answer = Answer::Upstream { body, model: public_model.to_owned() };
    if let Some((code, message)) = refusal {
        return Ok(Finished { answer, close: Close::Refund { code, message, usage: Some(usage) } });
    }
    let charge = billing::image_charge(sheet, &ImageUsage { reference_images: references, generated: pixels })
        .map_err(|e| UpstreamError::Malformed(format!("the generated images cannot be priced: {e}")))?;
    Ok(Finished { answer, close: Close::Charge { amount: charge.total, usage: Some(usage), tokens: 0 } })
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

    fn read(pixels: Vec<u64>, refusal: Option<(&str, &str)>) -> Result<ImageAnswer, UpstreamError> {
        let refusal = refusal.map(|(c, m)| (c.to_owned(), m.to_owned()));
        Ok(ImageAnswer { body: br#"{"model":"up","data":[]}"#.to_vec(), pixels, refusal, usage: "{}".into() })
    }

    fn charged(done: Finished) -> i64 {
        match done.close {
            Close::Charge { amount, .. } => amount.micros(),
            Close::Refund { .. } => -1,
        }
    }

    #[test]
    fn each_generated_image_is_charged_on_its_pixels_and_the_public_model_named() {
        let done = finish_image(read(vec![2048 * 2048; 11], None), "Public", &pieces(), 3).expect("finished");
        assert_eq!(done.answer.member("model").expect("model"), json!("Public"));
        assert_eq!(charged(done), 11 * 36_000);
        let pro_charge = |pixels| charged(finish_image(read(vec![pixels], None), "P", &pro(), 2).expect("finished"));
        assert_eq!(pro_charge(1536 * 1536), 2 * 3_000 + 45_000);
        assert_eq!(pro_charge(1552 * 1552), 2 * 3_000 + 90_000);
    }

    #[test]
    fn nothing_generated_is_refunded_with_the_reason_and_refusals_pass_on() {
        let done = finish_image(read(vec![], Some(("OutputImageSensitiveContentDetected", "m"))), "P", &pieces(), 0)
            .expect("finished");
        assert!(matches!(&done.close, Close::Refund { code, .. } if code == "OutputImageSensitiveContentDetected"));
        let refused = Err(UpstreamError::Rejected { code: "X".into(), message: "m".into() });
        assert!(matches!(finish_image(refused, "P", &pieces(), 0), Err(UpstreamError::Rejected { .. })));
    }
}
