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
//! at the lower `_with_video_input` rate; settlement then exceeds the hold, which DESIGN §4
//! allows and records.

use domain::{PriceSheet, UsdAmount};

use crate::charge::{Charge, ChargeBuilder, PricingError};

/// The resolutions with a rate key.
pub const RESOLUTIONS: [&str; 4] = ["480p", "720p", "1080p", "4k"];

/// The ratios a video request may ask for.
pub const RATIOS: [&str; 7] = ["adaptive", "16:9", "4:3", "1:1", "3:4", "9:16", "21:9"];

/// Seconds assumed for `duration = -1`.
pub const AUTO_DURATION_SECONDS: u64 = 15;

/// Frames per second of the estimate.
const FPS: u64 = 24;

/// Pixels per token.
const PIXELS_PER_TOKEN: u64 = 1024;

/// (resolution, ratio, width, height) for every fixed ratio.
const SIZES: [(&str, &str, u64, u64); 24] = [
    ("480p", "16:9", 854, 480),
    ("480p", "4:3", 752, 560),
    ("480p", "1:1", 640, 640),
    ("480p", "3:4", 560, 752),
    ("480p", "9:16", 480, 854),
    ("480p", "21:9", 992, 432),
    ("720p", "16:9", 1280, 720),
    ("720p", "4:3", 1112, 834),
    ("720p", "1:1", 960, 960),
    ("720p", "3:4", 834, 1112),
    ("720p", "9:16", 720, 1280),
    ("720p", "21:9", 1470, 630),
    ("1080p", "16:9", 1920, 1080),
    ("1080p", "4:3", 1664, 1248),
    ("1080p", "1:1", 1440, 1440),
    ("1080p", "3:4", 1248, 1664),
    ("1080p", "9:16", 1080, 1920),
    ("1080p", "21:9", 2206, 946),
    ("4k", "16:9", 3840, 2160),
    ("4k", "4:3", 3328, 2496),
    ("4k", "1:1", 2880, 2880),
    ("4k", "3:4", 2496, 3328),
    ("4k", "9:16", 2160, 3840),
    ("4k", "21:9", 4412, 1892),
];

fn check_resolution(resolution: &str) -> Result<(), PricingError> {
    if RESOLUTIONS.contains(&resolution) {
        Ok(())
    } else {
        Err(PricingError::InvalidInput(format!("unknown video resolution {resolution:?}")))
    }
}

/// The rate key for `resolution`, with or without a video among the inputs.
pub fn video_rate_key(resolution: &str, with_video_input: bool) -> Result<String, PricingError> {
    check_resolution(resolution)?;
    let suffix = if with_video_input { "_with_video_input" } else { "" };
    Ok(format!("output_tokens_{resolution}{suffix}"))
}

/// The charge for a finished video task: `completion_tokens` at the resolution's rate.
pub fn video_charge(
    sheet: &PriceSheet,
    resolution: &str,
    with_video_input: bool,
    completion_tokens: u64,
) -> Result<Charge, PricingError> {
    let mut bill = ChargeBuilder::new(sheet);
    bill.add_units(&video_rate_key(resolution, with_video_input)?, completion_tokens)?;
    bill.finish()
}

/// The frame size `(width, height)` estimated for `resolution` and `ratio`; `adaptive` gives the
/// size of largest area at that resolution (see the module notes).
pub fn video_dimensions(resolution: &str, ratio: &str) -> Result<(u64, u64), PricingError> {
    check_resolution(resolution)?;
    let mut at_resolution = SIZES.iter().filter(|(res, ..)| *res == resolution);
    let found = if ratio == "adaptive" {
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
pub fn video_estimate_tokens(resolution: &str, ratio: &str, duration_seconds: i64) -> Result<u64, PricingError> {
    let (width, height) = video_dimensions(resolution, ratio)?;
    let seconds = estimated_seconds(duration_seconds)?;
    let frames = u128::from(seconds) * u128::from(FPS) + 1;
    let tokens = u128::from(width) * u128::from(height) * frames / u128::from(PIXELS_PER_TOKEN);
    u64::try_from(tokens).map_err(|_| PricingError::Overflow)
}

/// The amount to hold when a video task is created: the estimated tokens at the task's rate.
pub fn video_reservation(
    sheet: &PriceSheet,
    resolution: &str,
    ratio: &str,
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
        assert_eq!(video_estimate_tokens("720p", "16:9", 5), Ok(108_900));
    }

    #[test]
    fn every_ratio_keeps_about_the_16_9_area() {
        for res in RESOLUTIONS {
            let base = video_dimensions(res, "16:9").map(|(w, h)| w * h).unwrap_or(0);
            assert!(base > 0, "{res}");
            for ratio in RATIOS {
                let area = video_dimensions(res, ratio).map(|(w, h)| w * h).unwrap_or(0);
                assert!(area * 100 >= base * 99 && area * 100 <= base * 105, "{res} {ratio}: {area} vs {base}");
                if ratio != "adaptive" {
                    let adaptive = video_dimensions(res, "adaptive").map(|(w, h)| w * h).unwrap_or(0);
                    assert!(adaptive >= area, "{res} adaptive below {ratio}");
                }
            }
        }
    }

    #[test]
    fn portrait_mirrors_landscape() {
        for res in RESOLUTIONS {
            for (a, b) in [("16:9", "9:16"), ("4:3", "3:4")] {
                let (w, h) = video_dimensions(res, a).unwrap_or_default();
                assert_eq!(video_dimensions(res, b), Ok((h, w)), "{res} {a}");
            }
        }
    }

    #[test]
    fn bad_inputs_are_refused() {
        assert!(matches!(video_estimate_tokens("8k", "16:9", 5), Err(PricingError::InvalidInput(_))));
        assert!(matches!(video_estimate_tokens("720p", "2:1", 5), Err(PricingError::InvalidInput(_))));
        assert!(matches!(video_estimate_tokens("720p", "16:9", 0), Err(PricingError::InvalidInput(_))));
        assert!(matches!(video_estimate_tokens("720p", "16:9", -2), Err(PricingError::InvalidInput(_))));
        assert_eq!(video_estimate_tokens("720p", "16:9", -1), video_estimate_tokens("720p", "16:9", 15));
        assert!(matches!(video_rate_key("720p_with_video_input", false), Err(PricingError::InvalidInput(_))));
        assert_eq!(video_estimate_tokens("4k", "16:9", i64::MAX), Err(PricingError::Overflow));
    }
}
