//! Agent bearer tokens: random, shown once, stored as a SHA-256 hash.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// Prefix of every agent token, so a leaked one is recognisable in a secret scanner.
pub(crate) const TOKEN_PREFIX: &str = "cbt_";

/// A fresh agent token: `cbt_` followed by 64 hex digits (256 random bits from the OS-seeded
/// thread RNG). Show it once; store only [`token_hash`].
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{TOKEN_PREFIX}{}", hex::encode(bytes))
}

/// The stored form of a token: lowercase hex SHA-256 of its UTF-8 bytes (64 characters).
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hashes_stable() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 64);
        assert_eq!(token_hash(&a), token_hash(&a));
        assert_ne!(token_hash(&a), token_hash(&b));
        assert_eq!(token_hash(&a).len(), 64);
        assert!(!token_hash(&a).contains(&a[4..]));
    }
}
