//! JSON Schemas of request bodies, derived with `schemars` from the typed requests the checks
//! deserialise into (so the document and the validation cannot drift), then narrowed by one
//! model's typed catalog limits (the same values the checks read).
//!
//! The interface's optional request fields are not nullable (the typed requests refuse an explicit
//! `null`), so request schemas drop the `null` that `Option` would otherwise add.

use catalog::ModelDef;
use domain::ModelKind;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::{AudioRequest, ChatRequest, ImageRequest, VideoRequest};

/// Removes `null` from the schema of every optional property in `schema` (the interface's optional
/// request fields are never null; a required field that may be null, such as a message's
/// `content`, keeps it).
pub fn strip_null(schema: &mut Value) {
    match schema {
        Value::Object(o) => {
            let required: Vec<String> = o
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            if let Some(Value::Object(properties)) = o.get_mut("properties") {
                for (name, property) in properties.iter_mut() {
                    if !required.contains(name) {
                        drop_null(property);
                    }
                }
            }
            o.values_mut().for_each(strip_null);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_null),
        _ => {}
    }
}

/// Removes `null` from one property's `type` list or `anyOf`, and a `null` default.
fn drop_null(property: &mut Value) {
    let Value::Object(o) = property else { return };
    if o.get("default").is_some_and(Value::is_null) {
        o.remove("default");
    }
    if let Some(Value::Array(types)) = o.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            o.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(any)) = o.get_mut("anyOf") {
        any.retain(|s| s.get("type").and_then(Value::as_str) != Some("null"));
        if any.len() == 1 {
            let only = any.remove(0);
            o.remove("anyOf");
            if let Value::Object(inner) = only {
                o.extend(inner);
            }
        }
    }
}

/// The schema of `T` as a self-contained JSON Schema 2020-12 document (definitions under
/// `$defs`), with `null` removed.
pub fn request_root<T: JsonSchema>() -> Value {
    let mut schema = SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<T>().to_value();
    strip_null(&mut schema);
    schema
}

/// The JSON Schema of a request body for model `def` (at its `endpoint`): its kind's typed
/// request, with `model` fixed to the model's name and the per-model bounds of its limits (a field
/// the model does not take becomes `false`: not allowed). `None` only when the catalog entry lacks
/// its kind's limits.
pub fn request_schema(def: &ModelDef) -> Option<Value> {
    let (mut schema, narrow): (Value, Map<String, Value>) = match def.kind {
        ModelKind::Image => {
            let limits = def.image_limits()?;
            let prompt = json!({"minLength": limits.prompt.min_chars, "maxLength": limits.prompt.max_chars});
            (request_root::<ImageRequest>(), Map::from_iter([("prompt".to_owned(), prompt)]))
        }
        ModelKind::Audio => {
            let limits = def.audio_limits()?;
            let prompt = json!({"minLength": limits.text_prompt.min_chars, "maxLength": limits.text_prompt.max_chars});
            (request_root::<AudioRequest>(), Map::from_iter([("text_prompt".to_owned(), prompt)]))
        }
        ModelKind::Video => {
            let limits = def.video_limits()?;
            let narrow = Map::from_iter([
                ("prompt".to_owned(), json!({"maxLength": limits.prompt.max_chars})),
                ("resolution".to_owned(), json!({"enum": limits.resolutions})),
            ]);
            (request_root::<VideoRequest>(), narrow)
        }
        ModelKind::Language => {
            let limits = def.language_limits()?;
            let tokens = json!({"minimum": limits.max_tokens.min, "maximum": limits.max_tokens.max});
            let sampling = limits.sampling.as_ref();
            let range = |r: Option<&catalog::limits::SamplingRange>, min: f64, max: f64| match r {
                Some(r) => json!({"minimum": r.min, "maximum": r.max}),
                None => json!({"minimum": min, "maximum": max}),
            };
            let mut narrow = Map::from_iter([
                ("messages".to_owned(), json!({"minItems": limits.messages.min, "maxItems": limits.messages.max})),
                ("max_tokens".to_owned(), tokens.clone()),
                ("max_completion_tokens".to_owned(), tokens),
                ("temperature".to_owned(), range(sampling.map(|s| &s.temperature), 0.0, 2.0)),
                ("top_p".to_owned(), range(sampling.map(|s| &s.top_p), 0.0, 1.0)),
                ("stop".to_owned(), json!({"maxItems": limits.stop.max_items})),
            ]);
            narrow.insert(
                "thinking".to_owned(),
                limits
                    .thinking
                    .as_ref()
                    .map_or(Value::Bool(false), |t| json!({"properties": {"type": {"enum": t.types}}})),
            );
            narrow.insert(
                "reasoning_effort".to_owned(),
                limits.reasoning_effort.as_ref().map_or(Value::Bool(false), |r| json!({"enum": r.values})),
            );
            (request_root::<ChatRequest>(), narrow)
        }
    };
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert("model".into(), json!({"type": "string", "const": def.name}));
        for (field, bounds) in narrow {
            match (properties.get_mut(&field), bounds) {
                (Some(Value::Object(property)), Value::Object(bounds)) => property.extend(bounds),
                (Some(property), Value::Bool(false)) => *property = Value::Bool(false),
                _ => {}
            }
        }
    }
    Some(schema)
}

#[cfg(test)]
mod tests {
    use catalog::Catalog;

    use super::*;

    #[test]
    fn typed_requests_have_narrowed_schemas_without_null() {
        let catalog = Catalog::builtin().expect("catalog");
        for def in &catalog.models {
            let schema = request_schema(def).unwrap_or_else(|| panic!("{}: no schema", def.name));
            let mut text = schema.to_string();
            if def.kind == ModelKind::Language {
                // A message's content is the one required field that may be null.
                let content = schema["$defs"]["MessageContent"].to_string();
                assert!(content.contains("\"null\""), "{}: {content}", def.name);
                text = text.replace(&content, "");
            } else {
                assert_eq!(schema["additionalProperties"], false, "{}: no additional properties", def.name);
            }
            assert!(!text.contains("\"null\"") && !text.contains(":null"), "{}: {text}", def.name);
            assert_eq!(schema["properties"]["model"]["const"], def.name.as_str(), "{}", def.name);
        }
        let image = catalog.get("Vendor-Imagegen-5.0-pro").expect("image model");
        let schema = request_schema(image).expect("schema");
        assert_eq!(schema["properties"]["prompt"]["maxLength"], 400_000);
        let audio = catalog.get("AudioGen-1.0").expect("audio model");
        let schema = request_schema(audio).expect("schema");
        assert_eq!(schema["properties"]["text_prompt"]["maxLength"], 3000);
        assert_eq!(schema["$defs"]["AudioConfig"]["properties"]["sample_rate"]["$ref"], "#/$defs/SampleRate");
        let pro = request_schema(catalog.get("LangB-2.0-pro").expect("model")).expect("schema");
        assert_eq!(pro["properties"]["max_tokens"]["maximum"], 131_072);
        assert_eq!(
            pro["properties"]["reasoning_effort"]["enum"],
            serde_json::json!(["minimal", "low", "medium", "high"])
        );
        let unthinking = request_schema(catalog.get("LangC-5.2").expect("model")).expect("schema");
        assert_eq!(unthinking["properties"]["thinking"], false, "LangC-5.2 takes no thinking");
        assert_eq!(unthinking["required"], serde_json::json!(["messages", "model"]));
    }
}

#[cfg(test)]
mod shape_tests {
    use crate::{parse_audio_request, parse_image_request, parse_video_request};

    /// serde fills a derived struct from an array and an enum from a one-key object; the typed
    /// requests take objects and plain strings only, as their schemas say.
    #[test]
    fn nested_objects_and_enums_take_their_documented_form_only() {
        let image = |extra: &str| {
            parse_image_request(format!(r#"{{"model": "m", "prompt": "p", {extra}}}"#).as_bytes()).map(|_| ())
        };
        assert!(image(r#""response_format": "url""#).is_ok());
        assert!(image(r#""response_format": {"url": null}"#).is_err());
        assert!(image(r#""optimize_prompt_options": {"mode": "fast"}"#).is_ok());
        assert!(image(r#""optimize_prompt_options": ["fast"]"#).is_err());
        assert!(image(r#""sequential_image_generation_options": [3]"#).is_err());
        let audio = |extra: &str| {
            parse_audio_request(format!(r#"{{"model": "m", "text_prompt": "t", {extra}}}"#).as_bytes()).map(|_| ())
        };
        assert!(audio(r#""audio_config": {"format": "mp3"}"#).is_ok());
        assert!(audio(r#""audio_config": ["mp3"]"#).is_err());
        assert!(audio(r#""audio_config": {"format": {"mp3": null}}"#).is_err());
        assert!(audio(r#""references": [["spk"]]"#).is_err());
        let video =
            |extra: &str| parse_video_request(format!(r#"{{"model": "m", "prompt": "p", {extra}}}"#).as_bytes());
        assert!(video(r#""ratio": "16:9""#).is_ok());
        assert!(video(r#""ratio": {"16:9": null}"#).is_err());
        assert!(video(r#""media": [["image", "https://example.com/a.png"]]"#).is_err());
        assert!(video(r#""media": [{"type": {"image": null}, "url": "https://example.com/a.png"}]"#).is_err());
    }
}
