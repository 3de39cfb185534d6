//! Calls that may be served by more than one model: a chat, message-style or response-style call
//! that sends `models: [A, B, …]`, or names an operator's alias. The candidates are tried in order;
//! the call moves on only where a retry is already allowed before the first byte of an answer
//! (connection trouble, a timeout, 429, 5xx, no endpoint for the model upstream, the model switched
//! off), never on the caller's own 4xx and never once the answer began. The hold is the largest
//! candidate's, taken once; the charge is the serving model's price for its usage.

use std::sync::Arc;

use catalog::ModelDef;
use domain::ports::UpstreamError;
use domain::{ModelAlias, ModelKind, PricingVersion};
use validation::RawBody;

use crate::{Gateway, Principal, ServiceError};

/// The models a call names, in the order they are tried, and what it asked for when that was
/// more than one model's name (recorded on its task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    /// The model names, first to try first.
    pub models: Vec<String>,
    /// `A,B` for a `models` list, the alias's name for an alias; `None` for one model.
    pub requested: Option<String>,
}

/// One model a call may be served by: its catalog entry and active price.
#[derive(Debug, Clone)]
pub(crate) struct Priced {
    /// The catalog entry.
    pub def: Arc<ModelDef>,
    /// The active price.
    pub pricing: PricingVersion,
}

/// Whether an upstream failure before any answer byte lets a call move on to its next candidate.
pub(crate) fn moves_on(e: &UpstreamError) -> bool {
    match e {
        UpstreamError::Connect(_) | UpstreamError::Timeout | UpstreamError::NotConfigured(_) => true,
        UpstreamError::Status { status, .. } => *status == 429 || *status == 404 || *status >= 500,
        UpstreamError::Malformed(_) | UpstreamError::Stream(_) | UpstreamError::Rejected { .. } => false,
    }
}

/// The names `body` asks for: its `models` list (1 to [`ModelAlias::MAX_MODELS`] names, none
/// twice; `model`, if also sent, must be the first), else its `model`, which may name an alias.
pub(crate) fn named(
    body: &RawBody<'_>,
    aliases: &[ModelAlias],
    is_model: impl Fn(&str) -> bool,
) -> Result<Named, ServiceError> {
    let model = body.str("model");
    if let Some(raw) = body.get("models") {
        let bad = || {
            ServiceError::InvalidRequest(format!(
                "models must be an array of 1 to {} model names, none named twice",
                ModelAlias::MAX_MODELS
            ))
        };
        let models: Vec<String> = serde_json::from_str(raw.get()).map_err(|_| bad())?;
        let unique = models.iter().enumerate().all(|(i, m)| !models[..i].contains(m));
        if models.is_empty() || models.len() > ModelAlias::MAX_MODELS || !unique {
            return Err(bad());
        }
        if let Some(model) = model.as_deref()
            && model != models[0]
        {
            return Err(ServiceError::InvalidRequest(format!(
                "model must be the first of models ({:?}) when both are sent, got {model:?}",
                models[0]
            )));
        }
        let requested = (models.len() > 1).then(|| models.join(","));
        return Ok(Named { models, requested });
    }
    let name = model.ok_or_else(|| ServiceError::InvalidRequest("model is required and must be a string".into()))?;
    if let Some(alias) = aliases.iter().find(|a| a.name == name)
        && !is_model(&name)
    {
        return Ok(Named { models: alias.models.clone(), requested: Some(alias.name.clone()) });
    }
    Ok(Named { models: vec![name.into_owned()], requested: None })
}

/// `body` with `model` set to the first of its `models` when it sends a list and no `model` (the
/// request checks read `model`); `None` when it needs no change.
pub(crate) fn with_first_model(body: &RawBody<'_>) -> Option<Vec<u8>> {
    if body.get("model").is_some() {
        return None;
    }
    let models: Vec<&str> = serde_json::from_str(body.get("models")?.get()).ok()?;
    let first = serde_json::to_string(models.first()?).ok()?;
    Some(body.write(&[("model", Some(&first))]))
}

impl Gateway {
    /// The models a chat-family `body` may be served by, priced, in order: a model an operator
    /// switched off is passed over while another remains; any other refusal of a candidate (not a
    /// language model, not allowed to the key, no price) refuses the call, as it would for that
    /// model alone.
    pub(crate) async fn candidates(
        &self,
        who: &Principal,
        body: &RawBody<'_>,
    ) -> Result<(Vec<Priced>, Option<String>), ServiceError> {
        let snapshot = self.catalog_snapshot().await?;
        let is_model = |name: &str| {
            snapshot.models.iter().any(|m| m.record.name == name) || snapshot.disabled.iter().any(|m| m == name)
        };
        let Named { models, requested } = named(body, &snapshot.aliases, is_model)?;
        let mut priced = Vec::with_capacity(models.len());
        let mut first_refusal = None;
        for name in &models {
            match self.priced_in(&snapshot, who, ModelKind::Language, name) {
                Ok((def, pricing)) => priced.push(Priced { def, pricing }),
                Err(e) if models.len() > 1 && snapshot.disabled.iter().any(|m| m == name) => {
                    first_refusal.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match first_refusal {
            Some(e) if priced.is_empty() => Err(e),
            _ => Ok((priced, requested)),
        }
    }

    /// Checks an alias an operator sets: a name that is no model's, and 1 to
    /// [`ModelAlias::MAX_MODELS`] known models of one kind, none twice.
    pub(crate) async fn check_alias(&self, alias: &ModelAlias) -> Result<(), ServiceError> {
        let invalid = |m: String| Err(ServiceError::InvalidRequest(m));
        let valid_name = !alias.name.is_empty()
            && alias.name.len() <= 64
            && alias.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b));
        if !valid_name {
            return invalid(format!("alias name {:?} must be 1 to 64 letters, digits or -_.:/", alias.name));
        }
        let records = self.ports.models.models().await?;
        if records.iter().any(|r| r.name == alias.name) {
            return invalid(format!("{:?} is a model's own name; an alias needs another", alias.name));
        }
        let unique = alias.models.iter().enumerate().all(|(i, m)| !alias.models[..i].contains(m));
        if alias.models.is_empty() || alias.models.len() > ModelAlias::MAX_MODELS || !unique {
            return invalid(format!("an alias names 1 to {} models, none twice", ModelAlias::MAX_MODELS));
        }
        let mut kind = None;
        for name in &alias.models {
            let Some(record) = records.iter().find(|r| &r.name == name) else {
                return invalid(format!("{name:?} is not a model of the catalog"));
            };
            if *kind.get_or_insert(record.kind) != record.kind {
                return invalid(format!("an alias's models are of one kind; {name:?} is {}", record.kind.as_str()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> RawBody<'_> {
        RawBody::parse_body(text.as_bytes()).expect("JSON")
    }

    fn alias() -> Vec<ModelAlias> {
        vec![ModelAlias { name: "fast".into(), models: vec!["A".into(), "B".into()] }]
    }

    #[test]
    fn a_call_names_a_list_an_alias_or_one_model() {
        let is_model = |n: &str| n == "A" || n == "B" || n == "C";
        let got = named(&body(r#"{"models":["A","B"]}"#), &alias(), is_model).expect("list");
        assert_eq!(got, Named { models: vec!["A".into(), "B".into()], requested: Some("A,B".into()) });
        let got = named(&body(r#"{"model":"A","models":["A","C"]}"#), &alias(), is_model).expect("list");
        assert_eq!(got.models, ["A", "C"]);
        let got = named(&body(r#"{"model":"fast"}"#), &alias(), is_model).expect("alias");
        assert_eq!(got, Named { models: vec!["A".into(), "B".into()], requested: Some("fast".into()) });
        let got = named(&body(r#"{"model":"C"}"#), &alias(), is_model).expect("one");
        assert_eq!(got, Named { models: vec!["C".into()], requested: None });
        assert_eq!(named(&body(r#"{"models":["A"]}"#), &alias(), is_model).expect("one").requested, None);
    }

    #[test]
    fn a_list_is_1_to_4_names_none_twice_and_model_must_lead_it() {
        let is_model = |_: &str| true;
        let four = named(&body(r#"{"models":["A","B","C","D"]}"#), &[], is_model).expect("four");
        assert_eq!(four.models.len(), 4);
        for bad in [
            r#"{"models":["A","B","C","D","E"]}"#,
            r#"{"models":[]}"#,
            r#"{"models":["A","A"]}"#,
            r#"{"models":"A"}"#,
            r#"{"models":[1]}"#,
            r#"{"model":"B","models":["A","B"]}"#,
            r#"{}"#,
        ] {
            assert!(matches!(named(&body(bad), &[], is_model), Err(ServiceError::InvalidRequest(_))), "{bad}");
        }
    }

    #[test]
    fn only_failures_before_an_answer_that_another_model_may_not_meet_move_on() {
        let status = |status| UpstreamError::Status { status, body: String::new(), reason: String::new() };
        for e in [
            UpstreamError::Timeout,
            UpstreamError::Connect("x".into()),
            status(429),
            status(500),
            status(503),
            status(404),
        ] {
            assert!(moves_on(&e), "{e:?}");
        }
        for e in [
            status(400),
            status(401),
            status(413),
            UpstreamError::Malformed("x".into()),
            UpstreamError::Stream("x".into()),
        ] {
            assert!(!moves_on(&e), "{e:?}");
        }
    }
}
