//! Signed, expiring links to stored media: [`LinkSigner`].
//!
//! A link is `<public_base>/media/<key>?expires=<unix seconds>&sig=<hex>`, where `sig` is the
//! lower-case hex HMAC-SHA256, under the gateway's link secret, of the text
//! `media\n<key>\n<expires>`. It is valid while `now <= expires`. Keys are media keys
//! ([`crate::validate_key`]), which need no escaping in a URL path.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Makes and checks media links. `Debug` does not show the secret.
#[derive(Clone)]
pub struct LinkSigner {
    secret: Vec<u8>,
    public_base: String,
}

impl fmt::Debug for LinkSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkSigner").field("secret", &"*****").field("public_base", &self.public_base).finish()
    }
}

impl LinkSigner {
    /// A signer with `secret` (at least 32 random bytes are advised) for links under
    /// `public_base` (`GATEWAY_PUBLIC_URL`, e.g. `https://gw.example.com`; a trailing `/` is
    /// dropped).
    pub fn new(secret: impl Into<Vec<u8>>, public_base: &str) -> LinkSigner {
        LinkSigner { secret: secret.into(), public_base: public_base.trim_end_matches('/').to_owned() }
    }

    /// The MAC over `media\n<key>\n<expires>` (HMAC takes keys of any length, so it always exists).
    fn mac(&self, key: &str, expires: u64) -> Option<Hmac<Sha256>> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).ok()?;
        mac.update(format!("media\n{key}\n{expires}").as_bytes());
        Some(mac)
    }

    /// The hex signature of `key` until `expires_at_unix`.
    pub fn signature(&self, key: &str, expires_at_unix: u64) -> String {
        let Some(mac) = self.mac(key, expires_at_unix) else {
            return String::new();
        };
        mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The link to `key`, valid until `expires_at_unix` (inclusive).
    pub fn link(&self, key: &str, expires_at_unix: u64) -> String {
        format!(
            "{}/media/{key}?expires={expires_at_unix}&sig={}",
            self.public_base,
            self.signature(key, expires_at_unix)
        )
    }

    /// Whether `sig` signs `key` until `expires`, and `now_unix` is not past `expires`. The
    /// signature is compared in constant time.
    pub fn verify(&self, key: &str, expires: u64, sig: &str, now_unix: u64) -> bool {
        if now_unix > expires || crate::validate_key(key).is_err() {
            return false;
        }
        let Some(bytes) = decode_hex(sig) else {
            return false;
        };
        self.mac(key, expires).is_some_and(|mac| mac.verify_slice(&bytes).is_ok())
    }
}

/// Bytes of an even-length hex string (either case).
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 128 {
        return None;
    }
    let digit = |c: u8| char::from(c).to_digit(16).and_then(|d| u8::try_from(d).ok());
    text.as_bytes().chunks(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

impl domain::MediaLinks for LinkSigner {
    fn link(&self, key: &str, expires_at_unix: u64) -> String {
        LinkSigner::link(self, key, expires_at_unix)
    }

    fn verify(&self, key: &str, expires: u64, sig: &str, now_unix: u64) -> bool {
        LinkSigner::verify(self, key, expires, sig, now_unix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> LinkSigner {
        LinkSigner::new(b"0123456789abcdef0123456789abcdef".to_vec(), "https://gw.example.com/")
    }

    #[test]
    fn link_shape_and_independent_signature() {
        let link = signer().link("u1/a.png", 1_800_000_000);
        // HMAC-SHA256(key, "media\nu1/a.png\n1800000000"), computed with Python's hmac module.
        let expected = "11df7c902bc32d3c04b655522aad4f40e918dbaac54c1ba08705b6d32aa78af3";
        let sig = signer().signature("u1/a.png", 1_800_000_000);
        assert_eq!(link, format!("https://gw.example.com/media/u1/a.png?expires=1800000000&sig={sig}"));
        assert_eq!(sig.len(), 64);
        assert_eq!(sig, expected);
    }

    #[test]
    fn verification() {
        let s = signer();
        let sig = s.signature("u1/a.png", 1000);
        assert!(s.verify("u1/a.png", 1000, &sig, 999));
        assert!(s.verify("u1/a.png", 1000, &sig, 1000), "valid through its expiry second");
        assert!(s.verify("u1/a.png", 1000, &sig.to_uppercase(), 1000));
        assert!(!s.verify("u1/a.png", 1000, &sig, 1001), "expired");
        assert!(!s.verify("u1/b.png", 1000, &sig, 0), "another key");
        assert!(!s.verify("u1/a.png", 1001, &sig, 0), "another expiry");
        assert!(!s.verify("u1/a.png", 1000, &sig[..62], 0), "short");
        assert!(!s.verify("u1/a.png", 1000, "zz", 0), "not hex");
        assert!(!s.verify("u1/a.png", 1000, "", 0));
        assert!(!s.verify("../a.png", 1000, &s.signature("../a.png", 1000), 0), "invalid key");
        let other = LinkSigner::new(b"another secret".to_vec(), "https://gw.example.com");
        assert!(!other.verify("u1/a.png", 1000, &sig, 0), "another secret");
        assert!(!format!("{s:?}").contains("0123456789abcdef"));
    }
}
