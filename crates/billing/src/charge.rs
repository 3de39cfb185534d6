//! A call's charge: line items computed exactly, summed exactly, and rounded once.
//!
//! Every line is `quantity × amount_microusd / denominator` micro-USD. The total is the exact
//! sum of the lines as a fraction of integers (held in `rust_decimal` integers, so no step ever
//! rounds), then rounded once, half away from zero, to whole micro-USD.

use domain::{PriceSheet, Rate, UsdAmount};
use rust_decimal::Decimal;

/// Why a charge or a reservation could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PricingError {
    /// The price sheet lacks a rate the usage needs; carries the rate's name.
    #[error("the price sheet has no rate {0:?}")]
    MissingRate(String),
    /// A rate of the sheet cannot be used (negative amount, denominator below 1).
    #[error("rate {rate:?} is not usable: {reason}")]
    InvalidRate {
        /// The rate's name.
        rate: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The amount does not fit in 64-bit micro-USD (or an intermediate product does not fit).
    #[error("amount out of range")]
    Overflow,
    /// The usage or request parameters make no sense (unknown resolution, zero duration, …).
    #[error("invalid input: {0}")]
    InvalidInput(String),
}

/// One line item of a charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeLine {
    /// The rate key used, e.g. `input_tokens_lte_128k`.
    pub rate: String,
    /// Units billed at that rate (tokens, images, seconds — seconds may be fractional).
    pub quantity: Decimal,
    /// `quantity × amount_microusd / denominator` in micro-USD, unrounded. Exact whenever the
    /// quotient has a finite decimal form (always for denominators made of 2s and 5s, such as
    /// 1 and 1,000,000); otherwise to 28 significant digits. The total never depends on it.
    pub amount: Decimal,
}

/// The price of one call (or of a worst case): its line items and the total rounded once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The exact sum of the lines, rounded once, half away from zero, to whole micro-USD.
    pub total: UsdAmount,
    /// The line items with a non-zero quantity, one per rate key, in a stable order.
    pub lines: Vec<ChargeLine>,
}

impl Charge {
    /// A charge of nothing.
    pub fn zero() -> Self {
        Charge { total: UsdAmount::ZERO, lines: Vec::new() }
    }
}

/// Collects quantities per rate key, then prices them exactly.
pub(crate) struct ChargeBuilder<'a> {
    sheet: &'a PriceSheet,
    items: Vec<(String, &'a Rate, Decimal)>,
}

impl<'a> ChargeBuilder<'a> {
    /// An empty charge against `sheet`.
    pub(crate) fn new(sheet: &'a PriceSheet) -> Self {
        ChargeBuilder { sheet, items: Vec::new() }
    }

    /// Bills `quantity` units at the rate `name`. The rate must exist even when the quantity is
    /// zero, so that a misconfigured sheet fails loudly. Repeated keys are merged into one line.
    pub(crate) fn add(&mut self, name: &str, quantity: Decimal) -> Result<(), PricingError> {
        let rate = rate(self.sheet, name)?;
        if quantity.is_sign_negative() && !quantity.is_zero() {
            return Err(PricingError::InvalidInput(format!("negative quantity for {name}")));
        }
        match self.items.iter_mut().find(|(key, _, _)| key == name) {
            Some((_, _, q)) => *q = q.checked_add(quantity).ok_or(PricingError::Overflow)?,
            None => self.items.push((name.to_owned(), rate, quantity)),
        }
        Ok(())
    }

    /// Bills a whole number of units at the rate `name`.
    pub(crate) fn add_units(&mut self, name: &str, quantity: u64) -> Result<(), PricingError> {
        self.add(name, Decimal::from(quantity))
    }

    /// Prices the lines and rounds their exact sum once.
    pub(crate) fn finish(self) -> Result<Charge, PricingError> {
        let mut sum = Fraction::ZERO;
        let mut lines = Vec::with_capacity(self.items.len());
        for (name, rate, quantity) in self.items {
            if quantity.is_zero() {
                continue;
            }
            let (num, den) = line_fraction(rate, quantity)?;
            sum = sum.add(num, den)?;
            let amount = num.checked_div(den).ok_or(PricingError::Overflow)?;
            lines.push(ChargeLine { rate: name, quantity: quantity.normalize(), amount: amount.normalize() });
        }
        Ok(Charge { total: UsdAmount::from_micros(sum.round_half_away()?), lines })
    }
}

/// The rate `name`, checked to be usable.
pub(crate) fn rate<'a>(sheet: &'a PriceSheet, name: &str) -> Result<&'a Rate, PricingError> {
    let rate = sheet.rate(name).ok_or_else(|| PricingError::MissingRate(name.to_owned()))?;
    let invalid = |reason: &str| PricingError::InvalidRate { rate: name.to_owned(), reason: reason.to_owned() };
    if rate.amount_microusd < 0 {
        return Err(invalid("amount must not be negative"));
    }
    if rate.denominator < 1 {
        return Err(invalid("denominator must be at least 1"));
    }
    Ok(rate)
}

/// Of the named rates, the one with the highest price per unit (the first on a tie).
/// Every name must exist; an empty list is a missing rate.
pub(crate) fn dearest<'n>(sheet: &PriceSheet, names: &[&'n str]) -> Result<&'n str, PricingError> {
    let mut best: Option<(&'n str, &Rate)> = None;
    for &name in names {
        let candidate = rate(sheet, name)?;
        best = match best {
            // a/b > c/d ⇔ a·d > c·b; both products fit in i128.
            Some((_, held))
                if i128::from(candidate.amount_microusd) * i128::from(held.denominator)
                    <= i128::from(held.amount_microusd) * i128::from(candidate.denominator) =>
            {
                best
            }
            _ => Some((name, candidate)),
        };
    }
    best.map(|(name, _)| name).ok_or_else(|| PricingError::MissingRate("(no candidate rate)".into()))
}

/// The larger of two charges by total.
pub(crate) fn larger(a: Charge, b: Charge) -> Charge {
    if b.total > a.total { b } else { a }
}

/// A line as an integer fraction: `(mantissa × amount) / (denominator × 10^scale)`.
fn line_fraction(rate: &Rate, quantity: Decimal) -> Result<(Decimal, Decimal), PricingError> {
    let mantissa = Decimal::try_from_i128_with_scale(quantity.mantissa(), 0).map_err(|_| PricingError::Overflow)?;
    let num = mantissa.checked_mul(Decimal::from(rate.amount_microusd)).ok_or(PricingError::Overflow)?;
    let mut den = Decimal::from(rate.denominator);
    for _ in 0..quantity.scale() {
        den = den.checked_mul(Decimal::TEN).ok_or(PricingError::Overflow)?;
    }
    Ok((num, den))
}

/// A non-negative fraction of two integers, both held in `Decimal` with scale 0 so that every
/// operation is exact or fails with `Overflow`.
#[derive(Debug, Clone, Copy)]
struct Fraction {
    num: Decimal,
    den: Decimal,
}

impl Fraction {
    const ZERO: Fraction = Fraction { num: Decimal::ZERO, den: Decimal::ONE };

    /// `self + num/den`, over the least common denominator.
    fn add(self, num: Decimal, den: Decimal) -> Result<Fraction, PricingError> {
        let overflow = || PricingError::Overflow;
        let g = gcd(self.den, den)?;
        let lcm = (self.den / g).checked_mul(den).ok_or_else(overflow)?;
        let left = self.num.checked_mul(lcm / self.den).ok_or_else(overflow)?;
        let right = num.checked_mul(lcm / den).ok_or_else(overflow)?;
        Ok(Fraction { num: left.checked_add(right).ok_or_else(overflow)?, den: lcm })
    }

    /// The nearest integer, halves away from zero (the fraction is never negative).
    fn round_half_away(self) -> Result<i64, PricingError> {
        let rem = self.num.checked_rem(self.den).ok_or(PricingError::Overflow)?;
        let mut whole = (self.num - rem) / self.den;
        if rem.checked_mul(Decimal::TWO).ok_or(PricingError::Overflow)? >= self.den {
            whole = whole.checked_add(Decimal::ONE).ok_or(PricingError::Overflow)?;
        }
        i64::try_from(whole).map_err(|_| PricingError::Overflow)
    }
}

/// Greatest common divisor of two positive integers.
fn gcd(mut a: Decimal, mut b: Decimal) -> Result<Decimal, PricingError> {
    while !b.is_zero() {
        let r = a.checked_rem(b).ok_or(PricingError::Overflow)?;
        a = b;
        b = r;
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Rate;

    fn sheet(rates: &[(&str, i64, i64)]) -> PriceSheet {
        let mut sheet = PriceSheet::default();
        for &(name, amount, denominator) in rates {
            sheet.rates.insert(name.into(), Rate { amount_microusd: amount, denominator, unit: "unit".into() });
        }
        sheet
    }

    fn total(sheet: &PriceSheet, items: &[(&str, u64)]) -> Result<i64, PricingError> {
        let mut b = ChargeBuilder::new(sheet);
        for &(name, q) in items {
            b.add_units(name, q)?;
        }
        Ok(b.finish()?.total.micros())
    }

    #[test]
    fn rounds_the_sum_once_not_each_line() {
        // Three lines of 0.4 micro-USD: 1.2 in all, so 1, not 3 × round(0.4) = 0.
        let s = sheet(&[("a", 2, 5), ("b", 4, 10), ("c", 400_000, 1_000_000)]);
        assert_eq!(total(&s, &[("a", 1), ("b", 1), ("c", 1)]), Ok(1));
        // Per-line rounding up would give 3; per-line rounding down 0.
        let s = sheet(&[("a", 1, 3), ("b", 1, 6)]);
        // 1/3 + 1/6 = 1/2 exactly: half away from zero gives 1 (a 28-digit decimal sum would not).
        assert_eq!(total(&s, &[("a", 1), ("b", 1)]), Ok(1));
    }

    #[test]
    fn halves_round_away_from_zero() {
        let s = sheet(&[("half", 1, 2)]);
        for (q, want) in [(1, 1), (2, 1), (3, 2), (5, 3), (7, 4), (0, 0)] {
            assert_eq!(total(&s, &[("half", q)]), Ok(want), "{q} halves");
        }
        let s = sheet(&[("x", 499_999, 1_000_000), ("y", 1, 1_000_000)]);
        assert_eq!(total(&s, &[("x", 1)]), Ok(0));
        assert_eq!(total(&s, &[("x", 1), ("y", 1)]), Ok(1));
    }

    #[test]
    fn lines_merge_and_skip_zero() {
        let s = sheet(&[("a", 3, 1), ("b", 5, 1)]);
        let mut b = ChargeBuilder::new(&s);
        assert!(b.add_units("a", 2).is_ok());
        assert!(b.add_units("b", 0).is_ok());
        assert!(b.add_units("a", 1).is_ok());
        let charge = b.finish();
        assert_eq!(
            charge,
            Ok(Charge {
                total: UsdAmount::from_micros(9),
                lines: vec![ChargeLine { rate: "a".into(), quantity: Decimal::from(3), amount: Decimal::from(9) }],
            })
        );
    }

    #[test]
    fn bad_sheets_and_overflow_are_errors() {
        let s = sheet(&[("neg", -1, 1), ("zero_den", 1, 0), ("big", i64::MAX, 1)]);
        assert_eq!(total(&s, &[("missing", 1)]), Err(PricingError::MissingRate("missing".into())));
        assert!(matches!(total(&s, &[("neg", 1)]), Err(PricingError::InvalidRate { .. })));
        assert!(matches!(total(&s, &[("zero_den", 1)]), Err(PricingError::InvalidRate { .. })));
        assert_eq!(total(&s, &[("big", 1)]), Ok(i64::MAX));
        assert_eq!(total(&s, &[("big", 2)]), Err(PricingError::Overflow));
        assert_eq!(total(&s, &[("big", u64::MAX)]), Err(PricingError::Overflow));
    }

    #[test]
    fn dearest_compares_per_unit_prices() {
        let s = sheet(&[("a", 3, 1_000), ("b", 2, 100), ("c", 20, 1_000)]);
        assert_eq!(dearest(&s, &["a", "b", "c"]), Ok("b"));
        assert_eq!(dearest(&s, &["a", "c"]), Ok("c"));
        assert_eq!(dearest(&s, &["a", "nope"]), Err(PricingError::MissingRate("nope".into())));
    }
}
