//! Self-serve top-ups: the payment processor's port (a Stripe Checkout Session is created there;
//! the money is credited when its signed `checkout.session.completed` event arrives).

use async_trait::async_trait;

use crate::UserId;

/// A hosted payment page to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutRequest {
    /// Who pays (the session's `client_reference_id` and `metadata[user_id]`).
    pub user: UserId,
    /// What is paid, in US cents (above zero).
    pub amount_cents: i64,
    /// The line item's product name.
    pub product_name: String,
    /// Where the payer lands after paying.
    pub success_url: String,
    /// Where the payer lands after giving up.
    pub cancel_url: String,
    /// The processor's idempotency key: a retried request makes no second session.
    pub idempotency_key: String,
}

/// A created payment page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutSession {
    /// The processor's id (`cs_…`).
    pub id: String,
    /// Where to send the payer.
    pub url: String,
}

/// Why no payment page was created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentError {
    /// The processor refused the request (its message, for the log and the operator).
    #[error("the payment processor refused: {0}")]
    Refused(String),
    /// The processor could not be reached or answered something unreadable.
    #[error("the payment processor is unavailable: {0}")]
    Unavailable(String),
}

/// The payment processor.
#[async_trait]
pub trait Payments: Send + Sync {
    /// Creates a hosted payment page for `req`.
    async fn create_checkout(&self, req: &CheckoutRequest) -> Result<CheckoutSession, PaymentError>;
}
