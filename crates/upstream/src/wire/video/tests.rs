//! The video task's wire shapes against upstream-wire §2's documented examples.

use domain::ports::{AssetKind, UpstreamError, VideoTaskRequest, VideoTaskState};
use domain::{Ratio, Resolution};
use serde_json::{Value, json};

use super::{create_body, parse_created, parse_task};

fn parse(v: Value) -> Result<VideoTaskState, UpstreamError> {
    parse_task(v.to_string().as_bytes())
}

fn request(references: Vec<(AssetKind, String)>, deadline_secs: u64) -> VideoTaskRequest {
    VideoTaskRequest {
        model: "doubao-seedance-2-0-260128".into(),
        prompt: Some("镜头缓慢推进…".into()),
        references,
        resolution: Some(Resolution::P720),
        ratio: Some(Ratio::Wide),
        duration: Some(5),
        generate_audio: Some(true),
        deadline_secs,
    }
}

fn written(request: &VideoTaskRequest) -> Value {
    serde_json::from_slice(&create_body(request).expect("written")).expect("JSON")
}

#[test]
fn the_create_body_is_the_documented_shape() {
    let references = vec![
        (AssetKind::Image, "asset-1".to_owned()),
        (AssetKind::Video, "asset-2".to_owned()),
        (AssetKind::Audio, "asset-3".to_owned()),
    ];
    let expected = json!({"model": "doubao-seedance-2-0-260128",
        "content": [
            {"type": "text", "text": "镜头缓慢推进…"},
            {"type": "image_url", "image_url": {"url": "asset://asset-1"}, "role": "reference_image"},
            {"type": "video_url", "video_url": {"url": "asset://asset-2"}, "role": "reference_video"},
            {"type": "audio_url", "audio_url": {"url": "asset://asset-3"}, "role": "reference_audio"}],
        "resolution": "720p", "ratio": "16:9", "duration": 5, "generate_audio": true,
        "return_last_frame": true, "execution_expires_after": 172_800});
    assert_eq!(written(&request(references, 172_800)), expected);
}

#[test]
fn the_deadline_is_kept_in_range_and_absent_options_are_not_sent() {
    assert_eq!(written(&request(Vec::new(), 60))["execution_expires_after"], json!(3600));
    assert_eq!(written(&request(Vec::new(), 10_000_000))["execution_expires_after"], json!(259_200));
    let bare = VideoTaskRequest {
        prompt: None,
        resolution: None,
        ratio: None,
        duration: None,
        generate_audio: None,
        ..request(vec![(AssetKind::Image, "a".into())], 7200)
    };
    let expected = json!({"model": "doubao-seedance-2-0-260128",
        "content": [{"type": "image_url", "image_url": {"url": "asset://a"}, "role": "reference_image"}],
        "return_last_frame": true, "execution_expires_after": 7200});
    assert_eq!(written(&bare), expected);
}

#[test]
fn the_documented_task_object_is_read() {
    let documented = json!({"id": "cgt-2025", "model": "doubao-seedance-1-0-pro-250528", "status": "succeeded",
        "content": {"video_url": "https://v.mp4", "last_frame_url": "https://f.png"},
        "seed": 10, "resolution": "720p", "ratio": "16:9", "duration": 5, "framespersecond": 24,
        "service_tier": "default", "execution_expires_after": 172_800,
        "usage": {"completion_tokens": 108_900, "total_tokens": 108_900},
        "created_at": 1_743_414_619, "updated_at": 1_743_414_673});
    let Ok(VideoTaskState::Succeeded { output_url, last_frame_url, tokens, usage }) = parse(documented) else {
        panic!("not read as succeeded");
    };
    assert_eq!((output_url.as_deref(), last_frame_url.as_deref()), (Some("https://v.mp4"), Some("https://f.png")));
    assert_eq!(tokens, 108_900);
    let usage: Value = serde_json::from_str(&usage).expect("usage is JSON");
    assert_eq!(usage, json!({"completion_tokens": 108_900, "total_tokens": 108_900}));
}

#[test]
fn states_are_read_leniently() {
    assert_eq!(parse(json!({"status": "queued"})), Ok(VideoTaskState::Queued));
    assert_eq!(parse(json!({"status": "running", "content": 5})), Ok(VideoTaskState::Running));
    let only_total = parse(json!({"status": "succeeded", "content": null, "usage": {"total_tokens": 7}}));
    assert!(matches!(only_total, Ok(VideoTaskState::Succeeded { tokens: 7, output_url: None, .. })));
    let failed =
        parse(json!({"status": "failed", "error": {"code": "OutputVideoSensitiveContentDetected", "message": "m"}}));
    assert_eq!(
        failed,
        Ok(VideoTaskState::Failed { code: "OutputVideoSensitiveContentDetected".into(), message: "m".into() })
    );
    let listed = parse(json!({"status": "failed", "error": null, "failure_reason": {"code": "X", "message": "y"}}));
    assert_eq!(listed, Ok(VideoTaskState::Failed { code: "X".into(), message: "y".into() }));
    let bare = parse(json!({"status": "failed"}));
    assert_eq!(
        bare,
        Ok(VideoTaskState::Failed { code: "upstream_task_failed".into(), message: "the upstream task failed".into() })
    );
    assert_eq!(parse(json!({"status": "cancelled"})), Ok(VideoTaskState::Cancelled));
    assert_eq!(parse(json!({"status": "expired", "error": null})), Ok(VideoTaskState::Expired));
    assert!(parse(json!({"status": "succeeded"})).is_err(), "no usage: cannot be billed");
    assert!(parse(json!({"status": "succeeded", "usage": {"completion_tokens": -1}})).is_err());
    assert!(parse(json!({"status": "weird"})).is_err());
    assert!(parse(json!({"status": 1})).is_err());
    assert!(parse(json!([{"status": "queued"}])).is_err(), "an array is not a task object");
    assert!(parse_task(b"nope").is_err());
}

#[test]
fn the_create_answer_names_the_task() {
    assert_eq!(parse_created(br#"{"id":"cgt-20250331175019-68d9t"}"#), Ok("cgt-20250331175019-68d9t".into()));
    assert!(parse_created(br#"{"id":""}"#).is_err());
    assert!(parse_created(br#"{"id":1}"#).is_err());
    assert!(parse_created(b"{}").is_err());
    assert!(parse_created(b"nope").is_err());
}
