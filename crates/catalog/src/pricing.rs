//! Price sheets on the wire: `{"<rate>": {"amountMicrousd": "…", "denominator": "…", "unit": "…"}}`.
//!
//! Used by the catalog fixture, by `gateway admin price set --rates FILE.json` and by the API's model listing.
//! Amounts and denominators are written as strings of integers; on input a JSON integer is accepted too.
//! Floats, negative numbers, a denominator of 0, an empty sheet and unknown fields in a rate are refused.

use std::collections::BTreeMap;

use domain::{PriceSheet, Rate};
use serde_json::{Map, Value};

use crate::error::CatalogError;

/// The field names of one rate object, in wire order.
const RATE_FIELDS: [&str; 3] = ["amountMicrousd", "denominator", "unit"];

/// Parses and validates a price sheet from JSON text (the `--rates FILE.json` format).
///
/// ```
/// let sheet = catalog::parse_price_sheet(
///     r#"{"output_audio_seconds": {"amountMicrousd": "2500", "denominator": 1, "unit": "second"}}"#,
/// )?;
/// assert_eq!(sheet.rate("output_audio_seconds").map(|r| r.amount_microusd), Some(2500));
/// # Ok::<(), catalog::CatalogError>(())
/// ```
pub fn parse_price_sheet(json: &str) -> Result<PriceSheet, CatalogError> {
    let value: Value =
        serde_json::from_str(json).map_err(|e| CatalogError::PriceSheet(format!("not valid JSON: {e}")))?;
    price_sheet_from_value(&value)
}

/// Converts and validates a price sheet already parsed as JSON (an object of rate name → rate).
pub fn price_sheet_from_value(value: &Value) -> Result<PriceSheet, CatalogError> {
    let Value::Object(entries) = value else {
        return Err(CatalogError::PriceSheet(format!(
            "expected a JSON object of rate name → {{amountMicrousd, denominator, unit}}, found {}",
            type_name(value)
        )));
    };
    let mut rates = BTreeMap::new();
    for (name, rate) in entries {
        if name.trim().is_empty() {
            return Err(CatalogError::PriceSheet("a rate name must not be empty".into()));
        }
        let rate = rate_from_value(rate).map_err(|msg| CatalogError::PriceSheet(format!("rate {name}: {msg}")))?;
        rates.insert(name.clone(), rate);
    }
    let sheet = PriceSheet { rates };
    sheet.validate()?;
    Ok(sheet)
}

/// The wire form of a sheet: every rate as `{amountMicrousd, denominator, unit}` with integers as strings.
pub fn price_sheet_json(sheet: &PriceSheet) -> Value {
    let rates = sheet.rates.iter().map(|(name, rate)| (name.clone(), rate_json(rate))).collect::<Map<_, _>>();
    Value::Object(rates)
}

/// The wire form of one rate.
fn rate_json(rate: &Rate) -> Value {
    let mut object = Map::new();
    object.insert(RATE_FIELDS[0].into(), Value::String(rate.amount_microusd.to_string()));
    object.insert(RATE_FIELDS[1].into(), Value::String(rate.denominator.to_string()));
    object.insert(RATE_FIELDS[2].into(), Value::String(rate.unit.clone()));
    Value::Object(object)
}

/// Reads one rate object; the message says what is wrong, without the rate's name.
fn rate_from_value(value: &Value) -> Result<Rate, String> {
    let Value::Object(fields) = value else {
        return Err(format!("expected an object {{amountMicrousd, denominator, unit}}, found {}", type_name(value)));
    };
    if let Some(extra) = fields.keys().find(|k| !RATE_FIELDS.contains(&k.as_str())) {
        return Err(format!("unknown field {extra:?}; a rate has only amountMicrousd, denominator and unit"));
    }
    let amount_microusd = integer_field(fields, "amountMicrousd")?;
    let denominator = integer_field(fields, "denominator")?;
    let unit = match fields.get("unit") {
        Some(Value::String(unit)) => unit.clone(),
        Some(other) => return Err(format!("unit must be a string, found {}", type_name(other))),
        None => return Err("missing field unit".into()),
    };
    Ok(Rate { amount_microusd, denominator, unit })
}

/// Reads a non-negative integer given as a JSON integer or as a string of decimal digits.
fn integer_field(fields: &Map<String, Value>, field: &str) -> Result<i64, String> {
    let too_large = || format!("{field} is too large");
    match fields.get(field) {
        None => Err(format!("missing field {field}")),
        Some(Value::Number(n)) => {
            if let Some(unsigned) = n.as_u64() {
                i64::try_from(unsigned).map_err(|_| too_large())
            } else if n.is_i64() {
                Err(format!("{field} must not be negative, found {n}"))
            } else {
                Err(format!("{field} must be a whole number, found {n}"))
            }
        }
        Some(Value::String(text)) => {
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{field} must be a string of decimal digits such as \"1000000\", found {text:?}"));
            }
            text.parse::<i64>().map_err(|_| too_large())
        }
        Some(other) => Err(format!("{field} must be an integer or a string of digits, found {}", type_name(other))),
    }
}

/// A short name of a JSON value's type, for messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Serde adapter for `Option<PriceSheet>` fields in the wire form: `null` or absent means unpriced.
pub(crate) mod optional_sheet {
    use domain::PriceSheet;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    /// Writes the sheet in wire form, or `null`.
    pub(crate) fn serialize<S: Serializer>(sheet: &Option<PriceSheet>, s: S) -> Result<S::Ok, S::Error> {
        sheet.as_ref().map(super::price_sheet_json).serialize(s)
    }

    /// Reads and validates a sheet in wire form, or `null`.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PriceSheet>, D::Error> {
        match Option::<Value>::deserialize(d)? {
            None | Some(Value::Null) => Ok(None),
            Some(value) => super::price_sheet_from_value(&value).map(Some).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::RateError;

    fn rate(amount: i64, denominator: i64, unit: &str) -> Rate {
        Rate { amount_microusd: amount, denominator, unit: unit.into() }
    }

    #[test]
    fn accepts_strings_and_integers() {
        let sheet = parse_price_sheet(
            r#"{
                "input_tokens": {"amountMicrousd": "140000", "denominator": "1000000", "unit": "token"},
                "output_tokens": {"amountMicrousd": 280000, "denominator": 1000000, "unit": "token"},
                "storage_token_hours": {"amountMicrousd": "8300", "denominator": 1000000, "unit": "token_hour"},
                "free": {"amountMicrousd": 0, "denominator": "1", "unit": "image"}
            }"#,
        );
        let sheet = sheet.expect("valid sheet");
        assert_eq!(sheet.rates.len(), 4);
        assert_eq!(sheet.rate("input_tokens"), Some(&rate(140_000, 1_000_000, "token")));
        assert_eq!(sheet.rate("output_tokens"), Some(&rate(280_000, 1_000_000, "token")));
        assert_eq!(sheet.rate("storage_token_hours"), Some(&rate(8_300, 1_000_000, "token_hour")));
        assert_eq!(sheet.rate("free"), Some(&rate(0, 1, "image")));
    }

    #[test]
    fn wire_form_round_trips() {
        let text = r#"{"a":{"amountMicrousd":"36000","denominator":"1","unit":"image"},"b":{"amountMicrousd":"9223372036854775807","denominator":"1000000","unit":"token"}}"#;
        let sheet = parse_price_sheet(text).expect("valid sheet");
        let wire = price_sheet_json(&sheet);
        assert_eq!(wire.to_string(), text);
        assert_eq!(price_sheet_from_value(&wire), Ok(sheet));
    }

    fn rejection(text: &str) -> String {
        let result = parse_price_sheet(text);
        assert!(result.is_err(), "{text} accepted as {result:?}");
        result.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn rejects_each_bad_form() {
        let cases = [
            ("", "not valid JSON"),
            ("[]", "expected a JSON object"),
            ("{}", "at least one rate"),
            (r#"{"x": 5}"#, "rate x: expected an object"),
            (
                r#"{"x": {"amountMicrousd": 1.5, "denominator": 1, "unit": "token"}}"#,
                "amountMicrousd must be a whole number",
            ),
            (
                r#"{"x": {"amountMicrousd": 1.0, "denominator": 1, "unit": "token"}}"#,
                "amountMicrousd must be a whole number",
            ),
            (
                r#"{"x": {"amountMicrousd": 1e3, "denominator": 1, "unit": "token"}}"#,
                "amountMicrousd must be a whole number",
            ),
            (r#"{"x": {"amountMicrousd": "1.5", "denominator": 1, "unit": "token"}}"#, "string of decimal digits"),
            (r#"{"x": {"amountMicrousd": -1, "denominator": 1, "unit": "token"}}"#, "must not be negative"),
            (r#"{"x": {"amountMicrousd": "-1", "denominator": 1, "unit": "token"}}"#, "string of decimal digits"),
            (r#"{"x": {"amountMicrousd": "+1", "denominator": 1, "unit": "token"}}"#, "string of decimal digits"),
            (r#"{"x": {"amountMicrousd": "", "denominator": 1, "unit": "token"}}"#, "string of decimal digits"),
            (r#"{"x": {"amountMicrousd": 1, "denominator": -1, "unit": "token"}}"#, "denominator must not be negative"),
            (r#"{"x": {"amountMicrousd": 1, "denominator": 0, "unit": "token"}}"#, "denominator must be at least 1"),
            (r#"{"x": {"amountMicrousd": 1, "denominator": "0", "unit": "token"}}"#, "denominator must be at least 1"),
            (r#"{"x": {"amountMicrousd": 1, "denominator": 1, "unit": ""}}"#, "unit must not be empty"),
            (r#"{"x": {"amountMicrousd": 1, "denominator": 1, "unit": 3}}"#, "unit must be a string"),
            (r#"{"x": {"amountMicrousd": 1, "denominator": 1}}"#, "missing field unit"),
            (r#"{"x": {"denominator": 1, "unit": "token"}}"#, "missing field amountMicrousd"),
            (r#"{"x": {"amountMicrousd": true, "denominator": 1, "unit": "token"}}"#, "integer or a string of digits"),
            (
                r#"{"x": {"amountMicrousd": 1, "denominator": 1, "unit": "token", "note": "hi"}}"#,
                "unknown field \"note\"",
            ),
            (
                r#"{"x": {"amount_microusd": 1, "denominator": 1, "unit": "token"}}"#,
                "unknown field \"amount_microusd\"",
            ),
            (r#"{"x": {"amountMicrousd": 9223372036854775808, "denominator": 1, "unit": "token"}}"#, "too large"),
            (r#"{"x": {"amountMicrousd": "99999999999999999999", "denominator": 1, "unit": "token"}}"#, "too large"),
            (r#"{"": {"amountMicrousd": 1, "denominator": 1, "unit": "token"}}"#, "rate name must not be empty"),
        ];
        for (text, expected) in cases {
            let message = rejection(text);
            assert!(message.contains(expected), "{text}: message {message:?} lacks {expected:?}");
            assert!(message.starts_with("invalid price sheet"), "{message}");
        }
    }

    #[test]
    fn validation_errors_keep_their_cause() {
        let text = r#"{"x": {"amountMicrousd": 1, "denominator": 0, "unit": "token"}}"#;
        assert_eq!(parse_price_sheet(text), Err(CatalogError::Rate(RateError::BadDenominator("x".into()))));
        assert_eq!(parse_price_sheet("{}"), Err(CatalogError::Rate(RateError::Empty)));
    }
}
