//! [`ObjectMediaStore`]: the media store on an S3-compatible bucket, through `object_store`.
//!
//! Layout: the object `a/b/c.png` is `<prefix>/a/b/c.png` in the bucket. Writes never hold a
//! whole file: a sink keeps at most one part ([`PART_BYTES`]) in memory while it is filling and
//! at most [`PARTS_IN_FLIGHT`] parts being sent, so an upload costs at most
//! `(PARTS_IN_FLIGHT + 1) × PART_BYTES` of memory whatever its size. An object that ends before
//! its first part is full is written with one `PUT`; a longer one is a multipart upload that
//! becomes visible only when it completes. Any failure, an [`MediaSink::abort`] or a sink dropped
//! unfinished aborts the multipart upload, retried in the background (up to
//! [`ABORT_ATTEMPTS`] times over about a minute) while the store is unreachable, so no parts are
//! left behind once the store answers again. Reads stream the object's body as the store sends
//! it. A request that fails is retried by `object_store` a few times within [`RETRY_WINDOW`], so
//! an unreachable store fails a call in seconds, not minutes.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use domain::ports::{MediaError, MediaSink, MediaSource, MediaStore};
use futures_core::Stream;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::signer::Signer;
use object_store::{
    BackoffConfig, ClientOptions, MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};
use tokio::task::JoinSet;

use crate::store::validate_key;

/// Size of the parts of a multipart upload (the last may be shorter); S3 wants at least 5 MiB.
pub const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts of one upload being sent at once; the writer waits for room before buffering more.
pub const PARTS_IN_FLIGHT: usize = 2;
/// How long `object_store` retries one request before the failure reaches the caller.
pub const RETRY_WINDOW: Duration = Duration::from_secs(10);
/// Tries to abort an unfinished multipart upload before giving up (the bucket's own
/// lifecycle rule for incomplete uploads is the backstop then).
pub const ABORT_ATTEMPTS: u32 = 8;
/// Where the start-up probe writes, under the prefix (a hidden segment no media key can name).
const PROBE_DIR: &str = ".probe";

/// Where an S3-compatible media store is and how to reach it. Credentials come from
/// [`S3Location::credentials`], else from the standard `AWS_ACCESS_KEY_ID` /
/// `AWS_SECRET_ACCESS_KEY` (/ `AWS_SESSION_TOKEN`) variables.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Location {
    /// The bucket.
    pub bucket: String,
    /// Segments every key is stored under (may be empty).
    pub prefix: String,
    /// An S3-compatible server's URL (path-style requests then); `None`: AWS itself.
    pub endpoint: Option<String>,
    /// The region requests are signed for.
    pub region: String,
    /// Whether plain `http://` endpoints are allowed (a local test server).
    pub allow_http: bool,
    /// An access key id and its secret; `None`: from the environment.
    pub credentials: Option<(String, String)>,
}

impl std::fmt::Debug for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Location")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("credentials", &self.credentials.as_ref().map(|(id, _)| (id, "<redacted>")))
            .finish()
    }
}

/// Where media is kept, as `GATEWAY_MEDIA_STORE` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaLocation {
    /// `file:<dir>`: a local directory.
    File(String),
    /// `s3://<bucket>/<prefix>`: a bucket (the prefix may be empty).
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix, without leading or trailing `/`.
        prefix: String,
    },
}

impl MediaLocation {
    /// Parses `file:<dir>` or `s3://<bucket>[/<prefix>]`.
    pub fn parse(text: &str) -> Result<MediaLocation, String> {
        if let Some(dir) = text.strip_prefix("file:") {
            if dir.is_empty() {
                return Err("file: needs a directory (file:<dir>)".into());
            }
            return Ok(MediaLocation::File(dir.to_owned()));
        }
        let Some(rest) = text.strip_prefix("s3://") else {
            return Err(format!("{text:?} is neither file:<dir> nor s3://<bucket>/<prefix>"));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !bucket_ok {
            return Err(format!("{bucket:?} is not an S3 bucket name (3 to 63 of a-z, 0-9, '-', '.')"));
        }
        let prefix = prefix.trim_matches('/');
        if !prefix.is_empty() {
            validate_key(prefix).map_err(|e| format!("the prefix of {text:?}: {e}"))?;
        }
        Ok(MediaLocation::S3 { bucket: bucket.to_owned(), prefix: prefix.to_owned() })
    }
}

fn io(context: &str, e: &object_store::Error) -> MediaError {
    MediaError::Io(format!("{context}: {e}"))
}

/// [`MediaStore`] on a bucket.
#[derive(Debug, Clone)]
pub struct ObjectMediaStore {
    store: Arc<dyn ObjectStore>,
    signer: Option<Arc<dyn Signer>>,
    prefix: String,
}

impl ObjectMediaStore {
    /// The store on an S3-compatible bucket. Nothing is contacted yet; see [`Self::probe`].
    pub fn s3(location: &S3Location) -> Result<ObjectMediaStore, MediaError> {
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 3,
            retry_timeout: RETRY_WINDOW,
        };
        let client = ClientOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(120))
            .with_allow_http(location.allow_http);
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&location.bucket)
            .with_region(&location.region)
            .with_allow_http(location.allow_http)
            .with_retry(retry)
            .with_client_options(client);
        if let Some((id, secret)) = &location.credentials {
            builder = builder.with_access_key_id(id).with_secret_access_key(secret);
        }
        if let Some(endpoint) = &location.endpoint {
            builder = builder.with_endpoint(endpoint).with_virtual_hosted_style_request(false);
        }
        crate::egress::install_tls_provider();
        let s3 = Arc::new(builder.build().map_err(|e| io("the S3 media store's settings", &e))?);
        Ok(ObjectMediaStore { store: s3.clone(), signer: Some(s3), prefix: location.prefix.clone() })
    }

    fn path(&self, key: &str) -> Result<Path, MediaError> {
        validate_key(key)?;
        Ok(self.raw_path(key))
    }

    fn raw_path(&self, key: &str) -> Path {
        if self.prefix.is_empty() { Path::from(key) } else { Path::from(format!("{}/{key}", self.prefix)) }
    }

    /// Writes, reads back and deletes a small probe object: `Err` with why when the store cannot
    /// be used (unreachable, no such bucket, refused credentials).
    pub async fn probe(&self) -> Result<(), MediaError> {
        let mut name = [0u8; 8];
        getrandom::fill(&mut name).map_err(|e| MediaError::Io(format!("no randomness: {e}")))?;
        let name: String = name.iter().map(|b| format!("{b:02x}")).collect();
        let path = self.raw_path(&format!("{PROBE_DIR}/{name}"));
        let content = Bytes::from(format!("gateway probe {name}"));
        self.store.put(&path, PutPayload::from(content.clone())).await.map_err(|e| io("writing a probe", &e))?;
        let read = self.store.get(&path).await.map_err(|e| io("reading the probe back", &e))?;
        let read = read.bytes().await.map_err(|e| io("reading the probe back", &e))?;
        let deleted = self.store.delete(&path).await.map_err(|e| io("deleting the probe", &e));
        if read != content {
            return Err(MediaError::Io("the probe read back differs from what was written".into()));
        }
        deleted
    }
}

#[async_trait]
impl MediaStore for ObjectMediaStore {
    async fn create(&self, key: &str) -> Result<Box<dyn MediaSink>, MediaError> {
        let path = self.path(key)?;
        Ok(Box::new(ObjectSink {
            store: self.store.clone(),
            path,
            buf: Vec::new(),
            upload: None,
            parts: JoinSet::new(),
            written: 0,
            done: false,
        }))
    }

    async fn open(&self, key: &str) -> Result<Option<Box<dyn MediaSource>>, MediaError> {
        let path = self.path(key)?;
        match self.store.get(&path).await {
            Ok(got) => {
                let len = got.meta.size;
                Ok(Some(Box::new(ObjectSource { len, body: got.into_stream() })))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(io("cannot read a media object", &e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), MediaError> {
        match self.store.delete(&self.path(key)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io("cannot delete a media object", &e)),
        }
    }

    async fn presigned_get(&self, key: &str, ttl: Duration) -> Result<Option<String>, MediaError> {
        let Some(signer) = &self.signer else { return Ok(None) };
        let url = signer
            .signed_url(object_store::signer::Method::GET, &self.path(key)?, ttl)
            .await
            .map_err(|e| io("cannot sign a media link", &e))?;
        Ok(Some(url.to_string()))
    }
}

/// An object being written: the part filling up, and once there is more than one part, the
/// multipart upload and its parts in flight.
struct ObjectSink {
    store: Arc<dyn ObjectStore>,
    path: Path,
    buf: Vec<u8>,
    upload: Option<Box<dyn MultipartUpload>>,
    parts: JoinSet<object_store::Result<()>>,
    written: u64,
    done: bool,
}

impl ObjectSink {
    /// Waits until at most `most` parts are in flight; the first failed part's error.
    async fn wait_for_room(&mut self, most: usize) -> Result<(), MediaError> {
        while self.parts.len() > most {
            match self.parts.join_next().await {
                Some(Ok(Ok(()))) | None => {}
                Some(Ok(Err(e))) => return Err(io("cannot store a media part", &e)),
                Some(Err(e)) => return Err(MediaError::Io(format!("a media part's upload stopped: {e}"))),
            }
        }
        Ok(())
    }

    /// Sends the buffered bytes as the next part (starting the multipart upload first if needed).
    async fn send_part(&mut self) -> Result<(), MediaError> {
        if self.upload.is_none() {
            let upload =
                self.store.put_multipart(&self.path).await.map_err(|e| io("cannot start a media upload", &e))?;
            self.upload = Some(upload);
        }
        self.wait_for_room(PARTS_IN_FLIGHT - 1).await?;
        let part = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(PART_BYTES)));
        if let Some(upload) = self.upload.as_mut() {
            self.parts.spawn(upload.put_part(PutPayload::from(part)));
        }
        Ok(())
    }

    /// Stops the parts in flight and aborts the multipart upload (in the background, retried).
    fn abandon(&mut self) {
        self.done = true;
        self.buf = Vec::new();
        let Some(upload) = self.upload.take() else { return };
        let parts = std::mem::take(&mut self.parts);
        let path = self.path.to_string();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(abort_upload(upload, parts, path));
            }
            Err(_) => tracing::warn!(path, "a media upload was dropped outside a runtime; its parts stay"),
        }
    }
}

/// Aborts `upload` after stopping its parts, retrying while the store does not answer.
async fn abort_upload(
    mut upload: Box<dyn MultipartUpload>,
    mut parts: JoinSet<object_store::Result<()>>,
    path: String,
) {
    parts.shutdown().await;
    let mut pause = Duration::from_millis(250);
    for attempt in 1..=ABORT_ATTEMPTS {
        match upload.abort().await {
            Ok(()) => return,
            Err(e) if attempt == ABORT_ATTEMPTS => {
                tracing::error!(path, error = %e, "aborting a media upload failed; its parts stay until the bucket's lifecycle rule removes them");
            }
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(15));
            }
        }
    }
}

#[async_trait]
impl MediaSink for ObjectSink {
    async fn write(&mut self, mut chunk: &[u8]) -> Result<(), MediaError> {
        if self.done {
            return Err(MediaError::Io("the media object is closed".into()));
        }
        self.written = self.written.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        while !chunk.is_empty() {
            let room = PART_BYTES - self.buf.len();
            let (now, later) = chunk.split_at(room.min(chunk.len()));
            if self.buf.capacity() == 0 {
                self.buf.reserve(PART_BYTES.min(now.len().max(64 * 1024)));
            }
            self.buf.extend_from_slice(now);
            chunk = later;
            if self.buf.len() == PART_BYTES
                && let Err(e) = self.send_part().await
            {
                self.abandon();
                return Err(e);
            }
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<u64, MediaError> {
        if self.done {
            return Err(MediaError::Io("the media object is closed".into()));
        }
        if self.upload.is_none() {
            let body = Bytes::from(std::mem::take(&mut self.buf));
            self.done = true;
            self.store
                .put(&self.path, PutPayload::from(body))
                .await
                .map_err(|e| io("cannot store a media object", &e))?;
            return Ok(self.written);
        }
        let sent = async {
            if !self.buf.is_empty() {
                self.send_part().await?;
            }
            self.wait_for_room(0).await?;
            match self.upload.as_mut() {
                Some(upload) => upload.complete().await.map_err(|e| io("cannot complete a media upload", &e)),
                None => Err(MediaError::Io("the media upload is gone".into())),
            }
        }
        .await;
        match sent {
            Ok(_) => {
                self.done = true;
                self.upload = None;
                Ok(self.written)
            }
            Err(e) => {
                self.abandon();
                Err(e)
            }
        }
    }

    async fn abort(mut self: Box<Self>) {
        self.abandon();
    }
}

impl Drop for ObjectSink {
    fn drop(&mut self) {
        if !self.done {
            self.abandon();
        }
    }
}

/// A stored object being read: its body as the store sends it.
struct ObjectSource {
    len: u64,
    body: std::pin::Pin<Box<dyn Stream<Item = object_store::Result<Bytes>> + Send>>,
}

#[async_trait]
impl MediaSource for ObjectSource {
    fn len(&self) -> u64 {
        self.len
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, MediaError>> {
        let next = poll_fn(|cx| self.body.as_mut().poll_next(cx)).await?;
        Some(next.map(|b| b.to_vec()).map_err(|e| io("cannot read a media object", &e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        assert_eq!(MediaLocation::parse("file:data/media"), Ok(MediaLocation::File("data/media".into())));
        assert_eq!(
            MediaLocation::parse("s3://media-bucket/gw/prod"),
            Ok(MediaLocation::S3 { bucket: "media-bucket".into(), prefix: "gw/prod".into() })
        );
        assert_eq!(
            MediaLocation::parse("s3://abc"),
            Ok(MediaLocation::S3 { bucket: "abc".into(), prefix: String::new() })
        );
        assert_eq!(
            MediaLocation::parse("s3://abc/p/"),
            Ok(MediaLocation::S3 { bucket: "abc".into(), prefix: "p".into() })
        );
        let b63 = format!("s3://{}", "a".repeat(63));
        assert!(MediaLocation::parse(&b63).is_ok());
        let b64 = format!("s3://{}", "a".repeat(64));
        for bad in [
            "",
            "file:",
            "data/media",
            "s3://",
            "s3://ab",
            b64.as_str(),
            "s3://Upper",
            "s3://b_c",
            "s3://abc/../x",
            "s3://abc/.hidden",
            "gs://abc",
        ] {
            assert!(MediaLocation::parse(bad).is_err(), "{bad:?}");
        }
    }
}
