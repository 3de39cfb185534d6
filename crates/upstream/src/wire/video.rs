//! Content-generation tasks (upstream-wire §2): the create body written from a
//! [`VideoTaskRequest`], the create answer's id, and the task object (`GET …/tasks/{id}`, also a
//! list item or a callback) read leniently into a [`VideoTaskState`]: a field of an unexpected type
//! is read as absent, and the failure is `error` or, in list items, `failure_reason`.

use domain::ports::{AssetKind, UpstreamError, VideoTaskRequest, VideoTaskState};
use serde::Serialize;
use serde::de::{Deserialize, DeserializeOwned, Deserializer};
use serde_json::Value;

/// The range of `execution_expires_after` the platform accepts, in seconds.
pub const EXPIRES_AFTER_SECS: std::ops::RangeInclusive<u64> = 3600..=259_200;

/// The create body.
#[derive(Debug, Serialize)]
struct CreateBody<'a> {
    model: &'a str,
    content: Vec<ContentItem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resolution: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generate_audio: Option<bool>,
    return_last_frame: bool,
    execution_expires_after: u64,
}

/// One `content` item: the prompt, or a reference with its role.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentItem<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: Link, role: Role },
    VideoUrl { video_url: Link, role: Role },
    AudioUrl { audio_url: Link, role: Role },
}

/// `{"url": …}`.
#[derive(Debug, Serialize)]
struct Link {
    url: String,
}

/// A content item's `role` (the multimodal-reference mode: references only).
#[derive(Debug, Clone, Copy, Serialize)]
enum Role {
    #[serde(rename = "reference_image")]
    Image,
    #[serde(rename = "reference_video")]
    Video,
    #[serde(rename = "reference_audio")]
    Audio,
}

/// The reference to asset `id` of `kind`, as `asset://<id>`.
fn reference(kind: AssetKind, id: &str) -> ContentItem<'static> {
    let link = Link { url: format!("asset://{id}") };
    match kind {
        AssetKind::Image => ContentItem::ImageUrl { image_url: link, role: Role::Image },
        AssetKind::Video => ContentItem::VideoUrl { video_url: link, role: Role::Video },
        AssetKind::Audio => ContentItem::AudioUrl { audio_url: link, role: Role::Audio },
    }
}

/// The create body of `request`: the prompt, the media as `asset://` references in order, the
/// options, the last frame asked for, and the deadline kept within [`EXPIRES_AFTER_SECS`].
pub fn create_body(request: &VideoTaskRequest) -> Result<Vec<u8>, UpstreamError> {
    let mut content = Vec::with_capacity(request.references.len() + 1);
    if let Some(prompt) = &request.prompt {
        content.push(ContentItem::Text { text: prompt });
    }
    content.extend(request.references.iter().map(|(kind, id)| reference(*kind, id)));
    let body = CreateBody {
        model: &request.model,
        content,
        resolution: request.resolution.map(domain::Resolution::as_str),
        ratio: request.ratio.map(domain::Ratio::as_str),
        duration: request.duration,
        generate_audio: request.generate_audio,
        return_last_frame: true,
        execution_expires_after: request.deadline_secs.clamp(*EXPIRES_AFTER_SECS.start(), *EXPIRES_AFTER_SECS.end()),
    };
    serde_json::to_vec(&body).map_err(|e| UpstreamError::Malformed(format!("the task body cannot be written: {e}")))
}

/// The create answer, `{"id": "cgt-…"}`.
#[derive(Debug, serde::Deserialize)]
struct Created {
    #[serde(default, deserialize_with = "lenient")]
    id: Option<String>,
}

/// The upstream's id in a create answer.
pub fn parse_created(bytes: &[u8]) -> Result<String, UpstreamError> {
    let answer: Created = serde_json::from_slice(bytes)
        .map_err(|e| UpstreamError::Malformed(format!("the create answer is not JSON: {e}")))?;
    answer.id.filter(|id| !id.is_empty()).ok_or_else(|| UpstreamError::Malformed("the create answer has no id".into()))
}

/// The task object, as far as the gateway reads it.
#[derive(Debug, serde::Deserialize)]
struct TaskObject {
    #[serde(default, deserialize_with = "lenient")]
    status: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    content: Option<TaskContent>,
    #[serde(default, deserialize_with = "lenient")]
    usage: Option<serde_json::Map<String, Value>>,
    #[serde(default, deserialize_with = "lenient")]
    error: Option<TaskFailure>,
    #[serde(default, deserialize_with = "lenient")]
    failure_reason: Option<TaskFailure>,
}

/// `content` of a succeeded task.
#[derive(Debug, serde::Deserialize)]
struct TaskContent {
    #[serde(default, deserialize_with = "lenient")]
    video_url: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    last_frame_url: Option<String>,
}

/// `usage`: output tokens (`total_tokens` equals them; either is read).
#[derive(Debug, serde::Deserialize)]
struct TaskUsage {
    #[serde(default, deserialize_with = "lenient")]
    completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    total_tokens: Option<u64>,
}

/// `error` (task objects) or `failure_reason` (list items).
#[derive(Debug, serde::Deserialize)]
struct TaskFailure {
    #[serde(default, deserialize_with = "lenient")]
    code: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    message: Option<String>,
}

/// A field read as `T`, or as absent when it holds something else (`null` included).
fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    Ok(serde_json::from_value(Value::deserialize(d)?).ok())
}

/// What a task object says of the task.
pub fn parse_task(bytes: &[u8]) -> Result<VideoTaskState, UpstreamError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| UpstreamError::Malformed(format!("the task answer is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(UpstreamError::Malformed("the task answer is JSON but not an object".into()));
    }
    let task: TaskObject =
        serde_json::from_value(value).map_err(|e| UpstreamError::Malformed(format!("the task answer: {e}")))?;
    let status = task.status.ok_or_else(|| UpstreamError::Malformed("the task answer has no status".into()))?;
    Ok(match status.as_str() {
        "queued" => VideoTaskState::Queued,
        "running" => VideoTaskState::Running,
        "succeeded" => {
            let usage = task.usage;
            let tokens = usage
                .clone()
                .and_then(|u| serde_json::from_value::<TaskUsage>(Value::Object(u)).ok())
                .and_then(|u| u.completion_tokens.or(u.total_tokens))
                .ok_or_else(|| UpstreamError::Malformed("a succeeded task without usage.completion_tokens".into()))?;
            let content = task.content;
            let (output_url, last_frame_url) = content.map_or((None, None), |c| (c.video_url, c.last_frame_url));
            VideoTaskState::Succeeded {
                output_url,
                last_frame_url,
                tokens,
                usage: usage.map(|u| Value::Object(u).to_string()).unwrap_or_default(),
            }
        }
        "failed" => {
            let failure = task.error.or(task.failure_reason);
            let (code, message) = failure.map_or((None, None), |f| (f.code, f.message));
            VideoTaskState::Failed {
                code: code.unwrap_or_else(|| "upstream_task_failed".into()),
                message: message.unwrap_or_else(|| "the upstream task failed".into()),
            }
        }
        "cancelled" => VideoTaskState::Cancelled,
        "expired" => VideoTaskState::Expired,
        other => return Err(UpstreamError::Malformed(format!("unknown task status {other:?}"))),
    })
}

#[cfg(test)]
mod tests;
