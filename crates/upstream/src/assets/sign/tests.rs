//! Signature tests. The fixed vector below was computed outside this crate, with Python's
//! `hmac`, `hashlib`, `urllib.parse.quote` and `datetime`, following the steps of the module
//! documentation literally; the tests also rebuild each step by hand with the `hmac` crate.

use super::*;

const AK: &str = "AKLTexampleAccessKey";
const SK: &str = "exampleSecretKey/0123456789+abc==";
const REGION: &str = "cn-beijing";
const HOST: &str = "ark.cn-beijing.volcengineapi.com";
const BODY: &[u8] = br#"{"Name":"user-1","GroupType":"AIGC","ProjectName":"default"}"#;
/// 2026-01-01T03:25:07Z.
const WHEN: i64 = 1_767_237_907;
const QUERY: [(&str, &str); 2] = [("Version", "2024-01-01"), ("Action", "CreateAssetGroup")];

const BODY_HASH: &str = "7c11f79870b43693e6d7863933bae2c78a0ff03c7c8337bbcafd0ea1bfa3f97d";
const CANONICAL_HASH: &str = "85dcb0228a955a22519c0479bf839db141cff2e06e927930fcc4c3b1dd7a6c74";
const SIGNING_KEY: &str = "68dcc50061453c7a854ee52db0295a0e390f24664f321c8d800ca49541fd09b9";
const SIGNATURE: &str = "67fc277f47ade434383d92070104632b6dd478c13dfccba39c5aad3d815f18fe";

fn creds() -> Credentials<'static> {
    Credentials { access_key: AK, secret_key: SK, region: REGION }
}

#[test]
fn hmac_matches_rfc_4231_case_2() {
    let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
    assert_eq!(hex(&mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

#[test]
fn dates_and_encoding() {
    assert_eq!(x_date(WHEN), "20260101T032507Z");
    assert_eq!(x_date(0), "19700101T000000Z");
    for t in [0, WHEN, 951_782_400, 4_102_444_799] {
        assert_eq!(x_date_to_unix(&x_date(t)), Some(t), "{t}");
    }
    for bad in ["", "20260101T032507", "20261301T000000Z", "2026010xT000000Z", "20260101 032507Z"] {
        assert_eq!(x_date_to_unix(bad), None, "{bad}");
    }
    assert_eq!(percent_encode("a b/ü*~"), "a%20b%2F%C3%BC%2A~");
    assert_eq!(canonical_query(&QUERY), "Action=CreateAssetGroup&Version=2024-01-01");
    assert_eq!(canonical_query(&[]), "");
}

#[test]
fn canonical_request_is_exactly_the_documented_text() {
    let canonical = canonical_request(HOST, &canonical_query(&QUERY), &x_date(WHEN), &sha256_hex(BODY));
    let literal = format!(
        "POST\n/\nAction=CreateAssetGroup&Version=2024-01-01\ncontent-type:application/json\nhost:{HOST}\n\
         x-content-sha256:{BODY_HASH}\nx-date:20260101T032507Z\n\ncontent-type;host;x-content-sha256;x-date\n{BODY_HASH}"
    );
    assert_eq!(canonical, literal);
    assert_eq!(sha256_hex(canonical.as_bytes()), CANONICAL_HASH);
}

#[test]
fn hmac_chain_step_by_step() {
    let step = |key: &[u8], data: &str| {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        mac.update(data.as_bytes());
        mac.finalize().into_bytes().to_vec()
    };
    let k_date = step(SK.as_bytes(), "20260101");
    let k_region = step(&k_date, "cn-beijing");
    let k_service = step(&k_region, "ark");
    let k_signing = step(&k_service, "request");
    assert_eq!(hex(&k_signing), SIGNING_KEY);
    assert_eq!(hex(&signing_key(SK, "20260101", REGION)), SIGNING_KEY);
    let to_sign = format!("HMAC-SHA256\n20260101T032507Z\n20260101/cn-beijing/ark/request\n{CANONICAL_HASH}");
    assert_eq!(hex(&step(&k_signing, &to_sign)), SIGNATURE);
}

#[test]
fn full_signature_matches_the_fixed_vector() {
    let signed = sign(creds(), HOST, &QUERY, BODY, WHEN);
    assert_eq!(signed.x_date, "20260101T032507Z");
    assert_eq!(signed.x_content_sha256, BODY_HASH);
    assert_eq!(
        signed.authorization,
        format!(
            "HMAC-SHA256 Credential={AK}/20260101/cn-beijing/ark/request, \
             SignedHeaders=content-type;host;x-content-sha256;x-date, Signature={SIGNATURE}"
        )
    );
}

fn received<'a>(s: &'a Signature, host: &'a str, body: &'a [u8]) -> Received<'a> {
    Received {
        host,
        query: &QUERY,
        x_date: &s.x_date,
        x_content_sha256: &s.x_content_sha256,
        authorization: &s.authorization,
        body,
    }
}

#[test]
fn verify_accepts_the_signed_request_and_refuses_changes() {
    let s = sign(creds(), HOST, &QUERY, BODY, WHEN);
    assert_eq!(verify(AK, SK, &received(&s, HOST, BODY)), Ok(()));
    assert_eq!(verify("AKLTother", SK, &received(&s, HOST, BODY)), Err(VerifyError::UnknownKey));
    assert_eq!(verify(AK, "wrong", &received(&s, HOST, BODY)), Err(VerifyError::BadSignature));
    assert_eq!(verify(AK, SK, &received(&s, "other.host", BODY)), Err(VerifyError::BadSignature));
    assert_eq!(verify(AK, SK, &received(&s, HOST, b"{}")), Err(VerifyError::Mismatch));
    let mut later = s.clone();
    later.x_date = x_date(WHEN + 1);
    assert_eq!(verify(AK, SK, &received(&later, HOST, BODY)), Err(VerifyError::BadSignature));
    let mut no_alg = s.clone();
    no_alg.authorization = no_alg.authorization.replace("HMAC-SHA256 ", "");
    assert_eq!(verify(AK, SK, &received(&no_alg, HOST, BODY)), Err(VerifyError::Malformed));
    let mut fewer = s;
    fewer.authorization = fewer.authorization.replace("content-type;host;", "host;");
    assert_eq!(verify(AK, SK, &received(&fewer, HOST, BODY)), Err(VerifyError::Malformed));
}

#[test]
fn authorization_parsing() {
    let parsed = parse_authorization(&sign(creds(), HOST, &QUERY, BODY, WHEN).authorization);
    assert_eq!(
        parsed,
        Some(Authorization {
            access_key: AK.to_owned(),
            date: "20260101".to_owned(),
            region: REGION.to_owned(),
            service: "ark".to_owned(),
            signed_headers: SIGNED_HEADERS.to_owned(),
            signature: SIGNATURE.to_owned(),
        })
    );
    for bad in ["", "HMAC-SHA256", "HMAC-SHA256 Credential=a/b/c/d/other, SignedHeaders=x, Signature=y", "Bearer x"] {
        assert_eq!(parse_authorization(bad), None, "{bad}");
    }
}
