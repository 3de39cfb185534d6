//! The replica's Prometheus metrics (`GET /metrics`): what the edge, the call flow, admission and
//! the video worker count as they go, plus gauges read when scraped (open reservations and the
//! video worker's lag from the store, queued calls and leased slots from admission).
//!
//! Labels carry routes, statuses, model names and fixed kinds only: never a user id, a key or
//! upstream text. Money is counted in integer micro-USD.

use std::time::Duration;

use domain::ports::UpstreamError;
use domain::{BillingStatus, CapScope, TaskId, UsdAmount};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::{Gateway, ServiceError};

/// The `Content-Type` of [`Gateway::metrics_text`] (OpenMetrics text, which Prometheus reads).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamErrorLabels {
    model: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    pool: String,
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointErrorLabels {
    pool: String,
    endpoint: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    model: String,
    outcome: &'static str,
}

/// Why a valid key was refused (the `reason` label of `gateway_key_refusals_total`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum KeyRefusal {
    /// Its `expires_at` is now or past.
    Expired,
    /// The model is not on its allow-list.
    Model,
    /// Its spend budget does not cover the call's hold.
    Budget,
    /// A requests- or tokens-per-minute limit is reached.
    Rate,
    /// The client's address is not on its list.
    Ip,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Request latencies: 0.5 ms to about 16 s.
fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_5, 2.0, 16))
}

/// Upstream latencies: 5 ms to about 80 s (video generation calls are slow).
fn upstream_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Every metric of one replica. Cheap to share (`Arc` in [`Gateway`]); recording is lock-free
/// except for the first sample of a new label set.
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Histograms<RouteLabel>,
    upstream_seconds: Histograms<ModelLabel>,
    upstream_errors: Family<UpstreamErrorLabels, Counter>,
    calls_in_flight: Family<ModelLabel, Gauge>,
    calls_queued: Family<ModelLabel, Gauge>,
    model_slots_leased: Family<ModelLabel, Gauge>,
    user_slots_leased: Gauge,
    calls_ended: Family<EndLabels, Counter>,
    settled_micros: Family<ModelLabel, Counter>,
    refunded_micros: Family<ModelLabel, Counter>,
    overdraft_micros: Counter,
    reservations_open: Gauge,
    video_worker_lag: Gauge,
    webhook_deliveries: Family<OutcomeLabel, Counter>,
    store_up: Gauge,
    key_refusals: Family<ReasonLabel, Counter>,
    endpoint_attempts: Family<EndpointLabels, Counter>,
    endpoint_failures: Family<EndpointLabels, Counter>,
    endpoint_errors: Family<EndpointErrorLabels, Counter>,
    endpoint_retries: Family<EndpointLabels, Counter>,
    endpoint_cool_downs: Family<EndpointLabels, Counter>,
    endpoint_circuit_opened: Family<EndpointLabels, Counter>,
    endpoint_state: Family<EndpointLabels, Gauge>,
    endpoint_in_flight: Family<EndpointLabels, Gauge>,
    /// One scrape at a time sets the scrape-time gauges and encodes.
    scrape: tokio::sync::Mutex<()>,
    /// Billable calls open in this replica, all models together (the sum of `calls_in_flight`,
    /// which a family cannot give), for the operators' health view.
    calls_open: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("gateway"),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(request_histogram),
            upstream_seconds: Family::new_with_constructor(upstream_histogram),
            upstream_errors: Family::default(),
            calls_in_flight: Family::default(),
            calls_queued: Family::default(),
            model_slots_leased: Family::default(),
            user_slots_leased: Gauge::default(),
            calls_ended: Family::default(),
            settled_micros: Family::default(),
            refunded_micros: Family::default(),
            overdraft_micros: Counter::default(),
            reservations_open: Gauge::default(),
            video_worker_lag: Gauge::default(),
            webhook_deliveries: Family::default(),
            store_up: Gauge::default(),
            key_refusals: Family::default(),
            endpoint_attempts: Family::default(),
            endpoint_failures: Family::default(),
            endpoint_errors: Family::default(),
            endpoint_retries: Family::default(),
            endpoint_cool_downs: Family::default(),
            endpoint_circuit_opened: Family::default(),
            endpoint_state: Family::default(),
            endpoint_in_flight: Family::default(),
            scrape: tokio::sync::Mutex::new(()),
            calls_open: std::sync::Arc::default(),
        };
        metrics.register();
        metrics
    }
}

impl Metrics {
    fn register(&mut self) {
        let r = &mut self.registry;
        let endpoint_counters = [
            ("upstream_endpoint_attempts", "Attempts on each upstream endpoint", &self.endpoint_attempts),
            (
                "upstream_endpoint_failures",
                "Failed attempts (no answer, 429, 5xx, a refused key) on each upstream endpoint",
                &self.endpoint_failures,
            ),
            (
                "upstream_endpoint_retries",
                "Attempts on each upstream endpoint that retried a call another endpoint failed",
                &self.endpoint_retries,
            ),
            (
                "upstream_endpoint_cool_downs",
                "Retry-After cool-downs of each upstream endpoint",
                &self.endpoint_cool_downs,
            ),
            (
                "upstream_endpoint_circuit_opened",
                "Times each upstream endpoint's circuit opened (failures, or a refused key)",
                &self.endpoint_circuit_opened,
            ),
        ];
        for (name, help, family) in endpoint_counters {
            r.register(name, help, family.clone());
        }
        r.register(
            "upstream_endpoint_errors",
            "Failed attempts on each upstream endpoint by kind (connect, timeout, rate_limited, server_error, refused_key)",
            self.endpoint_errors.clone(),
        );
        r.register(
            "upstream_endpoint_state",
            "Each upstream endpoint now: 0 healthy, 1 cooling down, 2 half-open (a probe may go), 3 circuit open",
            self.endpoint_state.clone(),
        );
        r.register(
            "upstream_endpoint_in_flight",
            "Attempts in flight on each upstream endpoint in this replica",
            self.endpoint_in_flight.clone(),
        );
        r.register("http_requests", "HTTP requests answered, by route and status", self.requests.clone());
        r.register_with_unit(
            "http_request_duration",
            "Time to the response head, by route (a stream's body is not included)",
            Unit::Seconds,
            self.request_seconds.clone(),
        );
        r.register_with_unit(
            "upstream_duration",
            "Upstream calls (a stream: until its head), by public model name",
            Unit::Seconds,
            self.upstream_seconds.clone(),
        );
        r.register("upstream_errors", "Failed upstream calls, by model and kind", self.upstream_errors.clone());
        r.register("calls_in_flight", "Billable calls open in this replica, by model", self.calls_in_flight.clone());
        r.register("calls_queued", "Calls waiting for a concurrency slot in this replica", self.calls_queued.clone());
        r.register(
            "model_slots_leased",
            "Concurrency slots of each model's cap this replica leases",
            self.model_slots_leased.clone(),
        );
        r.register(
            "user_slots_leased",
            "Concurrency slots of users' caps this replica leases, over all users",
            self.user_slots_leased.clone(),
        );
        r.register(
            "calls_ended",
            "Billable calls ended, by model and outcome (settled, refunded)",
            self.calls_ended.clone(),
        );
        r.register("settled_micro_usd", "Micro-USD charged by settled calls, by model", self.settled_micros.clone());
        r.register(
            "refunded_micro_usd",
            "Micro-USD returned by refunded calls (their whole hold), by model",
            self.refunded_micros.clone(),
        );
        r.register(
            "overdraft_micro_usd",
            "Micro-USD charged above their holds by settlements (only an upstream breaking its own bounds gets here)",
            self.overdraft_micros.clone(),
        );
        r.register(
            "reservations_open",
            "Reservations holding money across the cluster (read from the store when scraped)",
            self.reservations_open.clone(),
        );
        r.register_with_unit(
            "video_worker_lag",
            "Age of the oldest video task that is not terminal, cluster-wide (0 when none)",
            Unit::Seconds,
            self.video_worker_lag.clone(),
        );
        r.register(
            "webhook_deliveries",
            "Webhook delivery attempts, by outcome (delivered, failed)",
            self.webhook_deliveries.clone(),
        );
        r.register(
            "key_refusals",
            "Requests refused for a valid key's limits, by reason (expired, model, rate); never by key",
            self.key_refusals.clone(),
        );
        r.register("store_up", "Whether the last scrape could read the store (1) or not (0)", self.store_up.clone());
    }

    /// Counts one answered request.
    pub(crate) fn request(&self, route: &'static str, status: u16, took: Duration) {
        self.requests.get_or_create(&RequestLabels { route, status }).inc();
        self.request_seconds.get_or_create(&RouteLabel { route }).observe(took.as_secs_f64());
    }

    /// Counts one upstream call of `model` that took `took`, failed with `error` or not.
    pub(crate) fn upstream(&self, model: &str, took: Duration, error: Option<&UpstreamError>) {
        let label = ModelLabel { model: model.to_owned() };
        self.upstream_seconds.get_or_create(&label).observe(took.as_secs_f64());
        if let Some(e) = error {
            self.upstream_failed(model, e);
        }
    }

    /// Counts an upstream failure of `model` after its answer began (a stream that broke off).
    pub(crate) fn upstream_failed(&self, model: &str, error: &UpstreamError) {
        self.upstream_errors.get_or_create(&UpstreamErrorLabels { model: model.to_owned(), kind: error.kind() }).inc();
    }

    /// Counts what call `task` of `model` was not charged because the caller's cap was below
    /// what the upstream reported (`charged` above `cap`), in `gateway_overdraft_micro_usd_total`.
    pub(crate) fn uncharged_excess(&self, task: &TaskId, model: &str, charged: UsdAmount, cap: UsdAmount) {
        let over = charged.micros().saturating_sub(cap.micros());
        self.overdraft_micros.inc_by(u64::try_from(over).unwrap_or(0));
        tracing::warn!(
            %task, model, cap_micro_usd = cap.micros(), reported_micro_usd = charged.micros(),
            "the upstream reported more than the caller's X-Max-Cost; the cap was charged"
        );
    }

    /// Counts call `task` of `model` ended as `status`: `charged` taken, or `held` returned. A
    /// settlement above its hold is counted in `gateway_overdraft_micro_usd_total` and logged.
    pub(crate) fn call_ended(
        &self,
        task: &TaskId,
        model: &str,
        status: BillingStatus,
        charged: UsdAmount,
        held: UsdAmount,
    ) {
        if status == BillingStatus::Settled && charged > held {
            let over = charged.micros().saturating_sub(held.micros());
            self.overdraft_micros.inc_by(u64::try_from(over).unwrap_or(0));
            tracing::warn!(
                %task, model, held_micro_usd = held.micros(), charged_micro_usd = charged.micros(),
                "settlement above its hold: the upstream billed more than the call's bounds allow"
            );
        }
        let label = ModelLabel { model: model.to_owned() };
        let (outcome, counter, amount) = match status {
            BillingStatus::Settled => ("settled", &self.settled_micros, charged),
            // A call that ended without a charge gave its hold back, whatever its billing says.
            BillingStatus::Refunded | BillingStatus::Reserved | BillingStatus::Unbilled => {
                ("refunded", &self.refunded_micros, held)
            }
        };
        counter.get_or_create(&label).inc_by(u64::try_from(amount.micros()).unwrap_or(0));
        self.calls_ended.get_or_create(&EndLabels { model: label.model, outcome }).inc();
    }

    /// Marks a billable call of `model` open until the returned guard drops.
    pub(crate) fn call_opened(&self, model: &str) -> InFlight {
        let gauge = self.calls_in_flight.get_or_create_owned(&ModelLabel { model: model.to_owned() });
        gauge.inc();
        self.calls_open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight { gauge, total: self.calls_open.clone() }
    }

    /// Counts one request refused for its key's limits.
    pub(crate) fn key_refused(&self, reason: KeyRefusal) {
        let reason = match reason {
            KeyRefusal::Expired => "expired",
            KeyRefusal::Model => "model",
            KeyRefusal::Budget => "budget",
            KeyRefusal::Rate => "rate",
            KeyRefusal::Ip => "ip",
        };
        self.key_refusals.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Counts one webhook delivery attempt.
    pub(crate) fn webhook(&self, delivered: bool) {
        let outcome = if delivered { "delivered" } else { "failed" };
        self.webhook_deliveries.get_or_create(&OutcomeLabel { outcome }).inc();
    }
}

/// A billable call counted in `gateway_calls_in_flight` until dropped.
pub(crate) struct InFlight {
    gauge: Gauge,
    total: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
        self.total.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InFlight")
    }
}

impl Metrics {
    /// Sets the per-endpoint families from the router's own counts (counters moved up to them).
    fn endpoints(&self, endpoints: &[domain::ports::EndpointHealth]) {
        for e in endpoints {
            let label = EndpointLabels { pool: e.pool.clone(), endpoint: e.name.clone() };
            let counters = [
                (&self.endpoint_attempts, e.attempts),
                (&self.endpoint_failures, e.failures),
                (&self.endpoint_retries, e.retries),
                (&self.endpoint_cool_downs, e.cool_downs),
                (&self.endpoint_circuit_opened, e.circuit_opened),
            ];
            for (family, total) in counters {
                let counter = family.get_or_create(&label);
                counter.inc_by(total.saturating_sub(counter.get()));
            }
            for (kind, total) in &e.errors {
                let labels = EndpointErrorLabels { pool: e.pool.clone(), endpoint: e.name.clone(), kind: kind.clone() };
                let counter = self.endpoint_errors.get_or_create(&labels);
                counter.inc_by(total.saturating_sub(counter.get()));
            }
            let state = match e.state.as_str() {
                "healthy" => 0,
                "cooling_down" => 1,
                "half_open" => 2,
                _ => 3,
            };
            self.endpoint_state.get_or_create(&label).set(state);
            self.endpoint_in_flight.get_or_create(&label).set(i64::try_from(e.in_flight).unwrap_or(i64::MAX));
        }
    }
}

impl Gateway {
    /// Counts one answered request on `route` (a fixed route name, never the raw path).
    pub fn record_request(&self, route: &'static str, status: u16, took: Duration) {
        self.metrics.request(route, status, took);
    }

    /// Every metric of this replica in the OpenMetrics text format ([`METRICS_CONTENT_TYPE`]).
    /// Reads the cluster-wide gauges from the store; a store that cannot be read sets
    /// `gateway_store_up` to 0 and leaves them at their last value.
    pub async fn metrics_text(&self) -> String {
        let metrics = &self.metrics;
        let _one_at_a_time = metrics.scrape.lock().await;
        match self.ports.tasks.open_work().await {
            Ok(work) => {
                metrics.store_up.set(1);
                metrics.reservations_open.set(i64::try_from(work.open_reservations).unwrap_or(i64::MAX));
                let now = self.ports.clock.now().millis();
                let lag_secs = work.oldest_active_video.map_or(0, |t| now.saturating_sub(t.millis()).max(0) / 1000);
                metrics.video_worker_lag.set(lag_secs);
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics: the store could not be read");
                metrics.store_up.set(0);
            }
        }
        metrics.calls_queued.clear();
        metrics.model_slots_leased.clear();
        let mut user_slots = 0_i64;
        for load in self.admission.loads() {
            match load.scope {
                CapScope::Model(model) => {
                    let label = ModelLabel { model };
                    metrics.calls_queued.get_or_create(&label).set(i64::from(load.waiting));
                    metrics.model_slots_leased.get_or_create(&label).set(i64::from(load.leased));
                }
                CapScope::User(_) => user_slots = user_slots.saturating_add(i64::from(load.leased)),
            }
        }
        metrics.user_slots_leased.set(user_slots);
        if let Some(health) = &self.ports.upstream_health {
            metrics.endpoints(&health.endpoints());
        }
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &metrics.registry) {
            tracing::error!(error = %e, "metrics: encoding failed");
        }
        text
    }
}

/// What the operators' health page shows, from the sources `/metrics` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Billable calls open in this replica.
    pub calls_in_flight: i64,
    /// Calls of this replica waiting for a concurrency slot.
    pub calls_queued: i64,
    /// Reservations still holding money, cluster-wide.
    pub open_reservations: u64,
    /// Age in seconds of the oldest video task not yet ended (the worker's lag); `None` without one.
    pub oldest_active_video_secs: Option<i64>,
    /// Whether maintenance mode is on.
    pub maintenance: bool,
    /// Each live replica's last report of its upstream endpoints: `(replica, live until, endpoints)`.
    pub replicas: Vec<(String, domain::Timestamp, Vec<domain::ports::EndpointHealth>)>,
}

impl Gateway {
    /// The health view: this replica's calls, the cluster's open reservations and video lag, and
    /// every live replica's upstream endpoints.
    pub async fn health(&self) -> Result<Health, ServiceError> {
        let work = self.ports.tasks.open_work().await?;
        let now = self.ports.clock.now().millis();
        let calls_queued = self
            .admission
            .loads()
            .into_iter()
            .filter(|l| matches!(l.scope, CapScope::Model(_)))
            .map(|l| i64::from(l.waiting))
            .sum();
        Ok(Health {
            calls_in_flight: self.metrics.calls_open.load(std::sync::atomic::Ordering::Relaxed),
            calls_queued,
            open_reservations: work.open_reservations,
            oldest_active_video_secs: work.oldest_active_video.map(|t| now.saturating_sub(t.millis()).max(0) / 1000),
            maintenance: self.ports.models.maintenance().await?,
            replicas: self.upstream_reports().await?,
        })
    }
}
