//! `image` references of an image request: count, and each an https URL or a
//! `data:image/<type>;base64,<data>` URI of an allowed type whose decoded size is within the limit.

use std::borrow::Cow;

use catalog::ImageLimits;
use schemars::JsonSchema;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::ValidationError;
use crate::media::{self, Base64Rules};
use crate::shape::invalid;

/// `image`: one reference string or an array of them, kept in the form the client sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ImageRefs<'a> {
    /// A single reference.
    One(Cow<'a, str>),
    /// An array of references.
    Many(Vec<Cow<'a, str>>),
}

impl ImageRefs<'_> {
    /// The same references, owning their text.
    pub fn into_owned(self) -> ImageRefs<'static> {
        match self {
            ImageRefs::One(one) => ImageRefs::One(Cow::Owned(one.into_owned())),
            ImageRefs::Many(many) => ImageRefs::Many(many.into_iter().map(|r| Cow::Owned(r.into_owned())).collect()),
        }
    }

    /// The references.
    pub fn as_slice(&self) -> &[Cow<'_, str>] {
        match self {
            ImageRefs::One(one) => std::slice::from_ref(one),
            ImageRefs::Many(many) => many,
        }
    }
}

impl<'de> Deserialize<'de> for ImageRefs<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ImageRefs<'de>, D::Error> {
        struct RefsVisitor;
        impl<'de> Visitor<'de> for RefsVisitor {
            type Value = ImageRefs<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a reference string or an array of reference strings")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<ImageRefs<'de>, E> {
                Ok(ImageRefs::One(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ImageRefs<'de>, E> {
                Ok(ImageRefs::One(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<ImageRefs<'de>, E> {
                Ok(ImageRefs::One(Cow::Owned(v)))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ImageRefs<'de>, A::Error> {
                let mut items = Vec::new();
                while let Some(crate::shape::Text(item)) = seq.next_element()? {
                    items.push(item);
                }
                Ok(ImageRefs::Many(items))
            }
        }
        d.deserialize_any(RefsVisitor)
    }
}

/// What the references add to the plan.
pub(super) struct Refs {
    /// How many.
    pub count: u64,
    /// `text`, `url`, `base64` or `mixed`.
    pub mode: domain::InputMode,
}

/// Checks the references against the model's `reference_images` limits.
pub(super) fn check(limits: &ImageLimits, image: Option<&ImageRefs>) -> Result<Refs, ValidationError> {
    let Some(image) = image else { return Ok(Refs { count: 0, mode: domain::InputMode::Text }) };
    let rules = &limits.reference_images;
    let items = image.as_slice();
    let count = u64::try_from(items.len()).unwrap_or(u64::MAX);
    if !(rules.min_items..=rules.max_items).contains(&count) {
        return Err(invalid(format!("image must have {}..{} items, got {count}", rules.min_items, rules.max_items)));
    }
    let (mut urls, mut inline) = (0u64, 0u64);
    for (i, item) in items.iter().enumerate() {
        let path = match image {
            ImageRefs::One(_) => "image".to_owned(),
            ImageRefs::Many(_) => format!("image[{i}]"),
        };
        if check_item(limits, &path, item)? {
            inline += 1;
        } else {
            urls += 1;
        }
    }
    let mode = match (urls, inline) {
        (_, 0) => domain::InputMode::Url,
        (0, _) => domain::InputMode::Base64,
        _ => domain::InputMode::Mixed,
    };
    Ok(Refs { count, mode })
}

/// Checks one reference; returns whether it is inline (Base64).
fn check_item(limits: &ImageLimits, path: &str, item: &str) -> Result<bool, ValidationError> {
    let rules = &limits.reference_images;
    let Some(rest) = media::strip_data_scheme(item) else {
        return if media::is_https_url(item) { Ok(false) } else { Err(wrong(path)) };
    };
    let (header, data) = rest.split_once(',').ok_or_else(|| wrong(path))?;
    let kind = header
        .split_once(';')
        .filter(|(_, param)| param.eq_ignore_ascii_case("base64"))
        .and_then(|(mime, _)| mime.split_once('/'))
        .filter(|(top, _)| top.eq_ignore_ascii_case("image"))
        .map(|(_, kind)| kind)
        .ok_or_else(|| wrong(path))?;
    if !rules.data_uri_types.iter().any(|t| t.eq_ignore_ascii_case(kind)) {
        return Err(invalid(format!(
            "{path} must be an https URL or a data:image/<type>;base64, URI with <type> one of {}, got type {:?}",
            rules.data_uri_types.join(", "),
            kind.chars().take(40).collect::<String>()
        )));
    }
    let size = media::decoded_len(data, Base64Rules::Strict)
        .ok_or_else(|| invalid(format!("{path}: the data after base64, is not valid Base64")))?;
    if size == 0 {
        return Err(invalid(format!("{path}: the inline image is empty")));
    }
    if size > rules.max_decoded_bytes {
        return Err(ValidationError::TooLarge(format!(
            "{path} is {size} bytes decoded, above the limit of {} bytes",
            rules.max_decoded_bytes
        )));
    }
    Ok(true)
}

fn wrong(path: &str) -> ValidationError {
    invalid(format!("{path} must be an https URL or a data:image/<type>;base64, URI"))
}
