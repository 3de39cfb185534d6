//! `Catalog`: the list of model entries, loaded from `fixtures/catalog.json` and checked against the interface.

use std::collections::BTreeSet;

use domain::{ModelKind, ModelSeed};
use serde::{Deserialize, Serialize};

use crate::error::CatalogError;
use crate::model::{ModelDef, ModelDefRaw};

/// The interface's model enum: every public model name with its kind, in the spec's order.
pub const SPEC_MODELS: [(&str, ModelKind); 15] = [
    ("videogen-2-0", ModelKind::Video),
    ("videogen-2-0-fast", ModelKind::Video),
    ("videogen-2-0-mini", ModelKind::Video),
    ("Vendor-Imagegen-4.5", ModelKind::Image),
    ("Vendor-Imagegen-5.0-lite", ModelKind::Image),
    ("Vendor-Imagegen-5.0-pro", ModelKind::Image),
    ("LangA-V4-flash", ModelKind::Language),
    ("LangA-V4-pro", ModelKind::Language),
    ("LangB-2.0-Code", ModelKind::Language),
    ("LangB-2.0-lite", ModelKind::Language),
    ("LangB-2.0-mini", ModelKind::Language),
    ("LangB-2.0-pro", ModelKind::Language),
    ("LangB-2.1-turbo", ModelKind::Language),
    ("LangC-5.2", ModelKind::Language),
    ("AudioGen-1.0", ModelKind::Audio),
];

/// The catalog document compiled into the binary.
const BUILTIN_JSON: &str = include_str!("../../../../fixtures/catalog.json");

/// Every model the gateway serves, with limits, capabilities, upstream profile and default prices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    /// The entries, one per public model name.
    pub models: Vec<ModelDef>,
}

impl Catalog {
    /// The catalog shipped in `fixtures/catalog.json`.
    pub fn builtin() -> Result<Catalog, CatalogError> {
        Catalog::from_json(BUILTIN_JSON)
    }

    /// Parses a catalog document `{"models": [...]}`, types every entry's limits (a bad limit is
    /// [`CatalogError::Limits`], naming the model and the field) and checks it (see [`Catalog::validate`]).
    pub fn from_json(json: &str) -> Result<Catalog, CatalogError> {
        let raw: CatalogRaw = serde_json::from_str(json).map_err(|e| CatalogError::Malformed(e.to_string()))?;
        for entry in &raw.models {
            if let Some(expected) = spec_kind(&entry.name)
                && entry.kind != expected
            {
                return Err(CatalogError::WrongKind { model: entry.name.clone(), expected, found: entry.kind });
            }
        }
        let models = raw.models.into_iter().map(ModelDef::try_from).collect::<Result<Vec<_>, _>>()?;
        let catalog = Catalog { models };
        catalog.validate()?;
        Ok(catalog)
    }

    /// Checks that the entries are exactly the interface's fifteen models, each once and with its kind,
    /// and that every entry is valid on its own ([`ModelDef::validate`]: cap in 1..=100000, price sheet, …).
    pub fn validate(&self) -> Result<(), CatalogError> {
        let mut seen = BTreeSet::new();
        for model in &self.models {
            let name = model.name.as_str();
            let Some(expected) = spec_kind(name) else {
                return Err(CatalogError::UnknownModel(name.to_owned()));
            };
            if !seen.insert(name) {
                return Err(CatalogError::DuplicateModel(name.to_owned()));
            }
            if model.kind != expected {
                return Err(CatalogError::WrongKind { model: name.to_owned(), expected, found: model.kind });
            }
            model.validate()?;
        }
        match SPEC_MODELS.iter().find(|(name, _)| !seen.contains(name)) {
            Some((missing, _)) => Err(CatalogError::MissingModel((*missing).to_owned())),
            None => Ok(()),
        }
    }

    /// The entry called `name`.
    pub fn get(&self, name: &str) -> Option<&ModelDef> {
        self.models.iter().find(|m| m.name == name)
    }

    /// The store seeds of every entry, in catalog order.
    pub fn seeds(&self) -> Vec<ModelSeed> {
        self.models.iter().map(ModelDef::seed).collect()
    }
}

/// The serde form of a catalog document, before its entries' limits are typed.
#[derive(Deserialize)]
struct CatalogRaw {
    models: Vec<ModelDefRaw>,
}

/// The kind the interface gives `name`, if it is one of its models.
fn spec_kind(name: &str) -> Option<ModelKind> {
    SPEC_MODELS.iter().find(|(n, _)| *n == name).map(|(_, kind)| *kind)
}

#[cfg(test)]
mod tests;
