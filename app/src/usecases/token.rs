//! Agent bearer tokens: random, shown once, stored as a SHA-256 hash
//! ([`TokenHash`](crewbus_domain::TokenHash)).

use rand::RngCore;

/// Prefix of every agent token, so a leaked one is recognisable in a secret scanner.
pub(crate) const TOKEN_PREFIX: &str = "cbt_";

/// A fresh agent token: `cbt_` followed by 64 hex digits (256 random bits from the OS-seeded
/// thread RNG). Show it once; store only `TokenHash::of(token)`.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{TOKEN_PREFIX}{}", hex::encode(bytes))
}

/// Whether `token` has the shape [`new_token`] gives: `cbt_` followed by 64 lowercase hex digits.
pub fn is_token(token: &str) -> bool {
    token.strip_prefix(TOKEN_PREFIX).is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewbus_domain::TokenHash;

    #[test]
    fn tokens_are_random_and_hashes_stable() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 64);
        assert!(is_token(&a));
        assert!(!is_token(&a[1..]) && !is_token(&a[..a.len() - 1]));
        assert!(!is_token(&format!("{TOKEN_PREFIX}{}", "g".repeat(64))));
        assert_eq!(TokenHash::of(&a), TokenHash::of(&a));
        assert_ne!(TokenHash::of(&a), TokenHash::of(&b));
    }
}
