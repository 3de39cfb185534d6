//! HTTP/1.1 framing of one exchange: the request head a client writes, the response head it
//! parses, and the body decoder (a length, chunks, or up to the close).
//!
//! Pure code over byte slices, so every edge is unit-tested without a socket.
//!
//! Every count an upstream can drive (a length, a chunk size, the bytes of a line, of the chunk
//! extensions, of the trailers) is compared before it is subtracted or added, so no hostile input
//! can wrap one: a bound stays a bound in a release build too. A chunked body's framing is read
//! as strictly as hyper's client reads it (`\r\n` line ends, its 16 KiB of extensions and of
//! trailers, 100 trailer lines), and more strictly where noted; `tests/framing_props.rs` reads
//! generated answers with both.

use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

/// Largest response head accepted, in bytes.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header lines in a response head.
pub(crate) const MAX_HEADERS: usize = 100;
/// Longest chunk-size line of a chunked body, with its extensions and its line end (hyper has
/// no bound of its own per line, only [`MAX_EXTENSION_BYTES`]).
const MAX_CHUNK_LINE: usize = 1024;
/// A chunked body whose chunk extensions (the bytes after each size line's first `;`, over the
/// whole body) reach this many bytes is refused, as hyper refuses it.
const MAX_EXTENSION_BYTES: usize = 16 * 1024;
/// A trailer section (every trailer line with its line end, and the empty line that closes it)
/// of this many bytes or more is refused, as hyper refuses it.
pub(crate) const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// Most trailer lines (hyper's bound, the same as [`MAX_HEADERS`]).
const MAX_TRAILERS: usize = MAX_HEADERS;

/// A parsed response head and how its body is framed.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Decoder,
    /// Whether the connection may carry another request once the body is read to its end.
    pub(crate) reusable: bool,
}

/// What [`parse_head`] found at the front of the buffer.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Not a complete head yet: read more.
    Partial,
    /// A complete `1xx` head of this many bytes, to skip (the real answer follows).
    Informational(usize),
    /// The head, and its length in bytes.
    Complete(Head, usize),
}

/// Parses the response head at the front of `buf`, for a request made with `method`.
pub(crate) fn parse_head(buf: &[u8], method: &Method) -> Result<Parsed, String> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    // Only the first MAX_HEAD_BYTES are looked at: a longer head is refused even when it came
    // whole in one read.
    let window = &buf[..buf.len().min(MAX_HEAD_BYTES)];
    let len = match response.parse(window) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if window.len() == MAX_HEAD_BYTES => {
            return Err(format!("response head larger than {MAX_HEAD_BYTES} bytes"));
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(e) => return Err(format!("malformed response head: {e}")),
    };
    let status = response
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| "malformed response status".to_owned())?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err("unexpected switch of protocols".to_owned());
    }
    if status.is_informational() {
        return Ok(Parsed::Informational(len));
    }
    let mut close = response.version != Some(1);
    let (mut length, mut chunked, mut encoded) = (None::<u64>, false, false);
    let mut headers = HeaderMap::with_capacity(response.headers.len());
    for header in response.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| "malformed header name".to_owned())?;
        let value = HeaderValue::from_bytes(header.value).map_err(|_| "malformed header value".to_owned())?;
        if name == CONTENT_LENGTH {
            let text = std::str::from_utf8(header.value).unwrap_or("").trim();
            let n = text
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| text.parse::<u64>().ok())
                .flatten()
                .ok_or_else(|| "malformed content-length".to_owned())?;
            if length.is_some_and(|seen| seen != n) {
                return Err("conflicting content-length values".to_owned());
            }
            length = Some(n);
        } else if name == TRANSFER_ENCODING {
            encoded = true;
            let last = header.value.rsplit(|b| *b == b',').next().unwrap_or_default();
            chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
        } else if name == CONNECTION {
            for token in header.value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && response.version == Some(0) {
                    close = false;
                }
            }
        }
        headers.append(name, value);
    }
    let body = if *method == Method::HEAD || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        Decoder::Length(0)
    } else if encoded && response.version == Some(0) {
        // RFC 9112 §6.1: an HTTP/1.0 message with a transfer coding has faulty framing.
        return Err("transfer-encoding in an HTTP/1.0 answer".to_owned());
    } else if encoded {
        // A length beside a transfer coding is ignored, and the connection is not used again
        // (RFC 9112 §6.3: such a message may be an attempt at request smuggling).
        close |= length.is_some();
        // A transfer coding other than chunked last runs to the close.
        if chunked {
            Decoder::chunked()
        } else {
            close = true;
            Decoder::Close
        }
    } else if let Some(n) = length {
        Decoder::Length(n)
    } else {
        close = true;
        Decoder::Close
    };
    Ok(Parsed::Complete(Head { status, headers, body, reusable: !close }, len))
}

/// Where a body's framing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decoder {
    /// This many bytes are still to come.
    Length(u64),
    /// A chunked body, at this point of its framing, with this many bytes of chunk extensions
    /// seen so far (under [`MAX_EXTENSION_BYTES`]).
    Chunked(Chunk, usize),
    /// Everything up to the connection's close.
    Close,
    /// The body has ended.
    Done,
}

/// Where a chunked body stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk's data, with this many bytes to come.
    Data(u64),
    /// Expecting the line end after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines up to an empty one, with `bytes` (under
    /// [`MAX_TRAILER_BYTES`]) in `lines` lines (at most [`MAX_TRAILERS`]) seen.
    Trailers { bytes: usize, lines: usize },
}

/// One step of decoding: framing bytes to skip first, then data or what is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Skip `skip` framing bytes; the `len` bytes after them are body data.
    Data { skip: usize, len: usize },
    /// Skip `skip` framing bytes; more input is needed.
    NeedMore { skip: usize },
    /// Skip `skip` framing bytes; the body has ended.
    End { skip: usize },
}

impl Decoder {
    /// A chunked body, before its first chunk-size line.
    pub(crate) const fn chunked() -> Decoder {
        Decoder::Chunked(Chunk::Size, 0)
    }

    /// The next step over `buf`, the unread input (which must start where the last step ended).
    pub(crate) fn decode(&mut self, buf: &[u8]) -> Result<Step, String> {
        let mut skip = 0;
        loop {
            let rest = &buf[skip..];
            match *self {
                Decoder::Done | Decoder::Length(0) => {
                    *self = Decoder::Done;
                    return Ok(Step::End { skip });
                }
                Decoder::Length(n) => {
                    if rest.is_empty() {
                        return Ok(Step::NeedMore { skip });
                    }
                    let (len, left) = take(n, rest.len());
                    *self = Decoder::Length(left);
                    return Ok(Step::Data { skip, len });
                }
                Decoder::Close => {
                    return Ok(if rest.is_empty() {
                        Step::NeedMore { skip }
                    } else {
                        Step::Data { skip, len: rest.len() }
                    });
                }
                Decoder::Chunked(Chunk::Size, extensions) => {
                    let Some((line, used)) = line(rest, MAX_CHUNK_LINE)? else {
                        return Ok(Step::NeedMore { skip });
                    };
                    let (size, more) = chunk_size(line)?;
                    // `more` is under MAX_CHUNK_LINE: the sum cannot wrap.
                    let extensions = extensions + more;
                    if extensions >= MAX_EXTENSION_BYTES {
                        return Err("malformed chunked body: too many chunk extensions".to_owned());
                    }
                    skip += used;
                    let next = if size == 0 { Chunk::Trailers { bytes: 0, lines: 0 } } else { Chunk::Data(size) };
                    *self = Decoder::Chunked(next, extensions);
                }
                Decoder::Chunked(Chunk::Data(n), extensions) => {
                    if rest.is_empty() {
                        return Ok(Step::NeedMore { skip });
                    }
                    let (len, left) = take(n, rest.len());
                    let next = if left == 0 { Chunk::DataEnd } else { Chunk::Data(left) };
                    *self = Decoder::Chunked(next, extensions);
                    return Ok(Step::Data { skip, len });
                }
                Decoder::Chunked(Chunk::DataEnd, extensions) => match rest {
                    [] | [b'\r'] => return Ok(Step::NeedMore { skip }),
                    [b'\r', b'\n', ..] => {
                        skip += 2;
                        *self = Decoder::Chunked(Chunk::Size, extensions);
                    }
                    _ => return Err("malformed chunked body: no line end after a chunk".to_owned()),
                },
                Decoder::Chunked(Chunk::Trailers { bytes, lines }, extensions) => {
                    // The room left for this line with its line end: the section stays under
                    // MAX_TRAILER_BYTES (`bytes` is below it, so this never wraps; checked anyway).
                    let room = (MAX_TRAILER_BYTES - 1).checked_sub(bytes).ok_or_else(too_many_trailers)?;
                    let found =
                        line(rest, room).map_err(|e| if e == LINE_TOO_LONG { too_many_trailers() } else { e })?;
                    let Some((line, used)) = found else {
                        return Ok(Step::NeedMore { skip });
                    };
                    skip += used;
                    if line.is_empty() {
                        *self = Decoder::Done;
                        return Ok(Step::End { skip });
                    }
                    trailer(line)?;
                    if lines >= MAX_TRAILERS {
                        return Err(too_many_trailers());
                    }
                    // used <= room, so bytes + used < MAX_TRAILER_BYTES.
                    let next = Chunk::Trailers { bytes: bytes + used, lines: lines + 1 };
                    *self = Decoder::Chunked(next, extensions);
                }
            }
        }
    }

    /// What the connection's close means here: the end of a body that runs to the close, an
    /// error for a body cut short.
    pub(crate) fn at_eof(&mut self) -> Result<(), String> {
        match *self {
            Decoder::Close | Decoder::Done | Decoder::Length(0) => {
                *self = Decoder::Done;
                Ok(())
            }
            Decoder::Length(n) => Err(format!("connection closed {n} bytes before the end of the body")),
            Decoder::Chunked(..) => Err("connection closed inside a chunked body".to_owned()),
        }
    }
}

/// Of `want` bytes still to come and `have` at hand: how many to hand out now, and how many are
/// left to come after them.
fn take(want: u64, have: usize) -> (usize, u64) {
    match usize::try_from(want) {
        Ok(want) if want <= have => (want, 0),
        // `have` is below `want` here, so the difference is positive.
        _ => (have, want.saturating_sub(u64::try_from(have).unwrap_or(u64::MAX))),
    }
}

/// The error of a line longer than its bound.
const LINE_TOO_LONG: &str = "malformed chunked body: line too long";

fn too_many_trailers() -> String {
    format!("malformed chunked body: trailers over {MAX_TRAILER_BYTES} bytes or {MAX_TRAILERS} lines")
}

/// The first line of `buf` without its line end (`\r\n`, and no other `\r` in it), and the
/// bytes it took with the line end; `None` while no line end is in sight; an error when the line
/// with its end would take more than `max` bytes.
fn line(buf: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, String> {
    match buf.iter().take(max).position(|b| *b == b'\n') {
        Some(end) => {
            let text = buf[..end].strip_suffix(b"\r").ok_or_else(|| "malformed chunked body: a bare LF".to_owned())?;
            if text.contains(&b'\r') {
                return Err("malformed chunked body: a bare CR".to_owned());
            }
            Ok(Some((text, end + 1)))
        }
        None if buf.len() >= max => Err(LINE_TOO_LONG.to_owned()),
        None => Ok(None),
    }
}

/// The size of a chunk-size line (1 to 16 hexadecimal digits, optional spaces or tabs, then
/// optional `;` extensions), and how many bytes of extensions it carries.
fn chunk_size(line: &[u8]) -> Result<(u64, usize), String> {
    let bad = || "malformed chunked body: bad chunk size".to_owned();
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return Err(bad());
    }
    let after = line[digits..].iter().position(|b| !matches!(b, b' ' | b'\t')).map_or(line.len(), |at| digits + at);
    let extensions = match line.get(after) {
        None => 0,
        Some(b';') => line.len() - after - 1,
        Some(_) => return Err(bad()),
    };
    let size = line[..digits].iter().try_fold(0u64, |size, b| {
        let digit = char::from(*b).to_digit(16).ok_or_else(bad)?;
        // At most 16 digits: the shift never drops a set bit.
        Ok::<u64, String>(size << 4 | u64::from(digit))
    })?;
    Ok((size, extensions))
}

/// Checks one trailer line: a field name (a token), `:`, and a value of visible characters,
/// spaces and tabs, as hyper (httparse) requires of it. Trailers are then ignored.
fn trailer(line: &[u8]) -> Result<(), String> {
    let bad = || "malformed chunked body: bad trailer line".to_owned();
    let colon = line.iter().position(|b| *b == b':').ok_or_else(bad)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    if name.is_empty() || !name.iter().all(token) {
        return Err(bad());
    }
    if !value.iter().all(|b| *b == b'\t' || (*b >= b' ' && *b != 0x7f)) {
        return Err(bad());
    }
    Ok(())
}

/// Writes a request head: the request line, `Host` (unless `lines` has one), the caller's header
/// lines, and the body's length when it has one.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    host: Option<&str>,
    lines: &[u8],
    body: Option<usize>,
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(lines);
    if let Some(len) = body {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(len.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends the header line `name: value` to `lines`.
pub(crate) fn header_line(lines: &mut Vec<u8>, name: &HeaderName, value: &HeaderValue) {
    lines.extend_from_slice(name.as_str().as_bytes());
    lines.extend_from_slice(b": ");
    lines.extend_from_slice(value.as_bytes());
    lines.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        match parse_head(text.as_bytes(), &Method::POST) {
            Ok(Parsed::Complete(head, len)) => {
                assert_eq!(len, text.len());
                head
            }
            other => unreachable!("{other:?}"),
        }
    }

    /// Decodes `input` fed in pieces of `piece` bytes; the body and whether it ended.
    fn decode_all(mut decoder: Decoder, input: &[u8], piece: usize) -> Result<(Vec<u8>, bool), String> {
        let (mut buf, mut body, mut fed) = (Vec::new(), Vec::new(), 0);
        loop {
            match decoder.decode(&buf)? {
                Step::Data { skip, len } => {
                    body.extend_from_slice(&buf[skip..skip + len]);
                    buf.drain(..skip + len);
                }
                Step::NeedMore { skip } => {
                    buf.drain(..skip);
                    if fed == input.len() {
                        decoder.at_eof()?;
                        return Ok((body, false));
                    }
                    let next = (fed + piece).min(input.len());
                    buf.extend_from_slice(&input[fed..next]);
                    fed = next;
                }
                Step::End { skip } => {
                    buf.drain(..skip);
                    assert!(buf.is_empty() || fed <= input.len());
                    return Ok((body, true));
                }
            }
        }
    }

    #[test]
    fn heads_and_their_framing() {
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: 1\r\n\r\n");
        assert_eq!((h.status, h.body, h.reusable), (StatusCode::OK, Decoder::Length(5), true));
        assert_eq!(h.headers.get("x-a").map(HeaderValue::as_bytes), Some(&b"1"[..]));
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!((h.body, h.reusable), (Decoder::chunked(), true));
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 3\r\n\r\n");
        assert_eq!((h.body, h.reusable), (Decoder::Close, false));
        let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n");
        assert_eq!((h.body, h.reusable), (Decoder::chunked(), false), "length and coding: used once");
        let h = head("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((h.body, h.reusable), (Decoder::Close, false));
        let h = head("HTTP/1.1 200 OK\r\nconnection: keep-alive, close\r\ncontent-length: 0\r\n\r\n");
        assert!(!h.reusable);
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n");
        assert!(!h.reusable);
        let h = head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\ncontent-length: 0\r\n\r\n");
        assert!(h.reusable);
        let h = head("HTTP/1.1 204 No Content\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(h.body, Decoder::Length(0));
        let h = head("HTTP/1.0 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(h.body, Decoder::Length(0));
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 7\r\ncontent-length: 7\r\n\r\n");
        assert_eq!(h.body, Decoder::Length(7));
    }

    #[test]
    fn bad_and_partial_heads() {
        let parse = |text: &str| parse_head(text.as_bytes(), &Method::GET);
        assert!(matches!(parse("HTTP/1.1 200 OK\r\ncontent-le"), Ok(Parsed::Partial)));
        assert!(matches!(parse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200"), Ok(Parsed::Informational(25))));
        for bad in [
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            "SMTP 220 hello\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: v\r\n")).collect();
        assert!(parse(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")).is_err(), "one header too many");
        let fits: String = (0..MAX_HEADERS).map(|i| format!("x-{i}: v\r\n")).collect();
        assert!(matches!(parse(&format!("HTTP/1.1 200 OK\r\n{fits}\r\n")), Ok(Parsed::Complete(..))));
        let huge = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES));
        assert!(parse(&huge).is_err(), "an endless head is cut at the bound");
        let whole = format!("HTTP/1.1 200 OK\r\nx: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert!(parse(&whole).is_err(), "a head over the bound is refused even when it is all in");
        let fits = format!("HTTP/1.1 200 OK\r\nx: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES - 24));
        assert_eq!(fits.len(), MAX_HEAD_BYTES);
        assert!(matches!(parse(&fits), Ok(Parsed::Complete(_, len)) if len == MAX_HEAD_BYTES), "exactly the bound");
        let below = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES - 40));
        assert!(matches!(parse(&below), Ok(Parsed::Partial)), "a long head below the bound waits");
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", &Method::HEAD)
                .ok()
                .and_then(|p| if let Parsed::Complete(h, _) = p { Some(h.body) } else { None }),
            Some(Decoder::Length(0))
        );
    }

    #[test]
    fn lengths_chunks_and_closes_in_any_pieces() {
        let chunked = b"5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nx-trailer: t\r\n\r\n";
        for piece in [1, 2, 3, 7, 100] {
            let (body, ended) = decode_all(Decoder::chunked(), chunked, piece).unwrap_or_default();
            assert_eq!((body.as_slice(), ended), (&b"hello 0123456789"[..], true), "pieces of {piece}");
            let (body, ended) = decode_all(Decoder::Length(5), b"hello", piece).unwrap_or_default();
            assert_eq!((body.as_slice(), ended), (&b"hello"[..], true));
            let (body, ended) = decode_all(Decoder::Close, b"to the end", piece).unwrap_or_default();
            assert_eq!((body.as_slice(), ended), (&b"to the end"[..], false));
        }
        let spaced = b"3 \t;x\r\nabc\r\n0\r\n\r\n";
        assert_eq!(decode_all(Decoder::chunked(), spaced, 2).map(|r| r.0), Ok(b"abc".to_vec()));
    }

    #[test]
    fn bodies_cut_short_or_malformed() {
        assert!(decode_all(Decoder::Length(10), b"short", 3).is_err());
        assert!(decode_all(Decoder::chunked(), b"5\r\nhel", 2).is_err());
        assert!(decode_all(Decoder::chunked(), b"5\r\nhello\r\n", 4).is_err(), "no last chunk");
        for bad in [
            &b"zz\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX",
            b"11111111111111111\r\n",
            // Line ends other than CRLF, as hyper refuses them (RFC 9112 only allows a bare LF).
            b"3\nabc\r\n0\r\n\r\n",
            b"3\r\nabc\n0\r\n\r\n",
            b"3\r\nabc\r\n0\r\n\n",
            b"3;a\rb\r\nabc\r\n0\r\n\r\n",
            // Whitespace before the size, or anything but `;` after it.
            b" 3\r\nabc\r\n0\r\n\r\n",
            b"3 x\r\nabc\r\n0\r\n\r\n",
            b"+3\r\nabc\r\n0\r\n\r\n",
            // Trailer lines that are not fields.
            b"0\r\nno colon\r\n\r\n",
            b"0\r\nx y: 1\r\n\r\n",
            b"0\r\n: 1\r\n\r\n",
            b"0\r\nx: \x01\r\n\r\n",
        ] {
            assert!(decode_all(Decoder::chunked(), bad, 4).is_err(), "{bad:?}");
        }
        let long_line = [&b"5;"[..], &[b'x'; MAX_CHUNK_LINE]].concat();
        assert!(decode_all(Decoder::chunked(), &long_line, 64).is_err());
        let trailers = [&b"0\r\n"[..], &b"x: y\r\n".repeat(MAX_TRAILER_BYTES / 6 + 1), b"\r\n"].concat();
        assert!(decode_all(Decoder::chunked(), &trailers, 512).is_err());
        assert_eq!(chunk_size(b"ffffffffffffffff"), Ok((u64::MAX, 0)));
        assert_eq!(chunk_size(b"a;x=1;y"), Ok((10, 5)));
    }

    /// A trailer section of `total` bytes, counting every line end and the closing empty line:
    /// `lines` lines of (nearly) equal length, then `\r\n`.
    fn trailer_section(total: usize, lines: usize) -> Vec<u8> {
        let body = total - 2;
        let mut out = Vec::with_capacity(total);
        for i in 0..lines {
            let len = body / lines + usize::from(i < body % lines);
            out.extend_from_slice(b"x:");
            out.resize(out.len() + len - 4, b'a');
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        assert_eq!(out.len(), total);
        out
    }

    #[test]
    fn the_trailer_bound_at_its_edges() {
        let decode = |section: &[u8], piece: usize| {
            let input = [&b"3\r\nabc\r\n0\r\n"[..], section].concat();
            decode_all(Decoder::chunked(), &input, piece)
        };
        for lines in [1, 2, 7, MAX_TRAILERS] {
            for piece in [97, 4096, 1 << 20] {
                let under = trailer_section(MAX_TRAILER_BYTES - 1, lines);
                assert_eq!(decode(&under, piece), Ok((b"abc".to_vec(), true)), "{lines} lines in pieces of {piece}");
                for over in [MAX_TRAILER_BYTES, MAX_TRAILER_BYTES + 1] {
                    let section = trailer_section(over, lines);
                    assert!(decode(&section, piece).is_err(), "{over} bytes in {lines} lines, pieces of {piece}");
                }
            }
        }
        let many = trailer_section(MAX_TRAILERS * 8 + 10, MAX_TRAILERS + 1);
        assert!(decode(&many, 64).is_err(), "one trailer line too many");
        assert_eq!(decode(&trailer_section(MAX_TRAILERS * 8 + 10, MAX_TRAILERS), 64).map(|r| r.1), Ok(true));
        assert_eq!(decode(b"\r\n", 1), Ok((b"abc".to_vec(), true)), "no trailers");
    }

    #[test]
    fn the_trailer_attack_is_refused_within_its_bound() {
        // A first trailer line whose line end is the section's byte 16,384 (counted from 0: the
        // line that made the old count pass the bound and wrap), or its 16,384th, then a line
        // that never ends: refused once the bound is passed, the buffer never above the bound.
        for (first, piece) in [MAX_TRAILER_BYTES + 1, MAX_TRAILER_BYTES].into_iter().flat_map(|len| {
            let line = trailer_section(len + 2, 1);
            [101, 4096, 65_536].map(|piece| (line[..len].to_vec(), piece))
        }) {
            assert_eq!(first.last(), Some(&b'\n'));
            let mut decoder = Decoder::chunked();
            let mut buf = b"0\r\n".to_vec();
            let endless = std::iter::repeat_n(b'a', 20 * 1024 * 1024);
            let mut input = first.iter().copied().chain(endless);
            let (mut fed, mut most) = (0usize, 0usize);
            let refused = loop {
                match decoder.decode(&buf) {
                    Err(_) => break true,
                    Ok(Step::NeedMore { skip }) => {
                        buf.drain(..skip);
                        let before = buf.len();
                        buf.extend(input.by_ref().take(piece));
                        if buf.len() == before {
                            break false;
                        }
                        fed += buf.len() - before;
                        most = most.max(buf.len());
                    }
                    Ok(other) => unreachable!("{other:?}"),
                }
            };
            assert!(refused, "a first line of {} bytes, pieces of {piece}", first.len());
            assert!(fed <= MAX_TRAILER_BYTES + piece, "refused after {fed} bytes, pieces of {piece}");
            assert!(most <= MAX_TRAILER_BYTES + piece, "{most} bytes buffered, pieces of {piece}");
        }
    }

    #[test]
    fn lengths_never_wrap() {
        assert_eq!(take(u64::MAX, 10), (10, u64::MAX - 10));
        assert_eq!(take(5, 10), (5, 0));
        assert_eq!(take(10, 10), (10, 0));
        let mut decoder = Decoder::Length(u64::MAX);
        assert_eq!(decoder.decode(b"abc"), Ok(Step::Data { skip: 0, len: 3 }));
        assert_eq!(decoder, Decoder::Length(u64::MAX - 3));
        let mut decoder = Decoder::chunked();
        assert_eq!(decoder.decode(b"ffffffffffffffff\r\nab"), Ok(Step::Data { skip: 18, len: 2 }));
        assert_eq!(decoder, Decoder::Chunked(Chunk::Data(u64::MAX - 2), 0));
    }

    #[test]
    fn chunk_extensions_are_bounded_over_the_body() {
        // 17 chunks with 1,000 bytes of extensions each: 17,000 bytes, past the bound.
        let ext = format!("1;{}\r\nx\r\n", "e".repeat(999));
        let body = [ext.repeat(17).as_bytes(), b"0\r\n\r\n"].concat();
        assert!(decode_all(Decoder::chunked(), &body, 4096).is_err());
        let body = [ext.repeat(16).as_bytes(), b"0\r\n\r\n"].concat();
        assert_eq!(decode_all(Decoder::chunked(), &body, 4096).map(|r| r.0.len()), Ok(16));
    }

    #[test]
    fn request_heads() {
        let mut lines = Vec::new();
        header_line(&mut lines, &http::header::ACCEPT, &HeaderValue::from_static("text/event-stream"));
        let mut out = Vec::new();
        write_head(&mut out, &Method::POST, "/v1/x?a=1", Some("h:8080"), &lines, Some(12));
        assert_eq!(
            out,
            b"POST /v1/x?a=1 HTTP/1.1\r\nhost: h:8080\r\naccept: text/event-stream\r\ncontent-length: 12\r\n\r\n"
        );
        out.clear();
        write_head(&mut out, &Method::GET, "/", None, b"", None);
        assert_eq!(out, b"GET / HTTP/1.1\r\n\r\n");
    }
}
