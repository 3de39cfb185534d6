//! The media store's contract, run on the local directory and on a real S3-compatible server
//! (`TEST_S3_ENDPOINT`, `moto_server` in CI): put, streamed multipart put, abort, an unfinished
//! sink dropped, reads in chunks, replace, delete, a missing key, bad keys; on S3 also that no
//! multipart upload is left open, pre-signed links and the start-up probe.
#![allow(clippy::panic, clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use domain::ports::{MediaError, MediaSource, MediaStore};
use media::object::PART_BYTES;
use media::{LocalMediaStore, ObjectMediaStore, S3Location};
use testkit::s3::{ACCESS_KEY_ID, S3Place, SECRET_ACCESS_KEY};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        TempDir(std::env::temp_dir().join(format!("media-contract-{name}-{}-{nanos}", std::process::id())))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s3_store(place: &S3Place) -> ObjectMediaStore {
    ObjectMediaStore::s3(&S3Location {
        bucket: place.bucket.clone(),
        prefix: place.prefix.clone(),
        endpoint: Some(place.endpoint.clone()),
        region: "us-east-1".into(),
        allow_http: true,
        credentials: Some((ACCESS_KEY_ID.into(), SECRET_ACCESS_KEY.into())),
    })
    .unwrap()
}

async fn read_all(mut source: Box<dyn MediaSource>) -> Vec<u8> {
    let mut data = Vec::new();
    for _ in 0..100_000 {
        match source.next_chunk().await {
            Some(chunk) => data.extend_from_slice(&chunk.unwrap()),
            None => return data,
        }
    }
    panic!("source did not end");
}

fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| u8::try_from((i * 31 + usize::from(seed)) % 251).unwrap()).collect()
}

/// What the contract checks beyond the trait: open multipart uploads (S3) or temporary files
/// (local) left behind, which must come to zero.
type Leftovers<'a> = &'a (dyn Fn() -> usize + Sync);

/// Waits (up to 20 s) until nothing is left behind.
async fn until_clean(leftovers: Leftovers<'_>, what: &str) {
    let start = Instant::now();
    while leftovers() > 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "{what}: {} left behind", leftovers());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn contract(store: &dyn MediaStore, leftovers: Leftovers<'_>) {
    // A small object: one write, visible only once finished.
    let small = content(1000, 1);
    let mut sink = store.create("u1/t1/0").await.unwrap();
    sink.write(&small).await.unwrap();
    assert!(store.open("u1/t1/0").await.unwrap().is_none(), "invisible before finish");
    assert_eq!(sink.finish().await.unwrap(), 1000);
    let source = store.open("u1/t1/0").await.unwrap().unwrap();
    assert_eq!(source.len(), 1000);
    assert_eq!(read_all(source).await, small);

    // An object of two full parts and a short one, written in uneven pieces, read back whole.
    let big = content(2 * PART_BYTES + 12_345, 2);
    let mut sink = store.create("u1/t1/1").await.unwrap();
    for piece in big.chunks(700_001) {
        sink.write(piece).await.unwrap();
    }
    assert!(store.open("u1/t1/1").await.unwrap().is_none(), "invisible before finish");
    assert_eq!(sink.finish().await.unwrap(), u64::try_from(big.len()).unwrap());
    let source = store.open("u1/t1/1").await.unwrap().unwrap();
    assert_eq!(source.len(), u64::try_from(big.len()).unwrap());
    assert!(read_all(source).await == big, "the multipart object reads back as written");
    until_clean(leftovers, "after a finished upload").await;

    // Aborted after more than one part: nothing visible, nothing left behind.
    let mut sink = store.create("u1/t1/2").await.unwrap();
    sink.write(&big).await.unwrap();
    sink.abort().await;
    assert!(store.open("u1/t1/2").await.unwrap().is_none());
    until_clean(leftovers, "after an abort").await;

    // Dropped unfinished (a request that died): the same.
    let mut sink = store.create("u1/t1/3").await.unwrap();
    sink.write(&big[..PART_BYTES + 10]).await.unwrap();
    drop(sink);
    assert!(store.open("u1/t1/3").await.unwrap().is_none());
    until_clean(leftovers, "after a dropped sink").await;

    // An empty object.
    assert_eq!(store.create("u1/t1/4").await.unwrap().finish().await.unwrap(), 0);
    let source = store.open("u1/t1/4").await.unwrap().unwrap();
    assert!(source.is_empty());
    assert!(read_all(source).await.is_empty());

    // Replacing an object.
    let mut sink = store.create("u1/t1/0").await.unwrap();
    sink.write(b"new").await.unwrap();
    sink.finish().await.unwrap();
    assert_eq!(read_all(store.open("u1/t1/0").await.unwrap().unwrap()).await, b"new");

    // Delete, twice; a missing key.
    store.delete("u1/t1/0").await.unwrap();
    store.delete("u1/t1/0").await.unwrap();
    assert!(store.open("u1/t1/0").await.unwrap().is_none());
    assert!(store.open("never/was").await.unwrap().is_none());

    // Keys that name nothing allowed.
    for bad in ["", "../x", "a//b", ".probe/x", "a/.hidden", "a b"] {
        assert!(matches!(store.create(bad).await, Err(MediaError::InvalidKey(_))), "{bad:?}");
        assert!(matches!(store.open(bad).await, Err(MediaError::InvalidKey(_))), "{bad:?}");
        assert!(matches!(store.delete(bad).await, Err(MediaError::InvalidKey(_))), "{bad:?}");
    }
}

#[tokio::test]
async fn the_local_store_keeps_the_contract() {
    let dir = TempDir::new("local");
    let store = LocalMediaStore::new(&dir.0).await.unwrap();
    let tmp = dir.0.join(".tmp");
    let leftovers = move || std::fs::read_dir(&tmp).map(Iterator::count).unwrap_or(0);
    contract(&store, &leftovers).await;
    assert_eq!(store.presigned_get("u1/t1/1", Duration::from_secs(60)).await.unwrap(), None, "no own links");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_s3_store_keeps_the_contract() {
    let Some(place) = testkit::s3::place("the_s3_store_keeps_the_contract") else { return };
    let store = s3_store(&place);
    store.probe().await.unwrap();
    let counted = place.clone();
    let leftovers = move || counted.open_uploads();
    contract(&store, &leftovers).await;
    let mut stored = place.objects();
    stored.sort();
    assert_eq!(stored, ["u1/t1/1", "u1/t1/4"], "only the finished objects, under the prefix; no probe left");

    // A pre-signed link reads the object straight from the store.
    let link = store.presigned_get("u1/t1/1", Duration::from_secs(60)).await.unwrap().unwrap();
    assert!(link.starts_with(&place.endpoint), "{link}");
    assert!(link.contains("X-Amz-Signature="), "{link}");
    let fetched = reqwest::Client::new().get(&link).send().await.unwrap();
    assert_eq!(fetched.status().as_u16(), 200);
    assert!(fetched.bytes().await.unwrap().as_ref() == content(2 * PART_BYTES + 12_345, 2).as_slice());
}

#[tokio::test]
async fn an_unreachable_store_fails_its_probe_within_seconds() {
    // A port nothing listens on (bound, then closed).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let store = ObjectMediaStore::s3(&S3Location {
        bucket: "gateway-tests".into(),
        prefix: "p".into(),
        endpoint: Some(format!("http://{closed}")),
        region: "us-east-1".into(),
        allow_http: true,
        credentials: Some((ACCESS_KEY_ID.into(), SECRET_ACCESS_KEY.into())),
    })
    .unwrap();
    let start = Instant::now();
    let failed = store.probe().await.unwrap_err();
    assert!(matches!(failed, MediaError::Io(_)), "{failed:?}");
    let took = start.elapsed();
    assert!(took < media::object::RETRY_WINDOW + Duration::from_secs(5), "probe took {took:?}");
    eprintln!("unreachable store: the probe failed after {took:?}: {failed}");
}
