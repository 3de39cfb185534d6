//! The speech service, `POST /api/v3/tts/create` (upstream-wire §4).
//!
//! A request needs `X-Api-Key: <non-empty>` (else HTTP 401 `{"code":45000010,"message":…}`).
//! A body that is not a JSON object, a missing or non-string `model`, a missing, non-string or
//! empty `text_prompt`, or an `audio_config.format` other than `wav`, `mp3`, `pcm`, `ogg_opus`
//! is HTTP 200 `{"code":45000001,"message":"<field> is invalid"}` (`text_prompt is invalid` for
//! the prompt). Every answer carries the header `X-Tt-Logid`.
//!
//! # Success (HTTP 200)
//!
//! `{"code":0,"message":"","audio":…,"duration":…,"original_duration":…,"url":…[,"subtitle":…]}`:
//! - `original_duration` = (500 + 37 × characters of `text_prompt`) ms, written in seconds with
//!   at most 3 decimals (computed in integer ms; directives count as characters too);
//! - `duration` = `original_duration` rounded down to 0.1 s, written with one decimal;
//! - `audio` = raw Base64 (never a data URL) of a tiny WAV (0.1 s of silence, whatever the
//!   duration and format);
//! - `url` = `http://<sim host>/files/audio/<id>.<format>` (served, see [`super::files`]),
//!   `format` = `audio_config.format`, default `wav`;
//! - `subtitle` only when `audio_config.enable_subtitle` is `true`:
//!   `{"text":<text_prompt>,"sentences":[{"text","start_time","end_time"}]}`, one sentence per
//!   run of text ending in `.`, `!`, `?` (or their full-width forms) or at the end, trimmed;
//!   a sentence starting at character c and ending before character e spans
//!   `start_time` = 250 + 37 × c to `end_time` = 250 + 37 × e (ms).
//!
//! # Switches (directives inside `text_prompt`)
//!
//! - `[sim:fault=<name>]`: `timeout`, `malformed`, `drop` as for chat; `status_400`,
//!   `status_429`, `status_500`, `status_503` answer that HTTP status with
//!   `{"code":45000001|45000029|55000000|55000003,"message":"Simulated <status> error."}`.
//! - `[sim:latency_ms=N]`: wait N ms (at most 10,000) first.
//! - `[sim:code=N]`, N ≠ 0: HTTP 200 `{"code":N,"message":"Simulated speech error N."}`, no
//!   audio.
//!
//! An unknown or malformed directive is HTTP 200 code 45000001.

use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::MAX_SPEECH_REQUEST_BYTES;
use super::body::SimBody;
use super::fault::{self, Family, Switches};
use super::files::{base64, tiny_wav};
use super::request::{BodyError, has_header, json_object, origin, read_body};
use super::state::SimState;

/// The speech code for a bad parameter.
pub const CODE_INVALID: i64 = 45_000_001;
/// The speech code for a missing or wrong key.
pub const CODE_UNAUTHORIZED: i64 = 45_000_010;
/// Fixed part of the simulated duration, ms.
pub const BASE_MS: u64 = 500;
/// Simulated duration per character of `text_prompt`, ms.
pub const MS_PER_CHAR: u64 = 37;

/// A speech-service answer `{"code","message"}` with `status`.
fn coded(status: u16, code: i64, message: &str, rid: &str) -> Response<SimBody> {
    with_logid(fault::json_response(status, json!({"code": code, "message": message}).to_string()), rid)
}

fn with_logid(mut response: Response<SimBody>, rid: &str) -> Response<SimBody> {
    if let Ok(value) = HeaderValue::from_str(rid) {
        response.headers_mut().insert("x-tt-logid", value);
    }
    response
}

fn status_fault(status: u16, rid: &str) -> Response<SimBody> {
    let code = match status {
        400 => CODE_INVALID,
        429 => 45_000_029,
        503 => 55_000_003,
        _ => 55_000_000,
    };
    coded(status, code, &format!("Simulated {status} error."), rid)
}

/// Answers `POST /api/v3/tts/create`; an `Err` closes the connection without a response.
pub(crate) async fn handle(
    state: &SimState,
    req: Request<Incoming>,
    rid: String,
) -> Result<Response<SimBody>, std::io::Error> {
    if !has_header(req.headers(), "x-api-key") {
        return Ok(coded(401, CODE_UNAUTHORIZED, "Invalid X-Api-Key.", &rid));
    }
    let origin = origin(state, req.headers());
    let invalid = |what: &str| Ok(coded(200, CODE_INVALID, &format!("{what} is invalid"), &rid));
    let request = match read_body(req, MAX_SPEECH_REQUEST_BYTES).await.map(|b| json_object(&b)) {
        Ok(Some(request)) => request,
        Ok(None) | Err(BodyError::Unreadable) => return invalid("request body"),
        Err(BodyError::TooLarge) => return Ok(coded(413, CODE_INVALID, "request body is too large", &rid)),
    };
    if !request.get("model").is_some_and(Value::is_string) {
        return invalid("model");
    }
    let Some(text) = request.get("text_prompt").and_then(Value::as_str).filter(|t| !t.is_empty()) else {
        return invalid("text_prompt");
    };
    let config = request.get("audio_config").and_then(Value::as_object);
    let format = match config.and_then(|c| c.get("format")) {
        None | Some(Value::Null) => "wav",
        Some(v) => match v.as_str() {
            Some(f @ ("wav" | "mp3" | "pcm" | "ogg_opus")) => f,
            _ => return invalid("audio_config.format"),
        },
    };
    let switches = match Switches::from_directives(text, Family::Speech) {
        Ok(switches) => switches,
        Err(_) => return invalid("text_prompt"),
    };
    if let Some(done) = fault::shared(&switches, |status| status_fault(status, &rid)).await {
        return done;
    }
    if let Some(code) = switches.code {
        return Ok(coded(200, code, &format!("Simulated speech error {code}."), &rid));
    }
    let subtitle = config.and_then(|c| c.get("enable_subtitle")).and_then(Value::as_bool) == Some(true);
    let url = format!("{origin}/files/audio/{}.{format}", state.next_hex());
    Ok(with_logid(fault::json_response(200, answer(text, &url, subtitle)), &rid))
}

/// `original_duration` in ms.
pub(crate) fn duration_ms(text: &str) -> u64 {
    let chars = u64::try_from(text.chars().count()).unwrap_or(u64::MAX);
    BASE_MS.saturating_add(MS_PER_CHAR.saturating_mul(chars))
}

/// `ms` as seconds with at most 3 decimals (at least one).
fn seconds_3(ms: u64) -> String {
    let mut text = format!("{}.{:03}", ms / 1000, ms % 1000);
    while text.ends_with('0') && !text.ends_with(".0") {
        text.pop();
    }
    text
}

/// `ms` rounded down to 0.1 s, with one decimal.
fn seconds_1(ms: u64) -> String {
    let tenths = ms / 100;
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// The answer's JSON text (written by hand so that the durations are exact decimals).
fn answer(text: &str, url: &str, subtitle: bool) -> String {
    let ms = duration_ms(text);
    let mut body = format!(
        "{{\"code\":0,\"message\":\"\",\"audio\":{},\"duration\":{},\"original_duration\":{},\"url\":{}",
        json!(base64(&tiny_wav())),
        seconds_1(ms),
        seconds_3(ms),
        json!(url),
    );
    if subtitle {
        body.push_str(",\"subtitle\":");
        body.push_str(&json!({"text": text, "sentences": sentences(text)}).to_string());
    }
    body.push('}');
    body
}

/// The subtitle sentences of `text` with their times.
fn sentences(text: &str) -> Vec<Value> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in chars.iter().enumerate() {
        let end = i + 1;
        if matches!(c, '.' | '!' | '?' | '。' | '！' | '？') || end == chars.len() {
            push_sentence(&chars, start, end, &mut out);
            start = end;
        }
    }
    out
}

fn push_sentence(chars: &[char], start: usize, end: usize, out: &mut Vec<Value>) {
    let slice = &chars[start..end];
    let lead = slice.iter().take_while(|c| c.is_whitespace()).count();
    let trail = slice.iter().rev().take_while(|c| c.is_whitespace()).count();
    if lead == slice.len() {
        return;
    }
    let (from, to) = (start + lead, end - trail);
    let at = |i: usize| MS_PER_CHAR.saturating_mul(u64::try_from(i).unwrap_or(u64::MAX)).saturating_add(250);
    let text: String = chars[from..to].iter().collect();
    out.push(json!({"text": text, "start_time": at(from), "end_time": at(to)}));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn parse(body: &str) -> Map<String, Value> {
        serde_json::from_str(body).unwrap_or_default()
    }

    #[test]
    fn durations_are_exact() {
        assert_eq!(duration_ms(""), 500);
        assert_eq!(duration_ms("héllo"), 500 + 5 * 37);
        assert_eq!(seconds_3(685), "0.685");
        assert_eq!(seconds_3(1500), "1.5");
        assert_eq!(seconds_3(2000), "2.0");
        assert_eq!(seconds_3(74_500), "74.5");
        assert_eq!(seconds_1(685), "0.6");
        assert_eq!(seconds_1(74_599), "74.5");
        // 2,000 characters: 74,500 ms.
        assert_eq!(duration_ms(&"a".repeat(2000)), 74_500);
    }

    #[test]
    fn answer_is_json_with_exact_numbers() {
        let body = answer("Hi. Bye!", "http://h/files/audio/x.wav", true);
        assert!(body.contains("\"original_duration\":0.796,"), "{body}");
        assert!(body.contains("\"duration\":0.7,"), "{body}");
        let v = parse(&body);
        assert_eq!(v["code"], 0);
        assert_eq!(v["subtitle"]["text"], "Hi. Bye!");
        assert_eq!(
            v["subtitle"]["sentences"],
            json!([{"text": "Hi.", "start_time": 250, "end_time": 250 + 3 * 37}, {"text": "Bye!", "start_time": 250 + 4 * 37, "end_time": 250 + 8 * 37}])
        );
        assert!(parse(&answer("x", "u", false)).get("subtitle").is_none());
    }

    #[test]
    fn sentences_without_punctuation_or_with_blanks() {
        assert_eq!(sentences("no stop")[0]["text"], "no stop");
        assert_eq!(sentences("a.  ").len(), 1);
        assert_eq!(sentences("...").len(), 3);
    }
}
