//! The low-balance alert routes: `GET` and `PUT /api/v1/alerts` (scope `billing:manage`). Handlers,
//! wire shape and OpenAPI operations, each declared once in the route table.

use domain::UsdAmount;
use schemars::JsonSchema;
use serde::Serialize;
use service::AlertState;
use validation::AlertBody;

use super::Reply;
use crate::ctx::Ctx;
use crate::doc::{Docs, Op};
use crate::error::ApiError;
use crate::response::ok_json;
use crate::wire::Usd;

/// The caller's low-balance alert.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AlertObject {
    /// The threshold; `null`: no alert.
    pub low_balance_usd: Option<Usd>,
    /// Where the `balance.low` event is posted; `null`: no event.
    pub webhook_url: Option<String>,
    /// Whether the next fall below the threshold sends an event (it re-arms once the balance is
    /// back at or above the threshold).
    pub armed: bool,
    /// Whether the balance is below the threshold now.
    pub below: bool,
    /// The balance, read with the alert.
    pub balance_usd: Usd,
}

fn answer(state: &AlertState) -> Reply {
    let balance_usd = state.balance.into();
    let object = match &state.alert {
        Some(a) => AlertObject {
            low_balance_usd: Some(a.threshold.into()),
            webhook_url: a.webhook_url.clone(),
            armed: a.armed,
            below: a.below(),
            balance_usd,
        },
        None => AlertObject { low_balance_usd: None, webhook_url: None, armed: false, below: false, balance_usd },
    };
    Ok(ok_json(&object))
}

/// `GET /api/v1/alerts`.
pub(crate) async fn get(ctx: Ctx<'_>) -> Reply {
    answer(&ctx.gateway().balance_alert(ctx.who()?).await?)
}

/// `PUT /api/v1/alerts`.
pub(crate) async fn put(mut ctx: Ctx<'_>) -> Reply {
    let req: AlertBody = ctx.json().await?;
    if req.webhook_url.as_deref().is_some_and(|url| !validation::media::is_https_url(url)) {
        return Err(ApiError::invalid("webhook_url must be an https URL"));
    }
    let setting = match req.low_balance_usd.as_deref() {
        None => None,
        Some(text) => {
            let threshold =
                UsdAmount::parse_decimal(text).map_err(|e| ApiError::invalid(format!("low_balance_usd: {e}")))?;
            Some((threshold, req.webhook_url))
        }
    };
    answer(&ctx.gateway().set_balance_alert(ctx.who()?, setting).await?)
}

pub(crate) fn get_op(d: &mut Docs) -> Op {
    Op { parameters: vec![], body: None, responses: d.json_answer::<AlertObject>(200, "the alert", &[401]) }
}

pub(crate) fn put_op(d: &mut Docs) -> Op {
    let body = d.request::<AlertBody>();
    let codes = super::ops::with_body(&[400, 401, 503]);
    Op { parameters: vec![], body, responses: d.json_answer::<AlertObject>(200, "the alert as set", &codes) }
}
