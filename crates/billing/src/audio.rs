//! Audio (speech) models: per second of the upstream's `original_duration`, capped at 120 s.
//!
//! The rate is `output_audio_seconds`: `amount_microusd` per `denominator` seconds (the default
//! is 2,500 micro-USD per second, $0.15 a minute). The hold is always the full 120 s; the
//! settlement bills `original_duration` to the millisecond, never more than 120 s.

use domain::{PriceSheet, UsdAmount};
use rust_decimal::Decimal;

use crate::charge::{Charge, ChargeBuilder, PricingError};

/// The rate key of audio output.
pub const AUDIO_RATE: &str = "output_audio_seconds";

/// The most audio billed for one call, in milliseconds (120 s).
pub const MAX_BILLED_MILLIS: u64 = 120_000;

/// The charge for one audio call whose upstream reported `original_duration_millis`
/// milliseconds; anything above 120 s is billed as 120 s.
pub fn audio_charge(sheet: &PriceSheet, original_duration_millis: u64) -> Result<Charge, PricingError> {
    let millis = original_duration_millis.min(MAX_BILLED_MILLIS);
    // At most 120000, so the conversion cannot fail; scale 3 turns milliseconds into seconds.
    let millis = i64::try_from(millis).map_err(|_| PricingError::Overflow)?;
    let mut bill = ChargeBuilder::new(sheet);
    bill.add(AUDIO_RATE, Decimal::new(millis, 3))?;
    bill.finish()
}

/// The charge for one audio call whose upstream reported `original_duration` seconds (an exact
/// decimal, any number of places); anything above 120 s is billed as 120 s. Rounded once.
pub fn audio_charge_seconds(sheet: &PriceSheet, original_duration: Decimal) -> Result<Charge, PricingError> {
    if original_duration.is_sign_negative() && !original_duration.is_zero() {
        return Err(PricingError::InvalidInput(format!("negative audio duration {original_duration}")));
    }
    let cap = Decimal::new(i64::try_from(MAX_BILLED_MILLIS).map_err(|_| PricingError::Overflow)?, 3);
    let mut bill = ChargeBuilder::new(sheet);
    bill.add(AUDIO_RATE, original_duration.min(cap))?;
    bill.finish()
}

/// The amount to hold before an audio call: 120 s of audio.
pub fn audio_reservation(sheet: &PriceSheet) -> Result<UsdAmount, PricingError> {
    Ok(audio_charge(sheet, MAX_BILLED_MILLIS)?.total)
}
