//! `LocalMediaStore` on a real directory: atomic writes, chunked reads, keys, clean-up.
#![allow(clippy::panic, clippy::unwrap_used)]

use std::path::PathBuf;

use domain::ports::{MediaError, MediaSource, MediaStore};
use media::LocalMediaStore;
use media::store::CHUNK_BYTES;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        TempDir(std::env::temp_dir().join(format!("media-store-{name}-{}-{nanos}", std::process::id())))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn read_all(mut source: Box<dyn MediaSource>) -> (Vec<usize>, Vec<u8>) {
    let (mut sizes, mut data) = (Vec::new(), Vec::new());
    for _ in 0..10_000 {
        match source.next_chunk().await {
            Some(chunk) => {
                let chunk = chunk.unwrap();
                sizes.push(chunk.len());
                data.extend_from_slice(&chunk);
            }
            None => return (sizes, data),
        }
    }
    panic!("source did not end");
}

fn tmp_files(dir: &TempDir) -> usize {
    std::fs::read_dir(dir.0.join(".tmp")).unwrap().count()
}

#[tokio::test]
async fn write_then_read_in_chunks() {
    let dir = TempDir::new("rw");
    let store = LocalMediaStore::new(&dir.0).await.unwrap();
    let content: Vec<u8> = (0..3 * CHUNK_BYTES + 10).map(|i| u8::try_from(i % 251).unwrap()).collect();
    let mut sink = store.create("u1/2026/clip.mp4").await.unwrap();
    for piece in content.chunks(10_000) {
        sink.write(piece).await.unwrap();
    }
    assert!(store.open("u1/2026/clip.mp4").await.unwrap().is_none(), "invisible before finish");
    assert_eq!(tmp_files(&dir), 1);
    assert_eq!(sink.finish().await.unwrap(), u64::try_from(content.len()).unwrap());
    assert_eq!(tmp_files(&dir), 0);
    let source = store.open("u1/2026/clip.mp4").await.unwrap().unwrap();
    assert_eq!(source.len(), u64::try_from(content.len()).unwrap());
    assert!(!source.is_empty());
    let (sizes, data) = read_all(source).await;
    assert_eq!(sizes, [CHUNK_BYTES, CHUNK_BYTES, CHUNK_BYTES, 10]);
    assert_eq!(data, content);
    assert!(dir.0.join("u1/2026/clip.mp4").is_file());
}

#[tokio::test]
async fn empty_objects_and_replacement() {
    let dir = TempDir::new("empty");
    let store = LocalMediaStore::new(&dir.0).await.unwrap();
    assert_eq!(store.create("e").await.unwrap().finish().await.unwrap(), 0);
    let source = store.open("e").await.unwrap().unwrap();
    assert!(source.is_empty());
    assert_eq!(read_all(source).await.0, Vec::<usize>::new());
    let mut sink = store.create("e").await.unwrap();
    sink.write(b"new").await.unwrap();
    let reader_of_old = store.open("e").await.unwrap().unwrap();
    sink.finish().await.unwrap();
    assert_eq!(read_all(store.open("e").await.unwrap().unwrap()).await.1, b"new");
    assert_eq!(reader_of_old.len(), 0, "a reader keeps the object it opened");
}

#[tokio::test]
async fn abort_drop_and_delete_leave_nothing() {
    let dir = TempDir::new("abort");
    let store = LocalMediaStore::new(&dir.0).await.unwrap();
    let mut aborted = store.create("a.png").await.unwrap();
    aborted.write(b"partial").await.unwrap();
    aborted.abort().await;
    let mut dropped = store.create("b.png").await.unwrap();
    dropped.write(b"partial").await.unwrap();
    drop(dropped);
    assert_eq!(tmp_files(&dir), 0);
    assert!(store.open("a.png").await.unwrap().is_none() && store.open("b.png").await.unwrap().is_none());
    let mut sink = store.create("c.png").await.unwrap();
    sink.write(b"x").await.unwrap();
    sink.finish().await.unwrap();
    store.delete("c.png").await.unwrap();
    assert!(store.open("c.png").await.unwrap().is_none());
    store.delete("c.png").await.unwrap();
    store.delete("never/was.png").await.unwrap();
}

#[tokio::test]
async fn invalid_keys_never_touch_the_disk() {
    let dir = TempDir::new("keys");
    let store = LocalMediaStore::new(&dir.0).await.unwrap();
    for key in ["../escape", "/etc/passwd", "a/../../b", ".tmp/x", "a//b", "", "a\\..\\b"] {
        assert!(matches!(store.create(key).await.err(), Some(MediaError::InvalidKey(_))), "{key:?}");
        assert!(matches!(store.open(key).await.err(), Some(MediaError::InvalidKey(_))), "{key:?}");
        assert!(matches!(store.delete(key).await, Err(MediaError::InvalidKey(_))), "{key:?}");
    }
    assert_eq!(tmp_files(&dir), 0);
    assert!(!dir.0.parent().unwrap().join("escape").exists());
}

#[tokio::test]
async fn leftovers_of_a_crash_are_removed_on_open() {
    let dir = TempDir::new("crash");
    let store = LocalMediaStore::new(&dir.0).await.unwrap();
    let sink = store.create("x.png").await.unwrap();
    std::mem::forget(sink); // as if the process died mid-write
    assert_eq!(tmp_files(&dir), 1);
    let reopened = LocalMediaStore::new(&dir.0).await.unwrap();
    assert_eq!(tmp_files(&dir), 0);
    assert_eq!(reopened.root(), dir.0.as_path());
    assert!(reopened.open("a-directory").await.unwrap().is_none());
    std::fs::create_dir_all(dir.0.join("a-directory")).unwrap();
    assert!(reopened.open("a-directory").await.unwrap().is_none(), "a directory is not an object");
}
