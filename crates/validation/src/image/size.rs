//! `size` of an image request: a named size of the model, or `<W>x<H>` (`^\d{2,5}[xX]\d{2,5}$`, ASCII
//! digits) within the model's pixel range, aspect ratio and side multiple.

use catalog::{ImageLimits, ModelDef};

use crate::ValidationError;
use crate::shape::invalid;
use crate::shape::quote;

/// Checks `size` (or the model's default) and returns the size to send (custom sizes written `WxH`) and
/// the worst-case pixels of one output.
pub(super) fn check(
    def: &ModelDef,
    limits: &ImageLimits,
    size: Option<&str>,
) -> Result<(Option<String>, u64), ValidationError> {
    let sizes = &limits.sizes;
    let Some(size) = size.or(sizes.default.as_deref()) else {
        return Ok((None, sizes.max_pixels()));
    };
    if let Some(pixels) = sizes.named_pixels.get(size).filter(|_| sizes.named.iter().any(|n| n == size)) {
        return Ok((Some(size.to_owned()), *pixels));
    }
    let Some((width, height)) = parse_custom(size) else {
        return Err(invalid(format!(
            "size must be one of {} or <W>x<H> matching {} for model {}, got {}",
            sizes.named.join(", "),
            sizes.custom_pattern,
            def.name,
            quote(size)
        )));
    };
    check_custom(def, limits, width, height)?;
    Ok((Some(format!("{width}x{height}")), width * height))
}

/// `<W>x<H>` with 2 to 5 ASCII digits on each side of an `x` or `X`.
fn parse_custom(size: &str) -> Option<(u64, u64)> {
    let (w, h) = size.split_once(['x', 'X'])?;
    let side = |s: &str| {
        if (2..=5).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()) { s.parse::<u64>().ok() } else { None }
    };
    Some((side(w)?, side(h)?))
}

/// A custom size's pixel count, aspect ratio and side multiple against the model's limits.
fn check_custom(def: &ModelDef, limits: &ImageLimits, width: u64, height: u64) -> Result<(), ValidationError> {
    let sizes = &limits.sizes;
    let pixels = width * height;
    if !sizes.custom_pixels.contains(pixels) {
        return Err(invalid(format!(
            "size {width}x{height} has {pixels} pixels; model {} needs {}..{}",
            def.name, sizes.custom_pixels.min, sizes.custom_pixels.max
        )));
    }
    if !sizes.aspect_ratio.contains(width, height) {
        return Err(invalid(format!(
            "size {width}x{height} has an aspect ratio outside {}..{} (width / height) for model {}",
            sizes.aspect_ratio.min, sizes.aspect_ratio.max, def.name
        )));
    }
    if let Some(multiple) = sizes.side_multiple
        && (!width.is_multiple_of(multiple) || !height.is_multiple_of(multiple))
    {
        return Err(invalid(format!(
            "each side of size must be a multiple of {multiple} for model {}, got {width}x{height}",
            def.name
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(super) fn check_custom_for_test(def: &ModelDef, width: u64, height: u64) -> Result<(), ValidationError> {
    let limits = def.image_limits().ok_or_else(|| invalid("not an image model".to_owned()))?;
    check_custom(def, limits, width, height)
}
