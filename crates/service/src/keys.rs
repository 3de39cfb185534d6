//! API key secrets: generation, hashing, and the ids the gateway hands out.

use domain::ports::IdSource;
use sha2::{Digest, Sha256};

/// The prefix every key secret starts with, so that leaked keys are easy to recognise.
pub const KEY_PREFIX: &str = "sk-gw-";

/// A freshly generated key: the secret (shown once) and what is stored.
#[derive(Clone, PartialEq, Eq)]
pub struct NewSecret {
    /// The secret to hand to the user once; never stored or logged.
    pub secret: String,
    /// Lowercase hex SHA-256 of the secret.
    pub hash: String,
    /// The first characters, kept to recognise the key in lists.
    pub prefix: String,
}

impl std::fmt::Debug for NewSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSecret").field("secret", &"*****").field("prefix", &self.prefix).finish()
    }
}

/// Lowercase hex SHA-256 of a key secret.
pub fn hash_secret(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// A new secret from 32 bytes of operating-system randomness.
pub fn generate_secret() -> Result<NewSecret, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let secret = format!("{KEY_PREFIX}{}", hex(&bytes));
    Ok(NewSecret { hash: hash_secret(&secret), prefix: secret[..KEY_PREFIX.len() + 6].to_owned(), secret })
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Ids of the form `<prefix><32 hex digits>` from time-ordered UUIDs (v7).
#[derive(Debug, Clone, Copy, Default)]
pub struct UuidIds;

impl IdSource for UuidIds {
    fn new_id(&self, prefix: &str) -> String {
        format!("{prefix}{}", uuid::Uuid::now_v7().simple())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_sha256_hex() {
        assert_eq!(hash_secret("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn secrets_are_long_random_and_prefixed() {
        let a = generate_secret().expect("randomness");
        let b = generate_secret().expect("randomness");
        assert_ne!(a.secret, b.secret);
        assert!(a.secret.starts_with(KEY_PREFIX));
        assert_eq!(a.secret.len(), KEY_PREFIX.len() + 64);
        assert_eq!(a.hash, hash_secret(&a.secret));
        assert!(a.secret.starts_with(&a.prefix));
        assert!(!format!("{a:?}").contains(&a.secret));
    }

    #[test]
    fn ids_are_prefixed_and_unique() {
        let ids = UuidIds;
        let (x, y) = (ids.new_id("task_"), ids.new_id("task_"));
        assert!(x.starts_with("task_") && x.len() == 37);
        assert_ne!(x, y);
    }
}
