//! Upstream routing policy: which of several endpoints of one kind takes the next attempt of a
//! call, and what an attempt's outcome does to its endpoint.
//!
//! - **Pick** ([`Router::pick`]): among the endpoints that serve the model and are not excluded
//!   (tried already by this call), those that can take a call now (not cooling down, circuit not
//!   open, below their in-flight limit and their requests per minute; a half-open circuit lets
//!   one probe through); of them the best priority tier (lowest
//!   number; a higher tier is the fallback); within it by weight, with smooth weighted round
//!   robin (every endpoint's current weight grows by its weight, the largest is picked and loses
//!   the tier's total), so over any run of calls each endpoint's share is its weight's share to
//!   within one call, with the fewest calls in flight breaking ties.
//! - **Report** ([`Router::report`]): a success closes the circuit; a failure counts towards
//!   [`BreakerSettings::failures_to_open`] consecutive ones, which open the circuit for
//!   [`BreakerSettings::open_for`], after which one probe is let through (half-open): its success
//!   closes the circuit, its failure opens it again. A `Retry-After` cools the endpoint down until
//!   then (at most [`BreakerSettings::max_cool_down`]) without counting as a failure of the
//!   circuit. A refused key (401 or 403) takes its endpoint out for
//!   [`BreakerSettings::refused_for`]; [`Router::report`] says when a circuit opened, closed or a
//!   key was refused, so the caller logs each change once.
//!
//! Time is passed in ([`Instant`]), so the policy is tested without sleeping.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One endpoint as the operator configured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSpec {
    /// Its name (in logs, metrics and `admin upstream list`).
    pub name: String,
    /// Its share within its tier (at least 1).
    pub weight: u32,
    /// Its tier: lower is tried first, a higher one is the fallback.
    pub priority: u32,
    /// The models it serves; `None`: every model of its kind.
    pub models: Option<Vec<String>>,
    /// Most attempts in flight on it at once; `None`: no limit.
    pub max_in_flight: Option<u64>,
    /// Most attempts started on it per minute (fixed minutes of this process); `None`: no limit.
    pub rpm: Option<u64>,
}

/// When a circuit opens and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Consecutive failures that open the circuit.
    pub failures_to_open: u32,
    /// How long an open circuit stays open before a probe.
    pub open_for: Duration,
    /// The longest cool-down a `Retry-After` may ask for.
    pub max_cool_down: Duration,
    /// How long an endpoint whose key was refused stays out.
    pub refused_for: Duration,
}

impl Default for BreakerSettings {
    fn default() -> BreakerSettings {
        BreakerSettings {
            failures_to_open: 5,
            open_for: Duration::from_secs(30),
            max_cool_down: Duration::from_secs(300),
            refused_for: Duration::from_secs(3600),
        }
    }
}

/// What one attempt on an endpoint came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It answered (any answer that is not the endpoint's fault, a 4xx other than 429 included).
    Answered,
    /// It failed: no connection, a timeout before the first byte, a 5xx.
    Failed,
    /// It asked to be left alone for this long (a 429 or 503 with `Retry-After`).
    CoolDown(Duration),
    /// It refused the gateway's key (401 or 403).
    KeyRefused,
}

/// Why an attempt failed, for each endpoint's error counts by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No connection, or it broke before an answer.
    Connect,
    /// No answer's head in time.
    Timeout,
    /// 429, or 503 with `Retry-After`: the endpoint asked to be left alone.
    RateLimited,
    /// Another 5xx.
    ServerError,
    /// 401 or 403: the gateway's key was refused.
    RefusedKey,
}

impl ErrorKind {
    /// Every kind, in the order of [`Counts::errors`].
    pub const ALL: [ErrorKind; 5] =
        [ErrorKind::Connect, ErrorKind::Timeout, ErrorKind::RateLimited, ErrorKind::ServerError, ErrorKind::RefusedKey];

    /// Its name in metrics and `admin upstream list`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::ServerError => "server_error",
            ErrorKind::RefusedKey => "refused_key",
        }
    }

    /// Its place in [`Counts::errors`].
    const fn index(self) -> usize {
        match self {
            ErrorKind::Connect => 0,
            ErrorKind::Timeout => 1,
            ErrorKind::RateLimited => 2,
            ErrorKind::ServerError => 3,
            ErrorKind::RefusedKey => 4,
        }
    }
}

/// What a report changed, for the caller to log once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing worth a log line.
    None,
    /// The circuit opened (too many failures in a row, or a failed probe).
    Opened,
    /// The circuit closed again after being open.
    Closed,
    /// The endpoint's key was refused: it is out for [`BreakerSettings::refused_for`].
    KeyRefused,
}

/// An endpoint's circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    /// Calls go through; the consecutive failures so far.
    Closed(u32),
    /// No calls until then.
    Open(Instant),
    /// One probe may go through; whether it is out.
    HalfOpen(bool),
}

/// What [`Router::state`] shows of one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointState {
    /// The endpoint's name.
    pub name: String,
    /// Its circuit.
    pub circuit: Circuit,
    /// Until when it cools down, if it does.
    pub cooling_until: Option<Instant>,
    /// Attempts in flight on it now.
    pub in_flight: u64,
    /// What it did since the start.
    pub counts: Counts,
    /// Attempts and failures in the last minute (six ten-second buckets).
    pub last_minute: (u64, u64),
}

/// What an endpoint did since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Attempts reported.
    pub attempts: u64,
    /// Attempts that failed (`Failed` or `KeyRefused`) or asked for a cool-down.
    pub failures: u64,
    /// Attempts that retried a call another endpoint failed.
    pub retries: u64,
    /// Cool-downs asked for.
    pub cool_downs: u64,
    /// Times its circuit opened.
    pub circuit_opened: u64,
    /// Failed attempts by kind, in the order of [`ErrorKind::ALL`].
    pub errors: [u64; 5],
}

impl Counts {
    /// Failed attempts of `kind`.
    pub const fn errors_of(&self, kind: ErrorKind) -> u64 {
        self.errors[kind.index()]
    }
}

/// Attempts and failures in ten-second buckets over the last minute.
#[derive(Debug, Clone, Copy, Default)]
struct Recent {
    /// (bucket number since the router started, attempts, failures), at `bucket % 6`.
    buckets: [(u64, u64, u64); 6],
}

impl Recent {
    fn record(&mut self, bucket: u64, failed: bool) {
        let slot = &mut self.buckets[usize::try_from(bucket % 6).unwrap_or(0)];
        if slot.0 != bucket {
            *slot = (bucket, 0, 0);
        }
        slot.1 += 1;
        slot.2 += u64::from(failed);
    }

    fn last_minute(&self, bucket: u64) -> (u64, u64) {
        self.buckets
            .iter()
            .filter(|(b, _, _)| *b + 6 > bucket && *b <= bucket)
            .fold((0, 0), |(a, f), (_, attempts, failures)| (a + attempts, f + failures))
    }
}

#[derive(Debug)]
struct Slot {
    spec: EndpointSpec,
    circuit: Circuit,
    cooling_until: Option<Instant>,
    in_flight: u64,
    /// Smooth weighted round robin's current weight.
    current: i64,
    /// Whether its key was refused (and not accepted since): reported once.
    refused: bool,
    counts: Counts,
    recent: Recent,
    /// (minute number since the router started, attempts started in it), for `rpm`.
    this_minute: (u64, u64),
}

impl Slot {
    fn serves(&self, model: &str) -> bool {
        self.spec.models.as_ref().is_none_or(|models| models.iter().any(|m| m == model))
    }

    /// Attempts started on it in `minute` so far.
    fn started_in(&self, minute: u64) -> u64 {
        if self.this_minute.0 == minute { self.this_minute.1 } else { 0 }
    }

    /// Whether a call may go to it at `now`, in `minute` (moving an open circuit whose time is up
    /// to half-open).
    fn available(&mut self, now: Instant, minute: u64) -> bool {
        if self.cooling_until.is_some_and(|until| until > now)
            || self.spec.max_in_flight.is_some_and(|m| self.in_flight >= m)
            || self.spec.rpm.is_some_and(|m| self.started_in(minute) >= m)
        {
            return false;
        }
        match self.circuit {
            Circuit::Closed(_) => true,
            Circuit::Open(until) if until <= now => {
                self.circuit = Circuit::HalfOpen(false);
                true
            }
            Circuit::Open(_) | Circuit::HalfOpen(true) => false,
            Circuit::HalfOpen(false) => true,
        }
    }
}

/// The endpoints of one kind of call and their health; shared by every call of the process.
#[derive(Debug)]
pub struct Router {
    slots: Mutex<Vec<Slot>>,
    breaker: BreakerSettings,
    started: Instant,
}

/// One attempt's endpoint: its index (for [`Router::report`]) and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    /// The endpoint's index in the router.
    pub index: usize,
    /// Its name.
    pub name: String,
}

impl Router {
    /// A router over `endpoints` (weights below 1 count as 1).
    pub fn new(endpoints: Vec<EndpointSpec>, breaker: BreakerSettings) -> Router {
        let slots = endpoints
            .into_iter()
            .map(|spec| Slot {
                spec: EndpointSpec { weight: spec.weight.max(1), ..spec },
                circuit: Circuit::Closed(0),
                cooling_until: None,
                in_flight: 0,
                current: 0,
                refused: false,
                counts: Counts::default(),
                recent: Recent::default(),
                this_minute: (0, 0),
            })
            .collect();
        Router { slots: Mutex::new(slots), breaker, started: Instant::now() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The endpoint for the next attempt of a call to `model`, leaving out `tried`; `None` when
    /// no endpoint that serves the model can take a call now. The pick counts as in flight until
    /// it is reported.
    pub fn pick(&self, model: &str, tried: &[usize], now: Instant) -> Option<Pick> {
        let minute = now.saturating_duration_since(self.started).as_secs() / 60;
        let mut slots = self.lock();
        let mut open: Vec<usize> = Vec::new();
        for (i, slot) in slots.iter_mut().enumerate() {
            if !tried.contains(&i) && slot.serves(model) && slot.available(now, minute) {
                open.push(i);
            }
        }
        let tier = open.iter().map(|&i| slots[i].spec.priority).min()?;
        open.retain(|&i| slots[i].spec.priority == tier);
        let total: i64 = open.iter().map(|&i| i64::from(slots[i].spec.weight)).sum();
        for &i in &open {
            slots[i].current += i64::from(slots[i].spec.weight);
        }
        let chosen = open.iter().copied().max_by(|&a, &b| {
            slots[a].current.cmp(&slots[b].current).then(slots[b].in_flight.cmp(&slots[a].in_flight)).then(b.cmp(&a))
        })?;
        let slot = &mut slots[chosen];
        slot.current -= total;
        slot.in_flight += 1;
        slot.this_minute = (minute, slot.started_in(minute) + 1);
        if slot.circuit == Circuit::HalfOpen(false) {
            slot.circuit = Circuit::HalfOpen(true);
        }
        Some(Pick { index: chosen, name: slot.spec.name.clone() })
    }

    /// Whether any endpoint serves `model` (whatever its health).
    pub fn serves(&self, model: &str) -> bool {
        self.lock().iter().any(|s| s.serves(model))
    }

    /// The ten-second bucket `now` falls in.
    fn bucket(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_secs() / 10
    }

    /// Counts the attempt on `index` as a retry of a call another endpoint failed.
    pub fn retried(&self, index: usize) {
        if let Some(slot) = self.lock().get_mut(index) {
            slot.counts.retries += 1;
        }
    }

    /// Counts a failed attempt on `index` as one of `kind` (besides [`Router::report`]).
    pub fn count_error(&self, index: usize, kind: ErrorKind) {
        if let Some(slot) = self.lock().get_mut(index) {
            slot.counts.errors[kind.index()] += 1;
        }
    }

    /// Records how the attempt on `index` ended; what it changed.
    pub fn report(&self, index: usize, outcome: Outcome, now: Instant) -> Change {
        let breaker = self.breaker;
        let bucket = self.bucket(now);
        let mut slots = self.lock();
        let Some(slot) = slots.get_mut(index) else { return Change::None };
        slot.in_flight = slot.in_flight.saturating_sub(1);
        let failed = outcome != Outcome::Answered;
        slot.counts.attempts += 1;
        slot.counts.failures += u64::from(failed);
        slot.counts.cool_downs += u64::from(matches!(outcome, Outcome::CoolDown(_)));
        slot.recent.record(bucket, failed);
        let change = Self::apply(slot, outcome, now, breaker);
        if matches!(change, Change::Opened | Change::KeyRefused) {
            slot.counts.circuit_opened += 1;
        }
        change
    }

    fn apply(slot: &mut Slot, outcome: Outcome, now: Instant, breaker: BreakerSettings) -> Change {
        let was_open = !matches!(slot.circuit, Circuit::Closed(_));
        match outcome {
            Outcome::Answered => {
                slot.circuit = Circuit::Closed(0);
                slot.refused = false;
                if was_open { Change::Closed } else { Change::None }
            }
            Outcome::CoolDown(wait) => {
                slot.cooling_until = Some(now + wait.min(breaker.max_cool_down));
                if let Circuit::HalfOpen(_) = slot.circuit {
                    slot.circuit = Circuit::HalfOpen(false);
                }
                Change::None
            }
            Outcome::KeyRefused => {
                slot.circuit = Circuit::Open(now + breaker.refused_for);
                // Attempts picked before the first refusal came back report it again: once is enough.
                if std::mem::replace(&mut slot.refused, true) { Change::None } else { Change::KeyRefused }
            }
            Outcome::Failed => match slot.circuit {
                Circuit::Closed(n) if n + 1 < breaker.failures_to_open => {
                    slot.circuit = Circuit::Closed(n + 1);
                    Change::None
                }
                Circuit::Closed(_) | Circuit::HalfOpen(_) => {
                    slot.circuit = Circuit::Open(now + breaker.open_for);
                    Change::Opened
                }
                // A late failure of an attempt picked before the circuit opened.
                Circuit::Open(_) => Change::None,
            },
        }
    }

    /// Every endpoint's state, in configured order.
    pub fn state(&self) -> Vec<EndpointState> {
        let bucket = self.bucket(Instant::now());
        self.lock()
            .iter()
            .map(|s| EndpointState {
                name: s.spec.name.clone(),
                circuit: s.circuit,
                cooling_until: s.cooling_until,
                in_flight: s.in_flight,
                counts: s.counts,
                last_minute: s.recent.last_minute(bucket),
            })
            .collect()
    }

    /// Whether some endpoint could take a call now (for `/readyz`).
    pub fn can_take_calls(&self, now: Instant) -> bool {
        let slots = self.lock();
        slots.iter().any(|s| {
            s.cooling_until.is_none_or(|until| until <= now)
                && match s.circuit {
                    Circuit::Closed(_) | Circuit::HalfOpen(false) => true,
                    Circuit::Open(until) => until <= now,
                    Circuit::HalfOpen(true) => false,
                }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, weight: u32, priority: u32) -> EndpointSpec {
        EndpointSpec { name: name.into(), weight, priority, models: None, max_in_flight: None, rpm: None }
    }

    fn shares(router: &Router, calls: usize, now: Instant) -> Vec<usize> {
        let mut counts = vec![0; router.state().len()];
        for _ in 0..calls {
            let pick = router.pick("m", &[], now).expect("a pick");
            counts[pick.index] += 1;
            router.report(pick.index, Outcome::Answered, now);
        }
        counts
    }

    #[test]
    fn weights_are_honoured_exactly_within_a_tier() {
        let router = Router::new(vec![spec("a", 3, 0), spec("b", 1, 0), spec("c", 6, 0)], BreakerSettings::default());
        assert_eq!(shares(&router, 1_000, Instant::now()), [300, 100, 600]);
        // Within any ten calls, each has its share exactly.
        assert_eq!(shares(&router, 10, Instant::now()), [3, 1, 6]);
    }

    #[test]
    fn the_fallback_tier_takes_calls_only_when_the_first_cannot() {
        let now = Instant::now();
        let breaker =
            BreakerSettings { failures_to_open: 2, open_for: Duration::from_secs(10), ..BreakerSettings::default() };
        let router = Router::new(vec![spec("main", 1, 0), spec("backup", 1, 1)], breaker);
        assert_eq!(shares(&router, 20, now), [20, 0]);
        for _ in 0..2 {
            let pick = router.pick("m", &[], now).expect("main");
            assert_eq!(pick.name, "main");
            router.report(pick.index, Outcome::Failed, now);
        }
        assert_eq!(router.state()[0].circuit, Circuit::Open(now + Duration::from_secs(10)));
        assert_eq!(shares(&router, 5, now), [0, 5], "main's circuit is open");
        // After the open time one probe goes to main; a second call meanwhile goes to backup.
        let later = now + Duration::from_secs(10);
        let probe = router.pick("m", &[], later).expect("probe");
        assert_eq!(probe.name, "main");
        assert_eq!(router.pick("m", &[], later).map(|p| p.name).as_deref(), Some("backup"));
        router.report(1, Outcome::Answered, later);
        router.report(probe.index, Outcome::Answered, later);
        assert_eq!(router.state()[0].circuit, Circuit::Closed(0));
        assert_eq!(shares(&router, 5, later), [5, 0], "closed again: main takes every call");
    }

    #[test]
    fn a_failed_probe_opens_the_circuit_again() {
        let now = Instant::now();
        let breaker =
            BreakerSettings { failures_to_open: 1, open_for: Duration::from_secs(5), ..BreakerSettings::default() };
        let router = Router::new(vec![spec("a", 1, 0)], breaker);
        let pick = router.pick("m", &[], now).expect("a");
        router.report(pick.index, Outcome::Failed, now);
        assert!(router.pick("m", &[], now).is_none(), "open");
        assert!(!router.can_take_calls(now));
        let later = now + Duration::from_secs(5);
        assert!(router.can_take_calls(later));
        let probe = router.pick("m", &[], later).expect("probe");
        assert!(router.pick("m", &[], later).is_none(), "one probe at a time");
        router.report(probe.index, Outcome::Failed, later);
        assert_eq!(router.state()[0].circuit, Circuit::Open(later + Duration::from_secs(5)));
    }

    #[test]
    fn a_refused_key_is_out_for_long_and_reported_once() {
        let now = Instant::now();
        let router = Router::new(vec![spec("bad-key", 1, 0), spec("good", 1, 0)], BreakerSettings::default());
        let first = router.pick("m", &[], now).expect("pick");
        let concurrent = router.pick("m", &[], now).expect("pick");
        let late = router.pick("m", &[concurrent.index], now).expect("pick");
        assert_eq!(late.index, first.index, "picked again before the refusal came back");
        assert_eq!(router.report(first.index, Outcome::KeyRefused, now), Change::KeyRefused);
        assert_eq!(router.report(late.index, Outcome::KeyRefused, now), Change::None, "reported once");
        router.report(concurrent.index, Outcome::Answered, now);
        let counts = shares(&router, 10, now + Duration::from_secs(3_599));
        assert_eq!(counts[first.index], 0, "out for refused_for");
        let back = shares(&router, 10, now + Duration::from_secs(3_600))[first.index];
        assert!((4..=6).contains(&back), "after it a probe, which answered: back in the rotation ({back} of 10)");
        assert_eq!(router.state()[first.index].circuit, Circuit::Closed(0));
    }

    #[test]
    fn changes_are_reported_once() {
        let now = Instant::now();
        let breaker = BreakerSettings { failures_to_open: 2, ..BreakerSettings::default() };
        let router = Router::new(vec![spec("a", 1, 0)], breaker);
        let report = |outcome| {
            let pick = router.pick("m", &[], now + Duration::from_secs(60)).expect("pick");
            router.report(pick.index, outcome, now + Duration::from_secs(60))
        };
        assert_eq!(report(Outcome::Failed), Change::None);
        assert_eq!(report(Outcome::Failed), Change::Opened);
        assert_eq!(router.report(0, Outcome::Failed, now), Change::None, "a late failure while open");
        let later = now + Duration::from_secs(200);
        let probe = router.pick("m", &[], later).expect("probe");
        assert_eq!(router.report(probe.index, Outcome::Answered, later), Change::Closed);
        assert_eq!(report(Outcome::Answered), Change::None);
    }

    #[test]
    fn retry_after_cools_an_endpoint_down_and_retries_skip_tried_ones() {
        let now = Instant::now();
        let router = Router::new(vec![spec("a", 1, 0), spec("b", 1, 0)], BreakerSettings::default());
        let first = router.pick("m", &[], now).expect("first");
        let second = router.pick("m", &[first.index], now).expect("another endpoint");
        assert_ne!(first.index, second.index);
        assert!(router.pick("m", &[first.index, second.index], now).is_none(), "all tried");
        router.report(first.index, Outcome::CoolDown(Duration::from_secs(30)), now);
        router.report(second.index, Outcome::Answered, now);
        let counts = shares(&router, 6, now + Duration::from_secs(29));
        assert_eq!(counts[first.index], 0, "cooling down");
        let counts = shares(&router, 6, now + Duration::from_secs(30));
        assert_eq!(counts[first.index], 3, "back after its Retry-After");
        // A cool-down is capped.
        router.report(
            router.pick("m", &[], now).expect("pick").index,
            Outcome::CoolDown(Duration::from_secs(86_400)),
            now,
        );
        let capped = router.state().into_iter().filter_map(|s| s.cooling_until).max().expect("cooling");
        assert_eq!(capped, now + BreakerSettings::default().max_cool_down);
    }

    #[test]
    fn an_endpoint_at_its_in_flight_limit_is_passed_over() {
        let now = Instant::now();
        let small = EndpointSpec { max_in_flight: Some(1), ..spec("small", 10, 0) };
        let router = Router::new(vec![small, spec("big", 1, 0)], BreakerSettings::default());
        let first = router.pick("m", &[], now).expect("pick");
        assert_eq!(first.name, "small", "the heavier weight first");
        let second = router.pick("m", &[], now).expect("pick");
        assert_eq!(second.name, "big", "small is at its limit");
        router.report(first.index, Outcome::Answered, now);
        assert_eq!(router.pick("m", &[], now).map(|p| p.name).as_deref(), Some("small"), "room again");
    }

    #[test]
    fn an_endpoint_at_its_requests_per_minute_is_passed_over_until_the_next_minute() {
        let limited = EndpointSpec { rpm: Some(3), ..spec("limited", 10, 0) };
        let router = Router::new(vec![limited, spec("other", 1, 1)], BreakerSettings::default());
        // Minutes count from the router's start, which is just before this.
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        // Three attempts start on it in the first minute (answered or not), the fourth goes to the
        // fallback tier; in the next minute it takes calls again.
        assert_eq!(shares(&router, 5, at(1)), [3, 2]);
        assert_eq!(shares(&router, 2, at(59)), [0, 2]);
        assert_eq!(shares(&router, 4, at(60)), [3, 1]);
        // Failed attempts count too: the limit is the upstream's, on requests sent.
        let pick = router.pick("m", &[], at(120)).expect("pick");
        router.report(pick.index, Outcome::Failed, at(120));
        assert_eq!(shares(&router, 3, at(121)), [2, 1]);
    }

    #[test]
    fn counts_and_the_last_minute() {
        let start = Instant::now();
        let router =
            Router::new(vec![spec("a", 1, 0)], BreakerSettings { failures_to_open: 100, ..BreakerSettings::default() });
        let attempt = |outcome, at: u64| {
            let now = start + Duration::from_secs(at);
            let pick = router.pick("m", &[], now).expect("pick");
            router.report(pick.index, outcome, now);
        };
        attempt(Outcome::Answered, 0);
        attempt(Outcome::Failed, 5);
        attempt(Outcome::Answered, 30);
        attempt(Outcome::CoolDown(Duration::ZERO), 55);
        router.retried(0);
        router.count_error(0, ErrorKind::Timeout);
        router.count_error(0, ErrorKind::RateLimited);
        router.count_error(7, ErrorKind::Connect);
        let state = &router.state()[0];
        let counts =
            Counts { attempts: 4, failures: 2, retries: 1, cool_downs: 1, circuit_opened: 0, errors: [0, 1, 1, 0, 0] };
        assert_eq!(state.counts, counts);
        assert_eq!((counts.errors_of(ErrorKind::Timeout), counts.errors_of(ErrorKind::Connect)), (1, 0));
        let names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, ["connect", "timeout", "rate_limited", "server_error", "refused_key"]);
        assert!(ErrorKind::ALL.iter().enumerate().all(|(i, k)| k.index() == i));
        let mut recent = Recent::default();
        for (at, failed) in [(0, false), (0, true), (3, false), (5, true)] {
            recent.record(at, failed);
        }
        assert_eq!(recent.last_minute(5), (4, 2), "buckets 0..=5");
        assert_eq!(recent.last_minute(6), (2, 1), "bucket 0 has left the minute");
        recent.record(9, false);
        assert_eq!(recent.last_minute(9), (2, 1), "buckets 4..=9: 5 and 9 (9 took 3's place)");
        assert_eq!(recent.last_minute(20), (0, 0));
    }

    #[test]
    fn only_endpoints_serving_the_model_are_picked() {
        let now = Instant::now();
        let only_x = EndpointSpec { models: Some(vec!["x".into()]), ..spec("only-x", 5, 0) };
        let router = Router::new(vec![only_x, spec("all", 1, 0)], BreakerSettings::default());
        assert_eq!(router.pick("y", &[], now).map(|p| p.name).as_deref(), Some("all"));
        router.report(1, Outcome::Answered, now);
        assert_eq!(router.pick("y", &[1], now), None, "no other endpoint serves y");
    }
}
