//! OpenAI's `POST /v1/audio/speech` body, and the audio generation request it becomes: the text is
//! `text_prompt`, a voice that is not one of OpenAI's stock names is the upstream speaker,
//! `response_format` is `audio_config.format`, and `speed` is `audio_config.speech_rate`. The
//! audio request is then checked and billed exactly as `POST /api/v1/audio/generations` is.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use validator::Validate;

use crate::{ValidationError, shape};

/// OpenAI's stock voice names: a call naming one gets the model's default voice.
pub const STOCK_VOICES: [&str; 13] =
    ["alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar"];

/// OpenAI's `response_format` values this gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpeechFormat {
    /// MP3.
    Mp3,
    /// Opus in Ogg.
    Opus,
    /// WAV.
    Wav,
    /// Raw PCM.
    Pcm,
}

impl SpeechFormat {
    /// The audio model's `audio_config.format` for it.
    fn audio_format(self) -> &'static str {
        match self {
            SpeechFormat::Mp3 => "mp3",
            SpeechFormat::Opus => "ogg_opus",
            SpeechFormat::Wav => "wav",
            SpeechFormat::Pcm => "pcm",
        }
    }
}

/// `POST /v1/audio/speech` (OpenAI's shape). `instructions` and an `sse` stream are not served.
#[derive(Debug, Clone, PartialEq, Deserialize, Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpeechRequest {
    /// An audio model of the catalog.
    pub model: String,
    /// The text to speak, 1..3000 characters.
    #[validate(length(min = 1, max = crate::audio::TEXT_PROMPT_MAX_CHARS))]
    pub input: String,
    /// A speaker id of the upstream, or one of OpenAI's stock names (the model's default voice).
    #[validate(length(min = 1, max = 256))]
    pub voice: String,
    /// `mp3` (default), `opus`, `wav` or `pcm`.
    #[serde(default)]
    pub response_format: Option<SpeechFormat>,
    /// 0.25..4.0, default 1.
    #[serde(default)]
    #[validate(range(min = 0.25, max = 4.0))]
    pub speed: Option<f64>,
    /// `audio` only.
    #[serde(default)]
    pub stream_format: Option<String>,
}

/// The audio generation request (the body of `POST /api/v1/audio/generations`) that `body`, an
/// OpenAI speech request, asks for, and the format asked for.
#[allow(clippy::float_arithmetic)] // `speed` is a pace, not an amount of money
pub fn speech_to_audio(body: &[u8]) -> Result<(Vec<u8>, SpeechFormat), ValidationError> {
    let request: SpeechRequest = shape::parse_body(body)?;
    request.validate().map_err(|e| ValidationError::Invalid(shape::validator_message(&e)))?;
    if request.stream_format.as_deref().is_some_and(|f| f != "audio") {
        return Err(ValidationError::Invalid("stream_format must be audio: speech is not streamed here".into()));
    }
    let format = request.response_format.unwrap_or(SpeechFormat::Mp3);
    let mut config = json!({"format": format.audio_format()});
    if let Some(speed) = request.speed.filter(|s| (s - 1.0).abs() > f64::EPSILON) {
        // 1 is the normal pace; the audio model's speech_rate runs −50 (half) .. 100 (double).
        let rate = ((speed - 1.0) * 100.0).round().clamp(-50.0, 100.0);
        config["speech_rate"] = json!(rate);
    }
    let mut audio = json!({"model": request.model, "text_prompt": request.input, "audio_config": config});
    if !STOCK_VOICES.contains(&request.voice.as_str()) {
        audio["references"] = json!([{"speaker": request.voice}]);
    }
    let bytes = serde_json::to_vec(&audio).map_err(|e| ValidationError::Invalid(e.to_string()))?;
    Ok((bytes, format))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn audio(body: Value) -> Result<Value, String> {
        let (bytes, _) = speech_to_audio(body.to_string().as_bytes()).map_err(|e| e.to_string())?;
        Ok(serde_json::from_slice(&bytes).expect("JSON"))
    }

    #[test]
    fn an_openai_speech_request_becomes_the_audio_request() {
        let got = audio(json!({"model": "AudioGen-1.0", "input": "Hi.", "voice": "alloy"})).expect("ok");
        assert_eq!(got, json!({"model": "AudioGen-1.0", "text_prompt": "Hi.", "audio_config": {"format": "mp3"}}));
        let got =
            audio(json!({"model": "AudioGen-1.0", "input": "Hi.", "voice": "en_female_x", "response_format": "opus",
                               "speed": 2.0}))
            .expect("ok");
        assert_eq!(got["references"], json!([{"speaker": "en_female_x"}]));
        assert_eq!(got["audio_config"], json!({"format": "ogg_opus", "speech_rate": 100.0}));
        assert_eq!(
            audio(json!({"model": "m", "input": "x", "voice": "v", "speed": 0.5})).expect("ok")["audio_config"]["speech_rate"],
            json!(-50.0)
        );
    }

    #[test]
    fn limits_just_inside_and_outside() {
        let with = |extra: Value| {
            let mut body = json!({"model": "AudioGen-1.0", "input": "Hi.", "voice": "alloy"});
            for (k, v) in extra.as_object().expect("object") {
                body[k] = v.clone();
            }
            audio(body)
        };
        assert!(with(json!({"speed": 0.25})).is_ok());
        assert!(with(json!({"speed": 4.0})).is_ok());
        assert!(with(json!({"speed": 0.24})).expect_err("slow").contains("speed"));
        assert!(with(json!({"speed": 4.01})).expect_err("fast").contains("speed"));
        assert!(with(json!({"input": "x".repeat(3000)})).is_ok());
        assert!(with(json!({"input": "x".repeat(3001)})).expect_err("long").contains("input"));
        assert!(with(json!({"input": ""})).expect_err("empty").contains("input"));
        assert!(with(json!({"response_format": "aac"})).expect_err("aac").contains("response_format"));
        assert!(with(json!({"stream_format": "sse"})).expect_err("sse").contains("stream_format"));
        assert!(with(json!({"stream_format": "audio"})).is_ok());
        assert!(with(json!({"instructions": "calm"})).expect_err("instructions").contains("instructions"));
        assert!(audio(json!({"model": "m", "input": "x"})).expect_err("voice").contains("voice"));
    }
}
