//! Self-serve top-ups through Stripe Checkout: a customer asks for a hosted payment page of an
//! amount within the operator's bounds; Stripe's signed `checkout.session.completed` event credits
//! the session's `amount_total` to its `client_reference_id`, once per session id (the ledger's
//! `BookOp::Pay`, which records the session in the commit that credits it). The signature is
//! checked as Stripe documents it: HMAC-SHA256 over `"{t}.{raw body}"` with the endpoint's secret,
//! any `v1` entry of `Stripe-Signature`, a timestamp at most five minutes away.

use std::borrow::Cow;
use std::sync::Arc;

use domain::{CheckoutRequest, CheckoutSession, PaymentError, Payments, UsdAmount, UserId};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Gateway, Ports, Principal, ServiceError};

/// How far a signed event's timestamp may be from now, in seconds (Stripe's default tolerance).
pub const SIGNATURE_TOLERANCE_SECS: i64 = 300;

/// Micro-USD in a cent.
const MICROS_PER_CENT: i64 = 10_000;

/// The line item's product name on the payment page.
const PRODUCT_NAME: &str = "Gateway credit";

/// The operator's settings for top-ups.
#[derive(Clone)]
pub struct PaymentSettings {
    /// The webhook endpoint's signing secret (`whsec_…`).
    pub webhook_secret: String,
    /// The smallest top-up.
    pub min: UsdAmount,
    /// The largest top-up.
    pub max: UsdAmount,
    /// Where the payer lands after paying.
    pub success_url: String,
    /// Where the payer lands after giving up.
    pub cancel_url: String,
}

impl std::fmt::Debug for PaymentSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentSettings")
            .field("webhook_secret", &"*****")
            .field("min", &self.min)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// The processor and the settings, when payments are configured.
#[derive(Clone)]
pub struct PaymentPorts {
    /// The processor.
    pub processor: Arc<dyn Payments>,
    /// The settings.
    pub settings: PaymentSettings,
}

impl Ports {
    /// The same ports with self-serve top-ups through `processor`.
    pub fn with_payments(mut self, processor: Arc<dyn Payments>, settings: PaymentSettings) -> Ports {
        self.payments = Some(PaymentPorts { processor, settings });
        self
    }
}

/// What a webhook event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventOutcome {
    /// The session's amount was credited: the balance after it.
    Credited {
        /// What was credited.
        amount: UsdAmount,
        /// The balance after it.
        balance: UsdAmount,
    },
    /// The session was credited before (a replay, or a second event for it).
    AlreadyCredited,
    /// Acknowledged, nothing to do (another event type, an unpaid session, another currency).
    Ignored(&'static str),
}

/// Why a `Stripe-Signature` is refused.
fn bad_signature(why: &str) -> ServiceError {
    ServiceError::InvalidRequest(format!("Stripe-Signature: {why}; nothing was credited"))
}

/// Checks `header` (`t=<unix seconds>,v1=<hex>,v1=…`) for `body` with `secret` at `now_secs`.
pub fn verify_signature(secret: &str, header: &str, body: &[u8], now_secs: i64) -> Result<(), ServiceError> {
    let mut timestamp: Option<&str> = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = Some(t),
            Some(("v1", v)) => signatures.push(v),
            _ => {}
        }
    }
    let t = timestamp.ok_or_else(|| bad_signature("no timestamp"))?;
    let seconds: i64 = t.parse().map_err(|_| bad_signature("the timestamp is not a number"))?;
    if (now_secs - seconds).abs() > SIGNATURE_TOLERANCE_SECS {
        return Err(bad_signature("the timestamp is more than five minutes away"));
    }
    if signatures.is_empty() {
        return Err(bad_signature("no v1 signature"));
    }
    for signature in signatures {
        let Some(expected) = unhex(signature) else { continue };
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .map_err(|e| ServiceError::Internal(format!("webhook secret: {e}")))?;
        mac.update(t.as_bytes());
        mac.update(b".");
        mac.update(body);
        if mac.verify_slice(&expected).is_ok() {
            return Ok(());
        }
    }
    Err(bad_signature("no v1 signature matches the body"))
}

/// Lowercase or uppercase hex to bytes; `None` for anything else.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// The members of an event the gateway reads.
#[derive(serde::Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    data: EventData<'a>,
}

#[derive(serde::Deserialize)]
struct EventData<'a> {
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
}

/// The members of a Checkout Session the gateway reads.
#[derive(serde::Deserialize)]
struct Session {
    id: String,
    #[serde(default)]
    client_reference_id: Option<String>,
    #[serde(default)]
    amount_total: Option<i64>,
    #[serde(default)]
    currency: Option<String>,
    #[serde(default)]
    payment_status: Option<String>,
}

impl Gateway {
    fn payments(&self) -> Result<&PaymentPorts, ServiceError> {
        self.ports.payments.as_ref().ok_or(ServiceError::PaymentsNotConfigured)
    }

    /// A hosted payment page for `who` to pay `amount` (USD, at most two decimals, within the
    /// operator's bounds).
    pub async fn checkout(&self, who: &Principal, amount: &str) -> Result<CheckoutSession, ServiceError> {
        let payments = self.payments()?;
        let settings = &payments.settings;
        let usd = UsdAmount::parse_decimal(amount).map_err(|e| ServiceError::InvalidRequest(format!("amount: {e}")))?;
        if usd.micros() % MICROS_PER_CENT != 0 {
            return Err(ServiceError::InvalidRequest(format!("amount: at most 2 decimals, got {amount}")));
        }
        if usd < settings.min || usd > settings.max {
            return Err(ServiceError::InvalidRequest(format!(
                "amount must be {} to {} USD, got {usd}",
                settings.min, settings.max
            )));
        }
        let req = CheckoutRequest {
            user: who.user_id.clone(),
            amount_cents: usd.micros() / MICROS_PER_CENT,
            product_name: PRODUCT_NAME.into(),
            success_url: settings.success_url.clone(),
            cancel_url: settings.cancel_url.clone(),
            idempotency_key: self.ports.ids.new_id("checkout_"),
        };
        payments.processor.create_checkout(&req).await.map_err(|e| {
            tracing::warn!(error = %e, user = %who.user_id, "creating a Checkout Session failed");
            let retryable = matches!(e, PaymentError::Unavailable(_));
            ServiceError::Upstream {
                message: "the payment processor did not create a payment page; nothing was charged".into(),
                retryable,
            }
        })
    }

    /// Handles one Stripe event: `signature` is the `Stripe-Signature` header, `body` the raw
    /// body. A completed, paid, USD Checkout Session credits its amount to its
    /// `client_reference_id` once; anything else is acknowledged and ignored.
    pub async fn stripe_event(&self, signature: Option<&str>, body: &[u8]) -> Result<EventOutcome, ServiceError> {
        let payments = self.payments()?;
        let signature = signature.ok_or_else(|| bad_signature("missing"))?;
        let now = self.ports.clock.now().millis() / 1000;
        verify_signature(&payments.settings.webhook_secret, signature, body, now)?;
        let event: Event<'_> = serde_json::from_slice(body)
            .map_err(|e| ServiceError::InvalidRequest(format!("not a Stripe event: {e}")))?;
        if event.kind != "checkout.session.completed" {
            return Ok(EventOutcome::Ignored("not a completed Checkout Session"));
        }
        let session: Session = serde_json::from_str(event.data.object.get())
            .map_err(|e| ServiceError::InvalidRequest(format!("not a Checkout Session: {e}")))?;
        if session.payment_status.as_deref() != Some("paid") {
            return Ok(EventOutcome::Ignored("the session is not paid"));
        }
        if session.currency.as_deref() != Some("usd") {
            return Ok(EventOutcome::Ignored("the session is not in USD"));
        }
        let cents = session.amount_total.filter(|c| *c > 0).ok_or_else(|| {
            ServiceError::InvalidRequest(format!("session {} has no positive amount_total", session.id))
        })?;
        let amount = cents
            .checked_mul(MICROS_PER_CENT)
            .map(UsdAmount::from_micros)
            .ok_or_else(|| ServiceError::InvalidRequest("amount_total out of range".into()))?;
        let user = session.client_reference_id.map(UserId).ok_or_else(|| {
            ServiceError::InvalidRequest(format!("session {} has no client_reference_id", session.id))
        })?;
        match self.ports.ledger.pay(&user, &session.id, amount).await {
            Ok(entry) => {
                tracing::info!(%user, session = %session.id, amount = %amount, "Stripe top-up credited");
                Ok(EventOutcome::Credited { amount, balance: entry.balance_after })
            }
            Err(billing::LedgerError::PaymentCredited(_)) => Ok(EventOutcome::AlreadyCredited),
            Err(e) => Err(ServiceError::from(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &str, t: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("key");
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        crate::keys::hex(&mac.finalize().into_bytes())
    }

    #[test]
    fn signatures_are_checked_as_stripe_documents_them() {
        let (secret, body, t) = ("whsec_test", br#"{"id":"evt_1"}"#.as_slice(), 1_700_000_000);
        let good = sign(secret, t, body);
        let ok = |header: &str, now: i64| verify_signature(secret, header, body, now).is_ok();
        assert!(ok(&format!("t={t},v1={good}"), t));
        assert!(ok(&format!("t={t},v1=00,v1={good},v0=ff"), t + 300), "any v1 entry, at the tolerance");
        assert!(!ok(&format!("t={t},v1={good}"), t + 301), "stale");
        assert!(!ok(&format!("t={t},v1={good}"), t - 301), "from the future");
        assert!(!ok(&format!("t={t},v0={good}"), t), "only v1 counts");
        assert!(!ok(&format!("v1={good}"), t), "no timestamp");
        assert!(!ok(&format!("t={},v1={good}", t + 1), t), "the timestamp is signed");
        assert!(!ok(&format!("t={t},v1={}", sign("whsec_other", t, body)), t), "another secret");
        let mut tampered = body.to_vec();
        tampered[2] = b'X';
        assert!(verify_signature(secret, &format!("t={t},v1={good}"), &tampered, t).is_err(), "another body");
        assert!(!ok("", t) && !ok("t=x,v1=zz", t));
    }
}
