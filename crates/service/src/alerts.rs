//! Low-balance alerts (issue 39 §3): a user sets a threshold and, optionally, a webhook URL; when a
//! debit takes the balance from at or above the threshold to below it, one `balance.low` event
//! `{"type", "user_id", "balance_usd", "threshold_usd", "created_at"}` goes to the URL through the
//! webhook outbox (signed with the user's webhook secret and retried like task webhooks), and the
//! alert re-arms once the balance is back at or above the threshold.
//!
//! Every balance movement passes [`Watched`], the ledger ports' wrapper, which hands the balance
//! after it to [`AlertWatch::observe`]: an in-memory look-up of what this replica knows of the
//! user's alert (re-read every [`ALERT_TTL`]); only when the balance and the alert's state disagree
//! does it start a check, which the store decides with a compare-and-set on the balance the database
//! holds then (`AlertStore::check_alert`), so concurrent debits and replicas send one event per
//! crossing. The video worker's sweep ([`Gateway::sweep_alerts`]) brings every alert out of step in
//! step each poll interval: what a crash, an `admin adjust` from the command line or another
//! replica's change left behind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use billing::{CallBook, Expect, Ledger, LedgerError, Reservation, Settlement};
use domain::{
    AlertChange, AlertStore, BalanceAlert, Clock, LOW_BALANCE_EVENT, LedgerEntry, LedgerKind, LowBalance, TaskId,
    TaskTransition, UsdAmount, UserId,
};
use serde_json::json;

use crate::{Background, Gateway, Principal, ServiceError};

/// How long what this replica read of a user's alert is trusted before a balance movement re-reads it.
pub const ALERT_TTL: Duration = Duration::from_secs(5);

/// Most users whose alerts one replica remembers; the memory is cleared when it would grow past it.
const MAX_WATCHED: usize = 100_000;

/// Alerts the sweep brings in step per pass.
const SWEEP_BATCH: u64 = 200;

/// The `balance.low` event's body.
pub fn low_balance_payload(low: &LowBalance) -> String {
    json!({
        "type": LOW_BALANCE_EVENT,
        "user_id": low.user_id.as_str(),
        "balance_usd": low.balance.to_string(),
        "threshold_usd": low.threshold.to_string(),
        "created_at": low.at.to_string(),
    })
    .to_string()
}

/// What this replica knows of one user's alert.
#[derive(Debug, Clone, Copy)]
struct Known {
    /// The threshold and whether it is armed; `None`: no alert.
    alert: Option<(UsdAmount, bool)>,
    /// Trusted until then.
    until: Instant,
    /// A check is running.
    checking: bool,
}

/// This replica's view of the users' alerts, and the checks it starts.
pub(crate) struct AlertWatch {
    store: Arc<dyn AlertStore>,
    clock: Arc<dyn Clock>,
    background: Background,
    known: Mutex<HashMap<UserId, Known>>,
}

impl AlertWatch {
    pub(crate) fn new(store: Arc<dyn AlertStore>, clock: Arc<dyn Clock>, background: Background) -> AlertWatch {
        AlertWatch { store, clock, background, known: Mutex::new(HashMap::new()) }
    }

    /// A balance movement left `user` at `balance`: starts a check when what is known of the alert
    /// disagrees with it, or when nothing fresh is known. Never waits.
    pub(crate) fn observe(self: &Arc<Self>, user: &UserId, balance: UsdAmount) {
        let now = Instant::now();
        let start = {
            let Ok(mut known) = self.known.lock() else { return };
            if known.len() >= MAX_WATCHED && !known.contains_key(user) {
                known.clear();
            }
            match known.get_mut(user) {
                Some(entry) => {
                    let due = entry.until <= now
                        || entry.alert.is_some_and(|(threshold, armed)| armed == (balance < threshold));
                    let start = due && !entry.checking;
                    entry.checking |= start;
                    start
                }
                None => {
                    known.insert(user.clone(), Known { alert: None, until: now, checking: true });
                    true
                }
            }
        };
        if start && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (watch, user) = (Arc::clone(self), user.clone());
            self.background.spawn_on(&runtime, async move { watch.check(&user).await });
        } else if start {
            self.forget(user);
        }
    }

    /// Reads `user`'s alert and, when it is out of step with the balance, brings it in step.
    pub(crate) async fn check(&self, user: &UserId) {
        let outcome = match self.store.alert(user).await {
            Ok(Some(alert)) if alert.out_of_step() => self.bring_in_step(user).await,
            Ok(alert) => Ok(alert),
            Err(e) => Err(ServiceError::from(e)),
        };
        match outcome {
            Ok(alert) => self.remember(user, alert.as_ref()),
            Err(e) => {
                // Not read again before the next period, so that a store outage costs one failed
                // read per user per period, not one per call; the sweep retries meanwhile.
                tracing::warn!(%user, error = %e, "checking a low-balance alert failed; the sweep retries");
                self.remember(user, None);
            }
        }
    }

    /// Fires or re-arms `user`'s alert as the store decides; the alert as it now stands.
    pub(crate) async fn bring_in_step(&self, user: &UserId) -> Result<Option<BalanceAlert>, ServiceError> {
        let (alert, change) = self.store.check_alert(user, self.clock.now(), &low_balance_payload).await?;
        match &change {
            AlertChange::Fired(low) => tracing::info!(%user, balance = %low.balance, threshold = %low.threshold,
                url = alert.as_ref().is_some_and(|a| a.webhook_url.is_some()), "low-balance alert fired"),
            AlertChange::Rearmed => tracing::debug!(%user, "low-balance alert re-armed"),
            AlertChange::Unchanged => {}
        }
        Ok(alert)
    }

    /// Keeps what was just read of `user`'s alert.
    pub(crate) fn remember(&self, user: &UserId, alert: Option<&BalanceAlert>) {
        if let Ok(mut known) = self.known.lock() {
            let until = Instant::now() + ALERT_TTL;
            known.insert(user.clone(), Known { alert: alert.map(|a| (a.threshold, a.armed)), until, checking: false });
        }
    }

    /// Drops what is known of `user`'s alert: the next movement reads it again.
    fn forget(&self, user: &UserId) {
        if let Ok(mut known) = self.known.lock() {
            known.remove(user);
        }
    }
}

/// The ledger ports, each balance movement handed to the [`AlertWatch`] after it commits.
pub(crate) struct Watched {
    pub(crate) ledger: Arc<dyn Ledger>,
    pub(crate) calls: Arc<dyn CallBook>,
    pub(crate) watch: Arc<AlertWatch>,
}

impl Watched {
    fn saw<T>(
        &self,
        done: Result<T, LedgerError>,
        moved: impl FnOnce(&T) -> (&UserId, UsdAmount),
    ) -> Result<T, LedgerError> {
        if let Ok(value) = &done {
            let (user, balance) = moved(value);
            self.watch.observe(user, balance);
        }
        done
    }
}

#[async_trait]
impl Ledger for Watched {
    async fn credit(
        &self,
        user: &UserId,
        amount: UsdAmount,
        kind: LedgerKind,
        note: &str,
    ) -> Result<LedgerEntry, LedgerError> {
        self.saw(self.ledger.credit(user, amount, kind, note).await, |e| (&e.user_id, e.balance_after))
    }

    async fn redeem(&self, user: &UserId, code_hash: &str) -> Result<LedgerEntry, LedgerError> {
        self.saw(self.ledger.redeem(user, code_hash).await, |e| (&e.user_id, e.balance_after))
    }

    async fn pay(&self, user: &UserId, payment: &str, amount: UsdAmount) -> Result<LedgerEntry, LedgerError> {
        self.saw(self.ledger.pay(user, payment, amount).await, |e| (&e.user_id, e.balance_after))
    }

    async fn reserve(&self, user: &UserId, task: &TaskId, amount: UsdAmount) -> Result<Reservation, LedgerError> {
        self.saw(self.ledger.reserve(user, task, amount).await, |r| (&r.user_id, r.balance_after))
    }

    async fn settle(&self, task: &TaskId, actual: UsdAmount) -> Result<Settlement, LedgerError> {
        self.saw(self.ledger.settle(task, actual).await, |s| (&s.user_id, s.balance_after))
    }

    async fn refund(&self, task: &TaskId) -> Result<Settlement, LedgerError> {
        self.saw(self.ledger.refund(task).await, |s| (&s.user_id, s.balance_after))
    }

    async fn balance(&self, user: &UserId) -> Result<UsdAmount, LedgerError> {
        self.ledger.balance(user).await
    }

    async fn entries(&self, user: &UserId, limit: u64) -> Result<Vec<LedgerEntry>, LedgerError> {
        self.ledger.entries(user, limit).await
    }
}

#[async_trait]
impl CallBook for Watched {
    async fn open_call(&self, task: domain::Task, hold: UsdAmount) -> Result<Reservation, LedgerError> {
        self.saw(self.calls.open_call(task, hold).await, |r| (&r.user_id, r.balance_after))
    }

    async fn close_task(
        &self,
        task: &TaskId,
        held: &Expect,
        charge: Option<UsdAmount>,
        change: TaskTransition,
    ) -> Result<Settlement, LedgerError> {
        self.saw(self.calls.close_task(task, held, charge, change).await, |s| (&s.user_id, s.balance_after))
    }
}

/// A user's low-balance alert and balance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertState {
    /// The alert; `None`: the user has none.
    pub alert: Option<BalanceAlert>,
    /// The balance (read with the alert when there is one).
    pub balance: UsdAmount,
}

impl Gateway {
    /// `who`'s low-balance alert and balance.
    pub async fn balance_alert(&self, who: &Principal) -> Result<AlertState, ServiceError> {
        let alert = self.ports.alerts.alert(&who.user_id).await?;
        self.alert_state(who, alert).await
    }

    async fn alert_state(&self, who: &Principal, alert: Option<BalanceAlert>) -> Result<AlertState, ServiceError> {
        let balance = match &alert {
            Some(a) => a.balance,
            None => self.ports.ledger.balance(&who.user_id).await?,
        };
        Ok(AlertState { alert, balance })
    }

    /// Sets `who`'s alert to `threshold` (with the `balance.low` event sent to `webhook_url`, when
    /// given), or switches it off (`None`), audited as `alert.set`. The URL obeys the egress rules
    /// of task webhooks (400 when refused). A new alert is armed when the balance is at or above
    /// the threshold: one already below sends nothing until the balance has risen and fallen again.
    pub async fn set_balance_alert(
        &self,
        who: &Principal,
        setting: Option<(UsdAmount, Option<String>)>,
    ) -> Result<AlertState, ServiceError> {
        if let Some((threshold, url)) = &setting {
            if threshold.micros() <= 0 {
                return Err(ServiceError::InvalidRequest("low_balance_usd must be above zero".into()));
            }
            if let Some(url) = url {
                let video = self.video().map_err(|_| {
                    ServiceError::ProviderNotConfigured("webhook delivery is not configured on this gateway".into())
                })?;
                video
                    .outbound
                    .check(url)
                    .await
                    .map_err(|e| ServiceError::InvalidRequest(format!("webhook_url cannot be used: {e}")))?;
            }
        }
        let before = self.ports.alerts.alert(&who.user_id).await?;
        let after = match setting {
            Some((threshold, url)) => {
                let now = self.ports.clock.now();
                Some(self.ports.alerts.set_alert(&who.user_id, threshold, url.as_deref(), now).await?)
            }
            None => {
                self.ports.alerts.clear_alert(&who.user_id).await?;
                None
            }
        };
        self.alert_watch.remember(&who.user_id, after.as_ref());
        let state = |a: &Option<BalanceAlert>| {
            a.as_ref().map(|a| json!({"low_balance_usd": a.threshold.to_string(), "webhook_url": a.webhook_url}))
        };
        let target = who.user_id.as_str();
        self.record_audit(&Gateway::key_actor(who), "alert.set", target, state(&before), state(&after)).await?;
        self.alert_state(who, after).await
    }

    /// Brings every alert out of step with its balance in step (fires or re-arms, at most a few
    /// hundred a pass); how many it looked at.
    pub async fn sweep_alerts(&self) -> Result<usize, ServiceError> {
        let users = self.ports.alerts.alerts_out_of_step(SWEEP_BATCH).await?;
        for user in &users {
            let alert = self.alert_watch.bring_in_step(user).await?;
            self.alert_watch.remember(user, alert.as_ref());
        }
        Ok(users.len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use domain::ports::StoreError;
    use domain::{AlertPayload, SystemClock, Timestamp};

    use super::*;

    /// A store whose one alert (if any) is as set, counting what the watcher asks.
    #[derive(Default)]
    struct Counting {
        alert: Mutex<Option<BalanceAlert>>,
        reads: AtomicUsize,
        checks: AtomicUsize,
    }

    #[async_trait]
    impl AlertStore for Counting {
        async fn alert(&self, _: &UserId) -> Result<Option<BalanceAlert>, StoreError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(self.alert.lock().map_err(|e| StoreError::Backend(e.to_string()))?.clone())
        }
        async fn set_alert(
            &self,
            _: &UserId,
            _: UsdAmount,
            _: Option<&str>,
            _: Timestamp,
        ) -> Result<BalanceAlert, StoreError> {
            Err(StoreError::Backend("not used".into()))
        }
        async fn clear_alert(&self, _: &UserId) -> Result<(), StoreError> {
            Ok(())
        }
        async fn check_alert(
            &self,
            _: &UserId,
            _: Timestamp,
            _: &AlertPayload,
        ) -> Result<(Option<BalanceAlert>, AlertChange), StoreError> {
            self.checks.fetch_add(1, Ordering::SeqCst);
            let mut alert = self.alert.lock().map_err(|e| StoreError::Backend(e.to_string()))?;
            if let Some(a) = alert.as_mut() {
                a.armed = !a.below();
            }
            Ok((alert.clone(), AlertChange::Unchanged))
        }
        async fn alerts_out_of_step(&self, _: u64) -> Result<Vec<UserId>, StoreError> {
            Ok(Vec::new())
        }
    }

    fn watch(store: &Arc<Counting>) -> Arc<AlertWatch> {
        let store: Arc<dyn AlertStore> = store.clone();
        Arc::new(AlertWatch::new(store, Arc::new(SystemClock), Background::default()))
    }

    async fn settle(background: &Background) {
        assert!(background.wait(Duration::from_secs(5)).await, "the checks ended");
    }

    /// A user without an alert costs one read per period however many movements it makes; a
    /// crossing costs one check however many movements see it.
    #[tokio::test]
    async fn movements_cost_one_read_per_period_and_one_check_per_crossing() {
        let store = Arc::new(Counting::default());
        let watch = watch(&store);
        let user = UserId("usr_a".into());
        for i in 0..1_000 {
            watch.observe(&user, UsdAmount::from_micros(i));
        }
        settle(&watch.background).await;
        for i in 0..1_000 {
            watch.observe(&user, UsdAmount::from_micros(i));
        }
        assert_eq!((store.reads.load(Ordering::SeqCst), store.checks.load(Ordering::SeqCst)), (1, 0));

        // An armed alert at 10 and a movement to 5: one check among a thousand movements below.
        let alert = BalanceAlert {
            user_id: user.clone(),
            threshold: UsdAmount::from_micros(10),
            webhook_url: None,
            armed: true,
            updated_at: Timestamp(0),
            balance: UsdAmount::from_micros(5),
        };
        *store.alert.lock().expect("lock") = Some(alert.clone());
        watch.remember(&user, Some(&alert));
        for _ in 0..1_000 {
            watch.observe(&user, UsdAmount::from_micros(5));
        }
        settle(&watch.background).await;
        for _ in 0..1_000 {
            watch.observe(&user, UsdAmount::from_micros(5));
        }
        settle(&watch.background).await;
        assert_eq!((store.reads.load(Ordering::SeqCst), store.checks.load(Ordering::SeqCst)), (2, 1));
    }
}
