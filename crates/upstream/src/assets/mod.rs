//! The asset control plane (upstream-wire §5): [`HttpAssetUpstream`] implements
//! [`AssetUpstream`] with signed requests ([`sign`]).
//!
//! Every call is `POST <origin>/?Action=<A>&Version=2024-01-01` with `Content-Type:
//! application/json`, an explicit `Host`, `X-Date`, `X-Content-Sha256` and `Authorization`
//! (sensitive header values, never logged). The actions and bodies sent:
//!
//! | port call | action and body | result read |
//! | --- | --- | --- |
//! | `asset_group(name)` | `ListAssetGroups {Filter:{Name,GroupType:"AIGC"},MaxResults:100,NextToken?,ProjectName}` (up to [`MAX_LIST_PAGES`] pages), else `CreateAssetGroup {Name,Description,GroupType:"AIGC",ProjectName}` | the item whose `Name` is exactly `name`: `Id`; `Result.Id` |
//! | `create_asset(group, url, kind)` | `CreateAsset {GroupId,URL,AssetType:"Image"/"Video"/"Audio",ProjectName}` | `Result.Id` (or `Result.AssetId`) |
//! | `asset_status(id)` | `GetAsset {Id,ProjectName}` | `Result.Status`: `Processing`, `Active`, `Failed` (reason: `Result.Error.Message`, else its `Code`) |
//!
//! Group ids are cached in memory per name. Lookups of uncached names are serialised in one
//! process; if `CreateAssetGroup` is refused (another replica created the group first), the
//! groups are listed once more before the refusal is returned.
//!
//! Errors: an empty origin → `NotConfigured`; connection trouble → `Connect`; no answer within
//! the timeout → `Timeout`; a non-2xx status → `Status` (body truncated to
//! [`crate::transport::MAX_ERROR_BODY`]); a 2xx whose `ResponseMetadata.Error` is set →
//! `Rejected {code, message}`; a 2xx without the expected `Result` field, or larger than
//! [`MAX_ASSET_ANSWER_BYTES`] → `Malformed`.

pub mod sign;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use domain::ports::{AssetKind, AssetStatus, AssetUpstream, UpstreamError};
use domain::{Clock, SystemClock};
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderName};
use http::{HeaderValue, Method};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::config::AssetsConfig;
use crate::transport::{Client, ClientConfig, MAX_ERROR_BODY, map_error, read_limited, truncate_lossy};

/// Largest accepted control-plane answer, in bytes.
pub const MAX_ASSET_ANSWER_BYTES: usize = 1024 * 1024;
/// Most pages of `ListAssetGroups` read when looking a group up.
pub const MAX_LIST_PAGES: usize = 10;
/// The group type every group is created with.
pub const GROUP_TYPE: &str = "AIGC";

/// [`AssetUpstream`] over HTTP with signed requests.
pub struct HttpAssetUpstream {
    client: Client,
    /// `<origin>/`, or `None` when not configured.
    url: Option<url::Url>,
    /// The `Host` value signed and sent.
    host: String,
    access_key: String,
    secret_key: String,
    region: String,
    project: String,
    timeout: Duration,
    groups: Mutex<HashMap<String, String>>,
}

impl fmt::Debug for HttpAssetUpstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpAssetUpstream")
            .field("url", &self.url.as_ref().map_or("(not configured)", url::Url::as_str))
            .field("access_key", &self.access_key)
            .field("secret_key", &"*****")
            .field("region", &self.region)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// `host[:port]` as signed: the port only when it is not the scheme's default.
fn host_of(url: &url::Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    })
}

impl HttpAssetUpstream {
    /// An adapter for `config`; fails with `Connect` when the origin is not an `http`/`https`
    /// URL (the error names no key).
    pub fn new(config: AssetsConfig) -> Result<HttpAssetUpstream, UpstreamError> {
        let origin = config.origin.trim();
        let (url, host) = if origin.is_empty() {
            (None, String::new())
        } else {
            let url = url::Url::parse(&format!("{}/", origin.trim_end_matches('/')))
                .map_err(|e| UpstreamError::Connect(format!("invalid assets URL {origin:?}: {e}")))?;
            let host = host_of(&url).filter(|_| matches!(url.scheme(), "http" | "https"));
            let host = host.ok_or_else(|| UpstreamError::Connect(format!("unsupported assets URL {origin:?}")))?;
            (Some(url), host)
        };
        // The client follows no redirect: an answer is judged as it comes.
        let client = Client::new(ClientConfig { connect_timeout: config.connect_timeout, extra_ca_pem: None })
            .map_err(|e| UpstreamError::Connect(format!("cannot build HTTP client: {e}")))?;
        Ok(HttpAssetUpstream {
            client,
            url,
            host,
            access_key: config.access_key,
            secret_key: config.secret_key,
            region: config.region,
            project: config.project_name,
            timeout: config.timeout,
            groups: Mutex::default(),
        })
    }

    /// Sends one signed action; its `Result` object.
    async fn call(&self, action: &str, body: &Value) -> Result<Value, UpstreamError> {
        let base = self.url.as_ref().ok_or_else(|| UpstreamError::NotConfigured("assets".to_owned()))?;
        let mut url = base.clone();
        url.query_pairs_mut().append_pair("Action", action).append_pair("Version", sign::VERSION);
        let bytes = serde_json::to_vec(body).map_err(|e| UpstreamError::Malformed(e.to_string()))?;
        let credentials =
            sign::Credentials { access_key: &self.access_key, secret_key: &self.secret_key, region: &self.region };
        let query = [("Action", action), ("Version", sign::VERSION)];
        let signed = sign::sign(credentials, &self.host, &query, &bytes, SystemClock.now().unix_seconds());
        let mut authorization = HeaderValue::from_str(&signed.authorization)
            .map_err(|_| UpstreamError::Connect("the assets access key is not a valid header value".to_owned()))?;
        authorization.set_sensitive(true);
        let text = |value: &str| {
            HeaderValue::from_str(value)
                .map_err(|_| UpstreamError::Connect("a signed header is not a valid header value".to_owned()))
        };
        let request = self
            .client
            .request(Method::POST, &url)
            .header(&CONTENT_TYPE, &HeaderValue::from_static(sign::CONTENT_TYPE))
            .header(&HOST, &text(&self.host)?)
            .header(&HeaderName::from_static("x-date"), &text(&signed.x_date)?)
            .header(&HeaderName::from_static("x-content-sha256"), &text(&signed.x_content_sha256)?)
            .header(&AUTHORIZATION, &authorization)
            .body(bytes);
        let exchange = async {
            let response = request.send().await.map_err(|e| map_error(&e))?;
            let status = response.status();
            Ok::<_, UpstreamError>((status, read_limited(response, MAX_ASSET_ANSWER_BYTES).await?))
        };
        let (status, answer) =
            tokio::time::timeout(self.timeout, exchange).await.map_err(|_| UpstreamError::Timeout)??;
        if !status.is_success() {
            tracing::debug!(status = status.as_u16(), action, "asset control plane answered with an error status");
            return Err(crate::wire::errors::status(status.as_u16(), truncate_lossy(&answer, MAX_ERROR_BODY)));
        }
        envelope_result(&answer)
    }

    /// The id of the group named `name`, if listed.
    async fn find_group(&self, name: &str) -> Result<Option<String>, UpstreamError> {
        let mut next_token = String::new();
        for _ in 0..MAX_LIST_PAGES {
            let mut body = json!({
                "Filter": {"Name": name, "GroupType": GROUP_TYPE},
                "MaxResults": 100,
                "ProjectName": self.project,
            });
            if !next_token.is_empty() {
                body["NextToken"] = json!(next_token);
            }
            let result = self.call("ListAssetGroups", &body).await?;
            let items = result.get("Items").and_then(Value::as_array);
            let found = items.into_iter().flatten().find(|item| item.get("Name").and_then(Value::as_str) == Some(name));
            if let Some(item) = found {
                return id_of(item, "Id").map(Some);
            }
            match result.get("NextToken").and_then(Value::as_str) {
                Some(token) if !token.is_empty() => next_token = token.to_owned(),
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    async fn create_group(&self, name: &str) -> Result<String, UpstreamError> {
        let body = json!({
            "Name": name,
            "Description": "media registered by the model gateway",
            "GroupType": GROUP_TYPE,
            "ProjectName": self.project,
        });
        id_of(&self.call("CreateAssetGroup", &body).await?, "Id")
    }
}

/// The `Result` of a 2xx envelope, or its `ResponseMetadata.Error` as `Rejected`.
fn envelope_result(answer: &[u8]) -> Result<Value, UpstreamError> {
    let mut value: Value =
        serde_json::from_slice(answer).map_err(|e| UpstreamError::Malformed(format!("answer is not JSON: {e}")))?;
    if let Some(error) = value.pointer("/ResponseMetadata/Error").filter(|e| !e.is_null()) {
        let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        return Err(UpstreamError::Rejected { code: text("Code"), message: text("Message") });
    }
    match value.get_mut("Result").map(Value::take) {
        Some(result @ Value::Object(_)) => Ok(result),
        _ => Err(UpstreamError::Malformed("answer has no Result object".to_owned())),
    }
}

/// A non-empty string field `key` of `object`.
fn id_of(object: &Value, key: &str) -> Result<String, UpstreamError> {
    match object.get(key).and_then(Value::as_str) {
        Some(id) if !id.is_empty() => Ok(id.to_owned()),
        _ => Err(UpstreamError::Malformed(format!("answer has no {key}"))),
    }
}

/// The control plane's `AssetType` for `kind`.
pub fn asset_type(kind: AssetKind) -> &'static str {
    match kind {
        AssetKind::Image => "Image",
        AssetKind::Video => "Video",
        AssetKind::Audio => "Audio",
    }
}

#[async_trait]
impl AssetUpstream for HttpAssetUpstream {
    async fn asset_group(&self, name: &str) -> Result<String, UpstreamError> {
        let mut groups = self.groups.lock().await;
        if let Some(id) = groups.get(name) {
            return Ok(id.clone());
        }
        let id = match self.find_group(name).await? {
            Some(id) => id,
            None => match self.create_group(name).await {
                Ok(id) => id,
                Err(refused @ UpstreamError::Rejected { .. }) => self.find_group(name).await?.ok_or(refused)?,
                Err(e) => return Err(e),
            },
        };
        groups.insert(name.to_owned(), id.clone());
        Ok(id)
    }

    async fn create_asset(&self, group_id: &str, url: &str, kind: AssetKind) -> Result<String, UpstreamError> {
        let body = json!({"GroupId": group_id, "URL": url, "AssetType": asset_type(kind), "ProjectName": self.project});
        let result = self.call("CreateAsset", &body).await?;
        id_of(&result, "Id").or_else(|_| id_of(&result, "AssetId"))
    }

    async fn asset_status(&self, asset_id: &str) -> Result<AssetStatus, UpstreamError> {
        let result = self.call("GetAsset", &json!({"Id": asset_id, "ProjectName": self.project})).await?;
        match result.get("Status").and_then(Value::as_str) {
            Some("Processing") => Ok(AssetStatus::Processing),
            Some("Active") => Ok(AssetStatus::Active),
            Some("Failed") => {
                let error = result.get("Error");
                let field =
                    |key: &str| error.and_then(|e| e.get(key)).and_then(Value::as_str).filter(|s| !s.is_empty());
                Ok(AssetStatus::Failed(field("Message").or_else(|| field("Code")).unwrap_or("failed").to_owned()))
            }
            other => Err(UpstreamError::Malformed(format!("unknown asset status {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes() {
        let ok = envelope_result(br#"{"ResponseMetadata":{"RequestId":"r"},"Result":{"Id":"g-1"}}"#);
        assert_eq!(ok, Ok(json!({"Id": "g-1"})));
        let refused = envelope_result(br#"{"ResponseMetadata":{"Error":{"Code":"NotFound","Message":"no"}}}"#);
        assert_eq!(refused, Err(UpstreamError::Rejected { code: "NotFound".into(), message: "no".into() }));
        assert!(matches!(envelope_result(b"{}"), Err(UpstreamError::Malformed(_))));
        assert!(matches!(envelope_result(b"<html>"), Err(UpstreamError::Malformed(_))));
        let null_error = envelope_result(br#"{"ResponseMetadata":{"Error":null},"Result":{}}"#);
        assert_eq!(null_error, Ok(json!({})));
    }

    #[test]
    fn hosts_and_debug() {
        let url = |s: &str| url::Url::parse(s).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(host_of(&url("https://ark.example.com/")).as_deref(), Some("ark.example.com"));
        assert_eq!(host_of(&url("https://ark.example.com:443/")).as_deref(), Some("ark.example.com"));
        assert_eq!(host_of(&url("http://127.0.0.1:8080/")).as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(host_of(&url("http://[::1]:81/")).as_deref(), Some("[::1]:81"));
        let mut config = AssetsConfig::for_simulator(([127, 0, 0, 1], 9).into(), Duration::ZERO, Duration::ZERO);
        config.secret_key = "very-secret".into();
        let up = HttpAssetUpstream::new(config.clone()).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(!format!("{up:?}").contains("very-secret"));
        config.origin = "ftp://x".into();
        assert!(matches!(HttpAssetUpstream::new(config), Err(UpstreamError::Connect(_))));
    }
}
