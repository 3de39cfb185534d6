//! Request validation: turns raw request values into checked domain inputs, or an `invalid_request` message.
//!
//! Knows the spec's limits but nothing of HTTP: callers hand over decoded values (chat) or the body's
//! bytes (images, audio: typed requests with no additional properties).

mod audio;
mod chat;
mod image;
mod manage;
pub mod media;
mod native;
mod raw;
mod reports;
pub mod schema;
mod shape;
pub mod sniff;
mod speech;
mod video;

pub use audio::{
    AudioConfig, AudioFormat, AudioPlan, AudioReference, AudioRequest, MAX_REFERENCES, PITCH_RANGE, RATE_RANGE,
    REFERENCE_FIELDS, SampleRate, TEXT_PROMPT_MAX_CHARS, TEXT_PROMPT_MIN_CHARS, check_audio_request,
    parse_audio_request,
};
pub use chat::{
    ChatMessage, ChatPlan, ChatRequest, ContentPart, MAX_OUTPUT_TOKENS, MessageContent, Object, ROLES, Role, Stop,
    StreamOptions, TEMPLATE_OVERHEAD_TOKENS, Thinking, ToolChoice, chat_request,
};
use domain::StatusFilter;
use domain::ports::{PageRequest, TaskFilter};
pub use image::{
    ImagePlan, ImageRefs, ImageRequest, OptimizePromptOptions, OutputFormat, PromptMode, PromptThinking,
    ResponseFormat, SequentialMode, SequentialOptions, check_image_request, parse_image_request,
};
pub use manage::{
    AlertBody, CheckoutBody, KeyLimitName, KeyLimitsBody, ListQuery, ListText, MaintenanceBody, ModelPatchBody,
    NewKeyBody, NewUserBody, NewVouchersBody, RedeemBody, TopupBody, USAGE_DEFAULT_DAYS, USAGE_MAX_DAYS, UsageQuery,
    UserPatchBody, list_query, manage_body, usage_query,
};
pub use native::{
    CountTokensRequest, MessagesRequest, NativePlan, ResponsesRequest, TextOrBlocks, Truncation, count_tokens_estimate,
    messages_request, responses_request,
};
pub use raw::RawBody;
pub use reports::{DayRange, export_range, revenue_query, statement_month};
pub use speech::{STOCK_VOICES, SpeechFormat, SpeechRequest, speech_to_audio};
/// The rule check every management body passes (`manage_body`), for callers that name the bound.
pub use validator::Validate;
pub use video::{
    MediaInput, VIDEO_MAX_MEDIA, VIDEO_PROMPT_MAX_CHARS, VideoPlan, VideoRequest, check_video_request,
    parse_video_request,
};

/// A request that breaks a rule of the interface; the message names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// A value outside its rule: 400 `invalid_request`.
    #[error("{0}")]
    Invalid(String),
    /// Inline data (Base64) above its size limit: 413 `request_too_large`.
    #[error("{0}")]
    TooLarge(String),
}

impl ValidationError {
    /// The human-readable text.
    pub fn message(&self) -> &str {
        match self {
            ValidationError::Invalid(m) | ValidationError::TooLarge(m) => m,
        }
    }
}

/// The page sizes `GET /api/v1/tasks` accepts.
pub const TASK_PAGE_SIZES: [u64; 3] = [20, 50, 100];

/// A checked `GET /api/v1/tasks` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskListQuery {
    /// Page and size.
    pub page: PageRequest,
    /// Optional state (or group) and kind filter.
    pub filter: TaskFilter,
}

/// Checks the task list's query parameters (already percent-decoded): `page` ≥ 1 (default 1),
/// `page_size` one of 20, 50, 100 (default 20), `status` one of the seven states or `running` /
/// `completed`, `kind` one of `language`, `image`, `audio`, `video` (an addition of this gateway,
/// for the console). Unknown parameters, repeats and empty values are refused.
pub fn task_list_query<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<TaskListQuery, ValidationError> {
    let mut page = None;
    let mut page_size = None;
    let mut status = None;
    let mut kind = None;
    for (name, value) in params {
        let slot_taken = match name {
            "page" => page.replace(parse_page(value)?).is_some(),
            "page_size" => page_size.replace(parse_page_size(value)?).is_some(),
            "status" => status.replace(parse_status(value)?).is_some(),
            "kind" => kind.replace(parse_kind(value)?).is_some(),
            other => return Err(ValidationError::Invalid(format!("unknown query parameter {other:?}"))),
        };
        if slot_taken {
            return Err(ValidationError::Invalid(format!("query parameter {name:?} given more than once")));
        }
    }
    let page = PageRequest { page: page.unwrap_or(1), page_size: page_size.unwrap_or(20) };
    Ok(TaskListQuery { page, filter: TaskFilter { status, kind } })
}

fn parse_kind(value: &str) -> Result<domain::ModelKind, ValidationError> {
    value.parse().map_err(|_| {
        ValidationError::Invalid(format!("kind must be one of language, image, audio, video; got {value:?}"))
    })
}

fn parse_page(value: &str) -> Result<u64, ValidationError> {
    match value.parse::<u64>() {
        Ok(n) if n >= 1 && value.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(ValidationError::Invalid(format!("page must be an integer of at least 1, got {value:?}"))),
    }
}

fn parse_page_size(value: &str) -> Result<u64, ValidationError> {
    match value.parse::<u64>() {
        Ok(n) if TASK_PAGE_SIZES.contains(&n) && value.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(ValidationError::Invalid(format!("page_size must be one of 20, 50 or 100, got {value:?}"))),
    }
}

fn parse_status(value: &str) -> Result<StatusFilter, ValidationError> {
    value.parse().map_err(|_| {
        ValidationError::Invalid(format!(
            "status must be one of submitting, queued, processing, succeeded, failed, cancelled, expired, running, completed; got {value:?}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::TaskStatus;

    fn check(query: &[(&str, &str)]) -> Result<TaskListQuery, ValidationError> {
        task_list_query(query.iter().copied())
    }

    #[test]
    fn defaults() {
        let q = check(&[]).expect("empty query is valid");
        assert_eq!(q.page, PageRequest { page: 1, page_size: 20 });
        assert_eq!(q.filter.status, None);
    }

    #[test]
    fn page_edges() {
        assert_eq!(check(&[("page", "1")]).map(|q| q.page.page), Ok(1));
        assert_eq!(check(&[("page", "18446744073709551615")]).map(|q| q.page.page), Ok(u64::MAX));
        for bad in ["0", "-1", "", "1.0", "+1", "abc", "18446744073709551616"] {
            assert!(check(&[("page", bad)]).is_err(), "page={bad:?}");
        }
    }

    #[test]
    fn page_size_edges() {
        for ok in [20, 50, 100] {
            assert_eq!(check(&[("page_size", &ok.to_string())]).map(|q| q.page.page_size), Ok(ok));
        }
        for bad in ["19", "21", "49", "51", "99", "101", "0", "", "20.0"] {
            assert!(check(&[("page_size", bad)]).is_err(), "page_size={bad:?}");
        }
    }

    #[test]
    fn status_values_and_groups() {
        for s in TaskStatus::ALL {
            assert_eq!(check(&[("status", s.as_str())]).map(|q| q.filter.status), Ok(Some(StatusFilter::Is(s))));
        }
        assert_eq!(check(&[("status", "running")]).map(|q| q.filter.status), Ok(Some(StatusFilter::Running)));
        assert_eq!(check(&[("status", "completed")]).map(|q| q.filter.status), Ok(Some(StatusFilter::Completed)));
        assert_eq!(check(&[("kind", "video")]).map(|q| q.filter.kind), Ok(Some(domain::ModelKind::Video)));
        for bad in ["", "Video", "chat"] {
            assert!(check(&[("kind", bad)]).is_err(), "kind={bad:?}");
        }
        for bad in ["", "RUNNING", "done", "queued,failed"] {
            assert!(check(&[("status", bad)]).is_err(), "status={bad:?}");
        }
    }

    #[test]
    fn no_language_model_exceeds_the_interface_output_cap() {
        let catalog = catalog::Catalog::builtin().expect("builtin catalog");
        for def in &catalog.models {
            if let Some(limits) = def.language_limits() {
                assert!(limits.max_completion_tokens() <= MAX_OUTPUT_TOKENS, "{}", def.name);
            }
        }
    }

    #[test]
    fn unknown_and_repeated_parameters() {
        assert!(check(&[("limit", "10")]).is_err());
        assert!(check(&[("page", "1"), ("page", "2")]).is_err());
    }
}
