//! The top-up routes: `POST /api/v1/topups/checkout` (a hosted Stripe Checkout page for the
//! caller) and `POST /api/v1/stripe/webhook` (Stripe's signed events; no API key). Handlers, wire
//! shapes and OpenAPI operations, each declared once in the route table.

use http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;
use service::EventOutcome;
use validation::CheckoutBody;

use super::Reply;
use crate::ctx::Ctx;
use crate::doc::{Docs, Op};
use crate::response::{json_response, ok_json};
use crate::wire::Usd;

/// `POST /api/v1/topups/checkout` (201): where to send the payer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CheckoutObject {
    /// The Checkout Session's id (`cs_…`).
    pub id: String,
    /// The hosted payment page.
    pub url: String,
}

/// `POST /api/v1/stripe/webhook`: what the event did.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EventObject {
    /// Always true: the event was verified and handled.
    pub received: bool,
    /// `credited`, `already_credited` or `ignored`.
    pub outcome: &'static str,
    /// What was credited; `null` unless `credited`.
    pub credited: Option<Usd>,
    /// Why it was ignored; `null` unless `ignored`.
    pub reason: Option<&'static str>,
}

/// `POST /api/v1/topups/checkout`.
pub(crate) async fn checkout(mut ctx: Ctx<'_>) -> Reply {
    let req: CheckoutBody = ctx.json().await?;
    let session = ctx.gateway().checkout(ctx.who()?, &req.amount).await?;
    Ok(json_response(StatusCode::CREATED, &CheckoutObject { id: session.id, url: session.url }))
}

/// `POST /api/v1/stripe/webhook`.
pub(crate) async fn stripe_webhook(mut ctx: Ctx<'_>) -> Reply {
    let body = ctx.json_bytes_of("stripe").await?;
    let signature = ctx.parts.headers.get("stripe-signature").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let outcome = ctx.gateway().stripe_event(signature.as_deref(), &body).await?;
    let answer = match outcome {
        EventOutcome::Credited { amount, .. } => {
            EventObject { received: true, outcome: "credited", credited: Some(amount.into()), reason: None }
        }
        EventOutcome::AlreadyCredited => {
            EventObject { received: true, outcome: "already_credited", credited: None, reason: None }
        }
        EventOutcome::Ignored(why) => {
            EventObject { received: true, outcome: "ignored", credited: None, reason: Some(why) }
        }
    };
    Ok(ok_json(&answer))
}

pub(crate) fn checkout_op(d: &mut Docs) -> Op {
    let body = d.request::<CheckoutBody>();
    let codes = [400, 401, 413, 415, 502, 503];
    Op { parameters: vec![], body, responses: d.json_answer::<CheckoutObject>(201, "the payment page", &codes) }
}

pub(crate) fn stripe_webhook_op(d: &mut Docs) -> Op {
    let signature = json!({
        "name": "Stripe-Signature", "in": "header", "required": true,
        "description": "`t=<unix seconds>,v1=<hex HMAC-SHA256 of \"{t}.{body}\">` as Stripe signs it",
        "schema": {"type": "string"}
    });
    let body = Some(json!({
        "required": true,
        "content": {"application/json": {"schema": {"type": "object", "description": "A Stripe event"}}}
    }));
    let codes = [400, 413, 415, 503];
    Op { parameters: vec![signature], body, responses: d.json_answer::<EventObject>(200, "handled", &codes) }
}
