//! Properties of pricing over the published sheets: charges are never negative, grow with
//! every billed quantity, and never exceed the reservation made for their bounds.

#![allow(clippy::unwrap_used)]

mod common;

use billing::{
    ImageUsage, LanguageUsage, audio_charge, audio_reservation, image_charge, image_reservation, language_charge,
    language_reservation, language_reservation_text_only, video_charge, video_estimate_tokens, video_reservation,
};
use common::*;
use domain::{Ratio, Resolution};
use proptest::prelude::*;

fn total(usage: &LanguageUsage, sheet: &domain::PriceSheet) -> i64 {
    language_charge(sheet, usage).unwrap().total.micros()
}

/// Usage whose details fit inside the totals: `cached + audio ≤ prompt`, `audio_cached ≤ audio`.
fn consistent_usage(max_prompt: u64, max_completion: u64) -> impl Strategy<Value = LanguageUsage> {
    (0..=max_prompt, 0..=max_completion, any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
        move |(prompt, completion, a, b, c)| {
            let audio = if prompt == 0 { 0 } else { a % (prompt + 1) };
            let cached = b % (prompt - audio + 1);
            let audio_cached = c % (audio + 1);
            LanguageUsage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                cached_tokens: cached,
                audio_tokens: audio,
                audio_cached_tokens: audio_cached,
            }
        },
    )
}

/// Adds `delta` tokens of one billed category to `u`, keeping it consistent.
fn add_tokens(u: LanguageUsage, category: usize, delta: u64) -> LanguageUsage {
    let mut v = u;
    match category {
        0 => v.prompt_tokens += delta, // plain input
        1 => {
            v.prompt_tokens += delta;
            v.cached_tokens += delta;
        }
        2 => {
            v.prompt_tokens += delta;
            v.audio_tokens += delta;
        }
        3 => {
            v.prompt_tokens += delta;
            v.audio_tokens += delta;
            v.audio_cached_tokens += delta;
        }
        _ => v.completion_tokens += delta,
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn language_charge_grows_with_every_billed_quantity(
        model in 0..6usize,
        u in consistent_usage(300_000, 300_000),
        category in 0..5usize,
        delta in 0..200_000u64,
    ) {
        let (name, sheet) = language_sheets().swap_remove(model);
        let before = total(&u, &sheet);
        let after = total(&add_tokens(u, category, delta), &sheet);
        prop_assert!(before >= 0, "{name}");
        prop_assert!(after >= before, "{name}: {u:?} + {delta} of category {category}: {after} < {before}");
    }

    #[test]
    fn language_charge_grows_with_prompt_and_completion_fields(
        model in 0..6usize,
        prompt in 0..400_000u64,
        completion in 0..400_000u64,
        cached in 0..100_000u64,
        audio in 0..100_000u64,
        audio_cached in 0..100_000u64,
        more_prompt in 0..300_000u64,
        more_completion in 0..300_000u64,
    ) {
        // Any field values, consistent or not: raising prompt_tokens or completion_tokens alone never lowers the charge.
        let (name, sheet) = language_sheets().swap_remove(model);
        let u = LanguageUsage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: cached, audio_tokens: audio, audio_cached_tokens: audio_cached };
        let base = total(&u, &sheet);
        prop_assert!(base >= 0);
        let longer = LanguageUsage { prompt_tokens: prompt + more_prompt, ..u };
        let wordier = LanguageUsage { completion_tokens: completion + more_completion, ..u };
        prop_assert!(total(&longer, &sheet) >= base, "{name} prompt");
        prop_assert!(total(&wordier, &sheet) >= base, "{name} completion");
    }

    #[test]
    fn language_reservation_covers_every_charge_within_bounds(
        model in 0..6usize,
        bound in 0..400_000u64,
        max_output in 0..300_000u64,
        u in consistent_usage(400_000, 300_000),
    ) {
        let (name, sheet) = language_sheets().swap_remove(model);
        let u = LanguageUsage {
            prompt_tokens: u.prompt_tokens.min(bound),
            completion_tokens: u.completion_tokens.min(max_output),
            ..u
        };
        // Shrinking the prompt may break the details; shrink them in the same order as they were drawn.
        let audio = u.audio_tokens.min(u.prompt_tokens);
        let u = LanguageUsage {
            audio_tokens: audio,
            cached_tokens: u.cached_tokens.min(u.prompt_tokens - audio),
            audio_cached_tokens: u.audio_cached_tokens.min(audio),
            ..u
        };
        let reserved = language_reservation(&sheet, bound, max_output).unwrap();
        let charged = language_charge(&sheet, &u).unwrap().total;
        prop_assert!(reserved >= charged, "{name}: {u:?} charged {charged} > reserved {reserved}");
        let text_only = LanguageUsage { audio_tokens: 0, audio_cached_tokens: 0, ..u };
        let reserved = language_reservation_text_only(&sheet, bound, max_output).unwrap();
        let charged = language_charge(&sheet, &text_only).unwrap().total;
        prop_assert!(reserved >= charged, "{name} text only: {text_only:?} charged {charged} > reserved {reserved}");
    }

    #[test]
    fn image_charge_grows_and_stays_within_the_reservation(
        model in 0..3usize,
        references in 0..15u64,
        max_images in 0..15usize,
        max_pixels in 921_600..16_777_216u64,
        pixels in proptest::collection::vec(921_600..16_777_216u64, 0..15),
        extra in 921_600..16_777_216u64,
    ) {
        let (name, sheet) = image_sheets().swap_remove(model);
        let generated: Vec<u64> = pixels.iter().take(max_images).map(|&p| p.min(max_pixels)).collect();
        let usage = ImageUsage { reference_images: references, generated: generated.clone() };
        let charged = image_charge(&sheet, &usage).unwrap().total;
        prop_assert!(!charged.is_negative());
        let reserved = image_reservation(&sheet, references, max_images as u64, max_pixels).unwrap();
        prop_assert!(reserved >= charged, "{name}: {usage:?} charged {charged} > reserved {reserved}");
        // One more image, or a bigger one, never costs less.
        let mut more = usage.clone();
        more.generated.push(extra);
        prop_assert!(image_charge(&sheet, &more).unwrap().total >= charged, "{name} more");
        if let Some(first) = usage.generated.first() {
            let mut bigger = usage.clone();
            bigger.generated[0] = first.saturating_add(extra);
            prop_assert!(image_charge(&sheet, &bigger).unwrap().total >= charged, "{name} bigger");
        }
    }

    #[test]
    fn video_charge_grows_with_tokens_and_estimates_with_duration(
        res in 0..4usize,
        ratio in 0..7usize,
        seconds in 1..60i64,
        tokens in 0..10_000_000u64,
        more in 0..10_000_000u64,
        with_video in any::<bool>(),
    ) {
        let resolution = Resolution::ALL[res];
        let ratio = Ratio::ALL[ratio];
        let sheet = videogen_20();
        let a = video_charge(&sheet, resolution, with_video, tokens).unwrap().total;
        let b = video_charge(&sheet, resolution, with_video, tokens + more).unwrap().total;
        prop_assert!(!a.is_negative() && b >= a);
        let shorter = video_estimate_tokens(resolution, ratio, seconds).unwrap();
        let longer = video_estimate_tokens(resolution, ratio, seconds + 1).unwrap();
        prop_assert!(longer > shorter);
        // The hold is the charge of the estimate.
        let hold = video_reservation(&sheet, resolution, ratio, seconds, with_video).unwrap();
        prop_assert_eq!(hold, video_charge(&sheet, resolution, with_video, shorter).unwrap().total);
    }

    #[test]
    fn audio_charge_grows_and_never_exceeds_the_hold(millis in any::<u64>(), more in 0..200_000u64) {
        let sheet = audiogen();
        let a = audio_charge(&sheet, millis).unwrap().total;
        let b = audio_charge(&sheet, millis.saturating_add(more)).unwrap().total;
        let hold = audio_reservation(&sheet).unwrap();
        prop_assert!(!a.is_negative() && b >= a && hold >= b);
    }
}
