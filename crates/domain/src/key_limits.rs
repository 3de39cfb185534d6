//! Per-key limits set by operators (issue 25): an expiry time and a model allow-list (the rate
//! limits are in `key_rates.rs`; a change to any of them is a [`KeyLimitsChange`]).

use std::fmt;

use crate::{ModelKind, Timestamp};

/// One entry of a key's model allow-list: every model of a kind, or one model by public name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModelRule {
    /// Every model of this kind (`language`, `image`, `audio`, `video`).
    Kind(ModelKind),
    /// The model with this public name.
    Name(String),
}

/// The models a key may reach; a key without one reaches every model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelAllowList(Vec<ModelRule>);

/// An allow-list text that cannot be read (empty, or with an empty entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a model allow-list is a comma-separated list of model names or kinds, not {0:?}")]
pub struct BadAllowList(pub String);

impl ModelAllowList {
    /// Reads the comma-separated form: an entry that is a kind's name is that kind, any other is a
    /// model name (whether it exists is the caller's check). Entries are trimmed; duplicates go.
    pub fn parse(text: &str) -> Result<ModelAllowList, BadAllowList> {
        let mut rules: Vec<ModelRule> = Vec::new();
        for entry in text.split(',').map(str::trim) {
            if entry.is_empty() {
                return Err(BadAllowList(text.to_owned()));
            }
            let rule = entry.parse::<ModelKind>().map_or_else(|_| ModelRule::Name(entry.to_owned()), ModelRule::Kind);
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
        Ok(ModelAllowList(rules))
    }

    /// The entries, in the order given.
    pub fn rules(&self) -> &[ModelRule] {
        &self.0
    }

    /// Whether model `name` of `kind` is on the list.
    pub fn allows(&self, name: &str, kind: ModelKind) -> bool {
        self.0.iter().any(|rule| match rule {
            ModelRule::Kind(k) => *k == kind,
            ModelRule::Name(n) => n == name,
        })
    }
}

impl fmt::Display for ModelAllowList {
    /// The comma-separated form [`ModelAllowList::parse`] reads (also the stored form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rule) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match rule {
                ModelRule::Kind(k) => f.write_str(k.as_str())?,
                ModelRule::Name(n) => f.write_str(n)?,
            }
        }
        Ok(())
    }
}

/// A change to a key's limits: `None` leaves a setting as it is, `Some(None)` clears it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLimitsChange {
    /// New expiry time, or none.
    pub expires_at: Option<Option<Timestamp>>,
    /// New allow-list, or none (every model).
    pub models: Option<Option<ModelAllowList>>,
    /// New requests-per-minute limit, or none.
    pub rpm: Option<Option<std::num::NonZeroU32>>,
    /// New tokens-per-minute limit, or none.
    pub tpm: Option<Option<std::num::NonZeroU32>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kinds_and_names_and_round_trips() {
        let list = ModelAllowList::parse(" language ,Img-1,language,video").expect("list");
        assert_eq!(
            list.rules(),
            [ModelRule::Kind(ModelKind::Language), ModelRule::Name("Img-1".into()), ModelRule::Kind(ModelKind::Video)]
        );
        assert_eq!(list.to_string(), "language,Img-1,video");
        assert_eq!(ModelAllowList::parse(&list.to_string()), Ok(list));
    }

    #[test]
    fn empty_entries_are_refused() {
        for bad in ["", ",", "a,,b", " , a"] {
            assert_eq!(ModelAllowList::parse(bad), Err(BadAllowList(bad.to_owned())), "{bad:?}");
        }
    }

    #[test]
    fn allows_by_kind_or_name() {
        let list = ModelAllowList::parse("image,LangA").expect("list");
        assert!(list.allows("AnyImage", ModelKind::Image));
        assert!(list.allows("LangA", ModelKind::Language));
        assert!(!list.allows("LangB", ModelKind::Language));
        assert!(!list.allows("Vid", ModelKind::Video));
    }
}
