//! Shared test support: the published price sheets (interface spec and DESIGN §3) and a
//! `block_on` for the in-memory ledger's always-ready futures.

#![allow(dead_code)]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use domain::{PriceSheet, Rate};

/// Polls until ready. Only for futures that never wait for a wake-up (the in-memory ledger's).
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// A sheet of `(key, amount_microusd)` rates sharing one denominator and unit.
pub fn sheet(denominator: i64, unit: &str, rates: &[(&str, i64)]) -> PriceSheet {
    let mut sheet = PriceSheet::default();
    for &(name, amount) in rates {
        let unit = if name.starts_with("storage_token_hours") { "token_hour" } else { unit };
        sheet.rates.insert(name.to_owned(), Rate { amount_microusd: amount, denominator, unit: unit.to_owned() });
    }
    sheet
}

fn tokens(rates: &[(&str, i64)]) -> PriceSheet {
    sheet(1_000_000, "token", rates)
}

pub fn lang_a_flash() -> PriceSheet {
    tokens(&[
        ("input_tokens", 140_000),
        ("output_tokens", 280_000),
        ("storage_token_hours", 8_300),
        ("cache_hit_tokens", 28_000),
    ])
}

pub fn lang_a_pro() -> PriceSheet {
    tokens(&[
        ("input_tokens", 1_740_000),
        ("output_tokens", 3_480_000),
        ("storage_token_hours", 8_300),
        ("cache_hit_tokens", 145_000),
    ])
}

/// LangB-2.0-Code and LangB-2.0-pro share one sheet.
pub fn lang_b_pro() -> PriceSheet {
    tokens(&[
        ("input_tokens_lte_128k", 500_000),
        ("output_tokens_lte_128k", 3_000_000),
        ("cache_hit_tokens_lte_128k", 100_000),
        ("storage_token_hours_lte_128k", 8_300),
        ("input_tokens_gt_128k_lte_256k", 1_000_000),
        ("output_tokens_gt_128k_lte_256k", 6_000_000),
        ("cache_hit_tokens_gt_128k_lte_256k", 200_000),
        ("storage_token_hours_gt_128k_lte_256k", 8_300),
    ])
}

pub fn lang_b_lite() -> PriceSheet {
    tokens(&[
        ("input_tokens_lte_128k", 250_000),
        ("output_tokens_lte_128k", 2_000_000),
        ("cache_hit_tokens_lte_128k", 50_000),
        ("audio_input_tokens_lte_128k", 3_750_000),
        ("audio_cache_hit_tokens_lte_128k", 750_000),
        ("storage_token_hours_lte_128k", 8_300),
        ("input_tokens_gt_128k_lte_256k", 500_000),
        ("output_tokens_gt_128k_lte_256k", 4_000_000),
        ("cache_hit_tokens_gt_128k_lte_256k", 100_000),
        ("audio_input_tokens_gt_128k_lte_256k", 7_500_000),
        ("audio_cache_hit_tokens_gt_128k_lte_256k", 1_500_000),
        ("storage_token_hours_gt_128k_lte_256k", 8_300),
    ])
}

pub fn lang_b_mini() -> PriceSheet {
    tokens(&[
        ("input_tokens_lte_128k", 100_000),
        ("output_tokens_lte_128k", 400_000),
        ("cache_hit_tokens_lte_128k", 20_000),
        ("audio_input_tokens_lte_128k", 1_500_000),
        ("audio_cache_hit_tokens_lte_128k", 300_000),
        ("storage_token_hours_lte_128k", 8_300),
        ("input_tokens_gt_128k_lte_256k", 200_000),
        ("output_tokens_gt_128k_lte_256k", 800_000),
        ("cache_hit_tokens_gt_128k_lte_256k", 40_000),
        ("audio_input_tokens_gt_128k_lte_256k", 3_000_000),
        ("audio_cache_hit_tokens_gt_128k_lte_256k", 600_000),
        ("storage_token_hours_gt_128k_lte_256k", 8_300),
    ])
}

pub fn lang_b_turbo() -> PriceSheet {
    tokens(&[
        ("input_tokens", 500_000),
        ("output_tokens", 2_500_000),
        ("cache_hit_tokens", 100_000),
        ("storage_token_hours", 8_300),
    ])
}

/// Every published language sheet, by model name.
pub fn language_sheets() -> Vec<(&'static str, PriceSheet)> {
    vec![
        ("LangA-V4-flash", lang_a_flash()),
        ("LangA-V4-pro", lang_a_pro()),
        ("LangB-2.0-pro", lang_b_pro()),
        ("LangB-2.0-lite", lang_b_lite()),
        ("LangB-2.0-mini", lang_b_mini()),
        ("LangB-2.1-turbo", lang_b_turbo()),
    ]
}

pub fn imagegen_45() -> PriceSheet {
    sheet(1, "image", &[("text_to_image_pieces", 36_000), ("image_to_image_pieces", 36_000)])
}

pub fn imagegen_50_lite() -> PriceSheet {
    sheet(1, "image", &[("text_to_image_pieces", 31_500), ("image_to_image_pieces", 31_500)])
}

pub fn imagegen_50_pro() -> PriceSheet {
    sheet(
        1,
        "image",
        &[
            ("input_images", 3_000),
            ("output_images_lte_2360000_pixels", 45_000),
            ("output_images_gt_2360000_pixels", 90_000),
        ],
    )
}

pub fn image_sheets() -> Vec<(&'static str, PriceSheet)> {
    vec![
        ("Vendor-Imagegen-4.5", imagegen_45()),
        ("Vendor-Imagegen-5.0-lite", imagegen_50_lite()),
        ("Vendor-Imagegen-5.0-pro", imagegen_50_pro()),
    ]
}

pub fn videogen_20() -> PriceSheet {
    tokens(&[
        ("output_tokens_480p", 7_000_000),
        ("output_tokens_720p", 7_000_000),
        ("output_tokens_1080p", 7_700_000),
        ("output_tokens_4k", 4_000_000),
        ("output_tokens_480p_with_video_input", 4_300_000),
        ("output_tokens_720p_with_video_input", 4_300_000),
        ("output_tokens_1080p_with_video_input", 4_700_000),
        ("output_tokens_4k_with_video_input", 2_400_000),
    ])
}

pub fn videogen_20_fast() -> PriceSheet {
    tokens(&[
        ("output_tokens_480p", 5_600_000),
        ("output_tokens_720p", 5_600_000),
        ("output_tokens_480p_with_video_input", 3_300_000),
        ("output_tokens_720p_with_video_input", 3_300_000),
    ])
}

pub fn videogen_20_mini() -> PriceSheet {
    tokens(&[
        ("output_tokens_480p", 3_500_000),
        ("output_tokens_720p", 3_500_000),
        ("output_tokens_480p_with_video_input", 2_100_000),
        ("output_tokens_720p_with_video_input", 2_100_000),
    ])
}

pub fn audiogen() -> PriceSheet {
    sheet(1, "second", &[("output_audio_seconds", 2_500)])
}
