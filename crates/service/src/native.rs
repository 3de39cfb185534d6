//! The native chat formats, `/v1/messages` (message-style) and `/v1/responses` (response-style): the body
//! passes through to the platform's native endpoint with the model mapped to its upstream id and back,
//! and the call is billed like chat, from each format's own usage fields (see `docs/ARCHITECTURE.md`,
//! "Native formats"):
//!
//! | rate input | message-style | response-style |
//! | --- | --- | --- |
//! | prompt tokens (tier) | `input_tokens + cache_read_input_tokens + cache_creation_input_tokens` | `input_tokens` (or `prompt_tokens`) |
//! | cached (`cache_hit_tokens`) | `cache_read_input_tokens` | `input_tokens_details.cached_tokens` |
//! | output (`output_tokens`) | `output_tokens` (cumulative in `message_delta`) | `output_tokens` (or `completion_tokens`) |
//!
//! Cache-creation tokens are input the model read, so they are charged at the input rate. A stream
//! without a final usage report settles on what is known: the reported prompt (else ⌈prompt bound / 4⌉)
//! and ⌈bytes of text delivered / 4⌉ output tokens; nothing delivered is refunded.
//!
//! The hold is the prompt bound plus the output cap, which bounds reasoning too by each format's
//! documented rule (message-style `max_tokens` includes thinking; response-style
//! `max_output_tokens` counts reasoning); a response-style body without `max_output_tokens` is
//! sent the cap it was held for. See `docs/ARCHITECTURE.md`, "Holds of language calls".
//!
//! Response ids returned to a user are recorded (before the client sees them), and a
//! `previous_response_id` that is not one of the caller's own is 404 before anything is reserved.

use std::sync::Arc;

use billing::LanguageUsage;
use domain::ports::{Endpoint, ResponseOwners, SseEvent, UpstreamError};
use domain::{PriceSheet, TaskId, UsdAmount, UserId};
use serde_json::{Value, json};
use validation::RawBody;

use crate::answer::object_member;
use crate::call::{Attempt, CallSpec, Close, Finished, TaskDetails};
use crate::chat::{cpu_bound, language_charge};
use crate::rates::RateClaim;
use crate::reply::CallReply;
use crate::reply::StreamItem;
use crate::stream::StreamMeter;
use crate::{Answer, Gateway, Principal, ServiceError};

/// Which native format a call speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Messages,
    Responses,
}

impl Format {
    fn endpoint(self) -> Endpoint {
        match self {
            Format::Messages => Endpoint::Messages,
            Format::Responses => Endpoint::Responses,
        }
    }

    /// Language usage from this format's `usage` object.
    fn usage(self, usage: &Value) -> Option<LanguageUsage> {
        let n = |path: &str| usage.pointer(path).and_then(Value::as_u64);
        match self {
            Format::Messages => {
                let read = n("/cache_read_input_tokens").unwrap_or(0);
                let created = n("/cache_creation_input_tokens").unwrap_or(0);
                Some(LanguageUsage {
                    prompt_tokens: n("/input_tokens")?.saturating_add(read).saturating_add(created),
                    cached_tokens: read,
                    completion_tokens: n("/output_tokens")?,
                    ..LanguageUsage::default()
                })
            }
            Format::Responses => Some(LanguageUsage {
                prompt_tokens: n("/input_tokens").or_else(|| n("/prompt_tokens"))?,
                completion_tokens: n("/output_tokens").or_else(|| n("/completion_tokens"))?,
                cached_tokens: n("/input_tokens_details/cached_tokens")
                    .or_else(|| n("/prompt_tokens_details/cached_tokens"))
                    .unwrap_or(0),
                audio_tokens: n("/input_tokens_details/audio_tokens")
                    .or_else(|| n("/prompt_tokens_details/audio_tokens"))
                    .unwrap_or(0),
                audio_cached_tokens: 0,
            }),
        }
    }
}

impl Gateway {
    /// Runs a message-style call (`POST /v1/messages`) for `who` with the raw JSON `body`.
    pub async fn messages(&self, who: &Principal, body: &[u8]) -> Result<CallReply, ServiceError> {
        self.native(who, body, Format::Messages).await
    }

    /// Runs a response-style call (`POST /v1/responses`) for `who` with the raw JSON `body`.
    pub async fn responses(&self, who: &Principal, body: &[u8]) -> Result<CallReply, ServiceError> {
        self.native(who, body, Format::Responses).await
    }

    /// `POST /v1/messages/count_tokens`: the prompt tokens of a message-style body for `who`,
    /// estimated (see [`validation::count_tokens_estimate`]); the model must be one `who` may call.
    /// Nothing is held or billed.
    pub async fn count_message_tokens(&self, who: &Principal, raw: &[u8]) -> Result<u64, ServiceError> {
        let body = cpu_bound(raw.len(), || RawBody::parse_body(raw))?;
        self.candidates(who, &body).await?;
        Ok(cpu_bound(raw.len(), || validation::count_tokens_estimate(&body))?)
    }

    async fn native(&self, who: &Principal, raw: &[u8], format: Format) -> Result<CallReply, ServiceError> {
        let upstream = self.upstream()?;
        // The body is checked as JSON and kept as raw members: no tree is built (issue 19 §2).
        let body = cpu_bound(raw.len(), || RawBody::parse_body(raw))?;
        let named = crate::fallback::with_first_model(&body);
        let body = match &named {
            Some(named) => RawBody::parse_body(named)?,
            None => body,
        };
        let (candidates, requested) = self.candidates(who, &body).await?;
        let mut checked = Vec::with_capacity(candidates.len());
        for priced in candidates {
            let def = &priced.def;
            let plan = cpu_bound(raw.len(), || match format {
                Format::Messages => validation::messages_request(def, &body, raw.len()),
                Format::Responses => validation::responses_request(def, &body, raw.len()),
            })?;
            let estimate =
                billing::language_reservation(&priced.pricing.sheet, plan.prompt_bound_tokens, plan.max_output_tokens)
                    .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", def.name)))?;
            let model =
                serde_json::to_string(&def.upstream.model_id).map_err(|e| ServiceError::Internal(e.to_string()))?;
            let cap = plan.max_output_tokens.to_string();
            // A list of models is the gateway's to try: the upstream is asked for one.
            let mut replace = vec![("model", Some(model.as_str())), ("models", None)];
            if format == Format::Responses && body.get("max_output_tokens").is_none() {
                // The cap the hold is computed from goes upstream, so that the upstream's own default
                // never exceeds it (max_output_tokens counts reasoning and answer).
                replace.push(("max_output_tokens", Some(cap.as_str())));
            }
            let upstream_body = cpu_bound(raw.len(), || body.write(&replace));
            checked.push((priced, plan, upstream_body, estimate));
        }
        drop(body);
        let Some((first, first_plan, _, _)) = checked.first() else {
            return Err(ServiceError::Internal("a call without a model".into()));
        };
        if let Some(previous) = &first_plan.previous_response_id {
            let owner = self.ports.responses.response_owner(previous).await?;
            if owner.as_ref() != Some(&who.user_id) {
                return Err(ServiceError::NotFound(format!("response {previous}")));
            }
        }
        let hold = format!(
            "this call (at most {} prompt tokens and {} output tokens, reasoning included, at {}'s rates)",
            first_plan.prompt_bound_tokens, first_plan.max_output_tokens, first.def.name
        );
        let (stream, def, pricing) = (first_plan.stream, first.def.clone(), first.pricing.clone());
        let estimate = checked.iter().map(|c| c.3).max().unwrap_or(UsdAmount::ZERO);
        let tokens = checked.iter().map(|c| c.1.prompt_bound_tokens.saturating_add(c.1.max_output_tokens)).max();
        let details = TaskDetails { input_mode: Some(domain::InputMode::Text), requested, ..TaskDetails::default() };
        let spec = CallSpec {
            user: who.user_id.clone(),
            key: who.key_id.clone(),
            budget_keys: who.budget_keys.clone(),
            def,
            pricing,
            estimate,
            rate: RateClaim::language(who, tokens.unwrap_or(0)),
            details,
            max_cost: who.max_cost,
        };
        // Boxed steps, as in `chat`: the call's own future stays small.
        let call = Box::pin(self.open_call(spec)).await.map_err(|e| e.for_hold(hold))?;
        let mut meters = Vec::with_capacity(checked.len());
        let mut attempts = Vec::with_capacity(checked.len());
        for (index, (priced, plan, upstream_body, _)) in checked.into_iter().enumerate() {
            let sheet = priced.pricing.sheet.clone();
            meters.push(NativeMeter::new(
                format,
                &priced.def.name,
                sheet,
                plan.prompt_bound_tokens,
                plan.max_output_tokens,
            ));
            attempts.push(Attempt { serve: (index > 0).then_some(priced), body: upstream_body });
        }
        if stream {
            let (call, index, events) =
                Box::pin(self.open_stream_over(upstream.as_ref(), call, format.endpoint(), attempts)).await?;
            let owners = Recorder {
                owners: Arc::clone(&self.ports.responses),
                user: who.user_id.clone(),
                task: call.task_id().clone(),
            };
            let meter =
                NativeMeter { recorder: (format == Format::Responses).then_some(owners), ..meters.swap_remove(index) };
            return Ok(CallReply::Stream(self.start_stream(call, events, meter)));
        }
        let task = call.task_id().clone();
        let reply =
            Box::pin(self.run_sync_over(upstream.as_ref(), call, format.endpoint(), attempts, |index, bytes| {
                meters.swap_remove(index).finish(bytes)
            }))
            .await?;
        if let (Format::Responses, CallReply::Complete { answer, .. }) = (format, &reply)
            && let Some(Value::String(id)) = answer.member("id")
            && let Err(e) = self.ports.responses.record_response(&id, &who.user_id, &task).await
        {
            tracing::error!(%task, error = %e, "recording a response id failed; it cannot be continued");
        }
        Ok(reply)
    }
}

/// Records the response ids a response-style stream returns, before the client sees them.
struct Recorder {
    owners: Arc<dyn ResponseOwners>,
    user: UserId,
    task: TaskId,
}

/// What a native call produced: the usage reported so far and the text delivered.
struct NativeMeter {
    format: Format,
    public_model: String,
    sheet: PriceSheet,
    prompt_bound: u64,
    /// The output the call's hold covers: an estimate from the text delivered never passes it.
    output_cap: u64,
    /// The latest usage object seen (cumulative in both formats).
    usage: Option<Value>,
    /// Whether the final usage (message_delta / response.completed) was seen.
    final_usage: bool,
    delivered_bytes: u64,
    complete: bool,
    recorder: Option<Recorder>,
}

impl NativeMeter {
    fn new(format: Format, public_model: &str, sheet: PriceSheet, prompt_bound: u64, output_cap: u64) -> NativeMeter {
        NativeMeter {
            format,
            public_model: public_model.to_owned(),
            sheet,
            prompt_bound,
            output_cap,
            usage: None,
            final_usage: false,
            delivered_bytes: 0,
            complete: false,
            recorder: None,
        }
    }

    /// A non-streaming answer: the public model name and the charge for its usage.
    ///
    /// The answer passes through as its bytes (`Answer::Upstream`): checked to be one JSON object,
    /// with only its usage parsed.
    fn finish(&self, bytes: Vec<u8>) -> Result<Finished, UpstreamError> {
        let usage = object_member(&bytes, "usage")
            .map_err(|e| UpstreamError::Malformed(format!("the answer is not a JSON object: {e}")))?
            .filter(Value::is_object)
            .ok_or_else(|| UpstreamError::Malformed("the answer carries no usage".into()))?;
        let parsed =
            self.format.usage(&usage).ok_or_else(|| UpstreamError::Malformed("the answer carries no usage".into()))?;
        let amount = language_charge(&self.sheet, &parsed)?;
        let tokens = parsed.prompt_tokens.saturating_add(parsed.completion_tokens);
        let answer = Answer::Upstream { body: bytes, model: self.public_model.clone() };
        Ok(Finished { close: Close::Charge { amount, usage: Some(usage.to_string()), tokens }, answer })
    }

    /// Renames the model of the object at `pointer` (the event itself, or its `message` / `response`).
    fn rename(&self, data: &mut Value, pointer: &str) {
        if let Some(Value::Object(o)) = data.pointer_mut(pointer)
            && o.contains_key("model")
        {
            o.insert("model".into(), Value::String(self.public_model.clone()));
        }
    }

    /// Folds a (cumulative) usage object into the one kept.
    fn merge_usage(&mut self, usage: &Value) {
        let Some(new) = usage.as_object() else { return };
        let mut merged = self.usage.take().and_then(|u| u.as_object().cloned()).unwrap_or_default();
        for (k, v) in new {
            if !v.is_null() {
                merged.insert(k.clone(), v.clone());
            }
        }
        self.usage = Some(Value::Object(merged));
    }

    fn observe_messages(&mut self, kind: &str, data: &mut Value) {
        match kind {
            "message_start" => {
                self.rename(data, "/message");
                if let Some(u) = data.pointer("/message/usage").cloned() {
                    self.merge_usage(&u);
                }
            }
            "message_delta" => {
                if let Some(u) = data.get("usage").cloned() {
                    self.merge_usage(&u);
                    self.final_usage = true;
                }
            }
            "content_block_delta" => {
                let delta = data.get("delta");
                for key in ["text", "thinking", "partial_json"] {
                    self.delivered_bytes +=
                        delta.and_then(|d| d.get(key)).and_then(Value::as_str).map_or(0, |t| t.len() as u64);
                }
            }
            "message_stop" => self.complete = true,
            _ => {}
        }
    }

    async fn observe_responses(&mut self, kind: &str, data: &mut Value) {
        self.rename(data, "/response");
        if kind == "response.created"
            && let (Some(recorder), Some(id)) = (&self.recorder, data.pointer("/response/id").and_then(Value::as_str))
            && let Err(e) = recorder.owners.record_response(id, &recorder.user, &recorder.task).await
        {
            tracing::error!(task = %recorder.task, error = %e, "recording a response id failed");
        }
        if kind.ends_with(".delta") {
            self.delivered_bytes += data.get("delta").and_then(Value::as_str).map_or(0, |t| t.len() as u64);
        }
        if matches!(kind, "response.completed" | "response.incomplete" | "response.failed") {
            if let Some(u) = data.pointer("/response/usage").filter(|u| u.is_object()).cloned() {
                self.merge_usage(&u);
                self.final_usage = true;
            }
            self.complete = true;
        }
    }
}

#[async_trait::async_trait]
impl StreamMeter for NativeMeter {
    async fn observe(&mut self, event: SseEvent) -> Result<StreamItem, UpstreamError> {
        let mut data: Value =
            serde_json::from_slice(&event.data).map_err(|e| UpstreamError::Malformed(format!("stream event: {e}")))?;
        let kind = event.event.clone().or_else(|| data.get("type").and_then(Value::as_str).map(str::to_owned));
        let kind = kind.unwrap_or_default();
        match self.format {
            Format::Messages => self.observe_messages(&kind, &mut data),
            Format::Responses => self.observe_responses(&kind, &mut data).await,
        }
        Ok(StreamItem::Event { name: Some(kind).filter(|k| !k.is_empty()), data })
    }

    const ENDS_WITH_FINAL_EVENT: bool = true;

    fn complete(&self) -> bool {
        self.complete
    }

    fn charge(&self) -> Result<Option<(UsdAmount, String, u64)>, ServiceError> {
        let reported = self.usage.as_ref().and_then(|u| self.format.usage(u));
        let usage = match reported {
            Some(usage) if self.final_usage => usage,
            _ if self.delivered_bytes == 0 => return Ok(None),
            partial => {
                let prompt = partial.map_or_else(|| self.prompt_bound.div_ceil(4), |u| u.prompt_tokens);
                let cached = partial.map_or(0, |u| u.cached_tokens);
                LanguageUsage {
                    prompt_tokens: prompt,
                    cached_tokens: cached,
                    // An estimate, never more than the output the hold covers.
                    completion_tokens: self.delivered_bytes.div_ceil(4).min(self.output_cap),
                    ..LanguageUsage::default()
                }
            }
        };
        let json = match (&self.usage, self.final_usage) {
            (Some(u), true) => u.to_string(),
            _ => json!({"prompt_tokens": usage.prompt_tokens, "cached_tokens": usage.cached_tokens,
                "completion_tokens": usage.completion_tokens, "estimated": true})
            .to_string(),
        };
        let amount = billing::language_charge(&self.sheet, &usage)
            .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", self.public_model)))?;
        Ok(Some((amount.total, json, usage.prompt_tokens.saturating_add(usage.completion_tokens))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sheet() -> PriceSheet {
        let catalog = catalog::Catalog::builtin().expect("catalog");
        catalog.get("LangA-V4-flash").and_then(|d| d.pricing.clone()).expect("priced")
    }

    fn event(name: &str, data: Value) -> SseEvent {
        SseEvent { event: Some(name.to_owned()), data: data.to_string().into_bytes() }
    }

    #[test]
    fn usage_mapping() {
        let m = Format::Messages.usage(&json!({"input_tokens": 10, "output_tokens": 5,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}));
        let m = m.expect("usage");
        assert_eq!((m.prompt_tokens, m.cached_tokens, m.completion_tokens), (130, 100, 5));
        let r = Format::Responses.usage(&json!({"input_tokens": 50, "input_tokens_details": {"cached_tokens": 20},
            "output_tokens": 7, "total_tokens": 57}));
        let r = r.expect("usage");
        assert_eq!((r.prompt_tokens, r.cached_tokens, r.completion_tokens), (50, 20, 7));
        let spec_names = Format::Responses.usage(&json!({"prompt_tokens": 3, "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": 1}}));
        assert_eq!(spec_names.map(|u| (u.prompt_tokens, u.cached_tokens, u.completion_tokens)), Some((3, 1, 4)));
        assert!(Format::Messages.usage(&json!({"input_tokens": 1})).is_none());
    }

    #[tokio::test]
    async fn message_stream_meters_cumulative_usage_and_its_end() {
        let mut meter = NativeMeter::new(Format::Messages, "Public", sheet(), 400, 1000);
        let start = json!({"type": "message_start", "message": {"model": "up", "usage": {"input_tokens": 1000, "output_tokens": 1}}});
        let item = meter.observe(event("message_start", start)).await.expect("event");
        assert!(
            matches!(&item, StreamItem::Event { name: Some(n), data } if n == "message_start" && data["message"]["model"] == "Public")
        );
        let delta =
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "12345678"}});
        meter.observe(event("content_block_delta", delta)).await.expect("event");
        assert!(!meter.complete());
        // Cut before message_delta: prompt as reported, output from the text (8 bytes → 2 tokens).
        let (amount, usage, _) = meter.charge().expect("priced").expect("charged");
        assert_eq!(amount.micros(), 141, "1000 × 0.14 + 2 × 0.28 = 140.56 → 141");
        assert!(usage.contains("estimated"));
        let md = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 40}});
        meter.observe(event("message_delta", md)).await.expect("event");
        meter.observe(event("message_stop", json!({"type": "message_stop"}))).await.expect("event");
        assert!(meter.complete());
        let (amount, usage, _) = meter.charge().expect("priced").expect("charged");
        assert_eq!(amount.micros(), 151, "1000 × 0.14 + 40 × 0.28 = 151.2 → 151");
        assert!(usage.contains("\"input_tokens\":1000") && usage.contains("\"output_tokens\":40"), "{usage}");
    }

    #[tokio::test]
    async fn response_stream_ends_at_completed_and_nothing_delivered_is_free() {
        let mut meter = NativeMeter::new(Format::Responses, "Public", sheet(), 400, 1000);
        assert_eq!(meter.charge().expect("priced"), None);
        let created = json!({"type": "response.created", "response": {"id": "resp_1", "model": "up"}});
        let item = meter.observe(event("response.created", created)).await.expect("event");
        assert!(matches!(&item, StreamItem::Event { data, .. } if data["response"]["model"] == "Public"));
        let done = json!({"type": "response.completed", "response": {"id": "resp_1", "model": "up",
            "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}}});
        meter.observe(event("response.completed", done)).await.expect("event");
        assert!(meter.complete());
        let (amount, _, tokens) = meter.charge().expect("priced").expect("charged");
        assert_eq!(amount.micros(), 2, "10 × 0.14 + 3 × 0.28 = 2.24 → 2");
        assert_eq!(tokens, 13, "prompt + completion count against the key's tokens per minute");
        assert!(meter.observe(SseEvent { event: None, data: b"not json".to_vec() }).await.is_err());
    }

    /// A stream cut before its usage is settled on an estimate from the text delivered, which never
    /// passes the output the hold covers (long tokens are more than 4 bytes each).
    #[tokio::test]
    async fn an_estimate_never_passes_the_output_the_hold_covers() {
        let mut meter = NativeMeter::new(Format::Messages, "Public", sheet(), 400, 2);
        let start = json!({"type": "message_start", "message": {"model": "up", "usage": {"input_tokens": 1000, "output_tokens": 1}}});
        meter.observe(event("message_start", start)).await.expect("event");
        let delta = json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "a-very-long-token-of-forty-bytes-and-more"}});
        meter.observe(event("content_block_delta", delta)).await.expect("event");
        let (amount, usage, _) = meter.charge().expect("priced").expect("charged");
        assert_eq!(amount.micros(), 141, "1000 × 0.14 + 2 (the cap, not 11) × 0.28 = 140.56 → 141");
        assert!(usage.contains("\"completion_tokens\":2"), "{usage}");
    }
}
