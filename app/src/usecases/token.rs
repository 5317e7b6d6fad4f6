//! Bearer tokens of agents (`cbt_…`) and operators (`cbo_…`), console sign-in codes and session
//! secrets: random, shown once, stored only as a SHA-256 hash
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

/// Prefix of every operator token: distinct from agents' `cbt_`, so a token is never mistaken
/// for the other kind (and a secret scanner tells them apart).
pub(crate) const OPERATOR_TOKEN_PREFIX: &str = "cbo_";

/// A fresh operator token: `cbo_` followed by 64 hex digits (256 random bits). Show it once;
/// store only its hash.
pub fn new_operator_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{OPERATOR_TOKEN_PREFIX}{}", hex::encode(bytes))
}

/// Whether `token` has the shape [`new_operator_token`] gives.
pub fn is_operator_token(token: &str) -> bool {
    token
        .strip_prefix(OPERATOR_TOKEN_PREFIX)
        .is_some_and(|hex| {
            hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// Crockford's base32 alphabet (no I, L, O, U): what a sign-in code is written in.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A fresh console sign-in code: 16 characters of Crockford base32 in four groups of four
/// (`K7QM-2XD4-9ZPA-1BHW`, 80 random bits). Works once, for a few minutes; only its hash is
/// stored (of its [`normalize_sign_in_code`] form).
pub fn new_sign_in_code() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let chars: Vec<char> = bytes
        .iter()
        .map(|b| CROCKFORD[usize::from(b & 31)] as char)
        .collect();
    chars
        .chunks(4)
        .map(|c| c.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join("-")
}

/// A sign-in code as typed, in the form its hash is taken of: upper case, without spaces or
/// dashes, with Crockford's look-alikes read as the digits they stand for (`O` → 0, `I`/`L` →
/// 1). `None` when it is not 16 characters of the alphabet then.
pub fn normalize_sign_in_code(typed: &str) -> Option<String> {
    let code: String = typed
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| match c.to_ascii_uppercase() {
            'O' => '0',
            'I' | 'L' => '1',
            c => c,
        })
        .collect();
    (code.len() == 16 && code.bytes().all(|b| CROCKFORD.contains(&b))).then_some(code)
}

/// A fresh console session secret: 64 hex digits (256 random bits), kept only in the browser's
/// cookie; the store keeps its hash.
pub fn new_session_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
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

    #[test]
    fn operator_tokens_are_told_from_agent_tokens() {
        let o = new_operator_token();
        assert!(is_operator_token(&o) && !is_token(&o));
        assert!(!is_operator_token(&new_token()));
        assert_ne!(new_operator_token(), o);
    }

    #[test]
    fn sign_in_codes_read_back_as_typed() {
        let code = new_sign_in_code();
        assert_eq!(code.len(), 19);
        assert_eq!(code.matches('-').count(), 3);
        let canonical = normalize_sign_in_code(&code).unwrap();
        assert_eq!(canonical.len(), 16);
        // Lower case, spaces and look-alikes are the same code.
        let typed = format!(
            " {} ",
            code.to_lowercase().replace('0', "o").replace('-', " ")
        );
        assert_eq!(
            normalize_sign_in_code(&typed).as_deref(),
            Some(canonical.as_str())
        );
        for bad in ["", "ABCD", "UUUU-UUUU-UUUU-UUUU", &format!("{code}X")] {
            assert_eq!(normalize_sign_in_code(bad), None, "{bad}");
        }
        assert_ne!(new_sign_in_code(), code);
        assert_eq!(new_session_secret().len(), 64);
    }
}
