//! Operator push destinations, their per-run registrations, and the keys that seal credentials.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use crate::{BusError, BusResult, RunId, Secret, Seq, StoreError};

/// How a push request authenticates: sent as `Authorization: <scheme> <credentials>`.
///
/// The credential is written to the push store (the delivery worker reads it back), so it is
/// sealed at rest; `Debug` never prints it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct PushAuthentication {
    /// The authorization scheme, e.g. `Bearer` (a single token, no whitespace).
    pub scheme: String,
    /// The credential after the scheme.
    pub credentials: Secret,
}

impl fmt::Debug for PushAuthentication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushAuthentication")
            .field("scheme", &self.scheme)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// An operator's webhook: where every run's history is pushed.
///
/// Signing keys (Standard Webhooks: HMAC-SHA256 over `id.timestamp.body`, several during a
/// rotation) stay with the sender and are never written to a store. `Debug` prints the URL without
/// userinfo or query and never a credential.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct Destination {
    /// Unique, non-blank name; the registration id is `operator:<name>`.
    pub name: String,
    /// Absolute `http` or `https` URL the events are POSTed to.
    pub url: String,
    /// Optional `Authorization` header.
    #[serde(default)]
    pub authentication: Option<PushAuthentication>,
    /// Standard Webhooks signing secrets (each sent as one `v1,` signature).
    #[serde(default)]
    pub signing_keys: Vec<Secret>,
}

impl Destination {
    /// The registration id this destination gets on every run: `operator:<name>` (trimmed).
    pub fn registration_id(&self) -> String {
        format!("operator:{}", self.name.trim())
    }

    /// Checks the destination: a non-blank name without control characters, an absolute `http`
    /// or `https` URL with a host and **without userinfo** (`user:password@` would be stored in
    /// clear; credentials belong in `authentication`, which is sealed), a single-token
    /// authentication scheme, non-empty credentials and signing keys. A query string is allowed
    /// (it is stored as configured and printed without it, see [`redact_url`]). Errors:
    /// [`BusError::Invalid`] naming the rule (never the URL or a secret).
    pub fn validate(&self) -> BusResult<()> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err(BusError::invalid("destination name is blank"));
        }
        if name.chars().any(char::is_control) {
            return Err(BusError::invalid(
                "destination name contains a control character",
            ));
        }
        let parsed = url::Url::parse(&self.url).map_err(|_| {
            BusError::invalid(format!("destination {name}: the URL does not parse"))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(BusError::invalid(format!(
                "destination {name}: the URL must be absolute http(s) with a host"
            )));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            // Never echo the URL: its userinfo is the secret.
            return Err(BusError::invalid(format!(
                "destination {name}: the URL carries credentials (userinfo before `@`), which \
                 would be stored in clear; remove them from `url` and give them in \
                 `authentication` (sealed at rest)"
            )));
        }
        if let Some(auth) = &self.authentication {
            if auth.scheme.is_empty() || auth.scheme.chars().any(|c| c.is_whitespace()) {
                return Err(BusError::invalid(format!(
                    "destination {name}: the authentication scheme must be one token"
                )));
            }
            if auth.credentials.is_empty() {
                return Err(BusError::invalid(format!(
                    "destination {name}: the authentication credentials are empty"
                )));
            }
        }
        if self.signing_keys.iter().any(Secret::is_empty) {
            return Err(BusError::invalid(format!(
                "destination {name}: a signing key is empty"
            )));
        }
        Ok(())
    }
}

impl fmt::Debug for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Destination")
            .field("name", &self.name)
            .field("url", &redact_url(&self.url))
            .field("authentication", &self.authentication)
            .field("signing_keys", &self.signing_keys.len())
            .finish()
    }
}

/// A URL fit for logs and output: userinfo and query (and fragment) removed. An unparsable URL
/// prints as `<unparsable url>` rather than risking a secret.
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "<unparsable url>".to_owned(),
    }
}

/// What the push store holds for one registration of one run.
#[derive(Clone, PartialEq, Eq)]
pub struct PushConfig {
    /// Registration id: `operator:<name>` for operator destinations.
    pub id: String,
    /// The run whose journal is pushed.
    pub run: RunId,
    /// Where to POST (stored in clear: the store queries on it).
    pub url: String,
    /// Optional authorization; sealed at rest by `SealedPush`.
    pub authentication: Option<PushAuthentication>,
}

impl PushConfig {
    /// The authorization as a store keeps it: `(scheme, credentials)`, both `None` without one.
    pub fn authentication_columns(&self) -> (Option<&str>, Option<&str>) {
        match &self.authentication {
            Some(a) => (Some(a.scheme.as_str()), Some(a.credentials.expose())),
            None => (None, None),
        }
    }

    /// A registration read back from a store's columns; `scheme` and `credentials` as
    /// [`PushConfig::authentication_columns`] wrote them (an authorization only when both are
    /// stored).
    pub fn from_stored(
        id: String,
        run: RunId,
        url: String,
        scheme: Option<String>,
        credentials: Option<String>,
    ) -> PushConfig {
        let authentication = match (scheme, credentials) {
            (Some(scheme), Some(credentials)) => Some(PushAuthentication {
                scheme,
                credentials: Secret::new(credentials),
            }),
            _ => None,
        };
        PushConfig {
            id,
            run,
            url,
            authentication,
        }
    }
}

impl fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushConfig")
            .field("id", &self.id)
            .field("run", &self.run)
            .field("url", &redact_url(&self.url))
            .field("authentication", &self.authentication)
            .finish()
    }
}

/// A registration with its delivery state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushRegistration {
    /// What to deliver where.
    pub config: PushConfig,
    /// The cursor: the first journal record not yet acknowledged by the receiver.
    pub next_seq: Seq,
    /// Failed attempts since the last advance (count).
    pub attempts: u32,
    /// When the registration is next due.
    pub next_attempt_at: DateTime<Utc>,
    /// Why the last attempt failed (bus-written text; never a credential).
    pub last_error: Option<String>,
    /// Parked (dead-lettered): left out of `due` until un-parked.
    pub parked: bool,
}

impl PushRegistration {
    /// The rule for a cursor a push store writes: at most `i64::MAX` (a signed 64-bit column),
    /// returned as stored. Errors: above it → [`StoreError::Invalid`].
    pub fn storable_cursor(next_seq: Seq) -> Result<i64, StoreError> {
        i64::try_from(next_seq.0).map_err(|_| {
            StoreError::invalid(format!(
                "cursor {next_seq} is above the largest storable cursor"
            ))
        })
    }

    /// The cursor and attempt count read back from a store's signed columns, for the store named
    /// `store` (in the error). Errors: a negative cursor or an attempt count outside `u32` →
    /// [`StoreError::Backend`] (corrupt data, never wrapped around).
    pub fn stored_counters(
        store: &str,
        next_seq: i64,
        attempts: i64,
    ) -> Result<(Seq, u32), StoreError> {
        let corrupt = |what: &str| StoreError::Backend {
            what: format!("{store} (push store): {what}"),
            source: None,
        };
        let next_seq = u64::try_from(next_seq).map_err(|_| corrupt("a negative cursor"))?;
        let attempts =
            u32::try_from(attempts).map_err(|_| corrupt("an attempt count out of range"))?;
        Ok((Seq(next_seq), attempts))
    }
}

/// One delivery attempt of a push registration, as its attempts log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushAttempt {
    /// When the POST started (the worker's clock).
    pub at: DateTime<Utc>,
    /// The journal record it carried (the registration's cursor then).
    pub seq: Seq,
    /// What came of it.
    pub outcome: AttemptOutcome,
    /// How long it took, from the start of the POST to the answer or the error, milliseconds.
    pub duration_ms: u64,
}

/// What one push attempt came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum AttemptOutcome {
    /// The receiver answered with this HTTP status (2xx acknowledged the record).
    Status {
        /// The HTTP status code.
        status: u16,
    },
    /// No answer: the bus-written reason (a timeout, a refused connection; never a credential,
    /// never the URL's query).
    Error {
        /// The reason.
        error: String,
    },
}

impl AttemptOutcome {
    /// Whether the attempt acknowledged its record (a 2xx answer).
    pub fn acknowledged(&self) -> bool {
        matches!(self, AttemptOutcome::Status { status } if (200..300).contains(status))
    }
}

impl PushAttempt {
    /// The rule for `PushStore::record_attempt`'s `keep`: at least 1. Errors: 0 →
    /// [`StoreError::Invalid`].
    pub fn check_keep(keep: usize) -> Result<(), StoreError> {
        if keep == 0 {
            return Err(StoreError::invalid(
                "an attempts log keeps at least 1 attempt",
            ));
        }
        Ok(())
    }

    /// The columns a store keeps the outcome in, `(status, error)`: exactly one is set.
    pub fn outcome_columns(&self) -> (Option<i64>, Option<&str>) {
        match &self.outcome {
            AttemptOutcome::Status { status } => (Some(i64::from(*status)), None),
            AttemptOutcome::Error { error } => (None, Some(error.as_str())),
        }
    }

    /// An attempt read back from a store's signed columns, for the store named `store` (in the
    /// error). Errors: not exactly one of `status` and `error`, a status outside `u16`, or a
    /// negative seq or duration → [`StoreError::Backend`] (corrupt data, never wrapped around).
    pub fn from_stored(
        store: &str,
        at: DateTime<Utc>,
        seq: i64,
        status: Option<i64>,
        error: Option<String>,
        duration_ms: i64,
    ) -> Result<PushAttempt, StoreError> {
        let corrupt = |what: &str| StoreError::Backend {
            what: format!("{store} (push attempts): {what}"),
            source: None,
        };
        let outcome = match (status, error) {
            (Some(status), None) => AttemptOutcome::Status {
                status: u16::try_from(status).map_err(|_| corrupt("a status out of range"))?,
            },
            (None, Some(error)) => AttemptOutcome::Error { error },
            _ => return Err(corrupt("not exactly one of status and error")),
        };
        Ok(PushAttempt {
            at,
            seq: Seq(u64::try_from(seq).map_err(|_| corrupt("a negative seq"))?),
            outcome,
            duration_ms: u64::try_from(duration_ms).map_err(|_| corrupt("a negative duration"))?,
        })
    }
}

/// How many attempts a registration's log keeps by default (`push.attempts_kept`).
pub const DEFAULT_ATTEMPTS_KEPT: usize = 20;

/// A 32-byte data key that seals one value. Zeroized on drop; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct DataKey(pub [u8; 32]);

impl DataKey {
    /// Length of every data key, in bytes.
    pub const LEN: usize = 32;

    /// The key bytes. Use only to seal or open.
    pub fn expose(&self) -> &[u8; 32] {
        &self.0
    }
}

impl Drop for DataKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DataKey([redacted])")
    }
}

/// A data key wrapped (encrypted) under a scope's key by a key ring; safe to store beside the
/// value it seals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrappedKey {
    /// The key ring scope, e.g. `<tenant>/push`.
    pub scope: String,
    /// The key ring's identifier of the wrapping key (a version or a key name).
    pub key_id: String,
    /// The wrapped data key (ciphertext).
    pub ciphertext: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(name: &str, url: &str) -> Destination {
        Destination {
            name: name.into(),
            url: url.into(),
            authentication: Some(PushAuthentication {
                scheme: "Bearer".into(),
                credentials: Secret::new("tok-123"),
            }),
            signing_keys: vec![Secret::new("whsec_abc")],
        }
    }

    #[test]
    fn push_store_columns_round_trip_and_refuse_what_does_not_fit() {
        assert_eq!(PushRegistration::storable_cursor(Seq(7)).unwrap(), 7);
        assert!(matches!(
            PushRegistration::storable_cursor(Seq(i64::MAX as u64 + 1)),
            Err(StoreError::Invalid { .. })
        ));
        assert_eq!(
            PushRegistration::stored_counters("s", 3, 2).unwrap(),
            (Seq(3), 2)
        );
        for (seq, attempts) in [(-1, 0), (0, -1), (0, i64::from(u32::MAX) + 1)] {
            assert!(matches!(
                PushRegistration::stored_counters("s", seq, attempts),
                Err(StoreError::Backend { .. })
            ));
        }
        let run = RunId::new();
        let config = PushConfig::from_stored(
            "operator:a".into(),
            run,
            "https://x".into(),
            Some("Bearer".into()),
            Some("t".into()),
        );
        assert_eq!(config.authentication_columns(), (Some("Bearer"), Some("t")));
        let bare =
            PushConfig::from_stored("id".into(), run, "u".into(), Some("Bearer".into()), None);
        assert_eq!(bare.authentication, None);
        assert_eq!(bare.authentication_columns(), (None, None));
    }

    #[test]
    fn validate_rules() {
        assert!(
            dest("ops", "https://hooks.example.com/x")
                .validate()
                .is_ok()
        );
        for (n, u) in [
            (" ", "https://a.example/x"),
            ("ops", "not a url"),
            ("ops", "ftp://a.example/x"),
            ("ops", "/relative"),
            ("o\u{7}ps", "https://a.example/x"),
        ] {
            assert!(
                matches!(dest(n, u).validate(), Err(BusError::Invalid { .. })),
                "{n:?} {u:?}"
            );
        }
        let mut d = dest("ops", "https://a.example/x");
        d.signing_keys.push(Secret::new(""));
        assert!(d.validate().is_err());
        let mut d = dest("ops", "https://a.example/x");
        d.authentication.as_mut().unwrap().scheme = "Bea rer".into();
        assert!(d.validate().is_err());
    }

    #[test]
    fn userinfo_in_the_url_is_refused_pointing_at_authentication_without_echoing_it() {
        for url in [
            "https://user:pa55word@hooks.example.com/x",
            "https://user@hooks.example.com/x",
            "https://:pa55word@hooks.example.com/x",
        ] {
            match dest("ops", url).validate() {
                Err(BusError::Invalid { reason }) => {
                    assert!(reason.contains("`authentication`"), "{reason}");
                    assert!(!reason.contains("pa55word") && !reason.contains("user@"));
                }
                other => panic!("{url}: expected Invalid, got {other:?}"),
            }
        }
        // A query string is not userinfo: allowed (stored as configured, printed without it).
        assert!(
            dest("ops", "https://hooks.example.com/x?token=q1")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn debug_hides_secrets_userinfo_and_query() {
        let d = dest("ops", "https://user:pw@hooks.example.com/x?token=q1#frag");
        let text = format!("{d:?}");
        for leak in ["tok-123", "whsec_abc", "pw@", "user", "q1", "frag"] {
            assert!(!text.contains(leak), "{text} leaks {leak}");
        }
        assert!(text.contains("hooks.example.com/x"));
        assert_eq!(redact_url("::"), "<unparsable url>");
        let k = DataKey([7; 32]);
        assert!(!format!("{k:?}").contains('7'));
    }

    #[test]
    fn registration_id_is_trimmed_name() {
        assert_eq!(
            dest(" ops ", "https://a.example").registration_id(),
            "operator:ops"
        );
    }
}
