//! The asset control plane (upstream-wire §5): `POST /?Action=<A>&Version=2024-01-01`.
//!
//! # Authentication
//!
//! Every request must be signed as [`upstream::assets::sign`] describes with
//! [`upstream::config::SIM_ASSETS_ACCESS_KEY`] / [`upstream::config::SIM_ASSETS_SECRET_KEY`] (any
//! region), with an `X-Date` within [`MAX_SKEW_SECS`] of the real time. Otherwise the answer is
//! HTTP 401 with `ResponseMetadata.Error.Code` `MissingAuthenticationToken` (no or an unparsable
//! `Authorization`), `InvalidAccessKey`, `SignatureDoesNotMatch` (also for a wrong
//! `X-Content-Sha256`) or `RequestExpired`. A body larger than [`MAX_ASSET_REQUEST_BYTES`] is 413.
//!
//! # Actions (every refusal after authentication is HTTP 200 with `ResponseMetadata.Error`)
//!
//! - `CreateAssetGroup {Name, GroupType: "AIGC"|"LivenessFace", …}` → `Result.Id`
//!   (`group-<hex>`); a `Name` already used → `InvalidParameter.DuplicateName`.
//! - `ListAssetGroups {Filter:{Name?, GroupType?}, …}` → `Result{Items:[{Id,Name,GroupType,
//!   ProjectName,CreateTime}], NextToken:"", TotalCount}` (every match, exact `Name`).
//! - `CreateAsset {GroupId, URL, AssetType: "Image"|"Video"|"Audio", Name?}` → `Result.Id`
//!   (`asset-<hex>`), status `Processing`. The simulator then GETs `URL` — only `http(s)://`
//!   to `127.0.0.1`, `[::1]` or `localhost` (certificates not checked, no redirects followed,
//!   at most [`FETCH_TIMEOUT`]); any other URL is never contacted. The asset becomes `Active`
//!   once the fetch answered 2xx with a non-empty body, else `Failed` with an `Error`.
//!   An unknown `GroupId` → `NotFound.AssetGroup`.
//! - `GetAsset {Id}` → `Result{Id, Name, GroupId, AssetType, Status, CreateTime, URL, Error?}`
//!   where `Status` is `Processing`, `Active` or `Failed` (with `Error{Code:"AssetFetchFailed",
//!   Message}`); an unknown id → `NotFound.Asset`.
//! - Another action or version → `InvalidActionOrVersion`; a missing or mistyped field →
//!   `InvalidParameter`.
//!
//! At most [`MAX_ASSETS`] assets are remembered (the oldest forgotten first).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use serde_json::{Map, Value, json};

use super::body::SimBody;
use super::fault::json_response;
use super::request::{BodyError, is_loopback_url, json_object, now_secs, read_body};
use super::state::{AssetState, AssetTable, Group, SimAsset, SimState, lock};
use upstream::assets::sign::{self, Received, VerifyError};
use upstream::config::{SIM_ASSETS_ACCESS_KEY, SIM_ASSETS_SECRET_KEY};

/// Largest accepted request body, in bytes.
pub const MAX_ASSET_REQUEST_BYTES: usize = 1024 * 1024;
/// Largest allowed difference between `X-Date` and the real time, seconds.
pub const MAX_SKEW_SECS: i64 = 900;
/// Bound on one fetch of an asset URL.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Assets remembered.
pub const MAX_ASSETS: usize = 100_000;
/// Most bytes read from an asset URL (the rest is not needed to judge it).
const MAX_FETCH_BYTES: u64 = 1024 * 1024 * 1024;

/// `{"ResponseMetadata":{…,"Error":{Code,Message}}}` with `status`.
fn refusal(status: u16, meta: &Value, code: &str, message: &str) -> Response<SimBody> {
    let mut meta = meta.clone();
    meta["Error"] = json!({"Code": code, "Message": message});
    json_response(status, json!({"ResponseMetadata": meta}).to_string())
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// Checks the signature; the refusal to send otherwise.
fn authenticate(
    headers: &HeaderMap,
    query: &[(String, String)],
    body: &[u8],
    meta: &Value,
) -> Option<Response<SimBody>> {
    let pairs: Vec<(&str, &str)> = query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let received = Received {
        host: header(headers, "host"),
        query: &pairs,
        x_date: header(headers, "x-date"),
        x_content_sha256: header(headers, "x-content-sha256"),
        authorization: header(headers, "authorization"),
        body,
    };
    let skew = sign::x_date_to_unix(received.x_date)
        .map(|t| (t - i64::try_from(now_secs()).unwrap_or(i64::MAX)).abs())
        .unwrap_or(i64::MAX);
    let failure = match sign::verify(SIM_ASSETS_ACCESS_KEY, SIM_ASSETS_SECRET_KEY, &received) {
        Err(VerifyError::Malformed) => {
            ("MissingAuthenticationToken", "The Authorization header is missing or malformed.")
        }
        Err(VerifyError::UnknownKey) => ("InvalidAccessKey", "The access key is not valid."),
        Err(VerifyError::Mismatch | VerifyError::BadSignature) => {
            ("SignatureDoesNotMatch", "The request signature does not match.")
        }
        Ok(()) if header(headers, "content-type") != sign::CONTENT_TYPE => {
            ("SignatureDoesNotMatch", "The request signature does not match (Content-Type).")
        }
        Ok(()) if skew > MAX_SKEW_SECS => ("RequestExpired", "X-Date is too far from the current time."),
        Ok(()) => return None,
    };
    Some(refusal(401, meta, failure.0, failure.1))
}

/// Answers `POST /?Action=…&Version=…`.
pub(crate) async fn handle(
    state: &SimState,
    req: Request<Incoming>,
    rid: String,
) -> Result<Response<SimBody>, std::io::Error> {
    let query: Vec<(String, String)> = url::Url::parse(&format!("http://x/?{}", req.uri().query().unwrap_or("")))
        .map(|u| u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
        .unwrap_or_default();
    let param = |name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap_or_default();
    let (action, version) = (param("Action"), param("Version"));
    let meta =
        json!({"RequestId": rid, "Action": action, "Version": version, "Service": "ark", "Region": "cn-beijing"});
    let headers = req.headers().clone();
    let body = match read_body(req, MAX_ASSET_REQUEST_BYTES).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => return Ok(refusal(413, &meta, "RequestTooLarge", "The body is too large.")),
        Err(BodyError::Unreadable) => {
            return Ok(refusal(400, &meta, "InvalidParameter", "The body could not be read."));
        }
    };
    if let Some(refused) = authenticate(&headers, &query, &body, &meta) {
        return Ok(refused);
    }
    let Some(body) = json_object(&body) else {
        return Ok(refusal(200, &meta, "InvalidParameter", "The body must be a JSON object."));
    };
    let result = if version == sign::VERSION {
        match action.as_str() {
            "CreateAssetGroup" => create_group(state, &body),
            "ListAssetGroups" => Ok(list_groups(state, &body)),
            "CreateAsset" => create_asset(state, &body),
            "GetAsset" => get_asset(state, &body),
            _ => Err(("InvalidActionOrVersion", format!("Unknown action {action:?}."))),
        }
    } else {
        Err(("InvalidActionOrVersion", format!("Unknown version {version:?}.")))
    };
    Ok(match result {
        Ok(result) => json_response(200, json!({"ResponseMetadata": meta, "Result": result}).to_string()),
        Err((code, message)) => refusal(200, &meta, code, &message),
    })
}

type Refused = (&'static str, String);

fn text<'a>(body: &'a Map<String, Value>, key: &str) -> Result<&'a str, Refused> {
    body.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ("InvalidParameter", format!("{key} must be a non-empty string.")))
}

fn create_group(state: &SimState, body: &Map<String, Value>) -> Result<Value, Refused> {
    let name = text(body, "Name")?;
    let group_type = text(body, "GroupType")?;
    if !matches!(group_type, "AIGC" | "LivenessFace") {
        return Err(("InvalidParameter", "GroupType must be AIGC or LivenessFace.".to_owned()));
    }
    let id = format!("group-{}", state.next_hex());
    let mut table = lock(state.assets());
    if table.groups.values().any(|g| g.name == name) {
        return Err(("InvalidParameter.DuplicateName", format!("An asset group named {name:?} exists.")));
    }
    let group = Group { name: name.to_owned(), group_type: group_type.to_owned(), created: now_secs() };
    table.groups.insert(id.clone(), group);
    Ok(json!({"Id": id}))
}

fn list_groups(state: &SimState, body: &Map<String, Value>) -> Value {
    let filter = |key: &str| body.get("Filter").and_then(|f| f.get(key)).and_then(Value::as_str).map(str::to_owned);
    let (name, group_type) = (filter("Name"), filter("GroupType"));
    let table = lock(state.assets());
    let mut items: Vec<Value> = table
        .groups
        .iter()
        .filter(|(_, g)| name.as_ref().is_none_or(|n| *n == g.name))
        .filter(|(_, g)| group_type.as_ref().is_none_or(|t| *t == g.group_type))
        .map(|(id, g)| {
            json!({"Id": id, "Name": g.name, "GroupType": g.group_type, "ProjectName": "default", "CreateTime": g.created})
        })
        .collect();
    items.sort_by(|a, b| a["Id"].as_str().cmp(&b["Id"].as_str()));
    json!({"TotalCount": items.len(), "Items": items, "NextToken": ""})
}

fn create_asset(state: &SimState, body: &Map<String, Value>) -> Result<Value, Refused> {
    let group_id = text(body, "GroupId")?;
    let url = text(body, "URL")?.to_owned();
    let asset_type = text(body, "AssetType")?;
    if !matches!(asset_type, "Image" | "Video" | "Audio") {
        return Err(("InvalidParameter", "AssetType must be Image, Video or Audio.".to_owned()));
    }
    let id = format!("asset-{}", state.next_hex());
    let reachable = is_loopback_url(&url);
    {
        let mut table = lock(state.assets());
        if !table.groups.contains_key(group_id) {
            return Err(("NotFound.AssetGroup", format!("The asset group {group_id} does not exist.")));
        }
        let asset = SimAsset {
            group_id: group_id.to_owned(),
            name: body.get("Name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            asset_type: asset_type.to_owned(),
            url: url.clone(),
            created: now_secs(),
            fetched: None,
            state: if reachable {
                AssetState::Processing
            } else {
                AssetState::Failed("The simulator fetches only http(s) URLs on loopback.".to_owned())
            },
        };
        table.order.push_back(id.clone());
        table.assets.insert(id.clone(), asset);
        while table.order.len() > MAX_ASSETS {
            if let Some(oldest) = table.order.pop_front() {
                table.assets.remove(&oldest);
            }
        }
    }
    if reachable {
        tokio::spawn(fetch(state.client().clone(), Arc::clone(state.assets_arc()), id.clone(), url));
    }
    Ok(json!({"Id": id}))
}

fn get_asset(state: &SimState, body: &Map<String, Value>) -> Result<Value, Refused> {
    let id = text(body, "Id")?;
    let table = lock(state.assets());
    let asset = table.assets.get(id).ok_or_else(|| ("NotFound.Asset", format!("The asset {id} does not exist.")))?;
    let status = match &asset.state {
        AssetState::Processing => "Processing",
        AssetState::Active => "Active",
        AssetState::Failed(_) => "Failed",
    };
    let mut result = json!({
        "Id": id, "Name": asset.name, "GroupId": asset.group_id, "AssetType": asset.asset_type,
        "Status": status, "CreateTime": asset.created, "URL": asset.url,
    });
    if let AssetState::Failed(message) = &asset.state {
        result["Error"] = json!({"Code": "AssetFetchFailed", "Message": message});
    }
    Ok(result)
}

/// Fetches an asset's URL and records the outcome.
async fn fetch(client: reqwest::Client, assets: Arc<Mutex<AssetTable>>, id: String, url: String) {
    let (outcome, fetched) = match tokio::time::timeout(FETCH_TIMEOUT, read(&client, &url)).await {
        Ok(Ok(read)) => (AssetState::Active, Some(read)),
        Ok(Err(message)) => (AssetState::Failed(message), None),
        Err(_) => (AssetState::Failed("Fetching the URL timed out.".to_owned()), None),
    };
    if let Some(asset) = lock(&assets).assets.get_mut(&id) {
        asset.state = outcome;
        asset.fetched = fetched;
    }
}

/// GETs `url`; the length and SHA-256 (hex) of what it read, or why it is not usable.
async fn read(client: &reqwest::Client, url: &str) -> Result<(u64, String), String> {
    use sha2::Digest;
    let mut response = client.get(url).send().await.map_err(|e| format!("Fetching the URL failed: {e}."))?;
    if !response.status().is_success() {
        return Err(format!("Fetching the URL answered {}.", response.status().as_u16()));
    }
    let mut bytes = 0u64;
    let mut digest = sha2::Sha256::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("Reading the URL failed: {e}."))? {
        digest.update(&chunk);
        bytes = bytes.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        if bytes > MAX_FETCH_BYTES {
            break;
        }
    }
    if bytes == 0 {
        return Err("The URL answered an empty body.".to_owned());
    }
    let hex: String = digest.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((bytes, hex))
}
