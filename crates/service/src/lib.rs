//! Use cases of the gateway: authenticate and authorize keys, list models, account overview,
//! tasks, the billable calls (one flow for every kind), and the operator's administration. Storage,
//! the ledger and the upstream come in through ports.

mod admin;
mod admission;
mod alerts;
mod answer;
mod audio;
mod audit;
mod background;
mod cache;
mod call;
mod chat;
mod error;
mod fallback;
mod idempotency;
mod image;
mod keys;
mod lineage;
mod manage;
mod metrics;
mod native;
mod operator;
mod payments;
mod rates;
mod reads;
mod reply;
mod statements;
mod stream;
mod video;
mod vouchers;

use std::sync::Arc;

use billing::{CallBook, Ledger};
use domain::ports::{
    AccountStore, IdSource, IdempotencyStore, ModelStore, Readiness, ResponseOwners, TaskStore, Upstream,
};
use domain::{
    ApiKeyId, CapLeases, Clock, KeyRates, ModelAllowList, ModelKind, RateLeases, Scope, Timestamp, UserId, VideoStore,
};

pub use admin::{
    CreatedKey, CreatedUser, DemoAccount, NEW_USER_CONCURRENCY_LIMIT, NEW_USER_MEDIA_QUOTA_BYTES, NewUserRequest,
    WEBHOOK_SECRET_PREFIX,
};
pub use admission::AdmissionSettings;
pub use alerts::{ALERT_TTL, AlertState, low_balance_payload};
pub use answer::Answer;
pub use background::Background;
pub use cache::CACHE_TTL;
pub use error::{ServiceError, VoucherRefusal};
pub use idempotency::{Claim, ClaimedKey};
pub use keys::{KEY_PREFIX, NewSecret, UuidIds, generate_secret, hash_secret};
pub use lineage::{Ancestor, MAX_KEY_GENERATIONS};
pub use manage::{Page, UsageReport};
pub use metrics::{Health, METRICS_CONTENT_TYPE};
pub use operator::{Operator, UserDetail};
pub use payments::{EventOutcome, PaymentPorts, PaymentSettings, SIGNATURE_TOLERANCE_SECS, verify_signature};
pub use reads::{EffectiveLimits, KeyView, ModelView, Overview, TaskPage};
pub use reply::{CallBilling, CallReply, CallStream, Quote, StreamFailure, StreamItem};
pub use statements::{EXPORT_PAGE_ROWS, LedgerExport, MonthRevenue, MonthStatement, UsageExport};
pub use stream::{CLIENT_STALL_LIMIT, STREAM_HEARTBEAT};
pub use video::webhook::signature as webhook_signature;
pub use video::{MEDIA_SWEEP_LEASE, MediaSweep, StoredUpload, TaskWire, TickReport, Upload, VideoPorts, VideoSettings};
pub use vouchers::{
    FAILURE_WINDOW_MS, MAX_FAILED_REDEMPTIONS, MAX_VOUCHER_USD, MAX_VOUCHERS_PER_BATCH, MintedVouchers, NewVouchers,
    Redeemed,
};

/// How many ledger entries the overview shows.
pub const OVERVIEW_LEDGER_ENTRIES: u64 = 20;

/// The ports the use cases run on.
#[derive(Clone)]
pub struct Ports {
    /// Users and keys.
    pub accounts: Arc<dyn AccountStore>,
    /// The management API's reads and the audit trail.
    pub manage: Arc<dyn domain::ports::ManageStore>,
    /// Statements, revenue and exports.
    pub statements: Arc<dyn domain::ports::StatementStore>,
    /// Tasks.
    pub tasks: Arc<dyn TaskStore>,
    /// Models, prices and switches.
    pub models: Arc<dyn ModelStore>,
    /// Balances.
    pub ledger: Arc<dyn Ledger>,
    /// Low-balance alerts.
    pub alerts: Arc<dyn domain::AlertStore>,
    /// Voucher batches and failed redemptions (redemption itself is the ledger's).
    pub vouchers: Arc<dyn domain::VoucherStore>,
    /// Holds and their tasks, opened and closed atomically.
    pub calls: Arc<dyn CallBook>,
    /// `Idempotency-Key` records.
    pub idempotency: Arc<dyn IdempotencyStore>,
    /// Owners of the response ids returned by the response-style endpoint.
    pub responses: Arc<dyn ResponseOwners>,
    /// Video work: worker leases, stored media, webhook secrets and deliveries.
    pub videos: Arc<dyn VideoStore>,
    /// Concurrency slots leased by replicas.
    pub caps: Arc<dyn CapLeases>,
    /// Per-key rate-limit counters, leased by replicas in blocks.
    pub rates: Arc<dyn RateLeases>,
    /// Whether the store is reachable and migrated.
    pub readiness: Arc<dyn Readiness>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Ids.
    pub ids: Arc<dyn IdSource>,
    /// The upstream platform's synchronous endpoints; `None` answers 503 `provider_not_configured`.
    pub upstream: Option<Arc<dyn Upstream>>,
    /// How the upstream endpoints fare; `None`: not reported.
    pub upstream_health: Option<Arc<dyn domain::ports::UpstreamHealth>>,
    /// What video tasks need besides the store; `None` answers 503 `provider_not_configured`.
    pub video: Option<video::VideoPorts>,
    /// Self-serve top-ups; `None` answers 503 `payments_not_configured`.
    pub payments: Option<PaymentPorts>,
}

impl Ports {
    /// All storage ports from one object that implements them all (the `store` crate's `Store`).
    pub fn from_store<S>(store: S, clock: Arc<dyn Clock>) -> Ports
    where
        S: AccountStore
            + domain::ports::ManageStore
            + domain::ports::StatementStore
            + TaskStore
            + ModelStore
            + Ledger
            + CallBook
            + IdempotencyStore
            + ResponseOwners
            + VideoStore
            + CapLeases
            + RateLeases
            + Readiness
            + domain::VoucherStore
            + domain::AlertStore
            + Clone
            + 'static,
    {
        Ports {
            accounts: Arc::new(store.clone()),
            manage: Arc::new(store.clone()),
            statements: Arc::new(store.clone()),
            tasks: Arc::new(store.clone()),
            models: Arc::new(store.clone()),
            idempotency: Arc::new(store.clone()),
            responses: Arc::new(store.clone()),
            videos: Arc::new(store.clone()),
            caps: Arc::new(store.clone()),
            rates: Arc::new(store.clone()),
            readiness: Arc::new(store.clone()),
            calls: Arc::new(store.clone()),
            vouchers: Arc::new(store.clone()),
            alerts: Arc::new(store.clone()),
            ledger: Arc::new(store),
            clock,
            ids: Arc::new(UuidIds),
            upstream: None,
            upstream_health: None,
            video: None,
            payments: None,
        }
    }

    /// The same ports with `health` telling how the upstream endpoints fare (`/metrics`,
    /// `/readyz`).
    pub fn with_upstream_health(mut self, health: Arc<dyn domain::ports::UpstreamHealth>) -> Ports {
        self.upstream_health = Some(health);
        self
    }

    /// The same ports with video tasks served by `video`.
    pub fn with_video(mut self, video: video::VideoPorts) -> Ports {
        self.video = Some(video);
        self
    }

    /// The same ports with `upstream` serving the synchronous endpoints.
    pub fn with_upstream(mut self, upstream: Arc<dyn Upstream>) -> Ports {
        self.upstream = Some(upstream);
        self
    }
}

/// The caller behind a valid API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's owner.
    pub user_id: UserId,
    /// The key used.
    pub key_id: ApiKeyId,
    /// What the key may do.
    pub scopes: Vec<Scope>,
    /// From this instant on the key is refused as expired.
    pub expires_at: Option<Timestamp>,
    /// The models the key may reach; `None`: every model.
    pub models: Option<ModelAllowList>,
    /// The key's spend budget, as last read (see `cache::CACHE_TTL`); its calls' holds count
    /// against it when it has one.
    pub budget: Option<domain::KeyBudget>,
    /// The key's requests- and tokens-per-minute limits, each the lowest of its own and its
    /// ancestors'.
    pub rates: KeyRates,
    /// The client addresses the key may be used from; `None`: any.
    pub allow_ips: Option<domain::IpAllowList>,
    /// The owner's role: only an `admin`'s key with the `admin` scope reaches the operator routes.
    pub role: domain::Role,
    /// The keys that minted this one, nearest first (empty for an operator's key): their model and
    /// address lists bind this key's requests too (`lineage.rs`).
    pub ancestors: Vec<Ancestor>,
    /// The keys whose budgets this caller's holds count against: the key itself when it has a
    /// budget, then each ancestor that has one.
    pub budget_keys: domain::BudgetKeys,
    /// The most this request's call may cost (its `X-Max-Cost` header), set by the edge per
    /// request; `None`: no cap.
    pub max_cost: Option<domain::UsdAmount>,
}

impl Principal {
    /// Whether the key, and every key it descends from, may use model `name` of `kind`.
    pub fn may_use(&self, name: &str, kind: ModelKind) -> bool {
        self.models.as_ref().is_none_or(|list| list.allows(name, kind))
            && self.ancestors.iter().all(|a| a.models.as_ref().is_none_or(|list| list.allows(name, kind)))
    }

    /// Whether the key, and every key it descends from, may be used from `client` (`None`: an
    /// address that could not be told, which no address list allows).
    pub fn may_connect_from(&self, client: Option<std::net::IpAddr>) -> bool {
        let allows = |list: &Option<domain::IpAllowList>| {
            list.as_ref().is_none_or(|list| client.is_some_and(|ip| list.allows(ip)))
        };
        allows(&self.allow_ips) && self.ancestors.iter().all(|a| allows(&a.allow_ips))
    }
}

/// The gateway's use cases.
#[derive(Clone)]
pub struct Gateway {
    ports: Ports,
    caches: Arc<cache::Caches>,
    /// The longest an upstream call may take (its read timeout).
    call_timeout: std::time::Duration,
    /// The video worker's pacing.
    video_settings: video::VideoSettings,
    /// Wakes this process's video worker when a task is created.
    video_wake: Arc<tokio::sync::Notify>,
    /// Concurrency caps of synchronous calls.
    admission: admission::Admission,
    /// Per-key rate limits.
    rates: rates::Rates,
    /// This replica's Prometheus metrics.
    metrics: Arc<metrics::Metrics>,
    /// Calls, streams and refunds running on tasks of their own.
    background: Background,
    /// What this replica knows of the users' low-balance alerts.
    alert_watch: Arc<alerts::AlertWatch>,
}

impl Gateway {
    /// Use cases over `ports`.
    pub fn new(mut ports: Ports) -> Gateway {
        let background = Background::default();
        let alert_watch =
            Arc::new(alerts::AlertWatch::new(Arc::clone(&ports.alerts), Arc::clone(&ports.clock), background.clone()));
        let watched = Arc::new(alerts::Watched {
            ledger: Arc::clone(&ports.ledger),
            calls: Arc::clone(&ports.calls),
            watch: Arc::clone(&alert_watch),
        });
        ports.ledger = watched.clone();
        ports.calls = watched;
        let replica = ports.ids.new_id("replica_");
        let admission = admission::Admission::new(
            AdmissionSettings::default(),
            replica,
            Arc::clone(&ports.caps),
            Arc::clone(&ports.clock),
        );
        let rates = rates::Rates::new(Arc::clone(&ports.rates), Arc::clone(&ports.clock));
        Gateway {
            admission,
            rates,
            metrics: Arc::new(metrics::Metrics::default()),
            background,
            alert_watch,
            ports,
            caches: Arc::new(cache::Caches::default()),
            call_timeout: idempotency::IDEMPOTENCY_STALE_AFTER - std::time::Duration::from_secs(300),
            video_settings: video::VideoSettings::default(),
            video_wake: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The same use cases with concurrency caps kept as `settings` say.
    pub fn with_admission(mut self, settings: AdmissionSettings) -> Gateway {
        let replica = self.admission.replica().to_owned();
        self.admission =
            admission::Admission::new(settings, replica, Arc::clone(&self.ports.caps), Arc::clone(&self.ports.clock));
        self
    }

    /// The work this gateway runs on tasks of its own; shutdown waits for it.
    pub fn background(&self) -> &Background {
        &self.background
    }

    /// This process's id in lease rows (and the video worker's claims).
    pub fn replica_id(&self) -> &str {
        self.admission.replica()
    }

    /// Synchronous calls of `model` running and waiting for a slot in this process.
    pub fn calls_of_model(&self, model: &str) -> (u32, u32) {
        self.admission.model_load(model)
    }

    /// Whether this process can serve: the database answers and has every migration this build
    /// knows (`/readyz`). The error says what is missing.
    pub async fn ready(&self) -> Result<(), ServiceError> {
        if self.ports.upstream_health.as_ref().is_some_and(|h| !h.can_take_calls()) {
            return Err(ServiceError::Busy {
                message: "not ready: every upstream endpoint of a kind of call is failing or cooling down".into(),
                retry_after_secs: 5,
            });
        }
        match self.ports.readiness.pending_migrations().await {
            Ok(0) => Ok(()),
            Ok(n) => Err(ServiceError::Busy {
                message: format!("not ready: the database lacks {n} migrations of this version"),
                retry_after_secs: 5,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "readiness check failed");
                Err(ServiceError::Busy {
                    message: "not ready: the database cannot be reached".into(),
                    retry_after_secs: 5,
                })
            }
        }
    }

    /// Starts the manager that leases this replica's concurrency slots from the shared rows (when
    /// caps are on); the process supervisor calls it at start.
    pub fn start_cap_leases(&self) {
        self.admission.start();
    }

    /// Gives back this process's concurrency leases (at shutdown, after the last call ended), so
    /// that other replicas need not wait for them to expire.
    pub async fn release_leases(&self) -> Result<(), ServiceError> {
        self.admission.release_all().await
    }

    /// The same use cases for an upstream whose calls may take up to `timeout`: an unanswered
    /// `Idempotency-Key` claim is taken over only five minutes after that, and the recovery sweep
    /// (`recovery_age`) waits longer than a live call can go without a sign of life.
    pub fn with_call_timeout(mut self, timeout: std::time::Duration) -> Gateway {
        self.call_timeout = timeout;
        self
    }

    /// How old a running synchronous call must be before the recovery sweep ends it: longer than
    /// an upstream read can stall, plus a stream's heartbeat and client-stall allowances.
    pub fn recovery_age(&self) -> std::time::Duration {
        self.call_timeout + STREAM_HEARTBEAT + CLIENT_STALL_LIMIT + std::time::Duration::from_secs(60)
    }

    fn idempotency_stale_ms(&self) -> i64 {
        let stale = self.call_timeout + std::time::Duration::from_secs(300);
        domain::duration_millis(stale)
    }

    /// The ports, for wiring and tests.
    pub fn ports(&self) -> &Ports {
        &self.ports
    }

    /// Checks a presented key secret and that it carries `needed`.
    ///
    /// Every failure (missing, unknown, revoked, under-scoped) is the same `InvalidApiKey`,
    /// so a caller learns nothing about which keys exist; an expired key (its `expires_at` now or
    /// past, read against the clock at every request, cached or not) is `KeyRefused` saying so,
    /// and so is a key with an address list that `client` (the caller's address, as the edge
    /// determined it; `None` when unknown) is not on.
    pub async fn authenticate(
        &self,
        secret: Option<&str>,
        needed: Scope,
        client: Option<std::net::IpAddr>,
    ) -> Result<Principal, ServiceError> {
        let secret = secret.map(str::trim).filter(|s| !s.is_empty()).ok_or(ServiceError::InvalidApiKey)?;
        let hash = hash_secret(secret);
        let principal = match self.caches.principal(&hash) {
            Some(p) => p,
            None => {
                let found = self.ports.accounts.key_by_hash(&hash).await?;
                let Some((key, user)) = found.filter(|(k, _)| k.revoked_at.is_none()) else {
                    return Err(ServiceError::InvalidApiKey);
                };
                if user.disabled_at.is_some() {
                    // Not cached: an operator who enables the account again is heard at once.
                    return Err(ServiceError::KeyRefused("this account is disabled; ask the operator".into()));
                }
                let lineage = self.lineage(&key).await?;
                if lineage.ended {
                    // A key ends with the key that minted it.
                    return Err(ServiceError::InvalidApiKey);
                }
                let budget_keys = lineage::budget_keys(&key, &lineage.ancestors);
                let principal = Principal {
                    user_id: key.user_id,
                    key_id: key.id,
                    scopes: key.scopes,
                    expires_at: match (key.expires_at, lineage.expires_at) {
                        (Some(own), Some(inherited)) => Some(own.min(inherited)),
                        (own, inherited) => own.or(inherited),
                    },
                    models: key.models,
                    budget: key.budget,
                    rates: lineage::lowest_rates(key.rates, lineage.rates),
                    allow_ips: key.allow_ips,
                    role: user.role,
                    ancestors: lineage.ancestors,
                    budget_keys,
                    max_cost: None,
                };
                self.caches.remember_principal(hash, principal.clone());
                principal
            }
        };
        if !principal.scopes.contains(&needed) {
            return Err(ServiceError::InvalidApiKey);
        }
        if let Some(expires_at) = principal.expires_at
            && self.ports.clock.now() >= expires_at
        {
            self.metrics.key_refused(metrics::KeyRefusal::Expired);
            return Err(ServiceError::KeyRefused(format!("this API key expired at {expires_at}")));
        }
        if !principal.may_connect_from(client) {
            self.metrics.key_refused(metrics::KeyRefusal::Ip);
            let from = client.map_or_else(|| "an unknown address".to_owned(), |ip| ip.to_string());
            return Err(ServiceError::KeyRefused(format!("this API key may not be used from {from}")));
        }
        Ok(principal)
    }
}
