//! `POST /api/v1/chat/completions`: validate, reserve the worst case, call upstream, settle at
//! actual usage or refund, and record the call as a `language` task.
//!
//! Streaming keeps the same money rule: the stream is pumped by a task of its own that settles
//! when the upstream ends, fails, or the client goes away. Without a usage report it settles on an
//! estimate: prompt tokens = ⌈prompt bound / 4⌉, completion tokens = ⌈bytes of text delivered / 4⌉
//! (text = `content` and `reasoning_content` deltas). Nothing delivered and no usage: refund.

use std::sync::Arc;

use billing::LanguageUsage;
use catalog::ModelDef;
use domain::ports::{ChatUpstream, EventStream, TaskOutcome, UpstreamError};
use domain::{BillingStatus, ModelKind, PricingVersion, Task, TaskBilling, TaskId, TaskStatus, UsdAmount, UserId};
use serde_json::{Map, Value, json};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::{Gateway, Principal, ServiceError};

/// The billing object of a finished or running call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallBilling {
    /// The task the call is recorded as.
    pub task_id: TaskId,
    /// Its billing.
    pub billing: TaskBilling,
}

/// One item of a chat stream, for the edge to frame as server-sent events.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A chunk object (already rewritten to the public model name).
    Chunk(Value),
    /// An error object `{"error":{code,message}}`; the stream ends after it.
    Error(Value),
    /// The end: `[DONE]`.
    Done,
}

/// What a chat call returns.
#[derive(Debug)]
pub enum ChatReply {
    /// The upstream answer (model renamed to the public name) and the call's billing.
    Complete {
        /// The answer object.
        answer: Value,
        /// Task id and billing, for the `svc` object.
        call: CallBilling,
    },
    /// A stream of items; settlement happens when it ends, whatever the client does.
    Stream {
        /// The task id, for the `X-Svc-Task-Id` header.
        task_id: TaskId,
        /// Items in order.
        items: mpsc::Receiver<StreamItem>,
        /// Whether the call was charged, once the stream has ended.
        billed: oneshot::Receiver<bool>,
    },
}

/// A validated, reserved call about to go upstream.
struct Prepared {
    task_id: TaskId,
    user_id: UserId,
    public_model: String,
    pricing: PricingVersion,
    estimate: UsdAmount,
    body: Vec<u8>,
    prompt_bound: u64,
}

/// A stream whose client accepts no chunk for this long is treated as abandoned and settled.
pub const CLIENT_STALL_LIMIT: Duration = Duration::from_secs(60);

/// How often a running stream touches its task, so that the recovery sweep leaves it alone.
/// The sweep's age limit must exceed the upstream read timeout plus this plus the stall limit.
pub const STREAM_HEARTBEAT: Duration = Duration::from_secs(30);

/// The LangB-2.0 series ignores user sampling: temperature 1 and top_p 0.95 are sent.
fn enforces_sampling(def: &ModelDef) -> bool {
    def.limits.pointer("/sampling/temperature/enforced").is_some_and(|v| !v.is_null())
}

/// The upstream request body: upstream model id, enforced sampling, usage in streams.
fn upstream_body(def: &ModelDef, mut body: Map<String, Value>, stream: bool) -> Result<Vec<u8>, ServiceError> {
    body.insert("model".into(), Value::String(def.upstream.model_id.clone()));
    if enforces_sampling(def) {
        let enforced =
            |path: &str, default: Value| def.limits.pointer(path).filter(|v| !v.is_null()).cloned().unwrap_or(default);
        let t = enforced("/sampling/temperature/enforced", json!(1));
        let p = enforced("/sampling/top_p/enforced", json!(0.95));
        body.insert("temperature".into(), t);
        body.insert("top_p".into(), p);
    }
    if stream {
        let options = body.entry("stream_options").or_insert_with(|| json!({}));
        if let Value::Object(o) = options {
            o.insert("include_usage".into(), Value::Bool(true));
        } else {
            *options = json!({"include_usage": true});
        }
    }
    serde_json::to_vec(&Value::Object(body)).map_err(|e| ServiceError::Internal(e.to_string()))
}

/// Usage from an upstream `usage` object; `None` when it is missing or not an object.
fn usage_of(value: &Value) -> Option<LanguageUsage> {
    let usage = value.get("usage").filter(|u| u.is_object())?;
    let n = |path: &str| usage.pointer(path).and_then(Value::as_u64).unwrap_or(0);
    Some(LanguageUsage {
        prompt_tokens: usage.get("prompt_tokens").and_then(Value::as_u64)?,
        completion_tokens: usage.get("completion_tokens").and_then(Value::as_u64)?,
        cached_tokens: n("/prompt_tokens_details/cached_tokens"),
        audio_tokens: n("/prompt_tokens_details/audio_tokens"),
        audio_cached_tokens: n("/prompt_tokens_details/audio_cached_tokens"),
    })
}

/// The client-facing message for an upstream failure.
fn upstream_message(e: &UpstreamError) -> String {
    let retry = if e.retryable() { "a retry may succeed" } else { "retrying the same request will not help" };
    format!("the upstream call failed ({e}); the reservation was refunded; {retry}")
}

impl Gateway {
    /// Runs a chat completion for `who` with the raw JSON `body`.
    pub async fn chat(&self, who: &Principal, body: &[u8]) -> Result<ChatReply, ServiceError> {
        let upstream = self
            .ports
            .chat
            .clone()
            .ok_or_else(|| ServiceError::ProviderNotConfigured("no chat upstream is configured".into()))?;
        let body: Value = serde_json::from_slice(body)
            .map_err(|e| ServiceError::InvalidRequest(format!("the body is not valid JSON: {e}")))?;
        let Value::Object(body) = body else {
            return Err(ServiceError::InvalidRequest("the body must be a JSON object".into()));
        };
        let (def, pricing) = self.language_model(&body).await?;
        let plan = validation::chat_request(&def, &body)?;
        let estimate = if plan.has_audio {
            billing::language_reservation(&pricing.sheet, plan.prompt_bound_tokens, plan.max_output_tokens)
        } else {
            billing::language_reservation_text_only(&pricing.sheet, plan.prompt_bound_tokens, plan.max_output_tokens)
        }
        .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", def.name)))?;
        let prepared = Prepared {
            task_id: TaskId(self.ports.ids.new_id("task_")),
            user_id: who.user_id.clone(),
            public_model: def.name.clone(),
            body: upstream_body(&def, body, plan.stream)?,
            pricing,
            estimate,
            prompt_bound: plan.prompt_bound_tokens,
        };
        self.reserve_and_record(&prepared, &def).await?;
        if plan.stream {
            self.chat_stream(upstream, prepared).await
        } else {
            self.chat_complete(upstream.as_ref(), prepared).await
        }
    }

    /// The enabled, priced language model named by `body.model`, and its active price.
    async fn language_model(&self, body: &Map<String, Value>) -> Result<(ModelDef, PricingVersion), ServiceError> {
        let name = body
            .get("model")
            .and_then(Value::as_str)
            .ok_or_else(|| ServiceError::InvalidRequest("model is required and must be a string".into()))?;
        let snapshot = self.catalog_snapshot().await?;
        let view =
            snapshot.models.iter().find(|m| m.record.name == name && m.record.kind == ModelKind::Language).ok_or_else(
                || ServiceError::InvalidRequest(format!("model {name:?} is not an available language model")),
            )?;
        if snapshot.maintenance {
            return Err(ServiceError::ProviderNotConfigured("the gateway is in maintenance mode".into()));
        }
        let pricing = view
            .record
            .pricing
            .clone()
            .ok_or_else(|| ServiceError::ProviderNotConfigured(format!("model {name} has no price configured")))?;
        Ok((view.def.clone(), pricing))
    }

    async fn reserve_and_record(&self, p: &Prepared, def: &ModelDef) -> Result<(), ServiceError> {
        let now = self.ports.clock.now();
        let task = Task {
            id: p.task_id.clone(),
            user_id: p.user_id.clone(),
            model: p.public_model.clone(),
            kind: ModelKind::Language,
            status: TaskStatus::Processing,
            prompt: None,
            provider: def.upstream.provider.clone(),
            input_mode: Some("text".into()),
            media_type: None,
            media_url: None,
            duration: None,
            resolution: None,
            ratio: None,
            generate_audio: None,
            billing: TaskBilling {
                status: BillingStatus::Reserved,
                pricing_version_id: Some(p.pricing.id()),
                estimated: p.estimate,
                actual: None,
                balance_after: None,
                usage_json: None,
            },
            output_url: None,
            last_frame_url: None,
            error_code: None,
            error_message: None,
            webhook_url: None,
            created_at: now,
            updated_at: now,
            completed_at: None,
        };
        self.ports.calls.open_call(task, p.estimate).await?;
        Ok(())
    }

    async fn chat_complete(&self, upstream: &dyn ChatUpstream, p: Prepared) -> Result<ChatReply, ServiceError> {
        let answer = match upstream.complete(p.body.clone()).await {
            Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                .ok()
                .filter(|v| v.is_object())
                .ok_or_else(|| UpstreamError::Malformed("the answer is not a JSON object".into())),
            Err(e) => Err(e),
        };
        let answer = answer.and_then(|a| match usage_of(&a) {
            Some(usage) => Ok((a, usage)),
            None => Err(UpstreamError::Malformed("the answer carries no usage".into())),
        });
        let (mut answer, usage) = match answer {
            Ok(ok) => ok,
            Err(e) => return Err(self.fail_call(&p, &e).await),
        };
        let billing = self.settle_usage(&p, &usage, answer.get("usage").cloned()).await?;
        if let Value::Object(o) = &mut answer {
            o.insert("model".into(), Value::String(p.public_model.clone()));
        }
        Ok(ChatReply::Complete { answer, call: CallBilling { task_id: p.task_id, billing } })
    }

    /// Refunds the hold, marks the task failed, and returns the 502 error.
    async fn fail_call(&self, p: &Prepared, e: &UpstreamError) -> ServiceError {
        tracing::warn!(task = %p.task_id, error = %e, "upstream call failed");
        let outcome = TaskOutcome {
            status: TaskStatus::Failed,
            usage_json: None,
            error_code: Some("upstream_request_failed".into()),
            error_message: Some(e.to_string()),
        };
        if let Err(refund) = self.ports.calls.close_call(&p.task_id, &p.user_id, p.estimate, None, outcome).await {
            tracing::error!(task = %p.task_id, error = %refund, "refund failed");
        }
        ServiceError::Upstream { message: upstream_message(e), retryable: e.retryable() }
    }

    /// Charges `usage` at the call's price version and marks the task succeeded.
    async fn settle_usage(
        &self,
        p: &Prepared,
        usage: &LanguageUsage,
        usage_json: Option<Value>,
    ) -> Result<TaskBilling, ServiceError> {
        let charge = billing::language_charge(&p.pricing.sheet, usage)
            .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", p.public_model)))?;
        let usage_text = usage_json.map(|u| u.to_string());
        let outcome = TaskOutcome {
            status: TaskStatus::Succeeded,
            usage_json: usage_text.clone(),
            error_code: None,
            error_message: None,
        };
        let settled =
            self.ports.calls.close_call(&p.task_id, &p.user_id, p.estimate, Some(charge.total), outcome).await?;
        Ok(TaskBilling {
            status: BillingStatus::Settled,
            pricing_version_id: Some(p.pricing.id()),
            estimated: p.estimate,
            actual: Some(settled.actual),
            balance_after: Some(settled.balance_after),
            usage_json: usage_text,
        })
    }

    async fn chat_stream(&self, upstream: Arc<dyn ChatUpstream>, p: Prepared) -> Result<ChatReply, ServiceError> {
        let events = match upstream.stream(p.body.clone()).await {
            Ok(events) => events,
            Err(e) => return Err(self.fail_call(&p, &e).await),
        };
        let (tx, rx) = mpsc::channel(32);
        let (billed_tx, billed) = oneshot::channel();
        let task_id = p.task_id.clone();
        let gateway = self.clone();
        tokio::spawn(async move { gateway.pump(events, p, tx, billed_tx).await });
        Ok(ChatReply::Stream { task_id, items: rx, billed })
    }

    /// Forwards upstream events to the client and settles when the stream ends for any reason:
    /// upstream end, upstream failure, the client leaving, or the client not reading for
    /// [`CLIENT_STALL_LIMIT`]. While it runs it touches the task every [`STREAM_HEARTBEAT`], so that
    /// the recovery sweep never takes a live stream for an abandoned one. `billed` learns whether
    /// anything was charged.
    async fn pump(
        &self,
        mut events: Box<dyn EventStream>,
        p: Prepared,
        tx: mpsc::Sender<StreamItem>,
        billed: oneshot::Sender<bool>,
    ) {
        let mut usage: Option<(LanguageUsage, Value)> = None;
        let mut delivered_bytes: u64 = 0;
        let mut failure: Option<UpstreamError> = None;
        let mut client_gone = false;
        let mut last_beat = Instant::now();
        while let Some(event) = events.next_event().await {
            let mut chunk: Value = match event.and_then(|bytes| {
                serde_json::from_slice(&bytes).map_err(|e| UpstreamError::Malformed(format!("stream chunk: {e}")))
            }) {
                Ok(chunk) => chunk,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            if let Some(u) = usage_of(&chunk) {
                usage = Some((u, chunk.get("usage").cloned().unwrap_or(Value::Null)));
            }
            delivered_bytes += delta_text_bytes(&chunk);
            if let Value::Object(o) = &mut chunk {
                o.insert("model".into(), Value::String(p.public_model.clone()));
            }
            match tokio::time::timeout(CLIENT_STALL_LIMIT, tx.send(StreamItem::Chunk(chunk))).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    client_gone = true;
                    break;
                }
            }
            if last_beat.elapsed() >= STREAM_HEARTBEAT {
                last_beat = Instant::now();
                if let Err(e) = self.ports.tasks.touch_task(&p.task_id, self.ports.clock.now()).await {
                    tracing::warn!(task = %p.task_id, error = %e, "stream heartbeat failed");
                }
            }
        }
        drop(events); // Stop reading upstream as soon as the client is gone.
        let usage = usage.map(|(u, json)| (u, Some(json))).or_else(|| {
            (delivered_bytes > 0).then(|| {
                let estimate = LanguageUsage {
                    prompt_tokens: p.prompt_bound.div_ceil(4),
                    completion_tokens: delivered_bytes.div_ceil(4),
                    ..LanguageUsage::default()
                };
                let json = json!({"prompt_tokens": estimate.prompt_tokens, "completion_tokens": estimate.completion_tokens,
                    "total_tokens": estimate.prompt_tokens + estimate.completion_tokens, "estimated": true});
                (estimate, Some(json))
            })
        });
        let charged = match (&failure, usage) {
            (_, Some((u, json))) => match self.settle_usage(&p, &u, json).await {
                Ok(_) => true,
                Err(e) => {
                    tracing::error!(task = %p.task_id, error = %e, "stream settlement failed");
                    false
                }
            },
            (Some(e), None) => {
                let _refunded = self.fail_call(&p, e).await;
                false
            }
            (None, None) => {
                let no_output = UpstreamError::Stream("the stream ended with no output".into());
                let _refunded = self.fail_call(&p, &no_output).await;
                false
            }
        };
        let _ = billed.send(charged);
        if client_gone {
            return;
        }
        let last = match failure {
            Some(e) if charged => StreamItem::Error(json!({"error": {"code": "upstream_request_failed",
                "message": format!("the upstream stream failed ({e}); only the output delivered was charged")}})),
            Some(e) => StreamItem::Error(
                json!({"error": {"code": "upstream_request_failed", "message": upstream_message(&e)}}),
            ),
            None => StreamItem::Done,
        };
        let _ = tx.send(last).await;
    }
}

impl Gateway {
    /// Ends synchronous calls (chat, image, audio) left running by a crash or restart: each one
    /// whose task has not changed for `max_age` is refunded and marked `failed` with code
    /// `interrupted`. A call still in flight elsewhere is never that old, because upstream calls
    /// time out first; pass at least the upstream timeout. Returns how many were ended.
    pub async fn recover_interrupted_calls(&self, max_age: std::time::Duration) -> Result<u64, ServiceError> {
        let age = i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX);
        let before = domain::Timestamp(self.ports.clock.now().millis().saturating_sub(age));
        let kinds = [ModelKind::Language, ModelKind::Image, ModelKind::Audio];
        let stale = self.ports.tasks.stale_tasks(&kinds, before, 500).await?;
        let mut ended = 0;
        for id in stale {
            match self.ports.ledger.refund(&id).await {
                Ok(_)
                | Err(billing::LedgerError::AlreadyFinished { .. } | billing::LedgerError::UnknownReservation(_)) => {}
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
            };
            if self.ports.tasks.finish_task(&id, outcome).await.is_ok() {
                ended += 1;
            }
        }
        Ok(ended)
    }
}

/// Bytes of generated text in a chunk's deltas.
fn delta_text_bytes(chunk: &Value) -> u64 {
    let Some(choices) = chunk.get("choices").and_then(Value::as_array) else { return 0 };
    choices
        .iter()
        .filter_map(|c| c.get("delta"))
        .flat_map(|d| ["content", "reasoning_content"].map(|k| d.get(k).and_then(Value::as_str).map_or(0, str::len)))
        .map(|n| n as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str) -> ModelDef {
        catalog::Catalog::builtin().expect("catalog").get(name).cloned().expect("model")
    }

    fn body(json: Value) -> Map<String, Value> {
        match json {
            Value::Object(o) => o,
            _ => Map::new(),
        }
    }

    fn sent(name: &str, json: Value, stream: bool) -> Value {
        let bytes = upstream_body(&def(name), body(json), stream).expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }

    #[test]
    fn langb_2_0_sampling_is_enforced_and_the_model_mapped() {
        let out =
            sent("LangB-2.0-pro", json!({"model": "LangB-2.0-pro", "temperature": 0.2, "top_p": 0.5, "x": 1}), false);
        assert_eq!(out["temperature"], json!(1));
        assert_eq!(out["top_p"], json!(0.95));
        assert_eq!(out["model"], json!(def("LangB-2.0-pro").upstream.model_id));
        assert_eq!(out["x"], json!(1), "unknown parameters pass through");
        assert!(out.get("stream_options").is_none());
    }

    #[test]
    fn other_models_keep_user_sampling() {
        let out = sent("LangB-2.1-turbo", json!({"temperature": 0.2, "top_p": 0.5}), false);
        assert_eq!((out["temperature"].clone(), out["top_p"].clone()), (json!(0.2), json!(0.5)));
        let out = sent("LangA-V4-flash", json!({"temperature": 0.7}), false);
        assert_eq!(out["temperature"], json!(0.7));
    }

    #[test]
    fn streams_always_ask_for_usage() {
        let out =
            sent("LangA-V4-flash", json!({"stream": true, "stream_options": {"include_usage": false, "k": 1}}), true);
        assert_eq!(out["stream_options"], json!({"include_usage": true, "k": 1}));
        let out = sent("LangA-V4-flash", json!({"stream": true, "stream_options": null}), true);
        assert_eq!(out["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn usage_and_delta_parsing() {
        let answer = json!({"usage": {"prompt_tokens": 10, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 2, "audio_cached_tokens": 1}}});
        let u = usage_of(&answer).expect("usage");
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.audio_tokens, u.audio_cached_tokens),
            (10, 5, 4, 2, 1)
        );
        assert!(usage_of(&json!({"usage": null})).is_none());
        assert!(usage_of(&json!({"usage": {"prompt_tokens": 1}})).is_none());
        let chunk = json!({"choices": [{"delta": {"content": "héllo", "reasoning_content": "ab"}}]});
        assert_eq!(delta_text_bytes(&chunk), 8);
        assert_eq!(delta_text_bytes(&json!({"choices": []})), 0);
    }
}
