//! `UsdAmount`: exact money as an integer number of micro-USD, with the spec's 6-decimal wire form.

use std::fmt;
use std::str::FromStr;

/// Micro-USD in one US dollar.
pub const MICROS_PER_USD: i64 = 1_000_000;

/// An exact amount of US dollars, held as a signed integer number of micro-USD.
///
/// Arithmetic is checked: an overflow is an error, never a wrap. The text form is
/// exactly `^-?\d+\.\d{6}$`, as the interface's `UsdAmount` type requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UsdAmount(i64);

/// Why an amount could not be parsed or computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    /// The text is not a decimal amount of the accepted form.
    #[error("malformed amount {0:?}: expected a decimal such as 12.500000")]
    Malformed(String),
    /// The amount or a computation on it does not fit in 64-bit micro-USD.
    #[error("amount out of range")]
    Overflow,
}

impl UsdAmount {
    /// Zero dollars.
    pub const ZERO: UsdAmount = UsdAmount(0);

    /// An amount of `micros` micro-USD.
    pub const fn from_micros(micros: i64) -> Self {
        UsdAmount(micros)
    }

    /// The amount in micro-USD.
    pub const fn micros(self) -> i64 {
        self.0
    }

    /// True when the amount is below zero.
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// `self + other`, or `Overflow`.
    pub fn checked_add(self, other: UsdAmount) -> Result<UsdAmount, MoneyError> {
        self.0.checked_add(other.0).map(UsdAmount).ok_or(MoneyError::Overflow)
    }

    /// `self - other`, or `Overflow`.
    pub fn checked_sub(self, other: UsdAmount) -> Result<UsdAmount, MoneyError> {
        self.0.checked_sub(other.0).map(UsdAmount).ok_or(MoneyError::Overflow)
    }

    /// `-self`, or `Overflow` for the one value that has no negation.
    pub fn checked_neg(self) -> Result<UsdAmount, MoneyError> {
        self.0.checked_neg().map(UsdAmount).ok_or(MoneyError::Overflow)
    }

    /// Sum of amounts, or `Overflow`.
    pub fn checked_sum<I: IntoIterator<Item = UsdAmount>>(items: I) -> Result<UsdAmount, MoneyError> {
        items.into_iter().try_fold(UsdAmount::ZERO, UsdAmount::checked_add)
    }

    /// Parses the strict wire form `^-?\d+\.\d{6}$`.
    pub fn parse_wire(text: &str) -> Result<UsdAmount, MoneyError> {
        let (_, frac) = split_amount(text)?;
        match frac {
            Some(f) if f.len() == 6 => parse_amount(text, 6),
            _ => Err(MoneyError::Malformed(text.to_owned())),
        }
    }

    /// Parses an operator-friendly decimal: `10`, `10.5`, `-0.000001`, at most six decimals.
    pub fn parse_decimal(text: &str) -> Result<UsdAmount, MoneyError> {
        parse_amount(text, 0)
    }
}

/// Splits `-?int(.frac)?` into its parts after checking that both are all digits.
fn split_amount(text: &str) -> Result<(&str, Option<&str>), MoneyError> {
    let malformed = || MoneyError::Malformed(text.to_owned());
    let body = text.strip_prefix('-').unwrap_or(text);
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (body, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || frac.is_some_and(|f| !digits(f) || f.len() > 6) {
        return Err(malformed());
    }
    Ok((int, frac))
}

fn parse_amount(text: &str, min_frac: usize) -> Result<UsdAmount, MoneyError> {
    let (int, frac) = split_amount(text)?;
    let frac = frac.unwrap_or("");
    if frac.len() < min_frac {
        return Err(MoneyError::Malformed(text.to_owned()));
    }
    // 19 integer digits times 10^6 fits in i128; the range check is made once, at the end.
    if int.len() > 19 {
        return Err(MoneyError::Overflow);
    }
    let mut micros: i128 = 0;
    for b in int.bytes() {
        micros = micros * 10 + i128::from(b - b'0');
    }
    micros *= i128::from(MICROS_PER_USD);
    for (i, b) in frac.bytes().enumerate() {
        micros += i128::from(b - b'0') * 10_i128.pow(5 - i as u32);
    }
    if text.starts_with('-') {
        micros = -micros;
    }
    let micros = i64::try_from(micros).map_err(|_| MoneyError::Overflow)?;
    Ok(UsdAmount(micros))
}

impl fmt::Display for UsdAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let unit = MICROS_PER_USD as u64;
        write!(f, "{sign}{}.{:06}", abs / unit, abs % unit)
    }
}

impl FromStr for UsdAmount {
    type Err = MoneyError;

    /// The strict wire form; see [`UsdAmount::parse_wire`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UsdAmount::parse_wire(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn prints_six_decimals() {
        let cases = [
            (0, "0.000000"),
            (1, "0.000001"),
            (-1, "-0.000001"),
            (1_500_000, "1.500000"),
            (-12_345_678, "-12.345678"),
            (i64::MIN, "-9223372036854.775808"),
            (i64::MAX, "9223372036854.775807"),
        ];
        for (micros, text) in cases {
            assert_eq!(UsdAmount::from_micros(micros).to_string(), text);
            assert_eq!(UsdAmount::parse_wire(text), Ok(UsdAmount::from_micros(micros)), "{text}");
        }
    }

    #[test]
    fn wire_form_is_strict() {
        for bad in [
            "",
            "1",
            "1.5",
            "1.0000000",
            ".000001",
            "1.",
            "+1.000000",
            "1,000000",
            "--1.000000",
            "1.00000a",
            " 1.000000",
        ] {
            assert!(UsdAmount::parse_wire(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(UsdAmount::parse_wire("9223372036854.775808"), Err(MoneyError::Overflow));
    }

    #[test]
    fn decimal_form_accepts_short_fractions() {
        assert_eq!(UsdAmount::parse_decimal("10"), Ok(UsdAmount::from_micros(10_000_000)));
        assert_eq!(UsdAmount::parse_decimal("0.5"), Ok(UsdAmount::from_micros(500_000)));
        assert_eq!(UsdAmount::parse_decimal("-2.000001"), Ok(UsdAmount::from_micros(-2_000_001)));
        for bad in ["1.0000001", "abc", "1e3", "", "-", "0x10"] {
            assert!(UsdAmount::parse_decimal(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn arithmetic_is_checked() {
        let max = UsdAmount::from_micros(i64::MAX);
        assert_eq!(max.checked_add(UsdAmount::from_micros(1)), Err(MoneyError::Overflow));
        assert_eq!(UsdAmount::from_micros(i64::MIN).checked_neg(), Err(MoneyError::Overflow));
        assert_eq!(UsdAmount::from_micros(i64::MIN).checked_sub(UsdAmount::from_micros(1)), Err(MoneyError::Overflow));
        assert_eq!(UsdAmount::checked_sum([max, UsdAmount::from_micros(-1)]), Ok(UsdAmount::from_micros(i64::MAX - 1)));
    }

    proptest! {
        #[test]
        fn text_round_trips(micros in any::<i64>()) {
            let amount = UsdAmount::from_micros(micros);
            let text = amount.to_string();
            prop_assert!(text.split_once('.').is_some_and(|(_, f)| f.len() == 6));
            prop_assert_eq!(UsdAmount::parse_wire(&text), Ok(amount));
            prop_assert_eq!(UsdAmount::parse_decimal(&text), Ok(amount));
        }

        #[test]
        fn add_then_sub_is_identity(a in -1_000_000_000_000i64..1_000_000_000_000, b in -1_000_000_000_000i64..1_000_000_000_000) {
            let (a, b) = (UsdAmount::from_micros(a), UsdAmount::from_micros(b));
            prop_assert_eq!(a.checked_add(b).and_then(|s| s.checked_sub(b)), Ok(a));
        }
    }
}
