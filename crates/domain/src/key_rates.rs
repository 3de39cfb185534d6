//! Per-key rate limits (issue 25): requests and tokens per fixed UTC minute, counted across replicas.
//!
//! Each replica leases blocks of a key's current minute from the database ([`RateLeases`]) and
//! admits calls locally against its block. The database grants under a lock, by one rule
//! ([`RateUse::grant`]): the blocks of all replicas within one minute never add up to more than the
//! key's limit, so at most `rpm` requests are admitted per UTC minute, however many replicas serve
//! the key.

use std::fmt;
use std::num::NonZeroU32;

use async_trait::async_trait;

use crate::ids::ApiKeyId;
use crate::ports::StoreError;
use crate::time::Timestamp;

/// A key's rate limits; `None`: no limit of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct KeyRates {
    /// Requests (generation calls) per UTC minute.
    pub rpm: Option<NonZeroU32>,
    /// Language-model tokens (prompt + completion) per UTC minute.
    pub tpm: Option<NonZeroU32>,
}

/// A rate limit text that is not a positive integer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a rate limit is a positive integer (at most {max}), not {0:?}", max = u32::MAX)]
pub struct BadRateLimit(pub String);

impl KeyRates {
    /// Whether any limit is set (a key without one costs nothing on the hot path).
    pub const fn is_limited(&self) -> bool {
        self.rpm.is_some() || self.tpm.is_some()
    }

    /// Reads one limit: a positive integer that fits in 32 bits.
    pub fn parse_limit(text: &str) -> Result<NonZeroU32, BadRateLimit> {
        text.trim().parse::<NonZeroU32>().map_err(|_| BadRateLimit(text.to_owned()))
    }
}

/// The length of a rate window: one UTC minute.
pub const RATE_WINDOW_MS: i64 = 60_000;

/// The fixed UTC minute `now` falls in (minutes since the epoch).
pub const fn rate_window(now: Timestamp) -> i64 {
    now.millis().div_euclid(RATE_WINDOW_MS)
}

/// The instant window `window` ends (the next one starts).
pub const fn rate_window_end(window: i64) -> Timestamp {
    Timestamp(window.saturating_add(1).saturating_mul(RATE_WINDOW_MS))
}

/// Which of a key's limits refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateLimitKind {
    /// Requests per minute.
    Requests,
    /// Tokens per minute.
    Tokens,
}

impl fmt::Display for RateLimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RateLimitKind::Requests => "requests per minute",
            RateLimitKind::Tokens => "tokens per minute",
        })
    }
}

/// What a replica asks of a key's window: at least `need_*` (else nothing is granted), at most
/// `want_*` (the need plus headroom, so that the next calls are served locally).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateAsk {
    /// The asking replica's current window ([`rate_window`]).
    pub window: i64,
    /// The key's limits (a `None` limit is neither counted nor granted).
    pub rates: KeyRates,
    /// Requests the call needs beyond what the replica holds.
    pub need_requests: u64,
    /// Requests the replica would like (≥ `need_requests`).
    pub want_requests: u64,
    /// Tokens the call needs beyond what the replica holds.
    pub need_tokens: u64,
    /// Tokens the replica would like (≥ `need_tokens`).
    pub want_tokens: u64,
}

/// What the database answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateGrant {
    /// Blocks granted in `window` (which is later than the asked one when another replica's clock
    /// already moved the key on).
    Granted {
        /// The window the blocks belong to.
        window: i64,
        /// Requests granted (≥ the need).
        requests: u64,
        /// Tokens granted (≥ the need).
        tokens: u64,
    },
    /// The window has no room for the need; nothing was granted.
    Refused {
        /// The window that is full.
        window: i64,
        /// The limit that is reached.
        limit: RateLimitKind,
    },
}

/// A key's counts in its current window, as stored: what has been granted to replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateUse {
    /// The window counted.
    pub window: i64,
    /// Requests granted in it.
    pub requests: i64,
    /// Tokens granted in it (less what replicas gave back).
    pub tokens: i64,
}

impl RateUse {
    /// The grant for `ask` and the counts to store after it. A stored earlier window counts as
    /// empty (the key starts a new minute); a stored later window (a replica whose clock is ahead
    /// moved it on) is the one counted into, so a window's counts only ever grow until it ends.
    /// Nothing is granted unless both needs fit under their limits; then each want is granted as
    /// far as its limit leaves room.
    pub fn grant(self, ask: &RateAsk) -> (RateUse, RateGrant) {
        let current =
            if self.window < ask.window { RateUse { window: ask.window, requests: 0, tokens: 0 } } else { self };
        let room = |limit: Option<NonZeroU32>, used: i64| limit.map(|l| (i64::from(l.get()) - used).max(0));
        let (room_r, room_t) = (room(ask.rates.rpm, current.requests), room(ask.rates.tpm, current.tokens));
        let fits = |room: Option<i64>, need: u64| room.is_none_or(|r| i64::try_from(need).is_ok_and(|n| n <= r));
        if !fits(room_r, ask.need_requests) {
            return (current, RateGrant::Refused { window: current.window, limit: RateLimitKind::Requests });
        }
        if !fits(room_t, ask.need_tokens) {
            return (current, RateGrant::Refused { window: current.window, limit: RateLimitKind::Tokens });
        }
        let take = |room: Option<i64>, want: u64| {
            room.map_or(0, |r| i64::try_from(want).unwrap_or(i64::MAX).min(r).max(0).unsigned_abs())
        };
        let (requests, tokens) = (take(room_r, ask.want_requests), take(room_t, ask.want_tokens));
        let stored = RateUse {
            window: current.window,
            requests: current.requests.saturating_add_unsigned(requests),
            tokens: current.tokens.saturating_add_unsigned(tokens),
        };
        (stored, RateGrant::Granted { window: current.window, requests, tokens })
    }
}

/// The database side of per-key rate limits: one counter row per key for its current window.
///
/// The rule every implementation keeps: a grant reads the key's counts and writes them back
/// under a lock on that key's row (no other grant for the key in between), by
/// [`RateUse::grant`]; so the grants of one window never pass the key's limits.
#[async_trait]
pub trait RateLeases: Send + Sync {
    /// Grants blocks of `key`'s window as `ask` says (see [`RateUse::grant`]).
    async fn lease_rate(&self, key: &ApiKeyId, ask: &RateAsk) -> Result<RateGrant, StoreError>;

    /// Gives `tokens` granted in `window` back to `key`'s counter (unused reservations), when the
    /// counter is still in that window; never below zero.
    async fn return_tokens(&self, key: &ApiKeyId, window: i64, tokens: u64) -> Result<(), StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rpm: u32, tpm: u32) -> KeyRates {
        KeyRates { rpm: NonZeroU32::new(rpm), tpm: NonZeroU32::new(tpm) }
    }

    fn ask(window: i64, rates: KeyRates, need: (u64, u64), want: (u64, u64)) -> RateAsk {
        RateAsk {
            window,
            rates,
            need_requests: need.0,
            want_requests: want.0,
            need_tokens: need.1,
            want_tokens: want.1,
        }
    }

    #[test]
    fn windows_are_fixed_utc_minutes() {
        let at = |s: &str| s.parse::<Timestamp>().expect(s);
        let w = rate_window(at("2026-11-26T16:12:59.999Z"));
        assert_eq!(rate_window(at("2026-11-26T16:12:00Z")), w);
        assert_eq!(rate_window(at("2026-11-26T16:13:00Z")), w + 1);
        assert_eq!(rate_window_end(w), at("2026-11-26T16:13:00Z"));
        assert_eq!(rate_window(Timestamp(-1)), -1);
    }

    #[test]
    fn grants_up_to_the_limit_and_never_past_it() {
        let rates = limits(10, 0);
        let mut stored = RateUse { window: 5, requests: 0, tokens: 0 };
        let mut granted = 0;
        for _ in 0..10 {
            let (next, grant) = stored.grant(&ask(5, rates, (1, 0), (4, 0)));
            let RateGrant::Granted { requests, tokens, .. } = grant else { panic!("{grant:?}") };
            assert!(requests >= 1 && tokens == 0);
            granted += requests;
            stored = next;
            if granted == 10 {
                break;
            }
        }
        assert_eq!((granted, stored.requests), (10, 10), "4 + 4 + the last 2");
        let (same, refused) = stored.grant(&ask(5, rates, (1, 0), (1, 0)));
        assert_eq!(refused, RateGrant::Refused { window: 5, limit: RateLimitKind::Requests });
        assert_eq!(same, stored, "a refusal changes nothing");
        // The next minute starts from zero.
        let (next, grant) = stored.grant(&ask(6, rates, (1, 0), (1, 0)));
        assert_eq!(grant, RateGrant::Granted { window: 6, requests: 1, tokens: 0 });
        assert_eq!(next, RateUse { window: 6, requests: 1, tokens: 0 });
    }

    #[test]
    fn both_needs_must_fit_and_tokens_say_which_limit() {
        let rates = limits(100, 1000);
        let stored = RateUse { window: 1, requests: 3, tokens: 900 };
        let (_, refused) = stored.grant(&ask(1, rates, (1, 200), (5, 300)));
        assert_eq!(refused, RateGrant::Refused { window: 1, limit: RateLimitKind::Tokens });
        let (next, grant) = stored.grant(&ask(1, rates, (1, 50), (5, 300)));
        assert_eq!(grant, RateGrant::Granted { window: 1, requests: 5, tokens: 100 }, "tokens to the limit");
        assert_eq!(next, RateUse { window: 1, requests: 8, tokens: 1000 });
        // A limit that is not set is neither checked nor counted.
        let only_tokens = limits(0, 1000);
        let (next, grant) = stored.grant(&ask(1, only_tokens, (7, 10), (9, 10)));
        assert_eq!(grant, RateGrant::Granted { window: 1, requests: 0, tokens: 10 });
        assert_eq!(next.requests, 3);
    }

    #[test]
    fn a_later_stored_window_is_the_one_counted_into() {
        let rates = limits(2, 0);
        let ahead = RateUse { window: 8, requests: 2, tokens: 0 };
        let (_, refused) = ahead.grant(&ask(7, rates, (1, 0), (1, 0)));
        assert_eq!(refused, RateGrant::Refused { window: 8, limit: RateLimitKind::Requests });
    }

    #[test]
    fn limits_parse_as_positive_integers() {
        assert_eq!(KeyRates::parse_limit("60").map(NonZeroU32::get), Ok(60));
        for bad in ["0", "-1", "1.5", "", "x", "4294967296"] {
            assert!(KeyRates::parse_limit(bad).is_err(), "{bad:?}");
        }
        assert!(!KeyRates::default().is_limited());
        assert!(limits(0, 1).is_limited());
    }
}
