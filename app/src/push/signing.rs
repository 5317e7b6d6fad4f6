//! Standard Webhooks signing: `webhook-id`, `webhook-timestamp` and `webhook-signature`.
//!
//! Spec: <https://www.standardwebhooks.com/> — the signed content is `<id>.<timestamp>.<body>`,
//! the MAC is HMAC-SHA256 keyed with the secret's bytes (the base64 after the optional `whsec_`
//! prefix), and the header holds one `v1,<base64 MAC>` per key, separated by spaces, so a
//! receiver accepts the event during a key rotation with either key.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use crewbus_domain::{RunId, Secret, Seq};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// The header carrying the event id receivers deduplicate on.
pub const WEBHOOK_ID: &str = "webhook-id";
/// The header carrying the signing time, in whole seconds since the Unix epoch.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The header carrying the space-separated `v1,<base64>` signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

const SECRET_PREFIX: &str = "whsec_";

/// A signing key that is not a Standard Webhooks secret (`whsec_` + base64 of at least one byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("signing key {index} is not a Standard Webhooks secret (whsec_ followed by base64)")]
pub struct SigningKeyError {
    /// Position of the offending key in the destination's `signing_keys` (0-based).
    pub index: usize,
}

/// The signing keys of one destination, decoded once. `Debug` prints only how many there are.
#[derive(Clone, Default)]
pub struct Signer {
    keys: Vec<Zeroizing<Vec<u8>>>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Signer {
    /// Decodes `keys` (each `whsec_<base64>`, or bare base64). Errors: [`SigningKeyError`] naming
    /// the first key that does not decode to at least one byte (never its value).
    pub fn new(keys: &[Secret]) -> Result<Self, SigningKeyError> {
        let keys = keys
            .iter()
            .enumerate()
            .map(|(index, key)| {
                let text = key.expose().trim();
                let text = text.strip_prefix(SECRET_PREFIX).unwrap_or(text);
                match STANDARD.decode(text) {
                    Ok(bytes) if !bytes.is_empty() => Ok(Zeroizing::new(bytes)),
                    _ => Err(SigningKeyError { index }),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Signer { keys })
    }

    /// Whether there is at least one key (a destination without keys is sent unsigned).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The `webhook-signature` value for `id`, `timestamp` (seconds) and `body`: one `v1,<base64
    /// HMAC-SHA256>` per key, space separated, in key order. Empty when there are no keys.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let timestamp = timestamp.to_string();
        let mut out = String::with_capacity(self.keys.len() * 48);
        for key in &self.keys {
            let mut mac =
                <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.as_bytes());
            mac.update(b".");
            mac.update(body);
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str("v1,");
            out.push_str(&STANDARD.encode(mac.finalize().into_bytes()));
        }
        out
    }
}

/// The `webhook-id` of one event for one registration: stable across retries and restarts, so
/// receivers deduplicate on it. Shape: `msg_<run uuid, 32 hex>_<seq>_<first 8 hex of
/// sha256(registration id)>`.
pub fn webhook_id(run: RunId, registration: &str, seq: Seq) -> String {
    let digest = Sha256::digest(registration.as_bytes());
    format!(
        "msg_{}_{}_{}",
        run.0.simple(),
        seq.0,
        hex::encode(&digest[..4])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_test_vector() {
        // The vector of the Standard Webhooks reference library (Rust).
        let signer = Signer::new(&[Secret::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD")]).unwrap();
        assert_eq!(
            signer.sign(
                "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
                1649367553,
                br#"{"email":"test@example.com","username":"test_user"}"#
            ),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
    }

    #[test]
    fn several_keys_give_several_signatures() {
        let signer = Signer::new(&[
            Secret::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"),
            Secret::new("c2Vjb25k"),
        ])
        .unwrap();
        let sig = signer.sign("id", 1, b"{}");
        let parts: Vec<_> = sig.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.starts_with("v1,")));
        assert_ne!(parts[0], parts[1]);
        assert_eq!(Signer::default().sign("id", 1, b"{}"), "");
    }

    #[test]
    fn undecodable_keys_are_refused_by_position() {
        let err = Signer::new(&[Secret::new("whsec_AAAA"), Secret::new("whsec_not base64!")])
            .unwrap_err();
        assert_eq!(err.index, 1);
        assert!(Signer::new(&[Secret::new("whsec_")]).is_err());
        assert!(!format!("{err}").contains("not base64"));
    }

    #[test]
    fn webhook_id_is_stable_and_distinct() {
        let run = RunId::new();
        let a = webhook_id(run, "operator:a", Seq(3));
        assert_eq!(a, webhook_id(run, "operator:a", Seq(3)));
        assert_ne!(a, webhook_id(run, "operator:b", Seq(3)));
        assert_ne!(a, webhook_id(run, "operator:a", Seq(4)));
        assert_ne!(a, webhook_id(RunId::new(), "operator:a", Seq(3)));
    }
}
