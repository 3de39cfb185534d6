//! Who may call a route: the check of a route's [`Auth`] before its handler runs.

use domain::Scope;

use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::handlers;
use crate::headers::bearer;
use crate::route::Auth;
use crate::state::client_ip;

/// Checks `auth` for the request in `ctx`, recording the caller it authenticated.
pub(super) async fn authenticate(ctx: &mut Ctx<'_>, auth: Auth) -> Result<(), ApiError> {
    let gateway = ctx.state.gateway();
    let headers = &ctx.parts.headers;
    let client = client_ip(&ctx.parts);
    match auth {
        Auth::Public | Auth::SignedLink | Auth::ProcessorSignature => {}
        Auth::MetricsToken => handlers::metrics_allowed(ctx.state, headers)?,
        Auth::Key(scope) => ctx.who = Some(gateway.authenticate(bearer(headers), scope, client).await?),
        Auth::KeyOrXApiKey(scope) => {
            let x_api_key = || headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim);
            ctx.who = Some(gateway.authenticate(bearer(headers).or_else(x_api_key), scope, client).await?);
        }
        Auth::Operator => {
            let who = gateway.authenticate(bearer(headers), Scope::Admin, client).await?;
            ctx.actor = Some(gateway.operator_actor(&who)?);
            ctx.who = Some(who);
        }
    }
    Ok(())
}
