//! Image models: per generated image, and for 5.0-pro per reference image and by output size.
//!
//! Two shapes of sheet exist (DESIGN §3):
//!
//! - **pieces** (4.5, 5.0-lite), recognised by a `text_to_image_pieces` rate: each generated image
//!   costs `text_to_image_pieces` when no reference image was sent, else `image_to_image_pieces`;
//! - **pixel tiers** (5.0-pro), recognised by an `input_images` rate: `input_images` per reference
//!   image, plus per generated image `output_images_lte_2360000_pixels` (pixel count ≤ 2,360,000)
//!   or `output_images_gt_2360000_pixels`.
//!
//! Only successfully generated images are charged; failed items are free. A call that produced
//! no image at all has no billable output and costs nothing, reference images included.

use domain::{PriceSheet, UsdAmount};

use crate::charge::{Charge, ChargeBuilder, PricingError, dearest};

/// Rate per generated image without a reference image (pieces sheets).
pub const TEXT_TO_IMAGE: &str = "text_to_image_pieces";
/// Rate per generated image with at least one reference image (pieces sheets).
pub const IMAGE_TO_IMAGE: &str = "image_to_image_pieces";
/// Rate per reference image (pixel-tier sheets).
pub const INPUT_IMAGES: &str = "input_images";
/// Rate per generated image of at most [`PIXEL_TIER_MAX_PIXELS`] pixels (pixel-tier sheets).
pub const OUTPUT_SMALL: &str = "output_images_lte_2360000_pixels";
/// Rate per generated image of more than [`PIXEL_TIER_MAX_PIXELS`] pixels (pixel-tier sheets).
pub const OUTPUT_LARGE: &str = "output_images_gt_2360000_pixels";
/// The largest pixel count (inclusive) billed at [`OUTPUT_SMALL`].
pub const PIXEL_TIER_MAX_PIXELS: u64 = 2_360_000;

/// What one image call produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageUsage {
    /// Reference images sent with the request.
    pub reference_images: u64,
    /// The pixel count (width × height) of each successfully generated image.
    pub generated: Vec<u64>,
}

enum Shape {
    Pieces,
    PixelTiers,
}

fn shape(sheet: &PriceSheet) -> Result<Shape, PricingError> {
    if sheet.rate(TEXT_TO_IMAGE).is_some() {
        Ok(Shape::Pieces)
    } else if sheet.rate(INPUT_IMAGES).is_some() {
        Ok(Shape::PixelTiers)
    } else {
        Err(PricingError::MissingRate(TEXT_TO_IMAGE.to_owned()))
    }
}

fn piece_rate(reference_images: u64) -> &'static str {
    if reference_images == 0 { TEXT_TO_IMAGE } else { IMAGE_TO_IMAGE }
}

fn count(n: usize) -> Result<u64, PricingError> {
    u64::try_from(n).map_err(|_| PricingError::Overflow)
}

/// The charge for one image call.
pub fn image_charge(sheet: &PriceSheet, usage: &ImageUsage) -> Result<Charge, PricingError> {
    let mut bill = ChargeBuilder::new(sheet);
    match shape(sheet)? {
        Shape::Pieces => bill.add_units(piece_rate(usage.reference_images), count(usage.generated.len())?)?,
        Shape::PixelTiers => {
            let small = count(usage.generated.iter().filter(|&&p| p <= PIXEL_TIER_MAX_PIXELS).count())?;
            let large = count(usage.generated.len())? - small;
            let references = if usage.generated.is_empty() { 0 } else { usage.reference_images };
            bill.add_units(INPUT_IMAGES, references)?;
            bill.add_units(OUTPUT_SMALL, small)?;
            bill.add_units(OUTPUT_LARGE, large)?;
        }
    }
    bill.finish()
}

/// The amount to hold before an image call that sends `reference_images` references and may
/// produce up to `max_images` images of at most `max_pixels_per_image` pixels each.
///
/// It is at least [`image_charge`] of any usage with the same reference count, at most
/// `max_images` generated images and no image above `max_pixels_per_image` pixels. When
/// `max_pixels_per_image` exceeds [`PIXEL_TIER_MAX_PIXELS`], the dearer of the two output rates
/// is used (the large one on the published sheet).
pub fn image_reservation(
    sheet: &PriceSheet,
    reference_images: u64,
    max_images: u64,
    max_pixels_per_image: u64,
) -> Result<UsdAmount, PricingError> {
    let mut bill = ChargeBuilder::new(sheet);
    match shape(sheet)? {
        Shape::Pieces => bill.add_units(piece_rate(reference_images), max_images)?,
        Shape::PixelTiers => {
            bill.add_units(INPUT_IMAGES, reference_images)?;
            let output = if max_pixels_per_image <= PIXEL_TIER_MAX_PIXELS {
                OUTPUT_SMALL
            } else {
                dearest(sheet, &[OUTPUT_SMALL, OUTPUT_LARGE])?
            };
            bill.add_units(output, max_images)?;
        }
    }
    Ok(bill.finish()?.total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Rate;

    #[test]
    fn unknown_shape_names_the_missing_rate() {
        let mut sheet = PriceSheet::default();
        sheet.rates.insert("x".into(), Rate { amount_microusd: 1, denominator: 1, unit: "image".into() });
        let usage = ImageUsage { reference_images: 0, generated: vec![1] };
        assert_eq!(image_charge(&sheet, &usage), Err(PricingError::MissingRate(TEXT_TO_IMAGE.into())));
        assert_eq!(image_reservation(&sheet, 0, 1, 1), Err(PricingError::MissingRate(TEXT_TO_IMAGE.into())));
    }
}
