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

use crate::{AudioRequest, ImageRequest, VideoRequest};

/// Removes `null` from every `type` list and `anyOf` of `schema` (request fields are never null).
pub fn strip_null(schema: &mut Value) {
    match schema {
        Value::Object(o) => {
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
            o.values_mut().for_each(strip_null);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_null),
        _ => {}
    }
}

/// The schema of `T` as a self-contained JSON Schema 2020-12 document (definitions under
/// `$defs`), with `null` removed.
pub fn request_root<T: JsonSchema>() -> Value {
    let mut schema = SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<T>().to_value();
    strip_null(&mut schema);
    schema
}

/// The JSON Schema of a request body for model `def`: its kind's typed request, with `model` fixed
/// to the model's name and the per-model bounds of its limits. `None` for a kind whose body is not
/// a typed request (language: its checks read the JSON object field by field).
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
        ModelKind::Language => return None,
    };
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert("model".into(), json!({"type": "string", "const": def.name}));
        for (field, bounds) in narrow {
            if let (Some(Value::Object(property)), Value::Object(bounds)) = (properties.get_mut(&field), bounds) {
                property.extend(bounds);
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
            let Some(schema) = request_schema(def) else {
                assert_eq!(def.kind, ModelKind::Language, "{}", def.name);
                continue;
            };
            let text = schema.to_string();
            assert!(!text.contains("\"null\""), "{}: {text}", def.name);
            assert_eq!(schema["properties"]["model"]["const"], def.name.as_str(), "{}", def.name);
            assert_eq!(schema["additionalProperties"], false, "{}: no additional properties", def.name);
        }
        let image = catalog.get("Vendor-Imagegen-5.0-pro").expect("image model");
        let schema = request_schema(image).expect("schema");
        assert_eq!(schema["properties"]["prompt"]["maxLength"], 400_000);
        let audio = catalog.get("AudioGen-1.0").expect("audio model");
        let schema = request_schema(audio).expect("schema");
        assert_eq!(schema["properties"]["text_prompt"]["maxLength"], 3000);
        assert_eq!(schema["$defs"]["AudioConfig"]["properties"]["sample_rate"]["$ref"], "#/$defs/SampleRate");
    }
}
