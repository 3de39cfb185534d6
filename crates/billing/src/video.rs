//! Video models: per output token, by resolution and by whether a video was among the inputs.
//!
//! Rate keys are `output_tokens_<resolution>` and `output_tokens_<resolution>_with_video_input`
//! for the resolutions `480p`, `720p`, `1080p` and `4k`, each an amount per 1,000,000 tokens on
//! the default sheets. Settlement bills the upstream's reported `usage.completion_tokens`.
//!
//! The reservation estimates tokens as `width × height × (24 × seconds + 1) / 1024`, floored
//! (24 fps plus the first frame: 5 s at 720p 16:9 is 1280 × 720 × 121 / 1024 = 108,900 tokens,
//! the upstream's own sample). `duration = -1` (the upstream picks the length) is estimated at
//! the longest duration, 15 s.
//!
//! **Frame sizes.** 16:9 uses 854×480, 1280×720, 1920×1080 and 3840×2160. The other ratios use
//! sizes of about the same pixel area (within 5 % of 16:9; 720p 3:4 is 834×1112, the size the
//! upstream documents), and 4k doubles the 1080p sides. `adaptive` (the upstream picks the ratio
//! from the inputs) is estimated at the largest area of that resolution, so that the hold
//! covers whichever ratio is picked. See [`video_dimensions`].
//!
//! The estimate counts output only. The upstream may count the seconds of an input video too,
//! at the lower `_with_video_input` rate; settlement then exceeds the hold, which is
//! allowed and counted (`gateway_overdraft_micro_usd_total`).

use domain::{PriceSheet, Ratio, Resolution, UsdAmount};

use crate::charge::{Charge, ChargeBuilder, PricingError};

/// Seconds assumed for `duration = -1`.
pub const AUTO_DURATION_SECONDS: u64 = 15;

/// Frames per second of the estimate.
const FPS: u64 = 24;

/// Pixels per token.
const PIXELS_PER_TOKEN: u64 = 1024;

/// (resolution, ratio, width, height) for every fixed ratio.
const SIZES: [(Resolution, Ratio, u64, u64); 24] = [
    (Resolution::P480, Ratio::Wide, 854, 480),
    (Resolution::P480, Ratio::Standard, 752, 560),
    (Resolution::P480, Ratio::Square, 640, 640),
    (Resolution::P480, Ratio::Portrait, 560, 752),
    (Resolution::P480, Ratio::Tall, 480, 854),
    (Resolution::P480, Ratio::UltraWide, 992, 432),
    (Resolution::P720, Ratio::Wide, 1280, 720),
    (Resolution::P720, Ratio::Standard, 1112, 834),
    (Resolution::P720, Ratio::Square, 960, 960),
    (Resolution::P720, Ratio::Portrait, 834, 1112),
    (Resolution::P720, Ratio::Tall, 720, 1280),
    (Resolution::P720, Ratio::UltraWide, 1470, 630),
    (Resolution::P1080, Ratio::Wide, 1920, 1080),
    (Resolution::P1080, Ratio::Standard, 1664, 1248),
    (Resolution::P1080, Ratio::Square, 1440, 1440),
    (Resolution::P1080, Ratio::Portrait, 1248, 1664),
    (Resolution::P1080, Ratio::Tall, 1080, 1920),
    (Resolution::P1080, Ratio::UltraWide, 2206, 946),
    (Resolution::K4, Ratio::Wide, 3840, 2160),
    (Resolution::K4, Ratio::Standard, 3328, 2496),
    (Resolution::K4, Ratio::Square, 2880, 2880),
    (Resolution::K4, Ratio::Portrait, 2496, 3328),
    (Resolution::K4, Ratio::Tall, 2160, 3840),
    (Resolution::K4, Ratio::UltraWide, 4412, 1892),
];

/// The rate key for `resolution`, with or without a video among the inputs.
pub fn video_rate_key(resolution: Resolution, with_video_input: bool) -> String {
    let suffix = if with_video_input { "_with_video_input" } else { "" };
    format!("output_tokens_{resolution}{suffix}")
}

/// The charge for a finished video task: `completion_tokens` at the resolution's rate.
pub fn video_charge(
    sheet: &PriceSheet,
    resolution: Resolution,
    with_video_input: bool,
    completion_tokens: u64,
) -> Result<Charge, PricingError> {
    let mut bill = ChargeBuilder::new(sheet);
    bill.add_units(&video_rate_key(resolution, with_video_input), completion_tokens)?;
    bill.finish()
}

/// The frame size `(width, height)` estimated for `resolution` and `ratio`; `adaptive` gives the
/// size of largest area at that resolution (see the module notes).
pub fn video_dimensions(resolution: Resolution, ratio: Ratio) -> Result<(u64, u64), PricingError> {
    let mut at_resolution = SIZES.iter().filter(|(res, ..)| *res == resolution);
    let found = if ratio == Ratio::Adaptive {
        at_resolution.max_by_key(|(_, _, w, h)| w * h)
    } else {
        at_resolution.find(|(_, r, ..)| *r == ratio)
    };
    found
        .map(|&(_, _, w, h)| (w, h))
        .ok_or_else(|| PricingError::InvalidInput(format!("unknown video ratio {ratio:?}")))
}

/// Seconds to estimate for a requested `duration`: itself when positive, 15 for `-1`.
fn estimated_seconds(duration_seconds: i64) -> Result<u64, PricingError> {
    match duration_seconds {
        -1 => Ok(AUTO_DURATION_SECONDS),
        d if d > 0 => u64::try_from(d).map_err(|_| PricingError::Overflow),
        d => Err(PricingError::InvalidInput(format!("video duration must be positive or -1, got {d}"))),
    }
}

/// Estimated output tokens: `width × height × (24 × seconds + 1) / 1024`, floored.
pub fn video_estimate_tokens(resolution: Resolution, ratio: Ratio, duration_seconds: i64) -> Result<u64, PricingError> {
    let (width, height) = video_dimensions(resolution, ratio)?;
    let seconds = estimated_seconds(duration_seconds)?;
    let frames = u128::from(seconds) * u128::from(FPS) + 1;
    let tokens = u128::from(width) * u128::from(height) * frames / u128::from(PIXELS_PER_TOKEN);
    u64::try_from(tokens).map_err(|_| PricingError::Overflow)
}

/// The amount to hold when a video task is created: the estimated tokens at the task's rate.
pub fn video_reservation(
    sheet: &PriceSheet,
    resolution: Resolution,
    ratio: Ratio,
    duration_seconds: i64,
    with_video_input: bool,
) -> Result<UsdAmount, PricingError> {
    let tokens = video_estimate_tokens(resolution, ratio, duration_seconds)?;
    Ok(video_charge(sheet, resolution, with_video_input, tokens)?.total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn design_sample_is_108900_tokens() {
        assert_eq!(video_estimate_tokens(Resolution::P720, Ratio::Wide, 5), Ok(108_900));
    }

    #[test]
    fn every_ratio_keeps_about_the_16_9_area() {
        for &res in Resolution::ALL {
            let base = video_dimensions(res, Ratio::Wide).map(|(w, h)| w * h).unwrap_or(0);
            assert!(base > 0, "{res}");
            for &ratio in Ratio::ALL {
                let area = video_dimensions(res, ratio).map(|(w, h)| w * h).unwrap_or(0);
                assert!(area * 100 >= base * 99 && area * 100 <= base * 105, "{res} {ratio}: {area} vs {base}");
                if ratio != Ratio::Adaptive {
                    let adaptive = video_dimensions(res, Ratio::Adaptive).map(|(w, h)| w * h).unwrap_or(0);
                    assert!(adaptive >= area, "{res} adaptive below {ratio}");
                }
            }
        }
    }

    #[test]
    fn portrait_mirrors_landscape() {
        for &res in Resolution::ALL {
            for (a, b) in [(Ratio::Wide, Ratio::Tall), (Ratio::Standard, Ratio::Portrait)] {
                let (w, h) = video_dimensions(res, a).unwrap_or_default();
                assert_eq!(video_dimensions(res, b), Ok((h, w)), "{res} {a}");
            }
        }
    }

    #[test]
    fn bad_inputs_are_refused() {
        // An unknown resolution or ratio cannot reach the rules: it does not parse.
        assert!("8k".parse::<Resolution>().is_err() && "2:1".parse::<Ratio>().is_err());
        assert!(matches!(video_estimate_tokens(Resolution::P720, Ratio::Wide, 0), Err(PricingError::InvalidInput(_))));
        assert!(matches!(video_estimate_tokens(Resolution::P720, Ratio::Wide, -2), Err(PricingError::InvalidInput(_))));
        assert_eq!(
            video_estimate_tokens(Resolution::P720, Ratio::Wide, -1),
            video_estimate_tokens(Resolution::P720, Ratio::Wide, 15)
        );
        assert_eq!(video_rate_key(Resolution::P720, true), "output_tokens_720p_with_video_input");
        assert_eq!(video_estimate_tokens(Resolution::K4, Ratio::Wide, i64::MAX), Err(PricingError::Overflow));
    }
}
