//! The one flow every billable synchronous call goes through (chat, image, audio, the native formats):
//! quote the reservation, open the call (hold + task in one commit), run the upstream step, and close it
//! (settle on the measured usage, or refund) on every path.
//!
//! The kind-specific parts plug in as values: the caller validates the request and quotes the worst
//! case ([`CallSpec`]), sends the upstream request, and turns the answer into a charge. [`OpenCall`] is the
//! open reservation: consuming it with [`OpenCall::settle`], [`OpenCall::refund`] or [`OpenCall::fail`] is
//! the only way to end it, and one dropped without being closed (a panic, a cancelled future) refunds
//! itself on a task of its own, so no reservation is ever left open by the process that made it.
//! A crash is covered by [`Gateway::recover_interrupted_calls`].

use catalog::ModelDef;
use domain::ports::{TaskOutcome, UpstreamError};
use domain::{
    ApiKeyId, BillingStatus, ModelKind, PricingVersion, Task, TaskBilling, TaskId, TaskStatus, UsdAmount, UserId,
};

use crate::reply::{CallBilling, CallReply};
use crate::{Gateway, Principal, ServiceError};

/// Descriptive task fields a call may fill; everything else of the task row follows from the spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TaskDetails {
    /// The prompt, when the call has one worth showing (kept to [`PROMPT_KEPT_CHARS`]).
    pub prompt: Option<String>,
    /// How the input media arrived.
    pub input_mode: Option<domain::InputMode>,
    /// What kind of media the inputs are.
    pub media_type: Option<domain::MediaType>,
    /// The input media in order (video).
    pub media: Vec<domain::TaskMedia>,
    /// Seconds of output asked for (video).
    pub duration: Option<i64>,
    /// Video resolution.
    pub resolution: Option<domain::Resolution>,
    /// Video aspect ratio.
    pub ratio: Option<domain::Ratio>,
    /// Whether the video has sound.
    pub generate_audio: Option<bool>,
    /// Where status changes are posted (video).
    pub webhook_url: Option<String>,
    /// What the call asked for when it named an alias or a list of models.
    pub requested: Option<String>,
}

/// The most characters of a prompt kept on a synchronous call's task row.
pub(crate) const PROMPT_KEPT_CHARS: usize = 4000;

/// One body to send for a call, and the candidate model to serve it with when that is not the
/// call's current model (a fallback).
pub(crate) struct Attempt {
    /// The model and price to serve this attempt with; `None`: the call's own.
    pub serve: Option<crate::fallback::Priced>,
    /// The upstream body (its `model` is the candidate's upstream id).
    pub body: Vec<u8>,
}

/// A validated, quoted call about to be opened.
#[derive(Debug, Clone)]
pub(crate) struct CallSpec {
    /// Whose balance holds the estimate.
    pub user: UserId,
    /// The key that makes the call.
    pub key: ApiKeyId,
    /// The keys whose budgets the hold also counts against (the caller's and its ancestors' that
    /// have one).
    pub budget_keys: domain::BudgetKeys,
    /// The model's catalog entry (shared with the catalog snapshot).
    pub def: std::sync::Arc<ModelDef>,
    /// The price version the call is billed at.
    pub pricing: PricingVersion,
    /// The worst-case charge to hold.
    pub estimate: UsdAmount,
    /// What the call counts against its key's rate limits.
    pub rate: crate::rates::RateClaim,
    /// Descriptive task fields.
    pub details: TaskDetails,
    /// The most the call may be charged (the caller's `X-Max-Cost`); `None`: no cap.
    pub max_cost: Option<UsdAmount>,
}

/// An open call: its estimate is held and its task is `processing`. Close it exactly once.
pub(crate) struct OpenCall {
    task_id: TaskId,
    /// `None` once closed.
    state: Option<CallState>,
}

impl std::fmt::Debug for OpenCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenCall").field("task_id", &self.task_id).field("open", &self.state.is_some()).finish()
    }
}

/// What closing a call needs; has no `Drop` of its own.
struct CallState {
    gateway: Gateway,
    task_id: TaskId,
    user_id: UserId,
    /// The keys whose budgets the hold counts against.
    budget_keys: domain::BudgetKeys,
    /// The model (its public name for metrics, its upstream id for routing).
    def: std::sync::Arc<ModelDef>,
    /// The upstream endpoint that served the call and the attempts it made, once it was sent.
    via: Option<domain::ports::Via>,
    estimate: UsdAmount,
    /// The caller's cap: a charge above it is cut to it.
    max_cost: Option<UsdAmount>,
    pricing_version_id: domain::PricingVersionId,
    /// The model that serves the call and its price version, once a fallback took over from the
    /// first candidate (the task is then written with them when the call closes).
    served_by: Option<(String, domain::PricingVersionId)>,
    /// Counts the call in `gateway_calls_in_flight` until it ends.
    _in_flight: crate::metrics::InFlight,
    /// The call's concurrency slots, given back when the call ends (`None` for video tasks, which
    /// count while not terminal, and when caps are off).
    _permit: Option<crate::admission::Permit>,
    /// The call's token reservation against its key's `tpm` (`None` for a key without limits),
    /// settled on the tokens used when the call ends.
    rate: Option<crate::rates::RateTicket>,
}

/// Refuses a hold above the caller's cap (`X-Max-Cost`): 402 `max_cost_exceeded`.
pub(crate) fn within_cap(hold: UsdAmount, cap: Option<UsdAmount>) -> Result<(), ServiceError> {
    match cap {
        Some(cap) if hold > cap => Err(ServiceError::MaxCostExceeded { hold, cap }),
        _ => Ok(()),
    }
}

impl Gateway {
    /// `charge`, cut to the caller's `cap`: an excess is not charged; it is counted in
    /// `gateway_overdraft_micro_usd_total` and logged.
    pub(crate) fn capped(&self, task: &TaskId, model: &str, charge: UsdAmount, cap: Option<UsdAmount>) -> UsdAmount {
        match cap {
            Some(cap) if charge > cap => {
                self.metrics.uncharged_excess(task, model, charge, cap);
                cap
            }
            _ => charge,
        }
    }
}

/// The client-facing message for an upstream failure that was refunded.
pub(crate) fn upstream_message(e: &UpstreamError) -> String {
    let retry = if e.retryable() { "a retry may succeed" } else { "retrying the same request will not help" };
    format!("the upstream call failed ({e}); the reservation was refunded; {retry}")
}

/// The error a refunded upstream failure answers with: 503 when nothing is configured; 400 when the
/// upstream refused the caller's own request ([`UpstreamError::is_callers_fault`]; its reason
/// passed on); else 502, which tells nothing of the upstream's answer (a 401 or 403 is about the
/// gateway's own key).
pub(crate) fn upstream_error(e: &UpstreamError) -> ServiceError {
    match e {
        UpstreamError::NotConfigured(what) => {
            ServiceError::ProviderNotConfigured(format!("no upstream provider is configured for {what}"))
        }
        UpstreamError::Status { status, reason, .. } if e.is_callers_fault() => {
            let reason = if reason.is_empty() { format!("HTTP {status} without a reason") } else { reason.clone() };
            ServiceError::InvalidRequest(format!(
                "the upstream refused the request: {reason} (the reservation was refunded)"
            ))
        }
        other => ServiceError::Upstream { message: upstream_message(other), retryable: other.retryable() },
    }
}

#[cfg(test)]
mod upstream_refusal_tests {
    use super::*;

    #[test]
    fn a_400_is_the_callers_refusal_and_other_statuses_stay_502_without_the_body() {
        let status = |status, reason: &str| UpstreamError::Status {
            status,
            body: format!(r#"{{"error":{{"message":"{reason}"}}}}"#),
            reason: reason.into(),
        };
        let refused = upstream_error(&status(400, "The parameter `input` is required."));
        let ServiceError::InvalidRequest(message) = refused else { panic!("{refused:?}") };
        assert_eq!(
            message,
            "the upstream refused the request: The parameter `input` is required. (the reservation was refunded)"
        );
        let too_large = upstream_error(&status(413, ""));
        let ServiceError::InvalidRequest(message) = too_large else { panic!("{too_large:?}") };
        assert!(message.contains("HTTP 413 without a reason"), "{message}");
        for code in [401, 403, 404, 408, 429, 500] {
            let e = upstream_error(&status(code, "the key sk-upstream-secret is invalid"));
            let ServiceError::Upstream { message, .. } = &e else { panic!("{code}: {e:?}") };
            assert!(!message.contains("sk-upstream-secret"), "{code}: {message}");
        }
    }
}

impl Gateway {
    /// The enabled model `name` of `kind` and its active price: 400 when there is no such model, 401
    /// `invalid_api_key` when `who`'s key may not use it (before anything is held), 503 in
    /// maintenance mode or when the model has no price.
    pub(crate) async fn priced_model(
        &self,
        who: &Principal,
        kind: ModelKind,
        name: &str,
    ) -> Result<(std::sync::Arc<ModelDef>, PricingVersion), ServiceError> {
        let snapshot = self.catalog_snapshot().await?;
        self.priced_in(&snapshot, who, kind, name)
    }

    /// [`Gateway::priced_model`] in a catalog snapshot the caller already holds.
    pub(crate) fn priced_in(
        &self,
        snapshot: &crate::reads::CatalogSnapshot,
        who: &Principal,
        kind: ModelKind,
        name: &str,
    ) -> Result<(std::sync::Arc<ModelDef>, PricingVersion), ServiceError> {
        let view =
            snapshot.models.iter().find(|m| m.record.name == name && m.record.kind == kind).ok_or_else(|| {
                ServiceError::InvalidRequest(format!("model {name:?} is not an available {} model", kind.as_str()))
            })?;
        if !who.may_use(name, kind) {
            self.metrics.key_refused(crate::metrics::KeyRefusal::Model);
            return Err(ServiceError::KeyRefused(format!("this API key may not use model {name:?}")));
        }
        if snapshot.maintenance {
            return Err(ServiceError::ProviderNotConfigured("the gateway is in maintenance mode".into()));
        }
        let pricing = view
            .record
            .pricing
            .clone()
            .ok_or_else(|| ServiceError::ProviderNotConfigured(format!("model {name} has no price configured")))?;
        Ok((std::sync::Arc::clone(&view.def), pricing))
    }

    /// Holds the spec's estimate and stores its task in one commit: `processing` for a synchronous
    /// model, `submitting` for an asynchronous one (video). 402 when the balance does not cover the
    /// estimate; nothing is stored then.
    pub(crate) async fn open_call(&self, spec: CallSpec) -> Result<OpenCall, ServiceError> {
        let task_id = self.new_task_id();
        self.open_call_as(task_id, spec).await
    }

    /// A fresh task id.
    pub(crate) fn new_task_id(&self) -> TaskId {
        TaskId(self.ports.ids.new_id("task_"))
    }

    /// [`Gateway::open_call`] for a task id chosen beforehand (video: its uploads are stored under it).
    pub(crate) async fn open_call_as(&self, task_id: TaskId, spec: CallSpec) -> Result<OpenCall, ServiceError> {
        let now = self.ports.clock.now();
        let pricing_version_id = spec.pricing.id();
        let status = match spec.def.mode {
            catalog::Mode::Synchronous => TaskStatus::Processing,
            catalog::Mode::Asynchronous => TaskStatus::Submitting,
        };
        // The caller's cap first: a hold above it is refused before anything is counted or held.
        within_cap(spec.estimate, spec.max_cost)?;
        // The key's rate limits next: a refusal is immediate, holds nothing and queues for nothing.
        let rate = self.rates.admit(&spec.rate).await.inspect_err(|e| {
            if matches!(e, ServiceError::RateLimitExceeded { .. }) {
                self.metrics.key_refused(crate::metrics::KeyRefusal::Rate);
            }
        })?;
        let permit = match spec.def.mode {
            catalog::Mode::Synchronous => self.admission.admit(&spec.user, &spec.def.name).await?,
            catalog::Mode::Asynchronous => None,
        };
        let prompt = spec.details.prompt.map(|p| p.chars().take(PROMPT_KEPT_CHARS).collect());
        let task = Task {
            id: task_id.clone(),
            user_id: spec.user.clone(),
            key_id: Some(spec.key.clone()),
            model: spec.def.name.clone(),
            kind: spec.def.kind,
            status,
            prompt,
            provider: spec.def.upstream.provider.clone(),
            input_mode: spec.details.input_mode,
            media_type: spec.details.media_type,
            media: spec.details.media,
            duration: spec.details.duration,
            resolution: spec.details.resolution,
            ratio: spec.details.ratio,
            generate_audio: spec.details.generate_audio,
            billing: TaskBilling {
                status: BillingStatus::Reserved,
                pricing_version_id: Some(pricing_version_id.clone()),
                estimated: spec.estimate,
                actual: None,
                balance_after: None,
                usage_json: None,
                budget_keys: spec.budget_keys.clone(),
                max_cost: spec.max_cost,
            },
            output_url: None,
            last_frame_url: None,
            error_code: None,
            error_message: None,
            webhook_url: spec.details.webhook_url,
            requested: spec.details.requested,
            created_at: now,
            updated_at: now,
            completed_at: None,
            runner: match spec.def.mode {
                catalog::Mode::Synchronous => Some(self.replica_id().to_owned()),
                catalog::Mode::Asynchronous => None,
            },
        };
        if let Err(e) = self.ports.calls.open_call(task, spec.estimate).await {
            if matches!(e, billing::LedgerError::KeyBudgetExceeded { .. }) {
                self.metrics.key_refused(crate::metrics::KeyRefusal::Budget);
            }
            return Err(e.into());
        }
        let state = CallState {
            gateway: self.clone(),
            task_id: task_id.clone(),
            user_id: spec.user,
            budget_keys: spec.budget_keys,
            _in_flight: self.metrics.call_opened(&spec.def.name),
            def: spec.def,
            via: None,
            estimate: spec.estimate,
            max_cost: spec.max_cost,
            pricing_version_id,
            served_by: None,
            _permit: permit,
            rate,
        };
        Ok(OpenCall { task_id, state: Some(state) })
    }
}

impl OpenCall {
    /// The call's task id.
    pub(crate) fn task_id(&self) -> &TaskId {
        &self.task_id
    }

    /// The public name of the call's model (empty once closed).
    pub(crate) fn model(&self) -> &str {
        self.state.as_ref().map_or("", |s| s.def.name.as_str())
    }

    /// The model id the upstream expects (empty once closed).
    fn upstream_model(&self) -> &str {
        self.state.as_ref().map_or("", |s| s.def.upstream.model_id.as_str())
    }

    /// Makes candidate `def` at `pricing` the call's model from now on: the one the upstream is asked
    /// for, and the one the task and the answer name when the call closes (a fallback).
    pub(crate) fn serve_with(&mut self, def: std::sync::Arc<ModelDef>, pricing: &PricingVersion) {
        if let Some(state) = self.state.as_mut()
            && state.def.name != def.name
        {
            state.pricing_version_id = pricing.id();
            state.served_by = Some((def.name.clone(), pricing.id()));
            state.def = def;
        }
    }

    /// Records where the call went upstream, for its task's record when it closes.
    fn routed(&mut self, via: Option<domain::ports::Via>) {
        if let Some(state) = self.state.as_mut() {
            state.via = via;
        }
    }

    /// Leaves the reservation open on purpose: an asynchronous task's hold outlives the request that
    /// made it, and its worker ends it (a crash in between is covered by the worker's resumption).
    pub(crate) fn keep(mut self) -> TaskId {
        self.state = None;
        self.task_id.clone()
    }

    fn take(mut self) -> Result<CallState, ServiceError> {
        self.state.take().ok_or_else(|| ServiceError::Internal("a call was closed twice".into()))
    }

    /// Charges `charge` (rounded once by the caller's pricing), records `usage_json` and marks the task
    /// `succeeded`, in one commit; `tokens` (prompt + completion, 0 for other kinds) replace the
    /// call's token reservation against its key's rate limit.
    pub(crate) async fn settle(
        self,
        charge: UsdAmount,
        usage_json: Option<String>,
        tokens: u64,
    ) -> Result<CallBilling, ServiceError> {
        let mut state = self.take()?;
        if let Some(ticket) = state.rate.take() {
            ticket.settle(tokens).await;
        }
        state.close(Some(charge), TaskStatus::Succeeded, None, usage_json).await
    }

    /// Returns the whole hold and marks the task `failed` with `code` and `message`, in one commit.
    pub(crate) async fn refund(
        self,
        code: &str,
        message: String,
        usage_json: Option<String>,
    ) -> Result<CallBilling, ServiceError> {
        let mut state = self.take()?;
        if let Some(ticket) = state.rate.take() {
            // A refunded call used none of its key's tokens.
            ticket.settle(0).await;
        }
        state.close(None, TaskStatus::Failed, Some((code.to_owned(), message)), usage_json).await
    }

    /// Refunds after an upstream failure and returns the error the client gets (502, or 503 when no
    /// upstream is configured). A failed refund is logged; the call's error is still returned.
    pub(crate) async fn fail(self, e: &UpstreamError) -> ServiceError {
        let task = self.task_id().clone();
        tracing::warn!(%task, error = %e, "upstream call failed");
        if let Err(refund) = self.refund("upstream_request_failed", e.to_string(), None).await {
            tracing::error!(%task, error = %refund, "refund failed");
        }
        upstream_error(e)
    }
}

impl CallState {
    /// Ends the hold (charging `charge`, or refunding when `None`) and moves the task to `status`,
    /// in one commit; returns the call's billing.
    async fn close(
        self,
        charge: Option<UsdAmount>,
        status: TaskStatus,
        error: Option<(String, String)>,
        usage_json: Option<String>,
    ) -> Result<CallBilling, ServiceError> {
        let charge = charge.map(|c| self.gateway.capped(&self.task_id, &self.def.name, c, self.max_cost));
        let (error_code, error_message) = error.unzip();
        let outcome = TaskOutcome {
            status,
            usage_json: usage_json.clone(),
            error_code,
            error_message,
            via: self.via,
            served_by: self.served_by.clone(),
        };
        let calls = &self.gateway.ports.calls;
        let held =
            billing::Expect { user: self.user_id.clone(), amount: self.estimate, budget: self.budget_keys.clone() };
        let ended = calls.close_call(&self.task_id, &held, charge, outcome).await?;
        let model = self.def.name.clone();
        self.gateway.metrics.call_ended(&self.task_id, &model, ended.status, ended.actual, self.estimate);
        Ok(CallBilling {
            task_id: self.task_id,
            model,
            billing: TaskBilling {
                status: ended.status,
                pricing_version_id: Some(self.pricing_version_id),
                estimated: self.estimate,
                actual: Some(ended.actual),
                balance_after: Some(ended.balance_after),
                usage_json,
                budget_keys: self.budget_keys,
                max_cost: self.max_cost,
            },
        })
    }
}

impl Drop for OpenCall {
    /// A call dropped while open (a panic or a cancelled future in its owner) is refunded on a task of
    /// its own; without a runtime it is left to the recovery sweep.
    fn drop(&mut self) {
        let Some(state) = self.state.take() else { return };
        let task = state.task_id.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(%task, "open call dropped outside a runtime; the recovery sweep will end it");
            return;
        };
        tracing::error!(%task, "open call dropped without being closed; refunding it");
        let message = "the gateway abandoned the call before it finished; the reservation was refunded".to_owned();
        let background = state.gateway.background.clone();
        background.spawn_on(&runtime, async move {
            if let Err(e) = state.close(None, TaskStatus::Failed, Some(("interrupted".into(), message)), None).await {
                tracing::error!(%task, error = %e, "refund of a dropped call failed");
            }
        });
    }
}

/// How a call whose upstream answered ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Close {
    /// Charge `amount` (rounded once) and record `usage`.
    Charge {
        /// The charge.
        amount: UsdAmount,
        /// The usage, as JSON text.
        usage: Option<String>,
        /// Language tokens used (prompt + completion), counted against the key's `tpm`; 0 for
        /// other kinds.
        tokens: u64,
    },
    /// Nothing billable was produced: refund, and mark the task failed with `code` and `message`.
    Refund {
        /// Error code for the task.
        code: String,
        /// Error text for the task.
        message: String,
        /// The usage, as JSON text.
        usage: Option<String>,
    },
}

/// The answer of a synchronous call for the client, and how the call ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finished {
    /// The upstream answer, rewritten for the client (public model name).
    pub answer: crate::Answer,
    /// Settle or refund.
    pub close: Close,
}

impl Gateway {
    /// The upstream port, or 503 when none is configured.
    pub(crate) fn upstream(&self) -> Result<std::sync::Arc<dyn domain::ports::Upstream>, ServiceError> {
        self.ports
            .upstream
            .clone()
            .ok_or_else(|| ServiceError::ProviderNotConfigured("no upstream provider is configured".into()))
    }

    /// Opens the upstream stream of the open `call` over its candidates, in order (a failure before a
    /// stream's head refunds the call, 502): a failure before the stream's
    /// head moves on to the next where [`crate::fallback::moves_on`] allows. Returns the call, the
    /// index of the candidate that serves it, and its events.
    pub(crate) async fn open_stream_over(
        &self,
        upstream: &dyn domain::ports::Upstream,
        mut call: OpenCall,
        endpoint: domain::ports::Endpoint,
        attempts: Vec<Attempt>,
    ) -> Result<(OpenCall, usize, Box<dyn domain::ports::EventStream>), ServiceError> {
        let last = attempts.len().saturating_sub(1);
        for (index, attempt) in attempts.into_iter().enumerate() {
            if let Some(serve) = attempt.serve {
                call.serve_with(serve.def, &serve.pricing);
            }
            let started = std::time::Instant::now();
            let to = domain::ports::UpstreamCall { endpoint, model: call.upstream_model() };
            let attempted = upstream.stream(to, attempt.body).await;
            call.routed(attempted.via);
            self.metrics.upstream(call.model(), started.elapsed(), attempted.result.as_ref().err());
            match attempted.result {
                Ok(events) => return Ok((call, index, events)),
                Err(e) if index < last && crate::fallback::moves_on(&e) => {
                    tracing::info!(task = %call.task_id(), model = call.model(), error = %e, "moving on to the next model");
                }
                Err(e) => return Err(call.fail(&e).await),
            }
        }
        Err(call.fail(&UpstreamError::NotConfigured("a call without a model".into())).await)
    }

    /// Sends `body` to `endpoint` for the open `call` and closes the call with what `finish` makes of
    /// the 2xx answer: an upstream failure, or an answer `finish` refuses, refunds the call (502).
    pub(crate) async fn run_sync(
        &self,
        upstream: &dyn domain::ports::Upstream,
        call: OpenCall,
        endpoint: domain::ports::Endpoint,
        body: Vec<u8>,
        finish: impl FnOnce(Vec<u8>) -> Result<Finished, UpstreamError>,
    ) -> Result<CallReply, ServiceError> {
        let attempts = vec![Attempt { serve: None, body }];
        self.run_sync_over(upstream, call, endpoint, attempts, |_, bytes| finish(bytes)).await
    }

    /// [`Gateway::run_sync`] over a call's candidates, in order: a failure before an answer moves
    /// on to the next where [`crate::fallback::moves_on`] allows; `finish` gets the index of the
    /// candidate that answered.
    pub(crate) async fn run_sync_over(
        &self,
        upstream: &dyn domain::ports::Upstream,
        mut call: OpenCall,
        endpoint: domain::ports::Endpoint,
        attempts: Vec<Attempt>,
        finish: impl FnOnce(usize, Vec<u8>) -> Result<Finished, UpstreamError>,
    ) -> Result<CallReply, ServiceError> {
        let last = attempts.len().saturating_sub(1);
        let mut answer = Err(UpstreamError::NotConfigured("a call without a model".into()));
        let mut served = 0;
        for (index, attempt) in attempts.into_iter().enumerate() {
            if let Some(serve) = attempt.serve {
                call.serve_with(serve.def, &serve.pricing);
            }
            let started = std::time::Instant::now();
            let to = domain::ports::UpstreamCall { endpoint, model: call.upstream_model() };
            let attempted = upstream.complete(to, attempt.body).await;
            call.routed(attempted.via);
            self.metrics.upstream(call.model(), started.elapsed(), attempted.result.as_ref().err());
            served = index;
            answer = attempted.result;
            match &answer {
                Err(e) if index < last && crate::fallback::moves_on(e) => {
                    tracing::info!(task = %call.task_id(), model = call.model(), error = %e, "moving on to the next model");
                }
                _ => break,
            }
        }
        // The ends are boxed: each is large and runs once, at the end, so the call's future (which
        // its task carries from the start) does not keep room for them.
        let finished = match answer.and_then(|bytes| finish(served, bytes)) {
            Ok(finished) => finished,
            Err(e) => return Err(Box::pin(call.fail(&e)).await),
        };
        let billing = match finished.close {
            Close::Charge { amount, usage, tokens } => Box::pin(call.settle(amount, usage, tokens)).await?,
            Close::Refund { code, message, usage } => Box::pin(call.refund(&code, message, usage)).await?,
        };
        Ok(CallReply::Complete { answer: finished.answer, call: billing })
    }
}

impl Gateway {
    /// Ends synchronous calls (chat, image, audio) left running by a crash or restart: each one
    /// whose task has not changed for `max_age` is refunded and marked `failed` with code
    /// `interrupted`. A call still in flight elsewhere is never that old, because upstream calls
    /// time out first; pass at least the upstream timeout. Returns how many were ended.
    pub async fn recover_interrupted_calls(&self, max_age: std::time::Duration) -> Result<u64, ServiceError> {
        let age = domain::duration_millis(max_age);
        let before = domain::Timestamp(self.ports.clock.now().millis().saturating_sub(age));
        let kinds = [ModelKind::Language, ModelKind::Image, ModelKind::Audio];
        let stale = self.ports.tasks.stale_tasks(&kinds, before, 500).await?;
        Ok(self.end_interrupted(stale).await)
    }

    /// Renews this replica's liveness lease for `ttl`: while it lasts, other replicas leave the
    /// calls it runs alone.
    pub async fn keep_alive(&self, ttl: std::time::Duration) -> Result<(), ServiceError> {
        let now = self.ports.clock.now();
        let until = domain::Timestamp(now.millis().saturating_add(domain::duration_millis(ttl)));
        self.ports.caps.heartbeat(self.replica_id(), now, until).await?;
        if let Some(health) = &self.ports.upstream_health {
            let endpoints = serde_json::to_string(&health.endpoints())
                .map_err(|e| ServiceError::Internal(format!("upstream health: {e}")))?;
            self.ports.caps.report_upstream_health(self.replica_id(), &endpoints).await?;
        }
        Ok(())
    }

    /// What every live replica last reported of its upstream endpoints, for operators
    /// (`gateway admin upstream list`): (replica, lease end, endpoints).
    pub async fn upstream_reports(
        &self,
    ) -> Result<Vec<(String, domain::Timestamp, Vec<domain::ports::EndpointHealth>)>, ServiceError> {
        let now = self.ports.clock.now();
        let rows = self.ports.caps.replica_reports(now).await?;
        rows.into_iter()
            .map(|(replica, until, json)| {
                let endpoints = match json {
                    Some(json) => serde_json::from_str(&json)
                        .map_err(|e| ServiceError::Internal(format!("the upstream report of {replica}: {e}")))?,
                    None => Vec::new(),
                };
                Ok((replica, until, endpoints))
            })
            .collect()
    }

    /// Ends this replica's liveness lease (a clean stop, after its last call ended).
    pub async fn retire(&self) -> Result<(), ServiceError> {
        self.ports.caps.retire(self.replica_id()).await?;
        Ok(())
    }

    /// Refunds synchronous calls whose replica died: each running call whose runner holds no
    /// liveness lease and that has not changed for `ttl` (the lease time) is refunded and marked
    /// `failed` with code `interrupted`. This replica renews its own lease first, so its own calls
    /// are never among them. Returns how many were ended.
    pub async fn recover_orphaned_calls(&self, ttl: std::time::Duration) -> Result<u64, ServiceError> {
        // The replica that sweeps is alive: it renews its own lease first, so that a renewal that
        // load delayed past the lease can never make it refund its own running calls (they end
        // by themselves, and their answers would then fail). A sweep that cannot renew does not run.
        self.keep_alive(ttl).await?;
        let now = self.ports.clock.now();
        let age = domain::duration_millis(ttl);
        let before = domain::Timestamp(now.millis().saturating_sub(age));
        let orphans = self.ports.caps.orphaned_calls(now, before, 500).await?;
        Ok(self.end_interrupted(orphans).await)
    }

    /// Refunds each of `ids` (a call nobody will end) and marks it `failed` / `interrupted`;
    /// how many were ended here.
    async fn end_interrupted(&self, ids: Vec<TaskId>) -> u64 {
        let mut ended = 0;
        for id in ids {
            match self.ports.ledger.refund(&id).await {
                Ok(refund) => {
                    // Counted like any refunded call (the model is on the task).
                    if let Ok(Some(task)) = self.ports.tasks.task(&refund.user_id, &id).await {
                        self.metrics.call_ended(&id, &task.model, refund.status, refund.actual, refund.reserved);
                    }
                }
                Err(billing::LedgerError::AlreadyFinished { .. } | billing::LedgerError::UnknownReservation(_)) => {}
                Err(e) => {
                    tracing::error!(task = %id, error = %e, "refund of an interrupted call failed");
                    continue;
                }
            }
            let outcome = TaskOutcome {
                status: TaskStatus::Failed,
                usage_json: None,
                error_code: Some("interrupted".into()),
                error_message: Some(
                    "the gateway stopped before the call finished; the reservation was refunded".into(),
                ),
                via: None,
                served_by: None,
            };
            if self.ports.tasks.finish_task(&id, outcome).await.is_ok() {
                ended += 1;
            }
        }
        ended
    }
}

#[cfg(test)]
mod tests;
