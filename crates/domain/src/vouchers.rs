//! Vouchers (redemption codes): batches an operator mints, the codes' typed form, and the port
//! that keeps them. A code is shown once and stored only as its SHA-256 hash; redeeming one
//! credits the balance through the ledger's book (`BookOp::Redeem`), in the same commit that marks
//! it redeemed.

use async_trait::async_trait;

use crate::ports::{PageRequest, StoreError};
use crate::{Timestamp, UsdAmount, UserId};

/// Characters a code is written in: Crockford's base 32 (no `I`, `L`, `O` or `U`), so that no two
/// look alike.
pub const CODE_ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Characters of a code, before its dashes: 28 × 5 = 140 random bits.
pub const CODE_CHARS: usize = 28;

/// Characters between two dashes.
pub const CODE_GROUP: usize = 4;

/// The prefix every code starts with, so that a leaked one is easy to recognise.
pub const CODE_PREFIX: &str = "GV-";

/// Writes 28 random bytes as a code, five bits of each (`b & 31`: 256 is a multiple of 32, so each
/// character is uniform), 140 bits in all: `GV-XXXX-XXXX-…` (seven groups of four).
pub fn code_from_bytes(bytes: &[u8; CODE_CHARS]) -> String {
    let mut out = String::with_capacity(CODE_PREFIX.len() + CODE_CHARS + CODE_CHARS / CODE_GROUP);
    out.push_str(CODE_PREFIX);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 && i % CODE_GROUP == 0 {
            out.push('-');
        }
        out.push(char::from(CODE_ALPHABET[usize::from(b & 31)]));
    }
    out
}

/// A code as typed, in its one stored form: the prefix, dashes and spaces dropped, upper case,
/// and the look-alikes read as Crockford does (`O` → `0`, `I`/`L` → `1`). `None` when what is left
/// is not [`CODE_CHARS`] characters of the alphabet.
pub fn normalize_code(typed: &str) -> Option<String> {
    let prefix = CODE_PREFIX.trim_end_matches('-');
    let mut out = String::with_capacity(CODE_CHARS + prefix.len());
    for c in typed.chars() {
        let c = match c.to_ascii_uppercase() {
            '-' | ' ' => continue,
            'O' => '0',
            'I' | 'L' => '1',
            c => c,
        };
        if !c.is_ascii() || !CODE_ALPHABET.contains(&(c as u8)) || out.len() == CODE_CHARS + prefix.len() {
            return None;
        }
        out.push(c);
    }
    if out.len() == CODE_CHARS + prefix.len() && out.starts_with(prefix) {
        out.drain(..prefix.len());
    }
    (out.len() == CODE_CHARS).then_some(out)
}

/// A batch of vouchers as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoucherBatch {
    /// `vb_…`.
    pub id: String,
    /// What each code credits.
    pub amount: UsdAmount,
    /// How many codes were minted.
    pub count: u32,
    /// How many were redeemed.
    pub redeemed: u32,
    /// From when on its codes are refused, if ever.
    pub expires_at: Option<Timestamp>,
    /// The operator's note.
    pub note: String,
    /// Who minted it (a user id, or `cli`).
    pub created_by: String,
    /// When.
    pub created_at: Timestamp,
    /// When its unredeemed codes were revoked, if they were.
    pub revoked_at: Option<Timestamp>,
}

/// Where vouchers are kept (their redemption goes through the ledger's book).
#[async_trait]
pub trait VoucherStore: Send + Sync {
    /// Stores `batch` (its `redeemed` is 0) with one voucher per code hash, in one transaction.
    async fn create_vouchers(&self, batch: &VoucherBatch, code_hashes: &[String]) -> Result<(), StoreError>;
    /// One page of batches, newest first, and how many there are.
    async fn voucher_batches(&self, page: PageRequest) -> Result<(Vec<VoucherBatch>, u64), StoreError>;
    /// The batch `id`, if it exists.
    async fn voucher_batch(&self, id: &str) -> Result<Option<VoucherBatch>, StoreError>;
    /// Revokes the unredeemed codes of batch `id` at `at` (a second revocation keeps the first
    /// time); `NotFound` for an unknown batch.
    async fn revoke_vouchers(&self, id: &str, at: Timestamp) -> Result<VoucherBatch, StoreError>;
    /// Records a failed redemption by `user` at `at`, forgetting that user's failures before `forget_before`.
    async fn record_voucher_failure(
        &self,
        user: &UserId,
        at: Timestamp,
        forget_before: Timestamp,
    ) -> Result<(), StoreError>;
    /// How many failed redemptions `user` made since `since`.
    async fn voucher_failures_since(&self, user: &UserId, since: Timestamp) -> Result<u64, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_carry_140_bits_in_an_unambiguous_alphabet_and_read_back_as_typed() {
        let code = code_from_bytes(&[0xff; CODE_CHARS]);
        assert_eq!(code.len(), CODE_PREFIX.len() + CODE_CHARS + CODE_CHARS / CODE_GROUP - 1, "{code}");
        assert!(code.starts_with("GV-ZZZZ-"), "{code}");
        let zero = code_from_bytes(&[0; CODE_CHARS]);
        assert_eq!(zero, "GV-0000-0000-0000-0000-0000-0000-0000");
        let mut bytes = [0u8; CODE_CHARS];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::try_from(i * 37 % 256).unwrap_or(0);
        }
        let mixed = code_from_bytes(&bytes);
        let stored = normalize_code(&mixed).expect("its own form");
        assert_eq!(normalize_code(&mixed.to_lowercase()), Some(stored.clone()), "any case");
        assert_eq!(normalize_code(&mixed.replace('-', " ")), Some(stored.clone()), "spaces");
        assert_eq!(normalize_code(&stored), Some(stored.clone()), "without the prefix and dashes");
        assert!(!stored.contains(['I', 'L', 'O', 'U']));
        // Look-alikes read as their digits.
        let typed = "GV-OOOO-IIII-LLLL-0000-1111-0000-1111";
        assert_eq!(normalize_code(typed).as_deref(), Some("0000111111110000111100001111"));
        for bad in ["", "GV-", "GV-0000", &format!("{mixed}0"), "GV-UUUU-0000-0000-0000-0000-0000-0000", "GV-éééé"]
        {
            assert_eq!(normalize_code(bad), None, "{bad}");
        }
    }
}
