//! `POST <platform base>/tts/create` (upstream-wire §4): the answer read into a
//! [`domain::ports::SpeechAnswer`]. The service answers HTTP 200 with a non-zero `code` when it
//! refuses, and may send the audio as a `data:` URL; the client always gets raw Base64.

use domain::ports::{SpeechAnswer, UpstreamError};
use serde_json::Value;

/// Reads a 2xx speech answer: a non-zero `code` is `Rejected` (a missing code, or 0, is
/// success); an answer without a non-negative `original_duration` or without `audio` is
/// `Malformed`.
pub fn read_answer(bytes: &[u8]) -> Result<SpeechAnswer, UpstreamError> {
    let mut answer: Value =
        serde_json::from_slice(bytes).map_err(|e| UpstreamError::Malformed(format!("the answer is not JSON: {e}")))?;
    let Value::Object(object) = &mut answer else {
        return Err(UpstreamError::Malformed("the answer is not a JSON object".into()));
    };
    let code = object.get("code").and_then(Value::as_i64).unwrap_or(0);
    if code != 0 {
        let message = object.get("message").and_then(Value::as_str).unwrap_or_default().to_owned();
        return Err(UpstreamError::Rejected { code: code.to_string(), message });
    }
    let seconds = object
        .get("original_duration")
        .and_then(Value::as_number)
        .map(ToString::to_string)
        .filter(|text| !text.starts_with('-'))
        .ok_or_else(|| UpstreamError::Malformed("the speech answer has no usable original_duration".into()))?;
    let audio = match object.get("audio").and_then(Value::as_str) {
        Some(text) => text.split_once(";base64,").map_or(text, |(_, data)| data).to_owned(),
        None => return Err(UpstreamError::Malformed("the speech answer has no audio".into())),
    };
    object.insert("audio".into(), Value::String(audio));
    object.entry("code").or_insert(Value::from(0));
    object.entry("message").or_insert(Value::String(String::new()));
    let body = serde_json::to_vec(&answer).map_err(|e| UpstreamError::Malformed(e.to_string()))?;
    Ok(SpeechAnswer { body, seconds })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(answer: &Value) -> Result<SpeechAnswer, UpstreamError> {
        read_answer(answer.to_string().as_bytes())
    }

    #[test]
    fn the_duration_keeps_its_exact_text_and_data_urls_become_raw_base64() {
        let first =
            read(&json!({"code": 0, "audio": "AAAA", "duration": 74.7, "original_duration": 74.7})).expect("ok");
        assert_eq!(first.seconds, "74.7");
        assert_eq!(read(&json!({"audio": "AAAA", "original_duration": 0.6})).expect("ok").seconds, "0.6");
        assert_eq!(read(&json!({"audio": "AAAA", "original_duration": 250})).expect("ok").seconds, "250");
        let done =
            read(&json!({"audio": "data:audio/wav;base64,UklGRg==", "original_duration": 1, "x": [1]})).expect("ok");
        let body: Value = serde_json::from_slice(&done.body).expect("body");
        assert_eq!(body, json!({"audio": "UklGRg==", "original_duration": 1, "x": [1], "code": 0, "message": ""}));
    }

    #[test]
    fn refusals_and_answers_without_audio_or_duration_are_errors() {
        let refused = read(&json!({"code": 45000001, "message": "text_prompt is invalid"}));
        assert!(matches!(refused, Err(UpstreamError::Rejected { ref code, ref message })
            if code == "45000001" && message == "text_prompt is invalid"));
        assert!(matches!(read(&json!({"audio": "AA"})), Err(UpstreamError::Malformed(_))));
        assert!(matches!(read(&json!({"original_duration": 1})), Err(UpstreamError::Malformed(_))));
        assert!(matches!(read(&json!({"audio": "AA", "original_duration": -1})), Err(UpstreamError::Malformed(_))));
        assert!(matches!(read(&json!({"audio": "AA", "original_duration": "1"})), Err(UpstreamError::Malformed(_))));
        assert!(matches!(read(&json!([])), Err(UpstreamError::Malformed(_))));
    }
}
