//! [`LocalMediaStore`]: the media store on a local directory.
//!
//! Layout: the object `a/b/c.png` is the file `<root>/a/b/c.png`; objects being written live
//! in `<root>/.tmp/<random>.part` until [`MediaSink::finish`] flushes them to disk and renames
//! them into place (atomic on one file system), so a reader never sees a partial object and a
//! crash leaves only `.tmp` leftovers (removed when the store is opened). Aborting or dropping
//! an unfinished sink removes its temporary file. Reads come in chunks of [`CHUNK_BYTES`].
//!
//! Keys ([`validate_key`]): 1 to [`MAX_KEY_SEGMENTS`] segments separated by `/`, each 1 to
//! [`MAX_SEGMENT_LEN`] characters of ASCII letters, digits, `-`, `_` and `.`, not starting with
//! `.`; at most [`MAX_KEY_LEN`] bytes in all. So no key can name a path outside the root, the
//! temporary directory, or a hidden file.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use domain::ports::{MediaError, MediaSink, MediaSource, MediaStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 512;
/// Most `/`-separated segments in a key.
pub const MAX_KEY_SEGMENTS: usize = 8;
/// Longest segment.
pub const MAX_SEGMENT_LEN: usize = 128;
/// Size of the chunks [`MediaSource::next_chunk`] returns (the last may be shorter).
pub const CHUNK_BYTES: usize = 64 * 1024;
/// The directory of objects being written, under the root.
const TMP_DIR: &str = ".tmp";

/// Checks a media key (see the module notes).
pub fn validate_key(key: &str) -> Result<(), MediaError> {
    let bad = |why: &str| Err(MediaError::InvalidKey(format!("{why}: {:?}", key.chars().take(80).collect::<String>())));
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return bad("empty or too long");
    }
    let segments: Vec<&str> = key.split('/').collect();
    if segments.len() > MAX_KEY_SEGMENTS {
        return bad("too many segments");
    }
    for segment in segments {
        if segment.is_empty() || segment.len() > MAX_SEGMENT_LEN || segment.starts_with('.') {
            return bad("empty, too long or hidden segment");
        }
        if !segment.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
            return bad("character not allowed");
        }
    }
    Ok(())
}

fn io(context: &str, e: &std::io::Error) -> MediaError {
    MediaError::Io(format!("{context}: {e}"))
}

/// [`MediaStore`] on a directory.
#[derive(Debug, Clone)]
pub struct LocalMediaStore {
    root: PathBuf,
}

impl LocalMediaStore {
    /// The store rooted at `root`, creating the directory (and its temporary directory) if
    /// needed and removing temporary files a crash left behind.
    pub async fn new(root: impl Into<PathBuf>) -> Result<LocalMediaStore, MediaError> {
        let root = root.into();
        let tmp = root.join(TMP_DIR);
        tokio::fs::create_dir_all(&tmp).await.map_err(|e| io("cannot create the media directory", &e))?;
        let mut leftovers = tokio::fs::read_dir(&tmp).await.map_err(|e| io("cannot list the media directory", &e))?;
        while let Ok(Some(entry)) = leftovers.next_entry().await {
            let _ = tokio::fs::remove_file(entry.path()).await;
        }
        Ok(LocalMediaStore { root })
    }

    /// The directory the objects live in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> Result<PathBuf, MediaError> {
        validate_key(key)?;
        Ok(self.root.join(key))
    }
}

#[async_trait]
impl MediaStore for LocalMediaStore {
    async fn create(&self, key: &str) -> Result<Box<dyn MediaSink>, MediaError> {
        let dest = self.path(key)?;
        let mut name = [0u8; 16];
        getrandom::fill(&mut name).map_err(|e| MediaError::Io(format!("no randomness for a file name: {e}")))?;
        let name: String = name.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = self.root.join(TMP_DIR).join(format!("{name}.part"));
        let file = tokio::fs::File::create(&tmp).await.map_err(|e| io("cannot create a media file", &e))?;
        Ok(Box::new(LocalSink { file: Some(file), tmp, dest, written: 0, done: false }))
    }

    async fn open(&self, key: &str) -> Result<Option<Box<dyn MediaSource>>, MediaError> {
        let path = self.path(key)?;
        let file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("cannot open a media file", &e)),
        };
        let meta = file.metadata().await.map_err(|e| io("cannot read a media file's size", &e))?;
        if !meta.is_file() {
            return Ok(None);
        }
        Ok(Some(Box::new(LocalSource { file, len: meta.len(), remaining: meta.len() })))
    }

    async fn delete(&self, key: &str) -> Result<(), MediaError> {
        match tokio::fs::remove_file(self.path(key)?).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("cannot delete a media file", &e)),
        }
    }
}

/// An object being written to its temporary file.
#[derive(Debug)]
struct LocalSink {
    file: Option<tokio::fs::File>,
    tmp: PathBuf,
    dest: PathBuf,
    written: u64,
    done: bool,
}

#[async_trait]
impl MediaSink for LocalSink {
    async fn write(&mut self, chunk: &[u8]) -> Result<(), MediaError> {
        let file = self.file.as_mut().ok_or_else(|| MediaError::Io("the media file is closed".to_owned()))?;
        file.write_all(chunk).await.map_err(|e| io("cannot write a media file", &e))?;
        self.written = self.written.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<u64, MediaError> {
        let mut file = self.file.take().ok_or_else(|| MediaError::Io("the media file is closed".to_owned()))?;
        file.flush().await.map_err(|e| io("cannot write a media file", &e))?;
        file.sync_all().await.map_err(|e| io("cannot write a media file", &e))?;
        drop(file);
        if let Some(parent) = self.dest.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| io("cannot create a media directory", &e))?;
        }
        tokio::fs::rename(&self.tmp, &self.dest).await.map_err(|e| io("cannot store a media file", &e))?;
        self.done = true;
        Ok(self.written)
    }

    async fn abort(mut self: Box<Self>) {
        drop(self.file.take());
        let _ = tokio::fs::remove_file(&self.tmp).await;
        self.done = true;
    }
}

impl Drop for LocalSink {
    fn drop(&mut self) {
        if !self.done {
            drop(self.file.take());
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// A stored object being read.
#[derive(Debug)]
struct LocalSource {
    file: tokio::fs::File,
    len: u64,
    remaining: u64,
}

#[async_trait]
impl MediaSource for LocalSource {
    fn len(&self) -> u64 {
        self.len
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, MediaError>> {
        if self.remaining == 0 {
            return None;
        }
        let want = usize::try_from(self.remaining).map_or(CHUNK_BYTES, |r| r.min(CHUNK_BYTES));
        let mut chunk = vec![0u8; want];
        match self.file.read(&mut chunk).await {
            // The file ended early: stop rather than loop.
            Ok(0) => {
                self.remaining = 0;
                None
            }
            Ok(n) => {
                chunk.truncate(n);
                self.remaining = self.remaining.saturating_sub(u64::try_from(n).unwrap_or(u64::MAX));
                Some(Ok(chunk))
            }
            Err(e) => {
                self.remaining = 0;
                Some(Err(io("cannot read a media file", &e)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let long_segment = "a".repeat(MAX_SEGMENT_LEN);
        let deepest = ["a"; MAX_KEY_SEGMENTS].join("/");
        for ok in ["a", "u_1/2026/x-1.png", "A.b.c", long_segment.as_str(), deepest.as_str(), "a/b..c"] {
            assert_eq!(validate_key(ok), Ok(()), "{ok}");
        }
        let too_long_segment = "a".repeat(MAX_SEGMENT_LEN + 1);
        let too_deep = ["a"; MAX_KEY_SEGMENTS + 1].join("/");
        let too_long = vec!["b".repeat(100); 6].join("/");
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "../a",
            "a/../b",
            "..",
            ".",
            ".tmp/x",
            "a/.hidden",
            "a\\b",
            "a b",
            "a%2e",
            "é",
            "a\0b",
            too_long_segment.as_str(),
            too_deep.as_str(),
            too_long.as_str(),
        ] {
            assert!(matches!(validate_key(bad), Err(MediaError::InvalidKey(_))), "{bad:?}");
        }
    }
}
