//! Incremental server-sent-events parser: bytes in, events (`event:` name and `data` payload) out.
//!
//! Follows the SSE framing rules leniently: lines end in `\n` or `\r\n`; a blank line ends
//! an event; a field value loses one leading space; several `data` lines of one event are
//! joined with `\n`; the `event` field names the event (the last one wins); comment lines
//! (`:…`) and other fields (`id`, `retry`) are ignored; an event without any `data` line is not
//! delivered (its name is dropped with it). Events may be split across any chunk boundaries,
//! and each byte is scanned for a line end once, however the chunks fall.

use std::collections::VecDeque;

use domain::ports::SseEvent;

/// Largest accepted event (its name and all `data` lines together), in bytes.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Splits a byte stream into its events.
#[derive(Debug, Default)]
pub struct SseSplitter {
    /// Bytes not yet forming a complete line.
    pending: Vec<u8>,
    /// How many bytes of `pending` are known to hold no line end.
    scanned: usize,
    /// `data` of the event being read.
    data: Vec<u8>,
    /// The `event` name of the event being read, if any.
    name: Option<String>,
    /// Whether the event being read had a `data` field at all.
    has_data: bool,
    /// Whether some event exceeded [`MAX_EVENT_BYTES`].
    overflow: bool,
    /// Complete events not yet taken.
    ready: VecDeque<SseEvent>,
}

impl SseSplitter {
    /// An empty splitter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next chunk of the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.pending.extend_from_slice(chunk);
        let pending = std::mem::take(&mut self.pending);
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(offset) = pending[from..].iter().position(|&b| b == b'\n') {
            let end = from + offset;
            self.line(&pending[start..end]);
            start = end + 1;
            from = start;
        }
        self.pending = pending;
        self.pending.drain(..start);
        self.scanned = self.pending.len();
        if self.pending.len() > MAX_EVENT_BYTES {
            self.overflow = true;
            self.pending.clear();
            self.scanned = 0;
        }
    }

    /// Marks the end of the stream: a last line without newline and an event without its
    /// closing blank line are still delivered (lenient).
    pub fn finish(&mut self) {
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.scanned = 0;
            self.line(&line);
        }
        self.dispatch();
    }

    /// The next complete event, if any.
    pub fn next_event(&mut self) -> Option<SseEvent> {
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
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.has_data = true;
                self.data.extend_from_slice(value);
            }
            b"event" => self.name = Some(String::from_utf8_lossy(value).into_owned()),
            _ => return,
        }
        let name_len = self.name.as_ref().map_or(0, String::len);
        if self.data.len() + name_len > MAX_EVENT_BYTES {
            self.overflow = true;
            self.data.clear();
            self.name = None;
        }
    }

    fn dispatch(&mut self) {
        let name = self.name.take();
        if self.has_data {
            let data = std::mem::take(&mut self.data);
            self.ready.push_back(SseEvent { event: name.filter(|n| !n.is_empty()), data });
        }
        self.has_data = false;
        self.data.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event as `name|data` (`-` for no name).
    fn all(chunks: &[&[u8]], finish: bool) -> Vec<String> {
        let mut s = SseSplitter::new();
        let mut out = Vec::new();
        let show = |e: SseEvent| format!("{}|{}", e.event.as_deref().unwrap_or("-"), String::from_utf8_lossy(&e.data));
        for c in chunks {
            s.push(c);
            while let Some(e) = s.next_event() {
                out.push(show(e));
            }
        }
        if finish {
            s.finish();
            while let Some(e) = s.next_event() {
                out.push(show(e));
            }
        }
        out
    }

    #[test]
    fn whole_events() {
        let got = all(&[b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n"], false);
        assert_eq!(got, vec!["-|{\"a\":1}", "-|{\"b\":2}", "-|[DONE]"]);
    }

    #[test]
    fn split_across_chunks_at_every_byte() {
        let text = b"data: {\"a\":1}\r\n\r\nevent: e2\r\ndata:{\"b\":2}\n\ndata: [DONE]\n\n";
        let want = vec!["-|{\"a\":1}", "e2|{\"b\":2}", "-|[DONE]"];
        for cut in 0..text.len() {
            assert_eq!(all(&[&text[..cut], &text[cut..]], false), want, "cut at {cut}");
        }
        for (a, b) in [(3, 9), (10, 30), (17, 18)] {
            assert_eq!(all(&[&text[..a], &text[a..b], &text[b..]], false), want, "cuts at {a}, {b}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(all(&bytes, false), want);
    }

    #[test]
    fn crlf_lines() {
        let got = all(&[b"event: x\r\ndata: x\r\n\r\ndata: y\r\n\r\n"], false);
        assert_eq!(got, vec!["x|x", "-|y"]);
    }

    #[test]
    fn named_events() {
        let text = b"event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: ping\ndata: {}\n\n";
        assert_eq!(all(&[text], false), vec!["message_start|{\"type\":\"message_start\"}", "ping|{}"]);
        // The name belongs to one event only; the last `event` field wins; an empty name is none.
        let text = b"event: a\nevent: b\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n";
        assert_eq!(all(&[text], false), vec!["b|1", "-|2", "-|3"]);
        // A named event without data is not delivered, and its name does not leak into the next.
        assert_eq!(all(&[b"event: lonely\n\ndata: x\n\n"], false), vec!["-|x"]);
    }

    #[test]
    fn comments_and_other_fields_ignored() {
        let got = all(&[b": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: x\n\n:ping\n\n"], false);
        assert_eq!(got, vec!["message|x"]);
    }

    #[test]
    fn multi_line_data_joined() {
        let got = all(&[b"data: a\ndata: b\ndata\n\n"], false);
        assert_eq!(got, vec!["-|a\nb\n"]);
    }

    #[test]
    fn only_one_space_stripped() {
        assert_eq!(all(&[b"data:  x\n\n"], false), vec!["-| x"]);
    }

    #[test]
    fn incomplete_event_needs_finish() {
        assert!(all(&[b"data: [DONE]"], false).is_empty());
        assert_eq!(all(&[b"data: [DONE]"], true), vec!["-|[DONE]"]);
        assert_eq!(all(&[b"event: e\ndata: x\n"], true), vec!["e|x"]);
        assert!(all(&[b": only a comment\n"], true).is_empty());
    }

    #[test]
    fn oversized_event_flagged() {
        let mut s = SseSplitter::new();
        s.push(b"data: ");
        s.push(&vec![b'a'; MAX_EVENT_BYTES + 1]);
        assert!(s.overflowed());
        let mut s = SseSplitter::new();
        s.push(b"data: ");
        s.push(&vec![b'a'; MAX_EVENT_BYTES - 16]);
        s.push(b"\n\n");
        assert!(!s.overflowed());
        assert_eq!(s.next_event().map(|e| e.data.len()), Some(MAX_EVENT_BYTES - 16));
    }

    #[test]
    fn long_line_in_small_chunks() {
        // 4 MiB of data in 1 KiB chunks: linear, not quadratic, in the number of chunks.
        let mut s = SseSplitter::new();
        s.push(b"data: ");
        let chunk = vec![b'z'; 1024];
        for _ in 0..4096 {
            s.push(&chunk);
        }
        s.push(b"\n\n");
        assert_eq!(s.next_event().map(|e| e.data.len()), Some(4 * 1024 * 1024));
    }
}
