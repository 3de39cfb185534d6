//! Incremental server-sent-events parser: bytes in, `data` payloads out.
//!
//! Follows the SSE framing rules leniently: lines end in `\n` or `\r\n`; a blank line ends
//! an event; `data:` with or without one following space; several `data` lines of one event
//! are joined with `\n`; comment lines (`:…`) and other fields (`event`, `id`, `retry`) are
//! ignored. Events may be split across any chunk boundaries.

use std::collections::VecDeque;

/// Largest accepted event (all `data` lines of one event together), in bytes.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Splits a byte stream into the `data` payloads of its events.
#[derive(Debug, Default)]
pub struct SseSplitter {
    /// Bytes not yet forming a complete line.
    pending: Vec<u8>,
    /// `data` of the event being read.
    data: Vec<u8>,
    /// Whether the event being read had a `data` field at all.
    has_data: bool,
    /// Whether some event exceeded [`MAX_EVENT_BYTES`].
    overflow: bool,
    /// Complete payloads not yet taken.
    ready: VecDeque<Vec<u8>>,
}

impl SseSplitter {
    /// An empty splitter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next chunk of the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        while let Some(offset) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + offset;
            let line = self.pending[start..end].to_vec();
            self.line(&line);
            start = end + 1;
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_EVENT_BYTES {
            self.overflow = true;
            self.pending.clear();
        }
    }

    /// Marks the end of the stream: a last line without newline and an event without its
    /// closing blank line are still delivered (lenient).
    pub fn finish(&mut self) {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.line(&line);
        }
        self.dispatch();
    }

    /// The next complete payload, if any.
    pub fn next_data(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Whether an event larger than [`MAX_EVENT_BYTES`] was seen (and dropped).
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line.starts_with(b":") {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field != b"data" {
            return;
        }
        if self.has_data {
            self.data.push(b'\n');
        }
        self.has_data = true;
        self.data.extend_from_slice(value);
        if self.data.len() > MAX_EVENT_BYTES {
            self.overflow = true;
            self.data.clear();
        }
    }

    fn dispatch(&mut self) {
        if self.has_data {
            self.ready.push_back(std::mem::take(&mut self.data));
        }
        self.has_data = false;
        self.data.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]], finish: bool) -> Vec<String> {
        let mut s = SseSplitter::new();
        let mut out = Vec::new();
        for c in chunks {
            s.push(c);
            while let Some(d) = s.next_data() {
                out.push(String::from_utf8_lossy(&d).into_owned());
            }
        }
        if finish {
            s.finish();
            while let Some(d) = s.next_data() {
                out.push(String::from_utf8_lossy(&d).into_owned());
            }
        }
        out
    }

    #[test]
    fn whole_events() {
        let got = all(&[b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n"], false);
        assert_eq!(got, vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"]);
    }

    #[test]
    fn split_across_chunks_at_every_byte() {
        let text = b"data: {\"a\":1}\r\n\r\ndata:{\"b\":2}\n\ndata: [DONE]\n\n";
        for cut in 0..text.len() {
            let got = all(&[&text[..cut], &text[cut..]], false);
            assert_eq!(got, vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"], "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(all(&bytes, false).len(), 3);
    }

    #[test]
    fn crlf_lines() {
        let got = all(&[b"data: x\r\n\r\ndata: y\r\n\r\n"], false);
        assert_eq!(got, vec!["x", "y"]);
    }

    #[test]
    fn comments_and_other_fields_ignored() {
        let got = all(&[b": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: x\n\n:ping\n\n"], false);
        assert_eq!(got, vec!["x"]);
    }

    #[test]
    fn multi_line_data_joined() {
        let got = all(&[b"data: a\ndata: b\ndata\n\n"], false);
        assert_eq!(got, vec!["a\nb\n"]);
    }

    #[test]
    fn only_one_space_stripped() {
        assert_eq!(all(&[b"data:  x\n\n"], false), vec![" x"]);
    }

    #[test]
    fn incomplete_event_needs_finish() {
        assert!(all(&[b"data: [DONE]"], false).is_empty());
        assert_eq!(all(&[b"data: [DONE]"], true), vec!["[DONE]"]);
        assert_eq!(all(&[b"data: x\n"], true), vec!["x"]);
        assert!(all(&[b": only a comment\n"], true).is_empty());
    }

    #[test]
    fn oversized_event_flagged() {
        let mut s = SseSplitter::new();
        s.push(b"data: ");
        s.push(&vec![b'a'; MAX_EVENT_BYTES + 1]);
        assert!(s.overflowed());
    }
}
