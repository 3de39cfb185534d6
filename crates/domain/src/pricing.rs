//! Price sheets: named rates `{amount_microusd, denominator, unit}` and their versions.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::time::Timestamp;

/// `amount_microusd` micro-USD are charged per `denominator` units of `unit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rate {
    /// Micro-USD per `denominator` units; never negative.
    pub amount_microusd: i64,
    /// How many units the amount buys; at least 1.
    pub denominator: i64,
    /// The unit counted, such as `token`, `image` or `second`.
    pub unit: String,
}

/// A rate that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// The amount is negative.
    #[error("rate {0}: amount must not be negative")]
    NegativeAmount(String),
    /// The denominator is zero or negative.
    #[error("rate {0}: denominator must be at least 1")]
    BadDenominator(String),
    /// The unit is empty.
    #[error("rate {0}: unit must not be empty")]
    EmptyUnit(String),
    /// The sheet has no rates.
    #[error("a price sheet needs at least one rate")]
    Empty,
}

/// The rates of one model, keyed by rate name (`input_tokens_lte_128k`, `text_to_image_pieces`, …).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PriceSheet {
    /// Rates by name.
    pub rates: BTreeMap<String, Rate>,
}

impl PriceSheet {
    /// Checks every rate: amount ≥ 0, denominator ≥ 1, a unit, and at least one rate.
    pub fn validate(&self) -> Result<(), RateError> {
        if self.rates.is_empty() {
            return Err(RateError::Empty);
        }
        for (name, rate) in &self.rates {
            if rate.amount_microusd < 0 {
                return Err(RateError::NegativeAmount(name.clone()));
            }
            if rate.denominator < 1 {
                return Err(RateError::BadDenominator(name.clone()));
            }
            if rate.unit.trim().is_empty() {
                return Err(RateError::EmptyUnit(name.clone()));
            }
        }
        Ok(())
    }

    /// The rate called `name`.
    pub fn rate(&self, name: &str) -> Option<&Rate> {
        self.rates.get(name)
    }
}

/// One immutable version of a model's prices. A price change adds a version; history is never rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PricingVersion {
    /// The model it prices.
    pub model: String,
    /// 1, 2, 3, … per model.
    pub version: i64,
    /// The rates.
    pub sheet: PriceSheet,
    /// When the version was created.
    pub created_at: Timestamp,
}

impl PricingVersion {
    /// The identifier carried by billing objects as `pricing_version_id`, e.g. `LangB-2.0-pro@v1`.
    pub fn id(&self) -> PricingVersionId {
        PricingVersionId { model: self.model.clone(), version: self.version }
    }
}

/// Which price version of which model: `<model>@v<version>` as text (`LangB-2.0-pro@v1`). Built and
/// read only here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PricingVersionId {
    /// The model priced.
    pub model: String,
    /// Its version, from 1.
    pub version: i64,
}

impl fmt::Display for PricingVersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@v{}", self.model, self.version)
    }
}

/// Text that is not `<model>@v<version>` with a version of at least 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a pricing version id (<model>@v<version>)")]
pub struct BadPricingVersionId(pub String);

impl FromStr for PricingVersionId {
    type Err = BadPricingVersionId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadPricingVersionId(s.to_owned());
        let (model, version) = s.rsplit_once("@v").ok_or_else(bad)?;
        let version: i64 = version.parse().map_err(|_| bad())?;
        if model.is_empty() || version < 1 || !version.to_string().eq(&s[model.len() + 2..]) {
            return Err(bad());
        }
        Ok(PricingVersionId { model: model.to_owned(), version })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(amount: i64, denominator: i64) -> Rate {
        Rate { amount_microusd: amount, denominator, unit: "token".into() }
    }

    #[test]
    fn pricing_version_ids_round_trip() {
        let id = PricingVersionId { model: "LangB-2.0-pro".into(), version: 12 };
        assert_eq!(id.to_string(), "LangB-2.0-pro@v12");
        assert_eq!("LangB-2.0-pro@v12".parse(), Ok(id));
        assert_eq!("a@vb@v3".parse(), Ok(PricingVersionId { model: "a@vb".into(), version: 3 }));
        for bad in ["", "m", "m@v", "@v1", "m@v0", "m@v-1", "m@v01", "m@v+1", "m@v1x"] {
            assert!(bad.parse::<PricingVersionId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_rejects_bad_rates() {
        let mut sheet = PriceSheet::default();
        assert_eq!(sheet.validate(), Err(RateError::Empty));
        sheet.rates.insert("input_tokens".into(), rate(0, 1));
        assert_eq!(sheet.validate(), Ok(()));
        sheet.rates.insert("x".into(), rate(-1, 1));
        assert_eq!(sheet.validate(), Err(RateError::NegativeAmount("x".into())));
        sheet.rates.insert("x".into(), rate(1, 0));
        assert_eq!(sheet.validate(), Err(RateError::BadDenominator("x".into())));
    }
}
