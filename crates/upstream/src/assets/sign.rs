//! The asset control plane's request signature (upstream-wire §5): Volcengine "V4" HMAC-SHA256.
//!
//! For a request `POST https://<host>/?Action=<A>&Version=2024-01-01` with a JSON body, at time
//! `T` (UTC), with access key `AK`, secret key `SK` and region `R`:
//!
//! 1. `X-Date` = `T` as `YYYYMMDD'T'HHMMSS'Z'`; `date` = its first 8 characters.
//! 2. `X-Content-Sha256` = lower-case hex SHA-256 of the body bytes.
//! 3. Canonical query: every `key=value` pair percent-encoded (RFC 3986: everything but
//!    `A-Z a-z 0-9 - _ . ~` as `%XX`, upper-case hex), sorted by key (then value), joined with `&`.
//! 4. Canonical request, lines joined with `\n`:
//!    `POST`, `/`, the canonical query,
//!    `content-type:application/json\nhost:<host>\nx-content-sha256:<hash>\nx-date:<X-Date>\n`
//!    (so an empty line follows), `content-type;host;x-content-sha256;x-date`, the body hash.
//!    `<host>` is the URL's host with `:<port>` only when the port is not the scheme's default.
//! 5. Credential scope: `<date>/<R>/ark/request`.
//! 6. String to sign, lines joined with `\n`: `HMAC-SHA256`, `X-Date`, the scope, lower-case
//!    hex SHA-256 of the canonical request.
//! 7. Signing key: `kDate = HMAC(SK, date)` (the secret as is, no prefix),
//!    `kRegion = HMAC(kDate, R)`, `kService = HMAC(kRegion, "ark")`,
//!    `kSigning = HMAC(kService, "request")`; signature = lower-case hex
//!    `HMAC(kSigning, string to sign)`. Every HMAC is HMAC-SHA256.
//! 8. `Authorization: HMAC-SHA256 Credential=<AK>/<scope>, SignedHeaders=content-type;host;x-content-sha256;x-date, Signature=<signature>`.
//!
//! The simulator checks requests with [`verify`], the same construction.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The algorithm name in the string to sign and the `Authorization` header.
pub const ALGORITHM: &str = "HMAC-SHA256";
/// The service name in the credential scope.
pub const SERVICE: &str = "ark";
/// The signed headers, in order.
pub const SIGNED_HEADERS: &str = "content-type;host;x-content-sha256;x-date";
/// The only content type sent (and signed).
pub const CONTENT_TYPE: &str = "application/json";
/// The control plane's API version.
pub const VERSION: &str = "2024-01-01";

/// What one request is signed with. `Debug` is not derived: the secret must not be printed.
#[derive(Clone, Copy)]
pub struct Credentials<'a> {
    /// The access key id (public).
    pub access_key: &'a str,
    /// The secret key.
    pub secret_key: &'a str,
    /// The region, e.g. `cn-beijing`.
    pub region: &'a str,
}

/// The headers a signed request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// `X-Date`.
    pub x_date: String,
    /// `X-Content-Sha256`.
    pub x_content_sha256: String,
    /// `Authorization`.
    pub authorization: String,
}

/// HMAC-SHA256 of `data` under `key`.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => return [0; 32],
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// Lower-case hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// `X-Date` for Unix second `unix_secs`: `YYYYMMDD'T'HHMMSS'Z'`.
pub fn x_date(unix_secs: i64) -> String {
    // `2026-11-21T22:28:43.000Z` → `20261121T222843Z`.
    let rfc3339 = domain::Timestamp(unix_secs.saturating_mul(1000)).to_string();
    let mut out: String = rfc3339.chars().filter(|c| !matches!(c, '-' | ':')).collect();
    if let Some(dot) = out.find('.') {
        out.truncate(dot);
    }
    out.push('Z');
    out
}

/// The Unix second of an `X-Date` value, if it is one.
pub fn x_date_to_unix(x_date: &str) -> Option<i64> {
    let b = x_date.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = x_date.get(range)?;
        if part.bytes().all(|c| c.is_ascii_digit()) { part.parse().ok() } else { None }
    };
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil (proleptic Gregorian), the inverse of `domain::Timestamp`'s printing.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// RFC 3986 percent-encoding of everything but unreserved characters.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The canonical query string of `pairs` (step 3).
pub fn canonical_query(pairs: &[(&str, &str)]) -> String {
    let mut encoded: Vec<(String, String)> =
        pairs.iter().map(|(k, v)| (percent_encode(k), percent_encode(v))).collect();
    encoded.sort();
    encoded.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&")
}

/// The canonical request (step 4).
pub fn canonical_request(host: &str, query: &str, x_date: &str, body_hash: &str) -> String {
    let headers = format!("content-type:{CONTENT_TYPE}\nhost:{host}\nx-content-sha256:{body_hash}\nx-date:{x_date}\n");
    ["POST", "/", query, &headers, SIGNED_HEADERS, body_hash].join("\n")
}

/// The credential scope (step 5).
pub fn scope(x_date: &str, region: &str) -> String {
    format!("{}/{region}/{SERVICE}/request", x_date.get(..8).unwrap_or(x_date))
}

/// The signing key (step 7).
pub fn signing_key(secret_key: &str, date8: &str, region: &str) -> [u8; 32] {
    let k_date = hmac_sha256(secret_key.as_bytes(), date8.as_bytes());
    let k_region = hmac_sha256(&k_date, region.as_bytes());
    let k_service = hmac_sha256(&k_region, SERVICE.as_bytes());
    hmac_sha256(&k_service, b"request")
}

/// The hex signature of a request whose canonical parts are given.
fn signature_hex(secret_key: &str, region: &str, x_date: &str, canonical: &str) -> String {
    let scope = scope(x_date, region);
    let to_sign = [ALGORITHM, x_date, &scope, &sha256_hex(canonical.as_bytes())].join("\n");
    let key = signing_key(secret_key, x_date.get(..8).unwrap_or(x_date), region);
    hex(&hmac_sha256(&key, to_sign.as_bytes()))
}

/// Signs `POST https://<host>/?<query>` with `body` at `unix_secs`.
pub fn sign(
    credentials: Credentials<'_>,
    host: &str,
    query: &[(&str, &str)],
    body: &[u8],
    unix_secs: i64,
) -> Signature {
    let x_date = x_date(unix_secs);
    let body_hash = sha256_hex(body);
    let canonical = canonical_request(host, &canonical_query(query), &x_date, &body_hash);
    let signature = signature_hex(credentials.secret_key, credentials.region, &x_date, &canonical);
    let authorization = format!(
        "{ALGORITHM} Credential={}/{}, SignedHeaders={SIGNED_HEADERS}, Signature={signature}",
        credentials.access_key,
        scope(&x_date, credentials.region)
    );
    Signature { x_date, x_content_sha256: body_hash, authorization }
}

/// The parts of an `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// The access key id.
    pub access_key: String,
    /// `YYYYMMDD` of the scope.
    pub date: String,
    /// The region of the scope.
    pub region: String,
    /// The service of the scope.
    pub service: String,
    /// The signed header names.
    pub signed_headers: String,
    /// The hex signature.
    pub signature: String,
}

/// Parses `HMAC-SHA256 Credential=<AK>/<date>/<region>/<service>/request, SignedHeaders=…, Signature=…`.
pub fn parse_authorization(header: &str) -> Option<Authorization> {
    let rest = header.strip_prefix(ALGORITHM)?.strip_prefix(' ')?;
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (name, value) = part.trim().split_once('=')?;
        match name {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed = Some(value),
            "Signature" => signature = Some(value),
            _ => return None,
        }
    }
    let fields: Vec<&str> = credential?.split('/').collect();
    let [access_key, date, region, service, "request"] = fields.as_slice() else {
        return None;
    };
    Some(Authorization {
        access_key: (*access_key).to_owned(),
        date: (*date).to_owned(),
        region: (*region).to_owned(),
        service: (*service).to_owned(),
        signed_headers: signed?.to_owned(),
        signature: signature?.to_owned(),
    })
}

/// Why [`verify`] refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyError {
    /// No or an unparsable `Authorization`, or another signed-header list.
    Malformed,
    /// An access key other than the expected one.
    UnknownKey,
    /// `X-Content-Sha256` is not the body's hash, or the scope's date is not `X-Date`'s.
    Mismatch,
    /// The signature differs.
    BadSignature,
}

/// The headers of a received request that the signature covers.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// `Host`.
    pub host: &'a str,
    /// The query pairs.
    pub query: &'a [(&'a str, &'a str)],
    /// `X-Date`.
    pub x_date: &'a str,
    /// `X-Content-Sha256`.
    pub x_content_sha256: &'a str,
    /// `Authorization`.
    pub authorization: &'a str,
    /// The body.
    pub body: &'a [u8],
}

/// Checks a received request against the expected credentials (region from the scope).
pub fn verify(access_key: &str, secret_key: &str, received: &Received<'_>) -> Result<(), VerifyError> {
    let auth = parse_authorization(received.authorization).ok_or(VerifyError::Malformed)?;
    if auth.signed_headers != SIGNED_HEADERS || auth.service != SERVICE {
        return Err(VerifyError::Malformed);
    }
    if auth.access_key != access_key {
        return Err(VerifyError::UnknownKey);
    }
    let body_hash = sha256_hex(received.body);
    if body_hash != received.x_content_sha256 || received.x_date.get(..8) != Some(auth.date.as_str()) {
        return Err(VerifyError::Mismatch);
    }
    let canonical = canonical_request(received.host, &canonical_query(received.query), received.x_date, &body_hash);
    let expected = signature_hex(secret_key, &auth.region, received.x_date, &canonical);
    // Compared without an early exit (a length mismatch is not secret).
    let same: bool = subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), auth.signature.as_bytes()).into();
    if same { Ok(()) } else { Err(VerifyError::BadSignature) }
}

#[cfg(test)]
mod tests;
