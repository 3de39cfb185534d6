//! Shared helpers for inline media and links, used by chat, image and audio validation: `data:` URLs,
//! the decoded size of Base64 text computed without decoding it, and the https URL check.

use validator::ValidateUrl;

/// A `data:` URL split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataUrl<'a> {
    /// The media type as written (`image/png`); may be empty.
    pub mime: &'a str,
    /// Whether the last parameter is `base64`.
    pub base64: bool,
    /// Everything after the first comma.
    pub data: &'a str,
}

/// Why a `data:` URL could not be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataUrlError {
    /// No comma separates the header from the data.
    NoComma,
}

/// The text after a case-insensitive `data:` prefix, or `None` when `text` is not a data URL.
pub fn strip_data_scheme(text: &str) -> Option<&str> {
    match text.get(..5) {
        Some(prefix) if prefix.eq_ignore_ascii_case("data:") => text.get(5..),
        _ => None,
    }
}

/// Parses the part of a `data:` URL after the scheme: `<mime>[;param…][;base64],<data>`.
pub fn parse_data_url(rest: &str) -> Result<DataUrl<'_>, DataUrlError> {
    let Some((header, data)) = rest.split_once(',') else {
        return Err(DataUrlError::NoComma);
    };
    let mut params = header.split(';');
    let mime = params.next().unwrap_or_default().trim();
    let base64 = params.next_back().is_some_and(|p| p.trim().eq_ignore_ascii_case("base64"));
    Ok(DataUrl { mime, base64, data })
}

/// How strictly Base64 text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base64Rules {
    /// Chat's reading: the standard and URL-safe alphabets, with padding and whitespace anywhere (not counted).
    Lenient,
    /// The standard alphabet (`A–Z a–z 0–9 + /`) only, no whitespace, at most two `=` and only at the end
    /// (then the length is a multiple of 4), and never a lone final symbol.
    Strict,
}

/// The decoded size in bytes of Base64 `data` under `rules`, computed from its length without decoding
/// (three bytes per four symbols; padding does not count), or `None` when `data` is not Base64.
pub fn decoded_len(data: &str, rules: Base64Rules) -> Option<u64> {
    match rules {
        Base64Rules::Lenient => lenient_symbols(data),
        Base64Rules::Strict => strict_symbols(data),
    }
    .map(|symbols| symbols / 4 * 3 + (symbols % 4) * 3 / 4)
}

fn lenient_symbols(data: &str) -> Option<u64> {
    let mut symbols = 0u64;
    for b in data.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_') {
            symbols += 1;
        } else if b != b'=' && !b.is_ascii_whitespace() {
            return None;
        }
    }
    Some(symbols)
}

fn strict_symbols(data: &str) -> Option<u64> {
    let bytes = data.as_bytes();
    let body = bytes.strip_suffix(b"==").or_else(|| bytes.strip_suffix(b"=")).unwrap_or(bytes);
    let padded = body.len() != bytes.len();
    if !body.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/')) {
        return None;
    }
    let symbols = u64::try_from(body.len()).ok()?;
    let whole = !padded || bytes.len().is_multiple_of(4);
    (whole && symbols % 4 != 1).then_some(symbols)
}

/// Whether `text` is an absolute `https://` URL with a host that parses: no whitespace or control
/// characters (which URL parsers would silently drop), a non-empty host, and a valid URL as a whole.
pub fn is_https_url(text: &str) -> bool {
    let Some(rest) = text.get(..8).filter(|s| s.eq_ignore_ascii_case("https://")).and_then(|_| text.get(8..)) else {
        return false;
    };
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host = host.strip_prefix('[').map_or_else(|| host.split(':').next().unwrap_or_default(), |_| host);
    !host.is_empty() && text.validate_url()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls() {
        assert_eq!(strip_data_scheme("DATA:image/png;base64,AA"), Some("image/png;base64,AA"));
        assert_eq!(strip_data_scheme("https://x"), None);
        assert_eq!(strip_data_scheme("dat"), None);
        assert_eq!(strip_data_scheme("daté:"), None);
        let parsed = parse_data_url("image/png;charset=x;base64,AAAA").expect("parses");
        assert_eq!(parsed, DataUrl { mime: "image/png", base64: true, data: "AAAA" });
        assert_eq!(parse_data_url("text/plain,hi").map(|d| d.base64), Ok(false));
        assert_eq!(parse_data_url("image/png;base64"), Err(DataUrlError::NoComma));
    }

    #[test]
    fn strict_base64_sizes() {
        let rows: [(&str, Option<u64>); 16] = [
            ("", Some(0)),
            ("AAAA", Some(3)),
            ("AAA=", Some(2)),
            ("AA==", Some(1)),
            ("AAA", Some(2)),
            ("AA", Some(1)),
            ("A", None),
            ("A===", None),
            ("AAAAA", None),
            ("AA=A", None),
            ("AA=", None),
            ("AAAA====", None),
            ("AAAA=", None),
            ("AA AA", None),
            ("AA-_", None),
            ("+/09azAZ", Some(6)),
        ];
        for (data, want) in rows {
            assert_eq!(decoded_len(data, Base64Rules::Strict), want, "{data:?}");
        }
        assert_eq!(decoded_len("AA\nAA-_==", Base64Rules::Lenient), Some(4));
        assert_eq!(decoded_len("AA*A", Base64Rules::Lenient), None);
    }

    #[test]
    fn https_urls() {
        for ok in [
            "https://example.com/a.png",
            "HTTPS://example.com",
            "https://u:p@example.com:8443/x?y#z",
            "https://[::1]/a",
        ] {
            assert!(is_https_url(ok), "{ok}");
        }
        for bad in [
            "http://example.com/a.png",
            "https://",
            "https:///a.png",
            "https://:443/a",
            "https://user@/a",
            "https://exa mple.com",
            "https://example.com/\n",
            "ftp://example.com",
            "example.com",
            "https:/example.com",
            "",
        ] {
            assert!(!is_https_url(bad), "{bad:?}");
        }
    }
}
