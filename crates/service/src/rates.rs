//! Per-key rate limits (issue 25): requests and language tokens per fixed UTC minute, cluster-wide.
//!
//! A key with no limit costs one field check ([`domain::KeyRates::is_limited`]). For a limited key
//! this replica holds a *block* of the key's current minute: requests and tokens the database
//! granted it ([`RateLeases`]). A call is admitted locally, under one short mutex, when the block
//! covers one request (rpm) and its token estimate (tpm, language calls only); otherwise the
//! replica asks the database for what is missing plus headroom (a sixteenth of the limit), one grant
//! at a time per key (the others wait for it and then look at the block again). The database grants
//! only while the minute has room, so all replicas together admit at most `rpm` requests and
//! reserve at most `tpm` tokens per UTC minute (see `docs/ARCHITECTURE.md`, "Rate limits").
//!
//! A call's ticket ([`RateTicket`]) holds its token reservation: on settlement the unused part goes
//! back to the block (a refunded or dropped call gives all of it back), a usage above the estimate
//! is a debt the block pays from its next grant, and a block holding more than twice its headroom
//! gives the excess back to the database, so one replica does not keep tokens another is refused.
//! Requests are never given back: a request counts when admitted.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, Weak};

use domain::{
    ApiKeyId, Clock, KeyRates, RateAsk, RateGrant, RateLeases, RateLimitKind, Timestamp, rate_window, rate_window_end,
};

use crate::{Principal, ServiceError};

/// What a call asks of its key's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateClaim {
    /// The key.
    pub key: ApiKeyId,
    /// Its limits.
    pub rates: KeyRates,
    /// The tokens to reserve (language calls), or `None`: the call does not count against `tpm`.
    pub tokens: Option<u64>,
    /// The rate-limited keys the key descends from, nearest first: the call counts against each
    /// one's limits too, so the keys a key mints share its rates (empty for an operator's key,
    /// which allocates nothing).
    pub ancestors: Vec<(ApiKeyId, KeyRates)>,
}

impl RateClaim {
    /// A call of `who` that counts as one request and no tokens (image, audio, video).
    pub(crate) fn request(who: &Principal) -> RateClaim {
        RateClaim { key: RateClaim::key_of(who), rates: who.rates, tokens: None, ancestors: RateClaim::above(who) }
    }

    /// A language call of `who` that reserves `tokens` (its prompt bound and the output its hold covers).
    pub(crate) fn language(who: &Principal, tokens: u64) -> RateClaim {
        RateClaim {
            key: RateClaim::key_of(who),
            rates: who.rates,
            tokens: Some(tokens),
            ancestors: RateClaim::above(who),
        }
    }

    /// The rate-limited ancestors of `who`'s key.
    fn above(who: &Principal) -> Vec<(ApiKeyId, KeyRates)> {
        who.ancestors.iter().filter(|a| a.rates.is_limited()).map(|a| (a.id.clone(), a.rates)).collect()
    }

    /// The key's id, copied only when the key has a limit (an empty id allocates nothing and is
    /// never looked up: a key without limits is not counted).
    fn key_of(who: &Principal) -> ApiKeyId {
        if who.rates.is_limited() { who.key_id.clone() } else { ApiKeyId(String::new()) }
    }
}

/// A refusal: which limit, and when the window frees up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RateRefusal {
    /// The limit reached.
    pub limit: RateLimitKind,
    /// The message for the client.
    pub message: String,
    /// Seconds until the next window (at least 1).
    pub retry_after_secs: u64,
}

impl From<RateRefusal> for ServiceError {
    fn from(r: RateRefusal) -> ServiceError {
        ServiceError::RateLimitExceeded { message: r.message, retry_after_secs: r.retry_after_secs }
    }
}

/// What this replica holds of one key's current window.
#[derive(Debug)]
struct Block {
    window: i64,
    /// Requests granted and not yet used.
    requests: u64,
    /// Tokens granted and not reserved; negative while usage above estimates is owed.
    tokens: i64,
    /// Held by the one grant under way for this key.
    refill: Arc<tokio::sync::Mutex<()>>,
}

impl Block {
    fn new(window: i64) -> Block {
        Block { window, requests: 0, tokens: 0, refill: Arc::new(tokio::sync::Mutex::new(())) }
    }

    /// Moves to `window` when it is later (the old window's counts are of no use any more).
    fn roll(&mut self, window: i64) {
        if window > self.window {
            self.window = window;
            self.requests = 0;
            self.tokens = 0;
        }
    }

    /// Takes what `claim` needs, if the block holds it.
    fn take(&mut self, claim: &RateClaim) -> bool {
        let need_r = u64::from(claim.rates.rpm.is_some());
        let need_t = tokens_counted(claim);
        if self.requests < need_r || need_t.is_some_and(|t| self.tokens < signed(t)) {
            return false;
        }
        self.requests -= need_r;
        if let Some(t) = need_t {
            self.tokens -= signed(t);
        }
        true
    }

    /// The ask for what `claim` needs beyond this block, plus headroom.
    fn ask(&self, window: i64, claim: &RateClaim) -> RateAsk {
        let need_requests = if claim.rates.rpm.is_some() { 1u64.saturating_sub(self.requests) } else { 0 };
        let need_tokens = tokens_counted(claim).map_or(0, |t| (signed(t) - self.tokens).max(0).unsigned_abs());
        let want = |need: u64, limit: Option<NonZeroU32>| {
            if limit.is_some() { need.saturating_add(headroom(limit)) } else { 0 }
        };
        RateAsk {
            window,
            rates: claim.rates,
            need_requests,
            want_requests: want(need_requests, claim.rates.rpm),
            need_tokens,
            want_tokens: if tokens_counted(claim).is_some() { want(need_tokens, claim.rates.tpm) } else { 0 },
        }
    }
}

/// The tokens a claim counts: its estimate when the key has a `tpm` and the call is a language call.
fn tokens_counted(claim: &RateClaim) -> Option<u64> {
    claim.rates.tpm.and(claim.tokens)
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Extra asked for with each grant: a sixteenth of the limit (0 below 16).
fn headroom(limit: Option<NonZeroU32>) -> u64 {
    limit.map_or(0, |l| u64::from(l.get() / 16))
}

/// Keys this replica remembers before it forgets those of past windows.
const REMEMBERED_KEYS: usize = 1024;

struct Inner {
    leases: Arc<dyn RateLeases>,
    clock: Arc<dyn Clock>,
    blocks: Mutex<HashMap<ApiKeyId, Block>>,
}

/// This replica's rate-limit blocks (cheap to clone).
#[derive(Clone)]
pub(crate) struct Rates {
    inner: Arc<Inner>,
}

/// An admitted call's token reservation; gives the tokens back to the block when dropped unsettled.
pub(crate) struct RateTicket {
    inner: Weak<Inner>,
    key: ApiKeyId,
    tpm: Option<NonZeroU32>,
    window: i64,
    /// Tokens reserved and not yet settled.
    tokens: u64,
    /// The tickets of the key's rate-limited ancestors (settled and dropped with this one).
    above: Vec<RateTicket>,
}

impl std::fmt::Debug for RateTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateTicket").field("window", &self.window).field("tokens", &self.tokens).finish()
    }
}

impl Rates {
    /// Rate limits over `leases`, with windows read from `clock`.
    pub(crate) fn new(leases: Arc<dyn RateLeases>, clock: Arc<dyn Clock>) -> Rates {
        Rates { inner: Arc::new(Inner { leases, clock, blocks: Mutex::new(HashMap::new()) }) }
    }

    /// Admits `claim` against its key's limits: `None` (and no cost) for a key without limits, a
    /// ticket holding the call's token reservation, or a refusal naming the limit reached.
    pub(crate) async fn admit(&self, claim: &RateClaim) -> Result<Option<RateTicket>, ServiceError> {
        let mut ticket = self.admit_one(claim).await?;
        for (key, rates) in &claim.ancestors {
            let above = RateClaim { key: key.clone(), rates: *rates, tokens: claim.tokens, ancestors: Vec::new() };
            // A refusal drops the tickets taken so far: their tokens go back (a request counts once
            // admitted, as everywhere).
            if let Some(taken) = self.admit_one(&above).await? {
                match ticket.as_mut() {
                    Some(own) => own.above.push(taken),
                    None => ticket = Some(taken),
                }
            }
        }
        Ok(ticket)
    }

    /// Admits `claim` against its own key's limits only.
    async fn admit_one(&self, claim: &RateClaim) -> Result<Option<RateTicket>, ServiceError> {
        if !claim.rates.is_limited() {
            return Ok(None);
        }
        let now = self.inner.clock.now();
        let window = rate_window(now);
        let refill = match self.take_local(claim, window)? {
            Ok(ticket) => return Ok(Some(ticket)),
            Err(refill) => refill,
        };
        // One grant at a time per key: a call that waited looks at the block again first.
        let _turn = refill.lock().await;
        let refill = match self.take_local(claim, window)? {
            Ok(ticket) => return Ok(Some(ticket)),
            Err(refill) => refill,
        };
        drop(refill);
        let ask = {
            let blocks = self.inner.blocks.lock().map_err(|_| poisoned())?;
            blocks.get(&claim.key).map_or_else(|| Block::new(window).ask(window, claim), |b| b.ask(window, claim))
        };
        match self.inner.leases.lease_rate(&claim.key, &ask).await? {
            RateGrant::Granted { window: granted, requests, tokens } => {
                let mut blocks = self.inner.blocks.lock().map_err(|_| poisoned())?;
                let block = blocks.entry(claim.key.clone()).or_insert_with(|| Block::new(granted));
                block.roll(granted);
                if block.window == granted {
                    block.requests = block.requests.saturating_add(requests);
                    block.tokens = block.tokens.saturating_add(signed(tokens));
                }
                if block.take(claim) {
                    return Ok(Some(self.ticket(claim, block.window)));
                }
                // The clock moved past the granted window meanwhile: refuse until the next one.
                Err(self.refusal(claim, RateLimitKind::Requests, block.window, now).into())
            }
            RateGrant::Refused { window: full, limit } => Err(self.refusal(claim, limit, full, now).into()),
        }
    }

    /// Takes the claim from the local block, or returns the key's refill lock to wait on.
    fn take_local(
        &self,
        claim: &RateClaim,
        window: i64,
    ) -> Result<Result<RateTicket, Arc<tokio::sync::Mutex<()>>>, ServiceError> {
        let mut blocks = self.inner.blocks.lock().map_err(|_| poisoned())?;
        if blocks.len() > REMEMBERED_KEYS {
            blocks.retain(|_, b| b.window >= window || Arc::strong_count(&b.refill) > 1);
        }
        let block = blocks.entry(claim.key.clone()).or_insert_with(|| Block::new(window));
        block.roll(window);
        if block.take(claim) {
            let at = block.window;
            return Ok(Ok(self.ticket(claim, at)));
        }
        Ok(Err(Arc::clone(&block.refill)))
    }

    fn ticket(&self, claim: &RateClaim, window: i64) -> RateTicket {
        RateTicket {
            inner: Arc::downgrade(&self.inner),
            key: claim.key.clone(),
            tpm: claim.rates.tpm,
            window,
            tokens: tokens_counted(claim).unwrap_or(0),
            above: Vec::new(),
        }
    }

    fn refusal(&self, claim: &RateClaim, limit: RateLimitKind, window: i64, now: Timestamp) -> RateRefusal {
        let ends = rate_window_end(window);
        let retry_after_secs = ends.millis().saturating_sub(now.millis()).max(0).unsigned_abs().div_ceil(1000).max(1);
        let message = match limit {
            RateLimitKind::Requests => {
                let rpm = claim.rates.rpm.map_or(0, NonZeroU32::get);
                format!("this API key allows {rpm} requests per minute; the limit is reached until {ends}")
            }
            RateLimitKind::Tokens => {
                let tpm = claim.rates.tpm.map_or(0, NonZeroU32::get);
                let asked = claim.tokens.unwrap_or(0);
                if asked > u64::from(tpm) {
                    format!(
                        "this API key allows {tpm} tokens per minute; this call reserves {asked} tokens (its prompt \
                         bound and output cap), more than the whole limit: lower the output cap"
                    )
                } else {
                    format!(
                        "this API key allows {tpm} tokens per minute; this call reserves {asked} tokens (its prompt \
                         bound and output cap), more than is left until {ends}"
                    )
                }
            }
        };
        RateRefusal { limit, message, retry_after_secs }
    }
}

impl RateTicket {
    /// Settles the reservation on `used` tokens (prompt + completion): the rest goes back to the
    /// block, and a block holding more than twice its headroom gives the excess back to the database.
    pub(crate) async fn settle(mut self, used: u64) {
        for above in std::mem::take(&mut self.above) {
            Box::pin(above.settle(used)).await;
        }
        let reserved = std::mem::take(&mut self.tokens);
        if self.tpm.is_none() {
            return;
        }
        let Some(inner) = self.inner.upgrade() else { return };
        let excess = {
            let Ok(mut blocks) = inner.blocks.lock() else { return };
            let Some(block) = blocks.get_mut(&self.key).filter(|b| b.window == self.window) else { return };
            block.tokens = block.tokens.saturating_add(signed(reserved)).saturating_sub(signed(used));
            let keep = signed(headroom(self.tpm));
            if block.tokens > keep.saturating_mul(2) {
                let excess = block.tokens - keep;
                block.tokens = keep;
                excess.unsigned_abs()
            } else {
                0
            }
        };
        if excess > 0
            && let Err(e) = inner.leases.return_tokens(&self.key, self.window, excess).await
        {
            // Conservative: the tokens stay counted until the window ends.
            tracing::warn!(error = %e, "giving unused rate-limit tokens back failed");
        }
    }
}

impl Drop for RateTicket {
    /// An unsettled reservation (a refund, a refusal after admission) goes back to the block whole.
    fn drop(&mut self) {
        if self.tokens == 0 {
            return;
        }
        let Some(inner) = self.inner.upgrade() else { return };
        let Ok(mut blocks) = inner.blocks.lock() else { return };
        if let Some(block) = blocks.get_mut(&self.key).filter(|b| b.window == self.window) {
            block.tokens = block.tokens.saturating_add(signed(self.tokens));
        }
    }
}

fn poisoned() -> ServiceError {
    ServiceError::Internal("the rate-limit state is unusable after a panic".into())
}

#[cfg(test)]
mod tests;
