//! The simulator's generated files: a tiny valid PNG, JPEG and WAV, a tiny MP4 header, their
//! Base64, and `GET /files/…` serving them.
//!
//! - `GET|HEAD /files/images/<id>/<i>.<png|jpeg|jpg>`: a 1×1 image (`image/png` or `image/jpeg`).
//! - `GET|HEAD /files/audio/<id>.<wav|mp3|pcm|ogg_opus>`: 0.1 s of silence as a WAV file
//!   (`audio/wav`, whatever the extension).
//! - `GET|HEAD /files/videos/<id>.mp4`: an MP4 `ftyp` box and an empty `mdat` box
//!   (`video/mp4`; not playable, but sniffed as MP4).
//! - `GET|HEAD /files/videos/<id>.png`: the 1×1 PNG (a video's last frame).
//!
//! `<id>` is letters, digits, `-` and `_`; `<i>` is digits. The files do not depend on the id:
//! any well-formed path is served; anything else is 404.

use http::{HeaderValue, Method, Response, StatusCode, header};

use super::body::SimBody;

/// A 1×1 RGB PNG.
pub(crate) const TINY_PNG: [u8; 69] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53, 0xde, 0x00, 0x00, 0x00, 0x0c, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xdf, 0xc0, 0x00, 0x00, 0x04, 0x01, 0x01, 0x80, 0xc5, 0x2a, 0x18, 0x5d,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// The quantisation table of [`tiny_jpeg`]: all ones.
const JPEG_DQT: [u8; 69] = {
    let mut dqt = [1u8; 69];
    let head = [0xff, 0xdb, 0x00, 0x43, 0x00];
    let mut i = 0;
    while i < head.len() {
        dqt[i] = head[i];
        i += 1;
    }
    dqt
};

/// A 1×1 grey baseline JPEG (one 8×8 block: DC difference 0, then end of block).
pub(crate) fn tiny_jpeg() -> Vec<u8> {
    let mut jpeg = Vec::with_capacity(160);
    jpeg.extend_from_slice(&[0xff, 0xd8]);
    jpeg.extend_from_slice(b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00");
    jpeg.extend_from_slice(&JPEG_DQT);
    // SOF0: 8-bit, 1×1, one component (id 1, 1×1 sampling, table 0).
    jpeg.extend_from_slice(&[0xff, 0xc0, 0x00, 0x0b, 0x08, 0x00, 0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00]);
    // DHT: DC table 0 and AC table 0, each one 1-bit code for symbol 0.
    jpeg.extend_from_slice(&[0xff, 0xc4, 0x00, 0x26]);
    for class in [0x00, 0x10] {
        jpeg.push(class);
        jpeg.push(1);
        jpeg.extend_from_slice(&[0; 15]);
        jpeg.push(0);
    }
    // SOS, the scan (codes `0` `0`, padded with ones), EOI.
    jpeg.extend_from_slice(&[0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00, 0x3f, 0xff, 0xd9]);
    jpeg
}

/// Sample rate of [`tiny_wav`].
const WAV_RATE: u32 = 8_000;
/// Samples in [`tiny_wav`] (0.1 s).
const WAV_SAMPLES: u32 = 800;

/// 0.1 s of silence: 8 kHz, mono, 16-bit PCM in a RIFF/WAVE container.
pub(crate) fn tiny_wav() -> Vec<u8> {
    let data_len = WAV_SAMPLES * 2;
    let mut wav = Vec::with_capacity(44 + 1600);
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data_len).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&WAV_RATE.to_le_bytes());
    wav.extend_from_slice(&(WAV_RATE * 2).to_le_bytes()); // byte rate
    wav.extend_from_slice(&2u16.to_le_bytes()); // block align
    wav.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data_len.to_le_bytes());
    wav.resize(wav.len() + 1600, 0);
    wav
}

/// An MP4 file header: `ftyp` (brand `isom`, compatible `isom`, `mp41`) and an empty `mdat`.
pub(crate) const TINY_MP4: [u8; 32] = [
    0x00, 0x00, 0x00, 0x18, b'f', b't', b'y', b'p', b'i', b's', b'o', b'm', 0x00, 0x00, 0x02, 0x00, b'i', b's', b'o',
    b'm', b'm', b'p', b'4', b'1', 0x00, 0x00, 0x00, 0x08, b'm', b'd', b'a', b't',
];

/// Standard Base64 with padding.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(char::from(ALPHABET[usize::try_from((n >> shift) & 63).unwrap_or(0)]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The image bytes and content type for an `output_format`.
pub(crate) fn image(format: &str) -> (Vec<u8>, &'static str) {
    match format {
        "png" => (TINY_PNG.to_vec(), "image/png"),
        _ => (tiny_jpeg(), "image/jpeg"),
    }
}

fn is_id(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The file at `path` (under `/files/`), if it is one the simulator serves.
fn file(path: &str) -> Option<(Vec<u8>, &'static str)> {
    if let Some(rest) = path.strip_prefix("/files/images/") {
        let (id, name) = rest.split_once('/')?;
        let (index, ext) = name.split_once('.')?;
        let valid = is_id(id) && !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit());
        return match ext {
            "png" if valid => Some(image("png")),
            "jpeg" | "jpg" if valid => Some(image("jpeg")),
            _ => None,
        };
    }
    if let Some(rest) = path.strip_prefix("/files/videos/") {
        let (id, ext) = rest.split_once('.')?;
        return match ext {
            "mp4" if is_id(id) => Some((TINY_MP4.to_vec(), "video/mp4")),
            "png" if is_id(id) => Some(image("png")),
            _ => None,
        };
    }
    let (id, ext) = path.strip_prefix("/files/audio/")?.split_once('.')?;
    (is_id(id) && matches!(ext, "wav" | "mp3" | "pcm" | "ogg_opus")).then(|| (tiny_wav(), "audio/wav"))
}

/// Answers `GET` / `HEAD` under `/files/`.
pub(crate) fn serve(method: &Method, path: &str) -> Response<SimBody> {
    let Some((bytes, content_type)) = file(path).filter(|_| method == Method::GET || method == Method::HEAD) else {
        let mut response = Response::new(SimBody::full("not found"));
        *response.status_mut() = StatusCode::NOT_FOUND;
        return response;
    };
    let len = bytes.len();
    let body = if method == Method::HEAD { SimBody::full(bytes::Bytes::new()) } else { SimBody::full(bytes) };
    let mut response = Response::new(body);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_known_values() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn media_have_their_signatures() {
        assert!(TINY_PNG.starts_with(b"\x89PNG\r\n\x1a\n") && TINY_PNG.ends_with(b"IEND\xae\x42\x60\x82"));
        let jpeg = tiny_jpeg();
        assert!(jpeg.starts_with(&[0xff, 0xd8, 0xff, 0xe0]) && jpeg.ends_with(&[0xff, 0xd9]));
        assert_eq!(jpeg.len(), 155);
        let wav = tiny_wav();
        assert!(wav.starts_with(b"RIFF") && wav[8..16] == *b"WAVEfmt ");
        assert_eq!(wav.len(), 44 + 1600);
    }

    #[test]
    fn file_paths() {
        assert_eq!(file("/files/images/abc_1/0.png").map(|f| f.1), Some("image/png"));
        assert_eq!(file("/files/images/abc/12.jpeg").map(|f| f.1), Some("image/jpeg"));
        assert_eq!(file("/files/audio/abc.mp3").map(|f| f.1), Some("audio/wav"));
        assert_eq!(file("/files/videos/cgt-00ab.mp4").map(|f| f.1), Some("video/mp4"));
        assert_eq!(file("/files/videos/cgt-00ab.png").map(|f| f.1), Some("image/png"));
        for bad in [
            "/files/images/abc/x.png",
            "/files/images/a.b/0.png",
            "/files/images/abc/0.gif",
            "/files/audio/a.flac",
            "/files/videos/a.gif",
            "/files/videos/a/b.mp4",
            "/files/other",
        ] {
            assert!(file(bad).is_none(), "{bad}");
        }
    }
}
