//! Content sniffing: the kind and MIME type of a file from its first bytes ([`sniff`]).
//!
//! | signature | kind | MIME type |
//! | --- | --- | --- |
//! | `FF D8 FF` | image | `image/jpeg` |
//! | `89 'PNG' 0D 0A 1A 0A` | image | `image/png` |
//! | `'GIF87a'`, `'GIF89a'` | image | `image/gif` |
//! | `'RIFF' … 'WEBP'` | image | `image/webp` |
//! | `'BM'` with zero reserved bytes 6..10 | image | `image/bmp` |
//! | `'II' 2A 00`, `'MM' 00 2A` | image | `image/tiff` |
//! | ISO box `ftyp` with brand `heic`/`heix`/`hevc`/`hevx`/`heim`/`heis` | image | `image/heic` |
//! | `ftyp` brand `mif1`/`msf1`/`heif` | image | `image/heif` |
//! | `ftyp` brand `avif`/`avis` | image | `image/avif` |
//! | `ftyp` brand `qt  ` | video | `video/quicktime` |
//! | `ftyp` brand `M4A `/`M4B ` | audio | `audio/mp4` (m4a) |
//! | `ftyp` brand `3gp*`/`3g2*` | video | `video/3gpp` |
//! | `ftyp` brand `isom`/`iso2`…/`mp41`/`mp42`/`avc1`/`dash`/`mmp4`/`M4V `/`MSNV`/`f4v ` | video | `video/mp4` |
//! | ISO box `moov`/`mdat`/`wide` first (old QuickTime) | video | `video/quicktime` |
//! | `1A 45 DF A3` (EBML) with doctype `webm` in the first bytes | video | `video/webm` |
//! | EBML otherwise | video | `video/x-matroska` |
//! | `'RIFF' … 'AVI '` | video | `video/x-msvideo` |
//! | `'RIFF' … 'WAVE'` | audio | `audio/wav` |
//! | `'ID3'` | audio | `audio/mpeg` |
//! | ADTS sync `FFF` with layer 0 (`b1 & F6 == F0`) and a sampling index ≤ 12 | audio | `audio/aac` |
//! | MPEG audio frame sync (11 bits), valid version, layer, bitrate and rate | audio | `audio/mpeg` |
//! | `'fLaC'` | audio | `audio/flac` |
//! | `'OggS'`, with `theora` in the first bytes | video | `video/ogg` |
//! | `'OggS'` otherwise | audio | `audio/ogg` |
//!
//! An `ftyp` box whose major brand is unknown is typed by the first known compatible brand.
//! Anything else is `None`. Give it at least [`SNIFF_BYTES`] bytes when the file has them.

use domain::ports::AssetKind;

/// How many leading bytes [`sniff`] looks at, at most.
pub const SNIFF_BYTES: usize = 512;

/// The kind and MIME type of a file starting with `first_bytes`, if recognised.
pub fn sniff(first_bytes: &[u8]) -> Option<(AssetKind, &'static str)> {
    let b = &first_bytes[..first_bytes.len().min(SNIFF_BYTES)];
    let at = |offset: usize, magic: &[u8]| b.get(offset..offset + magic.len()) == Some(magic);
    let image = |mime| Some((AssetKind::Image, mime));
    let video = |mime| Some((AssetKind::Video, mime));
    let audio = |mime| Some((AssetKind::Audio, mime));
    if at(0, &[0xff, 0xd8, 0xff]) {
        return image("image/jpeg");
    }
    if at(0, b"\x89PNG\r\n\x1a\n") {
        return image("image/png");
    }
    if at(0, b"GIF87a") || at(0, b"GIF89a") {
        return image("image/gif");
    }
    if at(0, b"RIFF") {
        return match b.get(8..12) {
            Some(b"WEBP") => image("image/webp"),
            Some(b"WAVE") => audio("audio/wav"),
            Some(b"AVI ") => video("video/x-msvideo"),
            _ => None,
        };
    }
    if at(0, b"BM") && at(6, &[0, 0, 0, 0]) {
        return image("image/bmp");
    }
    if at(0, b"II\x2a\x00") || at(0, b"MM\x00\x2a") {
        return image("image/tiff");
    }
    if at(4, b"ftyp") {
        return iso_brands(b);
    }
    if at(4, b"moov") || at(4, b"mdat") || at(4, b"wide") {
        return video("video/quicktime");
    }
    if at(0, &[0x1a, 0x45, 0xdf, 0xa3]) {
        return if contains(b, b"webm") { video("video/webm") } else { video("video/x-matroska") };
    }
    if at(0, b"OggS") {
        return if contains(b, b"theora") { video("video/ogg") } else { audio("audio/ogg") };
    }
    if at(0, b"fLaC") {
        return audio("audio/flac");
    }
    if at(0, b"ID3") {
        return audio("audio/mpeg");
    }
    frame_sync(b)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The type named by one `ftyp` brand.
fn brand(brand: &[u8]) -> Option<(AssetKind, &'static str)> {
    let kind = match brand {
        b"heic" | b"heix" | b"hevc" | b"hevx" | b"heim" | b"heis" => (AssetKind::Image, "image/heic"),
        b"mif1" | b"msf1" | b"heif" => (AssetKind::Image, "image/heif"),
        b"avif" | b"avis" => (AssetKind::Image, "image/avif"),
        b"qt  " => (AssetKind::Video, "video/quicktime"),
        b"M4A " | b"M4B " => (AssetKind::Audio, "audio/mp4"),
        [b'3', b'g', b'p' | b'2', _] => (AssetKind::Video, "video/3gpp"),
        b"isom" | b"iso2" | b"iso3" | b"iso4" | b"iso5" | b"iso6" | b"mp41" | b"mp42" | b"avc1" | b"dash" | b"mmp4"
        | b"M4V " | b"MSNV" | b"f4v " => (AssetKind::Video, "video/mp4"),
        _ => return None,
    };
    Some(kind)
}

/// An ISO base media file: the major brand (bytes 8..12), else the first known compatible brand.
fn iso_brands(b: &[u8]) -> Option<(AssetKind, &'static str)> {
    if let Some(found) = b.get(8..12).and_then(brand) {
        return Some(found);
    }
    let size = b.get(0..4).map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]));
    let end = usize::try_from(size).unwrap_or(usize::MAX).min(b.len());
    b.get(16..end)?.chunks_exact(4).find_map(brand)
}

/// ADTS (AAC) or an MPEG audio frame header at the start.
fn frame_sync(b: &[u8]) -> Option<(AssetKind, &'static str)> {
    let [0xff, b1, b2, ..] = *b else {
        return None;
    };
    // ADTS: layer 0 and a sampling-frequency index 0..=12.
    if b1 & 0xf6 == 0xf0 && (b2 >> 2) & 0x0f <= 12 {
        return Some((AssetKind::Audio, "audio/aac"));
    }
    let sync = b1 & 0xe0 == 0xe0;
    let version_ok = (b1 >> 3) & 3 != 1;
    let layer_ok = (b1 >> 1) & 3 != 0;
    let bitrate_ok = b2 >> 4 != 15;
    let rate_ok = (b2 >> 2) & 3 != 3;
    (sync && version_ok && layer_ok && bitrate_ok && rate_ok).then_some((AssetKind::Audio, "audio/mpeg"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ftyp(major: &[u8; 4], compatible: &[&[u8; 4]]) -> Vec<u8> {
        let size = u32::try_from(16 + 4 * compatible.len()).unwrap_or(0);
        let mut v = size.to_be_bytes().to_vec();
        v.extend_from_slice(b"ftyp");
        v.extend_from_slice(major);
        v.extend_from_slice(&[0, 0, 2, 0]);
        for c in compatible {
            v.extend_from_slice(*c);
        }
        v
    }

    fn riff(form: &[u8; 4]) -> Vec<u8> {
        [&b"RIFF"[..], &[0x24, 0, 0, 0], form, b"fmt "].concat()
    }

    #[test]
    fn table() {
        use AssetKind::{Audio, Image, Video};
        let ebml_webm =
            [&[0x1a, 0x45, 0xdf, 0xa3, 0x9f, 0x42, 0x86, 0x81, 0x01, 0x42, 0x82, 0x84][..], b"webm"].concat();
        let ebml_mkv = [&[0x1a, 0x45, 0xdf, 0xa3, 0x9f, 0x42, 0x82, 0x88][..], b"matroska"].concat();
        let cases: Vec<(Vec<u8>, AssetKind, &str)> = vec![
            (vec![0xff, 0xd8, 0xff, 0xe0, 0, 0x10, b'J'], Image, "image/jpeg"),
            (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec(), Image, "image/png"),
            (b"GIF89a\x01\0".to_vec(), Image, "image/gif"),
            (b"GIF87a\x01\0".to_vec(), Image, "image/gif"),
            (riff(b"WEBP"), Image, "image/webp"),
            (b"BM\x36\0\0\0\0\0\0\0\x36\0\0\0".to_vec(), Image, "image/bmp"),
            (b"II\x2a\0\x08\0\0\0".to_vec(), Image, "image/tiff"),
            (b"MM\0\x2a\0\0\0\x08".to_vec(), Image, "image/tiff"),
            (ftyp(b"heic", &[b"mif1", b"heic"]), Image, "image/heic"),
            (ftyp(b"mif1", &[b"heic"]), Image, "image/heif"),
            (ftyp(b"avif", &[]), Image, "image/avif"),
            (ftyp(b"isom", &[b"isom", b"mp41"]), Video, "video/mp4"),
            (ftyp(b"mp42", &[]), Video, "video/mp4"),
            (ftyp(b"qt  ", &[b"qt  "]), Video, "video/quicktime"),
            (ftyp(b"M4A ", &[b"M4A ", b"mp42"]), Audio, "audio/mp4"),
            (ftyp(b"3gp5", &[]), Video, "video/3gpp"),
            (ftyp(b"zzzz", &[b"yyyy", b"mp41"]), Video, "video/mp4"),
            (b"\0\0\0\x08wide\0\0\0\0mdat".to_vec(), Video, "video/quicktime"),
            (ebml_webm, Video, "video/webm"),
            (ebml_mkv, Video, "video/x-matroska"),
            (riff(b"AVI "), Video, "video/x-msvideo"),
            (riff(b"WAVE"), Audio, "audio/wav"),
            (b"ID3\x04\0\0\0\0\0\0".to_vec(), Audio, "audio/mpeg"),
            (vec![0xff, 0xfb, 0x90, 0x64], Audio, "audio/mpeg"),
            (vec![0xff, 0xf3, 0x48, 0xc4], Audio, "audio/mpeg"),
            (vec![0xff, 0xf1, 0x50, 0x80], Audio, "audio/aac"),
            (vec![0xff, 0xf9, 0x50, 0x80], Audio, "audio/aac"),
            (b"fLaC\0\0\0\x22".to_vec(), Audio, "audio/flac"),
            (b"OggS\0\x02\0\0\0\0\0\0\0\0\x01\x1eOpusHead".to_vec(), Audio, "audio/ogg"),
            (b"OggS\0\x02\0\0\0\0\0\0\0\0\x80theora".to_vec(), Video, "video/ogg"),
        ];
        for (bytes, kind, mime) in cases {
            assert_eq!(sniff(&bytes), Some((kind, mime)), "{bytes:02x?}");
        }
    }

    #[test]
    fn unknown_and_truncated() {
        for bytes in [
            &b""[..],
            b"\xff",
            b"\xff\xd8",
            b"\x89PNG",
            b"GIF8",
            b"RIFF\0\0\0\0XXXX",
            b"RIFF",
            b"BMxx\0\0\x01\0\0\0",
            b"hello world",
            b"%PDF-1.7",
            b"PK\x03\x04",
            b"\0\0\0\x10ftypzzzz\0\0\0\0",
            &[0xff, 0xe8, 0x90, 0x64],
            &[0xff, 0xf1, 0xfc, 0x80],
            &[0xff, 0xfb, 0xf0, 0x64],
            &[0xff, 0xfb, 0x9c, 0x64],
        ] {
            assert_eq!(sniff(bytes), None, "{bytes:02x?}");
        }
    }
}
