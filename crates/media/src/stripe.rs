//! The Stripe Checkout client: creates a Checkout Session with Stripe's documented form-encoded
//! call (`POST /v1/checkout/sessions`, `Authorization: Bearer <secret key>`, an `Idempotency-Key`)
//! and reads the session's `id` and `url`. The API base is the operator's setting (Stripe's origin,
//! or a local server in tests), so it is not an egress to a user's address and takes its own
//! client without the SSRF guard.

use std::time::Duration;

use domain::{CheckoutRequest, CheckoutSession, PaymentError, Payments};

/// How long one call to Stripe may take.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Most bytes of an answer read.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// A Stripe account's Checkout API.
#[derive(Clone)]
pub struct StripeCheckout {
    client: reqwest::Client,
    base: String,
    secret_key: String,
}

impl std::fmt::Debug for StripeCheckout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripeCheckout").field("base", &self.base).field("secret_key", &"*****").finish()
    }
}

/// The members of a Checkout Session the gateway reads.
#[derive(serde::Deserialize)]
struct Session {
    id: String,
    url: Option<String>,
}

/// A Stripe error answer: `{"error": {"message", "type", …}}`.
#[derive(serde::Deserialize)]
struct ErrorAnswer {
    error: ErrorBody,
}

#[derive(serde::Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

impl StripeCheckout {
    /// A client for the API at `base` (such as `https://api.stripe.com`) with `secret_key`.
    pub fn new(base: &str, secret_key: &str) -> Result<StripeCheckout, PaymentError> {
        crate::egress::install_tls_provider();
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| PaymentError::Unavailable(format!("cannot build the Stripe client: {e}")))?;
        Ok(StripeCheckout { client, base: base.trim_end_matches('/').to_owned(), secret_key: secret_key.to_owned() })
    }

    /// The form Stripe documents for a one-line payment session.
    fn form(req: &CheckoutRequest) -> String {
        let user = req.user.as_str();
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("mode", "payment")
            .append_pair("line_items[0][price_data][currency]", "usd")
            .append_pair("line_items[0][price_data][unit_amount]", &req.amount_cents.to_string())
            .append_pair("line_items[0][price_data][product_data][name]", &req.product_name)
            .append_pair("line_items[0][quantity]", "1")
            .append_pair("client_reference_id", user)
            .append_pair("metadata[user_id]", user)
            .append_pair("success_url", &req.success_url)
            .append_pair("cancel_url", &req.cancel_url)
            .finish()
    }
}

#[async_trait::async_trait]
impl Payments for StripeCheckout {
    async fn create_checkout(&self, req: &CheckoutRequest) -> Result<CheckoutSession, PaymentError> {
        let unavailable = |e: &dyn std::fmt::Display| PaymentError::Unavailable(e.to_string());
        let response = self
            .client
            .post(format!("{}/v1/checkout/sessions", self.base))
            .bearer_auth(&self.secret_key)
            .header("Idempotency-Key", &req.idempotency_key)
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(StripeCheckout::form(req))
            .send()
            .await
            .map_err(|e| unavailable(&e))?;
        let status = response.status();
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|e| unavailable(&e))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(PaymentError::Unavailable("Stripe's answer is too large".into()));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let said = serde_json::from_slice::<ErrorAnswer>(&body).ok().map(|a| a.error);
            let text = said.map_or_else(
                || format!("HTTP {status}"),
                |e| format!("HTTP {status} {}: {}", e.kind.unwrap_or_default(), e.message.unwrap_or_default()),
            );
            return Err(if status.is_client_error() {
                PaymentError::Refused(text)
            } else {
                PaymentError::Unavailable(text)
            });
        }
        let session: Session = serde_json::from_slice(&body).map_err(|e| unavailable(&format!("a session: {e}")))?;
        let url = session.url.ok_or_else(|| PaymentError::Unavailable("the session has no url".into()))?;
        Ok(CheckoutSession { id: session.id, url })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_is_the_documented_one_line_payment() {
        let req = CheckoutRequest {
            user: domain::UserId("usr_1".into()),
            amount_cents: 2000,
            product_name: "Gateway credit".into(),
            success_url: "https://gw.example/console/#/funds?ok=1".into(),
            cancel_url: "https://gw.example/console/".into(),
            idempotency_key: "k".into(),
        };
        let form = StripeCheckout::form(&req);
        let pairs: Vec<(String, String)> =
            url::form_urlencoded::parse(form.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("mode"), Some("payment"));
        assert_eq!(get("line_items[0][price_data][currency]"), Some("usd"));
        assert_eq!(get("line_items[0][price_data][unit_amount]"), Some("2000"));
        assert_eq!(get("line_items[0][price_data][product_data][name]"), Some("Gateway credit"));
        assert_eq!(get("line_items[0][quantity]"), Some("1"));
        assert_eq!((get("client_reference_id"), get("metadata[user_id]")), (Some("usr_1"), Some("usr_1")));
        assert_eq!(get("success_url"), Some("https://gw.example/console/#/funds?ok=1"));
        assert_eq!(pairs.len(), 9);
    }
}
