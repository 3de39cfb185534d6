//! Concurrency caps for synchronous calls: per model (over all users and replicas) and per user
//! (over all models and replicas).
//!
//! A call is admitted locally, under one short mutex, against slots this replica *leases* from the
//! database in blocks ([`CapLeases`]); the database sees lease traffic (a grant when a cap runs
//! short, a renewal every third of the lease time, a give-back when slots sit idle), not calls. The
//! sum of the leases never passes a cap, so replicas together never admit more than it.
//!
//! A call that finds no slot waits in a queue served round-robin across users (one user's burst
//! cannot starve another user), for at most the configured wait; then it answers 429
//! `concurrency_limit_exceeded` with a `Retry-After` estimated from the rate at which slots of that
//! model were released lately. The manager task ([`run_manager`]) keeps the leases: it asks for more
//! when waiters queue, renews before expiry, shrinks blocks that sit unused, and gives a cap back
//! entirely once it has been idle for a while.
//!
//! A lease expires unless renewed, so a replica that dies gives its slots back within one lease
//! time; a replica that cannot renew (database unreachable) stops admitting when its leases expire.
//! At shutdown [`Admission::release_all`] stops the manager (it ends its round and is waited for)
//! before the leases are given back, so no renewal can take them again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use domain::{CapLeases, CapScope, Clock, LeaseRequest, Timestamp, UserId, duration_millis};
use tokio::sync::{Notify, oneshot, watch};

use crate::ServiceError;

/// How caps are kept.
#[derive(Debug, Clone)]
pub struct AdmissionSettings {
    /// Whether caps are enforced at all (an operator running one trusted tenant may turn them off).
    pub enabled: bool,
    /// The longest a call waits for a slot before answering 429.
    pub queue_wait: Duration,
    /// How long a lease lives unless renewed (and so how long a dead replica's slots stay taken).
    pub lease_ttl: Duration,
    /// How often the manager looks at the leases.
    pub tick: Duration,
    /// How long a cap stays leased with nothing in flight before it is given back.
    pub idle_release: Duration,
}

impl AdmissionSettings {
    /// The defaults, the one place they are written (`gateway`'s settings name them).
    pub const DEFAULT: AdmissionSettings = AdmissionSettings {
        enabled: true,
        queue_wait: Duration::from_secs(5),
        lease_ttl: Duration::from_secs(15),
        tick: Duration::from_millis(200),
        idle_release: Duration::from_secs(2),
    };
}

impl Default for AdmissionSettings {
    fn default() -> AdmissionSettings {
        AdmissionSettings::DEFAULT
    }
}

/// Slots held by this replica on one cap.
#[derive(Debug)]
struct Slots {
    /// What the last grant gave.
    granted: u32,
    /// The cap's value at the last grant (0 before the first).
    cap: u32,
    /// Calls admitted and not yet ended.
    in_use: u32,
    /// Calls queued for this cap.
    waiting: u32,
    /// When the lease ends unless renewed (`None` before the first grant).
    expires: Option<Instant>,
    /// When it was last granted.
    granted_at: Option<Instant>,
    /// When a call last ended or started here.
    last_active: Instant,
    /// Whether another replica was short at the last grant.
    others_short: bool,
    /// Slots released in the current and the previous rate window.
    released_now: u32,
    released_before: u32,
    window_start: Instant,
}

impl Slots {
    fn new(now: Instant) -> Slots {
        Slots {
            granted: 0,
            cap: 0,
            in_use: 0,
            waiting: 0,
            expires: None,
            granted_at: None,
            last_active: now,
            others_short: false,
            released_now: 0,
            released_before: 0,
            window_start: now,
        }
    }

    fn room(&self, now: Instant) -> bool {
        self.in_use < self.granted && self.expires.is_some_and(|e| now < e)
    }

    /// Slots asked for beyond what is needed now, so that a rising load does not wait on the database
    /// for every call.
    fn headroom(&self) -> u32 {
        if self.cap == 0 { 8 } else { (self.cap / 8).clamp(1, 32) }
    }

    fn want(&self) -> u32 {
        if self.in_use + self.waiting == 0 {
            return 0;
        }
        self.in_use + self.waiting + self.headroom()
    }

    fn count_release(&mut self, now: Instant) {
        self.roll_window(now);
        self.released_now = self.released_now.saturating_add(1);
        self.last_active = now;
    }

    fn roll_window(&mut self, now: Instant) {
        if now.duration_since(self.window_start) >= RATE_WINDOW {
            self.released_before = self.released_now;
            self.released_now = 0;
            self.window_start = now;
        }
    }

    /// Seconds until a slot is likely free for `ahead` calls queued before a new one, from the
    /// release rate over the last one or two windows; 1..=60.
    fn retry_after_secs(&self, now: Instant, fallback: Duration) -> u64 {
        let released = u64::from(self.released_now) + u64::from(self.released_before);
        let span_ms = duration_millis(now.duration_since(self.window_start)).unsigned_abs()
            + if self.released_before > 0 { duration_millis(RATE_WINDOW).unsigned_abs() } else { 0 };
        let secs = if released == 0 || span_ms == 0 {
            duration_millis(fallback).unsigned_abs().div_ceil(1000)
        } else {
            // Time for `waiting + 1` releases at the observed rate.
            (u64::from(self.waiting) + 1).saturating_mul(span_ms).div_ceil(released.saturating_mul(1000))
        };
        secs.clamp(1, 60)
    }
}

/// The window the release rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// A call waiting for slots.
struct Waiter {
    id: u64,
    model: String,
    reply: oneshot::Sender<Permit>,
}

#[derive(Default)]
struct State {
    caps: HashMap<CapScope, Slots>,
    /// Waiters per user, oldest first.
    queues: HashMap<UserId, VecDeque<Waiter>>,
    /// Users with waiters, in the order they are served next.
    ring: VecDeque<UserId>,
    next_waiter: u64,
}

impl State {
    fn slots(&mut self, scope: &CapScope, now: Instant) -> &mut Slots {
        self.caps.entry(scope.clone()).or_insert_with(|| Slots::new(now))
    }

    fn room(&self, scope: &CapScope, now: Instant) -> bool {
        self.caps.get(scope).is_some_and(|s| s.room(now))
    }

    fn take(&mut self, model: &CapScope, user: &CapScope, now: Instant) {
        for scope in [model, user] {
            let slots = self.slots(scope, now);
            slots.in_use += 1;
            slots.last_active = now;
        }
    }

    fn give_back(&mut self, model: &CapScope, user: &CapScope, now: Instant) {
        for scope in [model, user] {
            let slots = self.slots(scope, now);
            slots.in_use = slots.in_use.saturating_sub(1);
            slots.count_release(now);
            if slots.others_short {
                // Another replica is short: the slot goes back to the database at the next grant
                // (which holds this replica to its fair share) instead of to this replica's queue.
                slots.granted = slots.granted.min(slots.in_use);
            }
        }
    }

    fn unqueue(&mut self, model: &str, user: &UserId, now: Instant) {
        for scope in [CapScope::Model(model.to_owned()), CapScope::User(user.clone())] {
            let slots = self.slots(&scope, now);
            slots.waiting = slots.waiting.saturating_sub(1);
        }
    }
}

/// One cap as this replica sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CapLoad {
    /// The cap.
    pub scope: CapScope,
    /// Slots leased now (0 once the lease expired).
    pub leased: u32,
    /// Calls queued for it.
    pub waiting: u32,
}

/// The shared part of [`Admission`].
struct Inner {
    settings: AdmissionSettings,
    replica: String,
    leases: Arc<dyn CapLeases>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// Wakes the manager when a cap runs short.
    wake: Notify,
    /// Whether the manager task was started.
    started: std::sync::atomic::AtomicBool,
    /// Set once at shutdown: the manager stops, and is never started again.
    stop: watch::Sender<bool>,
    /// The manager task, until shutdown takes it to wait for it.
    manager: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// This replica's admission control (cheap to clone).
#[derive(Clone)]
pub(crate) struct Admission {
    inner: Arc<Inner>,
}

/// One admitted call's slots on its model's and its user's caps; given back when dropped.
pub(crate) struct Permit {
    inner: Weak<Inner>,
    model: CapScope,
    user: CapScope,
    /// `false` once its slots were accounted for by hand (a hand-off that found its waiter gone).
    armed: bool,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit").field("model", &self.model).field("user", &self.user).finish()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Some(inner) = self.inner.upgrade() else { return };
        let now = Instant::now();
        let refused = {
            let Ok(mut state) = inner.state.lock() else { return };
            state.give_back(&self.model, &self.user, now);
            dispatch(&inner, &mut state, now)
        };
        // Permits whose waiters left are dropped here, outside the lock (they are disarmed).
        drop(refused);
    }
}

/// Hands free slots to waiters, round-robin over users: the ring is walked in order, a user whose
/// next admissible waiter gets a slot moves to the back (so every other user with a waiter comes
/// first next time), a user who cannot be served keeps their place. Returns the permits whose waiters
/// had already left (disarmed, their slots given back), to be dropped after the lock.
fn dispatch(inner: &Arc<Inner>, state: &mut State, now: Instant) -> Vec<Permit> {
    let mut refused = Vec::new();
    let mut i = 0;
    while i < state.ring.len() {
        let user = state.ring[i].clone();
        let user_scope = CapScope::User(user.clone());
        let pick = if state.room(&user_scope, now) {
            state
                .queues
                .get(&user)
                .and_then(|q| q.iter().position(|w| state.room(&CapScope::Model(w.model.clone()), now)))
        } else {
            None
        };
        let waiter = pick.and_then(|at| state.queues.get_mut(&user).and_then(|q| q.remove(at)));
        if let Some(waiter) = waiter {
            let model_scope = CapScope::Model(waiter.model.clone());
            state.unqueue(&waiter.model, &user, now);
            state.take(&model_scope, &user_scope, now);
            let permit = Permit { inner: Arc::downgrade(inner), model: model_scope, user: user_scope, armed: true };
            if let Err(mut permit) = waiter.reply.send(permit) {
                permit.armed = false;
                state.give_back(&permit.model, &permit.user, now);
                refused.push(permit);
            }
            state.ring.remove(i);
            if state.queues.get(&user).is_some_and(|q| !q.is_empty()) {
                state.ring.push_back(user);
            } else {
                state.queues.remove(&user);
            }
        } else if state.queues.get(&user).is_none_or(VecDeque::is_empty) {
            state.ring.remove(i);
            state.queues.remove(&user);
        } else {
            i += 1;
        }
    }
    refused
}

/// Removes a waiter that stops waiting (timed out, or its call was dropped) from its queue.
struct QueuedCall {
    inner: Arc<Inner>,
    id: u64,
    user: UserId,
    model: String,
    queued: bool,
}

impl QueuedCall {
    /// Takes the waiter out of its queue; `false` when it was no longer there (it was admitted).
    fn leave(&mut self) -> bool {
        if !self.queued {
            return false;
        }
        self.queued = false;
        let Ok(mut state) = self.inner.state.lock() else { return false };
        let Some(queue) = state.queues.get_mut(&self.user) else { return false };
        let Some(at) = queue.iter().position(|w| w.id == self.id) else { return false };
        queue.remove(at);
        if queue.is_empty() {
            state.queues.remove(&self.user);
            state.ring.retain(|u| u != &self.user);
        }
        state.unqueue(&self.model, &self.user, Instant::now());
        true
    }
}

impl Drop for QueuedCall {
    fn drop(&mut self) {
        self.leave();
    }
}

impl Admission {
    /// Admission for `replica` over `leases`.
    pub(crate) fn new(
        settings: AdmissionSettings,
        replica: String,
        leases: Arc<dyn CapLeases>,
        clock: Arc<dyn Clock>,
    ) -> Admission {
        Admission {
            inner: Arc::new(Inner {
                settings,
                replica,
                leases,
                clock,
                state: Mutex::new(State::default()),
                wake: Notify::new(),
                started: std::sync::atomic::AtomicBool::new(false),
                stop: watch::Sender::new(false),
                manager: Mutex::new(None),
            }),
        }
    }

    /// This replica's id in the lease rows.
    pub(crate) fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// Admits a call of `user` on `model`, waiting in the fair queue for at most the configured wait.
    /// `None` when caps are off.
    pub(crate) async fn admit(&self, user: &UserId, model: &str) -> Result<Option<Permit>, ServiceError> {
        if !self.inner.settings.enabled {
            return Ok(None);
        }
        self.start_manager();
        let model_scope = CapScope::Model(model.to_owned());
        let user_scope = CapScope::User(user.clone());
        let now = Instant::now();
        let queued_now = {
            let mut state = self.inner.state.lock().map_err(|_| poisoned())?;
            let free =
                |s: &State, scope: &CapScope| s.room(scope, now) && s.caps.get(scope).is_some_and(|c| c.waiting == 0);
            if free(&state, &model_scope) && free(&state, &user_scope) {
                state.take(&model_scope, &user_scope, now);
                return Ok(Some(Permit {
                    inner: Arc::downgrade(&self.inner),
                    model: model_scope,
                    user: user_scope,
                    armed: true,
                }));
            }
            let (tx, rx) = oneshot::channel();
            let id = state.next_waiter;
            state.next_waiter += 1;
            for scope in [&model_scope, &user_scope] {
                let slots = state.slots(scope, now);
                slots.waiting += 1;
                slots.last_active = now;
            }
            let queue = state.queues.entry(user.clone()).or_default();
            let first = queue.is_empty();
            queue.push_back(Waiter { id, model: model.to_owned(), reply: tx });
            if first {
                state.ring.push_back(user.clone());
            }
            // Slots may be free although others wait (they wait on another cap): serve the queue now.
            let refused = dispatch(&self.inner, &mut state, now);
            let still_queued = state.queues.get(user).is_some_and(|q| q.iter().any(|w| w.id == id));
            (rx, id, still_queued, refused)
        };
        let (rx, id, still_queued, refused) = queued_now;
        drop(refused);
        if still_queued {
            self.inner.wake.notify_one();
        }
        let mut queued = QueuedCall {
            inner: Arc::clone(&self.inner),
            id,
            user: user.clone(),
            model: model.to_owned(),
            queued: true,
        };
        let mut rx = rx;
        match tokio::time::timeout(self.inner.settings.queue_wait, &mut rx).await {
            Ok(Ok(permit)) => {
                queued.queued = false;
                Ok(Some(permit))
            }
            Ok(Err(_)) => Err(poisoned()),
            Err(_) => {
                if !queued.leave() {
                    // Admitted just as the wait ran out: use the slot.
                    if let Ok(permit) = rx.try_recv() {
                        return Ok(Some(permit));
                    }
                }
                Err(self.refusal(&model_scope, &user_scope, model))
            }
        }
    }

    /// The 429 for a call that waited in vain.
    fn refusal(&self, model_scope: &CapScope, user_scope: &CapScope, model: &str) -> ServiceError {
        let now = Instant::now();
        let wait = self.inner.settings.queue_wait;
        let Ok(state) = self.inner.state.lock() else { return poisoned() };
        let user_full = state.caps.get(user_scope).is_some_and(|s| !s.room(now) && s.cap > 0 && s.in_use >= s.cap);
        let (scope, message) = if user_full {
            let cap = state.caps.get(user_scope).map_or(0, |s| s.cap);
            (user_scope, format!("at most {cap} of your calls may run at once; none ended within the queue wait"))
        } else {
            let cap = state.caps.get(model_scope).map_or(0, |s| s.cap);
            (
                model_scope,
                format!("model {model} runs at most {cap} calls at once; no slot freed within the queue wait"),
            )
        };
        let retry_after_secs = state.caps.get(scope).map_or(1, |s| s.retry_after_secs(now, wait));
        ServiceError::ConcurrencyLimitExceeded { message, retry_after_secs }
    }

    /// Starts the lease manager when caps are on (the process supervisor does, at start; a call's
    /// admission does too, for a gateway run without one). It runs once; after [`Self::release_all`]
    /// it never starts again.
    pub(crate) fn start(&self) {
        if self.inner.settings.enabled {
            self.start_manager();
        }
    }

    fn start_manager(&self) {
        use std::sync::atomic::Ordering;
        if self.inner.started.load(Ordering::Relaxed) || self.inner.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(mut manager) = self.inner.manager.lock() else { return };
        // Checked under the lock that `stop_manager` takes after setting it: a manager is either
        // started before the stop (and waited for) or never.
        if !*self.inner.stop.borrow() {
            let stop = self.inner.stop.subscribe();
            *manager = Some(tokio::spawn(run_manager(Arc::downgrade(&self.inner), stop)));
        }
    }

    /// Stops the manager and waits for it to end its round (shutdown); it is never started again.
    async fn stop_manager(&self) {
        self.inner.stop.send_replace(true);
        let handle = self.inner.manager.lock().ok().and_then(|mut manager| manager.take());
        if let Some(handle) = handle
            && let Err(e) = handle.await
        {
            tracing::warn!(error = %e, "the concurrency lease manager ended with an error");
        }
    }

    /// Whether the manager task is running (for tests).
    #[cfg(test)]
    fn manager_running(&self) -> bool {
        self.inner.manager.lock().is_ok_and(|m| m.as_ref().is_some_and(|h| !h.is_finished()))
    }

    /// Calls in flight and waiting on `model` in this replica (for metrics and tests).
    pub(crate) fn model_load(&self, model: &str) -> (u32, u32) {
        let Ok(state) = self.inner.state.lock() else { return (0, 0) };
        state.caps.get(&CapScope::Model(model.to_owned())).map_or((0, 0), |s| (s.in_use, s.waiting))
    }

    /// Every cap this replica knows, with its live lease and calls (for metrics).
    pub(crate) fn loads(&self) -> Vec<CapLoad> {
        let now = Instant::now();
        let Ok(state) = self.inner.state.lock() else { return Vec::new() };
        state
            .caps
            .iter()
            .map(|(scope, s)| CapLoad {
                scope: scope.clone(),
                leased: if s.expires.is_some_and(|e| now < e) { s.granted } else { 0 },
                waiting: s.waiting,
            })
            .collect()
    }

    /// Gives every lease of this replica back (shutdown), after stopping the manager so that no
    /// renewal takes them again; calls still running keep their permits but nothing new is admitted.
    pub(crate) async fn release_all(&self) -> Result<(), ServiceError> {
        self.stop_manager().await;
        if let Ok(mut state) = self.inner.state.lock() {
            for slots in state.caps.values_mut() {
                slots.granted = 0;
                slots.expires = None;
            }
        }
        self.inner.leases.release_leases(&self.inner.replica).await?;
        Ok(())
    }
}

fn poisoned() -> ServiceError {
    ServiceError::Internal("the admission state is unusable after a panic".into())
}

/// One lease change the manager makes.
struct Change {
    scope: CapScope,
    want: u32,
    in_use: u32,
    keep: u32,
}

/// The lease manager: runs while the admission it serves is alive, until `stop` says to stop
/// (checked before each round, so it never starts one after it).
async fn run_manager(inner: Weak<Inner>, mut stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        let Some(strong) = inner.upgrade() else { return };
        let tick = strong.settings.tick;
        let changes = plan_changes(&strong);
        for change in changes {
            apply(&strong, change).await;
        }
        let wake = async {
            tokio::select! {
                () = strong.wake.notified() => {}
                () = tokio::time::sleep(tick) => {}
                _ = stop.changed() => {}
            }
        };
        wake.await;
        drop(strong);
    }
}

/// Which caps need a grant now: short ones (waiters, or a grant that no longer covers what runs),
/// ones near expiry, ones holding far more than they use, ones idle long enough to give back, and
/// full ones while another replica is short (so the fair share is applied promptly).
fn plan_changes(inner: &Inner) -> Vec<Change> {
    let now = Instant::now();
    let settings = &inner.settings;
    let Ok(mut state) = inner.state.lock() else { return Vec::new() };
    let mut changes = Vec::new();
    let mut forget = Vec::new();
    for (scope, slots) in &mut state.caps {
        slots.roll_window(now);
        let need = slots.in_use + slots.waiting;
        let want = slots.want();
        let renew_at = slots.granted_at.map(|at| at + settings.lease_ttl / 3);
        let due = match slots.expires {
            None => need > 0,
            Some(_) if need == 0 => now.duration_since(slots.last_active) >= settings.idle_release,
            Some(_) => {
                slots.waiting > 0
                    || renew_at.is_none_or(|at| now >= at)
                    || slots.granted > want + 2 * slots.headroom()
                    || (slots.others_short && slots.in_use > 0)
            }
        };
        if due {
            // A request that may lower the grant (a give-back, or a fair share while another replica
            // is short) stops admission on this cap until it is answered, so that the grant it
            // keeps covers every call that may be running; one that grows or renews keeps admitting.
            // Only a real excess, an idle cap or a short replica elsewhere shrinks a lease: a
            // renewal while the load merely dips keeps the whole grant (and keeps admitting), so
            // renewals never stall calls. A short replica elsewhere does, even while this one has
            // waiters of its own: otherwise a busy replica would keep every slot.
            let may_shrink = need == 0 || slots.granted > want + 2 * slots.headroom() || slots.others_short;
            let want = if may_shrink { want } else { want.max(slots.granted) };
            let keep = if may_shrink {
                slots.granted = slots.granted.min(slots.in_use);
                slots.in_use
            } else {
                slots.granted
            };
            changes.push(Change { scope: scope.clone(), want, in_use: slots.in_use, keep });
        } else if need == 0 && slots.expires.is_none() {
            forget.push(scope.clone());
        }
    }
    for scope in forget {
        state.caps.remove(&scope);
    }
    changes
}

async fn apply(inner: &Arc<Inner>, change: Change) {
    let started = Instant::now();
    let now = inner.clock.now();
    let ttl_ms = duration_millis(inner.settings.lease_ttl);
    let request =
        LeaseRequest { scope: change.scope.clone(), want: change.want, in_use: change.in_use, keep: change.keep };
    let expires_at = Timestamp(now.millis().saturating_add(ttl_ms));
    match inner.leases.lease(&inner.replica, &request, now, expires_at).await {
        Ok(grant) => {
            let refused = {
                let Ok(mut state) = inner.state.lock() else { return };
                let slots = state.slots(&change.scope, started);
                slots.cap = grant.cap;
                slots.others_short = grant.others_short;
                if grant.slots == 0 {
                    slots.granted = 0;
                    slots.expires = None;
                    slots.granted_at = None;
                } else {
                    slots.granted = grant.slots;
                    slots.expires = Some(started + inner.settings.lease_ttl);
                    slots.granted_at = Some(started);
                }
                dispatch(inner, &mut state, Instant::now())
            };
            drop(refused);
        }
        Err(e) => tracing::warn!(error = %e, scope = %change.scope.key(), "leasing concurrency slots failed"),
    }
}

#[cfg(test)]
mod tests;
