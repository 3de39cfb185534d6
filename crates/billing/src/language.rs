//! Language models: per-token pricing with cache hits, audio input and prompt-length tiers.
//!
//! Usage maps to rate keys as DESIGN §3 states:
//!
//! | rate key | quantity |
//! |---|---|
//! | `input_tokens` | `prompt_tokens − cached_tokens − audio_tokens` (never below 0) |
//! | `cache_hit_tokens` | `cached_tokens` |
//! | `audio_input_tokens` | `audio_tokens − audio_cached_tokens` (never below 0) |
//! | `audio_cache_hit_tokens` | `audio_cached_tokens` |
//! | `output_tokens` | `completion_tokens` (reasoning included) |
//!
//! A model without audio rates (no key starting `audio_input_tokens` / `audio_cache_hit_tokens`)
//! bills audio tokens at its `input_tokens` / `cache_hit_tokens` rates; the quantities then share
//! one line. `storage_token_hours` is not a per-call charge and is never billed here.
//!
//! **Tiers.** A sheet is tiered when one of its keys ends in `_lte_128k`. The suffix is then
//! `_lte_128k` when `prompt_tokens ≤ 128,000` and `_gt_128k_lte_256k` above. A prompt above
//! 256,000 tokens (which no tiered model accepts today) is billed at the top tier rather than
//! refused: the upstream already served it, and the top tier is the dearest published.

use domain::{PriceSheet, UsdAmount};

use crate::charge::{Charge, ChargeBuilder, PricingError, dearest, larger};

/// Highest prompt length (in tokens, inclusive) of the `_lte_128k` tier.
pub const LOW_TIER_MAX_PROMPT_TOKENS: u64 = 128_000;

/// Suffix of the rate keys for prompts up to [`LOW_TIER_MAX_PROMPT_TOKENS`].
pub const LOW_TIER_SUFFIX: &str = "_lte_128k";

/// Suffix of the rate keys for longer prompts.
pub const HIGH_TIER_SUFFIX: &str = "_gt_128k_lte_256k";

/// Token usage of one language call, as the upstream reports it; a missing detail is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LanguageUsage {
    /// All prompt tokens, cached and audio ones included.
    pub prompt_tokens: u64,
    /// All completion tokens, reasoning included.
    pub completion_tokens: u64,
    /// `prompt_tokens_details.cached_tokens`.
    pub cached_tokens: u64,
    /// `prompt_tokens_details.audio_tokens`.
    pub audio_tokens: u64,
    /// `prompt_tokens_details.audio_cached_tokens`.
    pub audio_cached_tokens: u64,
}

/// The rate keys of one tier of one sheet.
struct TierKeys {
    input: String,
    cache_hit: String,
    audio_input: String,
    audio_cache_hit: String,
    output: String,
}

impl TierKeys {
    /// The keys for `suffix`, with audio falling back to the text rates when the model has none.
    fn new(sheet: &PriceSheet, suffix: &str) -> Self {
        let has = |base: &str| sheet.rates.keys().any(|k| k.starts_with(base));
        let input = format!("input_tokens{suffix}");
        let cache_hit = format!("cache_hit_tokens{suffix}");
        let audio_input = if has("audio_input_tokens") { format!("audio_input_tokens{suffix}") } else { input.clone() };
        let audio_cache_hit =
            if has("audio_cache_hit_tokens") { format!("audio_cache_hit_tokens{suffix}") } else { cache_hit.clone() };
        TierKeys { input, cache_hit, audio_input, audio_cache_hit, output: format!("output_tokens{suffix}") }
    }
}

fn is_tiered(sheet: &PriceSheet) -> bool {
    sheet.rates.keys().any(|k| k.ends_with(LOW_TIER_SUFFIX))
}

/// The rate-key suffix for a prompt of `prompt_tokens` on `sheet`: empty on a flat sheet.
pub fn tier_suffix(sheet: &PriceSheet, prompt_tokens: u64) -> &'static str {
    if !is_tiered(sheet) {
        ""
    } else if prompt_tokens <= LOW_TIER_MAX_PROMPT_TOKENS {
        LOW_TIER_SUFFIX
    } else {
        HIGH_TIER_SUFFIX
    }
}

/// The charge for one language call's reported usage.
///
/// `input_tokens` and `output_tokens` of the tier must exist; the cache-hit and audio rates are
/// needed only when the usage has such tokens. Details larger than the totals they belong to
/// (such as `cached_tokens > prompt_tokens`) are billed as reported, with the derived
/// quantities stopping at 0.
pub fn language_charge(sheet: &PriceSheet, usage: &LanguageUsage) -> Result<Charge, PricingError> {
    let keys = TierKeys::new(sheet, tier_suffix(sheet, usage.prompt_tokens));
    let input = usage.prompt_tokens.saturating_sub(usage.cached_tokens).saturating_sub(usage.audio_tokens);
    let audio_input = usage.audio_tokens.saturating_sub(usage.audio_cached_tokens);
    let mut bill = ChargeBuilder::new(sheet);
    bill.add_units(&keys.input, input)?;
    if usage.cached_tokens > 0 {
        bill.add_units(&keys.cache_hit, usage.cached_tokens)?;
    }
    if audio_input > 0 {
        bill.add_units(&keys.audio_input, audio_input)?;
    }
    if usage.audio_cached_tokens > 0 {
        bill.add_units(&keys.audio_cache_hit, usage.audio_cached_tokens)?;
    }
    bill.add_units(&keys.output, usage.completion_tokens)?;
    bill.finish()
}

/// The amount to hold before a language call: at least what [`language_charge`] can bill for
/// any usage with `prompt_tokens ≤ prompt_upper_bound_tokens` and
/// `completion_tokens ≤ max_output_tokens` whose details fit inside the totals
/// (`cached_tokens + audio_tokens ≤ prompt_tokens`, `audio_cached_tokens ≤ audio_tokens`).
///
/// The prompt bound is priced at the dearest prompt-side rate of the tier the bound falls in
/// (`input_tokens` on the published text models; `audio_input_tokens` on models with audio
/// rates), plus `max_output_tokens` at that tier's output rate. When a shorter prompt could
/// fall in a cheaper-keyed tier whose rates are nevertheless higher (never so in the published
/// prices), that tier's worst case is taken instead. Use [`language_reservation_text_only`]
/// when the request carries no audio.
pub fn language_reservation(
    sheet: &PriceSheet,
    prompt_upper_bound_tokens: u64,
    max_output_tokens: u64,
) -> Result<UsdAmount, PricingError> {
    worst_case(sheet, prompt_upper_bound_tokens, max_output_tokens, true).map(|c| c.total)
}

/// Like [`language_reservation`], for a request without audio input: the bound then covers only
/// usage with `audio_tokens = 0`, so audio rates (15 times the text input rate on the published
/// sheets) are left out of the worst case.
pub fn language_reservation_text_only(
    sheet: &PriceSheet,
    prompt_upper_bound_tokens: u64,
    max_output_tokens: u64,
) -> Result<UsdAmount, PricingError> {
    worst_case(sheet, prompt_upper_bound_tokens, max_output_tokens, false).map(|c| c.total)
}

/// The dearest charge over the tiers a prompt of at most `prompt_bound` tokens can land in.
fn worst_case(sheet: &PriceSheet, prompt_bound: u64, max_output: u64, audio: bool) -> Result<Charge, PricingError> {
    let top = tier_suffix(sheet, prompt_bound);
    let mut worst = tier_worst_case(sheet, top, prompt_bound, max_output, audio)?;
    if top == HIGH_TIER_SUFFIX {
        // A shorter actual prompt lands in the low tier; it cannot cost more than its own worst case.
        let low_bound = prompt_bound.min(LOW_TIER_MAX_PROMPT_TOKENS);
        worst = larger(worst, tier_worst_case(sheet, LOW_TIER_SUFFIX, low_bound, max_output, audio)?);
    }
    Ok(worst)
}

fn tier_worst_case(
    sheet: &PriceSheet,
    suffix: &str,
    prompt_bound: u64,
    max_output: u64,
    audio: bool,
) -> Result<Charge, PricingError> {
    let keys = TierKeys::new(sheet, suffix);
    let mut prompt_rates = vec![keys.input.as_str()];
    if sheet.rate(&keys.cache_hit).is_some() {
        prompt_rates.push(&keys.cache_hit);
    }
    if audio {
        // Only rates the charge could actually use: a missing audio rate makes the charge fail.
        for key in [&keys.audio_input, &keys.audio_cache_hit] {
            if sheet.rate(key).is_some() {
                prompt_rates.push(key);
            }
        }
    }
    let prompt_rate = dearest(sheet, &prompt_rates)?;
    let mut bill = ChargeBuilder::new(sheet);
    bill.add_units(prompt_rate, prompt_bound)?;
    bill.add_units(&keys.output, max_output)?;
    bill.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Rate;

    fn sheet(rates: &[(&str, i64)]) -> PriceSheet {
        let mut sheet = PriceSheet::default();
        for &(name, amount) in rates {
            let rate = Rate { amount_microusd: amount, denominator: 1_000_000, unit: "token".into() };
            sheet.rates.insert(name.into(), rate);
        }
        sheet
    }

    #[test]
    fn tier_boundaries() {
        let flat = sheet(&[("input_tokens", 1), ("output_tokens", 1)]);
        let tiered = sheet(&[("input_tokens_lte_128k", 1)]);
        assert_eq!(tier_suffix(&flat, 10_000_000), "");
        assert_eq!(tier_suffix(&tiered, 0), LOW_TIER_SUFFIX);
        assert_eq!(tier_suffix(&tiered, 128_000), LOW_TIER_SUFFIX);
        assert_eq!(tier_suffix(&tiered, 128_001), HIGH_TIER_SUFFIX);
        assert_eq!(tier_suffix(&tiered, 256_001), HIGH_TIER_SUFFIX);
    }

    #[test]
    fn missing_rates_are_named() {
        let s = sheet(&[("input_tokens", 1), ("output_tokens", 1)]);
        let usage = LanguageUsage { prompt_tokens: 10, cached_tokens: 2, ..LanguageUsage::default() };
        assert_eq!(language_charge(&s, &usage), Err(PricingError::MissingRate("cache_hit_tokens".into())));
        let tiered = sheet(&[("input_tokens_lte_128k", 1), ("output_tokens_lte_128k", 1)]);
        let long = LanguageUsage { prompt_tokens: 200_000, ..LanguageUsage::default() };
        assert_eq!(
            language_charge(&tiered, &long),
            Err(PricingError::MissingRate("input_tokens_gt_128k_lte_256k".into()))
        );
    }

    #[test]
    fn reservation_takes_the_dearer_tier_even_if_inverted() {
        // An operator sheet whose low tier is dearer than its high tier.
        let s = sheet(&[
            ("input_tokens_lte_128k", 2_000_000),
            ("output_tokens_lte_128k", 0),
            ("input_tokens_gt_128k_lte_256k", 1_000_000),
            ("output_tokens_gt_128k_lte_256k", 0),
        ]);
        // High tier: 200000 × 1 = 200000; low tier at most 128000 × 2 = 256000.
        assert_eq!(language_reservation(&s, 200_000, 0), Ok(UsdAmount::from_micros(256_000)));
    }
}
