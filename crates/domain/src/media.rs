//! A task's media inputs: what each is and where it comes from, in the order the prompt refers to
//! them ("Image 1", "Video 1", …).
//!
//! The store keeps the list as a JSON array in the task's `media_url` column and the API shows that
//! text as it is: `{"type":"image","url":"https://…"}` for a link, `{"bytes":…,"mime":…,"type":…,"upload":n}`
//! for the `n`-th uploaded file. The serde traits derived here are that format's one definition (the
//! store and the wire write it through them; this crate itself writes no JSON). A record that does
//! not read back is corrupt (an error), never "no media".

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ports::AssetKind;

/// One media input of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MediaEntry", into = "MediaEntry")]
pub struct TaskMedia {
    /// Image, video or audio.
    pub kind: AssetKind,
    /// Where it comes from.
    pub source: MediaSource,
}

/// Where a media input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaSource {
    /// A link the gateway imports (https).
    Link(String),
    /// A file uploaded with the request.
    Upload {
        /// Its place among the request's files, from 1.
        number: u32,
        /// Its MIME type (sniffed).
        mime: String,
        /// Its size in bytes.
        bytes: u64,
    },
}

impl TaskMedia {
    /// The link to import, for a link.
    pub fn url(&self) -> Option<&str> {
        match &self.source {
            MediaSource::Link(url) => Some(url),
            MediaSource::Upload { .. } => None,
        }
    }
}

/// The stored form of one item (fields in the order the stored text has them).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MediaEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mime: Option<String>,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    upload: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

/// A stored media item that is neither a link nor an uploaded file of a known kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadMediaEntry(String);

impl fmt::Display for BadMediaEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadMediaEntry {}

impl TryFrom<MediaEntry> for TaskMedia {
    type Error = BadMediaEntry;

    fn try_from(e: MediaEntry) -> Result<TaskMedia, BadMediaEntry> {
        let kind = e.kind.parse::<AssetKind>().map_err(|err| BadMediaEntry(err.to_string()))?;
        let source = match (e.url, e.upload, e.mime, e.bytes) {
            (Some(url), None, None, None) => MediaSource::Link(url),
            (None, Some(number), Some(mime), Some(bytes)) => MediaSource::Upload { number, mime, bytes },
            _ => return Err(BadMediaEntry("a media item is either {type, url} or {type, upload, mime, bytes}".into())),
        };
        Ok(TaskMedia { kind, source })
    }
}

impl From<TaskMedia> for MediaEntry {
    fn from(m: TaskMedia) -> MediaEntry {
        let kind = m.kind.as_str().to_owned();
        match m.source {
            MediaSource::Link(url) => MediaEntry { bytes: None, mime: None, kind, upload: None, url: Some(url) },
            MediaSource::Upload { number, mime, bytes } => {
                MediaEntry { bytes: Some(bytes), mime: Some(mime), kind, upload: Some(number), url: None }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_the_stored_text() {
        // The text the gateway has always stored for a link and an uploaded file.
        let text = r#"[{"type":"video","url":"https://x.test/a.mp4"},{"bytes":12,"mime":"image/png","type":"image","upload":1}]"#;
        let media: Vec<TaskMedia> = serde_json::from_str(text).expect("reads");
        assert_eq!(
            media,
            vec![
                TaskMedia { kind: AssetKind::Video, source: MediaSource::Link("https://x.test/a.mp4".into()) },
                TaskMedia {
                    kind: AssetKind::Image,
                    source: MediaSource::Upload { number: 1, mime: "image/png".into(), bytes: 12 }
                },
            ]
        );
        assert_eq!(serde_json::to_string(&media).expect("writes"), text);
        assert_eq!(media[0].url(), Some("https://x.test/a.mp4"));
        assert_eq!(media[1].url(), None);
    }

    #[test]
    fn a_broken_item_is_an_error() {
        for bad in [
            r#"[{"type":"movie","url":"https://x"}]"#,
            r#"[{"url":"https://x"}]"#,
            r#"[{"type":"video"}]"#,
            r#"[{"type":"video","url":"https://x","upload":1}]"#,
            r#"[{"type":"video","url":"https://x","extra":1}]"#,
            r#"{"type":"video","url":"https://x"}"#,
            "not json",
        ] {
            assert!(serde_json::from_str::<Vec<TaskMedia>>(bad).is_err(), "{bad}");
        }
    }
}
