//! Hand-computed charges for every rate line of the published price tables.
//!
//! Each expected value is worked out in the comment beside it (rates per token are
//! `amount_microusd / 1,000,000`, so 500000 per 1M is 0.5 micro-USD a token).

#![allow(clippy::unwrap_used)]

mod common;

use billing::{
    Charge, ImageUsage, LanguageUsage, PricingError, audio_charge, audio_charge_seconds, audio_reservation,
    image_charge, image_reservation, language_charge, language_reservation, language_reservation_text_only,
    video_charge, video_estimate_tokens, video_reservation,
};
use common::*;
use domain::{PriceSheet, UsdAmount};
use domain::{Ratio, Resolution};

/// `(rate, quantity, exact amount)` of each line, as text.
fn lines(charge: &Charge) -> Vec<(String, String, String)> {
    charge.lines.iter().map(|l| (l.rate.clone(), l.quantity.to_string(), l.amount.to_string())).collect()
}

fn usage(prompt: u64, cached: u64, audio: u64, audio_cached: u64, completion: u64) -> LanguageUsage {
    LanguageUsage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_tokens: cached,
        audio_tokens: audio,
        audio_cached_tokens: audio_cached,
    }
}

/// `(prompt, cached, audio, audio_cached, completion, expected micro-USD)`.
type Case = (u64, u64, u64, u64, u64, i64);

fn check_language(model: &str, sheet: &PriceSheet, cases: &[Case]) {
    for &(p, c, a, ac, out, want) in cases {
        let got = language_charge(sheet, &usage(p, c, a, ac, out)).map(|c| c.total.micros());
        assert_eq!(got, Ok(want), "{model}: prompt {p} cached {c} audio {a} audio_cached {ac} completion {out}");
    }
}

#[test]
fn lang_a_v4_flash() {
    // input 0.14, output 0.28, cache_hit 0.028 micro-USD per token.
    check_language(
        "LangA-V4-flash",
        &lang_a_flash(),
        &[
            (1234, 0, 0, 0, 0, 173),         // 1234 × 0.14 = 172.76 → 173
            (0, 0, 0, 0, 2500, 700),         // 2500 × 0.28 = 700
            (4000, 4000, 0, 0, 0, 112),      // 4000 × 0.028 = 112
            (10000, 4000, 0, 0, 2500, 1652), // 6000 × 0.14 = 840; 4000 × 0.028 = 112; 2500 × 0.28 = 700
            (0, 0, 0, 0, 1, 0),              // 0.28 → 0
        ],
    );
}

#[test]
fn lang_a_v4_pro() {
    // input 1.74, output 3.48, cache_hit 0.145.
    check_language(
        "LangA-V4-pro",
        &lang_a_pro(),
        &[
            (1234, 0, 0, 0, 0, 2147),         // 2147.16
            (0, 0, 0, 0, 1000, 3480),         // 1000 × 3.48
            (100, 100, 0, 0, 0, 15),          // 100 × 0.145 = 14.5 → 15 (half away from zero)
            (3, 3, 0, 0, 0, 0),               // 0.435 → 0
            (10000, 4000, 0, 0, 2500, 19720), // 6000 × 1.74 = 10440; 4000 × 0.145 = 580; 2500 × 3.48 = 8700
            (1048576, 0, 0, 0, 0, 1824522),   // no tiers on LangA: 1048576 × 1.74 = 1824522.24
        ],
    );
}

#[test]
fn lang_b_code_and_pro_both_tiers() {
    // ≤128k: input 0.5, output 3, cache_hit 0.1; >128k: input 1, output 6, cache_hit 0.2.
    check_language(
        "LangB-2.0-pro",
        &lang_b_pro(),
        &[
            (1234, 0, 0, 0, 0, 617),               // 1234 × 0.5
            (0, 0, 0, 0, 7, 21),                   // 7 × 3
            (25, 25, 0, 0, 0, 3),                  // 25 × 0.1 = 2.5 → 3, not banker's 2
            (128000, 28000, 0, 0, 1000, 55800),    // low tier at the boundary: 50000 + 2800 + 3000
            (128001, 1, 0, 0, 10, 128060),         // high tier: 128000 × 1 + 0.2 + 10 × 6 = 128060.2
            (256000, 56000, 0, 0, 131072, 997632), // 200000 + 11200 + 786432
            (300000, 0, 0, 0, 0, 300000),          // above 256k: top tier, 300000 × 1
            (1000, 0, 1000, 1000, 0, 100),         // audio on a model without audio rates: 1000 × cache_hit 0.1
            (1000, 0, 400, 0, 0, 500),             // 600 text + 400 audio, all at input 0.5
        ],
    );
}

#[test]
fn lang_b_lite_with_audio_both_tiers() {
    // ≤128k: input 0.25, output 2, cache_hit 0.05, audio_input 3.75, audio_cache_hit 0.75.
    // >128k: input 0.5, output 4, cache_hit 0.1, audio_input 7.5, audio_cache_hit 1.5.
    check_language(
        "LangB-2.0-lite",
        &lang_b_lite(),
        &[
            (1000, 0, 0, 0, 0, 250),       // 1000 × 0.25
            (0, 0, 0, 0, 1000, 2000),      // 1000 × 2
            (1000, 1000, 0, 0, 0, 50),     // 1000 × 0.05
            (1000, 0, 1000, 0, 0, 3750),   // 1000 × 3.75
            (1000, 0, 1000, 1000, 0, 750), // 1000 × 0.75
            // 5000 × 0.25 = 1250; 2000 × 0.05 = 100; 2000 × 3.75 = 7500; 1000 × 0.75 = 750; 500 × 2 = 1000
            (10000, 2000, 3000, 1000, 500, 10600),
            (7, 0, 7, 3, 0, 17), // 4 × 3.75 + 3 × 0.75 = 17.25 → 17
            (7, 0, 7, 3, 1, 19), // + 2 = 19.25 → 19
            // 130000 × 0.5 = 65000; 50000 × 0.1 = 5000; 15000 × 7.5 = 112500; 5000 × 1.5 = 7500; 1000 × 4 = 4000
            (200000, 50000, 20000, 5000, 1000, 194000),
            (128001, 0, 1, 1, 0, 64002), // 128000 × 0.5 + 1 × 1.5 = 64001.5 → 64002
        ],
    );
}

#[test]
fn lang_b_mini_with_audio_both_tiers() {
    // ≤128k: input 0.1, output 0.4, cache_hit 0.02, audio_input 1.5, audio_cache_hit 0.3.
    // >128k: input 0.2, output 0.8, cache_hit 0.04, audio_input 3, audio_cache_hit 0.6.
    check_language(
        "LangB-2.0-mini",
        &lang_b_mini(),
        &[
            (1, 0, 0, 0, 1, 1),                   // 0.1 + 0.4 = 0.5 → 1, though each line alone rounds to 0
            (10000, 0, 0, 0, 0, 1000),            // 10000 × 0.1
            (0, 0, 0, 0, 10000, 4000),            // 10000 × 0.4
            (10000, 10000, 0, 0, 0, 200),         // 10000 × 0.02
            (10000, 0, 10000, 0, 0, 15000),       // 10000 × 1.5
            (10000, 0, 10000, 10000, 0, 3000),    // 10000 × 0.3
            (10000, 2000, 3000, 1000, 500, 4040), // 500 + 40 + 3000 + 300 + 200
            // 110000 × 0.2 = 22000; 10000 × 0.04 = 400; 7500 × 3 = 22500; 2500 × 0.6 = 1500; 3333 × 0.8 = 2666.4
            (130000, 10000, 10000, 2500, 3333, 49066),
        ],
    );
}

#[test]
fn lang_b_turbo_single_tier() {
    // input 0.5, output 2.5, cache_hit 0.1; no tiers, so 300000 tokens stay at the same rates.
    check_language(
        "LangB-2.1-turbo",
        &lang_b_turbo(),
        &[
            (1234, 0, 0, 0, 0, 617),
            (0, 0, 0, 0, 3, 8),                     // 7.5 → 8
            (300000, 100000, 0, 0, 262144, 765360), // 100000 + 10000 + 655360
            (1000, 200, 400, 100, 0, 380),          // input line 700 × 0.5 = 350; cache line 300 × 0.1 = 30
        ],
    );
}

#[test]
fn audio_without_audio_rates_shares_the_text_lines() {
    let charge = language_charge(&lang_b_turbo(), &usage(1000, 200, 400, 100, 0)).unwrap();
    assert_eq!(
        lines(&charge),
        vec![
            ("input_tokens".into(), "700".into(), "350".into()),
            ("cache_hit_tokens".into(), "300".into(), "30".into()),
        ]
    );
}

#[test]
fn lines_carry_exact_unrounded_amounts_and_no_storage() {
    let charge = language_charge(&lang_b_lite(), &usage(7, 1, 5, 2, 3)).unwrap();
    // input 1 × 0.25; cache 1 × 0.05; audio 3 × 3.75; audio cache 2 × 0.75; output 3 × 2 → 19.05 → 19.
    assert_eq!(
        lines(&charge),
        vec![
            ("input_tokens_lte_128k".into(), "1".into(), "0.25".into()),
            ("cache_hit_tokens_lte_128k".into(), "1".into(), "0.05".into()),
            ("audio_input_tokens_lte_128k".into(), "3".into(), "11.25".into()),
            ("audio_cache_hit_tokens_lte_128k".into(), "2".into(), "1.5".into()),
            ("output_tokens_lte_128k".into(), "3".into(), "6".into()),
        ]
    );
    assert_eq!(charge.total, UsdAmount::from_micros(19));
    for (_, sheet) in language_sheets() {
        let charge = language_charge(&sheet, &usage(200_000, 1, 1, 0, 1)).unwrap();
        assert!(charge.lines.iter().all(|l| !l.rate.starts_with("storage")));
    }
}

#[test]
fn rounding_happens_once_over_the_sum() {
    // Three lines of 0.4 micro-USD each: 1.2 → 1 (per-line rounding would give 0).
    let sheet = sheet(
        1_000_000,
        "token",
        &[("input_tokens", 400_000), ("cache_hit_tokens", 400_000), ("output_tokens", 400_000)],
    );
    assert_eq!(language_charge(&sheet, &usage(2, 1, 0, 0, 1)).map(|c| c.total.micros()), Ok(1));
    // Four lines of 0.4: 1.6 → 2 (per-line rounding would give 0).
    let sheet = sheet_with_audio_at(400_000);
    assert_eq!(language_charge(&sheet, &usage(3, 1, 1, 0, 1)).map(|c| c.total.micros()), Ok(2));
    // Exactly half rounds away from zero: 0.5 → 1, 1.5 → 2, 2.5 → 3.
    let half = sheet_with_audio_at(500_000);
    for (tokens, want) in [(1, 1), (3, 2), (5, 3)] {
        assert_eq!(language_charge(&half, &usage(tokens, 0, 0, 0, 0)).map(|c| c.total.micros()), Ok(want));
    }
}

fn sheet_with_audio_at(amount: i64) -> PriceSheet {
    sheet(
        1_000_000,
        "token",
        &[
            ("input_tokens", amount),
            ("cache_hit_tokens", amount),
            ("audio_input_tokens", amount),
            ("output_tokens", amount),
        ],
    )
}

#[test]
fn language_reservations() {
    // LangB-2.0-pro, bound 100000 in the low tier: 100000 × 0.5 + 4096 × 3 = 50000 + 12288.
    assert_eq!(language_reservation(&lang_b_pro(), 100_000, 4096), Ok(UsdAmount::from_micros(62_288)));
    // Bound 200000 in the high tier: 200000 × 1 + 131072 × 6 = 986432.
    assert_eq!(language_reservation(&lang_b_pro(), 200_000, 131_072), Ok(UsdAmount::from_micros(986_432)));
    // LangA-V4-flash: 1000 × 0.14 + 1000 × 0.28 = 420.
    assert_eq!(language_reservation(&lang_a_flash(), 1000, 1000), Ok(UsdAmount::from_micros(420)));
    // LangB-2.0-lite, audio possible: prompt at audio_input 3.75: 1000 × 3.75 + 100 × 2 = 3950.
    assert_eq!(language_reservation(&lang_b_lite(), 1000, 100), Ok(UsdAmount::from_micros(3950)));
    // Text only: 1000 × 0.25 + 100 × 2 = 450.
    assert_eq!(language_reservation_text_only(&lang_b_lite(), 1000, 100), Ok(UsdAmount::from_micros(450)));
    // LangB-2.0-mini at 1 + 1 tokens: 1.5 + 0.4 = 1.9 → 2.
    assert_eq!(language_reservation(&lang_b_mini(), 1, 1), Ok(UsdAmount::from_micros(2)));
}

#[test]
fn image_models() {
    let img = |refs: u64, generated: &[u64]| ImageUsage { reference_images: refs, generated: generated.to_vec() };
    let cases: Vec<(PriceSheet, ImageUsage, i64)> = vec![
        (imagegen_45(), img(0, &[4_194_304; 3]), 108_000), // text_to_image_pieces 3 × 36000
        (imagegen_45(), img(2, &[4_194_304; 2]), 72_000),  // image_to_image_pieces 2 × 36000
        (imagegen_45(), img(1, &[]), 0),                   // nothing generated, nothing billed
        (imagegen_50_lite(), img(0, &[3_686_400; 4]), 126_000), // text_to_image_pieces 4 × 31500
        (imagegen_50_lite(), img(14, &[3_686_400]), 31_500), // image_to_image_pieces 1 × 31500
        (imagegen_50_pro(), img(0, &[2_360_000]), 45_000), // ≤ 2360000 pixels: 45000
        (imagegen_50_pro(), img(0, &[2_360_001]), 90_000), // > 2360000 pixels: 90000
        (imagegen_50_pro(), img(3, &[1_048_576, 4_194_304]), 144_000), // 3 × 3000 + 45000 + 90000
        (imagegen_50_pro(), img(10, &[921_600]), 75_000),  // 10 × 3000 + 45000
        (imagegen_50_pro(), img(2, &[]), 0),               // every item failed: references not billed
    ];
    for (i, (sheet, usage, want)) in cases.into_iter().enumerate() {
        assert_eq!(image_charge(&sheet, &usage).map(|c| c.total.micros()), Ok(want), "case {i}");
    }
    let charge = image_charge(&imagegen_45(), &img(1, &[1, 1])).unwrap();
    assert_eq!(lines(&charge), vec![("image_to_image_pieces".into(), "2".into(), "72000".into())]);
}

#[test]
fn image_reservations() {
    let usd = |m| Ok(UsdAmount::from_micros(m));
    assert_eq!(image_reservation(&imagegen_45(), 0, 4, 16_777_216), usd(144_000)); // 4 × 36000
    assert_eq!(image_reservation(&imagegen_50_lite(), 3, 12, 16_777_216), usd(378_000)); // 12 × 31500
    assert_eq!(image_reservation(&imagegen_50_pro(), 2, 1, 4_194_304), usd(96_000)); // 6000 + 90000
    assert_eq!(image_reservation(&imagegen_50_pro(), 2, 1, 2_359_296), usd(51_000)); // 6000 + 45000
}

#[test]
fn video_models_every_rate() {
    // 108900 tokens (5 s, 720p, 16:9) at each rate in USD per 1M tokens.
    let t = 108_900;
    let cases: Vec<(PriceSheet, Resolution, bool, i64)> = vec![
        (videogen_20(), Resolution::P480, false, 762_300),      // × 7.0
        (videogen_20(), Resolution::P720, false, 762_300),      // × 7.0
        (videogen_20(), Resolution::P1080, false, 838_530),     // × 7.7
        (videogen_20(), Resolution::K4, false, 435_600),        // × 4.0
        (videogen_20(), Resolution::P480, true, 468_270),       // × 4.3
        (videogen_20(), Resolution::P720, true, 468_270),       // × 4.3
        (videogen_20(), Resolution::P1080, true, 511_830),      // × 4.7
        (videogen_20(), Resolution::K4, true, 261_360),         // × 2.4
        (videogen_20_fast(), Resolution::P480, false, 609_840), // × 5.6
        (videogen_20_fast(), Resolution::P720, false, 609_840),
        (videogen_20_fast(), Resolution::P480, true, 359_370), // × 3.3
        (videogen_20_fast(), Resolution::P720, true, 359_370),
        (videogen_20_mini(), Resolution::P480, false, 381_150), // × 3.5
        (videogen_20_mini(), Resolution::P720, false, 381_150),
        (videogen_20_mini(), Resolution::P480, true, 228_690), // × 2.1
        (videogen_20_mini(), Resolution::P720, true, 228_690),
    ];
    for (sheet, res, with_video, want) in cases {
        let got = video_charge(&sheet, res, with_video, t).map(|c| c.total.micros());
        assert_eq!(got, Ok(want), "{res} with_video_input={with_video}");
    }
    // Rounding once: 1 × 7.7 = 7.7 → 8; 5 × 2.1 = 10.5 → 11; 3 × 4.3 = 12.9 → 13.
    assert_eq!(video_charge(&videogen_20(), Resolution::P1080, false, 1).map(|c| c.total.micros()), Ok(8));
    assert_eq!(video_charge(&videogen_20_mini(), Resolution::P720, true, 5).map(|c| c.total.micros()), Ok(11));
    assert_eq!(video_charge(&videogen_20(), Resolution::P480, true, 3).map(|c| c.total.micros()), Ok(13));
    // The fast model has no 1080p rate.
    assert_eq!(
        video_charge(&videogen_20_fast(), Resolution::P1080, false, 1),
        Err(PricingError::MissingRate("output_tokens_1080p".into()))
    );
}

#[test]
fn video_token_estimates() {
    assert_eq!(video_estimate_tokens(Resolution::P720, Ratio::Wide, 5), Ok(108_900)); // 1280 × 720 × 121 / 1024
    assert_eq!(video_estimate_tokens(Resolution::P720, Ratio::Tall, 5), Ok(108_900));
    assert_eq!(video_estimate_tokens(Resolution::P720, Ratio::Square, 5), Ok(108_900)); // 960 × 960 is the same area
    assert_eq!(video_estimate_tokens(Resolution::P720, Ratio::Wide, -1), Ok(324_900)); // 15 s: 900 × 361
    assert_eq!(video_estimate_tokens(Resolution::P480, Ratio::Wide, 5), Ok(48_437)); // 409920 × 121 / 1024 = 48437.81
    assert_eq!(video_estimate_tokens(Resolution::P1080, Ratio::Wide, 5), Ok(245_025)); // 2025 × 121
    assert_eq!(video_estimate_tokens(Resolution::K4, Ratio::Wide, 5), Ok(980_100)); // 8100 × 121
    assert_eq!(video_estimate_tokens(Resolution::P720, Ratio::Portrait, 5), Ok(109_586)); // 834 × 1112 × 121 / 1024 = 109586.3
    assert_eq!(video_estimate_tokens(Resolution::P720, Ratio::Adaptive, 5), Ok(109_586)); // the largest 720p area
    assert_eq!(video_estimate_tokens(Resolution::P720, Ratio::Wide, 4), Ok(87_300)); // 900 × 97
}

#[test]
fn video_reservations() {
    // 108900 × 7 = 762300 ($0.76 for 5 s at 720p).
    assert_eq!(
        video_reservation(&videogen_20(), Resolution::P720, Ratio::Wide, 5, false),
        Ok(UsdAmount::from_micros(762_300))
    );
    // 10 s 1080p with a video input: 2025 × 241 = 488025 tokens × 4.7 = 2293717.5 → 2293718.
    assert_eq!(
        video_reservation(&videogen_20(), Resolution::P1080, Ratio::Wide, 10, true),
        Ok(UsdAmount::from_micros(2_293_718))
    );
}

#[test]
fn audio_model() {
    // 2500 micro-USD per second.
    let sheet = audiogen();
    for (millis, want) in [
        (0, 0),
        (600, 1_500),       // 0.6 s (the upstream sample)
        (1, 3),             // 2.5 → 3
        (3, 8),             // 7.5 → 8
        (61_234, 153_085),  // 61.234 × 2500
        (120_000, 300_000), // the cap
        (150_000, 300_000), // billed as 120 s
        (u64::MAX, 300_000),
    ] {
        assert_eq!(audio_charge(&sheet, millis).map(|c| c.total.micros()), Ok(want), "{millis} ms");
    }
    let charge = audio_charge(&sheet, 600).unwrap();
    assert_eq!(lines(&charge), vec![("output_audio_seconds".into(), "0.6".into(), "1500".into())]);
    assert_eq!(audio_reservation(&sheet), Ok(UsdAmount::from_micros(300_000)));
    // A per-minute rate: 150000 per 60 s; 1 ms is 2.5 micro-USD → 3.
    let per_minute = common::sheet(60, "second", &[("output_audio_seconds", 150_000)]);
    assert_eq!(audio_charge(&per_minute, 1).map(|c| c.total.micros()), Ok(3));
    assert_eq!(audio_reservation(&per_minute), Ok(UsdAmount::from_micros(300_000)));
}

#[test]
fn audio_model_exact_seconds_round_once() {
    let sheet = audiogen();
    let seconds = |s: &str| s.parse::<rust_decimal::Decimal>().unwrap();
    for (text, want) in [
        ("0", 0),
        ("0.6", 1_500),
        ("74.5001", 186_250),  // 186250.25 → 186250
        ("74.5002", 186_251),  // 186250.5 → 186251 (half away from zero, once)
        ("0.0001", 0),         // 0.25 → 0
        ("0.0002", 1),         // 0.5 → 1
        ("119.9999", 300_000), // 299999.75 → 300000
        ("120", 300_000),
        ("120.0001", 300_000), // capped
        ("1000000", 300_000),
    ] {
        assert_eq!(audio_charge_seconds(&sheet, seconds(text)).map(|c| c.total.micros()), Ok(want), "{text} s");
    }
    assert!(matches!(audio_charge_seconds(&sheet, seconds("-0.001")), Err(PricingError::InvalidInput(_))));
    // Whole milliseconds agree with the millisecond form.
    assert_eq!(audio_charge_seconds(&sheet, seconds("61.234")), audio_charge(&sheet, 61_234));
}
