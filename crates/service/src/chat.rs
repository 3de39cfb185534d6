//! `POST /api/v1/chat/completions`: validate, quote the worst case, and run the call through the
//! billable-call flow (`call.rs`, `stream.rs`); usage is read from the answer or the stream's usage chunk.
//!
//! The worst case is the prompt bound plus `n` times the output cap. A call that may think goes
//! upstream with that cap as `max_completion_tokens` (reasoning plus answer) instead of
//! `max_tokens` (answer only), so the hold covers its reasoning (`docs/ARCHITECTURE.md`, "Holds of
//! language calls").
//!
//! A stream without a usage report settles on an estimate: prompt tokens = ⌈prompt bound / 4⌉,
//! completion tokens = ⌈bytes of text delivered / 4⌉ (text = `content` and `reasoning_content` deltas).
//! Nothing delivered and no usage: refund.

use billing::LanguageUsage;
use catalog::ModelDef;
use domain::ports::{Endpoint, SseEvent, UpstreamError};
use domain::{PriceSheet, UsdAmount};
use serde_json::{Value, json};
use validation::{ChatPlan, RawBody};

use crate::Answer;
use crate::answer::{chunk_facts, object_member, with_model};
use crate::call::{Attempt, CallSpec, Close, Finished, TaskDetails};
use crate::fallback::Priced;
use crate::rates::RateClaim;
use crate::reply::CallReply;
use crate::reply::StreamItem;
use crate::stream::StreamMeter;
use crate::{Gateway, Principal, ServiceError};

/// The sampling a model enforces whatever the user sends (the LangB-2.0 series: temperature 1, top_p
/// 0.95): `(temperature, top_p)` as JSON text, or `None` when the user's values are kept.
fn enforced_sampling(def: &ModelDef) -> Option<(String, String)> {
    let sampling = def.language_limits()?.sampling.as_ref()?;
    let temperature = sampling.temperature.enforced.as_ref()?;
    let top_p = sampling.top_p.enforced.as_ref().map_or_else(|| "0.95".to_owned(), ToString::to_string);
    Some((temperature.to_string(), top_p))
}

/// The upstream request body: the client's members as they came (raw text, never parsed into a
/// tree), with the upstream model id, the enforced sampling, the output cap that bounds reasoning
/// (see [`validation::ChatPlan::bounds_reasoning`]) and usage in streams put in their place.
fn upstream_body(def: &ModelDef, body: &RawBody<'_>, plan: &ChatPlan) -> Result<Vec<u8>, ServiceError> {
    let model = serde_json::to_string(&def.upstream.model_id).map_err(|e| ServiceError::Internal(e.to_string()))?;
    let cap = plan.max_output_tokens.to_string();
    let sampling = enforced_sampling(def);
    let stream_options = if plan.stream {
        // The validation read `stream_options` as an object when present.
        let options = match body.get("stream_options") {
            Some(raw) => RawBody::of(raw)?.write(&[("include_usage", Some("true"))]),
            None => br#"{"include_usage":true}"#.to_vec(),
        };
        Some(String::from_utf8(options).map_err(|e| ServiceError::Internal(e.to_string()))?)
    } else {
        None
    };
    // A list of models is the gateway's to try: the upstream is asked for one.
    let mut replace: Vec<(&str, Option<&str>)> = vec![("model", Some(&model)), ("models", None)];
    if plan.bounds_reasoning {
        replace.push(("max_tokens", None));
        replace.push(("max_completion_tokens", Some(&cap)));
    }
    if let Some((temperature, top_p)) = &sampling {
        replace.push(("temperature", Some(temperature)));
        replace.push(("top_p", Some(top_p)));
    }
    if let Some(options) = &stream_options {
        replace.push(("stream_options", Some(options)));
    }
    Ok(body.write(&replace))
}

/// Bodies from this size on are read and checked with `block_in_place`.
const CPU_BOUND_BODY_BYTES: usize = 1024 * 1024;

/// Runs `f`, CPU-bound work on a body of `size` bytes: from [`CPU_BOUND_BODY_BYTES`] on, and on a
/// multi-threaded runtime, inside `block_in_place`, so that reading a large body (tens of
/// milliseconds per 10 MB) does not stall the other tasks of its worker thread (timers, leases,
/// other calls).
pub(crate) fn cpu_bound<T>(size: usize, f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let threaded = Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if size >= CPU_BOUND_BODY_BYTES && threaded { tokio::task::block_in_place(f) } else { f() }
}

/// What a chat call's hold covers, for the 402 message: the prompt bound, the output cap (and
/// whether it includes reasoning) and the number of choices.
fn hold_description(model: &str, plan: &ChatPlan) -> String {
    let reasoning = if plan.bounds_reasoning { ", reasoning included" } else { "" };
    let choices = if plan.choices > 1 { format!(", for each of {} choices", plan.choices) } else { String::new() };
    format!(
        "this call (at most {} prompt tokens and {} output tokens{reasoning}{choices}, at {model}'s rates)",
        plan.prompt_bound_tokens, plan.max_output_tokens
    )
}

/// The counts of an upstream `usage` object; `None` when it is not an object or lacks a count.
fn usage_fields(usage: &Value) -> Option<LanguageUsage> {
    let usage = Some(usage).filter(|u| u.is_object())?;
    let n = |path: &str| usage.pointer(path).and_then(Value::as_u64).unwrap_or(0);
    Some(LanguageUsage {
        prompt_tokens: usage.get("prompt_tokens").and_then(Value::as_u64)?,
        completion_tokens: usage.get("completion_tokens").and_then(Value::as_u64)?,
        cached_tokens: n("/prompt_tokens_details/cached_tokens"),
        audio_tokens: n("/prompt_tokens_details/audio_tokens"),
        audio_cached_tokens: n("/prompt_tokens_details/audio_cached_tokens"),
    })
}

/// The exact charge of `usage`; usage too large to price is a malformed answer.
pub(crate) fn language_charge(sheet: &PriceSheet, usage: &LanguageUsage) -> Result<UsdAmount, UpstreamError> {
    billing::language_charge(sheet, usage)
        .map(|c| c.total)
        .map_err(|e| UpstreamError::Malformed(format!("the reported usage cannot be priced: {e}")))
}

/// One model a chat request may be served by, checked for it.
struct CheckedModel {
    priced: Priced,
    plan: ChatPlan,
    upstream_body: Vec<u8>,
    estimate: UsdAmount,
}

/// A chat request checked before it holds anything: each model it may be served by, in order,
/// what it asked for when that was more than one model, and the hold (the largest candidate's).
struct CheckedChat {
    models: Vec<CheckedModel>,
    requested: Option<String>,
    estimate: UsdAmount,
}

impl Gateway {
    /// A chat request checked for `who`: each candidate model, its price, plan, upstream body and
    /// hold, and the hold the call takes (nothing is held here).
    async fn checked_chat(&self, who: &Principal, body: &[u8]) -> Result<CheckedChat, ServiceError> {
        // The body is checked as JSON and kept as raw members: no tree is built (issue 19 §2).
        let size = body.len();
        let body = cpu_bound(size, || RawBody::parse_body(body))?;
        let named = crate::fallback::with_first_model(&body);
        let body = match &named {
            Some(named) => RawBody::parse_body(named)?,
            None => body,
        };
        let (candidates, requested) = self.candidates(who, &body).await?;
        let mut models = Vec::with_capacity(candidates.len());
        for priced in candidates {
            let def = &priced.def;
            let (plan, upstream_body) = cpu_bound(size, || -> Result<_, ServiceError> {
                let plan = validation::chat_request(def, &body)?;
                Ok((plan, upstream_body(def, &body, &plan)?))
            })?;
            let output = plan.output_hold_tokens();
            let sheet = &priced.pricing.sheet;
            let estimate = if plan.has_audio {
                billing::language_reservation(sheet, plan.prompt_bound_tokens, output)
            } else {
                billing::language_reservation_text_only(sheet, plan.prompt_bound_tokens, output)
            }
            .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", def.name)))?;
            models.push(CheckedModel { priced, plan, upstream_body, estimate });
        }
        let estimate = models.iter().map(|m| m.estimate).max().unwrap_or(UsdAmount::ZERO);
        Ok(CheckedChat { models, requested, estimate })
    }

    /// What a chat call with `body` would hold, and at which price, without making it.
    pub async fn quote_chat(&self, who: &Principal, body: &[u8]) -> Result<crate::Quote, ServiceError> {
        let checked = self.checked_chat(who, body).await?;
        crate::call::within_cap(checked.estimate, who.max_cost)?;
        let first = checked.models.into_iter().next().ok_or_else(|| ServiceError::Internal("no model".into()))?;
        Ok(crate::Quote { model: first.priced.def.name.clone(), pricing: first.priced.pricing, hold: checked.estimate })
    }

    /// Runs a chat completion for `who` with the raw JSON `body`: on the first model it names, and
    /// on the next of its `models` (or of its alias) where a failure before the answer allows.
    pub async fn chat(&self, who: &Principal, body: &[u8]) -> Result<CallReply, ServiceError> {
        let upstream = self.upstream()?;
        // The steps are boxed: each lives only while it runs, so the call's own future (which every
        // call's task carries until the answer, or a stream's first event) stays small.
        let CheckedChat { models, requested, estimate } = Box::pin(self.checked_chat(who, body)).await?;
        let first = models.first().ok_or_else(|| ServiceError::Internal("a chat call without a model".into()))?;
        let (hold, stream) = (hold_description(&first.priced.def.name, &first.plan), first.plan.stream);
        let tokens =
            models.iter().map(|m| m.plan.prompt_bound_tokens.saturating_add(m.plan.output_hold_tokens())).max();
        let details = TaskDetails { input_mode: Some(domain::InputMode::Text), requested, ..TaskDetails::default() };
        let mut meters = Vec::with_capacity(models.len());
        let mut attempts = Vec::with_capacity(models.len());
        let mut opening = None;
        for model in models {
            meters.push(ChatMeter {
                public_model: model.priced.def.name.clone(),
                sheet: model.priced.pricing.sheet.clone(),
                prompt_bound: model.plan.prompt_bound_tokens,
                output_cap: model.plan.output_hold_tokens(),
                ..ChatMeter::default()
            });
            // The call opens on its first model; each later one serves only when reached.
            let serve = if opening.is_none() {
                opening = Some(model.priced);
                None
            } else {
                Some(model.priced)
            };
            attempts.push(Attempt { serve, body: model.upstream_body });
        }
        let Priced { def, pricing } =
            opening.ok_or_else(|| ServiceError::Internal("a chat call without a model".into()))?;
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
        let call = Box::pin(self.open_call(spec)).await.map_err(|e| e.for_hold(hold))?;
        if stream {
            let (call, index, events) =
                Box::pin(self.open_stream_over(upstream.as_ref(), call, Endpoint::ChatCompletions, attempts)).await?;
            let meter = meters.swap_remove(index);
            return Ok(CallReply::Stream(self.start_stream(call, events, meter)));
        }
        self.run_sync_over(upstream.as_ref(), call, Endpoint::ChatCompletions, attempts, |index, bytes| {
            let ChatMeter { public_model, sheet, .. } = meters.swap_remove(index);
            // The answer passes through as its bytes (only `model` is replaced when written):
            // checked to be one JSON object here, with only its usage parsed.
            let usage = object_member(&bytes, "usage")
                .map_err(|e| UpstreamError::Malformed(format!("the answer is not a JSON object: {e}")))?
                .ok_or_else(|| UpstreamError::Malformed("the answer carries no usage".into()))?;
            let parsed =
                usage_fields(&usage).ok_or_else(|| UpstreamError::Malformed("the answer carries no usage".into()))?;
            let amount = language_charge(&sheet, &parsed)?;
            let tokens = parsed.prompt_tokens.saturating_add(parsed.completion_tokens);
            let answer = Answer::Upstream { body: bytes, model: public_model };
            Ok(Finished { close: Close::Charge { amount, usage: Some(usage.to_string()), tokens }, answer })
        })
        .await
    }
}

/// What a chat stream produced: the usage chunk, or the text delivered for an estimate.
#[derive(Debug, Default)]
struct ChatMeter {
    public_model: String,
    sheet: PriceSheet,
    prompt_bound: u64,
    /// The output the call's hold covers (all choices): an estimate never passes it.
    output_cap: u64,
    usage: Option<(LanguageUsage, Value)>,
    delivered_bytes: u64,
}

#[async_trait::async_trait]
impl StreamMeter for ChatMeter {
    async fn observe(&mut self, event: SseEvent) -> Result<StreamItem, UpstreamError> {
        // The chunk passes through as its bytes: read once for its usage and delta text, then
        // written once with the public model name.
        let malformed = |e: serde_json::Error| UpstreamError::Malformed(format!("stream chunk: {e}"));
        let facts = chunk_facts(&event.data).map_err(malformed)?;
        if let Some(usage) = facts.usage
            && let Some(u) = usage_fields(&usage)
        {
            self.usage = Some((u, usage));
        }
        self.delivered_bytes += facts.text_bytes;
        Ok(StreamItem::Data(with_model(&event.data, &self.public_model).map_err(malformed)?))
    }

    // The adapter ends a chat stream only at `data: [DONE]` (which it does not return as an event);
    // anything else is an error.
    const ENDS_WITH_FINAL_EVENT: bool = false;

    fn complete(&self) -> bool {
        false
    }

    fn charge(&self) -> Result<Option<(UsdAmount, String, u64)>, ServiceError> {
        let (usage, json) = match &self.usage {
            Some((usage, json)) => (*usage, json.clone()),
            None if self.delivered_bytes > 0 => {
                let estimate = LanguageUsage {
                    prompt_tokens: self.prompt_bound.div_ceil(4),
                    // An estimate, never more than the output the hold covers.
                    completion_tokens: self.delivered_bytes.div_ceil(4).min(self.output_cap),
                    ..LanguageUsage::default()
                };
                let json = json!({"prompt_tokens": estimate.prompt_tokens, "completion_tokens": estimate.completion_tokens,
                    "total_tokens": estimate.prompt_tokens + estimate.completion_tokens, "estimated": true});
                (estimate, json)
            }
            None => return Ok(None),
        };
        let amount = billing::language_charge(&self.sheet, &usage)
            .map_err(|e| ServiceError::Internal(format!("pricing {}: {e}", self.public_model)))?;
        Ok(Some((amount.total, json.to_string(), usage.prompt_tokens.saturating_add(usage.completion_tokens))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str) -> ModelDef {
        catalog::Catalog::builtin().expect("catalog").get(name).cloned().expect("model")
    }

    fn body(json: Value) -> serde_json::Map<String, Value> {
        match json {
            Value::Object(o) => o,
            _ => serde_json::Map::new(),
        }
    }

    /// The plan of `request` and the upstream body written for it.
    fn plan_and_body(name: &str, request: &serde_json::Map<String, Value>) -> (ChatPlan, Vec<u8>) {
        let bytes = serde_json::to_vec(request).expect("json");
        let raw = RawBody::parse_body(&bytes).expect("object");
        let plan = validation::chat_request(&def(name), &raw).expect("valid");
        let out = upstream_body(&def(name), &raw, &plan).expect("body");
        (plan, out)
    }

    /// The upstream body of `json` (a valid request once `model` and a message are added).
    fn sent(name: &str, json: Value, stream: bool) -> Value {
        let mut request = body(json!({"model": name, "messages": [{"role": "user", "content": "hi"}]}));
        request.extend(body(json));
        let (plan, bytes) = plan_and_body(name, &request);
        assert_eq!(plan.stream, stream);
        serde_json::from_slice(&bytes).expect("json")
    }

    #[test]
    fn thinking_calls_bound_reasoning_with_max_completion_tokens() {
        let out = sent("LangA-V4-pro", json!({"max_tokens": 1}), false);
        assert_eq!((out.get("max_tokens"), &out["max_completion_tokens"]), (None, &json!(1)));
        let out = sent("LangA-V4-pro", json!({"max_tokens": 5, "max_completion_tokens": 7}), false);
        assert_eq!((out.get("max_tokens"), &out["max_completion_tokens"]), (None, &json!(7)));
        let out = sent("LangB-2.0-pro", json!({}), false);
        assert_eq!(out["max_completion_tokens"], json!(131_072), "the cap the hold is computed from");
        let out = sent("LangB-2.0-pro", json!({"max_tokens": 9, "thinking": {"type": "disabled"}}), false);
        assert_eq!((&out["max_tokens"], out.get("max_completion_tokens")), (&json!(9), None), "no reasoning: as sent");
    }

    #[test]
    fn a_key_named_twice_is_read_and_sent_once_with_its_last_value() {
        let bytes = br#"{"model":"LangA-V4-flash","max_tokens":999999999,"x":1,
            "messages":[{"role":"user","content":"hi"}],"max_tokens":5,"x":{"k":[2]}}"#;
        let raw = RawBody::parse_body(bytes).expect("object");
        let plan = validation::chat_request(&def("LangA-V4-flash"), &raw).expect("the last max_tokens is read");
        assert_eq!(plan.max_output_tokens, 5);
        let out = upstream_body(&def("LangA-V4-flash"), &raw, &plan).expect("body");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(text.matches("\"x\"").count(), 1, "{text}");
        assert!(text.contains(r#""x":{"k":[2]}"#), "the raw member as sent: {text}");
        let sent: Value = serde_json::from_str(&text).expect("json");
        assert_eq!((sent.get("max_tokens"), &sent["max_completion_tokens"]), (None, &json!(5)));
    }

    #[test]
    fn the_402_names_what_the_hold_covers() {
        let mut request = body(json!({"model": "LangA-V4-pro", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1, "n": 2}));
        let (plan, _) = plan_and_body("LangA-V4-pro", &request);
        let text = hold_description("LangA-V4-pro", &plan);
        assert!(text.contains("1 output tokens, reasoning included, for each of 2 choices"), "{text}");
        request.insert("thinking".into(), json!({"type": "disabled"}));
        let (plan, _) = plan_and_body("LangA-V4-pro", &request);
        assert!(!hold_description("LangA-V4-pro", &plan).contains("reasoning"));
    }

    #[test]
    fn langb_2_0_sampling_is_enforced_and_the_model_mapped() {
        let out = sent("LangB-2.0-pro", json!({"temperature": 0.2, "top_p": 0.5, "x": 1}), false);
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
        let out = sent("LangA-V4-flash", json!({"stream": true}), true);
        assert_eq!(out["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn usage_and_delta_parsing() {
        let answer = json!({"usage": {"prompt_tokens": 10, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 2, "audio_cached_tokens": 1}}});
        let u = usage_fields(&answer["usage"]).expect("usage");
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.audio_tokens, u.audio_cached_tokens),
            (10, 5, 4, 2, 1)
        );
        assert!(usage_fields(&Value::Null).is_none());
        assert!(usage_fields(&json!({"prompt_tokens": 1})).is_none());
        let chunk = json!({"choices": [{"delta": {"content": "héllo", "reasoning_content": "ab"}}]});
        assert_eq!(crate::answer::chunk_facts(chunk.to_string().as_bytes()).expect("chunk").text_bytes, 8);
    }

    /// A stream cut before its usage chunk is settled on an estimate that never passes the output
    /// its hold covers.
    #[tokio::test]
    async fn a_stream_estimate_never_passes_the_output_the_hold_covers() {
        let catalog = catalog::Catalog::builtin().expect("catalog");
        let sheet = catalog.get("LangA-V4-flash").and_then(|d| d.pricing.clone()).expect("priced");
        let mut meter = ChatMeter {
            public_model: "Public".into(),
            sheet,
            prompt_bound: 400,
            output_cap: 3,
            ..ChatMeter::default()
        };
        let chunk = json!({"choices": [{"delta": {"content": "x".repeat(400)}}]});
        meter.observe(SseEvent { event: None, data: chunk.to_string().into_bytes() }).await.expect("chunk");
        let (_, usage, _) = meter.charge().expect("priced").expect("charged");
        let usage: Value = serde_json::from_str(&usage).expect("usage");
        assert_eq!((&usage["completion_tokens"], &usage["estimated"]), (&json!(3), &json!(true)), "{usage}");
    }
}
