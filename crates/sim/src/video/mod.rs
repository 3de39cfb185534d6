//! Content-generation tasks (upstream-wire §2): `POST /api/v3/contents/generations/tasks`,
//! `GET` and `DELETE /api/v3/contents/generations/tasks/{id}`.
//!
//! Every request needs `Authorization: Bearer <non-empty>` (else 401 `AuthenticationError`).
//! Errors use the platform error body `{"error":{"code","message","param","type"}}`.
//!
//! # Create
//!
//! The body (at most [`MAX_VIDEO_REQUEST_BYTES`], else 413) must be a JSON object with a string
//! `model` and a non-empty `content` array; anything else below is 400 `InvalidParameter`
//! naming the parameter. Content items: `{"type":"text","text":…}`, or
//! `{"type":"image_url"|"video_url"|"audio_url", "<type>":{"url":…}, "role"?}` where the URL is
//! `https://…`, `data:…` or `asset://<id>`; an `asset://` id must be an asset of this simulator
//! that is `Active` (see [`super::assets`]). At most 9 images, 3 videos, 3 audios.
//! Fields read (others are ignored): `resolution` `480p`/`720p`/`1080p`/`4k` (default `720p`),
//! `ratio` `adaptive`/`16:9`/`4:3`/`1:1`/`3:4`/`9:16`/`21:9` (default `adaptive`, simulated and
//! reported as `16:9`), `duration` 4..=15 or −1 (default 5; −1 simulates
//! [`task::AUTO_DURATION_SECONDS`] s), `generate_audio` (default true), `return_last_frame`
//! (default true here), `execution_expires_after` 3600..=259200 s (default 172800),
//! `callback_url`. The answer is `200 {"id":"cgt-<16 hex>"}`.
//!
//! # Life of a task (simulated time, see [`super::SimOptions`])
//!
//! `queued` for `video_queue` (default 1 s), then `running` for `video_run` (default 2 s), then
//! `succeeded`: `content.video_url` = `http://<sim host>/files/videos/<id>.mp4` (a tiny MP4
//! header, `video/mp4`), `content.last_frame_url` = `…/<id>.png` (a 1×1 PNG; omitted when
//! `return_last_frame` is false), `usage.completion_tokens` = `usage.total_tokens` =
//! floor(W × H × (24 × seconds + 1) / 1024) with W×H from [`task::SIZES`] (16:9 is 854×480,
//! 1280×720, 1920×1080, 3840×2160; 5 s 720p 16:9 = 108,900). A task not terminal
//! `execution_expires_after` seconds after creation becomes `expired`. `created_at` /
//! `updated_at` are Unix seconds of simulated time (the simulator's start plus simulated ms).
//!
//! # Switches (directives in any `text` item; an unknown one is 400 param `content`)
//!
//! - `[sim:video=fail]` — ends `failed` instead, `error` = `{"code":"OutputVideoSensitiveContentDetected",…}`.
//! - `[sim:video=expire]` — ends `expired` instead (`error` null).
//! - `[sim:video=slow_queue]` — stays `queued` for `video_slow_queue` (default 1 h): cancel it.
//! - `[sim:video=poll_error:N]` — the first N `GET`s of the task answer 500 `InternalServiceError`.
//! - `[sim:video=callback]` — POST the task object (as it stood at each change) to
//!   `callback_url` on every status change, `queued` included, in order; each POST is tried up
//!   to 4 times, 5 s each. `callback_url` must then be `http(s)://` to `127.0.0.1`, `[::1]` or
//!   `localhost` (the simulator connects nowhere else); https certificates are not checked.
//!   Without the switch `callback_url` is ignored.
//!
//! # Get and delete
//!
//! `GET` answers the task object (404 `NotFound` for an unknown id). `DELETE` of a `queued`
//! task makes it `cancelled` and answers `200 {}`; any other status is 409
//! `InvalidTaskStatus` (unlike the platform, terminal tasks are not deleted, so a racing
//! cancel can never lose a result).

mod callbacks;
pub mod task;

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{Map, Value, json};

use super::body::SimBody;
use super::fault::{error_response, json_response};
use super::request::{BodyError, has_bearer, is_loopback_url, json_object, origin, read_body};
use super::state::SimState;
use task::{Outcome, Status, VideoTask};

pub(crate) use callbacks::deliver;

/// Largest accepted create body, in bytes.
pub const MAX_VIDEO_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Tasks remembered (the oldest is forgotten first).
pub const MAX_VIDEO_TASKS: usize = 100_000;
/// Most `poll_error:N`.
const MAX_POLL_ERRORS: u64 = 1000;

/// The per-request switches.
#[derive(Debug, Clone, PartialEq, Eq)]
struct VideoSwitches {
    outcome: Outcome,
    slow_queue: bool,
    poll_errors: u64,
    callback: bool,
}

/// The `[sim:video=…]` directives in `text`.
fn switches(text: &str) -> Result<VideoSwitches, String> {
    let mut s = VideoSwitches { outcome: Outcome::Succeed, slow_queue: false, poll_errors: 0, callback: false };
    let mut rest = text;
    while let Some(start) = rest.find("[sim:") {
        let after = &rest[start + 5..];
        let end = after.find(']').ok_or_else(|| "Unterminated [sim:…] directive.".to_owned())?;
        let directive = &after[..end];
        rest = &after[end + 1..];
        let bad = || format!("Bad simulator directive [sim:{directive}].");
        match directive.trim().strip_prefix("video=").ok_or_else(bad)?.trim() {
            "fail" => s.outcome = Outcome::Fail,
            "expire" => s.outcome = Outcome::Expire,
            "slow_queue" => s.slow_queue = true,
            "callback" => s.callback = true,
            other => {
                let n = other.strip_prefix("poll_error:").and_then(|n| n.parse::<u64>().ok()).ok_or_else(bad)?;
                s.poll_errors = n.min(MAX_POLL_ERRORS);
            }
        }
    }
    Ok(s)
}

type Invalid = (&'static str, String);

/// The media items of `content`, checked; the text of its text items and the asset ids named.
fn read_content(content: Option<&Value>) -> Result<(String, Vec<String>), Invalid> {
    let items = content.and_then(Value::as_array).filter(|a| !a.is_empty());
    let items = items.ok_or(("content", "content must be a non-empty array.".to_owned()))?;
    let (mut text, mut assets, mut counts) = (String::new(), Vec::new(), [0u32; 3]);
    for item in items {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        let slot = match kind {
            "text" => {
                let t = item.get("text").and_then(Value::as_str);
                text.push_str(t.ok_or(("content", "A text item needs a string text.".to_owned()))?);
                text.push('\n');
                continue;
            }
            "image_url" => 0,
            "video_url" => 1,
            "audio_url" => 2,
            _ => return Err(("content", format!("Unknown content type {kind:?}."))),
        };
        counts[slot] += 1;
        let url = item.get(kind).and_then(|m| m.get("url")).and_then(Value::as_str).unwrap_or_default();
        if let Some(id) = url.strip_prefix("asset://") {
            assets.push(id.to_owned());
        } else if !url.starts_with("https://") && !url.starts_with("data:") {
            return Err(("content", format!("The {kind} url must be https://, data: or asset://.")));
        }
    }
    if counts[0] > 9 || counts[1] > 3 || counts[2] > 3 {
        return Err(("content", "At most 9 images, 3 videos and 3 audios.".to_owned()));
    }
    Ok((text, assets))
}

/// Checks the body and builds the task (id, origin and time are filled in by the caller).
fn plan(body: &Map<String, Value>, state: &SimState) -> Result<(VideoTask, Vec<String>), Invalid> {
    let model = body.get("model").and_then(Value::as_str).filter(|m| !m.is_empty());
    let model = model.ok_or(("model", "model must be a non-empty string.".to_owned()))?;
    let (text, assets) = read_content(body.get("content"))?;
    let sw = switches(&text).map_err(|m| ("content", m))?;
    let string = |key: &'static str, default: &'static str| match body.get(key) {
        None | Some(Value::Null) => Ok(default.to_owned()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err((key, format!("{key} must be a string."))),
    };
    let flag = |key: &'static str| match body.get(key) {
        None | Some(Value::Null) => Ok(true),
        Some(v) => v.as_bool().ok_or((key, format!("{key} must be a boolean."))),
    };
    let resolution = string("resolution", "720p")?;
    let ratio = string("ratio", "adaptive")?;
    let (width, height) = task::dimensions(&resolution, &ratio)
        .ok_or(("resolution", format!("Unsupported resolution {resolution:?} or ratio {ratio:?}.")))?;
    let seconds = match body.get("duration").map(Value::as_i64) {
        None => 5,
        Some(Some(-1)) => task::AUTO_DURATION_SECONDS,
        Some(Some(d @ 4..=15)) => d.unsigned_abs(),
        Some(_) => return Err(("duration", "duration must be 4..15 or -1.".to_owned())),
    };
    let expires_after_s = match body.get("execution_expires_after").map(Value::as_u64) {
        None => task::DEFAULT_EXPIRES_AFTER_S,
        Some(Some(s @ 3600..=259_200)) => s,
        Some(_) => return Err(("execution_expires_after", "must be 3600..259200.".to_owned())),
    };
    let callback_url = if sw.callback {
        let url = body.get("callback_url").and_then(Value::as_str).filter(|u| is_loopback_url(u));
        Some(url.ok_or(("callback_url", "The simulator calls back only http(s) loopback URLs.".to_owned()))?.to_owned())
    } else {
        None
    };
    let options = state.options();
    let queue = if sw.slow_queue { options.video_slow_queue } else { options.video_queue };
    let task = VideoTask {
        id: String::new(),
        model: model.to_owned(),
        origin: String::new(),
        created_ms: 0,
        queue_ms: domain::duration_millis(queue).unsigned_abs(),
        run_ms: domain::duration_millis(options.video_run).unsigned_abs(),
        outcome: sw.outcome,
        ratio: if ratio == "adaptive" { "16:9".to_owned() } else { ratio },
        resolution,
        seconds,
        width,
        height,
        generate_audio: flag("generate_audio")?,
        return_last_frame: flag("return_last_frame")?,
        expires_after_s,
        callback_url,
        poll_errors_left: sw.poll_errors,
        cancelled_at_ms: None,
        notified: 0,
    };
    Ok((task, assets))
}

/// Answers `POST /api/v3/contents/generations/tasks`.
pub(crate) async fn create(
    state: &SimState,
    req: Request<Incoming>,
    rid: String,
) -> Result<Response<SimBody>, std::io::Error> {
    if !has_bearer(req.headers()) {
        return Ok(error_response(401, "AuthenticationError", "The API key is missing or malformed.", "", &rid));
    }
    let origin = origin(state, req.headers());
    let invalid = |message: &str, param: &str| Ok(error_response(400, "InvalidParameter", message, param, &rid));
    let body = match read_body(req, MAX_VIDEO_REQUEST_BYTES).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge) => {
            return Ok(error_response(413, "RequestTooLarge", "The request body is too large.", "", &rid));
        }
        Err(BodyError::Unreadable) => return invalid("The request body could not be read.", ""),
    };
    let Some(body) = json_object(&body) else {
        return invalid("The request body must be a JSON object.", "");
    };
    let (mut task, assets) = match plan(&body, state) {
        Ok(planned) => planned,
        Err((param, message)) => return invalid(&message, param),
    };
    if let Some(id) = assets.iter().find(|id| !state.asset_active(id)) {
        return invalid(&format!("The asset {id} does not exist or is not active."), "content");
    }
    task.id = format!("cgt-{}", state.next_hex());
    task.origin = origin;
    task.created_ms = state.clock().now_ms();
    let answer = json!({"id": task.id});
    state.with_video(|table| {
        if task.callback_url.is_some() {
            table.watch(&task.id);
        }
        table.order.push_back(task.id.clone());
        table.tasks.insert(task.id.clone(), task);
        while table.order.len() > MAX_VIDEO_TASKS {
            if let Some(oldest) = table.order.pop_front() {
                table.tasks.remove(&oldest);
            }
        }
    });
    Ok(json_response(200, answer.to_string()))
}

/// Answers `GET` or `DELETE /api/v3/contents/generations/tasks/{id}`.
pub(crate) fn get_or_delete(state: &SimState, req: &Request<Incoming>, id: &str, rid: &str) -> Response<SimBody> {
    if !has_bearer(req.headers()) {
        return error_response(401, "AuthenticationError", "The API key is missing or malformed.", "", rid);
    }
    let delete = req.method() == http::Method::DELETE;
    let now = state.clock().now_ms();
    let answer = state.with_video(|table| {
        let task = table.tasks.get_mut(id)?;
        let (status, since) = task.status_at(now);
        if delete {
            if status != Status::Queued {
                return Some(Err(409));
            }
            task.cancelled_at_ms = Some(now);
            return Some(Ok(json!({})));
        }
        if task.poll_errors_left > 0 {
            task.poll_errors_left -= 1;
            return Some(Err(500));
        }
        Some(Ok(task.render(status, since, |ms| state.clock().unix_secs(ms))))
    });
    match answer {
        None => error_response(404, "NotFound", &format!("The task {id} was not found."), "id", rid),
        Some(Ok(body)) => json_response(200, body.to_string()),
        Some(Err(409)) => error_response(409, "InvalidTaskStatus", "Only a queued task can be cancelled.", "id", rid),
        Some(Err(_)) => error_response(500, "InternalServiceError", "Simulated poll error.", "", rid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directives() {
        let s = switches("a cat [sim:video=fail] [sim:video=poll_error:3][sim:video=callback]");
        assert_eq!(s, Ok(VideoSwitches { outcome: Outcome::Fail, slow_queue: false, poll_errors: 3, callback: true }));
        assert_eq!(
            switches("[sim:video=expire][sim:video=slow_queue]").map(|s| (s.outcome, s.slow_queue)),
            Ok((Outcome::Expire, true))
        );
        assert_eq!(switches("plain [text]").map(|s| s.outcome), Ok(Outcome::Succeed));
        for bad in ["[sim:video=nope]", "[sim:fault=drop]", "[sim:video=poll_error:x]", "[sim:video=fail"] {
            assert!(switches(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn content_rules() {
        let ok = json!([{"type": "text", "text": "hi [sim:video=fail]"}, {"type": "image_url", "image_url": {"url": "asset://a-1"}}]);
        assert_eq!(read_content(Some(&ok)), Ok(("hi [sim:video=fail]\n".to_owned(), vec!["a-1".to_owned()])));
        let image = json!({"type": "image_url", "image_url": {"url": "https://x/a.png"}});
        let nine = Value::Array(vec![image.clone(); 9]);
        assert!(read_content(Some(&nine)).is_ok());
        assert!(read_content(Some(&Value::Array(vec![image; 10]))).is_err());
        for bad in [json!([]), json!([{"type": "image_url", "image_url": {"url": "http://x"}}]), json!([{"type": "x"}])]
        {
            assert!(read_content(Some(&bad)).is_err(), "{bad}");
        }
        assert!(read_content(None).is_err());
    }
}
