//! Media of video tasks: the store key of each item, the per-kind size bounds, and a sink wrapper that
//! types what passes through it by its first bytes (uploads and imports alike).

use catalog::ModelDef;
use domain::ports::{AssetKind, MediaError, MediaSink};
use domain::{TaskId, UserId};
use validation::sniff::{SNIFF_BYTES, sniff};

/// The media store key of a task's item at `position`: `<user>/<task>/<position>`.
pub(crate) fn media_key(user: &UserId, task: &TaskId, position: u32) -> String {
    format!("{user}/{task}/{position}")
}

/// Largest file of each kind, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SizeLimits {
    pub image: u64,
    pub video: u64,
    pub audio: u64,
}

impl SizeLimits {
    /// A video model's per-file limits.
    pub(crate) fn of(def: &ModelDef) -> Option<SizeLimits> {
        let u = def.video_limits()?.upload_max_bytes;
        Some(SizeLimits { image: u.image, video: u.video, audio: u.audio })
    }

    /// The largest of each kind over `defs` (before the model is known).
    pub(crate) fn widest<'a>(defs: impl IntoIterator<Item = &'a ModelDef>) -> SizeLimits {
        defs.into_iter().filter_map(SizeLimits::of).fold(SizeLimits { image: 0, video: 0, audio: 0 }, |a, b| {
            SizeLimits { image: a.image.max(b.image), video: a.video.max(b.video), audio: a.audio.max(b.audio) }
        })
    }

    /// The limit for `kind`.
    pub(crate) fn of_kind(&self, kind: AssetKind) -> u64 {
        match kind {
            AssetKind::Image => self.image,
            AssetKind::Video => self.video,
            AssetKind::Audio => self.audio,
        }
    }

    /// The largest limit of any kind (what a file may reach before its kind is known).
    pub(crate) fn largest(&self) -> u64 {
        self.image.max(self.video).max(self.audio)
    }
}

/// Why a typed write stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TypedError {
    /// The first bytes are not a known image, video or audio format.
    #[error("not a recognised image, video or audio file")]
    Unknown,
    /// More bytes than the kind allows.
    #[error("a {} file may be at most {limit} bytes", kind.as_str())]
    TooLarge {
        /// The sniffed kind.
        kind: AssetKind,
        /// Its limit.
        limit: u64,
    },
    /// The sink failed.
    #[error(transparent)]
    Sink(#[from] MediaError),
}

/// A sink that holds back the first bytes until their kind is known, then bounds the file by it.
pub(crate) struct TypedSink {
    inner: Box<dyn MediaSink>,
    limits: SizeLimits,
    head: Vec<u8>,
    kind: Option<(AssetKind, &'static str)>,
    bytes: u64,
    /// The typed reason of the last refused write (a fetch into this sink only reports text).
    refused: Option<TypedError>,
}

impl TypedSink {
    pub(crate) fn new(inner: Box<dyn MediaSink>, limits: SizeLimits) -> TypedSink {
        TypedSink { inner, limits, head: Vec::with_capacity(SNIFF_BYTES), kind: None, bytes: 0, refused: None }
    }

    /// Why the last write was refused, if it was.
    pub(crate) fn refused(&mut self) -> Option<TypedError> {
        self.refused.take()
    }

    /// Adds `chunk`; types the file once [`SNIFF_BYTES`] are in.
    pub(crate) async fn push(&mut self, chunk: &[u8]) -> Result<(), TypedError> {
        self.bytes = self.bytes.saturating_add(chunk.len() as u64);
        match self.kind {
            Some((kind, _)) => {
                let limit = self.limits.of_kind(kind);
                if self.bytes > limit {
                    return Err(TypedError::TooLarge { kind, limit });
                }
                self.inner.write(chunk).await?;
            }
            None => {
                self.head.extend_from_slice(chunk);
                if self.head.len() >= SNIFF_BYTES {
                    self.settle_kind().await?;
                }
            }
        }
        Ok(())
    }

    /// Types the file from the bytes held back, checks its size so far, and writes them.
    async fn settle_kind(&mut self) -> Result<(AssetKind, &'static str), TypedError> {
        let found = sniff(&self.head).ok_or(TypedError::Unknown)?;
        let limit = self.limits.of_kind(found.0);
        if self.bytes > limit {
            return Err(TypedError::TooLarge { kind: found.0, limit });
        }
        self.kind = Some(found);
        let head = std::mem::take(&mut self.head);
        self.inner.write(&head).await?;
        Ok(found)
    }

    /// Finishes the file: its kind, MIME type and size.
    pub(crate) async fn finish(mut self) -> Result<(AssetKind, &'static str, u64), TypedError> {
        let (kind, mime) = match self.kind {
            Some(found) => found,
            None => self.settle_kind().await?,
        };
        let bytes = self.inner.finish().await?;
        Ok((kind, mime, bytes))
    }

    /// Drops what was written.
    pub(crate) async fn abort(self) {
        self.inner.abort().await;
    }
}

#[async_trait::async_trait]
impl MediaSink for TypedSink {
    async fn write(&mut self, chunk: &[u8]) -> Result<(), MediaError> {
        match self.push(chunk).await {
            Ok(()) => Ok(()),
            Err(TypedError::Sink(inner)) => Err(inner),
            Err(other) => {
                let text = other.to_string();
                self.refused = Some(other);
                Err(MediaError::Io(text))
            }
        }
    }

    async fn finish(self: Box<Self>) -> Result<u64, MediaError> {
        TypedSink::finish(*self).await.map(|(_, _, n)| n).map_err(|e| MediaError::Io(e.to_string()))
    }

    async fn abort(self: Box<Self>) {
        TypedSink::abort(*self).await;
    }
}
